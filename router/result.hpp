// Decoder results: a value or a typed error, without exceptions or allocation.
#pragma once

#include "router/enum_names.hpp"

#include <cassert>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

namespace lnetr {

// Why a wire decoder refused its input.  Declared once: the enum, the short
// name used in counters and logs, and the text an operator reads.
#define LNETR_WIRE_ERRORS(X)                                                           \
  X(truncated, "shorter than the fixed layout of the structure")                       \
  X(bad_magic, "unknown magic number")                                                 \
  X(bad_version, "protocol version not supported")                                     \
  X(bad_type, "unknown message or connection type")                                    \
  X(bad_length, "a length field disagrees with the bytes present or with a limit")     \
  X(bad_nid, "malformed NID (wildcard, oversized address or unknown form)")            \
  X(bad_checksum, "the message's checksum does not match its bytes")                    \
  X(bad_value, "a field holds a value the protocol does not allow")

enum class WireError : std::uint8_t {
#define LNETR_X(name, text) name,
  LNETR_WIRE_ERRORS(LNETR_X)
#undef LNETR_X
};

LNETR_ENUM_NAMES(constexpr, WireError, LNETR_WIRE_ERRORS)

template <class E>
struct Unexpected {
  E error;
};

template <class E>
Unexpected(E) -> Unexpected<E>;

// A minimal expected<T, E> (C++23's std::expected is not available in C++20).
template <class T, class E = WireError>
class [[nodiscard]] Result {
 public:
  static_assert(std::is_trivially_destructible_v<E>);

  Result(const T& v) : ok_(true), value_(v) {}              // NOLINT: implicit by design
  Result(T&& v) : ok_(true), value_(std::move(v)) {}        // NOLINT
  Result(Unexpected<E> u) : ok_(false), error_(u.error) {}  // NOLINT

  Result(const Result& o) : ok_(o.ok_) {
    if (ok_) new (&value_) T(o.value_); else error_ = o.error_;
  }
  Result(Result&& o) noexcept(std::is_nothrow_move_constructible_v<T>) : ok_(o.ok_) {
    if (ok_) new (&value_) T(std::move(o.value_)); else error_ = o.error_;
  }
  Result& operator=(const Result& o) {
    if (this != &o) { this->~Result(); new (this) Result(o); }
    return *this;
  }
  Result& operator=(Result&& o) noexcept(std::is_nothrow_move_constructible_v<T>) {
    if (this != &o) { this->~Result(); new (this) Result(std::move(o)); }
    return *this;
  }
  ~Result() {
    if (ok_) value_.~T();
  }

  bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }

  T& value() & { assert(ok_); return value_; }
  const T& value() const& { assert(ok_); return value_; }
  T&& value() && { assert(ok_); return std::move(value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  E error() const noexcept { assert(!ok_); return error_; }

 private:
  bool ok_;
  union {
    T value_;
    E error_;
  };
};

template <class E>
constexpr Unexpected<E> fail(E e) noexcept { return Unexpected<E>{e}; }

}  // namespace lnetr
