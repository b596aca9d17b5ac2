// name() and describe() for an enum declared from an X-macro list
// LIST(X), with X(identifier, "sentence for operators"):
//   LNETR_ENUM_NAMES(constexpr, WireError, LNETR_WIRE_ERRORS)
// defines `constexpr std::string_view name(WireError)` (the identifier, for
// counters and JSON keys) and `describe(WireError)` (the sentence).
#pragma once

#include <string_view>

#define LNETR_ENUM_NAME_CASE_(n, text) \
  case n:                              \
    return #n;
#define LNETR_ENUM_TEXT_CASE_(n, text) \
  case n:                              \
    return text;
#define LNETR_ENUM_NAMES(SPEC, E, LIST)            \
  SPEC std::string_view name(E v) noexcept {       \
    using enum E;                                  \
    switch (v) { LIST(LNETR_ENUM_NAME_CASE_) }     \
    return "unknown";                              \
  }                                                \
  SPEC std::string_view describe(E v) noexcept {   \
    using enum E;                                  \
    switch (v) { LIST(LNETR_ENUM_TEXT_CASE_) }     \
    return "unknown";                              \
  }
