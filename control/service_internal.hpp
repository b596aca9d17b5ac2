// What the pieces of Service (service.cpp and the commands_*.cpp,
// config_io.cpp, metrics.cpp beside it) share: the request-argument helpers
// every command checks its arguments with, and route and peer helpers used
// by more than one file.  Private to lnetr-control; defined in service.cpp
// unless said.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "control/service.hpp"
#include "dataplane/status.hpp"
#include "router/config.hpp"
#include "router/forward.hpp"
#include "router/route_table.hpp"

namespace lnetr::control {

std::string route_name(const Route& r);

// A configured route's own health_sensitivity, or the global one's mark.
std::uint16_t route_sensitivity(const config::RouteConfig& r);

// ---- request arguments ---------------------------------------------------------

[[noreturn]] void bad(const std::string& descr);

// Only the keys a command knows: a misspelt one must not be ignored.
void only(const Json& args, std::initializer_list<const char*> keys);

std::optional<std::string> opt_text(const Json& args, const char* key);
std::optional<std::int64_t> opt_int(const Json& args, const char* key, std::int64_t lo, std::int64_t hi);
std::optional<Net> opt_net(const Json& args, const char* key);
std::optional<Nid> opt_nid(const Json& args, const char* key);

template <class T>
T required(std::optional<T> v, const char* key) {
  if (!v) bad(std::string("argument '") + key + "' is required");
  return *v;
}

// The items, `sep` between each two.
inline std::string joined(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : std::string(sep)) + i;
  return out;
}

// LNet's lnd_timeout as the kernel derives it from transaction_timeout and
// retry_count (lnetr applies no retry_count: the kernel's default counts).
// (control/commands_global.cpp)
std::uint32_t lnet_lnd_timeout(const config::GlobalConfig& g);

// A CPT list as lnetctl prints it: "[0,1]".  (control/commands_nets.cpp)
std::string cpt_list(const std::vector<std::uint32_t>& cpts);
// A configured NI as lnetctl's YAML gives it: its NID or interface, its
// tunables and CPT list.  (control/config_io.cpp)
Json ni_json(const config::NiConfig& ni);
// Whether the dataplane's NI `s` is the configured NI `ni` of net `net`:
// the same NID, or (given by interface) the same interface on that net.
// (control/config_io.cpp)
bool is_ni(const config::NiConfig& ni, Net net, const status::Ni& s);

// ---- peers -------------------------------------------------------------------------

// A peer's counters summed over the workers that account for it; credits
// from the worker that owns it (its connections' CPT).
// (control/commands_peers.cpp)
std::vector<status::Peer> merged_peers(const status::Status& st, const Placement& placement);

}  // namespace lnetr::control
