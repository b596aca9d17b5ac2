// NID lists and legacy bracket expansion: parsing never crashes, and a list
// that parses prints to text that parses back to the same list; expansion and
// membership agree on NIDs at the edges of every range.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "router/nidrange.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using namespace lnetr;

constexpr std::size_t kExpandLimit = 512;
constexpr std::size_t kMaxProbes = 4096;

// Values at and next to the edges of each item of `e`, within 0..max.
std::vector<std::uint32_t> edges(const NumExpr& e, std::uint32_t max) {
  std::vector<std::uint32_t> out;
  for (const auto& r : e.items) {
    const std::uint64_t lo = r.lo, hi = r.hi, st = r.stride;
    for (std::uint64_t v : {lo - 1, lo, lo + 1, lo + st, hi - 1, hi, hi + 1})
      if (v <= max) out.push_back(static_cast<std::uint32_t>(v));
    if (out.size() > 64) break;
  }
  return out;
}

Nid ipv6_nid(Net net, const std::array<std::uint8_t, 16>& a) {
  Nid n;
  n.size = 12;
  n.type = net.type;
  n.number = net.number;
  n.addr = a;
  return n;
}

// NIDs inside and just outside the address ranges of `r`, on nets in and
// next to its net expression, with its LND type and a neighbouring one.
void add_probes(const NidRange& r, std::vector<Nid>& out) {
  const auto type = static_cast<std::uint8_t>(r.lnd);
  for (std::uint8_t t : {type, static_cast<std::uint8_t>(type + 1)}) {
    for (std::uint32_t num : edges(r.nets, 0xffff)) {
      const Net net{t, static_cast<std::uint16_t>(num)};
      for (const auto& a : r.addrs) {
        if (out.size() > kMaxProbes) return;
        if (const auto* m = std::get_if<Ipv4Mask>(&a)) {
          const std::uint32_t host = static_cast<std::uint32_t>((std::uint64_t{1} << (32 - m->len)) - 1);
          const std::uint32_t first = m->network, last = first + host;
          for (std::uint32_t v : {first, first - 1, last, last + 1}) out.push_back(Nid::make(net, v));
          std::array<std::uint8_t, 16> b{};
          b[0] = static_cast<std::uint8_t>(m->network >> 24);
          out.push_back(ipv6_nid(net, b));
        } else if (const auto* m6 = std::get_if<Ipv6Mask>(&a)) {
          out.push_back(ipv6_nid(net, m6->network));
          auto b = m6->network;
          b[15] ^= 1;
          out.push_back(ipv6_nid(net, b));
          b = m6->network;
          const std::size_t bit = m6->len - 1u;  // the last bit inside the prefix
          b[bit / 8] ^= static_cast<std::uint8_t>(0x80u >> (bit % 8));
          out.push_back(ipv6_nid(net, b));
          out.push_back(Nid::make(net, load_be<std::uint32_t>(m6->network.data())));
        } else if (const auto* o = std::get_if<Ipv4Octets>(&a)) {
          // Start from a member (each octet's first lo) and move one octet at a time.
          std::array<std::vector<std::uint32_t>, 4> e;
          std::array<std::uint32_t, 4> base{};
          for (std::size_t k = 0; k < 4; ++k) {
            e[k] = edges(o->octets[k], 255);
            base[k] = o->octets[k].items[0].lo;
          }
          for (std::size_t k = 0; k < 4; ++k) {
            for (std::uint32_t v : e[k]) {
              auto x = base;
              x[k] = v;
              out.push_back(Nid::make(net, (x[0] << 24) | (x[1] << 16) | (x[2] << 8) | x[3]));
            }
          }
        } else if (const auto* n = std::get_if<NumAddr>(&a)) {
          for (std::uint32_t v : edges(n->expr, 0xffffffff)) out.push_back(Nid::make(net, v));
          std::array<std::uint8_t, 16> b{};
          out.push_back(ipv6_nid(net, b));
        } else {
          out.push_back(Nid::make(net, 0x0a000001));
          std::array<std::uint8_t, 16> b{};
          b[0] = 0x20;
          out.push_back(ipv6_nid(net, b));
        }
      }
    }
  }
}

void check_list(std::string_view in) {
  auto parsed = parse_nid_list(in);
  if (!parsed) {
    FUZZ_CHECK(parsed.error().pos <= in.size() && !parsed.error().reason.empty());
    return;
  }
  const NidList& list = *parsed;
  FUZZ_CHECK(!list.ranges().empty());

  const std::string text = to_string(list);
  auto back = parse_nid_list(text);
  FUZZ_CHECK(back.has_value());
  FUZZ_CHECK(*back == list);
  FUZZ_CHECK(to_string(*back) == text);

  auto all = list.expand(kExpandLimit);
  if (all) {
    FUZZ_CHECK(all->size() <= kExpandLimit);
    const auto not_ascending = [](const Nid& a, const Nid& b) { return !(a < b); };
    FUZZ_CHECK(std::adjacent_find(all->begin(), all->end(), not_ascending) == all->end());
    for (const auto& n : *all) FUZZ_CHECK(list.contains(n));
  }

  std::vector<Nid> probes;
  for (const auto& r : list.ranges()) add_probes(r, probes);
  for (const auto& p : probes) {
    const bool in_list = list.contains(p);
    FUZZ_CHECK(in_list == back->contains(p));
    if (all) FUZZ_CHECK(in_list == std::binary_search(all->begin(), all->end(), p));
  }
  FUZZ_CHECK(!list.contains(Nid::any()));
}

void check_brackets(std::string_view in) {
  constexpr std::size_t kLimit = 64;
  auto out = expand_brackets(in, kLimit);
  if (!out) {
    FUZZ_CHECK(out.error().pos <= in.size());
    return;
  }
  FUZZ_CHECK(!out->empty() && out->size() <= kLimit);
  for (const auto& s : *out) FUZZ_CHECK(s.find_first_of("[]") == std::string::npos);
  if (in.find_first_of("[]") == std::string_view::npos) FUZZ_CHECK(out->size() == 1 && (*out)[0] == in);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  check_list(in);
  check_brackets(in);
  return 0;
}
