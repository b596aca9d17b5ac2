#include "lnd/o2iblnd/engine.hpp"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>

#include "router/enum_names.hpp"
#include "router/local_msgs.hpp"

namespace lnetr::o2ib {

// ---- names --------------------------------------------------------------------------

LNETR_ENUM_NAMES(, CloseReason, LNETR_O2IB_CLOSE_REASONS)
LNETR_ENUM_NAMES(, ConnectFailure, LNETR_O2IB_CONNECT_FAILURES)

std::size_t type_slot(MsgType t) noexcept {
  switch (t) {
    case MsgType::connreq: return 0;
    case MsgType::connack: return 1;
    case MsgType::noop: return 2;
    case MsgType::immediate: return 3;
    case MsgType::put_req: return 4;
    case MsgType::put_nak: return 5;
    case MsgType::put_ack: return 6;
    case MsgType::put_done: return 7;
    case MsgType::get_req: return 8;
    case MsgType::get_done: return 9;
  }
  return 0;
}

std::uint64_t new_incarnation() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec) / 1000;
}

NiTunables effective(const NiTunables& in) noexcept {
  NiTunables t = in;
  if (t.credits == 0) t.credits = 256;
  t.peer_credits = std::clamp<std::uint32_t>(t.peer_credits, kDefaultQueueDepth, kMaxQueueDepth);
  t.peer_credits = std::min(t.peer_credits, t.credits);
  if (t.peer_credits_hiw == 0) t.peer_credits_hiw = t.peer_credits / 2;
  t.peer_credits_hiw = std::max(t.peer_credits_hiw, t.peer_credits / 2);
  if (t.peer_credits_hiw >= t.peer_credits) t.peer_credits_hiw = t.peer_credits - 1;
  if (t.concurrent_sends == 0) t.concurrent_sends = t.peer_credits;
  t.concurrent_sends = std::clamp(t.concurrent_sends, t.peer_credits / 2, t.peer_credits * 2);
  if (t.ntx == 0) t.ntx = 512;
  if (t.conns_per_peer == 0) t.conns_per_peer = 1;
  if (t.timeout.count() <= 0) t.timeout = std::chrono::seconds(50);
  return t;
}

std::optional<Nid> requester_of(ByteSpan private_data) noexcept {
  auto d = decode_msg(private_data);
  if (!d) return std::nullopt;
  return d->msg.hdr.srcnid;
}

// ---- the engine's objects --------------------------------------------------------------

namespace {

constexpr std::uint64_t kWidTx = 1;    // the signaled SEND of a transmit descriptor
constexpr std::uint64_t kWidRx = 2;    // a receive buffer
constexpr std::uint64_t kWidRdma = 3;  // an (unsignaled) RDMA write of a transmit descriptor
constexpr std::uint64_t kWidUnmap = 4; // a transmit descriptor's sink key is dead (transport's invalidation)
constexpr std::uint64_t kWidMask = 7;
// Registered receive memory a device keeps from closed connections for new ones.
constexpr std::size_t kRxSlabBytes = 8u << 20;
static_assert(kTransportWrTag > kWidUnmap && kTransportWrTag <= kWidMask);

constexpr auto kResolveTimeout = std::chrono::seconds(5);
constexpr int kMaxConnRaces = 20;     // races lost before the lower NID is let win
constexpr int kReconnHighRace = 10;   // quick reconnects before they wait a second
constexpr std::size_t kMaxDescChunks = 64;
constexpr std::size_t kMinDescChunk = 32;
constexpr std::size_t kBounceSize = kLnetMtu;
constexpr std::size_t kMaxBounce = 64;  // per device
constexpr std::uint32_t kMaxSge = 30;   // per work request, whatever the device allows
constexpr int kOobMsgs = 2;             // NOOPs posted at once (V2)

bool oob_capable(std::uint16_t version) noexcept { return version != kVersion1; }
std::uint32_t rx_msgs(std::uint16_t qd, std::uint16_t version) noexcept {
  return 2u * qd + (oob_capable(version) ? kOobMsgs : 0);
}

// Linux's nidhash (LNet's hash of a NID): the net number xor the address
// words read as host integers.  For a nid4 on x86 the address word is the
// network-order IPv4 address read little-endian.
std::uint64_t nidhash(const Nid& n) noexcept {
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

}  // namespace

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

void DescList::push_back(TxDesc* d) noexcept {
  assert(d->list == nullptr);
  d->list = this;
  d->next = nullptr;
  d->prev = tail;
  if (tail) tail->next = d; else head = d;
  tail = d;
  ++count;
}

void DescList::push_front(TxDesc* d) noexcept {
  assert(d->list == nullptr);
  d->list = this;
  d->prev = nullptr;
  d->next = head;
  if (head) head->prev = d; else tail = d;
  head = d;
  ++count;
}

void DescList::remove(TxDesc* d) noexcept {
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

// ---- Node -------------------------------------------------------------------------------

Node::Node(Options opts, std::vector<LocalNi> nis, std::uint64_t incarnation, lnd::Upper& upper, ClockFn clock,
           std::uint32_t workers)
    : opts_(opts), nis_(std::move(nis)), incarnation_(incarnation), upper_(upper), clock_(std::move(clock)),
      workers_(std::max<std::uint32_t>(workers, 1)), connreq_rate_(opts.connreq_rate, 4 * opts.connreq_rate) {
  for (LocalNi& ni : nis_) {
    ni.tunables = effective(ni.tunables);
    auto it = std::find_if(devices_.begin(), devices_.end(), [&](const auto& d) { return d->tr == ni.transport; });
    if (it == devices_.end()) {
      auto d = std::make_unique<Device>();
      d->tr = ni.transport;
      d->chunk = std::max<std::size_t>(kMinDescChunk, ni.tunables.ntx / workers_);
      d->bounces.reserve(kMaxBounce);
      if (ni.transport) ni.transport->attach(this);
      devices_.push_back(std::move(d));
    }
  }
}

Node::~Node() {
  shutdown();
  reap();
  for (auto& d : devices_) {
    for (std::size_t i = 0; i < d->chunk_mem.size(); ++i) {
      d->tr->deregister(d->chunk_regions[i]);
      std::free(d->chunk_mem[i]);
    }
    for (Bounce& b : d->bounces) {
      d->tr->deregister(b.region);
      std::free(b.mem);
    }
    for (Device::RxSlab& r : d->rx_slabs) {
      d->tr->deregister(r.region);
      std::free(r.mem);
    }
  }
}

const LocalNi* Node::ni_for_net(Net net) const noexcept {
  for (const LocalNi& ni : nis_)
    if (ni.nid.net() == net) return &ni;
  return nullptr;
}

const LocalNi* Node::ni_by_nid(const Nid& nid) const noexcept {
  for (const LocalNi& ni : nis_)
    if (ni.nid == nid) return &ni;
  return nullptr;
}

Device* Node::device_of(const LocalNi* ni) noexcept {
  for (auto& d : devices_)
    if (d->tr == ni->transport) return d.get();
  return nullptr;
}

std::size_t Node::tx_descs_in_use() const noexcept {
  std::size_t n = 0;
  for (const auto& d : devices_) n += d->chunks.size() * d->chunk - d->free.size();
  return n;
}

std::size_t Node::connections() const noexcept { return conns_.size(); }

// ---- descriptors and buffers -------------------------------------------------------------

TxDesc* Node::get_desc(Device* dev) {
  if (dev->free.empty()) {
    // Grows by a chunk to the peak in flight (bounded by credits); never
    // shrinks.  Each chunk is one registration.
    if (dev->chunks.size() >= kMaxDescChunks) return nullptr;
    const std::size_t n = dev->chunk;
    void* mem = std::aligned_alloc(4096, n * kMaxMsgSize);
    if (!mem) return nullptr;
    Region r;
    if (!dev->tr->register_memory(mem, n * kMaxMsgSize, false, r)) {
      std::free(mem);
      return nullptr;
    }
    auto chunk = std::make_unique<TxDesc[]>(n);
    const auto base = static_cast<std::uint32_t>(dev->chunks.size() * n);
    for (std::size_t i = n; i-- > 0;) {
      TxDesc& d = chunk[i];
      d.dev = dev;
      d.index = base + static_cast<std::uint32_t>(i);
      d.msg = static_cast<std::uint8_t*>(mem) + i * kMaxMsgSize;
      d.lkey = r.lkey;
      dev->free.push_back(&d);
    }
    dev->chunks.push_back(std::move(chunk));
    dev->chunk_mem.push_back(static_cast<std::uint8_t*>(mem));
    dev->chunk_regions.push_back(r);
    stats_.tx_descs += n;
  }
  TxDesc* d = dev->free.back();
  dev->free.pop_back();
  d->in_use = true;
  d->conn = nullptr;
  d->role = TxDesc::Role::plain;
  d->queued = d->waiting = false;
  d->sending = 0;
  d->status = 0;
  d->tx = nullptr;
  d->ni = nullptr;
  d->rx = lnd::Rx{};
  d->peer_cookie = 0;
  d->compl_status = 0;
  d->reply_len = 0;
  d->rkey = 0;
  d->remote.clear();
  d->src.clear();
  d->payload_len = 0;
  d->sink.reset();
  d->sink_addr = 0;
  d->sink_len = 0;
  d->bounce = nullptr;
  d->bounce_to = {};
  return d;
}

void Node::put_desc(TxDesc* d) noexcept {
  assert(d->in_use && d->list == nullptr);
  if (d->sink) {
    (void)d->dev->tr->unmap_sink(*d->sink, 0);
    d->sink.reset();
  }
  if (d->bounce) {
    d->dev->free_bounces.push_back(d->bounce);
    d->bounce = nullptr;
  }
  d->in_use = false;
  ++d->gen;  // its cookie and any Tx's record of it are void from now on
  d->tx = nullptr;
  d->dev->free.push_back(d);
}

Bounce* Node::get_bounce(Device* dev) {
  if (!dev->free_bounces.empty()) {
    Bounce* b = dev->free_bounces.back();
    dev->free_bounces.pop_back();
    return b;
  }
  if (dev->bounces.size() >= kMaxBounce) return nullptr;
  void* mem = std::aligned_alloc(4096, kBounceSize);
  if (!mem) return nullptr;
  Bounce b;
  b.mem = static_cast<std::uint8_t*>(mem);
  if (!dev->tr->register_memory(mem, kBounceSize, true, b.region)) {
    std::free(mem);
    return nullptr;
  }
  dev->bounces.push_back(b);
  return &dev->bounces.back();
}

// The payload of `tx` as the device reads it (desc->src), if all of it is
// memory the transport can key; else desc->src is left empty.
bool Node::key_source(TxDesc* d, const lnd::Tx& tx) {
  Transport* tr = d->dev->tr;
  d->src.clear();
  d->payload_len = tx.hdr.payload_length;
  bool keyed = true;
  auto add = [&](const std::uint8_t* p, std::size_t len) {
    if (len == 0) return;
    auto k = tr->lkey(p, len);
    if (!k) {
      keyed = false;
      return;
    }
    // A run longer than one SGE may carry is split.
    while (len > 0) {
      const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::size_t>(len, 1u << 30));
      d->src.push_back(Sge{reinterpret_cast<std::uint64_t>(p), n, *k});
      p += n;
      len -= n;
    }
  };
  if (!tx.pieces.empty()) {
    for (const auto& piece : tx.pieces) add(piece.data, piece.len);
  } else {
    add(tx.payload.data(), tx.payload.size());
  }
  if (!keyed) d->src.clear();
  return keyed;
}

// As key_source(), and through a bounce buffer (copied, counted) if any of
// it is not registered memory.  False if that is needed and none is left.
bool Node::map_source(TxDesc* d, const lnd::Tx& tx) {
  if (key_source(d, tx)) return true;
  Bounce* b = get_bounce(d->dev);
  if (!b) return false;
  d->bounce = b;
  std::size_t at = 0;
  if (!tx.pieces.empty()) {
    for (const auto& piece : tx.pieces) {
      std::memcpy(b->mem + at, piece.data, piece.len);
      at += piece.len;
    }
  } else {
    std::memcpy(b->mem, tx.payload.data(), tx.payload.size());
    at = tx.payload.size();
  }
  stats_.bytes_copied += at;
  stats_.bytes_bounced += at;
  if (at > 0) d->src.push_back(Sge{reinterpret_cast<std::uint64_t>(b->mem), static_cast<std::uint32_t>(at), b->region.lkey});
  return true;
}

// Open `sink` to the peer on `conn` (PUT_ACK, GET_REQ): desc->sink, or a
// bounce buffer whose bytes are copied to `sink` at the end.
bool Node::map_sink(TxDesc* d, CmId* id, MutableByteSpan sink) {
  Transport* tr = d->dev->tr;
  d->sink_len = static_cast<std::uint32_t>(sink.size());
  bool busy = false;
  if (auto s = tr->map_sink(id, sink.data(), sink.size(), busy)) {
    d->sink = *s;
    d->sink_addr = s->addr;
    return true;
  }
  if (busy) return false;  // no key to give now, whatever the memory
  Bounce* b = get_bounce(d->dev);
  if (!b) return false;
  d->bounce = b;
  d->bounce_to = sink;
  auto s = tr->map_sink(id, b->mem, sink.size(), busy);
  if (!s) return false;
  d->sink = *s;
  d->sink_addr = s->addr;
  return true;
}

// ---- sending ----------------------------------------------------------------------------

int Node::send(const Nid& dest, lnd::Tx& tx) {
  // The REPLY to an optimized GET: RDMA-written into the requester's sink,
  // then GET_DONE, on the connection the GET_REQ came in on.
  if (tx.o2ib_get != nullptr) {
    auto* d = static_cast<TxDesc*>(tx.o2ib_get);
    tx.o2ib_get = nullptr;
    if (!d->in_use || d->gen != tx.o2ib_get_gen || d->role != TxDesc::Role::reply || !d->waiting)
      return -ECONNABORTED;  // its connection is gone
    Conn* c = d->conn;
    d->tx = &tx;
    d->waiting = false;
    if (d->list) d->list->remove(d);
    if (!map_source(d, tx)) {
      d->tx = nullptr;
      d->compl_status = -ENOMEM;
      d->src.clear();
      ++stats_.tx_no_desc;
      queue_tx(d, c);
      return -ENOMEM;
    }
    queue_tx(d, c);
    return 0;
  }

  const LocalNi* ni = ni_for_net(dest.net());
  if (!ni) return -EHOSTUNREACH;
  if (!has_room(dest)) return -ENOSPC;  // a new peer, and the table is full
  Device* dev = device_of(ni);
  TxDesc* d = get_desc(dev);
  if (!d) {
    ++stats_.tx_no_desc;
    return -ENOMEM;
  }
  d->role = TxDesc::Role::send;
  d->tx = &tx;
  d->ni = ni;
  const std::uint32_t payload = tx.hdr.payload_length;
  d->payload_len = payload;
  d->type = MsgType::immediate;
  switch (tx.hdr.type) {
    case lnetr::MsgType::get: {
      // An optimized GET: only sent straight to its target, and only when
      // the REPLY would not fit an IMMEDIATE (o2iblnd.md §6.1).
      const std::uint32_t sink_len = tx.hdr.get().sink_length;
      if (!tx.reply_sink.empty() && dest == tx.hdr.dest_nid && sink_len > kImmediateMaxPayload &&
          tx.reply_sink.size() >= sink_len) {
        d->type = MsgType::get_req;
        d->waiting = true;  // for GET_DONE
      }
      break;
    }
    case lnetr::MsgType::put:
    case lnetr::MsgType::reply:
      if (payload > kImmediateMaxPayload) {
        d->type = MsgType::put_req;
        d->waiting = true;  // for PUT_ACK / PUT_NAK
        if (!map_source(d, tx)) {
          put_desc(d);
          ++stats_.tx_no_desc;
          return -ENOMEM;
        }
      }
      break;
    default:
      break;
  }
  if (d->type == MsgType::immediate && payload > 0) key_source(d, tx);  // else copied when posted
  launch(d, dest);
  return 0;
}

// Linux's kiblnd_launch_tx: queue on a connection, or wait for one.
void Node::launch(TxDesc* d, const Nid& dest) {
  Peer& p = peer(dest, d->ni);
  if (p.linked && !p.conns.empty()) {
    Conn* c = p.conns[p.next_conn++ % p.conns.size()];
    queue_tx(d, c);
    return;
  }
  const auto now = clock_();
  // Waits at most as long as a connection can take (connect timeout plus
  // address and route resolution).
  d->deadline = now + connreq_timeout(*d->ni) + 2 * kResolveTimeout;
  if (p.linked) {
    assert(p.is_connecting());
    p.tx_queue.push_back(d);
    return;
  }
  link(p);
  p.connecting = static_cast<int>(d->ni->tunables.conns_per_peer);
  p.tx_queue.push_back(d);
  for (std::uint32_t i = 0; i < d->ni->tunables.conns_per_peer; ++i) connect_peer(p);
}

std::size_t Node::max_conns_per_peer(const LocalNi& ni) noexcept {
  return 2u * std::max<std::uint32_t>(ni.tunables.conns_per_peer, 1) + 2u;
}

std::chrono::milliseconds Node::connreq_timeout(const LocalNi& ni) const noexcept {
  return std::max<std::chrono::milliseconds>(kResolveTimeout, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                  ni.tunables.timeout) / 4);
}

Peer& Node::peer(const Nid& nid, const LocalNi* ni) {
  auto& slot = peers_[nid];
  if (!slot) {
    slot = std::make_unique<Peer>();
    slot->nid = nid;
    slot->ni = ni;
    slot->last_used = clock_();  // then kept by sweep_idle while linked: no clock per message
  }
  return *slot;
}

bool Node::has_room(const Nid& nid) noexcept {
  if (peers_.size() < opts_.max_peers || find_peer(nid) != nullptr) return true;
  ++stats_.peers_refused;
  return false;
}

Conn* Node::new_conn(Peer& p) {
  auto* c = new Conn();
  c->peer = &p;
  ++p.conn_refs;
  return c;
}

void Node::free_conn(Conn* c) {
  if (c->peer != nullptr) --c->peer->conn_refs;
  std::free(c->rx_mem);
  delete c;
}

Peer* Node::find_peer(const Nid& nid) noexcept {
  auto it = peers_.find(nid);
  return it == peers_.end() ? nullptr : it->second.get();
}

// Into the table as a new peer (Linux creates a fresh one: nothing known).
void Node::link(Peer& p) {
  p.linked = true;
  p.version = 0;
  p.incarnation = 0;
  p.queue_depth = static_cast<std::uint16_t>(p.ni->tunables.peer_credits);
  p.queue_depth_mod = 0;
  p.max_frags = kMaxRdmaFrags;
  p.connecting = p.accepting = p.reconnecting = p.reconnected = p.races = 0;
  p.error = 0;
  p.next_conn = 0;
  p.pending_reconnects = 0;
}

void Node::unlink(Peer& p) { p.linked = false; }

// Linux's kiblnd_queue_tx_locked + kiblnd_check_sends_locked.
void Node::queue_tx(TxDesc* d, Conn* c) {
  if (c->state != ConnState::established) {
    d->status = -ECONNABORTED;
    d->waiting = false;
    if (d->list) d->list->remove(d);
    if (d->sending == 0) tx_done(d);
    return;
  }
  d->queued = true;
  d->deadline = clock_() + c->ni->tunables.timeout;
  d->conn = c;
  DescList* q = &c->tx_queue;
  switch (d->type) {
    case MsgType::put_req:
    case MsgType::get_req:
      q = &c->tx_queue_rsrvd;
      break;
    case MsgType::put_nak:
    case MsgType::put_ack:
    case MsgType::put_done:
    case MsgType::get_done:
      q = &c->tx_queue_nocred;
      break;
    case MsgType::noop:
      q = oob_capable(c->version) ? &c->tx_queue_nocred : &c->tx_noops;
      break;
    default:
      break;
  }
  q->push_back(d);
  check_sends(c);
}

// Linux's kiblnd_need_noop.
bool Node::need_noop(const Conn* c) const noexcept {
  const NiTunables& t = c->ni->tunables;
  // Scaled to a queue depth negotiated down.  At least 1: a peer asking for
  // a depth of 1 would make it 0 (a kernel peer never asks below 8), and
  // "return credits when 0 are owed" means a NOOP after every NOOP.
  const int hiw = oob_capable(c->version)
                      ? std::max(1, static_cast<int>(c->queue_depth * t.peer_credits_hiw / t.peer_credits))
                      : 7;
  const bool keepalive = opts_.keepalive.count() > 0 && clock_() >= c->last_send + opts_.keepalive;
  if (c->outstanding_credits < hiw && !keepalive) return false;
  if (oob_capable(c->version)) {
    if (!c->tx_queue_nocred.empty()) return false;  // it will carry the credits
    return c->tx_queue.empty() || c->credits == 0;
  }
  if (!c->tx_noops.empty() || !c->tx_queue_nocred.empty() || c->credits == 0) return false;
  if (c->credits == 1 && c->outstanding_credits == 0) return false;
  return c->tx_queue.empty() || c->credits == 1;
}

void Node::check_sends(Conn* c) {
  if (c->state != ConnState::established) return;
  while (c->reserved_credits > 0 && !c->tx_queue_rsrvd.empty()) {
    TxDesc* d = c->tx_queue_rsrvd.pop_front();
    c->tx_queue.push_back(d);
    --c->reserved_credits;
  }
  if (need_noop(c)) {
    if (TxDesc* d = get_desc(c->dev)) {
      d->type = MsgType::noop;
      d->ni = c->ni;
      d->queued = true;
      d->deadline = clock_() + c->ni->tunables.timeout;
      d->conn = c;
      (oob_capable(c->version) ? c->tx_queue_nocred : c->tx_noops).push_back(d);
    }
  }
  for (;;) {
    if (c->state != ConnState::established) return;
    TxDesc* d = nullptr;
    int credit = 0;
    if (!c->tx_queue_nocred.empty()) {
      d = c->tx_queue_nocred.head;
    } else if (!c->tx_noops.empty()) {
      d = c->tx_noops.head;
      credit = 1;
    } else if (!c->tx_queue.empty()) {
      d = c->tx_queue.head;
      credit = 1;
    } else {
      break;
    }
    if (post_tx(c, d, credit) != 0) break;
  }
}

// Encode `d`'s message for `c` with the credits it returns now.  The
// payload of an IMMEDIATE is gathered from the Upper's memory when the
// device takes that many pieces (`gather` set), else copied here.
std::size_t Node::encode(Conn* c, TxDesc* d, bool& gather) {
  gather = false;
  Msg m;
  m.hdr.version = c->version;
  m.hdr.type = d->type;
  m.hdr.credits = static_cast<std::uint8_t>(c->outstanding_credits);
  m.hdr.srcnid = c->ni->nid;
  m.hdr.srcstamp = incarnation_;
  m.hdr.dstnid = c->peer->nid;
  m.hdr.dststamp = c->incarnation;
  const MutableByteSpan out(d->msg, kMaxMsgSize);
  RdmaFrag frag{d->sink_len, d->sink_addr};
  switch (d->type) {
    case MsgType::noop:
      m.body = Noop{};
      break;
    case MsgType::immediate: {
      const lnd::Tx& tx = *d->tx;
      const std::uint32_t n = tx.hdr.payload_length;
      const bool can_gather = n > 0 && !d->src.empty() && d->bounce == nullptr &&
                              d->src.size() + 1 <= std::min(kMaxSge, c->dev->tr->max_send_sge()) && !opts_.cksum;
      if (can_gather) {
        gather = true;
        auto r = encode_immediate_head(m.hdr, tx.hdr, n, out, kNativeOrder);
        assert(r);
        stats_.bytes_gathered += n;
        return *r;
      }
      // Copy the payload into the message.
      std::size_t at = kImmediatePayloadOffset;
      if (!tx.pieces.empty()) {
        for (const auto& p : tx.pieces) {
          std::memcpy(d->msg + at, p.data, p.len);
          at += p.len;
        }
      } else if (n > 0) {
        std::memcpy(d->msg + at, tx.payload.data(), n);
      }
      stats_.bytes_copied += n;
      d->src.clear();
      auto r = encode_immediate_head(m.hdr, tx.hdr, n, out, kNativeOrder);
      assert(r);
      if (opts_.cksum) store_checksum(MutableByteSpan(d->msg, kImmediatePayloadOffset + n), kNativeOrder);
      return kImmediatePayloadOffset + n;
    }
    case MsgType::put_req:
      m.body = PutReq{d->tx->hdr, d->cookie()};
      break;
    case MsgType::get_req:
      m.body = GetReq{d->tx->hdr, d->cookie(), RdmaDesc(d->sink->rkey, std::span<const RdmaFrag>(&frag, 1))};
      break;
    case MsgType::put_ack:
      m.body = PutAck{d->peer_cookie, d->cookie(), RdmaDesc(d->sink->rkey, std::span<const RdmaFrag>(&frag, 1))};
      break;
    case MsgType::put_nak:
    case MsgType::put_done:
    case MsgType::get_done:
      m.body = Completion{d->peer_cookie, d->compl_status};
      break;
    default:
      m.body = Noop{};
      break;
  }
  auto r = encode_msg(m, out, kNativeOrder, opts_.cksum ? Checksum::on : Checksum::off);
  assert(r);
  return r ? *r : 0;
}

// Linux's kiblnd_post_tx_locked: 0 posted (or a redundant NOOP dropped),
// -EAGAIN not now (credits, concurrent sends), -EIO failed.
int Node::post_tx(Conn* c, TxDesc* d, int credit) {
  const int concurrent = static_cast<int>(oob_capable(c->version)
                                              ? c->ni->tunables.concurrent_sends
                                              : std::clamp<std::uint32_t>(c->ni->tunables.concurrent_sends, 4, 16));
  if (c->nsends_posted >= concurrent) return -EAGAIN;
  if (credit != 0 && c->credits == 0) return -EAGAIN;
  if (credit != 0 && !oob_capable(c->version) && c->credits == 1 && d->type != MsgType::noop) return -EAGAIN;

  DescList* from = d->list;
  from->remove(d);
  d->queued = false;
  if (d->type == MsgType::get_req && !d->sink) {
    const std::uint32_t sink_len = d->tx->hdr.get().sink_length;
    if (!map_sink(d, c->id, d->tx->reply_sink.first(sink_len))) {
      d->status = -ENOMEM;
      d->waiting = false;
      tx_done(d);
      return 0;
    }
  }
  if (d->type == MsgType::noop &&
      (!need_noop(c) || (oob_capable(c->version) && c->noops_posted == kOobMsgs))) {
    put_desc(d);  // redundant: one is queued again when needed
    return 0;
  }

  // RDMA writes first (PUT_DONE, GET_DONE with data), then the message.
  std::vector<SendWr>& wrs = scratch_wrs_;
  std::vector<Sge>& sges = scratch_sges_;
  wrs.clear();
  sges.clear();
  if ((d->type == MsgType::put_done || d->type == MsgType::get_done) && d->role != TxDesc::Role::plain) {
    d->compl_status = plan_rdma(c, d);
    if (d->compl_status < 0) wrs.clear(), sges.clear();
  }
  bool gather = false;
  const std::size_t nob = encode(c, d, gather);
  const std::size_t msg_sge = sges.size();
  sges.push_back(Sge{reinterpret_cast<std::uint64_t>(d->msg), static_cast<std::uint32_t>(
                                                                  gather ? kImmediatePayloadOffset : nob), d->lkey});
  if (gather) sges.insert(sges.end(), d->src.begin(), d->src.end());
  // (The RDMA work requests point into sges: fix their pointers now that
  // it is complete.)
  std::size_t at = 0;
  for (SendWr& w : wrs) {
    w.sge = sges.data() + at;
    at += w.num_sge;
  }
  SendWr msg;
  msg.wr_id = reinterpret_cast<std::uint64_t>(d) | kWidTx;
  msg.op = WrOp::send;
  msg.signaled = true;
  msg.sge = sges.data() + msg_sge;
  msg.num_sge = static_cast<std::uint32_t>(sges.size() - msg_sge);
  wrs.push_back(msg);
  if (c->wrs_posted + wrs.size() > c->max_send_wr) {
    // The queue pair is full (RDMA transfers' writes are many): it waits
    // for completions, first in its queue.
    from->push_front(d);
    d->queued = true;
    return -EAGAIN;
  }

  const std::uint8_t returned = static_cast<std::uint8_t>(c->outstanding_credits);
  c->credits -= credit;
  c->outstanding_credits = 0;
  ++c->nsends_posted;
  if (d->type == MsgType::noop) ++c->noops_posted;
  ++d->sending;
  c->active_txs.push_back(d);
  c->last_send = clock_();
  const int rc = c->dev->tr->post_send(c->id, wrs.data(), wrs.size());
  if (rc == 0) {
    c->wrs_posted += static_cast<std::uint32_t>(wrs.size());
    c->post_wrs.push_back(static_cast<std::uint32_t>(wrs.size()));
    ++c->n_tx;
    ++stats_.tx_msgs[type_slot(d->type)];
    if (d->type == MsgType::immediate) stats_.tx_bytes += d->payload_len;
    if ((d->type == MsgType::put_done || d->type == MsgType::get_done) && d->compl_status > 0)
      stats_.rdma_bytes_written += static_cast<std::uint64_t>(d->compl_status), stats_.tx_bytes += d->payload_len;
    return 0;
  }
  // Not posted: undo, and the connection is finished.
  c->credits += credit;
  c->outstanding_credits += returned;
  --c->nsends_posted;
  if (d->type == MsgType::noop) --c->noops_posted;
  d->status = rc;
  d->waiting = false;
  --d->sending;
  const bool done = d->sending == 0;
  if (done) c->active_txs.remove(d);
  close_conn(c, CloseReason::post_failed, rc);
  if (done) tx_done(d);
  return -EIO;
}

// The RDMA writes of `d`'s payload into the peer's sink (Linux's
// kiblnd_init_rdma), appended to the scratch lists: one work request per
// run of local pieces while the remote fragment stays the same, at most as
// many pieces per request as the device takes, at most max_frags requests.
// Returns the bytes to be written, or -errno (nothing written: the
// completion carries the error).
std::int32_t Node::plan_rdma(Conn* c, TxDesc* d) {
  if (d->compl_status < 0) return d->compl_status;  // decided already (no memory)
  // A PUT fills the sink the peer named (it may take less than was sent);
  // a REPLY is written whole.  Either side running out is an error.
  std::uint32_t resid = d->type == MsgType::put_done ? total(d->remote) : d->payload_len;
  if (resid == 0) return 0;
  const std::uint32_t per_wr = std::min(kMaxSge, c->dev->tr->max_send_sge());
  std::vector<SendWr>& wrs = scratch_wrs_;
  std::vector<Sge>& sges = scratch_sges_;
  std::size_t si = 0, di = 0;
  std::uint32_t soff = 0, doff = 0;
  const std::uint32_t written = resid;
  while (resid > 0) {
    if (si >= d->src.size()) return -EPROTO;
    if (di >= d->remote.size()) return -EPROTO;
    const Sge& s = d->src[si];
    const RdmaFrag& r = d->remote[di];
    const std::uint32_t n = std::min({s.length - soff, r.nob - doff, resid});
    if (wrs.empty() || wrs.back().num_sge == per_wr ||
        wrs.back().remote_addr + wr_bytes(wrs.back(), sges) != r.addr + doff) {
      if (wrs.size() >= c->max_frags) return -EMSGSIZE;
      SendWr w;
      w.wr_id = reinterpret_cast<std::uint64_t>(d) | kWidRdma;
      w.op = WrOp::rdma_write;
      w.signaled = false;
      w.remote_addr = r.addr + doff;
      w.rkey = d->rkey;
      w.num_sge = 0;
      wrs.push_back(w);
    }
    sges.push_back(Sge{s.addr + soff, n, s.lkey});
    ++wrs.back().num_sge;
    soff += n;
    doff += n;
    resid -= n;
    if (soff == s.length) ++si, soff = 0;
    if (doff == r.nob) ++di, doff = 0;
  }
  return static_cast<std::int32_t>(written);
}

std::uint32_t Node::total(const std::vector<RdmaFrag>& frags) noexcept {
  std::uint64_t n = 0;
  for (const RdmaFrag& f : frags) n += f.nob;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(n, UINT32_MAX));
}

std::uint64_t Node::wr_bytes(const SendWr& w, const std::vector<Sge>& sges) noexcept {
  // The work request's pieces are the last num_sge entries.
  std::uint64_t n = 0;
  for (std::size_t i = sges.size() - w.num_sge; i < sges.size(); ++i) n += sges[i].length;
  return n;
}

// ---- completion of messages ----------------------------------------------------------------

// A descriptor is finished: give the Upper what it is owed and free it.
void Node::tx_done(TxDesc* d) {
  assert(d->list == nullptr && d->sending == 0);
  // The peer's key to our sink dies before the sink's memory moves on
  // (delivered, aborted, or given to another transfer): a key that is
  // invalidated through the connection finishes this on its completion.
  if (d->sink && d->conn && !d->conn->destroyed) {
    const Sink s = *d->sink;
    d->sink.reset();
    if (d->dev->tr->unmap_sink(s, reinterpret_cast<std::uint64_t>(d) | kWidUnmap)) {
      ++d->sending;
      d->conn->unmapping.push_back(d);
      ++stats_.sinks_unmapping;
      return;
    }
  }
  const TxDesc::Role role = d->role;
  const int status = d->status;
  lnd::Tx* tx = d->tx;
  const MsgType type = d->type;
  const std::uint32_t reply_len = d->reply_len;
  const Nid from = d->conn ? d->conn->peer->nid : Nid{};
  const LocalNi* ni = d->conn ? d->conn->ni : d->ni;
  lnd::Rx rx = d->rx;
  if (role == TxDesc::Role::sink && status >= 0 && d->bounce) {
    std::memcpy(d->bounce_to.data(), d->bounce->mem, d->bounce_to.size());
    stats_.bytes_copied += d->bounce_to.size();
    stats_.bytes_bounced += d->bounce_to.size();
  }
  // An optimized GET's REPLY landed in our sink: through a bounce, copied.
  std::optional<std::pair<Bounce*, std::uint32_t>> get_bounce_data;
  if (role == TxDesc::Role::send && type == MsgType::get_req && status >= 0 && d->bounce)
    get_bounce_data = {{d->bounce, reply_len}};
  if (get_bounce_data) {
    // Keep the bounce until the REPLY is delivered below.
    d->bounce = nullptr;
  }
  put_desc(d);

  switch (role) {
    case TxDesc::Role::plain:
      break;
    case TxDesc::Role::sink:
      if (status >= 0) {
        upper_.on_received(rx);
      } else {
        upper_.on_rx_aborted(rx);
      }
      break;
    case TxDesc::Role::reply:
      if (tx) upper_.on_sent(*tx, status < 0 ? status : 0);
      break;
    case TxDesc::Role::send:
      if (type == MsgType::get_req && status >= 0) deliver_get_reply(*tx, from, ni, reply_len, get_bounce_data);
      if (get_bounce_data) ni_device_free_bounce(ni, get_bounce_data->first);
      upper_.on_sent(*tx, status < 0 ? status : 0);
      break;
  }
}

void Node::ni_device_free_bounce(const LocalNi* ni, Bounce* b) {
  if (Device* dev = device_of(ni)) dev->free_bounces.push_back(b);
}

// GET_DONE completed an optimized GET: its REPLY, whose payload is already
// in the sink, reaches the Upper as a received message (Linux finalises
// the REPLY message LNet created for the GET).
void Node::deliver_get_reply(lnd::Tx& get, const Nid& from, const LocalNi* ni, std::uint32_t len,
                             const std::optional<std::pair<Bounce*, std::uint32_t>>& bounce) {
  lnd::Rx rx;
  rx.conn = nullptr;
  rx.from = from;
  rx.ni = ni ? ni->nid : get.hdr.src_nid;
  rx.hdr = make_reply(get.hdr, get.hdr.dest_nid, len);
  ++stats_.rx_msgs[type_slot(MsgType::get_done)];
  stats_.rx_bytes += len;
  if (upper_.on_head(rx) != lnd::RxVerdict::accept) {
    upper_.on_rx_aborted(rx);
    return;
  }
  if (!rx.discard && !rx.sink.empty()) {
    const std::size_t n = std::min<std::size_t>(rx.sink.size(), len);
    const std::uint8_t* from_mem = bounce ? bounce->first->mem : get.reply_sink.data();
    if (from_mem != rx.sink.data()) {
      std::memmove(rx.sink.data(), from_mem, n);
      stats_.bytes_copied += n;
      if (bounce) stats_.bytes_bounced += n;
    }
  }
  upper_.on_received(rx);
}

// ---- receiving -----------------------------------------------------------------------------

// Post `rx` again; `credit`: what its reposting gives back (Linux's
// IBLND_POSTRX_*).
void Node::post_rx(RxDesc* rx, PostCredit credit) {
  Conn* c = rx->conn;
  rx->held = false;
  if (c->state > ConnState::established) {
    maybe_destroy(c);
    return;  // no more posts
  }
  RecvWr wr;
  wr.wr_id = reinterpret_cast<std::uint64_t>(rx) | kWidRx;
  wr.sge = Sge{reinterpret_cast<std::uint64_t>(rx->buf), kMaxMsgSize, c->rx_region.lkey};
  const int rc = c->dev->tr->post_recv(c->id, wr);
  if (rc != 0) {
    if (c->state == ConnState::established) close_conn(c, CloseReason::post_failed, rc);
    return;
  }
  rx->posted = true;
  ++c->posted_rx;
  if (c->state < ConnState::established || credit == PostCredit::none) return;
  if (credit == PostCredit::peer) {
    ++c->outstanding_credits;
  } else {
    ++c->reserved_credits;
  }
  check_sends(c);
}

void Node::on_completion(const WorkCompletion& wc) {
  ++stats_.completions;
  const std::uint64_t kind = wc.wr_id & kWidMask;
  void* ptr = reinterpret_cast<void*>(wc.wr_id & ~kWidMask);
  switch (kind) {
    case kWidRx:
      rx_complete(static_cast<RxDesc*>(ptr), wc);
      break;
    case kWidTx:
      tx_complete(static_cast<TxDesc*>(ptr), wc);
      break;
    case kWidRdma: {
      // Unsignaled: only a failure completes one.  The SEND after it
      // completes (flushed) and finishes the descriptor.
      auto* d = static_cast<TxDesc*>(ptr);
      if (wc.status != 0 && d->conn && d->conn->state == ConnState::established)
        close_conn(d->conn, wc.flushed ? CloseReason::peer_disconnected : CloseReason::tx_failed, -EIO);
      break;
    }
    case kWidUnmap: {
      // The sink's key is dead (invalidated, or flushed with its queue
      // pair): the transfer finishes as it would have without the wait.
      auto* d = static_cast<TxDesc*>(ptr);
      Conn* c = d->conn;
      if (!d->in_use || c == nullptr || d->list != &c->unmapping) break;  // (abandoned at shutdown)
      c->unmapping.remove(d);
      --d->sending;
      tx_done(d);
      maybe_destroy(c);
      break;
    }
    default:
      break;
  }
}

// Linux's kiblnd_tx_complete.
void Node::tx_complete(TxDesc* d, const WorkCompletion& wc) {
  Conn* c = d->conn;
  const bool failed = wc.status != 0;
  if (failed) {
    if (c->state == ConnState::established)
      close_conn(c, wc.flushed ? CloseReason::peer_disconnected : CloseReason::tx_failed, -EIO);
  } else {
    c->peer->last_alive = clock_();
  }
  --d->sending;
  --c->nsends_posted;
  if (d->type == MsgType::noop) --c->noops_posted;
  if (!c->post_wrs.empty()) {
    c->wrs_posted -= c->post_wrs.front();
    c->post_wrs.pop_front();
  }
  if (failed) {
    d->waiting = false;
    d->status = -EIO;
  }
  const bool idle = d->sending == 0 && !d->waiting && !d->queued;
  if (idle && d->list) d->list->remove(d);
  check_sends(c);
  if (idle) tx_done(d);
  maybe_destroy(c);
}

// Linux's kiblnd_rx_complete.
void Node::rx_complete(RxDesc* rx, const WorkCompletion& wc) {
  Conn* c = rx->conn;
  rx->posted = false;
  --c->posted_rx;
  if (c->state > ConnState::established) {
    maybe_destroy(c);
    return;
  }
  if (wc.status != 0) {
    if (c->state == ConnState::established) {
      // Flushed: the queue pair went to the error state under us (the peer
      // disconnected); any other status is the receive's own failure.
      close_conn(c, wc.flushed ? CloseReason::peer_disconnected : CloseReason::rx_failed, -EIO);
    } else {
      c->comms_error = -EIO;
    }
    maybe_destroy(c);
    return;
  }
  auto d = decode_msg(ByteSpan(rx->buf, std::min<std::size_t>(wc.byte_len, kMaxMsgSize)));
  if (!d) {
    fail_rx(c, CloseReason::bad_message, -EPROTO);
    return;
  }
  const MsgHeader& h = d->msg.hdr;
  if (h.srcnid != c->peer->nid || h.dstnid != c->ni->nid || h.srcstamp != c->incarnation ||
      h.dststamp != incarnation_) {
    fail_rx(c, CloseReason::stale_message, -ESTALE);
    return;
  }
  c->peer->last_alive = clock_();
  rx->msg = *d;
  if (c->state < ConnState::established) {
    // Before ESTABLISHED reached us (passive): handled once it does.
    rx->held = true;
    c->early_rxs.push_back(rx);
    return;
  }
  handle_rx(rx);
}

void Node::fail_rx(Conn* c, CloseReason why, int error) {
  if (c->state == ConnState::established) {
    close_conn(c, why, error);
  } else if (c->comms_error == 0) {
    c->comms_error = error;
    c->close_reason = why;
  }
  maybe_destroy(c);
}

// Linux's kiblnd_handle_rx.
void Node::handle_rx(RxDesc* rx) {
  Conn* c = rx->conn;
  const Msg& m = rx->msg.msg;
  const int credits = m.hdr.credits;
  ++stats_.rx_msgs[type_slot(m.hdr.type)];
  ++c->n_rx;
  if (credits != 0) {
    if (c->credits + credits > c->queue_depth) {
      close_conn(c, CloseReason::bad_credits, -EPROTO);
      post_rx(rx, PostCredit::none);
      return;
    }
    c->credits += credits;
    if (m.hdr.type == MsgType::noop && !oob_capable(c->version)) ++c->outstanding_credits;
    check_sends(c);
  }
  PostCredit post = PostCredit::none;
  switch (m.hdr.type) {
    case MsgType::noop:
      post = oob_capable(c->version) || credits != 0 ? PostCredit::none : PostCredit::peer;
      break;
    case MsgType::immediate:
    case MsgType::put_req:
    case MsgType::get_req:
      parse(rx);
      return;  // reposted once the Upper is done with it
    case MsgType::put_nak:
      post_rx(rx, PostCredit::reserved);
      handle_completion(c, MsgType::put_req, m.completion()->status, m.completion()->cookie);
      return;
    case MsgType::put_ack: {
      const PutAck& pa = *m.put_ack();
      TxDesc* d = find_waiting(c, MsgType::put_req, pa.src_cookie);
      if (!d) {
        post_rx(rx, PostCredit::reserved);
        close_conn(c, CloseReason::unmatched_completion, -EPROTO);
        return;
      }
      // The payload goes to the sink it names, then PUT_DONE.
      d->rkey = pa.rd.key();
      d->remote.clear();
      for (std::size_t i = 0; i < pa.rd.nfrags(); ++i) d->remote.push_back(pa.rd.frag(i));
      d->peer_cookie = pa.dst_cookie;
      d->type = MsgType::put_done;
      d->waiting = false;
      if (d->list) d->list->remove(d);
      post_rx(rx, PostCredit::reserved);
      queue_tx(d, c);
      return;
    }
    case MsgType::put_done:
      post_rx(rx, PostCredit::peer);
      handle_completion(c, MsgType::put_ack, m.completion()->status, m.completion()->cookie);
      return;
    case MsgType::get_done:
      post_rx(rx, PostCredit::reserved);
      handle_completion(c, MsgType::get_req, m.completion()->status, m.completion()->cookie);
      return;
    default:  // CONNREQ / CONNACK on a connection
      close_conn(c, CloseReason::bad_message, -EPROTO);
      break;
  }
  post_rx(rx, post);
}

// The waiting request of `type` that `cookie` names on `c`.
TxDesc* Node::find_waiting(Conn* c, MsgType type, Cookie cookie) noexcept {
  TxDesc* d = c->dev->by_index(static_cast<std::uint32_t>(cookie));
  if (!d || !d->in_use || d->gen != static_cast<std::uint32_t>(cookie >> 32) || d->conn != c || !d->waiting ||
      d->type != type)
    return nullptr;
  return d;
}

// Linux's kiblnd_handle_completion.
void Node::handle_completion(Conn* c, MsgType type, std::int32_t status, Cookie cookie) {
  TxDesc* d = find_waiting(c, type, cookie);
  if (!d) {
    close_conn(c, CloseReason::unmatched_completion, -EPROTO);
    return;
  }
  // GET_DONE's status is what the peer wrote into our sink: never more
  // than the sink it was given.
  if (type == MsgType::get_req && status > 0 && static_cast<std::uint32_t>(status) > d->sink_len) {
    close_conn(c, CloseReason::bad_message, -EPROTO);
    return;
  }
  if (d->status == 0) {
    if (status < 0) {
      d->status = status;
    } else if (type == MsgType::get_req) {
      d->reply_len = static_cast<std::uint32_t>(status);
      stats_.rdma_bytes_received += d->reply_len;
    } else if (type == MsgType::put_ack) {
      stats_.rdma_bytes_received += static_cast<std::uint32_t>(status);
      stats_.rx_bytes += d->rx.hdr.payload_length;
    }
  }
  d->waiting = false;
  const bool idle = !d->queued && d->sending == 0;
  if (idle) {
    if (d->list) d->list->remove(d);
    tx_done(d);
  }
}

// An IMMEDIATE, PUT_REQ or GET_REQ for LNet (Linux's lnet_parse).
void Node::parse(RxDesc* rx) {
  Conn* c = rx->conn;
  const Msg& m = rx->msg.msg;
  const LnetHeader* hdr = nullptr;
  if (const auto* im = m.immediate()) hdr = &im->hdr;
  if (const auto* pr = m.put_req()) hdr = &pr->hdr;
  if (const auto* gr = m.get_req()) hdr = &gr->hdr;
  assert(hdr);
  if (m.get_req() && hdr->dest_nid != c->ni->nid) {
    // Optimized GETs are only sent straight to their target (§6.5).
    post_rx(rx, PostCredit::peer);
    close_conn(c, CloseReason::get_not_for_us, -EPROTO);
    return;
  }
  if (check_header(*hdr)) {
    post_rx(rx, PostCredit::peer);
    close_conn(c, CloseReason::upper_rejected, -EPROTO);
    return;
  }
  rx->rx = lnd::Rx{};
  rx->rx.conn = rx;
  rx->rx.from = c->peer->nid;
  rx->rx.ni = c->ni->nid;
  rx->rx.hdr = *hdr;
  rx->held = true;
  switch (upper_.on_head(rx->rx)) {
    case lnd::RxVerdict::reject:
      rx->held = false;
      post_rx(rx, PostCredit::peer);
      close_conn(c, CloseReason::upper_rejected, -EPROTO);
      return;
    case lnd::RxVerdict::defer:
      return;  // held: its buffer, and the sender's credit, wait for resume()
    case lnd::RxVerdict::accept:
      break;
  }
  recv(rx);
}

void Node::resume(lnd::Rx& r) {
  auto* rx = static_cast<RxDesc*>(r.conn);
  if (!rx || !rx->held) return;
  rx->rx = r;
  if (rx->conn->state != ConnState::established) {
    rx->held = false;
    upper_.on_rx_aborted(rx->rx);
    maybe_destroy(rx->conn);
    return;
  }
  recv(rx);
}

// Linux's kiblnd_recv: the Upper has said where the payload goes.
void Node::recv(RxDesc* rx) {
  Conn* c = rx->conn;
  const Msg& m = rx->msg.msg;
  lnd::Rx& r = rx->rx;
  if (const auto* im = m.immediate()) {
    if (!r.discard && r.sink.size() > im->payload.size()) {
      rx->held = false;
      upper_.on_rx_aborted(r);
      post_rx(rx, PostCredit::peer);
      close_conn(c, CloseReason::bad_payload, -EPROTO);
      return;
    }
    if (!r.discard && !r.sink.empty()) {
      std::memcpy(r.sink.data(), im->payload.data(), r.sink.size());
      stats_.bytes_copied += r.sink.size();
    }
    stats_.rx_bytes += im->payload.size();
    lnd::Rx done = r;
    if (r.hdr.type == lnetr::MsgType::get && r.hdr.dest_nid == c->ni->nid) {
      // A GET for us: LNet finishes receiving it (the buffer goes back,
      // its credit owed) before it sends the REPLY, which carries the credit.
      post_rx(rx, PostCredit::peer);
      upper_.on_received(done);
    } else {
      // Anything else is finished inside the receive: an ACK it asks for,
      // or the send of a routed message, leaves before the buffer goes back
      // and does not carry this credit yet.
      upper_.on_received(done);
      post_rx(rx, PostCredit::peer);
    }
    return;
  }
  if (const auto* pr = m.put_req()) {
    const Cookie cookie = pr->cookie;
    if (r.discard || r.sink.empty()) {
      // Nothing wanted: PUT_NAK with status 0.
      lnd::Rx done = r;
      send_completion(c, MsgType::put_nak, 0, cookie);
      upper_.on_received(done);
      post_rx(rx, PostCredit::peer);
      return;
    }
    TxDesc* d = get_desc(c->dev);
    if (!d) {
      // Not answering would leave the peer's PUT hanging: close instead.
      lnd::Rx done = r;
      rx->held = false;
      post_rx(rx, PostCredit::peer);
      close_conn(c, CloseReason::no_resources, -ENOMEM);
      upper_.on_rx_aborted(done);
      return;
    }
    d->role = TxDesc::Role::sink;
    d->type = MsgType::put_ack;
    d->ni = c->ni;
    d->rx = r;
    d->rx.conn = nullptr;  // the receive buffer goes back now
    d->peer_cookie = cookie;
    if (!map_sink(d, c->id, r.sink)) {
      put_desc(d);
      lnd::Rx done = r;
      rx->held = false;
      send_completion(c, MsgType::put_nak, -ENOMEM, cookie);
      post_rx(rx, PostCredit::peer);
      upper_.on_rx_aborted(done);
      return;
    }
    d->waiting = true;  // for PUT_DONE
    rx->held = false;
    queue_tx(d, c);
    // The buffer is reposted now; its credit goes back with PUT_DONE.
    post_rx(rx, PostCredit::none);
    return;
  }
  if (const auto* gr = m.get_req()) {
    const Cookie cookie = gr->cookie;
    lnd::Rx done = r;
    lnd::Tx* reply = r.reply;
    if (reply) {
      // The Upper will send its REPLY: keep the requester's sink until then.
      TxDesc* d = get_desc(c->dev);
      if (d) {
        d->role = TxDesc::Role::reply;
        d->type = MsgType::get_done;
        d->ni = c->ni;
        d->conn = c;
        d->peer_cookie = cookie;
        d->rkey = gr->rd.key();
        for (std::size_t i = 0; i < gr->rd.nfrags(); ++i) d->remote.push_back(gr->rd.frag(i));
        d->waiting = true;
        d->deadline = clock_() + c->ni->tunables.timeout;
        c->active_txs.push_back(d);
        reply->o2ib_get = d;
        reply->o2ib_get_gen = d->gen;
      } else {
        send_completion(c, MsgType::get_done, -ENOMEM, cookie);
        reply->o2ib_get = nullptr;
      }
    } else {
      send_completion(c, MsgType::get_done, -ENODATA, cookie);
    }
    upper_.on_received(done);
    post_rx(rx, PostCredit::peer);
    return;
  }
}

// PUT_NAK, or GET_DONE without data.
void Node::send_completion(Conn* c, MsgType type, std::int32_t status, Cookie cookie) {
  TxDesc* d = get_desc(c->dev);
  if (!d) {
    close_conn(c, CloseReason::no_resources, -ENOMEM);
    return;
  }
  d->type = type;
  d->ni = c->ni;
  d->peer_cookie = cookie;
  d->compl_status = status;
  queue_tx(d, c);
}

// ---- connections ---------------------------------------------------------------------------

void Node::connect_peer(Peer& p) {
  const LocalNi* ni = p.ni;
  if (conns_.size() >= opts_.max_conns) {  // dataplane.limits.connections
    ++stats_.conns_refused;
    peer_connect_failed(p, true, -EMFILE);
    return;
  }
  Conn* c = new_conn(p);
  c->ni = ni;
  c->dev = device_of(ni);
  c->active = true;
  c->state = ConnState::resolving;
  int err = 0;
  CmId* id = ni->transport->resolve(ni->nid.addr4(), p.nid.addr4(), opts_.service, opts_.use_privileged_port,
                                    ni->tunables.tos, err);
  if (!id) {
    free_conn(c);
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::unreachable)];
    peer_connect_failed(p, true, err ? err : -EHOSTUNREACH);
    return;
  }
  c->id = id;
  id->context = c;
  c->connect_started = clock_();
  c->index = conns_.size();
  conns_.push_back(c);
}

void Node::on_resolved(CmId* id, int status) {
  auto* c = static_cast<Conn*>(id->context);
  if (!c || c->state != ConnState::resolving) return;
  if (status != 0) {
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::unreachable)];
    connreq_done(c, status);
    return;
  }
  active_connect(c);
}

// The queue pair and receive buffers of `c` (queue depth lowered until the
// device can make it, as Linux does).  False: none could be made.
bool Node::make_qp(Conn* c) {
  Peer& p = *c->peer;
  if (p.queue_depth_mod && p.queue_depth_mod < c->queue_depth) c->queue_depth = p.queue_depth_mod;
  Transport* tr = c->dev->tr;
  for (;;) {
    QpCaps caps;
    caps.max_send_wr = (1u + c->max_frags) * c->queue_depth;
    caps.max_recv_wr = rx_msgs(c->queue_depth, c->version);
    caps.max_send_sge = std::min(kMaxSge, tr->max_send_sge());
    // PUT_ACK sinks are at most queue_depth (each holds its PUT_REQ's
    // credit until PUT_DONE); GETs the router sends hold a sink until
    // GET_DONE, at most the NI's peer_credits of them (LNet's credits to
    // the peer); twice that, for windows still being invalidated.
    caps.max_sinks = 2u * (c->queue_depth + static_cast<std::uint32_t>(c->ni->tunables.peer_credits));
    const int rc = tr->create_qp(c->id, caps);
    if (rc == 0) {
      c->max_send_wr = caps.max_send_wr;
      break;
    }
    if (rc != -ENOMEM || c->queue_depth < 2) return false;
    --c->queue_depth;
  }
  if (!p.queue_depth_mod && c->queue_depth != p.queue_depth) p.queue_depth_mod = c->queue_depth;
  const std::uint32_t n = rx_msgs(c->queue_depth, c->version);
  auto& slabs = c->dev->rx_slabs;
  if (auto it = std::find_if(slabs.begin(), slabs.end(), [n](const Device::RxSlab& r) { return r.msgs == n; });
      it != slabs.end()) {
    c->rx_mem = it->mem;
    c->rx_region = it->region;
    c->dev->rx_slab_bytes -= std::size_t{n} * kMaxMsgSize;
    *it = slabs.back();
    slabs.pop_back();
    ++stats_.rx_slabs_reused;
  } else {
    c->rx_mem = static_cast<std::uint8_t*>(std::aligned_alloc(4096, std::size_t{n} * kMaxMsgSize));
    if (!c->rx_mem) return false;
    if (!tr->register_memory(c->rx_mem, std::size_t{n} * kMaxMsgSize, false, c->rx_region)) return false;
  }
  c->rx_registered = true;
  c->rxs.resize(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    c->rxs[i].conn = c;
    c->rxs[i].buf = c->rx_mem + std::size_t{i} * kMaxMsgSize;
  }
  for (RxDesc& rx : c->rxs) {
    post_rx(&rx, PostCredit::none);
    if (!rx.posted) return false;
  }
  return true;
}

// Linux's kiblnd_active_connect.
void Node::active_connect(Conn* c) {
  Peer& p = *c->peer;
  c->version = p.version ? p.version : kVersion2;
  c->queue_depth = p.queue_depth;
  c->max_frags = p.max_frags;
  if (!make_qp(c)) {
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::no_resources)];
    connreq_done(c, -ENOMEM);
    return;
  }
  Msg m;
  m.hdr.version = c->version;
  m.hdr.type = MsgType::connreq;
  m.hdr.srcnid = c->ni->nid;
  m.hdr.srcstamp = incarnation_;
  m.hdr.dstnid = p.nid;
  m.hdr.dststamp = p.incarnation;
  m.body = ConnParams{c->queue_depth, c->max_frags, kMaxMsgSize};
  auto r = encode_msg(m, c->conn_msg, kNativeOrder, opts_.cksum ? Checksum::on : Checksum::off);
  assert(r);
  ConnectParams cp;
  cp.private_data = ByteSpan(c->conn_msg.data(), r ? *r : 0);
  cp.retry_count = opts_.retry_count;
  cp.rnr_retry_count = opts_.rnr_retry_count;
  c->state = ConnState::active_connect;
  c->connect_started = clock_();
  c->last_send = c->connect_started;
  ++stats_.tx_msgs[type_slot(MsgType::connreq)];
  const int rc = c->dev->tr->connect(c->id, cp);
  if (rc != 0) {
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::connect_error)];
    connreq_done(c, rc);
  }
}

// Linux's kiblnd_passive_connect: judge a request (o2iblnd.md §4.2, in
// that order) and accept or reject it.
void Node::accept_request(ConnRequest&& r) {
  ++stats_.rx_msgs[type_slot(MsgType::connreq)];
  const ByteSpan priv = r.private_data();
  const LocalNi* listener = nullptr;
  for (const LocalNi& ni : nis_)
    if (ni.nid.addr4() == r.local_ip) listener = &ni;
  Transport* tr = listener ? listener->transport : nis_.empty() ? nullptr : nis_.front().transport;
  Reject rej;
  rej.magic = kIbMagic;
  rej.why = RejectReason::fatal;
  rej.version = kVersion2;
  std::uint16_t version = kVersion2;
  const LocalNi* ni = nullptr;

  auto refuse = [&](RejectReason why) {
    rej.why = why;
    rej.version = version;
    rej.incarnation = ni ? incarnation_ : 0;
    rej.cp = ConnParams{0, 0, kMaxMsgSize};
    if (ni) {
      rej.cp->queue_depth = static_cast<std::uint16_t>(msg_queue_size(version, *ni));
      rej.cp->max_frags = kMaxRdmaFrags;
    }
    std::array<std::uint8_t, kRejectSize> out{};
    (void)encode_reject(rej, out, kNativeOrder);
    ++stats_.rejects_sent[static_cast<std::size_t>(why) < kRejectSlots ? static_cast<std::size_t>(why) : 0];
    if (tr) {
      tr->reject(r.id, ByteSpan(out.data(), out.size()));
      tr->destroy(r.id);
    }
  };

  // A storm of requests from one address: rejected before anything is
  // decoded or made for it (a kernel peer retries later).
  const std::array<std::uint8_t, 4> source{static_cast<std::uint8_t>(r.remote_ip >> 24),
                                           static_cast<std::uint8_t>(r.remote_ip >> 16),
                                           static_cast<std::uint8_t>(r.remote_ip >> 8),
                                           static_cast<std::uint8_t>(r.remote_ip)};
  if (!connreq_rate_.allow(source, clock_())) {
    ++stats_.connreqs_rate_limited;
    return refuse(RejectReason::no_resources);
  }
  if (opts_.require_privileged_port && r.remote_port >= 1024) return refuse(RejectReason::fatal);
  if (priv.size() < 6) return refuse(RejectReason::fatal);
  if (is_protocol_probe(priv)) return refuse(RejectReason::fatal);
  auto dm = decode_msg(priv);
  if (!dm) return refuse(RejectReason::fatal);
  const MsgHeader& h = dm->msg.hdr;
  ni = ni_by_nid(h.dstnid);
  if (!ni) {
    // Not (yet) one of ours: too early if an NI on this device is not up.
    for (const LocalNi& other : nis_)
      if (other.transport == tr && !other.ready) return refuse(RejectReason::early);
  }
  if (!ni || !listener || ni->transport != listener->transport) {
    ni = nullptr;
    return refuse(RejectReason::fatal);
  }
  if (!ni->ready) return refuse(RejectReason::early);
  if (h.dststamp != 0 && h.dststamp != incarnation_) return refuse(RejectReason::conn_stale);
  version = h.version;
  if (h.type != MsgType::connreq) return refuse(RejectReason::fatal);
  const ConnParams& cp = *dm->msg.connparams();
  if (cp.queue_depth > msg_queue_size(version, *ni))
    return refuse(version == kVersion2 ? RejectReason::msg_queue_size : RejectReason::fatal);
  if (cp.max_frags > kMaxRdmaFrags) return refuse(version >= kVersion2 ? RejectReason::rdma_frags : RejectReason::fatal);
  // (A peer offering fewer fragments is fine: our sinks are one fragment.)
  if (cp.max_msg_size > kMaxMsgSize) return refuse(RejectReason::fatal);
  if (cp.queue_depth == 0) return refuse(RejectReason::fatal);

  if (!has_room(h.srcnid)) return refuse(RejectReason::no_resources);
  if (conns_.size() >= opts_.max_conns) {
    ++stats_.conns_refused;
    return refuse(RejectReason::no_resources);
  }
  Peer& p = peer(h.srcnid, ni);
  if (p.linked) {
    if (p.version == 0) {
      p.version = version;
      p.incarnation = h.srcstamp;
    }
    if (p.incarnation != h.srcstamp || p.version != version) {
      // Not the node I have been talking to: it restarted.
      close_peer_conns(p, CloseReason::stale_peer, -ESTALE);
      if (p.linked) {
        p.incarnation = h.srcstamp;
        p.version = version;
      }
      return refuse(RejectReason::conn_stale);
    }
    // Its connections: conns_per_peer, and room for those a reconnect or a
    // race replaces until they are closed.  More is a peer opening
    // connections for their own sake.
    if (p.conns.size() >= max_conns_per_peer(*ni)) {
      ++stats_.conns_refused;
      return refuse(RejectReason::no_resources);
    }
    // A connection race: the higher NID hash keeps its own connection, unless
    // it keeps losing (the other side may be stuck connecting).
    if (p.connecting != 0 && nidhash(h.srcnid) < nidhash(ni->nid) && p.races < kMaxConnRaces) {
      ++p.races;
      return refuse(RejectReason::conn_race);
    }
    p.reconnecting = 0;
    p.races = 0;
    ++p.accepting;
    p.max_frags = cp.max_frags;
    p.queue_depth = cp.queue_depth;
  } else {
    link(p);
    p.accepting = 1;
    p.version = version;
    p.incarnation = h.srcstamp;
    p.max_frags = cp.max_frags;
    p.queue_depth = cp.queue_depth;
  }

  Conn* c = new_conn(p);
  c->ni = ni;
  c->dev = device_of(ni);
  c->id = r.id;
  r.id->context = c;
  c->active = false;
  c->version = version;
  c->queue_depth = p.queue_depth;
  c->max_frags = p.max_frags;
  c->state = ConnState::passive_wait;
  c->connect_started = clock_();
  c->index = conns_.size();
  conns_.push_back(c);
  if (!make_qp(c)) {
    // (Not rejected through refuse(): the identifier is the connection's now.)
    rej.why = RejectReason::no_resources;
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::no_resources)];
    send_reject_for(c, RejectReason::no_resources, version);
    connreq_done(c, -ENOMEM);
    return;
  }
  c->incarnation = h.srcstamp;
  c->credits = c->queue_depth;
  c->reserved_credits = c->queue_depth;

  Msg ack;
  ack.hdr.version = version;
  ack.hdr.type = MsgType::connack;
  ack.hdr.srcnid = ni->nid;
  ack.hdr.srcstamp = incarnation_;
  ack.hdr.dstnid = h.srcnid;
  ack.hdr.dststamp = h.srcstamp;
  ack.body = ConnParams{c->queue_depth, c->max_frags, kMaxMsgSize};
  auto n = encode_msg(ack, c->conn_msg, kNativeOrder, opts_.cksum ? Checksum::on : Checksum::off);
  assert(n);
  ConnectParams params;
  params.private_data = ByteSpan(c->conn_msg.data(), n ? *n : 0);
  params.retry_count = opts_.retry_count;
  params.rnr_retry_count = opts_.rnr_retry_count;
  ++stats_.tx_msgs[type_slot(MsgType::connack)];
  const int rc = c->dev->tr->accept(c->id, params);
  if (rc != 0) {
    send_reject_for(c, RejectReason::fatal, version);
    connreq_done(c, rc);
  }
}

void Node::refuse_request(ConnRequest&& r, RejectReason why) {
  const LocalNi* listener = nullptr;
  for (const LocalNi& ni : nis_)
    if (ni.nid.addr4() == r.local_ip) listener = &ni;
  if (!listener) listener = nis_.empty() ? nullptr : &nis_.front();
  if (!listener) return;
  Reject rej;
  rej.magic = kIbMagic;
  rej.version = kVersion2;
  rej.why = why;
  rej.incarnation = incarnation_;
  rej.cp = ConnParams{static_cast<std::uint16_t>(listener->tunables.peer_credits), kMaxRdmaFrags, kMaxMsgSize};
  std::array<std::uint8_t, kRejectSize> out{};
  (void)encode_reject(rej, out, kNativeOrder);
  ++stats_.rejects_sent[static_cast<std::size_t>(why) < kRejectSlots ? static_cast<std::size_t>(why) : 0];
  listener->transport->reject(r.id, ByteSpan(out.data(), out.size()));
  listener->transport->destroy(r.id);
}

void Node::send_reject_for(Conn* c, RejectReason why, std::uint16_t version) {
  Reject rej;
  rej.magic = kIbMagic;
  rej.version = version;
  rej.why = why;
  rej.incarnation = incarnation_;
  rej.cp = ConnParams{static_cast<std::uint16_t>(msg_queue_size(version, *c->ni)), kMaxRdmaFrags, kMaxMsgSize};
  std::array<std::uint8_t, kRejectSize> out{};
  (void)encode_reject(rej, out, kNativeOrder);
  ++stats_.rejects_sent[static_cast<std::size_t>(why)];
  c->dev->tr->reject(c->id, ByteSpan(out.data(), out.size()));
}

std::uint32_t Node::msg_queue_size(std::uint16_t version, const LocalNi& ni) const noexcept {
  return version == kVersion1 ? 8u : ni.tunables.peer_credits;
}

void Node::on_established(CmId* id, ByteSpan private_data) {
  auto* c = static_cast<Conn*>(id->context);
  if (!c) return;
  if (c->state == ConnState::passive_wait) {
    connreq_done(c, 0);
  } else if (c->state == ConnState::active_connect) {
    check_connreply(c, private_data);
  }
}

// Linux's kiblnd_check_connreply.
void Node::check_connreply(Conn* c, ByteSpan priv) {
  ++stats_.rx_msgs[type_slot(MsgType::connack)];
  auto dm = decode_msg(priv);
  int rc = 0;
  if (!dm) {
    rc = -EPROTO;
  } else {
    const MsgHeader& h = dm->msg.hdr;
    const ConnParams* cp = dm->msg.connparams();
    if (h.type != MsgType::connack || !cp || h.version != c->version || cp->queue_depth > c->queue_depth ||
        cp->max_frags > c->max_frags || cp->max_msg_size > kMaxMsgSize || cp->queue_depth == 0) {
      rc = -EPROTO;
    } else if (h.dstnid != c->ni->nid || h.dststamp != incarnation_) {
      rc = -ESTALE;
    } else {
      c->incarnation = h.srcstamp;
      c->credits = cp->queue_depth;
      c->reserved_credits = cp->queue_depth;
      c->queue_depth = cp->queue_depth;
      c->max_frags = cp->max_frags;
    }
  }
  if (rc != 0) {
    // The queue pair is up already: established, then torn down at once.
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::bad_connack)];
    c->comms_error = rc;
    c->close_reason = CloseReason::bad_connack;
  }
  connreq_done(c, 0);
}

void Node::on_rejected(CmId* id, RejectKind kind, ByteSpan priv) {
  auto* c = static_cast<Conn*>(id->context);
  if (!c) return;
  if (c->state == ConnState::passive_wait) {
    connreq_done(c, -ECONNRESET);
  } else if (c->state == ConnState::active_connect) {
    rejected(c, kind, priv);
  }
}

// Linux's kiblnd_rejected: the connecting side's reactions (§4.4).
void Node::rejected(Conn* c, RejectKind kind, ByteSpan priv) {
  int status = -ECONNREFUSED;
  ConnectFailure why_failed = ConnectFailure::rejected;
  switch (kind) {
    case RejectKind::stale_conn:
      check_reconnect(c, kVersion2, 0, RejectReason::conn_stale, nullptr);
      break;
    case RejectKind::invalid_service_id:
      status = -EHOSTUNREACH;
      why_failed = ConnectFailure::no_listener;
      break;
    case RejectKind::consumer: {
      auto dr = decode_reject(priv);
      if (!dr) break;  // not an o2iblnd or LNet reject: fatal
      Reject& rej = dr->rej;
      const std::size_t slot = static_cast<std::size_t>(rej.why) < kRejectSlots ? static_cast<std::size_t>(rej.why) : 0;
      ++stats_.rejects_received[slot];
      // Without the full reject (a V1 peer) the incarnation is "unknown"
      // (-1), so that an upgraded peer sees the stale stamp.
      const std::uint64_t incarnation = rej.cp ? rej.incarnation.value_or(0) : ~std::uint64_t{0};
      if (rej.version != kVersion1 && rej.version != kVersion2) break;
      if (rej.why == RejectReason::fatal && rej.version == kVersion1 && c->version != kVersion1)
        rej.why = RejectReason::conn_uncompat;
      switch (rej.why) {
        case RejectReason::conn_race:
        case RejectReason::conn_stale:
        case RejectReason::conn_uncompat:
        case RejectReason::msg_queue_size:
        case RejectReason::rdma_frags:
          check_reconnect(c, rej.version, incarnation, rej.why, rej.cp ? &*rej.cp : nullptr);
          break;
        default:
          break;
      }
      break;
    }
    case RejectKind::other:
      break;
  }
  ++stats_.connect_failed[static_cast<std::size_t>(why_failed)];
  connreq_done(c, status);
}

// Linux's kiblnd_check_reconnect: retry if the peer is still wanted and
// nothing else is under way, with what the reject taught us.
void Node::check_reconnect(Conn* c, std::uint16_t version, std::uint64_t incarnation, RejectReason why,
                           const ConnParams* cp) {
  Peer& p = *c->peer;
  const bool wanted = (!p.tx_queue.empty() || p.version != version) && p.connecting > 0 && p.accepting == 0;
  if (!wanted) return;
  switch (why) {
    case RejectReason::rdma_frags:
      if (!cp || c->max_frags <= cp->max_frags) return;
      p.max_frags = cp->max_frags;
      break;
    case RejectReason::msg_queue_size:
      if (!cp || c->queue_depth <= cp->queue_depth) return;
      p.queue_depth = cp->queue_depth;
      break;
    default:
      break;
  }
  c->reconnect = true;
  ++p.reconnecting;
  p.version = version;
  if (incarnation != 0) p.incarnation = incarnation;
}

void Node::on_connect_error(CmId* id, int status) {
  auto* c = static_cast<Conn*>(id->context);
  if (!c) return;
  if (c->state == ConnState::resolving) {
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::unreachable)];
    connreq_done(c, status ? status : -EHOSTUNREACH);
  } else if (c->state == ConnState::active_connect || c->state == ConnState::passive_wait) {
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::connect_error)];
    connreq_done(c, -ENETDOWN);
  }
}

void Node::on_disconnected(CmId* id) {
  auto* c = static_cast<Conn*>(id->context);
  if (!c) return;
  if (c->state < ConnState::established) {
    if (c->state == ConnState::active_connect)
      ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::connect_error)];
    connreq_done(c, -ECONNRESET);
  } else if (c->state == ConnState::established) {
    close_conn(c, CloseReason::peer_disconnected, 0);
  }
}

// Linux's kiblnd_connreq_done.
void Node::connreq_done(Conn* c, int status) {
  Peer& p = *c->peer;
  const bool active = c->active;
  if (status != 0) {
    peer_connect_failed(p, active, status);
    finalise(c);
    return;
  }
  c->state = ConnState::established;
  c->last_send = clock_();
  p.last_alive = c->last_send;
  p.conns.push_back(c);
  p.reconnected = 0;
  if (active) {
    --p.connecting;
    ++stats_.conns_connected;
  } else {
    --p.accepting;
    ++stats_.conns_accepted;
  }
  if (p.version == 0) {
    p.version = c->version;
    p.incarnation = c->incarnation;
  }
  if (p.version != c->version || p.incarnation != c->incarnation) {
    close_stale_conns(p, c->version, c->incarnation);
    p.version = c->version;
    p.incarnation = c->incarnation;
  }
  DescList waiting;
  while (TxDesc* d = p.tx_queue.pop_front()) waiting.push_back(d);
  if (!p.linked || c->comms_error != 0) {
    close_conn(c, c->comms_error ? c->close_reason : CloseReason::shutdown, c->comms_error ? c->comms_error : -ECONNABORTED);
    while (TxDesc* d = waiting.pop_front()) {
      d->status = -ECONNABORTED;
      d->waiting = false;
      tx_done(d);
    }
    return;
  }
  while (TxDesc* d = waiting.pop_front()) {
    if (c->state != ConnState::established) {
      d->status = -ECONNABORTED;
      d->waiting = false;
      tx_done(d);
      continue;
    }
    queue_tx(d, c);
  }
  check_sends(c);
  // Messages that arrived before ESTABLISHED reached us.
  std::vector<RxDesc*> early;
  early.swap(c->early_rxs);
  for (RxDesc* rx : early) {
    if (c->state != ConnState::established) {
      rx->held = false;
      continue;
    }
    handle_rx(rx);
  }
  maybe_destroy(c);
}

// Linux's kiblnd_peer_connect_failed.
void Node::peer_connect_failed(Peer& p, bool active, int error) {
  if (active) {
    --p.connecting;
  } else {
    --p.accepting;
  }
  if (p.is_connecting()) return;  // another attempt is under way
  p.reconnected = 0;
  if (!p.conns.empty()) return;
  DescList zombies;
  while (TxDesc* d = p.tx_queue.pop_front()) zombies.push_back(d);
  if (p.linked) unlink(p);
  p.error = error;
  peer_notify(p);
  while (TxDesc* d = zombies.pop_front()) {
    d->status = error;
    d->waiting = false;
    tx_done(d);
  }
}

void Node::peer_notify(Peer& p) {
  if (p.is_connecting() || !p.conns.empty() || p.error == 0) return;
  p.error = 0;
  upper_.on_peer_down(p.nid);
}

void Node::close_peer_conns(Peer& p, CloseReason why, int error) {
  std::vector<Conn*> conns = p.conns;
  for (Conn* c : conns) close_conn(c, why, error);
}

void Node::close_stale_conns(Peer& p, std::uint16_t version, std::uint64_t incarnation) {
  std::vector<Conn*> conns = p.conns;
  for (Conn* c : conns)
    if (c->version != version || c->incarnation != incarnation) close_conn(c, CloseReason::stale_peer, -ESTALE);
}

// Linux's kiblnd_close_conn_locked, then (at once: one thread) the connd's
// disconnect and finalise.
void Node::close_conn(Conn* c, CloseReason why, int error) {
  if (error != 0 && c->comms_error == 0) c->comms_error = error;
  if (c->state != ConnState::established) return;  // being handled already
  ++stats_.closed[static_cast<std::size_t>(why)];
  c->close_reason = why;
  Peer& p = *c->peer;
  auto it = std::find(p.conns.begin(), p.conns.end(), c);
  if (it != p.conns.end()) p.conns.erase(it);
  if (p.conns.empty() && p.linked && !p.is_connecting()) {
    unlink(p);
    p.error = c->comms_error;
  }
  finalise(c);
  peer_notify(p);
}

// The queue pair to the error state (everything posted completes, flushed),
// every message not in the device's hands finished with -ECONNABORTED,
// held receives aborted; destroyed once the device has given everything
// back.
void Node::finalise(Conn* c) {
  c->state = ConnState::closing;
  if (c->id) c->dev->tr->disconnect(c->id);
  c->state = ConnState::disconnected;
  for (DescList* q : {&c->tx_noops, &c->tx_queue, &c->tx_queue_rsrvd, &c->tx_queue_nocred}) {
    while (TxDesc* d = q->pop_front()) {
      d->queued = false;
      d->status = -ECONNABORTED;
      d->waiting = false;
      if (d->sending == 0) {
        tx_done(d);
      } else {
        c->active_txs.push_back(d);
      }
    }
  }
  // Waiting for the peer: finished now unless the device still holds it.
  std::vector<TxDesc*> active;
  for (TxDesc* d = c->active_txs.head; d; d = d->next) active.push_back(d);
  for (TxDesc* d : active) {
    d->status = d->status ? d->status : -ECONNABORTED;
    d->waiting = false;
    if (d->sending == 0) {
      c->active_txs.remove(d);
      tx_done(d);
    }
  }
  // Receives the Upper was holding, or that arrived before ESTABLISHED.
  for (RxDesc* rx : c->early_rxs) rx->held = false;
  c->early_rxs.clear();
  for (RxDesc& rx : c->rxs)
    if (rx.held) {
      rx.held = false;
      lnd::Rx r = rx.rx;
      upper_.on_rx_aborted(r);
    }
  maybe_destroy(c);
}

void Node::maybe_destroy(Conn* c) {
  if (c->destroyed || c->state != ConnState::disconnected) return;
  if (c->nsends_posted > 0 || c->posted_rx > 0 || !c->active_txs.empty() || !c->unmapping.empty()) return;
  for (const RxDesc& rx : c->rxs)
    if (rx.held) return;
  c->destroyed = true;
  if (c->id) {
    c->id->context = nullptr;
    c->dev->tr->destroy(c->id);
    c->id = nullptr;
  }
  if (c->rx_registered) {
    // Kept registered for the next connection, up to kRxSlabBytes a device.
    const std::size_t bytes = c->rxs.size() * kMaxMsgSize;
    if (c->dev->rx_slab_bytes + bytes <= kRxSlabBytes) {
      c->dev->rx_slabs.push_back(Device::RxSlab{c->rx_mem, static_cast<std::uint32_t>(c->rxs.size()), c->rx_region});
      c->dev->rx_slab_bytes += bytes;
      c->rx_mem = nullptr;
    } else {
      c->dev->tr->deregister(c->rx_region);
    }
  }
  c->rx_registered = false;
  conns_[c->index] = conns_.back();
  conns_[c->index]->index = c->index;
  conns_.pop_back();
  graveyard_.push_back(c);
  if (c->reconnect) {
    Peer& p = *c->peer;
    if (p.reconnected < kReconnHighRace) {
      reconnect_peer(p);
    } else {
      // Too many quick reconnects: the next one waits a second.
      ++p.pending_reconnects;
      p.reconnect_at = clock_() + std::chrono::seconds(1);
    }
  }
}

// Linux's kiblnd_reconnect_peer.
void Node::reconnect_peer(Peer& p) {
  if (p.reconnecting == 0) return;  // accepted or connected meanwhile
  --p.reconnecting;
  if (!p.linked) {
    DescList zombies;
    while (TxDesc* d = p.tx_queue.pop_front()) zombies.push_back(d);
    while (TxDesc* d = zombies.pop_front()) {
      d->status = -ECONNABORTED;
      d->waiting = false;
      tx_done(d);
    }
    return;
  }
  ++p.connecting;
  ++p.reconnected;
  ++stats_.reconnects;
  connect_peer(p);
}

void Node::reap() {
  for (Conn* c : graveyard_) free_conn(c);
  graveyard_.clear();
}

// ---- timers ----------------------------------------------------------------------------------

void Node::tick() {
  const auto now = clock_();
  std::vector<Peer*> peers;
  peers.reserve(peers_.size());
  for (auto& [nid, p] : peers_) peers.push_back(p.get());
  for (Peer* p : peers) {
    // Messages that waited too long for a connection.
    DescList late;
    for (TxDesc* d = p->tx_queue.head; d;) {
      TxDesc* next = d->next;
      if (now >= d->deadline) {
        p->tx_queue.remove(d);
        late.push_back(d);
      }
      d = next;
    }
    while (TxDesc* d = late.pop_front()) {
      ++stats_.tx_timeouts;
      d->status = -ETIMEDOUT;
      d->waiting = false;
      tx_done(d);
    }
    while (p->pending_reconnects > 0 && now >= p->reconnect_at) {
      --p->pending_reconnects;
      reconnect_peer(*p);
    }
  }
  // Destroyed connections stay allocated until reap(): a copy of the
  // list, each checked once, is O(connections).
  std::vector<Conn*> conns = conns_;
  for (Conn* c : conns) {
    if (c->destroyed) continue;  // gone meanwhile
    const bool waiting = c->state == ConnState::active_connect || c->state == ConnState::passive_wait;
    if (waiting && now - c->connect_started > connreq_timeout(*c->ni)) {
      // Ours unanswered, or one we accepted never established: a remote
      // node cannot hold a queue pair open by not finishing.
      const bool active = c->state == ConnState::active_connect;
      ++stats_.connect_failed[static_cast<std::size_t>(active ? ConnectFailure::connect_timeout
                                                              : ConnectFailure::passive_timeout)];
      connreq_done(c, -ETIMEDOUT);
      continue;
    }
    if (c->state != ConnState::established) continue;
    if (timed_out(c, now)) {
      close_conn(c, CloseReason::timeout, -ETIMEDOUT);
      continue;
    }
    if (need_noop(c)) check_sends(c);
  }
  if (now >= next_sweep_) {
    next_sweep_ = now + std::chrono::seconds(1);
    sweep_idle(now);
  }
}

// A peer out of the table (no connection, none being made or accepted),
// with nothing queued, no connection of any state still referring to it
// and no use for peer_idle, is freed (Linux frees a kib_peer with its
// last reference).
std::size_t Node::sweep_idle(Clock::time_point now) {
  const std::size_t n = std::erase_if(peers_, [&](auto& kv) {
    Peer& p = *kv.second;
    if (p.linked || !p.conns.empty()) {
      p.last_used = now;  // in use
      return false;
    }
    return p.conn_refs == 0 && p.tx_queue.empty() && !p.is_connecting() && p.pending_reconnects == 0 &&
           now - p.last_used >= opts_.peer_idle;
  });
  stats_.peers_freed += n;
  return n;
}

bool Node::timed_out(const Conn* c, Clock::time_point now) const noexcept {
  for (const DescList* q : {&c->tx_queue, &c->tx_noops, &c->tx_queue_rsrvd, &c->tx_queue_nocred, &c->active_txs})
    for (const TxDesc* d = q->head; d; d = d->next)
      if (now >= d->deadline) return true;
  return false;
}

void Node::shutdown() {
  std::vector<Conn*> conns = conns_;
  for (Conn* c : conns) {
    if (c->destroyed) continue;
    if (c->state == ConnState::established) {
      close_conn(c, CloseReason::shutdown, -ESHUTDOWN);
    } else if (c->state < ConnState::established) {
      connreq_done(c, -ESHUTDOWN);
    }
  }
  for (auto& [nid, p] : peers_) {
    DescList zombies;
    while (TxDesc* d = p->tx_queue.pop_front()) zombies.push_back(d);
    while (TxDesc* d = zombies.pop_front()) {
      d->status = -ESHUTDOWN;
      d->waiting = false;
      tx_done(d);
    }
  }
  // Whatever the device has not given back is abandoned with its
  // identifier (nothing polls it any more).
  conns = conns_;
  for (Conn* c : conns) {
    c->nsends_posted = 0;
    c->posted_rx = 0;
    while (TxDesc* d = c->active_txs.pop_front()) {
      d->sending = 0;
      tx_done(d);
    }
    while (TxDesc* d = c->unmapping.pop_front()) {
      d->sending = 0;
      tx_done(d);
    }
    for (RxDesc& rx : c->rxs) rx.held = false;
    c->state = ConnState::disconnected;
    maybe_destroy(c);
  }
}

// ---- introspection ------------------------------------------------------------------------------

std::vector<Node::PeerInfo> Node::peers(std::span<const Nid> only) const {
  std::vector<PeerInfo> out;
  auto add = [&out](const Nid& nid, const auto& p) {
    if (!p->linked && p->conns.empty()) return;
    PeerInfo pi;
    pi.nid = nid;
    pi.version = p->version;
    pi.incarnation = p->incarnation;
    pi.connecting = p->is_connecting();
    pi.queued_tx = p->tx_queue.count;
    for (const Conn* c : p->conns) {
      ConnInfo ci;
      ci.version = c->version;
      ci.queue_depth = c->queue_depth;
      ci.max_frags = c->max_frags;
      ci.credits = c->credits;
      ci.reserved_credits = c->reserved_credits;
      ci.outstanding_credits = c->outstanding_credits;
      ci.sends_posted = c->nsends_posted;
      ci.queued = c->tx_queue.count + c->tx_noops.count + c->tx_queue_rsrvd.count + c->tx_queue_nocred.count;
      ci.waiting = c->active_txs.count;
      for (const RxDesc& rx : c->rxs) ci.rx_held += rx.held ? 1 : 0;
      ci.active = c->active;
      ci.tx_msgs = c->n_tx;
      ci.rx_msgs = c->n_rx;
      pi.conns.push_back(ci);
    }
    out.push_back(std::move(pi));
  };
  if (only.empty()) {
    for (const auto& [nid, p] : peers_) add(nid, p);
  } else {
    for (const Nid& nid : only)
      if (auto it = peers_.find(nid); it != peers_.end()) add(nid, it->second);
  }
  return out;
}

}  // namespace lnetr::o2ib
