#include "dataplane/log.hpp"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <mutex>
#include <utility>
#include <vector>

#include "dataplane/systemd.hpp"

namespace lnetr::dp {

namespace {

constexpr const char* kProgram = "lnetr-dataplane";
thread_local WorkerLog* t_log = nullptr;

struct Registered {
  WorkerLog* log;
  std::uint64_t reported;  // suppressed count already reported
};
std::mutex g_registry_mutex;
std::vector<Registered> g_registry;  // under g_registry_mutex

std::uint64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

void write_line(const char* level, const char* msg) noexcept {
  if (systemd::stderr_is_journal()) {
    // The journal keeps the time and the program's name; the prefix is the severity.
    std::fprintf(stderr, "%s%s: %s\n", systemd::severity_prefix(level), level, msg);
    return;
  }
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  gmtime_r(&ts.tv_sec, &t);
  std::fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: %s\n", t.tm_year + 1900, t.tm_mon + 1,
               t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000000, kProgram, level, msg);
}

}  // namespace

void log_line(const char* level, const char* fmt, std::va_list ap) noexcept {
  if (t_log != nullptr) {
    // A worker's line is formatted into its slot, or not at all.
    if (char* slot = t_log->reserve(level, monotonic_ns())) {
      std::vsnprintf(slot, WorkerLog::kLineBytes, fmt, ap);
      t_log->commit();
    }
    return;
  }
  char msg[512];
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  write_line(level, msg);
}

char* WorkerLog::reserve(const char* level, std::uint64_t now_ns) noexcept {
  if (refilled_ns_ != 0 && now_ns > refilled_ns_)
    tokens_ = std::min(kBurst, tokens_ + static_cast<double>(now_ns - refilled_ns_) * kPerSecond / 1e9);
  refilled_ns_ = now_ns;
  const std::uint64_t head = head_.load(std::memory_order_relaxed);
  if (tokens_ < 1 || head - tail_.load(std::memory_order_acquire) >= kSlots) {
    suppressed_.store(suppressed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return nullptr;
  }
  tokens_ -= 1;
  Line& l = lines_[head % kSlots];
  l.level = level;
  return l.text;
}

bool WorkerLog::push(const char* level, const char* text, std::uint64_t now_ns) noexcept {
  char* slot = reserve(level, now_ns);
  if (slot == nullptr) return false;
  std::strncpy(slot, text, kLineBytes - 1);
  slot[kLineBytes - 1] = '\0';
  commit();
  return true;
}

void log_through(WorkerLog* log) noexcept { t_log = log; }

void register_worker_log(WorkerLog* log) {
  std::lock_guard lock(g_registry_mutex);
  g_registry.push_back({log, log->suppressed()});
}

void unregister_worker_log(WorkerLog* log) {
  std::lock_guard lock(g_registry_mutex);
  std::erase_if(g_registry, [log](const Registered& r) { return r.log == log; });
}

void drain_worker_logs() noexcept {
  std::lock_guard lock(g_registry_mutex);
  for (Registered& r : g_registry) {
    r.log->drain([](const char* level, const char* text) { write_line(level, text); });
    const std::uint64_t s = r.log->suppressed();
    if (s != r.reported) {
      char msg[160];
      std::snprintf(msg, sizeof msg,
                    "worker %u: %llu log line(s) suppressed (a worker logs at most %.0f at once, %.0f a second)",
                    r.log->worker(), static_cast<unsigned long long>(s - r.reported), WorkerLog::kBurst,
                    WorkerLog::kPerSecond);
      write_line("warning", msg);
      r.reported = s;
    }
  }
}

}  // namespace lnetr::dp
