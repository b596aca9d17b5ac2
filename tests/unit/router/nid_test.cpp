#include "router/nid.hpp"
#include "router/nid_cache.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

namespace lnetr {
namespace {

Nid parse_ok(std::string_view s) {
  auto r = parse_nid(s);
  EXPECT_TRUE(r.has_value()) << s << ": " << (r ? "" : r.error().reason);
  return r ? *r : Nid{};
}

// nid.md §2: string, 64-bit value.
struct Nid4Case {
  const char* text;
  std::uint64_t value;
};

class Nid4Examples : public ::testing::TestWithParam<Nid4Case> {};

TEST_P(Nid4Examples, ParseFormatAndValueAgree) {
  const auto& c = GetParam();
  const Nid n = parse_ok(c.text);
  EXPECT_TRUE(n.is_nid4());
  EXPECT_EQ(n.to_nid4(), c.value);
  EXPECT_EQ(Nid::from_nid4(c.value), n);
  EXPECT_EQ(to_string(n), c.text);
}

INSTANTIATE_TEST_SUITE_P(Spec, Nid4Examples,
                         ::testing::Values(Nid4Case{"192.168.1.10@tcp", 0x00020000C0A8010Aull},
                                           Nid4Case{"10.0.0.1@o2ib1", 0x000500010A000001ull},
                                           Nid4Case{"0@lo", 0x0009000000000000ull},
                                           Nid4Case{"5@gni", 0x000D000000000005ull},
                                           Nid4Case{"12@kfi", 0x001000000000000Cull},
                                           Nid4Case{"10.201.1.2@tcp1", 0x000200010ac90102ull},
                                           Nid4Case{"7@ptlf3", 0x000F000300000007ull},
                                           Nid4Case{"9@bxi3f", 0x0013000000000009ull},
                                           Nid4Case{"1.2.3.4@gip", 0x000E000001020304ull},
                                           Nid4Case{"1.2.3.4@efa2", 0x0012000201020304ull}));

TEST(Nid, NetNumberZeroIsTheBareName) {
  EXPECT_EQ(parse_ok("192.168.1.10@tcp0"), parse_ok("192.168.1.10@tcp"));
  EXPECT_EQ(to_string(parse_ok("10.0.0.1@o2ib0")), "10.0.0.1@o2ib");
  EXPECT_EQ(parse_ok("10.0.0.1@o2ib3").net(), (Net{5, 3}));
}

TEST(Nid, NoNetMeansTcp) {
  EXPECT_EQ(parse_ok("10.1.2.3"), parse_ok("10.1.2.3@tcp"));
}

TEST(Nid, WildcardParsesAndPrints) {
  const Nid any = parse_ok("<?>");
  EXPECT_TRUE(any.is_any());
  EXPECT_EQ(to_string(any), "<?>");
  EXPECT_EQ(any.to_nid4(), kNid4Any);
  EXPECT_EQ(Nid::from_nid4(kNid4Any), Nid::any());
}

TEST(Nid, NumericAddressesAcceptHex) {
  EXPECT_EQ(parse_ok("0x1f@gni").addr4(), 31u);
  EXPECT_EQ(parse_ok("0X10@kfi").addr4(), 16u);
  EXPECT_EQ(parse_ok("4294967295@kfi").addr4(), 0xffffffffu);
}

TEST(Nid, Ipv6AddressIsLargeForm) {
  const Nid n = parse_ok("2001:db8::1@tcp");
  EXPECT_FALSE(n.is_nid4());
  EXPECT_EQ(n.size, 12);
  EXPECT_EQ(to_string(n), "2001:db8::1@tcp");
  // nid.md §3 example bytes.
  std::uint8_t wire[20];
  encode_nid20(n, wire);
  const std::uint8_t expect[20] = {0x0c, 0x02, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
  EXPECT_EQ(0, std::memcmp(wire, expect, 20));
  auto back = decode_nid20(wire);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, n);
}

TEST(Nid, Ipv4LargeFormIsTheBigEndianNid4) {
  const Nid n = parse_ok("192.168.1.10@tcp");
  std::uint8_t wire[20];
  encode_nid20(n, wire);
  const std::uint8_t expect[20] = {0, 2, 0, 0, 0xc0, 0xa8, 0x01, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(0, std::memcmp(wire, expect, 20));
  // nid_size == 0: the first 8 bytes are the big-endian nid4.
  EXPECT_EQ(load_be<std::uint64_t>(wire), n.to_nid4());
}

TEST(Nid, Decode20RejectsMalformed) {
  std::uint8_t wire[20] = {13, 2};  // address larger than 16 bytes
  EXPECT_EQ(decode_nid20(wire).error(), WireError::bad_nid);
  std::uint8_t dirty[20] = {0, 2, 0, 0, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7};  // junk past a 4-byte address
  EXPECT_EQ(decode_nid20(dirty).error(), WireError::bad_nid);
  std::uint8_t any[20];
  encode_nid20(Nid::any(), any);
  ASSERT_TRUE(decode_nid20(any));
  EXPECT_TRUE(decode_nid20(any)->is_any());
}

TEST(Nid, WildcardIsKnownByItsType) {
  // LNet ignores every other field of a type-0xff NID; only the canonical
  // form is accepted, so decoding stays lossless.
  std::uint8_t bytes[20];
  encode_nid20(Nid::any(), bytes);
  EXPECT_EQ(bytes[1], 0xff);
  EXPECT_TRUE(decode_nid20(bytes)->is_any());
  std::uint8_t odd_any[20] = {0, 0xff};
  EXPECT_EQ(decode_nid20(odd_any).error(), WireError::bad_nid);
  std::uint8_t huge[20] = {0xff, 2};  // a 259-byte address, not the wildcard
  EXPECT_EQ(decode_nid20(huge).error(), WireError::bad_nid);
  EXPECT_EQ(decode_nid8(0x00ff00000a000001ull).error(), WireError::bad_nid);
  Nid n = Nid::any();
  EXPECT_TRUE(n.is_any() && n.fits_nid4());
}

TEST(Nid, Decode8RejectsTopByte) {
  EXPECT_EQ(decode_nid8(0x0102000000000001ull).error(), WireError::bad_nid);
  ASSERT_TRUE(decode_nid8(0x00020000C0A8010Aull));
  EXPECT_TRUE(decode_nid8(kNid4Any)->is_any());
}

TEST(Nid, UnknownTypesPrintNumerically) {
  EXPECT_EQ(to_string(Nid::from_nid4(0x006300000a000001ull)), "a000001@<99:0>");
  EXPECT_EQ(to_string(Net{17, 4}), "<17:4>");
}

TEST(Nid, ComparesLikeTheWireForm) {
  // Connection races are won by the higher NID: type, then net, then address.
  EXPECT_LT(parse_ok("10.201.1.1@tcp"), parse_ok("10.201.1.2@tcp"));
  EXPECT_LT(parse_ok("10.201.1.9@tcp"), parse_ok("10.201.1.2@tcp1"));
  EXPECT_LT(parse_ok("99.0.0.0@tcp"), parse_ok("1.0.0.0@o2ib"));
  EXPECT_LT(parse_ok("255.255.255.255@tcp"), parse_ok("2001:db8::1@tcp"));  // nid4 before large
}

TEST(Nid, HashSeparatesNids) {
  std::unordered_set<Nid> set{parse_ok("10.0.0.1@tcp"), parse_ok("10.0.0.1@tcp1"), parse_ok("10.0.0.1@o2ib")};
  EXPECT_EQ(set.size(), 3u);
  EXPECT_EQ(set.count(parse_ok("10.0.0.1@tcp1")), 1u);
}

TEST(Nid, RejectsMalformedStrings) {
  for (const char* bad : {"", "@tcp", "10.0.0.1@", "10.0.0.1@tcpx", "10.0.0.1@foo", "10.0.0.256@tcp",
                          "10.0.0@tcp", "10.0.0.1.5@tcp", "10.0.0.-1@tcp", "1 0.0.0.1@tcp", "10.0.0.1 @tcp",
                          "0@lo1", "abc@gni", "0x@gni", "0x100000000@kfi", "10.0.0.1@tcp65536",
                          "10.0.0.1@tcp-1", "::1@tcp", "fe80::1@tcp", "2001:db8::zz@tcp", "host.example@tcp"}) {
    EXPECT_FALSE(parse_nid(bad).has_value()) << bad;
  }
  using namespace std::string_view_literals;
  EXPECT_FALSE(parse_nid("2001:db8::1\0junk@tcp"sv));  // inet_pton would stop at the NUL
}

TEST(Nid, ParseErrorsSayWhatWasExpected) {
  auto r = parse_nid("10.0.0.1@tcpx");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().pos, 12u);  // the "x" after "tcp"
  EXPECT_NE(std::string(r.error().reason).find("number"), std::string::npos);
  r = parse_nid("10.0.0.300@o2ib");
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.error().reason).find("IPv4"), std::string::npos);
}

TEST(Net, ParsesNamesAndNumbers) {
  EXPECT_EQ(*parse_net("tcp"), (Net{2, 0}));
  EXPECT_EQ(*parse_net("tcp0"), (Net{2, 0}));
  EXPECT_EQ(*parse_net("o2ib3"), (Net{5, 3}));
  EXPECT_EQ(*parse_net("lo"), (Net{9, 0}));
  EXPECT_EQ(*parse_net("bxi3f2"), (Net{19, 2}));
  EXPECT_FALSE(parse_net("lo0"));
  EXPECT_FALSE(parse_net("ib0"));
  EXPECT_EQ(to_string(*parse_net("o2ib3")), "o2ib3");
  EXPECT_EQ(Net::from_u32(0x00050003).to_u32(), 0x00050003u);
}

TEST(ProcessId, ParsesAndFormats) {
  auto id = parse_process_id("12345-192.168.1.10@tcp");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pid, kPidLustre);
  EXPECT_EQ(to_string(*id), "12345-192.168.1.10@tcp");
  auto dflt = parse_process_id("10.0.0.5@o2ib");
  ASSERT_TRUE(dflt);
  EXPECT_EQ(dflt->pid, kPidLustre);
  auto user = parse_process_id("U40000-10.201.1.1@tcp");
  ASSERT_TRUE(user);
  EXPECT_EQ(user->pid, 40000u | kPidUserFlag);
  EXPECT_EQ(to_string(*user), "U40000-10.201.1.1@tcp");
  EXPECT_EQ(to_string(ProcessId{kPidAny, Nid::any()}), "LNET_PID_ANY-<?>");
  auto any = parse_process_id("LNET_PID_ANY-10.0.0.1@tcp");
  ASSERT_TRUE(any);
  EXPECT_EQ(any->pid, kPidAny);
  EXPECT_FALSE(parse_process_id("U2147483647-10.0.0.1@tcp"));  // would be LNET_PID_ANY
  EXPECT_FALSE(parse_process_id("x-10.0.0.1@tcp"));
  EXPECT_FALSE(parse_process_id("3000000000-10.0.0.1@tcp"));
}

}  // namespace
}  // namespace lnetr

namespace lnetr {
namespace {

// The hash of unordered maps keyed by NID: equal NIDs hash alike, and the
// NIDs of a cluster (consecutive addresses, several nets, large NIDs) get
// distinct hashes spread over a small table's buckets.
TEST(NidHash, DistinctAndSpread) {
  const std::hash<Nid> h;
  EXPECT_EQ(h(Nid::make(Net{2, 1}, 0x0a000001)), h(Nid::make(Net{2, 1}, 0x0a000001)));
  std::unordered_set<std::size_t> seen;
  std::array<int, 61> buckets{};
  std::array<int, 64> low{};  // a power-of-two table indexes by the low bits
  int n = 0;
  for (std::uint16_t net : {std::uint16_t{0}, std::uint16_t{1}, std::uint16_t{7}})
    for (std::uint32_t a = 1; a <= 1000; ++a) {
      const std::size_t v = h(Nid::make(Net{2, net}, 0x0a000000 + a));
      seen.insert(v);
      ++buckets[v % buckets.size()];
      ++low[v % low.size()];
      ++n;
    }
  for (std::uint32_t a = 1; a <= 500; ++a) {  // IPv6 NIDs differing in the last byte
    auto nid = parse_nid("2001:db8::1@tcp");
    ASSERT_TRUE(nid.has_value());
    Nid v = nid.value();
    v.addr[15] = static_cast<std::uint8_t>(a);
    v.addr[14] = static_cast<std::uint8_t>(a >> 8);
    seen.insert(h(v));
    ++buckets[h(v) % buckets.size()];
    ++low[h(v) % low.size()];
    ++n;
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(n));
  for (int b : buckets) {  // about 57 each
    EXPECT_GT(b, 25);
    EXPECT_LT(b, 100);
  }
  for (int b : low) {  // about 55 each
    EXPECT_GT(b, 25);
    EXPECT_LT(b, 100);
  }
}

// The cache in front of a NID table: it answers only for the NID an entry
// was put under, a colliding NID evicts it (and the table answers), and a
// forgotten entry is gone.  256 NIDs of one net through 16 slots: whatever
// it returns is right.
TEST(NidCache, AnswersOnlyForTheNidItHoldsAndForgets) {
  NidCache<int> cache;
  std::vector<Nid> nids;
  std::vector<int> values(256);
  for (int i = 0; i < 256; ++i) nids.push_back(parse_ok("10.0." + std::to_string(i / 16) + "." + std::to_string(i) + "@tcp"));
  const Nid other_net = parse_ok("10.0.0.0@tcp1");
  EXPECT_EQ(cache.find(nids[0]), nullptr);
  cache.put(nids[0], &values[0]);
  EXPECT_EQ(cache.find(nids[0]), &values[0]);
  EXPECT_EQ(cache.find(other_net), nullptr);
  std::size_t hits = 0;
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < 256; ++i) {
      if (int* v = cache.find(nids[i])) {
        EXPECT_EQ(v, &values[i]) << i;
        ++hits;
      } else {
        cache.put(nids[i], &values[i]);
      }
      EXPECT_EQ(cache.find(nids[i]), &values[i]);
    }
  EXPECT_LT(hits, 256u);  // 16 slots cannot hold 256 NIDs
  cache.forget(nids[255]);
  EXPECT_EQ(cache.find(nids[255]), nullptr);
  // Forgetting any other NID, those sharing its slot included (256 NIDs
  // in 16 slots), leaves an entry be.
  cache.put(nids[7], &values[7]);
  cache.forget(other_net);
  for (int i = 0; i < 256; ++i)
    if (i != 7) cache.forget(nids[i]);
  EXPECT_EQ(cache.find(nids[7]), &values[7]);
}

}  // namespace
}  // namespace lnetr
