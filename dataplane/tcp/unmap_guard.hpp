// Keeps a device's shared memory mapped while a worker may still be inside
// one of its bursts.
//
// DPDK's net_memif tears a connection down on its own thread, the EAL
// interrupt thread, when the peer process goes away: it marks the device
// disconnected, then unmaps the shared rings and buffers.  A worker that
// read "connected" at the start of an RX or TX burst just before that, and
// is still in the burst (preempted, or just slower), then reads unmapped
// memory and the whole process dies.  The PMD has no hook between the two
// steps, so the library defines munmap() itself (exported from the
// executable by the link, meson's tcp_dep: it wins over the C library's
// for every shared object): an unmap made on the interrupt thread first
// waits until every thread polling a DPDK port (a Poller) has gone once
// through the quiescent point at the end of its loop iteration (DPDK's
// RCU, QSBR flavour), which no poller reaches while inside a burst.  After that every burst sees "disconnected" and returns
// without touching the rings.  Unmaps on any other thread, and every unmap
// before install(), go straight to the C library.
//
// Memory ordering: the PMD clears its "connected" flag before it unmaps;
// rte_rcu_qsbr_start()'s release of the new token publishes that clear, and
// the acquire load of the token in a worker's rte_rcu_qsbr_quiescent()
// makes it visible to the worker's next burst.
#pragma once

#include <string>

struct rte_rcu_qsbr;

namespace lnetr::tcp::unmap_guard {

// Start guarding, for pollers numbered 0 .. max_pollers-1 (main thread,
// before the polling threads start; once per process).
bool install(unsigned max_pollers, std::string& err);
// Whether install() succeeded (for status and tests).
bool installed() noexcept;

// A thread that polls DPDK devices, from construction (on that thread) to
// destruction.  quiescent() between bursts; nothing while inside one.
class Poller {
 public:
  explicit Poller(unsigned id) noexcept;
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;
  void quiescent() noexcept;

 private:
  rte_rcu_qsbr* qsbr_;
  unsigned id_;
};

}  // namespace lnetr::tcp::unmap_guard
