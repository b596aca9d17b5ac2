#include "control/service.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <ctime>
#include <fstream>
#include <sstream>
#include <map>
#include <set>
#include <unordered_map>
#include <thread>

#include "control/exit_record.hpp"
#include "control/metrics.hpp"
#include "dataplane/systemd.hpp"
#include "router/forward.hpp"
#include "router/yaml_tree.hpp"

namespace lnetr::control {

using namespace std::chrono_literals;

void log(const char* level, const std::string& text) {
  if (systemd::stderr_is_journal())
    std::fprintf(stderr, "%s%s: %s\n", systemd::severity_prefix(level), level, text.c_str());
  else
    std::fprintf(stderr, "lnetr-control: %s: %s\n", level, text.c_str());
  std::fflush(stderr);
}

namespace {

// How long a change short of gateway slots waits for the workers to let go
// of retired ones (10 sleeps of an idle worker).
constexpr auto kReclaimWait = 1s;

std::string ms_text(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", static_cast<double>(d.count()) / 1e6);
  return buf;
}

std::string route_name(const Route& r) { return to_string(r.net) + " via " + to_string(r.gateway); }

// A configured route's own health_sensitivity, or the global one's mark.
std::uint16_t route_sensitivity(const config::RouteConfig& r) {
  return r.health_sensitivity.given() ? static_cast<std::uint16_t>(r.health_sensitivity.value) : kSensitivityGlobal;
}

HealthParams health_params(const config::Config& cfg) {
  HealthParams p;
  p.check_interval = std::chrono::seconds(cfg.dataplane.alive_router_check_interval.value);
  p.ping_timeout = std::chrono::seconds(cfg.dataplane.router_ping_timeout.value);
  p.sensitivity = cfg.global.health_sensitivity.value;
  p.discovery = cfg.global.discovery.value;
  return p;
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

template <class T>
T required(std::optional<T> v, const char* key) {
  if (!v) bad(std::string("argument '") + key + "' is required");
  return *v;
}

}  // namespace

// ---- Controller: one dataplane incarnation ----------------------------------------

// Gateway health and publication into one dataplane's region.  Called with
// the service's lock held.
class Controller {
 public:
  Controller(shm::Region region, RouteTableBuilder& builder, const HealthParams& params, const Placement& placement)
      : region_(std::move(region)), builder_(builder), health_(params), placement_(placement),
        down_seen_(shm::kMaxGateways), heard_seen_(shm::kMaxGateways), failures_seen_(shm::kMaxGateways) {
    // Entries a previous lnetr-control gave up may still be mapped by a
    // worker on an older snapshot: retired until every worker holds a newer
    // one.  Entries never used (no NID) are free.
    const std::uint64_t next = shm::published_version(region_.header().published.load()) + 1;
    for (std::uint32_t i = shm::kMaxGateways; i-- > 0;) {
      shm::GatewayShm& g = region_.gateway(i);
      if (g.assigned.load() != 0) {
        // A gateway the dataplane has down now is handled at the first step.
        down_seen_[i] = g.down_events.load() - (g.down.load() != 0 ? 1 : 0);
        heard_seen_[i] = g.heard.load();
        failures_seen_[i] = g.send_failures.load();
        slot_of_.emplace(g.nid, i);
      } else if (g.nid == Nid{}) {
        free_.push_back(i);  // lowest last: taken first
      } else {
        retired_.push_back({i, next});
      }
    }
  }

  const shm::Region& region() const noexcept { return region_; }
  GatewayHealth& health() noexcept { return health_; }
  const GatewayHealth& health() const noexcept { return health_; }

  // The table's gateways changed: watch exactly those, each with a board
  // slot (written before any snapshot names it).  False if the board is
  // full.
  bool watch_gateways(Clock::time_point now) {
    std::vector<Nid> nids;
    std::vector<std::optional<std::uint32_t>> sens;
    std::unordered_map<Nid, std::size_t> index;
    for (const Route& r : builder_.routes()) {
      auto [it, added] = index.emplace(r.gateway, nids.size());
      if (added) {
        nids.push_back(r.gateway);
        sens.emplace_back();
      }
      if (r.health_sensitivity != kSensitivityGlobal) sens[it->second] = r.health_sensitivity;
    }
    // Enough slots for the new gateways first: on failure the health state
    // and slots stay those of the previous table (the caller rolls back).
    std::size_t needed = 0;
    for (const Nid& n : nids) needed += slot_of_.contains(n) ? 0 : 1;
    reclaim();
    // Slots given up by the last changes come back once every worker has
    // adopted a later snapshot: at once for a busy worker, within its sleep
    // (100 ms) for an idle one.  Changes in quick succession wait for that
    // rather than fail.
    const auto deadline = Clock::now() + kReclaimWait;
    while (needed > free_.size() && needed <= free_.size() + retired_.size() && !unpublished_ &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
      reclaim();
    }
    if (needed > free_.size()) {
      log("error", "no gateway slot left for " + std::to_string(needed) + " new gateway(s): " +
                       std::to_string(slot_of_.size()) + " in use, " + std::to_string(retired_.size()) +
                       " waiting for every worker to let go (at most " + std::to_string(shm::kMaxGateways) + ")");
      return false;
    }
    // Gateways no route names any more give their slots up: unassigned now
    // (no worker maps or pings them from its next snapshot on), reusable once
    // every worker has adopted a snapshot published after this.
    const std::uint64_t next = shm::published_version(region_.header().published.load()) + 1;
    for (auto it = slot_of_.begin(); it != slot_of_.end();) {
      if (index.contains(it->first)) {
        ++it;
        continue;
      }
      region_.gateway(it->second).assigned.store(0);
      retired_.push_back({it->second, next});
      it = slot_of_.erase(it);
    }
    std::vector<std::uint32_t> slots;
    for (const Nid& n : nids) slots.push_back(slot_for(n));
    health_.set_gateways(nids, now);
    slot_ = std::move(slots);
    for (std::size_t i = 0; i < nids.size(); ++i) health_.set_sensitivity(i, sens[i]);
    return true;
  }

  // Attaching to a table that was in use (and gateways are checked): each
  // route keeps the state it has there until its gateway's first check,
  // rather than counting as up as a route through an unchecked gateway does.
  void hold_carried_states() { hold_carried_ = health_.params().check_interval > Clock::duration::zero(); }

  // One round: results, failures, timeouts, due pings, route states.  True
  // if the table changed (publish it).
  bool step(Clock::time_point now) {
    const bool checking = health_.params().check_interval > Clock::duration::zero();
    for (std::size_t i = 0; i < health_.gateways().size(); ++i) {
      const Gateway& g = health_.gateways()[i];
      shm::GatewayShm& s = region_.gateway(slot_[i]);
      // The dataplane saw every connection to it fail.
      const std::uint64_t downs = s.down_events.load(std::memory_order_relaxed);
      if (downs != down_seen_[slot_[i]]) {
        down_seen_[slot_[i]] = downs;
        if (s.down.load(std::memory_order_relaxed) != 0)
          gateway_event(i, health_.failed(i, GatewayReason::connections_failed, now));
      }
      // Sends to it failed: each costs health, and the healthiest gateways
      // are chosen first.
      const std::uint64_t failures = s.send_failures.load(std::memory_order_relaxed);
      if (failures != failures_seen_[slot_[i]]) {
        health_.send_failed(i, failures - failures_seen_[slot_[i]]);
        failures_seen_[slot_[i]] = failures;
      }
      // It forwarded traffic to us (and no connection failed since).
      const std::uint64_t heard = s.heard.load(std::memory_order_relaxed);
      if (heard != heard_seen_[slot_[i]] && s.down.load(std::memory_order_relaxed) == 0) {
        heard_seen_[slot_[i]] = heard;
        gateway_event(i, health_.forwarded(i, now));
      }
      if (g.outstanding == 0) continue;
      const shm::PingResult r = shm::load_result(s);
      if (r.seq != g.outstanding) continue;
      switch (r.outcome) {
        case shm::PingOutcome::answered: {
          const bool first = g.reason == GatewayReason::unchecked;
          PingAnswer a;
          a.features = r.features;
          for (std::uint32_t k = 0; k < r.n_nis && k < shm::kPingNis; ++k)
            a.nis.push_back({r.nis[k].nid, r.nis[k].status == kNiStatusUp});
          for (std::uint32_t k = 0; k < r.n_nets && k < shm::kPingNets; ++k)
            a.nets.push_back({Net::from_u32(r.nets[k].net), r.nets[k].listed, r.nets[k].up});
          a.nets_complete = r.more_nets == 0 && r.n_nets <= shm::kPingNets;
          a.rtt = std::chrono::nanoseconds(r.done_ns - r.sent_ns);
          gateway_event(i, health_.answered(i, a, now) || first);
          break;
        }
        case shm::PingOutcome::send_failed:
          gateway_event(i, health_.failed(i, GatewayReason::send_failed, now));
          break;
        case shm::PingOutcome::bad_reply:
          gateway_event(i, health_.failed(i, GatewayReason::bad_reply, now));
          break;
        case shm::PingOutcome::none:
          break;
      }
    }
    for (std::size_t i : health_.expire(now)) gateway_event(i, true);
    // Health as selection in every worker ranks the gateways by.
    for (std::size_t i = 0; i < health_.gateways().size(); ++i)
      region_.gateway(slot_[i]).health.store(health_.gateways()[i].health, std::memory_order_relaxed);
    if (checking) {
      std::vector<std::uint32_t> kick;
      for (std::size_t i : health_.due(now)) {
        shm::GatewayShm& s = region_.gateway(slot_[i]);
        const std::uint64_t seq = s.request.load() + 1;
        s.request.store(seq);
        health_.sent(i, seq, now);
        kick.push_back(s.owner);
      }
      for (std::uint32_t w : kick) region_.worker(w).ping_requests.fetch_add(1);
    }
    const bool changed = apply_route_states();
    return std::exchange(unpublished_, false) || changed;
  }

  // Route aliveness from gateway health; true if any route changed.
  bool apply_route_states() {
    bool changed = false;
    const std::vector<Route> routes(builder_.routes().begin(), builder_.routes().end());
    for (const Route& r : routes) {
      const SingleHop sh = health_.single_hop(r);
      if (sh != SingleHop::unknown && sh != r.single_hop) {
        builder_.set_single_hop(r.net, r.gateway, sh);
        changed = true;
      }
      if (hold_carried_) {
        const auto gw = health_.find(r.gateway);
        if (gw && health_.gateways()[*gw].reason == GatewayReason::unchecked) continue;
      }
      const RouteState st = health_.route_state(r);
      const bool alive = st == RouteState::up;
      if (alive == r.alive) continue;
      builder_.set_alive(r.net, r.gateway, alive);
      changed = true;
      log("info", "route " + route_name(r) + ": " + (alive ? std::string("up") : "down (" + std::string(describe(st)) + ")"));
    }
    return changed;
  }

  // Whether the builder's table fits in a route slot.
  bool table_fits() const { return shm::fits(region_, builder_.build().view()); }

  bool publish() {
    const std::uint64_t version = shm::published_version(region_.header().published.load()) + 1;
    builder_.set_version(version);
    const RouteTable t = builder_.build();
    shm::PublishResult res;
    const auto give_up = Clock::now() + 2s;
    while ((res = shm::publish(region_, t.view())) == shm::PublishResult::busy) {
      if (Clock::now() >= give_up) {
        // Stopped or dead workers hold every other slot: not a reason to
        // hang (and hold the API); the next round tries again.
        log("warning", "every route slot is still held by a worker (is the dataplane stopped?): publishing later");
        unpublished_ = true;
        return true;
      }
      std::this_thread::sleep_for(1ms);
    }
    if (res == shm::PublishResult::too_big) {
      log("error", "the route table does not fit in a shared-memory slot");
      return false;
    }
    return true;
  }

 private:
  // The slot of a gateway, assigning a free one to a new gateway (the
  // caller made sure there is one).
  std::uint32_t slot_for(const Nid& nid) {
    if (auto it = slot_of_.find(nid); it != slot_of_.end()) return it->second;
    const std::uint32_t i = free_.back();
    free_.pop_back();
    shm::GatewayShm& g = region_.gateway(i);
    g.nid = nid;
    g.via = Nid{};
    g.owner = placement_.of(nid, region_.header().n_workers);
    g.down.store(0);
    g.tx_credits.store(0);
    g.queued_bytes.store(0);
    // Nothing of the slot's last gateway.  Written as it is, not under the
    // workers' seqlock: nobody reads or writes an unassigned entry's result
    // (and a control killed here leaves no seqlock held).
    const shm::PingResult empty{};
    std::memcpy(static_cast<void*>(&g.result), &empty, sizeof empty);
    down_seen_[i] = g.down_events.load();
    heard_seen_[i] = g.heard.load();
    failures_seen_[i] = g.send_failures.load();
    g.health.store(kMaxHealth);
    g.assigned.store(1);  // after the rest (release)
    slot_of_.emplace(nid, i);
    return i;
  }

  // Retired slots every worker has let go of become free: each worker
  // holds (and is reading) only snapshots published after the retirement,
  // which neither map nor ping them.
  void reclaim() {
    if (retired_.empty()) return;
    std::uint64_t oldest = ~std::uint64_t{0};
    for (std::uint32_t w = 0; w < region_.header().n_workers; ++w) {
      const shm::WorkerShm& ws = region_.worker(w);
      const std::uint64_t reading = ws.reading_version.load();
      const std::uint64_t held = ws.held_version.load();
      if (held != shm::kNoVersion) oldest = std::min(oldest, held);  // kNoVersion: holds nothing
      if (reading != shm::kNoVersion) oldest = std::min(oldest, reading);
    }
    std::erase_if(retired_, [&](const std::pair<std::uint32_t, std::uint64_t>& r) {
      if (oldest < r.second) return false;
      free_.push_back(r.first);
      return true;
    });
  }

  void gateway_event(std::size_t i, bool changed) {
    if (!changed) return;
    const Gateway& g = health_.gateways()[i];
    if (g.alive)
      log("info", "gateway " + to_string(g.nid) + ": alive (" + std::string(describe(g.reason)) + ", in " +
                      ms_text(g.last_rtt) + ")");
    else
      log("info", "gateway " + to_string(g.nid) + ": dead (" + std::string(describe(g.reason)) + "), health " +
                      std::to_string(g.health));
  }

  shm::Region region_;
  RouteTableBuilder& builder_;
  GatewayHealth health_;
  Placement placement_;
  std::vector<std::uint32_t> slot_;                               // per watched gateway: its board slot
  bool unpublished_ = false;  // the last publish gave up: retry on the next step
  bool hold_carried_ = false;  // routes keep their carried state until their gateway's first check
  std::vector<std::uint64_t> down_seen_;   // per slot: down_events handled
  std::vector<std::uint64_t> heard_seen_;  // per slot: heard handled
  std::vector<std::uint64_t> failures_seen_;  // per slot: send_failures handled
  std::unordered_map<Nid, std::uint32_t> slot_of_;               // assigned slots
  std::vector<std::uint32_t> free_;                              // unassigned, reusable now
  std::vector<std::pair<std::uint32_t, std::uint64_t>> retired_; // unassigned at (before) that version
};

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
    dataplane(on ? "drop_asym_route 1" : "drop_asym_route 0");
  } catch (const ApiError&) {
    return;  // its control socket is not up yet: on a later step
  }
  std::lock_guard lock(mu_);
  asym_pending_ = false;
  log("info", std::string("drop_asym_route ") + (on ? "1" : "0") + " (set at run time) given to the restarted dataplane");
}

bool Service::step(Clock::time_point now) {
  reapply_runtime_settings();
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
  };
  return names;
}

bool Service::changes(const std::string& command) {
  // Everything but shows, stats and export: an unknown command counts as a
  // change (handle() then names the valid ones on the management socket).
  static const std::vector<std::string> read_only = {"route show", "gateway show", "routing show", "net show",
                                                      "peer show",  "stats show",   "dataplane show", "buffers show",
                                                      "global show", "export", "system show", "fault show"};
  return std::find(read_only.begin(), read_only.end(), command) == read_only.end();
}

Json Service::handle(const std::string& command, const Json& args) {
  if (!args.is_object()) bad("'args' must be a mapping");
  if (command == "route show") return route_show(args);
  if (command == "route add") return route_add(args);
  if (command == "route del") return route_del(args);
  if (command == "gateway show") return gateway_show(args);
  if (command == "routing show") return routing_show(args);
  if (command == "set routing") return set_routing(args);
  if (command == "net show") return net_show(args);
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
  std::string all;
  for (const auto& c : commands()) all += (all.empty() ? "'" : ", '") + c + "'";
  bad("unknown command '" + command + "': expected one of " + all);
}

Json Service::route_json(const Route& r) const {
  Json j;
  j["net"] = to_string(r.net);
  j["gateway"] = to_string(r.gateway);
  j["hop"] = display_hop(r);
  j["priority"] = r.priority;
  j["health_sensitivity"] =
      r.health_sensitivity == kSensitivityGlobal ? params_.sensitivity : std::uint32_t{r.health_sensitivity};
  j["state"] = std::string(display_state(r));
  j["type"] = std::string(display_type(r));
  if (ctl_) {
    const RouteState st = ctl_->health().route_state(r);
    if (st != RouteState::up) j["reason"] = std::string(describe(st));
  }
  return j;
}

// What runs: lnetr's version, whether the dataplane answers and routes,
// and why it last stopped (its unit's exit record), for lnetrctl's system
// show and the appliance's login banner.
Json Service::system_show(const Json& args) {
  only(args, {});
  Json dp = Json::object();
  try {
    const Json st = dataplane("status");
    dp["state"] = "up";
    dp["routing"] = st["routing"]["state"];
    std::size_t up = 0;
    for (const Json& ni : st["nis"]) up += ni["status"] == "up" ? 1 : 0;
    dp["nis"] = st["nis"].size();
    dp["nis_up"] = up;
    // What a drain waits for: no router buffer held, nothing forwarded.
    std::int64_t held = 0;
    for (const Json& cpt : st["buffers"])
      for (const char* p : {"tiny", "small", "large"})
        held += cpt[p]["nbuffers"].get<std::int64_t>() - std::max<std::int64_t>(cpt[p]["credits"].get<std::int64_t>(), 0);
    dp["buffers_held"] = held;
    dp["forwarded"] = st["statistics"]["route_count"];
    dp["routing_since_s"] = st["routing"].value("since_s", std::int64_t{0});
    if (st["routing"].contains("peers_unaware")) dp["peers_unaware"] = st["routing"]["peers_unaware"];
    // How long peers may take to notice routing disabled: their checks.
    dp["alive_router_check_interval"] =
        std::chrono::duration_cast<std::chrono::seconds>(params_.check_interval).count();
  } catch (const ApiError& e) {
    dp["state"] = "down";
    dp["reason"] = e.descr;
  }
  if (const auto last = read_exit_record(exit_record_path(cfg_.dataplane.control_socket.value)))
    dp["last_stop"] = describe(*last);
  Json j = {{"lnetr", LNETR_VERSION}, {"control", attached() ? "attached" : "waiting for the dataplane"},
            {"dataplane", dp}};
  {
    std::lock_guard lock(mu_);
    if (builder_) {
      std::size_t up = 0;
      for (const Route& r : builder_->routes()) up += r.alive ? 1 : 0;
      j["routes"] = builder_->routes().size();
      j["routes_up"] = up;
    }
  }
  return {{"system", j}};
}

Json Service::route_show(const Json& args) {
  only(args, {"net", "gateway", "hop", "priority", "verbose"});
  const auto net = opt_net(args, "net");
  const auto gw = opt_nid(args, "gateway");
  const auto hop = opt_int(args, "hop", -1, kHopsMax);
  const auto prio = opt_int(args, "priority", 0, 0xffffffffLL);
  const bool verbose = opt_int(args, "verbose", 0, 4).value_or(0) > 0;
  std::lock_guard lock(mu_);
  Json routes = Json::array();
  if (builder_)
    for (const Route& r : builder_->routes()) {
      if ((net && r.net != *net) || (gw && !(r.gateway == *gw)) || (hop && display_hop(r) != *hop) ||
          (prio && r.priority != *prio))
        continue;
      // As lnetctl: net and gateway, and with verbose the rest.
      routes.push_back(verbose ? route_json(r) : Json{{"net", to_string(r.net)}, {"gateway", to_string(r.gateway)}});
    }
  return {{"route", routes}};
}

Json Service::route_add(const Json& args) {
  only(args, {"net", "gateway", "hop", "priority", "health_sensitivity"});
  RouteSpec spec;
  spec.net = required(opt_net(args, "net"), "net");
  spec.gateway = required(opt_nid(args, "gateway"), "gateway");
  const auto hop = opt_int(args, "hop", -1, kHopsMax);
  spec.hops = !hop || *hop == -1 ? kHopsUndefined : static_cast<std::uint32_t>(*hop);
  if (hop && *hop == 0) bad("argument 'hop': expected -1 (undefined) or 1..255, got 0");
  spec.priority = static_cast<std::uint32_t>(opt_int(args, "priority", 0, 0xffffffffLL).value_or(0));
  if (auto s = opt_int(args, "health_sensitivity", 0, kSensitivityMax)) spec.health_sensitivity = static_cast<std::uint16_t>(*s);
  std::lock_guard lock(mu_);
  if (!builder_) throw ApiError{EAGAIN, "not attached to a dataplane yet: no route table to change"};
  auto added = builder_->add(spec);
  if (!added) throw ApiError{errno_of(added.error()), std::string(describe(added.error()))};
  try {
    routes_changed();
  } catch (const ApiError&) {
    builder_->remove(spec.net, spec.gateway);  // nothing changes on error
    throw;
  }
  log("info", "route " + route_name(*added) + " added (hop " + std::to_string(display_hop(*added)) + ", priority " +
                  std::to_string(added->priority) + ")");
  return {{"route", Json::array({route_json(*added)})}};
}

Json Service::route_del(const Json& args) {
  only(args, {"net", "gateway"});
  const Net net = required(opt_net(args, "net"), "net");
  const auto gw = opt_nid(args, "gateway");
  std::lock_guard lock(mu_);
  if (!builder_) throw ApiError{EAGAIN, "not attached to a dataplane yet: no route table to change"};
  Json removed = Json::array();
  for (const Route& r : builder_->routes())
    if (r.net == net && (!gw || r.gateway == *gw)) removed.push_back(route_json(r));
  if (removed.empty())
    throw ApiError{ENOENT, "no route to " + to_string(net) + (gw ? " via " + to_string(*gw) : std::string())};
  builder_->remove(net, gw);
  log("info", "route " + to_string(net) + (gw ? " via " + to_string(*gw) : std::string(" (all gateways)")) +
                  " deleted");
  routes_changed();
  return {{"route", removed}};
}

Json Service::gateway_show(const Json& args) {
  only(args, {"gateway"});
  const auto gw = opt_nid(args, "gateway");
  std::lock_guard lock(mu_);
  Json out = Json::array();
  if (!ctl_) return {{"gateway", out}};
  const GatewayHealth& h = ctl_->health();
  for (const Gateway& g : h.gateways()) {
    if (gw && !(g.nid == *gw)) continue;
    Json j;
    j["nid"] = to_string(g.nid);
    j["state"] = g.alive ? "up" : "down";
    j["reason"] = std::string(describe(g.reason));
    j["health"] = g.health;
    j["health_sensitivity"] = h.sensitivity(g);
    j["ping_rtt_us"] = static_cast<double>(g.last_rtt.count()) / 1e3;
    j["pings"] = g.pings;
    j["failures"] = g.failures;
    j["routing_disabled"] = g.rte_disabled();
    Json nis = Json::array();
    for (const GatewayNi& ni : g.nis) nis.push_back({{"nid", to_string(ni.nid)}, {"status", ni.up ? "up" : "down"}});
    j["nis"] = nis;
    out.push_back(j);
  }
  return {{"gateway", out}};
}

// The o2iblnd connections of `peers` (their credits, queues), asked of the
// dataplane's workers: only those peers' (all of them past what fits in one
// request line).
Json Service::o2ib_connections(const std::set<std::string>& peers) const {
  Json out = Json::array();
  auto ask = [&](const std::string& line) {
    Json r = dataplane(line);
    if (r.contains("errno")) throw ApiError{-r["errno"].get<int>(), r.value("descr", std::string("o2ib connections"))};
    for (Json& c : r["connections"]) out.push_back(std::move(c));
  };
  // As many NIDs to a request as its line takes.
  const std::string head = "o2ib connections";
  std::string line = head;
  for (const std::string& p : peers) {
    if (const auto n = parse_nid(p); !n || n->lnd() != LndType::o2ib) continue;
    if (line.size() + 1 + p.size() >= shm::kControlRequestMax) {
      ask(line);
      line = head;
    }
    line += " " + p;
  }
  if (line.size() > head.size()) ask(line);
  return out;
}

Json Service::dataplane(const std::string& line) const {
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
  bool ok = ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  // On the heap: this runs on the metrics server's threads too, whose
  // stacks are small.
  std::vector<char> buf(65536);
  ssize_t n;
  while (ok && (n = ::recv(fd, buf.data(), buf.size(), 0)) > 0) reply.append(buf.data(), static_cast<std::size_t>(n));
  ::close(fd);
  Json j = Json::parse(reply, nullptr, false);
  if (!ok || j.is_discarded() || !j.is_object())
    throw ApiError{EPROTO, "the dataplane's answer on " + path + " was not a JSON document"};
  if (j.contains("errno")) throw ApiError{-j["errno"].get<int>(), j.value("descr", std::string("dataplane error"))};
  return j;
}

Json Service::routing_show(const Json& args) {
  only(args, {});
  const Json st = dataplane("status");
  Json routing = Json::array();
  Json totals = {{"tiny", 0}, {"small", 0}, {"large", 0}};
  for (const Json& cpt : st["buffers"]) {
    Json pools;
    for (const char* p : {"tiny", "small", "large"}) {
      pools[p] = {{"npages", cpt[p]["npages"]}, {"nbuffers", cpt[p]["nbuffers"]}, {"credits", cpt[p]["credits"]},
                  {"mincredits", cpt[p]["mincredits"]}};
      totals[p] = totals[p].get<std::int64_t>() + cpt[p]["nbuffers"].get<std::int64_t>();
    }
    routing.push_back({{"cpt[" + std::to_string(cpt["cpt"].get<int>()) + "]", pools}});
  }
  routing.push_back({{"enable", st["routing"]["enable"]}});
  return {{"routing", routing}, {"buffers", totals}};
}

Json Service::set_routing(const Json& args) {
  only(args, {"enable"});
  const auto on = required(opt_int(args, "enable", 0, 1), "enable");
  const Json r = dataplane(on ? "routing 1" : "routing 0");
  log("info", std::string("routing ") + (on ? "enabled" : "disabled") + " by request: now " + r.value("routing", ""));
  return {{"routing", {{"enable", r["enable"]}, {"state", r["routing"]}}}};
}

namespace {

// Every CPT: each worker serves the peers its hash gives it, on every NI.
// As lnetctl prints a CPT list: "[0,1]".
std::string cpt_list(const Json& cpts) {
  std::string t = "[";
  for (const Json& c : cpts) t += (t.size() > 1 ? "," : "") + std::to_string(c.get<std::uint32_t>());
  return t + "]";
}

// A peer's counters summed over the workers that account for it; credits
// from the worker that owns it (its connections' CPT).
Json merged_peers(const Json& status, const Placement& placement) {
  Json out = Json::array();
  std::unordered_map<std::string, std::size_t> at;  // nid -> its entry in out
  for (const Json& p : status["peers"]) {
    const auto [pos, fresh] = at.emplace(p["nid"].get<std::string>(), out.size());
    if (fresh) {
      out.push_back(p);
      continue;
    }
    Json* it = &out[pos->second];
    for (const char* k : {"send_count", "recv_count", "drop_count", "send_bytes", "recv_bytes"})
      (*it)[k] = (*it)[k].get<std::uint64_t>() + p[k].get<std::uint64_t>();
    const auto n = parse_nid(p["nid"].get<std::string>());
    if (n && placement.of(*n, static_cast<std::uint32_t>(status["workers"].size())) == p["cpt"].get<std::uint32_t>())
      for (const char* k : {"cpt", "state", "multi_rail", "max_ni_tx_credits", "available_tx_credits", "min_tx_credits",
                            "max_rtr_credits", "available_rtr_credits", "min_rtr_credits", "tx_q_num_of_buf",
                            "rtr_q_num_of_buf"})
        (*it)[k] = p[k];
  }
  return out;
}

}  // namespace

Json Service::net_show(const Json& args) {
  only(args, {"net", "verbose"});
  const auto net = opt_net(args, "net");
  const auto verbose = opt_int(args, "verbose", 0, 4).value_or(0);
  const Json st = dataplane("status");
  const Json peers = verbose ? merged_peers(st, placement_) : Json::array();
  Json nets = Json::array();
  for (const config::NetConfig& n : cfg_.nets) {
    if (net && n.net.value != *net) continue;
    Json nis = Json::array();
    for (const Json& ni : st["nis"]) {
      const auto nid = parse_nid(ni["nid"].get<std::string>());
      if (!nid || nid->net() != n.net.value) continue;
      Json j = {{"nid", ni["nid"]}, {"status", ni["status"]}, {"interfaces", {{"0", ni["interface"]}}}};
      if (verbose) {
        // What went through the NI: its peers' messages (every peer on its
        // net is reached through it).
        std::uint64_t sent = 0, received = 0, dropped = 0;
        for (const Json& p : peers) {
          const auto pn = parse_nid(p["nid"].get<std::string>());
          if (!pn || pn->net() != n.net.value) continue;
          sent += p["send_count"].get<std::uint64_t>();
          received += p["recv_count"].get<std::uint64_t>();
          dropped += p["drop_count"].get<std::uint64_t>();
        }
        j["statistics"] = {{"send_count", sent}, {"recv_count", received}, {"drop_count", dropped}};
        // The values in force, as the dataplane reports them (o2ib's
        // clamped as Linux clamps them; the fmr_* keys are not in force in
        // lnetr: no registration pools), and the CPTs whose workers serve
        // the NI's peers.
        j["tunables"] = {{"peer_timeout", ni["peer_timeout"]},
                         {"peer_credits", ni["peer_credits"]},
                         {"peer_buffer_credits", ni["peer_buffer_credits"]},
                         {"credits", ni["credits"]}};
        j["lnd tunables"] = ni["lnd_tunables"];
        j["CPT"] = cpt_list(ni["cpts"]);
        j["link"] = ni["link"];
        // What our ping info tells peers: DOWN also while no node of the
        // net has pinged the NI within the NI-status timeout.
        j["advertised"] = ni["advertised"];
      }
      nis.push_back(j);
    }
    nets.push_back({{"net type", to_string(n.net.value)}, {"local NI(s)", nis}});
  }
  return {{"net", nets}};
}

Json Service::peer_show(const Json& args) {
  only(args, {"nid", "verbose"});
  const auto nid = opt_nid(args, "nid");
  const auto verbose = opt_int(args, "verbose", 0, 4).value_or(0);
  const Json st = dataplane("status");
  Json peers = Json::array();
  const Json merged = merged_peers(st, placement_);
  // lnetr's own at -v 2: the o2ib peers' connections and their credits, in
  // one request for all.
  std::map<std::string, Json> ib_conns;
  if (verbose >= 2 && st.contains("o2iblnd")) {
    std::set<std::string> wanted;
    for (const Json& p : merged) {
      const std::string n = p["nid"].get<std::string>();
      const auto pn = parse_nid(n);
      if ((!nid || n == to_string(*nid)) && pn && pn->lnd() == LndType::o2ib) wanted.insert(n);
    }
    for (const Json& c : o2ib_connections(wanted))
      ib_conns[c["peer"].get<std::string>()].push_back(
          {{"queue_depth", c["queue_depth"]}, {"credits", c["credits"]}, {"outstanding_credits", c["outstanding_credits"]},
           {"reserved_credits", c["reserved_credits"]}, {"queued", c["queued"]}, {"rx_held", c["rx_held"]},
           {"version", c["version"]}});
  }
  for (const Json& p : merged) {
    if (nid && p["nid"].get<std::string>() != to_string(*nid)) continue;
    Json ni = {{"nid", p["nid"]}, {"state", p["state"]}};
    if (verbose) {
      for (const char* k : {"max_ni_tx_credits", "available_tx_credits", "min_tx_credits", "tx_q_num_of_buf",
                            "max_rtr_credits", "available_rtr_credits", "min_rtr_credits", "rtr_q_num_of_buf", "cpt"})
        ni[k] = p[k];
      ni["statistics"] = {{"send_count", p["send_count"]}, {"recv_count", p["recv_count"]}, {"drop_count", p["drop_count"]}};
      if (auto it = ib_conns.find(p["nid"].get<std::string>()); it != ib_conns.end())
        ni["o2ib connections"] = it->second;
    }
    peers.push_back({{"primary nid", p["nid"]}, {"Multi-Rail", p["multi_rail"]}, {"peer ni", Json::array({ni})}});
  }
  if (nid && peers.empty()) throw ApiError{ENOENT, "no peer " + to_string(*nid) + " (the router has not exchanged a message with it)"};
  return {{"peer", peers}};
}

// Counters as `stats show` reports them: the dataplane's, less what they
// were at the last `stats reset` of the same dataplane run (the dataplane's
// own counters and the Prometheus series never go back).
Json Service::stats_now() const {
  const Json st = dataplane("status");
  Json s = st["statistics"];
  s["drops"] = st["drops"];
  s["socklnd"] = st["socklnd"];
  return s;
}

Json Service::stats_show(const Json& args) {
  only(args, {});
  Json s = stats_now();
  std::lock_guard lock(mu_);
  if (!stats_base_.is_null() && stats_base_incarnation_ == incarnation_locked()) subtract(s, stats_base_);
  return {{"statistics", s}};
}

// LNet fault injection (router/lnet_fault.hpp): add, del, show and reset
// go to the dataplane, which keeps the rules and applies them on every
// worker.  Off until an operator adds a rule; refused on the read-only
// socket as every change is.
Json Service::fault(const std::string& op, const Json& args) {
  if (op == "add") {
    only(args, {"kind", "source", "dest", "local", "type", "portal", "rate", "interval", "latency"});
    const auto kind = opt_text(args, "kind");
    if (!kind) bad("argument 'kind': drop, delay or corrupt is required");
    std::string rule = "kind=" + *kind;
    auto word = [&](const char* arg, const char* key) {
      if (auto v = opt_text(args, arg)) {
        if (v->empty() || v->find_first_of(" =\n") != std::string::npos)
          bad(std::string("argument '") + arg + "': expected one word, got '" + *v + "'");
        rule += std::string(" ") + key + "=" + *v;
      }
    };
    word("source", "src");
    word("dest", "dst");
    word("local", "local");
    word("type", "type");
    word("portal", "portal");
    word("rate", "rate");
    word("interval", "interval");
    word("latency", "latency");
    if (rule.find(" src=") == std::string::npos) rule += " src=*";
    if (rule.find(" dst=") == std::string::npos) rule += " dst=*";
    const Json r = dataplane("lnet_fault add " + rule);
    log("warning", "fault rule " + std::to_string(r.value("id", 0)) + " added: " + r.value("rule", rule));
    return {{"fault", r}};
  }
  if (op == "del") {
    only(args, {"id", "all"});
    const auto id = opt_int(args, "id", 1, 0xffffffffLL);
    const bool all = opt_int(args, "all", 0, 1).value_or(0) == 1;
    if (id.has_value() == all) bad("give --id ID or --all");
    const Json r = dataplane("lnet_fault del " + (all ? std::string("all") : std::to_string(*id)));
    log("info", "fault rule(s) deleted: " + (all ? std::string("all") : std::to_string(*id)));
    return {{"fault", r}};
  }
  only(args, {});
  const Json r = dataplane(op == "show" ? "lnet_fault list" : "lnet_fault reset");
  return {{"fault", r}};
}

Json Service::stats_reset(const Json& args) {
  only(args, {});
  Json s = stats_now();
  std::lock_guard lock(mu_);
  stats_base_ = std::move(s);
  stats_base_incarnation_ = incarnation_locked();
  log("info", "statistics reset by request");
  return {{"statistics", "reset"}};
}

void Service::subtract(Json& now, const Json& base) {
  for (auto it = now.begin(); it != now.end(); ++it) {
    if (!base.contains(it.key())) continue;
    const Json& b = base[it.key()];
    if (it->is_object() && b.is_object()) {
      subtract(*it, b);
    } else if (it->is_number_unsigned() && b.is_number_unsigned()) {
      const auto v = it->get<std::uint64_t>(), w = b.get<std::uint64_t>();
      *it = v >= w ? v - w : v;  // counters that went back started again
    }
  }
}

// The dataplane's workers, ports and rings (lnetr's own).
Json Service::dataplane_show(const Json& args) {
  only(args, {});
  const Json st = dataplane("status");
  Json workers = Json::array();
  for (const Json& w : st["workers"]) {
    const auto cycles = w["cycles"].get<std::uint64_t>(), busy = w["busy_cycles"].get<std::uint64_t>();
    workers.push_back({{"cpt", w["cpt"]},
                       {"core", w["core"]},
                       {"busy_ratio", cycles ? static_cast<double>(busy) / static_cast<double>(cycles) : 0.0},
                       {"loops", w["loops"]},
                       {"busy_loops", w["busy_loops"]},
                       {"cycles", cycles},
                       {"busy_cycles", busy},
                       {"ring_size", w["ring_size"]},
                       {"ring_backlog", w["ring_backlog"]},
                       {"conns_opened", w["conns_opened"]},
                       {"rx_msgs", w["rx_msgs"]},
                       {"tx_msgs", w["tx_msgs"]},
                       {"route_version", w["route_version"]}});
  }
  // Each NI's port: kernel sockets on its interface, or a DPDK port (with
  // what lnetr's own TCP/IP counted there).
  Json ports = Json::array();
  for (const Json& ni : st["nis"]) {
    const std::string transport = ni.contains("transport") ? ni["transport"].get<std::string>() : "socket";
    Json p = {{"nid", ni["nid"]}, {"interface", ni["interface"]}, {"transport", transport}, {"link", ni["link"]},
              {"status", ni["status"]}};
    if (st.contains("ports"))
      for (const Json& dp : st["ports"])
        if (dp["name"] == ni["interface"])
          for (const char* k : {"device", "mac", "mtu", "rx_frames", "tx_frames", "rx_bytes", "tx_bytes", "tx_dropped",
                                "tcp_connections", "bytes_copied", "bytes_referenced", "rx_bytes_referenced", "zero_copy", "tso", "tso_frames", "resets_out",
                                "dropped_malformed"})
            p[k] = dp[k];
    if (ni.contains("device")) p["device"] = ni["device"];  // an o2ib NI's RDMA device
    ports.push_back(std::move(p));
  }
  std::lock_guard lock(mu_);
  Json out = {{"shm_name", cfg_.dataplane.shm_name.value},
              {"incarnation", incarnation_locked()},
              {"routing", st["routing"]["state"]},
              {"workers", workers},
              {"ports", ports}};
  if (st.contains("o2iblnd")) {
    // o2iblnd over verbs: the workers' engines summed.
    const Json& ib = st["o2iblnd"];
    Json o = Json::object();
    o["connections"] = ib["connections"];
    for (const char* k : {"remote_keys", "conns_accepted", "conns_connected", "rdma_bytes_written", "rdma_bytes_received",
                          "bytes_copied", "bytes_bounced", "sink_windows", "sink_windows_refused", "sink_registrations",
                          "tx_timeouts", "post_failures", "cq_errors"})
      o[k] = ib[k];
    out["o2iblnd"] = std::move(o);
  }
  return {{"dataplane", std::move(out)}};
}

Json Service::buffers_show(const Json& args) {
  only(args, {});
  const Json st = dataplane("status");
  return {{"buffers", st["buffers"]}, {"workers", st["workers"]}};
}

Json Service::global_show(const Json& args) {
  only(args, {});
  // drop_asym_route as the dataplane applies it (it may have been set at
  // run time, or read from its own file), else as configured.
  std::optional<int> asym;
  try {
    asym = dataplane("drop_asym_route").value("drop_asym_route", 0);
  } catch (const ApiError&) {
  }
  std::lock_guard lock(mu_);
  const config::GlobalConfig& g = cfg_.global;
  // Only what is in force: what lnetr does not apply shows the kernel
  // default its behaviour matches (the file's other value was named in a
  // warning at load time, config.cpp check_in_force()); recovery_interval is
  // deprecated and ignored by the kernel too.
  const config::GlobalConfig k;
  return {{"global",
           {{"numa_range", k.numa_range.value},
            {"max_interfaces", k.max_interfaces.value},
            {"discovery", g.discovery.value ? 1 : 0},
            {"drop_asym_route", asym.value_or(g.drop_asym_route.value ? 1 : 0)},
            {"retry_count", k.retry_count.value},
            {"transaction_timeout", g.transaction_timeout.value},
            {"health_sensitivity", params_.sensitivity},
            {"recovery_interval", g.recovery_interval.value},
            {"router_sensitivity", k.router_sensitivity.value},
            {"lnd_timeout", (std::max<std::uint32_t>(g.transaction_timeout.value, 1) - 1) / (k.retry_count.value + 1)},
            {"response_tracking", k.response_tracking.value},
            {"recovery_limit", k.recovery_limit.value},
            {"max_recovery_ping_interval", k.max_recovery_ping_interval.value},
            {"alive_router_check_interval",
             std::chrono::duration_cast<std::chrono::seconds>(params_.check_interval).count()},
            {"router_ping_timeout", std::chrono::duration_cast<std::chrono::seconds>(params_.ping_timeout).count()}}}};
}

// The tunables lnetr-control applies at run time.
Json Service::set_tunable(const Json& args) {
  only(args, {"health_sensitivity", "alive_router_check_interval", "router_ping_timeout", "drop_asym_route",
              "tiny_buffers", "small_buffers", "large_buffers"});
  for (const char* pool : {"tiny_buffers", "small_buffers", "large_buffers"})
    if (args.contains(pool))
      throw ApiError{EOPNOTSUPP, std::string(pool) + " cannot change at run time: lnetr-dataplane sizes its router buffer "
                                                     "pools when it starts; set buffers: in its configuration file "
                                                     "and restart it"};
  const auto sens = opt_int(args, "health_sensitivity", 0, kSensitivityMax);
  const auto check = opt_int(args, "alive_router_check_interval", 0, 0x7fffffff);
  const auto timeout = opt_int(args, "router_ping_timeout", 1, 0x7fffffff);
  const auto asym = opt_int(args, "drop_asym_route", 0, 1);
  if (!sens && !check && !timeout && !asym)
    bad("nothing to set: give health_sensitivity, alive_router_check_interval, router_ping_timeout or drop_asym_route");
  // The dataplane applies drop_asym_route: it must take it, or nothing
  // changes.  (Sent and recorded as one, against a concurrent re-apply.)
  std::unique_lock asym_lock(asym_mu_, std::defer_lock);
  if (asym) {
    asym_lock.lock();
    dataplane(*asym ? "drop_asym_route 1" : "drop_asym_route 0");
  }
  std::lock_guard lock(mu_);
  if (asym) {
    cfg_.global.drop_asym_route.value = *asym != 0;
    runtime_asym_ = *asym != 0;
  }
  if (sens) params_.sensitivity = static_cast<std::uint32_t>(*sens);
  if (check) params_.check_interval = std::chrono::seconds(*check);
  if (timeout) params_.ping_timeout = std::chrono::seconds(*timeout);
  if (ctl_) ctl_->health().set_params(params_);
  log("info", "tunables set: " + args.dump());
  Json out;
  if (sens) out["health_sensitivity"] = *sens;
  if (check) out["alive_router_check_interval"] = *check;
  if (timeout) out["router_ping_timeout"] = *timeout;
  if (asym) out["drop_asym_route"] = *asym;
  return {{"global", out}};
}

// As `lnetctl export`: the running configuration with its state (NI
// status and statistics, route state and type, per-CPT buffer pools);
// `backup` keeps only what recreates the configuration.
Json Service::export_config(const Json& args) {
  only(args, {"backup"});
  if (opt_int(args, "backup", 0, 1).value_or(0) == 0) {
    // Only lnetctl's keys: what lnetr adds (NI link and advertised
    // status, route reason, the dataplane's check intervals) is not part
    // of the format.
    Json out = net_show({{"verbose", 1}});
    for (Json& n : out["net"])
      for (Json& ni : n["local NI(s)"]) {
        ni.erase("link");
        ni.erase("advertised");
      }
    out["route"] = route_show({{"verbose", 1}})["route"];
    for (Json& r : out["route"]) r.erase("reason");
    const Json routing = routing_show({});
    out["routing"] = routing["routing"];
    out["buffers"] = routing["buffers"];
    out["global"] = global_show({})["global"];
    out["global"].erase("alive_router_check_interval");
    out["global"].erase("router_ping_timeout");
    return out;
  }
  Json routing = dataplane("status")["routing"];
  std::lock_guard lock(mu_);
  Json nets = Json::array();
  for (const config::NetConfig& n : cfg_.nets) {
    Json nis = Json::array();
    for (const config::NiConfig& ni : n.nis) {
      Json j;
      if (ni.nid) j["nid"] = to_string(ni.nid->value);
      if (ni.interface) j["interfaces"] = {{"0", ni.interface->value}};
      j["tunables"] = {{"peer_timeout", ni.tunables.peer_timeout.value},
                       {"peer_credits", ni.tunables.peer_credits.value},
                       {"peer_buffer_credits", ni.tunables.peer_buffer_credits.value},
                       {"credits", ni.tunables.credits.value}};
      nis.push_back(j);
    }
    nets.push_back({{"net type", to_string(n.net.value)}, {"local NI(s)", nis}});
  }
  Json routes = Json::array();
  if (builder_)
    for (const Route& r : builder_->routes()) {
      Json j = {{"net", to_string(r.net)}, {"gateway", to_string(r.gateway)}, {"hop", display_hop(r)},
                {"priority", r.priority}};
      // (Only a route's own: one without keeps following the global one.)
      if (r.health_sensitivity != kSensitivityGlobal) j["health_sensitivity"] = r.health_sensitivity;
      routes.push_back(std::move(j));
    }
  const config::BufferConfig& b = cfg_.buffers;
  return {{"net", nets},
          {"route", routes},
          {"routing", {{"enable", routing.value("enable", 1) == 1 || routing.value("enable", 1) == 3 ? 1 : 0}}},
          {"buffers", {{"tiny", b.tiny.value}, {"small", b.small.value}, {"large", b.large.value}}},
          {"global", {{"health_sensitivity", params_.sensitivity}}}};
}

namespace {

// A scalar as YAML reads it back: numbers plain, strings double-quoted
// (JSON's escapes are YAML's).
std::string yaml_scalar(const Json& v) {
  if (v.is_string()) return v.dump();
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  return v.dump();
}

// The line `save` writes above what it saved (and drops when it saves again).
constexpr std::string_view kSavedNote = "# Routes, routing and global tunables in force, saved ";

// `key:` and a mapping of scalars, or a sequence of such mappings, in block
// style with lnetctl's indentation.
std::string yaml_section(const std::string& key, const Json& v) {
  std::string out = key + ":";
  if (v.is_array()) {
    if (v.empty()) return out + " []\n";
    out += "\n";
    for (const Json& item : v) {
      bool first = true;
      for (const auto& [k, x] : item.items()) {
        out += (first ? "    - " : "      ") + k + ": " + yaml_scalar(x) + "\n";
        first = false;
      }
    }
    return out;
  }
  out += "\n";
  for (const auto& [k, x] : v.items()) out += "    " + k + ": " + yaml_scalar(x) + "\n";
  return out;
}

}  // namespace

// Writes what is in force to the file lnetr-control was started with, so
// that a restart or reboot keeps it: the file's text stays as it is
// (comments, the nets, buffers, the dataplane and control sections), but
// its route, routing and global sections are written anew from the
// running router.  The result must load, and replaces the file whole
// (written beside it, then renamed).
Json Service::save(const Json& args) {
  only(args, {});
  if (config_path_.empty()) throw ApiError{ENOENT, "lnetr-control was not started from a configuration file"};
  std::ifstream in(config_path_);
  if (!in) throw ApiError{errno ? errno : EIO, "cannot read " + config_path_ + ": " + std::strerror(errno)};
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const yaml::Tree tree = yaml::parse(text, "a configuration");
  if (tree.error || !tree.root || tree.root->kind != yaml::Node::Kind::mapping)
    throw ApiError{EINVAL, config_path_ + " is not a YAML mapping: not saved"};
  // Each top-level key's lines: from its line to the next key's.
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = text.find('\n', at);
    lines.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl + 1 - at));
    at = nl == std::string::npos ? text.size() : nl + 1;
  }
  std::vector<bool> drop(lines.size(), false);
  const auto& entries = tree.root->entries;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i + 1 < entries.size() && entries[i + 1].key_mark.line == entries[i].key_mark.line)
      throw ApiError{EINVAL, config_path_ + " is written in flow style: not saved (write it in block style)"};
    const std::string& k = entries[i].key;
    if (k != "route" && k != "routing" && k != "global") continue;
    const std::size_t from = entries[i].key_mark.line - 1;
    std::size_t to = i + 1 < entries.size() ? entries[i + 1].key_mark.line - 1 : lines.size();
    // Comments and blank lines just above the next key belong to it.
    auto comment_or_blank = [](const std::string& line) {
      const std::size_t at = line.find_first_not_of(" \t\r\n");
      return at == std::string::npos || line[at] == '#';
    };
    if (i + 1 < entries.size())
      while (to > from + 1 && to <= lines.size() && comment_or_blank(lines[to - 1]) &&
             !lines[to - 1].starts_with(kSavedNote))
        --to;
    for (std::size_t l = from; l < to && l < lines.size(); ++l) drop[l] = true;
  }
  std::string out;
  for (std::size_t l = 0; l < lines.size(); ++l)
    if (!drop[l] && lines[l] != "...\n" && lines[l] != "..." && !lines[l].starts_with(kSavedNote)) out += lines[l];
  if (!out.empty() && out.back() != '\n') out += '\n';

  // Routes and forwarding as `export --backup` gives them (forwarding off
  // also while stopping); the global tunables as `export` shows them.
  const Json backup = export_config({{"backup", 1}});
  const Json running = export_config(Json::object());
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  out += std::string(kSavedNote) + when + " (lnetrctl save).\n";
  out += yaml_section("route", backup["route"]);
  out += yaml_section("routing", backup["routing"]);
  out += yaml_section("global", running["global"]);

  const auto loaded = config::load_config(out, config_path_);
  if (!loaded) {
    std::string why;
    for (const auto& e : loaded.error()) why += (why.empty() ? "" : "; ") + e.to_string();
    throw ApiError{EINVAL, "the configuration in force does not load back, not saved: " + why};
  }
  // One save at a time (each API client has its own thread); written
  // whole and synced beside the file, with its mode and group, then
  // renamed over it and the directory synced: a power cut leaves the old
  // file or the new one.
  std::lock_guard saving(save_mu_);
  std::string tmp = config_path_ + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw ApiError{errno, "cannot write beside " + config_path_ + ": " + std::strerror(errno)};
  struct stat st {};
  bool ok = ::stat(config_path_.c_str(), &st) == 0;
  ok = ok && ::fchmod(fd, st.st_mode & 07777) == 0;
  // The file's group too, where we may give it (else it keeps ours).
  if (ok) static_cast<void>(::fchown(fd, static_cast<uid_t>(-1), st.st_gid));
  std::size_t done = 0;
  while (ok && done < out.size()) {
    const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), config_path_.c_str()) != 0) {
    const int why = ok ? errno : (e ? e : EIO);
    ::unlink(tmp.c_str());
    throw ApiError{why, "cannot replace " + config_path_ + ": " + std::strerror(why)};
  }
  const std::string dir = std::filesystem::path(config_path_).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  log("info", "configuration in force saved to " + config_path_);
  return {{"saved", config_path_}};
}

// An lnetctl-style YAML document (e.g. what `lnetctl export` wrote): its
// routes are added (or, with del, deleted) and its routing state applied;
// what cannot change at run time (nets, buffer sizes) must match or is
// reported.  Nothing changes if the document does not load.
Json Service::import_config(const Json& args) {
  only(args, {"text", "name", "del"});
  const std::string text = required(opt_text(args, "text"), "text");
  const std::string name = opt_text(args, "name").value_or("import");
  const bool del = opt_int(args, "del", 0, 1).value_or(0) == 1;
  config::LoadOptions opts;
  opts.fragment = true;
  auto loaded = config::load_config(text, name, opts);
  if (!loaded) {
    std::string all;
    for (const auto& e : loaded.error()) all += (all.empty() ? "" : "; ") + e.to_string();
    throw ApiError{EINVAL, all};
  }
  const config::Config& in = loaded->config;
  Json warnings = Json::array();
  for (const auto& w : loaded->warnings) warnings.push_back(w.to_string());
  Json done = Json::array(), errors = Json::array();
  Json running_nis = Json::array();
  if (!in.nets.empty()) running_nis = dataplane("status")["nis"];
  {
    std::lock_guard lock(mu_);
    if (!builder_) throw ApiError{EAGAIN, "not attached to a dataplane yet: no route table to change"};
    for (const config::NetConfig& n : in.nets) {
      const auto running = std::find_if(cfg_.nets.begin(), cfg_.nets.end(),
                                         [&](const auto& c) { return c.net.value == n.net.value; });
      if (running == cfg_.nets.end()) {
        warnings.push_back(config::to_string(n.source) + ": net " + to_string(n.net.value) +
                           " is not one of this router's nets; NIs are not added at run time");
        continue;
      }
      // An NI's tunables are read when the dataplane starts: ones here that
      // differ from those in force (as the dataplane reports them, which is
      // what an export of it says) change nothing, and are said to.
      const Json* in_force = nullptr;
      for (const Json& s : running_nis)
        if (auto nid = parse_nid(s.value("nid", "")); nid && nid->net() == n.net.value) in_force = &s;
      if (!in_force) continue;
      auto differs = [](const auto& field, const Json& v) {
        return field.given() && v.is_number_integer() && v.get<std::int64_t>() != field.value;
      };
      const Json& lnd = (*in_force)["lnd_tunables"];
      for (const config::NiConfig& ni : n.nis) {
        const config::Tunables& a = ni.tunables;
        const config::LndTunables& l = ni.lnd_tunables;
        if (differs(a.peer_timeout, (*in_force)["peer_timeout"]) || differs(a.peer_credits, (*in_force)["peer_credits"]) ||
            differs(a.peer_buffer_credits, (*in_force)["peer_buffer_credits"]) ||
            differs(a.credits, (*in_force)["credits"]) || differs(l.conns_per_peer, lnd.value("conns_per_peer", Json())) ||
            differs(l.timeout, lnd.value("timeout", Json())) || differs(l.tos, lnd.value("tos", Json())))
          warnings.push_back(config::to_string(ni.source) + ": net " + to_string(n.net.value) +
                             ": its NI's tunables are not changed at run time (they are read when the dataplane "
                             "starts: edit its configuration file)");
      }
    }
    const config::BufferConfig& b = in.buffers;
    if ((b.tiny.given() && b.tiny.value != cfg_.buffers.tiny.value) ||
        (b.small.given() && b.small.value != cfg_.buffers.small.value) ||
        (b.large.given() && b.large.value != cfg_.buffers.large.value))
      warnings.push_back(name + ": buffers differ from the running ones (tiny " + std::to_string(cfg_.buffers.tiny.value) +
                         ", small " + std::to_string(cfg_.buffers.small.value) + ", large " +
                         std::to_string(cfg_.buffers.large.value) +
                         "); router buffers are sized when the dataplane starts: edit its configuration file");
    bool changed = false;
    const RouteTableBuilder before = *builder_;  // an import that cannot be applied changes nothing
    for (const config::RouteConfig& r : in.routes) {
      const std::string what = to_string(r.net.value) + " via " + to_string(r.gateway.value);
      if (del) {
        if (builder_->remove(r.net.value, r.gateway.value) > 0) {
          done.push_back("route " + what + " deleted");
          changed = true;
        } else {
          errors.push_back({{"route", what}, {"errno", -ENOENT}, {"descr", "no such route"}});
        }
        continue;
      }
      const std::uint32_t hops =
          r.hop.value == config::kHopUndefined ? kHopsUndefined : static_cast<std::uint32_t>(r.hop.value);
      auto added = builder_->add({r.net.value, r.gateway.value, hops, r.priority.value, route_sensitivity(r)});
      if (added) {
        done.push_back("route " + what + " added");
        changed = true;
      } else {
        errors.push_back({{"route", what}, {"errno", -errno_of(added.error())}, {"descr", std::string(describe(added.error()))}});
      }
    }
    if (changed) {
      try {
        routes_changed();
      } catch (const ApiError& e) {
        *builder_ = before;
        log("error", "import of " + name + " not applied: " + e.descr);
        throw;
      }
      // A count, not the list: an import may carry thousands of routes.
      log("info", "import of " + name + ": " + std::to_string(done.size()) + " route(s) " +
                      (del ? "deleted" : "added") + ", " + std::to_string(errors.size()) + " refused");
    }
  }
  if (in.routing.enable.given() && !del) {
    const Json r = dataplane(in.routing.enable.value ? "routing 1" : "routing 0");
    if (r.contains("routing")) done.push_back("routing " + r["routing"].get<std::string>());
  }
  if (in.global.health_sensitivity.given() && !del) {
    std::lock_guard lock(mu_);
    params_.sensitivity = in.global.health_sensitivity.value;
    if (ctl_) ctl_->health().set_params(params_);
    done.push_back("health_sensitivity " + std::to_string(params_.sensitivity));
  }
  if (in.global.transaction_timeout.given() && in.global.transaction_timeout.value != cfg_.global.transaction_timeout.value)
    warnings.push_back(config::to_string(in.global.transaction_timeout.source) + ": transaction_timeout " +
                       std::to_string(in.global.transaction_timeout.value) +
                       " is not applied at run time: the dataplane reads it when it starts; edit its configuration "
                       "file and restart it");
  if (in.global.discovery.given() && in.global.discovery.value != cfg_.global.discovery.value)
    warnings.push_back(config::to_string(in.global.discovery.source) + ": discovery " +
                       (in.global.discovery.value ? "1" : "0") +
                       " is not applied at run time: the dataplane's ping answers say what its configuration "
                       "file says; edit it and restart the dataplane");
  if (in.global.drop_asym_route.given() && !del) {
    const bool on = in.global.drop_asym_route.value;
    std::lock_guard asym_lock(asym_mu_);  // sent and recorded as one
    dataplane(on ? "drop_asym_route 1" : "drop_asym_route 0");
    {
      std::lock_guard lock(mu_);
      cfg_.global.drop_asym_route.value = on;
      runtime_asym_ = on;
    }
    done.push_back(std::string("drop_asym_route ") + (on ? "1" : "0"));
  }
  return {{"import", {{"done", done}, {"errors", errors}, {"warnings", warnings}}}};
}

}  // namespace lnetr::control

namespace lnetr::control {

// ---- ping -------------------------------------------------------------------------

// An LNet ping of a NID, sent by the dataplane worker that owns the peer (a
// NID on one of the router's nets) or the gateway it is routed through
// (lnetctl ping's output shape, plus the RTT).
Json Service::ping(const Json& args) {
  only(args, {"nid", "timeout"});
  const Nid nid = required(opt_nid(args, "nid"), "nid");
  const auto timeout = std::chrono::seconds(opt_int(args, "timeout", 1, 300).value_or(1));
  const bool local =
      std::any_of(cfg_.nets.begin(), cfg_.nets.end(), [&](const auto& n) { return n.net.value == nid.net(); });
  std::size_t k = 0;
  std::uint64_t seq = 0, incarnation = 0;
  Clock::time_point asked;
  {
    std::lock_guard lock(mu_);
    if (!ctl_) throw ApiError{EAGAIN, "not attached to a dataplane yet"};
    // A remote NID goes through the gateway forwarding's own selection
    // picks (alive, then priority, then hops; credits are the dataplane's).
    std::optional<Nid> via;
    if (!local) {
      const RouteTable table = builder_->build();
      RouteCursor cursor(table.view());
      auto r = table.view().select(nid.net(), cursor, [](const Route&) { return true; },
                                   [](const Route&) { return 0; });
      if (!r)
        throw ApiError{EHOSTUNREACH, "failed to ping " + to_string(nid) + ": no alive route to " + to_string(nid.net())};
      via = (*r)->gateway;
    }
    const auto now = Clock::now();
    while (k < ping_busy_.size() && (ping_busy_[k] || now < ping_reuse_[k])) ++k;
    if (k == ping_busy_.size()) throw ApiError{EBUSY, "too many pings in progress; try again"};
    ping_busy_[k] = true;
    const shm::Region& region = ctl_->region();
    incarnation = region.header().incarnation;
    shm::GatewayShm& g = region.gateway(shm::kMaxGateways + static_cast<std::uint32_t>(k));
    g.nid = nid;
    g.via = via.value_or(Nid{});
    g.owner = placement_.of(via.value_or(nid), region.header().n_workers);
    g.assigned.store(1);
    asked = Clock::now();
    seq = g.request.load() + 1;
    g.request.store(seq);
    region.worker(g.owner).ping_requests.fetch_add(1);
  }
  const auto deadline = Clock::now() + timeout;
  std::optional<shm::PingResult> result;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (!ctl_ || ctl_->region().header().incarnation != incarnation || stopping_.load())
        break;  // the dataplane went away, or we are stopping
      const shm::PingResult r =
          shm::load_result(ctl_->region().gateway(shm::kMaxGateways + static_cast<std::uint32_t>(k)));
      if (r.seq == seq && r.outcome != shm::PingOutcome::none) result = r;
      if (result || Clock::now() >= deadline) {
        if (!result) ping_reuse_[k] = Clock::now() + 1s;  // a late answer must find it unused
        break;
      }
    }
    std::this_thread::sleep_for(2ms);
  }
  {
    std::lock_guard lock(mu_);
    ping_busy_[k] = false;
  }
  const std::string failed = "failed to ping " + to_string(nid);
  if (!result) throw ApiError{ETIMEDOUT, failed + ": no answer within " + std::to_string(timeout.count()) + " s"};
  if (result->outcome == shm::PingOutcome::send_failed) throw ApiError{EHOSTUNREACH, failed + ": no connection"};
  if (result->outcome == shm::PingOutcome::bad_reply)
    throw ApiError{EPROTO, failed + ": the answer was not a valid ping info"};
  Json nis = Json::array();
  for (std::uint32_t i = 0; i < result->n_nis && i < shm::kPingNis; ++i)
    nis.push_back({{"nid", to_string(result->nis[i].nid)}, {"status", result->nis[i].status == kNiStatusUp ? "up" : "down"}});
  const Nid primary = result->n_nis > 0 ? result->nis[0].nid : nid;
  // Both processes read the same monotonic clock.
  const std::int64_t sent_ns =
      result->sent_ns != 0 ? result->sent_ns
                           : std::chrono::duration_cast<std::chrono::nanoseconds>(asked.time_since_epoch()).count();
  return {{"ping",
           Json::array({{{"primary nid", to_string(primary)},
                         {"Multi-Rail", (result->features & ping_feature::multi_rail) != 0},
                         {"peer_ni", nis},
                         {"rtt_us", static_cast<double>(result->done_ns - sent_ns) / 1e3}}})}};
}

// ---- metrics ----------------------------------------------------------------------

void Service::collect(Families& f) {
  using L = Families::Labels;
  {
    std::lock_guard lock(mu_);
    f.gauge("lnetr_up",
            "1 while lnetr-control is attached to a running dataplane; 0 means routes and health are not being managed "
            "(the dataplane, if running, forwards with its last route table)",
            {}, ctl_ ? 1 : 0);
    if (builder_)
      for (const Route& r : builder_->routes()) {
        const L l{{"net", to_string(r.net)}, {"gateway", to_string(r.gateway)}};
        f.gauge("lnetr_route_up",
                "1 if the route is used; 0 means its gateway is dead, not routing, or cannot reach the net (see "
                "lnetr-control's log for the reason)",
                l, r.alive ? 1 : 0);
        f.gauge("lnetr_route_priority", "The route's priority: among alive routes to a net the lowest is used", l,
                r.priority);
        f.gauge("lnetr_route_hops", "The route's hop count (-1: undefined, ranked as 1)", l, display_hop(r));
      }
    if (ctl_) {
      const shm::Region& region = ctl_->region();
      f.gauge("lnetr_route_table_version",
              "Version of the route table published to the dataplane; it increases on every route change", {},
              static_cast<double>(shm::published_version(region.header().published.load())));
      for (const Gateway& g : ctl_->health().gateways()) {
        const L l{{"gateway", to_string(g.nid)}};
        f.gauge("lnetr_gateway_up", "1 if the gateway answered its last check; 0 means its routes are not used", l,
                g.alive ? 1 : 0);
        f.gauge("lnetr_gateway_health",
                "Gateway health 0..1000: each failed check costs health_sensitivity, an answer restores 1000; below "
                "1000 means recent failures",
                l, g.health);
        f.gauge("lnetr_gateway_ping_rtt_seconds",
                "Round-trip time of the gateway's last answered ping through the dataplane; growth means a loaded "
                "gateway or network",
                l, static_cast<double>(g.last_rtt.count()) / 1e9);
        f.counter("lnetr_gateway_pings_total", "Checks (LNet pings) sent to the gateway", l, static_cast<double>(g.pings));
        f.counter("lnetr_gateway_failures_total",
                  "Failed checks of the gateway (timeouts, no connection, bad replies, connections lost); a rising "
                  "value means a flapping or dead gateway",
                  l, static_cast<double>(g.failures));
      }
      const std::uint32_t n = region.header().n_workers;
      const std::uint64_t inc = region.header().incarnation;
      if (inc != last_cycles_incarnation_ || last_cycles_.size() != n) {
        last_cycles_.assign(n, {0, 0});
        last_cycles_incarnation_ = inc;
      }
      f.gauge("lnetr_worker_tsc_hz", "Rate of the time-stamp counter that lnetr_worker_cycles_total counts", {},
              static_cast<double>(region.header().tsc_hz));
      std::array<double, kDropReasonCount> drops{};
      double drop_bytes = 0;
      for (std::uint32_t w = 0; w < n; ++w) {
        const dp::WorkerCounters& c = region.counters(w);
        const L l{{"cpt", std::to_string(w)}};
        f.counter("lnetr_forwarded_messages_total",
                  "Messages this CPT's worker forwarded (counted when sent); a flat line under load means traffic "
                  "is not getting through",
                  l, static_cast<double>(c.route_count.get()));
        f.counter("lnetr_forwarded_bytes_total", "Payload bytes of the forwarded messages", l,
                  static_cast<double>(c.route_length.get()));
        f.counter("lnetr_local_received_messages_total",
                  "Messages addressed to the router itself (pings, pushes, replies to its gateway checks)", l,
                  static_cast<double>(c.recv_count.get()));
        f.counter("lnetr_local_sent_messages_total", "Messages the router sent itself (ping replies, ACKs, gateway checks)",
                  l, static_cast<double>(c.send_count.get()));
        f.counter("lnetr_rerouted_messages_total",
                  "Forwarded messages sent through another gateway after theirs failed; non-zero means a gateway "
                  "failed under traffic",
                  l, static_cast<double>(c.reroutes.get()));
        f.counter("lnetr_ring_waits_total",
                  "Messages that waited for room on a full ring to another CPT's worker; rings are sized for every "
                  "message, so non-zero is a fault to report (nothing is lost: they go when there is room)",
                  l, static_cast<double>(c.ring_waits.get()));
        f.counter("lnetr_worker_log_lines_suppressed_total",
                  "Log lines of the worker dropped by its rate limit (a burst of 20, then 5 a second) or a full "
                  "queue; the journal says how many each time",
                  l, static_cast<double>(c.log_suppressed.get()));
        for (std::size_t t = 0; t < dp::kPeerTableCount; ++t) {
          const L lt{{"cpt", std::to_string(w)}, {"table", dp::kPeerTableNames[t]}};
          const dp::WorkerCounters::Table& tc = c.tables[t];
          f.gauge("lnetr_peer_table_peers",
                  "Peers this CPT's worker keeps in a peer table (lnet: LNet's peer NIs; socklnd, o2iblnd: the "
                  "LNDs' peers), at most dataplane.limits.peers each",
                  lt, static_cast<double>(tc.peers.get()));
          f.counter("lnetr_peer_table_refused_total",
                    "New peers refused because the table held dataplane.limits.peers (their messages dropped as "
                    "peer_table_full, their connections refused); non-zero means more peers than the limit, or "
                    "made-up NIDs",
                    lt, static_cast<double>(tc.refused.get()));
          f.counter("lnetr_peer_table_freed_total", "Peers freed after dataplane.limits.peer_idle with nothing in flight",
                    lt, static_cast<double>(tc.freed.get()));
        }
        f.counter("lnetr_worker_loops_total", "Iterations of the worker's poll loop", l,
                  static_cast<double>(c.loops.get()));
        f.counter("lnetr_worker_cycles_total",
                  "TSC cycles the worker's poll loop has run, sleeping included (lnetr_worker_tsc_hz per second)", l,
                  static_cast<double>(c.cycles.get()));
        f.counter("lnetr_worker_busy_cycles_total",
                  "TSC cycles of the worker's loop iterations that found work; over lnetr_forwarded_messages_total, "
                  "what a forwarded message costs the core",
                  l, static_cast<double>(c.busy_cycles.get()));
        f.counter("lnetr_worker_cpu_seconds_total",
                  "Seconds the worker's thread ran on its core; below the lnetr_worker_cycles_total seconds when "
                  "the core is shared with other threads (then busy cycles include the time they took it)",
                  l, static_cast<double>(c.cpu_ns.get()) / 1e9);
        f.counter("lnetr_bytes_copied_total",
                  "Bytes the worker copied: on DPDK ports received payload into socklnd's buffers, sent bytes into "
                  "TCP send queues and frames into mbufs; on kernel sockets every byte read, and every byte sent "
                  "except by zero copy",
                  l, static_cast<double>(c.bytes_copied.get()));
        f.counter("lnetr_bytes_referenced_total",
                  "Bytes the worker sent from router buffers without copying them: on DPDK ports frames chained "
                  "from the buffer, on kernel sockets MSG_ZEROCOPY sends the kernel completed uncopied",
                  l, static_cast<double>(c.bytes_referenced.get()));
        f.counter("lnetr_rx_bytes_referenced_total",
                  "Payload bytes the worker received on DPDK ports and left in the frames they arrived in, not "
                  "copied (zero copy: sent on from there)",
                  l, static_cast<double>(c.rx_bytes_referenced.get()));
        const std::uint64_t cycles = c.cycles.get(), busy = c.busy_cycles.get();
        const auto [last_cycles, last_busy] = last_cycles_[w];
        const double ratio =
            cycles > last_cycles ? static_cast<double>(busy - last_busy) / static_cast<double>(cycles - last_cycles) : 0.0;
        last_cycles_[w] = {cycles, busy};
        f.gauge("lnetr_worker_busy_ratio",
                "Share of the worker's cycles spent in loop iterations that found work since the previous scrape; "
                "near 1 means the CPT's core is saturated",
                l, ratio);
        for (std::size_t r = 0; r < kDropReasonCount; ++r) drops[r] += static_cast<double>(c.drops[r].get());
        drop_bytes += static_cast<double>(c.drop_length.get());
      }
      for (std::size_t r = 0; r < kDropReasonCount; ++r)
        f.counter("lnetr_dropped_messages_total",
                  "Messages the router dropped, by reason; any increase is lost traffic: the reason says why "
                  "(no_route, route_down: routes; peer_down, send_failed: a next hop failed; protocol: bad input)",
                  {{"reason", std::string(name(static_cast<DropReason>(r)))}}, drops[r]);
      f.counter("lnetr_dropped_bytes_total", "Payload bytes of the dropped messages", {}, drop_bytes);
    }
  }

  // What only the dataplane knows, from its status document.
  Json st;
  try {
    st = dataplane("status");
  } catch (const ApiError&) {
    f.gauge("lnetr_dataplane_up", "1 if the dataplane answers on its control socket; 0 means it is down or hung", {}, 0);
    return;
  }
  f.gauge("lnetr_dataplane_up", "1 if the dataplane answers on its control socket; 0 means it is down or hung", {}, 1);
  try {
    f.gauge("lnetr_routing_enabled",
            "1 while the router forwards and advertises it; 0 while routing is disabled, starting or draining", {},
            st["routing"]["state"] == "enabled" ? 1 : 0);
    for (const Json& ni : st["nis"]) {
      const std::string nid = ni["nid"];
      const L l{{"nid", nid}, {"net", nid.substr(nid.find('@') + 1)}};
      f.gauge("lnetr_ni_up",
              "1 if the NI is UP in the router's ping info; 0 means its link is down or no node of its net pinged it "
              "within alive_router_check_interval + router_ping_timeout, so clients avoid routes through it",
              l, ni["advertised"] == "up" ? 1 : 0);
      f.gauge("lnetr_ni_link_up", "1 if the NI's interface is up; 0 is a link failure", l, ni["link"] == "up" ? 1 : 0);
    }
    for (const Json& cpt : st["buffers"]) {
      for (const char* pool : {"tiny", "small", "large"}) {
        const L l{{"cpt", std::to_string(cpt["cpt"].get<int>())}, {"pool", pool}};
        const Json& p = cpt[pool];
        f.gauge("lnetr_router_buffers", "Router buffers of the pool on this CPT (configured)", l,
                p["nbuffers"].get<double>());
        f.gauge("lnetr_router_buffers_available",
                "Router buffer credits available now; negative means messages wait for a buffer (back-pressure)", l,
                p["credits"].get<double>());
        f.gauge("lnetr_router_buffers_min",
                "Lowest router buffer credits seen; at or below 0 the pool ran out: consider more buffers", l,
                p["mincredits"].get<double>());
      }
    }
    // Peers: per net always; per peer only for the busiest metrics_peers
    // (a router with tens of thousands of clients must not export a series
    // set per client).
    struct NetPeers {
      double peers = 0, down = 0, tx_min = 0, rtr_min = 0;
      double sent = 0, received = 0, sent_bytes = 0, received_bytes = 0;
      bool any = false;
    };
    std::map<std::string, NetPeers> per_net;
    std::vector<const Json*> ranked;
    const Json peers = merged_peers(st, placement_);  // one entry per peer
    for (const Json& p : peers) {
      const std::string nid = p["nid"].get<std::string>();
      NetPeers& n = per_net[nid.substr(nid.find('@') + 1)];
      n.peers += 1;
      n.down += p["state"] == "up" ? 0 : 1;
      n.sent += p["send_count"].get<double>();
      n.received += p["recv_count"].get<double>();
      n.sent_bytes += p["send_bytes"].get<double>();
      n.received_bytes += p["recv_bytes"].get<double>();
      n.tx_min = n.any ? std::min(n.tx_min, p["min_tx_credits"].get<double>()) : p["min_tx_credits"].get<double>();
      n.rtr_min = n.any ? std::min(n.rtr_min, p["min_rtr_credits"].get<double>()) : p["min_rtr_credits"].get<double>();
      n.any = true;
      ranked.push_back(&p);
    }
    for (const auto& [net, n] : per_net) {
      const L l{{"net", net}};
      f.gauge("lnetr_net_peers", "Peers the router knows on the net (each counted once, whichever CPTs see it)", l,
              n.peers);
      f.gauge("lnetr_net_peers_down", "Of those, peers considered down (all their connections failed)", l, n.down);
      f.counter("lnetr_net_sent_messages_total",
                "Messages sent to the net's peers (forwarded ones, and the router's own replies and pings)", l, n.sent);
      f.counter("lnetr_net_sent_bytes_total", "Payload bytes of those messages", l, n.sent_bytes);
      f.counter("lnetr_net_received_messages_total",
                "Messages received from the net's peers (to forward, or for the router itself)", l, n.received);
      f.counter("lnetr_net_received_bytes_total", "Payload bytes of those messages", l, n.received_bytes);
      f.gauge("lnetr_net_peer_tx_credits_min",
              "Lowest transmit credits any peer of the net has reached; at or below 0 a peer was a bottleneck", l,
              n.tx_min);
      f.gauge("lnetr_net_peer_router_credits_min",
              "Lowest router credits any peer of the net has reached; at or below 0 a peer's messages waited", l,
              n.rtr_min);
    }
    auto traffic = [](const Json* p) {
      return (*p)["send_count"].get<std::uint64_t>() + (*p)["recv_count"].get<std::uint64_t>();
    };
    const std::size_t keep = std::min<std::size_t>(ranked.size(), metrics_peers_);
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(keep), ranked.end(),
                      [&](const Json* a, const Json* b) {
                        const auto ta = traffic(a), tb = traffic(b);
                        return ta != tb ? ta > tb : (*a)["nid"].get<std::string>() < (*b)["nid"].get<std::string>();
                      });
    ranked.resize(keep);
    std::set<std::string> exported;
    for (const Json* pp : ranked) {
      const Json& p = *pp;
      exported.insert(p["nid"].get<std::string>());
      const L l{{"peer", p["nid"].get<std::string>()}, {"cpt", std::to_string(p["cpt"].get<int>())}};
      f.gauge("lnetr_peer_up", "1 while the peer is considered alive; 0 after all connections to it failed", l,
              p["state"] == "up" ? 1 : 0);
      f.gauge("lnetr_peer_tx_credits",
              "Transmit credits to the peer available now; negative means messages queue for it", l,
              p["available_tx_credits"].get<double>());
      f.gauge("lnetr_peer_tx_credits_min", "Lowest transmit credits seen; at or below 0 the peer was a bottleneck", l,
              p["min_tx_credits"].get<double>());
      f.gauge("lnetr_peer_router_credits",
              "Router credits of the peer available now (its messages the router may buffer); negative means its "
              "messages wait (back-pressure on it)",
              l, p["available_rtr_credits"].get<double>());
      f.gauge("lnetr_peer_router_credits_min", "Lowest router credits seen for the peer", l,
              p["min_rtr_credits"].get<double>());
    }
    // DPDK ports (lnetr's own TCP/IP): frames, drops, TCP repair work.
    if (st.contains("ports")) {
      for (const Json& p : st["ports"]) {
        const L l{{"port", p["name"].get<std::string>()}};
        f.gauge("lnetr_port_link_up", "1 if the DPDK port's link is up", l, p["link"] == "up" ? 1 : 0);
        f.counter("lnetr_port_rx_frames_total", "Frames received on the DPDK port", l, p["rx_frames"].get<double>());
        f.counter("lnetr_port_tx_frames_total", "Frames sent on the DPDK port", l, p["tx_frames"].get<double>());
        f.counter("lnetr_port_rx_bytes_total", "Bytes received on the DPDK port", l, p["rx_bytes"].get<double>());
        f.counter("lnetr_port_tx_bytes_total", "Bytes sent on the DPDK port", l, p["tx_bytes"].get<double>());
        f.counter("lnetr_port_tx_dropped_total",
                  "Frames the port could not send (no mbuf, or its backlog of frames the device refused was full); "
                  "TCP retransmits them",
                  l, p["tx_dropped"].get<double>());
        f.gauge("lnetr_port_tx_backlog", "Frames the device refused, waiting to be sent at the next poll", l,
                p.value("tx_backlog", 0.0));
        f.counter("lnetr_port_rx_malformed_total", "Received frames refused by lnetr's decoders", l,
                  p["dropped_malformed"].get<double>());
        f.gauge("lnetr_port_tcp_connections", "TCP connections of lnetr's stack on the port", l,
                p["tcp_connections"].get<double>());
        f.gauge("lnetr_port_tcp_half_open", "TCP connections of lnetr's stack on the port still in SYN-RECEIVED", l,
                p.value("tcp_half_open", 0.0));
        for (const char* what : {"sent", "accepted", "refused"}) {
          L lw = l;
          lw.emplace_back("result", what);
          f.counter("lnetr_port_tcp_syncookies_total",
                    "SYN cookies: sent (SYNs answered without keeping state, the port's half-open connections at "
                    "their bound), accepted (connections made from one returned), refused (a wrong or expired one: "
                    "reset)",
                    lw, p.value(std::string("syncookies_") + what, 0.0));
        }
        f.counter("lnetr_port_tcp_retransmits_total",
                  "TCP segments lnetr's stack sent again on the port; rising means loss on the link", l,
                  p["tcp"]["retransmits"].get<double>());
        f.counter("lnetr_port_tcp_timeouts_total",
                  "Retransmission timeouts on the port's connections; each stalls a connection for an RTO", l,
                  p["tcp"]["timeouts"].get<double>());
        f.counter("lnetr_port_tcp_resets_sent_total", "TCP resets lnetr's stack sent on the port", l,
                  p["resets_out"].get<double>());
        f.counter("lnetr_port_tso_frames_total",
                  "Frames sent for the device to cut into TCP segments (segmentation offload)", l,
                  p.value("tso_frames", 0.0));
        f.counter("lnetr_port_tso_segments_total", "TCP segments the device cut those frames into", l,
                  p.value("tso_segments", 0.0));
        f.counter("lnetr_port_rx_steered_total",
                  "Frames a queue received for a peer another queue owns, passed to that queue's worker (the "
                  "device's RSS does not place them, or it has none)",
                  l, p.value("rx_steered", 0.0));
        f.counter("lnetr_port_rx_steer_dropped_total",
                  "Frames dropped because the owning queue's steering ring was full (its worker is overloaded)", l,
                  p.value("rx_steer_dropped", 0.0));
        for (const Json& q : p.value("per_queue", Json::array())) {
          const L ql{{"port", p["name"].get<std::string>()}, {"queue", std::to_string(q["queue"].get<int>())}};
          f.counter("lnetr_port_queue_rx_frames_total", "Frames the device delivered to the queue", ql,
                    q["rx_frames"].get<double>());
          f.counter("lnetr_port_queue_tx_frames_total", "Frames sent on the queue", ql, q["tx_frames"].get<double>());
        }
      }
    }
    const Json& sock = st["socklnd"];
    for (auto it = sock["closed"].begin(); it != sock["closed"].end(); ++it)
      f.counter("lnetr_socklnd_connections_closed_total",
                "socklnd connections closed, by reason; protocol or timeout reasons point at a bad or stuck peer",
                {{"reason", it.key()}}, it.value().get<double>());
    for (auto it = sock["refused"].begin(); it != sock["refused"].end(); ++it)
      f.counter("lnetr_socklnd_connections_refused_total",
                "Incoming connections the acceptor refused, by reason (e.g. bad magic, insecure port)",
                {{"reason", it.key()}}, it.value().get<double>());
    // Zero-copy sends on kernel sockets (MSG_ZEROCOPY).
    f.counter("lnetr_socklnd_zero_copy_sends_total",
              "sendmsg calls on kernel sockets that sent payload with MSG_ZEROCOPY", {},
              sock["zc_sends"].get<double>());
    f.counter("lnetr_socklnd_zero_copy_copied_total",
              "Of those, calls the kernel reported it copied anyway (a route to a local socket, a device without "
              "scatter-gather, a packet capture)",
              {}, sock["zc_copied"].get<double>());
    f.counter("lnetr_socklnd_zero_copy_fallbacks_total",
              "Times a kernel-socket connection went back to copying because the kernel copied anyway or refused "
              "(ENOBUFS); it tries zero copy again after 64 MiB",
              {}, sock["zc_fallbacks"].get<double>());
    f.gauge("lnetr_socklnd_zero_copy_draining",
            "Kernel-socket connections closed while the kernel still held zero-copy sends, kept until it lets go "
            "of them (their buffers and credits held meanwhile); lasting non-zero is a fault to report",
            {}, sock["zc_draining"].get<double>());
    if (st.contains("o2iblnd")) o2iblnd_metrics(f, st["o2iblnd"], exported);
  } catch (const std::exception& e) {
    log("warning", std::string("metrics: unexpected dataplane status document: ") + e.what());
  }
}

// o2iblnd (verbs NIs): connections, rejects and closes by reason, messages
// by type, RDMA and copied bytes, completions, and every connection's
// credits.
void Service::o2iblnd_metrics(Families& f, const Json& ib, const std::set<std::string>& peers) const {
  using L = Families::Labels;
  f.counter("lnetr_o2iblnd_connections_total",
            "o2iblnd connections established, by who connected (active: the router connected)",
            L{{"side", "active"}}, ib["conns_connected"].get<double>());
  f.counter("lnetr_o2iblnd_connections_total",
            "o2iblnd connections established, by who connected (active: the router connected)",
            L{{"side", "passive"}}, ib["conns_accepted"].get<double>());
  for (auto it = ib["connect_failed"].begin(); it != ib["connect_failed"].end(); ++it)
    f.counter("lnetr_o2iblnd_connect_failures_total",
              "Attempts to connect to an o2ib peer that failed, by reason; unreachable or no_listener means the "
              "peer's address or its o2iblnd is down, rejected: see lnetr_o2iblnd_rejects_received_total",
              L{{"reason", it.key()}}, it.value().get<double>());
  for (auto it = ib["closed"].begin(); it != ib["closed"].end(); ++it)
    f.counter("lnetr_o2iblnd_connections_closed_total",
              "o2iblnd connections closed, by reason; bad_message, bad_credits, stale_message or "
              "unmatched_completion point at a misbehaving peer, timeout at a stuck one, tx_failed at the fabric",
              L{{"reason", it.key()}}, it.value().get<double>());
  for (auto it = ib["rejects_sent"].begin(); it != ib["rejects_sent"].end(); ++it)
    f.counter("lnetr_o2iblnd_rejects_sent_total",
              "Connection requests the router refused, by o2iblnd reason (CONN_RACE and CONN_STALE are normal "
              "after restarts and races; FATAL and MSG_QUEUE_SIZE mean a peer's settings do not match)",
              L{{"reason", it.key()}}, it.value().get<double>());
  for (auto it = ib["rejects_received"].begin(); it != ib["rejects_received"].end(); ++it)
    f.counter("lnetr_o2iblnd_rejects_received_total",
              "The router's connection requests peers refused, by o2iblnd reason (the router retries for "
              "CONN_RACE, CONN_STALE, MSG_QUEUE_SIZE, RDMA_FRAGS and version fallback, not for the others)",
              L{{"reason", it.key()}}, it.value().get<double>());
  for (auto it = ib["tx_msgs"].begin(); it != ib["tx_msgs"].end(); ++it)
    f.counter("lnetr_o2iblnd_tx_messages_total", "o2iblnd messages sent, by type (NOOP: credit returns and keepalives)",
              L{{"type", it.key()}}, it.value().get<double>());
  for (auto it = ib["rx_msgs"].begin(); it != ib["rx_msgs"].end(); ++it)
    f.counter("lnetr_o2iblnd_rx_messages_total", "o2iblnd messages received, by type", L{{"type", it.key()}},
              it.value().get<double>());
  f.counter("lnetr_o2iblnd_rdma_bytes_total",
            "Payload bytes moved by RDMA write: out, the router wrote into peers' sinks; in, peers wrote into "
            "router buffers",
            L{{"direction", "out"}}, ib["rdma_bytes_written"].get<double>());
  f.counter("lnetr_o2iblnd_rdma_bytes_total",
            "Payload bytes moved by RDMA write: out, the router wrote into peers' sinks; in, peers wrote into "
            "router buffers",
            L{{"direction", "in"}}, ib["rdma_bytes_received"].get<double>());
  f.counter("lnetr_o2iblnd_bytes_copied_total",
            "Payload bytes o2iblnd copied: IMMEDIATE payloads (up to 3,976 bytes each, as Linux copies them) and, "
            "in lnetr_o2iblnd_bytes_bounced_total, memory that was not registered",
            {}, ib["bytes_copied"].get<double>());
  f.counter("lnetr_o2iblnd_bytes_bounced_total",
            "Payload bytes copied through o2iblnd's own buffers because their memory was not registered with the "
            "device; non-zero on the router means a zero-copy path failed",
            {}, ib["bytes_bounced"].get<double>());
  f.counter("lnetr_o2iblnd_sink_windows_total",
            "Memory windows bound to one router buffer for one transfer (remote_keys: transfer): the keys peers "
            "were given",
            {}, ib.value("sink_windows", 0.0));
  f.counter("lnetr_o2iblnd_sink_windows_refused_total",
            "Transfers refused (PUT_NAK, or the GET failed) because the connection or the worker had every "
            "memory window in use",
            {}, ib.value("sink_windows_refused", 0.0));
  f.counter("lnetr_o2iblnd_completions_total", "Work completions the workers polled from their completion queues", {},
            ib["completions"].get<double>());
  f.counter("lnetr_o2iblnd_post_failures_total",
            "Work requests the device refused; non-zero closes connections: check the device", {},
            ib["post_failures"].get<double>());
  f.counter("lnetr_o2iblnd_tx_timeouts_total",
            "Messages failed after waiting longer than the connect timeout for a connection to their peer", {},
            ib["tx_timeouts"].get<double>());
  f.counter("lnetr_o2iblnd_connections_refused_total",
            "Connection requests rejected, or connects not made, because a worker held "
            "dataplane.limits.connections",
            {}, ib.value("conns_refused", 0.0));
  f.counter("lnetr_o2iblnd_connreqs_rate_limited_total",
            "Connection requests rejected because their address sent more than dataplane.limits.connect_rate a "
            "second",
            {}, ib.value("connreqs_rate_limited", 0.0));
  if (peers.empty()) return;
  std::map<std::string, int> nth;  // a peer's connections (conns_per_peer), numbered
  for (const Json& c : o2ib_connections(peers)) {
    const std::string peer = c["peer"].get<std::string>();
    if (!peers.contains(peer)) continue;  // per-peer series for the exported peers only
    const L l{{"peer", peer}, {"cpt", std::to_string(c["cpt"].get<int>())}, {"conn", std::to_string(nth[peer]++)}};
    f.gauge("lnetr_o2iblnd_connection_credits",
            "Credits of the o2iblnd connection to the peer (receive buffers it has posted for us); 0 with "
            "messages queued means the peer is slow to return them",
            l, c["credits"].get<double>());
    f.gauge("lnetr_o2iblnd_connection_queued", "Messages waiting on the connection for credits or send slots", l,
            c["queued"].get<double>());
    f.gauge("lnetr_o2iblnd_connection_rx_held",
            "The peer's messages the router holds without a router buffer (their credits are withheld: "
            "back-pressure on the peer)",
            l, c["rx_held"].get<double>());
  }
}

}  // namespace lnetr::control
