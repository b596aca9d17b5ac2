// The library's log hook (log.hpp) and its default, stderr.
#include "dataplane/tcp/log.hpp"

#include <atomic>
#include <cstdio>

namespace lnetr::tcp {

namespace {

void to_stderr(const char* level, const char* fmt, std::va_list ap) noexcept {
  char msg[512];
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  std::fprintf(stderr, "%s: %s\n", level, msg);
}

// Set before the ports open, read by whichever thread logs.
std::atomic<LogFn> g_log{&to_stderr};

}  // namespace

void set_log(LogFn fn) noexcept { g_log.store(fn ? fn : &to_stderr, std::memory_order_relaxed); }

void log_info(const char* fmt, ...) noexcept {
  std::va_list ap;
  va_start(ap, fmt);
  g_log.load(std::memory_order_relaxed)("info", fmt, ap);
  va_end(ap);
}

}  // namespace lnetr::tcp
