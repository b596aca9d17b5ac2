// Hex literals for byte-exact test vectors: hex("c1 00 00 00 ...").
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace lnetr::test {

inline std::vector<std::uint8_t> hex(std::string_view s) {
  std::vector<std::uint8_t> out;
  int hi = -1;
  for (char c : s) {
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else if (c == ' ' || c == '\n' || c == '\t' || c == ':') continue;
    else throw std::invalid_argument("bad hex digit");
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<std::uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  if (hi >= 0) throw std::invalid_argument("odd number of hex digits");
  return out;
}

}  // namespace lnetr::test
