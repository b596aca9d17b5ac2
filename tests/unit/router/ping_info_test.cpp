#include "router/ping_info.hpp"

#include "router/lnet_header.hpp"

#include <gtest/gtest.h>

#include <iterator>
#include <vector>

#include "tests/support/hex.hpp"
#include "tests/support/nid.hpp"

namespace lnetr {
namespace {

using test::hex;

using test::nid;

std::vector<PingNi> nis_of(const PingInfo& pi) { return {pi.begin(), pi.end()}; }

// ping-discovery-health.md §2.7: router 192.168.1.10@tcp + 10.0.0.1@o2ib,
// features 0x1A, sequence 7.
const std::vector<std::uint8_t> kSpecRouter = hex(
    "67 6e 69 70 1a 00 00 00 39 30 00 00 03 00 00 00"
    "00 00 00 00 00 00 09 00 07 00 00 00 00 00 00 00"
    "0a 01 a8 c0 00 00 02 00 de c0 aa 15 00 00 00 00"
    "01 00 00 0a 00 00 05 00 de c0 aa 15 00 00 00 00");

// v2 capture, A side frame 31: the kernel router's first reply, tcp1 still DOWN.
const std::vector<std::uint8_t> kCapturedRouterTcp1Down = hex(
    "67 6e 69 70 1a 00 00 00 39 30 00 00 03 00 00 00"
    "00 00 00 00 00 00 09 00 03 00 00 00 00 00 00 00"
    "03 01 c9 0a 00 00 02 00 de c0 aa 15 00 00 00 00"
    "03 02 c9 0a 01 00 02 00 ce fa ad de 00 00 00 00");

TEST(PingInfo, SpecExampleDecodes) {
  auto pi = decode_ping_info(kSpecRouter);
  ASSERT_TRUE(pi);
  EXPECT_EQ(pi->order, ByteOrder::little);
  EXPECT_EQ(pi->features, ping_feature::ni_status | ping_feature::multi_rail | ping_feature::discovery);
  EXPECT_EQ(pi->pid, kPidLustre);
  EXPECT_EQ(pi->nnis, 3u);
  EXPECT_EQ(pi->sequence, 7u);
  EXPECT_EQ(pi->wire_size(), kSpecRouter.size());
  ASSERT_EQ(pi->ni_count(), 2u);
  EXPECT_EQ(nis_of(*pi), (std::vector<PingNi>{{nid("192.168.1.10@tcp"), kNiStatusUp}, {nid("10.0.0.1@o2ib"), kNiStatusUp}}));
}

TEST(PingInfo, SpecExampleEncodes) {
  const PingNi nis[] = {{nid("192.168.1.10@tcp"), kNiStatusUp}, {nid("10.0.0.1@o2ib"), kNiStatusUp}};
  PingInfoSpec spec{0x1a, kPidLustre, 7, nis};
  EXPECT_EQ(ping_info_encoded_size(spec), kSpecRouter.size());
  std::vector<std::uint8_t> out(kSpecRouter.size());
  auto n = encode_ping_info(spec, out, ByteOrder::little);
  ASSERT_TRUE(n);
  EXPECT_EQ(out, kSpecRouter);
}

TEST(PingInfo, CapturedDownStatusRoundTrips) {
  auto pi = decode_ping_info(kCapturedRouterTcp1Down);
  ASSERT_TRUE(pi);
  const std::vector<PingNi> nis = nis_of(*pi);
  ASSERT_EQ(nis.size(), 2u);
  EXPECT_EQ(nis[0].status, kNiStatusUp);
  EXPECT_EQ(nis[1], (PingNi{nid("10.201.2.3@tcp1"), kNiStatusDown}));
  std::vector<std::uint8_t> out(kCapturedRouterTcp1Down.size());
  ASSERT_TRUE(encode_ping_info({pi->features, pi->pid, pi->sequence, nis}, out, pi->order));
  EXPECT_EQ(out, kCapturedRouterTcp1Down);
}

TEST(PingInfo, BigEndianSenderIsDetected) {
  const PingNi nis[] = {{nid("192.168.1.10@tcp"), kNiStatusDown}};
  std::vector<std::uint8_t> out(48);
  ASSERT_TRUE(encode_ping_info({0x1e, kPidLustre, 9, nis}, out, ByteOrder::big));
  EXPECT_EQ(out[0], 0x70);  // 'p' first: magic written big-endian
  auto pi = decode_ping_info(out);
  ASSERT_TRUE(pi);
  EXPECT_EQ(pi->order, ByteOrder::big);
  EXPECT_EQ(pi->features, 0x1eu);
  EXPECT_EQ(pi->sequence, 9u);
  EXPECT_EQ(nis_of(*pi), std::vector<PingNi>(std::begin(nis), std::end(nis)));
}

TEST(PingInfo, LargeAddressesFollowNid4Entries) {
  const PingNi nis[] = {{nid("10.0.0.1@tcp"), kNiStatusUp},
                        {nid("2001:db8::1@tcp1"), kNiStatusDown},
                        {nid("10.0.0.2@o2ib"), kNiStatusUp}};
  PingInfoSpec spec{ping_feature::ni_status | ping_feature::multi_rail, kPidLustre, 2, nis};
  const std::size_t size = 16 + 3 * 16 + 24;  // header, lo + 2 nid4 entries, one IPv6 entry
  ASSERT_EQ(ping_info_encoded_size(spec), size);
  std::vector<std::uint8_t> out(size);
  ASSERT_TRUE(encode_ping_info(spec, out));
  auto pi = decode_ping_info(out);
  ASSERT_TRUE(pi);
  EXPECT_TRUE(pi->features & ping_feature::large_addr);
  EXPECT_FALSE(pi->features & ping_feature::primary_large);
  EXPECT_EQ(pi->nnis, 3u);  // large entries are not counted
  EXPECT_EQ(pi->msg_size, size);
  ASSERT_EQ(pi->ni_count(), 3u);
  EXPECT_EQ(nis_of(*pi), (std::vector<PingNi>{nis[0], nis[2], nis[1]}));
  // The large entry: status, then the 20 significant NID bytes.
  EXPECT_EQ(load<std::uint32_t>(&out[64], kNativeOrder), kNiStatusDown);
  EXPECT_EQ(out[68], 12);  // nid_size
}

TEST(PingInfo, LargePrimaryIsFlagged) {
  const PingNi nis[] = {{nid("2001:db8::1@tcp"), kNiStatusUp}, {nid("10.0.0.1@tcp"), kNiStatusUp}};
  std::vector<std::uint8_t> out(ping_info_encoded_size({0x02, kPidLustre, 1, nis}));
  ASSERT_TRUE(encode_ping_info({0x02, kPidLustre, 1, nis}, out));
  auto pi = decode_ping_info(out);
  ASSERT_TRUE(pi);
  EXPECT_TRUE(pi->features & ping_feature::primary_large);
}

TEST(PingInfo, LayoutBitsAreDerivedFromTheNis) {
  // A caller's stale LARGE_ADDR must not claim large entries that are not
  // there (the fuzzer found that buffer failing to decode).
  const PingNi nis[] = {{nid("10.0.0.1@tcp"), kNiStatusUp}};
  std::vector<std::uint8_t> out(48);
  ASSERT_TRUE(encode_ping_info({0xff, kPidLustre, 1, nis}, out));
  auto pi = decode_ping_info(out);
  ASSERT_TRUE(pi);
  EXPECT_EQ(pi->features, 0xffu & ~(ping_feature::large_addr | ping_feature::primary_large));
  EXPECT_EQ(pi->msg_size, 0u);
}

TEST(PingInfo, TruncatedReplyTellsTheNeededSize) {
  // A requester that offered too small a sink gets a cut reply; it must learn
  // the full size to retry.
  const ByteSpan cut = ByteSpan(kSpecRouter).first(40);
  EXPECT_EQ(decode_ping_info(cut).error(), WireError::truncated);
  auto need = ping_info_size(cut);
  ASSERT_TRUE(need);
  EXPECT_EQ(*need, kSpecRouter.size());
}

TEST(PingInfo, ValidationFollowsLinux) {
  std::vector<std::uint8_t> b = kSpecRouter;
  b[0] = 0x66;
  EXPECT_EQ(decode_ping_info(b).error(), WireError::bad_magic);
  b = kSpecRouter;
  b[4] = 0x18;  // NI_STATUS missing
  EXPECT_EQ(decode_ping_info(b).error(), WireError::bad_value);
  b = kSpecRouter;
  b[12] = 0;  // nnis 0
  EXPECT_EQ(decode_ping_info(b).error(), WireError::bad_length);
  b = kSpecRouter;
  store_le<std::uint32_t>(&b[12], kPingMaxNis + 1);
  EXPECT_EQ(decode_ping_info(b).error(), WireError::bad_length);
  b = kSpecRouter;
  b[22] = 2;  // entry 0 is not 0@lo
  EXPECT_EQ(decode_ping_info(b).error(), WireError::bad_value);
  b = kSpecRouter;
  b[4] |= ping_feature::large_addr;  // claims large entries, total size 0 < nid4 part
  EXPECT_EQ(decode_ping_info(b).error(), WireError::bad_length);
  for (std::size_t n = 0; n < kSpecRouter.size(); ++n)
    EXPECT_FALSE(decode_ping_info(ByteSpan(kSpecRouter).first(n))) << n;
}

TEST(PingInfo, LargeEntriesAreWalkedAsLinuxWalksThem) {
  // A nid4-sized NID in the large part takes a nid4 entry's 16 bytes; an
  // IPv6 one 24.  Linux reads both NIs from this buffer.
  const std::vector<std::uint8_t> b = hex(
      "67 6e 69 70 3a 00 00 00 39 30 00 00 01 00 00 00  00 00 00 00 00 00 09 00 01 00 00 00 48 00 00 00"
      "de c0 aa 15 00 02 00 00 0a 00 00 01 00 00 00 00  de c0 aa 15 0c 02 00 00 20 01 0d b8 00 00 00 00"
      "00 00 00 00 00 00 00 01");
  auto pi = decode_ping_info(b);
  ASSERT_TRUE(pi);
  EXPECT_EQ(nis_of(*pi), (std::vector<PingNi>{{nid("10.0.0.1@tcp"), kNiStatusUp}, {nid("2001:db8::1@tcp"), kNiStatusUp}}));
  EXPECT_EQ(pi->ni_count(), 2u);
}

TEST(PingInfo, UnusableLargeEntriesAreSkipped) {
  // Linux skips an entry whose NID claims more than 20 bytes (here 21: a
  // 28-byte entry) and reads on; the wildcard names no NI either.
  const std::vector<std::uint8_t> b = hex(
      "67 6e 69 70 22 00 00 00 39 30 00 00 01 00 00 00  00 00 00 00 00 00 09 00 01 00 00 00 6c 00 00 00"
      "de c0 aa 15 0d 02 00 00 01 02 03 04 05 06 07 08  09 0a 0b 0c 0d 0e 0f 10 11 00 00 00"
      "de c0 aa 15 ff ff ff ff ff ff ff ff ff ff ff ff  ff ff ff ff ff ff ff ff"
      "ce fa ad de 0c 02 00 00 20 01 0d b8 00 00 00 00  00 00 00 00 00 00 00 02");
  auto pi = decode_ping_info(b);
  ASSERT_TRUE(pi);
  EXPECT_EQ(pi->wire_size(), b.size());
  EXPECT_EQ(nis_of(*pi), (std::vector<PingNi>{{nid("2001:db8::2@tcp"), kNiStatusDown}}));
  EXPECT_EQ(pi->ni_count(), 1u);
}

TEST(PingInfo, MalformedLayoutsAreRefused) {
  const PingNi nis[] = {{nid("2001:db8::1@tcp"), kNiStatusUp}};
  std::vector<std::uint8_t> good(ping_info_encoded_size({0x02, kPidLustre, 1, nis}));
  ASSERT_TRUE(encode_ping_info({0x02, kPidLustre, 1, nis}, good));
  std::vector<std::uint8_t> b = good;
  store<std::uint32_t>(&b[28], 40, kNativeOrder);  // total size ends inside the entry
  EXPECT_EQ(decode_ping_info(b).error(), WireError::bad_length);
  b = kSpecRouter;
  b[32 + 7] = 0xff;  // an NI listed as the wildcard
  b[32 + 6] = 0xff;
  EXPECT_EQ(decode_ping_info(b).error(), WireError::bad_nid);
}

TEST(PingInfo, ClaimedSizeIsNotTrusted) {
  // A 32-byte reply claiming a 4 GiB buffer must not make the requester
  // allocate one for its retry.
  std::vector<std::uint8_t> b(kSpecRouter.begin(), kSpecRouter.begin() + 32);
  b[4] |= ping_feature::large_addr;
  store_le<std::uint32_t>(&b[28], 0xfffffffc);
  EXPECT_EQ(ping_info_size(b).error(), WireError::bad_length);
  store_le<std::uint32_t>(&b[28], kLnetMtu);
  EXPECT_EQ(*ping_info_size(b), kLnetMtu);
}

TEST(PingInfo, EncoderNeedsRoom) {
  const PingNi nis[] = {{nid("10.0.0.1@tcp"), kNiStatusUp}};
  std::vector<std::uint8_t> out(47);
  EXPECT_EQ(encode_ping_info({0x02, kPidLustre, 1, nis}, out).error(), WireError::truncated);
}

}  // namespace
}  // namespace lnetr
