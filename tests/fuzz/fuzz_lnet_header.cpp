// decode_header in both forms; a decoded header re-encodes to the same bytes.
#include <algorithm>

#include "router/lnet_header.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ByteSpan in(data, size);
  for (HeaderForm form : {HeaderForm::nid4, HeaderForm::nid16}) {
    auto h = decode_header(in, form);
    if (!h) continue;
    FUZZ_CHECK(size >= header_size(form));
    std::uint8_t out[kLnetHeader16Size];
    auto n = encode_header(*h, out, form);
    FUZZ_CHECK(n && *n == header_size(form));
    FUZZ_CHECK(std::equal(out, out + *n, data));
    (void)check_header(*h);
    // The typed view of the union, written back with set(), reproduces the
    // bytes it covers and zeroes the ones it leaves unused (as Linux does).
    LnetHeader rebuilt = *h;
    std::size_t covered = kLnetMsgPartSize;
    switch (h->type) {
      case MsgType::put: rebuilt.set(h->put()); break;
      case MsgType::get: rebuilt.set(h->get()); covered = 36; break;
      case MsgType::ack: rebuilt.set(h->ack()); covered = 28; break;
      case MsgType::reply: rebuilt.set(h->reply()); covered = 16; break;
      case MsgType::hello: rebuilt.set(h->hello()); covered = 12; break;
    }
    FUZZ_CHECK(encode_header(rebuilt, out, form));
    const std::size_t msg = header_size(form) - kLnetMsgPartSize;
    FUZZ_CHECK(std::equal(out, out + msg + covered, data));
    FUZZ_CHECK(std::all_of(out + msg + covered, out + header_size(form), [](std::uint8_t b) { return b == 0; }));
  }
  return 0;
}
