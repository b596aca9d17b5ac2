// LNet fault injection rules (router/lnet_fault.hpp): what a rule matches,
// how often it acts (one in every `rate` at a random place in each window,
// one per `interval`), the rule text both ways, and refusals by name.
#include "router/lnet_fault.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/nid.hpp"

namespace lnetr {
namespace {

using ::testing::HasSubstr;

using test::nid;

LnetHeader put(const char* src, const char* dst, std::uint32_t portal = 4) {
  LnetHeader h;
  h.src_nid = nid(src);
  h.dest_nid = nid(dst);
  PutFields f;
  f.ptl_index = portal;
  h.set(f);
  return h;
}

LnetHeader ack(const char* src, const char* dst) {
  LnetHeader h;
  h.src_nid = nid(src);
  h.dest_nid = nid(dst);
  h.set(AckFields{});
  return h;
}

FaultRule rule(const char* text) {
  const FaultParse p = parse_fault_rule(text);
  EXPECT_TRUE(p.rule) << text << ": " << p.error;
  return p.rule.value_or(FaultRule{});
}

const Nid kLocal = *parse_nid("10.0.0.1@tcp");

TEST(LnetFault, MatchesByNidNetTypeAndPortal) {
  EXPECT_TRUE(matches(rule("kind=drop src=10.0.0.2@tcp dst=10.1.0.2@tcp1 rate=1"), put("10.0.0.2@tcp", "10.1.0.2@tcp1"),
                      kLocal));
  EXPECT_FALSE(matches(rule("kind=drop src=10.0.0.3@tcp dst=* rate=1"), put("10.0.0.2@tcp", "10.1.0.2@tcp1"), kLocal));
  // 255.255.255.255@NET: any NID of that net; * any NID at all.
  const FaultRule net = rule("kind=drop src=* dst=255.255.255.255@tcp1 rate=1");
  EXPECT_TRUE(matches(net, put("10.0.0.2@tcp", "10.1.0.9@tcp1"), kLocal));
  EXPECT_FALSE(matches(net, put("10.0.0.2@tcp", "10.1.0.9@tcp2"), kLocal));
  // Types.
  const FaultRule acks = rule("kind=drop src=* dst=* type=ACK rate=1");
  EXPECT_TRUE(matches(acks, ack("10.1.0.2@tcp1", "10.0.0.2@tcp"), kLocal));
  EXPECT_FALSE(matches(acks, put("10.0.0.2@tcp", "10.1.0.2@tcp1"), kLocal));
  // A portal narrows to PUT and GET: an ACK carries none.
  const FaultRule portal = rule("kind=drop src=* dst=* portal=4,6 rate=1");
  EXPECT_EQ(portal.types, (1u << 1) | (1u << 2));
  EXPECT_TRUE(matches(portal, put("10.0.0.2@tcp", "10.1.0.2@tcp1", 6), kLocal));
  EXPECT_FALSE(matches(portal, put("10.0.0.2@tcp", "10.1.0.2@tcp1", 5), kLocal));
  EXPECT_FALSE(matches(portal, ack("10.1.0.2@tcp1", "10.0.0.2@tcp"), kLocal));
  // The NI it arrived on.
  EXPECT_FALSE(matches(rule("kind=drop src=* dst=* local=10.0.0.9@tcp rate=1"), put("10.0.0.2@tcp", "10.1.0.2@tcp1"),
                       kLocal));
}

TEST(LnetFault, RateActsOncePerWindowAtARandomPlace) {
  FaultEngine e(7);
  FaultRule r = rule("kind=drop src=* dst=* rate=10");
  r.id = 1;
  e.set({r});
  std::vector<int> hits;
  for (int i = 0; i < 1000; ++i)
    if (e.judge(put("10.0.0.2@tcp", "10.1.0.2@tcp1"), kLocal, 0).act) hits.push_back(i);
  ASSERT_EQ(hits.size(), 100u);  // exactly one in each window of ten
  for (std::size_t w = 0; w < hits.size(); ++w) EXPECT_EQ(hits[w] / 10, static_cast<int>(w));
  // ... not always at the same place.
  EXPECT_NE(std::count_if(hits.begin(), hits.end(), [&](int h) { return h % 10 == hits[0] % 10; }), 100);
  const auto c = e.counts(1);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->matched[1], 1000u);  // PUTs
  EXPECT_EQ(c->acted, 100u);
  e.reset_counts();
  EXPECT_EQ(e.counts(1)->acted, 0u);
}

TEST(LnetFault, IntervalActsOncePerInterval) {
  FaultEngine e(3);
  FaultRule r = rule("kind=delay src=* dst=* interval=1 latency=0.5");
  r.id = 2;
  e.set({r});
  int acted = 0;
  constexpr std::int64_t kMs = 1'000'000;
  for (std::int64_t t = 1; t <= 10'000; ++t) {  // a message every ms for 10 s
    const auto d = e.judge(put("10.0.0.2@tcp", "10.1.0.2@tcp1"), kLocal, t * kMs);
    if (d.act) {
      ++acted;
      EXPECT_EQ(d.kind, FaultKind::delay);
      EXPECT_EQ(d.latency_ns, 500 * kMs);
    }
  }
  EXPECT_GE(acted, 9);
  EXPECT_LE(acted, 10);
}

TEST(LnetFault, FirstRuleThatChoosesDecidesAndEveryMatchingRuleCounts) {
  FaultEngine e;
  FaultRule a = rule("kind=corrupt src=* dst=* type=PUT rate=1"), b = rule("kind=drop src=* dst=* rate=1");
  a.id = 1, b.id = 2;
  e.set({a, b});
  LnetHeader data = put("10.0.0.2@tcp", "10.1.0.2@tcp1");
  data.payload_length = 4096;
  const auto d = e.judge(data, kLocal, 0);
  EXPECT_TRUE(d.act);
  EXPECT_EQ(d.kind, FaultKind::corrupt);
  EXPECT_EQ(d.rule, 1u);
  EXPECT_EQ(e.judge(ack("10.1.0.2@tcp1", "10.0.0.2@tcp"), kLocal, 0).kind, FaultKind::drop);
  EXPECT_EQ(e.counts(2)->matched[1] + e.counts(2)->matched[0], 2u);
  EXPECT_EQ(e.counts(2)->acted, 1u);
  // Delay and corrupt act on forwarded messages only (corrupt on those with
  // a payload); otherwise they count the match and keep their turn.
  FaultEngine f;
  FaultRule delay = rule("kind=delay src=* dst=* rate=1 latency=1"), corrupt = rule("kind=corrupt src=* dst=* rate=1");
  delay.id = 7, corrupt.id = 8;
  f.set({delay});
  EXPECT_FALSE(f.judge(put("10.0.0.2@tcp", "10.0.0.1@tcp"), kLocal, 0, false).act);
  const auto held = f.judge(put("10.0.0.2@tcp", "10.1.0.2@tcp1"), kLocal, 0, true);
  EXPECT_TRUE(held.act);
  EXPECT_EQ(held.rule, 7u);
  EXPECT_EQ(f.counts(7)->matched[1], 2u);
  EXPECT_EQ(f.counts(7)->acted, 1u);
  f.set({corrupt});
  LnetHeader empty = put("10.0.0.2@tcp", "10.1.0.2@tcp1");
  EXPECT_FALSE(f.judge(empty, kLocal, 0, true).act);  // no payload to corrupt
  empty.payload_length = 4096;
  EXPECT_TRUE(f.judge(empty, kLocal, 0, true).act);
  // A rule that stays keeps its counts; one removed is gone.
  e.set({b});
  EXPECT_EQ(e.counts(2)->acted, 1u);
  EXPECT_FALSE(e.counts(1));
  e.set({});
  EXPECT_TRUE(e.empty());
}

TEST(LnetFault, RuleTextRoundTrips) {
  for (const char* text : {"kind=drop src=10.0.0.2@tcp dst=* type=ACK,PUT rate=3",
                           "kind=delay src=* dst=255.255.255.255@o2ib type=PUT,GET portal=4,6 interval=2.5 latency=0.25",
                           "kind=corrupt src=* dst=10.1.0.2@tcp1 local=10.0.0.1@tcp rate=1",
                           "kind=delay src=* dst=* interval=8.2 latency=0.25"}) {  // (8.2: found by the fuzzer)
    const FaultRule r = rule(text);
    EXPECT_EQ(to_string(r), text);
    EXPECT_EQ(rule(to_string(r).c_str()), r);
  }
}

TEST(LnetFault, BadRulesAreRefusedByName) {
  auto err = [](const char* text) { return parse_fault_rule(text).error; };
  EXPECT_THAT(err("src=* dst=* rate=1"), HasSubstr("kind: missing"));
  EXPECT_THAT(err("kind=lose src=* dst=* rate=1"), HasSubstr("kind: expected drop, delay or corrupt"));
  EXPECT_THAT(err("kind=drop src=* dst=*"), HasSubstr("exactly one of rate and interval"));
  EXPECT_THAT(err("kind=drop src=* dst=* rate=1 interval=1"), HasSubstr("exactly one of rate and interval"));
  EXPECT_THAT(err("kind=drop src=* dst=* rate=0"), HasSubstr("rate: expected an integer"));
  EXPECT_THAT(err("kind=delay src=* dst=* rate=1"), HasSubstr("latency: a delay rule needs one"));
  EXPECT_THAT(err("kind=drop src=* dst=* rate=1 latency=1"), HasSubstr("only a delay rule"));
  EXPECT_THAT(err("kind=drop src=nowhere dst=* rate=1"), HasSubstr("src: expected a NID"));
  EXPECT_THAT(err("kind=drop src=* dst=* type=HELLO rate=1"), HasSubstr("type: expected PUT, ACK, GET or REPLY"));
  EXPECT_THAT(err("kind=drop src=* dst=* portal=64 rate=1"), HasSubstr("portal: expected portal numbers 0..63"));
  EXPECT_THAT(err("kind=drop src=* dst=* type=ACK portal=4 rate=1"), HasSubstr("only PUT and GET name a portal"));
  EXPECT_THAT(err("kind=drop src=* dst=* interval=-1"), HasSubstr("interval: expected seconds"));
  EXPECT_THAT(err("kind=drop src=* dst=* rate=1 color=red"), HasSubstr("unknown key 'color'"));
  EXPECT_THAT(err("kind=drop src=* dst=* rate=1 junk"), HasSubstr("expected KEY=VALUE"));
}

}  // namespace
}  // namespace lnetr
