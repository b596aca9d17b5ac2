// parse_fault_rule on arbitrary text (a control-socket request's words):
// whatever parses prints back to words that parse to the same rule, and
// the rule then judges a message without fault.
#include <string_view>

#include "router/lnet_fault.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view s(reinterpret_cast<const char*>(data), size);
  const FaultParse p = parse_fault_rule(s);
  FUZZ_CHECK(p.rule.has_value() != !p.error.empty());
  if (!p.rule) return 0;
  const FaultParse again = parse_fault_rule(to_string(*p.rule));
  FUZZ_CHECK(again.rule && *again.rule == *p.rule);
  FaultEngine e(size);
  e.set({*p.rule});
  LnetHeader h;
  h.src_nid = p.rule->src.is_any() ? *parse_nid("10.0.0.1@tcp") : p.rule->src;
  h.dest_nid = p.rule->dst.is_any() ? *parse_nid("10.0.0.2@tcp") : p.rule->dst;
  h.set(PutFields{});
  for (int i = 0; i < 4; ++i) (void)e.judge(h, Nid::any(), i * 1'000'000'000LL);
  return 0;
}
