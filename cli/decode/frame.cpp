#include "cli/decode/frame.hpp"
#include "router/enum_names.hpp"

#include <algorithm>
#include <cstdio>

namespace lnetr::decode {
namespace {

// ---- link layers ----------------------------------------------------------
constexpr std::size_t kEthHeaderSize = 14;
constexpr std::size_t kEthTypeOffset = 12;
constexpr std::size_t kVlanTagSize = 4;      // TCI (2) + inner EtherType (2)
constexpr std::uint16_t kVlanIdMask = 0x0fff;
constexpr std::size_t kSllHeaderSize = 16;   // Linux cooked v1
constexpr std::size_t kSllProtocolOffset = 14;
constexpr std::size_t kSll2HeaderSize = 20;  // Linux cooked v2
constexpr std::size_t kSll2ProtocolOffset = 0;

constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
constexpr std::uint16_t kEtherTypeIpv6 = 0x86DD;
constexpr std::uint16_t kEtherTypeVlan = 0x8100;
constexpr std::uint16_t kEtherTypeQinQ = 0x88A8;

// ---- IPv4 -----------------------------------------------------------------
constexpr std::size_t kIpv4MinHeader = 20;
constexpr std::size_t kIpv4TotalLength = 2;
constexpr std::size_t kIpv4FlagsFragment = 6;
constexpr std::size_t kIpv4Protocol = 9;
constexpr std::size_t kIpv4Src = 12;
constexpr std::size_t kIpv4Dst = 16;
constexpr std::uint16_t kIpv4MoreFragments = 0x2000;
constexpr std::uint16_t kIpv4FragmentOffsetMask = 0x1fff;

// ---- IPv6 -----------------------------------------------------------------
constexpr std::size_t kIpv6HeaderSize = 40;
constexpr std::size_t kIpv6PayloadLength = 4;
constexpr std::size_t kIpv6NextHeader = 6;
constexpr std::size_t kIpv6Src = 8;
constexpr std::size_t kIpv6Dst = 24;
constexpr std::uint8_t kIpv6HopByHop = 0;
constexpr std::uint8_t kIpv6Routing = 43;
constexpr std::uint8_t kIpv6Fragment = 44;
constexpr std::uint8_t kIpv6DestOptions = 60;
constexpr std::size_t kIpv6ExtUnit = 8;  // extension header length unit

constexpr std::uint8_t kProtoTcp = 6;
constexpr std::uint8_t kProtoUdp = 17;

// ---- TCP / UDP ------------------------------------------------------------
constexpr std::size_t kTcpMinHeader = 20;
constexpr std::size_t kTcpSeq = 4;
constexpr std::size_t kTcpAck = 8;
constexpr std::size_t kTcpDataOffset = 12;
constexpr std::size_t kTcpFlags = 13;
constexpr std::size_t kUdpHeaderSize = 8;
constexpr std::size_t kUdpLength = 4;

// The network-layer packet inside a frame and its EtherType.
struct L3 {
  std::uint16_t ethertype = 0;
  ByteSpan packet;
  std::optional<std::uint16_t> vlan;
};

Result<L3, FrameSkip> strip_ethernet(ByteSpan f) noexcept {
  if (f.size() < kEthHeaderSize) return fail(FrameSkip::truncated);
  L3 l3;
  std::size_t type_at = kEthTypeOffset;
  std::uint16_t type = load_be<std::uint16_t>(f.data() + type_at);
  while (type == kEtherTypeVlan || type == kEtherTypeQinQ) {
    if (f.size() < type_at + 2 + kVlanTagSize) return fail(FrameSkip::truncated);
    if (!l3.vlan) l3.vlan = load_be<std::uint16_t>(f.data() + type_at + 2) & kVlanIdMask;
    type_at += kVlanTagSize;
    type = load_be<std::uint16_t>(f.data() + type_at);
  }
  l3.ethertype = type;
  l3.packet = f.subspan(type_at + 2);
  return l3;
}

Result<L3, FrameSkip> strip_link(LinkType link, ByteSpan f) noexcept {
  switch (link) {
    case LinkType::ethernet:
      return strip_ethernet(f);
    case LinkType::linux_sll:
      if (f.size() < kSllHeaderSize) return fail(FrameSkip::truncated);
      return L3{load_be<std::uint16_t>(f.data() + kSllProtocolOffset), f.subspan(kSllHeaderSize), {}};
    case LinkType::linux_sll2:
      if (f.size() < kSll2HeaderSize) return fail(FrameSkip::truncated);
      return L3{load_be<std::uint16_t>(f.data() + kSll2ProtocolOffset), f.subspan(kSll2HeaderSize), {}};
    case LinkType::raw_ip:
      if (f.empty()) return fail(FrameSkip::truncated);
      return L3{(f[0] >> 4) == 6 ? kEtherTypeIpv6 : kEtherTypeIpv4, f, {}};
  }
  return fail(FrameSkip::unknown_link);
}

// The transport-layer bytes of an IP packet and its protocol number.
struct L4 {
  std::uint8_t protocol = 0;
  IpAddress src, dst;
  ByteSpan segment;
};

Result<L4, FrameSkip> strip_ipv4(ByteSpan p) noexcept {
  if (p.size() < kIpv4MinHeader) return fail(FrameSkip::truncated);
  if ((p[0] >> 4) != 4) return fail(FrameSkip::bad_ip_header);
  const std::size_t ihl = std::size_t{p[0] & 0x0fu} * 4;
  const std::size_t total = load_be<std::uint16_t>(p.data() + kIpv4TotalLength);
  if (ihl < kIpv4MinHeader || p.size() < ihl) return fail(FrameSkip::bad_ip_header);
  const std::uint16_t frag = load_be<std::uint16_t>(p.data() + kIpv4FlagsFragment);
  if ((frag & kIpv4MoreFragments) || (frag & kIpv4FragmentOffsetMask)) return fail(FrameSkip::ip_fragment);
  // total == 0: a TSO super-frame whose length the stack had not filled in.
  std::size_t end = p.size();
  if (total != 0) {
    if (total < ihl) return fail(FrameSkip::bad_ip_header);
    if (total > p.size()) return fail(FrameSkip::truncated);
    end = total;
  }
  L4 l4;
  l4.protocol = p[kIpv4Protocol];
  l4.src = IpAddress::v4(load_be<std::uint32_t>(p.data() + kIpv4Src));
  l4.dst = IpAddress::v4(load_be<std::uint32_t>(p.data() + kIpv4Dst));
  l4.segment = p.subspan(ihl, end - ihl);
  return l4;
}

IpAddress load_ipv6(const std::uint8_t* at) noexcept {
  IpAddress a;
  a.version = 6;
  std::copy_n(at, a.bytes.size(), a.bytes.begin());
  return a;
}

Result<L4, FrameSkip> strip_ipv6(ByteSpan p) noexcept {
  if (p.size() < kIpv6HeaderSize) return fail(FrameSkip::truncated);
  if ((p[0] >> 4) != 6) return fail(FrameSkip::bad_ip_header);
  const std::size_t payload = load_be<std::uint16_t>(p.data() + kIpv6PayloadLength);
  // Payload length 0 is a jumbogram or a TSO super-frame: use the frame.
  const std::size_t end = payload == 0 ? p.size() : kIpv6HeaderSize + payload;
  if (end > p.size()) return fail(FrameSkip::truncated);
  L4 l4;
  l4.src = load_ipv6(p.data() + kIpv6Src);
  l4.dst = load_ipv6(p.data() + kIpv6Dst);
  std::uint8_t next = p[kIpv6NextHeader];
  std::size_t off = kIpv6HeaderSize;
  for (;;) {
    if (next == kIpv6HopByHop || next == kIpv6Routing || next == kIpv6DestOptions) {
      if (end - off < 2) return fail(FrameSkip::truncated);
      const std::size_t len = (std::size_t{p[off + 1]} + 1) * kIpv6ExtUnit;
      if (end - off < len) return fail(FrameSkip::truncated);
      next = p[off];
      off += len;
    } else if (next == kIpv6Fragment) {
      return fail(FrameSkip::ip_fragment);
    } else {
      break;
    }
  }
  l4.protocol = next;
  l4.segment = p.subspan(off, end - off);
  return l4;
}

}  // namespace

LNETR_ENUM_NAMES(, FrameSkip, LNETR_FRAME_SKIPS)

IpAddress IpAddress::v4(std::uint32_t host_order) noexcept {
  IpAddress a;
  store_be(a.bytes.data(), host_order);
  return a;
}

std::string to_string(const IpAddress& a) {
  char buf[48];
  if (a.version == 4) {
    std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", a.bytes[0], a.bytes[1], a.bytes[2], a.bytes[3]);
    return buf;
  }
  // RFC 5952: lower-case hex, the longest run (>= 2) of zero groups as "::".
  std::array<std::uint16_t, 8> g{};
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = load_be<std::uint16_t>(a.bytes.data() + 2 * i);
  std::size_t best = g.size(), best_len = 0;
  for (std::size_t i = 0; i < g.size();) {
    std::size_t j = i;
    while (j < g.size() && g[j] == 0) ++j;
    if (j - i > best_len && j - i >= 2) best = i, best_len = j - i;
    i = j == i ? i + 1 : j;
  }
  std::string out;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (i == best) {
      out += "::";
      i += best_len - 1;
      continue;
    }
    if (!out.empty() && out.back() != ':') out += ':';
    std::snprintf(buf, sizeof buf, "%x", g[i]);
    out += buf;
  }
  return out;
}

std::string to_string(const Endpoint& e) {
  const std::string ip = to_string(e.ip);
  return (e.ip.version == 4 ? ip : "[" + ip + "]") + ":" + std::to_string(e.port);
}

Result<ParsedFrame, FrameSkip> parse_frame(LinkType link, ByteSpan frame) noexcept {
  auto l3 = strip_link(link, frame);
  if (!l3) return fail(l3.error());
  Result<L4, FrameSkip> l4 = fail(FrameSkip::not_ip);
  if (l3->ethertype == kEtherTypeIpv4) l4 = strip_ipv4(l3->packet);
  else if (l3->ethertype == kEtherTypeIpv6) l4 = strip_ipv6(l3->packet);
  if (!l4) return fail(l4.error());

  ParsedFrame out;
  out.vlan = l3->vlan;
  out.src.ip = l4->src;
  out.dst.ip = l4->dst;
  const ByteSpan s = l4->segment;
  if (l4->protocol == kProtoTcp) {
    if (s.size() < kTcpMinHeader) return fail(FrameSkip::truncated);
    const std::size_t hdr = std::size_t{s[kTcpDataOffset]} / 16 * 4;  // data offset: upper nibble, 32-bit words
    if (hdr < kTcpMinHeader || hdr > s.size()) return fail(FrameSkip::truncated);
    out.transport = Transport::tcp;
    out.src.port = load_be<std::uint16_t>(s.data());
    out.dst.port = load_be<std::uint16_t>(s.data() + 2);
    out.tcp.seq = load_be<std::uint32_t>(s.data() + kTcpSeq);
    out.tcp.ack = load_be<std::uint32_t>(s.data() + kTcpAck);
    out.tcp.flags = s[kTcpFlags];
    out.tcp.payload = s.subspan(hdr);
    return out;
  }
  if (l4->protocol == kProtoUdp) {
    if (s.size() < kUdpHeaderSize) return fail(FrameSkip::truncated);
    const std::size_t len = load_be<std::uint16_t>(s.data() + kUdpLength);
    if (len < kUdpHeaderSize || len > s.size()) return fail(FrameSkip::truncated);
    out.transport = Transport::udp;
    out.src.port = load_be<std::uint16_t>(s.data());
    out.dst.port = load_be<std::uint16_t>(s.data() + 2);
    out.udp.payload = s.subspan(kUdpHeaderSize, len - kUdpHeaderSize);
    return out;
  }
  return fail(FrameSkip::other_protocol);
}

}  // namespace lnetr::decode
