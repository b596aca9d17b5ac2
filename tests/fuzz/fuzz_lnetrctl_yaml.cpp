// lnetrctl's YAML output: any document (fuzz input read as JSON) printed in
// lnetctl's layout reads back, with the same YAML parser the API uses, as
// the same document.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cli/lnetrctl/yaml_out.hpp"
#include "router/yaml_tree.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using Json = lnetr::control::Json;

// Nesting, and the longest key (YAML's implicit keys end at 1024
// characters; lnetr's keys are short names).
std::size_t depth(const Json& j, std::size_t& longest_key) {
  std::size_t d = 0;
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) longest_key = std::max(longest_key, it.key().size());
  if (j.is_structured())
    for (const Json& v : j) d = std::max(d, depth(v, longest_key));
  return d + 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Json doc = Json::parse(text, nullptr, false);
  std::size_t longest_key = 0;
  if (doc.is_discarded() || depth(doc, longest_key) > 64 || longest_key > 1000) return 0;
  const std::string yaml = lnetr::lnetrctl::to_yaml(doc);
  const lnetr::yaml::Tree tree = lnetr::yaml::parse(yaml, "fuzz");
  FUZZ_CHECK(!tree.error);
  FUZZ_CHECK(tree.root);
  FUZZ_CHECK(lnetr::control::json_of(*tree.root) == doc);
  return 0;
}
