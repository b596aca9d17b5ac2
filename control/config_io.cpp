// The configuration in and out: export (lnetctl's format), import (an
// lnetctl-style document applied at run time) and save (what is in force
// written back to lnetr-control's file, atomically).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "control/controller.hpp"
#include "control/service.hpp"
#include "control/service_internal.hpp"
#include "router/yaml_tree.hpp"

namespace lnetr::control {

// An NI as lnetctl's YAML gives it: its NID or interface, and its tunables.
Json ni_json(const config::NiConfig& ni) {
  Json j = Json::object();
  if (ni.nid) j["nid"] = to_string(ni.nid->value);
  if (ni.interface) j["interfaces"] = {{"0", ni.interface->value}};
  j["tunables"] = {{"peer_timeout", ni.tunables.peer_timeout.value},
                   {"peer_credits", ni.tunables.peer_credits.value},
                   {"peer_buffer_credits", ni.tunables.peer_buffer_credits.value},
                   {"credits", ni.tunables.credits.value}};
  // The lnd tunables its file (or net set) gave.
  Json lnd = Json::object();
  const config::LndTunables& l = ni.lnd_tunables;
  for (const auto& [key, f] : {std::pair{"conns_per_peer", &l.conns_per_peer}, {"timeout", &l.timeout}, {"tos", &l.tos}})
    if (f->given()) lnd[key] = f->value;
  if (!lnd.empty()) j["lnd tunables"] = lnd;
  if (!ni.cpts.value.empty()) j["CPT"] = cpt_list(ni.cpts.value);
  return j;
}

bool is_ni(const config::NiConfig& ni, Net net, const status::Ni& s) {
  if (ni.nid) return s.nid == to_string(ni.nid->value);
  const auto nid = parse_nid(s.nid);
  return ni.interface && s.interface == ni.interface->value && nid && nid->net() == net;
}

// As `lnetctl export`: the running configuration with its state (NI
// status and statistics, route state and type, per-CPT buffer pools);
// `backup` keeps only what recreates the configuration.
Json Service::export_config(const Json& args) {
  only(args, {"backup"});
  if (opt_int(args, "backup", 0, 1).value_or(0) == 0) {
    // Only lnetctl's keys: what lnetr adds (NI link and advertised
    // status, route reason, the dataplane's check intervals) is not part
    // of the format.
    Json out = net_show({{"verbose", 1}});
    for (Json& n : out["net"])
      for (Json& ni : n["local NI(s)"]) {
        ni.erase("link");
        ni.erase("advertised");
      }
    out["route"] = route_show({{"verbose", 1}})["route"];
    for (Json& r : out["route"]) r.erase("reason");
    const Json routing = routing_show({});
    out["routing"] = routing["routing"];
    out["buffers"] = routing["buffers"];
    out["global"] = global_show({})["global"];
    out["global"].erase("alive_router_check_interval");
    out["global"].erase("router_ping_timeout");
    return out;
  }
  // Every key lnetctl's backup writes, with the value in force (an NI's
  // lnd tunables and CPTs as the dataplane reports them, the global keys as
  // `global show` gives them), so that importing it back changes nothing
  // and says nothing.  Not written: `peer` (lnetr has no configured peers:
  // it learns them) and the o2ib fmr_* keys (not in force: they import as
  // their defaults).
  const auto st = dataplane<status::Status>("status");
  const int enable = st.routing.enable;
  Json global = global_show({})["global"];
  global.erase("alive_router_check_interval");
  global.erase("router_ping_timeout");
  std::lock_guard lock(mu_);
  Json nets = Json::array();
  for (const config::NetConfig& n : cfg_.nets) {
    Json nis = Json::array();
    for (const config::NiConfig& ni : n.nis) {
      Json j = ni_json(ni);
      for (const status::Ni& s : st.nis) {
        if (!is_ni(ni, n.net.value, s)) continue;
        j["lnd tunables"] = s.lnd_tunables;
        j["CPT"] = cpt_list(s.cpts);
        break;
      }
      nis.push_back(j);
    }
    nets.push_back({{"net type", to_string(n.net.value)}, {"local NI(s)", nis}});
  }
  Json routes = Json::array();
  if (builder_)
    for (const Route& r : builder_->routes()) {
      Json j = {{"net", to_string(r.net)}, {"gateway", to_string(r.gateway)}, {"hop", display_hop(r)},
                {"priority", r.priority}};
      // (Only a route's own: one without keeps following the global one.)
      if (r.health_sensitivity != kSensitivityGlobal) j["health_sensitivity"] = r.health_sensitivity;
      routes.push_back(std::move(j));
    }
  const config::BufferConfig& b = cfg_.buffers;
  return {{"net", nets},
          {"route", routes},
          {"routing", {{"enable", enable == 1 || enable == 3 ? 1 : 0}}},
          {"buffers", {{"tiny", b.tiny.value}, {"small", b.small.value}, {"large", b.large.value}}},
          {"global", global}};
}

namespace {

// A scalar as YAML reads it back: numbers plain, strings double-quoted
// (JSON's escapes are YAML's).
std::string yaml_scalar(const Json& v) {
  if (v.is_string()) return v.dump();
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  return v.dump();
}

// The line `save` writes above what it saved (and drops when it saves again).
constexpr std::string_view kSavedNote = "# Routes, routing and global tunables in force, saved ";

// `key:` and a mapping of scalars, or a sequence of such mappings, in block
// style with lnetctl's indentation.
std::string yaml_section(const std::string& key, const Json& v) {
  std::string out = key + ":";
  if (v.is_array()) {
    if (v.empty()) return out + " []\n";
    out += "\n";
    for (const Json& item : v) {
      bool first = true;
      for (const auto& [k, x] : item.items()) {
        out += (first ? "    - " : "      ") + k + ": " + yaml_scalar(x) + "\n";
        first = false;
      }
    }
    return out;
  }
  out += "\n";
  for (const auto& [k, x] : v.items()) out += "    " + k + ": " + yaml_scalar(x) + "\n";
  return out;
}

// The `net` section of `nets`, in block style as lnetctl writes it: each
// NI's NID or interface, its tunables, the lnd tunables its file (or net
// add) gave, and its CPT list.
std::string nets_yaml(const std::vector<config::NetConfig>& nets) {
  std::string out = "net:\n";
  for (const config::NetConfig& n : nets) {
    out += "    - net type: " + to_string(n.net.value) + "\n      local NI(s):\n";
    for (const config::NiConfig& ni : n.nis) {
      std::string item;
      if (ni.nid) item += "          nid: " + to_string(ni.nid->value) + "\n";
      if (ni.interface) item += "          interfaces:\n              0: " + Json(ni.interface->value).dump() + "\n";
      const config::Tunables& t = ni.tunables;
      item += "          tunables:\n";
      item += "              peer_timeout: " + std::to_string(t.peer_timeout.value) + "\n";
      item += "              peer_credits: " + std::to_string(t.peer_credits.value) + "\n";
      item += "              peer_buffer_credits: " + std::to_string(t.peer_buffer_credits.value) + "\n";
      item += "              credits: " + std::to_string(t.credits.value) + "\n";
      const config::LndTunables& l = ni.lnd_tunables;
      std::string lnd;
      const std::pair<const char*, const config::Field<std::int32_t>*> keys[] = {
          {"conns_per_peer", &l.conns_per_peer}, {"timeout", &l.timeout},     {"tos", &l.tos},
          {"peercredits_hiw", &l.peercredits_hiw}, {"concurrent_sends", &l.concurrent_sends}, {"ntx", &l.ntx}};
      for (const auto& [key, field] : keys)
        if (field->given()) lnd += "              " + std::string(key) + ": " + std::to_string(field->value) + "\n";
      if (!lnd.empty()) item += "          lnd tunables:\n" + lnd;
      if (!ni.cpts.value.empty()) item += "          CPT: \"" + cpt_list(ni.cpts.value) + "\"\n";
      item.replace(0, 10, "        - ");
      out += item;
    }
  }
  return out;
}

}  // namespace

// Writes what is in force to the file lnetr-control was started with, so
// that a restart or reboot keeps it: the file's text stays as it is
// (comments, the nets, buffers, the dataplane and control sections), but
// its route, routing, buffers and global sections are written anew from
// the running router.  The result must load, and replaces the file whole
// (written beside it, then renamed).
Json Service::save(const Json& args) {
  only(args, {});
  if (config_path_.empty()) throw ApiError{ENOENT, "lnetr-control was not started from a configuration file"};
  std::ifstream in(config_path_);
  if (!in) throw ApiError{errno ? errno : EIO, "cannot read " + config_path_ + ": " + std::strerror(errno)};
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const yaml::Tree tree = yaml::parse(text, "a configuration");
  if (tree.error || !tree.root || tree.root->kind != yaml::Node::Kind::mapping)
    throw ApiError{EINVAL, config_path_ + " is not a YAML mapping: not saved"};
  // The file's nets as written, unless NIs were added or deleted since.
  std::string nets;
  bool nets_changed = false;
  {
    std::lock_guard lock(mu_);
    nets_changed = nets_changed_;
    if (nets_changed) nets = nets_yaml(cfg_.nets);
  }
  // Each top-level key's lines: from its line to the next key's.
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = text.find('\n', at);
    lines.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl + 1 - at));
    at = nl == std::string::npos ? text.size() : nl + 1;
  }
  std::vector<bool> drop(lines.size(), false);
  const auto& entries = tree.root->entries;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i + 1 < entries.size() && entries[i + 1].key_mark.line == entries[i].key_mark.line)
      throw ApiError{EINVAL, config_path_ + " is written in flow style: not saved (write it in block style)"};
    const std::string& k = entries[i].key;
    if (k != "route" && k != "routing" && k != "buffers" && k != "global" && !(k == "net" && nets_changed)) continue;
    const std::size_t from = entries[i].key_mark.line - 1;
    std::size_t to = i + 1 < entries.size() ? entries[i + 1].key_mark.line - 1 : lines.size();
    // Comments and blank lines just above the next key belong to it.
    auto comment_or_blank = [](const std::string& line) {
      const std::size_t at = line.find_first_not_of(" \t\r\n");
      return at == std::string::npos || line[at] == '#';
    };
    if (i + 1 < entries.size())
      while (to > from + 1 && to <= lines.size() && comment_or_blank(lines[to - 1]) &&
             !lines[to - 1].starts_with(kSavedNote))
        --to;
    for (std::size_t l = from; l < to && l < lines.size(); ++l) drop[l] = true;
  }
  std::string out;
  for (std::size_t l = 0; l < lines.size(); ++l)
    if (!drop[l] && lines[l] != "...\n" && lines[l] != "..." && !lines[l].starts_with(kSavedNote)) out += lines[l];
  if (!out.empty() && out.back() != '\n') out += '\n';

  // Routes and forwarding as `export --backup` gives them (forwarding off
  // also while stopping); the global tunables as `export` shows them.
  const Json backup = export_config({{"backup", 1}});
  const Json running = export_config(Json::object());
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  out += std::string(kSavedNote) + when + " (lnetrctl save).\n";
  out += yaml_section("route", backup["route"]);
  out += yaml_section("routing", backup["routing"]);
  out += yaml_section("buffers", backup["buffers"]);
  out += yaml_section("global", running["global"]);
  out += nets;

  const auto loaded = config::load_config(out, config_path_);
  if (!loaded) {
    std::string why;
    for (const auto& e : loaded.error()) why += (why.empty() ? "" : "; ") + e.to_string();
    throw ApiError{EINVAL, "the configuration in force does not load back, not saved: " + why};
  }
  // One save at a time (each API client has its own thread); written
  // whole and synced beside the file, with its mode and group, then
  // renamed over it and the directory synced: a power cut leaves the old
  // file or the new one.
  std::lock_guard saving(save_mu_);
  std::string tmp = config_path_ + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw ApiError{errno, "cannot write beside " + config_path_ + ": " + std::strerror(errno)};
  struct stat st {};
  bool ok = ::stat(config_path_.c_str(), &st) == 0;
  ok = ok && ::fchmod(fd, st.st_mode & 07777) == 0;
  // The file's group too, where we may give it (else it keeps ours).
  if (ok) static_cast<void>(::fchown(fd, static_cast<uid_t>(-1), st.st_gid));
  std::size_t done = 0;
  while (ok && done < out.size()) {
    const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), config_path_.c_str()) != 0) {
    const int why = ok ? errno : (e ? e : EIO);
    ::unlink(tmp.c_str());
    throw ApiError{why, "cannot replace " + config_path_ + ": " + std::strerror(why)};
  }
  const std::string dir = std::filesystem::path(config_path_).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  log("info", "configuration in force saved to " + config_path_);
  return {{"saved", config_path_}};
}

// An lnetctl-style YAML document (e.g. what `lnetctl export` wrote): its
// routes are added (or, with del, deleted), its routing state and router
// buffer pools applied; what cannot change at run time (nets) must match
// or is reported.  Nothing changes if the document does not load.
Json Service::import_config(const Json& args) {
  only(args, {"text", "name", "del"});
  const std::string text = required(opt_text(args, "text"), "text");
  const std::string name = opt_text(args, "name").value_or("import");
  const bool del = opt_int(args, "del", 0, 1).value_or(0) == 1;
  config::LoadOptions opts;
  opts.fragment = true;
  auto loaded = config::load_config(text, name, opts);
  if (!loaded) {
    std::string all;
    for (const auto& e : loaded.error()) all += (all.empty() ? "" : "; ") + e.to_string();
    throw ApiError{EINVAL, all};
  }
  const config::Config& in = loaded->config;
  Json warnings = Json::array();
  for (const auto& w : loaded->warnings) warnings.push_back(w.to_string());
  Json done = Json::array(), errors = Json::array();
  std::vector<status::Ni> running_nis;
  if (!in.nets.empty()) running_nis = dataplane<status::Status>("status").nis;
  {
    std::lock_guard lock(mu_);
    if (!builder_) throw ApiError{EAGAIN, "not attached to a dataplane yet: no route table to change"};
    for (const config::NetConfig& n : in.nets) {
      const auto running = std::find_if(cfg_.nets.begin(), cfg_.nets.end(),
                                         [&](const auto& c) { return c.net.value == n.net.value; });
      if (running == cfg_.nets.end()) {
        warnings.push_back(config::to_string(n.source) + ": net " + to_string(n.net.value) +
                           " is not one of this router's nets: import adds no NI (lnetrctl net add does)");
        continue;
      }
      // An NI's tunables are read when the dataplane starts: ones here that
      // differ from those in force (as the dataplane reports them, which is
      // what an export of it says) change nothing, and are said to.
      const status::Ni* in_force = nullptr;
      for (const status::Ni& s : running_nis)
        if (auto nid = parse_nid(s.nid); nid && nid->net() == n.net.value) in_force = &s;
      if (!in_force) continue;
      auto differs = [](const auto& field, auto v) {
        return field.given() && static_cast<std::int64_t>(v) != static_cast<std::int64_t>(field.value);
      };
      // (o2iblnd's 0 asks for the value derived from the others, which is
      // what the dataplane reports; socklnd NIs report none.)
      auto derived_differs = [&](const auto& field, const std::optional<std::uint64_t>& v) {
        return field.value != 0 && v && differs(field, *v);
      };
      const status::LndTunables& lnd = in_force->lnd_tunables;
      for (const config::NiConfig& ni : n.nis) {
        const config::Tunables& a = ni.tunables;
        const config::LndTunables& l = ni.lnd_tunables;
        if (differs(a.peer_timeout, in_force->peer_timeout) || differs(a.peer_credits, in_force->peer_credits) ||
            differs(a.peer_buffer_credits, in_force->peer_buffer_credits) || differs(a.credits, in_force->credits) ||
            differs(l.conns_per_peer, lnd.conns_per_peer) || differs(l.timeout, lnd.timeout) || differs(l.tos, lnd.tos) ||
            derived_differs(l.peercredits_hiw, lnd.peercredits_hiw) ||
            derived_differs(l.concurrent_sends, lnd.concurrent_sends) || derived_differs(l.ntx, lnd.ntx))
          warnings.push_back(config::to_string(ni.source) + ": net " + to_string(n.net.value) +
                             ": its NI's tunables are not changed by an import (lnetrctl net set changes "
                             "conns_per_peer and the LND timeout; the rest are read when the dataplane starts: edit "
                             "its configuration file)");
        if (ni.cpts.given() && !in.dataplane.cores.given() &&
            cpt_list(config::cpt_list(ni)) != cpt_list(in_force->cpts))
          warnings.push_back(config::to_string(ni.cpts.source) +
                             ": CPT list is not in force: an NI's CPTs are set when the dataplane starts (edit its "
                             "configuration file)");
      }
    }
    bool changed = false;
    const RouteTableBuilder before = *builder_;  // an import that cannot be applied changes nothing
    for (const config::RouteConfig& r : in.routes) {
      const std::string what = to_string(r.net.value) + " via " + to_string(r.gateway.value);
      if (del) {
        if (builder_->remove(r.net.value, r.gateway.value) > 0) {
          done.push_back("route " + what + " deleted");
          changed = true;
        } else {
          errors.push_back({{"route", what}, {"errno", -ENOENT}, {"descr", "no such route"}});
        }
        continue;
      }
      const std::uint32_t hops =
          r.hop.value == config::kHopUndefined ? kHopsUndefined : static_cast<std::uint32_t>(r.hop.value);
      auto added = builder_->add({r.net.value, r.gateway.value, hops, r.priority.value, route_sensitivity(r)});
      if (added) {
        done.push_back("route " + what + " added");
        changed = true;
      } else {
        errors.push_back({{"route", what}, {"errno", -errno_of(added.error())}, {"descr", std::string(describe(added.error()))}});
      }
    }
    if (changed) {
      try {
        routes_changed();
      } catch (const ApiError& e) {
        *builder_ = before;
        log("error", "import of " + name + " not applied: " + e.descr);
        throw;
      }
      // A count, not the list: an import may carry thousands of routes.
      log("info", "import of " + name + ": " + std::to_string(done.size()) + " route(s) " +
                      (del ? "deleted" : "added") + ", " + std::to_string(errors.size()) + " refused");
    }
  }
  if (in.routing.enable.given() && !del) {
    const auto r = dataplane<status::RoutingSet>(in.routing.enable.value ? "routing 1" : "routing 0");
    done.push_back("routing " + r.routing);
  }
  // Router buffer pools that differ from those in force: resized at run
  // time, as lnetctl's import does.
  for (std::size_t c = 0; c < kPoolClasses && !del; ++c) {
    const config::Field<std::uint32_t>& want = in.buffers.pool(c);
    if (!want.given()) continue;
    {
      std::lock_guard lock(mu_);
      if (want.value == cfg_.buffers.pool(c).value) continue;
    }
    const std::string key = std::string(kPoolNames[c]) + "_buffers";
    try {
      if (const auto w = set_buffers(c, want.value)) warnings.push_back(config::to_string(want.source) + ": " + *w);
      done.push_back(key + " " + std::to_string(want.value));
    } catch (const ApiError& e) {
      errors.push_back({{"buffers", key}, {"errno", -e.err}, {"descr", e.descr}});
    }
  }
  if (in.global.health_sensitivity.given() && !del) {
    std::lock_guard lock(mu_);
    params_.sensitivity = in.global.health_sensitivity.value;
    if (ctl_) ctl_->health().set_params(params_);
    done.push_back("health_sensitivity " + std::to_string(params_.sensitivity));
  }
  if (in.global.transaction_timeout.given() && in.global.transaction_timeout.value != cfg_.global.transaction_timeout.value)
    warnings.push_back(config::to_string(in.global.transaction_timeout.source) + ": transaction_timeout " +
                       std::to_string(in.global.transaction_timeout.value) +
                       " is not applied at run time: the dataplane reads it when it starts; edit its configuration "
                       "file and restart it");
  if (in.global.discovery.given() && in.global.discovery.value != cfg_.global.discovery.value)
    warnings.push_back(config::to_string(in.global.discovery.source) + ": discovery " +
                       (in.global.discovery.value ? "1" : "0") +
                       " is not applied at run time: the dataplane's ping answers say what its configuration "
                       "file says; edit it and restart the dataplane");
  if (in.global.drop_asym_route.given() && !del) {
    const bool on = in.global.drop_asym_route.value;
    std::lock_guard asym_lock(asym_mu_);  // sent and recorded as one
    dataplane<status::DropAsymRoute>(on ? "drop_asym_route 1" : "drop_asym_route 0");
    {
      std::lock_guard lock(mu_);
      cfg_.global.drop_asym_route.value = on;
      runtime_asym_ = on;
    }
    done.push_back(std::string("drop_asym_route ") + (on ? "1" : "0"));
  }
  return {{"import", {{"done", done}, {"errors", errors}, {"warnings", warnings}}}};
}

}  // namespace lnetr::control
