// The Controller's work on one dataplane's region (control/controller.hpp):
// gateway board slots taken, retired and reclaimed, a round of gateway
// health from what the workers wrote, route states, and publication.
#include "control/controller.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "control/service.hpp"
#include "control/service_internal.hpp"

namespace lnetr::control {

using namespace std::chrono_literals;

namespace {

// How long a change short of gateway slots waits for the workers to let go
// of retired ones: 10 sleeps of an idle worker, and room for workers that a
// loaded host runs seldom (a sanitized dataplane beside busy-polling ones
// once took over a second).
constexpr auto kReclaimWait = 5s;

std::string ms_text(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", static_cast<double>(d.count()) / 1e6);
  return buf;
}

}  // namespace

// ---- Controller: one dataplane incarnation ----------------------------------------

Controller::Controller(shm::Region region, RouteTableBuilder& builder, const HealthParams& params,
                       const Placement& placement)
    : region_(std::move(region)), builder_(builder), health_(params), placement_(placement),
      down_seen_(shm::kMaxGateways), heard_seen_(shm::kMaxGateways), failures_seen_(shm::kMaxGateways),
      pushed_seen_(shm::kMaxGateways), push_forgiven_(shm::kMaxGateways), push_wait_(shm::kMaxGateways) {
  // Entries a previous lnetr-control gave up may still be mapped by a
  // worker on an older snapshot: retired until every worker holds a newer
  // one.  Entries never used (no NID) are free.
  const std::uint64_t next = shm::published_version(region_.header().published.load()) + 1;
  for (std::uint32_t i = shm::kMaxGateways; i-- > 0;) {
    shm::GatewayShm& g = region_.gateway(i);
    // Control is the rail's only writer: one killed while writing it left
    // its seqlock held, which nobody else will let go of.
    if (const std::uint64_t gen = g.rail_gen.load(); (gen & 1) != 0) g.rail_gen.store(gen + 1);
    if (g.assigned.load() != 0) {
      // A gateway the dataplane has down now is handled at the first step.
      down_seen_[i] = g.down_events.load() - (g.down.load() != 0 ? 1 : 0);
      heard_seen_[i] = g.heard.load();
      failures_seen_[i] = g.send_failures.load();
      pushed_seen_[i] = g.pushes_received.load();
      push_forgiven_[i] = g.pushes_sent.load() - std::min(g.pushes_sent.load(), g.push_acks.load());
      slot_of_.emplace(g.nid, i);
    } else if (g.nid == Nid{}) {
      free_.push_back(i);  // lowest last: taken first
    } else {
      retired_.push_back({i, next});
    }
  }
}

bool Controller::watch_gateways(Clock::time_point now) {
  std::vector<Nid> nids;
  std::vector<std::optional<std::uint32_t>> sens;
  std::unordered_map<Nid, std::size_t> index;
  for (const Route& r : builder_.routes()) {
    auto [it, added] = index.emplace(r.gateway, nids.size());
    if (added) {
      nids.push_back(r.gateway);
      sens.emplace_back();
    }
    if (r.health_sensitivity != kSensitivityGlobal) sens[it->second] = r.health_sensitivity;
  }
  // Enough slots for the new gateways first: on failure the health state
  // and slots stay those of the previous table (the caller rolls back).
  std::size_t needed = 0;
  for (const Nid& n : nids) needed += slot_of_.contains(n) ? 0 : 1;
  reclaim();
  // Slots given up by the last changes come back once every worker has
  // adopted a later snapshot: at once for a busy worker, within its sleep
  // (100 ms) for an idle one.  Changes in quick succession wait for that
  // rather than fail.
  const auto deadline = Clock::now() + kReclaimWait;
  while (needed > free_.size() && needed <= free_.size() + retired_.size() && !unpublished_ &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
    reclaim();
  }
  if (needed > free_.size()) {
    log("error", "no gateway slot left for " + std::to_string(needed) + " new gateway(s): " +
                     std::to_string(slot_of_.size()) + " in use, " + std::to_string(retired_.size()) +
                     " waiting for every worker to let go (at most " + std::to_string(shm::kMaxGateways) + ")");
    return false;
  }
  // Gateways no route names any more give their slots up: unassigned now
  // (no worker maps or pings them from its next snapshot on), reusable once
  // every worker has adopted a snapshot published after this.
  const std::uint64_t next = shm::published_version(region_.header().published.load()) + 1;
  for (auto it = slot_of_.begin(); it != slot_of_.end();) {
    if (index.contains(it->first)) {
      ++it;
      continue;
    }
    region_.gateway(it->second).assigned.store(0);
    retired_.push_back({it->second, next});
    it = slot_of_.erase(it);
  }
  std::vector<std::uint32_t> slots;
  for (const Nid& n : nids) slots.push_back(slot_for(n));
  health_.set_gateways(nids, now);
  slot_ = std::move(slots);
  for (std::size_t i = 0; i < nids.size(); ++i) {
    health_.set_sensitivity(i, sens[i]);
    // A gateway a previous lnetr-control moved to another of its NIs stays
    // there (the workers send to it).
    health_.seed_rail(i, shm::load_rail(region_.gateway(slot_[i])));
  }
  return true;
}

bool Controller::step(Clock::time_point now) {
  const bool checking = health_.params().check_interval > Clock::duration::zero();
  for (std::size_t i = 0; i < health_.gateways().size(); ++i) {
    const Gateway& g = health_.gateways()[i];
    shm::GatewayShm& s = region_.gateway(slot_[i]);
    // The dataplane saw every connection to it fail (to the NI it had
    // just moved away from, while a move is pending: not this one's).
    const std::uint64_t downs = s.down_events.load(std::memory_order_relaxed);
    if (downs != down_seen_[slot_[i]]) {
      down_seen_[slot_[i]] = downs;
      if (s.down.load(std::memory_order_relaxed) != 0 && !g.rail_pending && !fail_over(i, now))
        gateway_event(i, health_.failed(i, GatewayReason::connections_failed, now));
    }
    // What discovery did: our pushes to it, and its own ping info pushed.
    // A push not ACKed within router_ping_timeout fails discovery, as a
    // check does.
    copy_push_counts(i, s);
    const std::uint64_t unacked = g.pushes_sent - std::min(g.pushes_sent, g.push_acks + push_forgiven_[slot_[i]]);
    if (unacked == 0) {
      push_wait_[slot_[i]] = Clock::time_point{};
    } else if (push_wait_[slot_[i]] == Clock::time_point{}) {
      push_wait_[slot_[i]] = now;
    } else if (now - push_wait_[slot_[i]] >= health_.params().ping_timeout) {
      push_forgiven_[slot_[i]] += unacked;
      push_wait_[slot_[i]] = Clock::time_point{};
      gateway_event(i, health_.failed(i, GatewayReason::push_unacked, now));
    }
    const std::uint64_t pushed = s.pushes_received.load(std::memory_order_acquire);
    if (pushed != pushed_seen_[slot_[i]]) {
      pushed_seen_[slot_[i]] = pushed;
      const shm::PingResult r = shm::load_pushed(s);
      if (r.outcome == shm::PingOutcome::answered) {
        const bool was_disabled = g.rte_disabled();
        health_.pushed(i, answer_of(r));
        if (g.rte_disabled() != was_disabled)
          log("info", "gateway " + to_string(g.nid) + " pushed its ping info: routing " +
                          (g.rte_disabled() ? "disabled" : "enabled"));
      }
    }
    // Sends to it failed: each costs health, and the healthiest gateways
    // are chosen first.
    const std::uint64_t failures = s.send_failures.load(std::memory_order_relaxed);
    if (failures != failures_seen_[slot_[i]]) {
      health_.send_failed(i, failures - failures_seen_[slot_[i]]);
      failures_seen_[slot_[i]] = failures;
    }
    // It forwarded traffic to us (and no connection failed since).
    const std::uint64_t heard = s.heard.load(std::memory_order_relaxed);
    if (heard != heard_seen_[slot_[i]] && s.down.load(std::memory_order_relaxed) == 0) {
      heard_seen_[slot_[i]] = heard;
      gateway_event(i, health_.forwarded(i, now));
    }
    if (g.outstanding == 0) continue;
    const shm::PingResult r = shm::load_result(s);
    if (r.seq != g.outstanding) continue;
    switch (r.outcome) {
      case shm::PingOutcome::answered: {
        const bool first = g.reason == GatewayReason::unchecked;
        PingAnswer a = answer_of(r);
        a.rtt = std::chrono::nanoseconds(r.done_ns - r.sent_ns);
        gateway_event(i, health_.answered(i, a, now) || first);
        break;
      }
      case shm::PingOutcome::send_failed:
        if (!fail_over(i, now)) gateway_event(i, health_.failed(i, GatewayReason::send_failed, now));
        break;
      case shm::PingOutcome::bad_reply:
        gateway_event(i, health_.failed(i, GatewayReason::bad_reply, now));
        break;
      case shm::PingOutcome::none:
        break;
    }
  }
  // A check through an NI that did not answer in time: a Multi-Rail
  // gateway is checked through its next NI before it counts as dead.
  for (std::size_t i : health_.overdue(now)) fail_over(i, now);
  for (std::size_t i : health_.expire(now)) gateway_event(i, true);
  // Health as selection in every worker ranks the gateways by.
  for (std::size_t i = 0; i < health_.gateways().size(); ++i)
    region_.gateway(slot_[i]).health.store(health_.gateways()[i].health, std::memory_order_relaxed);
  if (checking) {
    std::vector<std::uint32_t> kick;
    for (std::size_t i : health_.due(now)) {
      shm::GatewayShm& s = region_.gateway(slot_[i]);
      const std::uint64_t seq = s.request.load() + 1;
      s.request.store(seq);
      health_.sent(i, seq, now);
      kick.push_back(s.owner);
    }
    for (std::uint32_t w : kick) region_.worker(w).ping_requests.fetch_add(1);
  }
  const bool changed = apply_route_states();
  return std::exchange(unpublished_, false) || changed;
}

bool Controller::apply_route_states() {
  bool changed = false;
  const std::vector<Route> routes(builder_.routes().begin(), builder_.routes().end());
  for (const Route& r : routes) {
    const SingleHop sh = health_.single_hop(r);
    if (sh != SingleHop::unknown && sh != r.single_hop) {
      builder_.set_single_hop(r.net, r.gateway, sh);
      changed = true;
    }
    if (hold_carried_) {
      const auto gw = health_.find(r.gateway);
      if (gw && health_.gateways()[*gw].reason == GatewayReason::unchecked) continue;
    }
    const RouteState st = health_.route_state(r);
    const bool alive = st == RouteState::up;
    if (alive == r.alive) continue;
    builder_.set_alive(r.net, r.gateway, alive);
    changed = true;
    log("info", "route " + route_name(r) + ": " + (alive ? std::string("up") : "down (" + std::string(describe(st)) + ")"));
  }
  return changed;
}

bool Controller::publish() {
  const std::uint64_t version = shm::published_version(region_.header().published.load()) + 1;
  builder_.set_version(version);
  const RouteTable t = builder_.build();
  shm::PublishResult res;
  const auto give_up = Clock::now() + 2s;
  while ((res = shm::publish(region_, t.view())) == shm::PublishResult::busy) {
    if (Clock::now() >= give_up) {
      // Stopped or dead workers hold every other slot: not a reason to
      // hang (and hold the API); the next round tries again.
      log("warning", "every route slot is still held by a worker (is the dataplane stopped?): publishing later");
      unpublished_ = true;
      return true;
    }
    std::this_thread::sleep_for(1ms);
  }
  if (res == shm::PublishResult::too_big) {
    log("error", "the route table does not fit in a shared-memory slot");
    return false;
  }
  return true;
}

std::uint32_t Controller::slot_for(const Nid& nid) {
  if (auto it = slot_of_.find(nid); it != slot_of_.end()) return it->second;
  const std::uint32_t i = free_.back();
  free_.pop_back();
  shm::GatewayShm& g = region_.gateway(i);
  g.nid = nid;
  g.via = Nid{};
  g.owner = placement_.of(nid, region_.header().n_workers);
  g.down.store(0);
  g.tx_credits.store(0);
  g.queued_bytes.store(0);
  shm::store_rail(g, Nid{});
  // Nothing of the slot's last gateway.  Written as it is, not under the
  // workers' seqlock: nobody reads or writes an unassigned entry's result
  // (and a control killed here leaves no seqlock held).
  const shm::PingResult empty{};
  std::memcpy(static_cast<void*>(&g.result), &empty, sizeof empty);
  down_seen_[i] = g.down_events.load();
  heard_seen_[i] = g.heard.load();
  failures_seen_[i] = g.send_failures.load();
  pushed_seen_[i] = g.pushes_received.load();
  push_forgiven_[i] = g.pushes_sent.load() - std::min(g.pushes_sent.load(), g.push_acks.load());
  push_wait_[i] = Clock::time_point{};
  g.health.store(kMaxHealth);
  g.assigned.store(1);  // after the rest (release)
  slot_of_.emplace(nid, i);
  return i;
}

void Controller::reclaim() {
  if (retired_.empty()) return;
  std::uint64_t oldest = ~std::uint64_t{0};
  for (std::uint32_t w = 0; w < region_.header().n_workers; ++w) {
    const shm::WorkerShm& ws = region_.worker(w);
    const std::uint64_t reading = ws.reading_version.load();
    const std::uint64_t held = ws.held_version.load();
    if (held != shm::kNoVersion) oldest = std::min(oldest, held);  // kNoVersion: holds nothing
    if (reading != shm::kNoVersion) oldest = std::min(oldest, reading);
  }
  std::erase_if(retired_, [&](const std::pair<std::uint32_t, std::uint64_t>& r) {
    if (oldest < r.second) return false;
    free_.push_back(r.first);
    return true;
  });
}

PingAnswer Controller::answer_of(const shm::PingResult& r) {
  PingAnswer a;
  a.features = r.features;
  for (std::uint32_t k = 0; k < r.n_nis && k < shm::kPingNis; ++k)
    a.nis.push_back({r.nis[k].nid, r.nis[k].status == kNiStatusUp});
  for (std::uint32_t k = 0; k < r.n_nets && k < shm::kPingNets; ++k)
    a.nets.push_back({Net::from_u32(r.nets[k].net), r.nets[k].listed, r.nets[k].up});
  a.nets_complete = r.more_nets == 0 && r.n_nets <= shm::kPingNets;
  return a;
}

void Controller::copy_push_counts(std::size_t i, const shm::GatewayShm& s) {
  health_.set_push_counts(i, s.pushes_sent.load(std::memory_order_relaxed), s.push_acks.load(std::memory_order_relaxed),
                          s.pushes_received.load(std::memory_order_relaxed));
}

// A Multi-Rail gateway's NI failed: messages and checks go to its next NI
// on our net (the workers read it from the next snapshot: published by
// the caller, as step() says the table changed).
bool Controller::fail_over(std::size_t i, Clock::time_point now) {
  const Nid failed = health_.gateways()[i].hop();
  const auto to = health_.fail_over(i, now);
  const Gateway& g = health_.gateways()[i];
  if (!to && g.rail == Nid{}) return false;
  // Every NI failed: the gateway is dead, and checked through the NI its
  // routes name again (each NI is tried in turn while it recovers).
  if (!to) health_.reset_rail(i);
  shm::GatewayShm& s = region_.gateway(slot_[i]);
  if (!shm::store_rail(s, g.rail))  // (control is its only writer: never busy)
    log("error", "gateway " + to_string(g.nid) + ": its rail could not be written (seqlock held)");
  s.owner = placement_.of(g.hop(), region_.header().n_workers);
  s.down.store(0);
  unpublished_ = true;
  if (!to) return false;
  log("warning", "gateway " + to_string(g.nid) + ": its NI " + to_string(failed) + " failed; using its NI " +
                     to_string(*to) + " (Multi-Rail)");
  return true;
}

void Controller::gateway_event(std::size_t i, bool changed) {
  if (!changed) return;
  const Gateway& g = health_.gateways()[i];
  if (g.alive)
    log("info", "gateway " + to_string(g.nid) + ": alive (" + std::string(describe(g.reason)) + ", in " +
                    ms_text(g.last_rtt) + ")");
  else
    log("info", "gateway " + to_string(g.nid) + ": dead (" + std::string(describe(g.reason)) + "), health " +
                    std::to_string(g.health));
}

}  // namespace lnetr::control
