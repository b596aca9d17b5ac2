// lnetr's own sections of a configuration: dataplane (with socklnd,
// o2iblnd, limits and ports) and control.  The keys with a row in the
// settings table are parsed from it.

#include <algorithm>

#include "router/config_loader.hpp"

namespace lnetr::config::loader {

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
    } else if (k == "shm_name") {
      const bool slash_first = !e.value.text.empty() && e.value.text[0] == '/';
      if (!slash_first || e.value.text.find('/', 1) != std::string::npos)
        error(e.value.mark, p, "expected a shared-memory name: '/' then a name without '/', got " + describe(e.value));
      else
        text(e.value, p, "a shared-memory name", 200, out.shm_name);
    } else if (k == "accept") {
      choice(e.value, p, kAcceptModes, out.accept);
    } else if (k == "socklnd") {
      socklnd(e.value, p, out.socklnd);
    } else if (k == "o2iblnd") {
      o2iblnd(e.value, p, out.o2iblnd);
    } else if (k == "limits") {
      limits(e.value, p, out.limits);
    } else if (k == "ports") {
      ports(e.value, p, out.ports);
    } else {
      table_or_unknown(Section::dataplane, &out, e, p);
    }
  });
}

void Loader::control(const Node& n, const std::string& path, ControlConfig& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    if (e.key == "metrics") {
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
      table_or_unknown(Section::control, &out, e, p);
    }
  });
}

void Loader::limits(const Node& n, const std::string& path, LimitsConfig& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) { table_or_unknown(Section::limits, &out, e, p); });
}

void Loader::socklnd(const Node& n, const std::string& path, SocklndParams& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    table_or_unknown(Section::socklnd, &out, e, p);
    if (e.key == "zc_min_payload" && out.zc_min_payload.given() && out.zc_min_payload.value < kZcMinPayloadFloor)
      warn(e.key_mark, p, "zc_min_payload " + std::to_string(out.zc_min_payload.value) + " is below " +
                              std::to_string(kZcMinPayloadFloor) + ": " + std::to_string(kZcMinPayloadFloor) +
                              " is in force, as Linux's ksocklnd raises it");
  });
}

void Loader::o2iblnd(const Node& n, const std::string& path, O2iblndParams& out) {
  each_entry(n, path, [&](const Entry& e, const std::string& p) {
    if (e.key != "remote_keys")
      table_or_unknown(Section::o2iblnd, &out, e, p);
    else if (e.value.kind == Node::Kind::scalar && (e.value.text == "pool" || e.value.text == "transfer"))
      text(e.value, p, "pool or transfer", 16, out.remote_keys);
    else
      error(e.value.mark, p, "expected pool or transfer, got " + describe(e.value));
  });
}

// ---- dataplane.ports ----

constexpr std::size_t kMaxPortName = 15;    // reads like an interface name in `interfaces`
constexpr std::size_t kMaxDevice = 1024;    // a PCI address or a vdev with its arguments

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
      } else if (k == "vlan") {
        Field<std::uint16_t> v;
        if (integer(e.value, p, 1, 4094, v))
          set(port.vlan, std::optional<std::uint16_t>(v.value), e.value, p);
        else
          ok = false;
      } else if (k == "impair") {
        impair(e.value, p, port.impair);
      } else {
        // (queues: at most one queue pair per worker; validate() checks
        // it against dataplane.cores.)
        const std::size_t before = errors_.size();
        if (!table(Section::port, &port, e, p)) unknown(e, p);
        ok = ok && errors_.size() == before;
      }
    });
    if (!have_name) error(item.mark, ip, "missing key \"name\"");
    if (!have_device) error(item.mark, ip, "missing key \"device\"");
    if (!have_address) error(item.mark, ip, "missing key \"address\"");
    if (!ok || !have_name || !have_device || !have_address) return;
    out.push_back(std::move(port));
  });
}

// "a.b.c.d/len" or "a.b.c.d" (/24): a host address of its subnet; or an
// IPv6 address that may be a NID's, with a prefix length or /64.
bool Loader::port_address(const Node& n, const std::string& path, PortConfig& out) {
  static constexpr std::string_view kExpected =
      "an IPv4 address a.b.c.d or a.b.c.d/len (len 1..30), or an IPv6 address with /len (len 1..127) or without (/64)";
  if (!scalar(n, path, kExpected)) return false;
  const std::string_view t = n.text;
  const std::size_t slash = t.find('/');
  std::optional<std::int64_t> len;
  if (slash != std::string_view::npos) len = parse_int(t.substr(slash + 1));
  if (t.substr(0, slash).find(':') != std::string_view::npos) {
    // The rules of an IPv6 NID's address (its NI's NID is made of it).
    auto nid = parse_nid(std::string(t.substr(0, slash)) + "@tcp");
    if (slash == std::string_view::npos) len = 64;
    if (!nid || !len || *len < 1 || *len > 127) {
      error(n.mark, path, "expected " + std::string(kExpected) + ", got " + describe(n) +
                              (nid ? "" : " (" + std::string(nid.error().reason) + ")"));
      return false;
    }
    // A unicast address the port can send from: not ::, not multicast, not
    // an IPv4-mapped one (Linux drops packets from those).
    const IpAddr a = IpAddr::of(*nid);
    const bool mapped = std::all_of(a.bytes.begin(), a.bytes.begin() + 10, [](std::uint8_t b) { return b == 0; }) &&
                        a.bytes[10] == 0xff && a.bytes[11] == 0xff;
    if (a.is_unspecified() || a.is_multicast_v6() || mapped) {
      error(n.mark, path, std::string(t.substr(0, slash)) + " is " +
                              (a.is_unspecified() ? "the unspecified address"
                               : mapped           ? "an IPv4-mapped address"
                                                  : "a multicast address") +
                              ", not a unicast address the port can send from");
      return false;
    }
    set(out.address, a, n, path);
    if (slash != std::string_view::npos) set(out.prefix_len, static_cast<std::uint32_t>(*len), n, path);
    else out.prefix_len.value = 64;
    return true;
  }
  const auto ip = parse_ipv4(t.substr(0, slash));
  if (slash == std::string_view::npos) len = 24;
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
  set(out.address, IpAddr::v4(*ip), n, path);
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
    } else {
      table_or_unknown(Section::impair, &out, e, p);
    }
  });
}

}  // namespace lnetr::config::loader
