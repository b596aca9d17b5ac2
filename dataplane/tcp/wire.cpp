// The packet codecs of wire.hpp: Ethernet, ARP, IPv4, ICMP, IPv6, ICMPv6, TCP, checksums.
#include "dataplane/tcp/wire.hpp"

#include <algorithm>
#include <cstring>

#include "router/enum_names.hpp"

namespace lnetr::tcp {

LNETR_ENUM_NAMES(, PacketError, LNETR_PACKET_ERRORS)

// ---- checksum -----------------------------------------------------------------------

// RFC 1071: the one's-complement sum does not depend on byte order, so the
// bytes are summed as native 32-bit words (eight bytes a step) and the
// folded result is swapped into network order once at the end.
std::uint32_t checksum_add(std::uint32_t sum, ByteSpan bytes) noexcept {
  const std::uint8_t* p = bytes.data();
  std::size_t n = bytes.size();
  std::uint64_t acc = 0;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    acc += (w & 0xffffffffu) + (w >> 32);  // at most 2^33 a step: no overflow below 2^31 steps
    p += 8;
    n -= 8;
  }
  if (n >= 4) {
    std::uint32_t w;
    std::memcpy(&w, p, 4);
    acc += w;
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    std::uint16_t w;
    std::memcpy(&w, p, 2);
    acc += w;
    p += 2;
    n -= 2;
  }
  if (n == 1) {  // the odd byte is the high half of a big-endian word
    const std::uint8_t pad[2] = {*p, 0};
    std::uint16_t w;
    std::memcpy(&w, pad, 2);
    acc += w;
  }
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  std::uint16_t native = static_cast<std::uint16_t>(acc);
  std::uint8_t b[2];
  std::memcpy(b, &native, 2);
  std::uint64_t s = std::uint64_t{sum} + static_cast<std::uint32_t>(b[0] << 8 | b[1]);  // as big-endian
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<std::uint32_t>(s);
}

std::uint16_t checksum_fold(std::uint32_t sum) noexcept {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(sum);
}

std::uint32_t checksum_add_at(std::uint32_t sum, ByteSpan bytes, std::size_t offset) noexcept {
  if (offset % 2 == 0) return checksum_add(sum, bytes);
  const std::uint16_t s = checksum_fold(checksum_add(0, bytes));
  return checksum_fold(sum + static_cast<std::uint16_t>((s << 8) | (s >> 8)));
}

std::uint16_t checksum(ByteSpan bytes) noexcept {
  return static_cast<std::uint16_t>(~checksum_fold(checksum_add(0, bytes)));
}

std::uint16_t tcp_pseudo_sum(std::uint32_t src, std::uint32_t dst, std::uint16_t tcp_length) noexcept {
  return pseudo_sum(IpAddr::v4(src), IpAddr::v4(dst), kProtoTcp, tcp_length);
}

std::uint16_t pseudo_sum(const IpAddr& src, const IpAddr& dst, std::uint8_t protocol, std::uint32_t length) noexcept {
  if (src.is_v4() && dst.is_v4()) {
    const std::uint32_t a = src.v4_host(), b = dst.v4_host();
    return checksum_fold((a >> 16) + (a & 0xffff) + (b >> 16) + (b & 0xffff) + protocol + (length >> 16) +
                         (length & 0xffff));
  }
  // IPv6: both addresses, the 32-bit length, three zero bytes and the protocol.
  std::uint32_t s = checksum_add(checksum_add(0, src.bytes), dst.bytes);
  return checksum_fold(s + (length >> 16) + (length & 0xffff) + protocol);
}

// ---- Ethernet -----------------------------------------------------------------------

PacketResult<Ethernet> decode_ethernet(ByteSpan f) noexcept {
  if (f.size() < 14) return fail(PacketError::truncated);
  Ethernet e;
  std::memcpy(e.dst.data(), f.data(), 6);
  std::memcpy(e.src.data(), f.data() + 6, 6);
  e.type = load_be<std::uint16_t>(f.data() + 12);
  if (e.type == kEtherVlan) {
    if (f.size() < 18) return fail(PacketError::truncated);
    e.vlan = load_be<std::uint16_t>(f.data() + 14);
    e.type = load_be<std::uint16_t>(f.data() + 16);
  }
  return e;
}

std::optional<IpAddr> sender_address(ByteSpan f) noexcept {
  const auto e = decode_ethernet(f);
  if (!e) return std::nullopt;
  const std::size_t l3 = e->header_size();
  if (e->type == kEtherIpv6) {  // the source at byte 8
    if (f.size() < l3 + 24) return std::nullopt;
    IpAddr a = IpAddr::v6({});
    std::memcpy(a.bytes.data(), f.data() + l3 + 8, 16);
    return a;
  }
  // IPv4: the source at byte 12; ARP (Ethernet/IPv4): the sender's at 14.
  const std::size_t at = e->type == kEtherIpv4 ? l3 + 12 : e->type == kEtherArp ? l3 + 14 : 0;
  if (at == 0 || f.size() < at + 4) return std::nullopt;
  return IpAddr::v4(load_be<std::uint32_t>(f.data() + at));
}

Mac multicast_mac(const IpAddr& group) noexcept {
  return {0x33, 0x33, group.bytes[12], group.bytes[13], group.bytes[14], group.bytes[15]};
}

std::size_t encode_ethernet(const Ethernet& e, MutableByteSpan out) noexcept {
  if (out.size() < e.header_size()) return 0;
  std::memcpy(out.data(), e.dst.data(), 6);
  std::memcpy(out.data() + 6, e.src.data(), 6);
  std::size_t at = 12;
  if (e.vlan) {
    store_be<std::uint16_t>(out.data() + at, kEtherVlan);
    store_be<std::uint16_t>(out.data() + at + 2, *e.vlan);
    at += 4;
  }
  store_be<std::uint16_t>(out.data() + at, e.type);
  return at + 2;
}

// ---- ARP ------------------------------------------------------------------------------

PacketResult<Arp> decode_arp(ByteSpan b) noexcept {
  if (b.size() < kArpSize) return fail(PacketError::truncated);
  // Ethernet hardware (1), IPv4 protocol, 6- and 4-byte addresses.
  if (load_be<std::uint16_t>(b.data()) != 1 || load_be<std::uint16_t>(b.data() + 2) != kEtherIpv4 || b[4] != 6 ||
      b[5] != 4)
    return fail(PacketError::bad_arp);
  Arp a;
  a.op = load_be<std::uint16_t>(b.data() + 6);
  if (a.op != kArpRequest && a.op != kArpReply) return fail(PacketError::bad_arp);
  std::memcpy(a.sender_mac.data(), b.data() + 8, 6);
  a.sender_ip = load_be<std::uint32_t>(b.data() + 14);
  std::memcpy(a.target_mac.data(), b.data() + 18, 6);
  a.target_ip = load_be<std::uint32_t>(b.data() + 24);
  return a;
}

std::size_t encode_arp(const Arp& a, MutableByteSpan out) noexcept {
  if (out.size() < kArpSize) return 0;
  std::uint8_t* p = out.data();
  store_be<std::uint16_t>(p, 1);
  store_be<std::uint16_t>(p + 2, kEtherIpv4);
  p[4] = 6;
  p[5] = 4;
  store_be<std::uint16_t>(p + 6, a.op);
  std::memcpy(p + 8, a.sender_mac.data(), 6);
  store_be<std::uint32_t>(p + 14, a.sender_ip);
  std::memcpy(p + 18, a.target_mac.data(), 6);
  store_be<std::uint32_t>(p + 24, a.target_ip);
  return kArpSize;
}

// ---- IPv4 -----------------------------------------------------------------------------

PacketResult<Ipv4> decode_ipv4(ByteSpan p) noexcept { return decode_ipv4_head(p, p.size()); }

PacketResult<Ipv4> decode_ipv4_head(ByteSpan p, std::size_t whole) noexcept {
  if (p.size() < kIpv4MinHeader || whole < p.size()) return fail(PacketError::truncated);
  if ((p[0] >> 4) != 4) return fail(PacketError::not_ipv4);
  Ipv4 h;
  h.header_size = static_cast<std::uint8_t>((p[0] & 0x0f) * 4);
  h.tos = p[1];
  h.total_length = load_be<std::uint16_t>(p.data() + 2);
  if (h.header_size < kIpv4MinHeader || h.total_length < h.header_size || h.total_length > whole ||
      h.header_size > p.size())
    return fail(PacketError::bad_ip_header);
  if (checksum(p.first(h.header_size)) != 0) return fail(PacketError::bad_ip_checksum);
  h.id = load_be<std::uint16_t>(p.data() + 4);
  const std::uint16_t frag = load_be<std::uint16_t>(p.data() + 6);
  h.dont_fragment = (frag & 0x4000) != 0;
  if ((frag & 0x2000) != 0 || (frag & 0x1fff) != 0) return fail(PacketError::ip_fragment);
  h.ttl = p[8];
  h.protocol = p[9];
  h.src = load_be<std::uint32_t>(p.data() + 12);
  h.dst = load_be<std::uint32_t>(p.data() + 16);
  h.payload = p.subspan(h.header_size, std::min<std::size_t>(h.total_length, p.size()) - h.header_size);
  return h;
}

std::size_t encode_ipv4(const Ipv4& h, MutableByteSpan out) noexcept {
  if (out.size() < kIpv4MinHeader) return 0;
  std::uint8_t* p = out.data();
  p[0] = 0x45;
  p[1] = h.tos;
  store_be<std::uint16_t>(p + 2, h.total_length);
  store_be<std::uint16_t>(p + 4, h.id);
  store_be<std::uint16_t>(p + 6, h.dont_fragment ? 0x4000 : 0);
  p[8] = h.ttl;
  p[9] = h.protocol;
  store_be<std::uint16_t>(p + 10, 0);
  store_be<std::uint32_t>(p + 12, h.src);
  store_be<std::uint32_t>(p + 16, h.dst);
  store_be<std::uint16_t>(p + 10, checksum(out.first(kIpv4MinHeader)));
  return kIpv4MinHeader;
}

// ---- ICMP -----------------------------------------------------------------------------

PacketResult<Icmp> decode_icmp(ByteSpan m) noexcept {
  if (m.size() < 8 || checksum(m) != 0) return fail(PacketError::bad_icmp);
  Icmp i;
  i.type = m[0];
  i.code = m[1];
  i.id = load_be<std::uint16_t>(m.data() + 4);
  i.sequence = load_be<std::uint16_t>(m.data() + 6);
  i.data = m.subspan(8);
  return i;
}

// ---- IPv6 -----------------------------------------------------------------------------

PacketResult<Ipv6> decode_ipv6(ByteSpan p) noexcept { return decode_ipv6_head(p, p.size()); }

PacketResult<Ipv6> decode_ipv6_head(ByteSpan p, std::size_t whole) noexcept {
  if (p.size() < kIpv6Header || whole < p.size()) return fail(PacketError::truncated);
  if ((p[0] >> 4) != 6) return fail(PacketError::not_ipv6);
  Ipv6 h;
  const std::uint32_t first = load_be<std::uint32_t>(p.data());
  h.traffic_class = static_cast<std::uint8_t>(first >> 20);
  h.flow_label = first & 0xfffff;
  h.payload_length = load_be<std::uint16_t>(p.data() + 4);
  // (A jumbogram's zero length comes with a hop-by-hop header, which the
  // engine does not take: refused as any other extension header.)
  if (kIpv6Header + h.payload_length > whole) return fail(PacketError::bad_ipv6_length);
  h.next_header = p[6];
  h.hop_limit = p[7];
  std::memcpy(h.src.bytes.data(), p.data() + 8, 16);
  std::memcpy(h.dst.bytes.data(), p.data() + 24, 16);
  h.payload = p.subspan(kIpv6Header, std::min<std::size_t>(h.payload_length, p.size() - kIpv6Header));
  return h;
}

std::size_t encode_ipv6(const Ipv6& h, MutableByteSpan out) noexcept {
  if (out.size() < kIpv6Header) return 0;
  std::uint8_t* p = out.data();
  store_be<std::uint32_t>(p, (6u << 28) | (std::uint32_t{h.traffic_class} << 20) | (h.flow_label & 0xfffff));
  store_be<std::uint16_t>(p + 4, h.payload_length);
  p[6] = h.next_header;
  p[7] = h.hop_limit;
  std::memcpy(p + 8, h.src.bytes.data(), 16);
  std::memcpy(p + 24, h.dst.bytes.data(), 16);
  return kIpv6Header;
}

IpAddr solicited_node(const IpAddr& a) noexcept {
  return IpAddr::v6({0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, a.bytes[13], a.bytes[14], a.bytes[15]});
}

IpAddr link_local(const Mac& m) noexcept {
  return IpAddr::v6({0xfe, 0x80, 0, 0, 0, 0, 0, 0, static_cast<std::uint8_t>(m[0] ^ 0x02), m[1], m[2], 0xff, 0xfe, m[3],
                     m[4], m[5]});
}

std::size_t encode_mld_report(const IpAddr& src, const IpAddr* groups, std::size_t count,
                              MutableByteSpan out) noexcept {
  const std::size_t icmp = 8 + 20 * count, size = kIpv6Header + 8 + icmp;
  if (out.size() < size) return 0;
  Ipv6 h;
  h.next_header = 0;  // hop-by-hop options
  h.hop_limit = 1;
  h.payload_length = static_cast<std::uint16_t>(8 + icmp);
  h.src = src;
  h.dst = kAllMldRouters;
  encode_ipv6(h, out);
  std::uint8_t* p = out.data() + kIpv6Header;
  // ICMPv6 next; router alert (type 5, value 0: MLD); PadN of 0 bytes.
  const std::uint8_t hop_by_hop[8] = {kProtoIcmpv6, 0, 5, 2, 0, 0, 1, 0};
  std::copy(hop_by_hop, hop_by_hop + 8, p);
  p += 8;
  std::fill(p, p + icmp, std::uint8_t{0});
  p[0] = kMldV2Report;
  store_be<std::uint16_t>(p + 6, static_cast<std::uint16_t>(count));
  for (std::size_t i = 0; i < count; ++i) {
    std::uint8_t* r = p + 8 + 20 * i;
    r[0] = 4;  // CHANGE_TO_EXCLUDE_MODE, no sources
    std::copy(groups[i].bytes.begin(), groups[i].bytes.end(), r + 4);
  }
  finish_icmp6_checksum(src, kAllMldRouters, MutableByteSpan(p, icmp));
  return size;
}

// ---- ICMPv6 ---------------------------------------------------------------------------

PacketResult<Icmp6> decode_icmp6(const Ipv6& ip) noexcept {
  const ByteSpan m = ip.payload;
  if (m.size() < 4 || m.size() != ip.payload_length) return fail(PacketError::bad_icmp);
  if (checksum_fold(checksum_add(pseudo_sum(ip.src, ip.dst, kProtoIcmpv6, static_cast<std::uint32_t>(m.size())), m)) !=
      0xffff)
    return fail(PacketError::bad_icmp);
  return Icmp6{m[0], m[1], m.subspan(4)};
}

void finish_icmp6_checksum(const IpAddr& src, const IpAddr& dst, MutableByteSpan m) noexcept {
  store_be<std::uint16_t>(m.data() + 2, 0);
  const std::uint32_t sum = checksum_add(pseudo_sum(src, dst, kProtoIcmpv6, static_cast<std::uint32_t>(m.size())), m);
  store_be<std::uint16_t>(m.data() + 2, static_cast<std::uint16_t>(~checksum_fold(sum)));
}

namespace {
constexpr std::uint8_t kOptSourceLinkAddr = 1, kOptTargetLinkAddr = 2;
}

PacketResult<Neighbour6> decode_nd(const Ipv6& ip, const Icmp6& m) noexcept {
  if ((m.type != kNdSolicitation && m.type != kNdAdvertisement) || ip.hop_limit != 255 || m.code != 0 ||
      m.body.size() < 20)
    return fail(PacketError::bad_nd);
  Neighbour6 n;
  n.type = m.type;
  const std::uint8_t flags = m.body[0];
  if (m.type == kNdAdvertisement) {
    n.router = (flags & 0x80) != 0;
    n.solicited = (flags & 0x40) != 0;
    n.override_ = (flags & 0x20) != 0;
  }
  std::memcpy(n.target.bytes.data(), m.body.data() + 4, 16);
  if (n.target.is_multicast_v6()) return fail(PacketError::bad_nd);
  const std::uint8_t wanted = m.type == kNdSolicitation ? kOptSourceLinkAddr : kOptTargetLinkAddr;
  for (std::size_t at = 20; at < m.body.size();) {
    if (at + 2 > m.body.size()) return fail(PacketError::bad_nd);
    const std::size_t len = std::size_t{m.body[at + 1]} * 8;
    if (len == 0 || at + len > m.body.size()) return fail(PacketError::bad_nd);
    if (m.body[at] == wanted && len == 8) {
      Mac mac;
      std::memcpy(mac.data(), m.body.data() + at + 2, 6);
      n.link_addr = mac;
    }
    at += len;
  }
  return n;
}

std::size_t encode_nd(const Neighbour6& n, const IpAddr& src, const IpAddr& dst, MutableByteSpan out) noexcept {
  const std::size_t size = n.link_addr ? kNdSize : 24;
  if (out.size() < size) return 0;
  std::uint8_t* p = out.data();
  std::fill(p, p + size, std::uint8_t{0});
  p[0] = n.type;
  if (n.type == kNdAdvertisement)
    p[4] = static_cast<std::uint8_t>((n.router ? 0x80 : 0) | (n.solicited ? 0x40 : 0) | (n.override_ ? 0x20 : 0));
  std::memcpy(p + 8, n.target.bytes.data(), 16);
  if (n.link_addr) {
    p[24] = n.type == kNdSolicitation ? kOptSourceLinkAddr : kOptTargetLinkAddr;
    p[25] = 1;
    std::memcpy(p + 26, n.link_addr->data(), 6);
  }
  finish_icmp6_checksum(src, dst, out.first(size));
  return size;
}

// ---- TCP ------------------------------------------------------------------------------

namespace {

namespace opt {
inline constexpr std::uint8_t eol = 0, nop = 1, mss = 2, wscale = 3, sack_ok = 4, sack = 5, ts = 8;
}

// Parse the option bytes; false on a malformed one.
bool parse_options(ByteSpan o, TcpOptions& out) noexcept {
  std::size_t i = 0;
  while (i < o.size()) {
    const std::uint8_t kind = o[i];
    if (kind == opt::eol) break;
    if (kind == opt::nop) {
      ++i;
      continue;
    }
    if (i + 1 >= o.size()) return false;
    const std::uint8_t len = o[i + 1];
    if (len < 2 || i + len > o.size()) return false;
    const std::uint8_t* v = o.data() + i + 2;
    switch (kind) {
      case opt::mss:
        if (len != 4) return false;
        out.mss = load_be<std::uint16_t>(v);
        break;
      case opt::wscale:
        if (len != 3) return false;
        out.window_scale = v[0];
        break;
      case opt::sack_ok:
        if (len != 2) return false;
        out.sack_permitted = true;
        break;
      case opt::sack:
        if ((len - 2) % 8 != 0 || len == 2 || static_cast<std::size_t>(len - 2) / 8 > kMaxSackBlocks) return false;
        out.sack_count = static_cast<std::uint8_t>((len - 2) / 8);
        for (std::size_t b = 0; b < out.sack_count; ++b)
          out.sack[b] = {load_be<std::uint32_t>(v + 8 * b), load_be<std::uint32_t>(v + 8 * b + 4)};
        break;
      case opt::ts:
        if (len != 10) return false;
        out.timestamps = {load_be<std::uint32_t>(v), load_be<std::uint32_t>(v + 4)};
        break;
      default:
        break;  // unknown: skipped by its length
    }
    i += len;
  }
  return true;
}

}  // namespace

PacketResult<TcpHeader> decode_tcp(ByteSpan s) noexcept {
  if (s.size() < kTcpMinHeader) return fail(PacketError::truncated);
  TcpHeader h;
  h.src_port = load_be<std::uint16_t>(s.data());
  h.dst_port = load_be<std::uint16_t>(s.data() + 2);
  h.seq = load_be<std::uint32_t>(s.data() + 4);
  h.ack = load_be<std::uint32_t>(s.data() + 8);
  h.header_size = static_cast<std::uint8_t>((s[12] >> 4) * 4);
  if (h.header_size < kTcpMinHeader || h.header_size > s.size()) return fail(PacketError::bad_tcp_header);
  h.flags = s[13];
  h.window = load_be<std::uint16_t>(s.data() + 14);
  h.checksum = load_be<std::uint16_t>(s.data() + 16);
  h.urgent = load_be<std::uint16_t>(s.data() + 18);
  if (!parse_options(s.subspan(kTcpMinHeader, h.header_size - kTcpMinHeader), h.options))
    return fail(PacketError::bad_tcp_option);
  h.payload = s.subspan(h.header_size);
  return h;
}

bool tcp_checksum_ok(const IpAddr& src, const IpAddr& dst, ByteSpan segment) noexcept {
  if (segment.size() > 0xffff) return false;
  const std::uint32_t sum = checksum_add(tcp_pseudo_sum(src, dst, static_cast<std::uint16_t>(segment.size())), segment);
  return checksum_fold(sum) == 0xffff;
}

bool tcp_checksum_ok(std::uint32_t src, std::uint32_t dst, ByteSpan segment) noexcept {
  return tcp_checksum_ok(IpAddr::v4(src), IpAddr::v4(dst), segment);
}

std::size_t tcp_options_size(const TcpOptions& o, bool syn) noexcept {
  std::size_t n = 0;
  if (syn) {
    if (o.mss) n += 4;
    if (o.timestamps) n += 10 + 2;  // SACK-permitted (or NOP NOP) + timestamps
    else if (o.sack_permitted) n += 4;  // NOP NOP + SACK-permitted
    if (o.window_scale) n += 4;          // NOP + window scale
  } else {
    if (o.timestamps) n += 12;
    if (o.sack_count) n += 2 + 2 + 8 * o.sack_count;
  }
  return n;
}

std::size_t encode_tcp(const TcpHeader& h, MutableByteSpan out) noexcept {
  const bool syn = (h.flags & tcp_flag::syn) != 0;
  const std::size_t opts = tcp_options_size(h.options, syn);
  const std::size_t size = kTcpMinHeader + opts;
  if (opts > kTcpMaxHeader - kTcpMinHeader || out.size() < size) return 0;
  std::uint8_t* p = out.data();
  store_be<std::uint16_t>(p, h.src_port);
  store_be<std::uint16_t>(p + 2, h.dst_port);
  store_be<std::uint32_t>(p + 4, h.seq);
  store_be<std::uint32_t>(p + 8, h.ack);
  p[12] = static_cast<std::uint8_t>((size / 4) << 4);
  p[13] = h.flags;
  store_be<std::uint16_t>(p + 14, h.window);
  store_be<std::uint16_t>(p + 16, h.checksum);
  store_be<std::uint16_t>(p + 18, h.urgent);
  std::uint8_t* o = p + kTcpMinHeader;
  auto put = [&o](std::initializer_list<std::uint8_t> bytes) {
    for (std::uint8_t b : bytes) *o++ = b;
  };
  auto put32 = [&o](std::uint32_t v) {
    store_be<std::uint32_t>(o, v);
    o += 4;
  };
  const TcpOptions& t = h.options;
  if (syn) {
    // Linux's SYN order: MSS, SACK-permitted + timestamps, NOP + wscale.
    if (t.mss) {
      put({opt::mss, 4});
      store_be<std::uint16_t>(o, *t.mss);
      o += 2;
    }
    if (t.timestamps) {
      if (t.sack_permitted) put({opt::sack_ok, 2});
      else put({opt::nop, opt::nop});
      put({opt::ts, 10});
      put32(t.timestamps->first);
      put32(t.timestamps->second);
    } else if (t.sack_permitted) {
      put({opt::nop, opt::nop, opt::sack_ok, 2});
    }
    if (t.window_scale) put({opt::nop, opt::wscale, 3, *t.window_scale});
  } else {
    if (t.timestamps) {
      put({opt::nop, opt::nop, opt::ts, 10});
      put32(t.timestamps->first);
      put32(t.timestamps->second);
    }
    if (t.sack_count) {
      put({opt::nop, opt::nop, opt::sack, static_cast<std::uint8_t>(2 + 8 * t.sack_count)});
      for (std::size_t b = 0; b < t.sack_count; ++b) {
        put32(t.sack[b].left);
        put32(t.sack[b].right);
      }
    }
  }
  return size;
}

void finish_tcp_checksum(std::uint32_t src, std::uint32_t dst, MutableByteSpan segment) noexcept {
  finish_tcp_checksum(IpAddr::v4(src), IpAddr::v4(dst), segment);
}

void finish_tcp_checksum(const IpAddr& src, const IpAddr& dst, MutableByteSpan segment) noexcept {
  store_be<std::uint16_t>(segment.data() + 16, 0);
  const std::uint32_t sum = checksum_add(tcp_pseudo_sum(src, dst, static_cast<std::uint16_t>(segment.size())), segment);
  store_be<std::uint16_t>(segment.data() + 16, static_cast<std::uint16_t>(~checksum_fold(sum)));
}

}  // namespace lnetr::tcp
