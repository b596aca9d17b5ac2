// lnetr-peer's commands, each a driver of Ops on an open Endpoint.  Each
// writes its YAML document to `out` and returns the process exit status:
// 0 only if everything it did succeeded (server: no pattern error).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "cli/peer/endpoint.hpp"

namespace lnetr::peer {

struct PingArgs {
  Nid nid;
  unsigned count = 1;
  double timeout_s = 1.0;  // lnetctl ping's default
};
int run_ping(Endpoint& ep, const PingArgs& a, std::FILE* out);

struct XferArgs {
  Nid nid;
  bool put = true;  // false: get
  std::uint32_t size = 0;
  std::uint64_t count = 1;
  std::uint32_t offset = 0;
  double timeout_s = 50.0;
  std::optional<std::uint32_t> corrupt;  // test only: flip this payload byte after filling
};
int run_xfer(Endpoint& ep, const XferArgs& a, std::FILE* out);

struct ServerArgs {
  double duration_s = 0;  // 0: until SIGINT/SIGTERM
};
int run_server(Endpoint& ep, const ServerArgs& a, std::FILE* out);

struct BrwArgs {
  Nid nid;
  bool write = false;  // write: PUT + ACK; read: GET + REPLY
  std::uint32_t size = 4096;
  std::vector<std::uint32_t> sizes;  // if given: the sizes of successive operations, in turn
  std::uint64_t count = 0;           // if non-zero: stop after this many operations
  std::uint32_t concurrency = 1;
  double duration_s = 10;
  double warmup_s = 0;  // run this long before the duration, not counted
  double delay_s = 0;   // before any load: serve only, this long (a new link settles)
  double timeout_s = 50.0;
  bool check = true;  // fresh seed and pattern per message, REPLYs verified
  std::string json;   // write the result there too
};
int run_brw(Endpoint& ep, const BrwArgs& a, std::FILE* out);

// Wall-clock-based start of the seeds of this process's test messages.
std::uint64_t seed_base(const Endpoint& ep) noexcept;

}  // namespace lnetr::peer
