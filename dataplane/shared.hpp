// State shared between the control thread and the workers.  Each field has
// one writer; readers tolerate a value one loop iteration stale, so relaxed
// atomics suffice unless a comment names an ordering.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "router/forward.hpp"
#include "router/ping_info.hpp"

namespace lnetr::dp {

// Linux's routing states (ping-discovery-health.md §6.1).
enum class RoutingState : std::uint8_t { disabled, starting, enabled, stopping };

constexpr bool forwards(RoutingState s) noexcept { return s != RoutingState::disabled; }
// Whether the ping info carries RTE_DISABLED: set unless fully enabled.
constexpr bool advertises_disabled(RoutingState s) noexcept { return s != RoutingState::enabled; }

// A single-writer counter: the owner adds with a plain load and store (no
// locked instruction); other threads read it.
struct Counter {
  std::atomic<std::uint64_t> v{0};
  void add(std::uint64_t n = 1) noexcept { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  std::uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};

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
  Counter loops;        // worker loop iterations
  Counter busy_loops;   // iterations that found work
};

// An NI is UP in the ping info while its link is up and a ping (GET on
// portal 0 from a non-local NID) arrived on its net within the NI-status
// timeout (alive_router_check_interval + router_ping_timeout).
struct SharedNi {
  std::atomic<bool> link_up{true};  // written by the control thread
  // Steady-clock ns of the last such ping; written by whichever worker saw it.
  std::atomic<std::int64_t> last_ping_ns{0};

  bool up(std::int64_t now_ns, std::int64_t timeout_ns) const noexcept {
    return link_up.load(std::memory_order_relaxed) &&
           now_ns - last_ping_ns.load(std::memory_order_relaxed) < timeout_ns;
  }
};

struct SharedState {
  explicit SharedState(std::size_t nis, std::size_t workers)
      : ni(std::make_unique<SharedNi[]>(nis)), counters(std::make_unique<WorkerCounters[]>(workers)) {}

  std::atomic<RoutingState> routing{RoutingState::enabled};
  std::atomic<bool> stop{false};
  std::unique_ptr<SharedNi[]> ni;  // by NI index
  std::unique_ptr<WorkerCounters[]> counters;  // by worker
};

}  // namespace lnetr::dp
