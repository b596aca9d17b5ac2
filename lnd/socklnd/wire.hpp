// socklnd wire codec: the acceptor connection request, the HELLO of every
// protocol version (V1..V4) and the framing of messages after the handshake.
//
// A socklnd TCP connection carries, in order: the acceptor request (active
// side only), one HELLO each way, then messages.  Each element is decoded by
// a pure function over a byte span.  For stream receivers every element has a
// `*_bytes_needed(prefix)` function: it returns N, the size of the element as
// far as `prefix` tells; if prefix.size() < N, read more and ask again,
// otherwise decode.  Nothing here allocates or reads past its span.
//
// Byte order: the acceptor request, HELLO (V2..V4) and message header are in
// the sender's native order, detected from the magic; decoders report it in
// `order` and every later header on the connection is read in that order.
// LNet headers inside messages are always little-endian.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "router/bytes.hpp"
#include "router/magic.hpp"
#include "router/lnet_header.hpp"
#include "router/nid.hpp"
#include "router/result.hpp"

namespace lnetr::sock {

inline constexpr std::uint16_t kAcceptPort = 988;
inline constexpr std::uint16_t kPrivilegedPortMax = 1023;  // active side binds 1023..512
inline constexpr std::uint16_t kPrivilegedPortMin = 512;

// ---- acceptor request -----------------------------------------------------

inline constexpr std::size_t kAcceptorV1Size = 16;  // nid4 target
inline constexpr std::size_t kAcceptorV2Size = 28;  // 20-byte NID target

struct AcceptorRequest {
  std::uint32_t version = 1;  // 1: nid4, 2: large NID
  Nid nid;                    // the passive node's NID being contacted
  ByteOrder order = kNativeOrder;
  friend bool operator==(const AcceptorRequest&, const AcceptorRequest&) = default;
};

// Needs 8 bytes (magic, version).  bad_magic for anything but the acceptor
// magic; bad_version for versions other than 1 and 2.
Result<std::size_t> acceptor_bytes_needed(ByteSpan prefix) noexcept;
Result<AcceptorRequest> decode_acceptor_request(ByteSpan in) noexcept;
// Version 1 needs a nid4-compatible NID (bad_nid otherwise).
Result<std::size_t> encode_acceptor_request(const AcceptorRequest& r, MutableByteSpan out) noexcept;

// True if a connection's first 4 bytes are a HELLO magic (either version
// family, either order): a peer that skipped the acceptor request.  A Linux
// acceptor answers such a peer, and one asking for an unknown acceptor
// version, with acceptor_answer() and closes; anything else it just closes.
bool is_hello_magic(ByteSpan prefix) noexcept;
// {kAcceptorMagic, version 1, NID 0}: tells the peer which acceptor protocol
// this node speaks.
constexpr AcceptorRequest acceptor_answer() noexcept { return {1, Nid::from_nid4(0), kNativeOrder}; }

// ---- HELLO ----------------------------------------------------------------

// Connection types as the sender sees its end of the connection.
enum class ConnType : std::int32_t { none = -1, any = 0, control = 1, bulk_in = 2, bulk_out = 3 };

const char* to_string(ConnType t) noexcept;  // "CONTROL", ...; "?" for others
// The passive side's type for the connection the active side typed `t`.
constexpr ConnType invert(ConnType t) noexcept {
  switch (t) {
    case ConnType::bulk_in: return ConnType::bulk_out;
    case ConnType::bulk_out: return ConnType::bulk_in;
    default: return t;
  }
}

inline constexpr std::size_t kHelloV1Size = 72;   // + 4 * nips
inline constexpr std::size_t kHelloV2Size = 56;   // + 4 * nips (V2, V3)
inline constexpr std::size_t kHelloV4Size = 80;
inline constexpr std::uint32_t kHelloMaxIps = 16;

struct Hello {
  std::uint32_t version = 3;  // 1..4
  ByteOrder order = kNativeOrder;  // V1 is always little-endian
  Nid src_nid;
  Nid dst_nid;  // not carried by V1
  std::uint32_t src_pid = kPidLustre;
  std::uint32_t dst_pid = 0;
  std::uint64_t src_incarnation = 0;
  std::uint64_t dst_incarnation = 0;  // not carried by V1
  std::int32_t ctype = 0;             // a ConnType value, or anything the peer sent
  // Legacy interface list (V1..V3; receivers reject more than 16).  V4 sends
  // nips but no list; its value is kept as read and never used.
  std::uint32_t nips = 0;
  std::array<std::uint32_t, kHelloMaxIps> ips{};

  ConnType conn_type() const noexcept { return static_cast<ConnType>(ctype); }
  friend bool operator==(const Hello&, const Hello&) = default;
};

// Needs 8 bytes to learn the version, then (V1: 32, V2/V3: 56) to learn the
// list length.  bad_magic: neither HELLO magic; bad_version: unknown version
// (a passive Linux node answers with its own HELLO and ctype NONE);
// bad_length: more than 16 addresses.
Result<std::size_t> hello_bytes_needed(ByteSpan prefix) noexcept;
// Also bad_nid for a malformed NID; bad_value for a zero address in the list
// or a V1 HELLO whose LNet header is not of type HELLO.
Result<Hello> decode_hello(ByteSpan in) noexcept;
// Writes hello.version's layout in hello.order (V1: little-endian);
// V1..V3 need nid4-compatible NIDs.
Result<std::size_t> encode_hello(const Hello& hello, MutableByteSpan out) noexcept;
std::size_t hello_size(const Hello& hello) noexcept;

// ---- messages -------------------------------------------------------------

inline constexpr std::size_t kMsgHeaderSize = 24;
inline constexpr std::uint32_t kMsgNoop = 0xC0;
inline constexpr std::uint32_t kMsgLnet = 0xC1;
inline constexpr std::uint64_t kKeepaliveCookie = 1;  // NOOP (0, 1)
inline constexpr std::uint64_t kFirstZcCookie = 2;

// The socklnd message header (V2..V4), in the connection's byte order.
struct MsgHeader {
  std::uint32_t type = kMsgLnet;
  std::uint32_t csum = 0;
  std::uint64_t zc_req_cookie = 0;  // zc_cookies[0]: LNET: ACK me; NOOP: range start
  std::uint64_t zc_ack_cookie = 0;  // zc_cookies[1]: acknowledged cookie
  friend constexpr bool operator==(const MsgHeader&, const MsgHeader&) = default;
};

Result<MsgHeader> decode_msg_header(ByteSpan in, ByteOrder order) noexcept;
Result<std::size_t> encode_msg_header(const MsgHeader& h, MutableByteSpan out, ByteOrder order) noexcept;

// Size of the LNet header inside messages of a protocol version.
constexpr HeaderForm header_form(std::uint32_t version) noexcept {
  return version >= 4 ? HeaderForm::nid16 : HeaderForm::nid4;
}

// The head of a message, everything before its payload: socklnd header
// (absent in V1) and LNet header (absent in a NOOP).  A receiver decodes the
// head, picks a buffer for payload_length() bytes, then reads the payload
// into it.
struct MessageHead {
  std::optional<MsgHeader> sock;
  std::optional<LnetHeader> lnet;
  std::size_t size = 0;  // bytes of the head on the wire

  std::uint32_t payload_length() const noexcept { return lnet ? lnet->payload_length : 0; }
};

// A whole message: its head and a view of the payload in the caller's bytes.
struct Message {
  std::optional<MsgHeader> sock;
  std::optional<LnetHeader> lnet;
  ByteSpan payload;
};

// Bytes of the head starting at `prefix` on a connection of `version` and
// `order` (24 for a NOOP, 24 + LNet header for an LNET message, the LNet
// header alone in V1), as far as the prefix tells.  bad_type: unknown
// message type.
Result<std::size_t> message_head_bytes_needed(ByteSpan prefix, std::uint32_t version, ByteOrder order) noexcept;
// Decode the head at the start of `in` (truncated if shorter).  bad_length:
// payload above the LNet MTU (Linux refuses those before reading the payload).
Result<MessageHead> decode_message_head(ByteSpan in, std::uint32_t version, ByteOrder order) noexcept;
// Head plus payload: the whole message's size, as far as the prefix tells.
Result<std::size_t> message_bytes_needed(ByteSpan prefix, std::uint32_t version, ByteOrder order) noexcept;
Result<Message> decode_message(ByteSpan in, std::uint32_t version, ByteOrder order) noexcept;

// What a NOOP (or an LNET message's zc_ack_cookie) acknowledges, as Linux
// reads it: a NOOP (a, b) with b != 0 acknowledges b alone if a is 0 or
// equal to b, a..b if a < b, the pair a and b if a > b; an LNET message
// acknowledges its zc_ack_cookie alone.  From V3 on, an acknowledgement of
// the reserved cookie 1 is a keepalive if it names one cookie, and a
// protocol error (invalid) otherwise.
struct ZcAck {
  enum class Kind : std::uint8_t { none, keepalive, single, range, pair, invalid } kind = Kind::none;
  std::uint64_t first = 0;  // single: the cookie; range: a..b; pair: a and b
  std::uint64_t last = 0;
  friend constexpr bool operator==(const ZcAck&, const ZcAck&) = default;
};
ZcAck zc_ack_of(const MsgHeader& h, std::uint32_t version) noexcept;
MsgHeader make_zc_ack(std::uint64_t cookie) noexcept;  // NOOP (0, cookie)
MsgHeader make_keepalive() noexcept;                   // NOOP (0, 1)

// The V2 checksum: CRC-32 (reflected 0xEDB88320) seeded with ~0 and not
// inverted at the end, over socklnd header (csum zero), LNet header and
// payload, fed in pieces.
class Checksum {
 public:
  void update(ByteSpan bytes) noexcept;
  std::uint32_t value() const noexcept { return ~static_cast<std::uint32_t>(zlib_crc_); }

 private:
  unsigned long zlib_crc_ = 0;  // zlib's running CRC, which is the complement
};

}  // namespace lnetr::sock
