// The router's LNet layer on one worker: what to do with each received
// message (forward, answer, drop), LNet's credits and router buffer pools,
// route selection, and the ownership hand-offs of dataplane/message.hpp.
//
// It does no I/O and knows neither DPDK nor sockets: the worker plugs in
// its mempools, its socklnd Node and its rings through ForwarderPorts, and
// the unit tests plug in plain memory, so the accounting is tested alone.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "dataplane/message.hpp"
#include "dataplane/setup.hpp"
#include "dataplane/shared.hpp"
#include "router/lnet_fault.hpp"
#include "router/nid_cache.hpp"
#include "router/route_table.hpp"

namespace lnetr::dp {

// What travels on a ring between workers.
struct RingItem {
  enum class Kind : std::uint64_t { send, returned, accepted, dispatch, o2ib_request };
  Kind kind;
  void* ptr;
};
static_assert(sizeof(RingItem) == 16);

// The forwarder's view of the rest of its worker.
class ForwarderPorts {
 public:
  // A router buffer of pool `c` (small or large), or nullptr if the pool is
  // empty (a buffer is only asked for once a pool credit is held, so that
  // is a fault: the message is dropped and counted, not the process).
  virtual std::uint8_t* get_buffer(PoolClass c) = 0;
  virtual void put_buffer(PoolClass c, std::uint8_t* buf) = 0;
  // The buffer's IO address (for a device reading it), or RTE_BAD_IOVA.
  virtual std::uint64_t buffer_iova(const std::uint8_t* buf) = 0;
  // socklnd: send to the next hop; resume a deferred receive.
  virtual int send(const Nid& next_hop, lnd::Tx& tx) = 0;
  virtual void resume(lnd::Rx& rx) = 0;
  // The ring to another worker; false if it is full (it is sized for every
  // message either end can have in flight, so that is a fault: the
  // forwarder keeps the message and posts it again later).
  virtual bool post(std::uint32_t worker, const RingItem& item) = 0;

 protected:
  ~ForwarderPorts() = default;
};

class Forwarder final : public lnd::Upper {
 public:
  Forwarder(std::uint16_t index, const Setup& setup, SharedState& shared, const RouteTableView& routes,
            ForwarderPorts& ports);

  // A message another worker sent us (to transmit, or back home).
  void on_ring(const RingItem& item);
  // Send the REPLYs and ACKs owed since the last call; the number sent.
  unsigned flush_local();
  // Free the buffers of finished messages that devices no longer hold
  // (frames chained from them, freed since), and post messages that
  // waited for room on a ring; the number of either.
  unsigned release_held();
  // At exit, before the ports' queues go: let go of every received frame a
  // message still keeps its payload in.
  void drop_frames() noexcept;
  // Finished messages waiting for a device to free frames chained from
  // their buffers, and messages waiting for room on a full ring.
  std::size_t held() const noexcept { return held_.count + ring_waiting_; }
  // Refresh what changes slowly (which local nets have an NI up), and once
  // a second drop what waited longer than transaction_timeout.
  // Route by a new snapshot from now on (the previous one may go away
  // after this returns).  Allocates (the cursor): once per snapshot.
  void adopt(const RouteTableView& routes);
  void tick();

  // LNet fault injection (router/lnet_fault.hpp): the rules in force from
  // now on; messages held by a rule no longer there go on at once (as
  // Lustre releases them when a rule is deleted).  Drop rules act on every message
  // received; delay and corrupt rules on messages forwarded.
  void set_faults(const std::vector<FaultRule>& rules);
  // lnetctl set tiny_buffers|small_buffers|large_buffers: `n` buffers in
  // this CPT's pool `c`, as Linux adjusts a router buffer pool.  More than
  // it has: the pool's buffers and credits grow at once (the caller first
  // made room for them: ForwarderPorts::get_buffer finds them) and waiting
  // messages take them.  Fewer: idle buffers are given up at once, those
  // in use as they come back, until the pool has `n`.
  void resize_pool(PoolClass c, std::uint32_t n);
  // lnetrctl net add: NI slot `slot` (free: ni_slot_busy() false) serves
  // `ni` from now on, and peers are placed by `placement`.
  void add_ni(std::uint32_t slot, const NiSetup& ni, const Placement& placement);
  // lnetrctl net del, in two steps around the LND's closing of the NI's
  // connections.  First the NI stops: nothing new is sent or routed
  // through it, and the messages waiting for its peers' or its own credits
  // are dropped (`ni_deleted`).  Messages the LND still holds fail as it
  // closes their connections (on_sent, on_rx_aborted: `ni_deleted` too).
  // Then its peers leave the peer table; each is freed once nothing in
  // flight refers to it.
  void stop_ni(std::uint32_t slot, const Placement& placement);
  void forget_ni_peers(std::uint32_t slot);
  // Whether slot `slot` serves an NI, or a peer of a deleted one still
  // refers to it (it cannot be given to another NI yet).
  bool ni_slot_busy(std::uint32_t slot) const noexcept;
  const NiSetup& ni(std::uint32_t slot) const noexcept { return nis_[slot]; }
  bool ni_on(std::uint32_t slot) const noexcept { return slot < ni_on_.size() && ni_on_[slot]; }
  const Placement& placement() const noexcept { return placement_; }
  FaultEngine& faults() noexcept { return faults_; }
  std::size_t fault_held() const noexcept { return fault_held_.size(); }

  // Gateway checks for lnetr-control (shm/abi.hpp): the shared board of
  // GatewayShm entries, set once before the loop (empty: no checks).
  void attach_gateways(std::span<shm::GatewayShm> board);
  // Send the pings asked of this worker and not sent yet; the number sent.
  unsigned send_pings();
  // Push our ping info to this worker's Multi-Rail peers (queued for
  // flush_local()); the number of pushes.
  unsigned push_ping_info();

  // lnd::Upper
  lnd::RxVerdict on_head(lnd::Rx& rx) override;
  void on_received(lnd::Rx& rx) override;
  void on_rx_aborted(lnd::Rx& rx) override;
  void on_sent(lnd::Tx& tx, int status) override;
  void on_peer_down(const Nid& peer) override;

  // State, for introspection and tests.
  struct PoolState {
    // (Read by the control thread too: the status, the routing drain.)
    Relaxed<std::uint32_t> nbuffers = 0;
    Relaxed<std::uint32_t> req_nbuffers = 0;  // what it is to have: below nbuffers, returned buffers are given up
    Credits credits;
  };
  std::uint16_t index() const noexcept { return index_; }
  const std::unordered_map<Nid, PeerNi*>& peers() const noexcept { return peers_; }
  // The same peers, for readers on other threads (status).
  const PeerDirectory& peer_directory() const noexcept { return directory_; }
  const std::array<PoolState, kPoolClasses>& pools() const noexcept { return pool_state_; }
  const std::vector<Credits>& ni_credits() const noexcept { return ni_tx_; }
  // Descriptors not on the free list (in flight, waiting or owed a reply).
  std::size_t msgs_in_use() const noexcept { return msgs_allocated_ - msgs_free_; }
  // Long ping replies being read.
  std::size_t long_replies() const noexcept { return long_replies_.size(); }

 private:
  // The peer table.  A known peer, or nullptr.
  PeerNi* find_peer(const Nid& nid) noexcept {
    if (PeerNi* p = recent_.find(nid)) return p;
    auto it = peers_.find(nid);
    if (it == peers_.end()) return nullptr;
    recent_.put(nid, it->second);
    return it->second;
  }
  // The peer, made if new; nullptr (refused, counted, logged) if new and
  // the table holds dataplane.limits.peers already, unless `forced` (a
  // gateway, a ping the operator asked for: not a remote peer's doing).
  // `via`: its NI if its NID's net has none (a message's previous hop).
  PeerNi* peer_ni(const Nid& nid, bool forced = false, std::uint32_t via = UINT32_MAX);
  // A message in or out: most recently active.
  void touch(PeerNi& p) noexcept;
  // `m` waits in a queue of `p`'s: `p` is on the list expire_waiting walks.
  void wait_on(PeerNi& p, MsgQueue& q, RouterMsg* m) noexcept;
  void unlist_waiting(PeerNi* p) noexcept;
  // Free (a bounded number per call) the peers at rest for longer than
  // dataplane.limits.peer_idle; the number freed.
  unsigned sweep_idle(std::int64_t now_ns);
  // Out of the table and the lists (unlink), and freed once no status
  // reader can see it (forget).
  void unlink(PeerNi* p);
  void forget(PeerNi* p);
  void refresh_nets();
  // Receive side (home).
  lnd::RxVerdict discard(lnd::Rx& rx, bool ack_push);
  bool grant_buffer(RouterMsg* m);
  void take_buffer(RouterMsg* m);
  void resume(RouterMsg* m);
  void give_rtr(PeerNi& p);
  void give_pool(std::size_t pool);
  void release(RouterMsg* m);
  void release_now(RouterMsg* m);
  void count_drop(DropReason why, std::uint32_t bytes);
  void release_fault_held(std::int64_t now_ns, bool gone);
  void corrupt_payload(RouterMsg* m);
  // transaction_timeout: drop what waited too long for a credit or a buffer.
  static void wait_in(MsgQueue& q, RouterMsg* m) noexcept;
  unsigned expire_waiting(std::int64_t now_ns);
  void expire_unread(RouterMsg* m, bool holds_rtr, DropReason why);
  void finish_expired(RouterMsg* m);
  // To another worker's ring, or behind what already waits for room there.
  void post(std::uint32_t worker, RingItem::Kind kind, RouterMsg* m);
  unsigned post_waiting();
  void route(RouterMsg* m);
  // drop_asym_route: whether `from` is the gateway of a route back to `src`'s
  // net (Linux's asymmetric-route check).
  bool routes_back(const Nid& src, const Nid& from) const noexcept;
  void answer_ping(lnd::Rx& rx);
  std::size_t own_ping_info(MutableByteSpan out) const;
  lnd::RxVerdict take_ping_reply(lnd::Rx& rx);
  void ping_done(RouterMsg* m, shm::PingOutcome outcome, ByteSpan info);
  // (And its sequence into `sequence`, if given.)
  static bool summarise_ping_info(ByteSpan info, shm::PingResult& r, std::uint32_t* sequence = nullptr);
  void take_push(RouterMsg* m, std::uint32_t length);
  // Discovery of the peers we forward to (ping-discovery-health.md §4):
  // begun by a message to a peer on its last hop, not held meanwhile.
  void maybe_discover(PeerNi& p, const LnetHeader& h);
  void discover(PeerNi& p);
  // Discovery's request `d.seq` (new) is out to `p`: judged late after
  // transaction_timeout.
  void await_answer(const PeerNi& p, PeerDiscovery& d);
  // A failed discovery is tried again once a second at most.
  bool retry_due(const PeerDiscovery& d) const noexcept {
    return now_ns_ - d.started_ns >= std::chrono::nanoseconds(std::chrono::seconds(1)).count();
  }
  PeerDiscovery& discovery_of(PeerNi& p);
  lnd::RxVerdict take_discovery_reply(lnd::Rx& rx);
  // The REPLY to the discovery ping `seq` of `nid`, read; or its ping (or
  // push) could not be sent or was not answered in time.
  void discovery_answered(const Nid& nid, std::uint64_t seq, ByteSpan info);
  void discovery_failed(const Nid& nid, std::uint64_t seq);
  // Learnt: push ours if it discovers (second step), else it is done.
  void discovery_learnt(PeerNi& p, PeerDiscovery& d, const PeerDiscovered& l);
  void expire_discoveries(std::int64_t now_ns);
  void take_peer_push(const Nid& nid, ByteSpan info);
  static bool learn(ByteSpan info, PeerDiscovered& l);
  // The NI of gateway `g` that messages and checks go to now: its rail
  // (Multi-Rail, control's), else the NID its routes name.
  static Nid hop(const shm::GatewayShm& g) noexcept;
  // Push our ping info to `p` (an ACK asked for with object cookie `seq`,
  // or the next of push_seq_ when 0).
  void push_to(const PeerNi& p, std::uint64_t seq = 0);
  MutableByteSpan reply_sink(RouterMsg* m, std::uint32_t length);
  ByteSpan ping_reply_bytes(RouterMsg* m, std::uint32_t length);
  void map_gateways();
  // A gateway as selection ranks it: its health, then the bytes queued to
  // it, then its transmit credits, as the worker that owns it publishes
  // them on the board (so every worker sees the same); a gateway without a
  // board entry by this worker's own view.
  GatewayNiState gateway_state(const Route& r) const noexcept {
    GatewayNiState s;
    const shm::GatewayShm* g = r.gateway_index < gw_board_.size() ? gw_board_[r.gateway_index] : nullptr;
    if (g != nullptr) {
      s.health = g->health.load(std::memory_order_relaxed);
      s.tx_credits = g->tx_credits.load(std::memory_order_relaxed);
      s.queued_bytes = g->queued_bytes.load(std::memory_order_relaxed);
    } else if (auto it = peers_.find(r.gateway); it != peers_.end()) {
      s.tx_credits = it->second->tx.cur - it->second->tx.max;
      s.queued_bytes = it->second->tx_queued_bytes;
    }
    return s;
  }
  void watch_gateway(PeerNi& p, shm::GatewayShm* g);
  // The NI of a route's gateway that messages go to: the route's, or the
  // rail of a Multi-Rail gateway whose NI failed.
  const Nid& gateway_hop(const Route& r) const noexcept {
    return r.gateway_index < gw_hop_.size() && gw_hop_[r.gateway_index] != Nid{} ? gw_hop_[r.gateway_index] : r.gateway;
  }
  // The owner's view of a gateway peer, on the board for every worker: its
  // transmit credits as available minus configured (0: none in use, so a
  // gateway no message went to yet ranks as an idle one).
  static void publish_gateway(const PeerNi& p) noexcept {
    if (p.gateway == nullptr) return;
    p.gateway->tx_credits.store(p.tx.cur - p.tx.max, std::memory_order_relaxed);
    p.gateway->queued_bytes.store(p.tx_queued_bytes, std::memory_order_relaxed);
  }
  bool gateway_down(const Route& r) const noexcept {
    const shm::GatewayShm* g = r.gateway_index < gw_board_.size() ? gw_board_[r.gateway_index] : nullptr;
    const std::atomic<std::uint32_t>* d = g ? &g->down : nullptr;
    return d != nullptr && d->load(std::memory_order_relaxed) != 0;
  }
  // Send side.
  void send_out(RouterMsg* m);
  void start_send(RouterMsg* m, PeerNi& p);
  void transmit(RouterMsg* m);
  void give_back(RouterMsg* m);
  bool reroute(RouterMsg* m);
  void dispatch(RouterMsg* m);
  // Descriptors.
  RouterMsg* alloc_msg();
  void free_msg(RouterMsg* m);
  void note_ping(const lnd::Rx& rx);
  // The slot of the NI on `nid`'s net, or kNoNi (none: deleted).
  static constexpr std::uint32_t kNoNi = UINT32_MAX;
  std::uint32_t ni_index(const Nid& nid) const noexcept;
  void set_locals();
  // Drop the waiting messages `pick` chooses: those still to be read are
  // read and thrown away; the others give back their credits.  (Both
  // transaction_timeout and a deleted NI.)
  struct WaitPick {
    std::function<bool(const PeerNi&, const MsgQueue&)> rtr;  // a peer's rtr_wait (still to be read)
    std::function<bool(const PeerNi&, const MsgQueue&)> tx;   // a peer's tx_wait
    std::function<bool(const MsgQueue&)> pool;                  // a router buffer pool's
    std::function<bool(std::size_t ni, const MsgQueue&)> ni;    // an NI's credits
  };
  unsigned drop_waiting(const WaitPick& pick, DropReason why);
  WorkerCounters& counters() noexcept { return shared_.counters[index_]; }

  std::uint16_t index_;
  std::uint32_t ncpts_;
  const Setup& setup_;
  SharedState& shared_;
  RouteTableView routes_;  // the adopted snapshot (memory owned elsewhere)
  ForwarderPorts& ports_;
  RouteCursor cursor_;
  // By NI slot (kMaxNis of each, never moved: the control thread reads
  // ni_tx_ for status): the worker's own copy of each NI, set by
  // add_ni/stop_ni, and whether it is in service.
  std::vector<NiSetup> nis_;
  std::vector<Nid> ni_nids_;
  std::vector<std::uint8_t> ni_on_;
  std::uint32_t ni_end_ = 0;  // one past the highest slot ever in service (ni_index's scan)
  std::vector<Nid> local_nids_;  // the NIDs of the NIs in service (locals_)
  LocalNis locals_;
  Placement placement_;           // which worker owns a peer (Setup's, then add_ni/stop_ni's)
  std::vector<PeerNi*> gone_peers_;  // peers of deleted NIs, out of the table, freed once at rest
  LocalNetMask nets_up_;

  std::unordered_map<Nid, PeerNi*> peers_;  // owned by directory_
  NidCache<PeerNi> recent_;                 // ... and the last ones looked up (forget() clears theirs)
  PeerDirectory directory_;  // peers_, listed for status
  PeerNi* least_active_ = nullptr;  // peers_ by their last message, oldest first
  PeerNi* most_active_ = nullptr;
  std::vector<PeerNi*> waiting_peers_;  // peers that may have messages waiting in their queues
  std::int64_t now_ns_ = 0;   // the clock at the last tick (peers' activity)
  bool table_full_ = false;   // refusing new peers (logged once per episode)
  std::vector<Credits> ni_tx_;  // per NI, this CPT's share
  std::vector<MsgQueue> ni_wait_;
  std::array<PoolState, kPoolClasses> pool_state_{};
  std::array<MsgQueue, kPoolClasses> pool_wait_{};
  MsgQueue held_;  // finished, their buffers still in a device (release_held)
  std::int64_t next_expiry_ns_ = 0;  // next scan of the credit queues for messages waiting too long
  std::vector<MsgQueue> ring_wait_;  // per worker: messages waiting for room on its ring, in order
  std::size_t ring_waiting_ = 0;

  static constexpr std::size_t kMsgsPerChunk = 256;
  std::vector<std::unique_ptr<RouterMsg[]>> msg_chunks_;
  RouterMsg* free_msgs_ = nullptr;
  std::size_t msgs_allocated_ = 0, msgs_free_ = 0;
  std::vector<RouterMsg*> local_out_;  // REPLYs/ACKs to send after the current event
  FaultEngine faults_;                  // LNet fault injection rules (none unless an operator adds some)
  std::vector<RouterMsg*> fault_held_;  // received messages a delay rule holds (fault_until_ns)

  std::uint64_t push_seq_ = 0;                 // object cookie of our pushes' ACK handles and discovery pings
  struct Discovering {
    Nid nid;
    std::uint64_t seq;
  };
  std::vector<Discovering> discovering_;       // discoveries with a ping or push out (expire_discoveries)
  std::span<shm::GatewayShm> board_;           // gateway checks (shared memory)
  std::vector<std::uint64_t> ping_sent_;       // per board entry: the request last sent
  std::vector<std::int64_t> ping_sent_ns_;     // ... and when
  std::vector<Nid> ping_nid_;                  // ... and to whom
  // Ping replies longer than a descriptor holds, while being read.
  std::unordered_map<RouterMsg*, std::vector<std::uint8_t>> long_replies_;
  // Per gateway of the adopted snapshot: its board entry (its `down` flag
  // and last ping answer; nullptr: not on the board, never skipped).
  std::vector<shm::GatewayShm*> gw_board_;
  std::vector<PeerNi*> gw_peers_;  // peers whose `gateway` points into the board
  std::unordered_map<Nid, shm::GatewayShm*> owned_gw_;  // gateways of the snapshot this worker owns, by hop
  std::vector<Nid> gw_hop_;  // by the snapshot's gateway index: the NI messages go to (Nid{}: unmapped)
};

}  // namespace lnetr::dp
