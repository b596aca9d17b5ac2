// The YAML loader's own header: the Loader class that reads a configuration
// section by section, shared by config_yaml.cpp (the document, scalars,
// load_config), config_yaml_lnet.cpp (LNet's sections: net, route, routing,
// buffers, peer, global) and config_yaml_lnetr.cpp (lnetr's own: dataplane,
// control).  Not installed; included by those three files only.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "router/config.hpp"
#include "router/nidrange.hpp"
#include "router/settings.hpp"
#include "router/yaml_tree.hpp"

namespace lnetr::config::loader {

using yaml::Entry;
using yaml::Mark;
using yaml::Node;
using yaml::describe;
using yaml::is_null;

constexpr std::size_t kMaxGatewayNids = 1024;   // one route entry's gateway range
constexpr std::size_t kMaxInterfaceName = 15;   // IFNAMSIZ - 1
constexpr std::int64_t kMaxCore = 1023;
constexpr std::size_t kMaxCpts = 256;           // LNet's limit
constexpr std::int64_t kMaxInterfaceIndex = 15; // LNET_INTERFACES_NUM - 1
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kU32Max = std::numeric_limits<std::uint32_t>::max();

// ---- scalars (config_yaml.cpp) ----

std::optional<std::int64_t> parse_int(std::string_view s);
std::optional<std::uint64_t> parse_u64(std::string_view s);
std::optional<double> parse_decimal(std::string_view s);
std::optional<std::uint32_t> parse_ipv4(std::string_view s);
std::string ipv4_text(std::uint32_t ip);
std::string range_text(std::int64_t lo, std::int64_t hi);
std::optional<std::vector<std::uint32_t>> parse_cpt_list(std::string_view s);

template <class E>
struct EnumName {
  std::string_view name;
  E value;
};

// ---- the loader ---------------------------------------------------------------

inline std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

inline std::string item_path(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

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

  // A key of the settings table (router/settings.hpp), parsed as its row
  // says and held to its effect.  Returns the row; null: not in the table
  // (the caller says so).  A custom row is left to the caller, which calls
  // held() once it has read the value.
  const Setting* table(Section sec, void* obj, const Entry& e, const std::string& path,
                       std::string_view key = {}) {
    const Setting* st = find_setting(sec, key.empty() ? std::string_view(e.key) : key);
    if (!st || st->kind == Kind::custom) return st;
    Field<bool> not_kept;  // a flag taken only at its default
    FieldRef f = st->ref ? st->ref(obj) : FieldRef{&not_kept};
    const std::string expected = "at most " + std::to_string(st->hi) + " characters";
    std::visit(
        [&](auto* field) {
          using F = std::remove_pointer_t<decltype(field)>;
          if constexpr (std::is_same_v<F, Field<bool>>)
            flag(e.value, path, *field);
          else if constexpr (std::is_same_v<F, Field<std::string>>)
            text(e.value, path, expected, static_cast<std::size_t>(st->hi), *field);
          else
            integer(e.value, path, st->lo, st->hi, *field);
        },
        f);
    held(*st, f, e, path);
    return st;
  }
  void held(const Setting& st, const FieldRef& f, const Entry& e, const std::string& path) {
    const bool given = std::visit([](auto* field) { return field->given(); }, f);
    if (!given) return;
    const std::string v = value_text(f);
    if (v == default_text(st)) return;
    const std::string what = std::string(st.key) + " " + v;
    if (st.effect == Effect::warned)
      warn(e.key_mark, path, what + " is not in force: " + std::string(st.note));
    else if (st.effect == Effect::refused)
      error(e.value.mark, path, what + " is not supported: " + std::string(st.note));
  }
  // Reports a key not in the table of its section.
  void table_or_unknown(Section sec, void* obj, const Entry& e, const std::string& path) {
    if (!table(sec, obj, e, path)) unknown(e, path);
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

}  // namespace lnetr::config::loader
