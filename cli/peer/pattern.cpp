#include "cli/peer/pattern.hpp"

#include <cstring>

namespace lnetr::peer {

void fill_pattern(MutableByteSpan out, std::uint64_t seed, std::uint64_t offset) noexcept {
  std::size_t i = 0;
  const std::size_t n = out.size();
  for (; i < n && ((offset + i) & 7) != 0; ++i) out[i] = pattern_byte(seed, offset + i);
  std::uint64_t word = (offset + i) >> 3;
  while (i + 8 <= n) {
    const std::uint64_t base = pattern_block(seed, word >> 3);
    do {
      store_le<std::uint64_t>(out.data() + i, base + (word & 7) * kPatternStep);
      i += 8;
      ++word;
    } while ((word & 7) != 0 && i + 8 <= n);
  }
  for (; i < n; ++i) out[i] = pattern_byte(seed, offset + i);
}

std::size_t find_pattern_mismatch(ByteSpan in, std::uint64_t seed, std::uint64_t offset) noexcept {
  std::size_t i = 0;
  const std::size_t n = in.size();
  for (; i < n && ((offset + i) & 7) != 0; ++i)
    if (in[i] != pattern_byte(seed, offset + i)) return i;
  std::uint64_t word = (offset + i) >> 3;
  while (i + 8 <= n) {
    const std::uint64_t base = pattern_block(seed, word >> 3);
    std::uint64_t diff = 0;
    const std::size_t start = i;
    do {
      diff |= load_le<std::uint64_t>(in.data() + i) ^ (base + (word & 7) * kPatternStep);
      i += 8;
      ++word;
    } while ((word & 7) != 0 && i + 8 <= n);
    if (diff != 0) {
      for (std::size_t j = start; j < i; ++j)
        if (in[j] != pattern_byte(seed, offset + j)) return j;
    }
  }
  for (; i < n; ++i)
    if (in[i] != pattern_byte(seed, offset + i)) return i;
  return kPatternOk;
}

}  // namespace lnetr::peer
