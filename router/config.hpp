// The router's configuration: the model and its YAML loader.
//
// One YAML file.  The sections `net`, `route`, `routing`, `buffers`, `peer`
// and `global` use the names `lnetctl export` writes (lnetctl.md §2, §3), so
// that an existing /etc/lnet.conf or an export from a kernel router imports
// unchanged: output-only keys (status, statistics, credits, ...) are accepted
// and ignored and the `lo` net is skipped.  lnetr's own settings live under
// `dataplane:` (documented key by key in deploy/examples/lnetr.yaml).
//
// Control-plane code: it allocates and may throw internally, but the entry
// points report every problem as a ConfigError and never throw.  Every value
// that came from the file carries its Source, so that a later error (an
// interface that does not exist, a gateway that never answers) and a later
// export can name the file, line, column and field it came from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "router/forward.hpp"
#include "router/nid.hpp"

namespace lnetr::config {

// Where a value was written.  line == 0: not from a file (a default or a
// value derived by the loader).  `field` is the path of the value in the
// document, e.g. "net[1].local NI(s)[0].tunables.peer_credits"; indexes count
// the items as written (the lo net included).
struct Source {
  std::string file;
  std::uint32_t line = 0;    // 1-based
  std::uint32_t column = 0;  // 1-based
  std::string field;

  bool from_file() const noexcept { return line != 0; }
};

// "file:line:column: field" (the parts that are known).
std::string to_string(const Source& s);

// A value and where it was written.  An aggregate: `Field<int> credits{256}`
// is the default 256, from no file.
template <class T>
struct Field {
  T value{};
  Source source{};

  bool given() const noexcept { return source.from_file(); }
};

// ---- net ------------------------------------------------------------------

// LNet tunables of an NI (`tunables:`), defaults of socklnd and o2iblnd.
struct Tunables {
  static constexpr std::int32_t kDefaultPeerTimeout = 180;
  static constexpr std::int32_t kDefaultPeerCredits = 8;
  static constexpr std::int32_t kDefaultPeerBufferCredits = 0;
  static constexpr std::int32_t kDefaultCredits = 256;

  Field<std::int32_t> peer_timeout{kDefaultPeerTimeout};  // s; 0: no aliveness
  Field<std::int32_t> peer_credits{kDefaultPeerCredits};  // 1..255
  // Router credits per peer; 0: the dataplane's peer_buffer_credits, else
  // peer_credits (routing-credits.md §5).
  Field<std::int32_t> peer_buffer_credits{kDefaultPeerBufferCredits};
  Field<std::int32_t> credits{kDefaultCredits};  // NI transmit credits
};

// LND tunables of an NI (`lnd tunables:`).  The first three apply to both
// LNDs; the o2iblnd keys are kept for export and ignored on tcp nets (with a
// warning).  Values the file does not give are filled by validate(): for tcp
// nets conns_per_peer and timeout come from dataplane.socklnd.
struct LndTunables {
  Field<std::int32_t> conns_per_peer{1};  // 1..127 after validate()
  Field<std::int32_t> timeout{50};        // s
  Field<std::int32_t> tos{-1};            // -1 (none) or 0..255
  // o2iblnd (ko2iblnd module defaults, lnetctl.md §4.3)
  Field<std::int32_t> peercredits_hiw{0};
  // (map_on_demand: obsolete, always 1 in ko2iblnd and lnetr; read and
  // checked, not kept.)
  Field<std::int32_t> concurrent_sends{0};
  Field<std::int32_t> fmr_pool_size{512};
  Field<std::int32_t> fmr_flush_trigger{384};
  Field<std::int32_t> fmr_cache{1};
  Field<std::int32_t> ntx{512};
};

// One local NI.  An item of `local NI(s)` with several `interfaces` entries
// becomes one NiConfig per interface (lnetctl creates one NI per interface).
// At least one of `interface` and `nid` is set; the dataplane turns an
// interface's IPv4 address into the NID when `nid` is absent.
struct NiConfig {
  Source source;  // the `local NI(s)` item
  std::optional<Field<Nid>> nid;
  std::optional<Field<std::string>> interface;
  // Effective values: the NI's own block, else the net-level block, else the
  // defaults.  An NI takes the net-level block as a whole, as lnetctl does.
  Tunables tunables;
  LndTunables lnd_tunables;
  // `CPT: "[0,1]"`: the CPTs the NI is bound to, ascending and unique;
  // empty: all CPTs.
  Field<std::vector<std::uint32_t>> cpts;
};

struct NetConfig {
  Source source;  // the `net` item
  Field<Net> net;
  std::vector<NiConfig> nis;
  // The net-level blocks as written (already applied to the NIs; kept for
  // export).
  std::optional<Tunables> tunables;
  std::optional<LndTunables> lnd_tunables;
};

// ---- route, routing, buffers, peer ---------------------------------------

inline constexpr std::int32_t kHopUndefined = -1;

// One route.  A `gateway` written as a NID range becomes one RouteConfig per
// NID, in ascending NID order, each with the range's Source.
struct RouteConfig {
  Source source;  // the `route` item
  Field<Net> net;  // remote net
  Field<Nid> gateway;
  Field<std::int32_t> hop{kHopUndefined};  // -1 or 1..255
  Field<std::uint32_t> priority{0};        // lower is preferred
  // Health its gateway loses per failure, 0..1000; not given: the global
  // health_sensitivity (lnetctl route add --health_sensitivity).
  Field<std::uint32_t> health_sensitivity{0};
};

struct RoutingConfig {
  // `enable:` 0/1, and the states export writes: 2 (stopping) reads as
  // disabled, 3 (starting) as enabled.  Absent: enabled (lnetr is a router;
  // a kernel router's export always says so).
  Field<bool> enable{true};
};

// Router buffer totals over all CPTs (routing-credits.md §4); 0 in the file
// means the default.
struct BufferConfig {
  static constexpr std::uint32_t kDefaultTiny = 2048;
  static constexpr std::uint32_t kDefaultSmall = 16384;
  static constexpr std::uint32_t kDefaultLarge = 1024;

  Field<std::uint32_t> tiny{kDefaultTiny};
  Field<std::uint32_t> small{kDefaultSmall};
  Field<std::uint32_t> large{kDefaultLarge};

  // By pool class (router/forward.hpp's order: tiny, small, large).
  Field<std::uint32_t>& pool(std::size_t c) noexcept { return c == 0 ? tiny : c == 1 ? small : large; }
  const Field<std::uint32_t>& pool(std::size_t c) const noexcept { return c == 0 ? tiny : c == 1 ? small : large; }
};

struct PeerConfig {
  Source source;  // the `peer` item
  Field<Nid> primary_nid;
  Field<bool> multi_rail{true};
  std::vector<Field<Nid>> peer_nis;  // `peer ni: - nid:`
};

// ---- global ---------------------------------------------------------------

// lnetctl.md §2.7, with the kernel defaults.
struct GlobalConfig {
  Field<std::uint32_t> numa_range{0};
  Field<std::uint32_t> max_interfaces{4096};  // >= 16; `max_intf` is an alias
  Field<bool> discovery{true};
  Field<bool> drop_asym_route{false};
  Field<std::uint32_t> retry_count{2};           // < transaction_timeout
  Field<std::uint32_t> transaction_timeout{150};  // s, >= 1
  Field<std::uint32_t> health_sensitivity{100};  // 0..1000
  Field<std::uint32_t> recovery_interval{1};     // s, >= 1 (deprecated)
  Field<std::uint32_t> router_sensitivity{100};  // 0..100 (deprecated)
  // Computed by the kernel from the two values above and shown by `global
  // show`; accepted and kept, not a setting.
  Field<std::uint32_t> lnd_timeout{49};
  Field<std::uint32_t> response_tracking{3};            // 0..3
  Field<std::uint32_t> recovery_limit{0};               // s, 0 = forever
  Field<std::uint32_t> max_recovery_ping_interval{900};  // s, >= 1
};

// ---- dataplane (lnetr's own) ----------------------------------------------

enum class PollMode : std::uint8_t { busy, adaptive };
enum class HugePages : std::uint8_t { automatic, yes, no };  // "auto" | "yes" | "no"
enum class AcceptMode : std::uint8_t { secure, all, none };

std::string_view to_string(PollMode m) noexcept;
std::string_view to_string(HugePages h) noexcept;
std::string_view to_string(AcceptMode a) noexcept;

// Linux's ksocklnd raises a smaller zc_min_payload to this.
inline constexpr std::int32_t kZcMinPayloadFloor = 2048;

// ksocklnd module parameters that matter to a router (lnetctl.md §4.2).
struct SocklndParams {
  Field<std::int32_t> sock_timeout{50};  // s
  Field<std::int32_t> keepalive{30};     // s
  Field<std::int32_t> keepalive_idle{30};
  Field<std::int32_t> keepalive_count{5};
  Field<std::int32_t> keepalive_intvl{5};
  Field<bool> nagle{false};
  Field<std::int32_t> min_bulk{1024};
  // Payloads of this many bytes or more are sent without a copy (kernel
  // sockets: MSG_ZEROCOPY; DPDK ports: lent to the TCP send queue); above
  // LNet's 1 MiB: never.  At least kZcMinPayloadFloor is in force.
  Field<std::int32_t> zc_min_payload{16384};
  Field<std::int32_t> min_reconnectms{1000};
  Field<std::int32_t> max_reconnectms{60000};  // >= min_reconnectms
  Field<std::int32_t> tx_buffer_size{0};       // 0: kernel default
  Field<std::int32_t> rx_buffer_size{0};
  // (enable_csum and typed_conns are taken only at ksocklnd's defaults, 0
  // and 1: what lnetr does.)
  Field<std::int32_t> conns_per_peer{0};  // 0: auto, which is 1

  std::int32_t effective_conns_per_peer() const noexcept {
    return conns_per_peer.value == 0 ? 1 : conns_per_peer.value;
  }
};

// ko2iblnd module parameters that matter to a router (o2iblnd.md §9); the
// per-NI ones are `lnd tunables` of the o2ib net.
struct O2iblndParams {
  Field<std::int32_t> service{987};      // rdma_cm port
  Field<std::int32_t> keepalive{100};    // s: a NOOP after this long without sending; 0: none
  Field<bool> cksum{false};              // checksum the messages sent
  Field<std::int32_t> retry_count{5};    // IB CM retries (0..7)
  Field<std::int32_t> rnr_retry_count{6};  // receiver-not-ready retries (0..7, 7: forever)
  Field<bool> use_privileged_port{true};   // connect from ports 1023 down
  Field<bool> require_privileged_port{false};  // refuse requests from ports >= 1024
  // What the remote key a peer learns may open: the router buffer pool
  // (registered once) or the one sink (registered per transfer).  lnetr's.
  Field<std::string> remote_keys{std::string("transfer")};
};

// A test-only impairment stage in a DPDK port's receive path (off unless
// configured): seeded, so that a run can be repeated exactly.
struct ImpairConfig {
  Field<std::uint64_t> seed{1};
  Field<double> loss{0.0};       // probability 0..1 that a received frame is dropped
  Field<double> duplicate{0.0};  // ... delivered twice
  Field<double> reorder{0.0};    // ... held back and delivered after the next one
  Field<std::uint32_t> delay_us{0};  // every frame delivered this much later
  bool active() const noexcept {
    return loss.value > 0 || duplicate.value > 0 || reorder.value > 0 || delay_us.value > 0;
  }
};

// A DPDK Ethernet port (`dataplane.ports[]`): an NI whose `interfaces` entry
// names the port is served by lnetr's own TCP on this device instead of by
// kernel sockets.
struct PortConfig {
  Source source;  // the item
  Field<std::string> name;    // what NIs' `interfaces` entries refer to
  Field<std::string> device;  // a PCI address, or a virtual device "net_af_packet0,iface=veth1"
  Field<IpAddr> address;  // IPv4 or IPv6 (`address: 10.1.0.1/24`, `address: fd00:1::1/64`)
  Field<std::uint32_t> prefix_len{24};  // (64 for an IPv6 address without one)
  Field<std::uint32_t> mtu{1500};      // 576..9000
  Field<std::uint32_t> queues{1};      // RX/TX queue pairs, 1..number of CPTs
  Field<std::optional<std::uint16_t>> vlan;  // 802.1Q tag 1..4094
  // Send large messages' payload from the router buffer itself (chained
  // mbufs) where the device takes chained frames; false: always copy.
  Field<bool> zero_copy{true};
  // Let the device cut large transmits into segments (TCP segmentation
  // offload) where it can and zero_copy is on; false: one segment a frame.
  // Not given: on where the device does it in hardware, off on net_tap,
  // whose PMD cuts in software at a higher cost than lnetr's own cutting
  // (docs/performance.md).
  Field<bool> tso{true};
  // Let the device join received segments into units of up to 64 KiB
  // (large receive offload) where it can; false: one frame per segment.
  Field<bool> lro{true};
  ImpairConfig impair;
};

// Bounds on what peers on the fabric can make a worker keep
// (docs/operations.md, "Limits").
struct LimitsConfig {
  Field<std::uint32_t> peers{65536};     // peers per worker, in each peer table
  Field<std::uint32_t> peer_idle{180};   // s a peer at rest is kept after its last message
  Field<std::uint32_t> connections{65536};  // socklnd connections per worker
  Field<std::uint32_t> handshakes{1024};    // incoming connections in their handshake at once
  Field<std::uint32_t> connect_rate{16};    // new connections a second from one address (burst: 4x); 0: no limit
};

struct DataplaneConfig {
  static constexpr std::string_view kDefaultControlSocket = "/run/lnetr/dataplane.sock";

  // cores[i]: the core of CPT i's worker.  The number of CPTs is cores.size().
  Field<std::vector<std::uint32_t>> cores{{0}};
  Field<std::optional<std::uint32_t>> main_core;  // absent: see effective_main_core()
  Field<PollMode> poll{PollMode::busy};
  Field<HugePages> hugepages{HugePages::automatic};
  Field<std::uint32_t> memory_mb{512};  // EAL memory when running without hugepages
  Field<std::vector<std::string>> eal_args;
  // dpdk-dumpcap may attach: DPDK's shared configuration and packet-capture
  // server (hugepages required).
  Field<bool> dumpcap{false};
  Field<std::string> control_socket{std::string(kDefaultControlSocket)};
  // POSIX shared-memory name of the region shared with lnetr-control.
  static constexpr std::string_view kDefaultShmName = "/lnetr";
  Field<std::string> shm_name{std::string(kDefaultShmName)};
  Field<AcceptMode> accept{AcceptMode::secure};
  Field<std::uint16_t> accept_port{988};
  Field<std::uint32_t> accept_backlog{127};
  Field<std::uint32_t> alive_router_check_interval{60};  // s
  Field<std::uint32_t> router_ping_timeout{50};          // s
  Field<std::uint32_t> peer_buffer_credits{0};           // lnet module parameter
  SocklndParams socklnd;
  O2iblndParams o2iblnd;
  LimitsConfig limits;
  std::vector<PortConfig> ports;

  // The EAL main lcore: main_core if given, else the lowest core below
  // `online_cpus` (0: unknown, no bound) that no worker uses, else 0.
  std::uint32_t effective_main_core(std::uint32_t online_cpus) const;
};

// ---- control (lnetr's own: lnetr-control) ----------------------------------

struct ControlConfig {
  static constexpr std::string_view kDefaultSocket = "/run/lnetr/control.sock";
  static constexpr std::string_view kDefaultMetrics = "127.0.0.1:9798";
  // The management API's Unix socket (mode 0660).
  Field<std::string> socket{std::string(kDefaultSocket)};
  // The group that owns it (operators in it may use lnetrctl); empty: the
  // process's own group.
  Field<std::string> socket_group;
  // The read-only management socket: shows, stats and export only (no
  // routes, routing, tunables, import, stats reset or pings).  Mode 0660,
  // owned by readonly_socket_group (monitoring users) if given; "off":
  // none; empty (the
  // default): beside `socket`, its name with "-ro" before the extension
  // (/run/lnetr/control.sock -> /run/lnetr/control-ro.sock).
  Field<std::string> readonly_socket;
  std::string readonly_socket_path() const;
  Field<std::string> readonly_socket_group;
  // The Prometheus exposer's "address:port" (loopback unless configured),
  // or "off".
  Field<std::string> metrics{std::string(kDefaultMetrics)};
  // Per-peer series only for this many peers (the busiest); every net also
  // has aggregate series, so that a router with tens of thousands of
  // clients exports a bounded number of series.  0: none per peer.
  Field<std::uint32_t> metrics_peers{100};
  // The interface that carries management (ssh, metrics) and no LNet:
  // `lnetr-control --nftables` writes a firewall that opens ssh and the
  // metrics port there only, and on the NIs' interfaces LNet's ports only.
  // Empty: none (ssh and metrics closed to the network).
  Field<std::string> management_interface;
};

// ---- the whole ---------------------------------------------------------------

struct Config {
  std::vector<NetConfig> nets;  // lo excluded; one entry per net after validate()
  std::vector<RouteConfig> routes;
  RoutingConfig routing;
  BufferConfig buffers;
  std::vector<PeerConfig> peers;
  GlobalConfig global;
  DataplaneConfig dataplane;
  ControlConfig control;
  Source net_section;  // the `net` key, if present (for document-level errors)

  const NetConfig* find_net(Net net) const noexcept;
};

// Which worker owns a peer: the nets served by a DPDK port (those with an
// NI whose interface names a port of dataplane.ports) are placed by the
// port's queues (router/forward.hpp); the others by CPT.
Placement placement(const Config& cfg);
// The DPDK port that serves the NI (its interface names it), if any.
const PortConfig* port_of(const Config& cfg, const NiConfig& ni);
bool on_port(const Config& cfg, const NiConfig& ni);
// An NI's CPT list in the order written, without repeats.
std::vector<std::uint32_t> cpt_list(const NiConfig& ni);

// ---- loading ----------------------------------------------------------------

// One problem, warning or error.  to_string():
// "lnetr.yaml:12:9: net[1].local NI(s)[0].tunables.peer_credits: expected an
// integer 1..255, got \"abc\"".
struct ConfigError {
  Source where;
  std::string message;

  std::string to_string() const;
};

struct LoadOptions {
  // The text is an `lnetctl import` fragment applied on top of a running
  // configuration: it need not configure a net.  Otherwise (a router's whole
  // configuration) at least one net other than lo is required.
  bool fragment = false;
  // The text's nets join this running configuration (lnetrctl net add):
  // the result is the running configuration with them, checked whole as
  // its file would be, with only the text's own warnings.  (The text's
  // other sections are not taken.)
  const Config* base = nullptr;
};

struct LoadedConfig {
  Config config;
  std::vector<ConfigError> warnings;  // in file order
};

// A loaded configuration, or every error found (in file order).
// (lnetr::Result needs a trivially destructible error type; this one carries
// a vector, hence its own small type with the same accessors.)
class [[nodiscard]] LoadResult {
 public:
  LoadResult(LoadedConfig v) : v_(std::move(v)) {}              // NOLINT: implicit by design
  LoadResult(std::vector<ConfigError> e) : v_(std::move(e)) {}  // NOLINT

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  LoadedConfig& value() & { return std::get<0>(v_); }
  const LoadedConfig& value() const& { return std::get<0>(v_); }
  LoadedConfig&& value() && { return std::get<0>(std::move(v_)); }
  LoadedConfig& operator*() & { return value(); }
  const LoadedConfig& operator*() const& { return value(); }
  LoadedConfig* operator->() { return &value(); }
  const LoadedConfig* operator->() const { return &value(); }

  const std::vector<ConfigError>& error() const { return std::get<1>(v_); }

 private:
  std::variant<LoadedConfig, std::vector<ConfigError>> v_;
};

// Parses and validates one YAML document.  `file_name` is used in messages
// only.  Never throws.
LoadResult load_config(std::string_view text, std::string_view file_name, const LoadOptions& options = {});

// Reads `path` and loads it; an unreadable file is one error naming it.
LoadResult load_config_file(const std::string& path, const LoadOptions& options = {});

// The checks that need the whole document (called by load_config; callable
// again after a change made through the API): merges repeated nets (warning),
// fills LND tunables from the module parameters, and checks NIDs against
// their nets, duplicate NIs, CPT numbers against the cores, the add-route
// rules that can be judged without the running system (routing-credits.md
// §1), duplicate peers and cross-field limits.  Appends to `errors` and
// `warnings`.
void validate(Config& config, const LoadOptions& options, std::vector<ConfigError>& errors,
              std::vector<ConfigError>& warnings);

}  // namespace lnetr::config
