#include <gtest/gtest.h>

#include <string>

#include "dataplane/cpu_features.hpp"

namespace lnetr::cpu {
namespace {

std::string missing(std::uint64_t required, std::uint64_t have, std::size_t size = 768) {
  char buf[768];
  const std::size_t n = describe_missing("lnetr-dataplane", required, have, buf, size);
  return std::string(buf, n);
}

TEST(CpuCheck, NamesEveryMissingFeatureInOneLine) {
  const std::uint64_t need = bit_of("sse2") | bit_of("ssse3") | bit_of("sse4_1") | bit_of("sse4_2") | bit_of("popcnt");
  const std::string line = missing(need, bit_of("sse") | bit_of("sse2"));
  EXPECT_EQ(line.rfind("lnetr-dataplane: this CPU lacks ssse3 sse4_1 sse4_2 popcnt, which this build", 0), 0u) << line;
  EXPECT_NE(line.find("-cpu host"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(CpuCheck, NothingMissingSaysNothing) {
  EXPECT_EQ(missing(bit_of("sse4_2"), bit_of("sse4_2") | bit_of("avx2")), "");
  EXPECT_EQ(missing(0, 0), "");
}

TEST(CpuCheck, ALineLongerThanTheBufferIsCut) {
  char buf[24];
  const std::size_t n = describe_missing("lnetr-dataplane", bit_of("avx512f"), 0, buf, sizeof buf);
  EXPECT_EQ(n, sizeof buf - 1);
  EXPECT_EQ(std::string(buf), "lnetr-dataplane: this C");
}

TEST(CpuCheck, NamesAreKnownAndDistinct) {
  EXPECT_EQ(bit_of("no-such-feature"), 0u);
  std::uint64_t all = 0;
  for (std::size_t i = 0; i < kFeatureCount; ++i) {
    const std::uint64_t b = bit_of(kFeatures[i].name);
    EXPECT_EQ(b, std::uint64_t{1} << i) << kFeatures[i].name;
    all |= b;
  }
  EXPECT_EQ(__builtin_popcountll(all), static_cast<int>(kFeatureCount));
}

// This build runs here, so this CPU has what it needs; and the build needs
// at least what Debian's DPDK is built for (SSE4.2).
TEST(CpuCheck, ThisCpuHasWhatThisBuildNeeds) {
  EXPECT_EQ(kRequired & ~present(), 0u) << missing(kRequired, present());
  EXPECT_NE(kRequired & bit_of("sse4_2"), 0u);
  EXPECT_NE(present() & bit_of("sse2"), 0u);
}

}  // namespace
}  // namespace lnetr::cpu
