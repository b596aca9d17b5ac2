// The dataplane's TCP/IP packets: any frame decodes or is refused with a
// reason, never read out of bounds; what decodes as TCP (over IPv4 or
// IPv6) re-encodes to a header that decodes to the same fields and
// options, and a checksum written over it verifies; an IPv6 header and a
// neighbour discovery message re-encode to what decodes the same.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dataplane/tcp/wire.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;
using namespace lnetr::tcp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ByteSpan frame(data, size);
  auto eth = decode_ethernet(frame);
  if (!eth) return 0;
  const ByteSpan body = frame.subspan(eth->header_size());
  if (eth->type == kEtherArp) {
    if (auto a = decode_arp(body)) {
      std::uint8_t out[kArpSize];
      FUZZ_CHECK(encode_arp(*a, out) == kArpSize);
      FUZZ_CHECK(std::equal(out, out + kArpSize, body.begin()));
    }
    return 0;
  }
  IpAddr src, dst;
  ByteSpan l4;
  if (eth->type == kEtherIpv6) {
    auto ip = decode_ipv6(body);
    if (!ip) return 0;
    FUZZ_CHECK(ip->payload.size() == ip->payload_length);
    std::uint8_t hdr[kIpv6Header];
    FUZZ_CHECK(encode_ipv6(*ip, hdr) == kIpv6Header && std::equal(hdr, hdr + kIpv6Header, body.begin()));
    if (ip->next_header == kProtoIcmpv6) {
      auto m = decode_icmp6(*ip);
      if (!m) return 0;
      auto nd = decode_nd(*ip, *m);
      if (!nd) return 0;
      std::uint8_t out[kNdSize];
      const std::size_t k = encode_nd(*nd, ip->src, ip->dst, out);
      FUZZ_CHECK(k == (nd->link_addr ? kNdSize : 24u));
      Ipv6 again = *ip;
      again.payload = ByteSpan(out, k);
      again.payload_length = static_cast<std::uint16_t>(k);
      auto m2 = decode_icmp6(again);
      FUZZ_CHECK(m2);
      auto nd2 = decode_nd(again, *m2);
      FUZZ_CHECK(nd2 && nd2->type == nd->type && nd2->target == nd->target && nd2->link_addr == nd->link_addr &&
                 (nd->type != kNdAdvertisement ||
                  (nd2->solicited == nd->solicited && nd2->override_ == nd->override_ && nd2->router == nd->router)));
      return 0;
    }
    src = ip->src, dst = ip->dst, l4 = ip->payload;
  } else {
    auto ip = decode_ipv4(body);
    if (!ip) return 0;
    FUZZ_CHECK(ip->payload.size() + ip->header_size == ip->total_length);
    if (ip->protocol == kProtoIcmp) {
      (void)decode_icmp(ip->payload);
      return 0;
    }
    src = IpAddr::v4(ip->src), dst = IpAddr::v4(ip->dst), l4 = ip->payload;
  }
  auto tcp = decode_tcp(l4);
  if (!tcp) return 0;
  FUZZ_CHECK(tcp->header_size >= kTcpMinHeader && tcp->header_size <= l4.size());
  std::vector<std::uint8_t> seg(kTcpMaxHeader + tcp->payload.size());
  const std::size_t n = encode_tcp(*tcp, seg);
  if (n == 0) return 0;  // options that do not fit Linux's layout (e.g. 4 SACK blocks with timestamps)
  seg.resize(n + tcp->payload.size());
  std::copy(tcp->payload.begin(), tcp->payload.end(), seg.begin() + static_cast<long>(n));
  auto again = decode_tcp(seg);
  FUZZ_CHECK(again);
  FUZZ_CHECK(again->seq == tcp->seq && again->ack == tcp->ack && again->flags == tcp->flags &&
             again->window == tcp->window && again->src_port == tcp->src_port);
  // SYN options the SYN layout writes, else the others: compare what was written.
  const bool syn = (tcp->flags & tcp_flag::syn) != 0;
  FUZZ_CHECK(again->options.timestamps == tcp->options.timestamps);
  if (syn) {
    FUZZ_CHECK(again->options.mss == tcp->options.mss && again->options.window_scale == tcp->options.window_scale &&
               again->options.sack_permitted == tcp->options.sack_permitted);
  } else {
    FUZZ_CHECK(again->options.sack_count == tcp->options.sack_count);
    for (std::size_t i = 0; i < tcp->options.sack_count; ++i) FUZZ_CHECK(again->options.sack[i] == tcp->options.sack[i]);
  }
  if (seg.size() <= 0xffff) {
    finish_tcp_checksum(src, dst, seg);
    FUZZ_CHECK(tcp_checksum_ok(src, dst, seg));
  }
  return 0;
}
