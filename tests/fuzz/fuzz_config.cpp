// Configuration loader: arbitrary text never crashes it; a configuration it
// accepts satisfies the model's invariants; a rejection names the file and a
// position inside the text.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "router/config.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using namespace lnetr;
using namespace lnetr::config;

bool bad_nid(const Nid& n) { return n.is_any() || n.lnd() == LndType::lo; }

// `fragment`: an import fragment, whose CPTs are checked against the
// running router's cores (unless it gives dataplane.cores itself).
void check_accepted(const Config& c, bool fragment) {
  const auto& cores = c.dataplane.cores.value;
  FUZZ_CHECK(!cores.empty() && cores.size() <= 256);
  FUZZ_CHECK(std::set<std::uint32_t>(cores.begin(), cores.end()).size() == cores.size());

  std::set<Net> nets;
  for (const auto& net : c.nets) {
    FUZZ_CHECK(net.net.value.lnd() == LndType::sock || net.net.value.lnd() == LndType::o2ib);
    FUZZ_CHECK(nets.insert(net.net.value).second);  // merged: one entry per net
    std::set<Nid> nids;
    std::set<std::string> ifaces;
    for (const auto& ni : net.nis) {
      FUZZ_CHECK(ni.nid || ni.interface);
      if (ni.nid) {
        FUZZ_CHECK(ni.nid->value.net() == net.net.value);
        FUZZ_CHECK(nids.insert(ni.nid->value).second);
      }
      if (ni.interface) {
        FUZZ_CHECK(!ni.interface->value.empty() && ni.interface->value.size() <= 15);
        FUZZ_CHECK(ifaces.insert(ni.interface->value).second);
      }
      if (!fragment || c.dataplane.cores.given())
        for (std::uint32_t cpt : ni.cpts.value) FUZZ_CHECK(cpt < cores.size());
      FUZZ_CHECK(std::is_sorted(ni.cpts.value.begin(), ni.cpts.value.end()));
      FUZZ_CHECK(ni.tunables.peer_credits.value >= 1 && ni.tunables.peer_credits.value <= 255);
      FUZZ_CHECK(ni.tunables.credits.value >= 1);
      FUZZ_CHECK(ni.lnd_tunables.conns_per_peer.value >= 1 && ni.lnd_tunables.conns_per_peer.value <= 127);
      FUZZ_CHECK(ni.lnd_tunables.timeout.value >= 1);
      FUZZ_CHECK(ni.lnd_tunables.tos.value >= -1 && ni.lnd_tunables.tos.value <= 255);
    }
  }

  std::set<std::pair<Net, Nid>> routes;
  for (const auto& r : c.routes) {
    const int hop = r.hop.value;
    FUZZ_CHECK(hop == kHopUndefined || (hop >= 1 && hop <= 255));
    FUZZ_CHECK(r.net.value.lnd() != LndType::lo);
    FUZZ_CHECK(!bad_nid(r.gateway.value));
    FUZZ_CHECK(r.gateway.value.net() != r.net.value);
    FUZZ_CHECK(!nets.count(r.net.value));
    FUZZ_CHECK(routes.insert({r.net.value, r.gateway.value}).second);
    FUZZ_CHECK(r.gateway.given() && r.net.given());
  }

  for (const auto& p : c.peers) {
    FUZZ_CHECK(!bad_nid(p.primary_nid.value));
    for (const auto& ni : p.peer_nis) FUZZ_CHECK(!bad_nid(ni.value));
  }

  FUZZ_CHECK(c.buffers.tiny.value > 0 && c.buffers.small.value > 0 && c.buffers.large.value > 0);
  const auto& g = c.global;
  FUZZ_CHECK(g.max_interfaces.value >= 16);
  FUZZ_CHECK(g.retry_count.value < g.transaction_timeout.value);
  FUZZ_CHECK(g.health_sensitivity.value <= 1000 && g.router_sensitivity.value <= 100);
  FUZZ_CHECK(g.response_tracking.value <= 3);
  const auto& s = c.dataplane.socklnd;
  FUZZ_CHECK(s.max_reconnectms.value >= s.min_reconnectms.value);
  FUZZ_CHECK(c.dataplane.accept_port.value >= 1);
  FUZZ_CHECK(!c.dataplane.control_socket.value.empty());
  (void)c.dataplane.effective_main_core(0);

  std::set<std::string> port_names, devices;
  std::set<IpAddr> addresses;
  for (const auto& p : c.dataplane.ports) {
    const std::string& name = p.name.value;
    FUZZ_CHECK(!name.empty() && name.size() <= 15);
    FUZZ_CHECK(std::all_of(name.begin(), name.end(), [](char ch) {
      return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
             ch == '.' || ch == '-';
    }));
    FUZZ_CHECK(port_names.insert(name).second);
    const std::string& dev = p.device.value;
    FUZZ_CHECK(!dev.empty() && dev[0] != ',' && dev.find_first_of(" \t\r\n\v\f") == std::string::npos);
    FUZZ_CHECK(devices.insert(dev.substr(0, dev.find(','))).second);
    if (p.address.value.is_v4()) {
      FUZZ_CHECK(p.prefix_len.value >= 1 && p.prefix_len.value <= 30);
      const std::uint32_t host = p.address.value.v4_host() & (0xffffffffu >> p.prefix_len.value);
      FUZZ_CHECK(host != 0 && host != (0xffffffffu >> p.prefix_len.value));  // not network, not broadcast
    } else {  // a unicast address a NID may have, and an MTU IPv6 takes
      FUZZ_CHECK(p.prefix_len.value >= 1 && p.prefix_len.value <= 127);
      FUZZ_CHECK(!p.address.value.is_unspecified() && !p.address.value.is_multicast_v6());
      FUZZ_CHECK(p.mtu.value >= 1280);
    }
    FUZZ_CHECK(addresses.insert(p.address.value).second);
    FUZZ_CHECK(p.mtu.value >= 576 && p.mtu.value <= 9000);
    FUZZ_CHECK(p.queues.value >= 1);
    if (!fragment || c.dataplane.cores.given()) FUZZ_CHECK(p.queues.value <= cores.size());
    FUZZ_CHECK(!p.vlan.value || (*p.vlan.value >= 1 && *p.vlan.value <= 4094));
    for (const auto* f : {&p.impair.loss, &p.impair.duplicate, &p.impair.reorder})
      FUZZ_CHECK(f->value >= 0.0 && f->value <= 1.0);
    FUZZ_CHECK(p.impair.delay_us.value <= 1000000);
    FUZZ_CHECK(p.name.given() && p.device.given() && p.address.given());
  }
}

void check(std::string_view text, bool fragment) {
  const auto r = load_config(text, "f.yaml", LoadOptions{.fragment = fragment});
  // YAML also breaks lines at a lone CR, NEL, LS and PS: bound by the bytes.
  const auto lines = static_cast<std::uint32_t>(text.size()) + 1;
  if (!r) {
    FUZZ_CHECK(!r.error().empty());
    for (const auto& e : r.error()) {
      FUZZ_CHECK(!e.message.empty());
      FUZZ_CHECK(e.where.file == "f.yaml");
      FUZZ_CHECK(e.where.line <= lines + 1);
      FUZZ_CHECK(!e.to_string().empty());
    }
    return;
  }
  if (!fragment) FUZZ_CHECK(!r->config.nets.empty());
  for (const auto& w : r->warnings) FUZZ_CHECK(w.where.line >= 1 && w.where.line <= lines + 1);
  check_accepted(r->config, fragment);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check(text, false);
  check(text, true);
  return 0;
}
