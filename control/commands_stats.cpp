// The counters and the dataplane's own state: stats show and stats reset
// (with their baseline), dataplane show (workers, ports, o2iblnd) and
// buffers show.
#include <cstdint>
#include <string>

#include "control/service.hpp"
#include "control/service_internal.hpp"

namespace lnetr::control {

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

}  // namespace lnetr::control
