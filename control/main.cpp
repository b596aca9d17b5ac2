// lnetr-control: the control process.  This first cut owns the route table:
// it loads the configuration file the dataplane loads, attaches to the
// dataplane's shared memory (dataplane.shm_name), publishes the table of
// the `route:` section as a new snapshot, and follows the dataplane across
// restarts (a new region incarnation gets the table again).  The dataplane
// keeps forwarding with the last snapshot whenever lnetr-control is absent.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/shm/region.hpp"
#include "router/config.hpp"
#include "router/route_table.hpp"

namespace lnetr::control {
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

void say(const char* level, const std::string& text) { std::fprintf(stderr, "lnetr-control: %s: %s\n", level, text.c_str()); }

// The table of the `route:` section over the configured nets, numbered after
// what is published now.
RouteTable table_from(const config::Config& cfg, std::uint64_t version) {
  std::vector<Net> local;
  for (const config::NetConfig& n : cfg.nets) local.push_back(n.net.value);
  auto b = RouteTableBuilder::create(local, version);
  if (!b) {
    say("error", "route table: " + std::string(describe(b.error())));
    return {};
  }
  for (const config::RouteConfig& r : cfg.routes) {
    const std::uint32_t hops = r.hop.value == config::kHopUndefined ? kHopsUndefined : static_cast<std::uint32_t>(r.hop.value);
    auto added = b->add({r.net.value, r.gateway.value, hops, r.priority.value});
    if (!added)
      say("warning", config::to_string(r.source) + ": route to " + to_string(r.net.value) + " via " +
                         to_string(r.gateway.value) + " ignored: " + std::string(describe(added.error())));
  }
  b->set_version(version);
  return b->build();
}

int run(const std::string& config_path) {
  auto loaded = config::load_config_file(config_path);
  if (!loaded) {
    for (const auto& e : loaded.error()) say("error", e.to_string());
    return 1;
  }
  for (const auto& w : loaded->warnings) say("warning", w.to_string());
  const config::Config& cfg = loaded->config;
  const std::string& shm_name = cfg.dataplane.shm_name.value;

  shm::Region region;
  std::uint64_t incarnation = 0;
  std::string last_err;
  while (!g_stop.load()) {
    if (!region) {
      // (Re)attach: the dataplane may not be up yet, or may have restarted.
      std::string err;
      shm::Region r = shm::Region::attach(shm_name, err);
      if (!r) {
        if (err != last_err) say("info", "waiting for the dataplane: " + err);
        last_err = err;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      region = std::move(r);
      incarnation = region.header().incarnation;
      region.header().control_pid.store(static_cast<std::uint64_t>(::getpid()));
      last_err.clear();
      const std::uint64_t current = shm::published_version(region.header().published.load());
      const RouteTable t = table_from(cfg, current + 1);
      shm::PublishResult res;
      while ((res = shm::publish(region, t.view())) == shm::PublishResult::busy && !g_stop.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (res == shm::PublishResult::too_big) {
        say("error", "the route table does not fit in a shared-memory slot of " + shm_name);
        return 1;
      }
      say("info", "attached to " + shm_name + " (dataplane incarnation " + std::to_string(incarnation) +
                      "); published route table version " + std::to_string(t.version()) + " with " +
                      std::to_string(t.view().routes().size()) + " route(s)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // A dataplane that restarted removed the name and made a new region.
    std::string err;
    shm::Region probe = shm::Region::attach(shm_name, err);
    if (probe && probe.header().incarnation != incarnation) region = {};
  }
  if (region) region.header().control_pid.store(0);
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
