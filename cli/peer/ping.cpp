#include "cli/peer/ping.hpp"

namespace lnetr::peer {

std::vector<std::uint8_t> own_ping_info(const Nid& ni) {
  const PingNi nis[] = {{ni, kNiStatusUp}};
  PingInfoSpec spec;
  spec.features = kOwnPingFeatures;
  spec.pid = kPidLustre;
  spec.sequence = kOwnPingSequence;
  spec.nis = nis;
  std::vector<std::uint8_t> out(ping_info_encoded_size(spec));
  auto n = encode_ping_info(spec, out);
  out.resize(n ? *n : 0);
  return out;
}

PingSummary summarize(const PingInfo& info) {
  PingSummary s;
  s.pid = info.pid;
  s.features = info.features;
  s.sequence = info.sequence;
  for (const PingNi ni : info) s.nis.push_back(ni);
  return s;
}

std::string ping_nid_text(std::uint32_t pid, const Nid& nid) {
  if (pid == kPidLustre) return to_string(nid);
  return std::to_string(pid) + "-" + to_string(nid);
}

}  // namespace lnetr::peer
