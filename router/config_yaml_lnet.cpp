// The LNet sections of a configuration, as `lnetctl export` writes them:
// net (NIs, tunables, lnd tunables, CPTs), route, routing, buffers, peer and
// global.  The keys with a row in the settings table are parsed from it.

#include <algorithm>
#include <map>

#include "router/config_loader.hpp"

namespace lnetr::config::loader {

// ---- net ----

void Loader::nets(const Node& n, const std::string& path, Config& cfg) {
  each_item(n, path, [&](const Node& item, const std::string& ip) {
    if (item.kind != Node::Kind::mapping) {
      error(item.mark, ip, "expected a mapping with `net type` and `local NI(s)`, got " + describe(item));
      return;
    }
    const Entry* type = find(item, "net type");
    if (!type) {
      error(item.mark, ip, "missing key \"net type\"");
      return;
    }
    NetConfig nc;
    nc.source = src(item.mark, ip);
    if (!net(type->value, join(ip, "net type"), nc.net)) return;
    const LndType lnd = nc.net.value.lnd();
    if (lnd == LndType::lo) return;  // implicit; exports list it with its state
    if (lnd != LndType::sock && lnd != LndType::o2ib) {
      error(type->value.mark, join(ip, "net type"),
            "net " + to_string(nc.net.value) + ": lnetr supports tcp (socklnd) and o2ib (o2iblnd) nets only");
      return;
    }
    std::vector<NiConfig> nis;
    std::vector<std::pair<bool, bool>> own;  // per NI: own tunables, own lnd tunables
    bool have_nis = false;
    each_entry(item, ip, [&](const Entry& e, const std::string& p) {
      if (e.key == "net type") return;
      if (e.key == "local NI(s)") {
        have_nis = true;
        each_item(e.value, p, [&](const Node& ni_node, const std::string& np) { ni(ni_node, np, nc, nis, own); });
      } else if (e.key == "tunables") {
        nc.tunables.emplace();
        tunables(e.value, p, *nc.tunables);
      } else if (e.key == "lnd tunables") {
        nc.lnd_tunables.emplace();
        lnd_tunables(e.value, p, lnd, *nc.lnd_tunables);
      } else {
        unknown(e, p);
      }
    });
    if (!have_nis) warn(item.mark, ip, "net " + to_string(nc.net.value) + " has no `local NI(s)`");
    for (std::size_t i = 0; i < nis.size(); ++i) {
      if (!own[i].first && nc.tunables) nis[i].tunables = *nc.tunables;
      if (!own[i].second && nc.lnd_tunables) nis[i].lnd_tunables = *nc.lnd_tunables;
    }
    nc.nis = std::move(nis);
    cfg.nets.push_back(std::move(nc));
  });
}

void Loader::ni(const Node& n, const std::string& path, const NetConfig& net, std::vector<NiConfig>& out,
                std::vector<std::pair<bool, bool>>& own_blocks) {
  if (n.kind != Node::Kind::mapping) {
    error(n.mark, path, "expected a mapping with `interfaces` or `nid`, got " + describe(n));
    return;
  }
  NiConfig ni;
  ni.source = src(n.mark, path);
  std::vector<Field<std::string>> ifaces;
  bool own_tunables = false, own_lnd = false, ok = true;
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    if (e.key == "nid") {
      Field<Nid> f;
      if (nid(e.value, p, f))
        ni.nid = f;
      else
        ok = false;
    } else if (e.key == "interfaces") {
      std::map<std::int64_t, Field<std::string>> by_index;
      each_entry(e.value, p, [&](const Entry& ie, const std::string& ifp) {
        const auto idx = parse_int(ie.key);
        if (!idx || *idx < 0 || *idx > kMaxInterfaceIndex) {
          error(ie.key_mark, ifp, "expected an interface index 0.." + std::to_string(kMaxInterfaceIndex));
          ok = false;
          return;
        }
        Field<std::string> name;
        if (text(ie.value, ifp, "an interface name", kMaxInterfaceName, name))
          by_index.emplace(*idx, std::move(name));
        else
          ok = false;
      });
      for (auto& [i, f] : by_index) ifaces.push_back(std::move(f));
    } else if (e.key == "tunables") {
      own_tunables = true;
      tunables(e.value, p, ni.tunables);
    } else if (e.key == "lnd tunables") {
      own_lnd = true;
      lnd_tunables(e.value, p, net.net.value.lnd(), ni.lnd_tunables);
    } else if (e.key == "CPT") {
      cpts(e.value, p, ni.cpts);
    } else if (!one_of(e.key, kNiOutputKeys)) {
      unknown(e, p);
    }
  });
  if (!ok) return;
  if (!ni.nid && ifaces.empty()) {
    error(n.mark, path, "an NI needs `interfaces` or a `nid`");
    return;
  }
  if (ni.nid && ifaces.size() > 1) {
    error(ifaces[1].source, "a `nid` names one NI: give at most one interface with it");
    return;
  }
  if (ifaces.empty()) {
    out.push_back(std::move(ni));
    own_blocks.emplace_back(own_tunables, own_lnd);
    return;
  }
  for (auto& f : ifaces) {  // one NI per interface, as lnetctl does
    NiConfig one = ni;
    one.interface = std::move(f);
    out.push_back(std::move(one));
    own_blocks.emplace_back(own_tunables, own_lnd);
  }
}

void Loader::tunables(const Node& n, const std::string& path, Tunables& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) { table_or_unknown(Section::tunables, &out, e, p); });
}

void Loader::lnd_tunables(const Node& n, const std::string& path, LndType lnd, LndTunables& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    const Setting* st = find_setting(Section::lnd_tunables, e.key);
    if (!st) {
      unknown(e, p);
    } else if (st->o2ib_only && lnd != LndType::o2ib) {
      warn(e.key_mark, p, "an o2iblnd tunable; ignored on a tcp net");
    } else if (e.key == "map_on_demand") {
      // Obsolete in ko2iblnd: memory is always registered per transfer,
      // and 0 is forced to 1.  lnetr's keys are per transfer too (memory
      // windows), so any value is what it does; 0 is said.
      Field<std::int32_t> v;
      if (e.value.kind == Node::Kind::scalar && (e.value.text == "true" || e.value.text == "false"))
        set(v, e.value.text == "true" ? 1 : 0, e.value, p);
      else
        integer(e.value, p, 0, 256, v);
      if (v.given() && v.value == 0)
        warn(e.value.mark, p,
             "map_on_demand 0 is taken as 1, as ko2iblnd takes it: memory is opened to a peer per transfer");
    } else {
      table(Section::lnd_tunables, &out, e, p);
    }
  });
}

void Loader::cpts(const Node& n, const std::string& path, Field<std::vector<std::uint32_t>>& out) {
  static constexpr std::string_view kExpected = "a CPT list such as \"[0,1]\" or \"[0-3]\" (CPTs 0..255)";
  if (n.kind == Node::Kind::sequence) {  // CPT: [0, 1] unquoted
    std::vector<std::uint32_t> all;  // in the order written, repeats dropped
    for (const Node& item : n.items) {  // each item a number or a range
      const auto v = item.kind == Node::Kind::scalar && item.text.find_first_of("[],") == std::string::npos
                         ? parse_cpt_list(item.text)
                         : std::nullopt;
      if (!v) {
        error(item.mark, path, "expected " + std::string(kExpected) + ", got " + describe(item));
        return;
      }
      for (std::uint32_t c : *v)
        if (std::find(all.begin(), all.end(), c) == all.end()) all.push_back(c);
    }
    if (all.empty()) {
      error(n.mark, path, "expected " + std::string(kExpected) + ", got an empty list");
      return;
    }
    set(out, std::move(all), n, path);
    return;
  }
  if (!scalar(n, path, kExpected)) return;
  auto list = parse_cpt_list(n.text);
  if (!list) {
    error(n.mark, path, "expected " + std::string(kExpected) + ", got " + describe(n));
    return;
  }
  set(out, std::move(*list), n, path);
}

// ---- route, routing, buffers, peer ----

void Loader::routes(const Node& n, const std::string& path, Config& cfg) {
  each_item(n, path, [&](const Node& item, const std::string& ip) {
    if (item.kind != Node::Kind::mapping) {
      error(item.mark, ip, "expected a mapping with `net` and `gateway`, got " + describe(item));
      return;
    }
    RouteConfig r;
    r.source = src(item.mark, ip);
    std::vector<Nid> gateways;
    const Node* gw_node = nullptr;
    std::string gw_path;
    bool ok = true, have_net = false;
    each_entry(item, ip, [&](const Entry& e, const std::string& p) {
      if (e.key == "net") {
        have_net = true;
        ok = net(e.value, p, r.net) && ok;
      } else if (e.key == "gateway") {
        gw_node = &e.value;
        gw_path = p;
        if (!scalar(e.value, p, "a NID or a NID range")) {
          ok = false;
          return;
        }
        if (auto one = parse_nid(e.value.text)) {
          gateways.push_back(*one);
          return;
        }
        auto list = parse_nid_list(e.value.text);
        if (!list) {
          error(e.value.mark, p, "expected a NID or a NID range such as 10.0.0.[1-4]@tcp, got " +
                                     describe(e.value) + ": " + std::string(list.error().reason));
          ok = false;
          return;
        }
        auto all = list->expand(kMaxGatewayNids);
        if (!all) {
          error(e.value.mark, p, "cannot expand " + describe(e.value) + " into gateways (at most " +
                                     std::to_string(kMaxGatewayNids) + "): " + std::string(all.error().reason));
          ok = false;
          return;
        }
        gateways = std::move(*all);
      } else if (e.key == "hop") {
        static constexpr std::string_view kExpected = "-1 or an integer 1..255";
        if (!scalar(e.value, p, kExpected)) {
          ok = false;
          return;
        }
        const auto v = parse_int(e.value.text);
        if (!v || !(*v == kHopUndefined || (*v >= 1 && *v <= 255))) {
          error(e.value.mark, p, "expected " + std::string(kExpected) + ", got " + describe(e.value));
          ok = false;
          return;
        }
        set(r.hop, static_cast<std::int32_t>(*v), e.value, p);
      } else if (e.key == "priority" || e.key == "health_sensitivity") {
        const std::size_t before = errors_.size();
        table(Section::route, &r, e, p);
        ok = ok && errors_.size() == before;
      } else if (!one_of(e.key, kRouteOutputKeys)) {
        unknown(e, p);
      }
    });
    if (!have_net) error(item.mark, ip, "missing key \"net\"");
    if (!gw_node) error(item.mark, ip, "missing key \"gateway\"");
    if (!ok || !have_net || !gw_node) return;
    for (const Nid& g : gateways) {
      RouteConfig one = r;
      set(one.gateway, g, *gw_node, gw_path);
      cfg.routes.push_back(std::move(one));
    }
  });
}

void Loader::routing_enable(const Node& n, const std::string& path, Field<bool>& out) {
  // 0 disabled, 1 enabled; export also writes the kernel's transient states
  // 2 (stopping) and 3 (starting).
  Field<std::int32_t> v;
  if (integer(n, path, 0, 3, v)) set(out, v.value == 1 || v.value == 3, n, path);
}

void Loader::routing(const Node& n, const std::string& path, RoutingConfig& out) {
  if (n.kind == Node::Kind::sequence) {  // the `routing show` form
    bool have_enable = false;
    each_item(n, path, [&](const Node& item, const std::string& ip) {
      each_entry(item, ip, [&](const Entry& e, const std::string& p) {
        if (e.key == "enable") {
          if (have_enable) {
            error(e.key_mark, p, "`enable` is given twice");
            return;
          }
          have_enable = true;
          routing_enable(e.value, p, out.enable);
        } else if (!(e.key.starts_with("cpt[") && e.key.ends_with("]"))) {  // per-CPT pool state
          unknown(e, p);
        }
      });
    });
    return;
  }
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    if (e.key == "enable")
      routing_enable(e.value, p, out.enable);
    else
      unknown(e, p);
  });
}

void Loader::buffers(const Node& n, const std::string& path, BufferConfig& out) {
  auto total = [&](const Node& v, const std::string& p, Field<std::uint32_t>& f, std::uint32_t dflt) {
    if (integer(v, p, 0, kI32Max, f) && f.value == 0) f.value = dflt;  // 0: the default
  };
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    if (e.key == "tiny")
      total(e.value, p, out.tiny, BufferConfig::kDefaultTiny);
    else if (e.key == "small")
      total(e.value, p, out.small, BufferConfig::kDefaultSmall);
    else if (e.key == "large")
      total(e.value, p, out.large, BufferConfig::kDefaultLarge);
    else
      unknown(e, p);
  });
}

void Loader::peers(const Node& n, const std::string& path, Config& cfg) {
  each_item(n, path, [&](const Node& item, const std::string& ip) {
    if (item.kind != Node::Kind::mapping) {
      error(item.mark, ip, "expected a mapping with `primary nid` and `peer ni`, got " + describe(item));
      return;
    }
    PeerConfig peer;
    peer.source = src(item.mark, ip);
    bool ok = true, have_primary = false;
    each_entry(item, ip, [&](const Entry& e, const std::string& p) {
      if (e.key == "primary nid") {
        have_primary = true;
        ok = nid(e.value, p, peer.primary_nid) && ok;
      } else if (e.key == "Multi-Rail") {
        const Node& v = e.value;
        if (v.kind == Node::Kind::scalar && (v.text == "True" || v.text == "true"))
          set(peer.multi_rail, true, v, p);
        else if (v.kind == Node::Kind::scalar && (v.text == "False" || v.text == "false"))
          set(peer.multi_rail, false, v, p);
        else {
          error(v.mark, p, "expected True or False, got " + describe(v));
          ok = false;
        }
      } else if (e.key == "peer ni") {
        each_item(e.value, p, [&](const Node& ni_node, const std::string& np) {
          if (ni_node.kind != Node::Kind::mapping) {
            error(ni_node.mark, np, "expected a mapping with `nid`, got " + describe(ni_node));
            ok = false;
            return;
          }
          bool have_nid = false;
          each_entry(ni_node, np, [&](const Entry& f, const std::string& q) {
            if (f.key == "nid") {
              have_nid = true;
              Field<Nid> one;
              if (nid(f.value, q, one))
                peer.peer_nis.push_back(std::move(one));
              else
                ok = false;
            } else if (!one_of(f.key, kPeerNiOutputKeys)) {
              unknown(f, q);
            }
          });
          if (!have_nid) {
            error(ni_node.mark, np, "missing key \"nid\"");
            ok = false;
          }
        });
      } else if (e.key != "peer state") {
        unknown(e, p);
      }
    });
    if (!ok) return;
    if (!have_primary) {  // lnetctl peer add: the first NID is the primary
      if (peer.peer_nis.empty()) {
        error(item.mark, ip, "missing key \"primary nid\"");
        return;
      }
      peer.primary_nid = peer.peer_nis.front();
    }
    cfg.peers.push_back(std::move(peer));
  });
}

// ---- global, dataplane ----

void Loader::global(const Node& n, const std::string& path, GlobalConfig& out) {
  bool have_max = false;
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    const bool max = e.key == "max_interfaces" || e.key == "max_intf";  // max_intf: its old name
    if (max && have_max) {
      error(e.key_mark, p, "max_interfaces is given twice (max_intf is its old name)");
      return;
    }
    have_max = have_max || max;
    if (!table(Section::global, &out, e, p, max ? "max_interfaces" : std::string_view(e.key))) unknown(e, p);
  });
}

}  // namespace lnetr::config::loader
