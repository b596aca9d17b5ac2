// The route commands: route show, add and del (the route table lnetr-control
// owns), gateway show (gateway health), routing show and set routing (the
// dataplane's forwarding and its router buffer pools).
#include <cerrno>
#include <cstdint>
#include <string>

#include "control/controller.hpp"
#include "control/service.hpp"
#include "control/service_internal.hpp"

namespace lnetr::control {

Json Service::route_json(const Route& r) const {
  Json j;
  j["net"] = to_string(r.net);
  j["gateway"] = to_string(r.gateway);
  j["hop"] = display_hop(r);
  j["priority"] = r.priority;
  j["health_sensitivity"] =
      r.health_sensitivity == kSensitivityGlobal ? params_.sensitivity : std::uint32_t{r.health_sensitivity};
  j["state"] = std::string(display_state(r));
  j["type"] = std::string(display_type(r));
  if (ctl_) {
    const RouteState st = ctl_->health().route_state(r);
    if (st != RouteState::up) j["reason"] = std::string(describe(st));
  }
  return j;
}

Json Service::route_show(const Json& args) {
  only(args, {"net", "gateway", "hop", "priority", "verbose"});
  const auto net = opt_net(args, "net");
  const auto gw = opt_nid(args, "gateway");
  const auto hop = opt_int(args, "hop", -1, kHopsMax);
  const auto prio = opt_int(args, "priority", 0, 0xffffffffLL);
  const bool verbose = opt_int(args, "verbose", 0, 4).value_or(0) > 0;
  std::lock_guard lock(mu_);
  Json routes = Json::array();
  if (builder_)
    for (const Route& r : builder_->routes()) {
      if ((net && r.net != *net) || (gw && !(r.gateway == *gw)) || (hop && display_hop(r) != *hop) ||
          (prio && r.priority != *prio))
        continue;
      // As lnetctl: net and gateway, and with verbose the rest.
      routes.push_back(verbose ? route_json(r) : Json{{"net", to_string(r.net)}, {"gateway", to_string(r.gateway)}});
    }
  return {{"route", routes}};
}

Json Service::route_add(const Json& args) {
  only(args, {"net", "gateway", "hop", "priority", "health_sensitivity"});
  RouteSpec spec;
  spec.net = required(opt_net(args, "net"), "net");
  spec.gateway = required(opt_nid(args, "gateway"), "gateway");
  const auto hop = opt_int(args, "hop", -1, kHopsMax);
  spec.hops = !hop || *hop == -1 ? kHopsUndefined : static_cast<std::uint32_t>(*hop);
  if (hop && *hop == 0) bad("argument 'hop': expected -1 (undefined) or 1..255, got 0");
  spec.priority = static_cast<std::uint32_t>(opt_int(args, "priority", 0, 0xffffffffLL).value_or(0));
  if (auto s = opt_int(args, "health_sensitivity", 0, kSensitivityMax)) spec.health_sensitivity = static_cast<std::uint16_t>(*s);
  std::lock_guard lock(mu_);
  if (!builder_) throw ApiError{EAGAIN, "not attached to a dataplane yet: no route table to change"};
  auto added = builder_->add(spec);
  if (!added) throw ApiError{errno_of(added.error()), std::string(describe(added.error()))};
  try {
    routes_changed();
  } catch (const ApiError&) {
    builder_->remove(spec.net, spec.gateway);  // nothing changes on error
    throw;
  }
  log("info", "route " + route_name(*added) + " added (hop " + std::to_string(display_hop(*added)) + ", priority " +
                  std::to_string(added->priority) + ")");
  return {{"route", Json::array({route_json(*added)})}};
}

Json Service::route_del(const Json& args) {
  only(args, {"net", "gateway"});
  const Net net = required(opt_net(args, "net"), "net");
  const auto gw = opt_nid(args, "gateway");
  std::lock_guard lock(mu_);
  if (!builder_) throw ApiError{EAGAIN, "not attached to a dataplane yet: no route table to change"};
  Json removed = Json::array();
  for (const Route& r : builder_->routes())
    if (r.net == net && (!gw || r.gateway == *gw)) removed.push_back(route_json(r));
  if (removed.empty())
    throw ApiError{ENOENT, "no route to " + to_string(net) + (gw ? " via " + to_string(*gw) : std::string())};
  builder_->remove(net, gw);
  log("info", "route " + to_string(net) + (gw ? " via " + to_string(*gw) : std::string(" (all gateways)")) +
                  " deleted");
  routes_changed();
  return {{"route", removed}};
}

Json Service::gateway_show(const Json& args) {
  only(args, {"gateway"});
  const auto gw = opt_nid(args, "gateway");
  std::lock_guard lock(mu_);
  Json out = Json::array();
  if (!ctl_) return {{"gateway", out}};
  const GatewayHealth& h = ctl_->health();
  for (const Gateway& g : h.gateways()) {
    if (gw && !(g.nid == *gw)) continue;
    Json j;
    j["nid"] = to_string(g.nid);
    j["state"] = g.alive ? "up" : "down";
    j["reason"] = std::string(describe(g.reason));
    j["health"] = g.health;
    j["health_sensitivity"] = h.sensitivity(g);
    j["ping_rtt_us"] = static_cast<double>(g.last_rtt.count()) / 1e3;
    j["pings"] = g.pings;
    j["failures"] = g.failures;
    j["routing_disabled"] = g.rte_disabled();
    // Multi-Rail: the NI in use since the one the routes name failed.
    if (!(g.rail == Nid{})) j["rail"] = to_string(g.rail);
    j["failovers"] = g.failovers;
    // Discovery: our pushes to it (after each check, when both sides
    // discover), the ACKs it gave, and its own pushes to us.
    j["pushes_sent"] = g.pushes_sent;
    j["push_acks"] = g.push_acks;
    j["pushes_received"] = g.pushes_received;
    Json nis = Json::array();
    for (const GatewayNi& ni : g.nis) nis.push_back({{"nid", to_string(ni.nid)}, {"status", ni.up ? "up" : "down"}});
    j["nis"] = nis;
    out.push_back(j);
  }
  return {{"gateway", out}};
}

Json Service::routing_show(const Json& args) {
  only(args, {});
  const auto st = dataplane<status::Status>("status");
  Json routing = Json::array();
  std::int64_t tiny = 0, small = 0, large = 0;
  for (const status::Buffers& cpt : st.buffers) {
    routing.push_back({{"cpt[" + std::to_string(cpt.cpt) + "]",
                        {{"tiny", cpt.tiny}, {"small", cpt.small}, {"large", cpt.large}}}});
    tiny += static_cast<std::int64_t>(cpt.tiny.nbuffers);
    small += static_cast<std::int64_t>(cpt.small.nbuffers);
    large += static_cast<std::int64_t>(cpt.large.nbuffers);
  }
  routing.push_back({{"enable", st.routing.enable}});
  return {{"routing", routing}, {"buffers", {{"tiny", tiny}, {"small", small}, {"large", large}}}};
}

Json Service::set_routing(const Json& args) {
  only(args, {"enable"});
  const auto on = required(opt_int(args, "enable", 0, 1), "enable");
  const auto r = dataplane<status::RoutingSet>(on ? "routing 1" : "routing 0");
  log("info", std::string("routing ") + (on ? "enabled" : "disabled") + " by request: now " + r.routing);
  return {{"routing", {{"enable", r.enable}, {"state", r.routing}}}};
}

}  // namespace lnetr::control
