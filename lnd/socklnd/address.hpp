// IP addresses and TCP endpoints of socklnd connections, IPv4 or IPv6.  An
// IpAddr keeps the address bytes in network order, as a NID's addr does,
// so that converting between a tcp NID and the address it names is a copy.
#pragma once

#include <sys/socket.h>

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>

#include "router/nid.hpp"

namespace lnetr::sock {

struct IpAddr {
  enum class Family : std::uint8_t { v4, v6 };
  Family family = Family::v4;
  std::array<std::uint8_t, 16> bytes{};  // the first 4 (v4) or all 16 (v6)

  static IpAddr v4(std::uint32_t host_order) noexcept;
  static IpAddr v6(const std::array<std::uint8_t, 16>& b) noexcept { return {Family::v6, b}; }
  // The address a tcp NID names: IPv6 for a 16-byte (size 12) NID, else the
  // first four bytes.
  static IpAddr of(const Nid& nid) noexcept;

  bool is_v4() const noexcept { return family == Family::v4; }
  std::uint32_t v4_host() const noexcept;  // is_v4() only
  int af() const noexcept { return is_v4() ? AF_INET : AF_INET6; }

  friend auto operator<=>(const IpAddr&, const IpAddr&) = default;
};

// The NID of `a` on `net` (a large NID for IPv6).
Nid make_nid(Net net, const IpAddr& a) noexcept;
// "10.0.0.1", "fd00::1"
std::string to_string(const IpAddr& a);

struct Endpoint {
  IpAddr ip;
  std::uint16_t port = 0;
  friend auto operator<=>(const Endpoint&, const Endpoint&) = default;
};

// "10.0.0.1:988", "[fd00::1]:988"
std::string to_string(const Endpoint& e);

// An endpoint as the socket calls take it.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() noexcept { return reinterpret_cast<sockaddr*>(&storage); }
};
SockAddr to_sockaddr(const Endpoint& e) noexcept;
// nullopt unless AF_INET or AF_INET6.  An IPv4-mapped IPv6 address is
// returned as IPv4, the address the peer really has.
std::optional<Endpoint> from_sockaddr(const sockaddr* sa, socklen_t len) noexcept;

// The address an NI on `interface` takes, as Linux enumerates them: its
// first IPv4 address, else its first IPv6 address that is not link-local
// (getifaddrs() does not tell temporary addresses apart).  nullopt if there is no such interface or
// address.
std::optional<IpAddr> interface_address(const std::string& interface);

}  // namespace lnetr::sock
