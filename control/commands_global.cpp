// The router's global settings and state: global show, set (the tunables
// lnetr-control applies at run time) and system show (what runs, and why
// the dataplane last stopped).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "control/controller.hpp"
#include "control/exit_record.hpp"
#include "control/service.hpp"
#include "control/service_internal.hpp"

namespace lnetr::control {

// What runs: lnetr's version, whether the dataplane answers and routes,
// and why it last stopped (its unit's exit record), for lnetrctl's system
// show and the appliance's login banner.
Json Service::system_show(const Json& args) {
  only(args, {});
  Json dp = Json::object();
  try {
    const auto st = dataplane<status::Status>("status");
    dp["state"] = "up";
    dp["routing"] = st.routing.state;
    std::size_t up = 0;
    for (const status::Ni& ni : st.nis) up += ni.status == "up" ? 1 : 0;
    dp["nis"] = st.nis.size();
    dp["nis_up"] = up;
    // What a drain waits for: no router buffer held, nothing forwarded.
    std::int64_t held = 0;
    for (const status::Buffers& cpt : st.buffers)
      for (const status::Pool* p : {&cpt.tiny, &cpt.small, &cpt.large})
        held += static_cast<std::int64_t>(p->nbuffers) - std::max<std::int64_t>(p->credits, 0);
    dp["buffers_held"] = held;
    dp["forwarded"] = st.statistics.route_count;
    dp["routing_since_s"] = st.routing.since_s;
    if (st.routing.peers_unaware) dp["peers_unaware"] = *st.routing.peers_unaware;
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

std::uint32_t lnet_lnd_timeout(const config::GlobalConfig& g) {
  const config::GlobalConfig k;
  return (std::max<std::uint32_t>(g.transaction_timeout.value, 1) - 1) / (k.retry_count.value + 1);
}

Json Service::global_show(const Json& args) {
  only(args, {});
  // drop_asym_route as the dataplane applies it (it may have been set at
  // run time, or read from its own file), else as configured.
  std::optional<int> asym;
  try {
    asym = dataplane<status::DropAsymRoute>("drop_asym_route").drop_asym_route;
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
            {"lnd_timeout", lnet_lnd_timeout(g)},
            {"response_tracking", k.response_tracking.value},
            {"recovery_limit", k.recovery_limit.value},
            {"max_recovery_ping_interval", k.max_recovery_ping_interval.value},
            {"alive_router_check_interval",
             std::chrono::duration_cast<std::chrono::seconds>(params_.check_interval).count()},
            {"router_ping_timeout", std::chrono::duration_cast<std::chrono::seconds>(params_.ping_timeout).count()}}}};
}

std::optional<std::string> Service::set_buffers(std::size_t c, std::uint32_t n) {
  const std::string pool(kPoolNames[c]);
  const auto r = dataplane<status::BuffersSet>("buffers " + pool + " " + std::to_string(n));
  std::lock_guard lock(mu_);
  cfg_.buffers.pool(c).value = n == 0 ? kDefaultPoolBuffers[c] : n;
  runtime_buffers_[c] = n;
  log("info", pool + "_buffers set to " + std::to_string(n) + ": " + std::to_string(r.per_cpt) + " per CPT" +
                  (r.warning ? " (" + *r.warning + ")" : ""));
  return r.warning;
}

// The tunables lnetr-control applies at run time.
Json Service::set_tunable(const Json& args) {
  only(args, {"health_sensitivity", "alive_router_check_interval", "router_ping_timeout", "drop_asym_route",
              "tiny_buffers", "small_buffers", "large_buffers"});
  Json out;
  for (std::size_t c = 0; c < kPoolClasses; ++c) {
    const std::string key = std::string(kPoolNames[c]) + "_buffers";
    if (const auto n = opt_int(args, key.c_str(), 0, 0x7fffffff)) {
      if (args.size() != 1) bad("set " + key + " alone");
      const auto warning = set_buffers(c, static_cast<std::uint32_t>(*n));
      out[key] = *n;
      if (warning) out["warning"] = *warning;
      return {{"global", out}};
    }
  }
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
    dataplane<status::DropAsymRoute>(*asym ? "drop_asym_route 1" : "drop_asym_route 0");
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
  if (sens) out["health_sensitivity"] = *sens;
  if (check) out["alive_router_check_interval"] = *check;
  if (timeout) out["router_ping_timeout"] = *timeout;
  if (asym) out["drop_asym_route"] = *asym;
  return {{"global", out}};
}

}  // namespace lnetr::control
