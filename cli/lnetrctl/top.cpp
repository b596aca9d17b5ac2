#include "cli/lnetrctl/top.hpp"

#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <thread>
#include <vector>

#include "router/nid.hpp"

namespace lnetr::lnetrctl {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Fields read defensively: an answer of another shape shows zeros, never
// ends top.
std::uint64_t u64(const Json& j, const char* k) {
  if (!j.is_object() || !j.contains(k) || !j[k].is_number_integer()) return 0;
  return j[k].is_number_unsigned() || j[k].get<long long>() >= 0 ? j[k].get<std::uint64_t>() : 0;
}
long long i64(const Json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_number_integer() ? j[k].get<long long>() : 0;
}
std::string text(const Json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "?";
}
Json object(const Json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_object() ? j[k] : Json::object();
}
Json array(const Json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_array() ? j[k] : Json::array();
}

// Counter b - a per second (0 if the counter went back: a restart or reset).
double rate(std::uint64_t a, std::uint64_t b, double dt) {
  return b >= a && dt > 0 ? static_cast<double>(b - a) / dt : 0.0;
}

std::string fmt(const char* f, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

struct PeerRow {
  std::string nid, net, state;
  double send = 0, recv = 0, drop = 0;
  long long tx = 0, rtr = 0;
};

std::map<std::string, Json> by_nid(const Json& peers) {
  std::map<std::string, Json> m;
  for (const Json& p : array(peers, "peer")) {
    const Json nis = array(p, "peer ni");
    if (!nis.empty() && nis[0].is_object()) m[text(nis[0], "nid")] = nis[0];
  }
  return m;
}

TopSample sample(Context& ctx) {
  TopSample s;
  s.stats = object(ctx.client.call("stats show"), "statistics");
  s.peers = ctx.client.call("peer show", {{"verbose", 1}});
  s.dataplane = object(ctx.client.call("dataplane show"), "dataplane");
  s.t = now_s();
  return s;
}

}  // namespace

std::string top_frame(const TopSample& a, const TopSample& b, const TopOptions& o, const std::string& title) {
  const double dt = b.t - a.t;
  std::string f = title + "\n";
  f += fmt("forwarded %10.0f msg/s %9.2f MiB/s   dropped %8.0f msg/s   re-routed %6.0f/s\n",
           rate(u64(a.stats, "route_count"), u64(b.stats, "route_count"), dt),
           rate(u64(a.stats, "route_length"), u64(b.stats, "route_length"), dt) / (1024.0 * 1024.0),
           rate(u64(a.stats, "drop_count"), u64(b.stats, "drop_count"), dt),
           rate(u64(a.stats, "reroute_count"), u64(b.stats, "reroute_count"), dt));
  // Workers: busy share of their cycles over the interval.
  const Json aw = array(a.dataplane, "workers"), bw = array(b.dataplane, "workers");
  f += "workers  ";
  for (std::size_t i = 0; i < bw.size(); ++i) {
    const Json& w = bw[i];
    double busy = 0;
    if (i < aw.size()) {
      const double all = rate(u64(aw[i], "cycles"), u64(w, "cycles"), 1),
                   hits = rate(u64(aw[i], "busy_cycles"), u64(w, "busy_cycles"), 1);
      busy = all > 0 ? 100.0 * hits / all : 0;
    }
    f += fmt(" cpt %llu (core %llu) %3.0f%% busy", static_cast<unsigned long long>(u64(w, "cpt")),
             static_cast<unsigned long long>(u64(w, "core")), busy);
  }
  f += "\n\n";
  // Peers, then their nets.
  const auto pa = by_nid(a.peers), pb = by_nid(b.peers);
  std::vector<PeerRow> rows;
  std::map<std::string, PeerRow> nets;
  for (const auto& [nid, ni] : pb) {
    PeerRow r;
    r.nid = nid;
    const auto parsed = parse_nid(nid);
    r.net = parsed ? to_string(parsed->net()) : "?";
    r.state = text(ni, "state");
    const Json s1 = object(ni, "statistics");
    const auto it = pa.find(nid);
    const Json s0 = it == pa.end() ? Json::object() : object(it->second, "statistics");
    r.send = rate(u64(s0, "send_count"), u64(s1, "send_count"), dt);
    r.recv = rate(u64(s0, "recv_count"), u64(s1, "recv_count"), dt);
    r.drop = rate(u64(s0, "drop_count"), u64(s1, "drop_count"), dt);
    r.tx = i64(ni, "available_tx_credits");
    r.rtr = i64(ni, "available_rtr_credits");
    PeerRow& n = nets[r.net];
    n.net = r.net;
    n.send += r.send;
    n.recv += r.recv;
    n.drop += r.drop;
    ++n.tx;  // peers on the net
    rows.push_back(r);
  }
  f += fmt("%-12s %12s %12s %10s %6s\n", "NET", "SEND/s", "RECV/s", "DROP/s", "PEERS");
  for (const auto& [net, n] : nets)
    f += fmt("%-12s %12.0f %12.0f %10.0f %6lld\n", net.c_str(), n.send, n.recv, n.drop, n.tx);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const PeerRow& x, const PeerRow& y) { return x.send + x.recv > y.send + y.recv; });
  f += fmt("\n%-28s %12s %12s %10s %7s %7s %s\n", "PEER", "SEND/s", "RECV/s", "DROP/s", "TX_CR", "RTR_CR", "STATE");
  for (std::size_t i = 0; i < rows.size() && i < o.peers; ++i) {
    const PeerRow& r = rows[i];
    f += fmt("%-28s %12.0f %12.0f %10.0f %7lld %7lld %s\n", r.nid.c_str(), r.send, r.recv, r.drop, r.tx, r.rtr,
             r.state.c_str());
  }
  if (rows.size() > o.peers) f += fmt("(%zu more peers)\n", rows.size() - o.peers);
  return f;
}

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted.store(true); }

// While top runs on a terminal: keys arrive one by one, unechoed (q
// quits), and Ctrl-C ends top rather than the shell.
class Keyboard {
 public:
  Keyboard() {
    g_interrupted.store(false);
    old_int_ = std::signal(SIGINT, on_interrupt);
    raw_ = ::isatty(STDIN_FILENO) && ::tcgetattr(STDIN_FILENO, &saved_) == 0;
    if (raw_) {
      termios t = saved_;
      t.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      t.c_cc[VMIN] = 0;
      t.c_cc[VTIME] = 0;
      ::tcsetattr(STDIN_FILENO, TCSANOW, &t);
    }
  }
  ~Keyboard() {
    if (raw_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    std::signal(SIGINT, old_int_);
  }
  Keyboard(const Keyboard&) = delete;
  Keyboard& operator=(const Keyboard&) = delete;
  bool quit() {
    if (g_interrupted.load()) return true;
    if (!raw_) return false;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    char c = 0;
    return ::poll(&p, 1, 0) > 0 && ::read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q');
  }

 private:
  termios saved_{};
  bool raw_ = false;
  void (*old_int_)(int) = SIG_DFL;
};

}  // namespace

int run_top(Context& ctx, const TopOptions& o) {
  Keyboard keys;
  bool quit = false;
  auto stopped = [&] { return quit || (quit = keys.quit()); };
  // Sleep in small steps so that a quit is seen at once.
  auto wait = [&](double s) {
    const double end = now_s() + s;
    while (!stopped() && now_s() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  try {
    TopSample prev = sample(ctx);
    for (int frame = 0; (o.count == 0 || frame < o.count) && !stopped(); ++frame) {
      wait(o.interval);
      if (stopped()) break;
      TopSample cur = sample(ctx);
      const std::string title = fmt("lnetrctl top: %s, every %.1f s%s", ctx.client.path().c_str(), o.interval,
                                    ctx.tty ? " (q quits)" : "");
      if (ctx.tty) ctx.out << "\x1b[H\x1b[2J";
      ctx.out << top_frame(prev, cur, o, title) << (ctx.tty ? "" : "\n");
      ctx.out.flush();
      prev = std::move(cur);
    }
  } catch (const CallError& e) {
    print_error(ctx.err, "manage", "top", e.err, e.descr);
    return kExitFailed;
  } catch (const std::exception& e) {  // the terminal is restored on the way out
    print_error(ctx.err, "manage", "top", EPROTO, std::string("unexpected answer from lnetr-control: ") + e.what());
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace lnetr::lnetrctl
