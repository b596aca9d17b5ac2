// The o2iblnd protocol engine: connections made and accepted as Linux's
// ko2iblnd makes them (CONNREQ / CONNACK in rdma_cm private data, every
// rejection and the connecting side's reactions, races, incarnations),
// messages (IMMEDIATE, PUT_REQ / PUT_ACK / PUT_NAK / PUT_DONE, GET_REQ /
// GET_DONE, NOOP), RDMA writes over the negotiated fragments, credits per
// connection, keepalive and timeouts (spec: o2iblnd.md).
//
// Transport-agnostic: it drives a Transport (transport.hpp) and is driven
// by its events, so the same code runs over verbs and over the unit
// tests' simulated fabric.  One Node per worker thread owns its peers,
// their connections, its transmit descriptors and its receive buffers;
// nothing is shared between threads and nothing blocks.
//
// Above it, an lnd::Upper (the router's forwarder, lnetr-peer's endpoint)
// sees messages exactly as socklnd gives them (lnd/message.hpp):
//   IMMEDIATE   on_head(); the inline payload is copied into the sink;
//               on_received(); then the receive buffer is reposted and its
//               credit owed, so what the Upper sends from on_received()
//               (an ACK, a routed message) does not carry it yet, as with
//               Linux (a GET for this node: reposted first, so its REPLY
//               does).  A deferred message keeps its buffer, and
//               so the sender's credit, until resume(): back-pressure.
//   PUT_REQ     on_head(); the sink is opened to the peer's RDMA writes and
//               announced in PUT_ACK (a discarded message gets PUT_NAK);
//               on PUT_DONE, on_received() — the payload is already in the
//               sink, no byte copied.
//   GET_REQ     (only to this node) on_head(); the Upper names its REPLY in
//               rx.reply, which, when sent, is RDMA-written into the
//               requester's sink and completed by GET_DONE; a GET left
//               unanswered gets GET_DONE -ENODATA.
//   send()      GETs, ACKs and payloads up to 3,976 bytes go IMMEDIATE
//               (gathered from the Upper's memory where the device can, else
//               copied); larger PUTs and REPLYs as PUT_REQ, the payload
//               RDMA-written from the Upper's memory (or its received
//               frames: Tx::pieces) once the peer's PUT_ACK names the sink;
//               on_sent() when PUT_DONE has completed.  A GET with a
//               reply_sink, sent straight to its target, goes as GET_REQ.
// Memory the transport cannot key (not registered by its owner) is copied
// through the engine's own registered buffers, and every copied byte is
// counted.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <span>
#include <vector>

#include "lnd/message.hpp"
#include "lnd/source_rate.hpp"
#include "lnd/o2iblnd/transport.hpp"
#include "lnd/o2iblnd/wire.hpp"
#include "router/nid.hpp"

namespace lnetr::o2ib {

using Clock = lnd::Clock;

// ko2iblnd module parameters that are not per NI (o2iblnd.md §9).
struct Options {
  std::uint16_t service = kServicePort;
  std::chrono::seconds keepalive{100};  // NOOP after this long without sending; 0: never
  bool use_privileged_port = true;      // connect from ports 1023..512
  bool require_privileged_port = false; // refuse requests from ports >= 1024
  std::uint8_t retry_count = 5;         // CM connection parameters
  std::uint8_t rnr_retry_count = 6;
  bool cksum = false;                   // send message checksums
  // Bounds on what peers can make a Node keep: peers (a new one beyond is
  // refused: its connection request rejected, a send to it failed), how
  // long one with no connection and nothing queued is kept, connections
  // in all, and connection requests a second from one address (after a
  // burst of four times as many; 0, the default here: no limit; the
  // router's is dataplane.limits.connect_rate).
  std::size_t max_peers = 65536;
  std::chrono::seconds peer_idle{180};
  std::size_t max_conns = 65536;
  double connreq_rate = 0;
};

// An NI's tunables (`tunables:` and `lnd tunables:` in lnetctl's names).
struct NiTunables {
  std::uint32_t peer_credits = kDefaultQueueDepth;  // queue depth offered and accepted
  std::uint32_t credits = 256;                      // NI transmit credits (LNet's; bounds peer_credits)
  std::uint32_t peer_credits_hiw = 0;               // credits returned eagerly at; 0: computed
  std::uint32_t concurrent_sends = 0;               // sends posted per connection; 0: peer_credits
  std::uint32_t ntx = 512;                          // transmit descriptors (per NI, all workers)
  std::uint32_t conns_per_peer = 1;                 // connections to each peer
  std::chrono::seconds timeout{50};                 // LND timeout: a message older than this closes its connection
  int tos = -1;                                     // IP type of service of RoCE traffic; -1: none
};

// The values in force, clamped as Linux clamps them (peer_credits to
// 8..255 and at most credits; peer_credits_hiw to [peer_credits/2,
// peer_credits - 1]; concurrent_sends to [peer_credits/2, 2 x peer_credits];
// 0s replaced by their defaults).
NiTunables effective(const NiTunables& t) noexcept;

struct LocalNi {
  Nid nid;                         // o2ib NID: the IPv4 address of its interface
  Transport* transport = nullptr;  // the device behind the interface
  NiTunables tunables;             // in force (effective())
  // False until the NI is up: connection requests for it are refused with
  // EARLY, as Linux refuses them before the NI is active.
  bool ready = true;
  // Deleted (Node::del_ni): found by no lookup; kept while anything refers to it.
  bool deleted = false;
};

// A connection request taken off a listener (rdma_cm CONNECT_REQUEST).
struct ConnRequest {
  CmId* id = nullptr;            // belongs to `via`, else to the transport of the NI at local_ip
  Transport* via = nullptr;      // the transport `id` is on, if the taker says
  std::uint32_t local_ip = 0;    // the address it was sent to
  std::uint32_t remote_ip = 0;
  std::uint16_t remote_port = 0;
  std::array<std::uint8_t, 96> data{};  // private data (56 bytes over IB / RoCE)
  std::size_t len = 0;
  ByteSpan private_data() const noexcept { return ByteSpan(data.data(), len); }
};

// The NID a connection request comes from (its CONNREQ's srcnid), for
// placing it on the worker that owns that peer; nothing if the private data
// does not decode (the owner does not matter then: it is refused).
std::optional<Nid> requester_of(ByteSpan private_data) noexcept;

// Why a connection was closed: one table for the enum, the counter name and
// the operator's text.
#define LNETR_O2IB_CLOSE_REASONS(X)                                                                   \
  X(peer_disconnected, "the peer disconnected")                                                      \
  X(tx_failed, "a send or RDMA write completed with an error (peer gone, or it refused the access)") \
  X(rx_failed, "a receive completed with an error")                                                  \
  X(bad_message, "a malformed message: bad magic, version, length, type or checksum")               \
  X(stale_message, "a message whose NIDs or incarnations are not the connection's")                 \
  X(bad_credits, "the peer returned more credits than the queue depth")                             \
  X(unmatched_completion, "a PUT_ACK, PUT_NAK, PUT_DONE or GET_DONE answering no request of ours")    \
  X(get_not_for_us, "a GET_REQ for another node (a GET to be routed must come as IMMEDIATE)")       \
  X(upper_rejected, "the LNet layer rejected a message as a protocol error")                        \
  X(bad_payload, "an IMMEDIATE payload that does not fit its sink")                                 \
  X(timeout, "a message waited longer than the LND timeout")                                        \
  X(stale_peer, "the peer restarted (a new incarnation or protocol version)")                       \
  X(bad_connack, "the CONNACK was malformed or not what was asked for")                             \
  X(post_failed, "the device refused a work request")                                               \
  X(no_resources, "no transmit descriptor for a message owed to the peer")                          \
  X(shutdown, "the node is shutting down")                                                         \
  X(ni_deleted, "its NI was deleted (lnetrctl net del)")

enum class CloseReason : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_O2IB_CLOSE_REASONS(LNETR_X)
#undef LNETR_X
};
inline constexpr std::size_t kCloseReasonCount = 0
#define LNETR_X(n, text) +1
    LNETR_O2IB_CLOSE_REASONS(LNETR_X)
#undef LNETR_X
    ;
std::string_view name(CloseReason r) noexcept;
std::string_view describe(CloseReason r) noexcept;

// Why an attempt to connect failed (besides a reject, counted by reason).
#define LNETR_O2IB_CONNECT_FAILURES(X)                                                  \
  X(unreachable, "address or route resolution failed (no path to the peer's address)")   \
  X(no_listener, "nothing listens on the peer's o2iblnd port")                           \
  X(rejected, "the peer rejected the connection (see rejects_received)")                 \
  X(connect_error, "the connection manager reported an error or the peer unreachable")  \
  X(connect_timeout, "no answer to the connection request within the connect timeout")  \
  X(passive_timeout, "a connection we accepted was not established within the connect timeout") \
  X(bad_connack, "the peer's CONNACK was malformed or not what was asked for")          \
  X(no_resources, "a queue pair or its buffers could not be created")

enum class ConnectFailure : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_O2IB_CONNECT_FAILURES(LNETR_X)
#undef LNETR_X
};
inline constexpr std::size_t kConnectFailureCount = 0
#define LNETR_X(n, text) +1
    LNETR_O2IB_CONNECT_FAILURES(LNETR_X)
#undef LNETR_X
    ;
std::string_view name(ConnectFailure f) noexcept;
std::string_view describe(ConnectFailure f) noexcept;

// Reject reasons are 1..9 (wire.hpp); index 0 counts anything else.
inline constexpr std::size_t kRejectSlots = 10;
inline constexpr std::size_t kMsgTypeSlots = 10;  // CONNREQ .. GET_DONE, in wire order
// Index of an o2iblnd message type in the per-type counters.
std::size_t type_slot(MsgType t) noexcept;

// Counters of one Node (single writer: its thread).
struct Stats {
  std::uint64_t conns_accepted = 0;
  std::uint64_t conns_connected = 0;
  std::uint64_t reconnects = 0;
  std::array<std::uint64_t, kConnectFailureCount> connect_failed{};
  std::array<std::uint64_t, kCloseReasonCount> closed{};
  std::array<std::uint64_t, kRejectSlots> rejects_sent{};
  std::array<std::uint64_t, kRejectSlots> rejects_received{};
  std::array<std::uint64_t, kMsgTypeSlots> rx_msgs{};
  std::array<std::uint64_t, kMsgTypeSlots> tx_msgs{};
  std::uint64_t rx_bytes = 0;            // LNet payload bytes received
  std::uint64_t tx_bytes = 0;            // LNet payload bytes sent
  std::uint64_t rdma_bytes_written = 0;  // payload this node RDMA-wrote into peers' sinks
  std::uint64_t rdma_bytes_received = 0; // payload peers RDMA-wrote into this node's sinks
  std::uint64_t bytes_copied = 0;        // payload bytes copied (IMMEDIATE payloads, unregistered memory)
  std::uint64_t bytes_bounced = 0;       // ... of which through the engine's own buffers (memory not registered)
  std::uint64_t bytes_gathered = 0;      // IMMEDIATE payload bytes sent from the Upper's memory
  std::uint64_t completions = 0;         // work completions taken
  std::uint64_t sinks_unmapping = 0;     // finished transfers that waited for their sink key's invalidation
  std::uint64_t rx_slabs_reused = 0;     // connections given a closed one's registered receive memory
  std::uint64_t tx_timeouts = 0;         // messages failed waiting for a connection
  std::uint64_t tx_no_desc = 0;          // sends refused: no transmit descriptor
  std::uint64_t tx_descs = 0;            // transmit descriptors allocated
  std::uint64_t peers_refused = 0;       // new peers refused: the table held Options::max_peers
  std::uint64_t peers_freed = 0;         // peers freed after Options::peer_idle at rest
  std::uint64_t conns_refused = 0;       // connections refused or not made: Options::max_conns, or a peer's cap
  std::uint64_t connreqs_rate_limited = 0;  // connection requests over Options::connreq_rate
};

class Conn;
class Peer;
struct TxDesc;
struct RxDesc;
struct Device;
struct Bounce;

class Node final : private TransportEvents {
 public:
  using ClockFn = std::function<Clock::time_point()>;
  // `nis`: the NIs this node serves (all on o2ib nets); each transport's
  // events are attached here.  `incarnation`: this node's, as peers see it
  // (Linux: microseconds since the epoch at NI start).  `ntx_share`: the
  // fraction of each NI's ntx this node's descriptor pool grows by (1 /
  // workers).
  Node(Options opts, std::vector<LocalNi> nis, std::uint64_t incarnation, lnd::Upper& upper,
       ClockFn clock = &Clock::now, std::uint32_t workers = 1);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Send `tx` to `dest`, a peer on one of our nets (the next hop: a
  // gateway, or the final destination), connecting if needed.  -errno with
  // tx not taken if no local NI is on dest's net (-EHOSTUNREACH) or no
  // transmit descriptor is left (-ENOMEM).  Otherwise 0, and
  // Upper::on_sent(tx) follows (possibly before send() returns).
  int send(const Nid& dest, lnd::Tx& tx);

  // Continue a deferred receive (rx.sink / rx.discard / rx.cookie set).
  void resume(lnd::Rx& rx);

  // A connection request from a listener, for a peer this node owns.
  void accept_request(ConnRequest&& r);
  // Refuse a request without judging it (it cannot be handed to its
  // owner): a reject of `why` with our parameters.
  void refuse_request(ConnRequest&& r, RejectReason why);

  // Timers: keepalive NOOPs, message and connect timeouts, delayed
  // reconnects.  Call at least once a second.
  void tick();
  // Free connections closed since the last call (never while dispatching).
  void reap();
  // Close everything (messages fail with -ESHUTDOWN).
  void shutdown();

  const Stats& stats() const noexcept { return stats_; }
  const Options& options() const noexcept { return opts_; }
  std::uint64_t incarnation() const noexcept { return incarnation_; }
  const LocalNi* ni_for_net(Net net) const noexcept;
  const LocalNi* ni_by_nid(const Nid& nid) const noexcept;
  // lnetrctl net set: NI `nid`'s conns_per_peer and timeout from now on
  // (0: unchanged).  Peers connected from here on, and messages queued
  // from here on, follow them; connections open stay.  False if no such NI.
  bool tune_ni(const Nid& nid, std::uint32_t conns_per_peer, std::chrono::seconds timeout) noexcept;
  // lnetrctl net add: serve `ni` too (its transport's events attached
  // here, if new).  False if an NI of that NID or net is in service.
  bool add_ni(LocalNi ni);
  // lnetrctl net del: NI `nid` stops at once (false: no such NI).  Sends to
  // its net fail (-EHOSTUNREACH) and requests for it are refused from now
  // on; its peers' messages waiting for a connection fail (-ENETDOWN), and
  // its connections close (`ni_deleted`: their messages fail as on any
  // close, as the device gives them back).  Its peers leave the table.
  bool del_ni(const Nid& nid);
  // Whether the engine has let go of transport `tr`, whose NIs were all
  // deleted: once every connection on it is gone and every descriptor is
  // back, its memory is deregistered and freed and true is returned (the
  // caller may then destroy the transport).  Call after reap().
  bool release_transport(Transport* tr);
  // The NIs in service.
  std::size_t nis() const noexcept;

  // Introspection for display and tests.
  struct ConnInfo {
    std::uint16_t version = 0;
    std::uint16_t queue_depth = 0;
    std::uint16_t max_frags = 0;
    std::int32_t credits = 0;
    std::int32_t reserved_credits = 0;
    std::int32_t outstanding_credits = 0;
    std::int32_t sends_posted = 0;
    std::size_t queued = 0;   // messages waiting to be posted
    std::size_t waiting = 0;  // posted or waiting for the peer's answer
    std::size_t rx_held = 0;  // receive buffers the Upper holds (deferred)
    bool active = false;      // we connected
    std::uint64_t tx_msgs = 0;  // messages posted on it
    std::uint64_t rx_msgs = 0;  // messages received on it
  };
  struct PeerInfo {
    Nid nid;
    std::uint16_t version = 0;
    std::uint64_t incarnation = 0;
    bool connecting = false;
    std::size_t queued_tx = 0;  // waiting for a connection
    std::vector<ConnInfo> conns;
  };
  // Every peer with a connection (or connecting), or only those listed.
  std::vector<PeerInfo> peers(std::span<const Nid> only = {}) const;
  // Descriptors and buffers in use (0 and 0 at rest: nothing leaked).
  std::size_t tx_descs_in_use() const noexcept;
  std::size_t connections() const noexcept;
  std::size_t peer_count() const noexcept { return peers_.size(); }

 private:
  // What reposting a receive buffer gives back (Linux's IBLND_POSTRX_*).
  enum class PostCredit : std::uint8_t { none, peer, reserved };

  // TransportEvents
  void on_resolved(CmId* id, int status) override;
  void on_established(CmId* id, ByteSpan private_data) override;
  void on_rejected(CmId* id, RejectKind kind, ByteSpan private_data) override;
  void on_connect_error(CmId* id, int status) override;
  void on_disconnected(CmId* id) override;
  void on_completion(const WorkCompletion& wc) override;

  // Descriptors and memory.
  void start_ni(LocalNi& ni);
  Transport* first_transport() const noexcept;  // of the first NI in service (nullptr: none)
  void free_device(Device& d) noexcept;
  Device* device_of(const LocalNi* ni) noexcept;
  TxDesc* get_desc(Device* dev);
  void put_desc(TxDesc* d) noexcept;
  Bounce* get_bounce(Device* dev);
  void ni_device_free_bounce(const LocalNi* ni, Bounce* b);
  bool key_source(TxDesc* d, const lnd::Tx& tx);
  bool map_source(TxDesc* d, const lnd::Tx& tx);
  bool map_sink(TxDesc* d, CmId* id, MutableByteSpan sink);

  // Sending.
  void launch(TxDesc* d, const Nid& dest);
  void queue_tx(TxDesc* d, Conn* c);
  bool need_noop(const Conn* c) const noexcept;
  void check_sends(Conn* c);
  std::size_t encode(Conn* c, TxDesc* d, bool& gather);
  int post_tx(Conn* c, TxDesc* d, int credit);
  std::int32_t plan_rdma(Conn* c, TxDesc* d);
  static std::uint32_t total(const std::vector<RdmaFrag>& frags) noexcept;
  static std::uint64_t wr_bytes(const SendWr& w, const std::vector<Sge>& sges) noexcept;
  void tx_done(TxDesc* d);
  void deliver_get_reply(lnd::Tx& get, const Nid& from, const LocalNi* ni, std::uint32_t len,
                         const std::optional<std::pair<Bounce*, std::uint32_t>>& bounce);
  void send_completion(Conn* c, MsgType type, std::int32_t status, Cookie cookie);

  // Receiving.
  void post_rx(RxDesc* rx, PostCredit credit);
  void tx_complete(TxDesc* d, const WorkCompletion& wc);
  void rx_complete(RxDesc* rx, const WorkCompletion& wc);
  void fail_rx(Conn* c, CloseReason why, int error);
  void handle_rx(RxDesc* rx);
  TxDesc* find_waiting(Conn* c, MsgType type, Cookie cookie) noexcept;
  void handle_completion(Conn* c, MsgType type, std::int32_t status, Cookie cookie);
  void parse(RxDesc* rx);
  void recv(RxDesc* rx);

  // Peers and connections.
  // The peer, made if new (the caller checked there is room: has_room).
  Peer& peer(const Nid& nid, const LocalNi* ni);
  Peer* find_peer(const Nid& nid) noexcept;
  // Room for `nid` in the peer table (known, or under max_peers); counted if not.
  bool has_room(const Nid& nid) noexcept;
  // A connection of `p`'s (which it keeps alive), and its end.
  Conn* new_conn(Peer& p);
  void free_conn(Conn* c);
  std::size_t sweep_idle(Clock::time_point now);
  void link(Peer& p);
  void unlink(Peer& p);
  void connect_peer(Peer& p);
  bool make_qp(Conn* c);
  void active_connect(Conn* c);
  void check_connreply(Conn* c, ByteSpan priv);
  void rejected(Conn* c, RejectKind kind, ByteSpan priv);
  void check_reconnect(Conn* c, std::uint16_t version, std::uint64_t incarnation, RejectReason why,
                       const ConnParams* cp);
  void send_reject_for(Conn* c, RejectReason why, std::uint16_t version);
  std::uint32_t msg_queue_size(std::uint16_t version, const LocalNi& ni) const noexcept;
  std::chrono::milliseconds connreq_timeout(const LocalNi& ni) const noexcept;
  // Connections one peer may hold at once (accepting more is refused).
  static std::size_t max_conns_per_peer(const LocalNi& ni) noexcept;
  void connreq_done(Conn* c, int status);
  void peer_connect_failed(Peer& p, bool active, int error);
  void peer_notify(Peer& p);
  void close_peer_conns(Peer& p, CloseReason why, int error);
  void fail_queued(Peer& p, int status);
  void close_stale_conns(Peer& p, std::uint16_t version, std::uint64_t incarnation);
  void close_conn(Conn* c, CloseReason why, int error);
  void finalise(Conn* c);
  void maybe_destroy(Conn* c);
  void reconnect_peer(Peer& p);
  bool timed_out(const Conn* c, Clock::time_point now) const noexcept;

  Options opts_;
  std::list<LocalNi> nis_;  // stable: peers and connections point into it; deleted ones stay
  std::vector<std::unique_ptr<Peer>> gone_peers_;  // of deleted NIs, freed once nothing refers to them
  std::uint64_t incarnation_;
  lnd::Upper& upper_;
  ClockFn clock_;
  std::uint32_t workers_;
  Stats stats_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::unordered_map<Nid, std::unique_ptr<Peer>> peers_;
  std::vector<Conn*> conns_;      // every connection not yet destroyed (tick's walk; Conn::index)
  Clock::time_point next_sweep_{};
  lnd::SourceRate connreq_rate_;
  std::vector<Conn*> graveyard_;  // destroyed: freed at reap()
  std::vector<SendWr> scratch_wrs_;  // a post's work requests
  std::vector<Sge> scratch_sges_;
};

// Microseconds since the epoch: the incarnation Linux gives an o2iblnd NI.
std::uint64_t new_incarnation() noexcept;

}  // namespace lnetr::o2ib
