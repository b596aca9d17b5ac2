// The settings table (router/settings.hpp) and the reference generated from
// it.  A new key is one row here; the loader, the warnings and the document
// follow from the row.
#include "router/settings.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>

namespace lnetr::config {
namespace {

constexpr std::int64_t kI32 = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kU32 = std::numeric_limits<std::uint32_t>::max();
constexpr std::int64_t kSocketPath = 107;  // sizeof(sun_path) - 1
constexpr std::int64_t kIfName = 15;       // IFNAMSIZ - 1

#define LNETR_REF(T, m) [](void* s) -> FieldRef { return &static_cast<T*>(s)->m; }
#define LNETR_INT(sec, T, m, lo, hi, eff, app, note) \
  Setting{Section::sec, #m, #T "::" #m, Kind::integer, lo, hi, Effect::eff, Applier::app, LNETR_REF(T, m), {}, note}
#define LNETR_FLAG(sec, T, m, eff, app, note) \
  Setting{Section::sec, #m, #T "::" #m, Kind::flag, 0, 1, Effect::eff, Applier::app, LNETR_REF(T, m), {}, note}
#define LNETR_TEXT(sec, T, m, len, eff, app, note) \
  Setting{Section::sec, #m, #T "::" #m, Kind::text, 1, len, Effect::eff, Applier::app, LNETR_REF(T, m), {}, note}
#define LNETR_CUSTOM(sec, key, field, dflt, eff, app, note) \
  Setting{Section::sec, key, field, Kind::custom, 0, 0, Effect::eff, Applier::app, nullptr, dflt, note}

constexpr std::string_view kNoRecoveryPings =
    "lnetr sends no recovery pings to unhealthy peer NIs; gateways are checked every "
    "alive_router_check_interval";
constexpr std::string_view kNoRegistrationPool =
    "lnetr registers router buffers once per pool and opens them to peers through memory windows, so it keeps "
    "no registration pool";

Setting o2ib(Setting s) {
  s.o2ib_only = true;
  return s;
}

const Setting kSettings[] = {
    // ---- global ----
    LNETR_INT(global, GlobalConfig, numa_range, 0, kU32, warned, none,
              "lnetr does not choose among NIs by NUMA distance"),
    LNETR_INT(global, GlobalConfig, max_interfaces, 16, kU32, warned, none,
              "lnetr reads ping answers whole and lists all its NIs in its own"),
    LNETR_CUSTOM(global, "max_intf", "", "4096", warned, none, "the old name of max_interfaces"),
    LNETR_FLAG(global, GlobalConfig, discovery, start, both,
               "our ping answers carry the DISCOVERY feature bit iff 1, and a hop-1 route whose remote net the "
               "gateway's ping does not list is single-hop only when both sides discover; with 1 each gateway "
               "check is discovery (ping, then push to a gateway that discovers), a gateway's pushes update its "
               "routes, and a Multi-Rail gateway's other NIs are used when one fails; the peers it forwards to "
               "are discovered too (ping, then push), and their pushes kept, without holding the message"),
    LNETR_FLAG(global, GlobalConfig, drop_asym_route, runtime, dataplane,
               "a message for the router from a remote net is dropped (`asym_route`) unless it came through a "
               "gateway of a route back to that net; `set drop_asym_route` changes it"),
    LNETR_INT(global, GlobalConfig, retry_count, 0, kI32, warned, none,
              "a router resends nothing (only originators do); LND timeouts are dataplane.socklnd.sock_timeout "
              "and dataplane.o2iblnd's timeout"),
    LNETR_INT(global, GlobalConfig, transaction_timeout, 1, kI32, start, dataplane,
              "a message that waited longer than it for a router credit, a router buffer, or a next hop's or an "
              "NI's transmit credit is dropped (`timeout`) and gives back what it held"),
    LNETR_INT(global, GlobalConfig, health_sensitivity, 0, 1000, runtime, control,
              "health a gateway loses per failed check or failed send (anything heard from it restores 1000); "
              "among routes tied on priority and hops the healthier gateway is chosen; `set` changes it"),
    LNETR_INT(global, GlobalConfig, recovery_interval, 1, kI32, ignored, none, "deprecated; ignored, as by the kernel"),
    LNETR_INT(global, GlobalConfig, router_sensitivity, 0, 100, warned, none,
              "a gateway's failures cost health_sensitivity"),
    LNETR_INT(global, GlobalConfig, lnd_timeout, 0, kI32, derived, none,
              "(transaction_timeout - 1) / (retry_count + 1), as the kernel derives it; the LND timeouts in force "
              "are each NI's `timeout`"),
    LNETR_INT(global, GlobalConfig, response_tracking, 0, 3, warned, none,
              "a router tracks no responses to the messages it forwards; its gateway checks time out after "
              "router_ping_timeout"),
    LNETR_INT(global, GlobalConfig, recovery_limit, 0, kI32, warned, none, kNoRecoveryPings),
    LNETR_INT(global, GlobalConfig, max_recovery_ping_interval, 1, kI32, warned, none, kNoRecoveryPings),

    // ---- an NI's tunables ----
    LNETR_INT(tunables, Tunables, peer_timeout, 0, kI32, start, dataplane,
              "s without news before a peer is taken for dead (0: no aliveness)"),
    LNETR_INT(tunables, Tunables, peer_credits, 1, 255, start, dataplane,
              "messages in flight to one peer (o2ib: clamped as ko2iblnd clamps it)"),
    LNETR_INT(tunables, Tunables, peer_buffer_credits, 0, kI32, start, dataplane,
              "router buffers one peer may hold; 0: dataplane.peer_buffer_credits, else peer_credits"),
    LNETR_INT(tunables, Tunables, credits, 1, kI32, start, dataplane,
              "the NI's transmit credits, divided among its CPTs"),

    // ---- an NI's lnd tunables ----
    LNETR_INT(lnd_tunables, LndTunables, conns_per_peer, 0, 127, runtime, dataplane,
              "tcp: bulk connections of each direction to a peer (0: dataplane.socklnd's); o2ib: connections "
              "to a peer; `net set --conns-per-peer` changes it for the connections made from then on"),
    LNETR_INT(lnd_tunables, LndTunables, timeout, 0, kI32, runtime, dataplane,
              "s without progress before a connection is closed (0, tcp: dataplane.socklnd.sock_timeout); "
              "`net set --lnd-timeout` changes it for every NI of the LND"),
    LNETR_INT(lnd_tunables, LndTunables, tos, -1, 255, start, dataplane,
              "IP type of service of the NI's connections (-1: none)"),
    o2ib(LNETR_INT(lnd_tunables, LndTunables, peercredits_hiw, 0, 255, start, dataplane,
                   "credits owed to a peer before they are returned in a NOOP (0: half of peer_credits)")),
    o2ib(LNETR_CUSTOM(lnd_tunables, "map_on_demand", "", "1", ignored, none,
                      "obsolete in ko2iblnd, which registers memory per transfer whatever it says and takes 0 as "
                      "1; lnetr opens memory to a peer per transfer too, so any value is what it does (0 is "
                      "warned and taken as 1); `net show` prints 1, or 0 under dataplane.o2iblnd.remote_keys: "
                      "pool")),
    o2ib(LNETR_INT(lnd_tunables, LndTunables, concurrent_sends, 0, kI32, start, dataplane,
                   "sends in progress on one connection (0: from peer_credits, as ko2iblnd)")),
    o2ib(LNETR_INT(lnd_tunables, LndTunables, fmr_pool_size, 0, kI32, warned, none, kNoRegistrationPool)),
    o2ib(LNETR_INT(lnd_tunables, LndTunables, fmr_flush_trigger, 0, kI32, warned, none, kNoRegistrationPool)),
    o2ib(LNETR_INT(lnd_tunables, LndTunables, fmr_cache, 0, kI32, warned, none, kNoRegistrationPool)),
    o2ib(LNETR_INT(lnd_tunables, LndTunables, ntx, 0, kI32, start, dataplane,
                   "transmit descriptors of the NI")),

    // ---- route ----
    LNETR_CUSTOM(route, "net", "RouteConfig::net", "", runtime, both, "the remote net"),
    LNETR_CUSTOM(route, "gateway", "RouteConfig::gateway", "", runtime, both,
                 "a NID, or a NID range (one route per NID)"),
    LNETR_CUSTOM(route, "hop", "RouteConfig::hop", "-1", runtime, both, "-1 (undefined) or 1..255"),
    LNETR_INT(route, RouteConfig, priority, 0, kU32, runtime, both, "lower is preferred"),
    LNETR_INT(route, RouteConfig, health_sensitivity, 0, 1000, runtime, control,
              "health its gateway loses per failure; not given: the global one"),

    // ---- routing, buffers ----
    LNETR_CUSTOM(routing, "enable", "RoutingConfig::enable", "1", runtime, dataplane,
                 "0 or 1 (2, stopping, reads as 0; 3, starting, as 1): forward messages"),
    LNETR_CUSTOM(buffers, "tiny", "BufferConfig::tiny", "2048", runtime, dataplane,
                 "router buffers for messages without payload, over all CPTs (0: the default)"),
    LNETR_CUSTOM(buffers, "small", "BufferConfig::small", "16384", runtime, dataplane,
                 "router buffers for payloads up to 4 KiB (0: the default)"),
    LNETR_CUSTOM(buffers, "large", "BufferConfig::large", "1024", runtime, dataplane,
                 "router buffers for payloads up to 1 MiB (0: the default)"),

    // ---- dataplane ----
    LNETR_CUSTOM(dataplane, "cores", "DataplaneConfig::cores", "[0]", start, dataplane,
                 "the core of each CPT's worker: cores[i] runs CPT i"),
    LNETR_CUSTOM(dataplane, "main_core", "DataplaneConfig::main_core", "", start, dataplane,
                 "the EAL main lcore; default: the lowest core no worker uses"),
    LNETR_CUSTOM(dataplane, "poll", "DataplaneConfig::poll", "busy", start, dataplane,
                 "busy (workers poll without pause) or adaptive (an idle worker sleeps briefly)"),
    LNETR_CUSTOM(dataplane, "hugepages", "DataplaneConfig::hugepages", "auto", start, dataplane,
                 "auto, yes (required) or no (plain memory)"),
    LNETR_INT(dataplane, DataplaneConfig, memory_mb, 1, 1048576, start, dataplane,
              "EAL memory in MiB without hugepages"),
    LNETR_CUSTOM(dataplane, "eal_args", "DataplaneConfig::eal_args", "[]", start, dataplane,
                 "extra EAL arguments, appended as given"),
    LNETR_FLAG(dataplane, DataplaneConfig, dumpcap, start, dataplane,
               "1: dpdk-dumpcap may attach (DPDK's shared configuration, file prefix: shm_name without its /; "
               "needs hugepages)"),
    LNETR_TEXT(dataplane, DataplaneConfig, control_socket, kSocketPath, start, both,
               "the Unix socket on which lnetr-control and lnetrctl reach the dataplane"),
    LNETR_CUSTOM(dataplane, "shm_name", "DataplaneConfig::shm_name", "/lnetr", start, both,
                 "the POSIX shared memory shared with lnetr-control"),
    LNETR_CUSTOM(dataplane, "accept", "DataplaneConfig::accept", "secure", start, dataplane,
                 "which connection requests the acceptor takes: secure (privileged ports), all, none"),
    Setting{Section::dataplane, "accept_port", "DataplaneConfig::accept_port", Kind::integer, 1, 65535, Effect::start,
            Applier::dataplane, LNETR_REF(DataplaneConfig, accept_port), {}, "TCP port of the LNet acceptor"},
    LNETR_INT(dataplane, DataplaneConfig, accept_backlog, 1, kI32, start, dataplane, "listen() backlog"),
    LNETR_INT(dataplane, DataplaneConfig, alive_router_check_interval, 0, kI32, runtime, both,
              "s between lnetr-control's pings of a live gateway (`set` changes it); with router_ping_timeout, "
              "how long an NI stays up in lnetr's ping answers without a ping from its net (read at start)"),
    LNETR_INT(dataplane, DataplaneConfig, router_ping_timeout, 1, kI32, runtime, both,
              "s before a gateway ping times out (`set` changes it)"),
    LNETR_INT(dataplane, DataplaneConfig, peer_buffer_credits, 0, kI32, start, dataplane,
              "router credits per peer when an NI's tunables give 0; 0: the NI's peer_credits"),
    LNETR_CUSTOM(dataplane, "socklnd", "", "", start, dataplane, "ksocklnd's module parameters (below)"),
    LNETR_CUSTOM(dataplane, "o2iblnd", "", "", start, dataplane, "ko2iblnd's module parameters (below)"),
    LNETR_CUSTOM(dataplane, "limits", "", "", start, dataplane, "bounds on what peers can make a worker keep"),
    LNETR_CUSTOM(dataplane, "ports", "", "[]", start, dataplane, "DPDK Ethernet ports (below)"),

    // ---- dataplane.socklnd ----
    LNETR_INT(socklnd, SocklndParams, sock_timeout, 1, kI32, runtime, dataplane,
              "s without progress before a connection with traffic pending is closed; `net set --net tcp "
              "--lnd-timeout` changes it"),
    LNETR_INT(socklnd, SocklndParams, keepalive, 0, kI32, start, dataplane,
              "s of idleness before a keepalive ping (0: off)"),
    LNETR_INT(socklnd, SocklndParams, keepalive_idle, 0, kI32, start, dataplane, "TCP_KEEPIDLE, s"),
    LNETR_INT(socklnd, SocklndParams, keepalive_count, 0, kI32, start, dataplane, "TCP_KEEPCNT"),
    LNETR_INT(socklnd, SocklndParams, keepalive_intvl, 0, kI32, start, dataplane, "TCP_KEEPINTVL, s"),
    LNETR_FLAG(socklnd, SocklndParams, nagle, start, dataplane, "1: leave Nagle's algorithm on"),
    LNETR_INT(socklnd, SocklndParams, min_bulk, 0, kI32, start, dataplane,
              "smaller messages use the control connection"),
    LNETR_INT(socklnd, SocklndParams, zc_min_payload, 0, kI32, start, dataplane,
              "smallest payload sent without a copy (at least 2048, as ksocklnd raises it; above 1048576: never)"),
    LNETR_INT(socklnd, SocklndParams, min_reconnectms, 1, kI32, start, dataplane, "first reconnect delay, ms"),
    LNETR_INT(socklnd, SocklndParams, max_reconnectms, 1, kI32, start, dataplane, "largest reconnect delay, ms"),
    LNETR_INT(socklnd, SocklndParams, tx_buffer_size, 0, kI32, start, dataplane, "SO_SNDBUF (0: the kernel's)"),
    LNETR_INT(socklnd, SocklndParams, rx_buffer_size, 0, kI32, start, dataplane, "SO_RCVBUF (0: the kernel's)"),
    Setting{Section::socklnd, "enable_csum", "", Kind::flag, 0, 1, Effect::refused, Applier::none, nullptr, "0",
            "lnetr neither sends nor checks ksocklnd checksums (0, ksocklnd's default)"},
    Setting{Section::socklnd, "typed_conns", "", Kind::flag, 0, 1, Effect::refused, Applier::none, nullptr, "1",
            "lnetr always opens typed connections (control, bulk in, bulk out: 1, ksocklnd's default)"},
    LNETR_INT(socklnd, SocklndParams, conns_per_peer, 0, 127, start, dataplane,
              "the default of tcp NIs' conns_per_peer (0: auto, which is 1)"),

    // ---- dataplane.o2iblnd ----
    LNETR_INT(o2iblnd, O2iblndParams, service, 1, 65535, start, dataplane, "rdma_cm port, ours and the peers'"),
    LNETR_INT(o2iblnd, O2iblndParams, keepalive, 0, kI32, start, dataplane,
              "s without sending before a NOOP (0: none)"),
    LNETR_FLAG(o2iblnd, O2iblndParams, cksum, start, dataplane,
               "1: checksum the messages sent (received ones are verified)"),
    LNETR_INT(o2iblnd, O2iblndParams, retry_count, 0, 7, start, dataplane, "IB CM retries"),
    LNETR_INT(o2iblnd, O2iblndParams, rnr_retry_count, 0, 7, start, dataplane,
              "receiver-not-ready retries (7: forever)"),
    LNETR_FLAG(o2iblnd, O2iblndParams, use_privileged_port, start, dataplane, "connect from ports 1023 down"),
    LNETR_FLAG(o2iblnd, O2iblndParams, require_privileged_port, start, dataplane,
               "1: refuse requests from ports 1024 and up"),
    LNETR_CUSTOM(o2iblnd, "remote_keys", "O2iblndParams::remote_keys", "transfer", start, dataplane,
                 "what a key peers learn opens: transfer (one router buffer for one transfer: a memory window) "
                 "or pool (whole router buffer pools, to any connected peer; warned about)"),

    // ---- dataplane.limits ----
    LNETR_INT(limits, LimitsConfig, peers, 16, 1048576, start, dataplane,
              "peers each worker keeps per table; a new one beyond is refused (counted, logged)"),
    LNETR_INT(limits, LimitsConfig, peer_idle, 1, kI32, start, dataplane,
              "s a peer with nothing in flight is kept after its last message"),
    LNETR_INT(limits, LimitsConfig, connections, 16, 1048576, start, dataplane,
              "connections each worker keeps, per LND"),
    LNETR_INT(limits, LimitsConfig, handshakes, 1, 1048576, start, dataplane,
              "incoming socklnd connections in their handshake at once"),
    LNETR_INT(limits, LimitsConfig, connect_rate, 0, 1000000, start, dataplane,
              "new connections a second from one address, after a burst of four times as many (0: no limit)"),

    // ---- dataplane.ports[] ----
    LNETR_CUSTOM(port, "name", "PortConfig::name", "", start, dataplane,
                 "what NIs' `interfaces` entries name: 1..15 of A-Z a-z 0-9 _ . -"),
    LNETR_CUSTOM(port, "device", "PortConfig::device", "", start, dataplane,
                 "a PCI address, or a virtual device such as net_af_packet0,iface=veth1"),
    LNETR_CUSTOM(port, "address", "PortConfig::address", "", start, dataplane,
                 "the port's IPv4 address, a.b.c.d/len (no /len: /24), or its IPv6 address, with /len (no /len: /64); "
                 "the port speaks that family only"),
    LNETR_INT(port, PortConfig, mtu, 576, 9000, start, dataplane, "the port's MTU"),
    LNETR_INT(port, PortConfig, queues, 1, 256, start, dataplane,
              "RX/TX queue pairs, one per CPT at most: queue q is polled by its NI's q-th CPT"),
    LNETR_CUSTOM(port, "vlan", "PortConfig::vlan", "", start, dataplane, "802.1Q tag 1..4094 (default: untagged)"),
    LNETR_FLAG(port, PortConfig, zero_copy, start, dataplane,
               "payloads of 16 KiB or more leave from the router buffer itself where the device takes chained "
               "frames"),
    LNETR_FLAG(port, PortConfig, tso, start, dataplane,
               "large sends leave as frames the device cuts into segments where it has TCP segmentation offload; "
               "default 1 where the device cuts in hardware, 0 on net_tap"),
    LNETR_FLAG(port, PortConfig, lro, start, dataplane,
               "received segments of a connection arrive joined into units of up to 64 KiB where the device has "
               "large receive offload, their payload kept where it arrived"),
    LNETR_CUSTOM(port, "impair", "", "", start, dataplane, "tests only: seeded damage to received frames (below)"),

    // ---- dataplane.ports[].impair ----
    LNETR_CUSTOM(impair, "seed", "ImpairConfig::seed", "1", start, dataplane, "the same seed repeats a run"),
    LNETR_CUSTOM(impair, "loss", "ImpairConfig::loss", "0", start, dataplane, "probability that a frame is dropped"),
    LNETR_CUSTOM(impair, "duplicate", "ImpairConfig::duplicate", "0", start, dataplane, "... delivered twice"),
    LNETR_CUSTOM(impair, "reorder", "ImpairConfig::reorder", "0", start, dataplane, "... delivered after the next one"),
    LNETR_INT(impair, ImpairConfig, delay_us, 0, 1000000, start, dataplane, "every frame delivered this much later"),

    // ---- control ----
    LNETR_TEXT(control, ControlConfig, socket, kSocketPath, start, control, "the management API's socket"),
    LNETR_TEXT(control, ControlConfig, socket_group, 64, start, control,
               "the group owning it (default: lnetr-control's own)"),
    LNETR_TEXT(control, ControlConfig, readonly_socket, kSocketPath, start, control,
               "the read-only API's socket; default: beside `socket` with -ro; off: none"),
    LNETR_TEXT(control, ControlConfig, readonly_socket_group, 64, start, control, "the group owning it"),
    LNETR_CUSTOM(control, "metrics", "ControlConfig::metrics", "127.0.0.1:9798", start, control,
                 "Prometheus metrics at http://ADDRESS:PORT/metrics, or off"),
    LNETR_INT(control, ControlConfig, metrics_peers, 0, 100000, start, control,
              "per-peer series for this many peers (the busiest)"),
    LNETR_TEXT(control, ControlConfig, management_interface, kIfName, start, control,
               "the interface of ssh and metrics, for `lnetr-control --nftables`"),
};

#undef LNETR_REF
#undef LNETR_INT
#undef LNETR_FLAG
#undef LNETR_TEXT
#undef LNETR_CUSTOM

// A default-constructed object of the section, for defaults.
template <class F>
std::string with_default(Section s, F&& f) {
  switch (s) {
    case Section::global: { GlobalConfig o; return f(&o); }
    case Section::tunables: { Tunables o; return f(&o); }
    case Section::lnd_tunables: { LndTunables o; return f(&o); }
    case Section::route: { RouteConfig o; return f(&o); }
    case Section::routing: { RoutingConfig o; return f(&o); }
    case Section::buffers: { BufferConfig o; return f(&o); }
    case Section::dataplane: { DataplaneConfig o; return f(&o); }
    case Section::socklnd: { SocklndParams o; return f(&o); }
    case Section::o2iblnd: { O2iblndParams o; return f(&o); }
    case Section::limits: { LimitsConfig o; return f(&o); }
    case Section::port: { PortConfig o; return f(&o); }
    case Section::impair: { ImpairConfig o; return f(&o); }
    case Section::control: { ControlConfig o; return f(&o); }
  }
  return {};
}

}  // namespace

std::string_view section_path(Section s) noexcept {
  switch (s) {
    case Section::global: return "global";
    case Section::tunables: return "net[].local NI(s)[].tunables";
    case Section::lnd_tunables: return "net[].local NI(s)[].lnd tunables";
    case Section::route: return "route[]";
    case Section::routing: return "routing";
    case Section::buffers: return "buffers";
    case Section::dataplane: return "dataplane";
    case Section::socklnd: return "dataplane.socklnd";
    case Section::o2iblnd: return "dataplane.o2iblnd";
    case Section::limits: return "dataplane.limits";
    case Section::port: return "dataplane.ports[]";
    case Section::impair: return "dataplane.ports[].impair";
    case Section::control: return "control";
  }
  return "?";
}

std::string_view to_string(Effect e) noexcept {
  switch (e) {
    case Effect::start: return "at start";
    case Effect::runtime: return "at start and at run time";
    case Effect::warned: return "warned unless the default";
    case Effect::refused: return "refused unless the default";
    case Effect::ignored: return "ignored, as by the kernel";
    case Effect::derived: return "derived";
  }
  return "?";
}

std::string_view to_string(Applier a) noexcept {
  switch (a) {
    case Applier::dataplane: return "lnetr-dataplane";
    case Applier::control: return "lnetr-control";
    case Applier::both: return "both";
    case Applier::none: return "";
  }
  return "";
}

std::span<const Setting> settings() noexcept { return kSettings; }

const Setting* find_setting(Section s, std::string_view key) noexcept {
  for (const Setting& st : kSettings)
    if (st.section == s && st.key == key) return &st;
  return nullptr;
}

std::string value_text(const FieldRef& f) {
  return std::visit(
      [](auto* field) -> std::string {
        using T = decltype(field->value);
        if constexpr (std::is_same_v<T, bool>)
          return field->value ? "1" : "0";
        else if constexpr (std::is_same_v<T, std::string>)
          return field->value;
        else
          return std::to_string(field->value);
      },
      f);
}

std::string default_text(const Setting& s) {
  if (!s.ref) return std::string(s.dflt);
  return with_default(s.section, [&](void* o) { return value_text(s.ref(o)); });
}

std::string reference_markdown() {
  std::string out;
  bool first = true;
  Section current{};
  for (const Setting& s : kSettings) {
    if (first || s.section != current) {
      if (!first) out += "\n";
      first = false;
      current = s.section;
      out += "### `" + std::string(section_path(s.section)) + "`\n\n";
      out += "| key | default | values | in force | applied by | in lnetr |\n|---|---|---|---|---|---|\n";
    }
    std::string values;
    switch (s.kind) {
      case Kind::integer:
        values = s.hi >= kI32 ? std::to_string(s.lo) + " or more" : std::to_string(s.lo) + ".." + std::to_string(s.hi);
        break;
      case Kind::flag: values = "0, 1"; break;
      case Kind::text: values = "text, at most " + std::to_string(s.hi); break;
      case Kind::custom: values = "see note"; break;
    }
    const std::string dflt = default_text(s);
    std::string note(s.note);
    if (s.o2ib_only) note = "o2ib only (warned on tcp): " + note;
    out += "| `" + std::string(s.key) + "` | " + (dflt.empty() ? "" : "`" + dflt + "`") + " | " + values + " | " +
           std::string(to_string(s.effect)) + " | " + std::string(to_string(s.applier)) + " | " + note + " |\n";
  }
  return out;
}

}  // namespace lnetr::config
