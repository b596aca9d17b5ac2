#include "router/forward.hpp"

#include <gtest/gtest.h>

#include <array>
#include <map>

#include <set>
#include <vector>

#include "tests/support/nid.hpp"

namespace lnetr {
namespace {

using test::nid;

const Nid kTcp = nid("10.201.1.3@tcp");
const Nid kTcp1 = nid("10.201.2.3@tcp1");
const std::vector<Nid> kRouterNis = {kTcp, kTcp1};

LnetHeader to(const Nid& dest) {
  LnetHeader h;
  h.dest_nid = dest;
  h.src_nid = nid("10.201.1.2@tcp");
  h.set(GetFields{});
  return h;
}

TEST(Forward, ClassifiesLikeLnetParse) {
  const LocalNis locals{kRouterNis};
  EXPECT_EQ(classify(to(kTcp), kTcp, locals, true).what, Disposition::for_us);
  // Routed across: from tcp to a node on tcp1 (local) or tcp7 (remote).
  EXPECT_EQ(classify(to(nid("10.201.2.2@tcp1")), kTcp, locals, true).what, Disposition::forward);
  EXPECT_EQ(classify(to(nid("10.9.9.9@tcp7")), kTcp, locals, true).what, Disposition::forward);
  // The sender should have delivered it directly: same net as the arrival NI.
  EXPECT_EQ(classify(to(nid("10.201.1.9@tcp")), kTcp, locals, true).what, Disposition::reject);
  // Addressed to our other NI: the sender should have used our NID on its net.
  EXPECT_EQ(classify(to(kTcp1), kTcp, locals, true).what, Disposition::reject);
  // Routing disabled: dropped, not rejected; messages for us still arrive.
  const Verdict v = classify(to(nid("10.201.2.2@tcp1")), kTcp, locals, false);
  EXPECT_EQ(v.what, Disposition::drop);
  EXPECT_EQ(v.reason, DropReason::routing_disabled);
  EXPECT_EQ(classify(to(kTcp), kTcp, locals, false).what, Disposition::for_us);
}

TEST(Forward, CreditsGoNegativeAndRememberTheirMinimum) {
  Credits c = Credits::of(2);
  EXPECT_TRUE(c.take());
  EXPECT_TRUE(c.take());
  EXPECT_FALSE(c.take());  // the third waits
  EXPECT_EQ(c.cur, -1);
  EXPECT_EQ(c.min, -1);
  EXPECT_TRUE(c.give());   // a waiter is owed the credit
  EXPECT_FALSE(c.give());
  EXPECT_FALSE(c.give());
  EXPECT_EQ(c.cur, 2);
  EXPECT_EQ(c.min, -1);
  EXPECT_EQ(c.max, 2);
}

TEST(Forward, PoolClassBoundaries) {
  EXPECT_EQ(pool_for(0), PoolClass::tiny);
  EXPECT_EQ(pool_for(1), PoolClass::small);
  EXPECT_EQ(pool_for(4096), PoolClass::small);
  EXPECT_EQ(pool_for(4097), PoolClass::large);
  EXPECT_EQ(pool_for(kLnetMtu), PoolClass::large);
  EXPECT_EQ(pool_capacity(PoolClass::tiny), 0u);
  EXPECT_EQ(pool_capacity(PoolClass::small), 4096u);
  EXPECT_EQ(pool_capacity(PoolClass::large), kLnetMtu);
}

TEST(Forward, CptOfNidIsTheByteSumAsLinux) {
  // 10.201.1.2@tcp = 0x000200000ac90102: 2 + 1 + 0xc9 + 0x0a + 2 = 216.
  const Nid n = nid("10.201.1.2@tcp");
  EXPECT_EQ(cpt_of(n, 1), 0u);
  EXPECT_EQ(cpt_of(n, 2), 216u % 2);
  EXPECT_EQ(cpt_of(n, 5), 216u % 5);
  EXPECT_EQ(cpt_of(n, 7), 216u % 7);
  // Spread: consecutive addresses land on every CPT.
  std::set<std::uint32_t> seen;
  for (std::uint32_t a = 1; a <= 8; ++a) seen.insert(cpt_of(Nid::make(Net{2, 0}, 0x0ac90100 + a), 4));
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_LT(cpt_of(nid("2001:db8::1@tcp"), 3), 3u);
}

TEST(Forward, DropReasonsHaveNamesAndText) {
  EXPECT_EQ(name(DropReason::no_route), "no_route");
  for (std::size_t i = 0; i < kDropReasonCount; ++i) {
    EXPECT_FALSE(name(static_cast<DropReason>(i)).empty());
    EXPECT_GT(describe(static_cast<DropReason>(i)).size(), 20u);
  }
}

}  // namespace
}  // namespace lnetr

namespace lnetr {
namespace {

TEST(Placement, PinnedNetsGoToTheirWorkerOthersByCpt) {
  Placement p;
  p.pinned.push_back({Net{2, 9}, IpAddr::v4(0x0a000101), 1, {}});  // tcp9 on a one-queue DPDK port: worker 0
  for (std::uint32_t a = 1; a <= 40; ++a) {
    const Nid on_port = Nid::make(Net{2, 9}, 0x0a000100 + a);
    const Nid elsewhere = Nid::make(Net{2, 1}, 0x0a000100 + a);
    EXPECT_EQ(p.of(on_port, 4), 0u);
    EXPECT_EQ(p.of(elsewhere, 4), cpt_of(elsewhere, 4));
  }
  EXPECT_EQ(Placement{}.of(Nid::make(Net{2, 9}, 0x0a000107), 3), cpt_of(Nid::make(Net{2, 9}, 0x0a000107), 3));
}

// An NI's CPT list: its net's peers hash among those CPTs only (Linux
// indexes ni_cpts by the NID's hash over their number), and every listed
// CPT gets some.
TEST(Placement, ANetsCptListHoldsItsPeers) {
  Placement p;
  p.restricted.push_back({Net{2, 1}, {1, 3}});  // tcp1: CPTs 1 and 3 of 4
  std::map<std::uint32_t, int> seen;
  for (std::uint32_t a = 1; a <= 200; ++a) {
    const Nid peer = Nid::make(Net{2, 1}, 0x0a000100 + a);
    const std::uint32_t cpt = p.of(peer, 4);
    EXPECT_EQ(cpt, (std::array<std::uint32_t, 2>{1, 3})[cpt_of(peer, 2)]) << to_string(peer);
    ++seen[cpt];
    const Nid other = Nid::make(Net{2, 0}, 0x0a000100 + a);  // tcp: every CPT, as before
    EXPECT_EQ(p.of(other, 4), cpt_of(other, 4));
  }
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[3], 0);
}

// Microsoft's published RSS verification vectors (IPv4 addresses only).
TEST(Rss, ToeplitzHashMatchesTheVerificationSuite) {
  auto ip = [](std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d) {
    return (a << 24) | (b << 16) | (c << 8) | d;
  };
  EXPECT_EQ(rss_hash_ipv4(ip(66, 9, 149, 187), ip(161, 142, 100, 80)), 0x323e8fc2u);
  EXPECT_EQ(rss_hash_ipv4(ip(199, 92, 111, 2), ip(65, 69, 140, 83)), 0xd718262au);
  EXPECT_EQ(rss_hash_ipv4(ip(24, 19, 198, 95), ip(12, 22, 207, 184)), 0xd2d0a5deu);
  EXPECT_EQ(rss_hash_ipv4(ip(38, 27, 205, 30), ip(209, 142, 163, 6)), 0x82989176u);
  EXPECT_EQ(rss_hash_ipv4(ip(153, 39, 163, 191), ip(202, 188, 127, 2)), 0x5d1809c5u);
}

// The IPv6 vector of the same suite (addresses only), as a NIC with RSS on
// IPv6 addresses computes it; and an IPv6 port's peers spread as IPv4's.
TEST(Rss, ToeplitzHashOfIpv6AddressesMatchesTheVerificationSuite) {
  // source 3ffe:2501:200:1fff::7, destination 3ffe:2501:200:3::1
  const std::array<std::uint8_t, 32> in = {0x3f, 0xfe, 0x25, 0x01, 0x02, 0x00, 0x1f, 0xff, 0, 0, 0, 0, 0, 0, 0, 7,
                                           0x3f, 0xfe, 0x25, 0x01, 0x02, 0x00, 0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 1};
  EXPECT_EQ(rss_hash(in), 0x2cc18cd5u);
  const IpAddr local = IpAddr::v6({0xfd, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
  Placement p;
  p.pinned.push_back({Net{2, 9}, local, 3, {}});
  std::array<int, 3> per_queue{};
  for (std::uint8_t a = 2; a < 200; ++a) {
    IpAddr peer = local;
    peer.bytes[15] = a;
    const std::uint32_t w = p.of(make_nid(Net{2, 9}, peer), 4);
    EXPECT_EQ(w, steer_queue(peer, local, 3));
    ++per_queue[w];
  }
  for (int n : per_queue) EXPECT_GT(n, 30);
}

// On a port with several queues a peer's worker is the queue its address
// hashes to, for every use of its NID; the queues share the peers.
TEST(Placement, PortPeersGoToTheQueueTheirAddressHashesTo) {
  constexpr std::uint32_t local = 0x0a000101;
  Placement p;
  p.pinned.push_back({Net{2, 9}, IpAddr::v4(local), 3, {}});
  std::array<int, 3> per_queue{};
  for (std::uint32_t a = 2; a < 200; ++a) {
    const Nid peer = Nid::make(Net{2, 9}, 0x0a000100 + a);
    const std::uint32_t w = p.of(peer, 4);
    ASSERT_LT(w, 3u);
    EXPECT_EQ(w, (rss_hash_ipv4(0x0a000100 + a, local) % kRssTableSpan) % 3);
    ++per_queue[w];
  }
  for (int n : per_queue) EXPECT_GT(n, 30);  // 198 peers: no queue is left idle
  // A redirection table of any multiple of the span, filled as a port
  // fills it (entry k: (k % span) % queues), sends a hash to the same queue.
  for (std::uint32_t size : {64u, 128u, 512u})
    for (std::uint32_t a = 2; a < 50; ++a) {
      const std::uint32_t h = rss_hash_ipv4(0x0a000100 + a, local);
      EXPECT_EQ((h % size) % kRssTableSpan % 3, steer_queue(0x0a000100 + a, local, 3));
    }
}

}  // namespace
}  // namespace lnetr
