// Latency percentiles without per-sample storage: a log-linear histogram of
// nanosecond values (every value below 256 ns exact, above that 128 buckets
// per power of two, i.e. within 0.8%), allocated once, so recording in the
// brw loop never allocates.  min, max, count and sum are exact.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace lnetr::peer {

class LatencyHistogram {
 public:
  static constexpr unsigned kSubBits = 7;
  static constexpr std::size_t kSub = std::size_t{1} << kSubBits;  // 128
  static constexpr std::size_t kBuckets = (64 - kSubBits + 1) * kSub;

  void record(std::uint64_t ns) noexcept;
  void clear() noexcept;

  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t min() const noexcept { return count_ ? min_ : 0; }
  std::uint64_t max() const noexcept { return max_; }
  double mean() const noexcept { return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0.0; }

  // The q-quantile (0 < q <= 1): the smallest recorded value v such that at
  // least q of the samples are <= v, to the histogram's resolution (the
  // bucket's upper edge, never above max() nor below min()).  0 if empty.
  std::uint64_t percentile(double q) const noexcept;

  // Bucket arithmetic, public for tests.
  static std::size_t bucket_of(std::uint64_t ns) noexcept;
  static std::uint64_t bucket_high(std::size_t bucket) noexcept;  // largest value in the bucket

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;
  std::uint64_t min_ = ~std::uint64_t{0};
  std::uint64_t max_ = 0;
};

}  // namespace lnetr::peer
