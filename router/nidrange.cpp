#include "router/nidrange.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <optional>

namespace lnetr {
namespace {

// ---- parsing ----------------------------------------------------------------

// The values a number may take in one position, and what to say otherwise.
struct Domain {
  std::uint32_t max;
  std::string_view out_of_range;
};

constexpr Domain kOctet{255, "octet out of range 0..255"};
constexpr Domain kAddrNumber{0xffffffff, "address out of range 0..4294967295"};
constexpr Domain kNetNumber{0xffff, "network number out of range 0..65535"};
constexpr Domain kStride{0xffffffff, "stride out of range 1..4294967295"};
constexpr Domain kPrefix4{32, "prefix length out of range 1..32"};
constexpr Domain kPrefix6{128, "prefix length out of range 1..128"};

bool is_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// A cursor over one piece of the input; `base` is the piece's offset in the
// whole input so that errors point into what the user wrote.
struct Scan {
  std::string_view s;
  std::size_t base = 0;
  std::size_t i = 0;

  bool done() const { return i >= s.size(); }
  bool at(char c) const { return i < s.size() && s[i] == c; }
  bool eat(char c) {
    if (!at(c)) return false;
    ++i;
    return true;
  }
  Unexpected<ParseError> error(std::string_view why, std::size_t where) const {
    return fail(ParseError{why, base + where});
  }
  Unexpected<ParseError> error(std::string_view why) const { return error(why, i); }
};

enum class NumStatus { ok, bad, overflow };

// strtoul(base 0) rules, but strict: the whole token must be digits of its
// base, so "08" and "0x" are errors rather than a silent 0.
NumStatus parse_auto(std::string_view tok, std::uint64_t& out) {
  int radix = 10;
  if (tok.size() > 2 && tok[0] == '0' && (tok[1] == 'x' || tok[1] == 'X')) {
    radix = 16;
    tok.remove_prefix(2);
  } else if (tok.size() > 1 && tok[0] == '0') {
    radix = 8;
    tok.remove_prefix(1);
  }
  if (tok.empty()) return NumStatus::bad;
  const auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), out, radix);
  if (ec == std::errc::result_out_of_range) return NumStatus::overflow;
  return (ec == std::errc{} && p == tok.data() + tok.size()) ? NumStatus::ok : NumStatus::bad;
}

ParseResult<std::uint32_t> parse_number(Scan& sc, const Domain& d) {
  const std::size_t start = sc.i;
  while (!sc.done() && is_alnum(sc.s[sc.i])) ++sc.i;
  if (sc.i == start) return sc.error("expected a number", start);
  std::uint64_t v = 0;
  switch (parse_auto(sc.s.substr(start, sc.i - start), v)) {
    case NumStatus::bad:
      return sc.error("expected a number (decimal, 0x hex or 0 octal)", start);
    case NumStatus::overflow:
      return sc.error(d.out_of_range, start);
    case NumStatus::ok:
      break;
  }
  if (v > d.max) return sc.error(d.out_of_range, start);
  return static_cast<std::uint32_t>(v);
}

// range_expr := number | number '-' number | number '-' number '/' number
ParseResult<NumRange> parse_item(Scan& sc, const Domain& d) {
  const std::size_t start = sc.i;
  auto lo = parse_number(sc, d);
  if (!lo) return fail(lo.error());
  NumRange r{*lo, *lo, 1};
  if (!sc.eat('-')) return r;
  auto hi = parse_number(sc, d);
  if (!hi) return fail(hi.error());
  if (*hi < r.lo) return sc.error("range low bound above high bound", start);
  r.hi = *hi;
  if (!sc.eat('/')) return r;
  const std::size_t stride_at = sc.i;
  auto stride = parse_number(sc, kStride);
  if (!stride) return fail(stride.error());
  if (*stride == 0) return sc.error("stride must be at least 1", stride_at);
  if (r.lo != r.hi) r.stride = *stride;  // a single value has no stride
  return r;
}

// numaddr_range := number | '*' | '[' range_expr { ',' range_expr } ']'
ParseResult<NumExpr> parse_expr(Scan& sc, const Domain& d, bool allow_star) {
  NumExpr e;
  if (allow_star && sc.eat('*')) {
    e.items.push_back({0, d.max, 1});
    return e;
  }
  if (!sc.eat('[')) {
    auto v = parse_number(sc, d);
    if (!v) return fail(v.error());
    if (sc.at('-')) return sc.error("a range must be in brackets, as in [lo-hi]");
    e.items.push_back({*v, *v, 1});
    return e;
  }
  if (sc.at(']')) return sc.error("empty brackets: expected a number");
  for (;;) {
    auto item = parse_item(sc, d);
    if (!item) return fail(item.error());
    e.items.push_back(*item);
    if (sc.eat(',')) continue;
    if (sc.eat(']')) return e;
    return sc.error(sc.done() ? "expected ']' after range" : "expected ',' or ']' after range");
  }
}

struct NetSpec {
  const LndName* lnd;
  NumExpr nets;
};

// net := netname [ number | '[' range_expr { ',' range_expr } ']' ]
ParseResult<NetSpec> parse_net_expr(std::string_view s, std::size_t base) {
  Scan sc{s, base};
  if (s.empty()) return sc.error("expected a network name after '@'");
  if (const std::size_t star = s.find('*'); star != std::string_view::npos)
    return sc.error(star + 1 < s.size() && s[star + 1] == '['
                        ? "'*' cannot precede '[' in a network"
                        : "'*' is not allowed in a network",
                    star);
  const LndName* lnd = lnd_by_net_prefix(s);
  if (lnd == nullptr) return sc.error("unknown network type", 0);
  sc.i = lnd->name.size();
  if (sc.done()) return NetSpec{lnd, NumExpr{{{0, 0, 1}}}};
  if (lnd->type == LndType::lo) return sc.error("network lo takes no number");
  auto nets = parse_expr(sc, kNetNumber, false);
  if (!nets) return fail(nets.error());
  if (!sc.done()) return sc.error("unexpected characters after network");
  return NetSpec{lnd, std::move(*nets)};
}

constexpr std::uint32_t mask4(std::uint8_t len) {
  return len == 0 ? 0 : ~std::uint32_t{0} << (32 - len);
}

// The bits of address byte `b` that a /len prefix covers.
constexpr std::uint8_t mask6_byte(std::uint8_t len, std::size_t b) {
  const int keep = std::clamp(int{len} - static_cast<int>(b * 8), 0, 8);
  return static_cast<std::uint8_t>(0xff00u >> keep);
}

// "/len" at the cursor, which must then be at the end.
ParseResult<std::uint8_t> parse_prefix(Scan& sc, const Domain& d) {
  if (!sc.eat('/')) return sc.error("expected '/' and a prefix length");
  const std::size_t at = sc.i;
  auto len = parse_number(sc, d);
  if (!len) return fail(len.error());
  if (*len == 0) return sc.error(d.out_of_range, at);
  if (!sc.done()) return sc.error("unexpected characters after prefix length");
  return static_cast<std::uint8_t>(*len);
}

ParseResult<AddrRange> parse_ipv6(Scan& sc) {
  const std::size_t slash = std::min(sc.s.find('/'), sc.s.size());
  const std::string_view addr = sc.s.substr(0, slash);
  // inet_pton stops at a NUL, so check the characters ourselves first.
  const bool plausible = std::all_of(addr.begin(), addr.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
  });
  const std::string text(addr);
  Ipv6Mask m;
  if (!plausible || inet_pton(AF_INET6, text.c_str(), m.network.data()) != 1)
    return sc.error("expected an IPv6 address", 0);
  sc.i = slash;
  if (!sc.done()) {
    auto len = parse_prefix(sc, kPrefix6);
    if (!len) return fail(len.error());
    m.len = *len;
  }
  // Host bits are cleared so that "2001:db8::1/32" means the /32 network.
  for (std::size_t b = 0; b < m.network.size(); ++b) m.network[b] &= mask6_byte(m.len, b);
  return AddrRange{m};
}

ParseResult<AddrRange> parse_cidr4(Scan& sc) {
  std::uint32_t addr = 0;
  for (int k = 0; k < 4; ++k) {
    if (k != 0 && !sc.eat('.')) return sc.error("expected an IPv4 network a.b.c.d/len");
    auto octet = parse_number(sc, kOctet);
    if (!octet) return fail(octet.error());
    addr = (addr << 8) | *octet;
  }
  auto len = parse_prefix(sc, kPrefix4);
  if (!len) return fail(len.error());
  // Host bits are cleared so that "192.168.1.5/24" means the /24 network.
  return AddrRange{Ipv4Mask{addr & mask4(*len), *len}};
}

ParseResult<AddrRange> parse_octets(Scan& sc) {
  Ipv4Octets r;
  for (std::size_t k = 0; k < 4; ++k) {
    if (k != 0 && !sc.eat('.'))
      return sc.error(sc.done() ? "expected four octets a.b.c.d" : "expected '.' after octet");
    auto e = parse_expr(sc, kOctet, true);
    if (!e) return fail(e.error());
    r.octets[k] = std::move(*e);
  }
  if (!sc.done()) return sc.error("unexpected characters after address range");
  return AddrRange{std::move(r)};
}

ParseResult<AddrRange> parse_addr_range(std::string_view s, std::size_t base, AddrForm form) {
  Scan sc{s, base};
  if (s.empty()) return sc.error("expected an address range before '@'");
  if (s == "*") return AddrRange{AnyAddr{}};
  if (form == AddrForm::number) {
    auto e = parse_expr(sc, kAddrNumber, false);
    if (!e) return fail(e.error());
    if (!sc.done()) return sc.error("unexpected characters after address range");
    return AddrRange{NumAddr{std::move(*e)}};
  }
  if (s.find(':') != std::string_view::npos) return parse_ipv6(sc);
  // Outside brackets '/' introduces a prefix length; inside, a stride.
  if (s.find('/') != std::string_view::npos && s.find('[') == std::string_view::npos)
    return parse_cidr4(sc);
  return parse_octets(sc);
}

void add_range(std::vector<NidRange>& ranges, LndType lnd, NumExpr nets, AddrRange addr) {
  for (auto& r : ranges) {
    if (r.lnd != lnd || r.nets != nets) continue;
    if (std::find(r.addrs.begin(), r.addrs.end(), addr) == r.addrs.end())
      r.addrs.push_back(std::move(addr));
    return;
  }
  ranges.push_back(NidRange{lnd, std::move(nets), {std::move(addr)}});
}

// ---- membership --------------------------------------------------------------

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

bool addr_contains(const AddrRange& a, const Nid& nid) noexcept {
  return std::visit(
      Overloaded{
          [](const AnyAddr&) { return true; },
          [](const NetOnly&) { return true; },
          [&](const Ipv4Mask& m) {
            return nid.is_nid4() && (nid.addr4() & mask4(m.len)) == m.network;
          },
          [&](const Ipv6Mask& m) {
            if (nid.size != 12) return false;
            for (std::size_t b = 0; b < 16; ++b)
              if ((nid.addr[b] & mask6_byte(m.len, b)) != m.network[b]) return false;
            return true;
          },
          [&](const Ipv4Octets& o) {
            if (!nid.is_nid4()) return false;
            for (std::size_t k = 0; k < 4; ++k)
              if (!o.octets[k].contains(nid.addr[k])) return false;
            return true;
          },
          [&](const NumAddr& n) { return nid.is_nid4() && n.expr.contains(nid.addr4()); },
      },
      a);
}

// ---- expansion ---------------------------------------------------------------

// The smallest member of `e` that is >= v.
std::optional<std::uint32_t> next_member(const NumExpr& e, std::uint64_t v) {
  std::optional<std::uint32_t> best;
  for (const auto& r : e.items) {
    if (v > r.hi) continue;
    std::uint64_t m = r.lo;
    if (v > r.lo) m = r.lo + (v - r.lo + r.stride - 1) / r.stride * std::uint64_t{r.stride};
    if (m <= r.hi && (!best || m < *best)) best = static_cast<std::uint32_t>(m);
  }
  return best;
}

// Calls f(v) for each distinct member of `e`, ascending.
template <class F>
void for_each_member(const NumExpr& e, F&& f) {
  for (auto v = next_member(e, 0); v; v = next_member(e, std::uint64_t{*v} + 1)) f(*v);
}

// Distinct members of `e`, counting no further than cap + 1.
std::uint64_t count_members(const NumExpr& e, std::uint64_t cap) {
  std::uint64_t n = 0;
  for (auto v = next_member(e, 0); v && n <= cap; v = next_member(e, std::uint64_t{*v} + 1)) ++n;
  return n;
}

std::uint64_t mul_capped(std::uint64_t a, std::uint64_t b, std::uint64_t cap) {
  std::uint64_t p = 0;
  if (__builtin_mul_overflow(a, b, &p) || p > cap) return cap + 1;
  return p;
}

// Number of NIDs one address range names on one net, or cap + 1 if more.
std::uint64_t count_addrs(const AddrRange& a, std::uint64_t cap) {
  return std::visit(
      Overloaded{
          [&](const AnyAddr&) { return cap + 1; },
          [&](const NetOnly&) { return cap + 1; },
          [&](const Ipv4Mask& m) { return std::min(std::uint64_t{1} << (32 - m.len), cap + 1); },
          [&](const Ipv6Mask& m) {
            return m.len <= 64 ? cap + 1 : std::min(std::uint64_t{1} << (128 - m.len), cap + 1);
          },
          [&](const Ipv4Octets& o) {
            std::uint64_t n = 1;
            for (const auto& e : o.octets) n = mul_capped(n, count_members(e, cap), cap);
            return n;
          },
          [&](const NumAddr& n) { return count_members(n.expr, cap); },
      },
      a);
}

void append_addrs(const AddrRange& a, Net net, std::vector<Nid>& out) {
  std::visit(Overloaded{
                 [](const AnyAddr&) {},
                 [](const NetOnly&) {},
                 [&](const Ipv4Mask& m) {
                   const std::uint64_t n = std::uint64_t{1} << (32 - m.len);
                   for (std::uint64_t i = 0; i < n; ++i)
                     out.push_back(Nid::make(net, m.network + static_cast<std::uint32_t>(i)));
                 },
                 [&](const Ipv6Mask& m) {
                   // count_addrs() admitted it, so the host part fits in the low 64 bits.
                   const std::uint64_t n = std::uint64_t{1} << (128 - m.len);
                   const std::uint64_t low = load_be<std::uint64_t>(m.network.data() + 8);
                   Nid nid;
                   nid.size = 12;
                   nid.type = net.type;
                   nid.number = net.number;
                   nid.addr = m.network;
                   for (std::uint64_t i = 0; i < n; ++i) {
                     store_be<std::uint64_t>(nid.addr.data() + 8, low + i);
                     out.push_back(nid);
                   }
                 },
                 [&](const Ipv4Octets& o) {
                   for_each_member(o.octets[0], [&](std::uint32_t a0) {
                     for_each_member(o.octets[1], [&](std::uint32_t a1) {
                       for_each_member(o.octets[2], [&](std::uint32_t a2) {
                         for_each_member(o.octets[3], [&](std::uint32_t a3) {
                           out.push_back(Nid::make(net, (a0 << 24) | (a1 << 16) | (a2 << 8) | a3));
                         });
                       });
                     });
                   });
                 },
                 [&](const NumAddr& n) {
                   for_each_member(n.expr, [&](std::uint32_t v) { out.push_back(Nid::make(net, v)); });
                 },
             },
             a);
}

void sort_unique(std::vector<Nid>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// ---- printing ----------------------------------------------------------------

void print_expr(std::string& out, const NumExpr& e, std::uint32_t max, bool star) {
  if (e.items.size() == 1) {
    const NumRange& r = e.items[0];
    if (star && r == NumRange{0, max, 1}) {
      out += '*';
      return;
    }
    if (r.lo == r.hi && r.stride == 1) {
      out += std::to_string(r.lo);
      return;
    }
  }
  out += '[';
  for (std::size_t k = 0; k < e.items.size(); ++k) {
    const NumRange& r = e.items[k];
    if (k != 0) out += ',';
    out += std::to_string(r.lo);
    if (r.lo == r.hi && r.stride == 1) continue;
    out += '-';
    out += std::to_string(r.hi);
    if (r.stride != 1) out += '/' + std::to_string(r.stride);
  }
  out += ']';
}

void print_net(std::string& out, const NidRange& r) {
  const LndName* lnd = lnd_by_type(static_cast<std::uint8_t>(r.lnd));
  out += lnd != nullptr ? lnd->name : std::string_view("<?>");
  const bool zero = r.nets.items.size() == 1 && r.nets.items[0] == NumRange{0, 0, 1};
  if (!zero) print_expr(out, r.nets, kNetNumber.max, false);
}

void print_addr(std::string& out, const AddrRange& a) {
  std::visit(Overloaded{
                 [&](const AnyAddr&) { out += '*'; },
                 [](const NetOnly&) {},
                 [&](const Ipv4Mask& m) {
                   for (int shift = 24; shift >= 0; shift -= 8) {
                     out += std::to_string((m.network >> shift) & 0xff);
                     out += shift != 0 ? '.' : '/';
                   }
                   out += std::to_string(m.len);
                 },
                 [&](const Ipv6Mask& m) {
                   char buf[INET6_ADDRSTRLEN];
                   inet_ntop(AF_INET6, m.network.data(), buf, sizeof buf);
                   out += buf;
                   if (m.len != 128) out += '/' + std::to_string(m.len);
                 },
                 [&](const Ipv4Octets& o) {
                   for (std::size_t k = 0; k < 4; ++k) {
                     if (k != 0) out += '.';
                     print_expr(out, o.octets[k], kOctet.max, true);
                   }
                 },
                 [&](const NumAddr& n) { print_expr(out, n.expr, kAddrNumber.max, false); },
             },
             a);
}

}  // namespace

bool NumExpr::contains(std::uint32_t v) const noexcept {
  return std::any_of(items.begin(), items.end(), [v](const NumRange& r) { return r.contains(v); });
}

bool NidRange::contains(const Nid& nid) const noexcept {
  if (nid.is_any() || nid.type != static_cast<std::uint8_t>(lnd) || !nets.contains(nid.number))
    return false;
  return std::any_of(addrs.begin(), addrs.end(), [&](const AddrRange& a) { return addr_contains(a, nid); });
}

bool NidList::contains(const Nid& nid) const noexcept {
  return std::any_of(ranges_.begin(), ranges_.end(), [&](const NidRange& r) { return r.contains(nid); });
}

Result<std::vector<Nid>, ExpandError> NidList::expand(std::size_t limit) const {
  const std::uint64_t cap = std::min<std::uint64_t>(limit, std::uint64_t{1} << 62);
  std::vector<Nid> out;
  for (const auto& r : ranges_) {
    const std::uint64_t nets = count_members(r.nets, cap);
    for (const auto& a : r.addrs) {
      if (std::holds_alternative<NetOnly>(a))
        return fail(ExpandError{"a net-only range names no addresses to list"});
      if (std::holds_alternative<AnyAddr>(a))
        return fail(ExpandError{"'*' stands for every address on a net and cannot be listed"});
      if (mul_capped(nets, count_addrs(a, cap), cap) > cap)
        return fail(ExpandError{"the range holds more NIDs than the limit"});
      for_each_member(r.nets, [&](std::uint32_t num) {
        append_addrs(a, Net{static_cast<std::uint8_t>(r.lnd), static_cast<std::uint16_t>(num)}, out);
      });
      // Overlapping ranges may still fit once duplicates are dropped.
      if (out.size() > cap) {
        sort_unique(out);
        if (out.size() > cap) return fail(ExpandError{"the list holds more NIDs than the limit"});
      }
    }
  }
  sort_unique(out);
  return out;
}

ParseResult<NidList> parse_nid_list(std::string_view s) {
  NidList list;
  std::size_t i = 0;
  for (;;) {
    while (i < s.size() && is_space(s[i])) ++i;
    if (i == s.size()) break;
    const std::size_t start = i;
    while (i < s.size() && !is_space(s[i])) ++i;
    const std::string_view tok = s.substr(start, i - start);

    const std::size_t at = tok.find('@');
    if (at == std::string_view::npos) {
      auto net = parse_net_expr(tok, start);
      if (!net) return fail(net.error());
      add_range(list.ranges_, net->lnd->type, std::move(net->nets), NetOnly{});
      continue;
    }
    auto net = parse_net_expr(tok.substr(at + 1), start + at + 1);
    if (!net) return fail(net.error());
    auto addr = parse_addr_range(tok.substr(0, at), start, net->lnd->form);
    if (!addr) return fail(addr.error());
    add_range(list.ranges_, net->lnd->type, std::move(net->nets), std::move(*addr));
  }
  if (list.ranges_.empty()) return fail(ParseError{"expected a NID range", s.size()});
  return list;
}

std::string to_string(const NidList& list) {
  std::string out;
  for (const auto& r : list.ranges()) {
    for (const auto& a : r.addrs) {
      if (!out.empty()) out += ' ';
      if (!std::holds_alternative<NetOnly>(a)) {
        print_addr(out, a);
        out += '@';
      }
      print_net(out, r);
    }
  }
  return out;
}

// ---- legacy textual expansion ------------------------------------------------

namespace {

// One item of a "[...]" group: a literal, or a decimal range.
struct TextItem {
  std::string_view literal;
  bool is_range = false;
  NumRange range;
};

bool digits_only(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool decimal(std::string_view s, std::uint32_t& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

// "lo-hi" or "lo-hi/stride" in decimal, or nothing (the item is a literal).
ParseResult<std::optional<NumRange>> text_range(std::string_view item, std::size_t pos) {
  const std::size_t dash = item.find('-');
  if (dash == std::string_view::npos) return std::optional<NumRange>{};
  const std::size_t slash = item.find('/', dash);
  const std::string_view lo = item.substr(0, dash);
  const bool has_stride = slash != std::string_view::npos;
  const std::string_view hi = item.substr(dash + 1, has_stride ? slash - dash - 1 : item.npos);
  const std::string_view st = has_stride ? item.substr(slash + 1) : std::string_view{};
  if (!digits_only(lo) || !digits_only(hi) || (has_stride && !digits_only(st))) return std::optional<NumRange>{};
  NumRange r;
  if (!decimal(lo, r.lo) || !decimal(hi, r.hi) || (has_stride && !decimal(st, r.stride)))
    return fail(ParseError{"number out of range 0..4294967295", pos});
  if (r.lo > r.hi) return fail(ParseError{"range low bound above high bound", pos});
  if (r.stride == 0) return fail(ParseError{"stride must be at least 1", pos + slash + 1});
  return std::optional<NumRange>{r};
}

}  // namespace

ParseResult<std::vector<std::string>> expand_brackets(std::string_view s, std::size_t limit) {
  // Split into literal text and groups; an empty group list is a plain string.
  struct Part {
    std::string_view text;       // literal text before the group
    std::vector<TextItem> items;  // empty for the trailing text
  };
  std::vector<Part> parts;
  std::uint64_t total = 1;
  const std::uint64_t cap = std::min<std::uint64_t>(limit, std::uint64_t{1} << 62);
  std::size_t i = 0;
  for (;;) {
    const std::size_t open = s.find_first_of("[]", i);
    if (open == std::string_view::npos) {
      parts.push_back({s.substr(i), {}});
      break;
    }
    if (s[open] == ']') return fail(ParseError{"']' without a matching '['", open});
    const std::size_t close = s.find_first_of("[]", open + 1);
    if (close == std::string_view::npos)
      return fail(ParseError{"expected ']' after bracket items", s.size()});
    if (s[close] == '[') return fail(ParseError{"brackets cannot be nested", close});

    Part part{s.substr(i, open - i), {}};
    std::uint64_t count = 0;
    for (std::size_t b = open + 1;;) {
      const std::size_t e = std::min(s.find(',', b), close);
      const std::string_view item = s.substr(b, e - b);
      if (item.empty()) return fail(ParseError{"empty item in brackets", b});
      auto r = text_range(item, b);
      if (!r) return fail(r.error());
      TextItem t{item, r->has_value(), r->value_or(NumRange{})};
      count += t.is_range ? (std::uint64_t{t.range.hi} - t.range.lo) / t.range.stride + 1 : 1;
      part.items.push_back(t);
      if (e == close) break;
      b = e + 1;
    }
    total = mul_capped(total, count, cap);
    parts.push_back(std::move(part));
    i = close + 1;
  }
  if (total > cap) return fail(ParseError{"expansion gives more strings than the limit", 0});

  // The product of the groups, the first varying slowest.
  std::vector<std::string> out{std::string{}};
  for (const auto& p : parts) {
    std::vector<std::string> next;
    next.reserve(out.size());
    for (const auto& prefix : out) {
      if (p.items.empty()) {
        next.push_back(prefix + std::string(p.text));
        continue;
      }
      for (const auto& t : p.items) {
        if (!t.is_range) {
          next.push_back(prefix + std::string(p.text) + std::string(t.literal));
          continue;
        }
        for (std::uint64_t v = t.range.lo; v <= t.range.hi; v += t.range.stride)
          next.push_back(prefix + std::string(p.text) + std::to_string(v));
      }
    }
    out = std::move(next);
  }
  return out;
}

}  // namespace lnetr
