// An IP address, IPv4 or IPv6, as socklnd's endpoints and the dataplane's
// own TCP/IP both take it.  The bytes are in network order, as a NID's addr
// is, so that a tcp NID and the address it names convert by a copy.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <string>

#include "router/nid.hpp"

namespace lnetr {

struct IpAddr {
  enum class Family : std::uint8_t { v4, v6 };
  Family family = Family::v4;
  std::array<std::uint8_t, 16> bytes{};  // the first 4 (v4) or all 16 (v6)

  static constexpr IpAddr v4(std::uint32_t host_order) noexcept {
    IpAddr a;
    a.bytes[0] = static_cast<std::uint8_t>(host_order >> 24);
    a.bytes[1] = static_cast<std::uint8_t>(host_order >> 16);
    a.bytes[2] = static_cast<std::uint8_t>(host_order >> 8);
    a.bytes[3] = static_cast<std::uint8_t>(host_order);
    return a;
  }
  static constexpr IpAddr v6(const std::array<std::uint8_t, 16>& b) noexcept { return {Family::v6, b}; }
  // The address a tcp NID names: IPv6 for a 16-byte (size 12) NID, else the
  // first four bytes.
  static constexpr IpAddr of(const Nid& nid) noexcept { return nid.size == 12 ? v6(nid.addr) : v4(nid.addr4()); }

  constexpr bool is_v4() const noexcept { return family == Family::v4; }
  // is_v4() only.
  constexpr std::uint32_t v4_host() const noexcept {
    return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) | (std::uint32_t{bytes[2]} << 8) |
           bytes[3];
  }
  // The bytes on the wire: 4 or 16.
  constexpr std::size_t size() const noexcept { return is_v4() ? 4 : 16; }
  // IPv6 multicast (ff00::/8).
  constexpr bool is_multicast_v6() const noexcept { return !is_v4() && bytes[0] == 0xff; }
  constexpr bool is_unspecified() const noexcept {
    for (std::size_t i = 0; i < size(); ++i)
      if (bytes[i] != 0) return false;
    return true;
  }
  // Whether the first `prefix_len` bits are those of `other` (same family).
  constexpr bool same_prefix(const IpAddr& other, std::uint32_t prefix_len) const noexcept {
    if (family != other.family) return false;
    for (std::size_t i = 0; i < size() && prefix_len > 0; ++i, prefix_len = prefix_len > 8 ? prefix_len - 8 : 0) {
      const auto mask = static_cast<std::uint8_t>(prefix_len >= 8 ? 0xff : 0xff << (8 - prefix_len));
      if ((bytes[i] & mask) != (other.bytes[i] & mask)) return false;
    }
    return true;
  }

  friend constexpr auto operator<=>(const IpAddr&, const IpAddr&) = default;
};

// The NID of `a` on `net` (a large NID for IPv6).
constexpr Nid make_nid(Net net, const IpAddr& a) noexcept {
  if (a.is_v4()) return Nid::make(net, a.v4_host());
  Nid n;
  n.size = 12;
  n.type = net.type;
  n.number = net.number;
  n.addr = a.bytes;
  return n;
}

// "10.0.0.1", "fd00::1"
std::string to_string(const IpAddr& a);

}  // namespace lnetr
