// NID range expressions (nid.md §5.3): NID lists such as
// "192.168.0.[1-8]@tcp 10.1.0.0/16@o2ib1 [100-200]@kfi tcp[2-3]", as used by
// UDSP rules, gateway lists and ip2nets-style matching; and the legacy
// textual bracket expansion of the kernel's routes= / ip2nets= parameters
// (§5.4).
//
// Parsing and expansion are control-plane code and allocate; contains() does
// not allocate and may run per message.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "router/nid.hpp"
#include "router/result.hpp"

namespace lnetr {

// One item of a number expression: lo, lo+stride, ... up to hi (hi itself
// need not be a member).  Invariants after parsing: lo <= hi, stride >= 1,
// and stride == 1 whenever lo == hi.
struct NumRange {
  std::uint32_t lo = 0;
  std::uint32_t hi = 0;
  std::uint32_t stride = 1;

  constexpr bool contains(std::uint32_t v) const noexcept {
    return v >= lo && v <= hi && (v - lo) % stride == 0;
  }
  friend constexpr bool operator==(const NumRange&, const NumRange&) = default;
};

// A number expression: "5", "*", or "[1,3-7,10-20/2]".  The union of its
// items, which may overlap; never empty after parsing.
struct NumExpr {
  std::vector<NumRange> items;

  bool contains(std::uint32_t v) const noexcept;
  friend bool operator==(const NumExpr&, const NumExpr&) = default;
};

// The address part of a nidrange.
struct AnyAddr {  // "*@net": every address, IPv4 or IPv6
  friend constexpr bool operator==(AnyAddr, AnyAddr) = default;
};
struct NetOnly {  // "net" without '@': matches like "*", but names no addresses
  friend constexpr bool operator==(NetOnly, NetOnly) = default;
};
struct Ipv4Mask {  // "a.b.c.d/len"; network holds no bits beyond len
  std::uint32_t network = 0;
  std::uint8_t len = 32;
  friend constexpr bool operator==(const Ipv4Mask&, const Ipv4Mask&) = default;
};
struct Ipv6Mask {  // "2001:db8::/32" or one address (len 128)
  std::array<std::uint8_t, 16> network{};
  std::uint8_t len = 128;
  friend constexpr bool operator==(const Ipv6Mask&, const Ipv6Mask&) = default;
};
struct Ipv4Octets {  // "10.1.[1-3].*": one expression per octet, 0..255
  std::array<NumExpr, 4> octets;
  friend bool operator==(const Ipv4Octets&, const Ipv4Octets&) = default;
};
struct NumAddr {  // "[100-200]@kfi": numeric LNDs, 0..2^32-1
  NumExpr expr;
  friend bool operator==(const NumAddr&, const NumAddr&) = default;
};
using AddrRange = std::variant<AnyAddr, NetOnly, Ipv4Mask, Ipv6Mask, Ipv4Octets, NumAddr>;

// Every address range given for one LND and one net-number expression
// ("tcp", "tcp3", "o2ib[0,2]").  A NID matches if its type and net number
// match and any of the address ranges matches.
struct NidRange {
  LndType lnd = LndType::sock;
  NumExpr nets;                  // network numbers, 0..65535
  std::vector<AddrRange> addrs;  // never empty, no duplicates

  bool contains(const Nid& nid) const noexcept;
  friend bool operator==(const NidRange&, const NidRange&) = default;
};

// Why a list cannot be expanded into NIDs; `reason` is static text.
struct ExpandError {
  std::string_view reason;
};

// A parsed NID list: the union of its nidranges.  Ranges with the same LND
// and net expression are merged, in order of first appearance.
class NidList {
 public:
  bool contains(const Nid& nid) const noexcept;
  const std::vector<NidRange>& ranges() const noexcept { return ranges_; }

  // Every NID the list denotes, ascending and without duplicates.  Fails if a
  // range is unbounded ("*", net-only) or the list holds more than `limit`
  // NIDs.
  Result<std::vector<Nid>, ExpandError> expand(std::size_t limit) const;

  friend bool operator==(const NidList&, const NidList&) = default;

 private:
  friend ParseResult<NidList> parse_nid_list(std::string_view s);
  std::vector<NidRange> ranges_;
};

// Nidranges separated by whitespace.  Each is "addrrange@net" or a bare net
// expression (net-only).  Numbers inside ranges, net numbers included, use C
// auto-base rules: 0x hex, leading 0 octal, else decimal.  Errors carry the
// offset of the offending character in `s`.
ParseResult<NidList> parse_nid_list(std::string_view s);

// Canonical text that parse_nid_list() turns back into an equal list (for
// any list it produced): one "addr@net" per address range, or the bare net
// for a net-only range; decimal numbers; "*" for a full octet.
std::string to_string(const NidList& list);

// Kernel routes=/ip2nets= textual expansion: each "[...]" group is replaced
// in turn by each of its comma-separated items; an item "lo-hi" or
// "lo-hi/stride" (decimal) stands for each number of the range, any other
// item for itself.  "o2ib[1-2]" -> "o2ib1", "o2ib2".  Groups expand left to
// right, the first varying slowest.  Fails on empty items, unbalanced or
// nested brackets, and when more than `limit` strings would result.
ParseResult<std::vector<std::string>> expand_brackets(std::string_view s, std::size_t limit);

}  // namespace lnetr
