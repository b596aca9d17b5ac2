// o2iblnd wire codec: spec examples (o2iblnd.md §10), real kernel frames from
// vectors/v3-o2iblnd-pair-rxe.txt (Part 2), byte-order handling, every
// receive-validation rule, the checksum and the reject private data.
#include "lnd/o2iblnd/wire.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace lnetr::o2ib {
namespace {

using Bytes = std::vector<std::uint8_t>;

template <std::size_t N>
Bytes bytes(const std::uint8_t (&a)[N]) {
  return Bytes(a, a + N);
}

// ---- o2iblnd.md §10 ------------------------------------------------------------

// 10.0.0.1@o2ib -> 10.0.0.5@o2ib, x86 sender.
constexpr std::uint8_t kSpecConnReq[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xc0, 0x00, 0x38, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x05, 0x00, 0xe6, 0xd5, 0xc4, 0xb3, 0xa2, 0xf1, 0x05, 0x00,
    0x05, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x08, 0x00, 0x01, 0x01, 0x00, 0x10, 0x00, 0x00,
};

// The same CONNREQ written by a big-endian sender (every field swapped).
constexpr std::uint8_t kSpecConnReqBig[] = {
    0x0b, 0xe9, 0x1b, 0x91, 0x00, 0x12, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x38, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x05, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01, 0x00, 0x05, 0xf1, 0xa2, 0xb3, 0xc4, 0xd5, 0xe6,
    0x00, 0x05, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x10, 0x00,
};

// Reject "MSG_QUEUE_SIZE" from the passive side.
constexpr std::uint8_t kSpecReject[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0x07, 0x00, 0xe6, 0xd5, 0xc4, 0xb3, 0xa2, 0xf1, 0x05, 0x00,
    0x08, 0x00, 0x01, 0x01, 0x00, 0x10, 0x00, 0x00,
};

constexpr std::uint64_t kSpecNid1 = 0x000500000A000001;  // 10.0.0.1@o2ib
constexpr std::uint64_t kSpecNid5 = 0x000500000A000005;  // 10.0.0.5@o2ib
constexpr std::uint64_t kSpecStamp = 0x0005F1A2B3C4D5E6;

// ---- real frames: v3-o2iblnd-pair-rxe (P = 10.201.1.2@o2ib, Q = 10.201.1.4@o2ib) ----

constexpr std::uint64_t kNidP = 0x000500000ac90102;
constexpr std::uint64_t kNidQ = 0x000500000ac90104;
constexpr std::uint64_t kStampP = 1795325402645298;
constexpr std::uint64_t kStampQ = 1795325402627816;

// Frame 3: the whole 92-byte REQ private data: 36-byte rdma_cm header, then
// the CONNREQ at +36.
constexpr std::uint8_t kReqPrivateData[] = {
    0x00, 0x40, 0x03, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0a, 0xc9, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0a, 0xc9, 0x01, 0x04, 0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xc0, 0x00, 0x38, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x32, 0x83, 0xe1, 0xc4,
    0xd6, 0x60, 0x06, 0x00, 0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x01, 0x01, 0x00, 0x10, 0x00, 0x00,
};
constexpr std::size_t kConnReqOffset = 36;

// Frame 4: CONNACK (first 56 bytes of the 196-byte REP private data).
constexpr std::uint8_t kConnAck[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xc1, 0x00, 0x38, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0xe8, 0x3e, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x32, 0x83, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x08, 0x00, 0x01, 0x01, 0x00, 0x10, 0x00, 0x00,
};

// Frame 6: IMMEDIATE carrying the LNet GET of `lnetctl ping` (sink 3960).
constexpr std::uint8_t kImmGet[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xd1, 0x00, 0x78, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x32, 0x83, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0xe8, 0x3e, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00,
    0x39, 0x30, 0x00, 0x00, 0x39, 0x30, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xc1, 0xa3, 0x1c, 0x0f, 0xf1, 0x46, 0xea, 0x18, 0x0d, 0x1c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x78, 0x0f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

// Frame 8: IMMEDIATE carrying the REPLY with Q's 48-byte ping info.
constexpr std::uint8_t kImmReply[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xd1, 0x01, 0xa8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0xe8, 0x3e, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x32, 0x83, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00,
    0x39, 0x30, 0x00, 0x00, 0x39, 0x30, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00,
    0xc1, 0xa3, 0x1c, 0x0f, 0xf1, 0x46, 0xea, 0x18, 0x0d, 0x1c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x67, 0x6e, 0x69, 0x70, 0x1e, 0x00, 0x00, 0x00,
    0x39, 0x30, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09, 0x00,
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00,
    0xde, 0xc0, 0xaa, 0x15, 0x00, 0x00, 0x00, 0x00,
};

// Frame 46: GET_REQ (tshark mis-decodes it; fields per the Part 2 annotation).
constexpr std::uint8_t kGetReq[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xd6, 0x01, 0x94, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0xe8, 0x3e, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x32, 0x83, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00,
    0x39, 0x30, 0x00, 0x00, 0x39, 0x30, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x51, 0x0d, 0x18, 0x0e, 0xf1, 0x46, 0xea, 0x18, 0x3d, 0x2c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0xdb, 0x7d, 0x34, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x6e, 0x0b, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x70, 0x38, 0xd5,
    0x90, 0x8a, 0xff, 0xff,
};

// Frame 52: GET_DONE.
constexpr std::uint8_t kGetDone[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xd7, 0x00, 0x3c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x32, 0x83, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0xe8, 0x3e, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00,
};

// Frame 218: PUT_REQ.
constexpr std::uint8_t kPutReq[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xd2, 0x01, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0xe8, 0x3e, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x32, 0x83, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00,
    0x39, 0x30, 0x00, 0x00, 0x39, 0x30, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0x21, 0x00, 0x00, 0x00, 0x00, 0x00, 0xdb, 0x7d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x34, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

// Frame 220: PUT_ACK.
constexpr std::uint8_t kPutAck[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xd4, 0x00, 0x54, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x32, 0x83, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0xe8, 0x3e, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x6b, 0x34, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0xe0, 0xc4, 0x55,
    0x9e, 0x89, 0xff, 0xff,
};

// Frame 226: PUT_DONE.
constexpr std::uint8_t kPutDone[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xd5, 0x00, 0x3c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0xe8, 0x3e, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x32, 0x83, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x3a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00,
};

// Frame 402: keepalive NOOP from Q; frame 408: NOOP from P returning 1 credit.
constexpr std::uint8_t kNoop[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xd0, 0x00, 0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0xe8, 0x3e, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x32, 0x83, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
};
constexpr std::uint8_t kNoopCredit[] = {
    0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0xd0, 0x01, 0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x02, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x32, 0x83, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
    0x04, 0x01, 0xc9, 0x0a, 0x00, 0x00, 0x05, 0x00, 0xe8, 0x3e, 0xe1, 0xc4, 0xd6, 0x60, 0x06, 0x00,
};

struct Frame {
  const char* name;
  Bytes bytes;
};

std::vector<Frame> all_frames() {
  return {
      {"spec CONNREQ", bytes(kSpecConnReq)},
      {"CONNREQ", Bytes(std::begin(kReqPrivateData) + kConnReqOffset, std::end(kReqPrivateData))},
      {"CONNACK", bytes(kConnAck)},
      {"IMMEDIATE GET", bytes(kImmGet)},
      {"IMMEDIATE REPLY", bytes(kImmReply)},
      {"GET_REQ", bytes(kGetReq)},
      {"GET_DONE", bytes(kGetDone)},
      {"PUT_REQ", bytes(kPutReq)},
      {"PUT_ACK", bytes(kPutAck)},
      {"PUT_DONE", bytes(kPutDone)},
      {"NOOP", bytes(kNoop)},
      {"NOOP credit", bytes(kNoopCredit)},
  };
}

// ---- helpers ------------------------------------------------------------------------

Nid nid(std::uint64_t v) { return Nid::from_nid4(v); }

DecodedMsg must_decode(ByteSpan in) {
  auto r = decode_msg(in);
  EXPECT_TRUE(r.has_value()) << "decode failed: " << name(r.has_value() ? WireError::truncated : r.error());
  if (!r) return {};
  return *r;
}

Bytes must_encode(const Msg& m, ByteOrder order, Checksum ck = Checksum::off) {
  Bytes out(kMaxMsgSize + 64, 0xEE);
  auto n = encode_msg(m, out, order, ck);
  EXPECT_TRUE(n.has_value()) << "encode failed: " << name(n.has_value() ? WireError::truncated : n.error());
  out.resize(n ? *n : 0);
  return out;
}

WireError decode_error(ByteSpan in) {
  auto r = decode_msg(in);
  EXPECT_FALSE(r.has_value());
  return r ? WireError::bad_value : r.error();  // a success is reported by the EXPECT above
}

void reverse_at(Bytes& b, std::size_t off, std::size_t n) {
  std::reverse(b.begin() + static_cast<std::ptrdiff_t>(off), b.begin() + static_cast<std::ptrdiff_t>(off + n));
}

// The 48-byte header of a little-endian frame converted to big-endian, from
// the layout of o2iblnd.md §2 (independent of the codec).
void swap_msg_header(Bytes& b) {
  reverse_at(b, 0, 4);   // magic
  reverse_at(b, 4, 2);   // version
  reverse_at(b, 8, 4);   // nob
  reverse_at(b, 12, 4);  // cksum
  reverse_at(b, 16, 8);  // srcnid
  reverse_at(b, 24, 8);  // srcstamp
  reverse_at(b, 32, 8);  // dstnid
  reverse_at(b, 40, 8);  // dststamp
}

void swap_rd(Bytes& b, std::size_t off) {
  const auto nfrags = load_le<std::uint32_t>(b.data() + off + 4);
  reverse_at(b, off, 4);
  reverse_at(b, off + 4, 4);
  for (std::size_t i = 0; i < nfrags; ++i) {
    reverse_at(b, off + 8 + 12 * i, 4);
    reverse_at(b, off + 8 + 12 * i + 4, 8);
  }
}

void set_u32_le(Bytes& b, std::size_t off, std::uint32_t v) { store_le(b.data() + off, v); }

// ---- §10 examples ----------------------------------------------------------------------

TEST(O2ibSpecExample, ConnReqDecodesToDocumentedFields) {
  const DecodedMsg d = must_decode(kSpecConnReq);
  EXPECT_EQ(d.order, ByteOrder::little);
  EXPECT_EQ(d.nob, 56u);
  EXPECT_EQ(d.cksum, 0u);
  const MsgHeader& h = d.msg.hdr;
  EXPECT_EQ(h.version, 0x12);
  EXPECT_EQ(h.type, MsgType::connreq);
  EXPECT_EQ(h.credits, 0);
  EXPECT_EQ(h.srcnid, nid(kSpecNid1));
  EXPECT_EQ(to_string(h.srcnid), "10.0.0.1@o2ib");
  EXPECT_EQ(h.srcstamp, kSpecStamp);
  EXPECT_EQ(h.dstnid, nid(kSpecNid5));
  EXPECT_EQ(h.dststamp, 0u);
  ASSERT_NE(d.msg.connparams(), nullptr);
  EXPECT_EQ(*d.msg.connparams(), (ConnParams{8, 257, 4096}));
  EXPECT_EQ(must_encode(d.msg, ByteOrder::little), bytes(kSpecConnReq));
}

TEST(O2ibSpecExample, ConnReqBuiltFromFieldsEncodesToDocumentedBytes) {
  Msg m;
  m.hdr.type = MsgType::connreq;
  m.hdr.srcnid = nid(kSpecNid1);
  m.hdr.srcstamp = kSpecStamp;
  m.hdr.dstnid = nid(kSpecNid5);
  m.body = ConnParams{kDefaultQueueDepth, kMaxRdmaFrags, kMaxMsgSize};
  EXPECT_EQ(wire_size(m), 56u);
  EXPECT_EQ(must_encode(m, ByteOrder::little), bytes(kSpecConnReq));
  EXPECT_EQ(must_encode(m, ByteOrder::big), bytes(kSpecConnReqBig));
}

TEST(O2ibSpecExample, BigEndianConnReqDecodesToSameFields) {
  const DecodedMsg le = must_decode(kSpecConnReq);
  const DecodedMsg be = must_decode(kSpecConnReqBig);
  EXPECT_EQ(be.order, ByteOrder::big);
  EXPECT_EQ(be.nob, 56u);
  EXPECT_EQ(be.msg, le.msg);
  EXPECT_EQ(must_encode(be.msg, ByteOrder::big), bytes(kSpecConnReqBig));
}

TEST(O2ibSpecExample, MsgQueueSizeRejectDecodesAndReencodes) {
  auto r = decode_reject(kSpecReject);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->order, ByteOrder::little);
  EXPECT_EQ(r->rej.magic, kIbMagic);
  EXPECT_EQ(r->rej.version, 0x12);
  EXPECT_EQ(r->rej.why, RejectReason::msg_queue_size);
  EXPECT_EQ(to_string(r->rej.why), "MSG_QUEUE_SIZE");
  ASSERT_TRUE(r->rej.incarnation.has_value());
  EXPECT_EQ(*r->rej.incarnation, kSpecStamp);
  ASSERT_TRUE(r->rej.cp.has_value());
  EXPECT_EQ(*r->rej.cp, (ConnParams{8, 257, 4096}));
  Bytes out(kRejectSize);
  auto n = encode_reject(r->rej, out, r->order);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(*n, 24u);
  EXPECT_EQ(out, bytes(kSpecReject));
}

// ---- real frames ---------------------------------------------------------------------

TEST(O2ibCapture, ConnReqFromReqPrivateData) {
  const ByteSpan pd(kReqPrivateData);
  // The rdma_cm header in front is not an o2iblnd message.
  EXPECT_EQ(decode_error(pd), WireError::bad_magic);
  const DecodedMsg d = must_decode(pd.subspan(kConnReqOffset));
  EXPECT_EQ(d.nob, 56u);
  EXPECT_EQ(d.msg.hdr.version, kVersion2);
  EXPECT_EQ(d.msg.hdr.type, MsgType::connreq);
  EXPECT_EQ(d.msg.hdr.credits, 0);
  EXPECT_EQ(d.msg.hdr.srcnid, nid(kNidP));
  EXPECT_EQ(to_string(d.msg.hdr.srcnid), "10.201.1.2@o2ib");
  EXPECT_EQ(d.msg.hdr.srcstamp, kStampP);
  EXPECT_EQ(d.msg.hdr.dstnid, nid(kNidQ));
  EXPECT_EQ(d.msg.hdr.dststamp, 0u);
  ASSERT_NE(d.msg.connparams(), nullptr);
  EXPECT_EQ(d.msg.connparams()->queue_depth, 8);
  EXPECT_EQ(d.msg.connparams()->max_frags, 257);
  EXPECT_EQ(d.msg.connparams()->max_msg_size, 4096u);
}

TEST(O2ibCapture, ConnAckInsideFullRepPrivateData) {
  // REP private data is 196 bytes: the CONNACK, then zeros.
  Bytes rep(196, 0);
  std::copy(std::begin(kConnAck), std::end(kConnAck), rep.begin());
  const DecodedMsg d = must_decode(rep);
  EXPECT_EQ(d.nob, 56u);
  EXPECT_EQ(d.msg.hdr.type, MsgType::connack);
  EXPECT_EQ(d.msg.hdr.srcnid, nid(kNidQ));
  EXPECT_EQ(d.msg.hdr.srcstamp, kStampQ);
  EXPECT_EQ(d.msg.hdr.dstnid, nid(kNidP));
  EXPECT_EQ(d.msg.hdr.dststamp, kStampP);  // the requester's incarnation
  ASSERT_NE(d.msg.connparams(), nullptr);
  EXPECT_EQ(*d.msg.connparams(), (ConnParams{8, 257, 4096}));
  EXPECT_EQ(must_encode(d.msg, d.order), bytes(kConnAck));
}

TEST(O2ibCapture, ImmediateGet) {
  const DecodedMsg d = must_decode(kImmGet);
  EXPECT_EQ(d.nob, 120u);
  EXPECT_EQ(d.msg.hdr.type, MsgType::immediate);
  EXPECT_EQ(d.msg.hdr.credits, 0);
  EXPECT_EQ(d.msg.hdr.srcnid, nid(kNidP));
  EXPECT_EQ(d.msg.hdr.dstnid, nid(kNidQ));
  EXPECT_EQ(d.msg.hdr.srcstamp, kStampP);
  EXPECT_EQ(d.msg.hdr.dststamp, kStampQ);
  const Immediate* im = d.msg.immediate();
  ASSERT_NE(im, nullptr);
  EXPECT_EQ(im->hdr.type, lnetr::MsgType::get);
  EXPECT_EQ(im->hdr.dest_nid, nid(kNidQ));
  EXPECT_EQ(im->hdr.src_nid, nid(kNidP));
  EXPECT_EQ(im->hdr.dest_pid, kPidLustre);
  EXPECT_EQ(im->hdr.src_pid, kPidLustre);
  EXPECT_EQ(im->hdr.payload_length, 0u);
  const GetFields g = im->hdr.get();
  EXPECT_EQ(g.return_wmd.interface_cookie, 0x18ea46f10f1ca3c1u);
  EXPECT_EQ(g.return_wmd.object_cookie, 0x1c0du);
  EXPECT_EQ(g.match_bits, kPingMatchBits);
  EXPECT_EQ(g.ptl_index, 0u);
  EXPECT_EQ(g.sink_length, 3960u);
  EXPECT_TRUE(im->payload.empty());
}

TEST(O2ibCapture, ImmediateReplyCarriesPingInfo) {
  const DecodedMsg d = must_decode(kImmReply);
  EXPECT_EQ(d.nob, 168u);
  EXPECT_EQ(d.msg.hdr.credits, 1);
  EXPECT_EQ(d.msg.hdr.srcnid, nid(kNidQ));
  const Immediate* im = d.msg.immediate();
  ASSERT_NE(im, nullptr);
  EXPECT_EQ(im->hdr.type, lnetr::MsgType::reply);
  EXPECT_EQ(im->hdr.payload_length, 48u);
  EXPECT_EQ(im->hdr.reply().dst_wmd.object_cookie, 0x1c0du);
  ASSERT_EQ(im->payload.size(), 48u);
  // The payload is a view into the frame, not a copy.
  EXPECT_EQ(im->payload.data(), kImmReply + 120);
  EXPECT_EQ(load_le<std::uint32_t>(im->payload.data()), 0x70696e67u);        // "ping"
  EXPECT_EQ(load_le<std::uint64_t>(im->payload.data() + 32), kNidQ);          // ni[1].ns_nid
  EXPECT_EQ(load_le<std::uint32_t>(im->payload.data() + 40), 0x15aac0deu);    // UP
}

TEST(O2ibCapture, PutReq) {
  const DecodedMsg d = must_decode(kPutReq);
  EXPECT_EQ(d.nob, 128u);
  EXPECT_EQ(d.msg.hdr.type, MsgType::put_req);
  EXPECT_EQ(d.msg.hdr.credits, 1);
  EXPECT_EQ(d.msg.hdr.srcnid, nid(kNidQ));
  EXPECT_EQ(d.msg.hdr.dstnid, nid(kNidP));
  const PutReq* pr = d.msg.put_req();
  ASSERT_NE(pr, nullptr);
  EXPECT_EQ(pr->cookie, 0x11u);
  EXPECT_EQ(pr->hdr.type, lnetr::MsgType::put);
  EXPECT_EQ(pr->hdr.payload_length, 4096u);  // moved by RDMA, not in the message
  const PutFields f = pr->hdr.put();
  EXPECT_TRUE(f.ack_wmd.is_none());
  EXPECT_EQ(f.match_bits, 0x7ddb000000000021u);
  EXPECT_EQ(f.ptl_index, 52u);
}

TEST(O2ibCapture, PutAck) {
  const DecodedMsg d = must_decode(kPutAck);
  EXPECT_EQ(d.nob, 84u);
  EXPECT_EQ(d.msg.hdr.type, MsgType::put_ack);
  EXPECT_EQ(d.msg.hdr.credits, 0);
  EXPECT_EQ(d.msg.hdr.srcnid, nid(kNidP));
  const PutAck* pa = d.msg.put_ack();
  ASSERT_NE(pa, nullptr);
  EXPECT_EQ(pa->src_cookie, 0x11u);
  EXPECT_EQ(pa->dst_cookie, 0x3au);
  EXPECT_EQ(pa->rd.key(), 0x346bu);
  ASSERT_EQ(pa->rd.nfrags(), 1u);
  EXPECT_EQ(pa->rd.frag(0), (RdmaFrag{4096, 0xffff899e55c4e000}));
}

TEST(O2ibCapture, PutDone) {
  const DecodedMsg d = must_decode(kPutDone);
  EXPECT_EQ(d.nob, 60u);
  EXPECT_EQ(d.msg.hdr.type, MsgType::put_done);
  ASSERT_NE(d.msg.completion(), nullptr);
  EXPECT_EQ(*d.msg.completion(), (Completion{0x3a, 4096}));
}

TEST(O2ibCapture, GetReqHasOneFragmentCookie9Key0xb6e) {
  const DecodedMsg d = must_decode(kGetReq);
  EXPECT_EQ(d.nob, 148u);
  EXPECT_EQ(d.msg.hdr.type, MsgType::get_req);
  EXPECT_EQ(d.msg.hdr.credits, 1);
  EXPECT_EQ(d.msg.hdr.srcnid, nid(kNidQ));
  EXPECT_EQ(d.msg.hdr.dstnid, nid(kNidP));
  const GetReq* g = d.msg.get_req();
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->cookie, 0x9u);
  EXPECT_EQ(g->rd.key(), 0xb6eu);
  ASSERT_EQ(g->rd.nfrags(), 1u);
  EXPECT_EQ(g->rd.frag(0).nob, 4096u);
  EXPECT_EQ(g->rd.frag(0).addr, 0xffff8a90d5387000u);
  EXPECT_EQ(g->hdr.type, lnetr::MsgType::get);
  EXPECT_EQ(g->hdr.dest_nid, nid(kNidP));
  const GetFields f = g->hdr.get();
  EXPECT_EQ(f.return_wmd.interface_cookie, 0x18ea46f10e180d51u);
  EXPECT_EQ(f.return_wmd.object_cookie, 0x2c3du);
  EXPECT_EQ(f.match_bits, 0x7ddb000000000011u);
  EXPECT_EQ(f.ptl_index, 52u);
  EXPECT_EQ(f.sink_length, 4096u);
}

TEST(O2ibCapture, GetDone) {
  const DecodedMsg d = must_decode(kGetDone);
  EXPECT_EQ(d.msg.hdr.type, MsgType::get_done);
  EXPECT_EQ(d.msg.hdr.srcnid, nid(kNidP));
  ASSERT_NE(d.msg.completion(), nullptr);
  EXPECT_EQ(*d.msg.completion(), (Completion{0x9, 4096}));
}

TEST(O2ibCapture, Noops) {
  const DecodedMsg a = must_decode(kNoop);
  EXPECT_EQ(a.nob, 48u);
  EXPECT_EQ(a.msg.hdr.type, MsgType::noop);
  EXPECT_EQ(a.msg.hdr.credits, 0);
  EXPECT_EQ(a.msg.hdr.srcnid, nid(kNidQ));
  EXPECT_TRUE(std::holds_alternative<Noop>(a.msg.body));
  const DecodedMsg b = must_decode(kNoopCredit);
  EXPECT_EQ(b.msg.hdr.credits, 1);
  EXPECT_EQ(b.msg.hdr.srcnid, nid(kNidP));
  EXPECT_EQ(b.msg.hdr.dststamp, kStampQ);
}

TEST(O2ibCapture, EveryFrameReencodesByteExact) {
  for (const Frame& f : all_frames()) {
    SCOPED_TRACE(f.name);
    const DecodedMsg d = must_decode(f.bytes);
    EXPECT_EQ(d.nob, f.bytes.size());
    EXPECT_EQ(wire_size(d.msg), f.bytes.size());
    EXPECT_EQ(must_encode(d.msg, d.order), f.bytes);
  }
}

// ---- byte order ---------------------------------------------------------------------

TEST(O2ibByteOrder, EveryFrameWrittenBigEndianDecodesToSameFields) {
  for (const Frame& f : all_frames()) {
    SCOPED_TRACE(f.name);
    const DecodedMsg le = must_decode(f.bytes);
    const Bytes big = must_encode(le.msg, ByteOrder::big);
    ASSERT_EQ(big.size(), f.bytes.size());
    EXPECT_NE(big, f.bytes);
    EXPECT_EQ(big[0], 0x0b);  // magic written big-endian
    const DecodedMsg be = must_decode(big);
    EXPECT_EQ(be.order, ByteOrder::big);
    EXPECT_EQ(be.nob, le.nob);
    EXPECT_EQ(be.msg, le.msg);
    EXPECT_EQ(must_encode(be.msg, ByteOrder::little), f.bytes);
  }
}

// Big-endian frames built by hand from the layout: the codec must swap the
// header, connparams, descriptor and status, and leave cookies and the LNet
// header alone.
TEST(O2ibByteOrder, HandSwappedFramesMatchCodec) {
  struct Case {
    const char* name;
    Bytes le;
    void (*swap_body)(Bytes&);
  };
  const Case cases[] = {
      {"CONNACK", bytes(kConnAck),
       [](Bytes& b) {
         reverse_at(b, 48, 2);
         reverse_at(b, 50, 2);
         reverse_at(b, 52, 4);
       }},
      {"IMMEDIATE", bytes(kImmReply), [](Bytes&) {}},
      {"PUT_REQ", bytes(kPutReq), [](Bytes&) {}},
      {"PUT_ACK", bytes(kPutAck), [](Bytes& b) { swap_rd(b, 64); }},
      {"GET_REQ", bytes(kGetReq), [](Bytes& b) { swap_rd(b, 128); }},
      {"PUT_DONE", bytes(kPutDone), [](Bytes& b) { reverse_at(b, 56, 4); }},
      {"NOOP", bytes(kNoopCredit), [](Bytes&) {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Bytes be = c.le;
    swap_msg_header(be);
    c.swap_body(be);
    const DecodedMsg dle = must_decode(c.le);
    const DecodedMsg dbe = must_decode(be);
    EXPECT_EQ(dbe.order, ByteOrder::big);
    EXPECT_EQ(dbe.msg, dle.msg);
    EXPECT_EQ(must_encode(dle.msg, ByteOrder::big), be);
  }
}

TEST(O2ibByteOrder, CookiesAreNeverSwapped) {
  const DecodedMsg le = must_decode(kPutAck);
  const Bytes be = must_encode(le.msg, ByteOrder::big);
  // Cookies at 48 and 56: the same bytes as the little-endian frame.
  EXPECT_TRUE(std::equal(be.begin() + 48, be.begin() + 64, std::begin(kPutAck) + 48));
  // rd_key at 64 is swapped.
  EXPECT_EQ(load_be<std::uint32_t>(be.data() + 64), 0x346bu);
}

// ---- receive validation (o2iblnd.md §2.1) ---------------------------------------------

TEST(O2ibValidation, EveryTruncationIsRefused) {
  for (const Frame& f : all_frames()) {
    SCOPED_TRACE(f.name);
    for (std::size_t k = 0; k < f.bytes.size(); ++k) {
      SCOPED_TRACE(k);
      const ByteSpan cut = ByteSpan(f.bytes).first(k);
      // Inside the fixed header: truncated; after it, ibm_nob promises more
      // than is there.
      EXPECT_EQ(decode_error(cut), k < kMsgHeaderSize ? WireError::truncated : WireError::bad_length);
    }
  }
}

TEST(O2ibValidation, WrongMagic) {
  Bytes b = bytes(kNoop);
  b[0] ^= 0x01;
  EXPECT_EQ(decode_error(b), WireError::bad_magic);
  // Half-swapped magic.
  b = bytes(kNoop);
  std::swap(b[0], b[1]);
  EXPECT_EQ(decode_error(b), WireError::bad_magic);
}

TEST(O2ibValidation, LnetProtoMagicIsAProbeNotAMessage) {
  Bytes b = bytes(kConnAck);
  store_le(b.data(), kLnetProtoMagic);
  EXPECT_EQ(decode_error(b), WireError::bad_magic);
  EXPECT_TRUE(is_protocol_probe(b));
  store_be(b.data(), kLnetProtoMagic);
  EXPECT_TRUE(is_protocol_probe(b));
  EXPECT_FALSE(is_protocol_probe(kConnAck));
  EXPECT_FALSE(is_protocol_probe(ByteSpan(b).first(5)));
}

TEST(O2ibValidation, OnlyVersions11And12) {
  Bytes b = bytes(kNoop);
  for (const std::uint16_t v : std::initializer_list<std::uint16_t>{0x13, 0x10, 0x00, 0x1200, 0xffff}) {
    SCOPED_TRACE(v);
    store_le(b.data() + 4, v);
    EXPECT_EQ(decode_error(b), WireError::bad_version);
  }
  store_le(b.data() + 4, std::uint16_t{0x11});
  const DecodedMsg d = must_decode(b);
  EXPECT_EQ(d.msg.hdr.version, kVersion1);
  EXPECT_EQ(must_encode(d.msg, d.order), b);
}

TEST(O2ibValidation, NobLargerThanSpan) {
  Bytes b = bytes(kPutDone);
  set_u32_le(b, 8, 61);
  EXPECT_EQ(decode_error(b), WireError::bad_length);
  set_u32_le(b, 8, 0xffffffff);
  EXPECT_EQ(decode_error(b), WireError::bad_length);
}

TEST(O2ibValidation, NobLargerThanReceiveBuffer) {
  // A well-formed IMMEDIATE of 4097 bytes cannot have come from a 4096-byte
  // receive buffer.
  Bytes b(kMaxMsgSize + 1, 0);
  std::copy(std::begin(kImmGet), std::end(kImmGet), b.begin());
  set_u32_le(b, 8, static_cast<std::uint32_t>(b.size()));
  set_u32_le(b, 48 + 28, static_cast<std::uint32_t>(b.size() - 120));
  EXPECT_EQ(decode_error(b), WireError::bad_length);
  // One byte less is the largest IMMEDIATE.
  b.pop_back();
  set_u32_le(b, 8, static_cast<std::uint32_t>(b.size()));
  set_u32_le(b, 48 + 28, static_cast<std::uint32_t>(kImmediateMaxPayload));
  const DecodedMsg d = must_decode(b);
  ASSERT_NE(d.msg.immediate(), nullptr);
  EXPECT_EQ(d.msg.immediate()->payload.size(), kImmediateMaxPayload);
}

TEST(O2ibValidation, NobBelowHeader) {
  Bytes b = bytes(kNoop);
  for (std::uint32_t nob : {0u, 6u, 47u}) {
    set_u32_le(b, 8, nob);
    EXPECT_EQ(decode_error(b), WireError::bad_length);
  }
}

TEST(O2ibValidation, NobBelowTypeMinimum) {
  const struct {
    std::uint8_t type;
    std::size_t min;
  } cases[] = {{0xC0, 56}, {0xC1, 56}, {0xD1, 120}, {0xD2, 128}, {0xD3, 60},
               {0xD4, 72}, {0xD5, 60}, {0xD6, 136}, {0xD7, 60}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.type);
    const auto t = msg_type_from_wire(c.type);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(min_msg_size(*t), c.min);
    Bytes b(200, 0);
    std::copy(std::begin(kNoop), std::end(kNoop), b.begin());
    b[6] = c.type;
    set_u32_le(b, 8, static_cast<std::uint32_t>(c.min - 1));
    EXPECT_EQ(decode_error(b), WireError::bad_length);
  }
  EXPECT_EQ(min_msg_size(MsgType::noop), 48u);
}

TEST(O2ibValidation, UnknownType) {
  Bytes b = bytes(kNoop);
  for (const std::uint8_t t : std::initializer_list<std::uint8_t>{0x00, 0xC2, 0xCF, 0xD8, 0xFF}) {
    SCOPED_TRACE(t);
    b[6] = t;
    EXPECT_EQ(decode_error(b), WireError::bad_type);
  }
}

TEST(O2ibValidation, SrcNidAnyOrMalformed) {
  Bytes b = bytes(kNoop);
  store_le(b.data() + 16, kNid4Any);
  EXPECT_EQ(decode_error(b), WireError::bad_nid);
  store_le(b.data() + 16, kNidQ | (std::uint64_t{1} << 56));
  EXPECT_EQ(decode_error(b), WireError::bad_nid);
  b = bytes(kNoop);
  store_le(b.data() + 32, kNidP | (std::uint64_t{0x80} << 56));
  EXPECT_EQ(decode_error(b), WireError::bad_nid);
  // dstnid ANY is the engine's business, not the codec's.
  store_le(b.data() + 32, kNid4Any);
  EXPECT_TRUE(must_decode(b).msg.hdr.dstnid.is_any());
}

TEST(O2ibValidation, NfragsOutOfRange) {
  for (const auto& [frame, rd_off] : {std::pair{bytes(kGetReq), std::size_t{128}}, std::pair{bytes(kPutAck), std::size_t{64}}}) {
    SCOPED_TRACE(rd_off);
    Bytes b = frame;
    b.resize(kMaxMsgSize, 0);  // span large enough for any count
    for (std::uint32_t n : {0u, 258u, 0xffffffffu}) {
      SCOPED_TRACE(n);
      set_u32_le(b, rd_off + 4, n);
      set_u32_le(b, 8, static_cast<std::uint32_t>(rd_off + 8 + 12 * std::min(n, 257u)));
      EXPECT_EQ(decode_error(b), WireError::bad_value);
    }
    // nob covers one fragment, nfrags claims two.
    b = frame;
    b.resize(b.size() + 12, 0);
    set_u32_le(b, rd_off + 4, 2);
    EXPECT_EQ(decode_error(b), WireError::bad_length);
    // ... and with nob covering both it decodes.
    set_u32_le(b, 8, static_cast<std::uint32_t>(b.size()));
    EXPECT_EQ(must_decode(b).order, ByteOrder::little);
  }
}

TEST(O2ibValidation, MaxFragmentsDecode) {
  std::array<RdmaFrag, kMaxRdmaFrags> frags{};
  for (std::size_t i = 0; i < frags.size(); ++i) frags[i] = {static_cast<std::uint32_t>(4096 + i), 0xffff000000001000 + i * 0x1000};
  for (const ByteOrder order : {ByteOrder::little, ByteOrder::big}) {
    Msg m = must_decode(kGetReq).msg;
    m.body = GetReq{m.get_req()->hdr, 0x1234, RdmaDesc(0xabc, frags)};
    const Bytes b = must_encode(m, order);
    EXPECT_EQ(b.size(), 136u + 12u * 257u);
    const DecodedMsg d = must_decode(b);
    ASSERT_NE(d.msg.get_req(), nullptr);
    EXPECT_EQ(d.msg.get_req()->rd.nfrags(), 257u);
    EXPECT_EQ(d.msg.get_req()->rd.frag(256), frags[256]);
    EXPECT_EQ(d.msg, m);
  }
}

TEST(O2ibValidation, ImmediatePayloadLengthMustMatchNob) {
  // The REPLY says 48 payload bytes and ibm_nob = 168.
  Bytes b = bytes(kImmReply);
  set_u32_le(b, 48 + 28, 47);  // LNet header says fewer
  EXPECT_EQ(decode_error(b), WireError::bad_length);
  set_u32_le(b, 48 + 28, 49);  // ... or more
  EXPECT_EQ(decode_error(b), WireError::bad_length);
  // Header intact but ibm_nob shortened by one byte.
  b = bytes(kImmReply);
  set_u32_le(b, 8, 167);
  EXPECT_EQ(decode_error(b), WireError::bad_length);
}

TEST(O2ibValidation, LnetHeaderErrorsPropagate) {
  Bytes b = bytes(kImmGet);
  set_u32_le(b, 48 + 24, 5);  // LNet type 5
  EXPECT_EQ(decode_error(b), WireError::bad_type);
  b = bytes(kPutReq);
  store_le(b.data() + 48, kNidP | (std::uint64_t{1} << 60));  // LNet dest_nid with top byte
  EXPECT_EQ(decode_error(b), WireError::bad_nid);
}

TEST(O2ibValidation, BytesAfterNobAreIgnored) {
  Bytes b = bytes(kGetDone);
  b.insert(b.end(), {0xde, 0xad, 0xbe, 0xef});
  const DecodedMsg d = must_decode(b);
  EXPECT_EQ(d.nob, 60u);
  EXPECT_EQ(*d.msg.completion(), (Completion{0x9, 4096}));
}

TEST(O2ibValidation, LongerNobThanTheBodyIsAccepted) {
  // Linux only requires the type's minimum; extra bytes inside ibm_nob are
  // not part of the value, so the re-encoding is the canonical 56 bytes.
  Bytes b = bytes(kConnAck);
  b.insert(b.end(), {1, 2, 3, 4});
  set_u32_le(b, 8, 60);
  const DecodedMsg d = must_decode(b);
  EXPECT_EQ(d.nob, 60u);
  EXPECT_EQ(must_encode(d.msg, d.order), bytes(kConnAck));
}

TEST(O2ibChecksum, EncoderWritesTheReceiversForm) {
  const DecodedMsg d = must_decode(kGetReq);  // carries bytes >= 0x80
  Bytes sgn(kMaxMsgSize), uns(kMaxMsgSize);
  const auto n = encode_msg(d.msg, sgn, ByteOrder::little, Checksum::on, CharSign::signed_char);
  ASSERT_TRUE(n);
  ASSERT_TRUE(encode_msg(d.msg, uns, ByteOrder::little, Checksum::on, CharSign::unsigned_char));
  const ByteSpan s(sgn.data(), *n), u(uns.data(), *n);
  EXPECT_EQ(load_le<std::uint32_t>(sgn.data() + 12), msg_checksum(s, CharSign::signed_char));
  EXPECT_EQ(load_le<std::uint32_t>(uns.data() + 12), msg_checksum(u, CharSign::unsigned_char));
  EXPECT_NE(load_le<std::uint32_t>(sgn.data() + 12), load_le<std::uint32_t>(uns.data() + 12));
  EXPECT_TRUE(decode_msg(s));
  EXPECT_TRUE(decode_msg(u));
}

TEST(O2ibValidation, BadChecksumIsRefused) {
  const DecodedMsg d = must_decode(kGetReq);
  Bytes b = must_encode(d.msg, ByteOrder::little, Checksum::on);
  const std::uint32_t sum = load_le<std::uint32_t>(b.data() + 12);
  EXPECT_NE(sum, 0u);
  EXPECT_EQ(sum, msg_checksum(b));
  EXPECT_EQ(must_decode(b).cksum, sum);
  // A flipped payload bit.
  Bytes bad = b;
  bad[140] ^= 0x01;
  EXPECT_EQ(decode_error(bad), WireError::bad_checksum);
  // A wrong stored sum.
  bad = b;
  store_le(bad.data() + 12, sum + 1);
  EXPECT_EQ(decode_error(bad), WireError::bad_checksum);
}

// ---- checksum (§2.2) --------------------------------------------------------------------

TEST(O2ibChecksum, BytesAbove0x7fAreAddedSigned) {
  const std::uint8_t one[] = {0x80};
  EXPECT_EQ(checksum(one), 0xffffff80u);
  EXPECT_EQ(checksum(one, CharSign::unsigned_char), 0x80u);
  // 0 -> 1; rotl(1) = 2 + 2 = 4; rotl(4) = 8 + (-128).
  const std::uint8_t three[] = {0x01, 0x02, 0x80};
  EXPECT_EQ(checksum(three), 0xffffff88u);
  EXPECT_EQ(checksum(three, CharSign::unsigned_char), 0x88u);
  // The rotation carries the top bit round: rotl(0xffffff80) = 0xffffff01.
  const std::uint8_t rot[] = {0x80, 0x00};
  EXPECT_EQ(checksum(rot), 0xffffff01u);
  const std::uint8_t ff[] = {0xff, 0x7f};
  EXPECT_EQ(checksum(ff), 0x7eu);  // -1, rotl(-1) = -1, -1 + 127
}

TEST(O2ibChecksum, ZeroBecomesOne) {
  EXPECT_EQ(checksum(ByteSpan{}), 1u);
  const std::uint8_t zeros[] = {0, 0, 0};
  EXPECT_EQ(checksum(zeros), 1u);
  const std::uint8_t cancel[] = {0x01, 0xfe};  // rotl(1) = 2, + (-2) = 0
  EXPECT_EQ(checksum(cancel), 1u);
  EXPECT_EQ(checksum(cancel, CharSign::unsigned_char), 0x100u);
  const std::uint8_t wrap[] = {0xff, 0x01};  // rotl(-1) = -1, + 1 = 0
  EXPECT_EQ(checksum(wrap), 1u);
}

TEST(O2ibChecksum, MessageChecksumSkipsTheCksumField) {
  Bytes b = bytes(kImmReply);
  const std::uint32_t sum = msg_checksum(b);
  store_le(b.data() + 12, 0xdeadbeefu);
  EXPECT_EQ(msg_checksum(b), sum);
  Bytes z = bytes(kImmReply);
  EXPECT_EQ(checksum(z), sum);  // the real frame has cksum 0
  b[100] ^= 0x80;
  EXPECT_NE(msg_checksum(b), sum);
}

TEST(O2ibChecksum, VerifyAcceptsZeroSignedAndUnsignedSenders) {
  Bytes b = bytes(kImmReply);  // contains bytes >= 0x80
  EXPECT_TRUE(verify_checksum(b, ByteOrder::little));
  const std::uint32_t s = msg_checksum(b, CharSign::signed_char);
  const std::uint32_t u = msg_checksum(b, CharSign::unsigned_char);
  ASSERT_NE(s, u);
  store_le(b.data() + 12, s);
  EXPECT_TRUE(verify_checksum(b, ByteOrder::little));
  EXPECT_FALSE(verify_checksum(b, ByteOrder::big));
  EXPECT_EQ(must_decode(b).cksum, s);
  store_le(b.data() + 12, u);
  EXPECT_TRUE(verify_checksum(b, ByteOrder::little));
  store_le(b.data() + 12, s ^ u);
  EXPECT_FALSE(verify_checksum(b, ByteOrder::little));
  EXPECT_FALSE(verify_checksum(ByteSpan(b).first(15), ByteOrder::little));
}

TEST(O2ibChecksum, BigEndianSenderChecksumsItsOwnBytes) {
  const DecodedMsg d = must_decode(kPutAck);
  const Bytes be = must_encode(d.msg, ByteOrder::big, Checksum::on);
  EXPECT_EQ(load_be<std::uint32_t>(be.data() + 12), msg_checksum(be));
  const DecodedMsg back = must_decode(be);
  EXPECT_EQ(back.order, ByteOrder::big);
  EXPECT_EQ(back.msg, d.msg);
  EXPECT_EQ(back.cksum, msg_checksum(be));
}

// ---- encoding -----------------------------------------------------------------------------

TEST(O2ibEncode, RefusesWhatDecodeWouldRefuse) {
  const Msg noop = must_decode(kNoop).msg;
  Bytes out(kMaxMsgSize);
  auto err = [&](const Msg& m) {
    auto n = encode_msg(m, out);
    EXPECT_FALSE(n.has_value());
    return n ? WireError::bad_value : n.error();
  };
  Msg m = noop;
  m.hdr.version = 0x13;
  EXPECT_EQ(err(m), WireError::bad_version);
  m = noop;
  m.hdr.type = MsgType::put_done;  // body is still Noop
  EXPECT_EQ(err(m), WireError::bad_type);
  m = noop;
  m.hdr.srcnid = Nid::any();
  EXPECT_EQ(err(m), WireError::bad_nid);
  m = noop;
  auto v6 = parse_nid("2001:db8::1@o2ib");
  ASSERT_TRUE(v6.has_value());
  m.hdr.dstnid = *v6;
  EXPECT_EQ(err(m), WireError::bad_nid);

  Msg pa = must_decode(kPutAck).msg;
  std::array<RdmaFrag, kMaxRdmaFrags + 1> frags{};
  pa.body = PutAck{1, 2, RdmaDesc(7, std::span<const RdmaFrag>(frags).first(0))};
  EXPECT_EQ(err(pa), WireError::bad_value);
  pa.body = PutAck{1, 2, RdmaDesc(7, frags)};
  EXPECT_EQ(err(pa), WireError::bad_value);

  Msg im = must_decode(kImmReply).msg;
  Bytes payload(kImmediateMaxPayload + 1, 0x5a);
  Immediate body = *im.immediate();
  body.payload = payload;
  body.hdr.payload_length = static_cast<std::uint32_t>(payload.size());
  im.body = body;
  EXPECT_EQ(err(im), WireError::bad_length);
  body.payload = ByteSpan(payload).first(10);  // header says 3977
  im.body = body;
  EXPECT_EQ(err(im), WireError::bad_length);
}

TEST(O2ibEncode, ShortOutputIsTruncatedAtEveryLength) {
  const Msg m = must_decode(kGetReq).msg;
  for (std::size_t k = 0; k < sizeof kGetReq; ++k) {
    Bytes out(k);
    auto n = encode_msg(m, out);
    ASSERT_FALSE(n.has_value());
    EXPECT_EQ(n.error(), WireError::truncated);
  }
}

TEST(O2ibEncode, CompletionStatusIsSigned) {
  Msg m = must_decode(kGetDone).msg;
  m.body = Completion{0xfeedface12345678, -61};  // -ENODATA: GET matched nothing
  for (const ByteOrder order : {ByteOrder::little, ByteOrder::big}) {
    const Bytes b = must_encode(m, order);
    EXPECT_EQ(load<std::uint32_t>(b.data() + 56, order), 0xffffffc3u);
    EXPECT_EQ(must_decode(b).msg.completion()->status, -61);
    EXPECT_EQ(must_decode(b).msg.completion()->cookie, 0xfeedface12345678u);
  }
}

TEST(O2ibEncode, ImmediatePayloadIsCopied) {
  Msg m = must_decode(kImmReply).msg;
  Bytes payload(std::begin(kImmReply) + 120, std::end(kImmReply));
  Immediate body = *m.immediate();
  body.payload = payload;
  m.body = body;
  const Bytes b = must_encode(m, ByteOrder::little);
  EXPECT_EQ(b, bytes(kImmReply));
  std::fill(payload.begin(), payload.end(), 0);  // the encoding holds its own copy
  EXPECT_EQ(b, bytes(kImmReply));
  const DecodedMsg d = must_decode(b);
  ASSERT_NE(d.msg.immediate(), nullptr);
  EXPECT_EQ(d.msg.immediate()->payload.data(), b.data() + 120);
}

TEST(O2ibEncode, BodyFitsType) {
  EXPECT_TRUE(body_fits(MsgType::connreq, ConnParams{}));
  EXPECT_TRUE(body_fits(MsgType::connack, ConnParams{}));
  EXPECT_TRUE(body_fits(MsgType::put_nak, Completion{}));
  EXPECT_TRUE(body_fits(MsgType::get_done, Completion{}));
  EXPECT_FALSE(body_fits(MsgType::noop, Completion{}));
  EXPECT_FALSE(body_fits(MsgType::put_req, Immediate{}));
}

// ---- names ----------------------------------------------------------------------------------

TEST(O2ibNames, TypesAndReasons) {
  EXPECT_EQ(to_string(MsgType::get_req), "GET_REQ");
  EXPECT_EQ(to_string(MsgType::put_nak), "PUT_NAK");
  EXPECT_EQ(msg_type_from_wire(0xD3), MsgType::put_nak);
  EXPECT_EQ(msg_type_from_wire(0xC1), MsgType::connack);
  EXPECT_FALSE(msg_type_from_wire(0xD8).has_value());
  EXPECT_EQ(to_string(RejectReason::conn_race), "CONN_RACE");
  EXPECT_EQ(static_cast<int>(RejectReason::conn_race), 1);
  EXPECT_EQ(static_cast<int>(RejectReason::early), 9);
  EXPECT_EQ(to_string(RejectReason::early), "EARLY");
  EXPECT_EQ(to_string(static_cast<RejectReason>(42)), "UNKNOWN");
  EXPECT_FALSE(describe(RejectReason::conn_stale).empty());
  EXPECT_EQ(kServicePort, 987);
  EXPECT_EQ(kDefaultQueueDepth, 8);
}

// ---- reject ----------------------------------------------------------------------------------

TEST(O2ibReject, BigEndian) {
  Bytes be = bytes(kSpecReject);
  reverse_at(be, 0, 4);
  reverse_at(be, 4, 2);
  reverse_at(be, 8, 8);
  reverse_at(be, 16, 2);
  reverse_at(be, 18, 2);
  reverse_at(be, 20, 4);
  auto r = decode_reject(be);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->order, ByteOrder::big);
  auto le = decode_reject(kSpecReject);
  ASSERT_TRUE(le.has_value());
  EXPECT_EQ(r->rej, le->rej);
  Bytes out(24);
  ASSERT_TRUE(encode_reject(r->rej, out, ByteOrder::big).has_value());
  EXPECT_EQ(out, be);
}

TEST(O2ibReject, IncarnationAndParamsOnlyFromFullV2Reject) {
  // IB delivers 148 bytes of private data: the 24-byte reject, then zeros.
  Bytes ib(148, 0);
  std::copy(std::begin(kSpecReject), std::end(kSpecReject), ib.begin());
  auto full = decode_reject(ib);
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->rej.incarnation, kSpecStamp);
  EXPECT_EQ(full->rej.cp, (ConnParams{8, 257, 4096}));
  for (std::size_t k = kRejectMinSize; k < kRejectSize; ++k) {
    SCOPED_TRACE(k);
    auto r = decode_reject(ByteSpan(kSpecReject).first(k));
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->rej.why, RejectReason::msg_queue_size);
    EXPECT_FALSE(r->rej.incarnation.has_value());
    EXPECT_FALSE(r->rej.cp.has_value());
  }
  Bytes v1 = bytes(kSpecReject);
  v1[4] = 0x11;
  auto r1 = decode_reject(v1);
  ASSERT_TRUE(r1.has_value());
  EXPECT_EQ(r1->rej.version, kVersion1);
  EXPECT_FALSE(r1->rej.incarnation.has_value());
  EXPECT_FALSE(r1->rej.cp.has_value());
}

TEST(O2ibReject, ErrorsAndAnyReason) {
  for (std::size_t k = 0; k < kRejectMinSize; ++k) {
    auto r = decode_reject(ByteSpan(kSpecReject).first(k));
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), WireError::truncated);
  }
  Bytes b = bytes(kSpecReject);
  b[3] = 0x0c;
  auto bad = decode_reject(b);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error(), WireError::bad_magic);

  // LNet's magic is accepted (o2iblnd.md §4.4) and kept.
  b = bytes(kSpecReject);
  store_le(b.data(), kLnetProtoMagic);
  b[6] = 42;  // a reason o2iblnd does not define
  b[7] = 0x55;  // non-zero padding is ignored
  auto r = decode_reject(b);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rej.magic, kLnetProtoMagic);
  EXPECT_EQ(static_cast<int>(r->rej.why), 42);
  Bytes out(kRejectSize);
  ASSERT_TRUE(encode_reject(r->rej, out).has_value());
  EXPECT_EQ(out[7], 0);
  EXPECT_EQ(out[6], 42);
  EXPECT_EQ(load_le<std::uint32_t>(out.data()), kLnetProtoMagic);

  Reject rej;
  rej.magic = 0x12345678;
  auto e = encode_reject(rej, out);
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error(), WireError::bad_magic);
  rej.magic = kIbMagic;
  Bytes small(23);
  auto t = encode_reject(rej, small);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error(), WireError::truncated);
}

TEST(O2ibReject, AbsentFieldsEncodeAsZero) {
  Reject rej;
  rej.why = RejectReason::early;
  Bytes out(kRejectSize, 0xEE);
  auto n = encode_reject(rej, out, ByteOrder::little);
  ASSERT_TRUE(n.has_value());
  const Bytes expect = {0x91, 0x1b, 0xe9, 0x0b, 0x12, 0x00, 0x09, 0x00, 0, 0, 0, 0, 0, 0, 0, 0,
                        0,    0,    0,    0,    0,    0,    0,    0};
  EXPECT_EQ(out, expect);
  auto back = decode_reject(out);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->rej.incarnation, 0u);  // V2 and 24 bytes: present, zero
  EXPECT_EQ(back->rej.cp, (ConnParams{0, 0, 0}));
}

}  // namespace
}  // namespace lnetr::o2ib
