#include "control/health.hpp"

#include <algorithm>

namespace lnetr::control {

LNETR_ENUM_NAMES(, GatewayReason, LNETR_GATEWAY_REASONS)
LNETR_ENUM_NAMES(, RouteState, LNETR_ROUTE_STATES)

namespace {

// The recovery backoff: 1, 2, 4 ... s after failures in a row, capped by the
// check interval.
Clock::duration retry_after(unsigned failures, Clock::duration interval) {
  const unsigned shift = std::min(failures > 0 ? failures - 1 : 0u, 10u);
  return std::min<Clock::duration>(std::chrono::seconds(1u << shift), interval);
}

bool any_up_on(const Gateway& g, Net net, bool* listed = nullptr) {
  for (const GatewayNet& n : g.nets)
    if (n.net == net) {
      if (listed) *listed = n.listed > 0;
      return n.up > 0;
    }
  // Not among the nets kept: unlisted, or beyond what was kept (then given
  // the benefit of the doubt).
  if (listed) *listed = !g.nets_complete;
  return !g.nets_complete;
}

}  // namespace

std::vector<GatewayNet> summarise(std::span<const GatewayNi> nis) {
  std::vector<GatewayNet> out;
  for (const GatewayNi& ni : nis) {
    auto it = std::find_if(out.begin(), out.end(), [&](const GatewayNet& n) { return n.net == ni.nid.net(); });
    if (it == out.end()) it = out.insert(out.end(), GatewayNet{ni.nid.net()});
    ++it->listed;
    if (ni.up) ++it->up;
  }
  return out;
}

void GatewayHealth::set_gateways(std::span<const Nid> nids, Clock::time_point now) {
  std::vector<Gateway> next;
  next.reserve(nids.size());
  for (const Nid& nid : nids) {
    if (auto i = find(nid)) {
      next.push_back(std::move(gateways_[*i]));
    } else {
      Gateway g;
      g.nid = nid;
      g.next_check = now;
      next.push_back(std::move(g));
    }
  }
  gateways_ = std::move(next);
  index_.clear();
  for (std::size_t i = 0; i < gateways_.size(); ++i) index_.emplace(gateways_[i].nid, i);
}

std::optional<std::size_t> GatewayHealth::find(const Nid& nid) const noexcept {
  const auto it = index_.find(nid);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::size_t> GatewayHealth::due(Clock::time_point now) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < gateways_.size(); ++i)
    if (gateways_[i].outstanding == 0 && now >= gateways_[i].next_check) out.push_back(i);
  return out;
}

void GatewayHealth::sent(std::size_t gw, std::uint64_t seq, Clock::time_point now) {
  Gateway& g = gateways_[gw];
  g.outstanding = seq;
  g.sent_at = now;
  ++g.pings;
}

bool GatewayHealth::answered(std::size_t gw, const PingAnswer& a, Clock::time_point now) {
  Gateway& g = gateways_[gw];
  const bool was = g.alive;
  g.outstanding = 0;
  g.alive = true;
  g.reason = GatewayReason::answered;
  g.health = kMaxHealth;
  g.answered_once = true;
  g.features = a.features;
  g.nis = a.nis;
  g.nets = a.nets;
  g.nets_complete = a.nets_complete;
  g.last_rtt = a.rtt;
  g.recovery = 0;
  g.next_check = now + params_.check_interval;
  g.rail_pending = false;
  g.failed_rails.clear();
  return !was;
}

std::optional<Nid> GatewayHealth::fail_over(std::size_t gw, Clock::time_point now) {
  Gateway& g = gateways_[gw];
  constexpr std::uint32_t mr = ping_feature::multi_rail | ping_feature::discovery;
  if (!params_.discovery || !g.answered_once || (g.features & mr) != mr) return std::nullopt;
  const Nid failed = g.hop();
  if (std::find(g.failed_rails.begin(), g.failed_rails.end(), failed) == g.failed_rails.end())
    g.failed_rails.push_back(failed);
  // The next one after the failed NI in its ping info's order (wrapping).
  const auto at = std::find_if(g.nis.begin(), g.nis.end(), [&](const GatewayNi& n) { return n.nid == failed; });
  const std::size_t from = at == g.nis.end() ? 0 : static_cast<std::size_t>(at - g.nis.begin()) + 1;
  for (std::size_t k = 0; k < g.nis.size(); ++k) {
    const GatewayNi& n = g.nis[(from + k) % g.nis.size()];
    if (!n.up || n.nid.net() != g.nid.net() ||
        std::find(g.failed_rails.begin(), g.failed_rails.end(), n.nid) != g.failed_rails.end())
      continue;
    g.rail = n.nid == g.nid ? Nid{} : n.nid;
    g.rail_pending = params_.check_interval > Clock::duration::zero();  // (until the check through it ends)
    g.outstanding = 0;  // (a check through the failed NI is abandoned)
    g.next_check = now;
    ++g.failovers;
    return n.nid;
  }
  return std::nullopt;
}

void GatewayHealth::pushed(std::size_t gw, const PingAnswer& a) {
  Gateway& g = gateways_[gw];
  g.answered_once = true;
  g.features = a.features;
  g.nis = a.nis;
  g.nets = a.nets;
  g.nets_complete = a.nets_complete;
}

bool GatewayHealth::fail(Gateway& g, GatewayReason why, Clock::time_point now) {
  const bool was = g.alive;
  g.outstanding = 0;
  g.rail_pending = false;  // (the check through a rail it moved to has ended)
  g.alive = false;
  g.reason = why;
  const std::uint32_t cost = sensitivity(g);
  g.health = g.health > cost ? g.health - cost : 0;
  ++g.failures;
  ++g.recovery;
  g.next_check = now + retry_after(g.recovery, params_.check_interval);
  return was;
}

bool GatewayHealth::failed(std::size_t gw, GatewayReason why, Clock::time_point now) {
  return fail(gateways_[gw], why, now);
}

bool GatewayHealth::forwarded(std::size_t gw, Clock::time_point) {
  Gateway& g = gateways_[gw];
  g.health = kMaxHealth;  // a router resets a gateway's health on any reception (§7)
  if (g.alive) return false;
  g.alive = true;
  g.reason = GatewayReason::forwarding;
  g.health = kMaxHealth;
  g.recovery = 0;  // its next check stays as scheduled
  return true;
}

bool GatewayHealth::send_failed(std::size_t gw, std::uint64_t n) {
  Gateway& g = gateways_[gw];
  const std::uint64_t cost = std::uint64_t{sensitivity(g)} * n;
  const std::uint32_t before = g.health;
  g.health = g.health > cost ? static_cast<std::uint32_t>(g.health - cost) : 0;
  return g.health != before;
}

std::vector<std::size_t> GatewayHealth::overdue(Clock::time_point now) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < gateways_.size(); ++i)
    if (gateways_[i].outstanding != 0 && now - gateways_[i].sent_at >= params_.ping_timeout) out.push_back(i);
  return out;
}

std::vector<std::size_t> GatewayHealth::expire(Clock::time_point now) {
  std::vector<std::size_t> changed;
  for (std::size_t i : overdue(now))
    if (fail(gateways_[i], GatewayReason::ping_timeout, now)) changed.push_back(i);
  return changed;
}

RouteState GatewayHealth::route_state(const Route& r) const noexcept {
  const auto i = find(r.gateway);
  if (!i) return RouteState::up;  // not watched: as configured
  const Gateway& g = gateways_[*i];
  if (!g.alive) return RouteState::gateway_dead;
  if (g.reason == GatewayReason::unchecked && params_.check_interval > Clock::duration::zero())
    return RouteState::unchecked;
  if (!g.answered_once) return RouteState::up;
  if (g.rte_disabled()) return RouteState::rte_disabled;
  if (!any_up_on(g, r.gateway.net())) return RouteState::no_local_ni_up;
  bool listed = false;
  const bool remote_up = any_up_on(g, r.net, &listed);
  // hop 1 makes a route whose remote net G does not list single-hop only
  // under discovery on both sides (§5.2); the older rule leaves it up.
  const std::uint32_t mr = ping_feature::multi_rail | ping_feature::discovery;
  const bool discovery = params_.discovery && (g.features & mr) == mr;
  const bool single = listed || (discovery && r.hops == 1);
  if (params_.avoid_asym && single && !remote_up) return RouteState::remote_ni_down;
  return RouteState::up;
}

SingleHop GatewayHealth::single_hop(const Route& r) const noexcept {
  const auto i = find(r.gateway);
  if (!i || !gateways_[*i].answered_once) return SingleHop::unknown;
  bool listed = false;
  any_up_on(gateways_[*i], r.net, &listed);
  return listed ? SingleHop::yes : SingleHop::no;
}

}  // namespace lnetr::control
