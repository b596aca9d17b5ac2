// The acceptor request: size oracle and decoder agree; decoded requests
// re-encode byte for byte.
#include <algorithm>

#include "lnd/socklnd/wire.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;
using namespace lnetr::sock;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ByteSpan in(data, size);
  auto need = acceptor_bytes_needed(in);
  auto r = decode_acceptor_request(in);
  if (!r) {
    FUZZ_CHECK(!need || r.error() != WireError::truncated || *need > size);
    return 0;
  }
  FUZZ_CHECK(need && *need <= size);
  std::uint8_t out[kAcceptorV2Size];
  auto n = encode_acceptor_request(*r, out);
  FUZZ_CHECK(n && *n == *need && std::equal(out, out + *n, data));
  return 0;
}
