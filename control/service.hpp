// lnetr-control's state and commands: the configuration, the route table it
// owns (kept across dataplane restarts), gateway health while attached to a
// dataplane, and what the management API asks of them (control/api.hpp).
//
// Thread-safe: the health loop (step()) and the API thread (handle()) each
// take the service's lock; requests the dataplane answers (status, routing)
// go over its control socket without the lock held.
#pragma once

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "control/health.hpp"
#include "control/request.hpp"
#include "dataplane/shm/region.hpp"
#include "dataplane/status.hpp"
#include "router/config.hpp"
#include "router/forward.hpp"
#include "router/route_table.hpp"

namespace lnetr::control {


inline constexpr int kApiVersion = 1;

// A request that fails: the errno (positive) and what to tell the operator.
struct ApiError {
  int err;
  std::string descr;
};

// Where lnetr-control writes its log (stderr; tests may capture).
void log(const char* level, const std::string& text);

class Controller;

class Service {
 public:
  explicit Service(config::Config cfg);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  const config::Config& config() const noexcept { return cfg_; }
  // The file the configuration came from: `save` writes there.
  void set_config_path(std::string path) { config_path_ = std::move(path); }

  // Health loop.  attach(): take over a dataplane's region (publishing the
  // route table, or adopting the one a previous lnetr-control published);
  // false on a fatal error (said).
  bool attach(shm::Region region);
  void detach();
  bool attached() const;
  std::uint64_t incarnation() const;
  // One round of gateway health; false on a fatal error.
  bool step(Clock::time_point now);

  // lnetr-control is stopping: requests waiting on the dataplane (pings)
  // end now.
  void shutdown() noexcept { stopping_.store(true); }

  // API: run `command` with `args` (a JSON object); the response's data, or
  // an ApiError thrown.  `file` is a descriptor passed with the request
  // (capture start's file), lent.
  Json handle(const std::string& command, const Json& args, int file = -1);
  // Every metric series, at scrape time (control/metrics.hpp).
  void collect(class Families& f);
  void o2iblnd_metrics(class Families& f, const status::O2iblnd& ib, const std::set<std::string>& peers) const;
  std::vector<status::O2ibConnection> o2ib_connections(const std::set<std::string>& peers) const;

  // The commands handle() knows, for help and errors.
  static const std::vector<std::string>& commands();
  // Whether a command changes the router or acts on the network (routes,
  // routing, tunables, import, stats reset, ping): not for the read-only
  // socket.
  static bool changes(const std::string& command);

 private:
  Json route_show(const Json& args);
  Json route_add(const Json& args);
  Json route_del(const Json& args);
  Json gateway_show(const Json& args);
  Json routing_show(const Json& args);
  Json set_routing(const Json& args);
  Json net_show(const Json& args);
  Json peer_show(const Json& args);
  Json stats_show(const Json& args);
  Json stats_reset(const Json& args);
  // LNet fault injection rules, kept by the dataplane (lnetrctl fault).
  Json fault(const std::string& op, const Json& args);
  // Captures of the DPDK ports' frames, made by the dataplane into the
  // file lnetrctl opened (lnetrctl capture).
  Json capture(const std::string& op, const Json& args, int file);
  Json stats_now() const;  // the dataplane's counters as stats show gives them
  Json dataplane_show(const Json& args);
  static void subtract(Json& now, const Json& base);
  std::uint64_t incarnation_locked() const;
  Json buffers_show(const Json& args);
  Json global_show(const Json& args);
  Json set_tunable(const Json& args);
  Json net_add(const Json& args);
  Json net_del(const Json& args);
  Json net_set(const Json& args);
  Json export_config(const Json& args);
  Json import_config(const Json& args);
  Json save(const Json& args);
  Json ping(const Json& args);
  Json system_show(const Json& args);

  // Under the lock: the route table changed; publish it (if attached).
  void routes_changed();
  Json route_json(const Route& r) const;
  // A request on the dataplane's control socket, and its answer as the
  // record dataplane/status.hpp defines for it (Answer).  An answer of
  // another status version, one that is not its record, or a refusal is
  // thrown as an ApiError.
  // `file`: a descriptor passed with it (-1: none).
  template <class Answer>
  Answer dataplane(const std::string& line, int file = -1) const {
    return read_answer<Answer>(dataplane_answer(line, file), line);
  }
  Json dataplane_answer(const std::string& line, int file = -1) const;  // its version checked
  template <class Answer>
  static Answer read_answer(const Json& answer, const std::string& line) {
    try {
      return answer.get<Answer>();
    } catch (const nlohmann::json::exception& e) {
      throw ApiError{EPROTO, "the dataplane's answer to '" + line.substr(0, line.find(' ', 20)) +
                                 "' is not the record status version " + std::to_string(status::kStatusVersion) +
                                 " says: " + e.what()};
    }
  }

  std::atomic<bool> stopping_{false};
  // A dataplane of another status version answered and the log said so
  // (said again only after one of ours answered).
  mutable std::atomic<bool> version_mismatch_said_{false};
  // `stats reset`: the counters then, and of which dataplane run.
  Json stats_base_;
  std::uint64_t stats_base_incarnation_ = 0;
  mutable std::mutex mu_;
  std::string capture_file_;  // the last capture's file, as lnetrctl named it
  config::Config cfg_;
  std::string config_path_;
  std::mutex save_mu_;  // one save at a time
  HealthParams params_;
  Placement placement_;  // which worker owns a peer (nets on DPDK ports are pinned)
  std::size_t metrics_peers_ = 100;  // control.metrics_peers
  // drop_asym_route as set at run time (set, import): given again to a
  // dataplane that restarted (it starts from its file's) once its control
  // socket answers.
  std::optional<bool> runtime_asym_;
  bool asym_pending_ = false;
  // Router buffer pools resized at run time (set, import), by pool class:
  // given again to a restarted dataplane in the same way.
  std::array<std::optional<std::uint32_t>, kPoolClasses> runtime_buffers_{};
  bool buffers_pending_ = false;
  // NIs added or deleted at run time (net add / del): cfg_.nets is what is
  // in force; a restarted dataplane (its file's nets) is brought to it.
  bool nets_changed_ = false;
  bool nets_pending_ = false;
  void reapply_nets();
  // Resize pool `c` to `n` (over all CPTs; 0: the default) in the
  // dataplane, and record it; any warning the dataplane gave.
  std::optional<std::string> set_buffers(std::size_t c, std::uint32_t n);
  void reapply_buffers();
  std::mutex asym_mu_;  // held from sending drop_asym_route to recording it (before mu_)
  void reapply_runtime_settings();
  std::optional<RouteTableBuilder> builder_;
  std::unique_ptr<Controller> ctl_;
  // Operators' pings: which API ping slot is in use, and from when a slot
  // whose ping was given up may be reused.
  std::array<bool, shm::kApiPingSlots> ping_busy_{};
  std::array<Clock::time_point, shm::kApiPingSlots> ping_reuse_{};
  // Per worker, cycles and busy cycles at the previous scrape (busy ratio).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> last_cycles_;
  std::uint64_t last_cycles_incarnation_ = 0;
};

}  // namespace lnetr::control
