#include "dataplane/control.hpp"

#include <rte_cycles.h>

#include "lnd/o2iblnd/verbs.hpp"

#include <malloc.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <fstream>
#include <sstream>
#include <thread>

#include "dataplane/log.hpp"

namespace lnetr::dp {
namespace {

using namespace std::chrono_literals;

const char* routing_name(RoutingState s) {
  switch (s) {
    case RoutingState::disabled: return "disabled";
    case RoutingState::starting: return "starting";
    case RoutingState::enabled: return "enabled";
    case RoutingState::stopping: return "stopping";
  }
  return "?";
}

// lnetctl's `enable:` value for the state.
int routing_enable_value(RoutingState s) {
  switch (s) {
    case RoutingState::disabled: return 0;
    case RoutingState::enabled: return 1;
    case RoutingState::stopping: return 2;
    case RoutingState::starting: return 3;
  }
  return 0;
}

bool link_is_up(const std::string& interface) {
  if (interface.empty()) return true;
  std::ifstream f("/sys/class/net/" + interface + "/operstate");
  std::string state;
  if (!(f >> state)) return false;
  return state == "up" || state == "unknown";  // veth/lo report "unknown" when usable
}

// A minimal JSON writer: the control socket answers JSON, which is also
// YAML, so both lnetr-control and a human can read it.
class Json {
 public:
  Json& key(const std::string& k) {
    sep();
    quote(k);
    out_ << ':';
    pending_value_ = true;
    return *this;
  }
  Json& value(const std::string& v) { sep(); quote(v); return *this; }
  Json& value(const char* v) { return value(std::string(v)); }
  Json& value(std::uint64_t v) { sep(); out_ << v; return *this; }
  Json& value(std::int64_t v) { sep(); out_ << v; return *this; }
  Json& value(int v) { return value(static_cast<std::int64_t>(v)); }
  Json& value(bool v) { sep(); out_ << (v ? "true" : "false"); return *this; }
  Json& begin_object() { sep(); out_ << '{'; first_ = true; return *this; }
  Json& end_object() { out_ << '}'; first_ = false; return *this; }
  Json& begin_array() { sep(); out_ << '['; first_ = true; return *this; }
  Json& end_array() { out_ << ']'; first_ = false; return *this; }
  std::string str() const { return out_.str() + "\n"; }

 private:
  void sep() {
    if (pending_value_) {
      pending_value_ = false;
      return;
    }
    if (!first_) out_ << ',';
    first_ = false;
  }
  void quote(const std::string& s) {
    out_ << '"';
    for (char c : s) {
      if (c == '"' || c == '\\') out_ << '\\';
      out_ << c;
    }
    out_ << '"';
  }
  std::ostringstream out_;
  bool first_ = true;
  bool pending_value_ = false;
};

void credits(Json& j, const char* prefix, const Credits& c) {
  j.key(std::string("available_") + prefix + "_credits").value(static_cast<std::int64_t>(c.cur));
  j.key(std::string("min_") + prefix + "_credits").value(static_cast<std::int64_t>(c.min));
}

}  // namespace

Control::Control(const Setup& setup, SharedState& shared, Fabric& fabric, const shm::Region& region)
    : setup_(setup),
      shared_(shared),
      fabric_(fabric),
      region_(region),
      watchdog_(
          systemd::watchdog_period(), fabric.n,
          [this](std::size_t i) { return region_.counters(static_cast<std::uint32_t>(i)).loops.get(); },
          [] { systemd::notify_watchdog(); },
          [](std::size_t i) {
            log_error("worker %zu: its loop has not moved for half the watchdog period; the service "
                      "watchdog is no longer fed",
                      i);
          }),
      faults_(std::getenv("LNETR_TEST_FAULTS") != nullptr && std::string(std::getenv("LNETR_TEST_FAULTS")) == "1") {}

Control::~Control() {
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(setup_.control_socket.c_str());
  }
}

bool Control::open(std::string& err) {
  const std::string& path = setup_.control_socket;
  if (path.empty()) return true;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) {
    err = "control socket path too long: " + path;
    return false;
  }
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listen_fd_, 16) != 0) {
    err = "control socket " + path + ": " + std::strerror(errno);
    return false;
  }
  chmod(path.c_str(), 0660);
  return true;
}

namespace {

constexpr std::size_t kMaxClients = 32;
constexpr std::size_t kMaxRequest = shm::kControlRequestMax;

std::string too_long() {
  Json e;
  e.begin_object().key("errno").value(-E2BIG).key("descr").value(
      "request line longer than " + std::to_string(kMaxRequest - 1) + " bytes").end_object();
  return e.str();
}

constexpr auto kTickPeriod = 100ms;
constexpr auto kTrimPeriod = 10s;
constexpr std::size_t kTrimFree = 8u << 20;  // free heap worth a trim
constexpr auto kRequestTime = 2s;  // to send the request line
constexpr auto kAnswerTime = 10s;  // to read the answer

}  // namespace

void Control::run() {
  auto next_tick = std::chrono::steady_clock::now();
  std::vector<pollfd> fds;
  while (!shared_.stop.load(std::memory_order_relaxed)) {
    auto now = std::chrono::steady_clock::now();
    if (now >= next_tick) {
      tick();
      next_tick = now + kTickPeriod;
    }
    // Wait for the next tick, a client's deadline or a socket.
    auto wake = next_tick;
    fds.clear();
    const bool accepting = listen_fd_ >= 0 && clients_.size() < kMaxClients;
    if (accepting) fds.push_back({listen_fd_, POLLIN, 0});
    for (const Client& c : clients_) {
      fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
      wake = std::min(wake, c.deadline);
    }
    const auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<std::int64_t>(wait_ms, 0, 1000)));
    if (n < 0) continue;
    now = std::chrono::steady_clock::now();
    const std::size_t first = accepting ? 1 : 0;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      if (serve(clients_[i], fds[first + i].revents, now)) {
        if (kept != i) clients_[kept] = std::move(clients_[i]);  // (never onto itself: that empties it)
        ++kept;
      } else {
        ::close(clients_[i].fd);
      }
    }
    clients_.resize(kept);
    if (accepting && (fds[0].revents & POLLIN) != 0) accept_clients(now);
  }
  for (const Client& c : clients_) ::close(c.fd);
  clients_.clear();
}

void Control::accept_clients(std::chrono::steady_clock::time_point now) {
  while (clients_.size() < kMaxClients) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    Client c;
    c.fd = fd;
    c.deadline = now + kRequestTime;
    clients_.push_back(std::move(c));
  }
}

bool Control::serve(Client& c, short revents, std::chrono::steady_clock::time_point now) {
  if (c.out.empty() && (revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
    char buf[kMaxRequest];
    bool complete = false;
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n == 0) {
        complete = true;  // the line ends at the end of the stream
        break;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return false;
      }
      c.in.append(buf, static_cast<std::size_t>(n));
      const auto nl = c.in.find('\n');
      if (nl != std::string::npos) {
        c.in.resize(nl);
        complete = true;
        break;
      }
      if (c.in.size() >= kMaxRequest) {
        // Too long: the rest of the line is read and thrown away (closing
        // with it unread would reset the connection before the answer).
        c.overlong = true;
        c.in.clear();
      }
    }
    if (complete) {
      c.out = c.overlong || c.in.size() >= kMaxRequest ? too_long() : handle(c.in);
      c.deadline = std::chrono::steady_clock::now() + kAnswerTime;
      revents |= POLLOUT;  // most answers go out at once
    }
  }
  if (!c.out.empty() && (revents & (POLLOUT | POLLHUP | POLLERR)) != 0) {
    while (c.sent < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) return false;
      c.sent += static_cast<std::size_t>(n);
    }
    if (c.sent == c.out.size()) return false;  // answered: close
  }
  if (now >= c.deadline) {
    ++clients_timed_out_;
    log_warn("control socket: a client %s in time; closed (%llu so far)",
             c.out.empty() ? "sent no request line" : "did not read its answer",
             static_cast<unsigned long long>(clients_timed_out_));
    return false;
  }
  return true;
}

void Control::trim_heap(std::chrono::steady_clock::time_point now) {
  if (now < next_trim_) return;
  next_trim_ = now + kTrimPeriod;
  // main.cpp keeps glibc from trimming on its own: that came from free()
  // on the forwarding path, a madvise and a TLB shootdown of every worker
  // each time.  Here it is at most one every kTrimPeriod, and only once
  // kTrimFree more lies free than at the last trim (or the least since:
  // free heap stays free heap once trimmed).  The trim holds each arena's
  // lock while it walks it: a worker that allocates meanwhile waits
  // (11 to 32 ms measured after 100,000 peers aged out).  No system call
  // here otherwise: mallinfo2() reads the arenas (each lock held briefly).
  const struct mallinfo2 m = mallinfo2();
  trimmed_free_ = std::min(trimmed_free_, m.fordblks);
  if (m.fordblks < trimmed_free_ + kTrimFree) return;
  const auto t0 = std::chrono::steady_clock::now();
  malloc_trim(0);
  const auto took = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  trimmed_free_ = m.fordblks;
  log_info("heap: %zu MiB freed by the workers (%zu MiB in use) returned to the system in %lld us",
           m.fordblks >> 20, m.uordblks >> 20, static_cast<long long>(took.count()));
}

void Control::tick() {
  watchdog_.tick(std::chrono::steady_clock::now());
  trim_heap(std::chrono::steady_clock::now());
  drain_worker_logs();
  for (std::size_t i = 0; i < setup_.nis.size(); ++i) {
    const int port = setup_.nis[i].port;
    const bool up = port >= 0 ? fabric_.ports[static_cast<std::size_t>(port)]->link_up()
                              : link_is_up(setup_.nis[i].interface);
    if (shared_.ni[i].link_up.exchange(up, std::memory_order_relaxed) != up)
      log_info("NI %s: link %s", to_string(setup_.nis[i].nid).c_str(), up ? "up" : "down");
  }
  const auto now = std::chrono::steady_clock::now();
  // What our ping info says changed (an NI's status, or RTE_DISABLED):
  // push it to every Multi-Rail peer now (ping-discovery-health.md §6.2),
  // so that they need not wait for their next check.
  const std::int64_t now_ns = now.time_since_epoch().count();
  const std::int64_t timeout_ns =
      std::chrono::nanoseconds(setup_.alive_router_check_interval + setup_.router_ping_timeout).count();
  bool changed = false;
  ni_status_.resize(setup_.nis.size(), true);
  for (std::size_t i = 0; i < setup_.nis.size(); ++i) {
    const bool up = shared_.ni[i].up(now_ns, timeout_ns);
    if (up == ni_status_[i]) continue;
    ni_status_[i] = up;
    changed = true;
    log_info("NI %s: %s in our ping info%s", to_string(setup_.nis[i].nid).c_str(), up ? "UP" : "DOWN",
             up ? "" : (shared_.ni[i].link_up.load(std::memory_order_relaxed) ? " (no ping from its net)" : " (link down)"));
  }
  const bool disabled = advertises_disabled(shared_.routing.load(std::memory_order_relaxed));
  if (disabled != pushed_disabled_) {
    pushed_disabled_ = disabled;
    changed = true;
  }
  if (changed) {
    auto pushes = std::make_shared<std::atomic<unsigned>>(0);
    if (on_workers([pushes](Worker& w) { *pushes += w.push_ping_info(); }))
      log_info("pushed our ping info to %u Multi-Rail peer(s)", pushes->load());
    else
      log_info("pushing our ping info to Multi-Rail peers (a worker is slow to answer)");
  }
  const auto settle = setup_.alive_router_check_interval + setup_.router_ping_timeout;
  const RoutingState s = shared_.routing.load(std::memory_order_relaxed);
  if (s == RoutingState::starting && now - routing_since_ >= settle) {
    // Peers were given time to notice us; now advertise routing.
    shared_.routing.store(RoutingState::enabled, std::memory_order_relaxed);
    log_info("routing enabled");
  } else if (s == RoutingState::stopping && now - routing_since_ >= settle) {
    // Forwarding stops once the buffers drain, or after three times the
    // settling time whatever happens (Linux: 110 s .. 330 s).
    bool idle = true;
    for (const Worker* w : fabric_.workers)  // credits are read in place
      for (const auto& p : w->forwarder().pools())
        if (p.credits.cur != static_cast<std::int32_t>(p.nbuffers)) idle = false;
    if (idle || now - routing_since_ >= 3 * settle) {
      shared_.routing.store(RoutingState::disabled, std::memory_order_relaxed);
      log_info("routing disabled");
    }
  }
}

std::string Control::handle(const std::string& request) {
  if (request == "status") return status();
  if (request == "o2ib connections" || request.starts_with("o2ib connections "))
    return o2ib_connections(request.substr(std::min<std::size_t>(request.size(), 17)));
  if (request == "routing 1") return set_routing(true);
  if (request == "routing 0") return set_routing(false);
  if (request == "drop_asym_route" || request == "drop_asym_route 1" || request == "drop_asym_route 0") {
    if (request != "drop_asym_route") {
      const bool on = request.back() == '1';
      if (shared_.drop_asym_route.exchange(on) != on) log_info("drop_asym_route %d", on ? 1 : 0);
    }
    Json j;
    j.begin_object().key("drop_asym_route").value(shared_.drop_asym_route.load() ? 1 : 0).end_object();
    return j.str();
  }
  if (faults_ && request.starts_with("fault ")) return fault(request.substr(6));
  if (request.starts_with("lnet_fault ")) return lnet_fault(request.substr(11));
  Json j;
  j.begin_object().key("errno").value(-EINVAL).key("descr").value(
      "unknown request '" + request +
      "': expected 'status', 'o2ib connections [NID...]', 'routing 0|1', 'drop_asym_route [0|1]' or "
      "'lnet_fault add|del|list|reset'");
  j.end_object();
  return j.str();
}

// Every o2iblnd connection with its credits, or those of the peers listed
// (NIDs separated by spaces): gathered on the workers, so asked for only
// when wanted (peer show -v 2, the exported peers' metrics).
std::string Control::o2ib_connections(const std::string& args) {
  std::vector<Nid> only;
  std::size_t at = 0;
  while (at < args.size()) {
    const std::size_t end = std::min(args.find(' ', at), args.size());
    if (end > at) {
      const std::string word = args.substr(at, end - at);
      const auto nid = parse_nid(word);
      if (!nid) {
        Json e;
        e.begin_object().key("errno").value(-EINVAL).key("descr").value("'" + word + "' is not a NID").end_object();
        return e.str();
      }
      only.push_back(*nid);
    }
    at = end + 1;
  }
  // The workers write into what the command owns (it may outlive a wait
  // that gives up).
  auto found = std::make_shared<std::vector<std::vector<o2ib::Node::PeerInfo>>>(fabric_.n);
  const bool answered = on_workers([found, only](Worker& w) {
    if (const o2ib::Node* ib = w.o2ib()) (*found)[w.index()] = ib->peers(only);
  });
  Json j;
  j.begin_object();
  if (!answered) {
    j.key("errno").value(-ETIMEDOUT).key("descr").value("a worker did not answer within 2 s").end_object();
    return j.str();
  }
  j.key("connections").begin_array();
  for (std::uint32_t w = 0; w < found->size(); ++w)
    for (const o2ib::Node::PeerInfo& p : (*found)[w])
      for (const o2ib::Node::ConnInfo& c : p.conns) {
        j.begin_object().key("peer").value(to_string(p.nid)).key("cpt").value(static_cast<std::uint64_t>(w));
        j.key("version").value(static_cast<std::uint64_t>(c.version));
        j.key("active").value(c.active);
        j.key("queue_depth").value(static_cast<std::uint64_t>(c.queue_depth));
        j.key("max_frags").value(static_cast<std::uint64_t>(c.max_frags));
        j.key("credits").value(static_cast<std::int64_t>(c.credits));
        j.key("reserved_credits").value(static_cast<std::int64_t>(c.reserved_credits));
        j.key("outstanding_credits").value(static_cast<std::int64_t>(c.outstanding_credits));
        j.key("sends_posted").value(static_cast<std::int64_t>(c.sends_posted));
        j.key("queued").value(static_cast<std::uint64_t>(c.queued)).key("waiting").value(static_cast<std::uint64_t>(c.waiting));
        j.key("rx_held").value(static_cast<std::uint64_t>(c.rx_held));
        j.key("tx_msgs").value(c.tx_msgs).key("rx_msgs").value(c.rx_msgs);
        j.end_object();
      }
  j.end_array().end_object();
  return j.str();
}

std::string Control::set_routing(bool on) {
  const RoutingState s = shared_.routing.load(std::memory_order_relaxed);
  Json j;
  j.begin_object();
  if (on && s == RoutingState::stopping) {
    // As Linux: enabling while stopping is refused (EBUSY).
    j.key("errno").value(-EBUSY).key("descr").value("routing is stopping; enable it again once it has stopped");
  } else {
    RoutingState next = s;
    if (on && s == RoutingState::disabled) next = RoutingState::starting;
    if (!on && (s == RoutingState::enabled || s == RoutingState::starting)) next = RoutingState::stopping;
    if (next != s) {
      routing_since_ = std::chrono::steady_clock::now();
      shared_.routing.store(next, std::memory_order_relaxed);
      log_info("routing %s", routing_name(next));
    }
    j.key("routing").value(routing_name(next)).key("enable").value(routing_enable_value(next));
  }
  j.end_object();
  return j.str();
}

// Test faults (LNETR_TEST_FAULTS=1 only): "stall WORKER SECONDS" blocks
// that worker's loop, as a worker stuck in a driver or a bug would be.
std::string Control::fault(const std::string& args) {
  unsigned worker = 0, seconds = 0;
  char extra = 0;
  Json j;
  if (std::sscanf(args.c_str(), "stall %u %u %c", &worker, &seconds, &extra) != 2 || worker >= fabric_.n) {
    j.begin_object().key("errno").value(-EINVAL).key("descr").value(
        "expected 'fault stall WORKER SECONDS' with WORKER below " + std::to_string(fabric_.n)).end_object();
    return j.str();
  }
  auto* c = new Command;
  c->fn = [seconds](Worker&) { std::this_thread::sleep_for(std::chrono::seconds(seconds)); };
  if (rte_ring_enqueue(fabric_.commands[worker], c) != 0) {
    delete c;
    j.begin_object().key("errno").value(-EAGAIN).key("descr").value("the worker's command ring is full").end_object();
    return j.str();
  }
  fabric_.workers[worker]->kick();
  c->release();
  log_warn("fault: worker %u stalled for %u s on request", worker, seconds);
  j.begin_object().key("stalled").value(std::uint64_t{worker}).key("seconds").value(std::uint64_t{seconds}).end_object();
  return j.str();
}

// LNet fault injection: the control thread keeps the rules; every change
// hands each worker the whole list (its engine keeps the state and counts
// of the rules that stay); a list sums the workers' counts.
std::string Control::lnet_fault(const std::string& args) {
  constexpr std::size_t kMaxRules = 64;
  Json j;
  auto error = [&j](int err, const std::string& why) {
    j.begin_object().key("errno").value(-err).key("descr").value(why).end_object();
    return j.str();
  };
  auto push = [this] {
    const std::vector<FaultRule> rules = fault_rules_;
    return on_workers([rules](Worker& w) { w.forwarder().set_faults(rules); });
  };
  if (args.starts_with("add ")) {
    const FaultParse p = parse_fault_rule(args.substr(4));
    if (!p.rule) return error(EINVAL, p.error);
    if (fault_rules_.size() >= kMaxRules) return error(ENOSPC, "at most 64 fault rules: delete some first");
    FaultRule r = *p.rule;
    r.id = ++next_fault_id_;
    fault_rules_.push_back(r);
    const bool all = push();
    log_warn("fault rule %u added: %s", r.id, to_string(r).c_str());
    j.begin_object().key("id").value(std::uint64_t{r.id}).key("rule").value(to_string(r));
    if (!all) j.key("warning").value("a worker was slow to answer: it applies the rule when it gets to it");
    j.end_object();
    return j.str();
  }
  if (args.starts_with("del ")) {
    const std::string what = args.substr(4);
    std::size_t removed = 0;
    if (what == "all") {
      removed = fault_rules_.size();
      fault_rules_.clear();
    } else {
      std::uint32_t id = 0;
      auto [p, ec] = std::from_chars(what.data(), what.data() + what.size(), id);
      if (ec != std::errc() || p != what.data() + what.size()) return error(EINVAL, "expected a rule id or 'all'");
      removed = std::erase_if(fault_rules_, [id](const FaultRule& r) { return r.id == id; });
      if (removed == 0) return error(ENOENT, "no fault rule " + what);
    }
    const bool all_told = push();
    log_info("fault rule(s) deleted: %s (%zu)", what.c_str(), removed);
    j.begin_object().key("deleted").value(std::uint64_t{removed});
    if (!all_told) j.key("warning").value("a worker was slow to answer: it stops applying the rule when it gets to it");
    j.end_object();
    return j.str();
  }
  if (args == "list" || args == "reset") {
    // What the workers write is owned by the closure (a worker slow to
    // answer may run it after we gave up waiting).
    struct Tally {
      std::mutex mu;
      std::map<std::uint32_t, FaultEngine::Counts> sums;
      std::uint64_t held = 0;
    };
    auto tally = std::make_shared<Tally>();
    std::vector<std::uint32_t> ids;
    for (const FaultRule& r : fault_rules_) ids.push_back(r.id);
    const bool reset = args == "reset";
    on_workers([tally, ids, reset](Worker& w) {
      std::lock_guard lock(tally->mu);
      tally->held += w.forwarder().fault_held();
      for (std::uint32_t id : ids)
        if (auto c = w.forwarder().faults().counts(id)) {
          FaultEngine::Counts& s = tally->sums[id];
          for (std::size_t t = 0; t < 4; ++t) s.matched[t] += c->matched[t];
          s.acted += c->acted;
        }
      if (reset) w.forwarder().faults().reset_counts();
    });
    std::lock_guard lock(tally->mu);
    auto& sums = tally->sums;
    const std::uint64_t held = tally->held;
    static constexpr const char* kTypes[] = {"ACK", "PUT", "GET", "REPLY"};
    j.begin_object().key("faults").begin_array();
    for (const FaultRule& r : fault_rules_) {
      const FaultEngine::Counts c = sums[r.id];
      j.begin_object().key("id").value(std::uint64_t{r.id}).key("kind").value(std::string(name(r.kind)));
      j.key("rule").value(to_string(r)).key("matched").begin_object();
      for (std::size_t t = 0; t < 4; ++t) j.key(kTypes[t]).value(c.matched[t]);
      j.end_object().key(r.kind == FaultKind::drop ? "dropped" : r.kind == FaultKind::delay ? "delayed" : "corrupted");
      j.value(c.acted).end_object();
    }
    j.end_array().key("held").value(held).end_object();
    return j.str();
  }
  return error(EINVAL, "expected 'lnet_fault add RULE', 'del ID|all', 'list' or 'reset'");
}

bool Control::on_workers(const std::function<void(Worker&)>& fn) {
  std::vector<Command*> cmds;
  bool ok = true;
  for (std::uint32_t i = 0; i < fabric_.n && ok; ++i) {
    auto* c = new Command;
    c->fn = fn;
    if (rte_ring_enqueue(fabric_.commands[i], c) != 0) {
      delete c;
      ok = false;
      break;
    }
    fabric_.workers[i]->kick();
    cmds.push_back(c);
  }
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  for (Command* c : cmds) {
    // Acquire: pairs with the worker's release store of `done`, so that
    // what fn wrote is visible here.
    while (ok && !c->done.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > deadline) ok = false;
      else std::this_thread::sleep_for(200us);
    }
    c->release();  // the worker frees it if it has not run it yet
  }
  return ok;
}

std::string Control::status() {
  Json j;
  j.begin_object();
  const RoutingState rs = shared_.routing.load(std::memory_order_relaxed);
  j.key("routing").begin_object().key("state").value(routing_name(rs)).key("enable").value(routing_enable_value(rs));
  const auto since = std::chrono::steady_clock::now() - routing_since_;
  j.key("since_s").value(static_cast<std::int64_t>(std::chrono::duration_cast<std::chrono::seconds>(since).count()));
  if (!forwards(rs) || rs == RoutingState::stopping) {
    // Peers that used us as a gateway (pinged us within the NI-status
    // timeout before routing was disabled) and have not learnt since that
    // it is (no ping of theirs, no ACK of our push since): a drain waits
    // for them to move off.
    const std::int64_t at = routing_since_.time_since_epoch().count();
    const std::int64_t window =
        std::chrono::nanoseconds(setup_.alive_router_check_interval + setup_.router_ping_timeout).count();
    std::uint64_t unaware = 0;
    for (std::uint32_t w = 0; w < fabric_.n; ++w)
      fabric_.workers[w]->forwarder().peer_directory().for_each([&](const PeerNi& p) {
        const std::int64_t pinged = p.pinged_ns.get();
        if (pinged != 0 && pinged < at && pinged >= at - window && p.push_acked_ns.get() < at) ++unaware;
      });
    j.key("peers_unaware").value(unaware);
  }
  j.end_object();
  j.key("drop_asym_route").value(shared_.drop_asym_route.load() ? 1 : 0);
  j.key("control_clients_timed_out").value(clients_timed_out_);
  j.key("tsc_hz").value(static_cast<std::uint64_t>(rte_get_tsc_hz()));  // the rate of the workers' "cycles"

  const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  const std::int64_t timeout =
      std::chrono::nanoseconds(setup_.alive_router_check_interval + setup_.router_ping_timeout).count();
  j.key("nis").begin_array();
  for (std::size_t i = 0; i < setup_.nis.size(); ++i) {
    const NiSetup& ni = setup_.nis[i];
    j.begin_object().key("nid").value(to_string(ni.nid)).key("interface").value(ni.interface);
    j.key("transport").value(ni.port >= 0 ? "dpdk" : ni.is_o2ib() ? "verbs" : "socket");
    // As lnetctl's net show means it: up while the NI can send (its link is
    // up: the NI itself is up from the dataplane's start).  Our ping info
    // says more: also DOWN while no node of its net has pinged it for the
    // NI-status timeout (ping-discovery-health.md §6.2).
    const bool link = shared_.ni[i].link_up.load(std::memory_order_relaxed);
    j.key("status").value(link ? "up" : "down");
    j.key("link").value(link ? "up" : "down");
    j.key("advertised").value(shared_.ni[i].up(now, timeout) ? "up" : "down");
    j.key("credits").value(static_cast<std::uint64_t>(ni.credits));
    j.key("peer_credits").value(static_cast<std::uint64_t>(ni.peer_credits));
    j.key("peer_buffer_credits").value(static_cast<std::uint64_t>(ni.peer_buffer_credits));
    j.key("peer_timeout").value(static_cast<std::uint64_t>(ni.peer_timeout));
    j.key("cpts").begin_array();
    for (std::uint32_t c : ni.cpts) j.value(static_cast<std::uint64_t>(c));
    j.end_array();
    if (!ni.is_o2ib()) {
      // socklnd's settings in force for the NI (its own lnd tunables, else
      // dataplane.socklnd's).
      j.key("lnd_tunables").begin_object();
      j.key("conns_per_peer").value(static_cast<std::uint64_t>(ni.conns_per_peer));
      j.key("timeout").value(static_cast<std::int64_t>(ni.sock_timeout.count()));
      j.key("tos").value(static_cast<std::int64_t>(ni.tos));
      j.end_object();
    } else {
      // The o2iblnd tunables in force (clamped as Linux clamps them).
      if (i < fabric_.verbs.size() && fabric_.verbs[i]) j.key("device").value(fabric_.verbs[i]->name());
      const o2ib::NiTunables& t = ni.o2ib;
      j.key("lnd_tunables").begin_object();
      j.key("peercredits_hiw").value(static_cast<std::uint64_t>(t.peer_credits_hiw));
      // Per-transfer keys are registration on demand; pool keys are not.
      j.key("map_on_demand").value(std::uint64_t{setup_.o2ib_transfer_keys ? 1u : 0u});
      j.key("concurrent_sends").value(static_cast<std::uint64_t>(t.concurrent_sends));
      j.key("ntx").value(static_cast<std::uint64_t>(t.ntx));
      j.key("conns_per_peer").value(static_cast<std::uint64_t>(t.conns_per_peer));
      j.key("timeout").value(static_cast<std::int64_t>(t.timeout.count()));
      j.key("tos").value(static_cast<std::int64_t>(t.tos));
      j.end_object();
    }
    j.end_object();
  }
  j.end_array();

  // Per worker: its status page (counters that do not grow with the
  // peers, filled by the worker when asked), and what is read in place:
  // credits, pools and the peers listed in its directory.
  std::vector<Worker::StatusPage> views(fabric_.n);
  std::vector<bool> fresh(fabric_.n, true);
  {
    std::vector<std::uint64_t> requests(fabric_.n);
    for (std::uint32_t w = 0; w < fabric_.n; ++w) requests[w] = fabric_.workers[w]->request_status_page();
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    for (std::uint32_t w = 0; w < fabric_.n; ++w) {
      fresh[w] = fabric_.workers[w]->read_status_page(requests[w], deadline, views[w]);
      // Said once when it stops answering, once when it answers again.
      if (slow_.size() < fabric_.n) slow_.resize(fabric_.n, false);
      if (!fresh[w] && !slow_[w]) log_info("worker %u did not answer for status within 2 s: its last counters are shown", w);
      if (fresh[w] && slow_[w]) log_info("worker %u answers for status again", w);
      slow_[w] = !fresh[w];
    }
  }
  j.key("buffers").begin_array();
  for (std::uint32_t w = 0; w < fabric_.n; ++w) {
    const Forwarder& fw = fabric_.workers[w]->forwarder();
    j.begin_object().key("cpt").value(static_cast<std::uint64_t>(w));
    for (std::size_t c = 0; c < kPoolClasses; ++c) {
      const auto& p = fw.pools()[c];
      j.key(std::string(kPoolNames[c])).begin_object();
      j.key("npages").value(static_cast<std::uint64_t>(kPoolPages[c]));
      j.key("nbuffers").value(static_cast<std::uint64_t>(p.nbuffers));
      j.key("credits").value(static_cast<std::int64_t>(p.credits.cur));
      j.key("mincredits").value(static_cast<std::int64_t>(p.credits.min));
      j.end_object();
    }
    j.key("ni_tx").begin_array();
    for (std::size_t i = 0; i < fw.ni_credits().size(); ++i) {
      const Credits& c = fw.ni_credits()[i];
      j.begin_object().key("nid").value(to_string(setup_.nis[i].nid));
      j.key("max_tx_credits").value(static_cast<std::int64_t>(c.max));
      credits(j, "tx", c);
      j.end_object();
    }
    j.end_array().end_object();
  }
  j.end_array();

  j.key("peers").begin_array();
  for (std::uint32_t w = 0; w < fabric_.n; ++w) {
    fabric_.workers[w]->forwarder().peer_directory().for_each([&](const PeerNi& p) {
      j.begin_object().key("nid").value(to_string(p.nid)).key("cpt").value(static_cast<std::uint64_t>(w));
      j.key("state").value(p.alive ? "up" : "down");
      j.key("multi_rail").value(p.multi_rail.get());
      j.key("max_ni_tx_credits").value(static_cast<std::int64_t>(p.tx.max));
      credits(j, "tx", p.tx);
      j.key("max_rtr_credits").value(static_cast<std::int64_t>(p.rtr.max));
      credits(j, "rtr", p.rtr);
      j.key("tx_q_num_of_buf").value(static_cast<std::uint64_t>(p.tx_wait.count));
      j.key("rtr_q_num_of_buf").value(static_cast<std::uint64_t>(p.rtr_wait.count));
      j.key("send_count").value(p.send_count.get()).key("recv_count").value(p.recv_count.get());
      j.key("drop_count").value(p.drop_count.get());
      j.key("send_bytes").value(p.send_bytes.get()).key("recv_bytes").value(p.recv_bytes.get());
      j.end_object();
    });
  }
  j.end_array();

  std::uint64_t route_count = 0, route_length = 0, drop_count = 0, drop_length = 0, recv = 0, send = 0, reroutes = 0, pushes = 0,
                ring_waits = 0;
  std::array<std::uint64_t, kDropReasonCount> drops{};
  for (std::uint32_t w = 0; w < fabric_.n; ++w) {
    const WorkerCounters& c = shared_.counters[w];
    route_count += c.route_count.get();
    route_length += c.route_length.get();
    drop_count += c.drop_count.get();
    drop_length += c.drop_length.get();
    recv += c.recv_count.get();
    send += c.send_count.get();
    reroutes += c.reroutes.get();
    pushes += c.pushes.get();
    ring_waits += c.ring_waits.get();
    for (std::size_t r = 0; r < kDropReasonCount; ++r) drops[r] += c.drops[r].get();
  }
  j.key("statistics").begin_object();
  j.key("route_count").value(route_count).key("route_length").value(route_length);
  j.key("drop_count").value(drop_count).key("drop_length").value(drop_length);
  j.key("recv_count").value(recv).key("send_count").value(send);
  j.key("reroute_count").value(reroutes);
  j.key("push_count").value(pushes);
  j.key("ring_waits").value(ring_waits);
  j.end_object();
  j.key("drops").begin_object();
  for (std::size_t r = 0; r < kDropReasonCount; ++r) j.key(std::string(name(static_cast<DropReason>(r)))).value(drops[r]);
  j.end_object();

  // The peer tables a remote node can grow: their limit per worker, the
  // peers kept, refused while full and freed when idle (docs/operations.md).
  j.key("peer_tables").begin_object();
  j.key("limit_per_cpt").value(static_cast<std::uint64_t>(setup_.max_peers));
  j.key("peer_idle_s").value(static_cast<std::uint64_t>(setup_.peer_idle.count()));
  for (std::size_t t = 0; t < kPeerTableCount; ++t) {
    std::uint64_t kept = 0, refused_peers = 0, freed = 0;
    for (std::uint32_t w = 0; w < fabric_.n; ++w) {
      const WorkerCounters::Table& c = shared_.counters[w].tables[t];
      kept += c.peers.get();
      refused_peers += c.refused.get();
      freed += c.freed.get();
    }
    j.key(kPeerTableNames[t]).begin_object().key("peers").value(kept).key("refused").value(refused_peers);
    j.key("freed").value(freed).end_object();
  }
  j.end_object();

  j.key("socklnd").begin_object();
  std::uint64_t accepted = 0, connected = 0, failures = 0, tx_msgs = 0, tx_writes = 0;
  sock::Stats zc;  // the kernel sockets' copies and zero-copy sends, summed
  std::array<std::uint64_t, sock::kCloseReasonCount> closed{}, refused{};
  for (const Worker::StatusPage& v : views) {
    tx_msgs += v.sock.tx_msgs;
    tx_writes += v.sock.tx_writes;
    zc.bytes_copied += v.sock.bytes_copied, zc.bytes_zero_copy += v.sock.bytes_zero_copy;
    zc.zc_sends += v.sock.zc_sends, zc.zc_copied += v.sock.zc_copied, zc.zc_fallbacks += v.sock.zc_fallbacks;
    zc.zc_unsupported += v.sock.zc_unsupported, zc.zc_nobufs += v.sock.zc_nobufs, zc.zc_drains += v.sock.zc_drains;
    zc.zc_draining += v.sock.zc_draining, zc.zc_disconnect_failures += v.sock.zc_disconnect_failures;
    accepted += v.sock.conns_accepted;
    connected += v.sock.conns_connected;
    failures += v.sock.connect_failures;
    for (std::size_t r = 0; r < closed.size(); ++r) {
      closed[r] += v.sock.closed[r];
      refused[r] += v.refused[r];
    }
  }
  j.key("conns_accepted").value(accepted).key("conns_connected").value(connected);
  j.key("connect_failures").value(failures);
  j.key("tx_msgs").value(tx_msgs).key("tx_writes").value(tx_writes);
  j.key("zero_copy_min_payload").value(static_cast<std::uint64_t>(setup_.sock.zc_min_payload));
  j.key("bytes_copied").value(zc.bytes_copied).key("bytes_zero_copy").value(zc.bytes_zero_copy);
  j.key("zc_sends").value(zc.zc_sends).key("zc_copied").value(zc.zc_copied);
  j.key("zc_fallbacks").value(zc.zc_fallbacks).key("zc_unsupported").value(zc.zc_unsupported);
  j.key("zc_nobufs").value(zc.zc_nobufs).key("zc_drains").value(zc.zc_drains);
  j.key("zc_draining").value(zc.zc_draining).key("zc_disconnect_failures").value(zc.zc_disconnect_failures);
  j.key("closed").begin_object();
  for (std::size_t r = 0; r < closed.size(); ++r) j.key(std::string(sock::name(static_cast<sock::CloseReason>(r)))).value(closed[r]);
  j.end_object();
  j.key("refused").begin_object();
  for (std::size_t r = 0; r < refused.size(); ++r) j.key(std::string(sock::name(static_cast<sock::CloseReason>(r)))).value(refused[r]);
  j.end_object();
  j.end_object();

  // o2iblnd: the engines' counters summed, the transports' (completions,
  // CM events), and every connection with its credits.
  if (std::any_of(views.begin(), views.end(), [](const Worker::StatusPage& v) { return v.has_o2ib; })) {
    o2ib::Stats t;
    o2ib::VerbsStats vs;
    for (const Worker::StatusPage& v : views) {
      if (!v.has_o2ib) continue;
      const o2ib::Stats& x = v.ib;
      t.conns_accepted += x.conns_accepted, t.conns_connected += x.conns_connected, t.reconnects += x.reconnects;
      for (std::size_t r = 0; r < o2ib::kConnectFailureCount; ++r) t.connect_failed[r] += x.connect_failed[r];
      for (std::size_t r = 0; r < o2ib::kCloseReasonCount; ++r) t.closed[r] += x.closed[r];
      for (std::size_t r = 0; r < o2ib::kRejectSlots; ++r) {
        t.rejects_sent[r] += x.rejects_sent[r];
        t.rejects_received[r] += x.rejects_received[r];
      }
      for (std::size_t r = 0; r < o2ib::kMsgTypeSlots; ++r) {
        t.rx_msgs[r] += x.rx_msgs[r];
        t.tx_msgs[r] += x.tx_msgs[r];
      }
      t.rx_bytes += x.rx_bytes, t.tx_bytes += x.tx_bytes;
      t.rdma_bytes_written += x.rdma_bytes_written, t.rdma_bytes_received += x.rdma_bytes_received;
      t.bytes_copied += x.bytes_copied, t.bytes_gathered += x.bytes_gathered, t.bytes_bounced += x.bytes_bounced;
      t.completions += x.completions, t.tx_timeouts += x.tx_timeouts, t.tx_no_desc += x.tx_no_desc;
      t.tx_descs += x.tx_descs;
      t.conns_refused += x.conns_refused, t.connreqs_rate_limited += x.connreqs_rate_limited;
      for (const o2ib::VerbsStats& y : v.verbs) {
        vs.completions += y.completions, vs.polls += y.polls, vs.cm_events += y.cm_events;
        vs.send_posts += y.send_posts, vs.recv_posts += y.recv_posts, vs.post_failures += y.post_failures;
        vs.cq_errors += y.cq_errors, vs.sink_registrations += y.sink_registrations,
        vs.sink_registration_ns += y.sink_registration_ns, vs.sink_windows += y.sink_windows;
        vs.sink_windows_refused += y.sink_windows_refused, vs.windows_allocated += y.windows_allocated;
        vs.windows_lost += y.windows_lost;
      }
    }
    static constexpr o2ib::MsgType kTypes[] = {o2ib::MsgType::connreq,  o2ib::MsgType::connack,  o2ib::MsgType::noop,
                                               o2ib::MsgType::immediate, o2ib::MsgType::put_req, o2ib::MsgType::put_nak,
                                               o2ib::MsgType::put_ack,  o2ib::MsgType::put_done, o2ib::MsgType::get_req,
                                               o2ib::MsgType::get_done};
    j.key("o2iblnd").begin_object();
    j.key("conns_accepted").value(t.conns_accepted).key("conns_connected").value(t.conns_connected);
    j.key("reconnects").value(t.reconnects);
    j.key("connect_failed").begin_object();
    for (std::size_t r = 0; r < o2ib::kConnectFailureCount; ++r)
      j.key(std::string(o2ib::name(static_cast<o2ib::ConnectFailure>(r)))).value(t.connect_failed[r]);
    j.end_object().key("closed").begin_object();
    for (std::size_t r = 0; r < o2ib::kCloseReasonCount; ++r)
      j.key(std::string(o2ib::name(static_cast<o2ib::CloseReason>(r)))).value(t.closed[r]);
    j.end_object().key("rejects_sent").begin_object();
    for (std::size_t r = 1; r < o2ib::kRejectSlots; ++r)
      j.key(std::string(o2ib::to_string(static_cast<o2ib::RejectReason>(r)))).value(t.rejects_sent[r]);
    j.end_object().key("rejects_received").begin_object();
    for (std::size_t r = 1; r < o2ib::kRejectSlots; ++r)
      j.key(std::string(o2ib::to_string(static_cast<o2ib::RejectReason>(r)))).value(t.rejects_received[r]);
    j.end_object().key("tx_msgs").begin_object();
    for (o2ib::MsgType ty : kTypes) j.key(std::string(o2ib::to_string(ty))).value(t.tx_msgs[o2ib::type_slot(ty)]);
    j.end_object().key("rx_msgs").begin_object();
    for (o2ib::MsgType ty : kTypes) j.key(std::string(o2ib::to_string(ty))).value(t.rx_msgs[o2ib::type_slot(ty)]);
    j.end_object();
    j.key("rx_bytes").value(t.rx_bytes).key("tx_bytes").value(t.tx_bytes);
    j.key("rdma_bytes_written").value(t.rdma_bytes_written).key("rdma_bytes_received").value(t.rdma_bytes_received);
    j.key("bytes_copied").value(t.bytes_copied).key("bytes_gathered").value(t.bytes_gathered);
    j.key("bytes_bounced").value(t.bytes_bounced);
    j.key("completions").value(vs.completions).key("cq_polls").value(vs.polls).key("cm_events").value(vs.cm_events);
    j.key("send_posts").value(vs.send_posts).key("recv_posts").value(vs.recv_posts);
    j.key("post_failures").value(vs.post_failures).key("cq_errors").value(vs.cq_errors);
    j.key("sink_registrations").value(vs.sink_registrations).key("sink_registration_ns").value(vs.sink_registration_ns);
    j.key("sink_windows").value(vs.sink_windows).key("sink_windows_refused").value(vs.sink_windows_refused);
    j.key("windows_allocated").value(vs.windows_allocated).key("windows_lost").value(vs.windows_lost);
    j.key("remote_keys").value(setup_.o2ib_transfer_keys ? "transfer" : "pool");
    j.key("tx_timeouts").value(t.tx_timeouts).key("tx_no_desc").value(t.tx_no_desc).key("tx_descs").value(t.tx_descs);
    j.key("conns_refused").value(t.conns_refused).key("connreqs_rate_limited").value(t.connreqs_rate_limited);
    // The connections by count; their credits with "o2ib connections".
    std::uint64_t conns = 0;
    for (const Worker::StatusPage& v : views) conns += v.ib_connections;
    j.key("connections").value(conns);
    j.end_object();
  }

  // DPDK ports: the device, and what its queues' stacks counted (summed
  // over the workers serving them).
  j.key("ports").begin_array();
  for (std::size_t i = 0; i < fabric_.ports.size(); ++i) {
    const tcp::EthPort& p = *fabric_.ports[i];
    tcp::PortStats ps;
    tcp::StackStats ss;
    std::uint64_t copied = 0, conns = 0, rx_referenced = 0, half_open = 0;
    tcp::Conn::Stats ts{};
    for (const Worker::StatusPage& v : views) {
      if (i >= v.lanes.size() || !v.lanes[i].served) continue;
      const Worker::LaneStats& l = v.lanes[i];
      ps.rx_frames += l.port.rx_frames, ps.tx_frames += l.port.tx_frames;
      ps.rx_bytes += l.port.rx_bytes, ps.tx_bytes += l.port.tx_bytes;
      ps.tx_dropped += l.port.tx_dropped, ps.rx_multiseg += l.port.rx_multiseg, ps.tx_backlog += l.port.tx_backlog;
      ps.tx_chained += l.port.tx_chained, ss.bytes_referenced += l.stack.bytes_referenced;
      ps.tx_stalls += l.port.tx_stalls;
      ps.rx_frames_kept += l.port.rx_frames_kept, ps.rx_frames_held += l.port.rx_frames_held;
      ps.rx_keep_refused += l.port.rx_keep_refused, rx_referenced += l.transport.bytes_referenced;
      ps.rx_steered_out += l.port.rx_steered_out, ps.rx_steer_dropped += l.port.rx_steer_dropped;
      ss.csum_odd_chains += l.stack.csum_odd_chains;
      ss.tso_frames += l.stack.tso_frames, ss.tso_segments += l.stack.tso_segments;
      ss.tso_cut_here += l.stack.tso_cut_here;
      ps.impair_dropped += l.port.impair_dropped, ps.impair_duplicated += l.port.impair_duplicated;
      ps.impair_reordered += l.port.impair_reordered, ps.impair_delayed += l.port.impair_delayed;
      ss.arp_requests_in += l.stack.arp_requests_in, ss.arp_replies_out += l.stack.arp_replies_out;
      ss.arp_requests_out += l.stack.arp_requests_out, ss.icmp_echo_replies += l.stack.icmp_echo_replies;
      ss.resets_out += l.stack.resets_out, ss.dropped_malformed += l.stack.dropped_malformed;
      ss.dropped_not_ours += l.stack.dropped_not_ours, ss.dropped_unresolved += l.stack.dropped_unresolved;
      ss.dropped_overload += l.stack.dropped_overload;
      ss.syncookies_sent += l.stack.syncookies_sent, ss.syncookies_accepted += l.stack.syncookies_accepted;
      ss.syncookies_refused += l.stack.syncookies_refused;
      half_open += l.half_open;
      ss.csum_offloaded += l.stack.csum_offloaded, ss.csum_verified += l.stack.csum_verified;
      copied += l.port.bytes_copied + l.transport.bytes_copied + l.stack.bytes_copied;
      ts += l.tcp;
      conns += l.connections;
    }
    const auto& m = p.mac();
    char mac[18];
    std::snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    j.begin_object().key("name").value(p.config().name).key("device").value(p.config().device);
    j.key("mac").value(std::string(mac)).key("link").value(p.link_up() ? "up" : "down");
    j.key("mtu").value(static_cast<std::uint64_t>(p.config().mtu)).key("queues").value(static_cast<std::uint64_t>(p.config().queues));
    j.key("rx_frames").value(ps.rx_frames).key("tx_frames").value(ps.tx_frames);
    j.key("rx_bytes").value(ps.rx_bytes).key("tx_bytes").value(ps.tx_bytes);
    j.key("tx_dropped").value(ps.tx_dropped).key("tx_backlog").value(ps.tx_backlog).key("rx_multiseg").value(ps.rx_multiseg);
    j.key("tcp_connections").value(conns).key("bytes_copied").value(copied);
    j.key("zero_copy").value(p.tx_chains()).key("bytes_referenced").value(ss.bytes_referenced);
    j.key("rx_zero_copy").value(p.frames_budget() > 0).key("rx_bytes_referenced").value(rx_referenced);
    j.key("rx_frames_kept").value(ps.rx_frames_kept).key("rx_frames_held").value(ps.rx_frames_held);
    j.key("rx_frames_budget").value(static_cast<std::uint64_t>(p.frames_budget() * p.config().queues));
    j.key("rx_keep_refused").value(ps.rx_keep_refused);
    j.key("tx_stalls").value(ps.tx_stalls).key("tx_chained").value(ps.tx_chained).key("csum_odd_chains").value(ss.csum_odd_chains);
    j.key("checksum_offload").begin_object();
    j.key("tx_ipv4").value(p.tx_offloads().tx_ipv4).key("tx_tcp").value(p.tx_offloads().tx_tcp);
    j.key("rx").value(p.rx_checksum()).end_object();
    j.key("tso").value(p.tx_offloads().tso_frame > 0).key("tso_frames").value(ss.tso_frames);
    j.key("tso_segments").value(ss.tso_segments).key("tso_cut_here").value(ss.tso_cut_here);
    j.key("csum_offloaded").value(ss.csum_offloaded).key("csum_verified").value(ss.csum_verified);
    j.key("arp_requests_in").value(ss.arp_requests_in).key("arp_replies_out").value(ss.arp_replies_out);
    j.key("arp_requests_out").value(ss.arp_requests_out).key("icmp_echo_replies").value(ss.icmp_echo_replies);
    j.key("resets_out").value(ss.resets_out).key("dropped_malformed").value(ss.dropped_malformed);
    j.key("dropped_not_ours").value(ss.dropped_not_ours).key("dropped_unresolved").value(ss.dropped_unresolved);
    j.key("dropped_overload").value(ss.dropped_overload).key("tcp_half_open").value(half_open);
    j.key("syncookies_sent").value(ss.syncookies_sent).key("syncookies_accepted").value(ss.syncookies_accepted);
    j.key("syncookies_refused").value(ss.syncookies_refused);
    j.key("tcp").begin_object().key("segments_in").value(ts.segments_in).key("segments_out").value(ts.segments_out);
    j.key("retransmits").value(ts.retransmits).key("fast_retransmits").value(ts.fast_retransmits);
    j.key("timeouts").value(ts.timeouts).key("lost_retransmits").value(ts.lost_retransmits);
    j.key("tail_probes").value(ts.tail_probes).key("tail_probe_recoveries").value(ts.tail_probe_recoveries);
    j.key("invalid_acks_limited").value(ts.invalid_acks_limited);
    j.key("out_of_order").value(ts.out_of_order).key("bytes_reassembled").value(ts.bytes_reassembled);
    j.key("bytes_reassembled_kept").value(ts.bytes_reassembled_kept);
    j.key("duplicates").value(ts.duplicates).end_object();
    j.key("impair").begin_object().key("dropped").value(ps.impair_dropped).key("duplicated").value(ps.impair_duplicated);
    j.key("reordered").value(ps.impair_reordered).key("delayed").value(ps.impair_delayed).end_object();
    // Several queues: whether the device steers peers to their queues
    // itself, the frames passed between queues' workers, and each queue.
    j.key("rss").value(p.rss_steers()).key("rx_steered").value(ps.rx_steered_out);
    j.key("rx_steer_dropped").value(ps.rx_steer_dropped);
    j.key("per_queue").begin_array();
    for (std::size_t w = 0; w < views.size(); ++w) {
      if (i >= views[w].lanes.size() || !views[w].lanes[i].served) continue;
      const Worker::LaneStats& l = views[w].lanes[i];
      j.begin_object().key("queue").value(static_cast<std::uint64_t>(l.queue)).key("worker").value(static_cast<std::uint64_t>(w));
      j.key("rx_frames").value(l.port.rx_frames).key("tx_frames").value(l.port.tx_frames);
      j.key("rx_steered_out").value(l.port.rx_steered_out).key("rx_steered_in").value(l.port.rx_steered_in);
      j.key("tcp_connections").value(static_cast<std::uint64_t>(l.connections));
      j.key("tcp_segments_in").value(l.tcp.segments_in).end_object();
    }
    j.end_array();
    j.end_object();
  }
  j.end_array();

  j.key("workers").begin_array();
  for (std::uint32_t w = 0; w < fabric_.n; ++w) {
    const WorkerCounters& c = shared_.counters[w];
    j.begin_object().key("cpt").value(static_cast<std::uint64_t>(w)).key("core").value(static_cast<std::uint64_t>(setup_.cores[w]));
    j.key("loops").value(c.loops.get()).key("busy_loops").value(c.busy_loops.get());
    j.key("cycles").value(c.cycles.get()).key("busy_cycles").value(c.busy_cycles.get());
    j.key("cpu_ns").value(c.cpu_ns.get());
    j.key("route_count").value(c.route_count.get()).key("route_length").value(c.route_length.get());
    j.key("bytes_copied").value(c.bytes_copied.get()).key("bytes_referenced").value(c.bytes_referenced.get());
    j.key("rx_bytes_referenced").value(c.rx_bytes_referenced.get());
    // Its inbound rings: capacity each, and what waits in them now.
    std::uint64_t backlog = 0, ring_size = 0;
    for (std::uint32_t from = 0; from < fabric_.n; ++from) {
      if (from == w) continue;
      backlog += rte_ring_count(fabric_.ring(from, w));
      ring_size = rte_ring_get_capacity(fabric_.ring(from, w));
    }
    j.key("ring_size").value(ring_size).key("ring_backlog").value(backlog);
    j.key("status_answered").value(fresh[w] ? true : false);
    j.key("conns_misplaced").value(views[w].conns_misplaced);
    j.key("conns_opened").value(views[w].sock.conns_accepted + views[w].sock.conns_connected +
                                views[w].ib.conns_accepted + views[w].ib.conns_connected);
    j.key("rx_msgs").value(views[w].sock.rx_msgs).key("tx_msgs").value(views[w].sock.tx_msgs);
    // The route snapshot it forwards with (shared memory, dataplane.shm_name).
    const shm::WorkerShm& ws = region_.worker(w);
    j.key("route_version").value(ws.held_version.load(std::memory_order_relaxed));
    j.key("route_snapshots_adopted").value(ws.adopted.load(std::memory_order_relaxed));
    j.key("route_snapshots_rejected").value(ws.rejected.load(std::memory_order_relaxed));
    j.end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

}  // namespace lnetr::dp
