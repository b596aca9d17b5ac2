#include "router/local_msgs.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "tests/support/hex.hpp"
#include "tests/support/nid.hpp"

namespace lnetr {
namespace {

using test::hex;
using Bytes = std::vector<std::uint8_t>;

using test::nid;
const Nid kP = nid("10.201.1.2@tcp");
const Nid kQ = nid("10.201.1.4@tcp");

Bytes encode(const LnetHeader& h) {
  Bytes b(kLnetHeaderSize);
  EXPECT_TRUE(encode_header(h, b, HeaderForm::nid4));
  return b;
}

// v1 capture frame 12: P's lnetctl ping of Q.
const Bytes kPingGet = hex(
    "04 01 c9 0a 00 00 02 00 02 01 c9 0a 00 00 02 00 39 30 00 00 39 30 00 00"
    "02 00 00 00 00 00 00 00 47 86 0b 80 cb 46 ea 18 11 1c 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 80 00 00 00 00 00 00 00 00 78 0f 00 00 00 00 00 00");
// Frame 18: Q's REPLY header (48 bytes of ping info follow).
const Bytes kPingReply = hex(
    "02 01 c9 0a 00 00 02 00 04 01 c9 0a 00 00 02 00 39 30 00 00 39 30 00 00"
    "03 00 00 00 30 00 00 00 47 86 0b 80 cb 46 ea 18 11 1c 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00");
// Frame 38: P's ACK of Q's push (frame 37).
const Bytes kPushAck = hex(
    "04 01 c9 0a 00 00 02 00 02 01 c9 0a 00 00 02 00 39 30 00 00 39 30 00 00"
    "00 00 00 00 00 00 00 00 33 05 96 7f cb 46 ea 18 15 1c 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 80 30 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00");

TEST(LocalMsgs, PingReplyMatchesTheKernelsBytes) {
  const LnetHeader get = *decode_header(kPingGet, HeaderForm::nid4);
  ASSERT_TRUE(is_ping(get));
  EXPECT_FALSE(is_push(get));
  EXPECT_EQ(encode(make_reply(get, kQ, 48)), kPingReply);
}

TEST(LocalMsgs, PushAckMatchesTheKernelsBytes) {
  // Q's push as frame 37 carried it: the ACK echoes its handle and match bits.
  const LnetHeader push = make_put({kPidLustre, kQ}, {kPidLustre, kP}, kLnetReservedPortal, kPingMatchBits,
                                   {0x18ea46cb7f960533ull, 0x1c15}, 0, 48);
  ASSERT_TRUE(is_push(push));
  EXPECT_FALSE(is_ping(push));
  EXPECT_EQ(encode(make_ack(push, kP, 48)), kPushAck);
}

TEST(LocalMsgs, GetCarriesItsSink) {
  const LnetHeader g = make_get({kPidLustre, kP}, {kPidLustre, kQ}, kLnetReservedPortal, kPingMatchBits,
                                {0x18ea46cb800b8647ull, 0x1c11}, kPingSinkLnetctl);
  EXPECT_EQ(encode(g), kPingGet);
}

TEST(LocalMsgs, PingPayloadHonoursOffsetAndSink) {
  const Bytes info = hex("00 01 02 03 04 05 06 07 08 09");
  LnetHeader g = make_get({kPidLustre, kP}, {kPidLustre, kQ}, 0, kPingMatchBits, {}, 4, 3);
  EXPECT_EQ(Bytes(ping_reply_payload(g, info).begin(), ping_reply_payload(g, info).end()), hex("03 04 05 06"));
  g = make_get({kPidLustre, kP}, {kPidLustre, kQ}, 0, kPingMatchBits, {}, 100, 8);
  EXPECT_EQ(ping_reply_payload(g, info).size(), 2u);
  g = make_get({kPidLustre, kP}, {kPidLustre, kQ}, 0, kPingMatchBits, {}, 100, 50);  // past the end
  EXPECT_TRUE(ping_reply_payload(g, info).empty());
}

TEST(LocalMsgs, OtherPortalsAreNotPingOrPush) {
  EXPECT_FALSE(is_ping(make_get({kPidLustre, kP}, {kPidLustre, kQ}, 4, kPingMatchBits, {}, 272)));
  EXPECT_FALSE(is_ping(make_get({kPidLustre, kP}, {kPidLustre, kQ}, 0, 1, {}, 272)));
  EXPECT_FALSE(is_push(make_put({kPidLustre, kP}, {kPidLustre, kQ}, 52, kPingMatchBits, {}, 0, 48)));
}

}  // namespace
}  // namespace lnetr
