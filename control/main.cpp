// lnetr-control: the control process.  It loads the configuration file the
// dataplane loads, attaches to the dataplane's shared memory
// (dataplane.shm_name) and, through Service (control/service.hpp), owns the
// route table and keeps gateway health; it serves the management API
// (control/api.hpp) on control.socket.  It follows the dataplane across
// restarts; the dataplane keeps forwarding with the last snapshot whenever
// lnetr-control is absent.
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <string>
#include <thread>

#include <unistd.h>

#include <prometheus/exposer.h>

#include "control/api.hpp"
#include "control/firewall.hpp"
#include "control/metrics.hpp"
#include "control/service.hpp"
#include "dataplane/shm/region.hpp"
#include "dataplane/systemd.hpp"
#include "router/config.hpp"

namespace lnetr::control {
namespace {

using namespace std::chrono_literals;

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

int run(const std::string& config_path) {
  auto loaded = config::load_config_file(config_path);
  if (!loaded) {
    for (const auto& e : loaded.error()) log("error", e.to_string());
    return 1;
  }
  for (const auto& w : loaded->warnings) log("warning", w.to_string());
  Service svc(std::move(loaded->config));
  svc.set_config_path(config_path);
  const config::Config& cfg = svc.config();
  const std::string& shm_name = cfg.dataplane.shm_name.value;

  // One lnetr-control per dataplane: a second would unlink the first's API
  // socket and publish into the same slots.
  std::string err;
  const int lock_fd = shm::take_lock(shm_name + ".control", err);
  if (lock_fd < 0) {
    log("error", err.empty() ? "another lnetr-control already runs for dataplane.shm_name " + shm_name : err);
    return 1;
  }

  Api api(svc);
  Api read_only(svc, Api::Level::read_only);
  // However run() returns: requests waiting on the dataplane end first,
  // then the API (its destructor) stops.
  struct ShutdownFirst {
    Service& svc;
    ~ShutdownFirst() { svc.shutdown(); }
  } shutdown_first{svc};
  if (!api.open(cfg.control.socket.value, cfg.control.socket_group.value, err)) {
    log("error", err);
    return 1;
  }
  const std::string ro_path = cfg.control.readonly_socket_path();
  if (!ro_path.empty() &&
      !read_only.open(ro_path, cfg.control.readonly_socket_group.value, err, "control.readonly_socket")) {
    log("error", err);
    return 1;
  }
  api.start();
  read_only.start();
  log("info", "management API on " + cfg.control.socket.value +
                  (!ro_path.empty() ? ", read-only on " + ro_path : ""));

  // Prometheus: series built at each scrape.
  std::unique_ptr<prometheus::Exposer> exposer;
  auto metrics = std::make_shared<Metrics>(svc);
  if (cfg.control.metrics.value != "off") {
    try {
      exposer = std::make_unique<prometheus::Exposer>(cfg.control.metrics.value);
    } catch (const std::exception& e) {
      log("error", "control.metrics: cannot serve metrics on " + cfg.control.metrics.value + ": " + e.what());
      return 1;
    }
    exposer->RegisterCollectable(metrics);
    log("info", "metrics on http://" + cfg.control.metrics.value + "/metrics");
  }

  // Ready: the API and metrics listen (the dataplane may come later; it is
  // followed whenever it is up).
  systemd::notify_ready("serving the management API" +
                        std::string(exposer ? " and metrics" : "") + "; waiting for the dataplane");
  // The watchdog is fed from this loop: it stops if the loop does.
  const auto watchdog = systemd::watchdog_period() / 2;
  auto next_feed = Clock::now();
  bool was_attached = false;

  std::string last_err;
  auto next_probe = Clock::now();
  int rc = 0;
  while (!g_stop.load()) {
    if (watchdog.count() > 0 && Clock::now() >= next_feed) {
      systemd::notify_watchdog();
      next_feed = Clock::now() + watchdog;
    }
    if (svc.attached() != was_attached) {
      was_attached = svc.attached();
      systemd::notify_status(was_attached ? "serving; attached to the dataplane" : "serving; waiting for the dataplane");
    }
    if (!svc.attached()) {
      // (Re)attach: the dataplane may not be up yet, or may have restarted.
      shm::Region r = shm::Region::attach(shm_name, err);
      if (!r) {
        if (err != last_err) log("info", "waiting for the dataplane: " + err);
        last_err = err;
        std::this_thread::sleep_for(200ms);
        continue;
      }
      last_err.clear();
      if (!svc.attach(std::move(r))) {
        rc = 1;
        break;
      }
    }
    const auto now = Clock::now();
    if (!svc.step(now)) {
      rc = 1;
      break;
    }
    if (now >= next_probe) {
      // A dataplane that restarted removed the name and made a new region.
      next_probe = now + 200ms;
      shm::Region probe = shm::Region::attach(shm_name, err);
      if (probe && probe.header().incarnation != svc.incarnation()) {
        log("info", "the dataplane restarted: attaching to its new region");
        svc.detach();
        continue;
      }
    }
    std::this_thread::sleep_for(20ms);
  }
  systemd::notify_stopping();
  exposer.reset();
  svc.shutdown();
  read_only.stop();
  api.stop();
  svc.detach();
  log("info", "stopped");
  ::close(lock_fd);
  return rc;
}

}  // namespace
}  // namespace lnetr::control

int main(int argc, char** argv) {
  CLI::App app{"lnetr-control: the LNet router's control process"};
  std::string config;
  app.add_option("-c,--config", config, "configuration file (YAML), the one lnetr-dataplane loads")->required();
  bool nftables = false;
  app.add_flag("--nftables", nftables,
               "print the router's firewall (an nftables ruleset: LNet's ports on the NIs' interfaces, ssh and "
               "metrics on control.management_interface, nothing else) and exit");
  app.set_version_flag("--version", std::string("lnetr-control ") + LNETR_VERSION);
  CLI11_PARSE(app, argc, argv);
  if (nftables) {
    auto loaded = lnetr::config::load_config_file(config);
    if (!loaded) {
      for (const auto& e : loaded.error()) std::cerr << "lnetr-control: " << e.to_string() << "\n";
      return 2;
    }
    std::cout << lnetr::control::nftables_ruleset(loaded->config);
    return 0;
  }
  std::signal(SIGINT, lnetr::control::on_signal);
  std::signal(SIGTERM, lnetr::control::on_signal);
  return lnetr::control::run(config);
}
