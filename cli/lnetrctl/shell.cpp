#include "cli/lnetrctl/shell.hpp"

#include <editline/readline.h>
#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "cli/lnetrctl/yaml_out.hpp"

namespace lnetr::lnetrctl {

namespace {

const std::vector<std::string> kShellWords = {"help", "exit", "quit"};

const VerbSpec* find_verb(const std::string& object, const std::string& action) {
  for (const VerbSpec& v : verbs())
    if (v.object == object && (v.action.empty() || v.action == action)) return &v;
  return nullptr;
}

bool takes_value(const OptionSpec& o) { return o.kind != ValueKind::none && o.kind != ValueKind::level; }

// ---- libedit glue (its readline API takes plain functions) ------------------------

Context* g_ctx = nullptr;
std::vector<std::string> g_candidates;
std::vector<std::string> g_nids, g_nets;
std::chrono::steady_clock::time_point g_known_at{};

// What lnetr-control knows, refreshed at most every 2 s (errors: none).
void refresh_known() {
  const auto now = std::chrono::steady_clock::now();
  if (now - g_known_at < std::chrono::seconds(2)) return;
  g_known_at = now;
  std::set<std::string> nids, nets;
  const Client quick(g_ctx->client.path(), 2);  // a Tab never waits long
  auto collect = [&](const char* command, auto each) {
    try {
      each(quick.call(command));
    } catch (const CallError&) {
      // not reachable now: complete without its NIDs
    } catch (const std::exception&) {
      // an answer of another shape: likewise
    }
  };
  collect("net show", [&](const Json& d) {
    for (const Json& n : d.value("net", Json::array())) {
      nets.insert(n.value("net type", std::string()));
      for (const Json& ni : n.value("local NI(s)", Json::array())) nids.insert(ni.value("nid", std::string()));
    }
  });
  collect("route show", [&](const Json& d) {
    for (const Json& r : d.value("route", Json::array())) {
      nets.insert(r.value("net", std::string()));
      nids.insert(r.value("gateway", std::string()));
    }
  });
  collect("peer show", [&](const Json& d) {
    for (const Json& p : d.value("peer", Json::array())) nids.insert(p.value("primary nid", std::string()));
  });
  nids.erase("");
  nets.erase("");
  g_nids.assign(nids.begin(), nids.end());
  g_nets.assign(nets.begin(), nets.end());
}

char* next_candidate(const char*, int state) {
  static std::size_t i;
  if (state == 0) i = 0;
  return i < g_candidates.size() ? ::strdup(g_candidates[i++].c_str()) : nullptr;
}

char** complete(const char* text, int, int) {
  rl_attempted_completion_over = 1;  // never fall back to file names
  refresh_known();
  const std::string before(rl_line_buffer, static_cast<std::size_t>(rl_point));
  g_candidates = completions(before, g_nids, g_nets);
  return rl_completion_matches(text, next_candidate);
}

std::string history_file() {
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.lnetrctl_history" : std::string();
}

}  // namespace

Split split_line(const std::string& line) {
  Split s;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == quote) quote = 0;
      else cur += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < line.size()) {
      cur += line[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      if (in_word) s.words.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (quote) s.ok = false;
  if (in_word) s.words.push_back(cur);
  return s;
}

std::vector<std::string> completions(const std::string& before, const std::vector<std::string>& nids,
                                     const std::vector<std::string>& nets) {
  Split s = split_line(before);
  // The word being completed: empty when the line ends in a space.
  std::string word;
  if (!before.empty() && before.back() != ' ' && !s.words.empty()) {
    word = s.words.back();
    s.words.pop_back();
  }
  const std::vector<std::string>& done = s.words;
  std::set<std::string> out;
  auto offer = [&](const std::string& c) {
    if (c.compare(0, word.size(), word) == 0) out.insert(c);
  };
  if (done.empty()) {
    for (const VerbSpec& v : verbs()) offer(v.object);
    for (const std::string& w : kShellWords) offer(w);
  } else {
    const bool help = done[0] == "help";
    const std::string object = help ? (done.size() > 1 ? done[1] : "") : done[0];
    const std::size_t at = help ? done.size() - 1 : done.size();  // words after "help"
    bool has_actions = false;
    for (const VerbSpec& v : verbs()) has_actions = has_actions || (v.object == object && !v.action.empty());
    if (help && at == 0) {
      for (const VerbSpec& v : verbs()) offer(v.object);
    } else if (at == 1 && has_actions) {
      for (const VerbSpec& v : verbs())
        if (v.object == object) offer(v.action);
    } else if (!help) {
      const VerbSpec* v = find_verb(object, has_actions && done.size() > 1 ? done[1] : "");
      if (v) {
        // The value of the option just before, if it takes one.
        const OptionSpec* pending = nullptr;
        for (const OptionSpec& o : v->options)
          for (const std::string& name : option_names(o))
            if (name == done.back() && takes_value(o)) pending = &o;
        if (pending) {
          if (pending->kind == ValueKind::nid || pending->kind == ValueKind::nid_range)
            for (const std::string& n : nids) offer(n);
          if (pending->kind == ValueKind::net)
            for (const std::string& n : nets) offer(n);
        } else {
          for (const OptionSpec& o : v->options) {
            const auto names = option_names(o);
            const bool given = std::any_of(names.begin(), names.end(), [&](const std::string& n) {
              return std::find(done.begin(), done.end(), n) != done.end();
            });
            if (!given) offer(long_option(o));
          }
          if (v->prints && std::find(done.begin(), done.end(), "--json") == done.end()) offer("--json");
          for (const PositionalSpec& p : v->positionals)
            if (p.kind == ValueKind::nid && !word.starts_with("-"))
              for (const std::string& n : nids) offer(n);
        }
      }
    }
  }
  return {out.begin(), out.end()};
}

bool may_use_system_shell() {
  if (::getuid() == 0) return true;
  const struct group* g = ::getgrnam("sudo");
  if (g == nullptr) return false;
  std::vector<gid_t> groups(static_cast<std::size_t>(std::max(::getgroups(0, nullptr), 0)));
  const int n = ::getgroups(static_cast<int>(groups.size()), groups.data());
  for (int i = 0; i < n; ++i)
    if (groups[static_cast<std::size_t>(i)] == g->gr_gid) return true;
  return ::getgid() == g->gr_gid;
}

// Said when the shell opens: whatever keeps the router from forwarding.
void greet(Context& ctx) {
  try {
    const Json sys = ctx.client.call("system show").at("system");
    const Json& dp = sys.at("dataplane");
    if (dp.value("state", "") != "up") {
      ctx.err << "lnetrctl: warning: the dataplane is down: " << dp.value("reason", std::string("?")) << "\n";
      if (dp.contains("last_stop")) ctx.err << "lnetrctl: it " << dp["last_stop"].get<std::string>() << "\n";
    } else if (dp.value("routing", "") != "enabled") {
      ctx.err << "lnetrctl: note: routing is " << dp.value("routing", std::string("?")) << "\n";
    }
  } catch (const CallError& e) {
    ctx.err << "lnetrctl: warning: " << e.descr << "\n";
  } catch (const std::exception&) {
  }
  ctx.err.flush();
}

int run_shell(Context& ctx) {
  g_ctx = &ctx;
  greet(ctx);
  rl_readline_name = "lnetrctl";
  rl_attempted_completion_function = complete;
  rl_basic_word_break_characters = " \t";
  using_history();
  stifle_history(1000);
  const std::string hist = history_file();
  if (!hist.empty()) read_history(hist.c_str());
  int rc = kExitOk;
  for (;;) {
    char* raw = readline("lnetrctl > ");
    if (!raw) {
      ctx.out << "\n";
      break;  // end of input
    }
    const std::string line(raw);
    std::free(raw);
    const Split s = split_line(line);
    if (s.words.empty()) continue;
    add_history(line.c_str());
    if (!s.ok) {
      ctx.err << "lnetrctl: unterminated quote\n";
      continue;
    }
    const std::string& first = s.words[0];
    if (first == "shell") {
      // The way out to a system shell, for privileged users only: the
      // shell is an operator's login shell on the appliance.
      if (!may_use_system_shell()) {
        ctx.err << "lnetrctl: shell: not permitted: a system shell is for root and members of group sudo\n";
        ctx.err.flush();
        continue;
      }
      if (!hist.empty()) write_history(hist.c_str());
      ctx.out.flush();
      ::execl("/bin/bash", "-bash", static_cast<char*>(nullptr));
      ctx.err << "lnetrctl: shell: cannot run /bin/bash: " << std::strerror(errno) << "\n";
      continue;
    }
    if (first == "exit" || first == "quit") {
      rc = kExitOk;
      break;
    }
    if (first == "help") {
      const std::vector<std::string> words(s.words.begin() + 1, s.words.end());
      const std::string text = help_text(words);
      ctx.out << (text.empty() ? "no such command: 'help' lists them\n" : text);
      if (words.empty())
        ctx.out << "help [OBJECT [ACTION]]\n    this help, or one command's\nexit, quit\n    leave the shell\n"
                   "shell\n    a system shell (root and members of group sudo only)\n";
      ctx.out.flush();
      continue;
    }
    rc = run_command(s.words, ctx);
    g_known_at = {};  // the command may have changed what is known
  }
  if (!hist.empty()) write_history(hist.c_str());
  g_ctx = nullptr;
  return rc;
}

}  // namespace lnetr::lnetrctl
