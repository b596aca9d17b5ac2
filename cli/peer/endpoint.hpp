// lnetr-peer's LNet layer: one NI on kernel sockets, a kernel node's target
// behaviour, and the operations its commands originate.
//
// The Endpoint owns the epoll Poller, the socklnd Node and Acceptor, and
// implements lnd::Upper above them.  It is, like a Linux node with routing
// off:
//   a ping target   GET portal 0 + ping match bits -> REPLY with our ping
//                   info from src_offset, truncated to sink_length;
//   a push target   PUT portal 0 + ping match bits -> ACK (mlength = bytes
//                   the push buffer took: 272, growing after a larger push);
//   a test server   PUT portal 42 -> every byte checked against the pattern
//                   (seed = match bits), ACK mlength = length, or 0 if a byte
//                   is wrong; GET portal 42 -> REPLY of sink_length pattern
//                   bytes from src_offset;
//   a client        Ops (ping, push, put, get) with wire handles from a
//                   HandleTable, answers matched by dst_wmd;
//   a router user   --route NET=GW: messages to other nets go to a gateway
//                   (header dest_nid stays the final destination); answers
//                   to a routed request go back through the gateway it came
//                   from; the router checker pings each gateway and pushes
//                   to Multi-Rail ones.
// Everything else is dropped and counted by reason (DropReason).
//
// Ownership: an Op is owned by whoever started it (a command, or the router
// checker) and must stay put until it is idle(): its Tx is lent to the
// engine from start() until on_sent(), and its buffer is a receive sink from
// a REPLY's head to its end.  Answers the target owes (Response) and receive
// buffers come from pools that grow to the peak in flight and are reused, so
// a steady load allocates nothing per message.
//
// Re-entrancy: the engine may call back into the Endpoint from Node::send()
// and from a connection close (on_sent with an error, answers completed on
// another connection).  So callbacks only record: a finished Op is queued
// and its OpListener is told from run(), never from inside the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/peer/dpdk_link.hpp"
#include "cli/peer/handles.hpp"
#include "cli/peer/routes.hpp"
#include "lnd/o2iblnd/engine.hpp"
#include "lnd/socklnd/acceptor.hpp"
#include "lnd/socklnd/engine.hpp"
#include "lnd/socklnd/poller.hpp"
#include "router/local_msgs.hpp"

namespace lnetr::o2ib {
class VerbsDevice;
class VerbsTransport;
}  // namespace lnetr::o2ib

namespace lnetr::peer {

using Clock = lnd::Clock;

struct EndpointConfig {
  Nid nid;  // our one NI (IPv4, on a socklnd or an o2iblnd net)
  sock::Options sock;
  o2ib::Options o2ib;           // o2ib nets: ko2iblnd's module parameters
  o2ib::NiTunables o2ib_tunables;
  // A tcp NI on a DPDK port with lnetr's own TCP/IP (IPv4), not kernel sockets.
  std::optional<DpdkOptions> dpdk;
  std::vector<RouteSpec> routes;
  std::chrono::seconds router_check_interval{60};  // 0: no router checker
  // Drop messages from a remote net that come through a gateway that is not
  // on a route back to that net (LNet's drop_asym_route).
  bool drop_asym_route = false;
};

// Why a received message was not taken.
#define LNETR_PEER_DROP_REASONS(X)                                                                  \
  X(not_for_us, "addressed to a NID on another net: this node does not route")                     \
  X(portal0_no_match, "PUT or GET on portal 0 without the ping match bits")                        \
  X(no_portal, "PUT or GET on a portal where nothing is posted")                                   \
  X(unmatched_reply, "a REPLY naming no GET in flight (late, duplicate or not ours)")              \
  X(unmatched_ack, "an ACK naming no PUT in flight (late, duplicate or not ours)")                 \
  X(reply_too_long, "a REPLY longer than the GET's sink")                                          \
  X(rx_aborted, "the connection died while the payload was being received")                        \
  X(asym_route, "from a remote net through a gateway not on a route back to it (drop_asym_route)")

enum class DropReason : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_PEER_DROP_REASONS(LNETR_X)
#undef LNETR_X
};
inline constexpr std::size_t kDropReasonCount = 0
#define LNETR_X(n, text) +1
    LNETR_PEER_DROP_REASONS(LNETR_X)
#undef LNETR_X
    ;
std::string_view name(DropReason r) noexcept;
std::string_view describe(DropReason r) noexcept;

// How an Op ended.
#define LNETR_PEER_OP_ERRORS(X)                                                                     \
  X(none, "success")                                                                               \
  X(no_route, "no usable route to the destination's net")                                          \
  X(no_handle, "too many operations in flight")                                                    \
  X(send_failed, "the message could not be sent (connection failed or closed)")                    \
  X(timeout, "no answer before the timeout")                                                       \
  X(reply_too_long, "the REPLY was longer than the GET asked for")                                 \
  X(reply_short, "the REPLY carried fewer bytes than asked for")                                   \
  X(reply_corrupt, "the REPLY's data does not match the pattern")                                  \
  X(ack_short, "the ACK's mlength is not the PUT's length: the target refused or found corrupt data") \
  X(aborted, "the endpoint shut down")

enum class OpError : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_PEER_OP_ERRORS(LNETR_X)
#undef LNETR_X
};
inline constexpr std::size_t kOpErrorCount = 0
#define LNETR_X(n, text) +1
    LNETR_PEER_OP_ERRORS(LNETR_X)
#undef LNETR_X
    ;
std::string_view name(OpError e) noexcept;
std::string_view describe(OpError e) noexcept;

enum class OpKind : std::uint8_t { ping, push, put, get };

// Something the Endpoint lends the engine: an Op's request or a Response.
struct Sendable {
  enum class Kind : std::uint8_t { op, response };
  explicit Sendable(Kind k) : kind(k) {}
  Kind kind;
  lnd::Tx tx;
};

class Op;

class OpListener {
 public:
  virtual void op_done(Op& op) = 0;

 protected:
  ~OpListener() = default;
};

// One operation this node originates and waits for: a GET (ping or test
// data) answered by a REPLY, or a PUT (push or test data) answered by an ACK.
class Op : public Sendable {
 public:
  Op() : Sendable(Kind::op) {}
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  // Set before Endpoint::start().
  OpKind kind = OpKind::ping;
  Nid dest;
  std::uint64_t seed = 0;     // match bits of put/get
  std::uint32_t size = 0;     // put: payload bytes; get/ping: sink_length
  std::uint32_t offset = 0;   // put: offset; get: src_offset
  bool verify = true;         // get: check the REPLY's bytes
  std::chrono::milliseconds timeout{1000};
  ByteSpan payload;           // put/push: at least `size` bytes
  MutableByteSpan sink;       // get/ping: at least `size` bytes
  OpListener* listener = nullptr;
  std::size_t tag = 0;        // the owner's use

  // Results, valid in OpListener::op_done().
  OpError error = OpError::none;
  int status = 0;             // 0 or -errno (as LNet would report it)
  std::uint32_t mlength = 0;  // put/push: the ACK's mlength
  std::uint32_t received = 0; // get/ping: the REPLY's payload length
  std::size_t bad_offset = 0; // reply_corrupt: first wrong byte
  Nid next_hop;
  Clock::time_point started{};
  Clock::time_point finished{};

  // Neither lent to the engine nor receiving: may be started again.
  bool idle() const noexcept { return !active_ && !tx_busy_ && !rx_busy_; }
  bool ok() const noexcept { return error == OpError::none; }

 private:
  friend class Endpoint;
  WireHandle handle_ = WireHandle::none();
  Clock::time_point deadline_{};
  bool active_ = false;    // started and not yet finished
  bool tx_busy_ = false;   // tx lent to the engine
  bool rx_busy_ = false;   // a REPLY is being received into sink
  bool sent_ = false;      // the request left
  bool answered_ = false;  // the ACK/REPLY arrived
  OpError answer_error_ = OpError::none;  // what the answer showed
};

// Counters by LNet message type (ACK, PUT, GET, REPLY).
struct TypeCounters {
  std::array<std::uint64_t, 4> msgs{};
  std::array<std::uint64_t, 4> bytes{};
  void count(MsgType t, std::uint64_t payload) noexcept {
    const auto i = static_cast<std::size_t>(t);
    if (i < msgs.size()) {
      ++msgs[i];
      bytes[i] += payload;
    }
  }
};

struct EndpointStats {
  TypeCounters rx;  // messages taken in (payload received), by type
  TypeCounters tx;  // messages sent (handed to the kernel), by type
  std::array<std::uint64_t, kDropReasonCount> drops{};
  std::uint64_t protocol_errors = 0;  // messages for another NID of our net: connection closed
  std::uint64_t pattern_errors = 0;   // test PUTs with a wrong byte (ACKed with mlength 0)
  std::uint64_t puts_verified = 0;    // test PUTs whose every byte was right
  std::uint64_t gets_served = 0;      // test GETs answered
  std::uint64_t pings_answered = 0;
  std::uint64_t pushes_received = 0;
  std::uint64_t pushes_invalid = 0;   // push payloads that are not a valid ping info
  std::uint64_t response_failures = 0;  // REPLY/ACK we owed that could not be sent
};

class Endpoint final : public lnd::Upper, private OpListener {
 public:
  explicit Endpoint(EndpointConfig cfg);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // Check privileges and addresses, listen (unless accept=none), take
  // SIGINT/SIGTERM.  False with `err` set for the operator.
  bool open(std::string& err);

  // Start `op` (idle, fields set).  Exactly one OpListener::op_done() follows,
  // from run(), whatever happens (even a failure found here).
  void start(Op& op);

  enum class RunEnd : std::uint8_t { done, signal, deadline };
  // Serve and drive everything until `done()` is true (checked after each
  // dispatch), a SIGINT/SIGTERM, or `until`.  Blocks in epoll between events.
  template <class Done>
  RunEnd run(Done&& done, Clock::time_point until) {
    for (;;) {
      deliver();
      if (done()) return RunEnd::done;
      if (signalled_) return RunEnd::signal;
      const auto now = Clock::now();
      if (now >= until) return RunEnd::deadline;
      wait(until);
    }
  }
  RunEnd run_for(Clock::duration d) {
    return run([] { return false; }, Clock::now() + d);
  }

  // Close every connection (queued sends fail), finish every Op (aborted).
  // Called by the destructor; call it earlier while Ops' owners still exist.
  void shutdown();
  // Wait (up to `limit`) until no Response we owe is still queued.
  void flush(Clock::duration limit);

  const Nid& nid() const noexcept { return cfg_.nid; }
  std::uint64_t incarnation() const noexcept { return incarnation_; }
  const EndpointStats& stats() const noexcept { return stats_; }
  const sock::Stats& sock_stats() const noexcept;
  // The DPDK port's counters (nullopt on kernel sockets and o2ib).
  std::optional<DpdkCounters> dpdk_counters() const;
  // The o2iblnd engine's counters, on an o2ib net (else nullptr).
  const o2ib::Stats* o2ib_stats() const noexcept;
  bool on_o2ib() const noexcept { return cfg_.nid.lnd() == LndType::o2ib; }
  const std::array<std::uint64_t, sock::kCloseReasonCount>& refused() const noexcept;
  const RouteTable& routes() const noexcept { return routes_; }
  const std::vector<std::uint8_t>& ping_info() const noexcept { return ping_info_; }
  bool signalled() const noexcept { return signalled_; }
  std::size_t responses_in_flight() const noexcept { return responses_.size() - free_responses_.size(); }

 private:
  struct Buffer;
  struct Response;
  class SignalHandler;
  struct GatewayCheck;

  // lnd::Upper
  lnd::RxVerdict on_head(lnd::Rx& rx) override;
  void on_received(lnd::Rx& rx) override;
  void on_rx_aborted(lnd::Rx& rx) override;
  void on_sent(lnd::Tx& tx, int status) override;
  void on_peer_down(const Nid& peer) override;
  // OpListener (router checker)
  void op_done(Op& op) override;

  void wait(Clock::time_point until);
  void tick(Clock::time_point now);
  void deliver();
  void finish(Op& op, OpError e, int status);
  void maybe_complete(Op& op);
  void drop(lnd::Rx& rx, DropReason why);
  const Nid* next_hop_for(const Nid& dest) noexcept;

  // Target side.
  void answer_ping(const lnd::Rx& rx, Response* r);
  void answer_test_get(const lnd::Rx& rx, Response* r);
  void answer_put(const lnd::Rx& rx, std::uint32_t mlength);
  void send_response(Response* r, const lnd::Rx& rx, const LnetHeader& hdr, ByteSpan payload, Buffer* buf);
  // The LND of our NI.
  int lnd_send(const Nid& next_hop, lnd::Tx& tx);
  bool open_o2ib(std::string& err);
  bool open_dpdk(std::string& err);
  void poll_o2ib();
  Response* take_response();
  Buffer* take_buffer(std::size_t size);
  void give_buffer(Buffer* b) noexcept;

  // Router checker.
  void check_gateways(Clock::time_point now);
  void apply_push(const Nid& from, const PingInfo& info);

  EndpointConfig cfg_;
  std::uint64_t incarnation_;
  ProcessId self_;
  std::vector<std::uint8_t> ping_info_;
  std::size_t push_capacity_ = kPingSinkDiscovery;
  RouteTable routes_;
  HandleTable<Op> handles_;
  EndpointStats stats_;

  sock::Poller poller_;
  std::unique_ptr<SignalHandler> signals_;
  std::unique_ptr<DpdkLink> dpdk_;    // a tcp net on a DPDK port (outlives node_ and acceptor_)
  unsigned epoll_turn_ = 0;           // DPDK: turns since the epoll set was polled
  std::unique_ptr<sock::Node> node_;  // a tcp net
  std::unique_ptr<sock::Acceptor> acceptor_;
  // An o2ib net: the device, this thread's view of it, the engine, and
  // the connection-manager and completion channels in the poller.
  std::shared_ptr<o2ib::VerbsDevice> ib_dev_;
  std::unique_ptr<o2ib::VerbsTransport> ib_tr_;
  std::unique_ptr<o2ib::Node> ib_;
  class VerbsEvents;
  std::unique_ptr<VerbsEvents> ib_cm_, ib_comp_;
  std::array<std::uint64_t, sock::kCloseReasonCount> refused_at_shutdown_{};
  bool signalled_ = false;
  bool shut_ = false;
  Clock::time_point next_tick_{};

  std::vector<Op*> active_;     // started, not finished (for timeouts)
  std::vector<Op*> completed_;  // finished, listener not told yet
  std::vector<Op*> delivering_;

  std::vector<std::unique_ptr<Response>> responses_;
  std::vector<Response*> free_responses_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<Buffer*> free_small_;
  std::vector<Buffer*> free_large_;

  std::vector<std::unique_ptr<GatewayCheck>> checks_;
};

}  // namespace lnetr::peer
