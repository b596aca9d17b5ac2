#include "cli/peer/endpoint.hpp"

#include <cstdio>
#include "router/enum_names.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

#include "cli/peer/pattern.hpp"
#include "cli/peer/ping.hpp"
#include "lnd/o2iblnd/verbs.hpp"
#include "lnd/socklnd/socket.hpp"
#include "router/ping_info.hpp"

namespace lnetr::peer {

using namespace std::chrono_literals;

// ---- names ------------------------------------------------------------------

LNETR_ENUM_NAMES(, DropReason, LNETR_PEER_DROP_REASONS)

LNETR_ENUM_NAMES(, OpError, LNETR_PEER_OP_ERRORS)

// ---- private types ------------------------------------------------------------

namespace {

constexpr std::size_t kSmallBuffer = 4096;
constexpr auto kTickInterval = 250ms;
constexpr std::size_t kMaxPingSink = kPingHeaderSize + kPingNid4EntrySize * kPingMaxNis;
constexpr std::size_t kHandles = 4096;
constexpr unsigned kDpdkEpollEvery = 64;  // on a DPDK port: turns between polls of the signalfd

// rx.cookie of a message being dropped (its payload, if any, discarded);
// kDroppedAsym: dropped by drop_asym_route, before anything is learned from it.
char dropped_tag, dropped_asym_tag;
void* const kDropped = &dropped_tag;
void* const kDroppedAsym = &dropped_asym_tag;

}  // namespace

// A receive sink or a REPLY's payload.  `patterned`: the buffer holds the
// test pattern for (seed, offset, len), so a REPLY asking for the same bytes
// again needs no refill.
struct Endpoint::Buffer {
  std::unique_ptr<std::uint8_t[]> data;
  std::size_t cap = 0;
  bool patterned = false;
  std::uint64_t seed = 0;
  std::uint32_t offset = 0;
  std::uint32_t len = 0;
  MutableByteSpan span(std::size_t n) noexcept { return {data.get(), n}; }
};

// A REPLY or ACK this node owes.
struct Endpoint::Response : Sendable {
  Response() : Sendable(Kind::response) {}
  Buffer* buf = nullptr;
};

// SIGINT/SIGTERM through a signalfd, so that epoll_wait is never interrupted
// and a signal is one more event.
class Endpoint::SignalHandler final : public sock::IoHandler {
 public:
  explicit SignalHandler(Endpoint& ep) : ep_(ep) {}
  ~SignalHandler() {
    if (fd_ >= 0) {
      ep_.poller_.remove(fd_);
      ::close(fd_);
    }
  }
  bool open(std::string& err) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0) {
      err = std::string("sigprocmask: ") + std::strerror(errno);
      return false;
    }
    fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd_ < 0 || !ep_.poller_.add(fd_, this)) {
      err = std::string("signalfd: ") + std::strerror(errno);
      return false;
    }
    return true;
  }
  void on_io(std::uint32_t) override {
    signalfd_siginfo si;
    while (::read(fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) ep_.signalled_ = true;
  }

 private:
  Endpoint& ep_;
  int fd_ = -1;
};

// A verbs channel in the poller: connection-manager events, or the
// completion channel that wakes a sleeping loop.
class Endpoint::VerbsEvents final : public sock::IoHandler {
 public:
  VerbsEvents(Endpoint& ep, bool cm) : ep_(ep), cm_(cm) {}
  void on_io(std::uint32_t) override {
    if (cm_) {
      ep_.ib_tr_->poll_cm();
    } else {
      ep_.ib_tr_->on_wake();
    }
  }

 private:
  Endpoint& ep_;
  bool cm_;
};

// The router checker's state for one gateway: its ping and push Ops.
struct Endpoint::GatewayCheck {
  std::size_t gw = 0;
  Op ping;
  Op push;
  std::vector<std::uint8_t> sink = std::vector<std::uint8_t>(kPingSinkDiscovery);
  Clock::time_point next{};
  bool running = false;
  GatewayVerdict ping_verdict = GatewayVerdict::unchecked;
};

// ---- construction -----------------------------------------------------------------

Endpoint::Endpoint(EndpointConfig cfg)
    : cfg_(std::move(cfg)),
      incarnation_(sock::new_incarnation()),
      self_{kPidLustre, cfg_.nid},
      ping_info_(own_ping_info(cfg_.nid)),
      handles_(incarnation_, kHandles) {
  if (!on_o2ib() && !cfg_.dpdk)
    node_ = std::make_unique<sock::Node>(cfg_.sock, std::vector<sock::LocalNi>{{cfg_.nid}}, incarnation_, poller_,
                                         *this);
  active_.reserve(kHandles);
  completed_.reserve(kHandles);
  delivering_.reserve(kHandles);
}

Endpoint::~Endpoint() {
  shutdown();
  acceptor_.reset();
  node_.reset();
  if (ib_tr_) {
    poller_.remove(ib_tr_->cm_fd());
    poller_.remove(ib_tr_->comp_fd());
  }
  ib_.reset();
  ib_tr_.reset();
  ib_dev_.reset();
}

namespace {

// Can we bind a privileged source port on `ip`, as every connect needs?
bool check_privileged_bind(const sock::IpAddr& ip, std::string& err) {
  const int fd = ::socket(sock::af(ip), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  const std::string where = sock::to_string(ip);
  for (int port = sock::kPrivilegedPortMax; port >= sock::kPrivilegedPortMin; --port) {
    const sock::SockAddr a = sock::to_sockaddr({ip, static_cast<std::uint16_t>(port)});
    if (::bind(fd, a.get(), a.len) == 0) {
      ::close(fd);
      return true;
    }
    const int e = errno;
    if (e == EADDRINUSE) continue;
    ::close(fd);
    if (e == EACCES || e == EPERM)
      err = "cannot bind a privileged port on " + where +
            ": lnetr-peer must run as root (or with CAP_NET_BIND_SERVICE), because socklnd connects from "
            "ports 1023..512 and listens on 988 as a kernel node does";
    else if (e == EADDRNOTAVAIL)
      err = "address " + where + " is not configured on this host";
    else
      err = "bind " + where + ": " + std::strerror(e);
    return false;
  }
  ::close(fd);
  err = "no free privileged port (1023..512) on " + where;
  return false;
}

}  // namespace

bool Endpoint::open(std::string& err) {
  if (!poller_.ok()) {
    err = std::string("epoll: ") + std::strerror(errno);
    return false;
  }
  if ((cfg_.nid.lnd() != LndType::sock && cfg_.nid.lnd() != LndType::o2ib) ||
      (!cfg_.nid.is_nid4() && cfg_.nid.lnd() != LndType::sock)) {
    err = "NID " + to_string(cfg_.nid) + ": lnetr-peer serves one NID on a socklnd (tcp, IPv4 or IPv6) or "
          "o2iblnd (o2ib, IPv4) net";
    return false;
  }
  for (const RouteSpec& r : cfg_.routes)
    if (!routes_.add(r, cfg_.nid.net(), err)) return false;
  // Signals blocked before any library starts threads of its own (DPDK's
  // EAL, verbs), which would otherwise take SIGINT and die of it.
  signals_ = std::make_unique<SignalHandler>(*this);
  if (!signals_->open(err)) return false;
  if (on_o2ib()) {
    if (!open_o2ib(err)) return false;
  } else if (cfg_.dpdk) {
    if (!open_dpdk(err)) return false;
  } else {
    if (!check_privileged_bind(sock::IpAddr::of(cfg_.nid), err)) return false;
    acceptor_ = std::make_unique<sock::Acceptor>(cfg_.sock, std::vector<sock::LocalNi>{{cfg_.nid}}, incarnation_,
                                                 poller_, [this](sock::Accepted&& a) { node_->adopt(std::move(a)); });
    if (!acceptor_->listen(err)) {
      err = "cannot listen for socklnd connections (port " + std::to_string(cfg_.sock.port) + "): " + err;
      if (err.find("in use") != std::string::npos)
        err += " (another LNet node - a kernel LNet or another lnetr-peer - already serves this address)";
      return false;
    }
  }
  if (cfg_.router_check_interval.count() > 0) {
    const auto now = Clock::now();
    for (std::size_t i = 0; i < routes_.gateways().size(); ++i) {
      auto c = std::make_unique<GatewayCheck>();
      c->gw = i;
      c->next = now;  // the first check at once, as Linux's monitor does
      checks_.push_back(std::move(c));
    }
  }
  next_tick_ = Clock::now();
  return true;
}

// An o2ib NI: the RDMA device behind its address, a transport on it, the
// engine, and a listener on the o2iblnd port (unless accept=none).
bool Endpoint::open_o2ib(std::string& err) {
  std::string why;
  if (!o2ib::verbs_available(why)) {
    err = "NID " + to_string(cfg_.nid) + " is on an o2ib net, but " + why;
    return false;
  }
  ib_dev_ = o2ib::VerbsDevice::open(cfg_.nid.addr4(), err);
  if (!ib_dev_) return false;
  ib_tr_ = std::make_unique<o2ib::VerbsTransport>(ib_dev_);
  if (!ib_tr_->init(err)) return false;
  o2ib::LocalNi ni;
  ni.nid = cfg_.nid;
  ni.transport = ib_tr_.get();
  ni.tunables = cfg_.o2ib_tunables;
  ib_ = std::make_unique<o2ib::Node>(cfg_.o2ib, std::vector<o2ib::LocalNi>{ni}, o2ib::new_incarnation(), *this);
  if (cfg_.sock.accept != sock::AcceptMode::none &&
      !ib_tr_->listen(cfg_.nid.addr4(), cfg_.o2ib.service,
                      [this](o2ib::ConnRequest&& r) { ib_->accept_request(std::move(r)); }, err)) {
    err += " (another LNet node - a kernel ko2iblnd or another lnetr-peer - may serve this address)";
    return false;
  }
  ib_cm_ = std::make_unique<VerbsEvents>(*this, true);
  ib_comp_ = std::make_unique<VerbsEvents>(*this, false);
  if (!poller_.add(ib_tr_->cm_fd(), ib_cm_.get()) || !poller_.add(ib_tr_->comp_fd(), ib_comp_.get())) {
    err = std::string("epoll: ") + std::strerror(errno);
    return false;
  }
  return true;
}

// A tcp NI on a DPDK port: the Node's connections and the acceptor's on
// lnetr's TCP there (nothing listens on a kernel socket).
bool Endpoint::open_dpdk(std::string& err) {
  if (!cfg_.nid.is_nid4()) {
    err = "NID " + to_string(cfg_.nid) + ": on a DPDK port lnetr-peer speaks IPv4 only";
    return false;
  }
  const std::uint16_t port = cfg_.sock.accept == sock::AcceptMode::none ? 0 : cfg_.sock.port;
  dpdk_ = DpdkLink::open(*cfg_.dpdk, IpAddr::of(cfg_.nid), port, [this](std::unique_ptr<sock::Stream> st) {
    if (acceptor_) acceptor_->take(std::move(st));
  }, err);
  if (!dpdk_) return false;
  const std::vector<sock::LocalNi> nis{{cfg_.nid, &dpdk_->transport()}};
  node_ = std::make_unique<sock::Node>(cfg_.sock, nis, incarnation_, poller_, *this);
  acceptor_ = std::make_unique<sock::Acceptor>(cfg_.sock, nis, incarnation_, poller_,
                                               [this](sock::Accepted&& a) { node_->adopt(std::move(a)); });
  return true;
}

std::optional<DpdkCounters> Endpoint::dpdk_counters() const {
  if (!dpdk_) return std::nullopt;
  return dpdk_->counters();
}

void Endpoint::poll_o2ib() {
  if (!ib_tr_) return;
  while (ib_tr_->poll_cq(64) > 0) {
  }
}

int Endpoint::lnd_send(const Nid& next_hop, lnd::Tx& tx) {
  if (ib_) return ib_->send(next_hop, tx);
  return node_->send(next_hop, tx);
}

const o2ib::Stats* Endpoint::o2ib_stats() const noexcept { return ib_ ? &ib_->stats() : nullptr; }

const sock::Stats& Endpoint::sock_stats() const noexcept {
  static const sock::Stats none{};
  return node_ ? node_->stats() : none;
}

const std::array<std::uint64_t, sock::kCloseReasonCount>& Endpoint::refused() const noexcept {
  return acceptor_ ? acceptor_->refused() : refused_at_shutdown_;
}

// ---- the loop ---------------------------------------------------------------------

void Endpoint::wait(Clock::time_point until) {
  if (node_) node_->flush();  // what the last events and the caller queued, before blocking
  auto now = Clock::now();
  Clock::time_point next = std::min(until, next_tick_);
  for (const Op* op : active_) next = std::min(next, op->deadline_);
  long ms = 0;
  if (next > now) ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
  if (ib_tr_) {
    // Completions first; sleep only with the completion channel armed and
    // nothing arrived since (else a completion could wait out the sleep).
    if (ib_tr_->poll_cq(64) > 0 || !ib_tr_->arm() || ib_tr_->poll_cq(64) > 0) ms = 0;
  }
  if (dpdk_) {
    // A port cannot wake us: poll it (and the signals), flush what that
    // and the caller queued, and nap only after a run of empty turns.
    unsigned work = dpdk_->poll();
    // (Only the signalfd is in the epoll set: not a system call every turn.)
    if (++epoll_turn_ >= kDpdkEpollEvery) {
      epoll_turn_ = 0;
      work += static_cast<unsigned>(poller_.poll(0));
    }
    node_->flush();
    work += dpdk_->flush();
    dpdk_->rest(work);
  } else {
    poller_.poll(static_cast<int>(std::clamp(ms, 0l, 1000l)));
  }
  poll_o2ib();

  now = Clock::now();
  if (now >= next_tick_) tick(now);
  for (std::size_t i = active_.size(); i-- > 0;) {
    if (i < active_.size() && active_[i]->deadline_ <= now) finish(*active_[i], OpError::timeout, -ETIMEDOUT);
  }
  if (node_) node_->reap();
  if (ib_) ib_->reap();
  if (acceptor_) acceptor_->reap();
}

void Endpoint::tick(Clock::time_point now) {
  if (node_) node_->tick(now);
  if (ib_) ib_->tick();
  if (acceptor_) acceptor_->tick(now);
  check_gateways(now);
  next_tick_ = now + kTickInterval;
}

void Endpoint::deliver() {
  while (!completed_.empty()) {
    delivering_.swap(completed_);
    for (Op* op : delivering_)
      if (op->listener) op->listener->op_done(*op);
    delivering_.clear();
  }
}

void Endpoint::flush(Clock::duration limit) {
  run([this] { return responses_in_flight() == 0; }, Clock::now() + limit);
}

void Endpoint::shutdown() {
  if (shut_) return;
  shut_ = true;
  if (node_) {
    node_->flush();  // what run() queued before it returned goes out, not failed
    node_->shutdown();
    node_->reap();
  }
  if (ib_) {
    ib_->shutdown();
    ib_->reap();
  }
  if (acceptor_) refused_at_shutdown_ = acceptor_->refused();
  acceptor_.reset();
  if (dpdk_) {
    // The connections' last segments (FIN or RST) leave before the stack
    // goes with the process, as the kernel's would after close().
    const auto until = Clock::now() + std::chrono::milliseconds(200);
    while (dpdk_->connections() > 0 && Clock::now() < until) {
      dpdk_->poll();
      dpdk_->flush();
    }
  }
  while (!active_.empty()) finish(*active_.back(), OpError::aborted, -ESHUTDOWN);
  completed_.clear();
}

// ---- originating ------------------------------------------------------------------

const Nid* Endpoint::next_hop_for(const Nid& dest) noexcept {
  if (dest.net() == cfg_.nid.net()) return dest == cfg_.nid ? nullptr : &dest;
  return routes_.select(dest.net());
}

void Endpoint::start(Op& op) {
  assert(op.idle() && "an Op is started again only once idle()");
  assert((op.kind == OpKind::ping || op.kind == OpKind::get ? op.sink.size() : op.payload.size()) >= op.size);
  op.error = OpError::none;
  op.status = 0;
  op.mlength = 0;
  op.received = 0;
  op.bad_offset = 0;
  op.sent_ = op.answered_ = false;
  op.answer_error_ = OpError::none;
  op.started = Clock::now();
  op.finished = {};
  op.deadline_ = op.started + op.timeout;
  op.active_ = true;
  active_.push_back(&op);
  if (shut_) return finish(op, OpError::aborted, -ESHUTDOWN);

  const Nid* hop = next_hop_for(op.dest);
  if (!hop) return finish(op, OpError::no_route, -EHOSTUNREACH);
  op.next_hop = *hop;
  op.handle_ = handles_.issue(&op);
  if (op.handle_.is_none()) return finish(op, OpError::no_handle, -ENOMEM);

  const ProcessId dest{kPidLustre, op.dest};
  switch (op.kind) {
    case OpKind::ping:
      op.tx.hdr = make_get(self_, dest, kLnetReservedPortal, kPingMatchBits, op.handle_, op.size);
      op.tx.payload = {};
      op.tx.reply_sink = op.sink.first(op.size);
      break;
    case OpKind::get:
      op.tx.hdr = make_get(self_, dest, kTestPortal, op.seed, op.handle_, op.size, op.offset);
      op.tx.payload = {};
      // (An LND that can take the REPLY straight into the sink does: o2ib.)
      op.tx.reply_sink = op.sink.first(op.size);
      break;
    case OpKind::push:
      op.tx.hdr = make_put(self_, dest, kLnetReservedPortal, kPingMatchBits, op.handle_, 0, op.size);
      op.tx.payload = op.payload.first(op.size);
      op.tx.reply_sink = {};
      break;
    case OpKind::put:
      op.tx.hdr = make_put(self_, dest, kTestPortal, op.seed, op.handle_, 0, op.size, op.offset);
      op.tx.payload = op.payload.first(op.size);
      op.tx.reply_sink = {};
      break;
  }
  op.tx.cookie = static_cast<Sendable*>(&op);
  op.tx_busy_ = true;
  // May call on_sent() before returning (a connection that fails at once).
  const int rc = lnd_send(op.next_hop, op.tx);
  if (rc < 0) {
    op.tx_busy_ = false;
    finish(op, OpError::send_failed, rc);
  }
}

void Endpoint::finish(Op& op, OpError e, int status) {
  if (!op.active_) return;
  op.active_ = false;
  op.error = e;
  op.status = status;
  op.finished = Clock::now();
  handles_.retire(op.handle_);
  op.handle_ = WireHandle::none();
  auto it = std::find(active_.begin(), active_.end(), &op);
  if (it != active_.end()) {
    *it = active_.back();
    active_.pop_back();
  }
  completed_.push_back(&op);
}

void Endpoint::maybe_complete(Op& op) {
  if (!op.active_ || !op.sent_ || !op.answered_) return;
  const OpError e = op.answer_error_;
  int status = 0;
  switch (e) {
    case OpError::none: break;
    case OpError::reply_too_long: status = -EMSGSIZE; break;
    case OpError::reply_short:
    case OpError::reply_corrupt:
    case OpError::ack_short: status = -EIO; break;
    default: status = -EIO; break;
  }
  finish(op, e, status);
}

// ---- receiving --------------------------------------------------------------------

void Endpoint::drop(lnd::Rx& rx, DropReason why) {
  ++stats_.drops[static_cast<std::size_t>(why)];
  rx.discard = true;
  rx.cookie = kDropped;
}

lnd::RxVerdict Endpoint::on_head(lnd::Rx& rx) {
  const LnetHeader& h = rx.hdr;
  rx.cookie = nullptr;
  if (h.dest_nid != cfg_.nid) {
    // For another NID of the net it arrived on: a protocol error (Linux
    // closes the connection); for another net: a router's job, not ours.
    if (h.dest_nid.net() == rx.ni.net()) {
      ++stats_.protocol_errors;
      return lnd::RxVerdict::reject;
    }
    drop(rx, DropReason::not_for_us);
    return lnd::RxVerdict::accept;
  }
  // LNet's asymmetric-route check: from a remote net, it must come through
  // the gateway of one of our routes to that net.
  if (cfg_.drop_asym_route && h.src_nid.net() != rx.from.net() && !routes_.routes_back(h.src_nid.net(), rx.from)) {
    drop(rx, DropReason::asym_route);
    rx.cookie = kDroppedAsym;
    return lnd::RxVerdict::accept;
  }
  switch (h.type) {
    case MsgType::ack: {
      Op* op = handles_.find(h.ack().dst_wmd);
      if (!op || (op->kind != OpKind::put && op->kind != OpKind::push) || op->answered_) {
        drop(rx, DropReason::unmatched_ack);
      } else {
        rx.cookie = op;
      }
      return lnd::RxVerdict::accept;
    }
    case MsgType::reply: {
      Op* op = handles_.find(h.reply().dst_wmd);
      if (!op || (op->kind != OpKind::get && op->kind != OpKind::ping) || op->answered_ || op->rx_busy_) {
        drop(rx, DropReason::unmatched_reply);
      } else if (h.payload_length > op->size) {
        drop(rx, DropReason::reply_too_long);
        finish(*op, OpError::reply_too_long, -EMSGSIZE);
      } else {
        op->rx_busy_ = true;
        rx.sink = op->sink.first(h.payload_length);
        rx.cookie = op;
      }
      return lnd::RxVerdict::accept;
    }
    case MsgType::get: {
      // No payload: answered in on_received().  A GET we answer names its
      // REPLY now (an o2ib GET_REQ's REPLY goes on the GET's own exchange).
      const GetFields g = h.get();
      if (is_ping(h) || g.ptl_index == kTestPortal) {
        Response* r = take_response();
        r->tx.o2ib_get = nullptr;
        rx.reply = &r->tx;
        rx.cookie = r;
      }
      return lnd::RxVerdict::accept;
    }
    case MsgType::put: {
      const PutFields p = h.put();
      if (p.ptl_index == kLnetReservedPortal && p.match_bits != kPingMatchBits) {
        drop(rx, DropReason::portal0_no_match);
      } else if (p.ptl_index != kLnetReservedPortal && p.ptl_index != kTestPortal) {
        drop(rx, DropReason::no_portal);
      } else {
        Buffer* b = take_buffer(h.payload_length);
        rx.sink = b->span(h.payload_length);
        rx.cookie = b;
      }
      return lnd::RxVerdict::accept;
    }
    case MsgType::hello:
      break;
  }
  return lnd::RxVerdict::reject;  // check_header() lets no HELLO through
}

void Endpoint::on_received(lnd::Rx& rx) {
  const LnetHeader& h = rx.hdr;
  stats_.rx.count(h.type, h.payload_length);
  if (rx.cookie == kDroppedAsym) return;  // nothing learned from it (no gateway revived)
  if (rx.from != h.src_nid) routes_.heard_routed_from(rx.from);
  if (rx.cookie == kDropped) return;

  switch (h.type) {
    case MsgType::ack: {
      Op& op = *static_cast<Op*>(rx.cookie);
      op.answered_ = true;
      op.mlength = h.ack().mlength;
      if (op.kind == OpKind::put && op.mlength != op.size) op.answer_error_ = OpError::ack_short;
      maybe_complete(op);
      return;
    }
    case MsgType::reply: {
      Op& op = *static_cast<Op*>(rx.cookie);
      op.rx_busy_ = false;
      if (!op.active_) {  // timed out while its REPLY was arriving
        ++stats_.drops[static_cast<std::size_t>(DropReason::unmatched_reply)];
        return;
      }
      op.answered_ = true;
      op.received = h.payload_length;
      if (op.kind == OpKind::get) {
        if (op.received != op.size) {
          op.answer_error_ = OpError::reply_short;
        } else if (op.verify) {
          const std::size_t bad = find_pattern_mismatch(op.sink.first(op.received), op.seed, op.offset);
          if (bad != kPatternOk) {
            op.answer_error_ = OpError::reply_corrupt;
            op.bad_offset = bad;
          }
        }
      }
      maybe_complete(op);
      return;
    }
    case MsgType::get: {
      const GetFields g = h.get();
      auto* r = static_cast<Response*>(rx.cookie);
      if (is_ping(h)) {
        answer_ping(rx, r);
      } else if (g.ptl_index == kTestPortal) {
        answer_test_get(rx, r);
      } else {
        ++stats_.drops[static_cast<std::size_t>(g.ptl_index == kLnetReservedPortal ? DropReason::portal0_no_match
                                                                                   : DropReason::no_portal)];
      }
      return;
    }
    case MsgType::put: {
      Buffer* b = static_cast<Buffer*>(rx.cookie);
      const PutFields p = h.put();
      const ByteSpan got(b->data.get(), h.payload_length);
      if (is_push(h)) {
        // The push target takes what fits its buffer (272 bytes at first)
        // and, as Linux re-posts a larger one, grows for the next push.
        ++stats_.pushes_received;
        const auto taken = static_cast<std::uint32_t>(std::min<std::size_t>(got.size(), push_capacity_));
        if (auto info = decode_ping_info(got.first(taken)))
          apply_push(rx.hdr.src_nid, *info);
        else
          ++stats_.pushes_invalid;
        push_capacity_ = std::max<std::size_t>(push_capacity_, got.size());
        if (!p.ack_wmd.is_none()) answer_put(rx, taken);
      } else {
        const bool ok = find_pattern_mismatch(got, p.match_bits, p.offset) == kPatternOk;
        if (ok) ++stats_.puts_verified; else ++stats_.pattern_errors;
        if (!p.ack_wmd.is_none()) answer_put(rx, ok ? h.payload_length : 0);
      }
      give_buffer(b);
      return;
    }
    case MsgType::hello:
      return;
  }
}

void Endpoint::on_rx_aborted(lnd::Rx& rx) {
  if (rx.cookie == kDropped || rx.cookie == kDroppedAsym || rx.cookie == nullptr) return;
  if (rx.hdr.type == MsgType::get) {  // the Response named in on_head(), unused
    free_responses_.push_back(static_cast<Response*>(rx.cookie));
    return;
  }
  ++stats_.drops[static_cast<std::size_t>(DropReason::rx_aborted)];
  if (rx.hdr.type == MsgType::reply) {
    static_cast<Op*>(rx.cookie)->rx_busy_ = false;  // the Op times out
  } else if (rx.hdr.type == MsgType::put) {
    give_buffer(static_cast<Buffer*>(rx.cookie));
  }
}

void Endpoint::on_sent(lnd::Tx& tx, int status) {
  auto* s = static_cast<Sendable*>(tx.cookie);
  if (status == 0) stats_.tx.count(tx.hdr.type, tx.payload.size());
  if (s->kind == Sendable::Kind::op) {
    Op& op = static_cast<Op&>(*s);
    op.tx_busy_ = false;
    if (!op.active_) return;
    if (status < 0) {
      finish(op, OpError::send_failed, status);
    } else {
      op.sent_ = true;
      maybe_complete(op);
    }
    return;
  }
  auto& r = static_cast<Response&>(*s);
  if (status < 0) ++stats_.response_failures;
  if (r.buf) give_buffer(r.buf);
  r.buf = nullptr;
  free_responses_.push_back(&r);
}

void Endpoint::on_peer_down(const Nid&) {
  // Nothing to do: queued sends have failed already (on_sent), and an Op
  // waiting for its answer times out as LNet's would.
}

// ---- answering --------------------------------------------------------------------

void Endpoint::answer_ping(const lnd::Rx& rx, Response* r) {
  ++stats_.pings_answered;
  const ByteSpan payload = ping_reply_payload(rx.hdr, ping_info_);
  const LnetHeader hdr = make_reply(rx.hdr, rx.hdr.dest_nid, static_cast<std::uint32_t>(payload.size()));
  send_response(r, rx, hdr, payload, nullptr);
}

void Endpoint::answer_test_get(const lnd::Rx& rx, Response* r) {
  ++stats_.gets_served;
  const GetFields g = rx.hdr.get();
  const std::uint32_t len = std::min(g.sink_length, kLnetMtu);
  Buffer* b = nullptr;
  auto& pool = len <= kSmallBuffer ? free_small_ : free_large_;
  for (auto it = pool.begin(); it != pool.end(); ++it) {
    Buffer* c = *it;
    if (c->patterned && c->seed == g.match_bits && c->offset == g.src_offset && c->len == len) {
      b = c;
      *it = pool.back();
      pool.pop_back();
      break;
    }
  }
  if (!b) {
    b = take_buffer(len);
    fill_pattern(b->span(len), g.match_bits, g.src_offset);
    b->patterned = true;
    b->seed = g.match_bits;
    b->offset = g.src_offset;
    b->len = len;
  }
  const LnetHeader hdr = make_reply(rx.hdr, rx.hdr.dest_nid, len);
  send_response(r, rx, hdr, b->span(len), b);
}

void Endpoint::answer_put(const lnd::Rx& rx, std::uint32_t mlength) {
  Response* r = take_response();
  r->tx.o2ib_get = nullptr;
  send_response(r, rx, make_ack(rx.hdr, rx.hdr.dest_nid, mlength), {}, nullptr);
}

// Answers go to the previous hop: the requester itself, or the gateway the
// request came through (as Linux prefers for responses).
void Endpoint::send_response(Response* r, const lnd::Rx& rx, const LnetHeader& hdr, ByteSpan payload,
                             Buffer* buf) {
  r->tx.hdr = hdr;
  r->tx.payload = payload;
  r->tx.reply_sink = {};
  r->tx.pieces = {};
  r->tx.cookie = static_cast<Sendable*>(r);
  r->buf = buf;
  if (shut_ || lnd_send(rx.from, r->tx) < 0) {
    ++stats_.response_failures;
    if (buf) give_buffer(buf);
    r->buf = nullptr;
    free_responses_.push_back(r);
  }
}

Endpoint::Response* Endpoint::take_response() {
  if (free_responses_.empty()) {
    responses_.push_back(std::make_unique<Response>());
    free_responses_.reserve(responses_.capacity());
    return responses_.back().get();
  }
  Response* r = free_responses_.back();
  free_responses_.pop_back();
  return r;
}

Endpoint::Buffer* Endpoint::take_buffer(std::size_t size) {
  auto& pool = size <= kSmallBuffer ? free_small_ : free_large_;
  Buffer* b = nullptr;
  if (pool.empty()) {
    auto nb = std::make_unique<Buffer>();
    nb->cap = size <= kSmallBuffer ? kSmallBuffer : kLnetMtu;
    nb->data.reset(new std::uint8_t[nb->cap]);
    b = nb.get();
    buffers_.push_back(std::move(nb));
    pool.reserve(buffers_.size());
  } else {
    b = pool.back();
    pool.pop_back();
  }
  b->patterned = false;
  return b;
}

void Endpoint::give_buffer(Buffer* b) noexcept {
  (b->cap == kSmallBuffer ? free_small_ : free_large_).push_back(b);
}

// ---- router checker ---------------------------------------------------------------

// A Multi-Rail gateway pushed its ping info (its NIs' status changed):
// Linux applies it at once, as it would its ping reply.  Each route through
// it that becomes usable or unusable is said on stderr.
void Endpoint::apply_push(const Nid& from, const PingInfo& info) {
  const auto gw = routes_.gateway_index(from);
  if (!gw || (info.features & ping_feature::multi_rail) == 0) return;
  auto usable = [this, gw](const RouteTable::Route& r) {
    return routes_.gateways()[*gw].usable() && !r.remote_ni_down;
  };
  std::vector<bool> before;
  for (const auto& r : routes_.routes()) before.push_back(usable(r));
  routes_.record_ping(*gw, info, cfg_.nid.net());
  for (std::size_t i = 0; i < routes_.routes().size(); ++i) {
    const auto& r = routes_.routes()[i];
    if (r.gateway != *gw || usable(r) == before[i]) continue;
    std::fprintf(stderr, "lnetr-peer: push from %s: route %s via %s %s\n", to_string(from).c_str(),
                 to_string(r.net).c_str(), to_string(from).c_str(), usable(r) ? "up" : "down");
  }
}

void Endpoint::check_gateways(Clock::time_point now) {
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::clamp<std::chrono::seconds>(cfg_.router_check_interval, 1s, 50s));
  for (std::size_t i = 0; i < checks_.size(); ++i) {
    GatewayCheck& c = *checks_[i];
    if (c.running || now < c.next || !c.ping.idle() || !c.push.idle()) continue;
    c.running = true;
    c.next = now + cfg_.router_check_interval;
    c.ping.kind = OpKind::ping;
    c.ping.dest = routes_.gateways()[c.gw].nid;
    c.ping.size = static_cast<std::uint32_t>(c.sink.size());
    c.ping.sink = c.sink;
    c.ping.timeout = timeout;
    c.ping.listener = this;
    c.ping.tag = i;
    start(c.ping);
  }
}

void Endpoint::op_done(Op& op) {
  GatewayCheck& c = *checks_[op.tag];
  if (&op == &c.push) {
    routes_.record_check(c.gw, op.ok() ? c.ping_verdict : GatewayVerdict::push_failed);
    c.running = false;
    return;
  }
  if (!op.ok()) {
    routes_.record_check(c.gw, GatewayVerdict::ping_failed);
    c.running = false;
    return;
  }
  const ByteSpan got(c.sink.data(), op.received);
  auto info = decode_ping_info(got);
  if (!info && info.error() == WireError::truncated) {
    // Linux retries with a buffer of the size the answer says it needs.
    auto need = ping_info_size(got);
    if (need && *need > c.sink.size() && *need <= kMaxPingSink) {
      c.sink.resize(*need);
      c.ping.size = static_cast<std::uint32_t>(c.sink.size());
      c.ping.sink = c.sink;
      start(c.ping);
      return;
    }
  }
  if (!info) {
    routes_.record_check(c.gw, GatewayVerdict::bad_ping_info);
    c.running = false;
    return;
  }
  c.ping_verdict = routes_.record_ping(c.gw, *info, cfg_.nid.net());
  const RouteTable::Gateway& g = routes_.gateways()[c.gw];
  if (g.multi_rail && g.discovery) {
    // Discovery's second step: push our own ping info (PUT + ACK).
    c.push.kind = OpKind::push;
    c.push.dest = g.nid;
    c.push.payload = ping_info_;
    c.push.size = static_cast<std::uint32_t>(ping_info_.size());
    c.push.timeout = c.ping.timeout;
    c.push.listener = this;
    c.push.tag = op.tag;
    start(c.push);
    return;
  }
  routes_.record_check(c.gw, c.ping_verdict);
  c.running = false;
}

}  // namespace lnetr::peer
