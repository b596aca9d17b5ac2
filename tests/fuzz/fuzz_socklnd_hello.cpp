// HELLO of every version: the size oracle converges, and a decoded HELLO
// re-encodes to a HELLO that decodes equal (bytes equal where the layout has
// no ignored fields).
#include <algorithm>

#include "lnd/socklnd/wire.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;
using namespace lnetr::sock;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ByteSpan in(data, size);
  // Feeding the oracle a growing prefix must terminate with a final size.
  std::size_t have = 0;
  for (int step = 0; step < 4; ++step) {
    auto need = hello_bytes_needed(in.first(std::min(have, size)));
    if (!need) break;
    FUZZ_CHECK(*need > 0 && *need <= kHelloV1Size + 4 * kHelloMaxIps);
    if (*need <= have) break;
    have = *need;
  }
  auto h = decode_hello(in);
  if (!h) return 0;
  std::uint8_t out[kHelloV1Size + 4 * kHelloMaxIps];
  auto n = encode_hello(*h, out);
  FUZZ_CHECK(n && *n == hello_size(*h) && *n <= size);
  auto back = decode_hello(ByteSpan(out, *n));
  FUZZ_CHECK(back && *back == *h);
  if (h->version != 1) FUZZ_CHECK(std::equal(out, out + *n, data));  // V1 ignores its padding
  return 0;
}
