#include "dataplane/setup.hpp"

#include <unistd.h>

#include <algorithm>

#include "dataplane/log.hpp"
#include "lnd/socklnd/address.hpp"

namespace lnetr::dp {
namespace {

std::string where(const config::Source& s, const std::string& message) {
  return config::ConfigError{s, message}.to_string();
}

std::uint32_t u32(std::int32_t v) { return v < 0 ? 0 : static_cast<std::uint32_t>(v); }

}  // namespace

SetupResult make_setup(const config::Config& cfg) {
  Setup s;
  std::vector<std::string> errors;
  const auto& dp = cfg.dataplane;

  for (const config::PortConfig& p : dp.ports) {
    PortSetup ps;
    ps.name = p.name.value;
    ps.device = p.device.value;
    ps.ip = p.address.value;
    ps.prefix_len = p.prefix_len.value;
    ps.mtu = static_cast<std::uint16_t>(p.mtu.value);
    ps.queues = static_cast<std::uint16_t>(p.queues.value);
    ps.vlan = p.vlan.value;
    ps.zero_copy = p.zero_copy.value;
    if (p.tso.given()) ps.tso = p.tso.value;
    if (p.lro.given()) ps.lro = p.lro.value;
    ps.impair = {p.impair.seed.value, p.impair.loss.value, p.impair.duplicate.value, p.impair.reorder.value,
                 p.impair.delay_us.value};
    s.ports.push_back(std::move(ps));
  }
  // The NI each port serves (one at most).
  std::vector<const config::NiConfig*> port_ni(dp.ports.size(), nullptr);

  for (const config::NetConfig& net : cfg.nets) {
    for (const config::NiConfig& ni : net.nis) {
      NiSetup n;
      if (ni.interface) n.interface = ni.interface->value;
      for (std::size_t i = 0; ni.interface && i < dp.ports.size(); ++i)
        if (dp.ports[i].name.value == n.interface) n.port = static_cast<int>(i);
      if (n.port >= 0 && net.net.value.lnd() != LndType::sock) {
        port_ni[static_cast<std::size_t>(n.port)] = &ni;  // (one error is enough)
        errors.push_back(where(ni.interface->source, "interface " + n.interface + " names a DPDK port, which serves "
                                                     "tcp nets only; an " + to_string(net.net.value) +
                                                     " NI names the IPoIB or RoCE interface of an RDMA device"));
        continue;
      }
      if (n.port >= 0) {
        // Served by lnetr's own TCP on the port: its NID is the port's
        // address; the kernel interface of that name, if any, is not asked.
        const config::PortConfig& p = dp.ports[static_cast<std::size_t>(n.port)];
        const config::NiConfig*& user = port_ni[static_cast<std::size_t>(n.port)];
        if (user) {
          errors.push_back(where(ni.interface->source, "port " + p.name.value + " already serves the NI at " +
                                                           config::to_string(user->source)));
          continue;
        }
        user = &ni;
        n.nid = make_nid(net.net.value, p.address.value);
        if (ni.nid && ni.nid->value != n.nid) {
          errors.push_back(where(ni.source, "nid " + to_string(ni.nid->value) + " differs from the NID of port " +
                                                p.name.value + ", " + to_string(n.nid) + " (" +
                                                config::to_string(p.address.source) + ")"));
          continue;
        }
      } else if (ni.nid) {
        n.nid = ni.nid->value;
      } else {
        // Its IPv4 address, else an IPv6 one (tcp only: o2ib NIDs are IPv4).
        auto ip = sock::interface_address(n.interface);
        if (ip && !ip->is_v4() && net.net.value.lnd() != LndType::sock) ip.reset();
        if (!ip) {
          errors.push_back(where(ni.interface->source, "interface " + n.interface + " does not exist or has no " +
                                                           (net.net.value.lnd() == LndType::sock ? "IPv4 or IPv6 address"
                                                                                                   : "IPv4 address")));
          continue;
        }
        n.nid = sock::make_nid(net.net.value, *ip);
      }
      if (n.nid.lnd() != LndType::sock && n.nid.lnd() != LndType::o2ib) {
        errors.push_back(where(ni.source, "only tcp and o2ib nets are served by this dataplane, not " +
                                              to_string(n.nid.net())));
        continue;
      }
      if (n.is_o2ib()) {
        const config::LndTunables& l = ni.lnd_tunables;
        o2ib::NiTunables t;
        t.peer_credits = u32(ni.tunables.peer_credits.value);
        t.credits = u32(ni.tunables.credits.value);
        t.peer_credits_hiw = u32(l.peercredits_hiw.value);
        t.concurrent_sends = u32(l.concurrent_sends.value);
        t.ntx = u32(l.ntx.value);
        t.conns_per_peer = u32(l.conns_per_peer.value);
        t.timeout = std::chrono::seconds(l.timeout.value);
        t.tos = l.tos.value;
        n.o2ib = o2ib::effective(t);
      }
      n.peer_credits = u32(ni.tunables.peer_credits.value);
      n.peer_buffer_credits = u32(ni.tunables.peer_buffer_credits.value);
      if (n.peer_buffer_credits == 0) n.peer_buffer_credits = dp.peer_buffer_credits.value;
      n.credits = u32(ni.tunables.credits.value);
      n.peer_timeout = u32(ni.tunables.peer_timeout.value);
      if (!n.is_o2ib()) {
        n.conns_per_peer = u32(ni.lnd_tunables.conns_per_peer.value);
        n.sock_timeout = std::chrono::seconds(ni.lnd_tunables.timeout.value);
      }
      if (!n.is_o2ib()) n.tos = ni.lnd_tunables.tos.value;
      // o2iblnd clamps peer_credits to 8..255 (and at most credits), and
      // LNet's peer credits are those in force.
      if (n.is_o2ib()) n.peer_credits = n.o2ib.peer_credits;
      s.nis.push_back(n);
    }
  }
  // A port no NI names is opened and idle (it answers ARP and ping on its
  // address) until lnetrctl net add names it.
  // A connection lives in the worker whose queue receives its packets:
  // queue q of a port is polled by the worker of its NI's q-th CPT (CPT q
  // without a list), and a peer's frames are steered to the queue its
  // address hashes to (RSS on the device where it can, in software
  // otherwise), as Placement places the peer.
  s.placement = config::placement(cfg);
  for (const config::NetConfig& net : cfg.nets)
    for (const config::NiConfig& ni : net.nis)
      if (const config::PortConfig* p = config::port_of(cfg, ni)) {
        PortSetup& ps = s.ports[static_cast<std::size_t>(p - dp.ports.data())];
        const std::vector<std::uint32_t> list = config::cpt_list(ni);
        ps.cpts.clear();
        for (std::uint32_t q = 0; q < ps.queues; ++q) ps.cpts.push_back(q < list.size() ? list[q] : q);
      }
  // Each NI's CPTs in force: its port's queues' CPTs, its net's CPT list
  // (the first NI's: Placement), or all.
  for (NiSetup& n : s.nis) {
    n.cpts.clear();
    if (n.port >= 0) {
      n.cpts = s.ports[static_cast<std::size_t>(n.port)].cpts;
      continue;
    }
    for (const NetCpts& r : s.placement.restricted)
      if (r.net == n.nid.net()) n.cpts = r.cpts;
    if (n.cpts.empty())
      for (std::uint32_t c = 0; c < dp.cores.value.size(); ++c) n.cpts.push_back(c);
  }
  // Placement knows one port per net: a net on several ports (one NI each)
  // is placed by the first one's address and queues, which the others'
  // steering would not follow, unless every one of them has one queue.
  for (std::size_t i = 0; i < s.nis.size(); ++i)
    for (std::size_t k = 0; k < i; ++k) {
      const NiSetup &a = s.nis[k], &b = s.nis[i];
      if (a.port < 0 || b.port < 0 || a.nid.net() != b.nid.net()) continue;
      const config::PortConfig& pa = dp.ports[static_cast<std::size_t>(a.port)];
      const config::PortConfig& pb = dp.ports[static_cast<std::size_t>(b.port)];
      for (const config::PortConfig* p : {&pa, &pb})
        if (p->queues.value > 1)
          errors.push_back(where(p->queues.source, "port " + p->name.value + " has " +
                                                       std::to_string(p->queues.value) + " queues but net " +
                                                       to_string(a.nid.net()) + " is also served by port " +
                                                       (p == &pa ? pb : pa).name.value +
                                                       ": a net on several ports needs one queue on each"));
    }
  for (const config::RouteConfig& r : cfg.routes) {
    RouteSetup rs;
    rs.net = r.net.value;
    rs.gateway = r.gateway.value;
    rs.hops = r.hop.value == config::kHopUndefined ? 0xffffffff : static_cast<std::uint32_t>(r.hop.value);
    rs.priority = r.priority.value;
    s.routes.push_back(rs);
  }
  s.routing = cfg.routing.enable.value;
  s.buffers = {cfg.buffers.tiny.value, cfg.buffers.small.value, cfg.buffers.large.value};

  s.cores.assign(dp.cores.value.begin(), dp.cores.value.end());
  s.main_core = dp.effective_main_core(static_cast<std::uint32_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  s.busy_poll = dp.poll.value == config::PollMode::busy;
  s.hugepages = dp.hugepages.value == config::HugePages::yes  ? Hugepages::yes
                : dp.hugepages.value == config::HugePages::no ? Hugepages::no
                                                              : Hugepages::automatic;
  s.memory_mb = dp.memory_mb.given() ? dp.memory_mb.value : 0;
  s.eal_args = dp.eal_args.value;
  if (dp.dumpcap.value) {
    s.dumpcap_prefix = dp.shm_name.value.substr(1);
    if (s.hugepages == Hugepages::no)
      errors.push_back(where(dp.dumpcap.source, "dpdk-dumpcap attaches through hugepages, and "
                                                "dataplane.hugepages is no"));
  }
  s.control_socket = dp.control_socket.value;
  s.shm_name = dp.shm_name.value;
  s.alive_router_check_interval = std::chrono::seconds(dp.alive_router_check_interval.value);
  s.discovery = cfg.global.discovery.value;
  s.drop_asym_route = cfg.global.drop_asym_route.value;
  s.router_ping_timeout = std::chrono::seconds(dp.router_ping_timeout.value);
  s.max_peers = dp.limits.peers.value;
  s.peer_idle = std::chrono::seconds(dp.limits.peer_idle.value);
  s.transaction_timeout = std::chrono::seconds(cfg.global.transaction_timeout.value);

  sock::Options& o = s.sock;
  const auto& sp = dp.socklnd;
  o.port = dp.accept_port.value;
  o.accept = dp.accept.value == config::AcceptMode::secure ? sock::AcceptMode::secure
             : dp.accept.value == config::AcceptMode::all  ? sock::AcceptMode::all
                                                           : sock::AcceptMode::none;
  o.backlog = static_cast<int>(dp.accept_backlog.value);
  o.conns_per_peer = static_cast<std::uint32_t>(sp.effective_conns_per_peer());
  o.min_bulk = u32(sp.min_bulk.value);
  o.zc_min_payload = std::max<std::uint32_t>(u32(sp.zc_min_payload.value), config::kZcMinPayloadFloor);
  o.timeout = std::chrono::seconds(sp.sock_timeout.value);
  o.keepalive = std::chrono::seconds(sp.keepalive.value);
  o.keepalive_idle = sp.keepalive_idle.value;
  o.keepalive_count = sp.keepalive_count.value;
  o.keepalive_intvl = sp.keepalive_intvl.value;
  o.nagle = sp.nagle.value;
  o.tx_buffer_size = sp.tx_buffer_size.value;
  o.rx_buffer_size = sp.rx_buffer_size.value;
  o.min_reconnect = std::chrono::milliseconds(sp.min_reconnectms.value);
  o.max_reconnect = std::chrono::milliseconds(sp.max_reconnectms.value);
  o.max_peers = s.max_peers;
  o.peer_idle = s.peer_idle;
  o.max_conns = dp.limits.connections.value;
  o.max_handshakes = dp.limits.handshakes.value;
  o.connect_rate = dp.limits.connect_rate.value;

  o2ib::Options& ib = s.o2ib;
  const auto& ip = dp.o2iblnd;
  ib.service = static_cast<std::uint16_t>(ip.service.value);
  ib.keepalive = std::chrono::seconds(ip.keepalive.value);
  ib.cksum = ip.cksum.value;
  ib.retry_count = static_cast<std::uint8_t>(ip.retry_count.value);
  ib.rnr_retry_count = static_cast<std::uint8_t>(ip.rnr_retry_count.value);
  ib.use_privileged_port = ip.use_privileged_port.value;
  ib.require_privileged_port = ip.require_privileged_port.value;
  ib.max_peers = s.max_peers;
  ib.peer_idle = s.peer_idle;
  ib.max_conns = dp.limits.connections.value;
  ib.connreq_rate = dp.limits.connect_rate.value;
  s.o2ib_transfer_keys = ip.remote_keys.value == "transfer";

  if (!errors.empty()) return errors;
  return s;
}

SetupResult load_setup(const std::string& path) {
  auto loaded = config::load_config_file(path);
  if (!loaded) {
    std::vector<std::string> errors;
    for (const auto& e : loaded.error()) errors.push_back(e.to_string());
    return errors;
  }
  for (const auto& w : loaded->warnings) log_warn("%s", w.to_string().c_str());
  return make_setup(loaded->config);
}

}  // namespace lnetr::dp
