#include "router/config.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/nid.hpp"

namespace lnetr::config {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const char* vectors_dir() {
  const char* d = std::getenv("LNETR_VECTORS");
  return d ? d : LNETR_SOURCE_DIR "/../shared/vectors";
}

std::string vector_path(const std::string& rel) { return std::string(vectors_dir()) + "/" + rel; }

std::string join_errors(const std::vector<ConfigError>& errs) {
  std::string out;
  for (const auto& e : errs) out += "\n  " + e.to_string();
  return out;
}

std::vector<std::string> strings(const std::vector<ConfigError>& errs) {
  std::vector<std::string> out;
  for (const auto& e : errs) out.push_back(e.to_string());
  return out;
}

LoadedConfig load_ok(std::string_view text, LoadOptions opt = {}) {
  auto r = load_config(text, "lnetr.yaml", opt);
  EXPECT_TRUE(r) << "errors:" << (r ? "" : join_errors(r.error()));
  return r ? std::move(r).value() : LoadedConfig{};
}

std::vector<std::string> load_errors(std::string_view text, LoadOptions opt = {}) {
  auto r = load_config(text, "lnetr.yaml", opt);
  EXPECT_FALSE(r) << "loaded without errors";
  return r ? std::vector<std::string>{} : strings(r.error());
}

LoadedConfig file_ok(const std::string& path, LoadOptions opt = {}) {
  auto r = load_config_file(path, opt);
  EXPECT_TRUE(r) << path << ":" << (r ? "" : join_errors(r.error()));
  return r ? std::move(r).value() : LoadedConfig{};
}

using test::nid;
Net net(std::string_view s) { return *parse_net(s); }

// A valid document with one tcp net, for tests that add one section.
constexpr std::string_view kOneNet =
    "net:\n"
    "    - net type: tcp\n"
    "      local NI(s):\n"
    "        - interfaces:\n"
    "              0: eth0\n";

// ---- every vector file loads ---------------------------------------------

std::vector<std::string> all_vector_yaml() {
  std::vector<std::string> out;
  for (const char* dir : {"v4-lnetctl", "v4-lnetctl-import"}) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(vector_path(dir), ec))
      if (e.path().extension() == ".yaml") out.push_back(std::string(dir) + "/" + e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ConfigVectors, EveryLnetctlYamlLoadsAsImportInput) {
  const auto files = all_vector_yaml();
  ASSERT_GE(files.size(), 20u) << "vectors not found under " << vectors_dir();
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    file_ok(vector_path(f), LoadOptions{.fragment = true});
  }
}

TEST(ConfigVectors, ExportsLoadAsWholeConfigurations) {
  for (const char* f : {"v4-lnetctl/router-run-R-export.yaml", "v4-lnetctl/router-run-R-export-backup.yaml",
                        "v4-lnetctl/router-run-A-export.yaml", "v4-lnetctl-import/Q-after-export.yaml",
                        "v4-lnetctl-import/Q-after-export-backup.yaml", "v4-lnetctl-import/Q-before-export.yaml",
                        "v4-lnetctl-import/P-bufonly-export-backup.yaml",
                        "v4-lnetctl-import/lnetctl-import-handwritten.yaml"}) {
    SCOPED_TRACE(f);
    file_ok(vector_path(f));
  }
}

TEST(ConfigVectors, RouterExport) {
  const auto c = file_ok(vector_path("v4-lnetctl/router-run-R-export.yaml")).config;
  ASSERT_EQ(c.nets.size(), 2u);  // lo skipped
  EXPECT_EQ(c.nets[0].net.value, net("tcp"));
  EXPECT_EQ(c.nets[1].net.value, net("tcp1"));
  ASSERT_EQ(c.nets[0].nis.size(), 1u);
  const NiConfig& ni = c.nets[0].nis[0];
  ASSERT_TRUE(ni.nid && ni.interface);
  EXPECT_EQ(ni.nid->value, nid("10.201.1.3@tcp"));
  EXPECT_EQ(ni.interface->value, "eth0");
  EXPECT_EQ(ni.tunables.peer_timeout.value, 180);
  EXPECT_EQ(ni.tunables.peer_credits.value, 8);
  EXPECT_EQ(ni.tunables.peer_buffer_credits.value, 0);
  EXPECT_EQ(ni.tunables.credits.value, 256);
  EXPECT_EQ(ni.lnd_tunables.conns_per_peer.value, 1);
  EXPECT_EQ(ni.lnd_tunables.timeout.value, 50);
  EXPECT_EQ(ni.lnd_tunables.tos.value, -1);
  EXPECT_THAT(ni.cpts.value, ElementsAre(0u));
  EXPECT_EQ(c.nets[1].nis[0].nid->value, nid("10.201.2.3@tcp1"));
  EXPECT_EQ(c.nets[1].nis[0].interface->value, "eth1");

  EXPECT_TRUE(c.routes.empty());
  EXPECT_TRUE(c.routing.enable.value);  // the `- enable: 1` item of the show form
  EXPECT_TRUE(c.routing.enable.given());
  EXPECT_EQ(c.routing.enable.source.field, "routing[1].enable");
  EXPECT_EQ(c.buffers.tiny.value, 512u);
  EXPECT_EQ(c.buffers.small.value, 1024u);
  EXPECT_EQ(c.buffers.large.value, 128u);

  ASSERT_EQ(c.peers.size(), 2u);
  EXPECT_EQ(c.peers[0].primary_nid.value, nid("10.201.1.2@tcp"));
  EXPECT_TRUE(c.peers[0].multi_rail.value);
  ASSERT_EQ(c.peers[0].peer_nis.size(), 1u);
  EXPECT_EQ(c.peers[0].peer_nis[0].value, nid("10.201.1.2@tcp"));
  EXPECT_EQ(c.peers[1].primary_nid.value, nid("10.201.2.2@tcp1"));

  const auto& g = c.global;
  EXPECT_EQ(g.numa_range.value, 0u);
  EXPECT_EQ(g.max_interfaces.value, 4096u);
  EXPECT_TRUE(g.discovery.value);
  EXPECT_FALSE(g.drop_asym_route.value);
  EXPECT_EQ(g.retry_count.value, 2u);
  EXPECT_EQ(g.transaction_timeout.value, 150u);
  EXPECT_EQ(g.health_sensitivity.value, 100u);
  EXPECT_EQ(g.recovery_interval.value, 1u);
  EXPECT_EQ(g.router_sensitivity.value, 100u);
  EXPECT_EQ(g.lnd_timeout.value, 49u);
  EXPECT_EQ(g.response_tracking.value, 3u);
  EXPECT_EQ(g.recovery_limit.value, 0u);
  EXPECT_EQ(g.max_recovery_ping_interval.value, 900u);
  EXPECT_TRUE(g.max_recovery_ping_interval.given());
}

TEST(ConfigVectors, RouterExportBackup) {
  const auto c = file_ok(vector_path("v4-lnetctl/router-run-R-export-backup.yaml")).config;
  ASSERT_EQ(c.nets.size(), 2u);
  const NiConfig& ni = c.nets[1].nis[0];
  EXPECT_FALSE(ni.nid);
  EXPECT_EQ(ni.interface->value, "eth1");
  EXPECT_EQ(ni.interface->source.field, "net[1].local NI(s)[0].interfaces.0");
  EXPECT_EQ(ni.lnd_tunables.conns_per_peer.value, 1);
  EXPECT_EQ(ni.lnd_tunables.timeout.value, 50);  // not written by --backup: from socklnd's sock_timeout
  EXPECT_FALSE(ni.lnd_tunables.timeout.given());
  EXPECT_TRUE(c.routing.enable.value);
  EXPECT_EQ(c.routing.enable.source.field, "routing.enable");
  EXPECT_EQ(c.buffers.large.value, 128u);
  EXPECT_EQ(c.peers.size(), 2u);
}

TEST(ConfigVectors, ClientExportWithRoute) {
  const auto loaded = file_ok(vector_path("v4-lnetctl/router-run-A-export.yaml"));
  const auto& c = loaded.config;
  ASSERT_EQ(c.nets.size(), 1u);
  ASSERT_EQ(c.routes.size(), 1u);
  EXPECT_EQ(c.routes[0].net.value, net("tcp1"));
  EXPECT_EQ(c.routes[0].gateway.value, nid("10.201.1.3@tcp"));
  EXPECT_EQ(c.routes[0].hop.value, kHopUndefined);
  EXPECT_TRUE(c.routes[0].hop.given());
  EXPECT_EQ(c.routes[0].priority.value, 0u);
  // The export lists A's peers: said to be unused, by name.
  EXPECT_THAT(strings(loaded.warnings), ElementsAre(HasSubstr("peer[0]: peer: configured peers are not used")));
  EXPECT_TRUE(c.routing.enable.value);  // absent: lnetr's default
  EXPECT_FALSE(c.routing.enable.given());
  ASSERT_EQ(c.peers.size(), 3u);
  ASSERT_EQ(c.peers[0].peer_nis.size(), 2u);
  EXPECT_EQ(c.peers[0].peer_nis[1].value, nid("10.201.2.3@tcp1"));
}

TEST(ConfigVectors, HandwrittenImport) {
  const auto loaded = file_ok(vector_path("v4-lnetctl-import/lnetctl-import-handwritten.yaml"));
  const auto& c = loaded.config;
  ASSERT_EQ(c.nets.size(), 1u);
  EXPECT_EQ(c.nets[0].net.value, net("tcp5"));
  ASSERT_EQ(c.nets[0].nis.size(), 1u);
  const NiConfig& ni = c.nets[0].nis[0];
  EXPECT_EQ(ni.interface->value, "eth0");
  EXPECT_EQ(ni.tunables.peer_timeout.value, 180);
  EXPECT_EQ(ni.tunables.peer_credits.value, 16);
  EXPECT_EQ(ni.tunables.peer_buffer_credits.value, 0);
  EXPECT_EQ(ni.tunables.credits.value, 512);
  EXPECT_EQ(ni.lnd_tunables.conns_per_peer.value, 2);
  EXPECT_EQ(ni.lnd_tunables.tos.value, -1);

  struct R {
    const char* net;
    const char* gw;
    int hop;
    unsigned prio;
  };
  const R want[] = {{"tcp7", "10.201.1.50@tcp", 1, 0},
                    {"tcp7", "10.201.1.51@tcp", 1, 1},
                    {"tcp7", "10.201.1.52@tcp5", 2, 5},
                    {"tcp8", "10.201.1.50@tcp", 3, 2},
                    {"o2ib3", "10.201.1.53@tcp", -1, 0}};
  ASSERT_EQ(c.routes.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(c.routes[i].net.value, net(want[i].net));
    EXPECT_EQ(c.routes[i].gateway.value, nid(want[i].gw));
    EXPECT_EQ(c.routes[i].hop.value, want[i].hop);
    EXPECT_EQ(c.routes[i].priority.value, want[i].prio);
  }
  EXPECT_FALSE(c.routes[4].hop.given());  // default hop -1
  EXPECT_FALSE(c.routes[4].priority.given());
  EXPECT_TRUE(c.routing.enable.value);
  EXPECT_EQ(c.buffers.tiny.value, 512u);
  EXPECT_EQ(c.buffers.small.value, 1024u);
  EXPECT_EQ(c.buffers.large.value, 96u);

  // Gateways on tcp, which this document does not configure (the guest had
  // it already): kept, with a warning each, as lnetctl ignores EHOSTUNREACH.
  ASSERT_EQ(loaded.warnings.size(), 4u) << join_errors(loaded.warnings);
  EXPECT_THAT(loaded.warnings[0].to_string(),
              HasSubstr("lnetctl-import-handwritten.yaml:21:16: route[0].gateway: gateway 10.201.1.50@tcp is not on a "
                        "local net"));
}

TEST(ConfigVectors, BuffersOnlyFragment) {
  const auto c = file_ok(vector_path("v4-lnetctl-import/P-bufonly-input.yaml"), {.fragment = true}).config;
  EXPECT_TRUE(c.nets.empty());
  EXPECT_EQ(c.buffers.tiny.value, 512u);
  EXPECT_EQ(c.buffers.small.value, 1024u);
  EXPECT_EQ(c.buffers.large.value, 96u);

  // As a router's whole configuration it lacks a net.
  auto r = load_config_file(vector_path("v4-lnetctl-import/P-bufonly-input.yaml"));
  ASSERT_FALSE(r);
  ASSERT_EQ(r.error().size(), 1u);
  EXPECT_THAT(r.error()[0].to_string(),
              ::testing::EndsWith("P-bufonly-input.yaml:1:1: net: no net is configured: a router needs at least "
                                  "one net other than lo"));
}

TEST(ConfigVectors, DeleteRouteFragment) {
  const auto loaded = file_ok(vector_path("v4-lnetctl-import/Q-del-route-input.yaml"), {.fragment = true});
  ASSERT_EQ(loaded.config.routes.size(), 1u);
  EXPECT_EQ(loaded.config.routes[0].net.value, net("tcp7"));
  EXPECT_EQ(loaded.config.routes[0].gateway.value, nid("10.201.1.51@tcp"));
  EXPECT_EQ(loaded.config.routes[0].hop.value, -1);
  EXPECT_EQ(loaded.warnings.size(), 1u);
}

TEST(ConfigVectors, ExportAfterImport) {
  const auto c = file_ok(vector_path("v4-lnetctl-import/Q-after-export.yaml")).config;
  ASSERT_EQ(c.nets.size(), 2u);
  EXPECT_EQ(c.nets[1].nis[0].nid->value, nid("10.201.1.4@tcp5"));
  EXPECT_EQ(c.nets[1].nis[0].tunables.peer_credits.value, 16);
  ASSERT_EQ(c.routes.size(), 5u);
  EXPECT_EQ(c.routes[2].gateway.value, nid("10.201.1.52@tcp5"));
  EXPECT_EQ(c.routes[2].priority.value, 5u);
  EXPECT_TRUE(c.routing.enable.value);  // 3 = starting
  EXPECT_EQ(c.peers.size(), 4u);
  EXPECT_FALSE(c.peers[0].multi_rail.value);

  const auto b = file_ok(vector_path("v4-lnetctl-import/Q-after-export-backup.yaml")).config;
  EXPECT_EQ(b.routes.size(), 5u);
  EXPECT_EQ(b.nets[0].nis[0].interface->value, "eth0");
  EXPECT_EQ(b.nets[1].nis[0].interface->value, "eth0");  // one interface, two nets
  EXPECT_TRUE(b.routing.enable.value);                   // `enable: 3`
}

TEST(ConfigVectors, RoutingStoppingReadsAsDisabled) {
  const auto c = file_ok(vector_path("v4-lnetctl-import/Q-set-routing-0-routing-show.yaml"), {.fragment = true}).config;
  EXPECT_FALSE(c.routing.enable.value);  // 2 = stopping
  EXPECT_TRUE(c.routing.enable.given());
  EXPECT_EQ(c.buffers.large.value, 96u);
}

TEST(ConfigVectors, O2ibLndTunables) {
  const auto c = file_ok(vector_path("v4-lnetctl/pair-o2ib-P-net-show-v4.yaml"), {.fragment = true}).config;
  ASSERT_EQ(c.nets.size(), 1u);
  EXPECT_EQ(c.nets[0].net.value, net("o2ib"));
  const auto& t = c.nets[0].nis[0].lnd_tunables;
  EXPECT_EQ(t.peercredits_hiw.value, 4);
  EXPECT_EQ(t.concurrent_sends.value, 8);
  EXPECT_EQ(t.fmr_pool_size.value, 512);
  EXPECT_EQ(t.ntx.value, 512);
  EXPECT_EQ(t.timeout.value, 50);
}

// ---- defaults -------------------------------------------------------------

TEST(ConfigDefaults, AbsentKeys) {
  const auto loaded = load_ok(kOneNet);
  const auto& c = loaded.config;
  EXPECT_TRUE(loaded.warnings.empty());
  ASSERT_EQ(c.nets.size(), 1u);
  const NiConfig& ni = c.nets[0].nis[0];
  EXPECT_FALSE(ni.nid);
  EXPECT_EQ(ni.tunables.peer_timeout.value, 180);
  EXPECT_EQ(ni.tunables.peer_credits.value, 8);
  EXPECT_EQ(ni.tunables.peer_buffer_credits.value, 0);
  EXPECT_EQ(ni.tunables.credits.value, 256);
  EXPECT_FALSE(ni.tunables.credits.given());
  EXPECT_EQ(ni.lnd_tunables.conns_per_peer.value, 1);  // socklnd conns_per_peer 0 = auto = 1
  EXPECT_EQ(ni.lnd_tunables.timeout.value, 50);
  EXPECT_EQ(ni.lnd_tunables.tos.value, -1);
  EXPECT_TRUE(ni.cpts.value.empty());
  EXPECT_TRUE(c.routes.empty());
  EXPECT_TRUE(c.routing.enable.value);
  EXPECT_EQ(c.buffers.tiny.value, 2048u);
  EXPECT_EQ(c.buffers.small.value, 16384u);
  EXPECT_EQ(c.buffers.large.value, 1024u);
  EXPECT_EQ(c.global.max_interfaces.value, 4096u);
  EXPECT_EQ(c.global.transaction_timeout.value, 150u);
  EXPECT_EQ(c.global.health_sensitivity.value, 100u);
  EXPECT_FALSE(c.global.transaction_timeout.given());

  const auto& d = c.dataplane;
  EXPECT_THAT(d.cores.value, ElementsAre(0u));
  EXPECT_FALSE(d.main_core.value);
  EXPECT_EQ(d.effective_main_core(0), 1u);
  EXPECT_EQ(d.effective_main_core(1), 0u);  // one CPU: shared with the worker
  EXPECT_EQ(d.poll.value, PollMode::busy);
  EXPECT_EQ(d.hugepages.value, HugePages::automatic);
  EXPECT_EQ(d.memory_mb.value, 512u);
  EXPECT_TRUE(d.eal_args.value.empty());
  EXPECT_EQ(d.control_socket.value, "/run/lnetr/dataplane.sock");
  EXPECT_EQ(d.shm_name.value, "/lnetr");
  EXPECT_EQ(d.accept.value, AcceptMode::secure);
  EXPECT_EQ(d.accept_port.value, 988);
  EXPECT_EQ(d.accept_backlog.value, 127u);
  EXPECT_EQ(d.alive_router_check_interval.value, 60u);
  EXPECT_EQ(d.router_ping_timeout.value, 50u);
  EXPECT_EQ(d.peer_buffer_credits.value, 0u);
  EXPECT_EQ(d.limits.peers.value, 65536u);
  EXPECT_EQ(d.limits.peer_idle.value, 180u);
  EXPECT_EQ(d.limits.connections.value, 65536u);
  EXPECT_EQ(d.limits.handshakes.value, 1024u);
  EXPECT_EQ(d.limits.connect_rate.value, 16u);
  EXPECT_TRUE(d.ports.empty());
  const auto& s = d.socklnd;
  EXPECT_EQ(s.sock_timeout.value, 50);
  EXPECT_EQ(s.keepalive.value, 30);
  EXPECT_EQ(s.keepalive_idle.value, 30);
  EXPECT_EQ(s.keepalive_count.value, 5);
  EXPECT_EQ(s.keepalive_intvl.value, 5);
  EXPECT_FALSE(s.nagle.value);
  EXPECT_EQ(s.min_bulk.value, 1024);
  EXPECT_EQ(s.zc_min_payload.value, 16384);
  EXPECT_EQ(s.min_reconnectms.value, 1000);
  EXPECT_EQ(s.max_reconnectms.value, 60000);
  EXPECT_EQ(s.tx_buffer_size.value, 0);
  EXPECT_EQ(s.rx_buffer_size.value, 0);
  EXPECT_EQ(s.conns_per_peer.value, 0);
  EXPECT_EQ(s.effective_conns_per_peer(), 1);
}

TEST(ConfigDefaults, ZeroBuffersMeanDefault) {
  const auto c = load_ok(std::string(kOneNet) + "buffers:\n    tiny: 0\n    large: 7\n").config;
  EXPECT_EQ(c.buffers.tiny.value, 2048u);
  EXPECT_EQ(c.buffers.small.value, 16384u);
  EXPECT_EQ(c.buffers.large.value, 7u);
}

TEST(ConfigDefaults, LndTunablesFromSocklndParameters) {
  const auto c = load_ok(std::string(kOneNet) +
                         "dataplane:\n    socklnd:\n        conns_per_peer: 4\n        sock_timeout: 77\n")
                     .config;
  EXPECT_EQ(c.nets[0].nis[0].lnd_tunables.conns_per_peer.value, 4);
  EXPECT_EQ(c.nets[0].nis[0].lnd_tunables.timeout.value, 77);
  EXPECT_EQ(c.nets[0].nis[0].lnd_tunables.conns_per_peer.source.field, "dataplane.socklnd.conns_per_peer");
}

TEST(ConfigDefaults, NetLevelTunablesApplyToNisWithoutTheirOwn) {
  const auto c = load_ok(
                     "net:\n"
                     "    - net type: tcp\n"
                     "      tunables:\n"
                     "          peer_credits: 32\n"
                     "      lnd tunables:\n"
                     "          conns_per_peer: 3\n"
                     "      local NI(s):\n"
                     "        - interfaces: {0: eth0}\n"
                     "        - interfaces: {0: eth1}\n"
                     "          tunables:\n"
                     "              credits: 1024\n")
                     .config;
  ASSERT_EQ(c.nets[0].nis.size(), 2u);
  EXPECT_EQ(c.nets[0].nis[0].tunables.peer_credits.value, 32);
  EXPECT_EQ(c.nets[0].nis[0].tunables.peer_credits.source.field, "net[0].tunables.peer_credits");
  EXPECT_EQ(c.nets[0].nis[0].lnd_tunables.conns_per_peer.value, 3);
  // An NI's own block replaces the net's as a whole (as lnetctl reads it).
  EXPECT_EQ(c.nets[0].nis[1].tunables.peer_credits.value, 8);
  EXPECT_EQ(c.nets[0].nis[1].tunables.credits.value, 1024);
  EXPECT_EQ(c.nets[0].nis[1].lnd_tunables.conns_per_peer.value, 3);
  ASSERT_TRUE(c.nets[0].tunables);
  EXPECT_EQ(c.nets[0].tunables->peer_credits.value, 32);
}

TEST(ConfigDefaults, OneNiPerInterface) {
  const auto c = load_ok(
                     "net:\n"
                     "    - net type: tcp\n"
                     "      local NI(s):\n"
                     "        - interfaces:\n"
                     "              1: eth1\n"
                     "              0: eth0\n"
                     "          CPT: \"[0]\"\n")
                     .config;
  ASSERT_EQ(c.nets[0].nis.size(), 2u);
  EXPECT_EQ(c.nets[0].nis[0].interface->value, "eth0");
  EXPECT_EQ(c.nets[0].nis[1].interface->value, "eth1");
  EXPECT_THAT(c.nets[0].nis[1].cpts.value, ElementsAre(0u));
}

TEST(ConfigDefaults, NidOnlyNi) {
  const auto c = load_ok("net:\n  - net type: o2ib1\n    local NI(s):\n      - nid: 172.16.1.4@o2ib1\n").config;
  ASSERT_TRUE(c.nets[0].nis[0].nid);
  EXPECT_EQ(c.nets[0].nis[0].nid->value, nid("172.16.1.4@o2ib1"));
  EXPECT_FALSE(c.nets[0].nis[0].interface);
  EXPECT_EQ(c.nets[0].nis[0].lnd_tunables.ntx.value, 512);  // o2iblnd defaults
}

TEST(ConfigDefaults, CptListForms) {
  auto cpts = [](std::string_view cpt) {
    const auto c = load_ok("net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: eth0}\n"
                           "        CPT: " + std::string(cpt) +
                           "\ndataplane:\n  cores: [0, 1, 2, 3]\n")
                       .config;
    return c.nets.empty() ? std::vector<std::uint32_t>{} : c.nets[0].nis[0].cpts.value;
  };
  EXPECT_THAT(cpts("\"[0,1]\""), ElementsAre(0u, 1u));
  EXPECT_THAT(cpts("\"[0-3]\""), ElementsAre(0u, 1u, 2u, 3u));
  // In the order written (a peer's CPT is the list's entry at its hash),
  // repeats dropped.
  EXPECT_THAT(cpts("\"[3,1-2,1]\""), ElementsAre(3u, 1u, 2u));
  EXPECT_THAT(cpts("[2, 0]"), ElementsAre(2u, 0u));
  EXPECT_THAT(cpts("[0-1, 3]"), ElementsAre(0u, 1u, 3u));
  EXPECT_THAT(cpts("\"2\""), ElementsAre(2u));
}

TEST(ConfigDefaults, MainCoreSkipsWorkerCores) {
  const auto c = load_ok(std::string(kOneNet) + "dataplane:\n  cores: [0, 1, 3]\n").config;
  EXPECT_EQ(c.dataplane.effective_main_core(0), 2u);
  const auto d = load_ok(std::string(kOneNet) + "dataplane:\n  cores: [0, 1]\n  main_core: 5\n").config;
  EXPECT_EQ(d.dataplane.effective_main_core(2), 5u);
  const auto e = load_ok(std::string(kOneNet) + "dataplane:\n  cores: [0, 1]\n").config;
  EXPECT_EQ(e.dataplane.effective_main_core(2), 0u);  // every CPU has a worker
}

TEST(ConfigDefaults, AFragmentsCptsAreNotCheckedAgainstDefaultCores) {
  const std::string ni = "net:\n  - net type: tcp\n    local NI(s):\n      - nid: 10.0.0.1@tcp\n        CPT: \"[0,1]\"\n";
  const auto c = load_ok(ni, {.fragment = true}).config;
  EXPECT_THAT(c.nets[0].nis[0].cpts.value, ElementsAre(0u, 1u));
  // A whole file, or a fragment that says how many cores, is checked.
  const auto whole = load_config(ni, "t.yaml");
  EXPECT_FALSE(whole);
  const auto named = load_config(ni + "dataplane:\n  cores: [0]\n", "t.yaml", {.fragment = true});
  EXPECT_FALSE(named);
}

TEST(ConfigDefaults, MultiRailSpellings) {
  const auto c = load_ok(std::string(kOneNet) +
                         "peer:\n"
                         "  - primary nid: 10.0.0.1@tcp\n    Multi-Rail: True\n"
                         "  - primary nid: 10.0.0.2@tcp\n    Multi-Rail: False\n"
                         "  - primary nid: 10.0.0.3@tcp\n    Multi-Rail: true\n"
                         "  - primary nid: 10.0.0.4@tcp\n    Multi-Rail: false\n"
                         "  - peer ni:\n      - nid: 10.0.0.5@tcp\n      - nid: 10.0.1.5@tcp\n")
                     .config;
  ASSERT_EQ(c.peers.size(), 5u);
  EXPECT_TRUE(c.peers[0].multi_rail.value);
  EXPECT_FALSE(c.peers[1].multi_rail.value);
  EXPECT_TRUE(c.peers[2].multi_rail.value);
  EXPECT_FALSE(c.peers[3].multi_rail.value);
  EXPECT_EQ(c.peers[4].primary_nid.value, nid("10.0.0.5@tcp"));  // first NID, as `peer add`
  EXPECT_EQ(c.peers[4].peer_nis.size(), 2u);
}

TEST(ConfigDefaults, GlobalAliasAndNuma) {
  const auto c = load_ok(std::string(kOneNet) + "global:\n  max_intf: 32\nnuma:\n  range: 5\n").config;
  EXPECT_EQ(c.global.max_interfaces.value, 32u);
  EXPECT_EQ(c.global.numa_range.value, 5u);
}

TEST(ConfigDefaults, RepeatedNetIsMerged) {
  const auto loaded = load_ok(std::string(kOneNet) +
                              "    - net type: tcp0\n"
                              "      local NI(s):\n"
                              "        - interfaces: {0: eth1}\n");
  ASSERT_EQ(loaded.config.nets.size(), 1u);
  EXPECT_EQ(loaded.config.nets[0].nis.size(), 2u);
  EXPECT_THAT(strings(loaded.warnings),
              ElementsAre("lnetr.yaml:6:17: net[1].net type: net tcp is also listed at line 2, column 17; its NIs "
                          "are added to that net"));
}

// ---- gateway ranges ---------------------------------------------------------

TEST(ConfigRoutes, GatewayRangeExpands) {
  const auto c = load_ok(std::string(kOneNet) +
                         "route:\n"
                         "  - net: o2ib1\n"
                         "    gateway: 192.168.0.[1-4]@tcp\n"
                         "    hop: 1\n"
                         "    priority: 3\n"
                         "    health_sensitivity: 300\n")
                     .config;
  ASSERT_EQ(c.routes.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(c.routes[i].gateway.value, nid("192.168.0." + std::to_string(i + 1) + "@tcp"));
    EXPECT_EQ(c.routes[i].net.value, net("o2ib1"));
    EXPECT_EQ(c.routes[i].hop.value, 1);
    EXPECT_EQ(c.routes[i].priority.value, 3u);
    EXPECT_TRUE(c.routes[i].health_sensitivity.given());
    EXPECT_EQ(c.routes[i].health_sensitivity.value, 300u);
    EXPECT_EQ(c.routes[i].gateway.source.line, 8u);
    EXPECT_EQ(c.routes[i].gateway.source.field, "route[0].gateway");
  }
  const auto d = load_ok(std::string(kOneNet) + "route:\n  - net: tcp9\n    gateway: 10.0.[0-1].[1,3]@tcp\n").config;
  ASSERT_EQ(d.routes.size(), 4u);
  EXPECT_FALSE(d.routes[0].health_sensitivity.given());  // the global one's
  EXPECT_EQ(d.routes[3].gateway.value, nid("10.0.1.3@tcp"));
}

TEST(ConfigRoutes, GatewayRangeLimits) {
  EXPECT_THAT(load_errors(std::string(kOneNet) + "route:\n  - net: tcp9\n    gateway: 10.0.[0-255].[0-255]@tcp\n"),
              ElementsAre(HasSubstr("lnetr.yaml:8:14: route[0].gateway: cannot expand \"10.0.[0-255].[0-255]@tcp\" "
                                    "into gateways (at most 1024)")));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "route:\n  - net: tcp9\n    gateway: \"*@tcp\"\n"),
              ElementsAre(HasSubstr("lnetr.yaml:8:14: route[0].gateway: cannot expand")));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "route:\n  - net: tcp9\n    gateway: 10.0.0.[1-@tcp\n"),
              ElementsAre(HasSubstr("lnetr.yaml:8:14: route[0].gateway: expected a NID or a NID range such as "
                                    "10.0.0.[1-4]@tcp, got \"10.0.0.[1-@tcp\": ")));
}

// ---- validation -----------------------------------------------------------

TEST(ConfigErrors, NumberFormats) {
  auto err = [](std::string_view value) {
    return load_errors(
        "net:\n"
        "    - net type: tcp\n"
        "      local NI(s):\n"
        "        - interfaces: {0: eth0}\n"
        "          tunables:\n"
        "              peer_credits: " + std::string(value) + "\n");
  };
  const std::string where = "lnetr.yaml:6:29: net[0].local NI(s)[0].tunables.peer_credits: ";
  EXPECT_THAT(err("abc"), ElementsAre(where + "expected an integer 1..255, got \"abc\""));
  EXPECT_THAT(err("16x"), ElementsAre(where + "expected an integer 1..255, got \"16x\""));
  EXPECT_THAT(err("-8"), ElementsAre(where + "expected an integer 1..255, got \"-8\""));
  EXPECT_THAT(err("256"), ElementsAre(where + "expected an integer 1..255, got \"256\""));
  EXPECT_THAT(err("0x10"), ElementsAre(where + "expected an integer 1..255, got \"0x10\""));
  EXPECT_THAT(err("+8"), ElementsAre(where + "expected an integer 1..255, got \"+8\""));
  EXPECT_THAT(err("99999999999999999999999"),
              ElementsAre(where + "expected an integer 1..255, got \"99999999999999999999999\""));
  EXPECT_THAT(err("{a: 1}"), ElementsAre(where + "expected an integer 1..255, got a mapping"));
  EXPECT_THAT(err("''"), ElementsAre(where + "expected an integer 1..255, got \"\""));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "buffers:\n    large: -1\n"),
              ElementsAre("lnetr.yaml:7:12: buffers.large: expected an integer >= 0, got \"-1\""));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "global:\n    retry_count: 4294967297\n"),
              ElementsAre("lnetr.yaml:7:18: global.retry_count: expected an integer >= 0, got \"4294967297\""));
  // Quoted numbers are numbers.
  EXPECT_EQ(load_ok(std::string(kOneNet) + "buffers:\n    large: \"64\"\n").config.buffers.large.value, 64u);
}

TEST(ConfigLimits, PeersAndIdleTimeAreBoundedAndNamed) {
  const auto c = load_ok(std::string(kOneNet) + "dataplane:\n    limits:\n        peers: 1000\n        peer_idle: 30\n").config;
  EXPECT_EQ(c.dataplane.limits.peers.value, 1000u);
  EXPECT_EQ(c.dataplane.limits.peer_idle.value, 30u);
  EXPECT_THAT(load_errors(std::string(kOneNet) + "dataplane:\n    limits:\n        peers: 3\n"),
              ElementsAre("lnetr.yaml:8:16: dataplane.limits.peers: expected an integer 16..1048576, got \"3\""));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "dataplane:\n    limits:\n        peer_idle: 0\n"),
              ElementsAre(testing::HasSubstr("dataplane.limits.peer_idle: expected an integer >= 1, got \"0\"")));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "dataplane:\n    limits:\n        peerz: 3\n"),
              ElementsAre(testing::HasSubstr("dataplane.limits.peerz")));
}

TEST(ConfigErrors, NiRules) {
  EXPECT_THAT(load_errors("net:\n  - net type: tcp1\n    local NI(s):\n      - nid: 10.0.0.1@tcp\n"),
              ElementsAre("lnetr.yaml:4:14: net[0].local NI(s)[0].nid: NID 10.0.0.1@tcp is not on net tcp1"));
  EXPECT_THAT(load_errors("net:\n  - net type: tcp\n    local NI(s):\n      - nid: 10.0.0.1@tcp\n"
                          "      - nid: 10.0.0.1@tcp\n"),
              ElementsAre("lnetr.yaml:5:14: net[0].local NI(s)[1].nid: NID 10.0.0.1@tcp is already an NI of net tcp "
                          "(line 4, column 14)"));
  EXPECT_THAT(load_errors("net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: eth0}\n"
                          "      - interfaces: {0: eth0}\n"),
              ElementsAre("lnetr.yaml:5:25: net[0].local NI(s)[1].interfaces.0: interface eth0 already has an NI on "
                          "net tcp (line 4, column 25)"));
  EXPECT_THAT(load_errors("net:\n  - net type: tcp\n    local NI(s):\n      - status: up\n"),
              ElementsAre("lnetr.yaml:4:9: net[0].local NI(s)[0]: an NI needs `interfaces` or a `nid`"));
  EXPECT_THAT(load_errors("net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: eth0}\n"
                          "        CPT: \"[0,1]\"\n"),
              ElementsAre("lnetr.yaml:5:14: net[0].local NI(s)[0].CPT: CPT 1 does not exist: dataplane.cores gives "
                          "1 CPT (0..0)"));
  EXPECT_THAT(load_errors("net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: eth0}\n"
                          "        CPT: \"[x]\"\n"),
              ElementsAre("lnetr.yaml:5:14: net[0].local NI(s)[0].CPT: expected a CPT list such as \"[0,1]\" or "
                          "\"[0-3]\" (CPTs 0..255), got \"[x]\""));
  EXPECT_THAT(load_errors("net:\n  - net type: gni\n    local NI(s):\n      - nid: 5@gni\n"),
              ElementsAre("lnetr.yaml:2:15: net[0].net type: net gni: lnetr supports tcp (socklnd) and o2ib "
                          "(o2iblnd) nets only"));
  EXPECT_THAT(load_errors("net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: averyveryverylongname}\n"),
              ElementsAre(HasSubstr("lnetr.yaml:4:25: net[0].local NI(s)[0].interfaces.0: expected at most 15 "
                                    "characters")));
  EXPECT_THAT(load_errors("net:\n  - local NI(s):\n      - interfaces: {0: eth0}\n"),
              ElementsAre("lnetr.yaml:2:5: net[0]: missing key \"net type\""));
}

TEST(ConfigErrors, OutputOnlyAndLoNet) {
  const auto c = load_ok(
                     "net:\n"
                     "  - net type: lo\n"
                     "    local NI(s):\n"
                     "      - nid: 0@lo\n"
                     "        whatever: 1\n"
                     "  - net type: tcp\n"
                     "    local NI(s):\n"
                     "      - nid: 10.0.0.1@tcp\n"
                     "        status: up\n"
                     "        statistics: {send_count: 1}\n"
                     "        health stats: {health value: 1000}\n"
                     "        dev cpt: -1\n"
                     "        udsp info: {net priority: -1}\n")
                     .config;
  ASSERT_EQ(c.nets.size(), 1u);
  EXPECT_EQ(c.nets[0].net.value, net("tcp"));
  EXPECT_THAT(load_errors("net:\n  - net type: tcp\n    local NI(s):\n      - nid: 10.0.0.1@tcp\n        sttaus: up\n"),
              ElementsAre("lnetr.yaml:5:9: net[0].local NI(s)[0].sttaus: unknown key"));
}

TEST(ConfigErrors, RouteRules) {
  auto route = [](std::string_view body) { return load_errors(std::string(kOneNet) + "route:\n" + std::string(body)); };
  EXPECT_THAT(route("  - net: tcp9\n    gateway: 0@lo\n"),
              ElementsAre("lnetr.yaml:8:14: route[0].gateway: gateway 0@lo is not allowed"));
  EXPECT_THAT(route("  - net: tcp9\n    gateway: <?>\n"),
              ElementsAre("lnetr.yaml:8:14: route[0].gateway: gateway <?> is not allowed"));
  EXPECT_THAT(route("  - net: lo\n    gateway: 10.0.0.1@tcp\n"),
              ElementsAre("lnetr.yaml:7:10: route[0].net: a route to net lo is not allowed"));
  EXPECT_THAT(route("  - net: tcp9\n    gateway: 10.0.0.1@tcp9\n"),
              ElementsAre("lnetr.yaml:8:14: route[0].gateway: gateway 10.0.0.1@tcp9 is on the remote net tcp9 itself"));
  EXPECT_THAT(route("  - net: tcp9\n    gateway: 10.0.0.1@tcp\n    hop: 0\n"),
              ElementsAre("lnetr.yaml:9:10: route[0].hop: expected -1 or an integer 1..255, got \"0\""));
  EXPECT_THAT(route("  - net: tcp9\n    gateway: 10.0.0.1@tcp\n    hop: 256\n"),
              ElementsAre("lnetr.yaml:9:10: route[0].hop: expected -1 or an integer 1..255, got \"256\""));
  EXPECT_THAT(route("  - net: tcp9\n    gateway: 10.0.0.1@tcp\n    hop: -2\n"),
              ElementsAre("lnetr.yaml:9:10: route[0].hop: expected -1 or an integer 1..255, got \"-2\""));
  EXPECT_THAT(route("  - net: tcp9\n    gateway: 10.0.0.1@tcp\n    priority: -1\n"),
              ElementsAre("lnetr.yaml:9:15: route[0].priority: expected an integer >= 0, got \"-1\""));
  EXPECT_THAT(route("  - net: tcp9\n    gateway: 10.0.0.1@tcp\n    health_sensitivity: 1001\n"),
              ElementsAre("lnetr.yaml:9:25: route[0].health_sensitivity: expected an integer 0..1000, got \"1001\""));
  EXPECT_THAT(route("  - net: tcp9\n    gateway: 10.0.0.1@tcp\n  - net: tcp9\n    gateway: 10.0.0.1@tcp\n    hop: 2\n"),
              ElementsAre("lnetr.yaml:10:14: route[1].gateway: duplicate route to tcp9 via 10.0.0.1@tcp (line 8, "
                          "column 14)"));
  EXPECT_THAT(route("  - net: tcp\n    gateway: 10.0.0.1@tcp1\n"),
              ElementsAre("lnetr.yaml:7:10: route[0].net: net tcp is a local net of this router; it cannot be a "
                          "route's remote net"));
  EXPECT_THAT(route("  - net: tcp9\n"), ElementsAre("lnetr.yaml:7:5: route[0]: missing key \"gateway\""));
  EXPECT_THAT(route("  - net: tcp9\n    gateway: 10.0.0.1@tcp\n    hops: 1\n"),
              ElementsAre("lnetr.yaml:9:5: route[0].hops: unknown key"));
  EXPECT_THAT(route("  - net: tcpx\n    gateway: 10.0.0.1@tcp\n"),
              ElementsAre(HasSubstr("lnetr.yaml:7:10: route[0].net: expected a net name such as tcp or o2ib1, got "
                                    "\"tcpx\"")));

  // Gateway on a net this router does not have: kept, with a warning.
  const auto w = load_ok(std::string(kOneNet) + "route:\n  - net: tcp9\n    gateway: 10.0.0.1@tcp3\n    state: up\n");
  ASSERT_EQ(w.config.routes.size(), 1u);
  EXPECT_THAT(strings(w.warnings),
              ElementsAre("lnetr.yaml:8:14: route[0].gateway: gateway 10.0.0.1@tcp3 is not on a local net; the route "
                          "is kept but unusable until net tcp3 is configured"));
}

TEST(ConfigErrors, RoutingAndBuffers) {
  EXPECT_THAT(load_errors(std::string(kOneNet) + "routing:\n  enable: 4\n"),
              ElementsAre("lnetr.yaml:7:11: routing.enable: expected an integer 0..3, got \"4\""));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "routing:\n  - enable: 1\n  - enable: 0\n"),
              ElementsAre("lnetr.yaml:8:5: routing[1].enable: `enable` is given twice"));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "routing:\n  - cpt[0]: {}\n  - enabled: 1\n"),
              ElementsAre("lnetr.yaml:8:5: routing[1].enabled: unknown key"));
  EXPECT_FALSE(load_ok(std::string(kOneNet) + "routing:\n  enable: 0\n").config.routing.enable.value);
  EXPECT_THAT(load_errors(std::string(kOneNet) + "buffers:\n  huge: 1\n"),
              ElementsAre("lnetr.yaml:7:3: buffers.huge: unknown key"));
}

TEST(ConfigErrors, PeerRules) {
  EXPECT_THAT(load_errors(std::string(kOneNet) + "peer:\n  - primary nid: 10.0.0.1@tcp\n    Multi-Rail: maybe\n"),
              ElementsAre("lnetr.yaml:8:17: peer[0].Multi-Rail: expected True or False, got \"maybe\""));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "peer:\n  - primary nid: 10.0.0.1@tcp\n"
                                                  "  - primary nid: 10.0.0.1@tcp\n"),
              ElementsAre("lnetr.yaml:8:18: peer[1].primary nid: NID 10.0.0.1@tcp already belongs to a peer (line 7, "
                          "column 18)"));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "peer:\n  - primary nid: 0@lo\n"),
              ElementsAre("lnetr.yaml:7:18: peer[0].primary nid: NID 0@lo cannot be a peer's NID"));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "peer:\n  - Multi-Rail: True\n"),
              ElementsAre("lnetr.yaml:7:5: peer[0]: missing key \"primary nid\""));
}

TEST(ConfigErrors, GlobalRules) {
  EXPECT_THAT(load_errors(std::string(kOneNet) + "global:\n  discovery: 1\n  foo: 2\n"),
              ElementsAre("lnetr.yaml:8:3: global.foo: unknown key"));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "global:\n  max_interfaces: 8\n"),
              ElementsAre("lnetr.yaml:7:19: global.max_interfaces: expected an integer >= 16, got \"8\""));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "global:\n  max_interfaces: 32\n  max_intf: 32\n"),
              ElementsAre("lnetr.yaml:8:3: global.max_intf: max_interfaces is given twice (max_intf is its old name)"));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "global:\n  discovery: yes\n"),
              ElementsAre("lnetr.yaml:7:14: global.discovery: expected 0 or 1, got \"yes\""));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "global:\n  health_sensitivity: 1001\n"),
              ElementsAre("lnetr.yaml:7:23: global.health_sensitivity: expected an integer 0..1000, got \"1001\""));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "global:\n  retry_count: 10\n  transaction_timeout: 10\n"),
              ElementsAre("lnetr.yaml:7:16: global.retry_count: retry_count (10) must be less than "
                          "transaction_timeout (10)"));
}

TEST(Config, ControlSection) {
  const auto defaults = load_ok(kOneNet).config.control;
  EXPECT_EQ(defaults.socket.value, "/run/lnetr/control.sock");
  EXPECT_EQ(defaults.socket_group.value, "");
  EXPECT_EQ(defaults.metrics.value, "127.0.0.1:9798");
  const auto c = load_ok(std::string(kOneNet) +
                         "control:\n  socket: /tmp/c.sock\n  socket_group: lustre\n  metrics: \"[::]:9100\"\n");
  EXPECT_EQ(c.config.control.socket.value, "/tmp/c.sock");
  EXPECT_EQ(c.config.control.socket_group.value, "lustre");
  EXPECT_EQ(c.config.control.metrics.value, "[::]:9100");
  EXPECT_EQ(load_ok(std::string(kOneNet) + "control:\n  metrics: \"off\"\n").config.control.metrics.value, "off");
  auto ctl = [](std::string_view body) { return load_errors(std::string(kOneNet) + "control:\n" + std::string(body)); };
  EXPECT_THAT(ctl("  metrics: 9798\n"),
              ElementsAre("lnetr.yaml:7:12: control.metrics: expected ADDRESS:PORT (e.g. 127.0.0.1:9798) or off, got "
                          "\"9798\""));
  EXPECT_THAT(ctl("  metrics: \"127.0.0.1:0\"\n"), ElementsAre(HasSubstr("control.metrics: expected ADDRESS:PORT")));
  EXPECT_THAT(ctl("  sockets: /x\n"), ElementsAre(HasSubstr("control.sockets")));
  // The read-only socket: beside the management one unless named, or off.
  EXPECT_EQ(defaults.readonly_socket_path(), "/run/lnetr/control-ro.sock");
  EXPECT_EQ(c.config.control.readonly_socket_path(), "/tmp/c-ro.sock");
  EXPECT_EQ(load_ok(std::string(kOneNet) + "control:\n  socket: /tmp/x/api\n").config.control.readonly_socket_path(),
            "/tmp/x/api-ro");
  EXPECT_EQ(load_ok(std::string(kOneNet) + "control:\n  readonly_socket: /tmp/ro\n  readonly_socket_group: adm\n")
                .config.control.readonly_socket_path(),
            "/tmp/ro");
  EXPECT_EQ(load_ok(std::string(kOneNet) + "control:\n  readonly_socket: \"off\"\n").config.control.readonly_socket_path(),
            "");
  EXPECT_THAT(ctl("  socket: /tmp/s\n  readonly_socket: /tmp/s\n"),
              ElementsAre(HasSubstr("the read-only socket must not be the management socket")));
}

TEST(ConfigErrors, DataplaneRules) {
  auto dp = [](std::string_view body) { return load_errors(std::string(kOneNet) + "dataplane:\n" + std::string(body)); };
  EXPECT_THAT(dp("  coers: [1]\n"), ElementsAre("lnetr.yaml:7:3: dataplane.coers: unknown key"));
  EXPECT_THAT(dp("  socklnd:\n    nagel: 1\n"), ElementsAre("lnetr.yaml:8:5: dataplane.socklnd.nagel: unknown key"));
  // ksocklnd parameters taken only at their defaults (what lnetr does).
  load_ok(std::string(kOneNet) + "dataplane:\n  socklnd:\n    enable_csum: 0\n    typed_conns: 1\n");
  EXPECT_THAT(dp("  socklnd:\n    enable_csum: 1\n"),
              ElementsAre(AllOf(StartsWith("lnetr.yaml:8:18: dataplane.socklnd.enable_csum: enable_csum 1 is not "
                                           "supported"),
                                HasSubstr("checksums"))));
  EXPECT_THAT(dp("  socklnd:\n    typed_conns: 0\n"),
              ElementsAre(StartsWith("lnetr.yaml:8:18: dataplane.socklnd.typed_conns: typed_conns 0 is not "
                                     "supported")));
  EXPECT_THAT(dp("  poll: lazy\n"),
              ElementsAre("lnetr.yaml:7:9: dataplane.poll: expected one of busy, adaptive, got \"lazy\""));
  EXPECT_THAT(dp("  hugepages: maybe\n"),
              ElementsAre("lnetr.yaml:7:14: dataplane.hugepages: expected one of auto, yes, no, got \"maybe\""));
  EXPECT_THAT(dp("  accept: some\n"),
              ElementsAre("lnetr.yaml:7:11: dataplane.accept: expected one of secure, all, none, got \"some\""));
  EXPECT_THAT(dp("  cores: [1, 2, 1]\n"), ElementsAre("lnetr.yaml:7:17: dataplane.cores[2]: core 1 is listed twice"));
  EXPECT_THAT(dp("  cores: []\n"),
              ElementsAre("lnetr.yaml:7:10: dataplane.cores: expected a non-empty sequence of core numbers, got a "
                          "sequence"));
  EXPECT_THAT(dp("  accept_port: 70000\n"),
              ElementsAre("lnetr.yaml:7:16: dataplane.accept_port: expected an integer 1..65535, got \"70000\""));
  EXPECT_THAT(dp("  socklnd:\n    min_reconnectms: 5000\n    max_reconnectms: 4000\n"),
              ElementsAre("lnetr.yaml:9:22: dataplane.socklnd.max_reconnectms: max_reconnectms (4000) must not be "
                          "less than min_reconnectms (5000)"));
  EXPECT_THAT(dp("  control_socket: \"\"\n"),
              ElementsAre("lnetr.yaml:7:19: dataplane.control_socket: expected a value, got nothing"));
  EXPECT_THAT(dp("  shm_name: lnetr\n"),
              ElementsAre("lnetr.yaml:7:13: dataplane.shm_name: expected a shared-memory name: '/' then a name "
                          "without '/', got \"lnetr\""));
  EXPECT_THAT(dp("  shm_name: /a/b\n"), ElementsAre(HasSubstr("dataplane.shm_name: expected a shared-memory name")));
  EXPECT_THAT(dp("  eal_args: [--log-level, {a: 1}]\n"),
              ElementsAre("lnetr.yaml:7:27: dataplane.eal_args[1]: expected an EAL argument, got a mapping"));

  const auto c = load_ok(std::string(kOneNet) +
                         "dataplane:\n  cores: [4, 5]\n  main_core: 4\n  poll: adaptive\n  hugepages: no\n"
                         "  eal_args: [--log-level, \"lib.eal:debug\"]\n  accept: all\n");
  EXPECT_THAT(c.config.dataplane.cores.value, ElementsAre(4u, 5u));
  EXPECT_EQ(c.config.dataplane.poll.value, PollMode::adaptive);
  EXPECT_EQ(c.config.dataplane.hugepages.value, HugePages::no);
  EXPECT_THAT(c.config.dataplane.eal_args.value, ElementsAre("--log-level", "lib.eal:debug"));
  EXPECT_EQ(c.config.dataplane.accept.value, AcceptMode::all);
  EXPECT_THAT(strings(c.warnings),
              ElementsAre("lnetr.yaml:8:14: dataplane.main_core: core 4 is also the core of CPT 0's worker; the two "
                          "share it"));
}

// ---- dataplane.ports ----------------------------------------------------------

// kOneNet, then `dataplane: ports:` with `items` from line 8 on.
std::string with_ports(std::string_view items, std::string_view after = "") {
  return std::string(kOneNet) + "dataplane:\n  ports:\n" + std::string(items) + std::string(after);
}

// One valid port on lines 8-10: name at column 13, device at 15, address at 16.
constexpr std::string_view kPort0 =
    "    - name: dpdk0\n"
    "      device: \"net_af_packet0,iface=veth-r1\"\n"
    "      address: 10.1.0.1/24\n";

// IPv6 NIDs are served on tcp nets (socklnd V4), over kernel sockets or
// DPDK ports with an IPv6 address; o2ib carries IPv4 NIDs only.
TEST(ConfigErrors, IpV6NidsOnTcpOnly) {
  const auto ok = load_ok("net:\n  - net type: tcp1\n    local NI(s):\n      - nid: fd00:1::5@tcp1\n"
                          "route:\n  - net: tcp9\n    gateway: fd00:1::1@tcp1\n");
  ASSERT_EQ(ok.config.nets.size(), 1u);
  EXPECT_EQ(to_string(ok.config.nets[0].nis[0].nid->value), "fd00:1::5@tcp1");
  EXPECT_EQ(to_string(ok.config.routes[0].gateway.value), "fd00:1::1@tcp1");
  EXPECT_THAT(load_errors("net:\n  - net type: o2ib\n    local NI(s):\n      - nid: 2001:db8::5@o2ib\n"),
              ElementsAre(HasSubstr("NID 2001:db8::5@o2ib: an IPv6 NID on a o2ib net")));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "route:\n  - net: tcp9\n    gateway: 2001:db8::1@o2ib\n"),
              ElementsAre(HasSubstr("gateway 2001:db8::1@o2ib: an IPv6 NID on a o2ib net")));
  // A DPDK port with an IPv6 address: /64 unless given.
  const auto v6 = load_ok("net:\n  - net type: tcp\n    local NI(s):\n      - nid: 2001:db8::5@tcp\n"
                          "        interfaces: {0: dpdk0}\n"
                          "dataplane:\n  ports:\n    - {name: dpdk0, device: d, address: 2001:db8::5}\n"
                          "    - {name: dpdk1, device: e, address: \"2001:db8:1::5/112\"}\n");
  const auto& ports = v6.config.dataplane.ports;
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_EQ(to_string(ports[0].address.value), "2001:db8::5");
  EXPECT_FALSE(ports[0].address.value.is_v4());
  EXPECT_EQ(ports[0].prefix_len.value, 64u);
  EXPECT_FALSE(ports[0].prefix_len.given());
  EXPECT_EQ(to_string(ports[1].address.value), "2001:db8:1::5");
  EXPECT_EQ(ports[1].prefix_len.value, 112u);
  EXPECT_THAT(load_errors(with_ports("    - {name: p, device: d, address: 2001:db8::5}\n"
                                     "    - {name: q, device: e, address: \"2001:db8::5/80\"}\n")),
              ElementsAre(HasSubstr("address 2001:db8::5 is already port p's")));
  EXPECT_THAT(load_errors(with_ports("    - {name: p, device: d, address: 2001:db8::5, mtu: 1000}\n")),
              ElementsAre(HasSubstr("dataplane.ports[0].mtu: port p has an IPv6 address: its mtu must be 1280 at "
                                    "least (IPv6's minimum), not 1000")));
}

TEST(ConfigPorts, ValidBlockLoadsEveryField) {
  const auto loaded = load_ok(std::string(kOneNet) +
                              "dataplane:\n"
                              "  cores: [0, 1]\n"
                              "  ports:\n"
                              "    - name: dpdk0\n"
                              "      device: \"net_af_packet0,iface=veth-r1\"\n"
                              "      address: 10.1.0.1/16\n"
                              "      mtu: 9000\n"
                              "      queues: 2\n"
                              "      vlan: 100\n"
                              "      impair:\n"
                              "        seed: 18446744073709551615\n"
                              "        loss: 0.01\n"
                              "        duplicate: 0.5\n"
                              "        reorder: 1\n"
                              "        delay_us: 1000000\n"
                              "    - name: A_b.c-9\n"
                              "      device: 0000:3b:00.0\n"
                              "      address: 192.168.7.254\n");
  EXPECT_TRUE(loaded.warnings.empty()) << join_errors(loaded.warnings);
  const auto& ports = loaded.config.dataplane.ports;
  ASSERT_EQ(ports.size(), 2u);
  const PortConfig& p = ports[0];
  EXPECT_EQ(p.source.field, "dataplane.ports[0]");
  EXPECT_EQ(p.source.line, 9u);
  EXPECT_EQ(p.name.value, "dpdk0");
  EXPECT_EQ(p.device.value, "net_af_packet0,iface=veth-r1");
  EXPECT_EQ(p.address.value, IpAddr::v4(0x0a010001u));
  EXPECT_EQ(p.prefix_len.value, 16u);
  EXPECT_TRUE(p.prefix_len.given());
  EXPECT_EQ(p.mtu.value, 9000u);
  EXPECT_EQ(p.queues.value, 2u);
  ASSERT_TRUE(p.vlan.value);
  EXPECT_EQ(*p.vlan.value, 100);
  EXPECT_EQ(p.impair.seed.value, 18446744073709551615ull);
  EXPECT_DOUBLE_EQ(p.impair.loss.value, 0.01);
  EXPECT_DOUBLE_EQ(p.impair.duplicate.value, 0.5);
  EXPECT_DOUBLE_EQ(p.impair.reorder.value, 1.0);
  EXPECT_EQ(p.impair.delay_us.value, 1000000u);
  EXPECT_TRUE(p.impair.active());
  // Each value carries where it was written.
  EXPECT_EQ(to_string(p.name.source), "lnetr.yaml:9:13: dataplane.ports[0].name");
  EXPECT_EQ(to_string(p.address.source), "lnetr.yaml:11:16: dataplane.ports[0].address");
  EXPECT_EQ(to_string(p.vlan.source), "lnetr.yaml:14:13: dataplane.ports[0].vlan");
  EXPECT_EQ(to_string(p.impair.loss.source), "lnetr.yaml:17:15: dataplane.ports[0].impair.loss");

  const PortConfig& q = ports[1];
  EXPECT_EQ(q.name.value, "A_b.c-9");
  EXPECT_EQ(q.device.value, "0000:3b:00.0");
  EXPECT_EQ(q.address.value, IpAddr::v4(0xc0a807feu));
  EXPECT_EQ(q.prefix_len.value, 24u);  // no /len: /24
  EXPECT_EQ(q.source.field, "dataplane.ports[1]");
}

TEST(ConfigPorts, Defaults) {
  const auto c = load_ok(with_ports(kPort0)).config;
  ASSERT_EQ(c.dataplane.ports.size(), 1u);
  const PortConfig& p = c.dataplane.ports[0];
  EXPECT_EQ(p.address.value, IpAddr::v4(0x0a010001u));
  EXPECT_EQ(p.prefix_len.value, 24u);
  EXPECT_EQ(p.mtu.value, 1500u);
  EXPECT_FALSE(p.mtu.given());
  EXPECT_EQ(p.queues.value, 1u);
  EXPECT_FALSE(p.queues.given());
  EXPECT_FALSE(p.vlan.value);
  EXPECT_TRUE(p.zero_copy.value);
  EXPECT_FALSE(p.zero_copy.given());
  EXPECT_TRUE(p.tso.value);
  EXPECT_FALSE(p.tso.given());
  EXPECT_EQ(p.impair.seed.value, 1u);
  EXPECT_EQ(p.impair.loss.value, 0.0);
  EXPECT_EQ(p.impair.duplicate.value, 0.0);
  EXPECT_EQ(p.impair.reorder.value, 0.0);
  EXPECT_EQ(p.impair.delay_us.value, 0u);
  EXPECT_FALSE(p.impair.active());
  // Absent, empty and null: no ports.
  EXPECT_TRUE(load_ok(std::string(kOneNet) + "dataplane:\n  ports: []\n").config.dataplane.ports.empty());
  EXPECT_TRUE(load_ok(std::string(kOneNet) + "dataplane:\n  ports:\n").config.dataplane.ports.empty());
  EXPECT_TRUE(load_ok(std::string(kOneNet) + "dataplane:\n  poll: busy\n").config.dataplane.ports.empty());
  // The address without /len is a host address of its /24.
  EXPECT_EQ(load_ok(with_ports("    - {name: p, device: d, address: 10.1.0.254}\n")).config.dataplane.ports[0]
                .address.value,
            IpAddr::v4(0x0a0100feu));
  EXPECT_FALSE(load_ok(with_ports("    - {name: p, device: d, address: 10.1.0.254}\n")).config.dataplane.ports[0]
                   .prefix_len.given());
  // An /30's two host addresses.
  EXPECT_EQ(load_ok(with_ports("    - {name: p, device: d, address: 10.1.0.2/30}\n")).config.dataplane.ports[0]
                .prefix_len.value,
            30u);
  // Zero copy turned off, and a value it does not take.
  const auto off = load_ok(with_ports(kPort0, "      zero_copy: 0\n")).config.dataplane.ports[0].zero_copy;
  EXPECT_FALSE(off.value);
  EXPECT_EQ(to_string(off.source), "lnetr.yaml:11:18: dataplane.ports[0].zero_copy");
  EXPECT_THAT(load_errors(with_ports(kPort0, "      zero_copy: yes\n")),
              ElementsAre("lnetr.yaml:11:18: dataplane.ports[0].zero_copy: expected 0 or 1, got \"yes\""));
  // Segmentation offload turned off, and a value it does not take.
  const auto no_tso = load_ok(with_ports(kPort0, "      tso: 0\n")).config.dataplane.ports[0].tso;
  EXPECT_FALSE(no_tso.value);
  EXPECT_EQ(to_string(no_tso.source), "lnetr.yaml:11:12: dataplane.ports[0].tso");
  EXPECT_THAT(load_errors(with_ports(kPort0, "      tso: on\n")),
              ElementsAre("lnetr.yaml:11:12: dataplane.ports[0].tso: expected 0 or 1, got \"on\""));
  // Explicit zero impairments are inactive.
  EXPECT_FALSE(load_ok(with_ports(kPort0, "      impair: {loss: 0, duplicate: 0.0, reorder: 0e0, delay_us: 0}\n"))
                   .config.dataplane.ports[0]
                   .impair.active());
}

TEST(ConfigPorts, RequiredKeys) {
  EXPECT_THAT(load_errors(with_ports("    - device: d\n      address: 10.1.0.1\n")),
              ElementsAre("lnetr.yaml:8:7: dataplane.ports[0]: missing key \"name\""));
  EXPECT_THAT(load_errors(with_ports("    - name: p\n      address: 10.1.0.1\n")),
              ElementsAre("lnetr.yaml:8:7: dataplane.ports[0]: missing key \"device\""));
  EXPECT_THAT(load_errors(with_ports(std::string(kPort0) + "    - name: p\n      device: d\n")),
              ElementsAre("lnetr.yaml:11:7: dataplane.ports[1]: missing key \"address\""));
  EXPECT_THAT(load_errors(with_ports("    - dpdk0\n")),
              ElementsAre("lnetr.yaml:8:7: dataplane.ports[0]: expected a mapping with `name`, `device` and "
                          "`address`, got \"dpdk0\""));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "dataplane:\n  ports: {name: dpdk0}\n"),
              ElementsAre("lnetr.yaml:7:10: dataplane.ports: expected a sequence, got a mapping"));
}

TEST(ConfigPorts, FieldErrorsNameLineAndField) {
  // `line` replaces line 8 (the name), 9 (the device) or 10 (the address) of kPort0,
  // or is added as line 11.
  auto replace = [](int n, std::string_view line) {
    std::vector<std::string> lines = {"    - name: dpdk0\n", "      device: \"net_af_packet0,iface=veth-r1\"\n",
                                      "      address: 10.1.0.1/24\n"};
    if (n < 3)
      lines[static_cast<std::size_t>(n)] = std::string(line);
    else
      lines.emplace_back(line);
    std::string items;
    for (const auto& l : lines) items += l;
    return load_errors(with_ports(items));
  };
  auto name = [&](std::string_view v) { return replace(0, "    - name: " + std::string(v) + "\n"); };
  auto device = [&](std::string_view v) { return replace(1, "      device: " + std::string(v) + "\n"); };
  auto address = [&](std::string_view v) { return replace(2, "      address: " + std::string(v) + "\n"); };
  auto extra = [&](std::string_view v) { return replace(3, std::string(v)); };

  EXPECT_THAT(name("averyveryverylongname"),
              ElementsAre("lnetr.yaml:8:13: dataplane.ports[0].name: expected at most 15 characters, got "
                          "\"averyveryverylongname\""));
  EXPECT_THAT(name("\"dp dk\""),
              ElementsAre("lnetr.yaml:8:13: dataplane.ports[0].name: expected a port name (1..15 characters A-Z a-z "
                          "0-9 _ . -), got \"dp dk\""));
  EXPECT_THAT(name("dp/0"), ElementsAre(HasSubstr("lnetr.yaml:8:13: dataplane.ports[0].name: expected a port name")));
  EXPECT_THAT(name("\"\""), ElementsAre("lnetr.yaml:8:13: dataplane.ports[0].name: expected a value, got nothing"));

  EXPECT_THAT(device("\"\""), ElementsAre("lnetr.yaml:9:15: dataplane.ports[0].device: expected a value, got nothing"));
  EXPECT_THAT(device("\"net_af_packet0, iface=veth1\""),
              ElementsAre("lnetr.yaml:9:15: dataplane.ports[0].device: expected a DPDK device without whitespace, its "
                          "name before any comma (a PCI address such as 0000:3b:00.0, or a virtual device such as "
                          "net_af_packet0,iface=eth1), got \"net_af_packet0, iface=veth1\""));
  EXPECT_THAT(device("\",iface=veth1\""),
              ElementsAre(HasSubstr("lnetr.yaml:9:15: dataplane.ports[0].device: expected a DPDK device without "
                                    "whitespace")));
  EXPECT_THAT(device("[a]"),
              ElementsAre("lnetr.yaml:9:15: dataplane.ports[0].device: expected a DPDK device, got a sequence"));

  const std::string bad_address =
      "lnetr.yaml:10:16: dataplane.ports[0].address: expected an IPv4 address a.b.c.d or a.b.c.d/len (len 1..30), "
      "or an IPv6 address with /len (len 1..127) or without (/64), got ";
  EXPECT_THAT(address("10.1.0"), ElementsAre(bad_address + "\"10.1.0\""));
  EXPECT_THAT(address("10.1.0.256"), ElementsAre(bad_address + "\"10.1.0.256\""));
  EXPECT_THAT(address("10.1.0.1.5"), ElementsAre(bad_address + "\"10.1.0.1.5\""));
  EXPECT_THAT(address("10.1..1"), ElementsAre(bad_address + "\"10.1..1\""));
  EXPECT_THAT(address("10.1.0.1/31"), ElementsAre(bad_address + "\"10.1.0.1/31\""));
  EXPECT_THAT(address("10.1.0.1/0"), ElementsAre(bad_address + "\"10.1.0.1/0\""));
  EXPECT_THAT(address("10.1.0.1/"), ElementsAre(bad_address + "\"10.1.0.1/\""));
  EXPECT_THAT(address("10.1.0.1/-8"), ElementsAre(bad_address + "\"10.1.0.1/-8\""));
  EXPECT_THAT(address("fe80::1"),
              ElementsAre(bad_address + "\"fe80::1\" (loopback and link-local IPv6 addresses cannot be NIDs)"));
  EXPECT_THAT(address("fd00::1/128"), ElementsAre(bad_address + "\"fd00::1/128\""));
  EXPECT_THAT(address("fd00::1/0"), ElementsAre(bad_address + "\"fd00::1/0\""));
  EXPECT_THAT(address("fd00::g1"), ElementsAre(bad_address + "\"fd00::g1\" (expected an IPv6 address)"));
  const std::string not_unicast = "lnetr.yaml:10:16: dataplane.ports[0].address: ";
  EXPECT_THAT(address("\"::\""), ElementsAre(not_unicast + ":: is the unspecified address, not a unicast address the "
                                                           "port can send from"));
  EXPECT_THAT(address("ff02::1"), ElementsAre(HasSubstr("ff02::1 is a multicast address")));
  EXPECT_THAT(address("\"::ffff:10.1.0.1\""), ElementsAre(HasSubstr("::ffff:10.1.0.1 is an IPv4-mapped address")));
  EXPECT_THAT(address("eth0"), ElementsAre(bad_address + "\"eth0\""));
  EXPECT_THAT(address("10.1.0.0/24"),
              ElementsAre("lnetr.yaml:10:16: dataplane.ports[0].address: 10.1.0.0 is the network address of "
                          "10.1.0.0/24, not a host address"));
  EXPECT_THAT(address("10.1.0.255"),
              ElementsAre("lnetr.yaml:10:16: dataplane.ports[0].address: 10.1.0.255 is the broadcast address of "
                          "10.1.0.0/24, not a host address"));
  EXPECT_THAT(address("10.1.3.255/22"),
              ElementsAre("lnetr.yaml:10:16: dataplane.ports[0].address: 10.1.3.255 is the broadcast address of "
                          "10.1.0.0/22, not a host address"));
  EXPECT_THAT(address("10.1.0.4/30"), ElementsAre(HasSubstr("10.1.0.4 is the network address of 10.1.0.4/30")));

  EXPECT_THAT(extra("      mtu: 575\n"),
              ElementsAre("lnetr.yaml:11:12: dataplane.ports[0].mtu: expected an integer 576..9000, got \"575\""));
  EXPECT_THAT(extra("      mtu: 9001\n"),
              ElementsAre("lnetr.yaml:11:12: dataplane.ports[0].mtu: expected an integer 576..9000, got \"9001\""));
  EXPECT_THAT(extra("      queues: 0\n"),
              ElementsAre("lnetr.yaml:11:15: dataplane.ports[0].queues: expected an integer 1..256, got \"0\""));
  EXPECT_THAT(extra("      vlan: 0\n"),
              ElementsAre("lnetr.yaml:11:13: dataplane.ports[0].vlan: expected an integer 1..4094, got \"0\""));
  EXPECT_THAT(extra("      vlan: 4095\n"),
              ElementsAre("lnetr.yaml:11:13: dataplane.ports[0].vlan: expected an integer 1..4094, got \"4095\""));
  EXPECT_THAT(extra("      speed: 10G\n"), ElementsAre("lnetr.yaml:11:7: dataplane.ports[0].speed: unknown key"));
  EXPECT_THAT(extra("      mtu: 1500\n      mtu: 9000\n"),
              ElementsAre("lnetr.yaml:12:7: dataplane.ports[0].mtu: duplicate key"));

  EXPECT_THAT(extra("      impair: {drop: 0.1}\n"),
              ElementsAre("lnetr.yaml:11:16: dataplane.ports[0].impair.drop: unknown key"));
  EXPECT_THAT(extra("      impair: {loss: 1.5}\n"),
              ElementsAre("lnetr.yaml:11:22: dataplane.ports[0].impair.loss: expected a probability 0..1, got "
                          "\"1.5\""));
  EXPECT_THAT(extra("      impair: {duplicate: -0.1}\n"),
              ElementsAre(HasSubstr("dataplane.ports[0].impair.duplicate: expected a probability 0..1")));
  EXPECT_THAT(extra("      impair: {reorder: nan}\n"),
              ElementsAre(HasSubstr("dataplane.ports[0].impair.reorder: expected a probability 0..1")));
  EXPECT_THAT(extra("      impair: {loss: 5%}\n"),
              ElementsAre(HasSubstr("dataplane.ports[0].impair.loss: expected a probability 0..1")));
  EXPECT_THAT(extra("      impair: {seed: -1}\n"),
              ElementsAre("lnetr.yaml:11:22: dataplane.ports[0].impair.seed: expected an integer "
                          "0..18446744073709551615, got \"-1\""));
  EXPECT_THAT(extra("      impair: {seed: 18446744073709551616}\n"),
              ElementsAre(HasSubstr("dataplane.ports[0].impair.seed: expected an integer 0..18446744073709551615")));
  EXPECT_THAT(extra("      impair: {delay_us: 1000001}\n"),
              ElementsAre("lnetr.yaml:11:26: dataplane.ports[0].impair.delay_us: expected an integer 0..1000000, got "
                          "\"1000001\""));
  EXPECT_THAT(extra("      impair: 0.1\n"),
              ElementsAre("lnetr.yaml:11:15: dataplane.ports[0].impair: expected a mapping, got \"0.1\""));
}

TEST(ConfigPorts, PortsMustDifferInNameDeviceAndAddress) {
  constexpr std::string_view kPort1 =  // lines 11-13
      "    - name: dpdk1\n"
      "      device: \"net_af_packet1,iface=veth-r2\"\n"
      "      address: 10.2.0.1/24\n";
  EXPECT_TRUE(load_ok(with_ports(std::string(kPort0) + std::string(kPort1))).config.dataplane.ports.size() == 2u);
  EXPECT_THAT(load_errors(with_ports(std::string(kPort0) +
                                     "    - name: dpdk0\n"
                                     "      device: \"net_af_packet1,iface=veth-r2\"\n"
                                     "      address: 10.2.0.1/24\n")),
              ElementsAre("lnetr.yaml:11:13: dataplane.ports[1].name: port name dpdk0 is already used (line 8, "
                          "column 13)"));
  // The device is compared without its arguments.
  EXPECT_THAT(load_errors(with_ports(std::string(kPort0) +
                                     "    - name: dpdk1\n"
                                     "      device: \"net_af_packet0,iface=veth-r2\"\n"
                                     "      address: 10.2.0.1/24\n")),
              ElementsAre("lnetr.yaml:12:15: dataplane.ports[1].device: device net_af_packet0 is already port "
                          "dpdk0's (line 9, column 15)"));
  EXPECT_THAT(load_errors(with_ports("    - {name: a, device: \"0000:3b:00.0\", address: 10.1.0.1}\n"
                                     "    - {name: b, device: \"0000:3b:00.0\", address: 10.2.0.1}\n")),
              ElementsAre("lnetr.yaml:9:25: dataplane.ports[1].device: device 0000:3b:00.0 is already port a's "
                          "(line 8, column 25)"));
  // The same address is an error whatever the prefixes.
  EXPECT_THAT(load_errors(with_ports(std::string(kPort0) +
                                     "    - name: dpdk1\n"
                                     "      device: \"net_af_packet1,iface=veth-r2\"\n"
                                     "      address: 10.1.0.1/16\n")),
              ElementsAre("lnetr.yaml:13:16: dataplane.ports[1].address: address 10.1.0.1 is already port dpdk0's "
                          "(line 10, column 16)"));
}

TEST(ConfigPorts, QueuesAtMostOnePerCpt) {
  const std::string two_queues = std::string(kPort0) + "      queues: 2\n";  // line 11, column 15
  EXPECT_THAT(load_errors(with_ports(two_queues)),
              ElementsAre("lnetr.yaml:11:15: dataplane.ports[0].queues: port dpdk0 has 2 queues but dataplane.cores "
                          "gives 1 CPT: at most one queue per CPT"));
  EXPECT_THAT(load_errors(with_ports(two_queues, "  cores: [3]\n")),
              ElementsAre(HasSubstr("lnetr.yaml:11:15: dataplane.ports[0].queues: port dpdk0 has 2 queues")));
  EXPECT_EQ(load_ok(with_ports(two_queues, "  cores: [3, 4]\n")).config.dataplane.ports[0].queues.value, 2u);
  EXPECT_THAT(load_errors(with_ports(std::string(kPort0) + "      queues: 3\n", "  cores: [3, 4]\n")),
              ElementsAre(HasSubstr("port dpdk0 has 3 queues but dataplane.cores gives 2 CPTs")));
  // A fragment without dataplane.cores is judged against the running router's.
  const std::string fragment = "dataplane:\n  ports:\n" + two_queues;
  EXPECT_TRUE(load_config(fragment, "t.yaml", {.fragment = true}));
  EXPECT_FALSE(load_config(fragment + "  cores: [0]\n", "t.yaml", {.fragment = true}));
}

TEST(ConfigErrors, Sections) {
  EXPECT_THAT(load_errors(std::string(kOneNet) + "routes:\n  - net: tcp9\n"),
              ElementsAre("lnetr.yaml:6:1: routes: unknown section"));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "ip2nets:\n  - net-spec: tcp\n"),
              ElementsAre("lnetr.yaml:6:1: ip2nets: not supported: list the nets under `net:` with their interfaces"));
  EXPECT_THAT(load_errors("- net: tcp\n"),
              ElementsAre("lnetr.yaml:1:1: expected a mapping of sections (net, route, routing, buffers, peer, "
                          "global, dataplane), got a sequence"));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "net: []\n"), ElementsAre("lnetr.yaml:6:1: net: duplicate key"));
  const auto w = load_ok(std::string(kOneNet) + "udsp:\n  - src: tcp\n    idx: 0\nstatistics:\n  msgs_alloc: 0\n");
  EXPECT_THAT(strings(w.warnings), ElementsAre("lnetr.yaml:6:1: udsp: UDSP rules are not supported by lnetr yet; ignored"));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "net2: &a {x: 1}\nnet3: *a\n"),
              ElementsAre("lnetr.yaml:7:7: YAML aliases are not supported in a configuration"));
  EXPECT_THAT(load_errors(std::string(kOneNet) + "---\nbuffers: {}\n"),
              ElementsAre("lnetr.yaml:6:1: more than one YAML document; a configuration is one document"));
  EXPECT_THAT(load_errors(""), ElementsAre("lnetr.yaml:1:1: net: no net is configured: a router needs at least one "
                                           "net other than lo"));
  EXPECT_TRUE(load_config("", "x.yaml", {.fragment = true}));
}

TEST(ConfigErrors, AllErrorsAreReported) {
  const auto errs = load_errors(
      "net:\n"
      "    - net type: tcp\n"
      "      local NI(s):\n"
      "        - interfaces: {0: eth0}\n"
      "          tunables: {peer_credits: 0, credits: x}\n"
      "route:\n"
      "    - net: lo\n"
      "      gateway: 10.0.0.1@tcp\n"
      "global: {transaction_timeout: 0}\n"
      "dataplane: {poll: never}\n");
  EXPECT_THAT(errs,
              ElementsAre(
                  "lnetr.yaml:5:36: net[0].local NI(s)[0].tunables.peer_credits: expected an integer 1..255, got \"0\"",
                  "lnetr.yaml:5:48: net[0].local NI(s)[0].tunables.credits: expected an integer >= 1, got \"x\"",
                  "lnetr.yaml:7:12: route[0].net: a route to net lo is not allowed",
                  "lnetr.yaml:9:31: global.transaction_timeout: expected an integer >= 1, got \"0\"",
                  "lnetr.yaml:10:19: dataplane.poll: expected one of busy, adaptive, got \"never\""));
}

TEST(ConfigErrors, YamlSyntaxErrorLocation) {
  EXPECT_THAT(load_errors("net:\n  - net type: tcp\n    local NI(s): [\n"),
              ElementsAre(HasSubstr("lnetr.yaml:4:1: YAML syntax error: ")));
  EXPECT_THAT(load_errors("net:\n  - net type: tcp\n   bad: 1\n"),
              ElementsAre("lnetr.yaml:3:4: YAML syntax error: did not find expected '-' indicator (while parsing a "
                          "block collection)"));
  EXPECT_THAT(load_errors("global:\n  discovery: 1\n\tretry_count: 2\n"),
              ElementsAre(HasSubstr("lnetr.yaml:3:1: YAML syntax error: found a tab character that violates indentation")));
  EXPECT_THAT(load_errors(std::string("buffers: {tiny: 1}\n\x01", 20)),
              ElementsAre(HasSubstr("lnetr.yaml:2:1: YAML syntax error: control characters are not allowed")));
}

// map_on_demand is obsolete (ko2iblnd registers per transfer whatever it
// says, and lnetr opens memory per transfer): `true` and 1 load quietly, 0
// is said to be taken as 1, a bad value is an error.
TEST(ConfigErrors, MapOnDemandIsAlwaysOn) {
  auto o2ib = [](std::string_view v) {
    return "net:\n  - net type: o2ib\n    local NI(s):\n      - interfaces: {0: ib0}\n"
           "        lnd tunables: {map_on_demand: " + std::string(v) + "}\n";
  };
  EXPECT_THAT(strings(load_ok(o2ib("true")).warnings), ElementsAre());
  EXPECT_THAT(strings(load_ok(o2ib("32")).warnings), ElementsAre());
  EXPECT_THAT(strings(load_ok(o2ib("0")).warnings),
              ElementsAre(StartsWith("lnetr.yaml:5:39: net[0].local NI(s)[0].lnd tunables.map_on_demand: "
                                     "map_on_demand 0 is taken as 1")));
  EXPECT_THAT(load_errors(o2ib("300")), ElementsAre(HasSubstr("expected an integer 0..256")));
}

TEST(ConfigErrors, WarningsForIgnoredKeys) {
  const auto w = load_ok("net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: eth0}\n"
                         "        lnd tunables: {map_on_demand: 1, conns_per_peer: 2}\n");
  EXPECT_THAT(strings(w.warnings),
              ElementsAre("lnetr.yaml:5:24: net[0].local NI(s)[0].lnd tunables.map_on_demand: an o2iblnd tunable; "
                          "ignored on a tcp net"));
  EXPECT_EQ(w.config.nets[0].nis[0].lnd_tunables.conns_per_peer.value, 2);
}

// Every setting a kernel export can carry is applied or named in a warning
// when it asks for something lnetr does not do; at the kernel's defaults
// (what every export lists) nothing is said.

TEST(ConfigErrors, SettingsNotInForceAreNamed) {
  const std::string net = "net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: eth0}\n";
  const auto quiet = load_ok(net + "global:\n  numa_range: 0\n  max_interfaces: 4096\n  discovery: 1\n"
                                   "  drop_asym_route: 1\n  retry_count: 2\n  transaction_timeout: 150\n"
                                   "  health_sensitivity: 100\n  recovery_interval: 1\n  router_sensitivity: 100\n"
                                   "  lnd_timeout: 49\n  response_tracking: 3\n  recovery_limit: 0\n"
                                   "  max_recovery_ping_interval: 900\n");
  EXPECT_TRUE(quiet.warnings.empty()) << join_errors(quiet.warnings);
  const auto w = load_ok(net + "global:\n  numa_range: 1\n  max_interfaces: 200\n  retry_count: 3\n"
                               "  transaction_timeout: 50\n  router_sensitivity: 50\n  response_tracking: 1\n"
                               "  recovery_limit: 60\n  max_recovery_ping_interval: 60\n"
                               "peer:\n  - primary nid: 10.0.0.9@tcp\n    peer ni:\n      - nid: 10.0.0.9@tcp\n"
                               "dataplane:\n  cores: [0, 1]\n");
  std::vector<std::string> named;
  for (const std::string& s : strings(w.warnings)) named.push_back(s.substr(s.find(": ") + 2));
  for (const char* key : {"global.numa_range: numa_range 1 is not in force", "global.max_interfaces: max_interfaces 200",
                          "global.retry_count: retry_count 3",
                          "global.router_sensitivity: router_sensitivity 50",
                          "global.response_tracking: response_tracking 1", "global.recovery_limit: recovery_limit 60",
                          "global.max_recovery_ping_interval: max_recovery_ping_interval 60",
                          "peer[0]: peer: configured peers are not used"})
    EXPECT_THAT(named, Contains(HasSubstr(key))) << key;
  EXPECT_EQ(named.size(), 8u) << join_errors(w.warnings);  // transaction_timeout is applied
  const auto ni = load_ok("net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: eth0}\n"
                          "        lnd tunables: {timeout: 20, tos: 104}\n        CPT: \"[1]\"\n"
                          "dataplane:\n  cores: [0, 1]\n");
  // (timeout, tos and the CPT list are applied: the NI's connections get
  // them, its peers live in CPT 1's worker.)
  EXPECT_THAT(strings(ni.warnings), ElementsAre());
  const Placement pl = placement(ni.config);
  ASSERT_EQ(pl.restricted.size(), 1u);
  EXPECT_EQ(pl.restricted[0].cpts, (std::vector<std::uint32_t>{1}));
  // On a DPDK port, queue q is polled by the list's q-th CPT: the port's
  // one queue (and every peer of the net) by CPT 1's worker.
  const auto port = load_ok("net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: p0}\n"
                            "        CPT: \"[1]\"\n"
                            "dataplane:\n  cores: [0, 1]\n  ports:\n    - name: p0\n      device: net_tap0\n"
                            "      address: 10.0.0.1/24\n");
  EXPECT_THAT(strings(port.warnings), ElementsAre());
  EXPECT_TRUE(placement(port.config).restricted.empty());
  ASSERT_EQ(placement(port.config).pinned.size(), 1u);
  EXPECT_EQ(placement(port.config).pinned[0].cpts, (std::vector<std::uint32_t>{1}));
  for (std::uint32_t a = 2; a < 40; ++a)
    EXPECT_EQ(placement(port.config).of(Nid::make(Net{2, 0}, 0x0a000000 + a), 2), 1u);
  // The list in the order written (Linux indexes it by the NID's hash),
  // repeats dropped; a second NI of the net with another list is named.
  const auto two = load_ok("net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: eth0}\n"
                           "        CPT: \"[3,1,3]\"\n      - interfaces: {0: eth1}\n        CPT: \"[2]\"\n"
                           "dataplane:\n  cores: [0, 1, 2, 3]\n");
  ASSERT_EQ(placement(two.config).restricted.size(), 1u);
  EXPECT_EQ(placement(two.config).restricted[0].cpts, (std::vector<std::uint32_t>{3, 1}));
  EXPECT_THAT(strings(two.warnings), ElementsAre(HasSubstr("through its first NI")));
}

// A port's queues against its NI's CPT list: each queue needs a CPT, a
// CPT beyond the queues serves nothing (named), and a net on two ports is
// served from one CPT.
TEST(ConfigPorts, CptListPlacesThePortsQueues) {
  const std::string net = "net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: p0}\n";
  const std::string dp = "dataplane:\n  cores: [0, 1, 2]\n  ports:\n    - name: p0\n      device: net_tap0\n"
                         "      address: 10.0.0.1/24\n";
  EXPECT_THAT(load_errors(net + "        CPT: \"[2]\"\n" + dp + "      queues: 2\n"),
              ElementsAre("lnetr.yaml:5:14: net[0].local NI(s)[0].CPT: port p0 has 2 queues but the CPT list names 1: "
                          "queue q is served by the list's q-th CPT"));
  const auto two = load_ok(net + "        CPT: \"[2,0]\"\n" + dp + "      queues: 2\n");
  EXPECT_THAT(strings(two.warnings), ElementsAre());
  const Placement pl = placement(two.config);
  ASSERT_EQ(pl.pinned.size(), 1u);
  EXPECT_EQ(pl.pinned[0].cpts, (std::vector<std::uint32_t>{2, 0}));
  for (std::uint32_t a = 2; a < 60; ++a) {
    const std::uint32_t q = steer_queue(0x0a000000 + a, 0x0a000001, 2);
    EXPECT_EQ(pl.of(Nid::make(Net{2, 0}, 0x0a000000 + a), 3), q == 0 ? 2u : 0u);
  }
  const auto extra = load_ok(net + "        CPT: \"[1,2]\"\n" + dp);
  EXPECT_THAT(strings(extra.warnings),
              ElementsAre("lnetr.yaml:5:14: net[0].local NI(s)[0].CPT: CPT list is not wholly in force: port p0 has 1 "
                          "queue, queue q served by the list's q-th CPT; CPT 2 serves none of its peers"));
  EXPECT_EQ(placement(extra.config).pinned[0].cpts, (std::vector<std::uint32_t>{1}));
  // One net on two one-queue ports: both queues from one CPT.
  const std::string both = "      - interfaces: {0: p1}\n";
  const std::string dp2 = dp + "    - name: p1\n      device: net_tap1\n      address: 10.0.0.2/24\n";
  EXPECT_THAT(load_errors(net + "        CPT: \"[1]\"\n" + both + dp2),
              ElementsAre(HasSubstr("net tcp is also served by port p0 from CPT 1, and here from CPT 0: a net on "
                                    "several ports is served by one CPT")));
  EXPECT_THAT(strings(load_ok(net + "        CPT: \"[1]\"\n" + both + "        CPT: \"[1]\"\n" + dp2).warnings),
              ElementsAre());
  // The net's first NI on kernel sockets: its first NI on a port places it.
  const std::string kernel_first = "net:\n  - net type: tcp\n    local NI(s):\n      - interfaces: {0: eth0}\n"
                                   "      - interfaces: {0: p0}\n        CPT: \"[0]\"\n";
  EXPECT_THAT(load_errors(kernel_first + both + "        CPT: \"[1]\"\n" + dp2),
              ElementsAre(HasSubstr("net tcp is also served by port p0 from CPT 0, and here from CPT 1")));
}

TEST(ConfigErrors, O2ibRegistrationPoolTunablesWarnedWhenNotDefault) {
  // A kernel's export carries them at their defaults: no warning then.
  const auto quiet = load_ok("net:\n  - net type: o2ib\n    local NI(s):\n      - nid: 10.1.0.1@o2ib\n"
                             "        lnd tunables: {fmr_pool_size: 512, fmr_flush_trigger: 384, fmr_cache: 1}\n");
  EXPECT_TRUE(quiet.warnings.empty());
  const auto w = load_ok("net:\n  - net type: o2ib\n    local NI(s):\n      - nid: 10.1.0.1@o2ib\n"
                         "        lnd tunables: {fmr_pool_size: 1024, ntx: 2048}\n");
  EXPECT_THAT(strings(w.warnings),
              ElementsAre("lnetr.yaml:5:24: net[0].local NI(s)[0].lnd tunables.fmr_pool_size: fmr_pool_size 1024 is not "
                          "in force: lnetr registers router buffers once per pool and opens them to peers through memory "
                          "windows, so it keeps no "
                          "registration pool"));
  EXPECT_EQ(w.config.nets[0].nis[0].lnd_tunables.ntx.value, 2048);
}

TEST(Config, O2iblndSection) {
  const auto c = load_ok(std::string(kOneNet) + "dataplane:\n  o2iblnd:\n    service: 988\n    keepalive: 30\n"
                         "    cksum: 1\n    retry_count: 7\n    rnr_retry_count: 7\n    use_privileged_port: 0\n"
                         "    require_privileged_port: 1\n    remote_keys: transfer\n");
  const auto& o = c.config.dataplane.o2iblnd;
  EXPECT_EQ(o.service.value, 988);
  EXPECT_EQ(o.keepalive.value, 30);
  EXPECT_TRUE(o.cksum.value);
  EXPECT_EQ(o.retry_count.value, 7);
  EXPECT_EQ(o.rnr_retry_count.value, 7);
  EXPECT_FALSE(o.use_privileged_port.value);
  EXPECT_TRUE(o.require_privileged_port.value);
  EXPECT_EQ(o.remote_keys.value, "transfer");
  EXPECT_TRUE(c.warnings.empty());
  // Per-transfer keys unless asked otherwise; pool keys are warned about.
  EXPECT_EQ(load_ok(kOneNet).config.dataplane.o2iblnd.remote_keys.value, "transfer");
  const auto pool = load_ok(std::string(kOneNet) + "dataplane:\n  o2iblnd:\n    remote_keys: pool\n");
  EXPECT_EQ(pool.config.dataplane.o2iblnd.remote_keys.value, "pool");
  EXPECT_THAT(strings(pool.warnings),
              ElementsAre(HasSubstr("lnetr.yaml:8:18: dataplane.o2iblnd.remote_keys: remote_keys: pool hands every "
                                    "connected o2ib peer a key to whole router buffer pools")));
  auto dp = [](std::string_view body) { return load_errors(std::string(kOneNet) + "dataplane:\n" + std::string(body)); };
  EXPECT_THAT(dp("  o2iblnd:\n    remote_keys: some\n"),
              ElementsAre("lnetr.yaml:8:18: dataplane.o2iblnd.remote_keys: expected pool or transfer, got \"some\""));
  EXPECT_THAT(dp("  o2iblnd:\n    retry_count: 8\n"),
              ElementsAre("lnetr.yaml:8:18: dataplane.o2iblnd.retry_count: expected an integer 0..7, got \"8\""));
  EXPECT_THAT(dp("  o2iblnd:\n    fmr: 1\n"), ElementsAre("lnetr.yaml:8:5: dataplane.o2iblnd.fmr: unknown key"));
}

TEST(ConfigErrors, CrLfLineEndings) {
  const auto c = load_ok("net:\r\n  - net type: tcp\r\n    local NI(s):\r\n      - interfaces: {0: eth0}\r\n"
                         "buffers:\r\n  tiny: 5\r\n")
                     .config;
  EXPECT_EQ(c.buffers.tiny.value, 5u);
  EXPECT_EQ(c.buffers.tiny.source.line, 6u);
  EXPECT_EQ(c.buffers.tiny.source.column, 9u);
}

TEST(ConfigValidate, RunsOnAConfigChangedThroughTheApi) {
  auto c = load_ok(kOneNet).config;
  RouteConfig r;
  r.net = {net("tcp"), Source{"api", 0, 0, "route[0].net"}};
  r.gateway = {nid("10.0.0.9@tcp1")};
  c.routes.push_back(r);
  std::vector<ConfigError> errors, warnings;
  validate(c, {}, errors, warnings);
  EXPECT_THAT(strings(errors),
              ElementsAre("api: route[0].net: net tcp is a local net of this router; it cannot be a route's remote net"));
  EXPECT_TRUE(warnings.empty());
}

// ---- files ------------------------------------------------------------------

TEST(ConfigFile, UnreadableFileIsOneError) {
  auto r = load_config_file("/nonexistent/lnetr.yaml");
  ASSERT_FALSE(r);
  EXPECT_THAT(strings(r.error()),
              ElementsAre("/nonexistent/lnetr.yaml: cannot read the file: No such file or directory"));
  auto d = load_config_file("/");
  ASSERT_FALSE(d);
  EXPECT_THAT(strings(d.error()), ElementsAre("/: cannot read the file: Is a directory"));
}

TEST(ConfigFile, ExampleLoads) {
  const auto loaded = file_ok(LNETR_SOURCE_DIR "/deploy/examples/lnetr.yaml");
  EXPECT_TRUE(loaded.warnings.empty()) << join_errors(loaded.warnings);
  const auto& c = loaded.config;
  ASSERT_EQ(c.nets.size(), 2u);
  EXPECT_EQ(c.nets[0].nis[0].interface->value, "lan0");
  EXPECT_THAT(c.nets[0].nis[0].cpts.value, ElementsAre(0u));
  ASSERT_EQ(c.routes.size(), 2u);
  EXPECT_EQ(c.routes[1].gateway.value, nid("10.2.0.12@tcp1"));
  // Fits a 2-core machine: one worker on core 1, adaptive polling.
  EXPECT_THAT(c.dataplane.cores.value, ElementsAre(1u));
  EXPECT_EQ(c.dataplane.poll.value, PollMode::adaptive);
  // The appliance's groups own the sockets; management on its own NIC.
  EXPECT_EQ(c.control.socket_group.value, "lnetr-admin");
  EXPECT_EQ(c.control.readonly_socket_group.value, "lnetr-monitor");
  EXPECT_EQ(c.control.management_interface.value, "mgmt0");
  EXPECT_EQ(c.dataplane.effective_main_core(0), 0u);
  EXPECT_EQ(c.dataplane.socklnd.keepalive.value, 30);
  EXPECT_TRUE(c.dataplane.socklnd.keepalive.given());
  EXPECT_EQ(c.dataplane.o2iblnd.keepalive.value, 100);
  EXPECT_EQ(c.dataplane.o2iblnd.remote_keys.value, "transfer");
}

}  // namespace
}  // namespace lnetr::config
