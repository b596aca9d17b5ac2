// LNet's protocol magic numbers (wire-visible, never reused).  Structures in
// the sender's byte order carry one first, so a receiver recognises both the
// structure and a peer of the other endianness (bytes.hpp match_magic).
#pragma once

#include <cstdint>

namespace lnetr {

inline constexpr std::uint32_t kTcpProtoMagic = 0xEEBC0DED;  // socklnd HELLO V1 (little-endian)
inline constexpr std::uint32_t kLnetProtoMagic = 0x45726963;  // "Eric": socklnd HELLO V2+, protocol probes
inline constexpr std::uint32_t kAcceptorMagic = 0xACCE7100;   // TCP acceptor connection request
inline constexpr std::uint32_t kIbMagic = 0x0BE91B91;         // o2iblnd message header and reject
inline constexpr std::uint32_t kGniMagic = 0xB00FBABE;
inline constexpr std::uint32_t kKfiMagic = 0xDEADBEEF;
inline constexpr std::uint32_t kEfaMagic = 0x2BE092BE;
inline constexpr std::uint32_t kPingMagic = 0x70696E67;  // "ping": ping-info buffer

}  // namespace lnetr
