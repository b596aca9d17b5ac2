// Where the library's few log lines go (what opening a port found about
// its device): a function the program installs once, before it opens
// ports; without one, lines go to stderr.  Nothing here logs per frame.
#pragma once

#include <cstdarg>

namespace lnetr::tcp {

// `level` is "info", "warning" or "error"; the line is `fmt` with `ap`.
using LogFn = void (*)(const char* level, const char* fmt, std::va_list ap) noexcept;
void set_log(LogFn fn) noexcept;

[[gnu::format(printf, 1, 2)]] void log_info(const char* fmt, ...) noexcept;

}  // namespace lnetr::tcp
