// lnetr-peer: an LNet endpoint that speaks exactly what a Linux kernel node
// speaks (socklnd on kernel sockets, o2iblnd over verbs; PID 12345,
// privileged ports, ping and push targets), used as the test and benchmark
// peer of lnetr.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <malloc.h>
#include <net/if.h>
#include <netinet/in.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/peer/commands.hpp"
#include "cli/peer/endpoint.hpp"
#include "cli/peer/report.hpp"
#include "lnd/socklnd/address.hpp"

namespace {

using namespace lnetr;
using namespace lnetr::peer;

constexpr const char* kDescription =
    "lnetr-peer: an LNet endpoint (socklnd on kernel sockets, or on a DPDK port with lnetr's TCP/IP, for tcp "
    "NIDs; o2iblnd over verbs for o2ib NIDs; PID 12345), wire-compatible with a Linux kernel node.\nIt always "
    "answers pings and pushes and serves test data on portal 42; the subcommand says what it does besides.\nNeeds "
    "root on kernel sockets and verbs: it connects from privileged ports and listens on 988 (socklnd) or 987 "
    "(o2iblnd).";

int die(const std::string& msg) {
  std::fprintf(stderr, "lnetr-peer: %s\n", msg.c_str());
  return 1;
}

bool parse_target(const std::string& s, Nid& out, std::string& err) {
  auto n = parse_nid(s);
  if (!n) {
    err = "bad NID '" + s + "': " + std::string(n.error().reason);
    return false;
  }
  if (n->is_any() || n->lnd() == LndType::lo) {
    err = "NID '" + s + "' names no peer";
    return false;
  }
  out = *n;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription, "lnetr-peer"};
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand

  std::string nid_s, iface, net_s = "tcp", accept_s = "secure";
  std::vector<std::string> route_s;
  int check_interval = 60;
  int port = sock::kAcceptPort;
  int sock_timeout = 50, keepalive = 30;
  unsigned conns_per_peer = 1;
  bool print_stats = false, drop_asym = false;
  app.add_option("--nid", nid_s, "our NID, e.g. 10.0.0.5@tcp (or use --interface)");
  app.add_option("--interface", iface, "take our NID from this interface's IPv4 address (else IPv6, on tcp), on --net");
  app.add_option("--net", net_s, "net of the NID taken from --interface")->capture_default_str();
  app.add_option("--route", route_s, "NET=GATEWAY_NID: reach NET through that gateway (repeatable)");
  app.add_option("--router-check-interval", check_interval,
                 "seconds between gateway checks (ping, and push if Multi-Rail); 0: none")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--drop-asym-route", drop_asym,
               "drop messages from a remote net that come through a gateway not on a route back to it (as "
               "lnetctl set drop_asym_route 1)");
  app.add_option("--accept", accept_s, "which connections the acceptor takes: secure (ports < 1024), all, none")
      ->capture_default_str()
      ->check(CLI::IsMember({"secure", "all", "none"}));
  app.add_option("--port", port, "socklnd acceptor port (ours and the peers'); o2ib: the rdma_cm service port (987)")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  app.add_option("--timeout,--sock-timeout", sock_timeout,
                 "socklnd sock_timeout in seconds (before the subcommand; after ping/put/get/brw, --timeout is "
                 "theirs)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--keepalive", keepalive, "socklnd keepalive in seconds (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  bool large_nids = false;
  app.add_flag("--large-nids", large_nids,
               "socklnd: speak V4 (20-byte NIDs) to IPv4 peers too, to reach IPv6 nets through an IPv4 router");
  app.add_option("--conns-per-peer", conns_per_peer, "socklnd bulk connections of each direction per peer")
      ->capture_default_str()
      ->check(CLI::Range(1, 127));
  unsigned peer_credits = o2ib::kDefaultQueueDepth;
  app.add_option("--peer-credits", peer_credits, "o2ib: queue depth offered and accepted (8..255)")
      ->capture_default_str()
      ->check(CLI::Range(8, 255));
  std::string dpdk_device, dpdk_poll = "adaptive";
  unsigned dpdk_prefix = 24, dpdk_mtu = 1500;
  int dpdk_core = -1;
  auto* dpdk_opt = app.add_option("--dpdk", dpdk_device,
                                  "run the tcp NI on this DPDK device with lnetr's own TCP/IP instead of kernel "
                                  "sockets: a virtual device's arguments (net_memif0,role=client,socket=PATH) or a "
                                  "PCI address; its address is the NID's");
  auto* prefix_opt = app.add_option("--prefix-len", dpdk_prefix, "--dpdk: the address's prefix length (IPv6: 64 if not given)")
      ->capture_default_str()
      ->check(CLI::Range(1, 127))
      ->needs(dpdk_opt);
  app.add_option("--mtu", dpdk_mtu, "--dpdk: the port's MTU")
      ->capture_default_str()
      ->check(CLI::Range(576, 9000))
      ->needs(dpdk_opt);
  app.add_option("--core", dpdk_core, "--dpdk: pin the thread to this core")->check(CLI::NonNegativeNumber)->needs(
      dpdk_opt);
  app.add_option("--poll", dpdk_poll, "--dpdk: busy (never nap) or adaptive (nap after a run of empty turns)")
      ->capture_default_str()
      ->check(CLI::IsMember({"busy", "adaptive"}))
      ->needs(dpdk_opt);
  app.add_flag("--stats", print_stats, "print the endpoint's counters (the server's 'stats' document) at the end");

  // ping
  PingArgs ping;
  std::string ping_nid;
  auto* ping_cmd = app.add_subcommand("ping", "LNet ping (GET portal 0, sink 3960) as lnetctl ping; YAML result");
  ping_cmd->add_option("nid", ping_nid, "the NID to ping")->required();
  ping_cmd->add_option("--count", ping.count, "pings, one after the other")->capture_default_str()->check(
      CLI::PositiveNumber);
  ping_cmd->add_option("--timeout", ping.timeout_s, "seconds to wait for each answer")->capture_default_str()->check(
      CLI::PositiveNumber);

  // put / get
  XferArgs put, get;
  std::string put_nid, get_nid;
  std::uint32_t corrupt_at = 0;
  auto add_xfer = [&](const char* nm, const char* help, XferArgs& x, std::string& target) {
    auto* c = app.add_subcommand(nm, help);
    c->add_option("nid", target, "the server's NID")->required();
    c->add_option("--size", x.size, "payload bytes (0..1048576)")->required()->check(CLI::Range(0u, kLnetMtu));
    c->add_option("--count", x.count, "messages, one after the other")->capture_default_str()->check(
        CLI::PositiveNumber);
    c->add_option("--offset", x.offset, "the PUT's offset / the GET's src_offset")->capture_default_str();
    c->add_option("--timeout", x.timeout_s, "seconds to wait for each ACK/REPLY")->capture_default_str()->check(
        CLI::PositiveNumber);
    return c;
  };
  auto* put_cmd = add_xfer("put", "PUT pattern data (ACK requested) to a server; the ACK's mlength must be the size",
                           put, put_nid);
  put_cmd->add_option("--corrupt", corrupt_at, "test only: flip a bit of this payload byte after filling")
      ->group("");
  auto* get_cmd = add_xfer("get", "GET pattern data from a server and verify every byte of the REPLY", get, get_nid);

  // server
  ServerArgs server;
  auto* server_cmd = app.add_subcommand("server", "serve until SIGINT/SIGTERM or --duration; print counters");
  server_cmd->add_option("--duration", server.duration_s, "seconds (0: until a signal)")->capture_default_str()->check(
      CLI::NonNegativeNumber);

  // brw
  BrwArgs brw;
  std::string brw_nid, brw_op, brw_check = "full";
  auto* brw_cmd = app.add_subcommand("brw", "lnet_selftest-style load: write = PUT+ACK, read = GET+REPLY");
  brw_cmd->add_option("nid", brw_nid, "the server's NID")->required();
  brw_cmd->add_option("--op", brw_op, "read or write")->required()->check(CLI::IsMember({"read", "write"}));
  brw_cmd->add_option("--size", brw.size, "bytes per message (0..1048576)")->capture_default_str()->check(
      CLI::Range(0u, kLnetMtu));
  brw_cmd->add_option("--sizes", brw.sizes, "sizes of successive operations, in turn (overrides --size)")
      ->delimiter(',')
      ->check(CLI::Range(0u, kLnetMtu));
  brw_cmd->add_option("--count", brw.count, "stop after this many operations (and --duration at the latest)");
  brw_cmd->add_option("--concurrency", brw.concurrency, "operations in flight")->capture_default_str()->check(
      CLI::Range(1, 1024));
  brw_cmd->add_option("--duration", brw.duration_s, "seconds of load")->capture_default_str()->check(
      CLI::PositiveNumber);
  brw_cmd->add_option("--warmup", brw.warmup_s,
                      "seconds of load before the duration whose operations are not counted, nor in --count "
                      "(connections, gateway checks)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  brw_cmd->add_option("--delay", brw.delay_s,
                      "seconds to serve before any load (a DPDK link that just came up settles, routes with it)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  brw_cmd->add_option("--timeout", brw.timeout_s, "seconds to wait for each ACK/REPLY")->capture_default_str()->check(
      CLI::PositiveNumber);
  brw_cmd->add_option("--check", brw_check,
                      "full: a fresh pattern per message, REPLYs verified; none: each slot's pattern made once, "
                      "REPLYs not verified (the server still verifies every PUT)")
      ->capture_default_str()
      ->check(CLI::IsMember({"full", "none"}));
  brw_cmd->add_option("--json", brw.json, "also write the result as JSON to this file");

  app.set_version_flag("--version", std::string("lnetr-peer ") + LNETR_VERSION);
  CLI11_PARSE(app, argc, argv);

  // Identity.
  EndpointConfig cfg;
  std::string err;
  if (nid_s.empty() == iface.empty()) return die("give exactly one of --nid and --interface");
  if (!nid_s.empty()) {
    auto n = parse_nid(nid_s);
    if (!n) return die("bad --nid '" + nid_s + "': " + std::string(n.error().reason));
    cfg.nid = *n;
  } else {
    auto net = parse_net(net_s);
    if (!net) return die("bad --net '" + net_s + "': " + std::string(net.error().reason));
    // Its IPv4 address, else (tcp) an IPv6 one, as Linux picks an NI's.
    auto ip = sock::interface_address(iface);
    if (ip && !ip->is_v4() && net->lnd() != LndType::sock) ip.reset();
    if (!ip) return die("interface " + iface + " does not exist or has no usable address");
    cfg.nid = sock::make_nid(*net, *ip);
  }
  if ((cfg.nid.lnd() != LndType::sock && cfg.nid.lnd() != LndType::o2ib) ||
      (!cfg.nid.is_nid4() && cfg.nid.lnd() != LndType::sock))
    return die("NID " + to_string(cfg.nid) + ": lnetr-peer needs a NID on a tcp (socklnd: IPv4 or IPv6) or o2ib "
               "(IPv4) net");
  for (const std::string& r : route_s) {
    auto spec = parse_route(r, err);
    if (!spec) return die(err);
    cfg.routes.push_back(*spec);
  }
  if (!dpdk_device.empty()) {
    // As the dataplane: no madvise per freed send-queue chunk on a DPDK
    // port's path (dataplane/main.cpp).
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // (the above fixes this one too, else at 128 KiB)
    if (cfg.nid.lnd() != LndType::sock) return die("--dpdk: the NID must be on a tcp net, not " + to_string(cfg.nid));
    const bool v6 = !cfg.nid.is_nid4();
    if (prefix_opt->count() == 0 && v6) dpdk_prefix = 64;
    if (dpdk_prefix > (v6 ? 127u : 32u)) return die("--prefix-len: at most 32 for an IPv4 address");
    DpdkOptions d;
    d.device = dpdk_device;
    d.prefix_len = dpdk_prefix;
    d.mtu = static_cast<std::uint16_t>(dpdk_mtu);
    if (dpdk_core >= 0) d.core = static_cast<unsigned>(dpdk_core);
    d.busy = dpdk_poll == "busy";
    cfg.dpdk = d;
  }
  cfg.router_check_interval = std::chrono::seconds(check_interval);
  cfg.drop_asym_route = drop_asym;
  cfg.sock.port = static_cast<std::uint16_t>(port);
  cfg.sock.accept = accept_s == "all" ? sock::AcceptMode::all
                    : accept_s == "none" ? sock::AcceptMode::none
                                         : sock::AcceptMode::secure;
  cfg.sock.timeout = std::chrono::seconds(sock_timeout);
  cfg.sock.keepalive = std::chrono::seconds(keepalive);
  cfg.sock.conns_per_peer = conns_per_peer;
  cfg.sock.offer_v4 = large_nids;
  // o2ib: the same options in ko2iblnd's terms (its own defaults where not given).
  cfg.o2ib.service = app.count("--port") ? static_cast<std::uint16_t>(port) : o2ib::kServicePort;
  if (app.count("--keepalive")) cfg.o2ib.keepalive = std::chrono::seconds(keepalive);
  cfg.o2ib_tunables.timeout = std::chrono::seconds(sock_timeout);
  cfg.o2ib_tunables.conns_per_peer = conns_per_peer;
  cfg.o2ib_tunables.peer_credits = peer_credits;

  // The command's target.
  Nid target;
  const std::string* target_s = nullptr;
  if (*ping_cmd) target_s = &ping_nid;
  if (*put_cmd) target_s = &put_nid;
  if (*get_cmd) target_s = &get_nid;
  if (*brw_cmd) target_s = &brw_nid;
  if (target_s) {
    if (!parse_target(*target_s, target, err)) return die(err);
    if (target == cfg.nid) return die("the target " + to_string(target) + " is our own NID");
  }

  Endpoint ep(cfg);
  if (!ep.open(err)) return die(err);

  int rc = 0;
  if (*server_cmd) {
    // For scripts: the acceptor is listening once this line is out.
    std::fprintf(stderr, "lnetr-peer: serving %s (port %d, incarnation %llu)\n", to_string(cfg.nid).c_str(), port,
                 static_cast<unsigned long long>(ep.incarnation()));
    std::fflush(stderr);
  }
  if (*ping_cmd) {
    ping.nid = target;
    rc = run_ping(ep, ping, stdout);
  } else if (*put_cmd) {
    put.nid = target;
    put.put = true;
    if (put_cmd->count("--corrupt") > 0) put.corrupt = corrupt_at;
    rc = run_xfer(ep, put, stdout);
  } else if (*get_cmd) {
    get.nid = target;
    get.put = false;
    rc = run_xfer(ep, get, stdout);
  } else if (*server_cmd) {
    rc = run_server(ep, server, stdout);
  } else if (*brw_cmd) {
    brw.nid = target;
    brw.write = brw_op == "write";
    brw.check = brw_check == "full";
    rc = run_brw(ep, brw, stdout);
  }
  if (print_stats && !*server_cmd) {
    Yaml y;
    y.map("stats");
    stats_yaml(y, ep);
    y.end();
    std::fputs(y.str().c_str(), stdout);
  }
  std::fflush(stdout);
  return rc;
}
