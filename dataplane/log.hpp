// Logging of lnetr-dataplane: one line per event on stderr (the journal
// under systemd), with a level.  Never called per message on the
// forwarding path; state changes and errors only.
#pragma once

#include <cstdarg>
#include <cstdio>

namespace lnetr::dp {

void log_line(const char* level, const char* fmt, std::va_list ap) noexcept;
// The program named in each line (lnetr-dataplane unless set; a static string).
void set_log_program(const char* name) noexcept;

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

}  // namespace lnetr::dp
