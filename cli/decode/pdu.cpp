#include "cli/decode/pdu.hpp"

#include <algorithm>

namespace lnetr::decode {
namespace {

// The ping-info spec that encode_ping_info() turns back into `pi`'s bytes.
std::vector<PingNi> nis_of(const PingInfo& pi) {
  return {pi.begin(), pi.end()};
}

// Re-encode a ping-info buffer over the bytes it was decoded from.
bool reencode_ping(const PingInfo& pi, MutableByteSpan out) {
  const std::vector<PingNi> nis = nis_of(pi);
  const PingInfoSpec spec{pi.features, pi.pid, pi.sequence, nis};
  return encode_ping_info(spec, out, pi.order).has_value();
}

std::optional<std::vector<std::uint8_t>> reencode_acceptor(const AcceptorPdu& a, std::size_t size) {
  if (!a.view) return std::nullopt;
  std::vector<std::uint8_t> out(size);
  auto n = sock::encode_acceptor_request(*a.view, out);
  if (!n) return std::nullopt;
  out.resize(*n);
  return out;
}

std::optional<std::vector<std::uint8_t>> reencode_hello(const HelloPdu& h, std::size_t size) {
  if (!h.view) return std::nullopt;
  std::vector<std::uint8_t> out(std::max(size, sock::hello_size(*h.view)));
  auto n = sock::encode_hello(*h.view, out);
  if (!n) return std::nullopt;
  out.resize(*n);
  return out;
}

std::optional<std::vector<std::uint8_t>> reencode_sock_msg(const SockMsgPdu& s, std::size_t size) {
  std::vector<std::uint8_t> out(size);
  std::size_t off = 0;
  if (s.msg.sock) {
    auto n = sock::encode_msg_header(*s.msg.sock, out, s.order);
    if (!n) return std::nullopt;
    off += *n;
  }
  if (!s.msg.lnet) return out;
  auto n = encode_header(*s.msg.lnet, MutableByteSpan(out).subspan(off), sock::header_form(s.version));
  if (!n) return std::nullopt;
  off += *n;
  if (out.size() - off < s.msg.payload.size()) return std::nullopt;
  // Payloads LNet does not interpret are copied; ping info is re-encoded.
  std::copy(s.msg.payload.begin(), s.msg.payload.end(), out.begin() + static_cast<std::ptrdiff_t>(off));
  if (s.ping && !reencode_ping(*s.ping, MutableByteSpan(out).subspan(off))) return std::nullopt;
  return out;
}

std::optional<std::vector<std::uint8_t>> reencode_o2ib(const o2ib::DecodedMsg& m, const std::optional<PingInfo>& ping,
                                                      std::size_t size) {
  std::vector<std::uint8_t> out(std::max(size, o2ib::wire_size(m.msg)));
  const auto cksum = m.cksum != 0 ? o2ib::Checksum::on : o2ib::Checksum::off;
  auto n = o2ib::encode_msg(m.msg, out, m.order, cksum);
  if (!n) return std::nullopt;
  out.resize(*n);
  if (ping && !reencode_ping(*ping, MutableByteSpan(out).subspan(o2ib::kImmediatePayloadOffset))) return std::nullopt;
  return out;
}

// CM private data: the o2iblnd message or reject is re-encoded in place;
// the rdma_cm header and the zero padding after the message are copied.
std::optional<std::vector<std::uint8_t>> reencode_cm(const CmPdu& c, ByteSpan bytes) {
  if (!c.msg && !c.rej) return std::nullopt;
  std::vector<std::uint8_t> out(bytes.begin(), bytes.end());
  MutableByteSpan ulp = MutableByteSpan(out).subspan(c.ulp_offset);
  if (c.msg) {
    auto m = reencode_o2ib(*c.msg, std::nullopt, 0);
    if (!m || m->size() > ulp.size()) return std::nullopt;
    std::copy(m->begin(), m->end(), ulp.begin());
  } else {
    auto n = o2ib::encode_reject(c.rej->rej, ulp, c.rej->order);
    if (!n) return std::nullopt;
  }
  return out;
}

}  // namespace

const LnetHeader* lnet_header_of(const Pdu& p) noexcept {
  if (const auto* s = p.as<SockMsgPdu>()) return s->msg.lnet ? &*s->msg.lnet : nullptr;
  if (const auto* o = p.as<O2ibPdu>()) {
    if (const auto* i = o->msg.msg.immediate()) return &i->hdr;
    if (const auto* r = o->msg.msg.put_req()) return &r->hdr;
    if (const auto* g = o->msg.msg.get_req()) return &g->hdr;
  }
  return nullptr;
}

std::optional<Result<PingInfo>> ping_info_in(const LnetHeader& h, ByteSpan payload) noexcept {
  if (payload.size() < kPingHeaderSize) return std::nullopt;
  const bool push = h.type == MsgType::put && h.put().ptl_index == kLnetReservedPortal &&
                    h.put().match_bits == kPingMatchBits;
  const bool reply = h.type == MsgType::reply && match_magic(payload.data(), kPingMagic).matched;
  if (!push && !reply) return std::nullopt;
  return decode_ping_info(payload);
}

std::optional<std::vector<std::uint8_t>> reencode(const Pdu& p) {
  if (p.error) return std::nullopt;
  if (const auto* a = p.as<AcceptorPdu>()) return reencode_acceptor(*a, p.bytes.size());
  if (const auto* h = p.as<HelloPdu>()) return reencode_hello(*h, p.bytes.size());
  if (const auto* s = p.as<SockMsgPdu>()) return reencode_sock_msg(*s, p.bytes.size());
  if (const auto* o = p.as<O2ibPdu>()) return reencode_o2ib(o->msg, o->ping, p.bytes.size());
  if (const auto* c = p.as<CmPdu>()) return reencode_cm(*c, p.bytes);
  return std::nullopt;
}

}  // namespace lnetr::decode
