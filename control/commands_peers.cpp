// peer show: the router's peers, their credits and traffic summed over the
// workers, and (-v 2) their o2iblnd connections; o2ib_connections() also
// serves the metrics.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "control/service.hpp"
#include "control/controller.hpp"
#include "control/service_internal.hpp"

namespace lnetr::control {

// A peer's counters summed over the workers that account for it; credits
// from the worker that owns it (its connections' CPT).
std::vector<status::Peer> merged_peers(const status::Status& st, const Placement& placement) {
  std::vector<status::Peer> out;
  std::unordered_map<std::string, std::size_t> at;  // nid -> its entry in out
  for (const status::Peer& p : st.peers) {
    const auto [pos, fresh] = at.emplace(p.nid, out.size());
    if (fresh) {
      out.push_back(p);
      continue;
    }
    status::Peer& m = out[pos->second];
    const auto n = parse_nid(p.nid);
    if (n && placement.of(*n, static_cast<std::uint32_t>(st.workers.size())) == p.cpt) {
      // The owner's entry, with the traffic of those before it.
      const status::Peer before = m;
      m = p;
      m.send_count += before.send_count, m.recv_count += before.recv_count, m.drop_count += before.drop_count;
      m.send_bytes += before.send_bytes, m.recv_bytes += before.recv_bytes;
    } else {
      m.send_count += p.send_count, m.recv_count += p.recv_count, m.drop_count += p.drop_count;
      m.send_bytes += p.send_bytes, m.recv_bytes += p.recv_bytes;
    }
  }
  return out;
}

Json Service::peer_show(const Json& args) {
  only(args, {"nid", "verbose"});
  const auto nid = opt_nid(args, "nid");
  const auto verbose = opt_int(args, "verbose", 0, 4).value_or(0);
  const auto st = dataplane<status::Status>("status");
  Json peers = Json::array();
  const std::vector<status::Peer> merged = merged_peers(st, placement_);
  // lnetr's own at -v 2: the o2ib peers' connections and their credits, in
  // one request for all.
  std::map<std::string, Json> ib_conns;
  if (verbose >= 2 && st.o2iblnd) {
    std::set<std::string> wanted;
    for (const status::Peer& p : merged) {
      const auto pn = parse_nid(p.nid);
      if ((!nid || p.nid == to_string(*nid)) && pn && pn->lnd() == LndType::o2ib) wanted.insert(p.nid);
    }
    for (const status::O2ibConnection& c : o2ib_connections(wanted))
      ib_conns[c.peer].push_back({{"queue_depth", c.queue_depth},
                                  {"credits", c.credits},
                                  {"outstanding_credits", c.outstanding_credits},
                                  {"reserved_credits", c.reserved_credits},
                                  {"queued", c.queued},
                                  {"rx_held", c.rx_held},
                                  {"version", c.version}});
  }
  // Discovered peers, gateways first: one peer each, with every NI its
  // ping info (or push) listed, primary first, as lnetctl shows a
  // discovered peer.
  struct Found {
    std::vector<std::pair<Nid, bool>> nis;  // and whether it said UP
    std::uint32_t features = 0;
    Json discovery;  // lnetr's: what discovery found and did
  };
  constexpr std::uint32_t kDiscovers = ping_feature::multi_rail | ping_feature::discovery;
  auto hex = [](std::uint32_t v) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%x", v);
    return std::string(text);
  };
  std::vector<Found> found;
  std::unordered_map<std::string, std::size_t> found_by_ni;  // NI -> its peer in found
  auto add_found = [&](Found f) {
    if (f.nis.empty() || found_by_ni.contains(to_string(f.nis.front().first))) return;  // (one peer, two NIDs of ours)
    for (const auto& n : f.nis) found_by_ni.emplace(to_string(n.first), found.size());
    found.push_back(std::move(f));
  };
  {
    std::lock_guard lock(mu_);
    if (ctl_)
      for (const Gateway& g : ctl_->health().gateways()) {
        if (!g.answered_once || g.nis.empty()) continue;
        Found f;
        for (const GatewayNi& n : g.nis) f.nis.emplace_back(n.nid, n.up);
        f.features = g.features;
        f.discovery = {{"gateway", to_string(g.nid)},
                       {"features", hex(g.features)},
                       {"discovers", (g.features & kDiscovers) == kDiscovers},
                       {"pushes_sent", g.pushes_sent},
                       {"push_acks", g.push_acks},
                       {"pushes_received", g.pushes_received}};
        if (!(g.rail == Nid{})) f.discovery["rail"] = to_string(g.rail);
        add_found(std::move(f));
      }
  }
  for (const status::Peer& p : merged) {
    if (!p.discovery || p.discovery->nis.empty()) continue;
    const status::PeerDiscovery& d = *p.discovery;
    Found f;
    for (const status::DiscoveredNi& n : d.nis)
      if (const auto pn = parse_nid(n.nid)) f.nis.emplace_back(*pn, n.state == "up");
    f.features = d.features;
    f.discovery = {{"nid", p.nid},
                   {"state", d.state},
                   {"features", hex(d.features)},
                   {"discovers", (d.features & kDiscovers) == kDiscovers},
                   {"sequence", d.sequence},
                   {"from", d.pushed ? "push" : "ping"},
                   {"pings", d.pings},
                   {"pushes_sent", d.pushes_sent},
                   {"push_acks", d.push_acks},
                   {"pushes_received", d.pushes_received},
                   {"failures", d.failures}};
    add_found(std::move(f));
  }
  auto peer_ni = [&](const status::Peer& p) {
    Json ni = {{"nid", p.nid}, {"state", p.state}};
    if (verbose) {
      ni["max_ni_tx_credits"] = p.max_ni_tx_credits;
      ni["available_tx_credits"] = p.available_tx_credits;
      ni["min_tx_credits"] = p.min_tx_credits;
      ni["tx_q_num_of_buf"] = p.tx_q_num_of_buf;
      ni["max_rtr_credits"] = p.max_rtr_credits;
      ni["available_rtr_credits"] = p.available_rtr_credits;
      ni["min_rtr_credits"] = p.min_rtr_credits;
      ni["rtr_q_num_of_buf"] = p.rtr_q_num_of_buf;
      ni["cpt"] = p.cpt;
      ni["statistics"] = {{"send_count", p.send_count}, {"recv_count", p.recv_count}, {"drop_count", p.drop_count}};
      if (auto it = ib_conns.find(p.nid); it != ib_conns.end()) ni["o2ib connections"] = it->second;
    }
    return ni;
  };
  std::map<std::string, Json> seen;  // a discovered peer's NIs the dataplane has a peer for
  for (const status::Peer& p : merged) {
    if (found_by_ni.contains(p.nid)) {
      seen[p.nid] = peer_ni(p);
      continue;
    }
    if (nid && p.nid != to_string(*nid)) continue;
    peers.push_back({{"primary nid", p.nid}, {"Multi-Rail", p.multi_rail}, {"peer ni", Json::array({peer_ni(p)})}});
  }
  for (const Found& f : found) {
    if (nid && std::none_of(f.nis.begin(), f.nis.end(), [&](const auto& n) { return n.first == *nid; })) continue;
    Json nis = Json::array();
    for (const auto& [n, up] : f.nis) {
      const std::string text = to_string(n);
      Json ni = seen.contains(text) ? seen[text] : Json{{"nid", text}};
      // As its ping info (or push) last said.
      ni["state"] = up ? "up" : "down";
      nis.push_back(std::move(ni));
    }
    Json peer = {{"primary nid", to_string(f.nis.front().first)},
                 {"Multi-Rail", (f.features & ping_feature::multi_rail) != 0},
                 {"peer ni", nis}};
    if (verbose) peer["discovery"] = f.discovery;
    peers.push_back(std::move(peer));
  }
  if (nid && peers.empty()) throw ApiError{ENOENT, "no peer " + to_string(*nid) + " (the router has not exchanged a message with it)"};
  return {{"peer", peers}};
}

// The o2iblnd connections of `peers` (their credits, queues), asked of the
// dataplane's workers: only those peers' (all of them past what fits in one
// request line).
std::vector<status::O2ibConnection> Service::o2ib_connections(const std::set<std::string>& peers) const {
  std::vector<status::O2ibConnection> out;
  auto ask = [&](const std::string& line) {
    auto r = dataplane<status::O2ibConnections>(line);
    for (status::O2ibConnection& c : r.connections) out.push_back(std::move(c));
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
