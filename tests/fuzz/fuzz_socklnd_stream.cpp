// A connection's message stream after the handshake, in every version and
// byte order chosen by the first input byte: messages are framed with the
// size oracle, decoded, and their headers re-encode byte for byte.
#include <algorithm>

#include "lnd/socklnd/wire.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;
using namespace lnetr::sock;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint32_t version = 1 + (data[0] & 3);
  const ByteOrder order = (data[0] & 4) ? ByteOrder::big : ByteOrder::little;
  ByteSpan rest(data + 1, size - 1);
  while (!rest.empty()) {
    auto need = message_bytes_needed(rest, version, order);
    if (!need) return 0;
    if (*need > rest.size()) {
      // More bytes would be needed; the decoder must agree it is short.
      auto m = decode_message(rest, version, order);
      FUZZ_CHECK(!m);
      return 0;
    }
    auto m = decode_message(rest.first(*need), version, order);
    if (!m) return 0;
    std::uint8_t out[kMsgHeaderSize + kLnetHeader16Size];
    std::size_t off = 0;
    if (m->sock) {
      FUZZ_CHECK(encode_msg_header(*m->sock, out, order));
      off = kMsgHeaderSize;
      const ZcAck z = zc_ack_of(*m->sock, version);
      FUZZ_CHECK(z.kind != ZcAck::Kind::range || z.first < z.last);
      FUZZ_CHECK(z.kind != ZcAck::Kind::pair || z.first > z.last);
    }
    if (m->lnet) {
      auto n = encode_header(*m->lnet, MutableByteSpan(out).subspan(off), header_form(version));
      FUZZ_CHECK(n);
      off += *n;
      FUZZ_CHECK(off + m->payload.size() == *need);
    }
    FUZZ_CHECK(std::equal(out, out + off, rest.data()));
    rest = rest.subspan(*need);
  }
  return 0;
}
