#include "router/nid.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>

namespace lnetr {
namespace {

constexpr LndName kLnds[] = {
    {LndType::sock, "tcp", AddrForm::ip},     {LndType::o2ib, "o2ib", AddrForm::ip},
    {LndType::lo, "lo", AddrForm::number},    {LndType::gni, "gni", AddrForm::number},
    {LndType::gniip, "gip", AddrForm::ip},    {LndType::ptl4, "ptlf", AddrForm::number},
    {LndType::kfi, "kfi", AddrForm::number},  {LndType::efa, "efa", AddrForm::ip},
    {LndType::bxi3, "bxi3f", AddrForm::number},
};

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

template <class T>
bool parse_uint(std::string_view s, T& out, int base = 10) {
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc{} && p == s.data() + s.size();
}

// Kernel rules for an IPv4 NID address: exactly four decimal components.
bool parse_ipv4(std::string_view s, std::uint32_t& out) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const std::size_t dot = (i < 3) ? s.find('.') : s.size();
    if (dot == std::string_view::npos) return false;
    const std::string_view part = s.substr(0, dot);
    unsigned octet = 0;
    if (!all_digits(part) || !parse_uint(part, octet) || octet > 255) return false;
    v = (v << 8) | octet;
    s.remove_prefix(i < 3 ? dot + 1 : dot);
  }
  out = v;
  return s.empty();
}

ParseResult<Nid> parse_addr(std::string_view a, Net net, std::size_t pos) {
  const LndName* lnd = lnd_by_type(net.type);
  if (lnd == nullptr) return fail(ParseError{"network has no address syntax", pos});
  if (lnd->form == AddrForm::number) {
    std::uint32_t v = 0;
    const bool ok = (a.starts_with("0x") || a.starts_with("0X")) ? parse_uint(a.substr(2), v, 16)
                                                                 : (all_digits(a) && parse_uint(a, v));
    if (!ok) return fail(ParseError{"expected a decimal or 0x-hex address", pos});
    return Nid::make(net, v);
  }
  if (a.find(':') != std::string_view::npos) {
    // inet_pton stops at a NUL: allow only what IPv6 text is made of.
    const bool ipv6_chars = std::all_of(a.begin(), a.end(), [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
    });
    if (!ipv6_chars) return fail(ParseError{"expected an IPv6 address", pos});
    std::array<std::uint8_t, 16> b{};
    const std::string text(a);
    if (inet_pton(AF_INET6, text.c_str(), b.data()) != 1)
      return fail(ParseError{"expected an IPv6 address", pos});
    const bool loopback = std::all_of(b.begin(), b.end() - 1, [](auto x) { return x == 0; }) && b[15] == 1;
    const bool link_local = b[0] == 0xfe && (b[1] & 0xc0) == 0x80;
    if (loopback || link_local)
      return fail(ParseError{"loopback and link-local IPv6 addresses cannot be NIDs", pos});
    Nid n;
    n.size = 12;
    n.type = net.type;
    n.number = net.number;
    n.addr = b;
    return n;
  }
  std::uint32_t v = 0;
  if (!parse_ipv4(a, v)) return fail(ParseError{"expected an IPv4 address a.b.c.d", pos});
  return Nid::make(net, v);
}

void append_hex_words(std::string& out, const Nid& nid) {
  char buf[16];
  for (std::size_t i = 0; i < nid.addr_bytes(); i += 4) {
    const auto w = load_be<std::uint32_t>(nid.addr.data() + i);
    if (i != 0) out += ':';
    std::snprintf(buf, sizeof buf, "%x", w);
    out += buf;
  }
}

}  // namespace

const LndName* lnd_by_type(std::uint8_t type) noexcept {
  for (const auto& l : kLnds)
    if (static_cast<std::uint8_t>(l.type) == type) return &l;
  return nullptr;
}

const LndName* lnd_by_net_prefix(std::string_view s) noexcept {
  const LndName* best = nullptr;
  for (const auto& l : kLnds)
    if (s.starts_with(l.name) && (best == nullptr || l.name.size() > best->name.size())) best = &l;
  return best;
}

Result<Nid> decode_nid8(std::uint64_t v) noexcept {
  if (v == kNid4Any) return Nid::any();
  if ((v >> 56) != 0 || ((v >> 48) & 0xff) == Nid::kAnyType) return fail(WireError::bad_nid);
  return Nid::from_nid4(v);
}

void encode_nid20(const Nid& nid, std::uint8_t* out) noexcept {
  out[0] = nid.size;
  out[1] = nid.type;
  store_be<std::uint16_t>(out + 2, nid.number);
  std::copy(nid.addr.begin(), nid.addr.end(), out + 4);
}

Result<Nid> decode_nid20(const std::uint8_t* in) noexcept {
  Nid n;
  n.size = in[0];
  n.type = in[1];
  n.number = load_be<std::uint16_t>(in + 2);
  std::copy(in + 4, in + 20, n.addr.begin());
  if (n.is_any()) return n == Nid::any() ? Result<Nid>(n) : fail(WireError::bad_nid);
  if (n.size > 12) return fail(WireError::bad_nid);
  if (!std::all_of(n.addr.begin() + 4 + n.size, n.addr.end(), [](auto b) { return b == 0; }))
    return fail(WireError::bad_nid);
  return n;
}

std::string to_string(Net net) {
  const LndName* lnd = lnd_by_type(net.type);
  if (lnd == nullptr) return "<" + std::to_string(net.type) + ":" + std::to_string(net.number) + ">";
  std::string s(lnd->name);
  if (net.number != 0) s += std::to_string(net.number);
  return s;
}

std::string to_string(const Nid& nid) {
  if (nid.is_any()) return "<?>";
  std::string s;
  const LndName* lnd = lnd_by_type(nid.type);
  if (lnd == nullptr) {
    if (nid.is_nid4()) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%x", nid.addr4());
      s = buf;
    } else {
      append_hex_words(s, nid);
    }
  } else if (lnd->form == AddrForm::ip && nid.size == 0) {
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, nid.addr.data(), buf, sizeof buf);
    s = buf;
  } else if (lnd->form == AddrForm::ip && nid.size == 12) {
    char buf[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, nid.addr.data(), buf, sizeof buf);
    s = buf;
  } else if (lnd->form == AddrForm::number && nid.size == 0) {
    s = std::to_string(nid.addr4());
  } else {
    append_hex_words(s, nid);
  }
  return s + "@" + to_string(nid.net());
}

std::string to_string(const ProcessId& id) {
  std::string s;
  if (id.pid == kPidAny) {
    s = "LNET_PID_ANY";
  } else if (id.pid & kPidUserFlag) {
    s = "U" + std::to_string(id.pid & ~kPidUserFlag);
  } else {
    s = std::to_string(id.pid);
  }
  return s + "-" + to_string(id.nid);
}

ParseResult<Net> parse_net(std::string_view s) {
  const LndName* lnd = lnd_by_net_prefix(s);
  if (lnd == nullptr) return fail(ParseError{"unknown network type", 0});
  const std::string_view num = s.substr(lnd->name.size());
  Net net{static_cast<std::uint8_t>(lnd->type), 0};
  if (num.empty()) return net;
  if (lnd->type == LndType::lo) return fail(ParseError{"network lo takes no number", lnd->name.size()});
  if (!all_digits(num) || !parse_uint(num, net.number))
    return fail(ParseError{"network number must be a decimal 0..65535", lnd->name.size()});
  return net;
}

ParseResult<Nid> parse_nid(std::string_view s) {
  if (s == "<?>") return Nid::any();
  const std::size_t at = s.find('@');
  Net net{static_cast<std::uint8_t>(LndType::sock), 0};
  std::string_view addr = s;
  if (at != std::string_view::npos) {
    auto r = parse_net(s.substr(at + 1));
    if (!r) return fail(ParseError{r.error().reason, at + 1 + r.error().pos});
    net = *r;
    addr = s.substr(0, at);
  }
  if (addr.empty()) return fail(ParseError{"missing address before '@'", 0});
  return parse_addr(addr, net, 0);
}

ParseResult<ProcessId> parse_process_id(std::string_view s) {
  ProcessId id;
  const std::size_t dash = s.find('-');
  std::size_t off = 0;
  if (s.starts_with("LNET_PID_ANY-")) {
    id.pid = kPidAny;
    off = std::string_view("LNET_PID_ANY-").size();
  } else if (dash != std::string_view::npos) {
    std::string_view p = s.substr(0, dash);
    std::uint32_t flag = 0;
    if (p.starts_with('U')) {
      flag = kPidUserFlag;
      p.remove_prefix(1);
    }
    if (!all_digits(p) || !parse_uint(p, id.pid) || (id.pid & kPidUserFlag))
      return fail(ParseError{"PID must be a decimal number below 2^31", 0});
    id.pid |= flag;
    if (id.pid == kPidAny) return fail(ParseError{"PID U2147483647 is the wildcard LNET_PID_ANY", 0});
    off = dash + 1;
  }
  auto n = parse_nid(s.substr(off));
  if (!n) return fail(ParseError{n.error().reason, off + n.error().pos});
  id.nid = *n;
  return id;
}

}  // namespace lnetr

std::size_t std::hash<lnetr::Nid>::operator()(const lnetr::Nid& n) const noexcept {
  // The significant fields as three words, each folded in with a multiply
  // and a shift (a few instructions a word; the forwarder looks NIDs up
  // several times per message).
  std::uint64_t lo = 0, hi = 0;
  std::memcpy(&lo, n.addr.data(), 8);
  std::memcpy(&hi, n.addr.data() + 8, 8);
  const std::uint64_t head = std::uint64_t{n.size} | std::uint64_t{n.type} << 8 | std::uint64_t{n.number} << 16;
  constexpr std::uint64_t k = 0x9e3779b97f4a7c15ull;
  std::uint64_t h = head * k;
  h = (h ^ (h >> 29) ^ lo) * k;
  h = (h ^ (h >> 29) ^ hi) * k;
  h = (h ^ (h >> 32)) * k;  // (the last word's high bytes into the low bits)
  return static_cast<std::size_t>(h ^ (h >> 29));
}
