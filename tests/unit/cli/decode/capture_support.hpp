// Decoding the vector captures with lnetr's decode_core, for the tests.
#pragma once

#include <string>
#include <vector>

#include "cli/decode/capture.hpp"

namespace lnetr::test {

// The vectors directory from LNETR_VECTORS.  Throws (failing the test that
// asked, with the reason) if the variable is not set or the directory is
// not readable: the vector tests must never pass by finding nothing.
std::string vectors_dir();
// vectors_dir() + "/" + file.
std::string vector_path(const std::string& file);

struct DecodedCapture {
  std::vector<decode::Pdu> pdus;
  std::vector<decode::SockConnection> conns;
  decode::CaptureStats stats;
};

// Reads a pcap file and decodes it as lnetr-decode does.  Throws on read errors.
DecodedCapture decode_capture(const std::string& pcap_path);

}  // namespace lnetr::test
