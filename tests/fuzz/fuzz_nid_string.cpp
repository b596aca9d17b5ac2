// parse_nid / parse_net / parse_process_id on arbitrary text; whatever parses
// must print back to text that parses to the same value.
#include <string_view>

#include "router/nid.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view s(reinterpret_cast<const char*>(data), size);
  if (auto n = parse_nid(s)) {
    auto again = parse_nid(to_string(*n));
    FUZZ_CHECK(again && *again == *n);
    if (n->fits_nid4()) FUZZ_CHECK(Nid::from_nid4(n->to_nid4()) == *n || n->is_any());
    std::uint8_t wire[Nid::kWireSize];
    encode_nid20(*n, wire);
    auto back = decode_nid20(wire);
    FUZZ_CHECK(back && *back == *n);
  } else {
    FUZZ_CHECK(n.error().pos <= s.size());
  }
  if (auto net = parse_net(s)) {
    auto again = parse_net(to_string(*net));
    FUZZ_CHECK(again && *again == *net);
  }
  if (auto id = parse_process_id(s)) {
    auto again = parse_process_id(to_string(*id));
    FUZZ_CHECK(again && *again == *id);
  }
  return 0;
}
