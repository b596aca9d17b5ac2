// The dataplane's per-worker counters.  They live in the shared-memory
// region (shm/abi.hpp), where lnetr-control reads them; each has one writer,
// its worker.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "router/forward.hpp"

namespace lnetr::dp {

// A single-writer counter: the owner adds with a plain load and store (no
// locked instruction); other threads read it.
struct Counter {
  std::atomic<std::uint64_t> v{0};
  void add(std::uint64_t n = 1) noexcept { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  void set(std::uint64_t n) noexcept { v.store(n, std::memory_order_relaxed); }  // a gauge
  std::uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};

// The tables of peers a worker keeps, which remote nodes can grow.
enum class PeerTable : std::uint8_t { lnet, socklnd, o2iblnd };
inline constexpr std::size_t kPeerTableCount = 3;
inline constexpr std::array<const char*, kPeerTableCount> kPeerTableNames{"lnet", "socklnd", "o2iblnd"};

// Per-worker counters, one cache line apart from the next worker's.
struct alignas(64) WorkerCounters {
  Counter route_count;   // messages forwarded (counted at successful send)
  Counter route_length;  // their payload bytes
  Counter drop_count;
  Counter drop_length;
  std::array<Counter, kDropReasonCount> drops;  // by reason
  Counter recv_count;   // messages for the router itself (pings, pushes)
  Counter send_count;   // messages the router originated (replies, ACKs, pings)
  Counter reroutes;     // forwarded messages sent to another gateway after theirs failed
  Counter pushes;       // ping-info pushes sent to Multi-Rail peers
  Counter ring_waits;   // messages that waited for room on a full ring to another worker
  Counter loops;        // worker loop iterations
  Counter busy_loops;   // iterations that found work
  // TSC cycles (rte_rdtsc) the loop has run, sleeps and naps included, and
  // those of the iterations that found work: the busy share of the core is
  // busy_cycles / cycles, and busy_cycles over route_count what a forwarded
  // message costs (read with the header's tsc_hz).
  Counter cycles;
  Counter busy_cycles;
  // Nanoseconds the worker's thread ran on its core (CLOCK_THREAD_CPUTIME_ID,
  // read on each 100 ms tick): below the cycles' seconds when its core is
  // shared with other threads, which then inflate busy_cycles by the time
  // they took the core during a busy iteration.
  Counter cpu_ns;
  // Bytes copied: on DPDK ports payload and frames; on kernel sockets every
  // byte read or sent through a copy (the kernel's copies, counted from the
  // socket calls and the zero-copy completions).
  Counter bytes_copied;
  // Bytes sent from router buffers without a copy: on DPDK ports by
  // reference, on kernel sockets with MSG_ZEROCOPY (completed uncopied).
  Counter bytes_referenced;
  Counter rx_bytes_referenced;  // payload bytes received on DPDK ports and left in their frames (zero copy)
  Counter log_suppressed;       // log lines the worker's rate limit or full queue dropped (log.hpp)
  // The worker's peer tables (PeerTable): the peers each keeps now (a
  // gauge), new ones refused while it held dataplane.limits.peers, and
  // those freed after dataplane.limits.peer_idle at rest.
  struct Table {
    Counter peers;
    Counter refused;
    Counter freed;
  };
  std::array<Table, kPeerTableCount> tables;
  Table& table(PeerTable t) noexcept { return tables[static_cast<std::size_t>(t)]; }
  const Table& table(PeerTable t) const noexcept { return tables[static_cast<std::size_t>(t)]; }
};
static_assert(std::is_standard_layout_v<WorkerCounters>);

}  // namespace lnetr::dp
