// Decode arbitrary bytes as o2iblnd reject private data.  Whatever decodes
// must re-encode (in the byte order it arrived in) to 24 bytes that decode to
// the same value, with one exception by design: a reject that arrived too
// short or from a V1 peer carries no incarnation / parameters, and the
// 24-byte re-encoding of a V2 one then shows them as zeros.  Bytes must be
// identical except ibr_padding (ignored, written 0) and, when the input did
// not carry them, the incarnation and parameters.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "lnd/o2iblnd/wire.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;
using namespace lnetr::o2ib;

namespace {

constexpr std::size_t kPaddingOff = 7;
constexpr std::size_t kIncarnationOff = 8;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto d = decode_reject(ByteSpan(data, size));
  if (!d) return 0;

  const Reject& r = d->rej;
  FUZZ_CHECK(r.magic == kIbMagic || r.magic == kLnetProtoMagic);
  FUZZ_CHECK(r.incarnation.has_value() == r.cp.has_value());
  FUZZ_CHECK(r.incarnation.has_value() == (size >= kRejectSize && r.version > kVersion1));

  std::uint8_t out[kRejectSize];
  const auto n = encode_reject(r, out, d->order);
  FUZZ_CHECK(n.has_value() && *n == kRejectSize);
  FUZZ_CHECK(out[kPaddingOff] == 0);

  const auto again = decode_reject(ByteSpan(out, *n));
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(again->order == d->order);
  Reject expect = r;
  if (!r.incarnation && r.version > kVersion1) {
    expect.incarnation = 0;
    expect.cp = ConnParams{0, 0, 0};
  }
  FUZZ_CHECK(again->rej == expect);

  FUZZ_CHECK(std::memcmp(out, data, kPaddingOff) == 0);
  if (r.incarnation) FUZZ_CHECK(std::memcmp(out + kIncarnationOff, data + kIncarnationOff, kRejectSize - kIncarnationOff) == 0);

  // The other byte order carries the same value.
  std::uint8_t other[kRejectSize];
  FUZZ_CHECK(encode_reject(r, other, swapped(d->order)).has_value());
  const auto flipped = decode_reject(ByteSpan(other, kRejectSize));
  FUZZ_CHECK(flipped.has_value());
  FUZZ_CHECK(flipped->order == swapped(d->order));
  FUZZ_CHECK(flipped->rej == expect);
  return 0;
}
