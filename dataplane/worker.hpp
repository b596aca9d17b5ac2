// One dataplane worker: a poll-mode thread pinned to the core of its CPT.
// Everything it touches on the forwarding path is in this struct or owned by
// it: its sockets (epoll), its socklnd Node (the peers of its CPT), its
// router buffer pools, its peer and NI credit state, its route cursor and its
// inbound rings.  Other workers reach it only through the SPSC rings.
#pragma once

#include <rte_cycles.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <array>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "dataplane/capture.hpp"
#include "dataplane/forwarder.hpp"
#include "dataplane/log.hpp"
#include "dataplane/message.hpp"
#include "dataplane/setup.hpp"
#include "dataplane/shared.hpp"
#include "dataplane/sock_transport.hpp"
#include "dataplane/tcp/port.hpp"
#include "lnd/socklnd/acceptor.hpp"
#include "lnd/socklnd/engine.hpp"
#include "dataplane/shm/region.hpp"
#include "lnd/o2iblnd/engine.hpp"
#include "router/route_table.hpp"

namespace lnetr::o2ib {
class VerbsDevice;
class VerbsTransport;
struct VerbsStats;
}  // namespace lnetr::o2ib

namespace lnetr::dp {

class Worker;

// Work the control thread asks of a worker (introspection, reconfiguration):
// run on the worker's thread between two loop iterations.  Owned by both
// (the last to let go frees it), so that the control thread may give up
// waiting; `fn` must therefore own whatever it writes (no references to
// the asker's stack).
struct Command {
  std::function<void(Worker&)> fn;
  std::atomic<bool> done{false};
  std::atomic<int> owners{2};
  void release() noexcept {
    if (owners.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

// The rings and wake-up state joining all workers.
struct Fabric {
  std::uint32_t n = 0;
  std::vector<rte_ring*> rings;      // rings[from * n + to], SPSC
  std::vector<rte_ring*> commands;   // control -> worker i
  std::vector<Worker*> workers;
  // Ring entries kept for messages (those homed at the ring's two ends);
  // accepted connections take only the rest.
  std::uint32_t message_room = 0;
  // DPDK ports (Setup::ports order); worker i serves queue i of each port
  // that has that many.
  std::vector<tcp::EthPort*> ports;
  // RDMA devices of the o2ib NIs (Setup::nis order; null for tcp NIs), with
  // the router buffer and mbuf pools registered on them before the workers
  // start; each worker has its own transport on each.
  std::vector<std::shared_ptr<o2ib::VerbsDevice>> verbs;
  // Captures of the ports' frames (lnetrctl capture): each worker's port
  // queues show theirs to its tap.
  Capture* capture = nullptr;
  rte_ring* ring(std::uint32_t from, std::uint32_t to) const noexcept { return rings[from * n + to]; }
};

// A router buffer pool of class `c` (small or large; tiny messages carry
// no payload): `n` buffers, taken and given back by one worker only.
rte_mempool* make_router_pool(const std::string& name, PoolClass c, std::uint32_t n);
// `reg` on each memory chunk of `mp` (to register it with an RDMA device);
// false at the first it refuses.
bool each_chunk(rte_mempool* mp, const std::function<bool(void* addr, std::size_t len)>& reg);
// Register the memory of every mempool with `dev`: router buffer pools
// (lnetr_small_*, lnetr_large_*) for remote writes, the others for the
// device to read (at start, and for an o2ib NI added at run time before
// any worker uses the device).
bool register_pools(o2ib::VerbsDevice& dev, std::string& err);

// Mbufs of each port queue: its RX ring, its TX ring, and frames in flight.
inline constexpr std::uint32_t kPortMbufs = 4096;
// And, with zero_copy on, received frames kept by the payloads of messages
// received by reference: enough for every large router buffer of a CPT
// and a quarter more (frames waiting in receive queues), at most this many.
inline constexpr std::uint32_t kMaxKeptFrames = 65536;

class Worker final : public ForwarderPorts {
 public:
  // Routes come from the shared-memory region: the worker adopts whatever
  // snapshot is published there (at init, and at the top of every loop).
  Worker(std::uint16_t index, const Setup& setup, SharedState& shared, Fabric& fabric, const shm::Region& region,
         std::uint64_t incarnation);
  ~Worker();

  // Create the pools (on the EAL thread) and the acceptor (worker 0, and
  // workers serving port queues).
  bool init(std::string& err);
  // The poll loop; returns when SharedState::stop is set.
  int run();
  // Wake the worker if it sleeps (adaptive polling); any thread.
  void kick() noexcept;

  // For commands (run on this worker's thread).
  std::uint16_t index() const noexcept { return index_; }
  const sock::Node& node() const noexcept { return *node_; }
  // The o2iblnd engine (nullptr without o2ib NIs), and this worker's
  // transports' counters (by NI; empty where it has none).
  const o2ib::Node* o2ib() const noexcept { return o2ib_.get(); }
  std::vector<o2ib::VerbsStats> verbs_stats() const;
  // This worker's transport on NI `ni`'s device (nullptr for a tcp NI).
  o2ib::VerbsTransport* verbs_transport(std::size_t ni) const noexcept;
  const Forwarder& forwarder() const noexcept { return forwarder_; }
  Forwarder& forwarder() noexcept { return forwarder_; }
  // On the worker's thread (a Command): a pool of class `c` added, its
  // buffers free to take (the control thread made it; freed with the
  // worker).
  void add_pool(PoolClass c, rte_mempool* pool) { more_pools_[static_cast<std::size_t>(c)].push_back(pool); }
  // On the worker's thread (Commands of lnetrctl net add / del): NI slot
  // `slot` serves `ni` from now on (`listen_fd`: worker 0's listening
  // socket on a kernel-socket NI's address, or -1), or no longer; peers
  // are placed by `placement` from now on.  A deleted NI's connections are
  // closed and what was in flight on them dropped as `ni_deleted`.
  void add_ni(std::uint32_t slot, const NiSetup& ni, const Placement& placement, int listen_fd);
  void del_ni(std::uint32_t slot, const Placement& placement);
  // An o2ib NI added at run time takes three steps on every worker: its
  // transport on `dev` (before add_ni; "" or why not), add_ni, then
  // (worker 0) its listener.  One deleted takes two: del_ni (worker 0's
  // listener goes), then retire_transport, after which the worker frees
  // the transport once the engine has let go of it (its connections gone);
  // until then the slot stays busy.
  std::string open_transport(std::uint32_t slot, std::shared_ptr<o2ib::VerbsDevice> dev);
  std::string listen_o2ib(std::uint32_t slot);
  void retire_transport(std::uint32_t slot);
  // Whether NI slot `slot` is free for another NI here (ni_slot_busy).
  bool ni_slot_busy(std::uint32_t slot) const noexcept {
    return forwarder_.ni_slot_busy(slot) || (slot < verbs_.size() && verbs_[slot] != nullptr);
  }
  // On the worker's thread (lnetrctl net set): `ni`'s LND takes its
  // conns_per_peer and timeout from now on.
  void tune_ni(const NiSetup& ni);
  const sock::Acceptor* acceptor() const noexcept { return acceptor_.get(); }
  // Connections a port accepted for a peer this worker does not own (it
  // connected from an address other than its NID's), closed.
  std::uint64_t conns_misplaced() const noexcept { return conns_misplaced_; }
  // What this worker's DPDK port queues and their stacks counted (by
  // Setup::ports index; `served` false where it serves none).
  struct LaneStats {
    bool served = false;
    std::uint16_t queue = 0;
    tcp::PortStats port;
    tcp::StackStats stack;
    tcp::Conn::Stats tcp;
    SockTransportStats transport;
    std::size_t connections = 0;
    std::size_t half_open = 0;  // of them in SYN-RECEIVED
  };
  std::vector<LaneStats> lane_stats() const;
  // Push our ping info to this worker's Multi-Rail peers.
  unsigned push_ping_info() { return forwarder_.push_ping_info(); }

  // What status shows of this worker beyond what it reads in place (the
  // shared counters, the forwarder's credits and peer directory): engine and
  // port counters, of a size that does not grow with the peers.  The worker
  // fills it when asked, between two loop iterations.
  struct StatusPage {
    sock::Stats sock;
    std::array<std::uint64_t, sock::kCloseReasonCount> refused{};
    std::vector<LaneStats> lanes;
    std::uint64_t conns_misplaced = 0;
    bool has_o2ib = false;
    o2ib::Stats ib;
    std::size_t ib_connections = 0;
    std::vector<o2ib::VerbsStats> verbs;
  };
  // Any thread: ask for a fresh page (returns the request to wait for), then
  // read it.  read_status_page gives the newest page it has; false if the
  // worker did not fill one for `request` before `deadline`.
  std::uint64_t request_status_page() noexcept;
  bool read_status_page(std::uint64_t request, std::chrono::steady_clock::time_point deadline, StatusPage& out);

  // ForwarderPorts
  std::uint8_t* get_buffer(PoolClass c) override;
  void put_buffer(PoolClass c, std::uint8_t* buf) override;
  std::uint64_t buffer_iova(const std::uint8_t* buf) override;
  int send(const Nid& next_hop, lnd::Tx& tx) override;
  void resume(lnd::Rx& rx) override;
  bool post(std::uint32_t worker, const RingItem& item) override;

 private:
  bool push(std::uint32_t to, RingItem item);
  unsigned iterate(lnd::Clock::time_point now);
  unsigned drain_rings();
  unsigned run_commands();
  unsigned fill_status_page();
  void tick();
  bool sleep_if_idle(unsigned work);
  unsigned poll_ports(lnd::Clock::time_point now);
  unsigned flush_ports();
  // o2ib: the transports' completions in bursts; connection requests taken
  // by worker 0's listeners, judged by the peer's owner.
  bool init_o2ib(std::string& err);
  unsigned poll_verbs();
  void take_o2ib_request(std::size_t ni, o2ib::ConnRequest&& r);
  bool lnd_is_o2ib(const Nid& nid) const noexcept { return o2ib_ && nid.lnd() == LndType::o2ib; }

  std::uint16_t index_;
  // This worker's log lines, queued for the control thread (log.hpp).
  std::unique_ptr<WorkerLog> log_;
  const Setup& setup_;
  SharedState& shared_;
  Fabric& fabric_;
  std::uint64_t incarnation_;
  shm::RouteReader routes_;
  Forwarder forwarder_;
  shm::WorkerShm& shm_me_;       // this worker's block of the shared region
  std::uint64_t pings_seen_ = 0;  // shm_me_.ping_requests when last looked at

  // The turn's time, from the TSC the loop reads for its cycle counters
  // (a clock_gettime per turn was a sixth of an idle turn), set against
  // the steady clock at every tick and never going back.
  class TscClock {
   public:
    void sync(lnd::Clock::time_point now, std::uint64_t tsc) noexcept {
      base_ = now;
      base_tsc_ = tsc;
      if (ns_per_cycle_ == 0) ns_per_cycle_ = 1e9 / static_cast<double>(rte_get_tsc_hz());
    }
    lnd::Clock::time_point at(std::uint64_t tsc) noexcept {
      const auto ns = static_cast<std::int64_t>(static_cast<double>(tsc - base_tsc_) * ns_per_cycle_);
      const lnd::Clock::time_point t = base_ + std::chrono::nanoseconds(ns);
      if (t > last_) last_ = t;
      return last_;
    }

   private:
    lnd::Clock::time_point base_{}, last_{};
    std::uint64_t base_tsc_ = 0;
    double ns_per_cycle_ = 0;
  } clock_;
  sock::Poller poller_;
  std::size_t own_fds_ = 0;    // the worker's own descriptors in poller_ (no kernel socket)
  unsigned epoll_turn_ = 0;    // turns since poller_ was last polled
  std::unique_ptr<sock::Node> node_;
  std::unique_ptr<sock::Acceptor> acceptor_;
  std::uint64_t conns_misplaced_ = 0;
  bool on_port(const sock::Accepted& a) const noexcept;
  sock::LocalNi sock_ni(const NiSetup& n);
  std::array<rte_mempool*, kPoolClasses> pool_{};
  // Pools added at run time when a router buffer pool grew past what the
  // worker started with (lnetctl set large_buffers ...): lent first, the
  // newest first, so that memory just added is in use at once; each
  // buffer goes back to the pool it came from.
  std::array<std::vector<rte_mempool*>, kPoolClasses> more_pools_{};

  // One port queue, the TCP/IP stack on it and socklnd's transport on that.
  struct Lane {
    Lane(tcp::EthPort& port, std::uint16_t queue, const tcp::StackConfig& cfg) : rxtx(port, queue), stack(cfg, rxtx) {}
    tcp::PortQueue rxtx;
    tcp::Stack stack;
    std::unique_ptr<SockTransport> transport;
  };
  std::vector<std::unique_ptr<Lane>> lanes_;  // by Setup::ports index; null where not served here
  // A port's NI on a worker that does not poll the port: connects fail.
  class NoPort final : public sock::Transport {
   public:
    std::unique_ptr<sock::Stream> connect(const sock::IpAddr&, const sock::IpAddr&, std::uint16_t,
                                          int& error) override {
      error = ENETUNREACH;
      return nullptr;
    }
  } no_port_;
  std::vector<std::unique_ptr<o2ib::VerbsTransport>> verbs_;  // by NI slot; null for tcp NIs
  std::unique_ptr<o2ib::Node> o2ib_;
  class VerbsHandler;
  // By NI slot: its transport's channels in the epoll set (CM, completions).
  std::vector<std::array<std::unique_ptr<VerbsHandler>, 2>> verbs_handlers_;
  struct Retiring {
    std::uint32_t slot;       // its transport goes once the engine lets go ...
    std::uint32_t ring_upto;  // ... and worker 0's ring to us is read up to here
  };
  std::vector<Retiring> retiring_;
  std::vector<o2ib::VerbsStats> retired_verbs_;  // the counters of transports closed (one per NI deletion)
  bool watch_verbs(std::uint32_t slot, std::string& err);
  void unwatch_verbs(std::uint32_t slot);
  void release_transports();
  void count_cpu_time();
  std::uint64_t cpu_ns_seen_ = 0;  // the thread's CPU time already counted
  std::uint64_t o2ib_copied_seen_ = 0;
  std::uint64_t sock_copied_seen_ = 0;        // kernel sockets' bytes_copied already counted
  std::uint64_t sock_zero_copy_seen_ = 0;     // ... and their bytes_zero_copy
  std::uint64_t copied_seen_ = 0;             // bytes_copied already counted
  std::uint64_t referenced_seen_ = 0;         // bytes_referenced already counted
  std::uint64_t kept_seen_ = 0;               // rx_bytes_referenced already counted

  class WakeHandler;
  std::unique_ptr<WakeHandler> wake_;
  int wake_fd_ = -1;
  std::atomic<bool> sleeping_{false};
  unsigned idle_ = 0;

  // The status page: readers bump page_wanted_ and wait for page_filled_
  // to reach it; the page itself is under page_mu_, which the worker only
  // tries (a reader copying it makes the worker fill it on a later turn).
  std::mutex page_mu_;
  StatusPage page_;
  std::atomic<std::uint64_t> page_wanted_{0};
  std::atomic<std::uint64_t> page_filled_{0};
  std::uint64_t page_seen_ = 0;  // the worker's: page_wanted_ when it last filled the page
  lnd::Clock::time_point next_tick_{};
};

}  // namespace lnetr::dp
