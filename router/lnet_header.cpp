#include "router/lnet_header.hpp"

#include <algorithm>

namespace lnetr {
namespace {

// Offsets inside the 40-byte type-specific part (add 32 for the nid4 header,
// 56 for the nid16 header).
constexpr std::size_t kWmd = 0;
constexpr std::size_t kMatch = 16;

WireHandle load_wmd(const std::uint8_t* p) noexcept {
  return {load_le<std::uint64_t>(p), load_le<std::uint64_t>(p + 8)};
}

void store_wmd(std::uint8_t* p, const WireHandle& h) noexcept {
  store_le(p, h.interface_cookie);
  store_le(p + 8, h.object_cookie);
}

// Common-part offsets for each form.
struct Layout {
  std::size_t nid_size, dest_pid, src_pid, type, payload_length, msg;
};
constexpr Layout kNid4{8, 16, 20, 24, 28, 32};
constexpr Layout kNid16{20, 40, 44, 48, 52, 56};

static_assert(kNid4.msg + kLnetMsgPartSize == kLnetHeaderSize);
static_assert(kNid16.msg + kLnetMsgPartSize == kLnetHeader16Size);

}  // namespace

const char* to_string(MsgType t) noexcept {
  switch (t) {
    case MsgType::ack: return "ACK";
    case MsgType::put: return "PUT";
    case MsgType::get: return "GET";
    case MsgType::reply: return "REPLY";
    case MsgType::hello: return "HELLO";
  }
  return "?";
}

PutFields LnetHeader::put() const noexcept {
  const std::uint8_t* p = msg.data();
  return {load_wmd(p + kWmd), load_le<std::uint64_t>(p + kMatch), load_le<std::uint64_t>(p + 24),
          load_le<std::uint32_t>(p + 32), load_le<std::uint32_t>(p + 36)};
}

GetFields LnetHeader::get() const noexcept {
  const std::uint8_t* p = msg.data();
  return {load_wmd(p + kWmd), load_le<std::uint64_t>(p + kMatch), load_le<std::uint32_t>(p + 24),
          load_le<std::uint32_t>(p + 28), load_le<std::uint32_t>(p + 32)};
}

ReplyFields LnetHeader::reply() const noexcept { return {load_wmd(msg.data() + kWmd)}; }

AckFields LnetHeader::ack() const noexcept {
  const std::uint8_t* p = msg.data();
  return {load_wmd(p + kWmd), load_le<std::uint64_t>(p + kMatch), load_le<std::uint32_t>(p + 24)};
}

HelloFields LnetHeader::hello() const noexcept {
  return {load_le<std::uint64_t>(msg.data()), load_le<std::uint32_t>(msg.data() + 8)};
}

void LnetHeader::set(const PutFields& f) noexcept {
  type = MsgType::put;
  msg.fill(0);
  std::uint8_t* p = msg.data();
  store_wmd(p + kWmd, f.ack_wmd);
  store_le(p + kMatch, f.match_bits);
  store_le(p + 24, f.hdr_data);
  store_le(p + 32, f.ptl_index);
  store_le(p + 36, f.offset);
}

void LnetHeader::set(const GetFields& f) noexcept {
  type = MsgType::get;
  msg.fill(0);
  std::uint8_t* p = msg.data();
  store_wmd(p + kWmd, f.return_wmd);
  store_le(p + kMatch, f.match_bits);
  store_le(p + 24, f.ptl_index);
  store_le(p + 28, f.src_offset);
  store_le(p + 32, f.sink_length);
}

void LnetHeader::set(const ReplyFields& f) noexcept {
  type = MsgType::reply;
  msg.fill(0);
  store_wmd(msg.data() + kWmd, f.dst_wmd);
}

void LnetHeader::set(const AckFields& f) noexcept {
  type = MsgType::ack;
  msg.fill(0);
  std::uint8_t* p = msg.data();
  store_wmd(p + kWmd, f.dst_wmd);
  store_le(p + kMatch, f.match_bits);
  store_le(p + 24, f.mlength);
}

void LnetHeader::set(const HelloFields& f) noexcept {
  type = MsgType::hello;
  msg.fill(0);
  store_le(msg.data(), f.incarnation);
  store_le(msg.data() + 8, f.type);
}

Result<LnetHeader> decode_header(ByteSpan in, HeaderForm form) noexcept {
  const Layout& l = form == HeaderForm::nid4 ? kNid4 : kNid16;
  if (in.size() < header_size(form)) return fail(WireError::truncated);
  const std::uint8_t* p = in.data();
  LnetHeader h;
  auto d = form == HeaderForm::nid4 ? decode_nid8(load_le<std::uint64_t>(p)) : decode_nid20(p);
  auto s = form == HeaderForm::nid4 ? decode_nid8(load_le<std::uint64_t>(p + 8))
                                    : decode_nid20(p + Nid::kWireSize);
  if (!d || !s) return fail(WireError::bad_nid);
  h.dest_nid = *d;
  h.src_nid = *s;
  h.dest_pid = load_le<std::uint32_t>(p + l.dest_pid);
  h.src_pid = load_le<std::uint32_t>(p + l.src_pid);
  const auto type = load_le<std::uint32_t>(p + l.type);
  if (type > static_cast<std::uint32_t>(MsgType::hello)) return fail(WireError::bad_type);
  h.type = static_cast<MsgType>(type);
  h.payload_length = load_le<std::uint32_t>(p + l.payload_length);
  std::copy_n(p + l.msg, kLnetMsgPartSize, h.msg.begin());
  return h;
}

Result<std::size_t> encode_header(const LnetHeader& h, MutableByteSpan out, HeaderForm form) noexcept {
  const Layout& l = form == HeaderForm::nid4 ? kNid4 : kNid16;
  const std::size_t size = header_size(form);
  if (out.size() < size) return fail(WireError::truncated);
  std::uint8_t* p = out.data();
  if (form == HeaderForm::nid4) {
    if (!h.dest_nid.fits_nid4() || !h.src_nid.fits_nid4()) return fail(WireError::bad_nid);
    store_le(p, h.dest_nid.to_nid4());
    store_le(p + 8, h.src_nid.to_nid4());
  } else {
    encode_nid20(h.dest_nid, p);
    encode_nid20(h.src_nid, p + Nid::kWireSize);
  }
  store_le(p + l.dest_pid, h.dest_pid);
  store_le(p + l.src_pid, h.src_pid);
  store_le(p + l.type, static_cast<std::uint32_t>(h.type));
  store_le(p + l.payload_length, h.payload_length);
  std::copy(h.msg.begin(), h.msg.end(), p + l.msg);
  return size;
}

std::optional<WireError> check_header(const LnetHeader& h) noexcept {
  switch (h.type) {
    case MsgType::ack:
    case MsgType::get:
      if (h.payload_length != 0) return WireError::bad_length;
      return std::nullopt;
    case MsgType::put:
    case MsgType::reply:
      if (h.payload_length > kLnetMtu) return WireError::bad_length;
      return std::nullopt;
    case MsgType::hello:
      return WireError::bad_type;
  }
  return WireError::bad_type;
}

}  // namespace lnetr
