// libFuzzer target for lnetr-decode's decode_core: arbitrary bytes as
// captured frames (one decoder across several frames, so that TCP
// reassembly and RoCE SEND reassembly keep state between them) and as a
// socklnd TCP byte stream fed to the walker in pieces.  Every PDU produced
// is also described, formatted and re-encoded.  Nothing may crash, hang or
// read out of bounds.
//
// Input layout for the frame part: byte 0 picks the link type; then frames,
// each a 2-byte little-endian length and that many bytes (the last one takes
// whatever is left).
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cli/decode/capture.hpp"
#include "cli/decode/describe.hpp"
#include "cli/decode/format.hpp"
#include "cli/decode/sock_walker.hpp"

namespace {

using namespace lnetr;
using namespace lnetr::decode;

constexpr std::array kLinks{LinkType::ethernet, LinkType::raw_ip, LinkType::linux_sll, LinkType::linux_sll2};
constexpr std::size_t kLengthPrefix = 2;

// Everything the tool does with a PDU.
void exercise(const std::vector<Pdu>& pdus) {
  PduPrinter printer(FormatOptions{true, true});
  for (const Pdu& p : pdus) {
    (void)printer.print(p);
    (void)reencode(p);
  }
  (void)printer.flush();
}

void fuzz_frames(ByteSpan in) {
  if (in.empty()) return;
  CaptureDecoder dec(kLinks[in[0] % kLinks.size()]);
  std::vector<Pdu> out;
  ByteSpan rest = in.subspan(1);
  std::int64_t t = 0;
  while (!rest.empty()) {
    std::size_t n = rest.size();
    if (rest.size() > kLengthPrefix) {
      n = std::min<std::size_t>(load_le<std::uint16_t>(rest.data()), rest.size() - kLengthPrefix);
      rest = rest.subspan(kLengthPrefix);
    }
    dec.add_frame({t++, rest.first(n)}, out);
    rest = rest.subspan(n);
  }
  dec.finish(out);
  exercise(out);
  for (const SockConnection& c : dec.connections()) (void)connection_line(c);
  (void)stats_text(dec.stats());
}

// The walker on `in` as one direction's stream, fed in pieces of `piece`
// bytes the way CaptureDecoder feeds it (unconsumed bytes are offered again).
void fuzz_stream(ByteSpan in, Side side, bool from_start, std::size_t piece) {
  SockStreamWalker w(side, from_start);
  std::vector<Pdu> out;
  std::vector<std::uint8_t> pending;
  for (std::size_t at = 0; at < in.size(); at += piece) {
    const ByteSpan next = in.subspan(at, std::min(piece, in.size() - at));
    pending.insert(pending.end(), next.begin(), next.end());
    const std::size_t used = w.walk(pending, false, out);
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(used));
  }
  w.walk(pending, true, out);
  exercise(out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ByteSpan in(data, size);
  fuzz_frames(in);
  // The same bytes as a single frame of each link type.
  for (LinkType link : kLinks) {
    CaptureDecoder dec(link);
    std::vector<Pdu> out;
    dec.add_frame({0, in}, out);
    dec.finish(out);
    exercise(out);
  }
  for (Side side : {Side::connector, Side::acceptor}) {
    fuzz_stream(in, side, true, in.size() + 1);
    fuzz_stream(in, side, true, 7);
    fuzz_stream(in, side, false, 64);
  }
  return 0;
}
