// SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
// 2012): a keyed hash whose output an observer cannot predict or steer
// without the key.  For values a remote node must not be able to guess or
// collide: TCP initial sequence numbers and SYN cookies, hash-table keys
// fed by the fabric.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>

#include "router/bytes.hpp"

namespace lnetr {

struct SipKey {
  std::uint64_t k0 = 0, k1 = 0;
};

namespace sip_detail {

constexpr std::uint64_t rotl(std::uint64_t x, int b) noexcept { return (x << b) | (x >> (64 - b)); }

struct State {
  std::uint64_t v0, v1, v2, v3;
  constexpr void round() noexcept {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
  constexpr void absorb(std::uint64_t m) noexcept {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

}  // namespace sip_detail

// The 64-bit SipHash-2-4 of `in` under `key` (bytes read little-endian).
constexpr std::uint64_t siphash24(const SipKey& key, ByteSpan in) noexcept {
  sip_detail::State s{key.k0 ^ 0x736f6d6570736575ull, key.k1 ^ 0x646f72616e646f6dull,
                      key.k0 ^ 0x6c7967656e657261ull, key.k1 ^ 0x7465646279746573ull};
  const std::size_t n = in.size();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t m = 0;
    for (std::size_t b = 0; b < 8; ++b) m |= std::uint64_t{in[i + b]} << (8 * b);
    s.absorb(m);
  }
  std::uint64_t last = std::uint64_t{n & 0xff} << 56;
  for (std::size_t b = 0; i + b < n; ++b) last |= std::uint64_t{in[i + b]} << (8 * b);
  s.absorb(last);
  s.v2 ^= 0xff;
  for (int r = 0; r < 4; ++r) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

// A key from the system's random source.
inline SipKey random_sip_key() {
  std::random_device rd;
  auto word = [&rd] { return (std::uint64_t{rd()} << 32) | rd(); };
  SipKey k;
  k.k0 = word();
  k.k1 = word();
  return k;
}

}  // namespace lnetr
