// How often each source (an address) may ask for something costly — a
// connection's handshake, an RDMA CM connection request — as a token
// bucket per source.  The buckets are a fixed table indexed by a keyed
// hash of the source, so no number of sources can grow it (sources that
// collide share a bucket; the key is random per table, so a remote node
// cannot choose whom it collides with).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <random>
#include <span>

#include "lnd/message.hpp"

namespace lnetr::lnd {

class SourceRate {
 public:
  static constexpr std::size_t kBuckets = 4096;

  // `per_second` requests a second from one source after a burst of
  // `burst`; per_second 0: no limit.
  SourceRate(double per_second, double burst) : rate_(per_second), burst_(burst) {
    std::random_device rd;
    key_ = (std::uint64_t{rd()} << 32) | rd();
  }

  // One request from `source` (its address bytes) at `now`: allowed, or
  // over its rate (refuse it).
  bool allow(std::span<const std::uint8_t> source, Clock::time_point now) noexcept {
    if (rate_ <= 0) return true;
    Bucket& b = buckets_[index(source)];
    if (b.at == Clock::time_point{}) {
      b.tokens = burst_;  // a source not seen yet
    } else if (now > b.at) {
      b.tokens = std::min(burst_, b.tokens + std::chrono::duration<double>(now - b.at).count() * rate_);
    }
    b.at = now;
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point at{};
  };
  std::size_t index(std::span<const std::uint8_t> source) const noexcept {
    std::uint64_t h = key_ ^ 0xcbf29ce484222325ull;  // FNV-1a, keyed
    for (std::uint8_t c : source) h = (h ^ c) * 0x100000001b3ull;
    h ^= h >> 29;
    return static_cast<std::size_t>((h * 0xbf58476d1ce4e5b9ull) >> 52) % kBuckets;
  }

  double rate_, burst_;
  std::uint64_t key_ = 0;
  std::array<Bucket, kBuckets> buckets_{};
};

}  // namespace lnetr::lnd
