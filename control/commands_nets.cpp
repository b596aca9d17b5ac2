// net show: the router's nets and their NIs as the dataplane reports them
// (status, and with verbose the NIs' traffic, tunables and CPTs).
#include <cstdint>
#include <string>
#include <vector>

#include "control/service.hpp"
#include "control/service_internal.hpp"

namespace lnetr::control {

// As lnetctl prints a CPT list: "[0,1]".
std::string cpt_list(const std::vector<std::uint32_t>& cpts) {
  std::string t = "[";
  for (std::uint32_t c : cpts) t += (t.size() > 1 ? "," : "") + std::to_string(c);
  return t + "]";
}

namespace {

}  // namespace

Json Service::net_show(const Json& args) {
  only(args, {"net", "verbose"});
  const auto net = opt_net(args, "net");
  const auto verbose = opt_int(args, "verbose", 0, 4).value_or(0);
  const auto st = dataplane<status::Status>("status");
  const std::vector<status::Peer> peers = verbose ? merged_peers(st, placement_) : std::vector<status::Peer>{};
  Json nets = Json::array();
  for (const config::NetConfig& n : cfg_.nets) {
    if (net && n.net.value != *net) continue;
    Json nis = Json::array();
    for (const status::Ni& ni : st.nis) {
      const auto nid = parse_nid(ni.nid);
      if (!nid || nid->net() != n.net.value) continue;
      Json j = {{"nid", ni.nid}, {"status", ni.status}, {"interfaces", {{"0", ni.interface}}}};
      if (verbose) {
        // What went through the NI: its peers' messages (every peer on its
        // net is reached through it).
        std::uint64_t sent = 0, received = 0, dropped = 0;
        for (const status::Peer& p : peers) {
          const auto pn = parse_nid(p.nid);
          if (!pn || pn->net() != n.net.value) continue;
          sent += p.send_count;
          received += p.recv_count;
          dropped += p.drop_count;
        }
        j["statistics"] = {{"send_count", sent}, {"recv_count", received}, {"drop_count", dropped}};
        // The values in force, as the dataplane reports them (o2ib's
        // clamped as Linux clamps them; the fmr_* keys are not in force in
        // lnetr: no registration pools), and the CPTs whose workers serve
        // the NI's peers.
        j["tunables"] = {{"peer_timeout", ni.peer_timeout},
                         {"peer_credits", ni.peer_credits},
                         {"peer_buffer_credits", ni.peer_buffer_credits},
                         {"credits", ni.credits}};
        j["lnd tunables"] = ni.lnd_tunables;
        j["CPT"] = cpt_list(ni.cpts);
        j["link"] = ni.link;
        // What our ping info tells peers: DOWN also while no node of the
        // net has pinged the NI within the NI-status timeout.
        j["advertised"] = ni.advertised;
      }
      nis.push_back(j);
    }
    nets.push_back({{"net type", to_string(n.net.value)}, {"local NI(s)", nis}});
  }
  return {{"net", nets}};
}

}  // namespace lnetr::control
