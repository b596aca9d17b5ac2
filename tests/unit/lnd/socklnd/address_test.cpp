#include "lnd/socklnd/address.hpp"

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lnd/socklnd/socket.hpp"
#include "lnd/socklnd/wire.hpp"

#include "tests/support/nid.hpp"

namespace lnetr::sock {
namespace {

using test::nid;

IpAddr v6(std::string_view text) {
  IpAddr a;
  a.family = IpAddr::Family::v6;
  EXPECT_EQ(inet_pton(AF_INET6, std::string(text).c_str(), a.bytes.data()), 1);
  return a;
}

// nid.md §3: the NID's address bytes are the address in network order.
TEST(IpAddr, IsTheAddressOfATcpNid) {
  const IpAddr a4 = IpAddr::of(nid("192.168.1.10@tcp"));
  EXPECT_TRUE(a4.is_v4());
  EXPECT_EQ(a4.v4_host(), 0xc0a8010au);
  EXPECT_EQ(to_string(a4), "192.168.1.10");
  const IpAddr a6 = IpAddr::of(nid("2001:db8::1@tcp"));
  EXPECT_FALSE(a6.is_v4());
  EXPECT_EQ(a6, v6("2001:db8::1"));
  EXPECT_EQ(to_string(a6), "2001:db8::1");
  EXPECT_EQ(af(a6), AF_INET6);
  EXPECT_NE(a4, IpAddr::v4(0));
}

TEST(IpAddr, MakesNidsBothWays) {
  const Net tcp1 = *parse_net("tcp1");
  for (std::string_view s : {"10.0.0.7@tcp1", "fd00:1::7@tcp1", "2001:db8:0:1::ff@tcp1"}) {
    const Nid n = nid(s);
    EXPECT_EQ(make_nid(tcp1, IpAddr::of(n)), n) << s;
  }
  const Nid large = make_nid(tcp1, v6("2001:db8::1"));
  EXPECT_EQ(large.size, 12);
  std::uint8_t wire[Nid::kWireSize];
  encode_nid20(large, wire);
  const std::uint8_t spec[] = {0x0c, 0x02, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
  EXPECT_EQ(std::memcmp(wire, spec, sizeof spec), 0);
}

TEST(Endpoint, PrintsAndConvertsToSockaddrs) {
  const Endpoint e4{IpAddr::v4(0x0a000001), 988};
  const Endpoint e6{v6("fd00::1"), 1023};
  EXPECT_EQ(to_string(e4), "10.0.0.1:988");
  EXPECT_EQ(to_string(e6), "[fd00::1]:1023");
  for (const Endpoint& e : {e4, e6}) {
    const SockAddr s = to_sockaddr(e);
    EXPECT_EQ(s.len, e.ip.is_v4() ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    auto back = from_sockaddr(s.get(), s.len);
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, e);
  }
  const SockAddr s6 = to_sockaddr(e6);
  EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in6*>(s6.get())->sin6_port), 1023);
  // A v4-mapped peer is the IPv4 address it is.
  auto mapped = from_sockaddr(to_sockaddr({v6("::ffff:10.0.0.1"), 988}).get(), sizeof(sockaddr_in6));
  ASSERT_TRUE(mapped);
  EXPECT_EQ(*mapped, e4);
  // Truncated or of another family: nothing.
  EXPECT_FALSE(from_sockaddr(to_sockaddr(e6).get(), sizeof(sockaddr_in)));
  sockaddr un{};
  un.sa_family = AF_UNIX;
  EXPECT_FALSE(from_sockaddr(&un, sizeof un));
}

TEST(InterfaceAddress, IPv4FirstAsLinuxEnumerates) {
  auto lo = interface_address("lo");
  ASSERT_TRUE(lo);
  EXPECT_EQ(*lo, IpAddr::v4(0x7f000001));  // lo has ::1 too
  EXPECT_FALSE(interface_address("no-such-if0"));
}

// Kernel sockets over IPv6 (loopback ::1): listen, connect from a
// privileged port, accept with the peer's address.  Needs root.
TEST(KernelSockets, CarryIpv6FromAPrivilegedPort) {
  const IpAddr lo6 = v6("::1");
  std::string err;
  const int l = listen_on(lo6, 0, 8, err);
  ASSERT_GE(l, 0) << err;
  Endpoint where;
  ASSERT_TRUE(local_address(l, where));
  EXPECT_EQ(where.ip, lo6);
  int error = 0;
  const int c = connect_privileged(lo6, lo6, where.port, error);
  ASSERT_GE(c, 0) << std::strerror(error);
  Endpoint remote;
  int a = -1;
  for (int i = 0; i < 1000 && a < 0; ++i) {
    a = accept_one(l, remote);
    if (a < 0) usleep(1000);
  }
  ASSERT_GE(a, 0);
  EXPECT_EQ(remote.ip, lo6);
  EXPECT_LE(remote.port, kPrivilegedPortMax);
  EXPECT_GE(remote.port, kPrivilegedPortMin);
  Endpoint local;
  ASSERT_TRUE(local_address(c, local));
  EXPECT_EQ(local, remote);
  ::close(a);
  ::close(c);
  ::close(l);
  // Families must agree.
  EXPECT_EQ(connect_privileged(IpAddr::v4(0x7f000001), lo6, where.port, error), -1);
  EXPECT_EQ(error, EAFNOSUPPORT);
}

}  // namespace
}  // namespace lnetr::sock
