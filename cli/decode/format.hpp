// Text output of lnetr-decode: one line per PDU (where and what), optional
// detail and field-by-field lines, the socklnd connection list and the
// capture statistics.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/decode/capture.hpp"
#include "cli/decode/describe.hpp"

namespace lnetr::decode {

struct FormatOptions {
  bool fields = false;     // field-by-field lines under each PDU
  bool transport = false;  // also plain RC ACKs (NAKs are always shown)
};

// "frame 12" or "frames 72..84 (10 frames)".
std::string frames_text(const FrameSpan& f);
// The PDU's first line: frames, time, endpoints (and socklnd connection and
// stream bytes), then its summary.
std::string pdu_line(const Pdu& p, const Description& d);
// One field as "+8    02 01 c9 0a 00 00 02 00   kshm_src_nid   0x000200000ac90102 = 10.201.1.2@tcp".
std::string field_line(const Field& f, ByteSpan section_bytes);
std::string connection_line(const SockConnection& c);
std::string stats_text(const CaptureStats& s);

// Prints PDUs as they come, folding runs of RDMA WRITE Middle packets of one
// queue pair into a single line (their data is not LNet's to show).
class PduPrinter {
 public:
  explicit PduPrinter(FormatOptions o) : opts_(o) {}
  // The text for `p` (possibly empty: folded or filtered), after any folded
  // run it ends.
  std::string print(const Pdu& p);
  // The pending folded run, if any.
  std::string flush();

 private:
  struct Run {
    Endpoint src, dst;
    std::uint32_t qp = 0;
    std::uint32_t first = 0, last = 0, packets = 0;
    double time = 0;
    std::size_t bytes = 0;
  };
  FormatOptions opts_;
  std::optional<Run> run_;
};

}  // namespace lnetr::decode
