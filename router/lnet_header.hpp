// The LNet message header: the 72-byte nid4 form (socklnd V1-V3, o2iblnd)
// and the 96-byte nid16 form (socklnd V4).
//
// Common fields are little-endian on every host.  The 40-byte type-specific
// part is kept verbatim in `msg`: wire handles and hdr_data are opaque and a
// router forwards the whole part byte for byte, so a decode/encode round trip
// (and a nid4 <-> nid16 conversion) never changes it.  Typed views of the
// part are decoded from and encoded into `msg` on demand.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "router/bytes.hpp"
#include "router/nid.hpp"
#include "router/result.hpp"

namespace lnetr {

enum class MsgType : std::uint32_t { ack = 0, put = 1, get = 2, reply = 3, hello = 4 };

const char* to_string(MsgType t) noexcept;  // "ACK", "PUT", "GET", "REPLY", "HELLO"

inline constexpr std::size_t kLnetHeaderSize = 72;       // nid4 form
inline constexpr std::size_t kLnetHeader16Size = 96;     // nid16 form
inline constexpr std::size_t kLnetMsgPartSize = 40;      // the type-specific union
inline constexpr std::uint32_t kLnetMtu = 1u << 20;      // max PUT/REPLY payload
inline constexpr std::uint32_t kLnetReservedPortal = 0;  // ping and push
inline constexpr std::uint64_t kPingMatchBits = 0x8000000000000000ull;

enum class HeaderForm : std::uint8_t { nid4, nid16 };

constexpr std::size_t header_size(HeaderForm f) noexcept {
  return f == HeaderForm::nid4 ? kLnetHeaderSize : kLnetHeader16Size;
}

// A memory-descriptor handle named on the wire.  Opaque: written in its
// creator's byte order; read and written here as little-endian so that the
// bytes survive a round trip unchanged.
struct WireHandle {
  std::uint64_t interface_cookie = ~std::uint64_t{0};
  std::uint64_t object_cookie = ~std::uint64_t{0};

  static constexpr WireHandle none() noexcept { return {}; }
  constexpr bool is_none() const noexcept {
    return interface_cookie == ~std::uint64_t{0} && object_cookie == ~std::uint64_t{0};
  }
  friend constexpr bool operator==(const WireHandle&, const WireHandle&) = default;
};

struct PutFields {
  WireHandle ack_wmd;  // none(): no ACK wanted
  std::uint64_t match_bits = 0;
  std::uint64_t hdr_data = 0;  // opaque, sender's order; kept as read (LE)
  std::uint32_t ptl_index = 0;
  std::uint32_t offset = 0;
  friend constexpr bool operator==(const PutFields&, const PutFields&) = default;
};

struct GetFields {
  WireHandle return_wmd;
  std::uint64_t match_bits = 0;
  std::uint32_t ptl_index = 0;
  std::uint32_t src_offset = 0;
  std::uint32_t sink_length = 0;
  friend constexpr bool operator==(const GetFields&, const GetFields&) = default;
};

struct ReplyFields {
  WireHandle dst_wmd;  // the GET's return_wmd
  friend constexpr bool operator==(const ReplyFields&, const ReplyFields&) = default;
};

struct AckFields {
  WireHandle dst_wmd;  // the PUT's ack_wmd
  std::uint64_t match_bits = 0;
  std::uint32_t mlength = 0;
  friend constexpr bool operator==(const AckFields&, const AckFields&) = default;
};

// socklnd V1 only: the HELLO carried in a bare LNet header.
struct HelloFields {
  std::uint64_t incarnation = 0;
  std::uint32_t type = 0;
  friend constexpr bool operator==(const HelloFields&, const HelloFields&) = default;
};

struct LnetHeader {
  Nid dest_nid;  // final destination, never the next hop
  Nid src_nid;   // originator
  std::uint32_t dest_pid = kPidLustre;
  std::uint32_t src_pid = kPidLustre;
  MsgType type = MsgType::ack;
  std::uint32_t payload_length = 0;
  std::array<std::uint8_t, kLnetMsgPartSize> msg{};

  PutFields put() const noexcept;
  GetFields get() const noexcept;
  ReplyFields reply() const noexcept;
  AckFields ack() const noexcept;
  HelloFields hello() const noexcept;

  // Set `type` and the type-specific part (unused bytes zero, as Linux does).
  void set(const PutFields& f) noexcept;
  void set(const GetFields& f) noexcept;
  void set(const ReplyFields& f) noexcept;
  void set(const AckFields& f) noexcept;
  void set(const HelloFields& f) noexcept;

  friend bool operator==(const LnetHeader&, const LnetHeader&) = default;
};

// Decode a header from the first header_size(form) bytes of `in`.  Errors:
// truncated; bad_type for a type above HELLO; bad_nid for a malformed nid16
// NID.  Semantic limits (payload sizes per type) are check_header()'s job.
Result<LnetHeader> decode_header(ByteSpan in, HeaderForm form) noexcept;

// Encode into the first header_size(form) bytes of `out` (which must be at
// least that long).  Fails with bad_nid if the nid4 form is asked for a NID
// that only fits the large form.
Result<std::size_t> encode_header(const LnetHeader& h, MutableByteSpan out, HeaderForm form) noexcept;

// The checks LNet applies to every received header before acting on it:
// ACK and GET carry no payload, PUT and REPLY at most kLnetMtu, HELLO is never
// a valid message outside the socklnd V1 handshake.
// Returns the first violation, or nothing if the header is acceptable.
std::optional<WireError> check_header(const LnetHeader& h) noexcept;

}  // namespace lnetr
