#include "router/ip_addr.hpp"

#include <arpa/inet.h>

namespace lnetr {

std::string to_string(const IpAddr& a) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(a.is_v4() ? AF_INET : AF_INET6, a.bytes.data(), buf, sizeof buf);
  return buf;
}

}  // namespace lnetr
