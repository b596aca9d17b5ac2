#include "lnd/o2iblnd/wire.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>

namespace lnetr::o2ib {
namespace {

// Message header offsets (o2iblnd.md §2).
namespace hdr_off {
constexpr std::size_t magic = 0;
constexpr std::size_t version = 4;
constexpr std::size_t type = 6;
constexpr std::size_t credits = 7;
constexpr std::size_t nob = 8;
constexpr std::size_t cksum = 12;
constexpr std::size_t srcnid = 16;
constexpr std::size_t srcstamp = 24;
constexpr std::size_t dstnid = 32;
constexpr std::size_t dststamp = 40;
constexpr std::size_t body = 48;
}  // namespace hdr_off
static_assert(hdr_off::dststamp + 8 == kMsgHeaderSize && hdr_off::body == kMsgHeaderSize);

// Body offsets, absolute from the start of the message (o2iblnd.md §3).
namespace body_off {
constexpr std::size_t cp = hdr_off::body;               // connparams
constexpr std::size_t lnet_hdr = hdr_off::body;         // IMMEDIATE, PUT_REQ, GET_REQ
constexpr std::size_t payload = lnet_hdr + kLnetHeaderSize;
constexpr std::size_t putreq_cookie = lnet_hdr + kLnetHeaderSize;
constexpr std::size_t putack_src_cookie = hdr_off::body;
constexpr std::size_t putack_dst_cookie = putack_src_cookie + kCookieSize;
constexpr std::size_t putack_rd = putack_dst_cookie + kCookieSize;
constexpr std::size_t getreq_cookie = lnet_hdr + kLnetHeaderSize;
constexpr std::size_t getreq_rd = getreq_cookie + kCookieSize;
constexpr std::size_t compl_cookie = hdr_off::body;
constexpr std::size_t compl_status = compl_cookie + kCookieSize;
}  // namespace body_off
static_assert(body_off::payload == kImmediatePayloadOffset);
static_assert(body_off::putreq_cookie + kCookieSize == kMsgHeaderSize + kPutReqBodySize);
static_assert(body_off::putack_rd == 64);
static_assert(body_off::putack_rd + kRdmaDescHeaderSize == kMsgHeaderSize + kPutAckBodySize);
static_assert(body_off::getreq_rd == 128);
static_assert(body_off::getreq_rd + kRdmaDescHeaderSize == kMsgHeaderSize + kGetReqBodySize);
static_assert(body_off::compl_status + 4 == kMsgHeaderSize + kCompletionBodySize);

// Inside connparams.
constexpr std::size_t kCpQueueDepth = 0;
constexpr std::size_t kCpMaxFrags = 2;
constexpr std::size_t kCpMaxMsgSize = 4;
static_assert(kCpMaxMsgSize + 4 == kConnParamsSize);

// Inside an RDMA descriptor and a fragment.
constexpr std::size_t kRdKey = 0;
constexpr std::size_t kRdNfrags = 4;
constexpr std::size_t kRdFrags = 8;
constexpr std::size_t kFragNob = 0;
constexpr std::size_t kFragAddr = 4;  // unaligned u64
static_assert(kRdFrags == kRdmaDescHeaderSize && kFragAddr + 8 == kRdmaFragSize);

// Reject private data (o2iblnd.md §5).
namespace rej_off {
constexpr std::size_t magic = 0;
constexpr std::size_t version = 4;
constexpr std::size_t why = 6;
constexpr std::size_t padding = 7;
constexpr std::size_t incarnation = 8;
constexpr std::size_t cp = 16;
}  // namespace rej_off
static_assert(rej_off::padding == kRejectMinSize);
static_assert(rej_off::cp + kConnParamsSize == kRejectSize);

// Receive validation needs magic and version before anything else (§2.1 step 1).
constexpr std::size_t kMagicVersionSize = 6;

constexpr bool known_version(std::uint16_t v) noexcept { return v == kVersion1 || v == kVersion2; }

// Cookies are opaque: read and written in host order, never swapped.
Cookie load_cookie(const std::uint8_t* p) noexcept { return load<std::uint64_t>(p, kNativeOrder); }
void store_cookie(std::uint8_t* p, Cookie c) noexcept { store<std::uint64_t>(p, c, kNativeOrder); }

ConnParams load_cp(const std::uint8_t* p, ByteOrder o) noexcept {
  return {load<std::uint16_t>(p + kCpQueueDepth, o), load<std::uint16_t>(p + kCpMaxFrags, o),
          load<std::uint32_t>(p + kCpMaxMsgSize, o)};
}

void store_cp(std::uint8_t* p, const ConnParams& cp, ByteOrder o) noexcept {
  store(p + kCpQueueDepth, cp.queue_depth, o);
  store(p + kCpMaxFrags, cp.max_frags, o);
  store(p + kCpMaxMsgSize, cp.max_msg_size, o);
}

// A NID as the 64-bit field of the message header, or bad_nid if it cannot be
// written there losslessly (large address, or a non-canonical ANY).
Result<std::uint64_t> nid_to_wire(const Nid& n) noexcept {
  if (n.is_any()) {
    if (n != Nid::any()) return fail(WireError::bad_nid);
    return kNid4Any;
  }
  if (!n.is_nid4() || !std::all_of(n.addr.begin() + 4, n.addr.end(), [](std::uint8_t b) { return b == 0; }))
    return fail(WireError::bad_nid);
  return n.to_nid4();
}

std::uint32_t byte_value(std::uint8_t b, CharSign sign) noexcept {
  if (sign == CharSign::unsigned_char) return b;
  // Sign-extend as a signed C char would be before the addition.
  return static_cast<std::uint32_t>(static_cast<std::int32_t>(static_cast<std::int8_t>(b)));
}

std::uint32_t accumulate(std::uint32_t sum, ByteSpan bytes, CharSign sign) noexcept {
  for (const std::uint8_t b : bytes) sum = std::rotl(sum, 1) + byte_value(b, sign);
  return sum;
}

// The RDMA descriptor at `off` of `msg` (which is exactly ibm_nob bytes).
Result<RdmaDesc> decode_rd(ByteSpan msg, std::size_t off, ByteOrder o) noexcept {
  // Callers checked the type's minimum size, which covers key and nfrags.
  assert(msg.size() >= off + kRdmaDescHeaderSize);
  const std::uint8_t* p = msg.data() + off;
  const auto key = load<std::uint32_t>(p + kRdKey, o);
  const auto nfrags = load<std::uint32_t>(p + kRdNfrags, o);
  if (nfrags == 0 || nfrags > kMaxRdmaFrags) return fail(WireError::bad_value);
  const std::size_t frag_bytes = std::size_t{nfrags} * kRdmaFragSize;
  if (msg.size() - off - kRdmaDescHeaderSize < frag_bytes) return fail(WireError::bad_length);
  return RdmaDesc::from_wire(key, msg.subspan(off + kRdFrags, frag_bytes), o);
}

bool valid_rd(const RdmaDesc& rd) noexcept { return rd.nfrags() >= 1 && rd.nfrags() <= kMaxRdmaFrags; }

void store_rd(std::uint8_t* p, const RdmaDesc& rd, ByteOrder o) noexcept {
  store(p + kRdKey, rd.key(), o);
  store(p + kRdNfrags, static_cast<std::uint32_t>(rd.nfrags()), o);
  std::uint8_t* f = p + kRdFrags;
  for (std::size_t i = 0; i < rd.nfrags(); ++i, f += kRdmaFragSize) {
    const RdmaFrag frag = rd.frag(i);
    store(f + kFragNob, frag.nob, o);
    store(f + kFragAddr, frag.addr, o);
  }
}

Result<LnetHeader> decode_lnet_header(ByteSpan msg) noexcept {
  return decode_header(msg.subspan(body_off::lnet_hdr), HeaderForm::nid4);
}

// Decode the body of a message of type `t`; `msg` is exactly ibm_nob bytes,
// at least min_msg_size(t).
Result<MsgBody> decode_body(MsgType t, ByteSpan msg, ByteOrder o) noexcept {
  const std::uint8_t* p = msg.data();
  switch (t) {
    case MsgType::connreq:
    case MsgType::connack:
      return MsgBody{load_cp(p + body_off::cp, o)};
    case MsgType::noop:
      return MsgBody{Noop{}};
    case MsgType::immediate: {
      auto h = decode_lnet_header(msg);
      if (!h) return fail(h.error());
      // ibm_nob = 120 + payload_length exactly (o2iblnd.md §3): the inline
      // payload is the whole LNet payload, so a disagreement is a malformed
      // message either way (too short: LNet would read past the message; too
      // long: unexplained trailing bytes).
      const ByteSpan payload = msg.subspan(body_off::payload);
      if (h->payload_length != payload.size()) return fail(WireError::bad_length);
      return MsgBody{Immediate{*h, payload}};
    }
    case MsgType::put_req: {
      auto h = decode_lnet_header(msg);
      if (!h) return fail(h.error());
      return MsgBody{PutReq{*h, load_cookie(p + body_off::putreq_cookie)}};
    }
    case MsgType::put_ack: {
      auto rd = decode_rd(msg, body_off::putack_rd, o);
      if (!rd) return fail(rd.error());
      return MsgBody{PutAck{load_cookie(p + body_off::putack_src_cookie),
                            load_cookie(p + body_off::putack_dst_cookie), *rd}};
    }
    case MsgType::get_req: {
      // Descriptor first: its checks belong to the o2iblnd unpack step, the
      // LNet header's to LNet's parse that follows it.
      auto rd = decode_rd(msg, body_off::getreq_rd, o);
      if (!rd) return fail(rd.error());
      auto h = decode_lnet_header(msg);
      if (!h) return fail(h.error());
      return MsgBody{GetReq{*h, load_cookie(p + body_off::getreq_cookie), *rd}};
    }
    case MsgType::put_nak:
    case MsgType::put_done:
    case MsgType::get_done:
      return MsgBody{Completion{load_cookie(p + body_off::compl_cookie),
                                static_cast<std::int32_t>(load<std::uint32_t>(p + body_off::compl_status, o))}};
  }
  return fail(WireError::bad_type);
}

}  // namespace

// ---- names ------------------------------------------------------------------------

std::string_view to_string(MsgType t) noexcept {
  switch (t) {
#define LNETR_X(n, v, text) \
  case MsgType::n:          \
    return text;
    LNETR_O2IB_MSG_TYPES(LNETR_X)
#undef LNETR_X
  }
  return "UNKNOWN";
}

std::optional<MsgType> msg_type_from_wire(std::uint8_t v) noexcept {
  switch (v) {
#define LNETR_X(n, val, text) \
  case val:                   \
    return MsgType::n;
    LNETR_O2IB_MSG_TYPES(LNETR_X)
#undef LNETR_X
  }
  return std::nullopt;
}

std::size_t min_msg_size(MsgType t) noexcept {
  switch (t) {
    case MsgType::connreq:
    case MsgType::connack:
      return kConnMsgSize;
    case MsgType::noop:
      return kMsgHeaderSize;
    case MsgType::immediate:
      return kImmediatePayloadOffset;
    case MsgType::put_req:
      return kMsgHeaderSize + kPutReqBodySize;
    case MsgType::put_ack:
      return kMsgHeaderSize + kPutAckBodySize;
    case MsgType::get_req:
      return kMsgHeaderSize + kGetReqBodySize;
    case MsgType::put_nak:
    case MsgType::put_done:
    case MsgType::get_done:
      return kMsgHeaderSize + kCompletionBodySize;
  }
  return kMsgHeaderSize;
}

std::string_view to_string(RejectReason r) noexcept {
  switch (r) {
#define LNETR_X(n, v, lnet, text) \
  case RejectReason::n:           \
    return lnet;
    LNETR_O2IB_REJECT_REASONS(LNETR_X)
#undef LNETR_X
  }
  return "UNKNOWN";
}

std::string_view describe(RejectReason r) noexcept {
  switch (r) {
#define LNETR_X(n, v, lnet, text) \
  case RejectReason::n:           \
    return text;
    LNETR_O2IB_REJECT_REASONS(LNETR_X)
#undef LNETR_X
  }
  return "reason code not defined by o2iblnd";
}

// ---- bodies -----------------------------------------------------------------------

RdmaDesc RdmaDesc::from_wire(std::uint32_t key, ByteSpan frags, ByteOrder order) noexcept {
  assert(frags.size() % kRdmaFragSize == 0);
  RdmaDesc d;
  d.key_ = key;
  d.nfrags_ = frags.size() / kRdmaFragSize;
  d.wire_ = frags.data();
  d.order_ = order;
  return d;
}

RdmaFrag RdmaDesc::frag(std::size_t i) const noexcept {
  assert(i < nfrags_);
  if (wire_ == nullptr) return host_[i];
  const std::uint8_t* f = wire_ + i * kRdmaFragSize;
  return {load<std::uint32_t>(f + kFragNob, order_), load<std::uint64_t>(f + kFragAddr, order_)};
}

bool operator==(const RdmaDesc& a, const RdmaDesc& b) noexcept {
  if (a.key_ != b.key_ || a.nfrags_ != b.nfrags_) return false;
  for (std::size_t i = 0; i < a.nfrags_; ++i)
    if (a.frag(i) != b.frag(i)) return false;
  return true;
}

bool operator==(const Immediate& a, const Immediate& b) noexcept {
  return a.hdr == b.hdr && std::ranges::equal(a.payload, b.payload);
}

bool body_fits(MsgType t, const MsgBody& body) noexcept {
  switch (t) {
    case MsgType::connreq:
    case MsgType::connack:
      return std::holds_alternative<ConnParams>(body);
    case MsgType::noop:
      return std::holds_alternative<Noop>(body);
    case MsgType::immediate:
      return std::holds_alternative<Immediate>(body);
    case MsgType::put_req:
      return std::holds_alternative<PutReq>(body);
    case MsgType::put_ack:
      return std::holds_alternative<PutAck>(body);
    case MsgType::get_req:
      return std::holds_alternative<GetReq>(body);
    case MsgType::put_nak:
    case MsgType::put_done:
    case MsgType::get_done:
      return std::holds_alternative<Completion>(body);
  }
  return false;
}

// ---- messages -----------------------------------------------------------------------

Result<DecodedMsg> decode_msg(ByteSpan in) noexcept {
  // §2.1 steps 1-3: magic, version, lengths.
  if (in.size() < kMagicVersionSize) return fail(WireError::truncated);
  const std::uint8_t* p = in.data();
  const MagicMatch mm = match_magic(p + hdr_off::magic, kIbMagic);
  if (!mm.matched) return fail(WireError::bad_magic);
  const ByteOrder o = mm.order;
  DecodedMsg d;
  d.order = o;
  MsgHeader& h = d.msg.hdr;
  h.version = load<std::uint16_t>(p + hdr_off::version, o);
  if (!known_version(h.version)) return fail(WireError::bad_version);
  if (in.size() < kMsgHeaderSize) return fail(WireError::truncated);
  d.nob = load<std::uint32_t>(p + hdr_off::nob, o);
  // A message longer than a receive buffer cannot arrive on a queue pair;
  // refusing it here keeps decode and encode symmetric.
  if (d.nob < kMsgHeaderSize || d.nob > in.size() || d.nob > kMaxMsgSize) return fail(WireError::bad_length);
  const ByteSpan msg = in.first(d.nob);

  // Step 4: checksum, on the bytes as received.
  d.cksum = load<std::uint32_t>(p + hdr_off::cksum, o);
  if (!verify_checksum(msg, o)) return fail(WireError::bad_checksum);

  // Steps 5-6: the rest of the header; srcnid must not be ANY.
  h.credits = p[hdr_off::credits];
  auto src = decode_nid8(load<std::uint64_t>(p + hdr_off::srcnid, o));
  if (!src || src->is_any()) return fail(WireError::bad_nid);
  auto dst = decode_nid8(load<std::uint64_t>(p + hdr_off::dstnid, o));
  if (!dst) return fail(WireError::bad_nid);
  h.srcnid = *src;
  h.dstnid = *dst;
  h.srcstamp = load<std::uint64_t>(p + hdr_off::srcstamp, o);
  h.dststamp = load<std::uint64_t>(p + hdr_off::dststamp, o);

  // Steps 7-8: type, its minimum size, the body.
  const auto t = msg_type_from_wire(p[hdr_off::type]);
  if (!t) return fail(WireError::bad_type);
  h.type = *t;
  if (d.nob < min_msg_size(*t)) return fail(WireError::bad_length);
  auto body = decode_body(*t, msg, o);
  if (!body) return fail(body.error());
  d.msg.body = *body;
  return d;
}

std::size_t wire_size(const Msg& m) noexcept {
  struct Size {
    std::size_t operator()(const Noop&) const noexcept { return kMsgHeaderSize; }
    std::size_t operator()(const ConnParams&) const noexcept { return kConnMsgSize; }
    std::size_t operator()(const Immediate& b) const noexcept { return kImmediatePayloadOffset + b.payload.size(); }
    std::size_t operator()(const PutReq&) const noexcept { return kMsgHeaderSize + kPutReqBodySize; }
    std::size_t operator()(const PutAck& b) const noexcept {
      return kMsgHeaderSize + 2 * kCookieSize + b.rd.wire_size();
    }
    std::size_t operator()(const GetReq& b) const noexcept {
      return kMsgHeaderSize + kLnetHeaderSize + kCookieSize + b.rd.wire_size();
    }
    std::size_t operator()(const Completion&) const noexcept { return kMsgHeaderSize + kCompletionBodySize; }
  };
  return std::visit(Size{}, m.body);
}

Result<std::size_t> encode_msg(const Msg& m, MutableByteSpan out, ByteOrder o, Checksum cksum,
                               CharSign sign) noexcept {
  const MsgHeader& h = m.hdr;
  if (!known_version(h.version)) return fail(WireError::bad_version);
  if (!body_fits(h.type, m.body)) return fail(WireError::bad_type);
  if (h.srcnid.is_any()) return fail(WireError::bad_nid);
  const auto src = nid_to_wire(h.srcnid);
  const auto dst = nid_to_wire(h.dstnid);
  if (!src || !dst) return fail(WireError::bad_nid);
  if (const auto* b = m.immediate()) {
    if (b->payload.size() > kImmediateMaxPayload || b->payload.size() != b->hdr.payload_length)
      return fail(WireError::bad_length);
  } else if (const auto* pa = m.put_ack()) {
    if (!valid_rd(pa->rd)) return fail(WireError::bad_value);
  } else if (const auto* g = m.get_req()) {
    if (!valid_rd(g->rd)) return fail(WireError::bad_value);
  }
  const std::size_t size = wire_size(m);
  if (out.size() < size) return fail(WireError::truncated);

  std::uint8_t* p = out.data();
  store(p + hdr_off::magic, kIbMagic, o);
  store(p + hdr_off::version, h.version, o);
  p[hdr_off::type] = static_cast<std::uint8_t>(h.type);
  p[hdr_off::credits] = h.credits;
  store(p + hdr_off::nob, static_cast<std::uint32_t>(size), o);
  store(p + hdr_off::cksum, std::uint32_t{0}, o);
  store(p + hdr_off::srcnid, *src, o);
  store(p + hdr_off::srcstamp, h.srcstamp, o);
  store(p + hdr_off::dstnid, *dst, o);
  store(p + hdr_off::dststamp, h.dststamp, o);

  const MutableByteSpan lnet_hdr = out.subspan(body_off::lnet_hdr);
  Result<std::size_t> lnet_rc = kLnetHeaderSize;
  if (const auto* cp = m.connparams()) {
    store_cp(p + body_off::cp, *cp, o);
  } else if (const auto* im = m.immediate()) {
    lnet_rc = encode_header(im->hdr, lnet_hdr, HeaderForm::nid4);
    if (!im->payload.empty()) std::memcpy(p + body_off::payload, im->payload.data(), im->payload.size());
  } else if (const auto* pr = m.put_req()) {
    lnet_rc = encode_header(pr->hdr, lnet_hdr, HeaderForm::nid4);
    store_cookie(p + body_off::putreq_cookie, pr->cookie);
  } else if (const auto* pa = m.put_ack()) {
    store_cookie(p + body_off::putack_src_cookie, pa->src_cookie);
    store_cookie(p + body_off::putack_dst_cookie, pa->dst_cookie);
    store_rd(p + body_off::putack_rd, pa->rd, o);
  } else if (const auto* g = m.get_req()) {
    lnet_rc = encode_header(g->hdr, lnet_hdr, HeaderForm::nid4);
    store_cookie(p + body_off::getreq_cookie, g->cookie);
    store_rd(p + body_off::getreq_rd, g->rd, o);
  } else if (const auto* c = m.completion()) {
    store_cookie(p + body_off::compl_cookie, c->cookie);
    store(p + body_off::compl_status, static_cast<std::uint32_t>(c->status), o);
  }
  if (!lnet_rc) return fail(lnet_rc.error());

  if (cksum == Checksum::on)
    store(p + hdr_off::cksum, msg_checksum(ByteSpan(p, size), sign), o);
  return size;
}

Result<std::size_t> encode_immediate_head(const MsgHeader& h, const LnetHeader& hdr, std::uint32_t payload_length,
                                          MutableByteSpan out, ByteOrder o) noexcept {
  if (payload_length > kImmediateMaxPayload || payload_length != hdr.payload_length)
    return fail(WireError::bad_length);
  if (out.size() < kImmediatePayloadOffset) return fail(WireError::truncated);
  // Encoded as an IMMEDIATE without payload, then given the full length.
  LnetHeader empty = hdr;
  empty.payload_length = 0;
  Msg m{h, Immediate{empty, {}}};
  m.hdr.type = MsgType::immediate;
  auto r = encode_msg(m, out.first(kImmediatePayloadOffset), o);
  if (!r) return r;
  auto lnet = encode_header(hdr, out.subspan(body_off::lnet_hdr), HeaderForm::nid4);
  if (!lnet) return fail(lnet.error());
  store(out.data() + hdr_off::nob, static_cast<std::uint32_t>(kImmediatePayloadOffset + payload_length), o);
  return kImmediatePayloadOffset;
}

void store_checksum(MutableByteSpan msg, ByteOrder o, CharSign sign) noexcept {
  if (msg.size() < hdr_off::cksum + 4) return;
  store(msg.data() + hdr_off::cksum, msg_checksum(ByteSpan(msg.data(), msg.size()), sign), o);
}

bool is_protocol_probe(ByteSpan in) noexcept {
  return in.size() >= kMagicVersionSize && match_magic(in.data(), kLnetProtoMagic).matched;
}

// ---- checksum -------------------------------------------------------------------------

std::uint32_t checksum(ByteSpan bytes, CharSign sign) noexcept {
  const std::uint32_t sum = accumulate(0, bytes, sign);
  return sum == 0 ? 1 : sum;
}

std::uint32_t msg_checksum(ByteSpan msg, CharSign sign) noexcept {
  constexpr std::uint8_t kZero[4] = {};
  const std::size_t before = std::min(msg.size(), hdr_off::cksum);
  const std::size_t field = std::min(msg.size() - before, sizeof kZero);
  std::uint32_t sum = accumulate(0, msg.first(before), sign);
  sum = accumulate(sum, ByteSpan(kZero, field), sign);
  sum = accumulate(sum, msg.subspan(before + field), sign);
  return sum == 0 ? 1 : sum;
}

bool verify_checksum(ByteSpan msg, ByteOrder order) noexcept {
  if (msg.size() < hdr_off::cksum + 4) return false;
  const auto stored = load<std::uint32_t>(msg.data() + hdr_off::cksum, order);
  if (stored == 0) return true;
  return stored == msg_checksum(msg, CharSign::signed_char) ||
         stored == msg_checksum(msg, CharSign::unsigned_char);
}

// ---- reject -----------------------------------------------------------------------------

Result<DecodedReject> decode_reject(ByteSpan in) noexcept {
  if (in.size() < kRejectMinSize) return fail(WireError::truncated);
  const std::uint8_t* p = in.data();
  DecodedReject d;
  MagicMatch mm = match_magic(p + rej_off::magic, kIbMagic);
  d.rej.magic = kIbMagic;
  if (!mm.matched) {
    mm = match_magic(p + rej_off::magic, kLnetProtoMagic);
    d.rej.magic = kLnetProtoMagic;
  }
  if (!mm.matched) return fail(WireError::bad_magic);
  d.order = mm.order;
  d.rej.version = load<std::uint16_t>(p + rej_off::version, d.order);
  d.rej.why = static_cast<RejectReason>(p[rej_off::why]);
  // §5: the incarnation and parameters count only from a full reject of a
  // peer newer than V1.
  if (in.size() >= kRejectSize && d.rej.version > kVersion1) {
    d.rej.incarnation = load<std::uint64_t>(p + rej_off::incarnation, d.order);
    d.rej.cp = load_cp(p + rej_off::cp, d.order);
  }
  return d;
}

Result<std::size_t> encode_reject(const Reject& r, MutableByteSpan out, ByteOrder o) noexcept {
  if (r.magic != kIbMagic && r.magic != kLnetProtoMagic) return fail(WireError::bad_magic);
  if (out.size() < kRejectSize) return fail(WireError::truncated);
  std::uint8_t* p = out.data();
  store(p + rej_off::magic, r.magic, o);
  store(p + rej_off::version, r.version, o);
  p[rej_off::why] = static_cast<std::uint8_t>(r.why);
  p[rej_off::padding] = 0;
  store(p + rej_off::incarnation, r.incarnation.value_or(0), o);
  if (r.cp) {
    store_cp(p + rej_off::cp, *r.cp, o);
  } else {
    std::memset(p + rej_off::cp, 0, kConnParamsSize);
  }
  return kRejectSize;
}

}  // namespace lnetr::o2ib
