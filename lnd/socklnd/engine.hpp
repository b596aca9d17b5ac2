// The socklnd protocol engine over kernel TCP sockets: connection handshakes
// (both sides), typed connections per peer, message framing in both
// directions, zero-copy ACKs, keepalive, timeouts, races and incarnations,
// as Linux ksocklnd does them (spec: socklnd.md).
//
// One Node per thread owns its peers and their connections; nothing here is
// shared between threads and nothing blocks.  The LNet layer above (the
// router core, or lnetr-peer's endpoint) implements Upper: it decides where
// each received payload goes and is told when a sent message is done.
//
// Ownership of a message in flight:
//   receive  head decoded by the engine -> Upper::on_head() names the sink
//            (a buffer the Upper owns), asks to discard, or defers (no
//            buffer yet: the engine stops reading that socket, which is the
//            back-pressure) -> payload read straight into the sink ->
//            Upper::on_received() (or on_rx_aborted() if the connection dies).
//   send     Upper fills a Tx it owns and calls Node::send(); the engine
//            links it into a queue and writes header + payload from the
//            Upper's memory -> Upper::on_sent(tx, status) hands it back:
//            once written (kernel sockets copy), or, for payloads of 16 KiB
//            or more on a stream that lends, once the stream has released
//            the memory it lent (the dataplane's TCP: when the peer
//            acknowledged it).
// Connections and peers are created at connect/accept time, never per
// message; the per-message path allocates nothing.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "lnd/socklnd/poller.hpp"
#include "lnd/socklnd/stream.hpp"
#include "lnd/socklnd/wire.hpp"
#include "lnd/message.hpp"
#include "router/lnet_header.hpp"
#include "router/nid.hpp"
#include "router/nid_cache.hpp"

namespace lnetr::sock {

using Clock = lnd::Clock;
// The LND-neutral message types (lnd/message.hpp).
using lnd::Rx;
using lnd::RxVerdict;
using lnd::Tx;
using lnd::Upper;
static_assert(kMsgHeaderSize <= lnd::kSockHeaderMax);

enum class AcceptMode : std::uint8_t { secure, all, none };

// ksocklnd module parameters that matter here (spec socklnd.md §9-§10).
struct Options {
  std::uint16_t port = kAcceptPort;
  AcceptMode accept = AcceptMode::secure;
  int backlog = 127;
  std::uint32_t conns_per_peer = 1;  // bulk connections of each direction
  std::uint32_t min_bulk = 1024;
  // Payloads of at least this many bytes are sent without copying: lent to
  // the dataplane's TCP, or with MSG_ZEROCOPY on a kernel socket (above
  // kLnetMtu: never).  Smaller ones are copied and handed back at once.
  std::uint32_t zc_min_payload = 16384;
  std::chrono::seconds timeout{50};
  std::chrono::seconds keepalive{30};
  std::chrono::seconds accept_timeout{5};
  int keepalive_idle = 30;  // TCP keepalive
  int keepalive_count = 5;
  int keepalive_intvl = 5;
  bool nagle = false;
  int tx_buffer_size = 0;
  int rx_buffer_size = 0;
  int tos = -1;  // IP type of service of the connections (-1: none set); per NI: LocalNi::tos
  // Offer V4 to IPv4 peers too (Linux offers them V3): a node on an IPv4
  // net then carries the large NIDs of IPv6 nets it reaches through them.
  bool offer_v4 = false;
  std::chrono::milliseconds min_reconnect{1000};
  std::chrono::milliseconds max_reconnect{60000};
  // Peers a Node keeps (a new one beyond: refused), and how long one with
  // no connection and nothing queued is kept after its last use.
  std::size_t max_peers = 65536;
  std::chrono::seconds peer_idle{180};
  // The acceptor: connections in their handshake at once, and new
  // connections a second from one address (after a burst of four times
  // as many; 0, the default here: no limit; the router's is
  // dataplane.limits.connect_rate).
  std::size_t max_handshakes = 1024;
  double connect_rate = 0;
  // Connections a Node keeps (a new one beyond: refused).
  std::size_t max_conns = 65536;
};

// Why a connection was closed or refused: one table for the enum, the
// counter name and the operator's text.
#define LNETR_SOCK_CLOSE_REASONS(X)                                                      \
  X(peer_closed, "the peer closed the connection")                                       \
  X(peer_reset, "the peer reset the connection (it exited or closed with data unread)") \
  X(io_error, "another socket error (unreachable, timed out in the kernel, ...)")       \
  X(bad_acceptor, "the acceptor request was malformed or named another node")          \
  X(insecure_port, "connection from a port above 1023 refused (accept=secure)")         \
  X(bad_hello, "the HELLO was malformed or of an unknown version")                      \
  X(wrong_identity, "the peer's HELLO claimed another NID or PID than expected")        \
  X(bad_conn_type, "the HELLO asked for a connection type that cannot be accepted")     \
  X(refused_race, "refused: connection race, the higher NID's connection wins")         \
  X(refused_duplicate, "refused: a connection of this type already exists")             \
  X(refused_stale, "refused: the peer restarted or changed protocol version")          \
  X(refused_peer_table_full, "refused: a new peer while the peer table was full (dataplane.limits.peers)") \
  X(refused_too_many_conns, "refused: the node held dataplane.limits.connections connections")             \
  X(refused_handshakes, "refused: dataplane.limits.handshakes connections were in their handshake")        \
  X(refused_rate, "refused: more connections from that address than dataplane.limits.connect_rate a second") \
  X(peer_refused, "the peer refused the connection (HELLO type NONE)")                  \
  X(bad_message, "a malformed message: bad type, header or length")                     \
  X(bad_zc_ack, "a zero-copy ACK for a cookie never requested")                         \
  X(upper_rejected, "the LNet layer rejected the message as a protocol error")          \
  X(timeout, "no progress for sock_timeout while receiving or sending")                \
  X(siblings_closed, "closed together with a failed connection to the same peer")       \
  X(shutdown, "the node is shutting down")                                               \
  X(ni_deleted, "its local NI was deleted (lnetrctl net del)")

enum class CloseReason : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_SOCK_CLOSE_REASONS(LNETR_X)
#undef LNETR_X
};
inline constexpr std::size_t kCloseReasonCount = 0
#define LNETR_X(n, text) +1
    LNETR_SOCK_CLOSE_REASONS(LNETR_X)
#undef LNETR_X
    ;
std::string_view name(CloseReason r) noexcept;
std::string_view describe(CloseReason r) noexcept;

// Counters of one Node (single writer: the owning thread).
struct Stats {
  std::uint64_t conns_accepted = 0;
  std::uint64_t conns_connected = 0;
  std::uint64_t connect_failures = 0;
  std::array<std::uint64_t, kCloseReasonCount> closed{};
  std::uint64_t rx_msgs = 0;
  std::uint64_t rx_bytes = 0;  // LNet payload bytes
  std::uint64_t tx_msgs = 0;
  std::uint64_t tx_bytes = 0;
  std::uint64_t tx_writes = 0;  // sendmsg() calls that wrote (tx_msgs / tx_writes: coalescing)
  std::uint64_t zc_acks_sent = 0;
  std::uint64_t keepalives_sent = 0;
  // Kernel sockets (the dataplane's TCP counts its own): bytes copied
  // between lnetr's memory and the kernel (every byte read, every byte
  // sent by a copying sendmsg, and zero-copy sends the kernel reported it
  // copied), and bytes the kernel sent from lnetr's memory without a copy.
  std::uint64_t bytes_copied = 0;
  std::uint64_t bytes_zero_copy = 0;
  std::uint64_t zc_sends = 0;        // sendmsg() calls with MSG_ZEROCOPY that took bytes
  std::uint64_t zc_copied = 0;       // ... of which the kernel reported it copied the bytes
  std::uint64_t zc_fallbacks = 0;    // connections that went back to copying: the kernel copied anyway
  std::uint64_t zc_unsupported = 0;  // connections on which the kernel refused SO_ZEROCOPY
  std::uint64_t zc_nobufs = 0;       // zero-copy sends refused (ENOBUFS) and copied instead
  std::uint64_t zc_drains = 0;       // connections closed with zero-copy sends outstanding
  std::uint64_t zc_draining = 0;     // ... of which still waiting for the kernel now (a gauge)
  std::uint64_t zc_disconnect_failures = 0;  // ... whose disconnect failed (held until TCP gives up)
  std::uint64_t peers_refused = 0;   // new peers refused: the table held Options::max_peers
  std::uint64_t peers_freed = 0;     // peers freed after Options::peer_idle at rest
};

class Conn;
class Peer;
class Node;

// An intrusive FIFO of Tx.
struct TxQueue {
  Tx* head = nullptr;
  Tx* tail = nullptr;
  std::size_t count = 0;
  std::size_t bytes = 0;
  bool empty() const noexcept { return head == nullptr; }
  void push(Tx* t) noexcept;
  void push_front(Tx* t) noexcept;
  Tx* pop() noexcept;
};

// A connection accepted and handshaken as far as the acceptor goes (request
// and HELLO read), to be finished by the Node that owns the peer.
struct Accepted {
  std::unique_ptr<Stream> stream;
  Endpoint local{};
  Endpoint remote{};
  AcceptorRequest request;
  Hello hello;
};
// The peer an accepted connection belongs to: the NID its HELLO gives, or
// for a peer connecting from an unprivileged port (a user-space LNet), its
// address on the NI's net, as Linux names such peers.
Nid peer_nid_of(const Accepted& a) noexcept;

// What a local NI needs here: its NID (whose IPv4 address it listens on
// and connects from) and the transport its connections use (nullptr: the
// Node's kernel sockets).
struct LocalNi {
  Nid nid;
  Transport* transport = nullptr;
  // The NI's `lnd tunables` (ksocklnd's per-NI values); unset: Options'.
  int tos = -1;                          // -1: Options::tos
  std::uint32_t conns_per_peer = 0;      // 0: Options::conns_per_peer
  std::chrono::seconds timeout{0};       // 0: Options::timeout
  // Its interface's link is down (the owner says so: set_link): its
  // connections are chosen last.
  bool link_down = false;
};

class Node {
 public:
  Node(Options opts, std::vector<LocalNi> nis, std::uint64_t incarnation, Poller& poller, Upper& upper);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Queue `tx` for `dest`, a peer on one of our nets, connecting if needed.
  // Returns -errno with tx not taken if no local NI is on dest's net
  // (-EHOSTUNREACH) or the peer is unreachable and backing off after failed
  // connects (-EIO, as Linux fails such sends), or tx has a large (IPv6) NID
  // that the peer's protocol version (V3 or older: 64-bit NIDs) cannot
  // carry (-EAFNOSUPPORT; also given to on_sent() if the peer settles on
  // such a version while tx waits).  Otherwise returns 0, and
  // Upper::on_sent(tx) follows — possibly before send() returns, if the
  // connect fails at once.  Upper::on_sent may itself call send().
  int send(const Nid& dest, Tx& tx);

  // Continue a deferred receive: set rx.sink / rx.discard / rx.cookie first.
  void resume(Rx& rx);

  // Finish the handshake of a connection the acceptor took in.
  void adopt(Accepted&& a);

  // The time of the owner's loop turn, for the timestamps taken per read
  // and per queued message (deadlines and liveness, which count seconds):
  // a clock read each was a tenth of a small message's cost.  An owner
  // that sets it must set it every turn; one that never does gets the
  // clock.
  void set_turn_time(Clock::time_point t) noexcept { turn_time_ = t; }
  Clock::time_point turn_time() const noexcept {
    return turn_time_ == Clock::time_point{} ? Clock::now() : turn_time_;
  }

  // Timers: keepalive, timeouts, reconnects.  Call at least once a second.
  void tick(Clock::time_point now);
  // Write what send() and received messages queued since the last call;
  // the number of connections written.  Call after each batch of work
  // (events, rings) and before waiting: sends are coalesced until then.
  std::size_t flush();
  // Free connections closed since the last call (never while dispatching).
  void reap();
  // Close everything (tx fail with -ESHUTDOWN).
  void shutdown();

  const Stats& stats() const noexcept { return stats_; }
  const Options& options() const noexcept { return opts_; }
  std::uint64_t incarnation() const noexcept { return incarnation_; }
  const LocalNi* ni_for_net(Net net) const noexcept;
  // lnetrctl net add / del: a local NI from now on; or no longer, its
  // peers' connections closed (their messages fail with -ENETDOWN, and
  // receives in progress abort) and the peers freed once nothing refers to
  // them.  False if `nid` is one already (add), or not one (del).
  bool add_ni(const LocalNi& ni);
  bool del_ni(const Nid& nid);
  // lnetrctl net set: NI `nid`'s conns_per_peer and timeout from now on
  // (0: unchanged).  Connections made from here on follow them, and every
  // connection's next deadline; those open stay.  False if no such NI.
  bool tune_ni(const Nid& nid, std::uint32_t conns_per_peer, std::chrono::seconds timeout) noexcept;
  // NI `nid`'s interface link is up or down.
  void set_link(const Nid& nid, bool up) noexcept;
  // A connection's (or peer's) NI's values in force.
  std::chrono::seconds timeout_of(const LocalNi* ni) const noexcept {
    return ni != nullptr && ni->timeout.count() > 0 ? ni->timeout : opts_.timeout;
  }
  std::uint32_t conns_per_peer_of(const LocalNi* ni) const noexcept {
    const std::uint32_t n = ni != nullptr && ni->conns_per_peer != 0 ? ni->conns_per_peer : opts_.conns_per_peer;
    return n == 0 ? 1 : n;
  }
  const LocalNi* ni_by_nid(const Nid& nid) const noexcept;
  // True if `nid` is one of ours.
  bool is_local(const Nid& nid) const noexcept { return ni_by_nid(nid) != nullptr; }

  // Introspection for display and tests.
  struct PeerInfo {
    Nid nid;
    std::uint32_t version = 0;
    std::uint64_t incarnation = 0;
    std::size_t conns[4] = {};  // by our ConnType: any, control, bulk_in, bulk_out
    std::size_t queued_tx = 0;
    bool connecting = false;
  };
  std::vector<PeerInfo> peers() const;
  std::size_t peer_count() const noexcept { return peers_.size(); }

 private:
  Clock::time_point turn_time_{};
  friend class Conn;
  friend class Peer;
  // The peer, made if new; nullptr (counted) if new and the table is full.
  Peer* peer(const Nid& nid, const LocalNi& ni);
  Peer* find_peer(const Nid& nid) noexcept;
  std::size_t sweep_idle(Clock::time_point now);
  void sweep_deleted();
  void count_close(CloseReason r) noexcept { ++stats_.closed[static_cast<std::size_t>(r)]; }
  void bury(Conn* c);  // closed: free at the next reap()

  Options opts_;
  // Each where it never moves (peers and connections point at theirs);
  // a deleted one is kept until none of its peers is left.
  std::vector<std::unique_ptr<LocalNi>> nis_;
  std::vector<std::unique_ptr<LocalNi>> deleted_nis_;
  std::uint64_t incarnation_;
  Poller& poller_;
  KernelTransport kernel_;
  Upper& upper_;
  Stats stats_;
  std::size_t conns_ = 0;  // Conn objects alive (open, closed, draining)
  std::unordered_map<Nid, std::unique_ptr<Peer>> peers_;
  NidCache<Peer> recent_;  // the last ones looked up (sweep_idle() forgets those it frees)
  std::vector<Conn*> graveyard_;
  // Closed with zero-copy sends the kernel still holds: kept (their
  // sockets disconnected, not closed) until it has let go of them all.
  std::vector<Conn*> draining_;
  bool shutting_down_ = false;
  std::vector<Conn*> flush_;  // connections with writes queued since flush()
  std::vector<Peer*> tick_peers_;  // tick()'s walk
  Clock::time_point next_sweep_{};
};

// Monotonic wall-clock nanoseconds: the incarnation Linux uses for socklnd.
std::uint64_t new_incarnation() noexcept;

}  // namespace lnetr::sock
