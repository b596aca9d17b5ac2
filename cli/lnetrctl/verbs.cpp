#include "cli/lnetrctl/verbs.hpp"

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fcntl.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <deque>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>

#include "cli/lnetrctl/system.hpp"
#include "cli/lnetrctl/top.hpp"
#include "cli/lnetrctl/yaml_out.hpp"
#include "router/nid.hpp"
#include "router/nidrange.hpp"

namespace lnetr::lnetrctl {

namespace {

constexpr std::size_t kMaxGateways = 1024;  // one route add's gateway range

OptionSpec verbose_option() {
  return {"-v,--verbose", "verbose", ValueKind::level, "more detail: -v, or -v LEVEL (0..4)", false, 0, 4};
}

std::vector<VerbSpec> make_verbs() {
  const OptionSpec net_filter{"--net", "net", ValueKind::net, "only this net (e.g. tcp1, o2ib)"};
  std::vector<VerbSpec> v = {
      {"net", "show", "the router's nets and NIs: status, and with -v statistics, tunables and CPTs",
       {net_filter, verbose_option()}, {}, true},
      {"net", "add", "add an NI at run time (tcp nets: a kernel interface, or a DPDK port of dataplane.ports; "
                     "o2ib nets: the IPoIB or RoCE interface of an RDMA device); `save` keeps it",
       {{"--net", "net", ValueKind::net, "the net, e.g. tcp2", true},
        {"--if", "if", ValueKind::text, "the interface: a kernel interface, the name of a DPDK port, or (o2ib) an RDMA "
                                        "device's interface"},
        {"--nid", "nid", ValueKind::nid, "the NI's NID (default: the interface's address)"},
        {"--peer-timeout", "peer_timeout", ValueKind::integer, "seconds before a silent peer is down", false, 0,
         0x7fffffff},
        {"--peer-credits", "peer_credits", ValueKind::integer, "credits per peer", false, 0, 0x7fffffff},
        {"--peer-buffer-credits", "peer_buffer_credits", ValueKind::integer, "router buffer credits per peer", false, 0,
         0x7fffffff},
        {"--credits", "credits", ValueKind::integer, "the NI's transmit credits", false, 0, 0x7fffffff},
        {"--cpt", "cpt", ValueKind::text, "the CPTs serving its peers, e.g. [0,1] (default: all)"}},
       {}, false},
      {"net", "del", "delete an NI at run time: its connections close, and messages in flight on it are dropped "
                     "(counted as ni_deleted); `save` keeps it deleted",
       {{"--net", "net", ValueKind::net, "the net", true},
        {"--if", "if", ValueKind::text, "the NI's interface (when the net has several NIs)"},
        {"--nid", "nid", ValueKind::nid, "the NI's NID (when the net has several NIs)"}},
       {}, false},
      {"net", "set", "change NIs' LND values at run time: connections open stay, new ones follow; `save` keeps "
                     "them",
       {{"--nid", "nid", ValueKind::nid, "the NI"},
        {"--net", "net", ValueKind::net, "the net's NIs; with --lnd-timeout, every NI of its LND (tcp or o2ib)"},
        {"--all", "all", ValueKind::none, "every NI"},
        {"--conns-per-peer", "conns_per_peer", ValueKind::integer,
         "connections of each kind to a peer, 0..127 (0: automatic)", false, 0, 127},
        {"--lnd-timeout", "lnd_timeout", ValueKind::integer,
         "seconds without progress before a connection is closed (0: global lnd_timeout); needs --net", false, 0,
         0x7fffffff},
        {"--health", "health", ValueKind::integer, "refused: lnetr keeps no health of its own NIs", false, 0, 1000}},
       {}, false},
      {"route", "add", "add a route to a remote net through a gateway (a NID range adds one route per gateway)",
       {{"--net", "net", ValueKind::net, "the remote net", true},
        {"--gateway", "gateway", ValueKind::nid_range, "the gateway's NID, or a NID range such as 10.0.0.[1-4]@tcp1",
         true},
        {"--hop,--hop-count", "hop", ValueKind::integer, "hops to the remote net: -1 (unknown) or 1..255", false, -1,
         255},
        {"--priority", "priority", ValueKind::integer, "lower is preferred (default 0)", false, 0, 4294967295L},
        {"--health_sensitivity", "health_sensitivity", ValueKind::integer,
         "health the gateway loses per failure, 0..1000 (default: global health_sensitivity)", false, 0, 1000}},
       {}, false},
      {"route", "del", "delete the routes to a net through a gateway (or each gateway of a NID range)",
       {{"--net", "net", ValueKind::net, "the remote net", true},
        {"--gateway", "gateway", ValueKind::nid_range, "the gateway's NID or a NID range", true}},
       {}, false},
      {"route", "show", "routes; with -v hop, priority, state, type and why a route is down",
       {{"--net", "net", ValueKind::net, "only routes to this net"},
        {"--gateway", "gateway", ValueKind::nid, "only routes through this gateway"},
        {"--hop,--hop-count", "hop", ValueKind::integer, "only routes with this hop count", false, -1, 255},
        {"--priority", "priority", ValueKind::integer, "only routes with this priority", false, 0, 4294967295L},
        verbose_option()},
       {}, true},
      {"routing", "show", "router buffer pools per CPT and the routing state", {}, {}, true},
      {"peer", "show", "peers the router has exchanged messages with; -v adds credits and statistics",
       {{"--nid", "nid", ValueKind::nid, "only this peer"}, verbose_option()}, {}, true},
      {"stats", "show", "the router's message counters (since the last stats reset)", {}, {}, true},
      {"stats", "reset", "start stats show's counters from zero (Prometheus series are not reset)", {}, {}, false},
      {"global", "show", "global tunables", {}, {}, true},
      {"gateway", "show", "gateway health as lnetr-control checks it: state, health, ping round trip, NIs",
       {{"--gateway", "gateway", ValueKind::nid, "only this gateway"}}, {}, true},
      {"dataplane", "show", "the dataplane's workers (CPT, core, busy ratio, rings) and ports", {}, {}, true},
      {"buffers", "show", "router buffers and NI transmit credits per CPT", {}, {}, true},
      {"set", "routing", "enable (1) or disable (0) forwarding; disabling drains first, as a kernel router does",
       {}, {{"VALUE", ValueKind::integer, "0 or 1"}}, false},
      {"set", "health_sensitivity", "health a gateway loses per failure (0..1000)", {},
       {{"VALUE", ValueKind::integer, "0..1000"}}, false},
      {"set", "drop_asym_route", "drop (1) or accept (0) messages for the router that come through a gateway not on "
       "a route back to their source net",
       {}, {{"VALUE", ValueKind::integer, "0 or 1"}}, false},
      {"set", "alive_router_check_interval", "seconds between gateway checks (0: no checks)", {},
       {{"VALUE", ValueKind::integer, "seconds"}}, false},
      {"set", "router_ping_timeout", "seconds a gateway has to answer a check", {},
       {{"VALUE", ValueKind::integer, "seconds"}}, false},
      {"set", "tiny_buffers", "router buffers for messages without payload, over all CPTs (0: the default): more "
                              "at once, fewer as buffers in use come back",
       {}, {{"VALUE", ValueKind::integer, "buffers"}}, false},
      {"set", "small_buffers", "as tiny_buffers, for payloads up to 4 KiB", {}, {{"VALUE", ValueKind::integer, "buffers"}},
       false},
      {"set", "large_buffers", "as tiny_buffers, for payloads up to 1 MiB", {}, {{"VALUE", ValueKind::integer, "buffers"}},
       false},
      {"ping", "", "LNet ping of NIDs through the dataplane (remote NIDs through a gateway)",
       {{"--timeout", "timeout", ValueKind::integer, "seconds to wait for each answer (default 1)", false, 1, 300}},
       {{"NID", ValueKind::nid, "NIDs to ping", true}}, true},
      {"import", "", "apply an lnetctl YAML file (routes, routing): what `lnetctl export` writes",
       {{"--del", "del", ValueKind::none, "delete the file's routes instead of adding them"}},
       {{"FILE", ValueKind::file, "the YAML file (standard input if absent or -)", false, false}}, false},
      {"export", "", "the running configuration as lnetctl YAML (to FILE, or standard output)",
       {{"--backup", "backup", ValueKind::none, "only what recreates the configuration (no state)"}},
       {{"FILE", ValueKind::file, "where to write it", false, false}}, true},
      {"save", "", "write the routes, routing, buffers, global tunables and nets in force into lnetr-control's configuration "
                   "file (/etc/lnetr/lnetr.yaml), so that they survive a restart",
       {}, {}, false},
      {"system", "show", "what runs: lnetr's version, whether the dataplane runs and routes (and why it last "
                         "stopped), routes up",
       {}, {}, true},
      {"system", "drain", "disable routing as a kernel router does and wait until clients have moved off: every "
                          "peer using the router has seen it, no router buffer is held and nothing was forwarded "
                          "for a while",
       {{"--timeout", "", ValueKind::integer, "seconds to wait at most (default 360)", false, 1, 86400},
        {"--quiet", "", ValueKind::integer, "seconds without a forwarded message that count as moved off (default 5)",
         false, 1, 3600}},
       {}, false},
      {"system", "versions", "the appliance's root slots: their versions, which runs and which boots next", {}, {},
       false},
      {"system", "update", "install an appliance update (lnetr-N.update: a file, or an http:// or https:// URL), "
                           "verified with the image's signing key, into the other root slot on trial; then drain "
                           "and reboot into it",
       {{"--no-reboot", "", ValueKind::none, "install only: the update boots at the next reboot"},
        {"--tries", "", ValueKind::integer, "boots on trial before the running version comes back (default 3)",
         false, 1, 9},
        {"--drain-timeout", "", ValueKind::integer, "seconds the drain waits at most (default 360)", false, 1, 86400}},
       {{"SOURCE", ValueKind::text, "the update: a file on the appliance, or a URL", true}}, false},
      {"system", "rollback", "boot the other root slot's version from now on (a known-good one: not on trial, "
                             "not failed); then drain and reboot into it",
       {{"--no-reboot", "", ValueKind::none, "only make it the default"},
        {"--drain-timeout", "", ValueKind::integer, "seconds the drain waits at most (default 360)", false, 1, 86400}},
       {}, false},
      {"system", "reboot", "drain, then reboot; the next boot keeps routing disabled until it is healthy",
       {{"--no-drain", "", ValueKind::none, "reboot at once"},
        {"--drain-timeout", "", ValueKind::integer, "seconds the drain waits at most (default 360)", false, 1, 86400}},
       {}, false},
      {"fault", "add", "add an LNet fault injection rule (as lctl net_drop_add / net_delay_add): drop, delay or "
                       "corrupt one message in every RATE that matches, or one per INTERVAL",
       {{"--kind", "kind", ValueKind::text, "drop, delay or corrupt (a payload byte inverted)", true},
        {"--source", "source", ValueKind::text, "the messages' source NID (* any; 255.255.255.255@NET a whole net)"},
        {"--dest", "dest", ValueKind::text, "their destination NID (* any; 255.255.255.255@NET a whole net)"},
        {"--local", "local", ValueKind::text, "the router's NI they arrive on"},
        {"--type", "type", ValueKind::text, "message types, e.g. PUT,ACK (default: all of PUT, ACK, GET, REPLY)"},
        {"--portal", "portal", ValueKind::text, "portals, e.g. 4,6 (PUT and GET only)"},
        {"--rate", "rate", ValueKind::integer, "act on one message in every RATE matched", false, 1, 1073741824},
        {"--interval", "interval", ValueKind::text, "act on one message per INTERVAL seconds"},
        {"--latency", "latency", ValueKind::text, "delay: seconds a chosen message is held"}},
       {}, true},
      {"fault", "del", "delete a fault rule (its held messages go on at once)",
       {{"--id", "id", ValueKind::integer, "the rule's id (fault show)", false, 1, 4294967295L},
        {"--all", "all", ValueKind::none, "every rule"}},
       {}, false},
      {"fault", "show", "the fault rules in force, in the order they are checked, with the messages each "
                        "matched and acted on",
       {}, {}, true},
      {"fault", "reset", "start the fault rules' counts from zero", {}, {}, false},
      {"capture", "start", "capture the DPDK ports' frames into a pcapng file (for tshark, Wireshark or "
                           "lnetr-decode) until capture stop, or COUNT frames",
       {{"--port", "port", ValueKind::text, "only this DPDK port's frames (its name in dataplane.ports)"},
        {"--nid", "nid", ValueKind::nid, "only frames to or from this tcp NID's address"},
        {"--count", "count", ValueKind::integer, "stop after this many frames", false, 1, 1099511627776L}},
       {{"FILE", ValueKind::file, "the pcapng file to write (made, or emptied)", false, true}}, true},
      {"capture", "stop", "end the capture: its last frames are written and the file closed", {}, {}, true},
      {"capture", "show", "the capture running or last run: its filter, and the frames written and dropped", {}, {},
       true},
      {"top", "", "live forwarding rates per net and per peer, refreshed in place (q or Ctrl-C quits)",
       {{"--interval", "", ValueKind::seconds, "seconds between refreshes (default 1)"},
        {"--count", "", ValueKind::integer, "stop after this many refreshes (default: until quit)", false, 1, 1000000},
        {"--peers", "", ValueKind::integer, "peers shown (busiest first; default 10)", false, 1, 10000}},
       {}, false},
  };
  return v;
}

// ---- argument checks --------------------------------------------------------------

// A whole base-10 integer (CLI11's own checks also read 0x10 and 010, and
// a number it accepts must be the number sent).
std::optional<long long> parse_int(const std::string& s) {
  long long v = 0;
  const char* end = s.data() + s.size();
  const auto [p, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc{} || p != end) return std::nullopt;
  return v;
}

CLI::Validator integer_check(long long lo, long long hi, bool empty_ok = false) {
  return CLI::Validator(
      [lo, hi, empty_ok](std::string& s) -> std::string {
        if (s.empty() && empty_ok) return {};
        const auto v = parse_int(s);
        if (v && *v >= lo && *v <= hi) return {};
        return "expected an integer " + std::to_string(lo) + ".." + std::to_string(hi) + ", got '" + s + "'";
      },
      "INT");
}

CLI::Validator seconds_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (!s.empty() && *end == '\0' && v >= 0.1 && v <= 3600) return {};
        return "expected seconds, 0.1..3600, got '" + s + "'";
      },
      "SECONDS");
}

CLI::Validator checker(ValueKind k) {
  switch (k) {
    case ValueKind::nid:
      return CLI::Validator(
          [](std::string& s) -> std::string {
            return parse_nid(s) ? std::string() : "expected a NID such as 10.0.0.1@tcp, got '" + s + "'";
          },
          "NID");
    case ValueKind::nid_range:
      return CLI::Validator(
          [](std::string& s) -> std::string {
            auto l = parse_nid_list(s);
            if (!l) return "expected a NID or a NID range such as 10.0.0.[1-4]@tcp, got '" + s + "'";
            auto all = l->expand(kMaxGateways);
            return all ? std::string()
                       : "cannot expand '" + s + "' into at most " + std::to_string(kMaxGateways) + " NIDs";
          },
          "NID[-RANGE]");
    case ValueKind::net:
      return CLI::Validator(
          [](std::string& s) -> std::string {
            return parse_net(s) ? std::string() : "expected a net such as tcp, tcp1 or o2ib, got '" + s + "'";
          },
          "NET");
    default:
      return CLI::Validator();
  }
}

// The values a parse left, by API key.
struct Parsed {
  const VerbSpec* verb = nullptr;
  std::map<std::string, std::string> values;         // option key -> value
  std::map<std::string, bool> switches;              // ValueKind::none given
  std::map<std::string, std::string> local;          // options with no API key, by long name
  std::vector<std::string> positionals;
  bool json = false;
};

std::string long_name(const std::string& names) {
  const auto pos = names.find("--");
  std::string n = pos == std::string::npos ? names : names.substr(pos + 2);
  return n.substr(0, n.find(','));
}

}  // namespace

std::vector<std::string> option_names(const OptionSpec& o) {
  std::vector<std::string> out;
  std::size_t p = 0;
  for (;;) {
    const std::size_t c = o.names.find(',', p);
    out.push_back(o.names.substr(p, c == std::string::npos ? std::string::npos : c - p));
    if (c == std::string::npos) return out;
    p = c + 1;
  }
}

std::string long_option(const OptionSpec& o) { return "--" + long_name(o.names); }

namespace {

// Build the parser for every verb; `out` receives what was given.
struct Parser {
  CLI::App app{"lnetrctl: configure and watch an lnetr router through lnetr-control (lnetctl's commands)",
               "lnetrctl"};
  std::vector<std::pair<CLI::App*, const VerbSpec*>> subs;
  // Storage the options write into (stable addresses).
  std::deque<std::string> strings;
  std::deque<std::vector<std::string>> lists;
  struct Bound {
    const VerbSpec* verb;
    const OptionSpec* opt;
    CLI::Option* o;
    std::string* value;
  };
  std::vector<Bound> bound;
  struct BoundPos {
    const VerbSpec* verb;
    CLI::Option* o;
    std::vector<std::string>* values;
  };
  std::vector<BoundPos> bound_pos;
  std::map<const VerbSpec*, CLI::Option*> json_flags;

  Parser() {
    app.require_subcommand(1, 1);
    app.set_help_flag("-h,--help", "this help");
    std::map<std::string, CLI::App*> objects;
    for (const VerbSpec& v : verbs()) {
      CLI::App*& obj = objects[v.object];
      if (!obj) {
        obj = app.add_subcommand(v.object, v.action.empty() ? v.help : v.object + " commands");
        if (!v.action.empty()) obj->require_subcommand(1, 1);
      }
      CLI::App* cmd = v.action.empty() ? obj : obj->add_subcommand(v.action, v.help);
      subs.emplace_back(cmd, &v);
      for (const OptionSpec& o : v.options) {
        std::string* value = &strings.emplace_back();
        CLI::Option* opt = nullptr;
        if (o.kind == ValueKind::none) {
          opt = cmd->add_flag(o.names, o.help);
        } else if (o.kind == ValueKind::level) {
          opt = cmd->add_option(o.names, *value, o.help)->expected(0, 1)->check(integer_check(o.lo, o.hi, true));
        } else {
          opt = cmd->add_option(o.names, *value, o.help);
          if (o.kind == ValueKind::integer) {
            opt->check(integer_check(o.lo, o.hi));
          } else if (o.kind == ValueKind::seconds) {
            opt->check(seconds_check());
          } else {
            opt->check(checker(o.kind));
          }
        }
        if (o.required) opt->required();
        bound.push_back({&v, &o, opt, value});
      }
      for (const PositionalSpec& p : v.positionals) {
        std::vector<std::string>* values = &lists.emplace_back();
        CLI::Option* opt = cmd->add_option(p.name, *values, p.help);
        opt->expected(p.required ? 1 : 0, p.many ? CLI::detail::expected_max_vector_size : 1);
        if (p.required) opt->required();
        if (p.kind == ValueKind::integer) opt->check(integer_check(0, std::numeric_limits<std::int32_t>::max()));
        else if (p.kind == ValueKind::nid) opt->check(checker(p.kind));
        bound_pos.push_back({&v, opt, values});
      }
      if (v.prints) json_flags[&v] = cmd->add_flag("--json")->description("print JSON instead of YAML");
    }
  }

  Parsed parse(const std::vector<std::string>& args) {
    std::vector<std::string> rev(args.rbegin(), args.rend());
    app.parse(rev);
    Parsed p;
    for (auto& [cmd, v] : subs)
      if (cmd->parsed() && (v->action.empty() || cmd->get_parent()->parsed())) p.verb = v;
    for (const Bound& b : bound) {
      if (b.verb != p.verb || b.o->count() == 0) continue;
      if (b.opt->key.empty()) p.local[long_name(b.opt->names)] = b.opt->kind == ValueKind::none ? "1" : *b.value;
      else if (b.opt->kind == ValueKind::none) p.switches[b.opt->key] = true;
      else p.values[b.opt->key] = b.opt->kind == ValueKind::level && b.value->empty() ? "1" : *b.value;
    }
    for (const BoundPos& b : bound_pos)
      if (b.verb == p.verb) p.positionals = *b.values;
    if (auto it = json_flags.find(p.verb); it != json_flags.end()) p.json = it->second->count() > 0;
    return p;
  }
};

Json args_of(const Parsed& p) {
  Json a = Json::object();
  for (const auto& [k, v] : p.values) {
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& o : p.verb->options)
      if (o.key == k) spec = &o;
    if (spec && (spec->kind == ValueKind::integer || spec->kind == ValueKind::level)) a[k] = parse_int(v).value();
    else a[k] = v;
  }
  for (const auto& [k, on] : p.switches) a[k] = on ? 1 : 0;
  return a;
}

void print(Context& ctx, const Json& data, bool json) {
  if (json) ctx.out << data.dump(2) << "\n";
  else ctx.out << to_yaml(data);
  ctx.out.flush();
}

// lnetctl's error block names the action (add, del, show; manage for the
// rest) and the object.
std::string error_action(const VerbSpec& v) {
  if (v.action == "add" || v.action == "del" || v.action == "show") return v.action;
  return "manage";
}
std::string error_object(const VerbSpec& v) { return v.object == "set" ? v.action : v.object; }

int fail(Context& ctx, const VerbSpec& v, const CallError& e) {
  print_error(ctx.err, error_action(v), error_object(v), e.err, e.descr);
  return kExitFailed;
}

std::vector<Nid> gateways_of(const std::string& text) {
  auto list = parse_nid_list(text);
  auto all = list->expand(kMaxGateways);  // checked by the parser already
  return *all;
}

// ---- verbs with more to do than one request ----------------------------------------

int route_change(Context& ctx, const Parsed& p) {
  Json args = args_of(p);
  Json errors = Json::array();
  for (const Nid& gw : gateways_of(p.values.at("gateway"))) {
    args["gateway"] = to_string(gw);
    try {
      ctx.client.call("route " + p.verb->action, args);
    } catch (const CallError& e) {
      errors.push_back(error_item("route", e.err, e.descr));
    }
  }
  if (errors.empty()) return kExitOk;
  ctx.err << to_yaml(Json{{p.verb->action, errors}});  // one document, one item per gateway
  return kExitFailed;
}

int set_tunable(Context& ctx, const Parsed& p) {
  const std::string& value = p.positionals.at(0);
  try {
    if (p.verb->action == "routing") {
      if (value != "0" && value != "1") {
        ctx.err << "lnetrctl: set routing: expected 0 (disable) or 1 (enable), got '" << value << "'\n";
        return kExitUsage;
      }
      ctx.client.call("set routing", {{"enable", value == "1" ? 1 : 0}});
    } else {
      const Json r = ctx.client.call("set", {{p.verb->action, parse_int(value).value()}});
      const Json g = r.value("global", Json::object());
      if (g.contains("warning") && g["warning"].is_string())
        ctx.err << "lnetrctl: warning: " << g["warning"].get<std::string>() << "\n";
    }
  } catch (const CallError& e) {
    return fail(ctx, *p.verb, e);
  }
  return kExitOk;
}

int ping(Context& ctx, const Parsed& p) {
  Json ok = Json::array();
  int rc = kExitOk;
  Json args = args_of(p);
  Json errors = Json::array();
  // lnetr-control answers within the ping's timeout.
  const Client client(ctx.client.path(), static_cast<int>(args.value("timeout", 1)) + 10);
  for (const std::string& nid : p.positionals) {
    args["nid"] = nid;
    try {
      const Json answer = client.call("ping", args);
      for (const Json& r : answer.value("ping", Json::array())) ok.push_back(r);
    } catch (const CallError& e) {
      // lnetctl's shape: `- ping:` with errno and descr beside it.
      Json item = Json::object();
      item["ping"] = nullptr;
      item["errno"] = -e.err;
      item["descr"] = e.descr;
      errors.push_back(item);
      rc = kExitFailed;
    }
  }
  if (!ok.empty()) print(ctx, {{"ping", ok}}, p.json);
  if (!errors.empty()) ctx.err << to_yaml({{"manage", errors}});
  return rc;
}

int import_file(Context& ctx, const Parsed& p) {
  const std::string file = p.positionals.empty() ? "-" : p.positionals[0];
  std::string text;
  if (file == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    std::ifstream in(file);
    if (!in) {
      const int e = errno ? errno : EIO;
      print_error(ctx.err, "manage", "import", e, "cannot read " + file + ": " + std::strerror(e));
      return kExitFailed;
    }
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  Json args = args_of(p);
  args["text"] = text;
  args["name"] = file == "-" ? "<stdin>" : file;
  Json r;
  try {
    r = ctx.client.call("import", args);
  } catch (const CallError& e) {
    return fail(ctx, *p.verb, e);
  }
  // lnetctl is silent when everything applied; what did not is an error.
  const Json result = r.value("import", Json::object());
  for (const Json& w : result.value("warnings", Json::array()))
    ctx.err << "lnetrctl: warning: " << (w.is_string() ? w.get<std::string>() : w.dump()) << "\n";
  const Json errors = result.value("errors", Json::array());
  if (!errors.empty()) {
    Json list = Json::array();
    for (const Json& e : errors) list.push_back({{"import", e}});
    ctx.err << to_yaml({{"manage", list}});
    return kExitFailed;
  }
  return kExitOk;
}

int export_config(Context& ctx, const Parsed& p) {
  Json data;
  try {
    data = ctx.client.call("export", args_of(p));
  } catch (const CallError& e) {
    return fail(ctx, *p.verb, e);
  }
  const std::string text = p.json ? data.dump(2) + "\n" : to_yaml(data);
  if (p.positionals.empty() || p.positionals[0] == "-") {
    ctx.out << text;
    ctx.out.flush();
    return kExitOk;
  }
  errno = 0;
  std::ofstream f(p.positionals[0]);
  f << text;
  f.close();
  if (!f) {
    const int e = errno ? errno : EIO;
    print_error(ctx.err, "manage", "export", e, "cannot write " + p.positionals[0] + ": " + std::strerror(e));
    return kExitFailed;
  }
  return kExitOk;
}

int top(Context& ctx, const Parsed& p) {
  TopOptions o;
  if (auto it = p.local.find("interval"); it != p.local.end()) o.interval = std::strtod(it->second.c_str(), nullptr);
  if (auto it = p.local.find("count"); it != p.local.end()) o.count = static_cast<int>(parse_int(it->second).value());
  if (auto it = p.local.find("peers"); it != p.local.end())
    o.peers = static_cast<std::size_t>(parse_int(it->second).value());
  return run_top(ctx, o);
}

// The system verbs that act on the appliance's slots: lnetr-update's
// arguments.
int system_verb(Context& ctx, const Parsed& p) {
  const std::string& action = p.verb->action;
  if (action == "drain") {
    DrainOptions o;
    if (auto it = p.local.find("timeout"); it != p.local.end()) o.timeout = static_cast<int>(parse_int(it->second).value());
    if (auto it = p.local.find("quiet"); it != p.local.end()) o.quiet = static_cast<int>(parse_int(it->second).value());
    return drain(ctx, o);
  }
  std::vector<std::string> args;
  if (action == "versions") args = {"versions"};
  if (action == "update") args = {"install", p.positionals.at(0)};
  if (action == "rollback") args = {"rollback"};
  if (action == "reboot") args = {"reboot"};
  if (auto it = p.local.find("tries"); it != p.local.end()) args.insert(args.end(), {"--tries", it->second});
  const bool reboots = action == "reboot" || ((action == "update" || action == "rollback") && !p.local.contains("no-reboot"));
  if (reboots && action != "reboot") args.push_back("--reboot");
  if (p.local.contains("no-drain")) args.push_back("--no-drain");
  if (auto it = p.local.find("drain-timeout"); it != p.local.end() && reboots)
    args.insert(args.end(), {"--drain-timeout", it->second});
  return appliance(ctx, action, args);
}

// The file is opened here, as the operator, and its descriptor passed to
// lnetr-control (which passes it to the dataplane).
int capture_start(Context& ctx, const Parsed& p) {
  const std::string& file = p.positionals.at(0);
  // (Not emptied here: the dataplane does that once it takes the file, so
  // that a refused start leaves an existing file as it was.)
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    print_error(ctx.err, "manage", "capture", e, "cannot write " + file + ": " + std::strerror(e));
    return kExitFailed;
  }
  Json args = args_of(p);
  std::error_code ec;
  const auto abs = std::filesystem::absolute(file, ec);
  args["file"] = ec ? file : abs.lexically_normal().string();
  Json data;
  try {
    data = ctx.client.call("capture start", args, fd);
  } catch (const CallError& e) {
    ::close(fd);
    return fail(ctx, *p.verb, e);
  }
  ::close(fd);
  print(ctx, data, p.json);
  return kExitOk;
}

int dispatch(Context& ctx, const Parsed& p) {
  const VerbSpec& v = *p.verb;
  if (v.object == "system" && v.action != "show") return system_verb(ctx, p);
  if (v.object == "route" && (v.action == "add" || v.action == "del")) return route_change(ctx, p);
  if (v.object == "set") return set_tunable(ctx, p);
  if (v.object == "ping") return ping(ctx, p);
  if (v.object == "import") return import_file(ctx, p);
  if (v.object == "export") return export_config(ctx, p);
  if (v.object == "top") return top(ctx, p);
  if (v.object == "capture" && v.action == "start") return capture_start(ctx, p);
  if (v.object == "save") {
    try {
      const Json data = ctx.client.call("save", args_of(p));
      ctx.out << "saved to " << data.value("saved", std::string("?")) << "\n";
      ctx.out.flush();
    } catch (const CallError& e) {
      return fail(ctx, v, e);
    }
    return kExitOk;
  }
  try {
    const Json data = ctx.client.call(v.words(), args_of(p));
    if (v.prints) print(ctx, data, p.json);
  } catch (const CallError& e) {
    return fail(ctx, v, e);
  }
  return kExitOk;
}

std::string usage_of(const VerbSpec& v) {
  std::string u = "lnetrctl " + v.words();
  for (const OptionSpec& o : v.options) {
    const std::string n = "--" + long_name(o.names);
    std::string arg = o.kind == ValueKind::none ? n : o.kind == ValueKind::level ? n + " [LEVEL]" : n + " VALUE";
    u += o.required ? " " + arg : " [" + arg + "]";
  }
  for (const PositionalSpec& p : v.positionals) u += p.required ? " " + p.name + (p.many ? "..." : "") : " [" + p.name + "]";
  if (v.prints) u += " [--json]";
  return u;
}

}  // namespace

const std::vector<VerbSpec>& verbs() {
  static const std::vector<VerbSpec> all = make_verbs();
  return all;
}

Json error_item(const std::string& object, int errnum, const std::string& descr) {
  Json body = Json::object();
  body["errno"] = -errnum;
  body["descr"] = descr;
  Json item = Json::object();
  item[object] = body;
  return item;
}

void print_error(std::ostream& err, const std::string& action, const std::string& object, int errnum,
                 const std::string& descr) {
  Json doc = Json::object();
  doc[action] = Json::array({error_item(object, errnum, descr)});
  err << to_yaml(doc);
  err.flush();
}

int run_command(const std::vector<std::string>& args, Context& ctx) {
  Parser parser;
  Parsed p;
  try {
    p = parser.parse(args);
  } catch (const CLI::CallForHelp&) {
    ctx.out << parser.app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    // Which verb was meant, for its usage line.
    std::string usage;
    for (auto& [cmd, v] : parser.subs)
      if (cmd->parsed()) usage = "usage: " + usage_of(*v) + "\n";
    if (e.get_exit_code() == 0) {  // --help on a subcommand
      for (auto& [cmd, v] : parser.subs)
        if (cmd->parsed()) ctx.out << help_text({v->object, v->action});
      if (usage.empty()) ctx.out << parser.app.help();
      return kExitOk;
    }
    std::string what = e.what();
    if (dynamic_cast<const CLI::RequiredError*>(&e) && what.find("subcommand") != std::string::npos)
      what = "expected a command: " + std::string(args.empty() ? "" : "'" + args[0] + "' needs an action; ") +
             "'help' lists them";
    if (!args.empty() && std::none_of(verbs().begin(), verbs().end(), [&](const VerbSpec& v) { return v.object == args[0]; }))
      what = "unknown command '" + args[0] + "': 'help' lists the commands";
    ctx.err << "lnetrctl: " << what << "\n" << usage;
    return kExitUsage;
  }
  if (!p.verb) {
    ctx.err << "lnetrctl: expected a command ('help' lists them)\n";
    return kExitUsage;
  }
  try {
    return dispatch(ctx, p);
  } catch (const std::exception& e) {
    // An answer of a shape this lnetrctl does not know (another release?).
    print_error(ctx.err, error_action(*p.verb), error_object(*p.verb), EPROTO,
                std::string("unexpected answer from lnetr-control: ") + e.what());
    return kExitFailed;
  }
}

std::string help_text(const std::vector<std::string>& words) {
  std::ostringstream o;
  for (const VerbSpec& v : verbs()) {
    if (!words.empty() && words[0] != v.object) continue;
    if (words.size() > 1 && !words[1].empty() && words[1] != v.action) continue;
    o << usage_of(v) << "\n    " << v.help << "\n";
    if (words.size() > 0)
      for (const OptionSpec& opt : v.options) o << "      " << opt.names << ": " << opt.help << "\n";
  }
  return o.str();
}

std::string man_page() {
  auto esc = [](std::string s) {
    std::string out;
    for (char c : s) {
      if (c == '\\') out += "\\e";
      else if (c == '-') out += "\\-";
      else out += c;
    }
    if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
    return out;
  };
  std::ostringstream m;
  m << ".TH LNETRCTL 8 \"\" \"lnetr\" \"System Administration\"\n"
    << ".SH NAME\nlnetrctl \\- configure and watch an lnetr LNet router\n"
    << ".SH SYNOPSIS\n.B lnetrctl\n[\\fB\\-\\-socket\\fR \\fIPATH\\fR] \\fIobject\\fR [\\fIaction\\fR] [\\fIoptions\\fR]\n"
    << ".br\n.B lnetrctl\n[\\fB\\-\\-socket\\fR \\fIPATH\\fR]\n"
    << ".SH DESCRIPTION\n"
    << "lnetrctl talks to lnetr-control, the control process of an lnetr router, over its management socket. "
       "Its commands, flags and YAML output follow lnetctl(8). With no command it opens an interactive shell "
       "with history and tab completion of commands, flags and known NIDs; \\fBhelp\\fR lists the commands and "
       "\\fBhelp\\fR \\fIobject\\fR [\\fIaction\\fR] describes one.\n"
    << ".SH COMMANDS\n";
  for (const VerbSpec& v : verbs()) {
    m << ".TP\n.B " << esc(usage_of(v)) << "\n" << esc(v.help) << ".\n";
    for (const OptionSpec& o : v.options) m << ".RS\n.TP\n.B " << esc(o.names) << "\n" << esc(o.help) << "\n.RE\n";
    for (const PositionalSpec& p : v.positionals) m << ".RS\n.TP\n.I " << esc(p.name) << "\n" << esc(p.help) << "\n.RE\n";
  }
  m << ".SH OPTIONS\n.TP\n.BI \\-\\-socket \" PATH\"\nlnetr-control's management socket "
       "(default: $LNETR_SOCKET, else /run/lnetr/control.sock).\n"
    << ".TP\n.B \\-\\-json\nOn commands that print: JSON instead of YAML.\n"
    << ".SH EXIT STATUS\n0 on success; 1 when lnetr-control refused the request or could not be reached "
       "(the error is printed on standard error as lnetctl prints it: the action, the object, errno and a "
       "description); 2 when the command line is wrong.\n"
    << ".SH ENVIRONMENT\n.TP\n.B LNETR_SOCKET\nThe management socket, unless \\-\\-socket is given.\n"
    << ".SH FILES\n.TP\n.I ~/.lnetrctl_history\nThe shell's history.\n"
    << ".SH SEE ALSO\nlnetctl(8), lnetr-control(8)\n";
  return m.str();
}

}  // namespace lnetr::lnetrctl
