// lnetr-peer's routes: remote net -> gateways on our net, and what the router
// checker learned about each gateway, as a Linux client keeps them
// (ping-discovery-health.md §5).
//
// A route is used only while its gateway is usable: the gateway is alive
// (its last check - ping, and push if it is Multi-Rail with discovery -
// succeeded, or routed traffic arrived from it since), its last ping info
// did not advertise RTE_DISABLED and listed an UP NI on our net; and, as
// Linux's avoid_asym_router_failure does for single-hop routes, if that ping
// info listed NIs on the route's remote net, one of them is UP.  Before the
// first check a gateway is used (check_routers_before_use=0).  Among usable
// routes to a net, selection is round robin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "router/nid.hpp"
#include "router/ping_info.hpp"

namespace lnetr::peer {

struct RouteSpec {
  Net net;
  Nid gateway;
};

// "NET=GATEWAY_NID", e.g. "tcp1=10.0.0.1@tcp"; nullopt with `err` set if it
// does not parse.
std::optional<RouteSpec> parse_route(std::string_view s, std::string& err);

// What the last check of a gateway concluded.
#define LNETR_PEER_GATEWAY_VERDICTS(X)                                                \
  X(unchecked, "not checked yet (used meanwhile)")                                  \
  X(up, "the last check succeeded")                                                 \
  X(ping_failed, "the last ping got no answer or failed")                           \
  X(bad_ping_info, "the last ping answer was not a valid ping info")               \
  X(push_failed, "the push of our ping info was not ACKed")                         \
  X(rte_disabled, "its ping info advertises RTE_DISABLED: it is not routing")      \
  X(no_local_ni_up, "its ping info lists no UP NI on our net")

enum class GatewayVerdict : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_PEER_GATEWAY_VERDICTS(LNETR_X)
#undef LNETR_X
};
std::string_view name(GatewayVerdict v) noexcept;
std::string_view describe(GatewayVerdict v) noexcept;

class RouteTable {
 public:
  struct Gateway {
    Nid nid;
    GatewayVerdict verdict = GatewayVerdict::unchecked;
    bool alive = true;          // last check succeeded, or routed traffic since
    bool rte_disabled = false;  // from the last ping info
    bool local_ni_up = true;    // the last ping info listed an UP NI on our net
    bool multi_rail = false;
    bool discovery = false;
    std::uint64_t checks = 0;
    std::uint64_t failures = 0;
    bool usable() const noexcept { return alive && !rte_disabled && local_ni_up; }
  };
  struct Route {
    Net net;
    std::size_t gateway = 0;       // index into gateways()
    bool remote_ni_down = false;   // single-hop and no UP NI on `net` (asymmetric failure)
  };

  // Add a route after the checks LNet applies (not to our own net, not to
  // loopback, gateway on our net, no duplicate).  False with `err` set.
  bool add(const RouteSpec& r, Net local_net, std::string& err);

  // The gateway to use for a message to `net`: round robin among the usable
  // routes; nullptr if none (no route at all, or every route down).
  const Nid* select(Net net) noexcept;
  bool has_route(Net net) const noexcept;
  // Whether `gateway` is the gateway of a route to `net` (LNet's
  // drop_asym_route accepts a routed message only from such a gateway).
  bool routes_back(Net net, const Nid& gateway) const noexcept;

  // Apply a ping answer of gateway `gw` reached over `local_net`: its flags
  // take effect at once.  Returns (and shows as the gateway's verdict) what
  // the ping says: up if the gateway may be used - subject to the push Linux
  // sends next if multi_rail && discovery - otherwise why not.
  GatewayVerdict record_ping(std::size_t gw, const PingInfo& info, Net local_net) noexcept;
  // The end of a check: alive iff verdict is up.
  void record_check(std::size_t gw, GatewayVerdict verdict) noexcept;
  // A routed message (src net != the gateway's net) arrived from `nid`: if it
  // is a gateway it is alive again (Linux's lnet_parse does the same).
  void heard_routed_from(const Nid& nid) noexcept;

  std::optional<std::size_t> gateway_index(const Nid& nid) const noexcept;
  const std::vector<Gateway>& gateways() const noexcept { return gateways_; }
  const std::vector<Route>& routes() const noexcept { return routes_; }
  bool empty() const noexcept { return routes_.empty(); }

 private:
  bool route_usable(const Route& r) const noexcept {
    return gateways_[r.gateway].usable() && !r.remote_ni_down;
  }
  std::vector<Gateway> gateways_;
  std::vector<Route> routes_;
  std::size_t rr_ = 0;
};

}  // namespace lnetr::peer
