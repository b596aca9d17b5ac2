// Routes: parsing, LNet's add-route checks, round-robin selection among
// usable gateways, and the router checker's verdicts from ping answers
// (RTE_DISABLED, no UP NI on our net, asymmetric failure, no answer).
#include "cli/peer/routes.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "tests/support/nid.hpp"

namespace lnetr::peer {
namespace {

using test::nid;
Net net(std::string_view s) { return *parse_net(s); }

const Net kTcp = net("tcp");
const Nid kGw1 = nid("10.0.0.1@tcp");
const Nid kGw2 = nid("10.0.0.2@tcp");

TEST(RouteParse, NetEqualsGateway) {
  std::string err;
  auto r = parse_route("tcp1=10.0.0.1@tcp", err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->net, net("tcp1"));
  EXPECT_EQ(r->gateway, kGw1);
  r = parse_route("o2ib3=10.0.0.2", err);  // a bare address is on tcp
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->gateway, kGw2);
}

TEST(RouteParse, Refusals) {
  std::string err;
  EXPECT_FALSE(parse_route("tcp1", err));
  EXPECT_NE(err.find("NET=GATEWAY_NID"), std::string::npos);
  EXPECT_FALSE(parse_route("bogus=10.0.0.1@tcp", err));
  EXPECT_FALSE(parse_route("tcp1=10.0.0@tcp", err));
  EXPECT_FALSE(parse_route("=10.0.0.1@tcp", err));
}

TEST(RouteTable, AddChecks) {
  RouteTable t;
  std::string err;
  EXPECT_TRUE(t.add({net("tcp1"), kGw1}, kTcp, err)) << err;
  EXPECT_FALSE(t.add({net("tcp1"), kGw1}, kTcp, err));  // twice
  EXPECT_FALSE(t.add({kTcp, kGw1}, kTcp, err));  // our own net
  EXPECT_FALSE(t.add({net("tcp2"), nid("10.0.0.1@tcp5")}, kTcp, err));  // gateway not on our net
  EXPECT_FALSE(t.add({net("lo"), kGw1}, kTcp, err));
  EXPECT_FALSE(t.add({net("tcp3"), nid("2001:db8::1@o2ib")}, kTcp, err));  // IPv6 on o2ib: not carried
  EXPECT_NE(err.find("IPv6 gateway NID on a net that carries IPv4 NIDs only"), std::string::npos) << err;
  EXPECT_TRUE(t.add({net("tcp2"), kGw1}, kTcp, err)) << err;  // another net, same gateway
  EXPECT_EQ(t.gateways().size(), 1u);
  EXPECT_EQ(t.routes().size(), 2u);
}

TEST(RouteTable, RoutesBackNamesOnlyTheGatewaysOfThatNet) {
  RouteTable t;
  std::string err;
  ASSERT_TRUE(t.add({net("tcp1"), kGw1}, kTcp, err));
  ASSERT_TRUE(t.add({net("tcp2"), kGw2}, kTcp, err));
  EXPECT_TRUE(t.routes_back(net("tcp1"), kGw1));
  EXPECT_FALSE(t.routes_back(net("tcp1"), kGw2));  // a gateway, but to tcp2
  EXPECT_FALSE(t.routes_back(net("tcp3"), kGw1));  // no route to tcp3 at all
}

TEST(RouteTable, RoundRobinAmongUsableGateways) {
  RouteTable t;
  std::string err;
  ASSERT_TRUE(t.add({net("tcp1"), kGw1}, kTcp, err));
  ASSERT_TRUE(t.add({net("tcp1"), kGw2}, kTcp, err));
  std::vector<Nid> got;
  for (int i = 0; i < 4; ++i) got.push_back(*t.select(net("tcp1")));
  EXPECT_EQ(got, (std::vector<Nid>{kGw1, kGw2, kGw1, kGw2}));
  EXPECT_EQ(t.select(net("tcp9")), nullptr);
  EXPECT_FALSE(t.has_route(net("tcp9")));

  t.record_check(*t.gateway_index(kGw2), GatewayVerdict::ping_failed);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*t.select(net("tcp1")), kGw1);
  t.record_check(*t.gateway_index(kGw1), GatewayVerdict::push_failed);
  EXPECT_EQ(t.select(net("tcp1")), nullptr);  // every route down
  t.heard_routed_from(kGw2);  // routed traffic from it: alive again
  EXPECT_EQ(*t.select(net("tcp1")), kGw2);
}

// A ping answer from `gw` listing `nis` with `features`.
struct Answer {
  std::vector<std::uint8_t> bytes;
  PingInfo info;
  Answer(std::uint32_t features, std::vector<PingNi> nis) {
    PingInfoSpec spec;
    spec.features = features;
    spec.nis = nis;
    bytes.resize(ping_info_encoded_size(spec));
    EXPECT_TRUE(encode_ping_info(spec, bytes));
    info = *decode_ping_info(bytes);
  }
};

constexpr std::uint32_t kRouterFeatures = 0x1a;  // NI_STATUS | MULTI_RAIL | DISCOVERY

TEST(RouteTable, RouterAnsweringWithItsNisUpIsUsed) {
  RouteTable t;
  std::string err;
  ASSERT_TRUE(t.add({net("tcp1"), kGw1}, kTcp, err));
  const Answer a(kRouterFeatures, {{kGw1, kNiStatusUp}, {nid("10.1.0.1@tcp1"), kNiStatusUp}});
  EXPECT_EQ(t.record_ping(0, a.info, kTcp), GatewayVerdict::up);
  t.record_check(0, GatewayVerdict::up);
  EXPECT_TRUE(t.gateways()[0].usable());
  EXPECT_TRUE(t.gateways()[0].multi_rail);
  EXPECT_TRUE(t.gateways()[0].discovery);
  EXPECT_EQ(*t.select(net("tcp1")), kGw1);
}

TEST(RouteTable, RteDisabledGatewayIsNotUsed) {
  RouteTable t;
  std::string err;
  ASSERT_TRUE(t.add({net("tcp1"), kGw1}, kTcp, err));
  const Answer a(0x1e, {{kGw1, kNiStatusUp}});  // an ordinary node: routing off
  EXPECT_EQ(t.record_ping(0, a.info, kTcp), GatewayVerdict::rte_disabled);
  t.record_check(0, GatewayVerdict::rte_disabled);
  EXPECT_EQ(t.select(net("tcp1")), nullptr);
  t.heard_routed_from(kGw1);  // alive, but still not routing
  EXPECT_EQ(t.select(net("tcp1")), nullptr);
}

TEST(RouteTable, NoUpNiOnOurNetIsNotUsed) {
  RouteTable t;
  std::string err;
  ASSERT_TRUE(t.add({net("tcp1"), kGw1}, kTcp, err));
  const Answer a(kRouterFeatures, {{kGw1, kNiStatusDown}, {nid("10.1.0.1@tcp1"), kNiStatusUp}});
  EXPECT_EQ(t.record_ping(0, a.info, kTcp), GatewayVerdict::no_local_ni_up);
  t.record_check(0, GatewayVerdict::no_local_ni_up);
  EXPECT_EQ(t.select(net("tcp1")), nullptr);
}

TEST(RouteTable, AsymmetricFailureDownsOnlyThatNet) {
  RouteTable t;
  std::string err;
  ASSERT_TRUE(t.add({net("tcp1"), kGw1}, kTcp, err));
  ASSERT_TRUE(t.add({net("tcp2"), kGw1}, kTcp, err));
  // The router's NI on tcp1 is DOWN (no one from tcp1 pinged it); tcp2 is
  // not one of its nets (multi-hop): only the tcp1 route goes down.
  const Answer a(kRouterFeatures, {{kGw1, kNiStatusUp}, {nid("10.1.0.1@tcp1"), kNiStatusDown}});
  EXPECT_EQ(t.record_ping(0, a.info, kTcp), GatewayVerdict::up);
  t.record_check(0, GatewayVerdict::up);
  EXPECT_EQ(t.select(net("tcp1")), nullptr);
  EXPECT_EQ(*t.select(net("tcp2")), kGw1);
  // Next check: tcp1 UP again.
  const Answer b(kRouterFeatures, {{kGw1, kNiStatusUp}, {nid("10.1.0.1@tcp1"), kNiStatusUp}});
  EXPECT_EQ(t.record_ping(0, b.info, kTcp), GatewayVerdict::up);
  EXPECT_EQ(*t.select(net("tcp1")), kGw1);
}

TEST(RouteTable, VerdictNames) {
  EXPECT_EQ(name(GatewayVerdict::rte_disabled), "rte_disabled");
  EXPECT_FALSE(describe(GatewayVerdict::no_local_ni_up).empty());
}

}  // namespace
}  // namespace lnetr::peer
