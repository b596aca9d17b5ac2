// The YAML side of the configuration: libyaml events -> a small node tree
// with positions -> the model, checking each value where it is read.
// Document-level checks are validate() in config.cpp.
//
// Accepted YAML: one document; anchors are ignored and aliases refused (a
// configuration has no use for them and they make the tree a graph); tags are
// ignored; every scalar is read as text and converted by the field that reads
// it, so `16` and "16" are the same number and `yes` is just a word.
#include <yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "router/config.hpp"
#include "router/nidrange.hpp"
#include "router/yaml_tree.hpp"

namespace lnetr::config {
namespace {

using yaml::Entry;
using yaml::Mark;
using yaml::Node;
using yaml::describe;
using yaml::is_null;

constexpr std::size_t kMaxGatewayNids = 1024;   // one route entry's gateway range
constexpr std::size_t kMaxInterfaceName = 15;   // IFNAMSIZ - 1
constexpr std::size_t kMaxSocketPath = 107;     // sizeof(sun_path) - 1
constexpr std::int64_t kMaxCore = 1023;
constexpr std::size_t kMaxCpts = 256;           // LNet's limit
constexpr std::int64_t kMaxInterfaceIndex = 15; // LNET_INTERFACES_NUM - 1
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kU32Max = std::numeric_limits<std::uint32_t>::max();

// ---- scalars -------------------------------------------------------------------

// A decimal integer: optional '-', digits, nothing else.
std::optional<std::int64_t> parse_int(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  const std::size_t digits = s[0] == '-' ? 1 : 0;
  if (s.size() == digits) return std::nullopt;
  for (std::size_t i = digits; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// A decimal unsigned 64-bit integer: digits only.
std::optional<std::uint64_t> parse_u64(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// A decimal number such as 0, 0.25, 1e-3 (no sign, no hex, no inf or nan).
std::optional<double> parse_decimal(std::string_view s) {
  if (s.empty() || s.size() > 64) return std::nullopt;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+')) return std::nullopt;
  if ((s[0] < '0' || s[0] > '9') && s[0] != '.') return std::nullopt;
  double v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// Exactly four decimal components 0..255, host order.
std::optional<std::uint32_t> parse_ipv4(std::string_view s) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const std::size_t end = i < 3 ? s.find('.') : s.size();
    if (end == std::string_view::npos || end == 0 || end > 3) return std::nullopt;
    const auto octet = parse_int(s.substr(0, end));
    if (!octet || *octet < 0 || *octet > 255) return std::nullopt;
    v = (v << 8) | static_cast<std::uint32_t>(*octet);
    s.remove_prefix(i < 3 ? end + 1 : end);
  }
  return v;
}

std::string ipv4_text(std::uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 0xff) + "." + std::to_string((ip >> 8) & 0xff) +
         "." + std::to_string(ip & 0xff);
}

std::string range_text(std::int64_t lo, std::int64_t hi) {
  if (hi >= kI32Max) return "an integer >= " + std::to_string(lo);
  return "an integer " + std::to_string(lo) + ".." + std::to_string(hi);
}

// "[0,1]", "[0-3]", "0,2", "3": CPT numbers 0..255, ascending and unique.
std::optional<std::vector<std::uint32_t>> parse_cpt_list(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  if (s.empty()) return std::nullopt;
  // In the order written (Linux indexes the list by a NID's hash), repeats
  // dropped.
  std::vector<std::uint32_t> out;
  auto add = [&out](std::uint32_t v) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  while (true) {
    const std::size_t comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    const std::size_t dash = item.find('-');
    const auto lo = parse_int(item.substr(0, dash));
    const auto hi = dash == std::string_view::npos ? lo : parse_int(item.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi >= static_cast<std::int64_t>(kMaxCpts)) return std::nullopt;
    for (std::int64_t v = *lo; v <= *hi; ++v) add(static_cast<std::uint32_t>(v));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

template <class E>
struct EnumName {
  std::string_view name;
  E value;
};

// ---- the loader ---------------------------------------------------------------

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string item_path(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

// NI keys that lnetctl prints and never reads back.
constexpr std::string_view kNiOutputKeys[] = {
    "status", "statistics", "sent_stats", "received_stats", "dropped_stats", "health stats", "dev cpt", "udsp info",
};
constexpr std::string_view kPeerNiOutputKeys[] = {
    "state", "max_ni_tx_credits", "available_tx_credits", "min_tx_credits", "tx_q_num_of_buf",
    "available_rtr_credits", "min_rtr_credits", "refcount", "statistics", "sent_stats", "received_stats",
    "dropped_stats", "health stats", "udsp info",
};
constexpr std::string_view kRouteOutputKeys[] = {"state", "type"};

template <std::size_t N>
bool one_of(std::string_view key, const std::string_view (&keys)[N]) {
  return std::find(std::begin(keys), std::end(keys), key) != std::end(keys);
}

class Loader {
 public:
  Loader(std::string_view file, std::vector<ConfigError>& errors, std::vector<ConfigError>& warnings)
      : file_(file), errors_(errors), warnings_(warnings) {}

  void load(const Node& root, Config& cfg);

 private:
  std::string file_;
  std::vector<ConfigError>& errors_;
  std::vector<ConfigError>& warnings_;

  Source src(Mark m, const std::string& path) const { return Source{file_, m.line, m.column, path}; }
  void error(Mark m, const std::string& path, std::string msg) { errors_.push_back({src(m, path), std::move(msg)}); }
  void error(const Source& s, std::string msg) { errors_.push_back({s, std::move(msg)}); }
  void warn(Mark m, const std::string& path, std::string msg) { warnings_.push_back({src(m, path), std::move(msg)}); }
  void unknown(const Entry& e, const std::string& path) { error(e.key_mark, path, "unknown key"); }

  // Calls f(entry, path) for each entry of a mapping (null: none); reports a
  // non-mapping and repeated keys.
  template <class F>
  void each_entry(const Node& n, const std::string& path, F&& f) {
    if (is_null(n)) return;
    if (n.kind != Node::Kind::mapping) {
      error(n.mark, path, "expected a mapping, got " + describe(n));
      return;
    }
    std::set<std::string_view> seen;
    for (const Entry& e : n.entries) {
      const std::string p = join(path, e.key);
      if (!seen.insert(e.key).second) {
        error(e.key_mark, p, "duplicate key");
        continue;
      }
      f(e, p);
    }
  }

  // Calls f(item, path) for each item of a sequence (null: none).
  template <class F>
  void each_item(const Node& n, const std::string& path, F&& f) {
    if (is_null(n)) return;
    if (n.kind != Node::Kind::sequence) {
      error(n.mark, path, "expected a sequence, got " + describe(n));
      return;
    }
    for (std::size_t i = 0; i < n.items.size(); ++i) f(n.items[i], item_path(path, i));
  }

  const Entry* find(const Node& map, std::string_view key) {
    if (map.kind != Node::Kind::mapping) return nullptr;
    for (const Entry& e : map.entries)
      if (e.key == key) return &e;
    return nullptr;
  }

  bool scalar(const Node& n, const std::string& path, std::string_view expected) {
    if (n.kind == Node::Kind::scalar) return true;
    error(n.mark, path, "expected " + std::string(expected) + ", got " + describe(n));
    return false;
  }

  template <class T>
  void set(Field<T>& out, T v, const Node& n, const std::string& path) {
    out.value = std::move(v);
    out.source = src(n.mark, path);
  }

  template <class T>
  bool integer(const Node& n, const std::string& path, std::int64_t lo, std::int64_t hi, Field<T>& out) {
    const std::string expected = range_text(lo, hi);
    if (!scalar(n, path, expected)) return false;
    const auto v = parse_int(n.text);
    if (!v || *v < lo || *v > hi) {
      error(n.mark, path, "expected " + expected + ", got " + describe(n));
      return false;
    }
    set(out, static_cast<T>(*v), n, path);
    return true;
  }

  // ksocklnd parameters lnetr takes only at their default (what it does
  // regardless): anything else is refused by name, never ignored.
  void only_default(const Entry& e, const std::string& path, bool dflt) {
    Field<bool> v;
    flag(e.value, path, v);
    if (!v.given() || v.value == dflt) return;
    if (e.key == "enable_csum")
      error(e.value.mark, path,
            "enable_csum 1 is not supported: lnetr neither sends nor checks ksocklnd checksums (0, ksocklnd's "
            "default)");
    else
      error(e.value.mark, path,
            "typed_conns 0 is not supported: lnetr always opens typed connections (control, bulk in, bulk out: "
            "1, ksocklnd's default)");
  }

  void flag(const Node& n, const std::string& path, Field<bool>& out) {
    if (!scalar(n, path, "0 or 1")) return;
    if (n.text == "0" || n.text == "1") {
      set(out, n.text == "1", n, path);
      return;
    }
    error(n.mark, path, "expected 0 or 1, got " + describe(n));
  }

  template <class E, std::size_t N>
  void choice(const Node& n, const std::string& path, const EnumName<E> (&names)[N], Field<E>& out) {
    std::string expected = "one of";
    for (std::size_t i = 0; i < N; ++i) expected += std::string(i ? ", " : " ") + std::string(names[i].name);
    if (!scalar(n, path, expected)) return;
    for (const auto& nm : names) {
      if (n.text == nm.name) {
        set(out, nm.value, n, path);
        return;
      }
    }
    error(n.mark, path, "expected " + expected + ", got " + describe(n));
  }

  bool text(const Node& n, const std::string& path, std::string_view what, std::size_t max_len,
            Field<std::string>& out) {
    if (!scalar(n, path, what)) return false;
    if (n.text.empty() || is_null(n)) {
      error(n.mark, path, "expected a value, got nothing");
      return false;
    }
    if (n.text.size() > max_len || n.text.find('\0') != std::string::npos) {
      error(n.mark, path, "expected at most " + std::to_string(max_len) + " characters, got " + describe(n));
      return false;
    }
    set(out, n.text, n, path);
    return true;
  }

  bool nid(const Node& n, const std::string& path, Field<Nid>& out) {
    if (!scalar(n, path, "a NID")) return false;
    auto r = parse_nid(n.text);
    if (!r) {
      error(n.mark, path, "expected a NID, got " + describe(n) + ": " + std::string(r.error().reason));
      return false;
    }
    set(out, *r, n, path);
    return true;
  }

  bool net(const Node& n, const std::string& path, Field<Net>& out) {
    if (!scalar(n, path, "a net name")) return false;
    auto r = parse_net(n.text);
    if (!r) {
      error(n.mark, path, "expected a net name such as tcp or o2ib1, got " + describe(n) + ": " +
                              std::string(r.error().reason));
      return false;
    }
    set(out, *r, n, path);
    return true;
  }

  void nets(const Node& n, const std::string& path, Config& cfg);
  void ni(const Node& n, const std::string& path, const NetConfig& net, std::vector<NiConfig>& out,
          std::vector<std::pair<bool, bool>>& own_blocks);
  void tunables(const Node& n, const std::string& path, Tunables& out);
  void lnd_tunables(const Node& n, const std::string& path, LndType lnd, LndTunables& out);
  void cpts(const Node& n, const std::string& path, Field<std::vector<std::uint32_t>>& out);
  void routes(const Node& n, const std::string& path, Config& cfg);
  void routing(const Node& n, const std::string& path, RoutingConfig& out);
  void routing_enable(const Node& n, const std::string& path, Field<bool>& out);
  void buffers(const Node& n, const std::string& path, BufferConfig& out);
  void peers(const Node& n, const std::string& path, Config& cfg);
  void global(const Node& n, const std::string& path, GlobalConfig& out);
  void dataplane(const Node& n, const std::string& path, DataplaneConfig& out);
  void control(const Node& n, const std::string& path, ControlConfig& out);
  void socklnd(const Node& n, const std::string& path, SocklndParams& out);
  void limits(const Node& n, const std::string& path, LimitsConfig& out);
  void o2iblnd(const Node& n, const std::string& path, O2iblndParams& out);
  void ports(const Node& n, const std::string& path, std::vector<PortConfig>& out);
  bool port_address(const Node& n, const std::string& path, PortConfig& out);
  void impair(const Node& n, const std::string& path, ImpairConfig& out);
  bool probability(const Node& n, const std::string& path, Field<double>& out);
};

void Loader::load(const Node& root, Config& cfg) {
  cfg.net_section = Source{file_, 1, 1, "net"};
  if (is_null(root)) return;
  if (root.kind != Node::Kind::mapping) {
    error(root.mark, "", "expected a mapping of sections (net, route, routing, buffers, peer, global, dataplane), got " +
                             describe(root));
    return;
  }
  Field<std::uint32_t> numa_range;
  each_entry(root, "", [&](const Entry& e, const std::string& p) {
    const std::string_view k = e.key;
    if (k == "net") {
      cfg.net_section = src(e.key_mark, p);
      nets(e.value, p, cfg);
    } else if (k == "route") {
      routes(e.value, p, cfg);
    } else if (k == "routing") {
      routing(e.value, p, cfg.routing);
    } else if (k == "buffers") {
      buffers(e.value, p, cfg.buffers);
    } else if (k == "peer") {
      peers(e.value, p, cfg);
    } else if (k == "global") {
      global(e.value, p, cfg.global);
    } else if (k == "numa") {  // legacy form of global.numa_range
      each_entry(e.value, p, [&](const Entry& f, const std::string& q) {
        if (f.key == "range")
          integer(f.value, q, 0, kU32Max, numa_range);
        else
          unknown(f, q);
      });
    } else if (k == "dataplane") {
      dataplane(e.value, p, cfg.dataplane);
    } else if (k == "control") {
      control(e.value, p, cfg.control);
    } else if (k == "statistics") {
      // output of `lnetctl stats show`; lnetctl import ignores it too
    } else if (k == "ping" || k == "discover") {
      if (!is_null(e.value))
        warn(e.key_mark, p, "ignored: lnetctl runs these only with `import --exec`");
    } else if (k == "udsp") {
      if (!is_null(e.value) && !(e.value.kind == Node::Kind::sequence && e.value.items.empty()))
        warn(e.key_mark, p, "UDSP rules are not supported by lnetr yet; ignored");
    } else if (k == "ip2nets") {
      error(e.key_mark, p, "not supported: list the nets under `net:` with their interfaces");
    } else {
      error(e.key_mark, p, "unknown section");
    }
  });
  if (numa_range.given()) {
    if (cfg.global.numa_range.given())
      error(numa_range.source, "numa_range is also given in global");
    else
      cfg.global.numa_range = numa_range;
  }
}

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
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    if (e.key == "peer_timeout")
      integer(e.value, p, 0, kI32Max, out.peer_timeout);
    else if (e.key == "peer_credits")
      integer(e.value, p, 1, 255, out.peer_credits);
    else if (e.key == "peer_buffer_credits")
      integer(e.value, p, 0, kI32Max, out.peer_buffer_credits);
    else if (e.key == "credits")
      integer(e.value, p, 1, kI32Max, out.credits);
    else
      unknown(e, p);
  });
}

void Loader::lnd_tunables(const Node& n, const std::string& path, LndType lnd, LndTunables& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    const std::string_view k = e.key;
    if (k == "conns_per_peer") {
      integer(e.value, p, 0, 127, out.conns_per_peer);
      return;
    }
    if (k == "timeout") {
      integer(e.value, p, 0, kI32Max, out.timeout);
      return;
    }
    if (k == "tos") {
      integer(e.value, p, -1, 255, out.tos);
      return;
    }
    static constexpr std::string_view kO2ib[] = {"peercredits_hiw", "map_on_demand", "concurrent_sends",
                                                 "fmr_pool_size", "fmr_flush_trigger", "fmr_cache", "ntx"};
    if (!one_of(k, kO2ib)) {
      unknown(e, p);
      return;
    }
    if (lnd != LndType::o2ib) {
      warn(e.key_mark, p, "an o2iblnd tunable; ignored on a tcp net");
      return;
    }
    if (k == "peercredits_hiw") {
      integer(e.value, p, 0, 255, out.peercredits_hiw);
    } else if (k == "map_on_demand") {
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
    } else if (k == "concurrent_sends") {
      integer(e.value, p, 0, kI32Max, out.concurrent_sends);
    } else if (k == "fmr_pool_size" || k == "fmr_flush_trigger" || k == "fmr_cache") {
      // Linux's pools of per-transfer registrations: lnetr has none (its
      // buffers are registered once, per pool), so these are not in force.
      // A kernel's export lists them at their defaults; another value was
      // meant to change something lnetr does not have: said by name.
      auto& f = k == "fmr_pool_size" ? out.fmr_pool_size : k == "fmr_flush_trigger" ? out.fmr_flush_trigger : out.fmr_cache;
      const std::int32_t dflt = f.value;
      if (integer(e.value, p, 0, kI32Max, f) && f.value != dflt)
        warn(e.key_mark, p, std::string(k) + " " + std::to_string(f.value) +
                                " not in force: lnetr registers router buffers once per pool and opens them to "
                                "peers through memory windows, so it keeps no registration pool");
    } else {
      integer(e.value, p, 0, kI32Max, out.ntx);
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
      } else if (e.key == "priority") {
        ok = integer(e.value, p, 0, kU32Max, r.priority) && ok;
      } else if (e.key == "health_sensitivity") {
        ok = integer(e.value, p, 0, 1000, r.health_sensitivity) && ok;
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
    const std::string_view k = e.key;
    if (k == "numa_range") {
      integer(e.value, p, 0, kU32Max, out.numa_range);
    } else if (k == "max_interfaces" || k == "max_intf") {
      if (have_max) {
        error(e.key_mark, p, "max_interfaces is given twice (max_intf is its old name)");
        return;
      }
      have_max = true;
      integer(e.value, p, 16, kU32Max, out.max_interfaces);
    } else if (k == "discovery") {
      flag(e.value, p, out.discovery);
    } else if (k == "drop_asym_route") {
      flag(e.value, p, out.drop_asym_route);
    } else if (k == "retry_count") {
      integer(e.value, p, 0, kI32Max, out.retry_count);
    } else if (k == "transaction_timeout") {
      integer(e.value, p, 1, kI32Max, out.transaction_timeout);
    } else if (k == "health_sensitivity") {
      integer(e.value, p, 0, 1000, out.health_sensitivity);
    } else if (k == "recovery_interval") {
      integer(e.value, p, 1, kI32Max, out.recovery_interval);
    } else if (k == "router_sensitivity") {
      integer(e.value, p, 0, 100, out.router_sensitivity);
    } else if (k == "lnd_timeout") {
      integer(e.value, p, 0, kI32Max, out.lnd_timeout);
    } else if (k == "response_tracking") {
      integer(e.value, p, 0, 3, out.response_tracking);
    } else if (k == "recovery_limit") {
      integer(e.value, p, 0, kI32Max, out.recovery_limit);
    } else if (k == "max_recovery_ping_interval") {
      integer(e.value, p, 1, kI32Max, out.max_recovery_ping_interval);
    } else {
      unknown(e, p);
    }
  });
}

constexpr EnumName<PollMode> kPollModes[] = {{"busy", PollMode::busy}, {"adaptive", PollMode::adaptive}};
constexpr EnumName<HugePages> kHugePages[] = {
    {"auto", HugePages::automatic}, {"yes", HugePages::yes}, {"no", HugePages::no}};
constexpr EnumName<AcceptMode> kAcceptModes[] = {
    {"secure", AcceptMode::secure}, {"all", AcceptMode::all}, {"none", AcceptMode::none}};

void Loader::dataplane(const Node& n, const std::string& path, DataplaneConfig& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    const std::string_view k = e.key;
    if (k == "cores") {
      if (e.value.kind != Node::Kind::sequence || e.value.items.empty()) {
        error(e.value.mark, p, "expected a non-empty sequence of core numbers, got " + describe(e.value));
        return;
      }
      if (e.value.items.size() > kMaxCpts) {
        error(e.value.mark, p, "at most " + std::to_string(kMaxCpts) + " workers (CPTs)");
        return;
      }
      std::vector<std::uint32_t> cores;
      bool ok = true;
      for (std::size_t i = 0; i < e.value.items.size(); ++i) {
        Field<std::uint32_t> c;
        const std::string ip = item_path(p, i);
        if (!integer(e.value.items[i], ip, 0, kMaxCore, c)) {
          ok = false;
          continue;
        }
        if (std::find(cores.begin(), cores.end(), c.value) != cores.end()) {
          error(e.value.items[i].mark, ip, "core " + std::to_string(c.value) + " is listed twice");
          ok = false;
          continue;
        }
        cores.push_back(c.value);
      }
      if (ok) set(out.cores, std::move(cores), e.value, p);
    } else if (k == "main_core") {
      Field<std::uint32_t> c;
      if (integer(e.value, p, 0, kMaxCore, c)) set(out.main_core, std::optional<std::uint32_t>(c.value), e.value, p);
    } else if (k == "poll") {
      choice(e.value, p, kPollModes, out.poll);
    } else if (k == "hugepages") {
      choice(e.value, p, kHugePages, out.hugepages);
    } else if (k == "memory_mb") {
      integer(e.value, p, 1, 1048576, out.memory_mb);
    } else if (k == "eal_args") {
      std::vector<std::string> args;
      bool ok = true;
      each_item(e.value, p, [&](const Node& item, const std::string& ip) {
        Field<std::string> a;
        if (text(item, ip, "an EAL argument", 4096, a))
          args.push_back(std::move(a.value));
        else
          ok = false;
      });
      if (ok && (e.value.kind == Node::Kind::sequence || is_null(e.value))) set(out.eal_args, std::move(args), e.value, p);
    } else if (k == "control_socket") {
      text(e.value, p, "a socket path", kMaxSocketPath, out.control_socket);
    } else if (k == "shm_name") {
      const bool slash_first = !e.value.text.empty() && e.value.text[0] == '/';
      if (!slash_first || e.value.text.find('/', 1) != std::string::npos)
        error(e.value.mark, p, "expected a shared-memory name: '/' then a name without '/', got " + describe(e.value));
      else
        text(e.value, p, "a shared-memory name", 200, out.shm_name);
    } else if (k == "accept") {
      choice(e.value, p, kAcceptModes, out.accept);
    } else if (k == "accept_port") {
      integer(e.value, p, 1, 65535, out.accept_port);
    } else if (k == "accept_backlog") {
      integer(e.value, p, 1, kI32Max, out.accept_backlog);
    } else if (k == "alive_router_check_interval") {
      integer(e.value, p, 0, kI32Max, out.alive_router_check_interval);
    } else if (k == "router_ping_timeout") {
      integer(e.value, p, 1, kI32Max, out.router_ping_timeout);
    } else if (k == "peer_buffer_credits") {
      integer(e.value, p, 0, kI32Max, out.peer_buffer_credits);
    } else if (k == "socklnd") {
      socklnd(e.value, p, out.socklnd);
    } else if (k == "o2iblnd") {
      o2iblnd(e.value, p, out.o2iblnd);
    } else if (k == "limits") {
      limits(e.value, p, out.limits);
    } else if (k == "ports") {
      ports(e.value, p, out.ports);
    } else {
      unknown(e, p);
    }
  });
}

void Loader::control(const Node& n, const std::string& path, ControlConfig& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    const std::string_view k = e.key;
    if (k == "socket") {
      text(e.value, p, "a socket path", kMaxSocketPath, out.socket);
    } else if (k == "socket_group") {
      text(e.value, p, "a group name", 64, out.socket_group);
    } else if (k == "readonly_socket") {
      text(e.value, p, "a socket path or off", kMaxSocketPath, out.readonly_socket);
    } else if (k == "readonly_socket_group") {
      text(e.value, p, "a group name", 64, out.readonly_socket_group);
    } else if (k == "metrics_peers") {
      integer(e.value, p, 0, 100000, out.metrics_peers);
    } else if (k == "management_interface") {
      text(e.value, p, "an interface name", kMaxInterfaceName, out.management_interface);
    } else if (k == "metrics") {
      // "off", or ADDRESS:PORT with a port 1..65535 (an IPv6 address in []).
      const std::string& v = e.value.text;
      const std::size_t colon = v.rfind(':');
      const auto port = colon == std::string::npos ? std::nullopt : parse_int(std::string_view(v).substr(colon + 1));
      if (e.value.kind == Node::Kind::scalar && (v == "off" || (colon != std::string::npos && colon > 0 && port &&
                                                                *port >= 1 && *port <= 65535)))
        text(e.value, p, "an address:port", 128, out.metrics);
      else
        error(e.value.mark, p, "expected ADDRESS:PORT (e.g. 127.0.0.1:9798) or off, got " + describe(e.value));
    } else {
      unknown(e, p);
    }
  });
}

void Loader::limits(const Node& n, const std::string& path, LimitsConfig& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    const std::string_view k = e.key;
    if (k == "peers")
      integer(e.value, p, 16, 1048576, out.peers);
    else if (k == "peer_idle")
      integer(e.value, p, 1, kI32Max, out.peer_idle);
    else if (k == "connections")
      integer(e.value, p, 16, 1048576, out.connections);
    else if (k == "handshakes")
      integer(e.value, p, 1, 1048576, out.handshakes);
    else if (k == "connect_rate")
      integer(e.value, p, 0, 1000000, out.connect_rate);
    else
      unknown(e, p);
  });
}

void Loader::socklnd(const Node& n, const std::string& path, SocklndParams& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    const std::string_view k = e.key;
    if (k == "sock_timeout")
      integer(e.value, p, 1, kI32Max, out.sock_timeout);
    else if (k == "keepalive")
      integer(e.value, p, 0, kI32Max, out.keepalive);
    else if (k == "keepalive_idle")
      integer(e.value, p, 0, kI32Max, out.keepalive_idle);
    else if (k == "keepalive_count")
      integer(e.value, p, 0, kI32Max, out.keepalive_count);
    else if (k == "keepalive_intvl")
      integer(e.value, p, 0, kI32Max, out.keepalive_intvl);
    else if (k == "nagle")
      flag(e.value, p, out.nagle);
    else if (k == "min_bulk")
      integer(e.value, p, 0, kI32Max, out.min_bulk);
    else if (k == "zc_min_payload") {
      if (integer(e.value, p, 0, kI32Max, out.zc_min_payload) && out.zc_min_payload.value < kZcMinPayloadFloor)
        warn(e.key_mark, p, "zc_min_payload " + std::to_string(out.zc_min_payload.value) + " is below " +
                                std::to_string(kZcMinPayloadFloor) + ": " + std::to_string(kZcMinPayloadFloor) +
                                " is in force, as Linux's ksocklnd raises it");
    }
    else if (k == "min_reconnectms")
      integer(e.value, p, 1, kI32Max, out.min_reconnectms);
    else if (k == "max_reconnectms")
      integer(e.value, p, 1, kI32Max, out.max_reconnectms);
    else if (k == "tx_buffer_size")
      integer(e.value, p, 0, kI32Max, out.tx_buffer_size);
    else if (k == "rx_buffer_size")
      integer(e.value, p, 0, kI32Max, out.rx_buffer_size);
    else if (k == "enable_csum" || k == "typed_conns")
      only_default(e, p, k == "typed_conns");
    else if (k == "conns_per_peer")
      integer(e.value, p, 0, 127, out.conns_per_peer);
    else
      unknown(e, p);
  });
}

void Loader::o2iblnd(const Node& n, const std::string& path, O2iblndParams& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    const std::string_view k = e.key;
    if (k == "service")
      integer(e.value, p, 1, 65535, out.service);
    else if (k == "keepalive")
      integer(e.value, p, 0, kI32Max, out.keepalive);
    else if (k == "cksum")
      flag(e.value, p, out.cksum);
    else if (k == "retry_count")
      integer(e.value, p, 0, 7, out.retry_count);
    else if (k == "rnr_retry_count")
      integer(e.value, p, 0, 7, out.rnr_retry_count);
    else if (k == "use_privileged_port")
      flag(e.value, p, out.use_privileged_port);
    else if (k == "require_privileged_port")
      flag(e.value, p, out.require_privileged_port);
    else if (k == "remote_keys") {
      if (e.value.kind == Node::Kind::scalar && (e.value.text == "pool" || e.value.text == "transfer"))
        text(e.value, p, "pool or transfer", 16, out.remote_keys);
      else
        error(e.value.mark, p, "expected pool or transfer, got " + describe(e.value));
    } else
      unknown(e, p);
  });
}

// ---- dataplane.ports ----

constexpr std::size_t kMaxPortName = 15;    // reads like an interface name in `interfaces`
constexpr std::size_t kMaxDevice = 1024;    // a PCI address or a vdev with its arguments
constexpr std::int64_t kMaxDelayUs = 1000000;

bool port_name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '-';
}

void Loader::ports(const Node& n, const std::string& path, std::vector<PortConfig>& out) {
  each_item(n, path, [&](const Node& item, const std::string& ip) {
    if (item.kind != Node::Kind::mapping) {
      error(item.mark, ip, "expected a mapping with `name`, `device` and `address`, got " + describe(item));
      return;
    }
    PortConfig port;
    port.source = src(item.mark, ip);
    bool ok = true, have_name = false, have_device = false, have_address = false;
    each_entry(item, ip, [&](const Entry& e, const std::string& p) {
      const std::string_view k = e.key;
      if (k == "name") {
        have_name = true;
        static constexpr std::string_view kExpected = "a port name (1..15 characters A-Z a-z 0-9 _ . -)";
        Field<std::string> name;
        if (!text(e.value, p, kExpected, kMaxPortName, name)) {
          ok = false;
        } else if (!std::all_of(name.value.begin(), name.value.end(), port_name_char)) {
          error(e.value.mark, p, "expected " + std::string(kExpected) + ", got " + describe(e.value));
          ok = false;
        } else {
          port.name = std::move(name);
        }
      } else if (k == "device") {
        have_device = true;
        Field<std::string> dev;
        if (!text(e.value, p, "a DPDK device", kMaxDevice, dev)) {
          ok = false;
        } else if (dev.value.find_first_of(" \t\r\n\v\f") != std::string::npos || dev.value[0] == ',') {
          error(e.value.mark, p,
                "expected a DPDK device without whitespace, its name before any comma (a PCI address such as "
                "0000:3b:00.0, or a virtual device such as net_af_packet0,iface=eth1), got " + describe(e.value));
          ok = false;
        } else {
          port.device = std::move(dev);
        }
      } else if (k == "address") {
        have_address = true;
        ok = port_address(e.value, p, port) && ok;
      } else if (k == "mtu") {
        ok = integer(e.value, p, 576, 9000, port.mtu) && ok;
      } else if (k == "queues") {
        // At most one queue pair per worker; validate() checks it against
        // dataplane.cores.
        ok = integer(e.value, p, 1, static_cast<std::int64_t>(kMaxCpts), port.queues) && ok;
      } else if (k == "vlan") {
        Field<std::uint16_t> v;
        if (integer(e.value, p, 1, 4094, v))
          set(port.vlan, std::optional<std::uint16_t>(v.value), e.value, p);
        else
          ok = false;
      } else if (k == "zero_copy") {
        flag(e.value, p, port.zero_copy);
      } else if (k == "tso") {
        flag(e.value, p, port.tso);
      } else if (k == "impair") {
        impair(e.value, p, port.impair);
      } else {
        unknown(e, p);
      }
    });
    if (!have_name) error(item.mark, ip, "missing key \"name\"");
    if (!have_device) error(item.mark, ip, "missing key \"device\"");
    if (!have_address) error(item.mark, ip, "missing key \"address\"");
    if (!ok || !have_name || !have_device || !have_address) return;
    out.push_back(std::move(port));
  });
}

// "a.b.c.d/len" or "a.b.c.d" (/24): a host address of its subnet.
bool Loader::port_address(const Node& n, const std::string& path, PortConfig& out) {
  static constexpr std::string_view kExpected = "an IPv4 address a.b.c.d or a.b.c.d/len (len 1..30)";
  if (!scalar(n, path, kExpected)) return false;
  const std::string_view t = n.text;
  const std::size_t slash = t.find('/');
  const auto ip = parse_ipv4(t.substr(0, slash));
  std::optional<std::int64_t> len = std::int64_t{24};
  if (slash != std::string_view::npos) len = parse_int(t.substr(slash + 1));
  if (!ip || !len || *len < 1 || *len > 30) {
    error(n.mark, path, "expected " + std::string(kExpected) + ", got " + describe(n));
    return false;
  }
  const auto plen = static_cast<std::uint32_t>(*len);
  const std::uint32_t host_mask = 0xffffffffu >> plen;
  const std::string subnet = ipv4_text(*ip & ~host_mask) + "/" + std::to_string(plen);
  if ((*ip & host_mask) == 0) {
    error(n.mark, path, ipv4_text(*ip) + " is the network address of " + subnet + ", not a host address");
    return false;
  }
  if ((*ip & host_mask) == host_mask) {
    error(n.mark, path, ipv4_text(*ip) + " is the broadcast address of " + subnet + ", not a host address");
    return false;
  }
  set(out.address, *ip, n, path);
  if (slash != std::string_view::npos) set(out.prefix_len, plen, n, path);
  return true;
}

bool Loader::probability(const Node& n, const std::string& path, Field<double>& out) {
  static constexpr std::string_view kExpected = "a probability 0..1";
  if (!scalar(n, path, kExpected)) return false;
  const auto v = parse_decimal(n.text);
  if (!v || !(*v >= 0.0 && *v <= 1.0)) {
    error(n.mark, path, "expected " + std::string(kExpected) + ", got " + describe(n));
    return false;
  }
  set(out, *v, n, path);
  return true;
}

void Loader::impair(const Node& n, const std::string& path, ImpairConfig& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    const std::string_view k = e.key;
    if (k == "seed") {
      static constexpr std::string_view kExpected = "an integer 0..18446744073709551615";
      if (!scalar(e.value, p, kExpected)) return;
      const auto v = parse_u64(e.value.text);
      if (!v)
        error(e.value.mark, p, "expected " + std::string(kExpected) + ", got " + describe(e.value));
      else
        set(out.seed, *v, e.value, p);
    } else if (k == "loss") {
      probability(e.value, p, out.loss);
    } else if (k == "duplicate") {
      probability(e.value, p, out.duplicate);
    } else if (k == "reorder") {
      probability(e.value, p, out.reorder);
    } else if (k == "delay_us") {
      integer(e.value, p, 0, kMaxDelayUs, out.delay_us);
    } else {
      unknown(e, p);
    }
  });
}

bool before(const ConfigError& a, const ConfigError& b) {
  if (a.where.line != b.where.line) return a.where.line < b.where.line;
  return a.where.column < b.where.column;
}

}  // namespace

LoadResult load_config(std::string_view text, std::string_view file_name, const LoadOptions& options) {
  std::vector<ConfigError> errors, warnings;
  try {
    yaml::Tree tree = yaml::parse(text, "a configuration");
    if (tree.error) {
      const Mark m = tree.error->mark;
      return std::vector<ConfigError>{{Source{std::string(file_name), m.line, m.column, {}}, tree.error->message}};
    }
    Config cfg;
    Loader loader(file_name, errors, warnings);
    loader.load(tree.root ? *tree.root : Node{}, cfg);
    validate(cfg, options, errors, warnings);
    std::stable_sort(errors.begin(), errors.end(), before);
    std::stable_sort(warnings.begin(), warnings.end(), before);
    if (!errors.empty()) return errors;
    return LoadedConfig{std::move(cfg), std::move(warnings)};
  } catch (const std::exception& e) {
    return std::vector<ConfigError>{{Source{std::string(file_name), 0, 0, {}}, std::string("cannot load: ") + e.what()}};
  }
}

}  // namespace lnetr::config
