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
    // The typed views rebuild the union for every type Linux fills completely.
    LnetHeader rebuilt = *h;
    switch (h->type) {
      case MsgType::put: rebuilt.set(h->put()); break;
      case MsgType::get: rebuilt.set(h->get()); break;
      case MsgType::ack: rebuilt.set(h->ack()); break;
      case MsgType::reply: rebuilt.set(h->reply()); break;
      case MsgType::hello: rebuilt.set(h->hello()); break;
    }
    FUZZ_CHECK(rebuilt.put() == h->put() || h->type != MsgType::put);
    FUZZ_CHECK(rebuilt.get() == h->get() || h->type != MsgType::get);
  }
  return 0;
}
