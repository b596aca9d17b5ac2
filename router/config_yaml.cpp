// The YAML side of the configuration: libyaml events -> a small node tree
// with positions -> the model, checking each value where it is read.
// Document-level checks are validate() in config.cpp.  This file holds the
// document (its sections, load_config) and the scalar readers; the sections
// are read in config_yaml_lnet.cpp (LNet's) and config_yaml_lnetr.cpp
// (lnetr's own), many of their keys from the settings table (settings.hpp).
//
// Accepted YAML: one document; anchors are ignored and aliases refused (a
// configuration has no use for them and they make the tree a graph); tags are
// ignored; every scalar is read as text and converted by the field that reads
// it, so `16` and "16" are the same number and `yes` is just a word.
#include <yaml.h>

#include <algorithm>
#include <exception>
#include <iterator>

#include "router/config_loader.hpp"

namespace lnetr::config {
namespace loader {

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

}  // namespace loader

namespace {

using loader::Loader;
using yaml::Mark;
using yaml::Node;

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
    if (options.base != nullptr) {
      Config whole = *options.base;
      for (NetConfig& n : cfg.nets) {
        auto it = std::find_if(whole.nets.begin(), whole.nets.end(),
                               [&n](const NetConfig& w) { return w.net.value == n.net.value; });
        if (it == whole.nets.end()) whole.nets.push_back(std::move(n));
        else std::move(n.nis.begin(), n.nis.end(), std::back_inserter(it->nis));
      }
      cfg = std::move(whole);
      std::vector<ConfigError> all_warnings;
      validate(cfg, {}, errors, all_warnings);
      for (ConfigError& w : all_warnings)
        if (w.where.file == file_name) warnings.push_back(std::move(w));
    } else {
      validate(cfg, options, errors, warnings);
    }
    std::stable_sort(errors.begin(), errors.end(), before);
    std::stable_sort(warnings.begin(), warnings.end(), before);
    if (!errors.empty()) return errors;
    return LoadedConfig{std::move(cfg), std::move(warnings)};
  } catch (const std::exception& e) {
    return std::vector<ConfigError>{{Source{std::string(file_name), 0, 0, {}}, std::string("cannot load: ") + e.what()}};
  }
}

}  // namespace lnetr::config
