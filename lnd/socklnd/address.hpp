// TCP endpoints of socklnd connections, IPv4 or IPv6 (router/ip_addr.hpp's
// addresses), and their socket forms.
#pragma once

#include <sys/socket.h>

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>

#include "router/ip_addr.hpp"

namespace lnetr::sock {

using lnetr::IpAddr;
using lnetr::make_nid;
using lnetr::to_string;

// AF_INET or AF_INET6, as the socket calls take the family.
inline int af(const IpAddr& a) noexcept { return a.is_v4() ? AF_INET : AF_INET6; }

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
