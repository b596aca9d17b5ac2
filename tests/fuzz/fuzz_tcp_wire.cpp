// The dataplane's TCP/IP packets: any frame decodes or is refused with a
// reason, never read out of bounds; what decodes as TCP re-encodes to a
// header that decodes to the same fields and options, and a checksum
// written over it verifies.
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
  auto ip = decode_ipv4(body);
  if (!ip) return 0;
  FUZZ_CHECK(ip->payload.size() + ip->header_size == ip->total_length);
  if (ip->protocol == kProtoIcmp) {
    (void)decode_icmp(ip->payload);
    return 0;
  }
  auto tcp = decode_tcp(ip->payload);
  if (!tcp) return 0;
  FUZZ_CHECK(tcp->header_size >= kTcpMinHeader && tcp->header_size <= ip->payload.size());
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
    finish_tcp_checksum(ip->src, ip->dst, seg);
    FUZZ_CHECK(tcp_checksum_ok(ip->src, ip->dst, seg));
  }
  return 0;
}
