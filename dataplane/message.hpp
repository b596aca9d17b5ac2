// The router's message descriptor and the ownership of a routed message.
//
// A descriptor carries one message through the router; its payload lives in
// a router buffer from the receiving worker's per-CPT mempool (small: 4 KiB,
// large: 1 MiB; tiny messages have no buffer).
//
// Who owns what, step by step (worker A received it, worker B sends it):
//   1. A (the "home": it owns the previous-hop peer C, C's router credit and
//      the buffer's pool) allocates the descriptor, takes C's router credit
//      and a pool credit, then a buffer; socklnd reads the payload into it.
//      A message waiting for a credit sits in C's or the pool's queue with
//      its socket unread (back-pressure).
//   2. A picks the next hop.  If B != A, A puts the descriptor on the SPSC
//      ring A->B and never touches it again until it comes back.
//   3. B takes the next hop's peer credit and the NI's credit (queueing if
//      needed) and hands the Tx to socklnd, which writes header and payload
//      straight from the buffer.
//   4. When socklnd is done (sent or failed), B returns its credits and puts
//      the descriptor on the ring B->A.
//   5. A frees the buffer to its pool, gives the pool credit and C's router
//      credit to the next waiters, and frees the descriptor.  If frames a
//      DPDK port chained from the buffer are still in a device (buf_ref),
//      step 5 waits, in A's held queue, until the device has freed them.
// Messages the router originates (ping REPLYs, push ACKs) and messages it
// drops never leave their worker.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "dataplane/shm/abi.hpp"
#include "dataplane/tcp/buffer_ref.hpp"
#include "lnd/message.hpp"
#include "lnd/ref_chain.hpp"
#include "router/forward.hpp"

namespace lnetr::dp {

struct PeerNi;
struct RouterMsg;

// Everything of a descriptor a new message starts afresh with (RouterMsg
// adds the inline payload, which it does not).
struct RouterMsgState {
  enum class Kind : std::uint8_t {
    forward,  // routed: buffer, credits, possibly another worker
    local,    // a REPLY or ACK the router sends (payload in inline_)
    discard,  // payload read and thrown away (dropped, or a push)
    ping,     // a gateway ping (GET) the router sends for lnetr-control
    ping_reply,  // a gateway's REPLY to it, read into inline_
    discover,        // discovery's ping (GET) of a peer we forward to (next_hop)
    discover_reply,  // its REPLY, read into inline_
  };

  // Where a forwarded message is in its life at home.
  enum class Stage : std::uint8_t {
    wait_rtr,     // in src->rtr_wait: owes the previous hop's router credit
    wait_buffer,  // holds the router credit, in a pool's wait queue
    receiving,    // holds both credits and a buffer; payload being read
    routed,       // complete, on its way out (possibly on another worker)
    expired,      // waited too long for a credit: its payload is read and thrown away ...
    expired_rtr,  // ... and it holds the previous hop's router credit
  };

  Kind kind = Kind::forward;
  Stage stage = Stage::wait_rtr;
  bool aborted = false;       // the connection died while it waited
  bool is_push = false;       // discard kind: ACK it once received
  bool discovery = false;     // local kind: discovery's push to next_hop (its request in ping_seq)
  bool push_read = false;     // discard kind: a push read into inline_ (a gateway's: its slot in ping_slot,
                              // else kNoGatewaySlot: a peer's, its NID in next_hop)
  std::uint8_t reroutes = 0;  // times sent to another gateway after a failure
  std::uint8_t ring_kind = 0; // waiting for room on a ring: the RingItem::Kind to post
  std::uint16_t home = 0;     // receiving worker
  PoolClass pool = PoolClass::tiny;
  PeerNi* src = nullptr;      // previous hop (owned by home)
  std::uint32_t ni = 0;       // index of the NI it leaves through
  std::int32_t status = 0;    // send result
  std::uint32_t ping_slot = 0;  // ping, ping_reply: the gateway's shm slot
  std::uint64_t ping_seq = 0;   // ping, ping_reply, discover, discover_reply: the request it answers
  Nid next_hop;
  // next_hop's record, from send_out() on (owned by the sender, which has
  // it as long as the message holds or waits for its credit).
  PeerNi* dest = nullptr;
  std::uint8_t* buf = nullptr;  // router buffer, nullptr for tiny
  tcp::BufferRef buf_ref;            // buf's device reference: frames chained from it
  // A payload received by reference: runs of it left in the frames they
  // arrived in (ref_chain.hpp), the rest in buf.  Let go at home.
  lnd::RefChain chain;
  RouterMsg* next = nullptr;    // queue link
  std::int64_t queued_ns = 0;   // when it began waiting in a credit queue (steady clock)
  std::int64_t fault_until_ns = 0;  // an LNet fault delay rule holds it until then once received
  bool fault_corrupt = false;       // ... or a corrupt rule chose it: a payload byte is flipped
  std::uint32_t fault_rule = 0;     // the delay rule holding it
  lnd::Rx rx;                  // home's receive
  lnd::Tx tx;                  // the sender's transmit
};

struct RouterMsg : RouterMsgState {
  // A local REPLY's payload (ping info) or a gateway's ping reply: written
  // before it is read, so a reused descriptor does not clear it.
  std::array<std::uint8_t, 512> inline_;

  // The state of a new message, the inline payload left as it is.
  void reset() { static_cast<RouterMsgState&>(*this) = RouterMsgState{}; }
};

// An intrusive FIFO of descriptors (credit and pool wait queues).
struct MsgQueue {
  RouterMsg* head = nullptr;
  RouterMsg* tail = nullptr;
  Relaxed<std::uint32_t> count = 0;  // read by status
  bool empty() const noexcept { return head == nullptr; }
  void push(RouterMsg* m) noexcept {
    m->next = nullptr;
    if (tail) tail->next = m; else head = m;
    tail = m;
    ++count;
  }
  RouterMsg* pop() noexcept {
    RouterMsg* m = head;
    if (!m) return nullptr;
    head = m->next;
    if (!head) tail = nullptr;
    m->next = nullptr;
    --count;
    return m;
  }
};

inline constexpr std::uint32_t kNoGatewaySlot = UINT32_MAX;

// What discovery learnt of a peer (ping-discovery-health.md §4): its ping
// info as its REPLY to our discovery ping, or its latest push, gave it.
struct PeerDiscovered {
  std::uint32_t features = 0;
  std::uint32_t sequence = 0;  // its ping info's
  std::uint32_t n_nis = 0;     // entries kept in nis (0@lo excluded), primary first
  std::uint32_t more_nis = 0;  // entries it listed beyond shm::kPingNis
  shm::PingNiEntry nis[shm::kPingNis] = {};
  std::int64_t at_ns = 0;      // steady clock when learnt
  bool pushed = false;         // from a push (else a ping REPLY)
};

// Discovery of one peer the router forwards to (or that pushed to it): made
// by its owner worker the first time, and freed with the peer.  The owner
// writes; the status reads `learnt` under the seqlock `gen`, the rest as
// Relaxed values.
struct PeerDiscovery {
  enum class State : std::uint8_t {
    pinging,     // our ping is out
    pushing,     // answered; our push is out, its ACK awaited
    discovered,  // answered (and, if it discovers, our push ACKed)
    failed,      // the ping or push could not be sent, or was not answered in transaction_timeout
  };
  Relaxed<State> state = State::pinging;
  std::atomic<std::uint64_t> gen{0};
  PeerDiscovered learnt;
  Relaxed<std::uint64_t> pings = 0, pushes_sent = 0, push_acks = 0, pushes_received = 0, failures = 0;
  // The owner's: the ping or push awaited, its deadline, and when discovery
  // last started (once a second at most).
  std::uint64_t seq = 0;
  std::int64_t deadline_ns = 0;
  std::int64_t started_ns = 0;
  std::uint32_t sink = sizeof(RouterMsg::inline_);  // what our ping asks for (more once a REPLY was cut short)
};

// A peer NI as the router accounts for it (lnetctl peer show -v).  Its
// worker owns it; what status shows (the Relaxed fields, and nid and ni,
// fixed before it is listed in the worker's PeerDirectory) may be read by
// the control thread at any time.
struct PeerNi {
  Nid nid;
  std::uint32_t ni = 0;  // the local NI on its net
  Credits tx;            // peer transmit credits (peer_credits)
  Credits rtr;           // peer router credits (peer_buffer_credits)
  MsgQueue tx_wait;
  MsgQueue rtr_wait;
  Relaxed<bool> alive = true;
  Relaxed<bool> multi_rail = false;  // it pushed its ping info to us, or discovery found it is: we push ours to it
  // Steady-clock ns of its last ping to us, and of its last ACK of our
  // push: what it last learnt of our routing state (a drain waits until
  // the peers that use us as a gateway have seen it disabled).
  Relaxed<std::int64_t> pinged_ns = 0;
  Relaxed<std::int64_t> push_acked_ns = 0;
  // Its gateway-check slot in shared memory, if it is a gateway this worker
  // pings (shm/abi.hpp): its `down` flag follows this peer's connections.
  shm::GatewayShm* gateway = nullptr;
  Relaxed<std::uint64_t> send_count = 0, recv_count = 0, drop_count = 0;
  Relaxed<std::uint64_t> send_bytes = 0, recv_bytes = 0;  // payload bytes of those messages
  std::uint64_t tx_queued_bytes = 0;

  // The owner's bookkeeping, for freeing idle peers (Forwarder::sweep_idle).
  std::uint32_t src_of = 0;       // descriptors whose previous hop it is (RouterMsg::src)
  bool routes_via = false;        // a gateway of a route, or forced: never idle
  bool waits_listed = false;      // on the forwarder's list of peers with waiting messages ...
  std::uint32_t waits_index = 0;  // ... at this index
  std::int64_t active_ns = 0;     // the worker's clock at its last message, in or out
  PeerNi* older = nullptr;        // the worker's peers, least recently active first
  PeerNi* newer = nullptr;
  std::uint32_t dir_slot = 0;     // its entry in the PeerDirectory (listed ones)
  bool listed = false;
  bool gone = false;              // its NI was deleted: out of the table, freed once at rest
  // Discovery of it (nullptr: never begun); set once, freed with it.
  std::atomic<PeerDiscovery*> discovery{nullptr};

  PeerNi() = default;
  PeerNi(const PeerNi&) = delete;
  PeerNi& operator=(const PeerNi&) = delete;
  ~PeerNi() { delete discovery.load(std::memory_order_relaxed); }

  // Nothing in flight or waiting refers to it.
  bool at_rest() const noexcept {
    return src_of == 0 && tx.cur.get() == tx.max.get() && rtr.cur.get() == rtr.max.get() && tx_wait.empty() &&
           rtr_wait.empty();
  }
};

// A worker's peers, listed for readers on other threads.  The worker adds
// and removes; a reader walks the entries listed while it walks, without
// a lock the worker would wait for.  Entries live in chunks that never
// move.  A removed peer is deleted only once no reader can still be
// looking at it: the worker numbers its removals (a generation), a reader
// announces the generation it started at, and the worker deletes a peer
// removed at generation g once no reader is walking or the one walking
// started after g (every access sequentially consistent: a reader that
// started after the removal cannot find the entry).  The directory owns
// its peers.
class PeerDirectory {
 public:
  static constexpr std::size_t kChunk = 1024;
  static constexpr std::size_t kMaxChunks = 1024;  // a million entries per worker

  PeerDirectory() = default;
  PeerDirectory(const PeerDirectory&) = delete;
  PeerDirectory& operator=(const PeerDirectory&) = delete;
  ~PeerDirectory();

  // The owner only.  A new peer of that NID on local NI `ni`, listed
  // (unlisted when the directory is full: it works all the same).
  PeerNi* create(const Nid& nid, std::uint32_t ni);
  // The owner only: unlist `p` and delete it once no reader can see it.
  void retire(PeerNi* p);
  // The owner only: delete the retired peers no reader can see any more;
  // the number deleted.  Cheap when there are none.
  std::size_t reclaim();
  // Peers retired and not yet deleted.
  std::size_t retired() const noexcept { return retired_.size(); }

  // Any thread (readers take turns).  The entries' high-water mark, and a
  // walk over the peers listed.
  std::size_t size() const noexcept { return size_.load(std::memory_order_acquire); }
  template <class Fn>
  void for_each(Fn&& fn) const {
    std::lock_guard lock(readers_);
    reader_gen_.store(gen_.load());  // both sequentially consistent
    const std::size_t n = size();
    for (std::size_t i = 0; i < n; ++i) {
      const PeerNi* p = chunks_[i / kChunk].load(std::memory_order_acquire)[i % kChunk].load();
      if (p != nullptr) fn(*p);
    }
    reader_gen_.store(0);
  }

 private:
  std::array<std::atomic<std::atomic<PeerNi*>*>, kMaxChunks> chunks_{};
  std::atomic<std::size_t> size_{0};
  std::vector<std::uint32_t> free_slots_;  // owner: entries emptied by retire()
  std::atomic<std::uint64_t> gen_{1};      // owner: removals so far, plus one
  mutable std::atomic<std::uint64_t> reader_gen_{0};  // the walking reader's start, or 0
  mutable std::mutex readers_;
  struct Retired {
    std::uint64_t gen;
    PeerNi* peer;
  };
  std::vector<Retired> retired_;  // owner, in generation order
};

}  // namespace lnetr::dp
