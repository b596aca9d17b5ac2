// Management-API requests: arbitrary text never crashes the parser; what it
// accepts has a command and object args, and a response built from it is
// valid JSON.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "control/request.hpp"
#include "tests/fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = lnetr::control::parse_request(text);
  if (auto* req = std::get_if<lnetr::control::Request>(&r)) {
    FUZZ_CHECK(!req->command.empty());
    FUZZ_CHECK(req->args.is_object());
    const std::string out = lnetr::control::success(req->command, req->args);
    FUZZ_CHECK(!nlohmann::json::parse(out, nullptr, false).is_discarded());
  } else {
    const auto& e = std::get<lnetr::control::RequestError>(r);
    FUZZ_CHECK(e.err > 0 && !e.descr.empty());
    FUZZ_CHECK(!nlohmann::json::parse(lnetr::control::failure("", e.err, e.descr), nullptr, false).is_discarded());
  }
  return 0;
}
