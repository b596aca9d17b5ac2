// o2iblnd wire codec: the 48-byte message header and every message body, the
// connection parameters carried in RDMA CM private data, the 24-byte reject
// private data, and the optional message checksum (spec: o2iblnd.md §2-§5).
//
// Pure functions over byte spans: no I/O, no allocation, no exceptions.
//
// Byte order.  o2iblnd writes every integer in the sender's native order and
// the receiver recognises a peer of the other endianness from the magic.  Two
// exceptions: completion cookies are opaque (only the node that chose one
// interprets it) and are never swapped, and the LNet header inside IMMEDIATE,
// PUT_REQ and GET_REQ keeps its own little-endian rules (lnet_header.hpp).
// Cookies are therefore held as the 8 bytes read in host order and written
// back the same way, whatever order the rest of the message uses.
//
// Ownership.  Decoding copies nothing: an IMMEDIATE's payload and the
// fragments of an RDMA descriptor are views into the span given to
// decode_msg() and are valid only while that buffer is (for a receive buffer:
// until it is reposted).  Encoding writes into a span the caller owns; an
// IMMEDIATE's payload is copied there, everything else is written field by
// field.  An RdmaDesc built for sending views the caller's RdmaFrag array.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include "router/bytes.hpp"
#include "router/magic.hpp"
#include "router/lnet_header.hpp"
#include "router/nid.hpp"
#include "router/result.hpp"

namespace lnetr::o2ib {

// ---- constants --------------------------------------------------------------

inline constexpr std::uint16_t kVersion1 = 0x11;
inline constexpr std::uint16_t kVersion2 = 0x12;  // current

inline constexpr std::uint16_t kServicePort = 987;       // rdma_cm port, RDMA_PS_TCP
inline constexpr std::uint16_t kDefaultQueueDepth = 8;   // peer_credits default
inline constexpr std::uint16_t kMaxQueueDepth = 255;     // ibm_credits is one byte
inline constexpr std::uint32_t kMaxRdmaFrags = 257;      // rd_nfrags upper bound
inline constexpr std::uint32_t kMaxMsgSize = 4096;       // receive buffer, max_msg_size

// Wire sizes, each pinned below against the layout of o2iblnd.md §2-§5.
inline constexpr std::size_t kMsgHeaderSize = 48;
inline constexpr std::size_t kConnParamsSize = 8;
inline constexpr std::size_t kCookieSize = 8;
inline constexpr std::size_t kRdmaFragSize = 12;        // { u32 nob, u64 addr (unaligned) }
inline constexpr std::size_t kRdmaDescHeaderSize = 8;   // { u32 key, u32 nfrags }
inline constexpr std::size_t kPutReqBodySize = kLnetHeaderSize + kCookieSize;                          // 80
inline constexpr std::size_t kPutAckBodySize = 2 * kCookieSize + kRdmaDescHeaderSize;                  // 24 + frags
inline constexpr std::size_t kGetReqBodySize = kLnetHeaderSize + kCookieSize + kRdmaDescHeaderSize;    // 88 + frags
inline constexpr std::size_t kCompletionBodySize = kCookieSize + 4;                                    // 12
inline constexpr std::size_t kImmediatePayloadOffset = kMsgHeaderSize + kLnetHeaderSize;               // 120
inline constexpr std::size_t kImmediateMaxPayload = kMaxMsgSize - kImmediatePayloadOffset;             // 3976
inline constexpr std::size_t kConnMsgSize = kMsgHeaderSize + kConnParamsSize;                          // 56
inline constexpr std::size_t kRejectSize = 24;
// Bytes a reject must carry before anything is read: magic, version, why.
inline constexpr std::size_t kRejectMinSize = 7;

static_assert(kMsgHeaderSize == 48);
static_assert(kConnParamsSize == 8);
static_assert(kRdmaFragSize == 12);
static_assert(kRdmaDescHeaderSize == 8);
static_assert(kLnetHeaderSize == 72);
static_assert(kPutReqBodySize == 80);
static_assert(kPutAckBodySize == 24);
static_assert(kGetReqBodySize == 88);
static_assert(kCompletionBodySize == 12);
static_assert(kConnMsgSize == 56);  // exactly the ULP private data of an IB CM REQ via rdma_cm
static_assert(kImmediatePayloadOffset == 120);
static_assert(kImmediateMaxPayload == 3976);
static_assert(kRejectSize == 24);
// The largest descriptor still fits one message (o2iblnd.md §3).
static_assert(kMsgHeaderSize + kGetReqBodySize + kMaxRdmaFrags * kRdmaFragSize <= kMaxMsgSize);
static_assert(kMsgHeaderSize + kPutAckBodySize + kMaxRdmaFrags * kRdmaFragSize <= kMaxMsgSize);

// ---- message types and reject reasons ----------------------------------------

// name, wire value, text
#define LNETR_O2IB_MSG_TYPES(X)  \
  X(connreq, 0xC0, "CONNREQ")     \
  X(connack, 0xC1, "CONNACK")     \
  X(noop, 0xD0, "NOOP")           \
  X(immediate, 0xD1, "IMMEDIATE") \
  X(put_req, 0xD2, "PUT_REQ")     \
  X(put_nak, 0xD3, "PUT_NAK")     \
  X(put_ack, 0xD4, "PUT_ACK")     \
  X(put_done, 0xD5, "PUT_DONE")   \
  X(get_req, 0xD6, "GET_REQ")     \
  X(get_done, 0xD7, "GET_DONE")

// ibm_type.  (Distinct from lnetr::MsgType, the LNet message type carried in
// the LNet header inside IMMEDIATE / PUT_REQ / GET_REQ.)
enum class MsgType : std::uint8_t {
#define LNETR_X(n, v, text) n = v,
  LNETR_O2IB_MSG_TYPES(LNETR_X)
#undef LNETR_X
};

// "CONNREQ", "IMMEDIATE", ...
std::string_view to_string(MsgType t) noexcept;
// The type for an ibm_type byte, or nothing if o2iblnd defines no such type.
std::optional<MsgType> msg_type_from_wire(std::uint8_t v) noexcept;
// The smallest ibm_nob a message of this type may have (for PUT_ACK and
// GET_REQ: without fragments).
std::size_t min_msg_size(MsgType t) noexcept;

// name, wire value, LNet name, what it tells the connecting side
#define LNETR_O2IB_REJECT_REASONS(X)                                                              \
  X(conn_race, 1, "CONN_RACE", "lost the connection race; retry later if still needed")            \
  X(no_resources, 2, "NO_RESOURCES", "the rejecting node is out of memory or queue-pair resources") \
  X(fatal, 3, "FATAL", "the request was malformed or not acceptable")                              \
  X(conn_uncompat, 4, "CONN_UNCOMPAT", "incompatible protocol version; retry with version 0x11")   \
  X(conn_stale, 5, "CONN_STALE", "stale incarnation; retry with the rejecter's incarnation")        \
  X(rdma_frags, 6, "RDMA_FRAGS", "max_frags not acceptable; retry with the rejecter's value")      \
  X(msg_queue_size, 7, "MSG_QUEUE_SIZE", "queue depth not acceptable; retry with the rejecter's")  \
  X(invalid_srv_id, 8, "INVALID_SRV_ID", "invalid service id (defined but not sent by Linux)")     \
  X(early, 9, "EARLY", "the rejecting node's NI is not initialised yet")

// ibr_why.  A received reject may carry any byte; values outside the table
// are kept as they are (to_string() gives "UNKNOWN") and mean "give up".
enum class RejectReason : std::uint8_t {
#define LNETR_X(n, v, lnet, text) n = v,
  LNETR_O2IB_REJECT_REASONS(LNETR_X)
#undef LNETR_X
};

std::string_view to_string(RejectReason r) noexcept;  // "CONN_RACE", ...
std::string_view describe(RejectReason r) noexcept;   // operator-facing text

// ---- bodies ---------------------------------------------------------------------

// Opaque 64-bit completion cookie (see the byte-order note at the top).
using Cookie = std::uint64_t;

// CONNREQ / CONNACK body, and the tail of a reject.
struct ConnParams {
  std::uint16_t queue_depth = kDefaultQueueDepth;
  std::uint16_t max_frags = kMaxRdmaFrags;
  std::uint32_t max_msg_size = kMaxMsgSize;
  friend constexpr bool operator==(const ConnParams&, const ConnParams&) = default;
};

struct RdmaFrag {
  std::uint32_t nob = 0;
  std::uint64_t addr = 0;
  friend constexpr bool operator==(const RdmaFrag&, const RdmaFrag&) = default;
};

// An RDMA descriptor: the remote key and 1..257 fragments of a sink region.
// Either a view over wire bytes (from decode_msg: the fragments are read on
// demand in the sender's byte order, never copied) or a view over the
// caller's RdmaFrag array (for encode_msg).  It never owns its fragments.
class RdmaDesc {
 public:
  constexpr RdmaDesc() noexcept = default;
  // Fragments held by the caller; `frags` must outlive the descriptor.
  constexpr RdmaDesc(std::uint32_t key, std::span<const RdmaFrag> frags) noexcept
      : key_(key), nfrags_(frags.size()), host_(frags.data()) {}
  // Fragments as they lie on the wire: `frags` holds nfrags × 12 bytes
  // written in `order`.
  static RdmaDesc from_wire(std::uint32_t key, ByteSpan frags, ByteOrder order) noexcept;

  constexpr std::uint32_t key() const noexcept { return key_; }
  constexpr std::size_t nfrags() const noexcept { return nfrags_; }
  // Fragment i, i < nfrags().
  RdmaFrag frag(std::size_t i) const noexcept;
  // Bytes of the descriptor on the wire: key, nfrags and the fragments.
  constexpr std::size_t wire_size() const noexcept { return kRdmaDescHeaderSize + nfrags_ * kRdmaFragSize; }

  // Same key and the same fragments, wherever they are held.
  friend bool operator==(const RdmaDesc& a, const RdmaDesc& b) noexcept;

 private:
  std::uint32_t key_ = 0;
  std::size_t nfrags_ = 0;
  const RdmaFrag* host_ = nullptr;    // caller's array, or
  const std::uint8_t* wire_ = nullptr;  // wire fragments in order_
  ByteOrder order_ = kNativeOrder;
};

// NOOP: header only (credit return / keepalive).
struct Noop {
  friend constexpr bool operator==(const Noop&, const Noop&) = default;
};

// IMMEDIATE: LNet header and the whole LNet payload inline.
// payload.size() == hdr.payload_length always holds for a decoded message
// and is required by encode_msg().
struct Immediate {
  LnetHeader hdr;
  ByteSpan payload;  // view; see "Ownership" above
  friend bool operator==(const Immediate& a, const Immediate& b) noexcept;
};

// PUT_REQ: LNet header of a PUT or REPLY whose payload follows by RDMA.
struct PutReq {
  LnetHeader hdr;
  Cookie cookie = 0;  // source's completion cookie
  friend bool operator==(const PutReq&, const PutReq&) = default;
};

// PUT_ACK: the sink's answer to a PUT_REQ, describing where to RDMA-write.
struct PutAck {
  Cookie src_cookie = 0;  // echo of the PUT_REQ cookie
  Cookie dst_cookie = 0;  // sink's cookie, echoed in PUT_DONE
  RdmaDesc rd;
  friend bool operator==(const PutAck&, const PutAck&) = default;
};

// GET_REQ: "optimized GET" with the requester's REPLY sink.
struct GetReq {
  LnetHeader hdr;
  Cookie cookie = 0;  // echoed in GET_DONE
  RdmaDesc rd;
  friend bool operator==(const GetReq&, const GetReq&) = default;
};

// PUT_NAK, PUT_DONE, GET_DONE.
struct Completion {
  Cookie cookie = 0;
  std::int32_t status = 0;  // >= 0 bytes transferred, < 0 -errno
  friend constexpr bool operator==(const Completion&, const Completion&) = default;
};

using MsgBody = std::variant<Noop, ConnParams, Immediate, PutReq, PutAck, GetReq, Completion>;

// True if `body` holds the alternative that messages of type `t` carry:
// CONNREQ/CONNACK ConnParams, NOOP Noop, PUT_NAK/PUT_DONE/GET_DONE Completion,
// the others their own struct.
bool body_fits(MsgType t, const MsgBody& body) noexcept;

// The 48-byte header without its framing fields: ibm_nob is computed by the
// encoder and ibm_cksum on request (both are reported by decode_msg in
// DecodedMsg).  The magic is implied.
struct MsgHeader {
  std::uint16_t version = kVersion2;
  MsgType type = MsgType::noop;
  std::uint8_t credits = 0;   // credits returned to the receiver
  Nid srcnid;                 // sender NI; never ANY
  std::uint64_t srcstamp = 0; // sender's incarnation
  Nid dstnid;                 // receiver NI
  std::uint64_t dststamp = 0; // receiver's incarnation as the sender knows it
  friend bool operator==(const MsgHeader&, const MsgHeader&) = default;
};

struct Msg {
  MsgHeader hdr;
  MsgBody body;

  // The body as its alternative, or nullptr if it holds another one.
  const ConnParams* connparams() const noexcept { return std::get_if<ConnParams>(&body); }
  const Immediate* immediate() const noexcept { return std::get_if<Immediate>(&body); }
  const PutReq* put_req() const noexcept { return std::get_if<PutReq>(&body); }
  const PutAck* put_ack() const noexcept { return std::get_if<PutAck>(&body); }
  const GetReq* get_req() const noexcept { return std::get_if<GetReq>(&body); }
  const Completion* completion() const noexcept { return std::get_if<Completion>(&body); }

  friend bool operator==(const Msg&, const Msg&) = default;
};

// A message as received: its value plus the framing it arrived with.
struct DecodedMsg {
  Msg msg;
  ByteOrder order = kNativeOrder;  // the sender's byte order (from the magic)
  std::uint32_t nob = 0;           // ibm_nob: bytes of the message at the start of the span
  std::uint32_t cksum = 0;         // ibm_cksum as sent (0 = none; otherwise verified)
};

// ---- messages -------------------------------------------------------------------

// Decode and validate one message at the start of `in` (a receive buffer, or
// CM private data), following o2iblnd.md §2.1 in order:
//   fewer than 6 bytes                                   truncated
//   magic not 0x0BE91B91 in either byte order            bad_magic
//   version not 0x11 / 0x12                              bad_version
//   fewer than 48 bytes                                  truncated
//   ibm_nob < 48, > in.size(), or > 4096                 bad_length
//   ibm_cksum != 0 and not the checksum of the message   bad_checksum
//   srcnid ANY, or a NID with a non-zero top byte        bad_nid
//   unknown ibm_type                                     bad_type
//   ibm_nob below the type's minimum                     bad_length
//   rd_nfrags not in 1..257                              bad_value
//   ibm_nob too small for rd_nfrags fragments            bad_length
//   LNet header undecodable (decode_header())            its error
//   IMMEDIATE: payload_length != ibm_nob - 120           bad_length
// Only the first ibm_nob bytes are read; bytes after them are ignored, and so
// are bytes inside ibm_nob beyond the fixed body of the type (Linux accepts a
// longer ibm_nob as well).  The checks of §2.1 step 9 (NIDs and incarnations
// against the connection) are the protocol engine's.
Result<DecodedMsg> decode_msg(ByteSpan in) noexcept;

enum class Checksum : std::uint8_t { off, on };

// How the sender's C `char` treats bytes >= 0x80.  The spec asks for x86's
// signed char; a Lustre peer built with unsigned char (arm64, ppc64le, and
// every architecture since Linux 6.2 builds with -funsigned-char) sums them
// unsigned.
enum class CharSign : std::uint8_t { signed_char, unsigned_char };

// Bytes encode_msg() writes for `m` (48 + body), assuming it is valid.
std::size_t wire_size(const Msg& m) noexcept;

// Encode `m` at the start of `out` in `order`, with ibm_nob = wire_size(m)
// and ibm_cksum = 0 or, with Checksum::on, the checksum of the encoded
// message in the receiver's `sign` form (a Linux receiver verifies only its
// own form: signed on x86 kernels before 6.2, unsigned since).  Returns the
// bytes written.  Errors:
//   version not 0x11 / 0x12                          bad_version
//   body alternative does not fit hdr.type           bad_type
//   srcnid ANY, or a NID that needs the large form   bad_nid
//   rd with 0 or more than 257 fragments             bad_value
//   IMMEDIATE payload larger than 3976 bytes or
//     payload.size() != hdr.payload_length           bad_length
//   out shorter than wire_size(m)                    truncated
// so that everything encode_msg() writes, decode_msg() accepts and decodes
// to `m` again.
Result<std::size_t> encode_msg(const Msg& m, MutableByteSpan out, ByteOrder order = kNativeOrder,
                               Checksum cksum = Checksum::off, CharSign sign = CharSign::signed_char) noexcept;

// The first 120 bytes of an IMMEDIATE whose `payload_length` bytes of
// payload the sender gathers from elsewhere (a second scatter/gather
// entry): the header with ibm_nob = 120 + payload_length and ibm_cksum 0,
// and the LNet header.  Returns 120.  Errors as encode_msg()'s (bad_length:
// payload_length above 3976 or not hdr.payload_length).
Result<std::size_t> encode_immediate_head(const MsgHeader& h, const LnetHeader& hdr, std::uint32_t payload_length,
                                          MutableByteSpan out, ByteOrder order = kNativeOrder) noexcept;

// Set ibm_cksum of the encoded message `msg` (exactly its ibm_nob bytes, in
// `order`) to its checksum.
void store_checksum(MutableByteSpan msg, ByteOrder order = kNativeOrder,
                    CharSign sign = CharSign::signed_char) noexcept;

// True if CM private data starts with LNET_PROTO_MAGIC (either order) rather
// than an o2iblnd message: a "future protocol" probe, which the passive side
// answers with a FATAL reject carrying version 0x12 (o2iblnd.md §4.2).
bool is_protocol_probe(ByteSpan in) noexcept;

// ---- checksum (§2.2) --------------------------------------------------------------


// sum = rotl32(sum, 1) + byte over `bytes`; a result of 0 becomes 1.
std::uint32_t checksum(ByteSpan bytes, CharSign sign = CharSign::signed_char) noexcept;
// checksum() of a whole message (its first ibm_nob bytes), with the 4 bytes
// of ibm_cksum taken as zero.
std::uint32_t msg_checksum(ByteSpan msg, CharSign sign = CharSign::signed_char) noexcept;
// Whether `msg` (exactly its ibm_nob bytes, in `order`) passes the checksum
// check: true if ibm_cksum is 0 (none) or equals msg_checksum() in either
// CharSign form.  Run on the bytes as received, before any swapping.
bool verify_checksum(ByteSpan msg, ByteOrder order) noexcept;

// ---- reject private data (§5) -----------------------------------------------------

// The consumer-defined private data of an rdma_reject.
//
// The connecting side reads the rejecter's incarnation and connection
// parameters only if at least 24 bytes arrived and version > 0x11; otherwise
// decode_reject() leaves both empty.  decode_reject() sets both or neither.
struct Reject {
  std::uint32_t magic = kIbMagic;  // kIbMagic, or kLnetProtoMagic
  std::uint16_t version = kVersion2;
  RejectReason why = RejectReason::fatal;
  std::optional<std::uint64_t> incarnation;  // rejecter's incarnation (0: no NI matched)
  std::optional<ConnParams> cp;              // rejecter's queue depth / max frags / msg size
  friend bool operator==(const Reject&, const Reject&) = default;
};

struct DecodedReject {
  Reject rej;
  ByteOrder order = kNativeOrder;
};

// Decode reject private data (IB delivers 148 bytes; only the first 24 are
// read).  Errors: fewer than 7 bytes (magic, version, why) truncated; magic
// neither o2iblnd's nor LNet's in either order bad_magic.  Version and reason
// are not judged here: any value is reported.  ibr_padding is ignored.
Result<DecodedReject> decode_reject(ByteSpan in) noexcept;

// Write the 24-byte reject in `order` (padding 0; absent incarnation / cp
// written as zeros) and return 24.  Errors: magic neither kIbMagic nor
// kLnetProtoMagic bad_magic; out shorter than 24 truncated.
Result<std::size_t> encode_reject(const Reject& r, MutableByteSpan out, ByteOrder order = kNativeOrder) noexcept;

}  // namespace lnetr::o2ib
