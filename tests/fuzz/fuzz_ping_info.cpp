// decode_ping_info on arbitrary bytes; a decoded buffer re-encodes to a
// buffer that decodes to the same NIs, features and sequence.
#include <algorithm>
#include <vector>

#include "router/ping_info.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ByteSpan in(data, size);
  auto need = ping_info_size(in);
  auto pi = decode_ping_info(in);
  if (!pi) {
    if (need) FUZZ_CHECK(pi.error() != WireError::truncated || *need > size);
    return 0;
  }
  FUZZ_CHECK(need && *need == pi->wire_size() && pi->wire_size() <= size);
  std::vector<PingNi> nis(pi->begin(), pi->end());
  FUZZ_CHECK(nis.size() == pi->ni_count());
  const PingInfoSpec spec{pi->features, pi->pid, pi->sequence, nis};
  std::vector<std::uint8_t> out(ping_info_encoded_size(spec));
  auto n = encode_ping_info(spec, out, pi->order);
  if (!n) {
    FUZZ_CHECK(n.error() == WireError::bad_length);  // more nid4 entries than Linux accepts
    return 0;
  }
  auto back = decode_ping_info(out);
  FUZZ_CHECK(back);
  FUZZ_CHECK(back->order == pi->order && back->pid == pi->pid && back->sequence == pi->sequence);
  FUZZ_CHECK((back->features | 0x60) == (pi->features | 0x60));  // large-address bits are derived
  FUZZ_CHECK(back->ni_count() == nis.size());
  // The same NIs; a nid4-compatible NID found among large entries moves to
  // the nid4 entries, so compare without order.
  std::vector<PingNi> again(back->begin(), back->end());
  auto by_nid = [](const PingNi& a, const PingNi& b) { return a.nid < b.nid || (a.nid == b.nid && a.status < b.status); };
  std::sort(nis.begin(), nis.end(), by_nid);
  std::sort(again.begin(), again.end(), by_nid);
  FUZZ_CHECK(again == nis);
  return 0;
}
