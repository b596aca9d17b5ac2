// What lnetr-dataplane runs with, resolved from the configuration file:
// NIDs of the local NIs (interfaces turned into addresses), routes, pools,
// cores and the socklnd tunables.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/tcp/port_config.hpp"
#include "lnd/o2iblnd/engine.hpp"
#include "lnd/socklnd/engine.hpp"
#include "router/config.hpp"
#include "router/forward.hpp"
#include "router/nid.hpp"
#include "router/route_table.hpp"

namespace lnetr::dp {

// A DPDK port, resolved from config::PortConfig: what the TCP/IP library
// opens it with, and which workers poll its queues.
struct PortSetup : tcp::PortConfig {
  std::vector<std::uint32_t> cpts;  // queue q is polled by CPT cpts[q]'s worker (empty: CPT q's)
  // The queue CPT `cpt`'s worker polls, or -1.
  int queue_of(std::uint32_t cpt) const noexcept {
    for (std::uint32_t q = 0; q < queues; ++q)
      if ((q < cpts.size() ? cpts[q] : q) == cpt) return static_cast<int>(q);
    return -1;
  }
};

struct NiSetup {
  Nid nid;
  std::string interface;  // empty if the NI was given by NID only
  int port = -1;          // index into Setup::ports if a DPDK port serves this NI; -1: kernel sockets
  // An o2ib NI: its tunables in force (o2ib::effective() of the file's);
  // the RDMA device is the one behind its address.
  o2ib::NiTunables o2ib;
  bool is_o2ib() const noexcept { return nid.lnd() == LndType::o2ib; }
  std::uint32_t peer_credits = 8;
  std::uint32_t peer_buffer_credits = 0;  // 0: peer_credits
  std::uint32_t credits = 256;            // NI transmit credits
  std::uint32_t peer_timeout = 180;       // s; > 0 enables the peer-down fail-fast
  int tos = -1;  // tcp NIs: `lnd tunables: tos` (IP type of service; -1: the default, 0)
  // tcp NIs: `lnd tunables` conns_per_peer and timeout (dataplane.socklnd's
  // unless the NI gives its own).
  std::uint32_t conns_per_peer = 1;
  std::chrono::seconds sock_timeout{50};
  // The CPTs whose workers serve its peers (Placement): its net's CPT list,
  // its port's queues, or all.
  std::vector<std::uint32_t> cpts;
};

// NI slots of a dataplane: those of the file, and those added at run time
// (lnetrctl net add), as many as a route table has local nets.
inline constexpr std::size_t kMaxNis = kMaxLocalNets;

struct RouteSetup {
  Net net;
  Nid gateway;
  std::uint32_t hops = 0xffffffff;  // undefined
  std::uint32_t priority = 0;
};

enum class Hugepages : std::uint8_t { automatic, yes, no };

struct Setup {
  std::vector<NiSetup> nis;
  std::vector<PortSetup> ports;
  std::vector<RouteSetup> routes;
  bool routing = true;
  std::array<std::uint32_t, kPoolClasses> buffers = kDefaultPoolBuffers;  // totals over CPTs

  std::vector<unsigned> cores{0};  // core of CPT i's worker
  unsigned main_core = 0;
  bool busy_poll = true;
  Hugepages hugepages = Hugepages::automatic;
  unsigned memory_mb = 0;  // 0: what the pools need
  std::vector<std::string> eal_args;
  // dataplane.dumpcap: DPDK's multi-process mode under this file prefix
  // (dpdk-dumpcap --file-prefix=...), and its packet-capture server; empty:
  // off.
  std::string dumpcap_prefix;
  std::string control_socket = "/run/lnetr/dataplane.sock";
  std::string shm_name = "/lnetr";

  sock::Options sock;
  o2ib::Options o2ib;
  bool o2ib_transfer_keys = false;  // dataplane.o2iblnd.remote_keys: transfer
  Placement placement;  // which worker owns a peer
  std::chrono::seconds alive_router_check_interval{60};
  bool discovery = true;  // global.discovery: our ping info says we run it
  bool drop_asym_route = false;  // global.drop_asym_route (SharedState holds the one in force)
  std::chrono::seconds router_ping_timeout{50};
  // global.transaction_timeout: a message waiting longer than this for
  // credits or a router buffer is dropped (DropReason::timeout).
  std::chrono::seconds transaction_timeout{150};
  // dataplane.limits: peers a worker keeps in each of its peer tables, and
  // how long one at rest is kept after its last message.
  std::uint32_t max_peers = 65536;
  std::chrono::seconds peer_idle{180};

  std::uint32_t ncpts() const noexcept { return static_cast<std::uint32_t>(cores.size()); }
};

// Everything that went wrong turning a configuration into a Setup, one
// line each ("file:line:column: field: message").
class [[nodiscard]] SetupResult {
 public:
  SetupResult(Setup s) : ok_(true), setup_(std::move(s)) {}                 // NOLINT
  SetupResult(std::vector<std::string> e) : ok_(false), errors_(std::move(e)) {}  // NOLINT
  explicit operator bool() const noexcept { return ok_; }
  const Setup& operator*() const { return setup_; }
  const Setup* operator->() const { return &setup_; }
  const std::vector<std::string>& error() const { return errors_; }

 private:
  bool ok_;
  Setup setup_;
  std::vector<std::string> errors_;
};

// The Setup of a loaded configuration: interfaces resolved to their IPv4
// addresses (an interface that does not exist or has none is an error
// naming where it was configured).  An interface that names a DPDK port
// (dataplane.ports) is not resolved: the NI takes the port's address and
// NiSetup::port.  Each port serves exactly one NI; an explicit nid that is
// not the port's address is an error.
SetupResult make_setup(const config::Config& cfg);
// Load `path` (warnings go to the log) and make its Setup.
SetupResult load_setup(const std::string& path);

}  // namespace lnetr::dp
