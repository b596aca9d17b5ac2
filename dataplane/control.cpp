#include "dataplane/control.hpp"

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_mempool.h>

#include "lnd/o2iblnd/verbs.hpp"

#include <malloc.h>
#include <poll.h>
#include <arpa/inet.h>
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
#include <optional>
#include <sstream>
#include <fstream>
#include <thread>

#include "dataplane/log.hpp"
#include "dataplane/shm/seqlock.hpp"
#include "dataplane/status.hpp"
#include "dataplane/unix_fd.hpp"
#include "lnd/socklnd/socket.hpp"

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

// A peer's discovery, as the status shows it.
status::PeerDiscovery discovery_status(const PeerDiscovery& d) {
  status::PeerDiscovery s;
  switch (d.state.get()) {
    case PeerDiscovery::State::pinging: s.state = "pinging"; break;
    case PeerDiscovery::State::pushing: s.state = "pushing"; break;
    case PeerDiscovery::State::discovered: s.state = "discovered"; break;
    case PeerDiscovery::State::failed: s.state = "failed"; break;
  }
  const PeerDiscovered l = shm::seq_load(d.gen, d.learnt);
  s.features = l.features;
  s.sequence = l.sequence;
  s.pushed = l.pushed;
  for (std::uint32_t i = 0; i < std::min(l.n_nis, shm::kPingNis); ++i)
    s.nis.push_back({to_string(l.nis[i].nid), l.nis[i].status == kNiStatusUp ? "up" : "down"});
  s.more_nis = l.more_nis;
  s.pings = d.pings.get(), s.pushes_sent = d.pushes_sent.get(), s.push_acks = d.push_acks.get();
  s.pushes_received = d.pushes_received.get(), s.failures = d.failures.get();
  return s;
}

// A refused request's answer.
std::string error(int err, const std::string& why) { return status::encode(status::Error{-err, why}); }

// Every worker must take a change (buffers, NIs): refused whole unless each
// command ring has room (only the control thread fills them, so it stays
// there); why not, or empty.
std::string commands_room(const Fabric& fabric) {
  for (std::uint32_t w = 0; w < fabric.n; ++w)
    if (rte_ring_free_count(fabric.commands[w]) == 0)
      return "worker " + std::to_string(w) + " is not taking commands (stalled?): try again";
  return {};
}

}  // namespace

Control::Control(const Setup& setup, const config::Config& cfg, SharedState& shared, Fabric& fabric,
                 const shm::Region& region)
    : setup_(setup),
      cfg_(cfg),
      nis_(kMaxNis),
      ni_on_(kMaxNis, false),
      placement_(setup.placement),
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
      faults_(std::getenv("LNETR_TEST_FAULTS") != nullptr && std::string(std::getenv("LNETR_TEST_FAULTS")) == "1") {
  for (std::size_t i = 0; i < setup.nis.size() && i < kMaxNis; ++i) {
    nis_[i] = setup.nis[i];
    ni_on_[i] = true;
  }
  ni_status_.assign(kMaxNis, true);
  // (Before the workers run: each pool was made with a buffer per credit.)
  for (std::size_t c = 0; c < kPoolClasses; ++c)
    for (const Worker* w : fabric.workers) pool_room_[c].push_back(w->forwarder().pools()[c].nbuffers);
}

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
  return error(E2BIG, "request line longer than " + std::to_string(kMaxRequest - 1) + " bytes");
}

constexpr auto kControlTickPeriod = 100ms;
constexpr auto kCaptureTurn = 1ms;
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
      next_tick = now + kControlTickPeriod;
    }
    // Wait for the next tick, a client's deadline or a socket (or, while a
    // capture runs, a millisecond: its frames are written as they come).
    auto wake = next_tick;
    if (fabric_.capture && fabric_.capture->running()) {
      fabric_.capture->drain();
      wake = std::min(wake, now + kCaptureTurn);
    }
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
        if (clients_[i].passed >= 0) ::close(clients_[i].passed);
      }
    }
    clients_.resize(kept);
    if (accepting && (fds[0].revents & POLLIN) != 0) accept_clients(now);
  }
  for (const Client& c : clients_) {
    ::close(c.fd);
    if (c.passed >= 0) ::close(c.passed);
  }
  clients_.clear();
  if (fabric_.capture) fabric_.capture->stop(false);  // (the workers are stopping)
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
      // A descriptor may come with the line (capture start's file).
      const ssize_t n = unix_fd::recv(c.fd, buf, sizeof buf, c.passed);
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
      c.out = c.overlong || c.in.size() >= kMaxRequest ? too_long() : handle(c.in, c.passed);
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
  for (std::size_t i = 0; i < kMaxNis; ++i) {
    if (!ni_on_[i]) continue;
    const int port = nis_[i].port;
    const bool up = port >= 0 ? fabric_.ports[static_cast<std::size_t>(port)]->link_up()
                              : link_is_up(nis_[i].interface);
    if (shared_.ni[i].link_up.exchange(up, std::memory_order_relaxed) != up)
      log_info("NI %s: link %s", to_string(nis_[i].nid).c_str(), up ? "up" : "down");
  }
  const auto now = std::chrono::steady_clock::now();
  // What our ping info says changed (an NI's status, or RTE_DISABLED):
  // push it to every Multi-Rail peer now (ping-discovery-health.md §6.2),
  // so that they need not wait for their next check.
  const std::int64_t now_ns = now.time_since_epoch().count();
  const std::int64_t timeout_ns =
      std::chrono::nanoseconds(setup_.alive_router_check_interval + setup_.router_ping_timeout).count();
  bool changed = false;
  for (std::size_t i = 0; i < kMaxNis; ++i) {
    if (!ni_on_[i]) continue;
    const bool up = shared_.ni[i].up(now_ns, timeout_ns);
    if (up == ni_status_[i]) continue;
    ni_status_[i] = up;
    changed = true;
    log_info("NI %s: %s in our ping info%s", to_string(nis_[i].nid).c_str(), up ? "UP" : "DOWN",
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

std::string Control::handle(const std::string& request, int& passed) {
  if (request == "status") return status_answer();
  if (request.starts_with("capture ")) return capture(request.substr(8), passed);
  if (request.starts_with("buffers ")) return buffers(request.substr(8));
  if (request.starts_with("net ")) return net(request.substr(4));
  if (request == "o2ib connections" || request.starts_with("o2ib connections "))
    return o2ib_connections(request.substr(std::min<std::size_t>(request.size(), 17)));
  if (request == "routing 1") return set_routing(true);
  if (request == "routing 0") return set_routing(false);
  if (request == "drop_asym_route" || request == "drop_asym_route 1" || request == "drop_asym_route 0") {
    if (request != "drop_asym_route") {
      const bool on = request.back() == '1';
      if (shared_.drop_asym_route.exchange(on) != on) log_info("drop_asym_route %d", on ? 1 : 0);
    }
    return status::encode(status::DropAsymRoute{shared_.drop_asym_route.load() ? 1 : 0});
  }
  if (faults_ && request.starts_with("fault ")) return fault(request.substr(6));
  if (request.starts_with("lnet_fault ")) return lnet_fault(request.substr(11));
  return error(EINVAL, "unknown request '" + request +
                           "': expected 'status', 'o2ib connections [NID...]', 'routing 0|1', 'drop_asym_route [0|1]' "
                           "'lnet_fault add|del|list|reset', 'buffers tiny|small|large N', 'net add DOC|del NID' or "
                           "'capture start|stop|show'");
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
      if (!nid) return error(EINVAL, "'" + word + "' is not a NID");
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
  if (!answered) return error(ETIMEDOUT, "a worker did not answer within 2 s");
  status::O2ibConnections a;
  for (std::uint32_t w = 0; w < found->size(); ++w)
    for (const o2ib::Node::PeerInfo& p : (*found)[w])
      for (const o2ib::Node::ConnInfo& c : p.conns)
        a.connections.push_back({to_string(p.nid), w, c.version, c.active, c.queue_depth, c.max_frags, c.credits,
                                 c.reserved_credits, c.outstanding_credits, c.sends_posted, c.queued, c.waiting,
                                 c.rx_held, c.tx_msgs, c.rx_msgs});
  return status::encode(a);
}

std::string Control::set_routing(bool on) {
  const RoutingState s = shared_.routing.load(std::memory_order_relaxed);
  // As Linux: enabling while stopping is refused (EBUSY).
  if (on && s == RoutingState::stopping) return error(EBUSY, "routing is stopping; enable it again once it has stopped");
  RoutingState next = s;
  if (on && s == RoutingState::disabled) next = RoutingState::starting;
  if (!on && (s == RoutingState::enabled || s == RoutingState::starting)) next = RoutingState::stopping;
  if (next != s) {
    routing_since_ = std::chrono::steady_clock::now();
    shared_.routing.store(next, std::memory_order_relaxed);
    log_info("routing %s", routing_name(next));
  }
  return status::encode(status::RoutingSet{routing_name(next), routing_enable_value(next)});
}

// Test faults (LNETR_TEST_FAULTS=1 only): "stall WORKER SECONDS" blocks
// that worker's loop, as a worker stuck in a driver or a bug would be.
std::string Control::fault(const std::string& args) {
  unsigned worker = 0, seconds = 0;
  char extra = 0;
  if (std::sscanf(args.c_str(), "stall %u %u %c", &worker, &seconds, &extra) != 2 || worker >= fabric_.n)
    return error(EINVAL, "expected 'fault stall WORKER SECONDS' with WORKER below " + std::to_string(fabric_.n));
  auto* c = new Command;
  c->fn = [seconds](Worker&) { std::this_thread::sleep_for(std::chrono::seconds(seconds)); };
  if (rte_ring_enqueue(fabric_.commands[worker], c) != 0) {
    delete c;
    return error(EAGAIN, "the worker's command ring is full");
  }
  fabric_.workers[worker]->kick();
  c->release();
  log_warn("fault: worker %u stalled for %u s on request", worker, seconds);
  return status::encode(status::Stalled{worker, seconds});
}

// Captures of the DPDK ports' frames (capture.hpp): "start port=NAME|*
// host=IPV4|* count=N" with the file's descriptor passed beside the line,
// "stop", "show".
std::string Control::capture(const std::string& args, int& passed) {
  Capture* cap = fabric_.capture;
  if (args == "show") return status::encode(cap->state());
  if (args == "stop") {
    if (!cap->running()) return error(ENOENT, "no capture is running");
    cap->stop();
    return status::encode(cap->state());
  }
  if (!args.starts_with("start ")) return error(EINVAL, "expected 'capture start ...', 'capture stop' or 'capture show'");
  if (fabric_.ports.empty())
    return error(ENODEV, "this router has no DPDK ports: capture a kernel socket's interface with tcpdump");
  Capture::Filter f;
  std::uint64_t count = 0;
  std::istringstream words(args.substr(6));
  std::string w;
  while (words >> w) {
    const auto eq = w.find('=');
    const std::string key = w.substr(0, eq), value = eq == std::string::npos ? "" : w.substr(eq + 1);
    if (key == "port" && value != "*") {
      for (std::size_t i = 0; i < setup_.ports.size(); ++i)
        if (setup_.ports[i].name == value) f.port = fabric_.ports[i]->port_id();
      if (f.port < 0) {
        std::string names;
        for (const PortSetup& p : setup_.ports) names += (names.empty() ? "" : ", ") + p.name;
        return error(ENODEV, "no DPDK port '" + value + "': the ports are " + names);
      }
      f.port_name = value;
    } else if (key == "host" && value != "*") {
      IpAddr a;
      if (::inet_pton(AF_INET, value.c_str(), a.bytes.data()) != 1) {
        a = IpAddr::v6({});
        if (::inet_pton(AF_INET6, value.c_str(), a.bytes.data()) != 1)
          return error(EINVAL, "'" + value + "' is not an IPv4 or IPv6 address");
      }
      f.host = a;
      f.host_name = value;
    } else if (key == "count") {
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), count);
      if (ec != std::errc() || p != value.data() + value.size()) return error(EINVAL, "count: expected a number");
    } else if (key != "port" && key != "host") {
      return error(EINVAL, "unknown capture argument '" + w + "': expected port=, host= or count=");
    }
  }
  if (passed < 0) return error(EBADF, "capture start needs the file's descriptor passed with the request");
  const int fd = passed;
  passed = -1;  // the capture's now, whatever happens
  std::string err;
  if (!cap->start(fd, std::move(f), count, err)) return error(cap->running() ? EBUSY : EINVAL, err);
  return status::encode(cap->state());
}

// lnetctl set tiny_buffers|small_buffers|large_buffers N: N buffers over
// all CPTs (0: the default), max(N / CPTs, 1) each, as Linux.  A worker
// whose pools hold fewer is first given a pool for the rest, registered
// with every RDMA device (peers write into router buffers); then each
// worker resizes its pool (Forwarder::resize_pool).  Memory is never given
// back: a shrunk pool gives up buffers as they return, and keeps them for
// a later growth.
std::string Control::buffers(const std::string& args) {
  std::size_t c = kPoolClasses;
  for (std::size_t k = 0; k < kPoolClasses; ++k)
    if (args.starts_with(std::string(kPoolNames[k]) + " ")) c = k;
  std::uint32_t total = 0;
  const std::string num = c < kPoolClasses ? args.substr(kPoolNames[c].size() + 1) : "";
  auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), total);
  if (c == kPoolClasses || ec != std::errc() || p != num.data() + num.size() || num.empty())
    return error(EINVAL, "expected 'buffers tiny|small|large N'");
  const auto pc = static_cast<PoolClass>(c);
  if (const std::string why = commands_room(fabric_); !why.empty()) return error(EAGAIN, why);
  const std::uint32_t given = total == 0 ? kDefaultPoolBuffers[c] : total;
  const std::uint32_t per = std::max<std::uint32_t>(given / fabric_.n, 1);
  const std::uint32_t size = pool_capacity(pc);
  std::vector<rte_mempool*> added(fabric_.n, nullptr);
  std::uint64_t bytes = 0;
  for (std::uint32_t w = 0; w < fabric_.n && size > 0; ++w) {
    if (per <= pool_room_[c][w]) continue;
    const std::uint32_t more = per - pool_room_[c][w];
    const std::string name = "lnetr_" + std::string(kPoolNames[c]) + "_" + std::to_string(w) + "_" +
                             std::to_string(++pools_added_);
    added[w] = make_router_pool(name, pc, more);
    if (!added[w]) {
      const std::string why = rte_strerror(rte_errno);
      for (rte_mempool* m : added)
        if (m) rte_mempool_free(m);
      return error(ENOMEM, "no memory for " + std::to_string(more) + " more " + std::string(kPoolNames[c]) +
                               " buffers of " + std::to_string(size) + " bytes on CPT " + std::to_string(w) + ": " +
                               why + " (the dataplane's memory: dataplane.memory_mb, or hugepages)");
    }
    bytes += std::uint64_t{more} * size;
  }
  // Peers write into router buffers: the new memory is registered with
  // every RDMA device before any worker takes a buffer from it.
  for (std::uint32_t w = 0; w < fabric_.n; ++w) {
    if (!added[w]) continue;
    for (const auto& dev : fabric_.verbs) {
      std::string err;
      // (Pools registered in part are kept, unused: a device may hold
      // their memory.)
      if (dev && !each_chunk(added[w], [&](void* addr, std::size_t len) { return dev->register_live(addr, len, err); }))
        return error(ENOMEM, "the new " + std::string(kPoolNames[c]) + " buffers cannot be registered: " + err);
    }
  }
  for (std::uint32_t w = 0; w < fabric_.n; ++w)
    if (added[w]) pool_room_[c][w] = per;
  const bool all = on_workers([pc, per, added](Worker& w) {
    if (rte_mempool* m = added[w.index()]) w.add_pool(pc, m);
    w.forwarder().resize_pool(pc, per);
  });
  log_info("%s router buffers: %u per CPT (%u in all)%s", kPoolNames[c].data(), per, per * fabric_.n,
           bytes ? (", " + std::to_string(bytes >> 20) + " MiB added").c_str() : "");
  status::BuffersSet a{std::string(kPoolNames[c]), total, per, std::nullopt};
  std::string warning;
  if (per < kMinPoolBuffers[c])
    warning = std::to_string(per) + " " + std::string(kPoolNames[c]) + " buffers per CPT is below the " +
              std::to_string(kMinPoolBuffers[c]) + " recommended";
  if (!all)
    warning += (warning.empty() ? "" : "; ") + std::string("a worker was slow to answer: it resizes its pool when it "
                                                           "gets to it");
  if (!warning.empty()) a.warning = warning;
  return status::encode(a);
}

// ---- nets at run time (lnetrctl net add / del) -----------------------------------------

std::string Control::net(const std::string& args) {
  if (args.starts_with("add ")) return net_add(args.substr(4));
  if (args.starts_with("del ")) return net_del(args.substr(4));
  if (args.starts_with("set ")) return net_set(args.substr(4));
  return error(EINVAL, "expected 'net add DOC', 'net del NID', 'net set conns_per_peer N NID...' or 'net set timeout "
                       "S NET'");
}

namespace {

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "; ") + l;
  return out;
}

// Only what a change of nets may change: the other sections, and the ports'
// queues (polled by the CPTs the workers took at start), stay as they are.
std::string unchanged_ports(const Setup& now, const Setup& next) {
  for (std::size_t i = 0; i < now.ports.size() && i < next.ports.size(); ++i) {
    std::vector<std::uint32_t> a, b;
    for (std::uint32_t q = 0; q < now.ports[i].queues; ++q) {
      a.push_back(static_cast<std::uint32_t>(q < now.ports[i].cpts.size() ? now.ports[i].cpts[q] : q));
      b.push_back(static_cast<std::uint32_t>(q < next.ports[i].cpts.size() ? next.ports[i].cpts[q] : q));
    }
    if (a != b)
      return "port " + now.ports[i].name + "'s queues are polled by the CPTs they were given at the dataplane's "
             "start; an NI's CPT list that changes them takes a restart";
  }
  return {};
}

// Whether the file's NI `c` (of the NI's net) is the dataplane's `ni`: the
// same NID, or the same interface where the file gives no NID.
bool configures(const config::NiConfig& c, const NiSetup& ni) {
  return c.nid ? c.nid->value == ni.nid : c.interface && c.interface->value == ni.interface;
}

}  // namespace

std::string Control::net_add(const std::string& doc) {
  config::LoadOptions opts;
  opts.base = &cfg_;
  auto loaded = config::load_config(doc, "net add", opts);
  if (!loaded) {
    std::vector<std::string> lines;
    for (const auto& e : loaded.error()) lines.push_back(e.to_string());
    return error(EINVAL, joined(lines));
  }
  auto made = make_setup(loaded->config);
  if (!made) return error(EINVAL, joined(made.error()));
  if (const std::string why = unchanged_ports(setup_, *made); !why.empty()) return error(EINVAL, why);
  auto in_service = [this](const Nid& nid) {
    for (std::size_t i = 0; i < kMaxNis; ++i)
      if (ni_on_[i] && nis_[i].nid == nid) return true;
    return false;
  };
  for (std::size_t i = 0; i < kMaxNis; ++i)
    if (ni_on_[i] && std::none_of(made->nis.begin(), made->nis.end(), [&](const NiSetup& n) { return n.nid == nis_[i].nid; }))
      return error(EINVAL, "NI " + to_string(nis_[i].nid) + (nis_[i].interface.empty() ? "" : " (" + nis_[i].interface + ")") +
                               " would have another NID now (its interface's address changed?): restart the dataplane "
                               "to take it");
  std::vector<NiSetup> added;
  for (const NiSetup& n : made->nis)
    if (!in_service(n.nid)) added.push_back(n);
  if (added.empty()) return error(EEXIST, "every NI given is in service already");
  if (const std::string why = commands_room(fabric_); !why.empty()) return error(EAGAIN, why);
  // Free slots: here, and on every worker (a deleted NI's slot stays taken
  // while a peer of it is still referred to by a message).
  auto busy = std::make_shared<std::array<std::atomic<bool>, kMaxNis>>();
  if (!on_workers([busy](Worker& w) {
        for (std::uint32_t i = 0; i < kMaxNis; ++i)
          if (w.ni_slot_busy(i)) (*busy)[i] = true;
      }))
    return error(EAGAIN, "a worker was slow to answer: try again");
  std::vector<std::uint32_t> slots;
  for (std::uint32_t i = 0; i < kMaxNis && slots.size() < added.size(); ++i)
    if (!ni_on_[i] && !(*busy)[i]) slots.push_back(i);
  if (slots.size() < added.size())
    return error(ENOSPC, "no NI slot is free: a dataplane serves at most " + std::to_string(kMaxNis) +
                             " NIs (a deleted one's counts until the last message of its peers is done)");
  // Kernel-socket NIs listen first: a bind error changes nothing.
  std::vector<int> fds(added.size(), -1);
  auto close_fds = [&fds] {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  };
  for (std::size_t k = 0; k < added.size(); ++k) {
    const NiSetup& n = added[k];
    if (n.port >= 0 || n.is_o2ib() || setup_.sock.accept == sock::AcceptMode::none) continue;
    const sock::IpAddr ip = sock::IpAddr::of(n.nid);
    bool listened = false;  // another kernel-socket NI on the same address
    for (std::size_t i = 0; i < kMaxNis; ++i)
      if (ni_on_[i] && nis_[i].port < 0 && !nis_[i].is_o2ib() && sock::IpAddr::of(nis_[i].nid) == ip) listened = true;
    for (std::size_t j = 0; j < k; ++j)
      if (fds[j] >= 0 && sock::IpAddr::of(added[j].nid) == ip) listened = true;
    if (listened) continue;
    std::string err;
    fds[k] = sock::listen_on(ip, setup_.sock.port, setup_.sock.backlog, err);
    if (fds[k] < 0) {
      close_fds();
      return error(EADDRNOTAVAIL, "NI " + to_string(n.nid) + ": " + err);
    }
  }
  // o2ib NIs: the RDMA device behind each address, every pool registered
  // with it, and a transport on it in every worker, before any NI is added.
  if (std::string why = open_o2ib(added, slots); !why.empty()) {
    close_fds();
    return error(EADDRNOTAVAIL, why);
  }
  const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  for (std::size_t k = 0; k < added.size(); ++k) {
    SharedNi& sn = shared_.ni[slots[k]];
    const NiSetup& n = added[k];
    sn.link_up.store(n.port >= 0 ? fabric_.ports[static_cast<std::size_t>(n.port)]->link_up() : link_is_up(n.interface));
    sn.last_ping_ns.store(now);  // (UP in our ping info until the NI-status timeout finds no ping)
  }
  const Placement before = placement_;
  placement_ = made->placement;
  const Placement pl = placement_;
  bool all = on_workers([added, slots, fds, pl](Worker& w) {
    for (std::size_t k = 0; k < added.size(); ++k) w.add_ni(slots[k], added[k], pl, w.index() == 0 ? fds[k] : -1);
  });
  // Then worker 0 listens on the o2ib NIs, once every worker has its
  // transport and engine NI (a request worker 0 hands on must find them).
  std::vector<std::uint32_t> ib;
  for (std::size_t k = 0; k < added.size(); ++k)
    if (added[k].is_o2ib()) ib.push_back(slots[k]);
  auto listen_errors = std::make_shared<std::vector<std::string>>();
  bool listened = true;  // (false: worker 0 has not answered, and may still write listen_errors)
  std::vector<std::string> slow;
  if (!ib.empty()) {
    if (!all && !caught_up()) {
      slow.push_back("a worker is not taking commands: the o2ib NIs added do not listen (restart the dataplane)");
    } else if (!on_workers([ib, listen_errors](Worker& w) {
                 if (w.index() == 0)
                   for (std::uint32_t s : ib)
                     if (std::string e = w.listen_o2ib(s); !e.empty()) {
                       log_warn("%s", e.c_str());
                       listen_errors->push_back(e);
                     }
               })) {
      listened = false;
      slow.push_back("worker 0 was slow to listen on the o2ib NIs added: it does when it gets to it");
    }
  }
  if (listened && !listen_errors->empty()) {
    // An o2ib NI that cannot take connections is not added (Linux's NI
    // would not start): every NI of the request is taken out again.
    placement_ = before;
    const bool stopped = on_workers([slots, before](Worker& w) {
      for (std::uint32_t s : slots) w.del_ni(s, before);
    });
    if (stopped || caught_up()) close_o2ib(ib);
    for (std::uint32_t s : slots) shared_.ni[s].link_up.store(false);
    return error(EADDRINUSE, joined(*listen_errors));
  }
  status::NetChange a{"added", {}, 0, {}};
  for (std::size_t k = 0; k < added.size(); ++k) {
    nis_[slots[k]] = added[k];
    ni_on_[slots[k]] = true;
    ni_status_[slots[k]] = true;
    a.nids.push_back(to_string(added[k].nid));
    log_info("NI %s%s%s added%s", a.nids.back().c_str(), added[k].interface.empty() ? "" : " on ",
             added[k].interface.c_str(), added[k].port >= 0 ? " (DPDK port, lnetr's own TCP)" : "");
  }
  cfg_ = std::move(loaded->config);
  for (const auto& w : loaded->warnings) a.warnings.push_back(w.to_string());
  if (!all) a.warnings.push_back("a worker was slow to answer: it takes the NI when it gets to it");
  for (std::string& w : slow) a.warnings.push_back(std::move(w));

  // Multi-Rail peers learn our new NI list now (as Linux pushes on a change).
  shared_.ping_seq.fetch_add(1);
  on_workers([](Worker& w) { w.push_ping_info(); });
  return status::encode(a);
}

std::string Control::open_o2ib(const std::vector<NiSetup>& added, const std::vector<std::uint32_t>& slots) {
  std::vector<std::uint32_t> opened;
  for (std::size_t k = 0; k < added.size(); ++k) {
    const NiSetup& ni = added[k];
    if (!ni.is_o2ib()) continue;
    const std::string what = "NI " + to_string(ni.nid) + ": ";
    std::string why;
    if (!o2ib::verbs_available(why)) {
      close_o2ib(opened);
      return what + "this machine has " + why;
    }
    auto dev = o2ib::VerbsDevice::open(ni.nid.addr4(), why,
                                       setup_.o2ib_transfer_keys ? o2ib::RemoteKeys::transfer : o2ib::RemoteKeys::pool);
    if (!dev || !register_pools(*dev, why)) {
      close_o2ib(opened);
      return what + why;
    }
    const std::uint32_t slot = slots[k];
    fabric_.verbs[slot] = dev;
    opened.push_back(slot);
    auto errors = std::make_shared<std::vector<std::string>>(fabric_.n);
    const bool all = on_workers([slot, dev, errors](Worker& w) { (*errors)[w.index()] = w.open_transport(slot, dev); });
    if (all)  // (a slow worker may still write its answer)
      for (const std::string& e : *errors)
        if (!e.empty()) why = e;
    if (!all || !why.empty()) {
      close_o2ib(opened);
      return what + (why.empty() ? "a worker was slow to open its RDMA transport: try again" : why);
    }
    log_info("NI %s: RDMA device %s opened (%zu memory regions registered)", to_string(ni.nid).c_str(),
             dev->name().c_str(), dev->payload_regions());
  }
  return {};
}

void Control::close_o2ib(const std::vector<std::uint32_t>& slots) {
  if (slots.empty()) return;
  on_workers([slots](Worker& w) {
    for (std::uint32_t s : slots) w.retire_transport(s);
  });
  for (std::uint32_t s : slots) fabric_.verbs[s].reset();
}

std::string Control::net_del(const std::string& text) {
  const auto nid = parse_nid(text);
  if (!nid) return error(EINVAL, "'" + text + "' is not a NID");
  std::uint32_t slot = kMaxNis;
  std::string names;
  for (std::uint32_t i = 0; i < kMaxNis; ++i) {
    if (!ni_on_[i]) continue;
    if (nis_[i].nid == *nid) slot = i;
    names += (names.empty() ? "" : ", ") + to_string(nis_[i].nid);
  }
  if (slot == kMaxNis) return error(ENOENT, "no NI " + text + (names.empty() ? "" : ": the NIs are " + names));
  const NiSetup& ni = nis_[slot];
  // The configuration without it (its net too, if it was the net's last).
  config::Config next = cfg_;
  for (auto n = next.nets.begin(); n != next.nets.end(); ++n) {
    if (n->net.value != nid->net()) continue;
    std::erase_if(n->nis, [&](const config::NiConfig& c) { return configures(c, ni); });
    if (n->nis.empty()) next.nets.erase(n);
    break;
  }
  auto made = make_setup(next);
  if (!made) return error(EINVAL, joined(made.error()));
  if (const std::string why = commands_room(fabric_); !why.empty()) return error(EAGAIN, why);
  auto dropped = [this] {
    std::uint64_t n = 0;
    for (std::uint32_t w = 0; w < fabric_.n; ++w)
      n += shared_.counters[w].drops[static_cast<std::size_t>(DropReason::ni_deleted)].get();
    return n;
  };
  const std::uint64_t before = dropped();
  placement_ = made->placement;
  const Placement pl = placement_;
  const bool all = on_workers([slot, pl](Worker& w) { w.del_ni(slot, pl); });
  // An o2ib NI's transports close as their connections finish closing,
  // and its RDMA device with the last of them: once every worker has
  // stopped it (worker 0's listener gone), else never (its slot stays busy).
  std::string kept;
  if (ni.is_o2ib()) {
    if (all || caught_up()) close_o2ib({slot});
    else kept = "a worker is not taking commands: the NI's RDMA transports stay open (restart the dataplane)";
  }
  ni_on_[slot] = false;
  shared_.ni[slot].link_up.store(false);
  cfg_ = std::move(next);
  status::NetChange a{"deleted", {text}, dropped() - before, {}};
  if (!all) a.warnings.push_back("a worker was slow to answer: it lets go of the NI when it gets to it");
  if (!kept.empty()) a.warnings.push_back(kept);
  log_info("NI %s deleted: %llu message(s) in flight or waiting on it dropped", text.c_str(),
           static_cast<unsigned long long>(a.dropped));
  shared_.ping_seq.fetch_add(1);
  on_workers([](Worker& w) { w.push_ping_info(); });
  return status::encode(a);
}

// lnetctl net set --conns-per-peer / --lnd-timeout: the LND values in
// force of NIs in service, changed in place on every worker (connections
// open stay; what connects or queues from now on follows them), and in the
// configuration the next net add is checked with.
std::string Control::net_set(const std::string& args) {
  std::vector<std::string> words;
  for (std::size_t at = 0; at < args.size();) {
    const std::size_t end = std::min(args.find(' ', at), args.size());
    if (end > at) words.push_back(args.substr(at, end - at));
    at = end + 1;
  }
  const bool cpp = !words.empty() && words[0] == "conns_per_peer";
  const bool timeout = !words.empty() && words[0] == "timeout";
  std::uint32_t value = 0;
  const bool number = words.size() > 1 && [&] {
    auto [p, ec] = std::from_chars(words[1].data(), words[1].data() + words[1].size(), value);
    return ec == std::errc() && p == words[1].data() + words[1].size();
  }();
  if ((!cpp && !timeout) || words.size() < 3 || !number || value == 0 || (cpp && value > 127))
    return error(EINVAL, "expected 'net set conns_per_peer N NID...' (1 <= N <= 127), 'net set timeout S NID...' or "
                         "'net set timeout S NET' (S >= 1 seconds)");
  // A net (timeout only): every NI of its LND, and those added later.
  std::optional<Net> lnd_wide;
  if (timeout && words.size() == 3 && words[2].find('@') == std::string::npos) {
    const auto net = parse_net(words[2]);
    if (!net) return error(EINVAL, "'" + words[2] + "' is not a net or a NID");
    lnd_wide = *net;
  }
  std::vector<std::uint32_t> slots;
  for (std::uint32_t i = 0; lnd_wide && i < kMaxNis; ++i)
    if (ni_on_[i] && nis_[i].nid.lnd() == lnd_wide->lnd()) slots.push_back(i);
  for (std::size_t k = 2; !lnd_wide && k < words.size(); ++k) {
    const auto nid = parse_nid(words[k]);
    if (!nid) return error(EINVAL, "'" + words[k] + "' is not a NID");
    std::uint32_t slot = kMaxNis;
    for (std::uint32_t i = 0; i < kMaxNis; ++i)
      if (ni_on_[i] && nis_[i].nid == *nid) slot = i;
    if (slot == kMaxNis) return error(ENOENT, "no NI " + words[k]);
    slots.push_back(slot);
  }
  if (const std::string why = commands_room(fabric_); !why.empty()) return error(EAGAIN, why);
  // Here: the NIs' values (status shows them), and the configuration's.
  auto config_ni = [this](const NiSetup& ni) -> config::NiConfig* {
    for (config::NetConfig& n : cfg_.nets)
      if (n.net.value == ni.nid.net())
        for (config::NiConfig& c : n.nis)
          if (configures(c, ni)) return &c;
    return nullptr;
  };
  status::NetChange a{"set", {}, 0, {}};
  std::vector<NiSetup> tuned;
  for (std::uint32_t i : slots) {
    NiSetup& ni = nis_[i];
    config::NiConfig* c = config_ni(ni);
    if (cpp) {
      (ni.is_o2ib() ? ni.o2ib.conns_per_peer : ni.conns_per_peer) = value;
      if (c) c->lnd_tunables.conns_per_peer.value = static_cast<std::int32_t>(value);
    } else {
      (ni.is_o2ib() ? ni.o2ib.timeout : ni.sock_timeout) = std::chrono::seconds(value);
      if (c) c->lnd_tunables.timeout.value = static_cast<std::int32_t>(value);
    }
    tuned.push_back(ni);
    a.nids.push_back(to_string(ni.nid));
  }
  if (lnd_wide && lnd_wide->lnd() == LndType::sock)
    cfg_.dataplane.socklnd.sock_timeout.value = static_cast<std::int32_t>(value);
  const bool all = on_workers([tuned](Worker& w) {
    for (const NiSetup& ni : tuned) w.tune_ni(ni);
  });
  if (!all) a.warnings.push_back("a worker was slow to answer: it takes the values when it gets to it");
  std::string nids;
  for (const std::string& n : a.nids) nids += (nids.empty() ? "" : ", ") + n;
  log_info("net set %s %u: NI(s) %s", words[0].c_str(), value, nids.c_str());
  return status::encode(a);
}

// LNet fault injection: the control thread keeps the rules; every change
// hands each worker the whole list (its engine keeps the state and counts
// of the rules that stay); a list sums the workers' counts.
std::string Control::lnet_fault(const std::string& args) {
  constexpr std::size_t kMaxRules = 64;
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
    status::FaultAdded a{r.id, to_string(r), std::nullopt};
    if (!all) a.warning = "a worker was slow to answer: it applies the rule when it gets to it";
    return status::encode(a);
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
    status::FaultsDeleted a{removed, std::nullopt};
    if (!all_told) a.warning = "a worker was slow to answer: it stops applying the rule when it gets to it";
    return status::encode(a);
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
    static constexpr const char* kTypes[] = {"ACK", "PUT", "GET", "REPLY"};
    status::FaultList a;
    for (const FaultRule& r : fault_rules_) {
      const FaultEngine::Counts c = tally->sums[r.id];
      status::FaultCounts& f = a.faults.emplace_back();
      f.id = r.id;
      f.kind = name(r.kind);
      f.rule = to_string(r);
      for (std::size_t t = 0; t < 4; ++t) f.matched.add(kTypes[t], c.matched[t]);
      switch (r.kind) {
        case FaultKind::drop: f.dropped = c.acted; break;
        case FaultKind::delay: f.delayed = c.acted; break;
        case FaultKind::corrupt: f.corrupted = c.acted; break;
      }
    }
    a.held = tally->held;
    return status::encode(a);
  }
  return error(EINVAL, "expected 'lnet_fault add RULE', 'del ID|all', 'list' or 'reset'");
}

// Every worker has run every command given it so far (each runs its
// commands in order): a no-op answered by all, within about ten seconds.
bool Control::caught_up() {
  for (int i = 0; i < 5; ++i)
    if (on_workers([](Worker&) {})) return true;
  return false;
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

std::string Control::status_answer() {
  status::Status st;
  const RoutingState rs = shared_.routing.load(std::memory_order_relaxed);
  st.routing.state = routing_name(rs);
  st.routing.enable = routing_enable_value(rs);
  const auto since = std::chrono::steady_clock::now() - routing_since_;
  st.routing.since_s = std::chrono::duration_cast<std::chrono::seconds>(since).count();
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
    st.routing.peers_unaware = unaware;
  }
  st.drop_asym_route = shared_.drop_asym_route.load() ? 1 : 0;
  st.control_clients_timed_out = clients_timed_out_;
  st.tsc_hz = rte_get_tsc_hz();  // the rate of the workers' "cycles"

  const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  const std::int64_t timeout =
      std::chrono::nanoseconds(setup_.alive_router_check_interval + setup_.router_ping_timeout).count();
  for (std::size_t i = 0; i < kMaxNis; ++i) {
    if (!ni_on_[i]) continue;
    const NiSetup& ni = nis_[i];
    status::Ni& n = st.nis.emplace_back();
    n.nid = to_string(ni.nid);
    n.interface = ni.interface;
    n.transport = ni.port >= 0 ? "dpdk" : ni.is_o2ib() ? "verbs" : "socket";
    // As lnetctl's net show means it: up while the NI can send (its link is
    // up: the NI itself is up from the dataplane's start).  Our ping info
    // says more: also DOWN while no node of its net has pinged it for the
    // NI-status timeout (ping-discovery-health.md §6.2).
    const bool link = shared_.ni[i].link_up.load(std::memory_order_relaxed);
    n.status = link ? "up" : "down";
    n.link = link ? "up" : "down";
    n.advertised = shared_.ni[i].up(now, timeout) ? "up" : "down";
    n.credits = ni.credits;
    n.peer_credits = ni.peer_credits;
    n.peer_buffer_credits = ni.peer_buffer_credits;
    n.peer_timeout = ni.peer_timeout;
    n.cpts = ni.cpts;
    status::LndTunables& l = n.lnd_tunables;
    if (!ni.is_o2ib()) {
      // socklnd's settings in force for the NI (its own lnd tunables, else
      // dataplane.socklnd's).
      l.conns_per_peer = ni.conns_per_peer;
      l.timeout = ni.sock_timeout.count();
      l.tos = ni.tos;
    } else {
      // The o2iblnd tunables in force (clamped as Linux clamps them).
      if (i < fabric_.verbs.size() && fabric_.verbs[i]) n.device = fabric_.verbs[i]->name();
      const o2ib::NiTunables& t = ni.o2ib;
      l.peercredits_hiw = t.peer_credits_hiw;
      // Per-transfer keys are registration on demand; pool keys are not.
      l.map_on_demand = setup_.o2ib_transfer_keys ? 1 : 0;
      l.concurrent_sends = t.concurrent_sends;
      l.ntx = t.ntx;
      l.conns_per_peer = t.conns_per_peer;
      l.timeout = t.timeout.count();
      l.tos = t.tos;
    }
  }

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
  static_assert(kPoolClasses == 3 && kPoolNames[0] == "tiny" && kPoolNames[1] == "small" && kPoolNames[2] == "large",
                "status::Buffers has a member per pool, named as the pool");
  for (std::uint32_t w = 0; w < fabric_.n; ++w) {
    const Forwarder& fw = fabric_.workers[w]->forwarder();
    status::Buffers& b = st.buffers.emplace_back();
    b.cpt = w;
    status::Pool* const pools[kPoolClasses] = {&b.tiny, &b.small, &b.large};
    for (std::size_t c = 0; c < kPoolClasses; ++c) {
      const auto& p = fw.pools()[c];
      *pools[c] = {kPoolPages[c], p.nbuffers, p.credits.cur, p.credits.min};
    }
    for (std::size_t i = 0; i < kMaxNis; ++i) {
      if (!ni_on_[i]) continue;
      const Credits& c = fw.ni_credits()[i];
      b.ni_tx.push_back({to_string(nis_[i].nid), c.max, c.cur, c.min});
    }
  }

  for (std::uint32_t w = 0; w < fabric_.n; ++w) {
    fabric_.workers[w]->forwarder().peer_directory().for_each([&](const PeerNi& p) {
      status::Peer& s = st.peers.emplace_back();
      s.nid = to_string(p.nid);
      s.cpt = w;
      s.state = p.alive ? "up" : "down";
      s.multi_rail = p.multi_rail.get();
      s.max_ni_tx_credits = p.tx.max, s.available_tx_credits = p.tx.cur, s.min_tx_credits = p.tx.min;
      s.max_rtr_credits = p.rtr.max, s.available_rtr_credits = p.rtr.cur, s.min_rtr_credits = p.rtr.min;
      s.tx_q_num_of_buf = p.tx_wait.count;
      s.rtr_q_num_of_buf = p.rtr_wait.count;
      s.send_count = p.send_count.get(), s.recv_count = p.recv_count.get(), s.drop_count = p.drop_count.get();
      s.send_bytes = p.send_bytes.get(), s.recv_bytes = p.recv_bytes.get();
      if (const PeerDiscovery* d = p.discovery.load(std::memory_order_acquire)) s.discovery = discovery_status(*d);
    });
  }

  std::array<std::uint64_t, kDropReasonCount> drops{};
  status::Statistics& sums = st.statistics;
  for (std::uint32_t w = 0; w < fabric_.n; ++w) {
    const WorkerCounters& c = shared_.counters[w];
    sums.route_count += c.route_count.get();
    sums.route_length += c.route_length.get();
    sums.drop_count += c.drop_count.get();
    sums.drop_length += c.drop_length.get();
    sums.recv_count += c.recv_count.get();
    sums.send_count += c.send_count.get();
    sums.reroute_count += c.reroutes.get();
    sums.push_count += c.pushes.get();
    sums.ring_waits += c.ring_waits.get();
    for (std::size_t r = 0; r < kDropReasonCount; ++r) drops[r] += c.drops[r].get();
  }
  for (std::size_t r = 0; r < kDropReasonCount; ++r) st.drops.add(std::string(name(static_cast<DropReason>(r))), drops[r]);

  // The peer tables a remote node can grow: their limit per worker, the
  // peers kept, refused while full and freed when idle (docs/operations.md).
  static_assert(kPeerTableCount == 3 && std::string_view(kPeerTableNames[0]) == "lnet" &&
                    std::string_view(kPeerTableNames[1]) == "socklnd" && std::string_view(kPeerTableNames[2]) == "o2iblnd",
                "status::PeerTables has a member per table, named as the table");
  st.peer_tables.limit_per_cpt = setup_.max_peers;
  st.peer_tables.peer_idle_s = static_cast<std::uint64_t>(setup_.peer_idle.count());
  status::PeerTable* const tables[kPeerTableCount] = {&st.peer_tables.lnet, &st.peer_tables.socklnd,
                                                      &st.peer_tables.o2iblnd};
  for (std::size_t k = 0; k < kPeerTableCount; ++k)
    for (std::uint32_t w = 0; w < fabric_.n; ++w) {
      const WorkerCounters::Table& c = shared_.counters[w].tables[k];
      tables[k]->peers += c.peers.get();
      tables[k]->refused += c.refused.get();
      tables[k]->freed += c.freed.get();
    }

  status::Socklnd& sk = st.socklnd;
  std::array<std::uint64_t, sock::kCloseReasonCount> closed{}, refused{};
  for (const Worker::StatusPage& v : views) {
    const sock::Stats& x = v.sock;
    sk.tx_msgs += x.tx_msgs, sk.tx_writes += x.tx_writes;
    // The kernel sockets' copies and zero-copy sends.
    sk.bytes_copied += x.bytes_copied, sk.bytes_zero_copy += x.bytes_zero_copy;
    sk.zc_sends += x.zc_sends, sk.zc_copied += x.zc_copied, sk.zc_fallbacks += x.zc_fallbacks;
    sk.zc_unsupported += x.zc_unsupported, sk.zc_nobufs += x.zc_nobufs, sk.zc_drains += x.zc_drains;
    sk.zc_draining += x.zc_draining, sk.zc_disconnect_failures += x.zc_disconnect_failures;
    sk.conns_accepted += x.conns_accepted, sk.conns_connected += x.conns_connected;
    sk.connect_failures += x.connect_failures;
    for (std::size_t r = 0; r < closed.size(); ++r) {
      closed[r] += x.closed[r];
      refused[r] += v.refused[r];
    }
  }
  sk.zero_copy_min_payload = setup_.sock.zc_min_payload;
  for (std::size_t r = 0; r < closed.size(); ++r) {
    sk.closed.add(std::string(sock::name(static_cast<sock::CloseReason>(r))), closed[r]);
    sk.refused.add(std::string(sock::name(static_cast<sock::CloseReason>(r))), refused[r]);
  }

  // o2iblnd: the engines' counters summed, the transports' (completions,
  // CM events); the connections by count (their credits with "o2ib
  // connections").
  if (std::any_of(views.begin(), views.end(), [](const Worker::StatusPage& v) { return v.has_o2ib; })) {
    o2ib::Stats t;
    o2ib::VerbsStats vs;
    std::uint64_t conns = 0;
    for (const Worker::StatusPage& v : views) {
      conns += v.ib_connections;
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
      for (const o2ib::VerbsStats& y : v.verbs) vs += y;
    }
    static constexpr o2ib::MsgType kTypes[] = {o2ib::MsgType::connreq,  o2ib::MsgType::connack,  o2ib::MsgType::noop,
                                               o2ib::MsgType::immediate, o2ib::MsgType::put_req, o2ib::MsgType::put_nak,
                                               o2ib::MsgType::put_ack,  o2ib::MsgType::put_done, o2ib::MsgType::get_req,
                                               o2ib::MsgType::get_done};
    status::O2iblnd& o = st.o2iblnd.emplace();
    o.conns_accepted = t.conns_accepted, o.conns_connected = t.conns_connected, o.reconnects = t.reconnects;
    for (std::size_t r = 0; r < o2ib::kConnectFailureCount; ++r)
      o.connect_failed.add(std::string(o2ib::name(static_cast<o2ib::ConnectFailure>(r))), t.connect_failed[r]);
    for (std::size_t r = 0; r < o2ib::kCloseReasonCount; ++r)
      o.closed.add(std::string(o2ib::name(static_cast<o2ib::CloseReason>(r))), t.closed[r]);
    for (std::size_t r = 1; r < o2ib::kRejectSlots; ++r) {
      const std::string reason(o2ib::to_string(static_cast<o2ib::RejectReason>(r)));
      o.rejects_sent.add(reason, t.rejects_sent[r]);
      o.rejects_received.add(reason, t.rejects_received[r]);
    }
    for (o2ib::MsgType ty : kTypes) o.tx_msgs.add(std::string(o2ib::to_string(ty)), t.tx_msgs[o2ib::type_slot(ty)]);
    for (o2ib::MsgType ty : kTypes) o.rx_msgs.add(std::string(o2ib::to_string(ty)), t.rx_msgs[o2ib::type_slot(ty)]);
    o.rx_bytes = t.rx_bytes, o.tx_bytes = t.tx_bytes;
    o.rdma_bytes_written = t.rdma_bytes_written, o.rdma_bytes_received = t.rdma_bytes_received;
    o.bytes_copied = t.bytes_copied, o.bytes_gathered = t.bytes_gathered, o.bytes_bounced = t.bytes_bounced;
    o.completions = vs.completions, o.cq_polls = vs.polls, o.cm_events = vs.cm_events;
    o.send_posts = vs.send_posts, o.recv_posts = vs.recv_posts;
    o.post_failures = vs.post_failures, o.cq_errors = vs.cq_errors;
    o.sink_registrations = vs.sink_registrations, o.sink_registration_ns = vs.sink_registration_ns;
    o.sink_windows = vs.sink_windows, o.sink_windows_refused = vs.sink_windows_refused;
    o.windows_allocated = vs.windows_allocated, o.windows_lost = vs.windows_lost;
    o.remote_keys = setup_.o2ib_transfer_keys ? "transfer" : "pool";
    o.tx_timeouts = t.tx_timeouts, o.tx_no_desc = t.tx_no_desc, o.tx_descs = t.tx_descs;
    o.conns_refused = t.conns_refused, o.connreqs_rate_limited = t.connreqs_rate_limited;
    o.connections = conns;
  }

  // DPDK ports: the device, and what its queues' stacks counted (summed
  // over the workers serving them).
  for (std::size_t i = 0; i < fabric_.ports.size(); ++i) {
    const tcp::EthPort& p = *fabric_.ports[i];
    status::Port& o = st.ports.emplace_back();
    tcp::PortStats ps;
    tcp::StackStats ss;
    std::uint64_t copied = 0, conns = 0, rx_referenced = 0, tx_held = 0, half_open = 0;
    tcp::Conn::Stats ts{};
    for (std::size_t w = 0; w < views.size(); ++w) {
      if (i >= views[w].lanes.size() || !views[w].lanes[i].served) continue;
      const Worker::LaneStats& l = views[w].lanes[i];
      ps.rx_frames += l.port.rx_frames, ps.tx_frames += l.port.tx_frames;
      ps.rx_bytes += l.port.rx_bytes, ps.tx_bytes += l.port.tx_bytes;
      ps.tx_dropped += l.port.tx_dropped, ps.rx_multiseg += l.port.rx_multiseg, ps.tx_backlog += l.port.tx_backlog;
      ps.tx_chained += l.port.tx_chained, ss.bytes_referenced += l.stack.bytes_referenced;
      ps.tx_stalls += l.port.tx_stalls;
      ps.rx_frames_kept += l.port.rx_frames_kept, ps.rx_frames_held += l.port.rx_frames_held;
      ps.rx_keep_refused += l.port.rx_keep_refused, rx_referenced += l.transport.bytes_referenced;
      ps.tx_frames_held += l.port.tx_frames_held, ps.tx_hold_refused += l.port.tx_hold_refused;
      tx_held += l.transport.bytes_held;
      ps.rx_steered_out += l.port.rx_steered_out, ps.rx_steer_dropped += l.port.rx_steer_dropped;
      ss.csum_odd_chains += l.stack.csum_odd_chains;
      ss.tso_frames += l.stack.tso_frames, ss.tso_segments += l.stack.tso_segments;
      ss.tso_cut_here += l.stack.tso_cut_here;
      ps.rx_lro += l.port.rx_lro, ss.large_segments_in += l.stack.large_segments_in;
      ss.chains_in += l.stack.chains_in, ss.chain_pieces += l.stack.chain_pieces;
      ps.impair_dropped += l.port.impair_dropped, ps.impair_duplicated += l.port.impair_duplicated;
      ps.impair_reordered += l.port.impair_reordered, ps.impair_delayed += l.port.impair_delayed;
      ss.arp_requests_in += l.stack.arp_requests_in, ss.arp_replies_out += l.stack.arp_replies_out;
      ss.arp_requests_out += l.stack.arp_requests_out, ss.icmp_echo_replies += l.stack.icmp_echo_replies;
      ss.nd_solicits_in += l.stack.nd_solicits_in, ss.nd_adverts_out += l.stack.nd_adverts_out;
      ss.nd_solicits_out += l.stack.nd_solicits_out, ss.mld_reports_out += l.stack.mld_reports_out;
      ss.resets_out += l.stack.resets_out, ss.dropped_malformed += l.stack.dropped_malformed;
      ss.dropped_not_ours += l.stack.dropped_not_ours, ss.dropped_unresolved += l.stack.dropped_unresolved;
      ss.dropped_overload += l.stack.dropped_overload;
      ss.syncookies_sent += l.stack.syncookies_sent, ss.syncookies_accepted += l.stack.syncookies_accepted;
      ss.syncookies_refused += l.stack.syncookies_refused;
      half_open += l.half_open;
      ss.csum_offloaded += l.stack.csum_offloaded, ss.csum_verified += l.stack.csum_verified;
      copied += l.port.bytes_copied + l.transport.bytes_copied + l.stack.bytes_copied + l.stack.chain_bytes_copied;
      ts += l.tcp;
      conns += l.connections;
      // Several queues: each, with the frames passed between queues' workers.
      o.per_queue.push_back({l.queue, w, l.port.rx_frames, l.port.tx_frames, l.port.rx_steered_out,
                             l.port.rx_steered_in, l.connections, l.tcp.segments_in});
    }
    const auto& m = p.mac();
    char mac[18];
    std::snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    o.name = p.config().name;
    o.device = p.config().device;
    o.mac = mac;
    o.link = p.link_up() ? "up" : "down";
    o.mtu = p.config().mtu, o.queues = p.config().queues;
    o.rx_frames = ps.rx_frames, o.tx_frames = ps.tx_frames, o.rx_bytes = ps.rx_bytes, o.tx_bytes = ps.tx_bytes;
    o.tx_dropped = ps.tx_dropped, o.tx_backlog = ps.tx_backlog, o.rx_multiseg = ps.rx_multiseg;
    o.tcp_connections = conns, o.bytes_copied = copied;
    o.zero_copy = p.tx_chains(), o.bytes_referenced = ss.bytes_referenced;
    o.rx_zero_copy = p.frames_budget() > 0, o.rx_bytes_referenced = rx_referenced;
    o.rx_frames_kept = ps.rx_frames_kept, o.rx_frames_held = ps.rx_frames_held;
    o.rx_frames_budget = static_cast<std::uint64_t>(p.frames_budget()) * p.config().queues;
    o.rx_keep_refused = ps.rx_keep_refused;
    o.tx_bytes_held = tx_held, o.tx_frames_held = ps.tx_frames_held, o.tx_hold_refused = ps.tx_hold_refused;
    o.tx_stalls = ps.tx_stalls, o.tx_chained = ps.tx_chained, o.csum_odd_chains = ss.csum_odd_chains;
    o.checksum_offload = {p.tx_offloads().tx_ipv4, p.tx_offloads().tx_tcp, p.rx_checksum()};
    o.tso = p.tx_offloads().tso_frame > 0;
    o.tso_frames = ss.tso_frames, o.tso_segments = ss.tso_segments, o.tso_cut_here = ss.tso_cut_here;
    o.lro = p.lro(), o.rx_lro = ps.rx_lro, o.large_segments_in = ss.large_segments_in;
    o.rx_chained = ss.chains_in, o.rx_chain_buffers = ss.chain_pieces;
    o.csum_offloaded = ss.csum_offloaded, o.csum_verified = ss.csum_verified;
    o.arp_requests_in = ss.arp_requests_in, o.arp_replies_out = ss.arp_replies_out;
    o.arp_requests_out = ss.arp_requests_out, o.icmp_echo_replies = ss.icmp_echo_replies;
    o.nd = {ss.nd_solicits_in, ss.nd_adverts_out, ss.nd_solicits_out, ss.mld_reports_out};
    o.resets_out = ss.resets_out, o.dropped_malformed = ss.dropped_malformed;
    o.dropped_not_ours = ss.dropped_not_ours, o.dropped_unresolved = ss.dropped_unresolved;
    o.dropped_overload = ss.dropped_overload, o.tcp_half_open = half_open;
    o.syncookies_sent = ss.syncookies_sent, o.syncookies_accepted = ss.syncookies_accepted;
    o.syncookies_refused = ss.syncookies_refused;
    o.tcp = {ts.segments_in,  ts.segments_out,          ts.retransmits,          ts.fast_retransmits,
             ts.timeouts,     ts.lost_retransmits,      ts.tail_probes,          ts.tail_probe_recoveries,
             ts.invalid_acks_limited, ts.out_of_order,  ts.bytes_reassembled,    ts.bytes_reassembled_kept,
             ts.duplicates};
    o.impair = {ps.impair_dropped, ps.impair_duplicated, ps.impair_reordered, ps.impair_delayed};
    // Whether the device steers peers to their queues itself.
    o.rss = p.rss_steers(), o.rx_steered = ps.rx_steered_out, o.rx_steer_dropped = ps.rx_steer_dropped;
  }

  for (std::uint32_t w = 0; w < fabric_.n; ++w) {
    const WorkerCounters& c = shared_.counters[w];
    status::Worker& o = st.workers.emplace_back();
    o.cpt = w, o.core = setup_.cores[w];
    o.loops = c.loops.get(), o.busy_loops = c.busy_loops.get();
    o.cycles = c.cycles.get(), o.busy_cycles = c.busy_cycles.get(), o.cpu_ns = c.cpu_ns.get();
    o.route_count = c.route_count.get(), o.route_length = c.route_length.get();
    o.bytes_copied = c.bytes_copied.get(), o.bytes_referenced = c.bytes_referenced.get();
    o.rx_bytes_referenced = c.rx_bytes_referenced.get();
    // Its inbound rings: capacity each, and what waits in them now.
    for (std::uint32_t from = 0; from < fabric_.n; ++from) {
      if (from == w) continue;
      o.ring_backlog += rte_ring_count(fabric_.ring(from, w));
      o.ring_size = rte_ring_get_capacity(fabric_.ring(from, w));
    }
    o.status_answered = fresh[w];
    o.conns_misplaced = views[w].conns_misplaced;
    o.conns_opened = views[w].sock.conns_accepted + views[w].sock.conns_connected + views[w].ib.conns_accepted +
                     views[w].ib.conns_connected;
    o.rx_msgs = views[w].sock.rx_msgs, o.tx_msgs = views[w].sock.tx_msgs;
    // The route snapshot it forwards with (shared memory, dataplane.shm_name).
    const shm::WorkerShm& ws = region_.worker(w);
    o.route_version = ws.held_version.load(std::memory_order_relaxed);
    o.route_snapshots_adopted = ws.adopted.load(std::memory_order_relaxed);
    o.route_snapshots_rejected = ws.rejected.load(std::memory_order_relaxed);
  }
  return status::encode(st);
}

}  // namespace lnetr::dp
