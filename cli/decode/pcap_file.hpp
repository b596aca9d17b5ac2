// Reading capture files (pcap and pcapng) with libpcap.  The only part of
// lnetr-decode that does I/O; not built for fuzzing.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli/decode/capture.hpp"

struct pcap;

namespace lnetr::decode {

class PcapFile {
 public:
  // Opens `path`; on failure returns nullptr and sets `error`.
  static std::unique_ptr<PcapFile> open(const std::string& path, std::string& error);
  ~PcapFile();
  PcapFile(const PcapFile&) = delete;
  PcapFile& operator=(const PcapFile&) = delete;

  // The capture's link layer, or nothing if lnetr-decode cannot parse it
  // (then `error` says which it is).
  std::optional<LinkType> link(std::string& error) const;

  // The next frame (its data valid until the next call); false at the end
  // of the file or on a read error (then `error` is set).
  bool next(CapturedFrame& frame, std::string& error);

 private:
  explicit PcapFile(pcap* p) noexcept : pcap_(p) {}
  pcap* pcap_;
};

}  // namespace lnetr::decode
