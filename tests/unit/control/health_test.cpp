// Gateway health (control/health.hpp) on a hand-advanced clock: when pings
// are due, what answers, failures and timeouts do to a gateway, and the
// route states LNet's rules give (ping-discovery-health.md §5.2).
#include "control/health.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/support/nid.hpp"

namespace lnetr::control {
namespace {

using namespace std::chrono_literals;

using test::nid;

const Nid kGw1 = nid("10.2.0.9@tcp1");
const Nid kGw2 = nid("10.2.0.10@tcp1");
const Nid kGw1Far = nid("10.3.0.9@tcp2");
const Net kTcp2 = kGw1Far.net();

HealthParams params() {
  HealthParams p;
  p.check_interval = 10s;
  p.ping_timeout = 3s;
  p.sensitivity = 300;
  return p;
}

Route route(const Nid& gw, Net net, std::uint32_t hops = kHopsUndefined) {
  Route r;
  r.gateway = gw;
  r.net = net;
  r.hops = hops;
  return r;
}

// A Multi-Rail gateway running discovery (every current Lustre node).
constexpr std::uint32_t kModern = ping_feature::ni_status | ping_feature::multi_rail | ping_feature::discovery;

PingAnswer answer(std::vector<GatewayNi> nis, std::uint32_t features = kModern) {
  PingAnswer a;
  a.features = features;
  a.nis = std::move(nis);
  a.nets = summarise(a.nis);
  a.rtt = 250us;
  return a;
}

struct HealthTest : ::testing::Test {
  Clock::time_point t0 = Clock::time_point{} + 1000s;
  GatewayHealth h{params()};
  void SetUp() override {
    const Nid gws[] = {kGw1, kGw2};
    h.set_gateways(gws, t0);
  }
  const Gateway& g(std::size_t i) const { return h.gateways()[i]; }
  bool is_due(std::size_t i, Clock::time_point t) const {
    const auto d = h.due(t);
    return std::find(d.begin(), d.end(), i) != d.end();
  }
};

TEST_F(HealthTest, NewGatewaysAreDueAtOnceTheirRoutesUpOnceAnsweredThenEveryInterval) {
  EXPECT_TRUE(g(0).alive);
  EXPECT_EQ(g(0).reason, GatewayReason::unchecked);
  // Not up before the gateway was heard (the route show an operator reads
  // says so); without checks, as configured.
  EXPECT_EQ(h.route_state(route(kGw1, kTcp2)), RouteState::unchecked);
  EXPECT_EQ(describe(RouteState::unchecked), "its gateway has not answered yet");
  HealthParams off = params();
  off.check_interval = Clock::duration::zero();
  h.set_params(off);
  EXPECT_EQ(h.route_state(route(kGw1, kTcp2)), RouteState::up);
  h.set_params(params());
  EXPECT_EQ(h.due(t0), (std::vector<std::size_t>{0, 1}));
  h.sent(0, 7, t0);
  EXPECT_EQ(h.due(t0), (std::vector<std::size_t>{1}));  // one outstanding ping at a time
  EXPECT_FALSE(h.answered(0, answer({{kGw1, true}, {kGw1Far, true}}), t0 + 1ms));  // alive already
  EXPECT_EQ(g(0).reason, GatewayReason::answered);
  EXPECT_EQ(h.route_state(route(kGw1, kTcp2)), RouteState::up);
  EXPECT_EQ(g(0).last_rtt, 250us);
  EXPECT_FALSE(is_due(0, t0 + 10s));  // the interval counts from the answer
  EXPECT_TRUE(is_due(0, t0 + 10s + 1ms));
}

TEST_F(HealthTest, TimeoutKillsCostsHealthAndRecoveryBacksOff) {
  h.sent(0, 1, t0);
  EXPECT_TRUE(h.expire(t0 + 2999ms).empty());
  EXPECT_EQ(h.expire(t0 + 3s), std::vector<std::size_t>{0});
  EXPECT_FALSE(g(0).alive);
  EXPECT_EQ(g(0).reason, GatewayReason::ping_timeout);
  EXPECT_EQ(g(0).health, 700u);
  EXPECT_EQ(h.route_state(route(kGw1, kTcp2)), RouteState::gateway_dead);
  // Recovery pings after 1 s, then 2 s, then 4 s, capped by the interval.
  auto t = t0 + 3s;
  for (auto wait : {1s, 2s, 4s, 8s, 10s, 10s}) {
    EXPECT_FALSE(is_due(0, t + wait - 1ms));
    EXPECT_TRUE(is_due(0, t + wait));
    t += wait;
    h.sent(0, 2, t);
    EXPECT_FALSE(h.failed(0, GatewayReason::send_failed, t));  // dead already: no change
  }
  EXPECT_EQ(g(0).health, 0u);  // floored
  // An answer brings it back with full health.
  h.sent(0, 3, t + 10s);
  EXPECT_TRUE(h.answered(0, answer({{kGw1, true}}), t + 10s));
  EXPECT_TRUE(g(0).alive);
  EXPECT_EQ(g(0).health, kMaxHealth);
  EXPECT_EQ(g(0).failures, 7u);
}

TEST_F(HealthTest, AGatewaysOwnSensitivityOverridesTheGlobalOne) {
  h.set_sensitivity(1, 50);
  h.failed(0, GatewayReason::send_failed, t0);
  h.failed(1, GatewayReason::send_failed, t0);
  EXPECT_EQ(g(0).health, 700u);  // global 300
  EXPECT_EQ(g(1).health, 950u);
  h.set_sensitivity(1, 0);  // 0: failures cost nothing, the gateway is still dead
  h.failed(1, GatewayReason::send_failed, t0 + 1s);
  EXPECT_EQ(g(1).health, 950u);
  EXPECT_FALSE(g(1).alive);
}

TEST_F(HealthTest, ConnectionFailureAbandonsTheOutstandingPing) {
  h.sent(1, 4, t0);
  EXPECT_TRUE(h.failed(1, GatewayReason::connections_failed, t0 + 5ms));
  EXPECT_EQ(g(1).outstanding, 0u);
  EXPECT_TRUE(h.expire(t0 + 10s).empty());
  EXPECT_EQ(g(1).reason, GatewayReason::connections_failed);
}

TEST_F(HealthTest, RouteStatesFollowThePingInfo) {
  const Route multi = route(kGw1, kTcp2);
  const Route hop1 = route(kGw1, kTcp2, 1);
  const Route other = route(kGw1, nid("10.9.0.1@tcp9").net());
  h.sent(0, 1, t0);
  // Lists its NI on tcp2 (so single-hop), DOWN: the asymmetric failure.
  h.answered(0, answer({{kGw1, true}, {kGw1Far, false}}), t0);
  EXPECT_EQ(h.single_hop(multi), SingleHop::yes);
  EXPECT_EQ(h.route_state(multi), RouteState::remote_ni_down);
  EXPECT_EQ(h.route_state(other), RouteState::up);  // no NI on tcp9 listed: multi-hop, not checked
  EXPECT_EQ(h.single_hop(other), SingleHop::no);
  // Hop 1 configured: checked even if the far NI is not listed at all.
  h.answered(0, answer({{kGw1, true}}), t0);
  EXPECT_EQ(h.route_state(hop1), RouteState::remote_ni_down);
  EXPECT_EQ(h.route_state(multi), RouteState::up);
  // avoid_asym_router_failure off: not checked.
  HealthParams p = params();
  p.avoid_asym = false;
  h.set_params(p);
  EXPECT_EQ(h.route_state(hop1), RouteState::up);
  h.set_params(params());
  // Its NI on our side DOWN.
  h.answered(0, answer({{kGw1, false}, {kGw1Far, true}}), t0);
  EXPECT_EQ(h.route_state(multi), RouteState::no_local_ni_up);
  // Routing disabled trumps the NIs.
  h.answered(0, answer({{kGw1, true}, {kGw1Far, true}}, kModern | ping_feature::rte_disabled), t0);
  EXPECT_EQ(h.route_state(multi), RouteState::rte_disabled);
  h.answered(0, answer({{kGw1, true}, {kGw1Far, true}}), t0);
  EXPECT_EQ(h.route_state(multi), RouteState::up);
  EXPECT_EQ(h.route_state(route(nid("10.2.0.77@tcp1"), kTcp2)), RouteState::up);  // not watched
}

TEST_F(HealthTest, AGatewayWithoutDiscoveryGetsTheOlderRule) {
  const Route hop1 = route(kGw1, kTcp2, 1);
  h.sent(0, 1, t0);
  // No NI on tcp2 listed: the hop-1 route is single-hop only under
  // discovery on both sides.
  h.answered(0, answer({{kGw1, true}}, ping_feature::ni_status), t0);
  EXPECT_EQ(h.route_state(hop1), RouteState::up);
  h.answered(0, answer({{kGw1, true}}, ping_feature::ni_status | ping_feature::multi_rail), t0);
  EXPECT_EQ(h.route_state(hop1), RouteState::up);
  h.answered(0, answer({{kGw1, true}}), t0);
  EXPECT_EQ(h.route_state(hop1), RouteState::remote_ni_down);
  // Discovery off here: the older rule whatever the gateway runs.
  HealthParams p = params();
  p.discovery = false;
  h.set_params(p);
  EXPECT_EQ(h.route_state(hop1), RouteState::up);
  // A far NI listed DOWN is an asymmetric failure under either rule.
  h.answered(0, answer({{kGw1, true}, {kGw1Far, false}}, ping_feature::ni_status), t0);
  EXPECT_EQ(h.route_state(hop1), RouteState::remote_ni_down);
}

TEST_F(HealthTest, ManyNisOnANetAndNetsBeyondWhatIsKept) {
  const Route multi = route(kGw1, kTcp2);
  h.sent(0, 1, t0);
  // 40 NIs on tcp2, only the last UP: the net is up.
  std::vector<GatewayNi> nis{{kGw1, true}};
  for (int i = 0; i < 40; ++i) nis.push_back({nid("10.3.1." + std::to_string(i + 1) + "@tcp2"), i == 39});
  h.answered(0, answer(nis), t0);
  EXPECT_EQ(h.route_state(multi), RouteState::up);
  // Nets beyond what was kept: an unlisted net gets the benefit of the doubt.
  PingAnswer a = answer({{kGw1, true}});
  a.nets_complete = false;
  h.answered(0, a, t0);
  EXPECT_EQ(h.route_state(route(kGw1, kTcp2, 1)), RouteState::up);
  EXPECT_EQ(h.single_hop(multi), SingleHop::yes);
}

TEST_F(HealthTest, RoutedTrafficRevivesADeadGateway) {
  h.sent(0, 1, t0);
  h.expire(t0 + 3s);
  ASSERT_FALSE(g(0).alive);
  const auto next = g(0).next_check;
  EXPECT_TRUE(h.forwarded(0, t0 + 4s));
  EXPECT_TRUE(g(0).alive);
  EXPECT_EQ(g(0).reason, GatewayReason::forwarding);
  EXPECT_EQ(g(0).health, kMaxHealth);
  EXPECT_EQ(g(0).next_check, next);  // still checked when due
  EXPECT_FALSE(h.forwarded(0, t0 + 5s));  // alive already: no change
}

// A failed send costs health but not life (checks decide that); anything
// heard from the gateway restores it, as on a kernel router.
TEST_F(HealthTest, FailedSendsCostHealthOnlyAndReceptionRestoresIt) {
  EXPECT_TRUE(h.send_failed(0, 3));
  EXPECT_EQ(g(0).health, kMaxHealth - 3 * 300);  // sensitivity 300 each
  EXPECT_TRUE(g(0).alive);
  EXPECT_EQ(g(1).health, kMaxHealth);
  EXPECT_TRUE(h.send_failed(0, 1));
  EXPECT_EQ(g(0).health, 0u);  // floored
  EXPECT_FALSE(h.send_failed(0, 1));
  EXPECT_FALSE(h.forwarded(0, t0));  // alive already ...
  EXPECT_EQ(g(0).health, kMaxHealth);  // ... but healthy again
}

TEST_F(HealthTest, SetGatewaysKeepsKnownStateAndForgetsTheRest) {
  h.sent(0, 1, t0);
  h.expire(t0 + 3s);
  const Nid kGw3 = nid("10.2.0.11@tcp1");
  const Nid next[] = {kGw3, kGw1};
  h.set_gateways(next, t0 + 4s);
  ASSERT_EQ(h.gateways().size(), 2u);
  EXPECT_EQ(g(0).nid, kGw3);
  EXPECT_EQ(g(0).reason, GatewayReason::unchecked);
  EXPECT_EQ(g(1).nid, kGw1);
  EXPECT_FALSE(g(1).alive);
  EXPECT_FALSE(h.find(kGw2));
}

TEST_F(HealthTest, AMultiRailGatewayMovesToItsNextUpNiOnOurNetAndBackWhenAllFail) {
  // Gateway 1 has three NIs on tcp1 (the second DOWN) and one on tcp2.
  const Nid rail2 = nid("10.2.0.21@tcp1"), rail3 = nid("10.2.0.31@tcp1");
  h.sent(0, 1, t0);
  h.answered(0, answer({{kGw1, true}, {rail2, false}, {rail3, true}, {kGw1Far, true}}), t0);
  // Its NI fails: the next UP one on tcp1, checked at once; it stays alive.
  auto to = h.fail_over(0, t0 + 1s);
  ASSERT_TRUE(to);
  EXPECT_EQ(*to, rail3);
  EXPECT_EQ(g(0).hop(), rail3);
  EXPECT_TRUE(g(0).alive);
  EXPECT_TRUE(g(0).rail_pending);
  EXPECT_EQ(g(0).failovers, 1u);
  EXPECT_TRUE(is_due(0, t0 + 1s));
  EXPECT_EQ(h.route_state(route(kGw1, kTcp2)), RouteState::up);
  // That one fails too before an answer: none left (the DOWN one is not
  // tried); the caller then fails the gateway and resets the rail.
  EXPECT_FALSE(h.fail_over(0, t0 + 2s));
  h.reset_rail(0);
  EXPECT_EQ(g(0).hop(), kGw1);
  EXPECT_TRUE(g(0).failed_rails.empty());
  // An answer through a rail clears what failed: each may be tried again.
  EXPECT_EQ(h.fail_over(0, t0 + 3s), rail3);
  h.sent(0, 2, t0 + 3s);
  h.answered(0, answer({{kGw1, true}, {rail2, true}, {rail3, true}}), t0 + 3s);
  EXPECT_FALSE(g(0).rail_pending);
  EXPECT_EQ(h.fail_over(0, t0 + 4s), kGw1);  // (wrapping: after rail3 comes the first)
  EXPECT_EQ(g(0).hop(), kGw1);
  EXPECT_EQ(g(0).rail, Nid{});
  // A check through it that fails ends the move: later failures are its.
  EXPECT_TRUE(g(0).rail_pending);
  h.sent(0, 3, t0 + 4s);
  h.expire(t0 + 8s);
  EXPECT_FALSE(g(0).rail_pending);
  EXPECT_FALSE(g(0).alive);
  // Without checks a move waits for none.
  HealthParams off = params();
  off.check_interval = Clock::duration::zero();
  h.set_params(off);
  h.sent(1, 1, t0);
  h.answered(1, answer({{kGw2, true}, {rail2, true}}), t0);
  EXPECT_EQ(h.fail_over(1, t0), rail2);
  EXPECT_FALSE(g(1).rail_pending);
  // A rail a previous lnetr-control left in force is taken as it is.
  h.reset_rail(1);
  h.seed_rail(1, rail2);
  EXPECT_EQ(g(1).hop(), rail2);
  h.seed_rail(1, rail3);  // (only where none is known)
  EXPECT_EQ(g(1).hop(), rail2);
}

TEST_F(HealthTest, OnlyAGatewayThatDiscoversWhileWeDoFailsOver) {
  const Nid rail2 = nid("10.2.0.21@tcp1");
  h.sent(0, 1, t0);
  h.answered(0, answer({{kGw1, true}, {rail2, true}}, ping_feature::ni_status | ping_feature::multi_rail), t0);
  EXPECT_FALSE(h.fail_over(0, t0));
  h.sent(1, 1, t0);
  h.answered(1, answer({{kGw2, true}, {rail2, true}}), t0);
  HealthParams off = params();
  off.discovery = false;
  h.set_params(off);
  EXPECT_FALSE(h.fail_over(1, t0));
  h.set_params(params());
  EXPECT_TRUE(h.fail_over(1, t0));
}

TEST_F(HealthTest, APushedPingInfoChangesRouteStatesNotLiveness) {
  h.sent(0, 1, t0);
  h.answered(0, answer({{kGw1, true}, {kGw1Far, true}}), t0);
  EXPECT_EQ(h.route_state(route(kGw1, kTcp2)), RouteState::up);
  // It stopped routing, and said so at once.
  h.pushed(0, answer({{kGw1, true}, {kGw1Far, true}}, kModern | ping_feature::rte_disabled));
  EXPECT_EQ(h.route_state(route(kGw1, kTcp2)), RouteState::rte_disabled);
  EXPECT_TRUE(g(0).alive);
  EXPECT_EQ(g(0).reason, GatewayReason::answered);
  // Its far NI went down.
  h.pushed(0, answer({{kGw1, true}, {kGw1Far, false}}));
  EXPECT_EQ(h.route_state(route(kGw1, kTcp2)), RouteState::remote_ni_down);
}

TEST(GatewayReasonNames, AreDistinctAndDescribed) {
  EXPECT_EQ(name(GatewayReason::ping_timeout), "ping_timeout");
  EXPECT_NE(describe(GatewayReason::ping_timeout), describe(GatewayReason::send_failed));
  EXPECT_EQ(name(RouteState::remote_ni_down), "remote_ni_down");
}

}  // namespace
}  // namespace lnetr::control
