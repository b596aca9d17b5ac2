// The o2iblnd engine's Node (engine.hpp): names and tunables, construction
// and teardown, the peer table, timers (tick, shutdown) and introspection.
// Its other jobs are beside it: pools.cpp, send.cpp, rdma.cpp, receive.cpp
// and connections.cpp; engine_internal.hpp holds the types they share.
#include "lnd/o2iblnd/engine_internal.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <ctime>

#include "router/enum_names.hpp"

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

// ---- Node -------------------------------------------------------------------------------

Node::Node(Options opts, std::vector<LocalNi> nis, std::uint64_t incarnation, lnd::Upper& upper, ClockFn clock,
           std::uint32_t workers)
    : opts_(opts), nis_(nis.begin(), nis.end()), incarnation_(incarnation), upper_(upper), clock_(std::move(clock)),
      workers_(std::max<std::uint32_t>(workers, 1)), connreq_rate_(opts.connreq_rate, 4 * opts.connreq_rate) {
  for (LocalNi& ni : nis_) start_ni(ni);
}

// An NI's tunables in force, and its transport's device (made, and the
// transport's events attached here, if new).
void Node::start_ni(LocalNi& ni) {
  ni.tunables = effective(ni.tunables);
  auto it = std::find_if(devices_.begin(), devices_.end(), [&](const auto& d) { return d->tr == ni.transport; });
  if (it != devices_.end()) return;
  auto d = std::make_unique<Device>();
  d->tr = ni.transport;
  d->chunk = std::max<std::size_t>(kMinDescChunk, ni.tunables.ntx / workers_);
  d->bounces.reserve(kMaxBounce);
  if (ni.transport) ni.transport->attach(this);
  devices_.push_back(std::move(d));
}

// A device's memory deregistered from its transport and freed.
void Node::free_device(Device& d) noexcept {
  for (std::size_t i = 0; i < d.chunk_mem.size(); ++i) {
    d.tr->deregister(d.chunk_regions[i]);
    std::free(d.chunk_mem[i]);
  }
  d.chunk_mem.clear();
  d.chunk_regions.clear();
  for (Bounce& b : d.bounces) {
    d.tr->deregister(b.region);
    std::free(b.mem);
  }
  d.bounces.clear();
  for (Device::RxSlab& r : d.rx_slabs) {
    d.tr->deregister(r.region);
    std::free(r.mem);
  }
  d.rx_slabs.clear();
}

Node::~Node() {
  shutdown();
  reap();
  for (auto& d : devices_) free_device(*d);
}

const LocalNi* Node::ni_for_net(Net net) const noexcept {
  for (const LocalNi& ni : nis_)
    if (!ni.deleted && ni.nid.net() == net) return &ni;
  return nullptr;
}

const LocalNi* Node::ni_by_nid(const Nid& nid) const noexcept {
  for (const LocalNi& ni : nis_)
    if (!ni.deleted && ni.nid == nid) return &ni;
  return nullptr;
}

Transport* Node::first_transport() const noexcept {
  for (const LocalNi& ni : nis_)
    if (!ni.deleted) return ni.transport;
  return nullptr;
}

std::size_t Node::nis() const noexcept {
  return static_cast<std::size_t>(std::count_if(nis_.begin(), nis_.end(), [](const LocalNi& n) { return !n.deleted; }));
}

bool Node::add_ni(LocalNi ni) {
  if (ni_by_nid(ni.nid) != nullptr) return false;
  ni.deleted = false;
  start_ni(nis_.emplace_back(ni));
  return true;
}

bool Node::del_ni(const Nid& nid) {
  auto it = std::find_if(nis_.begin(), nis_.end(), [&](const LocalNi& n) { return !n.deleted && n.nid == nid; });
  if (it == nis_.end()) return false;
  LocalNi* ni = &*it;
  ni->deleted = true;
  // Connections of the NI, in any state (a request being accepted or made
  // included), close; then its peers leave the table with what waited for
  // a connection.
  std::vector<Conn*> conns = conns_;
  for (Conn* c : conns) {
    if (c->destroyed || c->ni != ni) continue;
    if (c->state == ConnState::established) {
      close_conn(c, CloseReason::ni_deleted, -ENETDOWN);
    } else if (c->state < ConnState::established) {
      connreq_done(c, -ENETDOWN);
    }
  }
  // (Out of the table first: failing a message may send another, which
  // may add a peer.)
  std::vector<Peer*> gone;
  for (auto p = peers_.begin(); p != peers_.end();) {
    if (p->second->ni != ni) {
      ++p;
      continue;
    }
    gone.push_back(p->second.get());
    gone_peers_.push_back(std::move(p->second));
    p = peers_.erase(p);
  }
  for (Peer* peer : gone) {
    if (peer->linked) unlink(*peer);
    peer->pending_reconnects = 0;
    fail_queued(*peer, -ENETDOWN);
  }
  return true;
}

bool Node::release_transport(Transport* tr) {
  for (const LocalNi& ni : nis_)
    if (!ni.deleted && ni.transport == tr) return false;  // still serves an NI
  auto it = std::find_if(devices_.begin(), devices_.end(), [&](const auto& d) { return d->tr == tr; });
  if (it == devices_.end()) return true;  // (released already)
  Device& d = **it;
  if (!graveyard_.empty()) return false;  // (reap() first)
  for (const Conn* c : conns_)
    if (c->dev == &d) return false;
  if (d.free.size() != d.chunks.size() * d.chunk || d.free_bounces.size() != d.bounces.size()) return false;
  free_device(d);
  devices_.erase(it);
  // Peers of its NIs no connection refers to any more are freed; the NIs
  // themselves once no peer points at them either.
  std::erase_if(gone_peers_, [](const std::unique_ptr<Peer>& p) { return p->conn_refs == 0 && p->conns.empty(); });
  nis_.remove_if([&](const LocalNi& ni) {
    return ni.deleted && ni.transport == tr &&
           std::none_of(gone_peers_.begin(), gone_peers_.end(), [&](const auto& p) { return p->ni == &ni; });
  });
  return true;
}

bool Node::tune_ni(const Nid& nid, std::uint32_t conns_per_peer, std::chrono::seconds timeout) noexcept {
  for (LocalNi& ni : nis_) {
    if (ni.deleted || ni.nid != nid) continue;
    if (conns_per_peer != 0) ni.tunables.conns_per_peer = conns_per_peer;
    if (timeout.count() > 0) ni.tunables.timeout = timeout;
    return true;
  }
  return false;
}

std::size_t Node::tx_descs_in_use() const noexcept {
  std::size_t n = 0;
  for (const auto& d : devices_) n += d->chunks.size() * d->chunk - d->free.size();
  return n;
}

std::size_t Node::connections() const noexcept { return conns_.size(); }

// ---- peer table ----------------------------------------------------------------------------

// What waits for a connection to `p` fails with `status` (taken off the
// queue first: a failure may queue more).
void Node::fail_queued(Peer& p, int status) {
  DescList zombies;
  while (TxDesc* d = p.tx_queue.pop_front()) zombies.push_back(d);
  while (TxDesc* d = zombies.pop_front()) {
    d->status = status;
    d->waiting = false;
    tx_done(d);
  }
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
  // Peers of deleted NIs, once no connection refers to them.
  std::erase_if(gone_peers_, [](const std::unique_ptr<Peer>& p) {
    return p->conn_refs == 0 && p->conns.empty() && p->tx_queue.empty() && !p->is_connecting();
  });
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
    fail_queued(*p, -ESHUTDOWN);
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
