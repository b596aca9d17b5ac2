// peer show: the router's peers, their credits and traffic summed over the
// workers, and (-v 2) their o2iblnd connections; o2ib_connections() also
// serves the metrics.
#include <cerrno>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "control/service.hpp"
#include "control/service_internal.hpp"

namespace lnetr::control {

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

}  // namespace lnetr::control
