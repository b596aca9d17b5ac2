#include "router/nidrange.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/nid.hpp"

namespace lnetr {
namespace {

NidList list(std::string_view s) {
  auto r = parse_nid_list(s);
  EXPECT_TRUE(r) << "'" << s << "': " << (r ? std::string_view{} : r.error().reason);
  return r ? *r : NidList{};
}

ParseError error(std::string_view s) {
  auto r = parse_nid_list(s);
  EXPECT_FALSE(r) << "'" << s << "' parsed as '" << (r ? to_string(*r) : "") << "'";
  return r ? ParseError{} : r.error();
}

using test::nid;

bool has(std::string_view range, std::string_view n) { return list(range).contains(nid(n)); }

std::vector<std::string> expanded(std::string_view s, std::size_t limit = 1000) {
  auto r = list(s).expand(limit);
  EXPECT_TRUE(r) << s << ": " << (r ? std::string_view{} : r.error().reason);
  std::vector<std::string> out;
  if (r)
    for (const auto& n : *r) out.push_back(to_string(n));
  return out;
}

std::string expand_error(std::string_view s, std::size_t limit = 1000) {
  auto r = list(s).expand(limit);
  EXPECT_FALSE(r) << s;
  return r ? std::string{} : std::string(r.error().reason);
}

using Strings = std::vector<std::string>;

// ---- membership ---------------------------------------------------------------

TEST(NidRange, OctetRangeFromSpec) {
  const NidList l = list("192.168.0.[1-8]@tcp");
  EXPECT_TRUE(l.contains(nid("192.168.0.1@tcp")));
  EXPECT_TRUE(l.contains(nid("192.168.0.8@tcp")));
  EXPECT_FALSE(l.contains(nid("192.168.0.0@tcp")));
  EXPECT_FALSE(l.contains(nid("192.168.0.9@tcp")));
  EXPECT_FALSE(l.contains(nid("192.168.1.1@tcp")));
  EXPECT_FALSE(l.contains(nid("192.168.0.1@tcp1")));  // wrong net number
  EXPECT_FALSE(l.contains(nid("192.168.0.1@o2ib")));  // wrong LND type
}

TEST(NidRange, StridedOctetsFromSpec) {
  const NidList l = list("10.1.[1-3].[2-254/2]@o2ib");
  EXPECT_TRUE(l.contains(nid("10.1.1.2@o2ib")));
  EXPECT_TRUE(l.contains(nid("10.1.3.254@o2ib")));
  EXPECT_TRUE(l.contains(nid("10.1.2.100@o2ib")));
  EXPECT_FALSE(l.contains(nid("10.1.2.101@o2ib")));  // off the stride
  EXPECT_FALSE(l.contains(nid("10.1.1.0@o2ib")));    // below lo
  EXPECT_FALSE(l.contains(nid("10.1.1.255@o2ib")));  // above hi
  EXPECT_FALSE(l.contains(nid("10.1.0.2@o2ib")));
  EXPECT_FALSE(l.contains(nid("10.1.4.2@o2ib")));
  EXPECT_FALSE(l.contains(nid("10.1.1.2@tcp")));
}

TEST(NidRange, StarMatchesEveryAddressOfItsNetOnly) {
  const NidList l = list("*@tcp1");
  EXPECT_TRUE(l.contains(nid("1.2.3.4@tcp1")));
  EXPECT_TRUE(l.contains(nid("2001:db8::1@tcp1")));
  EXPECT_FALSE(l.contains(nid("1.2.3.4@tcp")));
  EXPECT_FALSE(l.contains(nid("1.2.3.4@tcp2")));
  EXPECT_FALSE(l.contains(nid("1.2.3.4@o2ib1")));
  EXPECT_FALSE(l.contains(Nid::any()));
}

TEST(NidRange, Ipv4Cidr) {
  const NidList l = list("192.168.1.0/24@tcp");
  EXPECT_TRUE(l.contains(nid("192.168.1.0@tcp")));
  EXPECT_TRUE(l.contains(nid("192.168.1.255@tcp")));
  EXPECT_FALSE(l.contains(nid("192.168.2.0@tcp")));
  EXPECT_FALSE(l.contains(nid("192.168.0.255@tcp")));
  EXPECT_FALSE(l.contains(nid("192.168.1.1@o2ib")));
  // An IPv4 mask never matches a 16-byte NID, even one whose first bytes fit.
  EXPECT_FALSE(l.contains(nid("c0a8:100::1@tcp")));

  EXPECT_TRUE(has("10.0.0.1/32@tcp", "10.0.0.1@tcp"));
  EXPECT_FALSE(has("10.0.0.1/32@tcp", "10.0.0.2@tcp"));
  EXPECT_TRUE(has("128.0.0.0/1@tcp", "255.255.255.255@tcp"));
  EXPECT_FALSE(has("128.0.0.0/1@tcp", "127.255.255.255@tcp"));
}

TEST(NidRange, CidrHostBitsAreCleared) {
  EXPECT_EQ(list("192.168.1.77/24@tcp"), list("192.168.1.0/24@tcp"));
  EXPECT_TRUE(has("192.168.1.77/24@tcp", "192.168.1.3@tcp"));
  EXPECT_EQ(list("2001:db8::1/32@tcp"), list("2001:db8::/32@tcp"));
}

TEST(NidRange, Ipv6Masks) {
  const NidList l = list("2001:db8::/32@tcp");
  EXPECT_TRUE(l.contains(nid("2001:db8::1@tcp")));
  EXPECT_TRUE(l.contains(nid("2001:db8:ffff:ffff::9@tcp")));
  EXPECT_FALSE(l.contains(nid("2001:db9::1@tcp")));
  EXPECT_FALSE(l.contains(nid("2001:db8::1@tcp1")));
  // 32.1.13.184 is 0x20010db8: an IPv6 mask does not match nid4 NIDs.
  EXPECT_FALSE(l.contains(nid("32.1.13.184@tcp")));

  // Without /len an address is /128; a mask may end inside a byte.
  EXPECT_TRUE(has("2001:db8::5@tcp", "2001:db8::5@tcp"));
  EXPECT_FALSE(has("2001:db8::5@tcp", "2001:db8::4@tcp"));
  EXPECT_EQ(list("2001:db8::5@tcp"), list("2001:db8::5/128@tcp"));
  EXPECT_TRUE(has("2001:db8::/31@tcp", "2001:db9::1@tcp"));
  EXPECT_FALSE(has("2001:db8::/31@tcp", "2001:dba::1@tcp"));
}

TEST(NidRange, NumericLnds) {
  const NidList l = list("[100-200]@kfi");
  EXPECT_TRUE(l.contains(nid("100@kfi")));
  EXPECT_TRUE(l.contains(nid("200@kfi")));
  EXPECT_FALSE(l.contains(nid("99@kfi")));
  EXPECT_FALSE(l.contains(nid("201@kfi")));
  EXPECT_FALSE(l.contains(nid("150@kfi1")));
  EXPECT_FALSE(l.contains(nid("150@gni")));

  EXPECT_TRUE(has("7@gni", "7@gni"));
  EXPECT_FALSE(has("7@gni", "8@gni"));
  EXPECT_TRUE(has("[4294967295]@ptlf3", "4294967295@ptlf3"));
  EXPECT_TRUE(has("0@lo", "0@lo"));
  EXPECT_TRUE(has("*@bxi3f", "123@bxi3f"));
  // Numeric ranges match only 4-byte addresses; '*' matches any.
  Nid wide = nid("5@kfi");
  wide.size = 12;
  EXPECT_FALSE(list("[0-4294967295]@kfi").contains(wide));
  EXPECT_TRUE(list("*@kfi").contains(wide));
}

TEST(NidRange, StrideBoundaries) {
  const NidList l = list("[1-10/2]@kfi");
  for (std::uint32_t v = 0; v <= 12; ++v)
    EXPECT_EQ(l.contains(Nid::make(Net{16, 0}, v)), v % 2 == 1 && v <= 9) << v;
  EXPECT_TRUE(has("[2,4]@gni", "4@gni"));
  EXPECT_FALSE(has("[2,4]@gni", "3@gni"));
  EXPECT_EQ(list("1.1.1.[0-255]@tcp"), list("1.1.1.*@tcp"));
  EXPECT_TRUE(has("1.1.1.[0-255]@tcp", "1.1.1.255@tcp"));
}

TEST(NidRange, OctetRangesMatchOnlyIpv4) {
  EXPECT_TRUE(has("*.*.*.*@tcp", "9.9.9.9@tcp"));
  EXPECT_FALSE(has("*.*.*.*@tcp", "2001:db8::1@tcp"));
  EXPECT_TRUE(has("*@tcp", "2001:db8::1@tcp"));
}

TEST(NidRange, AutoBaseNumbers) {
  EXPECT_EQ(list("0x0a.0.0.010@tcp"), list("10.0.0.8@tcp"));
  EXPECT_EQ(list("1.1.1.[0x10-020/0X2]@tcp"), list("1.1.1.[16-16]@tcp"));
  EXPECT_EQ(list("[0xff]@kfi"), list("255@kfi"));
  EXPECT_EQ(list("192.168.0.0/030@tcp"), list("192.168.0.0/24@tcp"));
  // Net numbers after the name are auto-base as well.
  EXPECT_TRUE(has("*@tcp0x2", "1.1.1.1@tcp2"));
  EXPECT_TRUE(has("*@o2ib010", "1.1.1.1@o2ib8"));
  EXPECT_TRUE(has("*@tcp00", "1.1.1.1@tcp"));
  EXPECT_EQ(error("1.1.1.08@tcp").reason, "expected a number (decimal, 0x hex or 0 octal)");
  EXPECT_EQ(error("[0x]@kfi").reason, "expected a number (decimal, 0x hex or 0 octal)");
  EXPECT_EQ(error("[0x100000000]@kfi").reason, "address out of range 0..4294967295");
  EXPECT_EQ(error("[99999999999999999999999]@kfi").reason, "address out of range 0..4294967295");
}

TEST(NidRange, NetRanges) {
  const NidList l = list("*@tcp[1-3]");
  EXPECT_FALSE(l.contains(nid("1.1.1.1@tcp")));
  EXPECT_TRUE(l.contains(nid("1.1.1.1@tcp1")));
  EXPECT_TRUE(l.contains(nid("1.1.1.1@tcp3")));
  EXPECT_FALSE(l.contains(nid("1.1.1.1@tcp4")));

  const NidList n = list("o2ib[0,2]");  // no '@': a net-only range
  EXPECT_TRUE(n.contains(nid("1.2.3.4@o2ib")));
  EXPECT_TRUE(n.contains(nid("1.2.3.4@o2ib2")));
  EXPECT_FALSE(n.contains(nid("1.2.3.4@o2ib1")));
  EXPECT_FALSE(n.contains(nid("1.2.3.4@tcp")));
  EXPECT_TRUE(has("tcp", "2001:db8::1@tcp"));
  EXPECT_TRUE(has("kfi7", "99@kfi7"));
  EXPECT_FALSE(has("kfi7", "99@kfi"));
  EXPECT_TRUE(has("10.0.0.[1-2]@o2ib[1,3-4]", "10.0.0.2@o2ib4"));
  EXPECT_FALSE(has("10.0.0.[1-2]@o2ib[1,3-4]", "10.0.0.2@o2ib2"));
}

TEST(NidRange, ListIsAUnionAndMergesPerNet) {
  const NidList l = list("  1.2.3.4@tcp\t5.6.7.8@tcp0   9.9.9.9@o2ib 1.2.3.4@tcp\n");
  ASSERT_EQ(l.ranges().size(), 2u);
  EXPECT_EQ(l.ranges()[0].lnd, LndType::sock);
  EXPECT_EQ(l.ranges()[0].addrs.size(), 2u);  // the duplicate is dropped
  EXPECT_EQ(l.ranges()[1].lnd, LndType::o2ib);
  EXPECT_TRUE(l.contains(nid("1.2.3.4@tcp")));
  EXPECT_TRUE(l.contains(nid("5.6.7.8@tcp")));
  EXPECT_TRUE(l.contains(nid("9.9.9.9@o2ib")));
  EXPECT_FALSE(l.contains(nid("9.9.9.9@tcp")));
  EXPECT_FALSE(l.contains(nid("1.2.3.4@o2ib")));
  // Different net expressions stay separate ranges.
  EXPECT_EQ(list("*@tcp1 *@tcp[1-2]").ranges().size(), 2u);
}

TEST(NidRange, ParsedStructure) {
  const NidList l = list("[1-10/2,20]@gni3");
  ASSERT_EQ(l.ranges().size(), 1u);
  const NidRange& r = l.ranges()[0];
  EXPECT_EQ(r.lnd, LndType::gni);
  EXPECT_EQ(r.nets, (NumExpr{{{3, 3, 1}}}));
  ASSERT_EQ(r.addrs.size(), 1u);
  const auto* a = std::get_if<NumAddr>(&r.addrs[0]);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->expr, (NumExpr{{{1, 10, 2}, {20, 20, 1}}}));
  // A single value keeps no stride.
  EXPECT_EQ(list("[5-5/3]@kfi"), list("5@kfi"));
}

// ---- expansion ------------------------------------------------------------------

TEST(NidRange, ExpandsInAscendingOrder) {
  EXPECT_EQ(expanded("192.168.0.[2,4,10-20/2]@tcp"),
            (Strings{"192.168.0.2@tcp", "192.168.0.4@tcp", "192.168.0.10@tcp", "192.168.0.12@tcp",
                     "192.168.0.14@tcp", "192.168.0.16@tcp", "192.168.0.18@tcp", "192.168.0.20@tcp"}));
  EXPECT_EQ(expanded("[1-10/2]@kfi"), (Strings{"1@kfi", "3@kfi", "5@kfi", "7@kfi", "9@kfi"}));
  EXPECT_EQ(expanded("[20,2,4]@gni"), (Strings{"2@gni", "4@gni", "20@gni"}));
  EXPECT_EQ(expanded("10.[2,1].0.[1-2]@o2ib"),
            (Strings{"10.1.0.1@o2ib", "10.1.0.2@o2ib", "10.2.0.1@o2ib", "10.2.0.2@o2ib"}));
  // Sorted across ranges: by LND type, then net number, then address.
  EXPECT_EQ(expanded("5@kfi 1.1.1.1@tcp[2,1] 3@gni"),
            (Strings{"1.1.1.1@tcp1", "1.1.1.1@tcp2", "3@gni", "5@kfi"}));
  EXPECT_EQ(expanded("10.0.0.4/30@tcp"),
            (Strings{"10.0.0.4@tcp", "10.0.0.5@tcp", "10.0.0.6@tcp", "10.0.0.7@tcp"}));
  EXPECT_EQ(expanded("2001:db8::/126@tcp"),
            (Strings{"2001:db8::@tcp", "2001:db8::1@tcp", "2001:db8::2@tcp", "2001:db8::3@tcp"}));
  // IPv4 NIDs order before IPv6 ones (the size byte comes first).
  EXPECT_EQ(expanded("2001:db8::1@tcp 9.9.9.9@tcp"), (Strings{"9.9.9.9@tcp", "2001:db8::1@tcp"}));
}

TEST(NidRange, ExpansionDropsOverlaps) {
  EXPECT_EQ(expanded("[1-5,3-7/2]@kfi"), (Strings{"1@kfi", "2@kfi", "3@kfi", "4@kfi", "5@kfi", "7@kfi"}));
  // Six NIDs from two ranges, but only four distinct ones: fits a limit of 4.
  EXPECT_EQ(expanded("1.1.1.[1-4]@tcp 1.1.1.[3-4]@tcp", 4).size(), 4u);
}

TEST(NidRange, ExpansionLimits) {
  EXPECT_EQ(expanded("10.0.0.0/30@tcp", 4).size(), 4u);
  EXPECT_EQ(expand_error("10.0.0.0/30@tcp", 3), "the range holds more NIDs than the limit");
  EXPECT_EQ(expand_error("1.1.1.[1-3]@tcp 1.1.1.[5-6]@tcp", 4), "the list holds more NIDs than the limit");
  EXPECT_EQ(expand_error("1.1.1.1@tcp[0-4]", 4), "the range holds more NIDs than the limit");
  EXPECT_EQ(expand_error("0.0.0.0/1@tcp"), "the range holds more NIDs than the limit");
  EXPECT_EQ(expand_error("2001:db8::/32@tcp"), "the range holds more NIDs than the limit");
  EXPECT_EQ(expand_error("*.*.*.*@tcp"), "the range holds more NIDs than the limit");
  EXPECT_EQ(expand_error("[0-4294967295]@kfi"), "the range holds more NIDs than the limit");
  EXPECT_EQ(expand_error("*@tcp"), "'*' stands for every address on a net and cannot be listed");
  EXPECT_EQ(expand_error("1.1.1.1@tcp tcp1"), "a net-only range names no addresses to list");
  EXPECT_EQ(expand_error("1@kfi", 0), "the range holds more NIDs than the limit");
}

// ---- printing -------------------------------------------------------------------

TEST(NidRange, CanonicalTextRoundTrips) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"192.168.0.[1-8]@tcp", "192.168.0.[1-8]@tcp"},
      {"10.1.[1-3].[2-254/2]@o2ib", "10.1.[1-3].[2-254/2]@o2ib"},
      {"*@tcp1", "*@tcp1"},
      {"192.168.1.0/24@tcp", "192.168.1.0/24@tcp"},
      {"2001:DB8::/32@tcp", "2001:db8::/32@tcp"},
      {"2001:db8::7/128@tcp", "2001:db8::7@tcp"},
      {"[100-200]@kfi", "[100-200]@kfi"},
      {"1.1.1.[0-255]@tcp0", "1.1.1.*@tcp"},
      {"[0x10,020,3-3]@gni", "[16,16,3]@gni"},
      {"[0-4294967295]@kfi", "[0-4294967295]@kfi"},
      {"[7]@kfi", "7@kfi"},
      {"o2ib[0,2] tcp", "o2ib[0,2] tcp"},
      {"*@tcp[3] o2ib[0-0]", "*@tcp3 o2ib"},
      {"1.1.1.1@tcp 2.2.2.2@o2ib 3.3.3.3@tcp", "1.1.1.1@tcp 3.3.3.3@tcp 2.2.2.2@o2ib"},
      {"0@lo *@lo", "0@lo *@lo"},
  };
  for (const auto& [in, canonical] : cases) {
    const NidList l = list(in);
    EXPECT_EQ(to_string(l), canonical) << in;
    EXPECT_EQ(list(to_string(l)), l) << in;
  }
}

// ---- errors ---------------------------------------------------------------------

TEST(NidRange, MalformedRanges) {
  struct Case {
    std::string_view in;
    std::string_view reason;
    std::size_t pos;
  };
  const Case cases[] = {
      {"[5-3]@kfi", "range low bound above high bound", 1},
      {"1.2.3.300@tcp", "octet out of range 0..255", 6},
      {"1.2.3.[1-300]@tcp", "octet out of range 0..255", 9},
      {"[1-5/0]@kfi", "stride must be at least 1", 5},
      {"1.2.3.[]@tcp", "empty brackets: expected a number", 7},
      {"1.2.3.[1-4@tcp", "expected ']' after range", 10},
      {"1.2.3.[1-4;5]@tcp", "expected ',' or ']' after range", 10},
      {"1.2.3.[1,]@tcp", "expected a number", 9},
      {"1.2.3.4.5@tcp", "unexpected characters after address range", 7},
      {"1.2.3.4x@tcp", "expected a number (decimal, 0x hex or 0 octal)", 6},
      {"[1-3]x@kfi", "unexpected characters after address range", 5},
      {"1.2.3@tcp", "expected four octets a.b.c.d", 5},
      {"1.2.3.1-5@tcp", "a range must be in brackets, as in [lo-hi]", 7},
      {"1.2.3.4@foo", "unknown network type", 8},
      {"foo", "unknown network type", 0},
      {"1.1.1.1@tcp bar", "unknown network type", 12},
      {"*@tcp*[1-2]", "'*' cannot precede '[' in a network", 5},
      {"*[1-2]", "'*' cannot precede '[' in a network", 0},
      {"*@tcp*", "'*' is not allowed in a network", 5},
      {"*@tcp1x", "expected a number (decimal, 0x hex or 0 octal)", 5},
      {"*@tcp[1-2]x", "unexpected characters after network", 10},
      {"*@tcp65536", "network number out of range 0..65535", 5},
      {"0@lo1", "network lo takes no number", 4},
      {"1.2.3.4@", "expected a network name after '@'", 8},
      {"@tcp", "expected an address range before '@'", 0},
      {"", "expected a NID range", 0},
      {"   ", "expected a NID range", 3},
      {"1.2.3.0/0@tcp", "prefix length out of range 1..32", 8},
      {"1.2.3.0/33@tcp", "prefix length out of range 1..32", 8},
      {"1.2.3.0/24x@tcp", "expected a number (decimal, 0x hex or 0 octal)", 8},
      {"1.2.3/24@tcp", "expected an IPv4 network a.b.c.d/len", 5},
      {"1.2.*.0/24@tcp", "expected a number", 4},
      {"2001:db8::/129@tcp", "prefix length out of range 1..128", 11},
      {"2001:zz::@tcp", "expected an IPv6 address", 0},
      {"1::2@kfi", "unexpected characters after address range", 1},
      {"[1-2]@tcp", "expected four octets a.b.c.d", 5},
  };
  for (const auto& c : cases) {
    const ParseError e = error(c.in);
    EXPECT_EQ(e.reason, c.reason) << c.in;
    EXPECT_EQ(e.pos, c.pos) << c.in;
  }
}

// ---- legacy textual expansion --------------------------------------------------

Strings text(std::string_view s, std::size_t limit = 100) {
  auto r = expand_brackets(s, limit);
  EXPECT_TRUE(r) << s << ": " << (r ? std::string_view{} : r.error().reason);
  return r ? *r : Strings{};
}

ParseError text_error(std::string_view s, std::size_t limit = 100) {
  auto r = expand_brackets(s, limit);
  EXPECT_FALSE(r) << s;
  return r ? ParseError{} : r.error();
}

TEST(NidRange, BracketExpansion) {
  EXPECT_EQ(text("o2ib[1-2]"), (Strings{"o2ib1", "o2ib2"}));
  EXPECT_EQ(text("192.168.0.[1-4/3]@tcp"), (Strings{"192.168.0.1@tcp", "192.168.0.4@tcp"}));
  EXPECT_EQ(text("[tcp,o2ib]0"), (Strings{"tcp0", "o2ib0"}));
  EXPECT_EQ(text("a[1,x-y,3-4]b"), (Strings{"a1b", "ax-yb", "a3b", "a4b"}));
  EXPECT_EQ(text("[1-2].[5,6]"), (Strings{"1.5", "1.6", "2.5", "2.6"}));
  EXPECT_EQ(text("[0x1-0x2]"), (Strings{"0x1-0x2"}));  // decimal only: a literal
  EXPECT_EQ(text("[007-8]"), (Strings{"7", "8"}));     // decimal, so no octal
  EXPECT_EQ(text("tcp0"), (Strings{"tcp0"}));
  EXPECT_EQ(text(""), (Strings{""}));
  EXPECT_EQ(text("[1-10]", 10).size(), 10u);
}

TEST(NidRange, BracketExpansionErrors) {
  const std::pair<std::string_view, ParseError> cases[] = {
      {"o2ib[1,,2]", {"empty item in brackets", 7}},
      {"o2ib[]", {"empty item in brackets", 5}},
      {"o2ib[1,]", {"empty item in brackets", 7}},
      {"o2ib[1-2", {"expected ']' after bracket items", 8}},
      {"o2ib1]", {"']' without a matching '['", 5}},
      {"o2ib[[1]]", {"brackets cannot be nested", 5}},
      {"o2ib[3-1]", {"range low bound above high bound", 5}},
      {"o2ib[1-3/0]", {"stride must be at least 1", 9}},
      {"o2ib[1-4294967296]", {"number out of range 0..4294967295", 5}},
  };
  for (const auto& [in, want] : cases) {
    const ParseError e = text_error(in);
    EXPECT_EQ(e.reason, want.reason) << in;
    EXPECT_EQ(e.pos, want.pos) << in;
  }
  EXPECT_EQ(text_error("[1-10]", 9).reason, "expansion gives more strings than the limit");
  EXPECT_EQ(text_error("[0-4294967295][0-4294967295][0-4294967295]", 100).reason,
            "expansion gives more strings than the limit");
}

}  // namespace
}  // namespace lnetr
