// lnetr-peer's output: YAML documents (the shapes lnetctl prints where one
// exists) and brw's JSON.  Writers build text; nothing here does I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli/peer/latency.hpp"
#include "cli/peer/ping.hpp"

namespace lnetr::peer {

class Endpoint;

// A block-style YAML writer in libyaml's (and so lnetctl's) layout: nested
// maps indented by two spaces, list items ("- ") at their key's indentation.
class Yaml {
 public:
  Yaml& map(std::string_view key);          // "key:" then indent
  Yaml& list(std::string_view key);         // "key:" then items at the same indent
  Yaml& item();                              // "- " (the next key shares the line)
  Yaml& end();                               // back out of map/list/item
  Yaml& kv(std::string_view key, std::string_view value);  // quoted when needed
  Yaml& kv(std::string_view key, const char* value) { return kv(key, std::string_view(value)); }
  Yaml& kv(std::string_view key, std::uint64_t value);
  Yaml& kv(std::string_view key, std::int64_t value);
  Yaml& kv(std::string_view key, int value) { return kv(key, static_cast<std::int64_t>(value)); }
  Yaml& kv(std::string_view key, unsigned value) { return kv(key, static_cast<std::uint64_t>(value)); }
  Yaml& kv(std::string_view key, double value, int decimals);
  Yaml& kv(std::string_view key, bool value);
  Yaml& null(std::string_view key);  // "key:" with no value
  const std::string& str() const noexcept { return out_; }

 private:
  void prefix();
  std::string out_;
  std::vector<int> stack_;  // indentation of each open level
  int indent_ = 0;
  bool pending_item_ = false;
};

// A scalar as YAML needs it: plain if safe, else single-quoted.
std::string yaml_scalar(std::string_view s);
std::string json_string(std::string_view s);
std::string fixed(double v, int decimals);

// One answered ping, in lnetctl's shape plus the round-trip time.
struct PingResult {
  PingSummary summary;
  double rtt_us = 0;
};
// One failed ping: errno and lnetctl's "failed to ping NID: strerror".
struct PingFailure {
  Nid nid;
  int err = 0;  // -errno
};
std::string ping_yaml(const std::vector<PingResult>& ok, const std::vector<PingFailure>& failed);

// Latency keys (µs): min, mean, p50, p90, p99, max.
void latency_yaml(Yaml& y, const LatencyHistogram& h);

// The endpoint's counters: messages and bytes by type both ways, pattern
// errors, drops by reason, connections, gateways.
void stats_yaml(Yaml& y, const Endpoint& ep);

}  // namespace lnetr::peer
