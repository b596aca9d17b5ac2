// Byte spans and fixed-width loads/stores in an explicit byte order.
//
// Every wire codec in lnetr works on these: a decoder checks the span's length
// against the layout first and then reads fields at fixed offsets, so a field
// is never read past the end of its span.
#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace lnetr {

using ByteSpan = std::span<const std::uint8_t>;
using MutableByteSpan = std::span<std::uint8_t>;

// The order in which a sender wrote its multi-byte integers.  LNet has three
// conventions: always little-endian (LNet header), always big-endian (large
// NIDs), and "the sender's native order", detected by the receiver from a
// magic number (acceptor request, socklnd HELLO and header, o2iblnd messages,
// ping info).
enum class ByteOrder : std::uint8_t { little, big };

inline constexpr ByteOrder kNativeOrder =
    std::endian::native == std::endian::little ? ByteOrder::little : ByteOrder::big;

constexpr ByteOrder swapped(ByteOrder o) noexcept {
  return o == ByteOrder::little ? ByteOrder::big : ByteOrder::little;
}

template <std::unsigned_integral T>
constexpr T byteswap(T v) noexcept {
  if constexpr (sizeof(T) == 1) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return static_cast<T>(__builtin_bswap16(v));
  } else if constexpr (sizeof(T) == 4) {
    return static_cast<T>(__builtin_bswap32(v));
  } else {
    static_assert(sizeof(T) == 8);
    return static_cast<T>(__builtin_bswap64(v));
  }
}

template <std::unsigned_integral T>
inline T load(const std::uint8_t* p, ByteOrder order) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  return order == kNativeOrder ? v : byteswap(v);
}

template <std::unsigned_integral T>
inline void store(std::uint8_t* p, T v, ByteOrder order) noexcept {
  if (order != kNativeOrder) v = byteswap(v);
  std::memcpy(p, &v, sizeof v);
}

template <std::unsigned_integral T>
inline T load_le(const std::uint8_t* p) noexcept { return load<T>(p, ByteOrder::little); }
template <std::unsigned_integral T>
inline T load_be(const std::uint8_t* p) noexcept { return load<T>(p, ByteOrder::big); }
template <std::unsigned_integral T>
inline void store_le(std::uint8_t* p, T v) noexcept { store<T>(p, v, ByteOrder::little); }
template <std::unsigned_integral T>
inline void store_be(std::uint8_t* p, T v) noexcept { store<T>(p, v, ByteOrder::big); }

// Byte order of a 32-bit magic as it appears at p: `little`/`big` if the bytes
// spell `magic` in that order, nothing otherwise.  Used by every
// sender-native structure to detect a peer of the other endianness.
struct MagicMatch {
  bool matched = false;
  ByteOrder order = kNativeOrder;
};

inline MagicMatch match_magic(const std::uint8_t* p, std::uint32_t magic) noexcept {
  if (load_le<std::uint32_t>(p) == magic) return {true, ByteOrder::little};
  if (load_be<std::uint32_t>(p) == magic) return {true, ByteOrder::big};
  return {};
}

}  // namespace lnetr
