// Link, network and transport headers of one captured frame: Ethernet II
// (with 802.1Q / 802.1ad tags), Linux cooked captures, raw IP; IPv4 and IPv6;
// TCP and UDP.  Pure functions over the captured bytes: nothing is copied,
// the returned payload spans point into the caller's frame.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dataplane/tcp/wire.hpp"
#include "router/bytes.hpp"
#include "router/result.hpp"

namespace lnetr::decode {

// pcap LINKTYPE_* values of the link layers we understand.
enum class LinkType : std::uint32_t {
  ethernet = 1,
  raw_ip = 101,
  linux_sll = 113,
  linux_sll2 = 276,
};

// A captured frame's identity: its number (1-based, as Wireshark counts)
// and capture time in seconds since the capture's first frame.
struct FrameRef {
  std::uint32_t number = 0;
  double time = 0;
};

// The captured frames that carried a PDU's bytes.
struct FrameSpan {
  std::uint32_t first = 0;
  std::uint32_t last = 0;
  std::uint32_t count = 0;  // distinct frames in first..last that carried bytes
  double time = 0;          // capture time of `first`
};

// Why a frame carries nothing for the LNet decoders.  Declared once: the
// enum, the name used in the tool's statistics and the operator's text.
#define LNETR_FRAME_SKIPS(X)                                                   \
  X(unknown_link, "link type not supported (Ethernet, Linux cooked, raw IP)") \
  X(not_ip, "not an IP packet (ARP, LLDP, ...)")                              \
  X(truncated, "frame shorter than its headers")                              \
  X(bad_ip_header, "malformed IP header")                                     \
  X(ip_fragment, "IP fragment (LNet traffic is never fragmented)")            \
  X(other_protocol, "IP protocol other than TCP and UDP")

enum class FrameSkip : std::uint8_t {
#define LNETR_X(name, text) name,
  LNETR_FRAME_SKIPS(LNETR_X)
#undef LNETR_X
};
inline constexpr std::size_t kFrameSkipCount = 0
#define LNETR_X(name, text) +1
    LNETR_FRAME_SKIPS(LNETR_X)
#undef LNETR_X
    ;

std::string_view name(FrameSkip s) noexcept;
std::string_view describe(FrameSkip s) noexcept;

// An IPv4 or IPv6 address; IPv4 uses the first four bytes.
struct IpAddress {
  std::uint8_t version = 4;
  std::array<std::uint8_t, 16> bytes{};

  static IpAddress v4(std::uint32_t host_order) noexcept;
  friend auto operator<=>(const IpAddress&, const IpAddress&) = default;
};
std::string to_string(const IpAddress& a);  // "10.201.1.2", "2001:db8::1"

struct Endpoint {
  IpAddress ip;
  std::uint16_t port = 0;
  friend auto operator<=>(const Endpoint&, const Endpoint&) = default;
};
std::string to_string(const Endpoint& e);  // "10.201.1.2:1023", "[2001:db8::1]:988"

namespace tcp_flag = lnetr::tcp::tcp_flag;

struct TcpSegment {
  std::uint32_t seq = 0;
  std::uint32_t ack = 0;
  std::uint8_t flags = 0;
  ByteSpan payload;
};

struct UdpDatagram {
  ByteSpan payload;
};

enum class Transport : std::uint8_t { tcp, udp };

// The headers of one frame down to TCP or UDP.
struct ParsedFrame {
  std::optional<std::uint16_t> vlan;  // outermost 802.1Q VLAN id, if tagged
  Endpoint src;
  Endpoint dst;
  Transport transport = Transport::tcp;
  TcpSegment tcp;  // transport == tcp
  UdpDatagram udp;  // transport == udp
};

// Parse `frame` as captured on a link of `link`.  IP datagrams longer than
// their total-length field (Ethernet padding) are trimmed; a zero IPv4 total
// length (TSO super-frames as seen by a capturing host) means "the rest of
// the frame".
Result<ParsedFrame, FrameSkip> parse_frame(LinkType link, ByteSpan frame) noexcept;

}  // namespace lnetr::decode
