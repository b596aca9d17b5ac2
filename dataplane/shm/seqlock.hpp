// A seqlock over a trivially copyable value: one writer at a time (never
// blocking: false, nothing stored, while another store is in progress),
// readers retrying while a store is in progress.  A writer killed
// mid-store leaves the generation odd for good: readers give up after a
// second (a value-initialised T; callers look again later).  A writer
// merely preempted mid-store holds it for a scheduler slice at most.
// Used in shared memory (GatewayShm) and within the dataplane (a peer's
// discovery record, read by the status).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace lnetr::shm {

template <class T>
bool seq_store(std::atomic<std::uint64_t>& gen_at, T& at, const T& v) noexcept {
  static_assert(std::is_trivially_copyable_v<T>);
  std::uint64_t gen = gen_at.load(std::memory_order_relaxed);
  if ((gen & 1) != 0 || !gen_at.compare_exchange_strong(gen, gen + 1, std::memory_order_relaxed)) return false;
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(static_cast<void*>(&at), &v, sizeof v);
  gen_at.store(gen + 2, std::memory_order_release);
  return true;
}

template <class T>
T seq_load(const std::atomic<std::uint64_t>& gen_at, const T& at) noexcept {
  static_assert(std::is_trivially_copyable_v<T>);
  T v;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (std::uint32_t tries = 1;; ++tries) {
    if (tries % 4096 == 0 && std::chrono::steady_clock::now() >= deadline) return T{};
    const std::uint64_t before = gen_at.load(std::memory_order_acquire);
    std::memcpy(static_cast<void*>(&v), &at, sizeof v);
    std::atomic_thread_fence(std::memory_order_acquire);
    if ((before & 1) == 0 && gen_at.load(std::memory_order_relaxed) == before) return v;
  }
}

}  // namespace lnetr::shm
