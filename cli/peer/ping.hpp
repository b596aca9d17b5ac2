// lnetr-peer's own ping info, and the reading of a pinged node's answer, as
// a non-routing kernel node has and reads them (ping-discovery-health.md §2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "router/nid.hpp"
#include "router/ping_info.hpp"

namespace lnetr::peer {

// NI_STATUS | RTE_DISABLED | MULTI_RAIL | DISCOVERY: what a kernel node with
// discovery on and routing off advertises (v1 capture, frame 18).
inline constexpr std::uint32_t kOwnPingFeatures =
    ping_feature::ni_status | ping_feature::rte_disabled | ping_feature::multi_rail | ping_feature::discovery;
inline constexpr std::uint32_t kOwnPingSequence = 1;

// The ping-info buffer of a node with one NI, `ni`, UP: 0@lo (sequence 1)
// then `ni`, in native byte order.
std::vector<std::uint8_t> own_ping_info(const Nid& ni);

// What `lnetctl ping` shows of an answer.
struct PingSummary {
  std::uint32_t pid = kPidLustre;
  std::uint32_t features = 0;
  std::uint32_t sequence = 0;
  std::vector<PingNi> nis;  // without 0@lo; the primary first
  bool multi_rail() const noexcept { return (features & ping_feature::multi_rail) != 0; }
};
PingSummary summarize(const PingInfo& info);

// "<nid>" or, for a PID other than 12345, "<pid>-<nid>" (as lnetctl prints).
std::string ping_nid_text(std::uint32_t pid, const Nid& nid);

}  // namespace lnetr::peer
