// Controller, lnetr-control's hold on one dataplane incarnation: the
// gateway board in its shared memory (a slot per gateway the route table
// names), gateway health from what the workers write there, and publication
// of the route table.  Private to lnetr-control (control/controller.cpp).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "control/health.hpp"
#include "dataplane/shm/region.hpp"
#include "router/forward.hpp"
#include "router/route_table.hpp"

namespace lnetr::control {

// Gateway health and publication into one dataplane's region.  Called with
// the service's lock held.
class Controller {
 public:
  Controller(shm::Region region, RouteTableBuilder& builder, const HealthParams& params, const Placement& placement);

  const shm::Region& region() const noexcept { return region_; }
  GatewayHealth& health() noexcept { return health_; }
  const GatewayHealth& health() const noexcept { return health_; }

  // The table's gateways changed: watch exactly those, each with a board
  // slot (written before any snapshot names it).  False if the board is
  // full.
  bool watch_gateways(Clock::time_point now);

  // Attaching to a table that was in use (and gateways are checked): each
  // route keeps the state it has there until its gateway's first check,
  // rather than counting as up as a route through an unchecked gateway does.
  void hold_carried_states() { hold_carried_ = health_.params().check_interval > Clock::duration::zero(); }

  // One round: results, failures, timeouts, due pings, route states.  True
  // if the table changed (publish it).
  bool step(Clock::time_point now);

  // Route aliveness from gateway health; true if any route changed.
  bool apply_route_states();

  // Whether the builder's table fits in a route slot.
  bool table_fits() const { return shm::fits(region_, builder_.build().view()); }

  bool publish();

 private:
  // The slot of a gateway, assigning a free one to a new gateway (the
  // caller made sure there is one).
  std::uint32_t slot_for(const Nid& nid);

  // Retired slots every worker has let go of become free: each worker
  // holds (and is reading) only snapshots published after the retirement,
  // which neither map nor ping them.
  void reclaim();

  void gateway_event(std::size_t i, bool changed);
  static PingAnswer answer_of(const shm::PingResult& r);
  void copy_push_counts(std::size_t i, const shm::GatewayShm& s);
  bool fail_over(std::size_t i, Clock::time_point now);

  shm::Region region_;
  RouteTableBuilder& builder_;
  GatewayHealth health_;
  Placement placement_;
  std::vector<std::uint32_t> slot_;                               // per watched gateway: its board slot
  bool unpublished_ = false;  // the last publish gave up: retry on the next step
  bool hold_carried_ = false;  // routes keep their carried state until their gateway's first check
  std::vector<std::uint64_t> down_seen_;   // per slot: down_events handled
  std::vector<std::uint64_t> heard_seen_;  // per slot: heard handled
  std::vector<std::uint64_t> failures_seen_;  // per slot: send_failures handled
  std::vector<std::uint64_t> pushed_seen_;    // per slot: pushes_received handled
  std::vector<std::uint64_t> push_forgiven_;  // per slot: pushes never ACKed, already judged
  std::vector<Clock::time_point> push_wait_;  // per slot: since when a push waits for its ACK
  std::unordered_map<Nid, std::uint32_t> slot_of_;               // assigned slots
  std::vector<std::uint32_t> free_;                              // unassigned, reusable now
  std::vector<std::pair<std::uint32_t, std::uint64_t>> retired_; // unassigned at (before) that version
};

}  // namespace lnetr::control
