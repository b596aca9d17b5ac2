#include "cli/peer/routes.hpp"

#include <algorithm>

#include "router/enum_names.hpp"

namespace lnetr::peer {

LNETR_ENUM_NAMES(, GatewayVerdict, LNETR_PEER_GATEWAY_VERDICTS)

std::optional<RouteSpec> parse_route(std::string_view s, std::string& err) {
  const auto eq = s.find('=');
  if (eq == std::string_view::npos) {
    err = "route '" + std::string(s) + "': expected NET=GATEWAY_NID";
    return std::nullopt;
  }
  auto net = parse_net(s.substr(0, eq));
  if (!net) {
    err = "route '" + std::string(s) + "': bad net: " + std::string(net.error().reason);
    return std::nullopt;
  }
  auto gw = parse_nid(s.substr(eq + 1));
  if (!gw) {
    err = "route '" + std::string(s) + "': bad gateway NID: " + std::string(gw.error().reason);
    return std::nullopt;
  }
  return RouteSpec{*net, *gw};
}

bool RouteTable::add(const RouteSpec& r, Net local_net, std::string& err) {
  const std::string what = "route " + to_string(r.net) + " via " + to_string(r.gateway) + ": ";
  if (r.net.lnd() == LndType::lo || r.net.to_u32() == kNetAny) {
    err = what + "not a routable net";
    return false;
  }
  if (r.gateway.is_any() || r.gateway.lnd() == LndType::lo) {
    err = what + "not a usable gateway NID";
    return false;
  }
  if (!r.gateway.is_nid4() && r.gateway.lnd() != LndType::sock) {
    err = what + "an IPv6 gateway NID on a net that carries IPv4 NIDs only (IPv6: tcp)";
    return false;
  }
  if (r.net == local_net) {
    err = what + "the net is local: it needs no route";
    return false;
  }
  if (r.gateway.net() != local_net) {
    err = what + "the gateway is not on our net " + to_string(local_net);
    return false;
  }
  auto gw = gateway_index(r.gateway);
  if (!gw) {
    gateways_.push_back(Gateway{r.gateway});
    gw = gateways_.size() - 1;
  }
  for (const Route& o : routes_) {
    if (o.net == r.net && o.gateway == *gw) {
      err = what + "given twice";
      return false;
    }
  }
  routes_.push_back(Route{r.net, *gw});
  return true;
}

bool RouteTable::has_route(Net net) const noexcept {
  for (const Route& r : routes_)
    if (r.net == net) return true;
  return false;
}

const Nid* RouteTable::select(Net net) noexcept {
  std::size_t usable = 0;
  for (const Route& r : routes_) usable += r.net == net && route_usable(r);
  if (usable == 0) return nullptr;
  std::size_t pick = rr_++ % usable;
  for (const Route& r : routes_) {
    if (r.net != net || !route_usable(r)) continue;
    if (pick-- == 0) return &gateways_[r.gateway].nid;
  }
  return nullptr;
}

std::optional<std::size_t> RouteTable::gateway_index(const Nid& nid) const noexcept {
  for (std::size_t i = 0; i < gateways_.size(); ++i)
    if (gateways_[i].nid == nid) return i;
  return std::nullopt;
}

GatewayVerdict RouteTable::record_ping(std::size_t gw, const PingInfo& info, Net local_net) noexcept {
  Gateway& g = gateways_[gw];
  g.rte_disabled = (info.features & ping_feature::rte_disabled) != 0;
  g.multi_rail = (info.features & ping_feature::multi_rail) != 0;
  g.discovery = (info.features & ping_feature::discovery) != 0;
  g.local_ni_up = false;
  for (const PingNi ni : info)
    if (ni.nid.net() == local_net && ni.status == kNiStatusUp) g.local_ni_up = true;
  for (Route& r : routes_) {
    if (r.gateway != gw) continue;
    bool listed = false, up = false;
    for (const PingNi ni : info) {
      if (ni.nid.net() != r.net) continue;
      listed = true;
      up = up || ni.status == kNiStatusUp;
    }
    r.remote_ni_down = listed && !up;
  }
  // What the ping says now; a failed push may still change it (record_check).
  g.verdict = g.rte_disabled ? GatewayVerdict::rte_disabled
              : !g.local_ni_up ? GatewayVerdict::no_local_ni_up
                               : GatewayVerdict::up;
  return g.verdict;
}

void RouteTable::record_check(std::size_t gw, GatewayVerdict verdict) noexcept {
  Gateway& g = gateways_[gw];
  ++g.checks;
  g.verdict = verdict;
  if (verdict != GatewayVerdict::up) ++g.failures;
  // A gateway that answered is alive even if its answer makes it unusable
  // (RTE_DISABLED, no UP NI): those flags keep it out of use by themselves.
  g.alive = verdict != GatewayVerdict::ping_failed && verdict != GatewayVerdict::bad_ping_info &&
            verdict != GatewayVerdict::push_failed;
}

bool RouteTable::routes_back(Net net, const Nid& gateway) const noexcept {
  return std::any_of(routes_.begin(), routes_.end(),
                     [&](const Route& r) { return r.net == net && gateways_[r.gateway].nid == gateway; });
}

void RouteTable::heard_routed_from(const Nid& nid) noexcept {
  if (auto gw = gateway_index(nid)) gateways_[*gw].alive = true;
}

}  // namespace lnetr::peer
