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

#include <cstdint>

#include "dataplane/buffer_ref.hpp"
#include "dataplane/shm/abi.hpp"
#include "lnd/socklnd/engine.hpp"
#include "lnd/ref_chain.hpp"
#include "router/forward.hpp"

namespace lnetr::dp {

struct PeerNi;

struct RouterMsg {
  enum class Kind : std::uint8_t {
    forward,  // routed: buffer, credits, possibly another worker
    local,    // a REPLY or ACK the router sends (payload in inline_)
    discard,  // payload read and thrown away (dropped, or a push)
    ping,     // a gateway ping (GET) the router sends for lnetr-control
    ping_reply,  // a gateway's REPLY to it, read into inline_
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
  std::uint8_t reroutes = 0;  // times sent to another gateway after a failure
  std::uint8_t ring_kind = 0; // waiting for room on a ring: the RingItem::Kind to post
  std::uint16_t home = 0;     // receiving worker
  PoolClass pool = PoolClass::tiny;
  PeerNi* src = nullptr;      // previous hop (owned by home)
  std::uint32_t ni = 0;       // index of the NI it leaves through
  std::int32_t status = 0;    // send result
  std::uint32_t ping_slot = 0;  // ping, ping_reply: the gateway's shm slot
  std::uint64_t ping_seq = 0;   // ping, ping_reply: the request it answers
  Nid next_hop;
  std::uint8_t* buf = nullptr;  // router buffer, nullptr for tiny
  BufferRef buf_ref;            // buf's device reference: frames chained from it
  // A large payload received by reference: runs of it left in the frames
  // they arrived in (ref_chain.hpp), the rest in buf.  Let go at home.
  lnd::RefChain chain;
  RouterMsg* next = nullptr;    // queue link
  std::int64_t queued_ns = 0;   // when it began waiting in a credit queue (steady clock)
  lnd::Rx rx;                  // home's receive
  lnd::Tx tx;                  // the sender's transmit
  std::array<std::uint8_t, 512> inline_{};  // a local REPLY's payload (ping info)
};

// An intrusive FIFO of descriptors (credit and pool wait queues).
struct MsgQueue {
  RouterMsg* head = nullptr;
  RouterMsg* tail = nullptr;
  std::uint32_t count = 0;
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

// A peer NI as the router accounts for it (lnetctl peer show -v).
struct PeerNi {
  Nid nid;
  std::uint32_t ni = 0;  // the local NI on its net
  Credits tx;            // peer transmit credits (peer_credits)
  Credits rtr;           // peer router credits (peer_buffer_credits)
  MsgQueue tx_wait;
  MsgQueue rtr_wait;
  bool alive = true;
  bool multi_rail = false;  // it pushed its ping info to us: we push ours to it
  // Its gateway-check slot in shared memory, if it is a gateway this worker
  // pings (shm/abi.hpp): its `down` flag follows this peer's connections.
  shm::GatewayShm* gateway = nullptr;
  std::uint64_t send_count = 0, recv_count = 0, drop_count = 0;
  std::uint64_t tx_queued_bytes = 0;
};

}  // namespace lnetr::dp
