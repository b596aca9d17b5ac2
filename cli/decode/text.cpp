#include "cli/decode/text.hpp"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>

namespace lnetr::decode {

std::string strprintf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string hex64(std::uint64_t v) { return strprintf("0x%" PRIx64, v); }

std::string hex_bytes(ByteSpan bytes) {
  std::string out;
  for (std::uint8_t b : bytes) {
    if (!out.empty()) out += ' ';
    out += strprintf("%02x", b);
  }
  return out;
}

}  // namespace lnetr::decode
