// The verifiable data pattern of lnetr-peer's PUT/GET test traffic.
//
// Byte `offset` of a test payload is pattern_byte(seed, offset): a cheap hash
// of (seed, offset).  The seed travels in the match bits of the PUT or GET
// (on kTestPortal) and the offset is the message's offset field plus the
// byte's position, so a receiver can check every byte of a payload without
// any other state: a flipped byte, a shifted copy, a stale buffer or another
// message's data (other seed) all show up as a mismatch.
//
// The hash works on 64-byte blocks (two multiplies per block, an add per
// 8-byte word), so filling and checking run near memory speed; the byte order of a word is fixed
// (little-endian) so that hosts of either order agree.
#pragma once

#include <cstddef>
#include <cstdint>

#include "router/bytes.hpp"

namespace lnetr::peer {

// The portal lnetr-peer serves test data on (any match bits: the seed).
inline constexpr std::uint32_t kTestPortal = 42;

// The hash of one 64-byte block (8 words) of the pattern.
constexpr std::uint64_t pattern_block(std::uint64_t seed, std::uint64_t block) noexcept {
  std::uint64_t x = block * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull + 0x2545F4914F6CDD1Dull;
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 29;
  return x;
}

inline constexpr std::uint64_t kPatternStep = 0xA0761D6478BD642Full;

// The 8 pattern bytes at offsets 8*word .. 8*word+7, as a little-endian
// word: the block's hash plus a per-word step (one multiply per 64 bytes).
constexpr std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t word) noexcept {
  return pattern_block(seed, word >> 3) + (word & 7) * kPatternStep;
}

constexpr std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t offset) noexcept {
  return static_cast<std::uint8_t>(pattern_word(seed, offset >> 3) >> ((offset & 7) * 8));
}

// Write pattern(seed, offset + i) into out[i].
void fill_pattern(MutableByteSpan out, std::uint64_t seed, std::uint64_t offset) noexcept;

inline constexpr std::size_t kPatternOk = static_cast<std::size_t>(-1);

// The index of the first byte of `in` that is not pattern(seed, offset + i),
// or kPatternOk.
std::size_t find_pattern_mismatch(ByteSpan in, std::uint64_t seed, std::uint64_t offset) noexcept;

}  // namespace lnetr::peer
