#include "cli/peer/latency.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace lnetr::peer {

std::size_t LatencyHistogram::bucket_of(std::uint64_t ns) noexcept {
  if (ns < 2 * kSub) return static_cast<std::size_t>(ns);
  const unsigned msb = 63u - static_cast<unsigned>(std::countl_zero(ns));
  const unsigned shift = msb - kSubBits;  // >= 1
  const std::uint64_t sub = ns >> shift;   // kSub .. 2*kSub-1
  return (shift + 1) * kSub + static_cast<std::size_t>(sub - kSub);
}

std::uint64_t LatencyHistogram::bucket_high(std::size_t bucket) noexcept {
  if (bucket < 2 * kSub) return bucket;
  const std::size_t shift = bucket / kSub - 1;
  const std::uint64_t sub = kSub + bucket % kSub;
  const std::uint64_t low = sub << shift;
  return low + ((std::uint64_t{1} << shift) - 1);
}

void LatencyHistogram::record(std::uint64_t ns) noexcept {
  ++counts_[bucket_of(ns)];
  ++count_;
  sum_ += ns;
  min_ = std::min(min_, ns);
  max_ = std::max(max_, ns);
}

void LatencyHistogram::clear() noexcept { *this = LatencyHistogram{}; }

std::uint64_t LatencyHistogram::percentile(double q) const noexcept {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_)));
  rank = std::clamp<std::uint64_t>(rank, 1, count_);
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < kBuckets; ++b) {
    seen += counts_[b];
    if (seen >= rank) return std::clamp(bucket_high(b), min_, max_);
  }
  return max_;
}

}  // namespace lnetr::peer
