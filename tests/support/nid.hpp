// NIDs written as text in tests: nid("10.1.0.2@tcp").
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "router/nid.hpp"

namespace lnetr::test {

// The NID a test wrote; a text that does not parse throws (failing the
// test) rather than standing for some other NID.
inline Nid nid(std::string_view s) {
  auto n = parse_nid(s);
  if (!n) throw std::invalid_argument("not a NID: " + std::string(s));
  return *n;
}

}  // namespace lnetr::test
