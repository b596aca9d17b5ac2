#include "lnd/socklnd/address.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

namespace lnetr::sock {

std::string to_string(const Endpoint& e) {
  const std::string ip = to_string(e.ip);
  return (e.ip.is_v4() ? ip : "[" + ip + "]") + ":" + std::to_string(e.port);
}

SockAddr to_sockaddr(const Endpoint& e) noexcept {
  SockAddr s;
  if (e.ip.is_v4()) {
    auto* a = reinterpret_cast<sockaddr_in*>(&s.storage);
    a->sin_family = AF_INET;
    a->sin_port = htons(e.port);
    std::memcpy(&a->sin_addr, e.ip.bytes.data(), 4);
    s.len = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&s.storage);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(e.port);
    std::memcpy(&a->sin6_addr, e.ip.bytes.data(), 16);
    s.len = sizeof(sockaddr_in6);
  }
  return s;
}

std::optional<Endpoint> from_sockaddr(const sockaddr* sa, socklen_t len) noexcept {
  Endpoint e;
  if (sa->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    sockaddr_in a;
    std::memcpy(&a, sa, sizeof a);
    std::memcpy(e.ip.bytes.data(), &a.sin_addr, 4);
    e.port = ntohs(a.sin_port);
    return e;
  }
  if (sa->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    sockaddr_in6 a;
    std::memcpy(&a, sa, sizeof a);
    e.port = ntohs(a.sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) {
      std::memcpy(e.ip.bytes.data(), a.sin6_addr.s6_addr + 12, 4);
      return e;
    }
    e.ip.family = IpAddr::Family::v6;
    std::memcpy(e.ip.bytes.data(), &a.sin6_addr, 16);
    return e;
  }
  return std::nullopt;
}

std::optional<IpAddr> interface_address(const std::string& interface) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<IpAddr> v4, v6;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || interface != i->ifa_name) continue;
    const int af = i->ifa_addr->sa_family;
    if (af == AF_INET && !v4) {
      v4 = from_sockaddr(i->ifa_addr, sizeof(sockaddr_in))->ip;
    } else if (af == AF_INET6 && !v6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (!IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr) && !IN6_IS_ADDR_LOOPBACK(&a->sin6_addr))
        v6 = from_sockaddr(i->ifa_addr, sizeof(sockaddr_in6))->ip;
    }
  }
  freeifaddrs(list);
  return v4 ? v4 : v6;
}

}  // namespace lnetr::sock
