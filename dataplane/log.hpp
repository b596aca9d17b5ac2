// Logging of lnetr-dataplane: one line per event on stderr (the journal
// under systemd), with a level.  Never called per message on the
// forwarding path; state changes and errors only.
//
// A worker's lines (many of them a remote peer can provoke: a refused
// connection, a connection from the wrong address) go through its
// WorkerLog: queued without blocking and written out by the control
// thread (drain_worker_logs, on its tick), at most kBurst at once and
// kPerSecond a second; the rest are counted and reported as suppressed.
#pragma once

#include <array>
#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace lnetr::dp {

void log_line(const char* level, const char* fmt, std::va_list ap) noexcept;

[[gnu::format(printf, 1, 2)]] inline void log_info(const char* fmt, ...) noexcept {
  std::va_list ap;
  va_start(ap, fmt);
  log_line("info", fmt, ap);
  va_end(ap);
}

[[gnu::format(printf, 1, 2)]] inline void log_warn(const char* fmt, ...) noexcept {
  std::va_list ap;
  va_start(ap, fmt);
  log_line("warning", fmt, ap);
  va_end(ap);
}

[[gnu::format(printf, 1, 2)]] inline void log_error(const char* fmt, ...) noexcept {
  std::va_list ap;
  va_start(ap, fmt);
  log_line("error", fmt, ap);
  va_end(ap);
}

// One worker's queue of log lines: a single-producer (the worker),
// single-consumer (the drain) ring with a token bucket in front.
class WorkerLog {
 public:
  static constexpr std::size_t kSlots = 64;
  static constexpr std::size_t kLineBytes = 240;
  static constexpr double kBurst = 20;      // lines at once
  static constexpr double kPerSecond = 5;   // lines a second after that

  // Suppressed lines are counted in `suppressed` (the worker's shared
  // counter, single writer: the worker).
  WorkerLog(unsigned worker, std::atomic<std::uint64_t>& suppressed) noexcept
      : worker_(worker), suppressed_(suppressed) {}
  WorkerLog(const WorkerLog&) = delete;
  WorkerLog& operator=(const WorkerLog&) = delete;

  unsigned worker() const noexcept { return worker_; }
  // On the worker's thread: a slot of kLineBytes to write a line of `level`
  // into, then commit(); or nullptr, the line counted suppressed (over the
  // rate, or the ring full).  Never blocks.
  char* reserve(const char* level, std::uint64_t now_ns) noexcept;
  void commit() noexcept { head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  // reserve(), `text` copied (truncated to a slot), commit().
  bool push(const char* level, const char* text, std::uint64_t now_ns) noexcept;
  // On the draining thread: each queued line, oldest first, to
  // write(level, text); the number written.
  template <typename Write>
  std::size_t drain(Write&& write) noexcept {
    std::size_t n = 0;
    std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    const std::uint64_t head = head_.load(std::memory_order_acquire);
    for (; tail != head; ++tail, ++n) {
      const Line& l = lines_[tail % kSlots];
      write(l.level, l.text);
    }
    tail_.store(tail, std::memory_order_release);
    return n;
  }
  // Lines suppressed so far (any thread).
  std::uint64_t suppressed() const noexcept { return suppressed_.load(std::memory_order_relaxed); }

 private:
  struct Line {
    const char* level;
    char text[kLineBytes];
  };
  const unsigned worker_;
  std::array<Line, kSlots> lines_{};
  alignas(64) std::atomic<std::uint64_t> head_{0};  // next slot the worker fills
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // next slot the drain reads
  // The worker's alone.
  alignas(64) double tokens_ = kBurst;
  std::uint64_t refilled_ns_ = 0;
  std::atomic<std::uint64_t>& suppressed_;
};

// From now on this thread's lines go through `log` (nullptr: written
// directly).  `log` must outlive the thread's logging and stay registered
// (register_worker_log) until it is drained for the last time.
void log_through(WorkerLog* log) noexcept;
void register_worker_log(WorkerLog* log);
void unregister_worker_log(WorkerLog* log);
// Write out every registered worker's queued lines, and a line for each
// whose suppressed count grew since the last drain (control thread).
void drain_worker_logs() noexcept;

}  // namespace lnetr::dp
