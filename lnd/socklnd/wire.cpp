#include "lnd/socklnd/wire.hpp"

#include <zlib.h>

#include <algorithm>

namespace lnetr::sock {
namespace {

// HELLO V1 is a bare nid4 LNet header: magic and version overlay dest_nid.
constexpr std::size_t kV1Major = 4, kV1Minor = 6, kV1SrcNid = 8, kV1DstPid = 16, kV1SrcPid = 20,
                      kV1Type = 24, kV1PayloadLen = 28, kV1Incarnation = 32, kV1Ctype = 40;

static_assert(kHelloV1Size == kLnetHeaderSize);

// V2/V3 and V4 field offsets.
struct HelloLayout {
  std::size_t src_nid, dst_nid, src_pid, dst_pid, src_inc, dst_inc, ctype, nips, size;
};
constexpr HelloLayout kV2Layout{8, 16, 24, 28, 32, 40, 48, 52, kHelloV2Size};
constexpr HelloLayout kV4Layout{8, 28, 48, 52, 56, 64, 72, 76, kHelloV4Size};

bool is_v1_magic(ByteSpan p) noexcept {
  return p.size() >= 4 && load_le<std::uint32_t>(p.data()) == kTcpProtoMagic;
}

// V1 messages are bare LNet headers; later versions prefix the socklnd header.
std::size_t sock_header_size(std::uint32_t version) noexcept {
  return version == 1 ? 0 : kMsgHeaderSize;
}

}  // namespace

// ---- acceptor request -----------------------------------------------------

Result<std::size_t> acceptor_bytes_needed(ByteSpan prefix) noexcept {
  if (prefix.size() < 8) return std::size_t{8};
  const MagicMatch m = match_magic(prefix.data(), kAcceptorMagic);
  if (!m.matched) return fail(WireError::bad_magic);
  switch (load<std::uint32_t>(prefix.data() + 4, m.order)) {
    case 1: return kAcceptorV1Size;
    case 2: return kAcceptorV2Size;
    default: return fail(WireError::bad_version);
  }
}

Result<AcceptorRequest> decode_acceptor_request(ByteSpan in) noexcept {
  auto need = acceptor_bytes_needed(in);
  if (!need) return fail(need.error());
  if (in.size() < *need) return fail(WireError::truncated);
  AcceptorRequest r;
  r.order = match_magic(in.data(), kAcceptorMagic).order;
  r.version = load<std::uint32_t>(in.data() + 4, r.order);
  auto nid = r.version == 1 ? decode_nid8(load<std::uint64_t>(in.data() + 8, r.order)) : decode_nid20(in.data() + 8);
  if (!nid) return fail(nid.error());
  r.nid = *nid;
  return r;
}

Result<std::size_t> encode_acceptor_request(const AcceptorRequest& r, MutableByteSpan out) noexcept {
  if (r.version != 1 && r.version != 2) return fail(WireError::bad_version);
  const std::size_t size = r.version == 1 ? kAcceptorV1Size : kAcceptorV2Size;
  if (out.size() < size) return fail(WireError::truncated);
  store(out.data(), kAcceptorMagic, r.order);
  store(out.data() + 4, r.version, r.order);
  if (r.version == 1) {
    if (!r.nid.fits_nid4()) return fail(WireError::bad_nid);
    store(out.data() + 8, r.nid.to_nid4(), r.order);
  } else {
    encode_nid20(r.nid, out.data() + 8);
  }
  return size;
}

bool is_hello_magic(ByteSpan prefix) noexcept {
  return prefix.size() >= 4 && (is_v1_magic(prefix) || match_magic(prefix.data(), kLnetProtoMagic).matched);
}

// ---- HELLO ----------------------------------------------------------------

const char* to_string(ConnType t) noexcept {
  switch (t) {
    case ConnType::none: return "NONE";
    case ConnType::any: return "ANY";
    case ConnType::control: return "CONTROL";
    case ConnType::bulk_in: return "BULK_IN";
    case ConnType::bulk_out: return "BULK_OUT";
  }
  return "?";
}

Result<std::size_t> hello_bytes_needed(ByteSpan prefix) noexcept {
  if (prefix.size() < 8) return std::size_t{8};
  if (is_v1_magic(prefix)) {
    if (load_le<std::uint16_t>(prefix.data() + kV1Major) != 1 || load_le<std::uint16_t>(prefix.data() + kV1Minor) != 0)
      return fail(WireError::bad_version);
    if (prefix.size() < kV1PayloadLen + 4) return kV1PayloadLen + 4;
    const auto len = load_le<std::uint32_t>(prefix.data() + kV1PayloadLen);
    if (len % 4 != 0 || len / 4 > kHelloMaxIps) return fail(WireError::bad_length);
    return kHelloV1Size + len;
  }
  const MagicMatch m = match_magic(prefix.data(), kLnetProtoMagic);
  if (!m.matched) return fail(WireError::bad_magic);
  switch (load<std::uint32_t>(prefix.data() + 4, m.order)) {
    case 2:
    case 3: {
      if (prefix.size() < kHelloV2Size) return kHelloV2Size;
      const auto nips = load<std::uint32_t>(prefix.data() + kV2Layout.nips, m.order);
      if (nips > kHelloMaxIps) return fail(WireError::bad_length);
      return kHelloV2Size + 4 * std::size_t{nips};
    }
    case 4: return kHelloV4Size;
    default: return fail(WireError::bad_version);
  }
}

std::size_t hello_size(const Hello& h) noexcept {
  const std::size_t n = std::min(h.nips, kHelloMaxIps);
  switch (h.version) {
    case 1: return kHelloV1Size + 4 * n;
    case 4: return kHelloV4Size;
    default: return kHelloV2Size + 4 * n;
  }
}

Result<Hello> decode_hello(ByteSpan in) noexcept {
  auto need = hello_bytes_needed(in);
  if (!need) return fail(need.error());
  if (in.size() < *need) return fail(WireError::truncated);
  const std::uint8_t* p = in.data();
  Hello h;

  if (is_v1_magic(in)) {
    h.version = 1;
    h.order = ByteOrder::little;
    if (load_le<std::uint32_t>(p + kV1Type) != static_cast<std::uint32_t>(MsgType::hello))
      return fail(WireError::bad_value);
    auto src = decode_nid8(load_le<std::uint64_t>(p + kV1SrcNid));
    if (!src) return fail(src.error());
    h.src_nid = *src;
    h.dst_pid = load_le<std::uint32_t>(p + kV1DstPid);
    h.src_pid = load_le<std::uint32_t>(p + kV1SrcPid);
    h.src_incarnation = load_le<std::uint64_t>(p + kV1Incarnation);
    h.ctype = static_cast<std::int32_t>(load_le<std::uint32_t>(p + kV1Ctype));
    h.nips = load_le<std::uint32_t>(p + kV1PayloadLen) / 4;
    for (std::uint32_t i = 0; i < h.nips; ++i) {
      h.ips[i] = load_le<std::uint32_t>(p + kHelloV1Size + 4 * i);
      if (h.ips[i] == 0) return fail(WireError::bad_value);
    }
    return h;
  }

  h.order = match_magic(p, kLnetProtoMagic).order;
  h.version = load<std::uint32_t>(p + 4, h.order);
  const HelloLayout& l = h.version == 4 ? kV4Layout : kV2Layout;
  auto src = h.version == 4 ? decode_nid20(p + l.src_nid) : decode_nid8(load<std::uint64_t>(p + l.src_nid, h.order));
  auto dst = h.version == 4 ? decode_nid20(p + l.dst_nid) : decode_nid8(load<std::uint64_t>(p + l.dst_nid, h.order));
  if (!src || !dst) return fail(WireError::bad_nid);
  h.src_nid = *src;
  h.dst_nid = *dst;
  h.src_pid = load<std::uint32_t>(p + l.src_pid, h.order);
  h.dst_pid = load<std::uint32_t>(p + l.dst_pid, h.order);
  h.src_incarnation = load<std::uint64_t>(p + l.src_inc, h.order);
  h.dst_incarnation = load<std::uint64_t>(p + l.dst_inc, h.order);
  h.ctype = static_cast<std::int32_t>(load<std::uint32_t>(p + l.ctype, h.order));
  if (h.version == 4) {
    h.nips = load<std::uint32_t>(p + l.nips, kNativeOrder);  // never swapped, never used
    return h;
  }
  h.nips = load<std::uint32_t>(p + l.nips, h.order);
  for (std::uint32_t i = 0; i < h.nips; ++i) {
    h.ips[i] = load<std::uint32_t>(p + kHelloV2Size + 4 * i, h.order);
    if (h.ips[i] == 0) return fail(WireError::bad_value);
  }
  return h;
}

Result<std::size_t> encode_hello(const Hello& h, MutableByteSpan out) noexcept {
  if (h.version < 1 || h.version > 4) return fail(WireError::bad_version);
  if (h.version != 4 && h.nips > kHelloMaxIps) return fail(WireError::bad_length);
  const std::size_t size = hello_size(h);
  if (out.size() < size) return fail(WireError::truncated);
  if (h.version != 4 && !(h.src_nid.fits_nid4() && h.dst_nid.fits_nid4())) return fail(WireError::bad_nid);
  std::uint8_t* p = out.data();
  std::fill_n(p, size, 0);
  const auto ctype = static_cast<std::uint32_t>(h.ctype);

  if (h.version == 1) {
    store_le(p, kTcpProtoMagic);
    store_le<std::uint16_t>(p + kV1Major, 1);
    store_le<std::uint16_t>(p + kV1Minor, 0);
    store_le(p + kV1SrcNid, h.src_nid.to_nid4());
    store_le(p + kV1DstPid, h.dst_pid);
    store_le(p + kV1SrcPid, h.src_pid);
    store_le(p + kV1Type, static_cast<std::uint32_t>(MsgType::hello));
    store_le(p + kV1PayloadLen, 4 * h.nips);
    store_le(p + kV1Incarnation, h.src_incarnation);
    store_le(p + kV1Ctype, ctype);
    for (std::uint32_t i = 0; i < h.nips; ++i) store_le(p + kHelloV1Size + 4 * i, h.ips[i]);
    return size;
  }

  const HelloLayout& l = h.version == 4 ? kV4Layout : kV2Layout;
  store(p, kLnetProtoMagic, h.order);
  store(p + 4, h.version, h.order);
  if (h.version == 4) {
    encode_nid20(h.src_nid, p + l.src_nid);
    encode_nid20(h.dst_nid, p + l.dst_nid);
  } else {
    store(p + l.src_nid, h.src_nid.to_nid4(), h.order);
    store(p + l.dst_nid, h.dst_nid.to_nid4(), h.order);
  }
  store(p + l.src_pid, h.src_pid, h.order);
  store(p + l.dst_pid, h.dst_pid, h.order);
  store(p + l.src_inc, h.src_incarnation, h.order);
  store(p + l.dst_inc, h.dst_incarnation, h.order);
  store(p + l.ctype, ctype, h.order);
  if (h.version == 4) {
    store(p + l.nips, h.nips, kNativeOrder);
    return size;
  }
  store(p + l.nips, h.nips, h.order);
  for (std::uint32_t i = 0; i < h.nips; ++i) store(p + kHelloV2Size + 4 * i, h.ips[i], h.order);
  return size;
}

// ---- messages -------------------------------------------------------------

Result<MsgHeader> decode_msg_header(ByteSpan in, ByteOrder order) noexcept {
  if (in.size() < kMsgHeaderSize) return fail(WireError::truncated);
  MsgHeader h{load<std::uint32_t>(in.data(), order), load<std::uint32_t>(in.data() + 4, order),
              load<std::uint64_t>(in.data() + 8, order), load<std::uint64_t>(in.data() + 16, order)};
  if (h.type != kMsgNoop && h.type != kMsgLnet) return fail(WireError::bad_type);
  return h;
}

Result<std::size_t> encode_msg_header(const MsgHeader& h, MutableByteSpan out, ByteOrder order) noexcept {
  if (out.size() < kMsgHeaderSize) return fail(WireError::truncated);
  store(out.data(), h.type, order);
  store(out.data() + 4, h.csum, order);
  store(out.data() + 8, h.zc_req_cookie, order);
  store(out.data() + 16, h.zc_ack_cookie, order);
  return kMsgHeaderSize;
}

Result<std::size_t> message_head_bytes_needed(ByteSpan prefix, std::uint32_t version, ByteOrder order) noexcept {
  if (version < 1 || version > 4) return fail(WireError::bad_version);
  const std::size_t off = sock_header_size(version);
  if (version != 1) {
    if (prefix.size() < kMsgHeaderSize) return kMsgHeaderSize;
    const auto type = load<std::uint32_t>(prefix.data(), order);
    if (type == kMsgNoop) return kMsgHeaderSize;
    if (type != kMsgLnet) return fail(WireError::bad_type);
  }
  return off + header_size(header_form(version));
}

Result<MessageHead> decode_message_head(ByteSpan in, std::uint32_t version, ByteOrder order) noexcept {
  auto need = message_head_bytes_needed(in, version, order);
  if (!need) return fail(need.error());
  if (in.size() < *need) return fail(WireError::truncated);
  MessageHead head;
  head.size = *need;
  if (version != 1) {
    auto h = decode_msg_header(in, order);
    if (!h) return fail(h.error());
    head.sock = *h;
    if (h->type == kMsgNoop) return head;
  }
  auto lnet = decode_header(in.subspan(sock_header_size(version)), header_form(version));
  if (!lnet) return fail(lnet.error());
  if (lnet->payload_length > kLnetMtu) return fail(WireError::bad_length);
  head.lnet = *lnet;
  return head;
}

Result<std::size_t> message_bytes_needed(ByteSpan prefix, std::uint32_t version, ByteOrder order) noexcept {
  auto need = message_head_bytes_needed(prefix, version, order);
  if (!need || prefix.size() < *need) return need;
  auto head = decode_message_head(prefix, version, order);
  if (!head) return fail(head.error());
  return head->size + head->payload_length();
}

Result<Message> decode_message(ByteSpan in, std::uint32_t version, ByteOrder order) noexcept {
  auto head = decode_message_head(in, version, order);
  if (!head) return fail(head.error());
  if (in.size() - head->size < head->payload_length()) return fail(WireError::truncated);
  return Message{head->sock, head->lnet, in.subspan(head->size, head->payload_length())};
}

ZcAck zc_ack_of(const MsgHeader& h, std::uint32_t version) noexcept {
  using K = ZcAck::Kind;
  const std::uint64_t b = h.zc_ack_cookie;
  if (b == 0) return {};
  // An LNET message's zc_req_cookie is its own request, not part of an ACK.
  const std::uint64_t a = (h.type == kMsgNoop && h.zc_req_cookie != 0) ? h.zc_req_cookie : b;
  if (b == kKeepaliveCookie && version >= 3) return a == b ? ZcAck{K::keepalive, 0, 0} : ZcAck{K::invalid, a, b};
  if (a == b) return {K::single, b, b};
  return a < b ? ZcAck{K::range, a, b} : ZcAck{K::pair, a, b};
}

MsgHeader make_zc_ack(std::uint64_t cookie) noexcept { return {kMsgNoop, 0, 0, cookie}; }
MsgHeader make_keepalive() noexcept { return {kMsgNoop, 0, 0, kKeepaliveCookie}; }

void Checksum::update(ByteSpan bytes) noexcept {
  zlib_crc_ = crc32_z(zlib_crc_, bytes.data(), bytes.size());
}

}  // namespace lnetr::sock
