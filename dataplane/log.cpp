#include "dataplane/log.hpp"

#include <ctime>

#include "dataplane/systemd.hpp"

namespace lnetr::dp {

namespace {
const char* g_program = "lnetr-dataplane";
}

void set_log_program(const char* name) noexcept { g_program = name; }

void log_line(const char* level, const char* fmt, std::va_list ap) noexcept {
  char msg[512];
  std::vsnprintf(msg, sizeof msg, fmt, ap);
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
               t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000000, g_program, level, msg);
}

}  // namespace lnetr::dp
