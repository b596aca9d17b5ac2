// The packets of the dataplane's own TCP/IP (issue 6): Ethernet II with an
// optional 802.1Q tag, ARP for IPv4, IPv4, ICMP echo, IPv6 with ICMPv6 echo
// and neighbour discovery, TCP with its options, and the Internet checksum.  Pure functions over caller bytes: a
// decode validates and points into the packet (nothing copied), an encode
// writes into the caller's buffer and says how much it wrote.
//
// Strict where the engine must be (a peer's malformed option or length is
// an error, never guessed at) and byte-exact where Linux is looked at: the
// TCP headers and options Linux writes re-encode to the same bytes (tested
// on the captures of ../shared/vectors).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "router/bytes.hpp"
#include "router/ip_addr.hpp"
#include "router/result.hpp"

namespace lnetr::tcp {

// ---- errors ---------------------------------------------------------------------

#define LNETR_PACKET_ERRORS(X)                                                    \
  X(truncated, "shorter than its headers")                                        \
  X(not_ipv4, "not an IPv4 packet (another EtherType or IP version)")             \
  X(bad_ip_header, "IPv4 header length or total length out of bounds")            \
  X(bad_ip_checksum, "IPv4 header checksum wrong")                                 \
  X(ip_fragment, "an IPv4 fragment (the engine does not reassemble)")              \
  X(not_tcp, "IP protocol other than TCP")                                         \
  X(bad_tcp_header, "TCP data offset out of bounds")                               \
  X(bad_tcp_option, "a TCP option's length is wrong or runs past the header")      \
  X(bad_tcp_checksum, "TCP checksum wrong")                                        \
  X(bad_arp, "not an Ethernet/IPv4 ARP request or reply")                          \
  X(bad_icmp, "ICMP message too short or its checksum wrong")                     \
  X(not_ipv6, "not an IPv6 packet (another EtherType or IP version)")             \
  X(bad_ipv6_length, "IPv6 payload length beyond the frame")                      \
  X(bad_nd, "a neighbour discovery message malformed (hop limit, length, option)")

enum class PacketError : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_PACKET_ERRORS(LNETR_X)
#undef LNETR_X
};
std::string_view name(PacketError e) noexcept;
std::string_view describe(PacketError e) noexcept;

template <class T>
using PacketResult = Result<T, PacketError>;

// ---- the Internet checksum (RFC 1071) -------------------------------------------------

// The 16-bit one's-complement sum of `bytes` added to `sum` (folded, not
// complemented; bytes taken in network order).
std::uint32_t checksum_add(std::uint32_t sum, ByteSpan bytes) noexcept;
std::uint16_t checksum_fold(std::uint32_t sum) noexcept;
// As checksum_add, for `bytes` that sit `offset` bytes into what is being
// summed (an odd offset swaps the bytes of their sum, RFC 1071 §2(B)): a
// segment summed piece by piece.
std::uint32_t checksum_add_at(std::uint32_t sum, ByteSpan bytes, std::size_t offset) noexcept;
// The checksum field value for `bytes` (complement of the folded sum).
std::uint16_t checksum(ByteSpan bytes) noexcept;
// The TCP pseudo-header's sum (source, destination, protocol 6, TCP length),
// folded: what a NIC doing checksum offload expects in the field.
std::uint16_t tcp_pseudo_sum(std::uint32_t src, std::uint32_t dst, std::uint16_t tcp_length) noexcept;
// The pseudo-header's sum for either family (IPv6's: RFC 8200 §8.1) and
// any upper-layer protocol, folded.
std::uint16_t pseudo_sum(const IpAddr& src, const IpAddr& dst, std::uint8_t protocol, std::uint32_t length) noexcept;
inline std::uint16_t tcp_pseudo_sum(const IpAddr& src, const IpAddr& dst, std::uint16_t tcp_length) noexcept;

// ---- Ethernet ---------------------------------------------------------------------------

using Mac = std::array<std::uint8_t, 6>;
inline constexpr Mac kBroadcastMac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

inline constexpr std::uint16_t kEtherIpv4 = 0x0800;
inline constexpr std::uint16_t kEtherArp = 0x0806;
inline constexpr std::uint16_t kEtherVlan = 0x8100;
inline constexpr std::uint16_t kEtherIpv6 = 0x86dd;

struct Ethernet {
  Mac dst{};
  Mac src{};
  std::optional<std::uint16_t> vlan;  // 802.1Q tag control (PCP, DEI, VID) if tagged
  std::uint16_t type = 0;             // EtherType after any tag
  std::size_t header_size() const noexcept { return vlan ? 18 : 14; }
};

PacketResult<Ethernet> decode_ethernet(ByteSpan frame) noexcept;
// Writes header_size() bytes; 0 if `out` is too small.
std::size_t encode_ethernet(const Ethernet& e, MutableByteSpan out) noexcept;

// The IP address a received frame comes from, read without decoding the
// rest: an IPv4 or IPv6 packet's source, an ARP message's sender (a port
// with several queues steers a frame by it).  Nothing for other frames and
// frames too short to hold it.
std::optional<IpAddr> sender_address(ByteSpan frame) noexcept;

// The Ethernet multicast address of an IPv6 multicast address (RFC 2464 §7).
Mac multicast_mac(const IpAddr& group) noexcept;

// ---- ARP (Ethernet / IPv4 only) ---------------------------------------------------------

inline constexpr std::uint16_t kArpRequest = 1;
inline constexpr std::uint16_t kArpReply = 2;
inline constexpr std::size_t kArpSize = 28;

struct Arp {
  std::uint16_t op = kArpRequest;
  Mac sender_mac{};
  std::uint32_t sender_ip = 0;  // host order
  Mac target_mac{};
  std::uint32_t target_ip = 0;
};

PacketResult<Arp> decode_arp(ByteSpan body) noexcept;
std::size_t encode_arp(const Arp& a, MutableByteSpan out) noexcept;

// ---- IPv4 -------------------------------------------------------------------------------

inline constexpr std::uint8_t kProtoIcmp = 1;
inline constexpr std::uint8_t kProtoTcp = 6;
inline constexpr std::size_t kIpv4MinHeader = 20;

struct Ipv4 {
  std::uint8_t header_size = kIpv4MinHeader;  // IHL * 4 (options are skipped)
  std::uint8_t tos = 0;                       // DSCP and ECN
  std::uint16_t total_length = 0;
  std::uint16_t id = 0;
  bool dont_fragment = true;
  std::uint8_t ttl = 64;
  std::uint8_t protocol = kProtoTcp;
  std::uint32_t src = 0;  // host order
  std::uint32_t dst = 0;
  ByteSpan payload;       // decode: total_length - header_size bytes after the header
};

// `packet` is what follows the Ethernet header; bytes beyond total_length
// (Ethernet padding) are ignored.  The header checksum is checked; a
// fragment is refused.
PacketResult<Ipv4> decode_ipv4(ByteSpan packet) noexcept;
// The same for a packet of `whole` bytes (from the header on) of which
// `head` is the first part (a frame in a chain of buffers): total_length is
// checked against `whole`, and `payload` holds only what follows the
// header within `head`.
PacketResult<Ipv4> decode_ipv4_head(ByteSpan head, std::size_t whole) noexcept;
// Writes a 20-byte header (no options) with its checksum; total_length as
// given.  0 if `out` is too small.
std::size_t encode_ipv4(const Ipv4& h, MutableByteSpan out) noexcept;

// ---- ICMP echo -------------------------------------------------------------------------

inline constexpr std::uint8_t kIcmpEchoReply = 0;
inline constexpr std::uint8_t kIcmpEchoRequest = 8;

struct Icmp {
  std::uint8_t type = 0;
  std::uint8_t code = 0;
  std::uint16_t id = 0;
  std::uint16_t sequence = 0;
  ByteSpan data;  // after the 8-byte header
};

// Checks the checksum over the whole message.
PacketResult<Icmp> decode_icmp(ByteSpan message) noexcept;

// ---- IPv6 -------------------------------------------------------------------------------

inline constexpr std::uint8_t kProtoIcmpv6 = 58;
inline constexpr std::size_t kIpv6Header = 40;

struct Ipv6 {
  std::uint8_t traffic_class = 0;  // DSCP and ECN
  std::uint32_t flow_label = 0;
  std::uint16_t payload_length = 0;
  std::uint8_t next_header = kProtoTcp;  // the engine takes no extension headers: the upper layer's
  std::uint8_t hop_limit = 64;
  IpAddr src = IpAddr::v6({});
  IpAddr dst = IpAddr::v6({});
  ByteSpan payload;  // decode: payload_length bytes after the header
};

// As decode_ipv4: bytes beyond payload_length (Ethernet padding) are
// ignored.  An extension header is not refused here: next_header says it.
PacketResult<Ipv6> decode_ipv6(ByteSpan packet) noexcept;
PacketResult<Ipv6> decode_ipv6_head(ByteSpan head, std::size_t whole) noexcept;
// Writes the 40-byte header.  0 if `out` is too small.
std::size_t encode_ipv6(const Ipv6& h, MutableByteSpan out) noexcept;

// The solicited-node multicast address of `a` (RFC 4291 §2.7.1).
IpAddr solicited_node(const IpAddr& a) noexcept;
// The link-local address of an interface with MAC `mac` (fe80::/64 and the
// modified EUI-64 interface identifier, RFC 4291 appendix A).
IpAddr link_local(const Mac& mac) noexcept;
inline constexpr IpAddr kAllNodes = IpAddr::v6({0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
inline constexpr IpAddr kAllMldRouters = IpAddr::v6({0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x16});

// An MLDv2 report (RFC 3810 §5.2) that `src` listens to `groups` (each a
// "change to exclude {}" record: joined, all sources), as a whole IPv6
// packet to ff02::16 with a hop limit of 1 and the router alert option.
// Returns its size, 0 if `out` is too small.
std::size_t encode_mld_report(const IpAddr& src, const IpAddr* groups, std::size_t count,
                              MutableByteSpan out) noexcept;
inline constexpr std::uint8_t kMldV2Report = 143;

// ---- ICMPv6: echo, neighbour discovery -----------------------------------------------

inline constexpr std::uint8_t kIcmp6EchoRequest = 128;
inline constexpr std::uint8_t kIcmp6EchoReply = 129;
inline constexpr std::uint8_t kNdSolicitation = 135;
inline constexpr std::uint8_t kNdAdvertisement = 136;

struct Icmp6 {
  std::uint8_t type = 0;
  std::uint8_t code = 0;
  ByteSpan body;  // after type, code and checksum
};
// Checks the checksum (with the IPv6 pseudo-header) over the whole message.
PacketResult<Icmp6> decode_icmp6(const Ipv6& ip) noexcept;
// Writes the checksum of the ICMPv6 message in `message` (its field at 2).
void finish_icmp6_checksum(const IpAddr& src, const IpAddr& dst, MutableByteSpan message) noexcept;

// A neighbour solicitation or advertisement (RFC 4861 §4.3, §4.4) with its
// link-layer address option: the source's (solicitation), the target's
// (advertisement).
struct Neighbour6 {
  std::uint8_t type = kNdSolicitation;
  IpAddr target = IpAddr::v6({});
  std::optional<Mac> link_addr;
  bool router = false, solicited = false, override_ = false;  // advertisement flags
};
inline constexpr std::size_t kNdSize = 32;  // a message with its link-layer address option
// RFC 4861 §7.1's checks: hop limit 255, code 0, at least 24 bytes, a
// unicast target, options of non-zero length within the message (options
// other than the link-layer address's are skipped).  The checksum is
// decode_icmp6's.
PacketResult<Neighbour6> decode_nd(const Ipv6& ip, const Icmp6& m) noexcept;
// Writes kNdSize bytes (the link-layer address option only if set: 24
// otherwise) with the checksum for the addresses; 0 if `out` is too small.
std::size_t encode_nd(const Neighbour6& n, const IpAddr& src, const IpAddr& dst, MutableByteSpan out) noexcept;

// ---- TCP -------------------------------------------------------------------------------

namespace tcp_flag {
inline constexpr std::uint8_t fin = 0x01;
inline constexpr std::uint8_t syn = 0x02;
inline constexpr std::uint8_t rst = 0x04;
inline constexpr std::uint8_t psh = 0x08;
inline constexpr std::uint8_t ack = 0x10;
inline constexpr std::uint8_t urg = 0x20;
inline constexpr std::uint8_t ece = 0x40;
inline constexpr std::uint8_t cwr = 0x80;
}  // namespace tcp_flag

inline constexpr std::size_t kTcpMinHeader = 20;
inline constexpr std::size_t kTcpMaxHeader = 60;
inline constexpr std::size_t kMaxSackBlocks = 4;

struct SackBlock {
  std::uint32_t left = 0;   // first sequence number of the block
  std::uint32_t right = 0;  // one past its last
  friend bool operator==(const SackBlock&, const SackBlock&) = default;
};

// The options of one segment (RFC 793, 7323, 2018).  Absent is nullopt.
struct TcpOptions {
  std::optional<std::uint16_t> mss;
  std::optional<std::uint8_t> window_scale;
  bool sack_permitted = false;
  std::optional<std::pair<std::uint32_t, std::uint32_t>> timestamps;  // (TSval, TSecr)
  std::array<SackBlock, kMaxSackBlocks> sack{};
  std::uint8_t sack_count = 0;
  friend bool operator==(const TcpOptions&, const TcpOptions&) = default;
};

// A part of a received frame in its own buffer, and that buffer's device
// reference (a DPDK mbuf's, as Stack::receive's `dev`).
struct FramePiece {
  ByteSpan bytes;
  void* dev = nullptr;
};

struct TcpHeader {
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = 0;
  std::uint32_t seq = 0;
  std::uint32_t ack = 0;
  std::uint8_t flags = 0;
  std::uint16_t window = 0;  // as sent (before scaling)
  std::uint16_t checksum = 0;
  std::uint16_t urgent = 0;
  std::uint8_t header_size = kTcpMinHeader;  // data offset * 4
  TcpOptions options;
  ByteSpan payload;  // decode: the bytes after the header
  // Received: the device reference of the frame the payload lies in, if
  // the port gave one (Stack::receive); not on the wire.
  void* frame = nullptr;
  // Received in a chain of buffers (a large receive offload's unit, a
  // jumbo frame): the payload goes on in these pieces, each with its own
  // device reference; not on the wire.
  const FramePiece* more = nullptr;
  std::size_t more_count = 0;
  // The payload's length, every piece counted.
  std::size_t payload_size() const noexcept {
    std::size_t n = payload.size();
    for (std::size_t i = 0; i < more_count; ++i) n += more[i].bytes.size();
    return n;
  }
  // Calls f(bytes, frame) for each piece of the payload in order, from
  // byte `from` on, `len` bytes in all (empty pieces skipped).
  template <typename F>
  void for_each_piece(std::size_t from, std::size_t len, F&& f) const {
    auto one = [&](ByteSpan b, void* dev) {
      if (len == 0) return;
      if (from >= b.size()) {
        from -= b.size();
        return;
      }
      const std::size_t k = std::min(len, b.size() - from);
      f(b.subspan(from, k), dev);
      from = 0;
      len -= k;
    };
    one(payload, frame);
    for (std::size_t i = 0; i < more_count && len > 0; ++i) one(more[i].bytes, more[i].dev);
  }
};

// `segment` is the IP payload.  Options are parsed strictly: unknown kinds
// are skipped by their length, a length that is wrong for its kind or
// runs past the header is an error.  The checksum is not checked here
// (see tcp_checksum_ok).
PacketResult<TcpHeader> decode_tcp(ByteSpan segment) noexcept;
// Whether `segment`'s checksum is right for the addresses.
bool tcp_checksum_ok(std::uint32_t src, std::uint32_t dst, ByteSpan segment) noexcept;
bool tcp_checksum_ok(const IpAddr& src, const IpAddr& dst, ByteSpan segment) noexcept;

// The header and options as Linux lays them out (SYN: MSS, SACK-permitted
// and timestamps as one word, NOP + window scale; otherwise NOP NOP + time
// stamps, then NOP NOP + SACK blocks), padded to a 4-byte boundary.  The
// checksum field is written as h.checksum (fill it in with
// finish_tcp_checksum once the payload is in place).  Returns the header
// size, 0 if `out` is too small or the options do not fit in 40 bytes.
std::size_t encode_tcp(const TcpHeader& h, MutableByteSpan out) noexcept;
// Compute and store the checksum of the segment (header and payload) in
// `segment` for the addresses.
void finish_tcp_checksum(std::uint32_t src, std::uint32_t dst, MutableByteSpan segment) noexcept;
void finish_tcp_checksum(const IpAddr& src, const IpAddr& dst, MutableByteSpan segment) noexcept;

// Bytes encode_tcp would write for these options.
std::size_t tcp_options_size(const TcpOptions& o, bool syn) noexcept;

inline std::uint16_t tcp_pseudo_sum(const IpAddr& src, const IpAddr& dst, std::uint16_t tcp_length) noexcept {
  return pseudo_sum(src, dst, kProtoTcp, tcp_length);
}

}  // namespace lnetr::tcp
