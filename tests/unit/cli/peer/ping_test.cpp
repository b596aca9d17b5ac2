// lnetr-peer's own ping info is the one a kernel node with routing off sends
// (v1 capture, frame 18: features 0x1e, pid 12345, 0@lo with the sequence,
// then the NI UP), and the lnetctl-shaped YAML of ping results.
#include "cli/peer/ping.hpp"

#include <gtest/gtest.h>

#include "cli/peer/report.hpp"
#include "router/local_msgs.hpp"
#include "tests/support/hex.hpp"
#include "tests/support/nid.hpp"

namespace lnetr::peer {
namespace {

using test::hex;

using test::nid;

TEST(OwnPingInfo, KernelNodeBytes) {
  // Q's ping info in v1 frame 18, with our sequence number (1 instead of 3).
  const auto want = hex(
      "67 6e 69 70 1e 00 00 00 39 30 00 00 02 00 00 00"
      "00 00 00 00 00 00 09 00 01 00 00 00 00 00 00 00"
      "04 01 c9 0a 00 00 02 00 de c0 aa 15 00 00 00 00");
  const auto got = own_ping_info(nid("10.201.1.4@tcp"));
  if constexpr (kNativeOrder == ByteOrder::little) {
    EXPECT_EQ(got, want);
  }
  auto info = decode_ping_info(got);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->features, 0x1eu);
  EXPECT_EQ(info->pid, kPidLustre);
  EXPECT_EQ(info->sequence, 1u);
  EXPECT_EQ(info->nnis, 2u);
  const PingSummary s = summarize(*info);
  ASSERT_EQ(s.nis.size(), 1u);
  EXPECT_EQ(s.nis[0].nid, nid("10.201.1.4@tcp"));
  EXPECT_EQ(s.nis[0].status, kNiStatusUp);
  EXPECT_TRUE(s.multi_rail());
}

TEST(OwnPingInfo, FitsTheDiscoverySink) {
  EXPECT_LE(own_ping_info(nid("10.0.0.1@tcp")).size(), kPingSinkDiscovery);
}

TEST(PingYaml, LnetctlShape) {
  PingResult r;
  r.summary.pid = kPidLustre;
  r.summary.features = 0x1a;
  r.summary.nis = {{nid("10.201.1.3@tcp"), kNiStatusUp}, {nid("10.201.2.3@tcp1"), kNiStatusDown}};
  r.rtt_us = 85.25;
  EXPECT_EQ(ping_yaml({r}, {}),
            "ping:\n"
            "- primary nid: 10.201.1.3@tcp\n"
            "  Multi-Rail: true\n"
            "  peer_ni:\n"
            "  - nid: 10.201.1.3@tcp\n"
            "  - nid: 10.201.2.3@tcp1\n"
            "  rtt_us: 85.2\n"
            "  features: 0x1a\n"
            "  status:\n"
            "    10.201.1.3@tcp: up\n"
            "    10.201.2.3@tcp1: down\n");
}

TEST(PingYaml, OtherPidIsPrefixed) {
  PingResult r;
  r.summary.pid = 4242;
  r.summary.nis = {{nid("10.0.0.1@tcp"), kNiStatusUp}};
  const std::string y = ping_yaml({r}, {});
  EXPECT_NE(y.find("primary nid: 4242-10.0.0.1@tcp\n"), std::string::npos) << y;
  EXPECT_NE(y.find("Multi-Rail: false\n"), std::string::npos) << y;
}

TEST(PingYaml, FailureAsLnetctlManage) {
  EXPECT_EQ(ping_yaml({}, {{nid("10.201.1.1@tcp"), -71}}),
            "manage:\n"
            "- ping:\n"
            "  errno: -71\n"
            "  descr: 'failed to ping 10.201.1.1@tcp: Protocol error'\n");
}

TEST(Yaml, NestingAndQuoting) {
  Yaml y;
  y.map("a").kv("b", std::uint64_t{1}).list("c");
  y.item().kv("d", "x: y").kv("e", "plain").end();
  y.item().end();
  y.end().kv("f", true).end();
  EXPECT_EQ(y.str(),
            "a:\n"
            "  b: 1\n"
            "  c:\n"
            "  - d: 'x: y'\n"
            "    e: plain\n"
            "  -\n"
            "  f: true\n");
  EXPECT_EQ(yaml_scalar("it's"), "'it''s'");
  EXPECT_EQ(yaml_scalar(""), "''");
  EXPECT_EQ(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
}

}  // namespace
}  // namespace lnetr::peer
