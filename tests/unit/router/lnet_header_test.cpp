#include "router/lnet_header.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "tests/support/hex.hpp"
#include "tests/support/nid.hpp"

namespace lnetr {
namespace {

using test::hex;

using test::nid;

// lnet-header.md §7: PUT 192.168.1.20@tcp -> 10.0.0.5@o2ib, 8-byte payload,
// portal 4, match bits 0x12AB, ACK wanted with handle (0x1122334455667788, 0xABC).
const std::vector<std::uint8_t> kSpecPut = hex(
    "05 00 00 0a 00 00 05 00  14 01 a8 c0 00 00 02 00  39 30 00 00  39 30 00 00  01 00 00 00  08 00 00 00"
    "88 77 66 55 44 33 22 11  bc 0a 00 00 00 00 00 00  ab 12 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
    "04 00 00 00  00 00 00 00");

TEST(LnetHeader, SpecPutDecodes) {
  ASSERT_EQ(kSpecPut.size(), kLnetHeaderSize);
  auto h = decode_header(kSpecPut, HeaderForm::nid4);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->dest_nid, nid("10.0.0.5@o2ib"));
  EXPECT_EQ(h->src_nid, nid("192.168.1.20@tcp"));
  EXPECT_EQ(h->dest_pid, kPidLustre);
  EXPECT_EQ(h->src_pid, kPidLustre);
  EXPECT_EQ(h->type, MsgType::put);
  EXPECT_EQ(h->payload_length, 8u);
  const PutFields p = h->put();
  EXPECT_EQ(p.ack_wmd.interface_cookie, 0x1122334455667788ull);
  EXPECT_EQ(p.ack_wmd.object_cookie, 0xABCull);
  EXPECT_FALSE(p.ack_wmd.is_none());
  EXPECT_EQ(p.match_bits, 0x12ABull);
  EXPECT_EQ(p.hdr_data, 0u);
  EXPECT_EQ(p.ptl_index, 4u);
  EXPECT_EQ(p.offset, 0u);
  EXPECT_FALSE(check_header(*h));
}

TEST(LnetHeader, BuiltPutEncodesToSpecBytes) {
  LnetHeader h;
  h.dest_nid = nid("10.0.0.5@o2ib");
  h.src_nid = nid("192.168.1.20@tcp");
  h.payload_length = 8;
  h.set(PutFields{{0x1122334455667788ull, 0xABC}, 0x12AB, 0, 4, 0});
  std::vector<std::uint8_t> out(kLnetHeaderSize);
  auto n = encode_header(h, out, HeaderForm::nid4);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, kLnetHeaderSize);
  EXPECT_EQ(out, kSpecPut);
}

// v1 capture frame 12: lnetctl ping, GET 10.201.1.2@tcp -> 10.201.1.4@tcp.
const std::vector<std::uint8_t> kCapturedPing = hex(
    "04 01 c9 0a 00 00 02 00 02 01 c9 0a 00 00 02 00 39 30 00 00 39 30 00 00"
    "02 00 00 00 00 00 00 00 47 86 0b 80 cb 46 ea 18 11 1c 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 80 00 00 00 00 00 00 00 00 78 0f 00 00 00 00 00 00");

TEST(LnetHeader, CapturedPingGetRoundTrips) {
  auto h = decode_header(kCapturedPing, HeaderForm::nid4);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->type, MsgType::get);
  const GetFields g = h->get();
  EXPECT_EQ(g.return_wmd.interface_cookie, 0x18ea46cb800b8647ull);
  EXPECT_EQ(g.return_wmd.object_cookie, 0x1c11ull);
  EXPECT_EQ(g.match_bits, kPingMatchBits);
  EXPECT_EQ(g.ptl_index, kLnetReservedPortal);
  EXPECT_EQ(g.src_offset, 0u);
  EXPECT_EQ(g.sink_length, 3960u);
  std::vector<std::uint8_t> out(kLnetHeaderSize);
  ASSERT_TRUE(encode_header(*h, out, HeaderForm::nid4));
  EXPECT_EQ(out, kCapturedPing);
  // Rebuilding the union from the typed view gives the same bytes.
  LnetHeader rebuilt = *h;
  rebuilt.set(g);
  EXPECT_EQ(rebuilt, *h);
}

TEST(LnetHeader, AckAndReplyViews) {
  LnetHeader h;
  h.set(AckFields{{1, 2}, kPingMatchBits, 48});
  EXPECT_EQ(h.type, MsgType::ack);
  EXPECT_EQ(h.ack().mlength, 48u);
  EXPECT_EQ(h.ack().match_bits, kPingMatchBits);
  EXPECT_EQ(h.ack().dst_wmd, (WireHandle{1, 2}));
  h.set(ReplyFields{{3, 4}});
  EXPECT_EQ(h.type, MsgType::reply);
  EXPECT_EQ(h.reply().dst_wmd, (WireHandle{3, 4}));
  // Unused bytes of the union are zero, as Linux sends them.
  for (std::size_t i = 16; i < kLnetMsgPartSize; ++i) EXPECT_EQ(h.msg[i], 0) << i;
  h.set(HelloFields{0x1122334455667788ull, 3});
  EXPECT_EQ(h.hello().incarnation, 0x1122334455667788ull);
  EXPECT_EQ(h.hello().type, 3u);
}

TEST(LnetHeader, OpaqueUnionBytesSurviveRoundTrip) {
  // A router forwards the 40-byte union byte for byte, even its unused part.
  std::vector<std::uint8_t> in = kCapturedPing;
  in[68] = 0x5a;  // the unused word after sink_length
  auto h = decode_header(in, HeaderForm::nid4);
  ASSERT_TRUE(h);
  std::vector<std::uint8_t> out(kLnetHeaderSize);
  ASSERT_TRUE(encode_header(*h, out, HeaderForm::nid4));
  EXPECT_EQ(out, in);
}

TEST(LnetHeader, Nid16LayoutMatchesSpecOffsets) {
  LnetHeader h;
  h.dest_nid = nid("2001:db8::5@tcp");
  h.src_nid = nid("2001:db8::20@tcp");
  h.payload_length = 8;
  h.set(PutFields{{0x1122334455667788ull, 0xABC}, 0x12AB, 0x77, 4, 9});
  std::vector<std::uint8_t> out(kLnetHeader16Size, 0xee);
  ASSERT_EQ(*encode_header(h, out, HeaderForm::nid16), kLnetHeader16Size);
  EXPECT_EQ(out[0], 12);  // dest nid_size
  EXPECT_EQ(out[1], 2);   // socklnd
  EXPECT_EQ(out[19], 5);  // last address byte of dest
  EXPECT_EQ(out[39], 0x20);
  EXPECT_EQ(load_le<std::uint32_t>(&out[40]), kPidLustre);
  EXPECT_EQ(load_le<std::uint32_t>(&out[48]), 1u);  // PUT
  EXPECT_EQ(load_le<std::uint32_t>(&out[52]), 8u);
  EXPECT_EQ(load_le<std::uint64_t>(&out[56]), 0x1122334455667788ull);
  EXPECT_EQ(load_le<std::uint64_t>(&out[72]), 0x12ABull);
  EXPECT_EQ(load_le<std::uint64_t>(&out[80]), 0x77ull);
  EXPECT_EQ(load_le<std::uint32_t>(&out[88]), 4u);
  EXPECT_EQ(load_le<std::uint32_t>(&out[92]), 9u);
  auto back = decode_header(out, HeaderForm::nid16);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, h);
}

TEST(LnetHeader, ConversionBetweenFormsKeepsEverything) {
  auto h = decode_header(kSpecPut, HeaderForm::nid4);
  ASSERT_TRUE(h);
  std::vector<std::uint8_t> wide(kLnetHeader16Size);
  ASSERT_TRUE(encode_header(*h, wide, HeaderForm::nid16));
  auto h16 = decode_header(wide, HeaderForm::nid16);
  ASSERT_TRUE(h16);
  std::vector<std::uint8_t> narrow(kLnetHeaderSize);
  ASSERT_TRUE(encode_header(*h16, narrow, HeaderForm::nid4));
  EXPECT_EQ(narrow, kSpecPut);
}

TEST(LnetHeader, LargeNidDoesNotFitNid4) {
  LnetHeader h;
  h.dest_nid = nid("2001:db8::5@tcp");
  h.src_nid = nid("10.0.0.1@tcp");
  std::vector<std::uint8_t> out(kLnetHeaderSize);
  EXPECT_EQ(encode_header(h, out, HeaderForm::nid4).error(), WireError::bad_nid);
}

TEST(LnetHeader, DecoderRefusesBadInput) {
  for (std::size_t n = 0; n < kLnetHeaderSize; ++n)
    EXPECT_EQ(decode_header(ByteSpan(kSpecPut).first(n), HeaderForm::nid4).error(), WireError::truncated) << n;
  EXPECT_EQ(decode_header(kSpecPut, HeaderForm::nid16).error(), WireError::truncated);
  std::vector<std::uint8_t> bad = kSpecPut;
  bad[24] = 5;  // type 5 does not exist
  EXPECT_EQ(decode_header(bad, HeaderForm::nid4).error(), WireError::bad_type);
  bad = kSpecPut;
  bad[7] = 1;  // top byte of dest_nid set
  EXPECT_EQ(decode_header(bad, HeaderForm::nid4).error(), WireError::bad_nid);
  std::vector<std::uint8_t> wide(kLnetHeader16Size, 0);
  wide[0] = 13;  // nid_size beyond 16 address bytes
  EXPECT_EQ(decode_header(wide, HeaderForm::nid16).error(), WireError::bad_nid);
}

TEST(LnetHeader, ChecksFollowLnetParse) {
  LnetHeader h;
  h.set(GetFields{});
  EXPECT_FALSE(check_header(h));
  h.payload_length = 1;
  EXPECT_EQ(check_header(h), WireError::bad_length);
  h.set(AckFields{});
  EXPECT_EQ(check_header(h), WireError::bad_length);
  h.set(PutFields{});
  h.payload_length = kLnetMtu;
  EXPECT_FALSE(check_header(h));
  h.payload_length = kLnetMtu + 1;
  EXPECT_EQ(check_header(h), WireError::bad_length);
  h.set(ReplyFields{});
  EXPECT_EQ(check_header(h), WireError::bad_length);
  h.set(HelloFields{});
  h.payload_length = 0;
  EXPECT_EQ(check_header(h), WireError::bad_type);
}

TEST(LnetHeader, TypeNames) {
  EXPECT_STREQ(to_string(MsgType::ack), "ACK");
  EXPECT_STREQ(to_string(MsgType::reply), "REPLY");
  EXPECT_STREQ(to_string(static_cast<MsgType>(9)), "?");
}

}  // namespace
}  // namespace lnetr
