// Gateway health as lnetr-control keeps it (ping-discovery-health.md §5 and
// §7): which gateway to ping when, what each answer or failure means for
// the gateway, and whether each route through it is up.
//
// Pure logic over a caller-supplied clock: main.cpp moves requests and
// results through shared memory (shm/abi.hpp) and logs what changes; the
// unit tests drive it with a hand-advanced clock.
//
// A gateway is pinged every check_interval while it is alive.  A failure -
// no answer within ping_timeout, a ping that could not be sent, a reply
// that is not a ping info, or the dataplane's report that every connection
// to it failed - makes it dead and costs `sensitivity` health (0..1000);
// a dead gateway is pinged again after 1, 2, 4 ... s, never later than the
// check interval.  An answer makes it alive with full health (a router
// resets a gateway's health on any reception, §7); so does routed traffic
// from it (it forwards, so it lives).  Before its first check a gateway
// counts as alive, but while checks run no route through it is up until it
// answers (or forwards to us): a route shown up is one whose gateway has
// been heard (as with check_routers_before_use = 1; the first ping goes at
// once, so a live gateway's routes come up within a round trip).
//
// A route (remote net R, gateway G reached over local net L) is up iff G is
// alive and, once G answered a ping: G's ping info does not carry
// RTE_DISABLED, lists an UP NI on L, and - with avoid_asym_router_failure,
// for a single-hop route - lists an UP NI on R (§5.2).  Single-hop means G
// lists an NI on R or, when both we and G run discovery (G's reply carries
// MULTI_RAIL and DISCOVERY), the route is configured hop 1; a gateway
// without them gets the older rule, where an unlisted R leaves the route up.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "router/enum_names.hpp"
#include "router/nid.hpp"
#include "router/ping_info.hpp"
#include "router/route_table.hpp"

namespace lnetr::control {

using Clock = std::chrono::steady_clock;

inline constexpr std::uint32_t kMaxHealth = 1000;

struct HealthParams {
  Clock::duration check_interval = std::chrono::seconds(60);  // alive_router_check_interval
  Clock::duration ping_timeout = std::chrono::seconds(50);    // router_ping_timeout
  std::uint32_t sensitivity = 100;                            // health_sensitivity (0..1000)
  bool avoid_asym = true;                                     // avoid_asym_router_failure
  bool discovery = true;                                      // our own lnet_peer_discovery_disabled == 0
};

// What the last event concluded about a gateway.
#define LNETR_GATEWAY_REASONS(X)                                                          \
  X(unchecked, "not checked yet (used meanwhile)")                                      \
  X(answered, "it answered its last ping")                                              \
  X(ping_timeout, "no answer to a ping within router_ping_timeout")                     \
  X(send_failed, "a ping could not be sent to it (no connection could be made)")        \
  X(bad_reply, "its ping reply did not hold a valid ping info")                         \
  X(connections_failed, "every connection to it failed")                                 \
  X(push_unacked, "it did not ACK our push within router_ping_timeout")                 \
  X(forwarding, "it forwarded traffic to us")

enum class GatewayReason : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_GATEWAY_REASONS(LNETR_X)
#undef LNETR_X
};
std::string_view name(GatewayReason r) noexcept;
std::string_view describe(GatewayReason r) noexcept;

// Why a route is down (or `up`).
#define LNETR_ROUTE_STATES(X)                                                               \
  X(up, "up")                                                                             \
  X(unchecked, "its gateway has not answered yet")                                        \
  X(gateway_dead, "its gateway is dead")                                                  \
  X(rte_disabled, "its gateway's ping info says routing is disabled")                     \
  X(no_local_ni_up, "its gateway's ping info lists no UP NI on the net we reach it by")   \
  X(remote_ni_down, "its gateway's ping info lists no UP NI on the remote net (asymmetric failure)")

enum class RouteState : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_ROUTE_STATES(LNETR_X)
#undef LNETR_X
};
std::string_view name(RouteState s) noexcept;
std::string_view describe(RouteState s) noexcept;

struct GatewayNi {
  Nid nid;
  bool up = false;
};

// A ping reply's NIs on one net.
struct GatewayNet {
  Net net;
  std::uint32_t listed = 0;
  std::uint32_t up = 0;
};
std::vector<GatewayNet> summarise(std::span<const GatewayNi> nis);

struct Gateway {
  Nid nid;
  bool alive = true;
  GatewayReason reason = GatewayReason::unchecked;
  std::uint32_t health = kMaxHealth;
  // What a failure costs: its routes' health_sensitivity if one was given,
  // else the global one (HealthParams::sensitivity).
  std::optional<std::uint32_t> sensitivity;
  // From the last ping info (valid once answered_once).
  bool answered_once = false;
  std::uint32_t features = 0;
  std::vector<GatewayNi> nis;   // the first ones (for display)
  std::vector<GatewayNet> nets;  // every net listed ...
  bool nets_complete = true;     // ... unless too many to keep (then an unlisted net counts as UP)
  std::chrono::nanoseconds last_rtt{0};
  // Multi-Rail (when both sides discover): the gateway's NI on our net
  // that messages and checks go to since `nid` failed (Nid{}: nid itself),
  // and the NIs that failed since its last answer.  While a move is
  // pending (until the first check through the rail ends) failures of
  // connections to the NI left behind are not the rail's.
  Nid rail;
  bool rail_pending = false;
  std::vector<Nid> failed_rails;
  std::uint64_t failovers = 0;
  // Discovery: pushes of our ping info to it and the ACKs it gave, and the
  // pushes of its own it sent us (their NIs and state taken as a check's).
  std::uint64_t pushes_sent = 0, push_acks = 0, pushes_received = 0;
  // Checking.
  std::uint64_t outstanding = 0;  // sequence of the ping awaited (0: none)
  Clock::time_point sent_at{};
  Clock::time_point next_check{};  // when the next ping is due
  unsigned recovery = 0;           // failures in a row (recovery backoff)
  std::uint64_t pings = 0, failures = 0;

  bool rte_disabled() const noexcept { return answered_once && (features & ping_feature::rte_disabled) != 0; }
  const Nid& hop() const noexcept { return rail == Nid{} ? nid : rail; }
};

// A ping's result as the dataplane reported it.
struct PingAnswer {
  std::uint32_t features = 0;
  std::vector<GatewayNi> nis;
  std::vector<GatewayNet> nets;
  bool nets_complete = true;
  std::chrono::nanoseconds rtt{0};
};

class GatewayHealth {
 public:
  explicit GatewayHealth(HealthParams params) : params_(params) {}

  const HealthParams& params() const noexcept { return params_; }
  void set_params(const HealthParams& p) noexcept { params_ = p; }

  // Watch exactly these gateways: new ones start unchecked and are due at
  // once; ones no longer listed are forgotten.
  void set_gateways(std::span<const Nid> nids, Clock::time_point now);
  std::span<const Gateway> gateways() const noexcept { return gateways_; }
  std::optional<std::size_t> find(const Nid& nid) const noexcept;
  void set_sensitivity(std::size_t gw, std::optional<std::uint32_t> s) noexcept { gateways_[gw].sensitivity = s; }
  std::uint32_t sensitivity(const Gateway& g) const noexcept { return g.sensitivity.value_or(params_.sensitivity); }

  // Gateways whose ping is due: nothing outstanding and next_check reached.
  std::vector<std::size_t> due(Clock::time_point now) const;
  // A ping with sequence `seq` was asked of the dataplane.
  void sent(std::size_t gw, std::uint64_t seq, Clock::time_point now);

  // Events; each returns true when the gateway's alive flag changed.
  // The awaited ping was answered with a valid ping info.
  bool answered(std::size_t gw, const PingAnswer& a, Clock::time_point now);
  // The awaited ping failed (send_failed or bad_reply), or every connection
  // to the gateway failed (connections_failed, with or without a ping
  // outstanding: it is then abandoned).
  bool failed(std::size_t gw, GatewayReason why, Clock::time_point now);
  // Routed traffic arrived from it: alive again (a no-op if it was).
  bool forwarded(std::size_t gw, Clock::time_point now);
  // The NI messages go to failed (its connections, or a check could not be
  // sent): for a Multi-Rail gateway that discovers (as we do), move to its
  // next NI on the same net that its last ping info lists UP and that has
  // not failed since, and check the gateway through it at once; the NI
  // moved to, or nullopt (no such NI: the failure is the gateway's).
  std::optional<Nid> fail_over(std::size_t gw, Clock::time_point now);
  // It pushed its ping info: its NIs, nets and features from now on, as if
  // a check had brought them (its alive flag and health stay).
  void pushed(std::size_t gw, const PingAnswer& a);
  // The rail a previous lnetr-control left in force (read back from the
  // dataplane's board).
  void seed_rail(std::size_t gw, const Nid& rail) noexcept {
    if (gateways_[gw].rail == Nid{}) gateways_[gw].rail = rail == gateways_[gw].nid ? Nid{} : rail;
  }
  // Back to the NI its routes name, every NI tried again.
  void reset_rail(std::size_t gw) noexcept {
    gateways_[gw].rail = Nid{};
    gateways_[gw].rail_pending = false;
    gateways_[gw].failed_rails.clear();
  }
  void set_push_counts(std::size_t gw, std::uint64_t sent, std::uint64_t acks, std::uint64_t received) noexcept {
    Gateway& g = gateways_[gw];
    g.pushes_sent = sent;
    g.push_acks = acks;
    g.pushes_received = received;
  }
  // `n` sends to the gateway failed in the dataplane: each costs its
  // sensitivity in health, as LNet lowers a peer NI's health on a failed
  // send; the gateway stays alive (its checks decide that).  True if the
  // health changed.
  bool send_failed(std::size_t gw, std::uint64_t n);
  // Outstanding pings older than ping_timeout fail; the gateways whose alive
  // flag changed.
  std::vector<std::size_t> expire(Clock::time_point now);
  // The gateways whose outstanding ping expire() would fail now.
  std::vector<std::size_t> overdue(Clock::time_point now) const;

  // The state of a route (§5.2) through a watched gateway, given its local
  // net (the gateway's net); and whether its ping info lists an NI on the
  // route's remote net (unknown before the first answer).
  RouteState route_state(const Route& r) const noexcept;
  SingleHop single_hop(const Route& r) const noexcept;

 private:
  bool fail(Gateway& g, GatewayReason why, Clock::time_point now);

  HealthParams params_;
  std::vector<Gateway> gateways_;
  std::unordered_map<Nid, std::size_t> index_;  // nid -> position in gateways_
};

}  // namespace lnetr::control
