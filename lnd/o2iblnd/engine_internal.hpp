// Private to the o2iblnd engine's .cpp files (engine.cpp, pools.cpp, send.cpp,
// rdma.cpp, receive.cpp, connections.cpp); not installed, included nowhere
// else.  The objects behind Node's forward declarations (TxDesc, DescList,
// RxDesc, Device, Peer, Conn), work-request tags, limits and helpers.
#pragma once

#include <array>
#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "lnd/o2iblnd/engine.hpp"

namespace lnetr::o2ib {

// ---- the engine's objects --------------------------------------------------------------

inline constexpr std::uint64_t kWidTx = 1;    // the signaled SEND of a transmit descriptor
inline constexpr std::uint64_t kWidRx = 2;    // a receive buffer
inline constexpr std::uint64_t kWidRdma = 3;  // an (unsignaled) RDMA write of a transmit descriptor
inline constexpr std::uint64_t kWidUnmap = 4; // a transmit descriptor's sink key is dead (transport's invalidation)
inline constexpr std::uint64_t kWidMask = 7;
// Registered receive memory a device keeps from closed connections for new ones.
inline constexpr std::size_t kRxSlabBytes = 8u << 20;
static_assert(kTransportWrTag > kWidUnmap && kTransportWrTag <= kWidMask);

inline constexpr auto kResolveTimeout = std::chrono::seconds(5);
inline constexpr int kMaxConnRaces = 20;     // races lost before the lower NID is let win
inline constexpr int kReconnHighRace = 10;   // quick reconnects before they wait a second
inline constexpr std::size_t kMaxDescChunks = 64;
inline constexpr std::size_t kMinDescChunk = 32;
inline constexpr std::size_t kBounceSize = kLnetMtu;
inline constexpr std::size_t kMaxBounce = 64;  // per device
inline constexpr std::uint32_t kMaxSge = 30;   // per work request, whatever the device allows
inline constexpr int kOobMsgs = 2;             // NOOPs posted at once (V2)

inline bool oob_capable(std::uint16_t version) noexcept { return version != kVersion1; }
inline std::uint32_t rx_msgs(std::uint16_t qd, std::uint16_t version) noexcept {
  return 2u * qd + (oob_capable(version) ? kOobMsgs : 0);
}

// Linux's nidhash (LNet's hash of a NID): the net number xor the address
// words read as host integers.  For a nid4 on x86 the address word is the
// network-order IPv4 address read little-endian.
inline std::uint64_t nidhash(const Nid& n) noexcept {
  std::uint64_t h = n.net().to_u32();
  for (int i = 0; i < 4; ++i) {
    std::uint32_t w = 0;
    std::memcpy(&w, n.addr.data() + 4 * i, 4);
    h ^= w;
  }
  return h;
}

enum class ConnState : std::uint8_t {
  resolving,       // address and route being resolved (active)
  active_connect,  // CONNREQ sent, waiting for the CONNACK
  passive_wait,    // CONNACK sent, waiting for ESTABLISHED
  established,
  closing,         // queue pair going to the error state
  disconnected,    // waiting for its work requests to flush
};

// An intrusive list of transmit descriptors (a connection's queues).
struct DescList {
  TxDesc* head = nullptr;
  TxDesc* tail = nullptr;
  std::size_t count = 0;
  bool empty() const noexcept { return head == nullptr; }
  void push_back(TxDesc* d) noexcept;
  void remove(TxDesc* d) noexcept;
  void push_front(TxDesc* d) noexcept;
  TxDesc* pop_front() noexcept {
    TxDesc* d = head;
    if (d) remove(d);
    return d;
  }
};

struct Bounce {
  std::uint8_t* mem = nullptr;
  Region region;
};

// A transmit descriptor (Linux's kib_tx): one message and its RDMA, with a
// registered 4 KiB message buffer.
struct TxDesc {
  enum class Role : std::uint8_t {
    plain,  // NOOP, PUT_NAK, GET_DONE without data
    send,   // an Upper's Tx: IMMEDIATE, PUT_REQ -> PUT_DONE, GET_REQ
    sink,   // PUT_ACK for a received PUT_REQ: completes rx at PUT_DONE
    reply,  // GET_DONE answering a GET_REQ: the Upper's REPLY RDMA-written
  };

  // Identity.
  Device* dev = nullptr;
  std::uint32_t index = 0;
  std::uint32_t gen = 1;
  std::uint8_t* msg = nullptr;  // kMaxMsgSize bytes, registered
  std::uint32_t lkey = 0;
  bool in_use = false;

  // Lists.
  TxDesc* prev = nullptr;
  TxDesc* next = nullptr;
  DescList* list = nullptr;

  // State (Linux's tx_queued / tx_sending / tx_waiting / tx_status).
  Conn* conn = nullptr;
  Role role = Role::plain;
  MsgType type = MsgType::noop;
  bool queued = false;
  bool waiting = false;
  int sending = 0;
  int status = 0;
  Clock::time_point deadline{};

  // Content.
  lnd::Tx* tx = nullptr;  // send, reply
  const LocalNi* ni = nullptr;
  lnd::Rx rx;             // sink: the receive this PUT completes
  Cookie peer_cookie = 0; // PUT_ACK: the PUT_REQ's; completions: the one completed; PUT_DONE: the sink's
  std::int32_t compl_status = 0;  // completions without data
  std::uint32_t reply_len = 0;    // GET_REQ: the REPLY's length from GET_DONE
  // The peer's sink (PUT_DONE / GET_DONE after RDMA writes).
  std::uint32_t rkey = 0;
  std::vector<RdmaFrag> remote;
  // Our payload as the device reads it.
  std::vector<Sge> src;
  std::uint32_t payload_len = 0;
  // Our sink (PUT_ACK, GET_REQ), opened to the peer.
  std::optional<Sink> sink;
  std::uint64_t sink_addr = 0;
  std::uint32_t sink_len = 0;
  Bounce* bounce = nullptr;  // registered copy of unregistered memory
  MutableByteSpan bounce_to; // sink through a bounce: where its bytes go at the end

  Cookie cookie() const noexcept { return (std::uint64_t{gen} << 32) | index; }
};

inline void DescList::push_back(TxDesc* d) noexcept {
  assert(d->list == nullptr);
  d->list = this;
  d->next = nullptr;
  d->prev = tail;
  if (tail) tail->next = d; else head = d;
  tail = d;
  ++count;
}

inline void DescList::push_front(TxDesc* d) noexcept {
  assert(d->list == nullptr);
  d->list = this;
  d->prev = nullptr;
  d->next = head;
  if (head) head->prev = d; else tail = d;
  head = d;
  ++count;
}

inline void DescList::remove(TxDesc* d) noexcept {
  assert(d->list == this);
  if (d->prev) d->prev->next = d->next; else head = d->next;
  if (d->next) d->next->prev = d->prev; else tail = d->prev;
  d->prev = d->next = nullptr;
  d->list = nullptr;
  --count;
}

// A receive buffer of a connection.
struct RxDesc {
  Conn* conn = nullptr;
  std::uint8_t* buf = nullptr;
  bool posted = false;
  bool held = false;  // the Upper holds the message (deferred)
  DecodedMsg msg;     // as received, viewing buf (valid while held)
  lnd::Rx rx;         // the Upper's view
};

// One device as this node uses it: its transport, transmit descriptors and
// bounce buffers, registered on its protection domain.
struct Device {
  Transport* tr = nullptr;
  std::size_t chunk = kMinDescChunk;
  std::vector<std::unique_ptr<TxDesc[]>> chunks;
  std::vector<std::uint8_t*> chunk_mem;
  std::vector<Region> chunk_regions;
  std::vector<TxDesc*> free;
  std::vector<Bounce> bounces;  // allocated (stable: reserved)
  std::vector<Bounce*> free_bounces;
  // Receive memory of connections gone, still registered, for the next
  // ones: a peer that reconnects costs no registration on the worker's turn.
  struct RxSlab {
    std::uint8_t* mem = nullptr;
    std::uint32_t msgs = 0;
    Region region;
  };
  std::vector<RxSlab> rx_slabs;
  std::size_t rx_slab_bytes = 0;

  TxDesc* by_index(std::uint32_t i) noexcept {
    const std::size_t c = i / chunk;
    if (c >= chunks.size()) return nullptr;
    return &chunks[c][i % chunk];
  }
};

class Peer {
 public:
  Nid nid;
  const LocalNi* ni = nullptr;
  bool linked = false;  // in the peer table (Linux: kiblnd_peer_active)
  std::uint16_t version = 0;
  std::uint64_t incarnation = 0;
  std::uint16_t queue_depth = kDefaultQueueDepth;
  std::uint16_t queue_depth_mod = 0;  // lowered to fit the device
  std::uint16_t max_frags = kMaxRdmaFrags;
  int connecting = 0;
  int accepting = 0;
  int reconnecting = 0;
  int reconnected = 0;
  int races = 0;
  int error = 0;
  std::vector<Conn*> conns;
  std::size_t next_conn = 0;
  DescList tx_queue;  // waiting for a connection
  Clock::time_point last_alive{};
  int pending_reconnects = 0;          // reconnects held back to the next second
  Clock::time_point reconnect_at{};
  // For freeing it when idle (Node::sweep_idle): connections of any state
  // (until freed) that refer to it, and when it was last in use.
  std::uint32_t conn_refs = 0;
  Clock::time_point last_used{};

  bool is_connecting() const noexcept { return connecting != 0 || reconnecting != 0 || accepting != 0; }
};

class Conn {
 public:
  Peer* peer = nullptr;
  const LocalNi* ni = nullptr;
  Device* dev = nullptr;
  CmId* id = nullptr;
  ConnState state = ConnState::resolving;
  bool active = false;
  bool reconnect = false;
  bool destroyed = false;
  std::size_t index = 0;  // in Node::conns_ until destroyed
  std::uint16_t version = kVersion2;
  std::uint64_t incarnation = 0;  // the peer's
  std::uint16_t queue_depth = 0;
  std::uint16_t max_frags = kMaxRdmaFrags;
  std::int32_t credits = 0;
  std::int32_t reserved_credits = 0;
  std::int32_t outstanding_credits = 0;
  std::int32_t nsends_posted = 0;
  std::int32_t noops_posted = 0;
  // Send work requests posted and not yet completed, against the queue
  // pair's size: each post ends with one signaled SEND, and a queue pair
  // completes its sends in order, so the counts of the posts are a FIFO.
  std::uint32_t max_send_wr = 0;
  std::uint32_t wrs_posted = 0;
  std::deque<std::uint32_t> post_wrs;
  DescList tx_noops, tx_queue, tx_queue_rsrvd, tx_queue_nocred, active_txs;
  // Finished transfers whose sink key on this connection is being
  // invalidated: their buffers move on once it is dead.
  DescList unmapping;
  std::vector<RxDesc> rxs;
  std::uint8_t* rx_mem = nullptr;
  Region rx_region;
  bool rx_registered = false;
  int posted_rx = 0;
  std::vector<RxDesc*> early_rxs;
  Clock::time_point last_send{};
  Clock::time_point connect_started{};
  int comms_error = 0;
  std::uint64_t n_tx = 0, n_rx = 0;
  CloseReason close_reason = CloseReason::peer_disconnected;
  std::array<std::uint8_t, kConnMsgSize> conn_msg{};  // CONNREQ / CONNACK
};

}  // namespace lnetr::o2ib
