#include "dataplane/forwarder.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <unordered_map>

#include "dataplane/log.hpp"
#include "dataplane/shm/region.hpp"
#include "dataplane/shm/seqlock.hpp"
#include "router/local_msgs.hpp"
#include "router/ping_info.hpp"

namespace lnetr::dp {
namespace {

// The interface cookie of the ACK handle our pushes carry.
constexpr std::uint64_t kPushAckCookie = 0x6c6e657472707368ull;  // "lnetrpsh"

// Linux's share of an NI's transmit credits per CPT: divided among the
// NI's CPTs (its peers are served by those only).
std::int32_t ni_credits_per_cpt(const NiSetup& ni, std::uint32_t ncpts) noexcept {
  if (!ni.cpts.empty()) ncpts = static_cast<std::uint32_t>(ni.cpts.size());
  if (ncpts <= 1) return static_cast<std::int32_t>(ni.credits);
  const std::uint32_t share = std::max(ni.credits / ncpts, 8 * ni.peer_credits);
  return static_cast<std::int32_t>(std::min(share, ni.credits));
}

}  // namespace

Forwarder::Forwarder(std::uint16_t index, const Setup& setup, SharedState& shared, const RouteTableView& routes,
                     ForwarderPorts& ports)
    : index_(index), ncpts_(setup.ncpts()), setup_(setup), shared_(shared), routes_(routes), ports_(ports),
    faults_(std::random_device{}() + index) {
  nis_.resize(kMaxNis);
  ni_nids_.resize(kMaxNis);
  ni_on_.assign(kMaxNis, 0);
  ni_tx_.resize(kMaxNis);
  ni_wait_.resize(kMaxNis);
  for (std::uint32_t i = 0; i < setup.nis.size() && i < kMaxNis; ++i) add_ni(i, setup.nis[i], setup.placement);
  nets_up_ = LocalNetMask::all();
  cursor_.attach(routes_);
  for (std::size_t c = 0; c < kPoolClasses; ++c) {
    const std::uint32_t n = std::max<std::uint32_t>(setup.buffers[c] / ncpts_, 1);
    pool_state_[c].nbuffers = pool_state_[c].req_nbuffers = n;
    pool_state_[c].credits = Credits::of(static_cast<std::int32_t>(n));
  }
  ring_wait_.resize(ncpts_);
  now_ns_ = lnd::Clock::now().time_since_epoch().count();
}

void Forwarder::set_locals() {
  local_nids_.clear();
  for (std::size_t i = 0; i < ni_nids_.size(); ++i)
    if (ni_on_[i]) local_nids_.push_back(ni_nids_[i]);
  locals_ = LocalNis{local_nids_};
}

void Forwarder::add_ni(std::uint32_t slot, const NiSetup& ni, const Placement& placement) {
  nis_[slot] = ni;
  ni_nids_[slot] = ni.nid;
  ni_tx_[slot] = Credits::of(ni_credits_per_cpt(ni, ncpts_));
  ni_on_[slot] = 1;
  ni_end_ = std::max(ni_end_, slot + 1);
  placement_ = placement;
  set_locals();
}

void Forwarder::stop_ni(std::uint32_t slot, const Placement& placement) {
  ni_on_[slot] = 0;
  placement_ = placement;
  set_locals();
  refresh_nets();  // (routes through its net are unusable from now on)
  // Read messages waiting for a credit to leave through it: they never
  // will.  Those still to be read wait on for their previous hop's credit
  // or a buffer (their connection's end marks them aborted if it was on
  // this NI) and are forwarded or dropped when they are read.
  const std::size_t n = drop_waiting(
      {nullptr, [slot](const PeerNi& p, const MsgQueue& q) { return p.ni == slot && !q.empty(); }, nullptr,
       [slot](std::size_t ni, const MsgQueue& q) { return ni == slot && !q.empty(); }},
      DropReason::ni_deleted);
  if (n > 0) log_info("worker %u: NI %s deleted: %zu waiting message(s) dropped", index_,
                      to_string(ni_nids_[slot]).c_str(), n);
}

void Forwarder::forget_ni_peers(std::uint32_t slot) {
  std::vector<PeerNi*> gone;
  for (const auto& [nid, p] : peers_)
    if (p->ni == slot) gone.push_back(p);
  for (PeerNi* p : gone) {
    if (p->gateway != nullptr) {
      p->gateway = nullptr;
      std::erase(gw_peers_, p);
    }
    if (p->at_rest()) {
      forget(p);
      continue;
    }
    // Out of the table (a message to its NID finds no NI now); its object
    // stays for the messages in flight that refer to it.
    unlink(p);
    p->gone = true;
    gone_peers_.push_back(p);
  }
  counters().table(PeerTable::lnet).peers.set(peers_.size());
}

bool Forwarder::ni_slot_busy(std::uint32_t slot) const noexcept {
  if (ni_on_[slot]) return true;
  return std::any_of(gone_peers_.begin(), gone_peers_.end(), [slot](const PeerNi* p) { return p->ni == slot; });
}

void Forwarder::adopt(const RouteTableView& routes) {
  routes_ = routes;
  cursor_.attach(routes_);
  nets_up_ = LocalNetMask::all();  // slots may differ between snapshots
  map_gateways();
  tick();
}

// ---- gateway checks (shared memory, for lnetr-control) --------------------------

namespace {

// The interface cookie of the MD handle our gateway pings carry; the object
// cookie is board slot << 48 | request sequence (low 48 bits).
constexpr std::uint64_t kGatewayPingCookie = 0x6c6e657472677770ull;  // "lnetrgwp"
constexpr std::uint64_t kPingSeqMask = (std::uint64_t{1} << 48) - 1;
// What we ask a gateway for: its whole ping info, however many NIs it has
// (a reply is as long as the info).  One that fits is read into the
// descriptor; a longer one into a buffer of its own (pings are rare).
constexpr std::uint32_t kPingSink = kLnetMtu;
// The largest push of a gateway's ping info read (the rest are ACKed and
// not read): 30 NIs.
constexpr std::uint32_t kPushSink = sizeof(RouterMsg::inline_);
// The interface cookie of the MD handle our discovery pings carry (the
// object cookie: the request's sequence), and what we ask for: as much as
// a descriptor holds (30 NIs), and from a peer whose answer was cut short
// there, once, what it said it needs, up to what lnetctl ping asks for
// (about 240 NIs; a peer with more fails discovery).
constexpr std::uint64_t kDiscoveryCookie = 0x6c6e657472646973ull;  // "lnetrdis"
constexpr std::uint32_t kDiscoverySink = sizeof(RouterMsg::inline_);
constexpr std::uint32_t kDiscoverySinkMax = kPingSinkLnetctl;

}  // namespace

void Forwarder::attach_gateways(std::span<shm::GatewayShm> board) {
  board_ = board;
  ping_sent_.assign(board.size(), 0);
  ping_sent_ns_.assign(board.size(), 0);
  ping_nid_.assign(board.size(), Nid{});
  map_gateways();
}

// Which board entry (if any) watches each gateway of the snapshot.  Control
// fills an entry before it publishes a snapshot naming its gateway, and
// unassigns the entry of a gateway before it publishes one that no longer
// names it; it reuses the entry only once every worker has adopted such a
// snapshot, so a peer's pointer to an entry its snapshot does not map is
// let go of here.
void Forwarder::map_gateways() {
  gw_board_.assign(routes_.gateways().size(), nullptr);
  const auto gateway_slots = board_.first(std::min<std::size_t>(board_.size(), shm::kMaxGateways));
  std::unordered_map<Nid, shm::GatewayShm*> assigned;
  for (shm::GatewayShm& g : gateway_slots)
    if (g.assigned.load(std::memory_order_acquire) != 0) assigned.emplace(g.nid, &g);
  for (std::size_t i = 0; i < gw_board_.size() && !assigned.empty(); ++i)
    if (auto it = assigned.find(routes_.gateways()[i]); it != assigned.end()) gw_board_[i] = it->second;
  // Each gateway's NI that messages go to: the one the routes name, or the
  // rail control moved to when that one failed (Multi-Rail).
  gw_hop_.assign(gw_board_.size(), Nid{});
  std::unordered_map<const shm::GatewayShm*, Nid> hop_of;
  for (std::size_t i = 0; i < gw_board_.size(); ++i) {
    if (gw_board_[i] == nullptr) continue;
    gw_hop_[i] = hop(*gw_board_[i]);
    hop_of.emplace(gw_board_[i], gw_hop_[i]);
  }
  std::erase_if(gw_peers_, [&hop_of](PeerNi* p) {
    if (auto it = hop_of.find(p->gateway); it != hop_of.end() && it->second == p->nid) return false;
    p->gateway = nullptr;
    return true;
  });
  // The gateways this worker owns: their peers (those it has, and those it
  // makes later: peer_ni()) publish their credits from now on.
  owned_gw_.clear();
  for (shm::GatewayShm* g : gw_board_)
    if (g != nullptr && g->owner == index_) owned_gw_.emplace(hop_of[g], g);
  for (const auto& [nid, g] : owned_gw_)
    if (auto it = peers_.find(nid); it != peers_.end()) watch_gateway(*it->second, g);
}

void Forwarder::watch_gateway(PeerNi& p, shm::GatewayShm* g) {
  if (p.gateway == nullptr) gw_peers_.push_back(&p);
  p.gateway = g;
  publish_gateway(p);
}

unsigned Forwarder::send_pings() {
  unsigned n = 0;
  for (std::uint32_t i = 0; i < board_.size(); ++i) {
    shm::GatewayShm& g = board_[i];
    // Acquire: nid and owner were written before the request.
    const std::uint64_t req = g.request.load(std::memory_order_acquire);
    if (req == 0 || req == ping_sent_[i] || g.owner != index_) continue;
    // A gateway slot given up (its gateway left the routes): not pinged, and
    // its entry soon belongs to another gateway.
    if (i < shm::kMaxGateways && g.assigned.load(std::memory_order_acquire) == 0) continue;
    ping_sent_[i] = req;
    // A gateway is checked on its rail, if control moved to one; a remote
    // NID (operators' pings only) through the gateway `via`.
    const Nid target = i < shm::kMaxGateways ? hop(g) : g.nid;
    ping_nid_[i] = target;
    const Nid next_hop = g.via == Nid{} ? target : g.via;
    if (ni_index(next_hop) == kNoNi) {  // its net's NI was deleted: the check fails at once
      shm::PingResult r{};
      r.seq = req;
      r.outcome = shm::PingOutcome::send_failed;
      r.done_ns = lnd::Clock::now().time_since_epoch().count();
      shm::store_result(g, r);
      continue;
    }
    PeerNi& p = *peer_ni(next_hop, true);
    if (i < shm::kMaxGateways && p.gateway != &g) watch_gateway(p, &g);
    RouterMsg* m = alloc_msg();
    m->kind = RouterMsg::Kind::ping;
    m->ping_slot = i;
    m->ping_seq = req;
    m->next_hop = next_hop;
    const WireHandle wmd{kGatewayPingCookie, (std::uint64_t{i} << 48) | (req & kPingSeqMask)};
    m->tx.hdr = make_get({kPidLustre, ni_nids_[p.ni]}, {kPidLustre, target}, kLnetReservedPortal, kPingMatchBits, wmd,
                         kPingSink);
    m->tx.payload = {};
    m->tx.cookie = m;
    ping_sent_ns_[i] = lnd::Clock::now().time_since_epoch().count();
    g.pings_sent.store(g.pings_sent.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    ++n;
    // Not through the credit queues: a check must reach a gateway whose
    // peer is down (that is how it comes back), and it is one small GET.
    const int rc = ports_.send(next_hop, m->tx);
    if (rc < 0) on_sent(m->tx, rc);
  }
  return n;
}

// A REPLY carrying our gateway-ping cookie: read its ping info (if it
// answers the latest request of a gateway we own, or of an operator's ping).
lnd::RxVerdict Forwarder::take_ping_reply(lnd::Rx& rx) {
  const WireHandle w = rx.hdr.reply().dst_wmd;
  const std::uint64_t slot = w.object_cookie >> 48;
  const std::uint64_t seq = w.object_cookie & kPingSeqMask;
  std::uint64_t req = 0;
  if (slot >= board_.size()) {
    // not one of ours
  } else if (slot < shm::kMaxGateways) {
    // A gateway check: its owner matches it against its own copy.
    if (ping_nid_[slot] == rx.hdr.src_nid && (ping_sent_[slot] & kPingSeqMask) == seq) req = ping_sent_[slot];
  } else {
    // An operator's ping: control may hand the entry on between pings, and a
    // remote NID's reply may come back through a gateway another worker
    // owns.  Any worker matches it against the entry's latest request (read
    // again after nid: the pair is consistent).
    const shm::GatewayShm& g = board_[slot];
    const std::uint64_t latest = g.request.load(std::memory_order_acquire);
    const bool from_it = g.nid == rx.hdr.src_nid;
    if (latest != 0 && (latest & kPingSeqMask) == seq && from_it &&
        g.request.load(std::memory_order_acquire) == latest)
      req = latest;
  }
  if (req == 0) {
    count_drop(DropReason::not_for_us, rx.hdr.payload_length);  // late, or not ours
    return discard(rx, false);
  }
  RouterMsg* m = alloc_msg();
  m->kind = RouterMsg::Kind::ping_reply;
  m->ping_slot = static_cast<std::uint32_t>(slot);
  m->ping_seq = req;
  rx.cookie = m;
  rx.sink = reply_sink(m, rx.hdr.payload_length);
  return lnd::RxVerdict::accept;
}

// Where a ping reply of `length` bytes is read: the descriptor, or if too
// long, a buffer of its own (pings are rare).
MutableByteSpan Forwarder::reply_sink(RouterMsg* m, std::uint32_t length) {
  if (length <= m->inline_.size()) return MutableByteSpan(m->inline_.data(), length);
  std::vector<std::uint8_t>& big = long_replies_[m];
  big.resize(length);
  return MutableByteSpan(big.data(), big.size());
}

// The payload a ping reply of `length` bytes was read into.
ByteSpan Forwarder::ping_reply_bytes(RouterMsg* m, std::uint32_t length) {
  auto it = long_replies_.find(m);
  if (it == long_replies_.end() || it->second.size() != length)
    return ByteSpan(m->inline_.data(), std::min<std::size_t>(length, m->inline_.size()));
  return ByteSpan(it->second.data(), it->second.size());
}

void Forwarder::ping_done(RouterMsg* m, shm::PingOutcome outcome, ByteSpan info) {
  shm::GatewayShm& g = board_[m->ping_slot];
  // Only the answer to the entry's latest request, and to a gateway the
  // entry still watches: an operator's entry may have been handed on, and a
  // gateway's entry given up (and reused) while this was read.
  if (g.request.load(std::memory_order_acquire) != m->ping_seq) return;
  if (m->ping_slot < shm::kMaxGateways && g.assigned.load(std::memory_order_acquire) == 0) return;
  shm::PingResult r{};
  r.seq = m->ping_seq;
  r.outcome = outcome;
  // 0 when another worker sent it: only the sender knows when.
  r.sent_ns = ping_sent_[m->ping_slot] == m->ping_seq ? ping_sent_ns_[m->ping_slot] : 0;
  r.done_ns = lnd::Clock::now().time_since_epoch().count();
  if (outcome == shm::PingOutcome::answered && !summarise_ping_info(info, r)) r.outcome = shm::PingOutcome::bad_reply;
  // Not stored if another worker is storing into the entry right then:
  // control's timeout judges the ping.
  shm::store_result(g, r);
  // Discovery's second step (ping-discovery-health.md §4, §5.1): a
  // Multi-Rail gateway that discovers is given our ping info after each
  // check, and again whenever it changes.
  constexpr std::uint32_t kDiscovers = ping_feature::multi_rail | ping_feature::discovery;
  if (r.outcome != shm::PingOutcome::answered || m->ping_slot >= shm::kMaxGateways || !setup_.discovery ||
      (r.features & kDiscovers) != kDiscovers)
    return;
  auto it = peers_.find(ping_nid_[m->ping_slot]);
  if (it == peers_.end() || !ni_on_[it->second->ni]) return;
  it->second->multi_rail = true;
  push_to(*it->second);
  g.pushes_sent.fetch_add(1, std::memory_order_relaxed);
}

// A ping info's features, NIs (the first kPingNis) and nets into `r`;
// false if it is not a valid ping info.
bool Forwarder::summarise_ping_info(ByteSpan info, shm::PingResult& r, std::uint32_t* sequence) {
  auto pi = decode_ping_info(info);
  if (!pi) return false;
  r.features = pi->features;
  if (sequence != nullptr) *sequence = pi->sequence;
  for (const PingNi& ni : *pi) {
    if (r.n_nis < shm::kPingNis) r.nis[r.n_nis++] = {ni.nid, ni.status};
    else ++r.more_nis;
    const std::uint32_t net = ni.nid.net().to_u32();
    std::uint32_t k = 0;
    while (k < r.n_nets && r.nets[k].net != net) ++k;
    if (k == r.n_nets) {
      if (k == shm::kPingNets) {
        ++r.more_nets;
        continue;
      }
      r.nets[r.n_nets++] = {net, 0, 0};
    }
    auto bump = [](std::uint16_t& n) { if (n != UINT16_MAX) ++n; };
    bump(r.nets[k].listed);
    if (ni.status == kNiStatusUp) bump(r.nets[k].up);
  }
  return true;
}

// Gateways are reached through NIs whose link is up.  (A local net of the
// snapshot with no NI in service here: none of its routes is usable.)
void Forwarder::refresh_nets() {
  LocalNetMask up{0};
  for (std::uint32_t i = 0; i < ni_end_; ++i)
    if (ni_on_[i])
      if (auto slot = routes_.local_slot(ni_nids_[i].net()))
        up.set(*slot, up.up >> *slot & 1u || shared_.ni[i].link_up.load(std::memory_order_relaxed));
  nets_up_ = up;
}

void Forwarder::tick() {
  refresh_nets();
  std::erase_if(gone_peers_, [this](PeerNi* p) {
    if (!p->at_rest()) return false;
    directory_.retire(p);
    return true;
  });
  const std::int64_t now = lnd::Clock::now().time_since_epoch().count();
  now_ns_ = now;
  if (now >= next_expiry_ns_) {
    next_expiry_ns_ = now + std::chrono::nanoseconds(std::chrono::seconds(1)).count();
    expire_waiting(now);
    expire_discoveries(now);
  }
  sweep_idle(now);
  if (!fault_held_.empty()) release_fault_held(now, false);
  if (directory_.retired() > 0) directory_.reclaim();
  counters().table(PeerTable::lnet).peers.set(peers_.size());
}

// ---- the peer table -----------------------------------------------------------------

PeerNi* Forwarder::peer_ni(const Nid& nid, bool forced, std::uint32_t via) {
  if (PeerNi* p = find_peer(nid)) return p;
  if (!forced && peers_.size() >= setup_.max_peers) {
    counters().table(PeerTable::lnet).refused.add();
    if (!table_full_) {
      table_full_ = true;
      log_warn("worker %u: LNet peer table full (%zu peers, dataplane.limits.peers): refusing new peers, first %s",
               index_, peers_.size(), to_string(nid).c_str());
    }
    return nullptr;
  }
  if (table_full_ && peers_.size() < setup_.max_peers) {
    table_full_ = false;
    log_info("worker %u: LNet peer table has room again (%zu peers)", index_, peers_.size());
  }
  std::uint32_t ni_i = ni_index(nid);
  if (ni_i == kNoNi) ni_i = via;
  if (ni_i == kNoNi) return nullptr;  // (callers check ni_index first)
  PeerNi* p = directory_.create(nid, ni_i);
  const NiSetup& ni = nis_[ni_i];
  p->tx = Credits::of(static_cast<std::int32_t>(ni.peer_credits));
  const std::uint32_t rtr = ni.peer_buffer_credits ? ni.peer_buffer_credits : ni.peer_credits;
  p->rtr = Credits::of(static_cast<std::int32_t>(rtr));
  p->routes_via = forced;
  peers_.emplace(nid, p);
  touch(*p);
  if (auto it = owned_gw_.find(nid); it != owned_gw_.end()) watch_gateway(*p, it->second);
  counters().table(PeerTable::lnet).peers.set(peers_.size());
  return p;
}

void Forwarder::touch(PeerNi& p) noexcept {
  p.active_ns = now_ns_;
  if (p.gone) return;  // (not on the list any more)
  if (most_active_ == &p) return;
  // Out of the list (if on it), then in at the most active end.
  if (p.older != nullptr) p.older->newer = p.newer;
  if (p.newer != nullptr) p.newer->older = p.older;
  if (least_active_ == &p) least_active_ = p.newer;
  p.older = most_active_;
  p.newer = nullptr;
  if (most_active_ != nullptr) most_active_->newer = &p;
  most_active_ = &p;
  if (least_active_ == nullptr) least_active_ = &p;
}

void Forwarder::wait_on(PeerNi& p, MsgQueue& q, RouterMsg* m) noexcept {
  if (!p.waits_listed) {
    p.waits_listed = true;
    p.waits_index = static_cast<std::uint32_t>(waiting_peers_.size());
    waiting_peers_.push_back(&p);
  }
  wait_in(q, m);
}

void Forwarder::unlist_waiting(PeerNi* p) noexcept {
  PeerNi* last = waiting_peers_.back();
  waiting_peers_[p->waits_index] = last;
  last->waits_index = p->waits_index;
  waiting_peers_.pop_back();
  p->waits_listed = false;
}

// LNet keeps a peer NI while anything refers to it; a router that a
// remote node can make learn any number of NIDs must also forget them:
// a peer at rest (nothing in flight or waiting refers to it) that sent
// and received nothing for dataplane.limits.peer_idle is freed.  Not a
// gateway of a route (its health is tracked), nor one forced in.  At most
// kSweep peers are looked at per tick, least recently active first: a
// peer that is busy but quiet goes to the back.
unsigned Forwarder::sweep_idle(std::int64_t now_ns) {
  constexpr unsigned kSweep = 256;
  const std::int64_t due = now_ns - std::chrono::nanoseconds(setup_.peer_idle).count();
  unsigned freed = 0;
  for (unsigned seen = 0; seen < kSweep && least_active_ != nullptr && least_active_->active_ns <= due; ++seen) {
    PeerNi* p = least_active_;
    if (p->at_rest() && p->gateway == nullptr && !p->routes_via) {
      forget(p);
      ++freed;
    } else {
      touch(*p);
    }
  }
  if (freed > 0) {
    counters().table(PeerTable::lnet).freed.add(freed);
    counters().table(PeerTable::lnet).peers.set(peers_.size());
  }
  return freed;
}

void Forwarder::unlink(PeerNi* p) {
  if (p->waits_listed) unlist_waiting(p);
  if (p->older != nullptr) p->older->newer = p->newer;
  if (p->newer != nullptr) p->newer->older = p->older;
  if (least_active_ == p) least_active_ = p->newer;
  if (most_active_ == p) most_active_ = p->older;
  p->older = p->newer = nullptr;
  recent_.forget(p->nid);
  peers_.erase(p->nid);
}

void Forwarder::forget(PeerNi* p) {
  unlink(p);
  directory_.retire(p);  // deleted once no status reader can see it
}

// The clock starts at a message's first wait: moving from one credit queue
// to the next does not restart it.
void Forwarder::wait_in(MsgQueue& q, RouterMsg* m) noexcept {
  if (m->queued_ns == 0) m->queued_ns = lnd::Clock::now().time_since_epoch().count();
  q.push(m);
}

// A message that waited longer than transaction_timeout for a credit or a
// router buffer is dropped (counted as `timeout`) and gives back what it
// held; one still to be read is read and thrown away first (its connection
// goes on).  Each queue is in arrival order: only its head can be due.
unsigned Forwarder::expire_waiting(std::int64_t now_ns) {
  const std::int64_t due = now_ns - std::chrono::nanoseconds(setup_.transaction_timeout).count();
  auto old = [due](const MsgQueue& q) { return !q.empty() && q.head->queued_ns <= due; };
  auto old_of_peer = [&old](const PeerNi&, const MsgQueue& q) { return old(q); };
  return drop_waiting({old_of_peer, old_of_peer, old, [&old](std::size_t, const MsgQueue& q) { return old(q); }},
                      DropReason::timeout);
}

unsigned Forwarder::drop_waiting(const WaitPick& pick, DropReason why) {
  // First take every chosen message off its queue, then finish each:
  // finishing reads on (a resumed connection delivers what follows at
  // once), which may add peers, and must not run under an iteration of
  // peers_.  (Each queue is in arrival order, and a pick looks at its head.)
  struct Due {
    RouterMsg* m;
    enum class From : std::uint8_t { rtr, pool, tx, ni } from;
  };
  std::vector<Due> due_msgs;
  // Only peers with messages waiting (kept listed while they may have).
  for (std::size_t i = 0; i < waiting_peers_.size();) {
    PeerNi* p = waiting_peers_[i];
    if (!p->rtr_wait.empty() || !p->tx_wait.empty()) ++i;
    else unlist_waiting(p);
  }
  for (PeerNi* up : waiting_peers_) {
    PeerNi& p = *up;
    while (pick.rtr && pick.rtr(p, p.rtr_wait)) {  // holds nothing yet
      ++p.rtr.cur;  // one waiter fewer
      due_msgs.push_back({p.rtr_wait.pop(), Due::From::rtr});
    }
    while (pick.tx && pick.tx(p, p.tx_wait)) {  // read, in its buffer; waiting for the peer's credit
      RouterMsg* m = p.tx_wait.pop();
      ++p.tx.cur;
      p.tx_queued_bytes -= m->rx.hdr.payload_length;
      publish_gateway(p);
      due_msgs.push_back({m, Due::From::tx});
    }
  }
  for (std::size_t c = 0; c < kPoolClasses; ++c) {
    while (pick.pool && pick.pool(pool_wait_[c])) {  // holds its router credit
      ++pool_state_[c].credits.cur;
      due_msgs.push_back({pool_wait_[c].pop(), Due::From::pool});
    }
  }
  for (std::size_t i = 0; i < ni_wait_.size(); ++i) {
    while (pick.ni && pick.ni(i, ni_wait_[i])) {  // holds the peer's credit, waiting for the NI's
      ++ni_tx_[i].cur;
      due_msgs.push_back({ni_wait_[i].pop(), Due::From::ni});
    }
  }
  for (const Due& d : due_msgs) {
    RouterMsg* m = d.m;
    switch (d.from) {
      case Due::From::rtr: expire_unread(m, false, why); break;
      case Due::From::pool: expire_unread(m, true, why); break;
      case Due::From::tx:
      case Due::From::ni: {
        PeerNi& p = *m->dest;
        if (d.from == Due::From::ni && p.tx.give()) {  // its peer credit goes to the next waiter
          RouterMsg* next = p.tx_wait.pop();
          p.tx_queued_bytes -= next->rx.hdr.payload_length;
          start_send(next, p);
        }
        publish_gateway(p);
        ++p.drop_count;
        count_drop(why, m->rx.hdr.payload_length);
        give_back(m);
        break;
      }
    }
  }
  return static_cast<unsigned>(due_msgs.size());
}

void Forwarder::expire_unread(RouterMsg* m, bool holds_rtr, DropReason why) {
  if (m->aborted) {  // its connection died meanwhile: nothing left to read
    PeerNi* src = m->src;
    free_msg(m);
    if (holds_rtr) give_rtr(*src);
    return;
  }
  ++m->src->drop_count;
  count_drop(why, m->rx.hdr.payload_length);
  m->stage = holds_rtr ? RouterMsg::Stage::expired_rtr : RouterMsg::Stage::expired;
  m->rx.discard = true;
  m->rx.sink = {};
  m->rx.chain = nullptr;
  resume(m);
}

// An expired message's payload has been read (or its connection died).
void Forwarder::finish_expired(RouterMsg* m) {
  PeerNi* src = m->src;
  const bool holds_rtr = m->stage == RouterMsg::Stage::expired_rtr;
  free_msg(m);
  if (holds_rtr) give_rtr(*src);
}

void Forwarder::on_ring(const RingItem& item) {
  auto* m = static_cast<RouterMsg*>(item.ptr);
  switch (item.kind) {
    case RingItem::Kind::send: return send_out(m);
    case RingItem::Kind::dispatch: return dispatch(m);
    default: return release(m);
  }
}

// ---- descriptors -------------------------------------------------------------------

RouterMsg* Forwarder::alloc_msg() {
  if (!free_msgs_) {
    // Grows in chunks up to the number of messages ever in flight at once
    // (bounded by credits and connections); never freed until exit.
    constexpr std::size_t kMsgChunk = kMsgsPerChunk;
    auto chunk = std::make_unique<RouterMsg[]>(kMsgChunk);
    msgs_allocated_ += kMsgChunk;
    for (std::size_t i = 0; i < kMsgChunk; ++i) free_msg(&chunk[i]);
    msg_chunks_.push_back(std::move(chunk));
  }
  RouterMsg* m = free_msgs_;
  free_msgs_ = m->next;
  --msgs_free_;
  lnd::RefChain chain = std::move(m->chain);  // (empty: its storage is reused)
  m->reset();
  m->chain = std::move(chain);
  m->home = index_;
  return m;
}

void Forwarder::drop_frames() noexcept {
  for (auto& chunk : msg_chunks_)
    for (std::size_t i = 0; i < kMsgsPerChunk; ++i) chunk[i].chain.release();
}

void Forwarder::free_msg(RouterMsg* m) {
  if (m->src != nullptr) {
    --m->src->src_of;
    m->src = nullptr;
  }
  m->chain.release();  // frames its payload was left in
  m->next = free_msgs_;
  free_msgs_ = m;
  ++msgs_free_;
}

// ---- receive side (home) ------------------------------------------------------------

std::uint32_t Forwarder::ni_index(const Nid& nid) const noexcept {
  for (std::uint32_t i = 0; i < ni_end_; ++i)
    if (ni_on_[i] && ni_nids_[i].net() == nid.net()) return i;
  return kNoNi;
}

void Forwarder::note_ping(const lnd::Rx& rx) {
  if (!is_ping(rx.hdr) || locals_.is_local(rx.hdr.src_nid)) return;
  const std::int64_t now = lnd::Clock::now().time_since_epoch().count();
  for (std::size_t i = 0; i < ni_nids_.size(); ++i)
    if (ni_on_[i] && ni_nids_[i].net() == rx.ni.net()) shared_.ni[i].last_ping_ns.store(now, std::memory_order_relaxed);
}

void Forwarder::count_drop(DropReason why, std::uint32_t bytes) {
  counters().drops[static_cast<std::size_t>(why)].add();
  counters().drop_count.add();
  counters().drop_length.add(bytes);
}

// Read the payload and throw it away (a drop, or a push to be ACKed).
lnd::RxVerdict Forwarder::discard(lnd::Rx& rx, bool ack_push) {
  if (ack_push) {
    RouterMsg* m = alloc_msg();
    m->kind = RouterMsg::Kind::discard;
    m->is_push = true;
    rx.cookie = m;
  }
  rx.discard = true;
  return lnd::RxVerdict::accept;
}

// A gateway pushed its ping info (read into m's inline payload): on the
// board for control, which takes its NIs and routing state as a check's.
void Forwarder::take_push(RouterMsg* m, std::uint32_t length) {
  if (m->ping_slot == kNoGatewaySlot)
    return take_peer_push(m->next_hop, ByteSpan(m->inline_.data(), std::min<std::size_t>(length, m->inline_.size())));
  shm::GatewayShm& g = board_[m->ping_slot];
  // Given up meanwhile, or given to another gateway, or moved off the NI
  // that pushed: not this gateway's news any more.
  if (g.assigned.load(std::memory_order_acquire) == 0 || !(hop(g) == m->next_hop)) return;
  shm::PingResult r{};
  r.outcome = shm::PingOutcome::answered;
  r.done_ns = lnd::Clock::now().time_since_epoch().count();
  if (!summarise_ping_info(ByteSpan(m->inline_.data(), std::min<std::size_t>(length, m->inline_.size())), r)) {
    counters().drops[static_cast<std::size_t>(DropReason::protocol)].add();
    return;
  }
  // A push from a node that is not Multi-Rail is ignored (LNet's rule).
  if ((r.features & ping_feature::multi_rail) == 0) return;
  r.seq = g.pushes_received.load(std::memory_order_relaxed) + 1;
  if (shm::store_pushed(g, r)) g.pushes_received.fetch_add(1, std::memory_order_release);
}

// A route to the source's net whose gateway is `from`, or a Multi-Rail
// gateway whose last ping answer listed `from` among its NIs (LNet checks
// the gateway peer, all its NIDs).
bool Forwarder::routes_back(const Nid& src, const Nid& from) const noexcept {
  const auto routes = routes_.routes_to(src.net());
  for (const Route& r : routes)
    if (r.gateway == from) return true;
  for (const Route& r : routes) {
    const shm::GatewayShm* g = r.gateway_index < gw_board_.size() ? gw_board_[r.gateway_index] : nullptr;
    if (g == nullptr) continue;
    const shm::PingResult res = shm::load_result(*g);
    for (std::uint32_t i = 0; i < std::min<std::uint32_t>(res.n_nis, shm::kPingNis); ++i)
      if (res.nis[i].nid == from) return true;
  }
  return false;
}

lnd::RxVerdict Forwarder::on_head(lnd::Rx& rx) {
  const std::uint32_t via = ni_index(rx.ni);
  if (via == kNoNi) {  // (its NI is being deleted)
    count_drop(DropReason::ni_deleted, rx.hdr.payload_length);
    return discard(rx, false);
  }
  PeerNi* known = peer_ni(rx.from, false, via);
  if (known == nullptr) {  // a new peer, and the table is full: read and thrown away
    count_drop(DropReason::peer_table_full, rx.hdr.payload_length);
    return discard(rx, false);
  }
  PeerNi& src = *known;
  touch(src);
  const Verdict v = classify(rx.hdr, rx.ni, locals_, forwards(shared_.routing.load(std::memory_order_relaxed)));
  // Fault injection: a drop rule's message is read and thrown away before
  // anything is learned from it (Lustre drops in lnet_parse); delay and
  // corrupt act once a forwarded message is received.
  FaultEngine::Decision fault;
  if (!faults_.empty()) {
    fault = faults_.judge(rx.hdr, rx.ni, lnd::Clock::now().time_since_epoch().count(),
                          v.what == Disposition::forward);
    if (fault.act && fault.kind == FaultKind::drop) {
      ++src.drop_count;
      count_drop(DropReason::fault, rx.hdr.payload_length);
      return discard(rx, false);
    }
  }
  // drop_asym_route: a message for us from a remote net must come through a
  // gateway we would route back through; checked before anything is
  // learned from it (as Linux's lnet_parse), so it revives no gateway.
  if (v.what == Disposition::for_us && rx.hdr.src_nid.net() != rx.from.net() &&
      shared_.drop_asym_route.load(std::memory_order_relaxed) && !routes_back(rx.hdr.src_nid, rx.from)) {
    ++src.drop_count;
    count_drop(DropReason::asym_route, rx.hdr.payload_length);
    return discard(rx, false);
  }
  src.alive = true;
  if (src.gateway != nullptr) {
    if (src.gateway->down.load(std::memory_order_relaxed) != 0)
      src.gateway->down.store(0, std::memory_order_relaxed);  // heard from: usable again
    if (rx.hdr.src_nid.net() != rx.from.net())  // it forwards: alive (this worker is its only writer)
      src.gateway->heard.store(src.gateway->heard.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  ++src.recv_count;
  src.recv_bytes += rx.hdr.payload_length;
  note_ping(rx);
  switch (v.what) {
    case Disposition::reject:
      ++src.drop_count;
      count_drop(DropReason::protocol, rx.hdr.payload_length);
      return lnd::RxVerdict::reject;
    case Disposition::drop:
      ++src.drop_count;
      count_drop(v.reason, rx.hdr.payload_length);
      return discard(rx, false);
    case Disposition::for_us:
      counters().recv_count.add();
      if (is_ping(rx.hdr)) {
        src.pinged_ns = lnd::Clock::now().time_since_epoch().count();
        answer_ping(rx);
        return discard(rx, false);
      }
      if (is_push(rx.hdr)) {
        src.multi_rail = true;  // it runs discovery: push to it when our NIs change
        const bool ack = !rx.hdr.put().ack_wmd.is_none();
        // Read, with discovery on, if it comes from the pusher itself (not a
        // node beyond it): a gateway's is its NIs and routing state from
        // now on (its slot must still be its once read); any other peer's
        // is what discovery keeps of it.
        if (setup_.discovery && rx.hdr.payload_length <= kPushSink && rx.hdr.src_nid == rx.from) {
          RouterMsg* m = alloc_msg();
          m->kind = RouterMsg::Kind::discard;
          m->is_push = ack;
          m->push_read = true;
          m->ping_slot =
              src.gateway != nullptr ? static_cast<std::uint32_t>(src.gateway - board_.data()) : kNoGatewaySlot;
          m->next_hop = rx.from;
          rx.cookie = m;
          rx.sink = MutableByteSpan(m->inline_.data(), rx.hdr.payload_length);
          return lnd::RxVerdict::accept;
        }
        return discard(rx, ack);
      }
      if (rx.hdr.type == MsgType::ack && rx.hdr.ack().dst_wmd.interface_cookie == kPushAckCookie) {
        src.push_acked_ns = lnd::Clock::now().time_since_epoch().count();
        if (src.gateway != nullptr) src.gateway->push_acks.fetch_add(1, std::memory_order_relaxed);
        if (PeerDiscovery* d = src.discovery.load(std::memory_order_relaxed)) {
          ++d->push_acks;
          // Discovery's push taken: done (ping-discovery-health.md §4 step 3).
          if (d->state == PeerDiscovery::State::pushing && rx.hdr.ack().dst_wmd.object_cookie == d->seq)
            d->state = PeerDiscovery::State::discovered;
        }
        return discard(rx, false);  // a peer took our push
      }
      if (rx.hdr.type == MsgType::reply && rx.hdr.reply().dst_wmd.interface_cookie == kGatewayPingCookie)
        return take_ping_reply(rx);
      if (rx.hdr.type == MsgType::reply && rx.hdr.reply().dst_wmd.interface_cookie == kDiscoveryCookie)
        return take_discovery_reply(rx);
      count_drop(DropReason::not_for_us, rx.hdr.payload_length);
      return discard(rx, false);
    case Disposition::forward:
      break;
  }
  // A net neither local nor routed: dropped now, without taking a buffer.
  const Net dest = rx.hdr.dest_nid.net();
  if (!locals_.on_local_net(dest) && !routes_.reachable(dest)) {
    ++src.drop_count;
    count_drop(DropReason::no_route, rx.hdr.payload_length);
    return discard(rx, false);
  }

  RouterMsg* m = alloc_msg();
  m->kind = RouterMsg::Kind::forward;
  m->src = &src;
  ++src.src_of;
  if (fault.act) {
    if (fault.kind == FaultKind::delay) {
      m->fault_until_ns = lnd::Clock::now().time_since_epoch().count() + std::max<std::int64_t>(fault.latency_ns, 1);
      m->fault_rule = fault.rule;
    }
    m->fault_corrupt = fault.kind == FaultKind::corrupt;
  }
  m->pool = pool_for(rx.hdr.payload_length);
  rx.cookie = m;
  m->rx = rx;
  // The previous hop's router credit, then a buffer of the right pool.
  if (!src.rtr.take()) {
    m->stage = RouterMsg::Stage::wait_rtr;
    wait_on(src, src.rtr_wait, m);
    return lnd::RxVerdict::defer;
  }
  if (!grant_buffer(m)) return lnd::RxVerdict::defer;
  rx.sink = m->rx.sink;
  rx.chain = m->rx.chain;
  rx.discard = m->rx.discard;
  return lnd::RxVerdict::accept;
}

// `m` holds its router credit: take a pool credit and a buffer, or queue.
bool Forwarder::grant_buffer(RouterMsg* m) {
  const auto c = static_cast<std::size_t>(m->pool);
  if (!pool_state_[c].credits.take()) {
    m->stage = RouterMsg::Stage::wait_buffer;
    wait_in(pool_wait_[c], m);
    return false;
  }
  take_buffer(m);
  return true;
}

void Forwarder::take_buffer(RouterMsg* m) {
  // Credits never exceed the pool's buffers, so the pool cannot run dry;
  // if it does all the same, the payload is read and dropped (on_received).
  m->stage = RouterMsg::Stage::receiving;
  if (pool_capacity(m->pool) != 0) {
    m->buf = ports_.get_buffer(m->pool);
    if (m->buf == nullptr) {
      m->rx.sink = {};
      m->rx.chain = nullptr;
      m->rx.discard = true;
      return;
    }
    m->buf_ref.reset(m->buf, ports_.buffer_iova(m->buf));
  }
  m->rx.sink = MutableByteSpan(m->buf, m->rx.hdr.payload_length);
  // The payload may stay in the frames it arrives in (the stream decides,
  // frame by frame; what it copies lands in the buffer).  A small one is
  // then sent from them too, the sending stream holding those frames
  // itself (lnd::FrameRefs::hold): it is not copied at all.
  if (m->buf && m->rx.hdr.payload_length > 0) {
    m->chain.reset(m->buf, m->rx.hdr.payload_length, m->buf_ref.handle());
    m->rx.chain = &m->chain;
  }
}

// A message that waited now has what it needs: read its payload.
void Forwarder::resume(RouterMsg* m) { ports_.resume(m->rx); }

// Give back the previous hop's router credit: the next waiter that is still
// alive gets it (an aborted waiter passes it straight on).
void Forwarder::give_rtr(PeerNi& p) {
  while (p.rtr.give()) {
    RouterMsg* w = p.rtr_wait.pop();
    if (!w->aborted) {
      if (grant_buffer(w)) resume(w);
      return;
    }
    free_msg(w);
  }
}

void Forwarder::give_pool(std::size_t c) {
  while (pool_state_[c].credits.give()) {
    RouterMsg* w = pool_wait_[c].pop();
    if (!w->aborted) {
      take_buffer(w);
      resume(w);
      return;
    }
    PeerNi* src = w->src;  // aborted: it held a router credit too
    free_msg(w);
    give_rtr(*src);
  }
}

// Home: the message is done (sent, failed or dropped) — free its buffer and
// give both credits to the next waiters; once no device holds a frame
// chained from the buffer (a frame may outlive the send: a NIC frees what
// it sent later, and a retransmission may still be queued after the ACK).
void Forwarder::release(RouterMsg* m) {
  if (m->buf && m->buf_ref.held_by_device()) return held_.push(m);
  release_now(m);
}

unsigned Forwarder::release_held() {
  unsigned freed = ring_waiting_ > 0 ? post_waiting() : 0;
  for (std::uint32_t k = held_.count; k > 0; --k) {
    RouterMsg* m = held_.pop();
    if (m->buf_ref.held_by_device()) {
      held_.push(m);
    } else {
      release_now(m);
      ++freed;
    }
  }
  return freed;
}

void Forwarder::release_now(RouterMsg* m) {
  const auto c = static_cast<std::size_t>(m->pool);
  if (m->buf) ports_.put_buffer(m->pool, m->buf);
  PeerNi* src = m->src;
  free_msg(m);
  PoolState& p = pool_state_[c];
  if (p.nbuffers > p.req_nbuffers) {
    // The pool is being shrunk: this buffer (and its credit) is given up.
    p.nbuffers = p.nbuffers - 1;
    p.credits.max = static_cast<std::int32_t>(p.nbuffers);
  } else {
    give_pool(c);
  }
  give_rtr(*src);
}

void Forwarder::resize_pool(PoolClass pc, std::uint32_t n) {
  const auto c = static_cast<std::size_t>(pc);
  PoolState& p = pool_state_[c];
  // Within what the pool has: the target moves, idle buffers are given up
  // at once and those in use as they come back (Linux gives up idle ones
  // only once they are next used and come back: the same in the end).
  if (n <= p.nbuffers) {  // (req_nbuffers is never above nbuffers)
    p.req_nbuffers = n;
    const std::int32_t idle = std::min<std::int32_t>(p.credits.cur, static_cast<std::int32_t>(p.nbuffers - n));
    if (idle > 0) {
      // (Credits first: a reader between the two sees buffers in use, not
      // a pool at rest that is not.)
      p.credits.cur = p.credits.cur - idle;
      if (p.credits.cur < p.credits.min) p.credits.min = p.credits.cur;
      p.nbuffers = p.nbuffers - static_cast<std::uint32_t>(idle);
      p.credits.max = static_cast<std::int32_t>(p.nbuffers);
    }
    return;
  }
  const std::uint32_t more = n - p.nbuffers;
  p.req_nbuffers = p.nbuffers = n;
  p.credits.max = static_cast<std::int32_t>(n);
  for (std::uint32_t i = 0; i < more; ++i) give_pool(c);  // (waiters first)
  p.credits.min = p.credits.cur;
}

void Forwarder::on_received(lnd::Rx& rx) {
  auto* m = static_cast<RouterMsg*>(rx.cookie);
  if (!m) return;  // dropped or a ping (already answered)
  if (m->kind == RouterMsg::Kind::ping_reply) {
    ping_done(m, shm::PingOutcome::answered, ping_reply_bytes(m, rx.hdr.payload_length));
    long_replies_.erase(m);
    return free_msg(m);
  }
  if (m->kind == RouterMsg::Kind::discover_reply) {
    discovery_answered(m->next_hop, m->ping_seq, ping_reply_bytes(m, rx.hdr.payload_length));
    long_replies_.erase(m);
    return free_msg(m);
  }
  if (m->kind == RouterMsg::Kind::discard) {
    if (m->push_read) take_push(m, rx.hdr.payload_length);
    if (!m->is_push) return free_msg(m);
    // A discovery push: LNet owes an ACK for it (ping-discovery-health §3).
    m->kind = RouterMsg::Kind::local;
    m->tx.hdr = make_ack(rx.hdr, rx.ni, rx.hdr.payload_length);
    m->tx.payload = {};
    m->next_hop = rx.from;
    local_out_.push_back(m);
    return;
  }
  if (m->stage == RouterMsg::Stage::expired || m->stage == RouterMsg::Stage::expired_rtr) return finish_expired(m);
  if (m->rx.discard) {  // no buffer came with its pool credit (take_buffer)
    ++m->src->drop_count;
    count_drop(DropReason::no_buffer, m->rx.hdr.payload_length);
    return release(m);
  }
  if (m->fault_corrupt) corrupt_payload(m);
  if (m->fault_until_ns != 0) {  // a delay rule's: held with its credits and buffer
    fault_held_.push_back(m);
    return;
  }
  route(m);
}

void Forwarder::set_faults(const std::vector<FaultRule>& rules) {
  faults_.set(rules);
  release_fault_held(0, true);
}

// Delayed messages whose time has come, or (`gone`) whose rule was
// deleted, go on their way.
void Forwarder::release_fault_held(std::int64_t now_ns, bool gone) {
  std::vector<RouterMsg*> due;
  std::erase_if(fault_held_, [&](RouterMsg* m) {
    const bool due_now = gone ? !faults_.counts(m->fault_rule).has_value() : m->fault_until_ns <= now_ns;
    if (!due_now) return false;
    due.push_back(m);
    return true;
  });
  for (RouterMsg* m : due) {
    m->fault_until_ns = 0;
    route(m);
  }
}

// A corrupt rule's message: its first payload byte inverted where it lies
// (the router buffer, or the frame it arrived in), so that whoever checks
// the data sees it.
void Forwarder::corrupt_payload(RouterMsg* m) {
  m->fault_corrupt = false;
  if (m->rx.hdr.payload_length == 0) return;
  std::uint8_t* p = m->buf;
  if (m->chain.referenced() > 0 && !m->chain.pieces().empty())
    p = const_cast<std::uint8_t*>(m->chain.pieces().front().data);  // (received memory: ours until sent)
  if (p) *p ^= 0xff;
}

void Forwarder::on_rx_aborted(lnd::Rx& rx) {
  auto* m = static_cast<RouterMsg*>(rx.cookie);
  if (!m) return;
  if (m->kind == RouterMsg::Kind::ping_reply || m->kind == RouterMsg::Kind::discover_reply) long_replies_.erase(m);
  if (m->kind != RouterMsg::Kind::forward) return free_msg(m);
  if (m->stage == RouterMsg::Stage::expired || m->stage == RouterMsg::Stage::expired_rtr) return finish_expired(m);
  ++m->src->drop_count;
  count_drop(ni_on_[m->src->ni] ? DropReason::send_failed : DropReason::ni_deleted, m->rx.hdr.payload_length);
  if (m->stage == RouterMsg::Stage::receiving) return release(m);
  m->aborted = true;  // still queued: its credit passes on when its turn comes
}

void Forwarder::on_peer_down(const Nid& nid) {
  auto it = peers_.find(nid);
  if (it == peers_.end()) return;
  PeerNi& p = *it->second;
  p.alive = false;
  // Only the gateway's NI in use speaks for it: an NI control has just
  // moved away from (the snapshot that says so not adopted yet) does not.
  if (p.gateway != nullptr && p.gateway->down.load(std::memory_order_relaxed) == 0 && hop(*p.gateway) == p.nid) {
    // Every worker stops choosing it from its next selection on.
    p.gateway->down.store(1, std::memory_order_relaxed);
    p.gateway->down_events.fetch_add(1, std::memory_order_relaxed);
  }
}

Nid Forwarder::hop(const shm::GatewayShm& g) noexcept {
  const Nid rail = shm::load_rail(g);
  return rail == Nid{} ? g.nid : rail;
}

// Our ping info as a ping reply or a push carries it.
std::size_t Forwarder::own_ping_info(MutableByteSpan out) const {
  const std::int64_t now = lnd::Clock::now().time_since_epoch().count();
  const std::int64_t timeout = std::chrono::nanoseconds(setup_.alive_router_check_interval + setup_.router_ping_timeout).count();
  PingNi nis[32];
  std::size_t n = 0;
  for (std::size_t i = 0; i < ni_nids_.size() && n < std::size(nis); ++i)
    if (ni_on_[i]) nis[n++] = {ni_nids_[i], shared_.ni[i].up(now, timeout) ? kNiStatusUp : kNiStatusDown};
  std::uint32_t features = ping_feature::ni_status | ping_feature::multi_rail;
  if (setup_.discovery) features |= ping_feature::discovery;
  if (advertises_disabled(shared_.routing.load(std::memory_order_relaxed))) features |= ping_feature::rte_disabled;
  auto size = encode_ping_info(
      {features, kPidLustre, shared_.ping_seq.load(std::memory_order_relaxed), std::span(nis, n)}, out);
  return size ? *size : 0;
}

void Forwarder::answer_ping(lnd::Rx& rx) {
  RouterMsg* m = alloc_msg();
  m->kind = RouterMsg::Kind::local;
  // The REPLY this GET gets (an o2ib GET_REQ's REPLY travels on the GET's
  // own exchange: the LND recognises it by this Tx when it is sent).
  rx.reply = &m->tx;
  const ByteSpan info(m->inline_.data(), own_ping_info(m->inline_));
  const ByteSpan payload = ping_reply_payload(rx.hdr, info);
  m->tx.hdr = make_reply(rx.hdr, rx.ni, static_cast<std::uint32_t>(payload.size()));
  m->tx.payload = payload;
  m->next_hop = rx.from;
  local_out_.push_back(m);
}

// Push our ping info to every Multi-Rail peer of this worker (a PUT on the
// reserved portal with an ACK asked for), as Linux does when an NI's status
// changes: they stop using a dead path now, not at their next check.
unsigned Forwarder::push_ping_info() {
  unsigned n = 0;
  for (const auto& [nid, p] : peers_) {
    if (!p->multi_rail || !ni_on_[p->ni]) continue;
    push_to(*p);
    ++n;
  }
  return n;
}

void Forwarder::push_to(const PeerNi& p, std::uint64_t seq) {
  RouterMsg* m = alloc_msg();
  m->kind = RouterMsg::Kind::local;
  const std::size_t size = own_ping_info(m->inline_);
  const WireHandle ack{kPushAckCookie, seq != 0 ? seq : ++push_seq_};
  if (PeerDiscovery* d = p.discovery.load(std::memory_order_relaxed)) ++d->pushes_sent;
  m->discovery = seq != 0;  // discovery's: a failure to send it fails discovery
  m->ping_seq = seq;
  m->tx.hdr = make_put({kPidLustre, ni_nids_[p.ni]}, {kPidLustre, p.nid}, kLnetReservedPortal, kPingMatchBits, ack, 0,
                       static_cast<std::uint32_t>(size));
  m->tx.payload = ByteSpan(m->inline_.data(), size);
  m->next_hop = p.nid;
  local_out_.push_back(m);
  counters().pushes.add();
}

// REPLYs and ACKs the router owes go out after the event that caused them
// has been handled (never from inside the engine's callbacks).
unsigned Forwarder::flush_local() {
  unsigned n = 0;
  for (RouterMsg* m : local_out_) {
    m->tx.cookie = m;
    if (const int rc = ports_.send(m->next_hop, m->tx); rc < 0) on_sent(m->tx, rc);
    ++n;
  }
  local_out_.clear();
  return n;
}

// ---- discovery of the peers we forward to ---------------------------------------

namespace {

// LNet discovers a peer before a message to it that is neither on the
// reserved portal nor a REPLY or ACK (lnet_msg_discovery).
bool discovers_on(const LnetHeader& h) noexcept {
  if (h.type == MsgType::put) return h.put().ptl_index != kLnetReservedPortal;
  if (h.type == MsgType::get) return h.get().ptl_index != kLnetReservedPortal;
  return false;
}

constexpr std::uint32_t kDiscovers = ping_feature::multi_rail | ping_feature::discovery;

}  // namespace

// A message on its last hop, to `p`: as a kernel router does with discovery
// on, the peer is discovered if it is not yet (a gateway is, by its checks).
// Unlike Linux the message is not held until discovery ends: it goes on at
// once, and discovery runs beside it.  A failed discovery is tried again by
// a later message, once a second at most.
void Forwarder::maybe_discover(PeerNi& p, const LnetHeader& h) {
  if (!setup_.discovery || p.gateway != nullptr || p.routes_via || !discovers_on(h)) return;
  const PeerDiscovery* d = p.discovery.load(std::memory_order_relaxed);
  if (d != nullptr) {
    if (d->state != PeerDiscovery::State::failed || !retry_due(*d)) return;
  }
  discover(p);
}

PeerDiscovery& Forwarder::discovery_of(PeerNi& p) {
  PeerDiscovery* d = p.discovery.load(std::memory_order_relaxed);
  if (d == nullptr) {
    d = new PeerDiscovery();
    p.discovery.store(d, std::memory_order_release);  // (its fields set before readers can see it)
  }
  return *d;
}

// Discovery's first step: ping the peer (a GET on the reserved portal), not
// through the credit queues (as a gateway check), after the current event.
void Forwarder::discover(PeerNi& p) {
  PeerDiscovery& d = discovery_of(p);
  d.state = PeerDiscovery::State::pinging;
  d.started_ns = now_ns_;
  ++d.pings;
  await_answer(p, d);
  RouterMsg* m = alloc_msg();
  m->kind = RouterMsg::Kind::discover;
  m->ping_seq = d.seq;
  m->next_hop = p.nid;
  m->tx.hdr = make_get({kPidLustre, ni_nids_[p.ni]}, {kPidLustre, p.nid}, kLnetReservedPortal, kPingMatchBits,
                       {kDiscoveryCookie, d.seq}, d.sink);
  m->tx.payload = {};
  local_out_.push_back(m);
}

// A REPLY carrying our discovery cookie: read if it answers the ping of
// its sender's discovery that is out.
lnd::RxVerdict Forwarder::take_discovery_reply(lnd::Rx& rx) {
  const std::uint64_t seq = rx.hdr.reply().dst_wmd.object_cookie;
  const PeerNi* p = rx.hdr.src_nid == rx.from ? find_peer(rx.from) : nullptr;
  const PeerDiscovery* d = p != nullptr ? p->discovery.load(std::memory_order_relaxed) : nullptr;
  if (d == nullptr || d->seq != seq || d->state != PeerDiscovery::State::pinging ||
      rx.hdr.payload_length > d->sink) {
    count_drop(DropReason::not_for_us, rx.hdr.payload_length);  // late, or not ours
    return discard(rx, false);
  }
  RouterMsg* m = alloc_msg();
  m->kind = RouterMsg::Kind::discover_reply;
  m->ping_seq = seq;
  m->next_hop = rx.from;
  rx.cookie = m;
  rx.sink = reply_sink(m, rx.hdr.payload_length);
  return lnd::RxVerdict::accept;
}

// What a ping info (a REPLY's or a push's) says of its node; false if it
// is not a valid one.
bool Forwarder::learn(ByteSpan info, PeerDiscovered& l) {
  shm::PingResult r{};
  if (!summarise_ping_info(info, r, &l.sequence)) return false;
  l.features = r.features;
  l.n_nis = r.n_nis;
  l.more_nis = r.more_nis;
  std::copy_n(r.nis, r.n_nis, l.nis);
  return true;
}

void Forwarder::discovery_answered(const Nid& nid, std::uint64_t seq, ByteSpan info) {
  PeerNi* p = find_peer(nid);
  PeerDiscovery* d = p != nullptr ? p->discovery.load(std::memory_order_relaxed) : nullptr;
  if (d == nullptr || d->seq != seq || d->state != PeerDiscovery::State::pinging) return;
  PeerDiscovered l;
  if (!learn(info, l)) {
    // Cut short by our sink: asked again, once, for all of it (as Linux
    // grows its discovery buffer).
    auto need = ping_info_size(info);
    if (need && *need > info.size() && *need > d->sink && *need <= kDiscoverySinkMax) {
      d->sink = static_cast<std::uint32_t>(*need);
      return discover(*p);
    }
    return discovery_failed(nid, seq);
  }
  l.at_ns = lnd::Clock::now().time_since_epoch().count();
  // A REPLY no newer than what the peer pushed since leaves the push's
  // (Linux: a push's data present preempts a stale REPLY).
  const PeerDiscovered had = shm::seq_load(d->gen, d->learnt);
  if (had.pushed && l.sequence <= had.sequence) l = had;
  discovery_learnt(*p, *d, l);
}

void Forwarder::discovery_learnt(PeerNi& p, PeerDiscovery& d, const PeerDiscovered& l) {
  shm::seq_store(d.gen, d.learnt, l);  // (this worker is its only writer: never busy)
  // Discovery's second step: a Multi-Rail peer that discovers is given our
  // ping info, and from then on every change of it.
  if ((l.features & kDiscovers) != kDiscovers || !ni_on_[p.ni]) {
    d.state = PeerDiscovery::State::discovered;
    return;
  }
  p.multi_rail = true;
  d.state = PeerDiscovery::State::pushing;
  await_answer(p, d);
  push_to(p, d.seq);
}

void Forwarder::await_answer(const PeerNi& p, PeerDiscovery& d) {
  d.seq = ++push_seq_;
  d.deadline_ns = lnd::Clock::now().time_since_epoch().count() + std::chrono::nanoseconds(setup_.transaction_timeout).count();
  discovering_.push_back({p.nid, d.seq});
}

void Forwarder::discovery_failed(const Nid& nid, std::uint64_t seq) {
  PeerNi* p = find_peer(nid);
  PeerDiscovery* d = p != nullptr ? p->discovery.load(std::memory_order_relaxed) : nullptr;
  if (d == nullptr || d->seq != seq) return;
  if (d->state != PeerDiscovery::State::pinging && d->state != PeerDiscovery::State::pushing) return;
  d->state = PeerDiscovery::State::failed;
  ++d->failures;
}

// Discoveries whose ping or push was not answered within transaction_timeout
// fail (once a second; the list holds a peer at most twice).
void Forwarder::expire_discoveries(std::int64_t now_ns) {
  std::vector<Discovering> late;
  std::erase_if(discovering_, [&](const Discovering& w) {
    const PeerNi* p = find_peer(w.nid);
    const PeerDiscovery* d = p != nullptr ? p->discovery.load(std::memory_order_relaxed) : nullptr;
    if (d == nullptr || d->seq != w.seq) return true;
    if (d->state != PeerDiscovery::State::pinging && d->state != PeerDiscovery::State::pushing) return true;
    if (now_ns < d->deadline_ns) return false;
    late.push_back(w);
    return true;
  });
  for (const Discovering& w : late) discovery_failed(w.nid, w.seq);
}

// A peer (not a gateway) pushed its ping info: kept as discovery's, and
// if we never gave it ours, discovery pushes it back (Linux's push from a
// peer makes its data present, and a peer that has not seen our ping info
// needs a push).  A push from a node that is not Multi-Rail is ignored.
void Forwarder::take_peer_push(const Nid& nid, ByteSpan info) {
  PeerNi* p = find_peer(nid);
  if (p == nullptr) return;
  PeerDiscovered l;
  if (!learn(info, l)) {
    counters().drops[static_cast<std::size_t>(DropReason::protocol)].add();
    return;
  }
  if ((l.features & ping_feature::multi_rail) == 0) return;
  l.at_ns = lnd::Clock::now().time_since_epoch().count();
  l.pushed = true;
  const bool fresh = p->discovery.load(std::memory_order_relaxed) == nullptr;
  PeerDiscovery& d = discovery_of(*p);
  ++d.pushes_received;
  const PeerDiscovery::State st = d.state;
  const PeerDiscovered had = shm::seq_load(d.gen, d.learnt);
  // Ours goes back if it never had it: new, failed (once a second at
  // most), or found before not to discover and now saying it does.
  const bool starts_discovering = (had.features & kDiscovers) != kDiscovers && (l.features & kDiscovers) == kDiscovers;
  const bool again = st == PeerDiscovery::State::failed && retry_due(d);
  if (fresh || again || (st == PeerDiscovery::State::discovered && starts_discovering)) {
    d.started_ns = now_ns_;
    return discovery_learnt(*p, d, l);
  }
  // Its news; our ping (its REPLY) or our push is out, or it has ours.
  shm::seq_store(d.gen, d.learnt, l);
}

// ---- choosing the next hop (home) and sending (sender) ---------------------------

void Forwarder::route(RouterMsg* m) {
  m->stage = RouterMsg::Stage::routed;
  const Nid& dest = m->rx.hdr.dest_nid;
  if (locals_.on_local_net(dest.net())) {
    m->next_hop = dest;
  } else {
    auto usable = [this](const Route& route) noexcept { return nets_up_(route) && !gateway_down(route); };
    auto r = routes_.select(dest.net(), cursor_, usable, [this](const Route& route) { return gateway_state(route); });
    if (!r) {
      ++m->src->drop_count;
      count_drop(r.error() == NoRoute::no_route ? DropReason::no_route : DropReason::route_down,
                 m->rx.hdr.payload_length);
      return release(m);
    }
    m->next_hop = gateway_hop(**r);
  }
  m->tx.hdr = m->rx.hdr;  // forwarded unchanged, byte for byte
  m->tx.payload = ByteSpan(m->buf, m->rx.hdr.payload_length);
  m->tx.payload_dev = m->buf ? m->buf_ref.handle() : nullptr;
  if (m->chain.referenced() > 0) m->tx.pieces = m->chain.pieces();
  m->tx.cookie = m;
  dispatch(m);
}

// To the worker that owns the next hop.
void Forwarder::dispatch(RouterMsg* m) {
  m->ni = ni_index(m->next_hop);
  if (m->ni == kNoNi) {  // (routed by a snapshot older than the NI's deletion)
    ++m->src->drop_count;
    count_drop(DropReason::ni_deleted, m->rx.hdr.payload_length);
    return release(m);
  }
  const std::uint32_t owner = placement_.of(m->next_hop, ncpts_);
  if (owner == index_) return send_out(m);
  post(owner, RingItem::Kind::send, m);
}

// A ring holds at most the messages homed at either end, so it has room;
// should it not, the message waits here (back-pressure, counted) rather
// than be lost, and messages to that worker keep their order.
void Forwarder::post(std::uint32_t worker, RingItem::Kind kind, RouterMsg* m) {
  MsgQueue& q = ring_wait_[worker];
  if (q.empty() && ports_.post(worker, {kind, m})) return;
  m->ring_kind = static_cast<std::uint8_t>(kind);
  q.push(m);
  ++ring_waiting_;
  counters().ring_waits.add();
}

unsigned Forwarder::post_waiting() {
  unsigned n = 0;
  for (std::uint32_t w = 0; w < ring_wait_.size() && ring_waiting_ > 0; ++w) {
    MsgQueue& q = ring_wait_[w];
    while (!q.empty() && ports_.post(w, {static_cast<RingItem::Kind>(q.head->ring_kind), q.head})) {
      q.pop();
      --ring_waiting_;
      ++n;
    }
  }
  return n;
}

// A routed message could not go to its gateway (every connection failed, or
// the gateway is down): choose again among the other gateways, with this
// worker's cursor, rather than drop a message the router accepted.  Any
// worker may choose (selection reads only the snapshot and the cursor); the
// message goes on through its home, so that a ring only ever carries
// messages homed at one of its two ends (which bounds its size).
// False if the message goes to its final destination, was re-routed once
// already (a second failure in a row means more than one gateway is going
// down: the message is dropped as a kernel router would), or no other
// gateway is usable.
bool Forwarder::reroute(RouterMsg* m) {
  const Net dest = m->rx.hdr.dest_nid.net();
  if (locals_.on_local_net(dest) || m->reroutes != 0) return false;
  const Nid failed = m->next_hop;
  auto usable = [this, &failed](const Route& route) noexcept {
    return nets_up_(route) && !gateway_down(route) && !(gateway_hop(route) == failed);
  };
  auto r = routes_.select(dest, cursor_, usable, [this](const Route& route) { return gateway_state(route); });
  if (!r) return false;
  ++m->reroutes;
  counters().reroutes.add();
  m->next_hop = gateway_hop(**r);
  if (m->home == index_ || placement_.of(m->next_hop, ncpts_) == index_) {
    dispatch(m);
  } else {
    post(m->home, RingItem::Kind::dispatch, m);
  }
  return true;
}

void Forwarder::send_out(RouterMsg* m) {
  if (!ni_on_[m->ni] || ni_nids_[m->ni].net() != m->next_hop.net()) {  // deleted since its home dispatched it
    count_drop(DropReason::ni_deleted, m->rx.hdr.payload_length);
    return give_back(m);
  }
  PeerNi* known = peer_ni(m->next_hop);
  if (known == nullptr) {  // a new next hop, and the table is full
    count_drop(DropReason::peer_table_full, m->rx.hdr.payload_length);
    return give_back(m);
  }
  PeerNi& p = *known;
  m->dest = known;
  m->ni = p.ni;
  touch(p);
  if (!p.alive && nis_[p.ni].peer_timeout > 0) {
    if (reroute(m)) return;
    ++p.drop_count;
    count_drop(DropReason::peer_down, m->rx.hdr.payload_length);
    return give_back(m);
  }
  if (m->next_hop == m->rx.hdr.dest_nid) maybe_discover(p, m->rx.hdr);
  if (!p.tx.take()) {
    wait_on(p, p.tx_wait, m);
    p.tx_queued_bytes += m->rx.hdr.payload_length;
    publish_gateway(p);
    return;
  }
  publish_gateway(p);
  start_send(m, p);
}

// `m` holds its peer transmit credit: take the NI's, or queue.
void Forwarder::start_send(RouterMsg* m, PeerNi& p) {
  if (!ni_tx_[p.ni].take()) {
    wait_in(ni_wait_[p.ni], m);
    return;
  }
  transmit(m);
}

void Forwarder::transmit(RouterMsg* m) {
  const int rc = ports_.send(m->next_hop, m->tx);
  if (rc < 0) on_sent(m->tx, rc);
}

void Forwarder::on_sent(lnd::Tx& tx, int status) {
  auto* m = static_cast<RouterMsg*>(tx.cookie);
  if (m->kind == RouterMsg::Kind::ping) {
    if (status == 0) {
      counters().send_count.add();
    } else if (m->ping_seq == ping_sent_[m->ping_slot]) {
      ping_done(m, shm::PingOutcome::send_failed, {});
    }
    return free_msg(m);
  }
  if (m->kind == RouterMsg::Kind::local || m->kind == RouterMsg::Kind::discover) {
    if (status == 0) counters().send_count.add();
    else if (m->kind == RouterMsg::Kind::discover || m->discovery) discovery_failed(m->next_hop, m->ping_seq);
    return free_msg(m);
  }
  PeerNi& p = *m->dest;  // it holds p's credit
  touch(p);
  if (ni_tx_[m->ni].give()) transmit(ni_wait_[m->ni].pop());
  if (p.tx.give()) {
    RouterMsg* next = p.tx_wait.pop();
    p.tx_queued_bytes -= next->rx.hdr.payload_length;
    start_send(next, p);
  }
  publish_gateway(p);
  // A large NID the next hop's protocol cannot carry, or an LND's full
  // peer table, is no fault of its.
  if (status != 0 && status != -EAFNOSUPPORT && status != -ENOSPC && p.gateway != nullptr)  // costs the gateway health (lnetr-control)
    p.gateway->send_failures.store(p.gateway->send_failures.load(std::memory_order_relaxed) + 1,
                                   std::memory_order_relaxed);
  if (status == 0) {
    ++p.send_count;
    p.send_bytes += m->rx.hdr.payload_length;
    counters().route_count.add();
    counters().route_length.add(m->rx.hdr.payload_length);
  } else {
    if (status != -EAFNOSUPPORT && reroute(m)) return;
    ++p.drop_count;
    count_drop(status == -EAFNOSUPPORT ? DropReason::large_nid
               : status == -ENOSPC     ? DropReason::peer_table_full
               : !ni_on_[m->ni]        ? DropReason::ni_deleted
                                       : DropReason::send_failed,
               m->rx.hdr.payload_length);
  }
  give_back(m);
}

// Sender: hand the message back to its home worker.
void Forwarder::give_back(RouterMsg* m) {
  if (m->home == index_) return release(m);
  post(m->home, RingItem::Kind::returned, m);
}

}  // namespace lnetr::dp
