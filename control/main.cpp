// lnetr-control: the control process.  It loads the configuration file the
// dataplane loads, attaches to the dataplane's shared memory
// (dataplane.shm_name), owns the route table and keeps gateway health
// (control/health.hpp): it asks the dataplane to ping every gateway,
// judges the answers, and publishes a new route snapshot whenever a route
// goes up or down.  It follows the dataplane across restarts (a new region
// incarnation gets the table again); the dataplane keeps forwarding with the
// last snapshot whenever lnetr-control is absent.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "control/health.hpp"
#include "dataplane/shm/region.hpp"
#include "router/config.hpp"
#include "router/forward.hpp"
#include "router/route_table.hpp"

namespace lnetr::control {
namespace {

using namespace std::chrono_literals;

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

void say(const char* level, const std::string& text) {
  std::fprintf(stderr, "lnetr-control: %s: %s\n", level, text.c_str());
}

std::string ms_text(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", static_cast<double>(d.count()) / 1e6);
  return buf;
}

std::string route_name(const Route& r) { return to_string(r.net) + " via " + to_string(r.gateway); }

HealthParams health_params(const config::Config& cfg) {
  HealthParams p;
  p.check_interval = std::chrono::seconds(cfg.dataplane.alive_router_check_interval.value);
  p.ping_timeout = std::chrono::seconds(cfg.dataplane.router_ping_timeout.value);
  p.sensitivity = cfg.global.health_sensitivity.value;
  return p;
}

// The route table and gateway health of one dataplane incarnation.
class Controller {
 public:
  Controller(const config::Config& cfg, shm::Region region)
      : cfg_(cfg), region_(std::move(region)), health_(health_params(cfg)) {}

  // Build the table from the configuration, give its gateways board slots,
  // publish it.  False on a fatal error (said).
  bool start() {
    std::vector<Net> local;
    for (const config::NetConfig& n : cfg_.nets) local.push_back(n.net.value);
    auto b = RouteTableBuilder::create(local, static_cast<std::uint64_t>(::getpid()));
    if (!b) {
      say("error", "route table: " + std::string(describe(b.error())));
      return false;
    }
    builder_.emplace(std::move(*b));
    for (const config::RouteConfig& r : cfg_.routes) {
      const std::uint32_t hops =
          r.hop.value == config::kHopUndefined ? kHopsUndefined : static_cast<std::uint32_t>(r.hop.value);
      auto added = builder_->add({r.net.value, r.gateway.value, hops, r.priority.value});
      if (!added)
        say("warning", config::to_string(r.source) + ": route to " + to_string(r.net.value) + " via " +
                           to_string(r.gateway.value) + " ignored: " + std::string(describe(added.error())));
    }
    // Slots a previous lnetr-control gave out stay with their gateways.
    for (std::uint32_t i = 0; i < region_.gateways().size(); ++i) {
      shm::GatewayShm& g = region_.gateway(i);
      if (g.assigned.load() != 0) down_seen_[i] = g.down_events.load();
    }
    routes_changed(Clock::now());
    return publish();
  }

  // One round: results, failures, timeouts, due pings, route states.
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
    return apply_route_states() ? publish() : true;
  }

 private:
  // The gateways of the table changed: watch exactly those, each with a
  // board slot (written before any snapshot names it).
  void routes_changed(Clock::time_point now) {
    std::vector<Nid> nids;
    for (const Route& r : builder_->routes())
      if (std::find(nids.begin(), nids.end(), r.gateway) == nids.end()) nids.push_back(r.gateway);
    health_.set_gateways(nids, now);
    slot_.clear();
    for (const Nid& nid : nids) slot_.push_back(slot_for(nid));
  }

  std::uint32_t slot_for(const Nid& nid) {
    auto board = region_.gateways();
    std::uint32_t free = static_cast<std::uint32_t>(board.size());
    for (std::uint32_t i = 0; i < board.size(); ++i) {
      const bool taken = board[i].assigned.load() != 0;
      if (taken && board[i].nid == nid) return i;
      if (!taken && free == board.size()) free = i;
    }
    if (free == board.size()) {
      // Slots are never reused within a dataplane incarnation.
      say("error", "no gateway slot left for " + to_string(nid) + " (at most " +
                       std::to_string(shm::kMaxGateways) + " gateways per dataplane run)");
      std::abort();
    }
    shm::GatewayShm& g = board[free];
    g.nid = nid;
    g.owner = cpt_of(nid, region_.header().n_workers);
    g.assigned.store(1);  // after nid and owner
    down_seen_[free] = g.down_events.load();
    return free;
  }

  void gateway_event(std::size_t i, bool changed) {
    if (!changed) return;
    const Gateway& g = health_.gateways()[i];
    if (g.alive)
      say("info", "gateway " + to_string(g.nid) + ": alive (" + std::string(describe(g.reason)) + ", in " +
                      ms_text(g.last_rtt) + ")");
    else
      say("info", "gateway " + to_string(g.nid) + ": dead (" + std::string(describe(g.reason)) + "), health " +
                      std::to_string(g.health));
  }

  // Route aliveness from gateway health; true if any route changed.
  bool apply_route_states() {
    bool changed = false;
    std::vector<Route> routes(builder_->routes().begin(), builder_->routes().end());
    for (const Route& r : routes) {
      const SingleHop sh = health_.single_hop(r);
      if (sh != SingleHop::unknown && sh != r.single_hop) {
        builder_->set_single_hop(r.net, r.gateway, sh);
        changed = true;
      }
      const RouteState st = health_.route_state(r);
      const bool alive = st == RouteState::up;
      if (alive == r.alive) continue;
      builder_->set_alive(r.net, r.gateway, alive);
      changed = true;
      say("info", "route " + route_name(r) + ": " + (alive ? std::string("up") : "down (" + std::string(describe(st)) + ")"));
    }
    return changed;
  }

  bool publish() {
    const std::uint64_t version = shm::published_version(region_.header().published.load()) + 1;
    builder_->set_version(version);
    const RouteTable t = builder_->build();
    shm::PublishResult res;
    while ((res = shm::publish(region_, t.view())) == shm::PublishResult::busy && !g_stop.load())
      std::this_thread::sleep_for(1ms);
    if (res == shm::PublishResult::too_big) {
      say("error", "the route table does not fit in a shared-memory slot");
      return false;
    }
    return true;
  }

  const config::Config& cfg_;
  shm::Region region_;
  std::optional<RouteTableBuilder> builder_;
  GatewayHealth health_;
  std::vector<std::uint32_t> slot_;  // per watched gateway: its board slot
  std::array<std::uint64_t, shm::kMaxGateways> down_seen_{};  // per slot: down_events handled

 public:
  const shm::Region& region() const noexcept { return region_; }
};

int run(const std::string& config_path) {
  auto loaded = config::load_config_file(config_path);
  if (!loaded) {
    for (const auto& e : loaded.error()) say("error", e.to_string());
    return 1;
  }
  for (const auto& w : loaded->warnings) say("warning", w.to_string());
  const config::Config& cfg = loaded->config;
  const std::string& shm_name = cfg.dataplane.shm_name.value;

  std::optional<Controller> ctl;
  std::uint64_t incarnation = 0;
  std::string last_err;
  auto next_probe = Clock::now();
  while (!g_stop.load()) {
    if (!ctl) {
      // (Re)attach: the dataplane may not be up yet, or may have restarted.
      std::string err;
      shm::Region r = shm::Region::attach(shm_name, err);
      if (!r) {
        if (err != last_err) say("info", "waiting for the dataplane: " + err);
        last_err = err;
        std::this_thread::sleep_for(200ms);
        continue;
      }
      last_err.clear();
      incarnation = r.header().incarnation;
      r.header().control_pid.store(static_cast<std::uint64_t>(::getpid()));
      ctl.emplace(cfg, std::move(r));
      if (!ctl->start()) return 1;
      say("info", "attached to " + shm_name + " (dataplane incarnation " + std::to_string(incarnation) +
                      "); published route table version " +
                      std::to_string(shm::published_version(ctl->region().header().published.load())) + " with " +
                      std::to_string(cfg.routes.size()) + " configured route(s)");
    }
    const auto now = Clock::now();
    if (!ctl->step(now)) return 1;
    if (now >= next_probe) {
      // A dataplane that restarted removed the name and made a new region.
      next_probe = now + 200ms;
      std::string err;
      shm::Region probe = shm::Region::attach(shm_name, err);
      if (probe && probe.header().incarnation != incarnation) {
        say("info", "the dataplane restarted: attaching to its new region");
        ctl.reset();
        continue;
      }
    }
    std::this_thread::sleep_for(20ms);
  }
  if (ctl) ctl->region().header().control_pid.store(0);
  say("info", "stopped");
  return 0;
}

}  // namespace
}  // namespace lnetr::control

int main(int argc, char** argv) {
  CLI::App app{"lnetr-control: the LNet router's control process"};
  std::string config;
  app.add_option("-c,--config", config, "configuration file (YAML), the one lnetr-dataplane loads")->required();
  CLI11_PARSE(app, argc, argv);
  std::signal(SIGINT, lnetr::control::on_signal);
  std::signal(SIGTERM, lnetr::control::on_signal);
  return lnetr::control::run(config);
}
