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
  const auto st = dataplane<status::Status>("status");
  Json s = st.statistics;
  s["drops"] = st.drops;
  s["socklnd"] = st.socklnd;
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
  const auto st = dataplane<status::Status>("status");
  Json workers = Json::array();
  for (const status::Worker& w : st.workers) {
    workers.push_back({{"cpt", w.cpt},
                       {"core", w.core},
                       {"busy_ratio", w.cycles ? static_cast<double>(w.busy_cycles) / static_cast<double>(w.cycles) : 0.0},
                       {"loops", w.loops},
                       {"busy_loops", w.busy_loops},
                       {"cycles", w.cycles},
                       {"busy_cycles", w.busy_cycles},
                       {"ring_size", w.ring_size},
                       {"ring_backlog", w.ring_backlog},
                       {"conns_opened", w.conns_opened},
                       {"rx_msgs", w.rx_msgs},
                       {"tx_msgs", w.tx_msgs},
                       {"route_version", w.route_version}});
  }
  // Each NI's port: kernel sockets on its interface, or a DPDK port (with
  // what lnetr's own TCP/IP counted there).
  Json ports = Json::array();
  for (const status::Ni& ni : st.nis) {
    Json p = {{"nid", ni.nid}, {"interface", ni.interface}, {"transport", ni.transport}, {"link", ni.link},
              {"status", ni.status}};
    for (const status::Port& dp : st.ports) {
      if (dp.name != ni.interface) continue;
      p["device"] = dp.device;
      p["mac"] = dp.mac;
      p["mtu"] = dp.mtu;
      p["rx_frames"] = dp.rx_frames;
      p["tx_frames"] = dp.tx_frames;
      p["rx_bytes"] = dp.rx_bytes;
      p["tx_bytes"] = dp.tx_bytes;
      p["tx_dropped"] = dp.tx_dropped;
      p["tcp_connections"] = dp.tcp_connections;
      p["bytes_copied"] = dp.bytes_copied;
      p["bytes_referenced"] = dp.bytes_referenced;
      p["rx_bytes_referenced"] = dp.rx_bytes_referenced;
      p["zero_copy"] = dp.zero_copy;
      p["tso"] = dp.tso;
      p["tso_frames"] = dp.tso_frames;
      p["lro"] = dp.lro;
      p["lro_frames"] = dp.rx_lro;
      p["resets_out"] = dp.resets_out;
      p["dropped_malformed"] = dp.dropped_malformed;
    }
    if (ni.device) p["device"] = *ni.device;  // an o2ib NI's RDMA device
    ports.push_back(std::move(p));
  }
  std::lock_guard lock(mu_);
  Json out = {{"shm_name", cfg_.dataplane.shm_name.value},
              {"incarnation", incarnation_locked()},
              {"routing", st.routing.state},
              {"workers", workers},
              {"ports", ports}};
  if (st.o2iblnd) {
    // o2iblnd over verbs: the workers' engines summed.
    const status::O2iblnd& ib = *st.o2iblnd;
    out["o2iblnd"] = {{"connections", ib.connections},
                      {"remote_keys", ib.remote_keys},
                      {"conns_accepted", ib.conns_accepted},
                      {"conns_connected", ib.conns_connected},
                      {"rdma_bytes_written", ib.rdma_bytes_written},
                      {"rdma_bytes_received", ib.rdma_bytes_received},
                      {"bytes_copied", ib.bytes_copied},
                      {"bytes_bounced", ib.bytes_bounced},
                      {"sink_windows", ib.sink_windows},
                      {"sink_windows_refused", ib.sink_windows_refused},
                      {"sink_registrations", ib.sink_registrations},
                      {"tx_timeouts", ib.tx_timeouts},
                      {"post_failures", ib.post_failures},
                      {"cq_errors", ib.cq_errors}};
  }
  return {{"dataplane", std::move(out)}};
}

Json Service::buffers_show(const Json& args) {
  only(args, {});
  const auto st = dataplane<status::Status>("status");
  return {{"buffers", st.buffers}, {"workers", st.workers}};
}

}  // namespace lnetr::control
