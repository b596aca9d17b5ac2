// lnetr-control's Service: its life (attach to a dataplane, health steps,
// detach), the command table and dispatch, the request-argument helpers,
// and requests on the dataplane's control socket.  The commands are in
// commands_*.cpp and config_io.cpp, the metrics in metrics.cpp.
#include "control/service.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "control/controller.hpp"
#include "control/exit_record.hpp"
#include "control/service_internal.hpp"
#include "dataplane/unix_fd.hpp"
#include "dataplane/systemd.hpp"
#include "router/forward.hpp"

namespace lnetr::control {

void log(const char* level, const std::string& text) {
  if (systemd::stderr_is_journal())
    std::fprintf(stderr, "%s%s: %s\n", systemd::severity_prefix(level), level, text.c_str());
  else
    std::fprintf(stderr, "lnetr-control: %s: %s\n", level, text.c_str());
  std::fflush(stderr);
}

namespace {

HealthParams health_params(const config::Config& cfg) {
  HealthParams p;
  p.check_interval = std::chrono::seconds(cfg.dataplane.alive_router_check_interval.value);
  p.ping_timeout = std::chrono::seconds(cfg.dataplane.router_ping_timeout.value);
  p.sensitivity = cfg.global.health_sensitivity.value;
  p.discovery = cfg.global.discovery.value;
  return p;
}

}  // namespace

std::string route_name(const Route& r) { return to_string(r.net) + " via " + to_string(r.gateway); }

// A configured route's own health_sensitivity, or the global one's mark.
std::uint16_t route_sensitivity(const config::RouteConfig& r) {
  return r.health_sensitivity.given() ? static_cast<std::uint16_t>(r.health_sensitivity.value) : kSensitivityGlobal;
}

// ---- request arguments ---------------------------------------------------------

[[noreturn]] void bad(const std::string& descr) { throw ApiError{EINVAL, descr}; }

// Only the keys a command knows: a misspelt one must not be ignored.
void only(const Json& args, std::initializer_list<const char*> keys) {
  for (auto it = args.begin(); it != args.end(); ++it)
    if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; })) {
      std::string known;
      for (const char* k : keys) known += std::string(known.empty() ? "" : ", ") + k;
      bad("unknown argument '" + it.key() + "'" + (known.empty() ? ": this command takes none" : ": expected " + known));
    }
}

std::optional<std::string> opt_text(const Json& args, const char* key) {
  if (!args.contains(key) || args[key].is_null()) return std::nullopt;
  const Json& v = args[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  bad(std::string("argument '") + key + "': expected a string, got " + v.dump());
}

std::optional<std::int64_t> opt_int(const Json& args, const char* key, std::int64_t lo, std::int64_t hi) {
  if (!args.contains(key) || args[key].is_null()) return std::nullopt;
  const Json& v = args[key];
  std::int64_t n = 0;
  if (v.is_number_integer()) {
    n = v.get<std::int64_t>();
  } else if (v.is_boolean()) {
    n = v.get<bool>() ? 1 : 0;
  } else if (v.is_string()) {
    const std::string s = v.get<std::string>();
    char* end = nullptr;
    errno = 0;
    n = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0) bad(std::string("argument '") + key + "': expected an integer, got " + v.dump());
  } else {
    bad(std::string("argument '") + key + "': expected an integer, got " + v.dump());
  }
  if (n < lo || n > hi)
    bad(std::string("argument '") + key + "': expected " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
        std::to_string(n));
  return n;
}

std::optional<Net> opt_net(const Json& args, const char* key) {
  const auto t = opt_text(args, key);
  if (!t) return std::nullopt;
  auto n = parse_net(*t);
  if (!n) bad(std::string("argument '") + key + "': expected a net such as tcp1 or o2ib, got '" + *t + "'");
  return *n;
}

std::optional<Nid> opt_nid(const Json& args, const char* key) {
  const auto t = opt_text(args, key);
  if (!t) return std::nullopt;
  auto n = parse_nid(*t);
  if (!n) bad(std::string("argument '") + key + "': expected a NID such as 10.0.0.1@tcp, got '" + *t + "'");
  return *n;
}

// ---- Service ---------------------------------------------------------------------

Service::Service(config::Config cfg) : cfg_(std::move(cfg)), params_(health_params(cfg_)) {
  placement_ = config::placement(cfg_);
  metrics_peers_ = cfg_.control.metrics_peers.value;
}
Service::~Service() = default;

bool Service::attached() const {
  std::lock_guard lock(mu_);
  return ctl_ != nullptr;
}

std::uint64_t Service::incarnation() const {
  std::lock_guard lock(mu_);
  return ctl_ ? ctl_->region().header().incarnation : 0;
}

void Service::detach() {
  std::lock_guard lock(mu_);
  if (ctl_) ctl_->region().header().control_pid.store(0);
  ctl_.reset();
}

bool Service::attach(shm::Region region) {
  std::lock_guard lock(mu_);
  region.header().control_pid.store(static_cast<std::uint64_t>(::getpid()));
  const std::uint64_t incarnation = region.header().incarnation;
  // The table a previous lnetr-control published (routes added at run
  // time included) is the state to carry on from; the dataplane's own
  // first snapshot (version 1, from the file) is not.
  std::optional<RouteTable> current = shm::published_table(region);
  std::string origin;
  bool from_config = false;
  if (!builder_ && current && current->version() > 1) {
    builder_.emplace(*current, static_cast<std::uint64_t>(::getpid()));
    origin = "carried on from the published table";
  }
  if (!builder_) {
    std::vector<Net> local;
    for (const config::NetConfig& n : cfg_.nets) local.push_back(n.net.value);
    auto b = RouteTableBuilder::create(local, static_cast<std::uint64_t>(::getpid()));
    if (!b) {
      log("error", "route table: " + std::string(describe(b.error())));
      return false;
    }
    builder_.emplace(std::move(*b));
    for (const config::RouteConfig& r : cfg_.routes) {
      const std::uint32_t hops =
          r.hop.value == config::kHopUndefined ? kHopsUndefined : static_cast<std::uint32_t>(r.hop.value);
      auto added = builder_->add({r.net.value, r.gateway.value, hops, r.priority.value, route_sensitivity(r)});
      if (!added)
        log("warning", config::to_string(r.source) + ": route to " + to_string(r.net.value) + " via " +
                           to_string(r.gateway.value) + " ignored: " + std::string(describe(added.error())));
    }
    origin = "from the configuration";
    from_config = true;
  } else if (origin.empty()) {
    origin = "kept across the dataplane's restart";
  }
  ctl_ = std::make_unique<Controller>(std::move(region), *builder_, params_, placement_);
  if (!ctl_->watch_gateways(Clock::now())) {
    ctl_.reset();
    return false;
  }
  if (!from_config) ctl_->hold_carried_states();
  ctl_->apply_route_states();
  if (!ctl_->publish()) {
    ctl_.reset();
    return false;
  }
  asym_pending_ = runtime_asym_.has_value();
  nets_pending_ = nets_changed_;
  buffers_pending_ = std::any_of(runtime_buffers_.begin(), runtime_buffers_.end(), [](const auto& b) { return b.has_value(); });
  log("info", "attached to " + cfg_.dataplane.shm_name.value + " (dataplane incarnation " +
                  std::to_string(incarnation) + "); published route table version " +
                  std::to_string(shm::published_version(ctl_->region().header().published.load())) + " with " +
                  std::to_string(builder_->routes().size()) + " route(s), " + origin);
  return true;
}

std::uint64_t Service::incarnation_locked() const { return ctl_ ? ctl_->region().header().incarnation : 0; }

void Service::reapply_runtime_settings() {
  std::lock_guard asym_lock(asym_mu_);  // no set or import changes it meanwhile
  bool on = false;
  {
    std::lock_guard lock(mu_);
    if (!asym_pending_ || !ctl_ || !runtime_asym_) return;
    on = *runtime_asym_;
  }
  try {
    dataplane<status::DropAsymRoute>(on ? "drop_asym_route 1" : "drop_asym_route 0");
  } catch (const ApiError&) {
    return;  // its control socket is not up yet: on a later step
  }
  std::lock_guard lock(mu_);
  asym_pending_ = false;
  log("info", std::string("drop_asym_route ") + (on ? "1" : "0") + " (set at run time) given to the restarted dataplane");
}

void Service::reapply_buffers() {
  std::array<std::optional<std::uint32_t>, kPoolClasses> want;
  {
    std::lock_guard lock(mu_);
    if (!buffers_pending_ || !ctl_) return;
    want = runtime_buffers_;
  }
  for (std::size_t c = 0; c < kPoolClasses; ++c) {
    if (!want[c]) continue;
    try {
      dataplane<status::BuffersSet>("buffers " + std::string(kPoolNames[c]) + " " + std::to_string(*want[c]));
    } catch (const ApiError& e) {
      if (e.err == EHOSTDOWN) return;  // its control socket is not up yet: on a later step
      log("error", std::string(kPoolNames[c]) + "_buffers " + std::to_string(*want[c]) +
                       " (set at run time) not taken by the restarted dataplane: " + e.descr);
    }
  }
  std::lock_guard lock(mu_);
  buffers_pending_ = false;
  log("info", "router buffer pools resized at run time given to the restarted dataplane");
}

// A restarted dataplane serves its file's nets: those added at run time
// are added again, those deleted deleted again.
void Service::reapply_nets() {
  std::vector<std::pair<std::string, std::string>> add;  // net, the doc of its NIs
  std::vector<std::string> del;
  try {
    {
      std::lock_guard lock(mu_);
      if (!nets_pending_ || !ctl_) return;
    }
    const auto st = dataplane<status::Status>("status");
    std::lock_guard lock(mu_);
    std::vector<std::string> running;
    for (const status::Ni& ni : st.nis) running.push_back(ni.nid);
    for (const config::NetConfig& n : cfg_.nets) {
      Json nis = Json::array();
      for (const config::NiConfig& ni : n.nis) {
        if (std::any_of(st.nis.begin(), st.nis.end(), [&](const status::Ni& s) { return is_ni(ni, n.net.value, s); }))
          continue;
        nis.push_back(ni_json(ni));
      }
      if (!nis.empty())
        add.emplace_back(to_string(n.net.value),
                         Json{{"net", Json::array({{{"net type", to_string(n.net.value)}, {"local NI(s)", nis}}})}}.dump());
    }
    for (const status::Ni& s : st.nis) {
      const bool wanted = std::any_of(cfg_.nets.begin(), cfg_.nets.end(), [&](const config::NetConfig& n) {
        return std::any_of(n.nis.begin(), n.nis.end(), [&](const config::NiConfig& ni) { return is_ni(ni, n.net.value, s); });
      });
      if (!wanted) del.push_back(s.nid);
    }
  } catch (const ApiError&) {
    return;  // its control socket is not up yet: on a later step
  }
  // Each as a request to the restarted dataplane, logged either way.
  auto give = [this](const std::string& request, const std::string& what, const std::string& done,
                     const std::string& refused) {
    try {
      dataplane<status::NetChange>(request);
      log("info", what + " " + done);
    } catch (const ApiError& e) {
      log("error", what + " " + refused + ": " + e.descr);
    }
  };
  for (const std::string& nid : del)
    give("net del " + nid, "NI " + nid + " (deleted at run time)", "deleted from the restarted dataplane",
         "not deleted from the restarted dataplane");
  for (const auto& [net, doc] : add)
    give("net add " + doc, "net " + net + " (added at run time)", "given to the restarted dataplane",
         "not taken by the restarted dataplane");
  // The NIs' LND values set at run time (net set), where the file's differ:
  // ksocklnd's timeout first (tcp NIs added later take it too).
  std::vector<std::string> sets;
  try {
    const auto st = dataplane<status::Status>("status");
    std::lock_guard lock(mu_);
    if (const auto& t = cfg_.dataplane.socklnd.sock_timeout; t.source.file == "lnetrctl net set")
      sets.push_back("timeout " + std::to_string(t.value) + " tcp");
    for (const config::NetConfig& n : cfg_.nets)
      for (const config::NiConfig& c : n.nis)
        for (const status::Ni& s : st.nis) {
          if (!is_ni(c, n.net.value, s)) continue;
          const config::LndTunables& l = c.lnd_tunables;
          if (l.conns_per_peer.value > 0 && static_cast<std::uint64_t>(l.conns_per_peer.value) != s.lnd_tunables.conns_per_peer)
            sets.push_back("conns_per_peer " + std::to_string(l.conns_per_peer.value) + " " + s.nid);
          if (l.timeout.value > 0 && l.timeout.value != s.lnd_tunables.timeout)
            sets.push_back("timeout " + std::to_string(l.timeout.value) + " " + s.nid);
        }
  } catch (const ApiError&) {
    return;  // (on a later step)
  }
  for (const std::string& set : sets)
    give("net set " + set, "net set " + set + " (set at run time)", "given to the restarted dataplane",
         "not taken by the restarted dataplane");
  std::lock_guard lock(mu_);
  nets_pending_ = false;
}

bool Service::step(Clock::time_point now) {
  reapply_runtime_settings();
  reapply_nets();
  reapply_buffers();
  std::lock_guard lock(mu_);
  if (!ctl_) return true;
  return ctl_->step(now) ? ctl_->publish() : true;
}

void Service::routes_changed() {
  if (!ctl_) return;
  // Both checks before anything changes (gateway slots, health), so that a
  // caller's rollback of the builder is all there is to undo.
  if (!ctl_->table_fits()) throw ApiError{E2BIG, "the route table does not fit in a shared-memory slot"};
  if (!ctl_->watch_gateways(Clock::now())) throw ApiError{ENOSPC, "no gateway slot left in the dataplane's shared memory"};
  ctl_->apply_route_states();
  if (!ctl_->publish()) throw ApiError{E2BIG, "the route table does not fit in a shared-memory slot"};
}

// ---- commands -------------------------------------------------------------------

const std::vector<std::string>& Service::commands() {
  static const std::vector<std::string> names = {
      "route show", "route add",  "route del",   "gateway show", "routing show", "set routing", "net show",
      "peer show",  "stats show", "stats reset", "dataplane show", "buffers show", "global show", "set", "export", "import",
      "ping", "save", "system show", "fault add", "fault del", "fault show", "fault reset",
      "capture start", "capture stop", "capture show", "net add", "net del", "net set",
  };
  return names;
}

bool Service::changes(const std::string& command) {
  // Everything but shows, stats and export: an unknown command counts as a
  // change (handle() then names the valid ones on the management socket).
  static const std::vector<std::string> read_only = {"route show", "gateway show", "routing show", "net show",
                                                      "peer show",  "stats show",   "dataplane show", "buffers show",
                                                      "global show", "export", "system show", "fault show",
                                                      "capture show"};
  return std::find(read_only.begin(), read_only.end(), command) == read_only.end();
}

Json Service::handle(const std::string& command, const Json& args, int file) {
  if (!args.is_object()) bad("'args' must be a mapping");
  if (command == "route show") return route_show(args);
  if (command == "route add") return route_add(args);
  if (command == "route del") return route_del(args);
  if (command == "gateway show") return gateway_show(args);
  if (command == "routing show") return routing_show(args);
  if (command == "set routing") return set_routing(args);
  if (command == "net show") return net_show(args);
  if (command == "net add") return net_add(args);
  if (command == "net del") return net_del(args);
  if (command == "net set") return net_set(args);
  if (command == "peer show") return peer_show(args);
  if (command == "stats show") return stats_show(args);
  if (command == "stats reset") return stats_reset(args);
  if (command == "dataplane show") return dataplane_show(args);
  if (command == "buffers show") return buffers_show(args);
  if (command == "global show") return global_show(args);
  if (command == "set") return set_tunable(args);
  if (command == "export") return export_config(args);
  if (command == "import") return import_config(args);
  if (command == "ping") return ping(args);
  if (command == "save") return save(args);
  if (command == "system show") return system_show(args);
  if (command.starts_with("fault ") && std::find(commands().begin(), commands().end(), command) != commands().end())
    return fault(command.substr(6), args);
  if (command.starts_with("capture ") && std::find(commands().begin(), commands().end(), command) != commands().end())
    return capture(command.substr(8), args, file);
  std::string all;
  for (const auto& c : commands()) all += (all.empty() ? "'" : ", '") + c + "'";
  bad("unknown command '" + command + "': expected one of " + all);
}

// ---- the dataplane's control socket ---------------------------------------------

Json Service::dataplane_answer(const std::string& line, int file) const {
  const std::string& path = cfg_.dataplane.control_socket.value;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    std::string why = "the dataplane does not answer on " + path + ": " + std::strerror(e);
    if (const auto last = read_exit_record(exit_record_path(path))) why += " (it " + describe(*last) + ")";
    throw ApiError{EHOSTDOWN, why};
  }
  const std::string req = line + "\n";
  std::string reply;
  bool ok = unix_fd::send(fd, req.data(), req.size(), file, MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  // On the heap: this runs on the metrics server's threads too, whose
  // stacks are small.
  std::vector<char> buf(65536);
  ssize_t n;
  while (ok && (n = ::recv(fd, buf.data(), buf.size(), 0)) > 0) reply.append(buf.data(), static_cast<std::size_t>(n));
  ::close(fd);
  Json j = Json::parse(reply, nullptr, false);
  if (!ok || j.is_discarded() || !j.is_object())
    throw ApiError{EPROTO, "the dataplane's answer on " + path + " was not a JSON document"};
  // Of another status version: refused whole (said once in the log, until
  // a dataplane of ours answers again).
  if (auto mismatch = status::version_error(j)) {
    if (!version_mismatch_said_.exchange(true)) log("error", *mismatch);
    throw ApiError{EPROTO, *mismatch};
  }
  version_mismatch_said_.store(false);
  if (j.contains("errno")) {
    const auto e = read_answer<status::Error>(j, line);
    throw ApiError{-e.err, e.descr};
  }
  return j;
}

}  // namespace lnetr::control
