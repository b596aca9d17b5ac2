// Latency percentiles: exact below 256 ns, within 1/128 above, never outside
// [min, max]; rank rule "smallest v with at least q of the samples <= v".
#include "cli/peer/latency.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace lnetr::peer {
namespace {

TEST(Latency, EmptyIsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.percentile(0.5), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
}

TEST(Latency, OneSampleIsEveryPercentile) {
  LatencyHistogram h;
  h.record(123'456);
  for (double q : {0.01, 0.5, 0.9, 0.99, 1.0}) EXPECT_EQ(h.percentile(q), 123'456u);
}

TEST(Latency, SmallValuesAreExact) {
  LatencyHistogram h;
  for (std::uint64_t v = 1; v <= 100; ++v) h.record(v);
  EXPECT_EQ(h.percentile(0.50), 50u);
  EXPECT_EQ(h.percentile(0.90), 90u);
  EXPECT_EQ(h.percentile(0.99), 99u);
  EXPECT_EQ(h.percentile(1.0), 100u);
  EXPECT_EQ(h.min(), 1u);
  EXPECT_EQ(h.max(), 100u);
  EXPECT_DOUBLE_EQ(h.mean(), 50.5);
}

TEST(Latency, LargeValuesWithinResolution) {
  LatencyHistogram h;
  for (std::uint64_t us = 1; us <= 1000; ++us) h.record(us * 1000);  // 1..1000 µs
  auto near = [](std::uint64_t got, std::uint64_t want) {
    const double err = (static_cast<double>(got) - static_cast<double>(want)) / static_cast<double>(want);
    return err >= 0 && err < 1.0 / 128;  // the upper edge of the bucket holding `want`
  };
  EXPECT_TRUE(near(h.percentile(0.50), 500'000)) << h.percentile(0.5);
  EXPECT_TRUE(near(h.percentile(0.90), 900'000)) << h.percentile(0.9);
  EXPECT_TRUE(near(h.percentile(0.99), 990'000)) << h.percentile(0.99);
  EXPECT_EQ(h.percentile(1.0), 1'000'000u);  // clamped to the exact max
  EXPECT_EQ(h.max(), 1'000'000u);
  EXPECT_EQ(h.min(), 1'000u);
}

TEST(Latency, TailIsSeen) {
  LatencyHistogram h;
  for (int i = 0; i < 990; ++i) h.record(10'000);
  for (int i = 0; i < 10; ++i) h.record(5'000'000);
  EXPECT_LE(h.percentile(0.5), 10'000u + 10'000u / 128);
  EXPECT_LE(h.percentile(0.99), 10'000u + 10'000u / 128);  // rank 990 is still the fast ones
  EXPECT_EQ(h.percentile(0.999), 5'000'000u);
  EXPECT_EQ(h.max(), 5'000'000u);
}

TEST(Latency, BucketsCoverEveryValueMonotonically) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t v = rng() >> (rng() % 64);
    const std::size_t b = LatencyHistogram::bucket_of(v);
    ASSERT_LT(b, LatencyHistogram::kBuckets);
    ASSERT_GE(LatencyHistogram::bucket_high(b), v);
    if (b > 0) {
      ASSERT_LT(LatencyHistogram::bucket_high(b - 1), v);
    }
  }
  EXPECT_EQ(LatencyHistogram::bucket_of(~std::uint64_t{0}), LatencyHistogram::kBuckets - 1);
  EXPECT_EQ(LatencyHistogram::bucket_high(LatencyHistogram::kBuckets - 1), ~std::uint64_t{0});
}

TEST(Latency, PercentileMatchesSortedSamples) {
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> v;
  LatencyHistogram h;
  for (int i = 0; i < 5000; ++i) {
    v.push_back(1000 + rng() % 10'000'000);
    h.record(v.back());
  }
  std::sort(v.begin(), v.end());
  for (double q : {0.5, 0.9, 0.99}) {
    const auto exact = v[static_cast<std::size_t>(std::ceil(q * 5000)) - 1];
    const auto got = h.percentile(q);
    EXPECT_GE(got, exact);
    EXPECT_LE(static_cast<double>(got), static_cast<double>(exact) * (1.0 + 1.0 / 128)) << q;
  }
}

}  // namespace
}  // namespace lnetr::peer
