// A DPDK Ethernet port under TCP/IP stacks (issue 6): any ethdev (a PCI
// NIC, or a virtual device such as net_af_packet, net_af_xdp, net_tap or
// net_memif), probed by the EAL, with one RX/TX queue pair per thread that
// serves it (one stack each).  Frames are read in bursts and handed to the
// stack in place (no copy); frames the stack sends are built in mbufs and
// sent in bursts at flush().  Where the device takes chained frames, a
// segment's payload from the caller's memory (a router buffer) is not
// copied: the frame is a header mbuf followed by mbufs attached to that
// memory (DPDK external buffers), counted in its BufferRef until the device
// frees them.
//
// A test-only impairment stage (config `impair:`) can drop, duplicate,
// reorder and delay received frames, seeded so that a run repeats.
#pragma once

#include <rte_mbuf.h>
#include <rte_ring.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dataplane/tcp/buffer_ref.hpp"
#include "dataplane/tcp/port_config.hpp"
#include "dataplane/tcp/stack.hpp"
#include "lnd/ref_chain.hpp"

namespace lnetr::tcp {

// The ethdev name of a configured device: a virtual device's driver and
// index ("net_af_xdp0"), or a PCI address with its domain.
std::string device_name(const std::string& device);
// Whether a configured device is a PCI address (else a virtual device).
bool is_pci_address(const std::string& device);

struct PortStats {
  std::uint64_t rx_frames = 0, tx_frames = 0;
  std::uint64_t rx_bytes = 0, tx_bytes = 0;
  std::uint64_t tx_dropped = 0;    // no mbuf, or the backlog of refused frames was full
  std::uint64_t tx_backlog = 0;    // frames the device refused, waiting (a gauge)
  std::uint64_t tx_stalls = 0;     // backlogs dropped after the device took nothing for 5 s
  std::uint64_t rx_multiseg = 0;   // chained frames, linearised (copied): no frame may be kept
  std::uint64_t rx_lro = 0;        // frames the device joined from several segments (large receive offload)
  std::uint64_t bytes_copied = 0;  // frame bytes copied into mbufs by send() (not built in place), or out of
                                   // chained frames received (rx_multiseg)
  std::uint64_t tx_chained = 0;    // frames sent as a chain of segments
  std::uint64_t rx_frames_kept = 0;  // received frames kept for payloads received by reference
  std::uint64_t rx_frames_held = 0;  // ... held now (a gauge, at most frames_budget())
  std::uint64_t rx_keep_refused = 0;  // frames not kept: the budget was used up (their bytes copied)
  std::uint64_t tx_frames_held = 0;   // received frames a send queue held to send from (no copy)
  std::uint64_t tx_hold_refused = 0;  // ... not held: the frame's budget was used up (copied)
  // Several queues: frames that arrived on this queue for a peer another
  // queue owns, passed to that queue's worker; those the other way; and
  // those dropped because the owner's steering ring was full (not in
  // rx_steered_out).
  std::uint64_t rx_steered_out = 0, rx_steered_in = 0, rx_steer_dropped = 0;
  // The impairment stage.
  std::uint64_t impair_dropped = 0, impair_duplicated = 0, impair_reordered = 0, impair_delayed = 0;
};

// The device, shared by the workers that serve its queues.
class EthPort {
 public:
  // Probe the device (after rte_eal_init), configure cfg.queues queue pairs
  // with `mbufs` mbufs each, start it.  nullptr with `err` naming the
  // device and what failed.
  // Of which, with zero_copy on, `kept` may be kept by payloads received by
  // reference.
  static std::unique_ptr<EthPort> open(const PortConfig& cfg, std::uint32_t mbufs, std::uint32_t kept,
                                       std::string& err);
  ~EthPort();
  EthPort(const EthPort&) = delete;
  EthPort& operator=(const EthPort&) = delete;

  const PortConfig& config() const noexcept { return cfg_; }
  const Mac& mac() const noexcept { return mac_; }
  std::uint16_t port_id() const noexcept { return port_id_; }
  rte_mempool* pool() const noexcept { return pool_; }
  bool link_up() const noexcept;
  // The checksum offloads the device has and lnetr turned on: IPv4 and TCP
  // checksums filled in on transmit, and verified on receive.
  const Offloads& tx_offloads() const noexcept { return tx_offloads_; }
  bool rx_checksum() const noexcept { return rx_checksum_; }
  // Whether the device joins received segments into larger frames (LRO).
  bool lro() const noexcept { return lro_; }
  // Whether frames are sent chained from router buffers (the device takes
  // multi-segment frames and the port's zero_copy is on), and the most
  // segments a frame may have (1: none chained).
  bool tx_chains() const noexcept { return max_segments_ > 1; }
  std::uint16_t max_segments() const noexcept { return max_segments_; }
  // Data-less mbufs for the segments attached to router buffers.
  rte_mempool* attach_pool() const noexcept { return attach_pool_; }
  // Whether the device reads memory by IOVA (a PCI NIC's DMA), rather than
  // by address (virtual devices): memory without an IOVA (a packed pool's
  // frames, create_pool()) is then copied, not chained.
  bool needs_iova() const noexcept { return needs_iova_; }
  // Received frames each queue may keep for payloads received by reference
  // (0: none, every received byte is copied; zero_copy off).
  std::uint32_t frames_budget() const noexcept { return frames_budget_; }
  // Queue q's count of them (BufferRef::budget).
  FrameBudget& budget(std::uint16_t q) noexcept { return budgets_[q]; }
  // Stop the device: it frees every frame it still holds (those chained
  // from router buffers included).  Before the workers go.
  void stop() noexcept;

  // Several queues.  Everything from one peer address belongs to one queue
  // (steer_queue(): ARP, ICMP and all of the peer's connections), whose
  // worker owns that peer.  Where the device does receive-side scaling on
  // IPv4 addresses with a programmable key and redirection table it
  // delivers frames there itself (rss_steers()); frames that arrive on
  // another queue anyway (any other device: net_af_packet's fanout, a tap's
  // queues) are passed to their owner through its steering ring.
  static constexpr unsigned kSteerRing = 1024;  // frames, per queue
  bool rss_steers() const noexcept { return rss_steers_; }
  // The queue that owns a received frame (-1: any queue may take it).
  int owner_of(const rte_mbuf* m) const noexcept;
  rte_ring* steer_ring(std::uint16_t queue) const noexcept { return steer_[queue]; }

 private:
  EthPort(const PortConfig& cfg, std::uint16_t port_id, rte_mempool* pool) : cfg_(cfg), port_id_(port_id), pool_(pool) {}

  PortConfig cfg_;
  std::uint16_t port_id_;
  rte_mempool* pool_;
  Mac mac_{};
  bool started_ = false;
  Offloads tx_offloads_;
  bool rx_checksum_ = false;
  bool lro_ = false;
  std::uint16_t max_segments_ = 1;
  rte_mempool* attach_pool_ = nullptr;
  std::uint32_t frames_budget_ = 0;
  std::unique_ptr<FrameBudget[]> budgets_;  // one per queue
  bool rss_steers_ = false;
  bool needs_iova_ = false;
  std::vector<std::uint8_t> rss_key_;
  std::vector<rte_ring*> steer_;  // per queue: frames other queues received for it (several queues)
};

// A capture of the frames port queues receive and send (lnetrctl capture).
// While on(), a queue shows it each burst it receives (before steering or
// impairment: what the device delivered) and each frame it queues for the
// device (what the stack built, before any offload the device applies).
// Off, it costs a queue two loads and two branches (the tap, its flag) per
// burst received and per frame sent, and copies nothing.  One per worker: frames() runs on the
// worker that owns the queue.
class FrameTap {
 public:
  bool on() const noexcept { return on_.load(std::memory_order_acquire); }
  virtual void frames(std::uint16_t port, std::uint16_t queue, rte_mbuf* const* m, unsigned n, bool sent) noexcept = 0;

 protected:
  ~FrameTap() = default;
  std::atomic<bool> on_{false};
};

// One queue pair of a port: what one worker's stack sends and receives
// through.  Used by that worker only.
class PortQueue final : public Port, public lnd::FrameRefs {
 public:
  PortQueue(EthPort& port, std::uint16_t queue);
  ~PortQueue() override;
  PortQueue(const PortQueue&) = delete;
  PortQueue& operator=(const PortQueue&) = delete;

  // Receive a burst and give each frame to `stack` (through the impairment
  // stage if configured).  Returns the frames received.
  unsigned poll(Stack& stack, Time now);

 private:
  unsigned poll_burst(Stack& stack, Time now);  // poll()'s frames, inside the stack's burst

 public:
  // Port: copy the frame into an mbuf for the next flush().
  void send(ByteSpan frame) override;
  // Port: an mbuf's data to build a frame in, sent by send_built().
  MutableByteSpan alloc_frame(std::size_t len) override;
  void send_built(std::size_t len, std::size_t l2_len, std::size_t tso_seg = 0) override;
  Offloads offloads() const override { return port_.tx_offloads(); }
  // Port: chained frames, where the device takes them.  A segment with
  // a device reference (a BufferRef) is attached to that memory.
  std::size_t max_segments() const override { return port_.max_segments(); }
  Appended append_segment(ByteSpan data, void* dev) override;
  // Ask the device to free the frames it has sent (so that router buffers
  // they were chained from go back to their pools): when idle, and on each
  // tick.  A device without tx_done_cleanup frees them on later bursts.
  void release_sent();
  // Send what send() gathered.  Returns the frames sent.
  unsigned flush();
  // lnd::FrameRefs: received frames kept for payloads received by
  // reference, at most frames_budget() at a time (beyond it bytes are
  // copied: the RX ring must always find free mbufs, or the ACKs that
  // would release the kept frames could not arrive).  Taken and dropped by
  // this queue's worker only.
  bool retain(void* frame) noexcept override;
  void share(void* frame) noexcept override;
  void release(void* frame) noexcept override;
  // And a frame of any queue (this worker's or another's), held by a send
  // queue of this one's stack, within that frame's queue's budget.
  bool hold(void* dev) noexcept override;

  EthPort& port() const noexcept { return port_; }
  std::uint16_t queue() const noexcept { return queue_; }
  // The capture this queue's frames are shown to while it is on (its
  // worker's), if any.
  void set_tap(FrameTap* tap) noexcept { tap_ = tap; }
  // (rx_frames_held read from the budget: other workers' send queues
  // change it too.)
  PortStats stats() const noexcept {
    PortStats s = stats_;
    s.rx_frames_held = budget_.held.load(std::memory_order_relaxed);
    return s;
  }

 private:
  [[gnu::always_inline]] inline void queue_tx(rte_mbuf* m);  // (two callers, both hot)
  // A capture's copy, out of the way of the paths that check for one.
  [[gnu::noinline, gnu::cold]] void to_tap(rte_mbuf* const* m, unsigned n, bool sent) noexcept;
  void take(rte_mbuf* m, Stack& stack, Time now);
  void deliver(rte_mbuf* m, Stack& stack, Time now);
  void impair(rte_mbuf* m, Stack& stack, Time now);

  EthPort& port_;
  std::uint16_t queue_;
  PortStats stats_;
  static constexpr unsigned kBurst = 32;
  static constexpr int kSteerBursts = 4;  // taken from the steering ring per poll, at most
  std::vector<rte_mbuf*> tx_;         // to send: refused ones first, then gathered by send()
  std::vector<std::uint32_t> tx_len_;  // their lengths
  std::optional<std::chrono::steady_clock::time_point> stalled_since_;  // the device took nothing since
  rte_mbuf* building_ = nullptr;      // handed out by alloc_frame()
  rte_mbuf* building_tail_ = nullptr;  // its last segment, if chained
  std::uint64_t chained_seen_ = 0;     // tx_chained at the last release_sent() when idle
  FrameBudget& budget_;  // its frames' (port_.budget(queue_))
  FrameTap* tap_ = nullptr;
  bool cleanup_ = true;  // the device frees sent frames on request (tx_done_cleanup)
  std::vector<std::uint8_t> linear_;  // a chained frame, linearised
  std::vector<FramePiece> chain_;     // a chained frame's buffers, handed over in place

  // Impairment.
  std::mt19937_64 rng_;
  rte_mbuf* held_ = nullptr;  // reorder: delivered after the next frame
  std::vector<rte_mbuf*> impair_next_;  // duplicates, delivered after their original
  std::deque<std::pair<Time, rte_mbuf*>> delayed_;
};

}  // namespace lnetr::tcp
