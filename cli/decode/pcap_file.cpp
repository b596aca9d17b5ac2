#include "cli/decode/pcap_file.hpp"

#include <pcap/pcap.h>

namespace lnetr::decode {

std::unique_ptr<PcapFile> PcapFile::open(const std::string& path, std::string& error) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, errbuf);
  if (!p) {
    error = errbuf;
    return nullptr;
  }
  return std::unique_ptr<PcapFile>(new PcapFile(p));
}

PcapFile::~PcapFile() { pcap_close(pcap_); }

std::optional<LinkType> PcapFile::link(std::string& error) const {
  const int dlt = pcap_datalink(pcap_);
  switch (dlt) {
    case DLT_EN10MB: return LinkType::ethernet;
    case DLT_LINUX_SLL: return LinkType::linux_sll;
#ifdef DLT_LINUX_SLL2
    case DLT_LINUX_SLL2: return LinkType::linux_sll2;
#endif
    case DLT_RAW:
#ifdef DLT_IPV4
    case DLT_IPV4:
    case DLT_IPV6:
#endif
      return LinkType::raw_ip;
    default: {
      const char* name = pcap_datalink_val_to_name(dlt);
      error = "unsupported link type " + std::string(name ? name : std::to_string(dlt)) +
              " (lnetr-decode reads Ethernet, Linux cooked and raw IP captures)";
      return std::nullopt;
    }
  }
}

bool PcapFile::next(CapturedFrame& frame, std::string& error) {
  pcap_pkthdr* hdr = nullptr;
  const u_char* data = nullptr;
  const int rc = pcap_next_ex(pcap_, &hdr, &data);
  if (rc == PCAP_ERROR_BREAK) return false;  // end of file
  if (rc != 1) {
    error = pcap_geterr(pcap_);
    return false;
  }
  // With nanosecond precision requested, tv_usec holds nanoseconds.
  constexpr std::int64_t kNsPerSecond = 1'000'000'000;
  frame.time_ns = std::int64_t{hdr->ts.tv_sec} * kNsPerSecond + hdr->ts.tv_usec;
  frame.data = ByteSpan(data, hdr->caplen);
  return true;
}

}  // namespace lnetr::decode
