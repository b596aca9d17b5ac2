// The o2iblnd Transport over real RDMA devices: librdmacm for connection
// management (in RDMA_PS_TCP, as ko2iblnd), libibverbs for queue pairs,
// work requests, completions and registered memory.
//
// A VerbsDevice is one device as rdma_cm opens it (found from the IPv4
// address of an o2ib NI's interface): its verbs context, one protection
// domain, and the payload memory its owner registered once (router buffer
// pools, DPDK mbuf pools) — shared, read-only once the workers run.
//
// A VerbsTransport is one worker's view of a device: its own rdma_cm event
// channel (connections it makes, and those handed to it), its completion
// queue(s), polled in bursts by the worker's loop (no completion channel on
// the busy path: it is armed only before the worker sleeps), and the
// memory it registers itself (the engine's message buffers).  Everything
// here runs on the owning worker's thread, except the hand-off of a
// connection request to another worker (release() on the listener's
// worker, adopt() on the owner's).
//
// Remote access (RemoteKeys): by default (`transfer`) a peer's key opens
// one sink for one transfer: a type 2 memory window bound to the sink
// through the connection's queue pair before the PUT_ACK (or GET_REQ) that
// names it, and invalidated when the transfer ends (PUT_DONE, GET_DONE, a
// timeout or the connection's end), so a key used after that is refused by
// the device.  The pools themselves are registered for binding only, never
// for remote access.  A device without type 2 windows gets a registration
// per sink instead (ibv_reg_mr/ibv_dereg_mr: a system call and a page walk
// each).  `pool` registers each pool once for remote writes and hands out
// its key, as a global memory region does: any connected peer could write
// into any buffer of that pool at any time.  docs/performance.md gives
// the costs.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lnd/o2iblnd/engine.hpp"
#include "lnd/o2iblnd/transport.hpp"

namespace lnetr::o2ib {

// False (with the reason) if this machine has no RDMA devices or no RDMA
// subsystem at all (libibverbs finds none, rdma_cm has no channel).
bool verbs_available(std::string& why);

// What a remote key a peer learns (from PUT_ACK) may open.
enum class RemoteKeys : std::uint8_t {
  pool,      // the router buffer pool the sink is in (one registration per pool, made once)
  transfer,  // the sink only, for that transfer (a memory window bound and invalidated around it)
};

class VerbsDevice {
 public:
  // The device behind the interface with IPv4 address `ip` (host order).
  static std::shared_ptr<VerbsDevice> open(std::uint32_t ip, std::string& err,
                                           RemoteKeys keys = RemoteKeys::pool);
  RemoteKeys remote_keys() const noexcept { return keys_; }
  // Per-transfer keys are memory windows (the device has type 2 windows);
  // else, with RemoteKeys::transfer, registrations per sink.
  bool windows() const noexcept { return windows_; }
  ~VerbsDevice();
  VerbsDevice(const VerbsDevice&) = delete;
  VerbsDevice& operator=(const VerbsDevice&) = delete;

  // Register memory payloads live in, once, before the workers run.
  // remote_write: peers may RDMA-write into it (router buffers); else it is
  // only read by the device (mbuf pools sent from).
  bool register_payload(void* addr, std::size_t len, bool remote_write, std::string& err);
  // And router buffer memory added while the workers run (a pool grown at
  // run time): registered for remote writes and published to the lookups
  // below without a lock; at most kLiveRegions in a run.
  static constexpr std::size_t kLiveRegions = 256;
  bool register_live(void* addr, std::size_t len, std::string& err);
  std::optional<std::uint32_t> lkey(const void* addr, std::size_t len) const noexcept;
  // The remote key of memory registered for remote writes (RemoteKeys::pool).
  std::optional<std::uint32_t> rkey(const void* addr, std::size_t len) const noexcept;
  // The registration a sink in [addr, addr + len) is opened from (memory
  // registered with remote_write), or nullptr.
  ibv_mr* sink_mr(const void* addr, std::size_t len) const noexcept;
  std::size_t payload_regions() const noexcept { return mrs_.size() + n_live_.load(std::memory_order_acquire); }

  ibv_context* context() const noexcept { return anchor_->verbs; }
  ibv_pd* pd() const noexcept { return pd_; }
  const ibv_device_attr& attr() const noexcept { return attr_; }
  std::string name() const;
  std::uint32_t ip() const noexcept { return ip_; }

 private:
  VerbsDevice() = default;
  struct Mr {
    std::uintptr_t addr = 0;
    std::size_t len = 0;
    ibv_mr* mr = nullptr;
    bool remote = false;
  };
  const Mr* find(const void* addr, std::size_t len) const noexcept;
  ibv_mr* reg(void* addr, std::size_t len, bool remote_write, std::string& err);

  std::uint32_t ip_ = 0;
  RemoteKeys keys_ = RemoteKeys::pool;
  bool windows_ = false;
  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* anchor_ = nullptr;  // bound to the interface: keeps the context open
  ibv_pd* pd_ = nullptr;
  ibv_device_attr attr_{};
  std::vector<Mr> mrs_;  // by address
  std::array<Mr, kLiveRegions> live_{};  // registered at run time, in order; the first n_live_ are in use
  std::atomic<std::size_t> n_live_{0};   // (written by one thread, the dataplane's control thread)
};

// Counters of one VerbsTransport (single writer: its worker).
struct VerbsStats {
  std::uint64_t completions = 0;    // work completions polled
  std::uint64_t polls = 0;          // ibv_poll_cq calls that found some
  std::uint64_t cm_events = 0;      // connection-manager events taken
  std::uint64_t send_posts = 0;     // ibv_post_send calls
  std::uint64_t recv_posts = 0;     // ibv_post_recv calls
  std::uint64_t post_failures = 0;  // refused by the device
  std::uint64_t cq_errors = 0;      // completion queue errors, and window bindings or invalidations refused
  std::uint64_t sink_registrations = 0;  // RemoteKeys::transfer without windows: sinks registered for one transfer
  std::uint64_t sink_registration_ns = 0;  // ... and the time spent registering and deregistering them
  std::uint64_t sink_windows = 0;          // RemoteKeys::transfer: memory windows bound to a sink
  std::uint64_t sink_windows_refused = 0;  // not bound: the connection's or the transport's windows all in use
  std::uint64_t windows_allocated = 0;     // ibv_alloc_mw calls (a window is reused once invalidated)
  std::uint64_t windows_lost = 0;          // deallocated instead: failed bind or invalidation, or connection gone

  VerbsStats& operator+=(const VerbsStats& y) noexcept {
    completions += y.completions, polls += y.polls, cm_events += y.cm_events;
    send_posts += y.send_posts, recv_posts += y.recv_posts, post_failures += y.post_failures;
    cq_errors += y.cq_errors, sink_registrations += y.sink_registrations;
    sink_registration_ns += y.sink_registration_ns, sink_windows += y.sink_windows;
    sink_windows_refused += y.sink_windows_refused, windows_allocated += y.windows_allocated;
    windows_lost += y.windows_lost;
    return *this;
  }
};

class VerbsTransport final : public Transport {
 public:
  explicit VerbsTransport(std::shared_ptr<VerbsDevice> dev);
  ~VerbsTransport() override;
  VerbsTransport(const VerbsTransport&) = delete;
  VerbsTransport& operator=(const VerbsTransport&) = delete;

  // The event channel (non-blocking) and the first completion queue.
  bool init(std::string& err);
  // Listen on ip:port; CONNECT_REQUESTs go to `on_request` (which decides
  // which worker's engine judges them).
  bool listen(std::uint32_t ip, std::uint16_t port, std::function<void(ConnRequest&&)> on_request, std::string& err);
  // Stop listening (requests not yet taken are dropped by the kernel).
  void unlisten() noexcept;

  // The worker's loop: completions (a burst per queue), then CM events,
  // at most `max` of them (an accepted request makes a queue pair and
  // registers its receive buffers: a storm of them is taken a few at a
  // time, between the turns that forward).  cm_backlog(): the last call
  // stopped at `max`, so more may wait, and the edge-triggered channel
  // will not say so again: poll again on the next turn.
  unsigned poll_cq(unsigned burst);
  unsigned poll_cm(unsigned max = ~0u);
  bool cm_backlog() const noexcept { return cm_backlog_; }
  // For the worker's epoll: the CM channel, and the completion channel
  // used only to sleep (arm() before, on_wake() after).
  int cm_fd() const noexcept;
  int comp_fd() const noexcept;
  // Ask for an event at the next completion; false if one is already there
  // (do not sleep).
  bool arm();
  void on_wake();

  // Hand a connection request to another worker: release() detaches it
  // from this channel (rdma_migrate_id to `to`'s), adopt() wraps it there.
  rdma_cm_id* release(CmId* id, VerbsTransport& to);
  CmId* adopt(rdma_cm_id* raw);

  const VerbsStats& stats() const noexcept { return stats_; }
  const VerbsDevice& device() const noexcept { return *dev_; }

  // Transport
  void attach(TransportEvents* events) noexcept override { events_ = events; }
  CmId* resolve(std::uint32_t src_ip, std::uint32_t dst_ip, std::uint16_t port, bool privileged, int tos,
                int& error) override;
  int create_qp(CmId* id, const QpCaps& caps) override;
  int connect(CmId* id, const ConnectParams& p) override;
  int accept(CmId* id, const ConnectParams& p) override;
  int reject(CmId* id, ByteSpan private_data) override;
  void disconnect(CmId* id) override;
  void destroy(CmId* id) override;
  int post_recv(CmId* id, const RecvWr& wr) override;
  int post_send(CmId* id, const SendWr* wrs, std::size_t n) override;
  std::uint32_t max_send_sge() const noexcept override { return max_sge_; }
  bool register_memory(void* addr, std::size_t len, bool remote_write, Region& out) override;
  void deregister(Region& r) override;
  std::optional<std::uint32_t> lkey(const void* addr, std::size_t len) const noexcept override;
  std::optional<Sink> map_sink(CmId* id, void* addr, std::size_t len, bool& busy) override;
  bool unmap_sink(const Sink& s, std::uint64_t done) noexcept override;

 private:
  struct Id;
  struct Cq {
    ibv_cq* cq = nullptr;
    int size = 0;
    int reserved = 0;  // completions its queue pairs may have outstanding
  };
  struct Own {
    std::uintptr_t addr = 0;
    std::size_t len = 0;
    ibv_mr* mr = nullptr;
  };
  Cq* cq_for(int need);
  void dispatch(const rdma_cm_event& ev, Id* id, ByteSpan priv);

  // A memory window: bound to one sink through one connection's queue
  // pair, or free (invalidated, ready to bind again).  Its generation
  // changes whenever it is freed, so a late completion or unmap_sink() of
  // an earlier binding is recognised and ignored.
  struct Window {
    ibv_mw* mw = nullptr;    // nullptr: to allocate when next used
    Id* id = nullptr;        // bound through this connection
    std::uint32_t rkey = 0;  // the key of its last binding
    std::uint32_t gen = 0;
    bool invalidating = false;
    std::uint64_t done = 0;  // the engine's completion once invalidated (0: none)
  };
  std::optional<Sink> bind_window(Id* id, ibv_mr* mr, std::uintptr_t addr, std::size_t len, bool& busy);
  void window_done(const ibv_wc& wc) noexcept;
  void free_window(std::uint32_t i, bool lose) noexcept;

  std::shared_ptr<VerbsDevice> dev_;
  TransportEvents* events_ = nullptr;
  rdma_event_channel* channel_ = nullptr;
  ibv_comp_channel* comp_ = nullptr;
  std::deque<Cq> cqs_;  // (a deque: connections keep pointers to theirs as more are added)
  std::vector<Own> own_;  // memory registered through register_memory() (remote-write ones)
  std::uint32_t max_sge_ = 1;
  struct Listener {
    rdma_cm_id* id = nullptr;
    std::function<void(ConnRequest&&)> on_request;
  };
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::vector<ibv_send_wr> swr_;  // post_send's scratch
  std::vector<ibv_sge> ssge_;
  std::vector<ibv_wc> wc_;
  std::deque<Window> windows_;            // indices are stable: completions name them
  std::vector<std::uint32_t> free_windows_;
  bool armed_ = false;
  bool cm_backlog_ = false;
  VerbsStats stats_;
};

}  // namespace lnetr::o2ib
