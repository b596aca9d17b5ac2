// Decode arbitrary bytes as an o2iblnd message.  Whatever decodes must
// re-encode (in the byte order it arrived in, checksummed if it was) to bytes
// that decode to the same value; and when the input was canonical -- ibm_nob
// equal to the size of the type's body, i.e. no bytes inside ibm_nob that are
// not part of the value -- the re-encoding must be the input byte for byte
// (the checksum field only if the sender used the signed-char checksum that
// the encoder writes).  The other byte order must give the same value too.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "lnd/o2iblnd/wire.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;
using namespace lnetr::o2ib;

namespace {

constexpr std::size_t kCksumOff = 12;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ByteSpan in(data, size);
  const auto d = decode_msg(in);
  if (!d) return 0;

  // What decode_msg promised about the framing.
  FUZZ_CHECK(d->nob >= kMsgHeaderSize && d->nob <= size && d->nob <= kMaxMsgSize);
  FUZZ_CHECK(body_fits(d->msg.hdr.type, d->msg.body));
  FUZZ_CHECK(!d->msg.hdr.srcnid.is_any());
  if (const auto* im = d->msg.immediate()) {
    FUZZ_CHECK(im->payload.data() == data + kImmediatePayloadOffset);
    FUZZ_CHECK(im->payload.size() == d->nob - kImmediatePayloadOffset);
    FUZZ_CHECK(im->payload.size() == im->hdr.payload_length);
  }
  const std::size_t size_out = wire_size(d->msg);
  FUZZ_CHECK(size_out <= d->nob);

  static std::uint8_t out[kMaxMsgSize];
  const Checksum ck = d->cksum != 0 ? Checksum::on : Checksum::off;
  const auto n = encode_msg(d->msg, out, d->order, ck);
  FUZZ_CHECK(n.has_value());
  FUZZ_CHECK(*n == size_out);

  const auto again = decode_msg(ByteSpan(out, *n));
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(again->msg == d->msg);
  FUZZ_CHECK(again->order == d->order);
  FUZZ_CHECK(again->nob == *n);
  FUZZ_CHECK((again->cksum != 0) == (d->cksum != 0));

  if (d->nob == *n) {
    FUZZ_CHECK(std::memcmp(out, data, kCksumOff) == 0);
    FUZZ_CHECK(std::memcmp(out + kCksumOff + 4, data + kCksumOff + 4, *n - kCksumOff - 4) == 0);
    if (d->cksum == 0 || d->cksum == msg_checksum(in.first(d->nob), CharSign::signed_char))
      FUZZ_CHECK(std::memcmp(out + kCksumOff, data + kCksumOff, 4) == 0);
  }

  // The other byte order carries the same value.
  static std::uint8_t other[kMaxMsgSize];
  const auto m = encode_msg(d->msg, other, swapped(d->order));
  FUZZ_CHECK(m.has_value() && *m == *n);
  const auto flipped = decode_msg(ByteSpan(other, *m));
  FUZZ_CHECK(flipped.has_value());
  FUZZ_CHECK(flipped->order == swapped(d->order));
  FUZZ_CHECK(flipped->msg == d->msg);
  FUZZ_CHECK(flipped->cksum == 0);
  return 0;
}
