// Configuration model: formatting, defaults that need the whole document, and
// the document-level checks.  The YAML side is config_yaml.cpp.
#include "router/config.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <iterator>
#include <map>

namespace lnetr::config {

std::string to_string(const Source& s) {
  std::string out = s.file;
  if (s.from_file()) out += ':' + std::to_string(s.line) + ':' + std::to_string(s.column);
  if (!s.field.empty()) {
    if (!out.empty()) out += ": ";
    out += s.field;
  }
  return out;
}

std::string ConfigError::to_string() const {
  std::string out = config::to_string(where);
  if (!out.empty()) out += ": ";
  out += message;
  return out;
}

std::string_view to_string(PollMode m) noexcept {
  switch (m) {
    case PollMode::busy: return "busy";
    case PollMode::adaptive: return "adaptive";
  }
  return "?";
}

std::string_view to_string(HugePages h) noexcept {
  switch (h) {
    case HugePages::automatic: return "auto";
    case HugePages::yes: return "yes";
    case HugePages::no: return "no";
  }
  return "?";
}

std::string_view to_string(AcceptMode a) noexcept {
  switch (a) {
    case AcceptMode::secure: return "secure";
    case AcceptMode::all: return "all";
    case AcceptMode::none: return "none";
  }
  return "?";
}

std::uint32_t DataplaneConfig::effective_main_core(std::uint32_t online_cpus) const {
  if (main_core.value) return *main_core.value;
  const auto& used = cores.value;
  for (std::uint32_t c = 0; online_cpus == 0 || c < online_cpus; ++c)
    if (std::find(used.begin(), used.end(), c) == used.end()) return c;
  return 0;
}

std::string ControlConfig::readonly_socket_path() const {
  if (!readonly_socket.value.empty()) return readonly_socket.value == "off" ? std::string() : readonly_socket.value;
  const std::string& s = socket.value;
  const std::size_t slash = s.rfind('/');
  const std::size_t dot = s.rfind('.');
  const std::size_t at = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1) ? dot : s.size();
  return s.substr(0, at) + "-ro" + s.substr(at);
}

const NetConfig* Config::find_net(Net net) const noexcept {
  for (const auto& n : nets)
    if (n.net.value == net) return &n;
  return nullptr;
}

namespace {

// "line 5, column 11" for "the first one is at ..." remarks.
std::string position(const Source& s) {
  if (!s.from_file()) return "a default";
  return "line " + std::to_string(s.line) + ", column " + std::to_string(s.column);
}

class Checker {
 public:
  Checker(Config& cfg, const LoadOptions& opt, std::vector<ConfigError>& errors,
          std::vector<ConfigError>& warnings)
      : cfg_(cfg), opt_(opt), errors_(errors), warnings_(warnings) {}

  void run() {
    // Earlier errors (a net that did not parse) would make this one noise.
    const bool clean = errors_.empty();
    merge_nets();
    if (!opt_.fragment && clean && cfg_.nets.empty())
      error(cfg_.net_section, "no net is configured: a router needs at least one net other than lo");
    for (auto& net : cfg_.nets) check_net(net);
    check_routes();
    check_peers();
    check_global();
    check_dataplane();
    check_control();
    check_in_force();
  }

 private:
  Config& cfg_;
  const LoadOptions& opt_;
  std::vector<ConfigError>& errors_;
  std::vector<ConfigError>& warnings_;

  void error(const Source& s, std::string msg) { errors_.push_back({s, std::move(msg)}); }
  void warn(const Source& s, std::string msg) { warnings_.push_back({s, std::move(msg)}); }

  // A net listed twice: lnetctl adds the second entry's NIs to the net.
  void merge_nets() {
    std::vector<NetConfig> merged;
    for (auto& n : cfg_.nets) {
      auto it = std::find_if(merged.begin(), merged.end(),
                             [&](const NetConfig& m) { return m.net.value == n.net.value; });
      if (it == merged.end()) {
        merged.push_back(std::move(n));
        continue;
      }
      warn(n.net.source, "net " + to_string(n.net.value) + " is also listed at " +
                             position(it->net.source) + "; its NIs are added to that net");
      std::move(n.nis.begin(), n.nis.end(), std::back_inserter(it->nis));
    }
    cfg_.nets = std::move(merged);
  }

  void fill_lnd_defaults(const NetConfig& net, LndTunables& t) {
    const auto& sock = cfg_.dataplane.socklnd;
    if (net.net.value.lnd() == LndType::sock) {
      if (!t.conns_per_peer.given() || t.conns_per_peer.value == 0)
        t.conns_per_peer = {sock.effective_conns_per_peer(), sock.conns_per_peer.source};
      if (!t.timeout.given() || t.timeout.value == 0) t.timeout = sock.sock_timeout;
    } else {
      if (t.conns_per_peer.value == 0) t.conns_per_peer.value = 1;
      if (t.timeout.value == 0) t.timeout.value = 50;
    }
  }

  void check_net(NetConfig& net) {
    const std::string net_name = to_string(net.net.value);
    const auto ncpt = static_cast<std::uint32_t>(cfg_.dataplane.cores.value.size());
    std::map<Nid, const Source*> nids;
    std::map<std::string, const Source*> ifaces;
    for (auto& ni : net.nis) {
      fill_lnd_defaults(net, ni.lnd_tunables);
      if (ni.nid) {
        const Nid& nid = ni.nid->value;
        if (nid.is_any() || nid.lnd() == LndType::lo) {
          error(ni.nid->source, "NID " + to_string(nid) + " cannot be a local NI");
        } else if (!nid.is_nid4() && nid.lnd() != LndType::sock) {
          error(ni.nid->source, "NID " + to_string(nid) + ": an IPv6 NID on a " + to_string(nid.net()) +
                                    " net; IPv6 nets are served on tcp only (o2ib carries IPv4 NIDs)");
        } else if (nid.net() != net.net.value) {
          error(ni.nid->source, "NID " + to_string(nid) + " is not on net " + net_name);
        } else if (auto [it, fresh] = nids.emplace(nid, &ni.nid->source); !fresh) {
          error(ni.nid->source, "NID " + to_string(nid) + " is already an NI of net " + net_name + " (" +
                                    position(*it->second) + ")");
        }
      }
      if (ni.interface) {
        if (auto [it, fresh] = ifaces.emplace(ni.interface->value, &ni.interface->source); !fresh)
          error(ni.interface->source, "interface " + ni.interface->value + " already has an NI on net " +
                                          net_name + " (" + position(*it->second) + ")");
      }
      for (std::uint32_t cpt : ni.cpts.value) {
        // A fragment without dataplane.cores is checked against the running
        // router's CPTs by whoever applies it, not against the default.
        if (cpt >= ncpt && !(opt_.fragment && !cfg_.dataplane.cores.given())) {
          error(ni.cpts.source, "CPT " + std::to_string(cpt) + " does not exist: dataplane.cores gives " +
                                    std::to_string(ncpt) + (ncpt == 1 ? " CPT" : " CPTs") + " (0.." +
                                    std::to_string(ncpt - 1) + ")");
          break;
        }
      }
    }
  }

  // The add-route rules of routing-credits.md §1 that do not need the
  // running system.
  void check_routes() {
    std::map<std::pair<Net, Nid>, const Source*> seen;
    for (const auto& r : cfg_.routes) {
      const Net net = r.net.value;
      const Nid& gw = r.gateway.value;
      if (net.lnd() == LndType::lo) {
        error(r.net.source, "a route to net lo is not allowed");
        continue;
      }
      if (gw.is_any() || gw.lnd() == LndType::lo) {
        error(r.gateway.source, "gateway " + to_string(gw) + " is not allowed");
        continue;
      }
      if (gw.net() == net) {
        error(r.gateway.source, "gateway " + to_string(gw) + " is on the remote net " + to_string(net) +
                                    " itself");
        continue;
      }
      if (!gw.is_nid4() && gw.lnd() != LndType::sock) {
        error(r.gateway.source, "gateway " + to_string(gw) + ": an IPv6 NID on a " + to_string(gw.net()) +
                                    " net; IPv6 gateways are reached on tcp nets only");
        continue;
      }
      if (cfg_.find_net(net)) {
        error(r.net.source, "net " + to_string(net) + " is a local net of this router; it cannot be a route's "
                            "remote net");
        continue;
      }
      if (auto [it, fresh] = seen.emplace(std::pair{net, gw}, &r.gateway.source); !fresh) {
        error(r.gateway.source, "duplicate route to " + to_string(net) + " via " + to_string(gw) + " (" +
                                    position(*it->second) + ")");
        continue;
      }
      if (!cfg_.find_net(gw.net()))
        warn(r.gateway.source, "gateway " + to_string(gw) + " is not on a local net; the route is kept "
                               "but unusable until net " + to_string(gw.net()) + " is configured");
    }
  }

  void check_peers() {
    std::map<Nid, const Source*> owner;  // every NID of every peer
    auto check_nid = [&](const Field<Nid>& f) {
      const Nid& nid = f.value;
      if (nid.is_any() || nid.lnd() == LndType::lo) {
        error(f.source, "NID " + to_string(nid) + " cannot be a peer's NID");
      } else if (auto [it, fresh] = owner.emplace(nid, &f.source); !fresh) {
        error(f.source, "NID " + to_string(nid) + " already belongs to a peer (" + position(*it->second) + ")");
      }
    };
    for (const auto& p : cfg_.peers) {
      check_nid(p.primary_nid);
      for (const auto& ni : p.peer_nis)
        if (ni.value != p.primary_nid.value) check_nid(ni);  // exports list the primary again
    }
  }

  void check_global() {
    const auto& g = cfg_.global;
    if (g.retry_count.value >= g.transaction_timeout.value) {
      const auto& where = g.retry_count.given() ? g.retry_count.source : g.transaction_timeout.source;
      error(where, "retry_count (" + std::to_string(g.retry_count.value) + ") must be less than "
                   "transaction_timeout (" + std::to_string(g.transaction_timeout.value) + ")");
    }
  }

  // What the file sets that lnetr does not apply is said by name (values at
  // the kernel's defaults are what lnetr does anyway, and every kernel
  // export lists them): nothing is accepted and silently ignored.
  void check_in_force() {
    // (The global keys lnetr does not apply are warned about by the loader,
    // from the settings table.)
    for (const NetConfig& net : cfg_.nets) {
      for (const NiConfig& ni : net.nis) {
        const auto& cpts = ni.cpts;
        // A net on several ports (one queue each) is placed by its first
        // NI on a port (placement()): each port's queue must be served by
        // the same CPT.  (Not in a fragment without dataplane.cores: a
        // running router's NIs keep the CPTs they have.)
        const auto first_on_port = std::find_if(net.nis.begin(), net.nis.end(),
                                                [&](const NiConfig& n) { return on_port(cfg_, n); });
        auto first_cpt = [](const NiConfig& n) { return n.cpts.value.empty() ? 0u : n.cpts.value.front(); };
        if (first_on_port != net.nis.end() && &ni != &*first_on_port && on_port(cfg_, ni) &&
            first_cpt(ni) != first_cpt(*first_on_port) && !(opt_.fragment && !cfg_.dataplane.cores.given()))
          error(cpts.given() ? cpts.source : ni.interface->source,
                "net " + to_string(net.net.value) + " is also served by port " + first_on_port->interface->value +
                    " from CPT " + std::to_string(first_cpt(*first_on_port)) + ", and here from CPT " +
                    std::to_string(first_cpt(ni)) + ": a net on several ports is served by one CPT");
        // (A fragment without dataplane.cores: applied to a running router,
        // whose NIs keep the CPTs they have.)
        if (!cpts.given() || cpts.value.empty()) continue;
        // (In a fragment without dataplane.cores, applied to a running
        // router, a list other than the NI's in force is warned about by
        // the applier, which knows it.)
        if (opt_.fragment && !cfg_.dataplane.cores.given())
          continue;
        if (const PortConfig* port = port_of(cfg_, ni)) {
          // Queue q of the port is served by the list's q-th CPT.
          const std::vector<std::uint32_t> list = cpt_list(ni);
          const std::uint32_t queues = port->queues.value;
          if (list.size() < queues) {
            error(cpts.source, "port " + port->name.value + " has " + std::to_string(queues) +
                                   " queues but the CPT list names " + std::to_string(list.size()) +
                                   ": queue q is served by the list's q-th CPT");
          } else if (list.size() > queues) {
            std::string unused;
            for (std::size_t q = queues; q < list.size(); ++q)
              unused += (unused.empty() ? "" : ", ") + std::to_string(list[q]);
            const bool one = list.size() - queues == 1;
            warn(cpts.source, "CPT list is not wholly in force: port " + port->name.value + " has " +
                                  std::to_string(queues) + (queues == 1 ? " queue" : " queues") +
                                  ", queue q served by the list's q-th CPT; " + (one ? "CPT " : "CPTs ") + unused +
                                  (one ? " serves" : " serve") + " none of its peers");
          }
        } else if (&ni != &net.nis.front() && cpt_list(ni) != cpt_list(net.nis.front()))
          warn(cpts.source, "CPT list is not in force: lnetr reaches a net's peers through its first NI, whose "
                            "CPT list places them");
      }
    }
    if (!cfg_.peers.empty())
      warn(cfg_.peers.front().source, "peer: configured peers are not used: lnetr learns its peers' NIs from "
                                      "their messages, pings and pushes");
  }

  void check_control() {
    const auto& c = cfg_.control;
    if (c.readonly_socket_path() == c.socket.value)
      error(c.readonly_socket.given() ? c.readonly_socket.source : c.socket.source,
            "the read-only socket must not be the management socket (" + c.socket.value + ")");
    // Management and LNet on separate interfaces: the firewall opens each
    // only to its own traffic.
    const std::string& mgmt = c.management_interface.value;
    if (!mgmt.empty())
      for (const NetConfig& net : cfg_.nets)
        for (const NiConfig& ni : net.nis)
          if (ni.interface && ni.interface->value == mgmt)
            error(c.management_interface.source, "management_interface " + mgmt + " is also the interface of an NI on " +
                                                     to_string(net.net.value) + ": management needs an interface of its own");
  }

  void check_dataplane() {
    const auto& d = cfg_.dataplane;
    if (d.main_core.value) {
      const auto& cores = d.cores.value;
      auto it = std::find(cores.begin(), cores.end(), *d.main_core.value);
      if (it != cores.end())
        warn(d.main_core.source, "core " + std::to_string(*d.main_core.value) + " is also the core of CPT " +
                                     std::to_string(it - cores.begin()) + "'s worker; the two share it");
    }
    const auto& s = d.socklnd;
    if (s.max_reconnectms.value < s.min_reconnectms.value) {
      const auto& where = s.max_reconnectms.given() ? s.max_reconnectms.source : s.min_reconnectms.source;
      error(where, "max_reconnectms (" + std::to_string(s.max_reconnectms.value) +
                       ") must not be less than min_reconnectms (" + std::to_string(s.min_reconnectms.value) + ")");
    }
    if (d.o2iblnd.remote_keys.value == "pool")
      warn(d.o2iblnd.remote_keys.source, "remote_keys: pool hands every connected o2ib peer a key to whole router "
                                         "buffer pools: any of them may RDMA-write into other transfers' buffers "
                                         "at any time (the default, transfer, opens one buffer per transfer)");
    check_ports();
  }

  // dataplane.ports: names, devices and addresses are unique; a port has at
  // most one queue pair per worker.  Which NI a port serves is judged where
  // the NIs are resolved (the dataplane's setup).
  void check_ports() {
    const auto& d = cfg_.dataplane;
    const auto ncpt = static_cast<std::uint32_t>(d.cores.value.size());
    std::map<std::string, const PortConfig*> names, devices;
    std::map<IpAddr, const PortConfig*> addresses;
    for (const PortConfig& p : d.ports) {
      const std::string& name = p.name.value;
      if (auto [it, fresh] = names.emplace(name, &p); !fresh)
        error(p.name.source, "port name " + name + " is already used (" + position(it->second->name.source) + ")");
      // The device without its arguments: "net_af_packet0,iface=veth1" is net_af_packet0.
      const std::string device = p.device.value.substr(0, p.device.value.find(','));
      if (auto [it, fresh] = devices.emplace(device, &p); !fresh)
        error(p.device.source, "device " + device + " is already port " + it->second->name.value + "'s (" +
                                   position(it->second->device.source) + ")");
      if (!p.address.value.is_v4() && p.mtu.value < 1280)
        error(p.mtu.given() ? p.mtu.source : p.address.source,
              "port " + name + " has an IPv6 address: its mtu must be 1280 at least (IPv6's minimum), not " +
                  std::to_string(p.mtu.value));
      if (auto [it, fresh] = addresses.emplace(p.address.value, &p); !fresh)
        error(p.address.source, "address " + to_string(p.address.value) + " is already port " + it->second->name.value +
                                    "'s (" + position(it->second->address.source) + ")");
      // A fragment without dataplane.cores is judged against the running
      // router's CPTs by whoever applies it, not against the default.
      if (p.queues.value > ncpt && !(opt_.fragment && !d.cores.given()))
        error(p.queues.source, "port " + name + " has " + std::to_string(p.queues.value) +
                                   " queues but dataplane.cores gives " + std::to_string(ncpt) +
                                   (ncpt == 1 ? " CPT" : " CPTs") + ": at most one queue per CPT");
    }
  }
};

}  // namespace

void validate(Config& config, const LoadOptions& options, std::vector<ConfigError>& errors,
              std::vector<ConfigError>& warnings) {
  Checker(config, options, errors, warnings).run();
}

LoadResult load_config_file(const std::string& path, const LoadOptions& options) {
  auto fail = [&](int err) {
    return std::vector<ConfigError>{{Source{path, 0, 0, {}}, std::string("cannot read the file: ") + std::strerror(err)}};
  };
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return fail(errno);
  errno = 0;
  std::string text;
  char buf[65536];
  std::size_t n = 0;
  int err = 0;
  try {
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  } catch (const std::bad_alloc&) {
    err = ENOMEM;
  }
  if (!err && std::ferror(f)) err = errno ? errno : EIO;
  std::fclose(f);
  if (err) return fail(err);
  return load_config(text, path, options);
}

const PortConfig* port_of(const Config& cfg, const NiConfig& ni) {
  if (!ni.interface) return nullptr;
  for (const PortConfig& p : cfg.dataplane.ports)
    if (p.name.value == ni.interface->value) return &p;
  return nullptr;
}

bool on_port(const Config& cfg, const NiConfig& ni) { return port_of(cfg, ni) != nullptr; }

Placement placement(const Config& cfg) {
  Placement out;
  for (const NetConfig& net : cfg.nets)
    for (const NiConfig& ni : net.nis)
      if (ni.interface)
        for (const PortConfig& p : cfg.dataplane.ports)
          if (p.name.value == ni.interface->value &&
              std::none_of(out.pinned.begin(), out.pinned.end(),
                           [&](const PortPlacement& pp) { return pp.net == net.net.value; })) {
            std::vector<std::uint32_t> cpts = cpt_list(ni);
            if (cpts.size() > p.queues.value) cpts.resize(p.queues.value);
            out.pinned.push_back({net.net.value, p.address.value, p.queues.value, std::move(cpts)});
          }
  // Linux hashes a peer into the CPT list of the NI it is reached through,
  // in the order written; lnetr reaches a net's peers through its first NI.
  // A net with an NI without a list (or on a DPDK port, whose queues
  // decide) is served by every CPT.
  for (const NetConfig& net : cfg.nets) {
    if (net.nis.empty() || std::any_of(net.nis.begin(), net.nis.end(), [&](const NiConfig& ni) {
          return on_port(cfg, ni) || ni.cpts.value.empty();
        }))
      continue;
    out.restricted.push_back({net.net.value, cpt_list(net.nis.front())});
  }
  return out;
}

std::vector<std::uint32_t> cpt_list(const NiConfig& ni) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t c : ni.cpts.value)
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  return out;
}

}  // namespace lnetr::config
