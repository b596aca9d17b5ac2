#include "router/route_table.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tests/support/nid.hpp"

namespace lnetr {
namespace {

Net net(std::string_view s) { return *parse_net(s); }
using test::nid;

// A router with NIs on tcp, tcp1 and o2ib.
const std::vector<Net> kLocal = {net("tcp"), net("tcp1"), net("o2ib")};

RouteTableBuilder builder(std::uint64_t seed = 0) { return *RouteTableBuilder::create(kLocal, seed); }

RouteSpec spec(std::string_view n, std::string_view gw, std::uint32_t hops = kHopsUndefined,
               std::uint32_t priority = 0) {
  return RouteSpec{net(n), nid(gw), hops, priority};
}

std::vector<std::string> gateways_of(std::span<const Route> routes) {
  std::vector<std::string> out;
  for (const Route& r : routes) out.push_back(to_string(r.gateway));
  return out;
}

// Selection callbacks: every local net usable, equal credits.
constexpr auto kAllUsable = LocalNetMask::all();
constexpr auto kEqualCredits = [](const Route&) { return 8; };

std::string pick(const RouteTableView& t, RouteCursor& c, std::string_view dst) {
  auto r = t.select(net(dst), c, kAllUsable, kEqualCredits);
  return r ? to_string((*r)->gateway) : std::string(name(r.error()));
}

// ---- add-route validation (routing-credits.md §1) --------------------------

TEST(RouteTableAdd, ValidRouteIsStoredWithItsAttributes) {
  auto b = builder();
  auto r = b.add(spec("o2ib1", "10.0.0.1@tcp", 2, 7));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->net, net("o2ib1"));
  EXPECT_EQ(r->gateway, nid("10.0.0.1@tcp"));
  EXPECT_EQ(r->hops, 2u);
  EXPECT_EQ(r->priority, 7u);
  EXPECT_TRUE(r->alive);
  EXPECT_EQ(r->single_hop, SingleHop::unknown);
  const RouteTable t = b.build();
  ASSERT_EQ(t.view().routes().size(), 1u);
  EXPECT_EQ(t.view().local_nets()[t.view().routes()[0].local_slot], net("tcp"));
}

TEST(RouteTableAdd, WildcardOrLoopbackGatewayIsInvalid) {
  auto b = builder();
  auto any = b.add(RouteSpec{net("o2ib1"), Nid::any()});
  ASSERT_FALSE(any);
  EXPECT_EQ(any.error(), RouteError::bad_gateway);
  auto lo = b.add(spec("o2ib1", "0@lo"));
  ASSERT_FALSE(lo);
  EXPECT_EQ(lo.error(), RouteError::bad_gateway);
  EXPECT_EQ(errno_of(RouteError::bad_gateway), EINVAL);
  EXPECT_TRUE(b.routes().empty());
}

// An IPv6 gateway is reached on a tcp net (socklnd V4); another LND would
// carry only its address's first four bytes.
TEST(RouteTableAdd, IpV6GatewayOnlyOnTcp) {
  auto b = builder();
  EXPECT_TRUE(b.add(spec("o2ib1", "2001:db8::1@tcp")));
  auto v6 = b.add(spec("tcp1", "2001:db8::1@o2ib"));
  ASSERT_FALSE(v6);
  EXPECT_EQ(v6.error(), RouteError::large_nid_gateway);
  EXPECT_EQ(errno_of(RouteError::large_nid_gateway), EAFNOSUPPORT);
  EXPECT_EQ(b.routes().size(), 1u);
}

TEST(RouteTableAdd, WildcardOrLoopbackNetIsInvalid) {
  auto b = builder();
  auto any = b.add(RouteSpec{Net::from_u32(kNetAny), nid("10.0.0.1@tcp")});
  ASSERT_FALSE(any);
  EXPECT_EQ(any.error(), RouteError::bad_net);
  auto lo = b.add(spec("lo", "10.0.0.1@tcp"));
  ASSERT_FALSE(lo);
  EXPECT_EQ(lo.error(), RouteError::bad_net);
  EXPECT_EQ(errno_of(RouteError::bad_net), EINVAL);
}

TEST(RouteTableAdd, GatewayOnTheRemoteNetIsInvalid) {
  // Checked before "remote net is local": an EINVAL, not an EEXIST.
  auto b = builder();
  auto r = b.add(spec("tcp", "10.0.0.1@tcp"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), RouteError::gateway_on_remote_net);
  auto r2 = b.add(spec("o2ib7", "10.0.0.1@o2ib7"));
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error(), RouteError::gateway_on_remote_net);
  EXPECT_EQ(errno_of(RouteError::gateway_on_remote_net), EINVAL);
}

TEST(RouteTableAdd, HopsMustBeOneTo255OrUndefined) {
  auto b = builder();
  for (std::uint32_t bad : {0u, 256u, 1000u, 0xfffffffeu}) {
    auto r = b.add(spec("o2ib1", "10.0.0.1@tcp", bad));
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error(), RouteError::bad_hops) << bad;
  }
  EXPECT_EQ(errno_of(RouteError::bad_hops), EINVAL);
  EXPECT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp", 1)));
  EXPECT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp", 255)));
  EXPECT_TRUE(b.add(spec("o2ib1", "10.0.0.3@tcp", kHopsUndefined)));
  EXPECT_EQ(b.routes().size(), 3u);
}

TEST(RouteTableAdd, LocalRemoteNetIsExists) {
  auto b = builder();
  auto r = b.add(spec("tcp1", "10.0.0.1@tcp"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), RouteError::net_is_local);
  EXPECT_EQ(errno_of(RouteError::net_is_local), EEXIST);
}

TEST(RouteTableAdd, GatewayOnANonLocalNetIsUnreachable) {
  auto b = builder();
  auto r = b.add(spec("o2ib1", "10.0.0.1@tcp5"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), RouteError::gateway_unreachable);
  EXPECT_EQ(errno_of(RouteError::gateway_unreachable), EHOSTUNREACH);
  // Distinct from every other error so that a config loader can skip it.
  EXPECT_NE(RouteError::gateway_unreachable, RouteError::duplicate);
  EXPECT_NE(RouteError::gateway_unreachable, RouteError::net_is_local);
}

TEST(RouteTableAdd, RemoteNetLocalIsCheckedBeforeGatewayNet) {
  auto b = builder();
  auto r = b.add(spec("tcp1", "10.0.0.1@tcp5"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), RouteError::net_is_local);
}

TEST(RouteTableAdd, InvalidIsCheckedBeforeLocalAndUnreachable) {
  auto b = builder();
  auto r = b.add(spec("tcp1", "10.0.0.1@tcp5", 0));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), RouteError::bad_hops);
}

TEST(RouteTableAdd, SameNetAndGatewayTwiceIsExistsAndChangesNothing) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp", 1, 0)));
  auto r = b.add(spec("o2ib1", "10.0.0.1@tcp", 3, 9));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), RouteError::duplicate);
  EXPECT_EQ(errno_of(RouteError::duplicate), EEXIST);
  ASSERT_EQ(b.routes().size(), 1u);
  EXPECT_EQ(b.routes()[0].hops, 1u);
  EXPECT_EQ(b.routes()[0].priority, 0u);
  // Same gateway to another net, and another gateway to the same net, are fine.
  EXPECT_TRUE(b.add(spec("o2ib2", "10.0.0.1@tcp")));
  EXPECT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp")));
}

TEST(RouteTableAdd, ErrorsHaveNamesAndText) {
  EXPECT_EQ(name(RouteError::gateway_unreachable), "gateway_unreachable");
  EXPECT_FALSE(describe(RouteError::duplicate).empty());
  EXPECT_EQ(name(NoRoute::no_alive_route), "no_alive_route");
  EXPECT_FALSE(describe(NoRoute::no_route).empty());
}

TEST(RouteTableBuilder, LocalNetsAreValidated) {
  const std::vector<Net> with_any = {net("tcp"), Net::from_u32(kNetAny)};
  auto a = RouteTableBuilder::create(with_any);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error(), RouteError::bad_net);

  std::vector<Net> many;
  for (std::uint16_t i = 0; i < kMaxLocalNets + 1; ++i) many.push_back(Net{2, i});
  auto m = RouteTableBuilder::create(many);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error(), RouteError::too_many_local_nets);
  many.pop_back();
  many.push_back(many.front());  // duplicates count once
  EXPECT_TRUE(RouteTableBuilder::create(many));

  // lo is dropped: a route via a lo gateway stays invalid.
  const std::vector<Net> with_lo = {net("tcp"), net("lo")};
  auto l = RouteTableBuilder::create(with_lo);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->local_nets().size(), 1u);
}

// ---- deletion -----------------------------------------------------------------

RouteTableBuilder four_routes() {
  auto b = builder();
  EXPECT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp")));
  EXPECT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp")));
  EXPECT_TRUE(b.add(spec("o2ib2", "10.0.0.1@tcp")));
  EXPECT_TRUE(b.add(spec("o2ib2", "10.0.0.2@tcp")));
  return b;
}

TEST(RouteTableRemove, ByNet) {
  auto b = four_routes();
  EXPECT_EQ(b.remove(net("o2ib1"), std::nullopt), 2u);
  ASSERT_EQ(b.routes().size(), 2u);
  for (const Route& r : b.routes()) EXPECT_EQ(r.net, net("o2ib2"));
}

TEST(RouteTableRemove, ByGateway) {
  auto b = four_routes();
  EXPECT_EQ(b.remove(std::nullopt, nid("10.0.0.1@tcp")), 2u);
  ASSERT_EQ(b.routes().size(), 2u);
  for (const Route& r : b.routes()) EXPECT_EQ(r.gateway, nid("10.0.0.2@tcp"));
}

TEST(RouteTableRemove, ByNetAndGateway) {
  auto b = four_routes();
  EXPECT_EQ(b.remove(net("o2ib2"), nid("10.0.0.1@tcp")), 1u);
  ASSERT_EQ(b.routes().size(), 3u);
  for (const Route& r : b.routes()) EXPECT_FALSE(r.net == net("o2ib2") && r.gateway == nid("10.0.0.1@tcp"));
}

TEST(RouteTableRemove, NothingMatchingRemovesNothingAndNeitherRemovesAll) {
  auto b = four_routes();
  EXPECT_EQ(b.remove(net("o2ib3"), std::nullopt), 0u);
  EXPECT_EQ(b.remove(net("o2ib1"), nid("10.0.0.3@tcp")), 0u);
  EXPECT_EQ(b.routes().size(), 4u);
  EXPECT_EQ(b.remove(std::nullopt, std::nullopt), 4u);
  EXPECT_TRUE(b.routes().empty());
  EXPECT_FALSE(b.build().view().reachable(net("o2ib1")));
}

TEST(RouteTableRemove, RemovedRouteCanBeAddedAgain) {
  auto b = four_routes();
  ASSERT_EQ(b.remove(net("o2ib1"), nid("10.0.0.1@tcp")), 1u);
  EXPECT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp")));
}

// ---- the snapshot -------------------------------------------------------------

TEST(RouteTableSnapshot, LookupAndDisplayIteration) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("tcp9", "10.0.0.1@tcp", 1, 3)));
  ASSERT_TRUE(b.add(spec("o2ib1", "192.168.0.1@o2ib")));
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp1", 2)));
  const RouteTable t = b.build();
  const RouteTableView& v = t.view();
  ASSERT_TRUE(v.well_formed());

  EXPECT_TRUE(v.reachable(net("o2ib1")));
  EXPECT_TRUE(v.reachable(net("tcp9")));
  EXPECT_FALSE(v.reachable(net("o2ib2")));
  EXPECT_FALSE(v.reachable(net("tcp")));  // local, not routed
  EXPECT_EQ(v.find(net("o2ib2")), nullptr);
  EXPECT_TRUE(v.routes_to(net("o2ib2")).empty());

  std::map<std::string, std::vector<std::string>> shown;
  for (const RouteNet& n : v.nets())
    for (const Route& r : v.routes_of(n)) shown[to_string(n.net)].push_back(to_string(r.gateway));
  EXPECT_EQ(shown.size(), 2u);
  EXPECT_EQ(shown["tcp9"], std::vector<std::string>{"10.0.0.1@tcp"});
  EXPECT_EQ(shown["o2ib1"].size(), 2u);

  const Route& tcp9 = v.routes_to(net("tcp9"))[0];
  EXPECT_EQ(display_hop(tcp9), 1);
  EXPECT_EQ(tcp9.priority, 3u);
  EXPECT_EQ(display_state(tcp9), "up");
  EXPECT_EQ(display_type(tcp9), "multi-hop");
  EXPECT_TRUE(counts_as_single_hop(tcp9));
  for (const Route& r : v.routes_to(net("o2ib1"))) {
    if (r.gateway == nid("192.168.0.1@o2ib")) {
      EXPECT_EQ(display_hop(r), -1);
      EXPECT_EQ(r.priority, 0u);
      EXPECT_FALSE(counts_as_single_hop(r));
    } else {
      EXPECT_EQ(display_hop(r), 2);
    }
  }

  // Gateways are numbered once across nets; the index names the NID.
  EXPECT_EQ(v.gateways().size(), 3u);
  for (const Route& r : v.routes()) EXPECT_EQ(v.gateways()[r.gateway_index], r.gateway);
  for (const Route& r : v.routes()) {
    EXPECT_EQ(v.local_nets()[r.local_slot], r.gateway.net());
    EXPECT_EQ(v.local_slot(r.gateway.net()), std::optional<std::uint8_t>(r.local_slot));
  }
  EXPECT_EQ(v.local_slot(net("tcp5")), std::nullopt);
}

TEST(RouteTableSnapshot, NewSnapshotFromOldLeavesOldUnchanged) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp")));
  const RouteTable t1 = b.build();
  const std::vector<Route> before(t1.view().routes().begin(), t1.view().routes().end());

  RouteTableBuilder b2(t1);
  ASSERT_TRUE(b2.add(spec("o2ib1", "10.0.0.2@tcp")));
  ASSERT_TRUE(b2.add(spec("o2ib2", "10.0.0.2@tcp")));
  EXPECT_EQ(b2.set_alive(std::nullopt, nid("10.0.0.1@tcp"), false), 1u);
  const RouteTable t2 = b2.build();

  EXPECT_EQ(t2.version(), t1.version() + 1);
  ASSERT_EQ(t1.view().routes().size(), 1u);
  EXPECT_EQ(std::memcmp(t1.view().routes().data(), before.data(), sizeof(Route)), 0);
  EXPECT_TRUE(t1.view().routes()[0].alive);
  EXPECT_FALSE(t1.view().reachable(net("o2ib2")));
  EXPECT_EQ(t1.view().gateways().size(), 1u);

  EXPECT_EQ(t2.view().routes().size(), 3u);
  EXPECT_TRUE(t2.view().reachable(net("o2ib2")));
  EXPECT_TRUE(t2.view().well_formed());
  // t2 owns its arrays: they do not alias t1's.
  EXPECT_NE(t2.view().routes().data(), t1.view().routes().data());
}

TEST(RouteTableSnapshot, CopiesAndMovesKeepTheirOwnArrays) {
  auto b = four_routes();
  RouteTable a = b.build();
  RouteTable c = a;
  EXPECT_NE(c.view().routes().data(), a.view().routes().data());
  EXPECT_EQ(c.view().routes().size(), 4u);
  RouteTable m = std::move(a);
  EXPECT_EQ(m.view().routes().size(), 4u);
  EXPECT_TRUE(m.view().well_formed());
  EXPECT_TRUE(a.view().routes().empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  c = m;
  EXPECT_TRUE(c.view().well_formed());
}

TEST(RouteTableSnapshot, ViewOverCopiedArraysSelectsAsTheOriginal) {
  // What a worker does with a snapshot published in shared memory.
  auto b = four_routes();
  const RouteTable t = b.build();
  const RouteTableView& src = t.view();
  const std::vector<Net> local(src.local_nets().begin(), src.local_nets().end());
  const std::vector<RouteNet> nets(src.nets().begin(), src.nets().end());
  const std::vector<Route> routes(src.routes().begin(), src.routes().end());
  const std::vector<Nid> gws(src.gateways().begin(), src.gateways().end());
  const RouteTableView copy(src.version(), local, nets, routes, gws);
  ASSERT_TRUE(copy.well_formed());

  RouteCursor c1(src), c2(copy);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(pick(src, c1, "o2ib1"), pick(copy, c2, "o2ib1"));
}

TEST(RouteTableSnapshot, WellFormedRejectsBrokenIndices) {
  auto b = four_routes();
  const RouteTable t = b.build();
  const RouteTableView& src = t.view();
  std::vector<RouteNet> nets(src.nets().begin(), src.nets().end());
  std::vector<Route> routes(src.routes().begin(), src.routes().end());
  const auto view = [&] {
    return RouteTableView(src.version(), src.local_nets(), nets, routes, src.gateways());
  };
  ASSERT_TRUE(view().well_formed());
  nets[1].count += 1;  // past the end
  EXPECT_FALSE(view().well_formed());
  nets[1].count -= 1;
  routes[0].gateway_index = 99;
  EXPECT_FALSE(view().well_formed());
  routes[0] = src.routes()[0];
  routes[0].local_slot = 1;  // names another local net than the gateway's
  EXPECT_FALSE(view().well_formed());
  routes[0] = src.routes()[0];
  std::swap(nets[0], nets[1]);  // unsorted
  EXPECT_FALSE(view().well_formed());
}

TEST(RouteTableSnapshot, InsertionPositionIsRandomPerSeedAndDeterministic) {
  const auto order = [](std::uint64_t seed) {
    auto b = builder(seed);
    for (int i = 1; i <= 8; ++i) EXPECT_TRUE(b.add(spec("o2ib1", "10.0.0." + std::to_string(i) + "@tcp")));
    return gateways_of(b.build().view().routes());
  };
  EXPECT_EQ(order(1), order(1));
  bool differs = false;
  for (std::uint64_t seed = 2; seed < 10 && !differs; ++seed) differs = order(seed) != order(1);
  EXPECT_TRUE(differs);
  std::vector<std::string> sorted = order(1);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted.size(), 8u);
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
}

TEST(RouteTableSnapshot, SingleHopObservationIsRecordedAndShown) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp")));
  EXPECT_TRUE(b.set_single_hop(net("o2ib1"), nid("10.0.0.1@tcp"), SingleHop::yes));
  EXPECT_FALSE(b.set_single_hop(net("o2ib2"), nid("10.0.0.1@tcp"), SingleHop::yes));
  const RouteTable t = b.build();
  const Route& r = t.view().routes()[0];
  EXPECT_EQ(r.single_hop, SingleHop::yes);
  EXPECT_EQ(display_type(r), "single-hop");
  EXPECT_TRUE(counts_as_single_hop(r));
}

// ---- selection ------------------------------------------------------------------

// Credits per gateway NID for the tests.
struct Credits {
  std::map<Nid, int> by_gw;
  int operator()(const Route& r) const {
    auto it = by_gw.find(r.gateway);
    return it == by_gw.end() ? 0 : it->second;
  }
};

TEST(RouteTableSelect, LowerPriorityWinsOverHopsAndCredits) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp", 1, 5)));    // fewer hops, more credits
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp", 200, 1)));  // better priority
  const RouteTable t = b.build();
  RouteCursor c(t.view());
  const Credits credits{{{nid("10.0.0.1@tcp"), 100}, {nid("10.0.0.2@tcp"), -5}}};
  for (int i = 0; i < 4; ++i) {
    auto r = t.view().select(net("o2ib1"), c, kAllUsable, credits);
    ASSERT_TRUE(r);
    EXPECT_EQ((*r)->gateway, nid("10.0.0.2@tcp"));
  }
}

TEST(RouteTableSelect, FewerHopsWinOverCredits) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp", 3)));
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp", 2)));
  const RouteTable t = b.build();
  RouteCursor c(t.view());
  const Credits credits{{{nid("10.0.0.1@tcp"), 100}, {nid("10.0.0.2@tcp"), 0}}};
  for (int i = 0; i < 4; ++i) {
    auto r = t.view().select(net("o2ib1"), c, kAllUsable, credits);
    ASSERT_TRUE(r);
    EXPECT_EQ((*r)->gateway, nid("10.0.0.2@tcp"));
  }
}

TEST(RouteTableSelect, UndefinedHopsCompareAsOne) {
  {  // undefined beats 2
    auto b = builder();
    ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp", 2)));
    ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp", kHopsUndefined)));
    const RouteTable t = b.build();
    RouteCursor c(t.view());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(pick(t.view(), c, "o2ib1"), "10.0.0.2@tcp");
  }
  {  // undefined ties with 1: credits decide, both ways
    auto b = builder();
    ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp", 1)));
    ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp", kHopsUndefined)));
    const RouteTable t = b.build();
    RouteCursor c(t.view());
    const Credits undefined_more{{{nid("10.0.0.1@tcp"), 1}, {nid("10.0.0.2@tcp"), 2}}};
    const Credits one_more{{{nid("10.0.0.1@tcp"), 2}, {nid("10.0.0.2@tcp"), 1}}};
    EXPECT_EQ((*t.view().select(net("o2ib1"), c, kAllUsable, undefined_more))->gateway, nid("10.0.0.2@tcp"));
    EXPECT_EQ((*t.view().select(net("o2ib1"), c, kAllUsable, one_more))->gateway, nid("10.0.0.1@tcp"));
    // and with equal credits they rotate
    EXPECT_NE(pick(t.view(), c, "o2ib1"), pick(t.view(), c, "o2ib1"));
  }
}

TEST(RouteTableSelect, MoreCreditsWinOverRoundRobin) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp")));
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp")));
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.3@tcp")));
  const RouteTable t = b.build();
  RouteCursor c(t.view());
  const Credits credits{{{nid("10.0.0.1@tcp"), 3}, {nid("10.0.0.2@tcp"), 7}, {nid("10.0.0.3@tcp"), -2}}};
  for (int i = 0; i < 5; ++i) {
    auto r = t.view().select(net("o2ib1"), c, kAllUsable, credits);
    ASSERT_TRUE(r);
    EXPECT_EQ((*r)->gateway, nid("10.0.0.2@tcp"));
  }
}

TEST(RouteTableSelect, GatewayNiStateOrdersHealthThenQueuedBytesThenCredits) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp")));
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp")));
  const RouteTable t = b.build();
  RouteCursor c(t.view());
  const auto chosen = [&](GatewayNiState g1, GatewayNiState g2) {
    auto r = t.view().select(net("o2ib1"), c, kAllUsable, [&](const Route& rt) {
      return rt.gateway == nid("10.0.0.1@tcp") ? g1 : g2;
    });
    return r ? to_string((*r)->gateway) : std::string();
  };
  // health beats queued bytes and credits
  EXPECT_EQ(chosen({-10, 1000, 1u << 20}, {50, 999, 0}), "10.0.0.1@tcp");
  // then fewer queued bytes beat credits
  EXPECT_EQ(chosen({50, 1000, 4096}, {-10, 1000, 0}), "10.0.0.2@tcp");
  // then credits
  EXPECT_EQ(chosen({5, 1000, 0}, {4, 1000, 0}), "10.0.0.1@tcp");
}

TEST(RouteTableSelect, EqualRoutesRotateExactlyFairly) {
  auto b = builder(42);
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0." + std::to_string(i) + "@tcp", 1, 2)));
  // A better-priority route that is down and a worse one that is up: neither
  // disturbs the rotation.
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.9@tcp", 1, 0)));
  ASSERT_EQ(b.set_alive(net("o2ib1"), nid("10.0.0.9@tcp"), false), 1u);
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.8@tcp", 1, 3)));
  const RouteTable t = b.build();
  RouteCursor c(t.view());

  constexpr int kRounds = 40;
  std::map<std::string, int> count;
  std::vector<std::string> seq;
  for (int i = 0; i < 5 * kRounds; ++i) {
    seq.push_back(pick(t.view(), c, "o2ib1"));
    ++count[seq.back()];
  }
  ASSERT_EQ(count.size(), 5u);
  for (const auto& [gw, n] : count) EXPECT_EQ(n, kRounds) << gw;
  // Every window of 5 consecutive selections names all five: a strict cycle.
  for (std::size_t i = 0; i + 5 <= seq.size(); ++i) {
    std::vector<std::string> w(seq.begin() + static_cast<std::ptrdiff_t>(i),
                               seq.begin() + static_cast<std::ptrdiff_t>(i + 5));
    std::sort(w.begin(), w.end());
    EXPECT_EQ(std::unique(w.begin(), w.end()), w.end()) << "window at " << i;
  }
  // The first round follows the table order.
  std::vector<std::string> table_order;
  for (const Route& r : t.view().routes_to(net("o2ib1")))
    if (r.priority == 2) table_order.push_back(to_string(r.gateway));
  EXPECT_EQ(std::vector<std::string>(seq.begin(), seq.begin() + 5), table_order);
}

TEST(RouteTableSelect, RotationResumesFairlyWhenATieJoins) {
  // A route that was not a candidate (fewer credits) and becomes one is the
  // least recently used and goes next.
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp")));
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp")));
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.3@tcp")));
  const RouteTable t = b.build();
  RouteCursor c(t.view());
  Credits credits{{{nid("10.0.0.1@tcp"), 8}, {nid("10.0.0.2@tcp"), 8}, {nid("10.0.0.3@tcp"), 0}}};
  for (int i = 0; i < 4; ++i) EXPECT_NE((*t.view().select(net("o2ib1"), c, kAllUsable, credits))->gateway, nid("10.0.0.3@tcp"));
  credits.by_gw[nid("10.0.0.3@tcp")] = 8;
  EXPECT_EQ((*t.view().select(net("o2ib1"), c, kAllUsable, credits))->gateway, nid("10.0.0.3@tcp"));
}

TEST(RouteTableSelect, DeadRoutesAreSkipped) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp", 1, 0)));  // best, but dead
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp", 1, 9)));
  ASSERT_EQ(b.set_alive(std::nullopt, nid("10.0.0.1@tcp"), false), 1u);
  const RouteTable t = b.build();
  RouteCursor c(t.view());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pick(t.view(), c, "o2ib1"), "10.0.0.2@tcp");

  RouteTableBuilder b2(t);
  ASSERT_EQ(b2.set_alive(net("o2ib1"), std::nullopt, false), 2u);
  const RouteTable t2 = b2.build();
  RouteCursor c2(t2.view());
  EXPECT_EQ(pick(t2.view(), c2, "o2ib1"), "no_alive_route");
  EXPECT_TRUE(t2.view().reachable(net("o2ib1")));  // reachable at all, though down

  RouteTableBuilder b3(t2);
  ASSERT_EQ(b3.set_alive(std::nullopt, nid("10.0.0.1@tcp"), true), 1u);
  const RouteTable t3 = b3.build();
  RouteCursor c3(t3.view());
  EXPECT_EQ(pick(t3.view(), c3, "o2ib1"), "10.0.0.1@tcp");
}

TEST(RouteTableSelect, UnknownNetIsNoRoute) {
  auto b = four_routes();
  const RouteTable t = b.build();
  RouteCursor c(t.view());
  EXPECT_EQ(pick(t.view(), c, "o2ib3"), "no_route");
  EXPECT_EQ(pick(RouteTableView{}, c, "o2ib1"), "no_route");
}

TEST(RouteTableSelect, GatewaysOnUnusableLocalNetsAreSkipped) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp", 1, 0)));      // best, via tcp
  ASSERT_TRUE(b.add(spec("o2ib1", "192.168.0.1@o2ib", 1, 5)));  // via o2ib
  const RouteTable t = b.build();
  const RouteTableView& v = t.view();
  RouteCursor c(v);

  LocalNetMask o2ib_only;
  o2ib_only.set(*v.local_slot(net("o2ib")));
  for (int i = 0; i < 3; ++i) {
    auto r = v.select(net("o2ib1"), c, o2ib_only, kEqualCredits);
    ASSERT_TRUE(r);
    EXPECT_EQ((*r)->gateway, nid("192.168.0.1@o2ib"));
  }
  LocalNetMask tcp1_only;
  tcp1_only.set(*v.local_slot(net("tcp1")));
  auto none = v.select(net("o2ib1"), c, tcp1_only, kEqualCredits);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error(), NoRoute::no_usable_route);

  // Any predicate works: here, by the gateway's net.
  auto by_net = v.select(net("o2ib1"), c, [](const Route& r) { return r.gateway.net() == net("tcp"); },
                         kEqualCredits);
  ASSERT_TRUE(by_net);
  EXPECT_EQ((*by_net)->gateway, nid("10.0.0.1@tcp"));

  LocalNetMask m = LocalNetMask::all();
  m.set(*v.local_slot(net("tcp")), false);
  EXPECT_EQ((*v.select(net("o2ib1"), c, m, kEqualCredits))->gateway, nid("192.168.0.1@o2ib"));
}

TEST(RouteTableSelect, DeadAndUnusableTogetherReportNoUsableRoute) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp")));
  ASSERT_TRUE(b.add(spec("o2ib1", "192.168.0.1@o2ib")));
  ASSERT_EQ(b.set_alive(std::nullopt, nid("10.0.0.1@tcp"), false), 1u);
  const RouteTable t = b.build();
  RouteCursor c(t.view());
  LocalNetMask tcp_only;
  tcp_only.set(*t.view().local_slot(net("tcp")));
  auto r = t.view().select(net("o2ib1"), c, tcp_only, kEqualCredits);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), NoRoute::no_usable_route);
}

TEST(RouteTableSelect, PerWorkerCursorsAreIndependent) {
  auto b = builder();
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.1@tcp")));
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.2@tcp")));
  ASSERT_TRUE(b.add(spec("o2ib1", "10.0.0.3@tcp")));
  const RouteTable t = b.build();
  RouteCursor worker_a(t.view());
  RouteCursor worker_b(t.view());

  std::vector<std::string> a, bb;
  for (int i = 0; i < 7; ++i) a.push_back(pick(t.view(), worker_a, "o2ib1"));
  // Worker B has not selected yet: it starts from the beginning, as A did.
  for (int i = 0; i < 7; ++i) bb.push_back(pick(t.view(), worker_b, "o2ib1"));
  EXPECT_EQ(a, bb);
  // Interleaving does not disturb either rotation.
  RouteCursor worker_c(t.view());
  RouteCursor worker_d(t.view());
  std::vector<std::string> cc, dd;
  for (int i = 0; i < 7; ++i) {
    cc.push_back(pick(t.view(), worker_c, "o2ib1"));
    pick(t.view(), worker_d, "o2ib1");
    pick(t.view(), worker_d, "o2ib1");
  }
  EXPECT_EQ(cc, a);
  static_assert(alignof(RouteCursor) == 64);
}

TEST(RouteTableSelect, SelectionDoesNotWriteTheSnapshot) {
  auto b = four_routes();
  const RouteTable t = b.build();
  const std::vector<Route> before(t.view().routes().begin(), t.view().routes().end());
  const std::vector<RouteNet> nets_before(t.view().nets().begin(), t.view().nets().end());
  RouteCursor c(t.view());
  for (int i = 0; i < 10; ++i) {
    (void)pick(t.view(), c, "o2ib1");
    (void)pick(t.view(), c, "o2ib2");
  }
  EXPECT_EQ(std::memcmp(before.data(), t.view().routes().data(), before.size() * sizeof(Route)), 0);
  EXPECT_EQ(std::memcmp(nets_before.data(), t.view().nets().data(), nets_before.size() * sizeof(RouteNet)), 0);
}

TEST(RouteTableSelect, NetsRotateIndependently) {
  auto b = four_routes();
  const RouteTable t = b.build();
  RouteCursor c(t.view());
  const std::string first1 = pick(t.view(), c, "o2ib1");
  // Selecting for o2ib2 several times does not advance o2ib1's rotation.
  for (int i = 0; i < 3; ++i) (void)pick(t.view(), c, "o2ib2");
  EXPECT_NE(pick(t.view(), c, "o2ib1"), first1);
  EXPECT_EQ(pick(t.view(), c, "o2ib1"), first1);
}

TEST(RouteTableCursor, AttachRestartsRotationAndTracksTheSnapshot) {
  auto b = four_routes();
  const RouteTable t1 = b.build();
  RouteCursor c(t1.view());
  EXPECT_TRUE(c.attached_to(t1.view()));
  const std::string first = pick(t1.view(), c, "o2ib1");
  EXPECT_NE(pick(t1.view(), c, "o2ib1"), first);

  RouteTableBuilder b2(t1);
  ASSERT_TRUE(b2.add(spec("o2ib3", "10.0.0.3@tcp")));
  const RouteTable t2 = b2.build();
  EXPECT_FALSE(c.attached_to(t2.view()));
  c.attach(t2.view());
  EXPECT_TRUE(c.attached_to(t2.view()));
  EXPECT_FALSE(c.attached_to(t1.view()));
  EXPECT_EQ(pick(t2.view(), c, "o2ib1"), first);  // rotation restarted, same order in the new table
  EXPECT_EQ(pick(t2.view(), c, "o2ib3"), "10.0.0.3@tcp");

  RouteCursor moved = std::move(c);
  EXPECT_TRUE(moved.attached_to(t2.view()));
  EXPECT_NE(pick(t2.view(), moved, "o2ib1"), first);
}

}  // namespace
}  // namespace lnetr
