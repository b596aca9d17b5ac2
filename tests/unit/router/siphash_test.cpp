// SipHash-2-4 against the reference vectors of the SipHash paper (key
// 00..0f, messages 00, 00 01, ... of each length), and its key mattering.
#include "router/siphash.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace lnetr {
namespace {

constexpr SipKey kPaperKey{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};

std::vector<std::uint8_t> counting(std::size_t n) {
  std::vector<std::uint8_t> m(n);
  for (std::size_t i = 0; i < n; ++i) m[i] = static_cast<std::uint8_t>(i);
  return m;
}

TEST(SipHash, MatchesThePapersVectors) {
  // The paper's worked example: 15 bytes 00..0e.
  EXPECT_EQ(siphash24(kPaperKey, counting(15)), 0xa129ca6149be45e5ull);
  // Its vectors for the empty message, one full word and one word plus a byte.
  EXPECT_EQ(siphash24(kPaperKey, counting(0)), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ(siphash24(kPaperKey, counting(8)), 0x93f5f5799a932462ull);
  EXPECT_EQ(siphash24(kPaperKey, counting(9)), 0x9e0082df0ba9e4b0ull);
}

TEST(SipHash, DependsOnTheKeyAndEveryByte) {
  const auto m = counting(24);
  const std::uint64_t h = siphash24(kPaperKey, m);
  EXPECT_NE(siphash24(SipKey{kPaperKey.k0 ^ 1, kPaperKey.k1}, m), h);
  for (std::size_t i = 0; i < m.size(); ++i) {
    auto x = m;
    x[i] ^= 0x80;
    EXPECT_NE(siphash24(kPaperKey, x), h) << i;
  }
  const SipKey a = random_sip_key(), b = random_sip_key();
  EXPECT_FALSE(a.k0 == b.k0 && a.k1 == b.k1);
}

}  // namespace
}  // namespace lnetr
