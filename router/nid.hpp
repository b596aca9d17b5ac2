// LNet addresses: LND types, networks, NIDs (64-bit "nid4" and 20-byte large
// form) and process ids, with their wire encodings and string forms.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "router/bytes.hpp"
#include "router/result.hpp"

namespace lnetr {

// LND type numbers are wire-visible and never reused.
enum class LndType : std::uint8_t {
  qsw = 1,
  sock = 2,  // "tcp"
  gm = 3,
  ptl = 4,
  o2ib = 5,  // "o2ib"
  cib = 6,
  openib = 7,
  iib = 8,
  lo = 9,  // "lo"
  ra = 10,
  vib = 11,
  mx = 12,
  gni = 13,    // "gni"
  gniip = 14,  // "gip"
  ptl4 = 15,   // "ptlf"
  kfi = 16,    // "kfi"
  tofu = 17,
  efa = 18,   // "efa"
  bxi3 = 19,  // "bxi3f"
  any = 0xff,
};

inline constexpr std::uint32_t kPidLustre = 12345;        // every kernel LNet process
inline constexpr std::uint32_t kPidUserFlag = 0x80000000;  // user-space peer
inline constexpr std::uint32_t kPidAny = 0xffffffff;
inline constexpr std::uint64_t kNid4Any = ~std::uint64_t{0};
inline constexpr std::uint32_t kNetAny = 0xffffffff;

// How an LND writes the address part of its NIDs.
enum class AddrForm : std::uint8_t { ip, number };

struct LndName {
  LndType type;
  std::string_view name;
  AddrForm form;
};

// The LNDs that have a string name; nullptr / nullopt for the others.
const LndName* lnd_by_type(std::uint8_t type) noexcept;
const LndName* lnd_by_net_prefix(std::string_view s) noexcept;

// A network: LND type and network number.  As a 32-bit value (nid4 bits
// 63..32) it is (type << 16) | number.
struct Net {
  std::uint8_t type = 0;
  std::uint16_t number = 0;

  static constexpr Net from_u32(std::uint32_t v) noexcept {
    return {static_cast<std::uint8_t>(v >> 16), static_cast<std::uint16_t>(v)};
  }
  constexpr std::uint32_t to_u32() const noexcept {
    return (std::uint32_t{type} << 16) | number;
  }
  constexpr LndType lnd() const noexcept { return static_cast<LndType>(type); }

  friend constexpr auto operator<=>(const Net&, const Net&) = default;
};

// A NID in the layout of LNet's large NID: `size` counts address bytes beyond
// the first four (0 for IPv4 and every nid4, 12 for IPv6), `addr` holds the
// address bytes in network order (the first `4 + size` are significant, the
// rest are zero).  Type 0xff is the wildcard (LNet ignores the other fields;
// here it is always in its canonical form, any()).  Comparison orders NIDs as
// LNet's bytewise comparison of the 20-byte wire form does: size, type,
// number, then address.
struct Nid {
  std::uint8_t size = 0;
  std::uint8_t type = 0;
  std::uint16_t number = 0;
  std::array<std::uint8_t, 16> addr{};

  static constexpr std::uint8_t kAnyType = 0xff;
  static constexpr std::size_t kWireSize = 20;

  static constexpr Nid any() noexcept {
    Nid n;
    n.size = 0xff;
    n.type = kAnyType;
    n.number = 0xffff;
    n.addr.fill(0xff);
    return n;
  }

  // nid4 <-> Nid.  from_nid4(kNid4Any) is any(); to_nid4 is only exact for
  // nid4-compatible NIDs (is_nid4()).
  static constexpr Nid from_nid4(std::uint64_t v) noexcept {
    if (v == kNid4Any) return any();
    Nid n;
    n.type = static_cast<std::uint8_t>(v >> 48);
    n.number = static_cast<std::uint16_t>(v >> 32);
    const auto a = static_cast<std::uint32_t>(v);
    n.addr[0] = static_cast<std::uint8_t>(a >> 24);
    n.addr[1] = static_cast<std::uint8_t>(a >> 16);
    n.addr[2] = static_cast<std::uint8_t>(a >> 8);
    n.addr[3] = static_cast<std::uint8_t>(a);
    return n;
  }
  constexpr std::uint64_t to_nid4() const noexcept {
    if (is_any()) return kNid4Any;
    return (std::uint64_t{net().to_u32()} << 32) | addr4();
  }

  static constexpr Nid make(Net net, std::uint32_t addr) noexcept {
    return from_nid4((std::uint64_t{net.to_u32()} << 32) | addr);
  }

  constexpr bool is_any() const noexcept { return type == kAnyType; }
  constexpr bool is_nid4() const noexcept { return size == 0; }
  // Representable in a 64-bit wire NID field (a nid4 or the wildcard).
  constexpr bool fits_nid4() const noexcept { return is_nid4() || is_any(); }
  constexpr Net net() const noexcept { return {type, number}; }
  constexpr LndType lnd() const noexcept { return static_cast<LndType>(type); }
  // The first four address bytes as a host integer (the whole IPv4 address
  // or numeric address of a nid4).
  constexpr std::uint32_t addr4() const noexcept {
    return (std::uint32_t{addr[0]} << 24) | (std::uint32_t{addr[1]} << 16) |
           (std::uint32_t{addr[2]} << 8) | addr[3];
  }
  constexpr std::size_t addr_bytes() const noexcept { return is_any() ? 16 : 4u + size; }

  friend constexpr auto operator<=>(const Nid&, const Nid&) = default;
};

// A 64-bit wire NID.  Fails with bad_nid if the top byte is set (nid4 values
// keep it zero; only LNET_NID_ANY has it) or the type is the wildcard's
// without the value being LNET_NID_ANY, so decoding is lossless.
Result<Nid> decode_nid8(std::uint64_t v) noexcept;

// The 20-byte wire form (struct lnet_nid): byte-order neutral.
void encode_nid20(const Nid& nid, std::uint8_t* out) noexcept;
// Fails with bad_nid if the address is larger than 16 bytes, unused address
// bytes are not zero, or the type is the wildcard's but the other fields are
// not those of the canonical wildcard.
Result<Nid> decode_nid20(const std::uint8_t* in) noexcept;

// A process id: PID and NID.
struct ProcessId {
  std::uint32_t pid = kPidLustre;
  Nid nid;
  friend constexpr auto operator<=>(const ProcessId&, const ProcessId&) = default;
};

// ---- strings --------------------------------------------------------------

// Why a string did not parse; `reason` is static text, `pos` the offset in
// the input where the problem was found.
struct ParseError {
  std::string_view reason;
  std::size_t pos = 0;
};

template <class T>
using ParseResult = Result<T, ParseError>;

// "tcp", "tcp1", "o2ib3", "lo".  Unknown types print as "<type:num>".
std::string to_string(Net net);
// "192.168.1.10@tcp", "2001:db8::1@tcp1", "0@lo", "<?>".
std::string to_string(const Nid& nid);
// "12345-192.168.1.10@tcp"; user PIDs print as "U<pid>-..."
std::string to_string(const ProcessId& id);

// Net names as LNet parses them: a known LND name followed by an optional
// decimal number ("tcp" == "tcp0"); "lo" takes no number.
ParseResult<Net> parse_net(std::string_view s);
// "addr@net", "addr" (net tcp), or "<?>".  IP LNDs take a dotted IPv4 address
// (exactly a.b.c.d) or IPv6 text (not loopback or link-local); numeric LNDs a
// decimal or 0x-hex 32-bit number.  Host names are not resolved.
ParseResult<Nid> parse_nid(std::string_view s);
// "pid-nid" or "nid" (PID 12345).
ParseResult<ProcessId> parse_process_id(std::string_view s);

}  // namespace lnetr

template <>
struct std::hash<lnetr::Nid> {
  std::size_t operator()(const lnetr::Nid& n) const noexcept;
};
