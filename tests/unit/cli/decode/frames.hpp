// Hand-built Ethernet frames for the unit tests: IPv4 (optionally VLAN
// tagged) carrying a TCP segment or a UDP datagram, and RoCEv2 packets.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "router/bytes.hpp"

namespace lnetr::test {

using Bytes = std::vector<std::uint8_t>;

struct Ipv4Spec {
  std::uint32_t src = 0x0ac90102;  // 10.201.1.2
  std::uint32_t dst = 0x0ac90104;  // 10.201.1.4
  std::optional<std::uint16_t> vlan;
  std::optional<std::uint16_t> outer_vlan;  // 802.1ad outer tag (QinQ)
  bool zero_total_length = false;           // as in TSO super-frames
  std::size_t pad_to = 60;                  // Ethernet minimum frame (without FCS)
};

struct TcpSpec {
  Ipv4Spec ip;
  std::uint16_t sport = 1023;
  std::uint16_t dport = 988;
  std::uint32_t seq = 0;
  std::uint32_t ack = 0;
  std::uint8_t flags = 0x10;  // ACK
};

inline void put16(Bytes& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}
inline void put32(Bytes& b, std::uint32_t v) {
  put16(b, static_cast<std::uint16_t>(v >> 16));
  put16(b, static_cast<std::uint16_t>(v));
}

// Ethernet + IPv4 around `l4` (protocol `proto`).
inline Bytes ipv4_frame(const Ipv4Spec& s, std::uint8_t proto, const Bytes& l4) {
  Bytes f = {0x52, 0x54, 0, 0x20, 2, 0, 0x52, 0x54, 0, 0x20, 1, 0};
  if (s.outer_vlan) {
    put16(f, 0x88A8);
    put16(f, *s.outer_vlan);
  }
  if (s.vlan) {
    put16(f, 0x8100);
    put16(f, *s.vlan);
  }
  put16(f, 0x0800);
  const std::size_t total = 20 + l4.size();
  f.push_back(0x45);
  f.push_back(0);
  put16(f, s.zero_total_length ? 0 : static_cast<std::uint16_t>(total));
  put32(f, 0x00004000);  // id 0, DF
  f.push_back(64);
  f.push_back(proto);
  put16(f, 0);  // checksum: not verified by the decoder
  put32(f, s.src);
  put32(f, s.dst);
  f.insert(f.end(), l4.begin(), l4.end());
  if (f.size() < s.pad_to) f.resize(s.pad_to, 0xEE);  // padding that must not become data
  return f;
}

inline Bytes tcp_frame(const TcpSpec& s, const Bytes& payload = {}) {
  Bytes t;
  put16(t, s.sport);
  put16(t, s.dport);
  put32(t, s.seq);
  put32(t, s.ack);
  t.push_back(0x50);  // data offset 5 words
  t.push_back(s.flags);
  put16(t, 65535);
  put32(t, 0);  // checksum, urgent pointer
  t.insert(t.end(), payload.begin(), payload.end());
  return ipv4_frame(s.ip, 6, t);
}

inline Bytes udp_frame(const Ipv4Spec& ip, std::uint16_t sport, std::uint16_t dport, const Bytes& payload) {
  Bytes u;
  put16(u, sport);
  put16(u, dport);
  put16(u, static_cast<std::uint16_t>(8 + payload.size()));
  put16(u, 0);
  u.insert(u.end(), payload.begin(), payload.end());
  return ipv4_frame(ip, 17, u);
}

// A RoCEv2 packet: BTH (opcode, dest QP, PSN, AckReq), extension headers,
// payload, `pad` pad bytes and a 4-byte ICRC.
inline Bytes roce_packet(std::uint8_t opcode, std::uint32_t dest_qp, std::uint32_t psn, const Bytes& ext,
                         const Bytes& payload, std::uint8_t pad = 0, bool ack_req = true) {
  Bytes b;
  b.push_back(opcode);
  b.push_back(static_cast<std::uint8_t>(pad << 4));
  put16(b, 0xffff);
  put32(b, dest_qp & 0xffffff);
  put32(b, (ack_req ? 0x80000000u : 0u) | (psn & 0xffffff));
  b.insert(b.end(), ext.begin(), ext.end());
  b.insert(b.end(), payload.begin(), payload.end());
  b.insert(b.end(), pad, 0);
  put32(b, 0xdeadbeef);  // ICRC
  return b;
}

inline Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

inline Bytes slice(const Bytes& b, std::size_t from, std::size_t n) {
  return Bytes(b.begin() + static_cast<std::ptrdiff_t>(from), b.begin() + static_cast<std::ptrdiff_t>(from + n));
}

}  // namespace lnetr::test
