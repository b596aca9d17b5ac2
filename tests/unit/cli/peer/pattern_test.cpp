// The test-data pattern: every byte depends on (seed, offset), fill and check
// agree with the byte definition at any alignment, and any single wrong byte
// - at any offset, of any size - is found at its exact position.
#include "cli/peer/pattern.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace lnetr::peer {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes filled(std::size_t n, std::uint64_t seed, std::uint64_t off) {
  Bytes b(n);
  fill_pattern(b, seed, off);
  return b;
}

TEST(Pattern, FillMatchesByteDefinitionAtEveryAlignment) {
  for (std::uint64_t off = 0; off < 16; ++off) {
    for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 63u, 100u}) {
      const Bytes b = filled(n, 42, off);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(b[i], pattern_byte(42, off + i)) << off << " " << i;
      EXPECT_EQ(find_pattern_mismatch(b, 42, off), kPatternOk);
    }
  }
}

TEST(Pattern, ByteOrderOfAWordIsLittleEndian) {
  const std::uint64_t w = pattern_word(7, 3);
  for (unsigned i = 0; i < 8; ++i) EXPECT_EQ(pattern_byte(7, 24 + i), static_cast<std::uint8_t>(w >> (8 * i)));
}

TEST(Pattern, FlippedByteAtAnyOffsetIsFoundWhereItIs) {
  for (std::uint64_t off : {0u, 3u, 8u, 4093u}) {
    for (std::size_t n : {1u, 2u, 8u, 13u, 64u, 4095u, 4096u, 4097u}) {
      Bytes b = filled(n, 0x1234, off);
      for (std::size_t i = 0; i < n; ++i) {
        for (std::uint8_t flip : {std::uint8_t{0x01}, std::uint8_t{0x80}, std::uint8_t{0xff}}) {
          b[i] ^= flip;
          ASSERT_EQ(find_pattern_mismatch(b, 0x1234, off), i) << "n=" << n << " off=" << off << " i=" << i;
          b[i] ^= flip;
        }
      }
      EXPECT_EQ(find_pattern_mismatch(b, 0x1234, off), kPatternOk);
    }
  }
}

TEST(Pattern, FlippedByteInAMegabyteIsFound) {
  Bytes b = filled(1u << 20, 99, 0);
  for (std::size_t i : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{65537},
                        std::size_t{(1u << 20) - 8}, std::size_t{(1u << 20) - 1}}) {
    b[i] ^= 0x10;
    EXPECT_EQ(find_pattern_mismatch(b, 99, 0), i);
    b[i] ^= 0x10;
  }
  EXPECT_EQ(find_pattern_mismatch(b, 99, 0), kPatternOk);
}

TEST(Pattern, OtherSeedOrShiftedDataIsWrong) {
  const Bytes b = filled(4096, 5, 0);
  EXPECT_NE(find_pattern_mismatch(b, 6, 0), kPatternOk);           // another message's data
  EXPECT_NE(find_pattern_mismatch(b, 5, 1), kPatternOk);           // shifted by a byte
  EXPECT_NE(find_pattern_mismatch(b, 5, 8), kPatternOk);           // shifted by a word
  EXPECT_NE(find_pattern_mismatch(b, 5 + (1ull << 32), 0), kPatternOk);
  const Bytes zeros(4096, 0);
  EXPECT_NE(find_pattern_mismatch(zeros, 5, 0), kPatternOk);       // a buffer never written
  EXPECT_LT(find_pattern_mismatch(zeros, 5, 0), 8u);
}

TEST(Pattern, EmptyPayloadIsAlwaysRight) {
  EXPECT_EQ(find_pattern_mismatch({}, 1, 0), kPatternOk);
}

}  // namespace
}  // namespace lnetr::peer
