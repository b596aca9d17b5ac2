// State shared between the control thread and the workers.  Each field has
// one writer; readers tolerate a value one loop iteration stale, so relaxed
// atomics suffice unless a comment names an ordering.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "dataplane/counters.hpp"
#include "router/forward.hpp"
#include "router/ping_info.hpp"

namespace lnetr::dp {

// Linux's routing states (ping-discovery-health.md §6.1).
enum class RoutingState : std::uint8_t { disabled, starting, enabled, stopping };

constexpr bool forwards(RoutingState s) noexcept { return s != RoutingState::disabled; }
// Whether the ping info carries RTE_DISABLED: set unless fully enabled.
constexpr bool advertises_disabled(RoutingState s) noexcept { return s != RoutingState::enabled; }

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
      : ni(std::make_unique<SharedNi[]>(nis)), own_counters(std::make_unique<WorkerCounters[]>(workers)),
        counters(own_counters.get()) {}

  std::atomic<RoutingState> routing{RoutingState::enabled};
  std::atomic<bool> stop{false};
  std::atomic<bool> drop_asym_route{false};  // global.drop_asym_route, settable at run time
  // Our ping info's sequence number: 1 at start, one more each time an NI
  // is added or deleted (its list of NIs changes), as Linux counts it.
  std::atomic<std::uint32_t> ping_seq{1};
  std::unique_ptr<SharedNi[]> ni;  // by NI index
  std::unique_ptr<WorkerCounters[]> own_counters;
  // By worker: own_counters, or the shared-memory region's (where
  // lnetr-control reads them) once the dataplane points it there, before
  // any worker starts.
  WorkerCounters* counters;
};

}  // namespace lnetr::dp
