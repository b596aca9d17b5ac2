// net show: the router's nets and their NIs as the dataplane reports them
// (status, and with verbose the NIs' traffic, tunables and CPTs).
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "control/service.hpp"
#include "control/service_internal.hpp"
#include "router/config.hpp"

namespace lnetr::control {

// As lnetctl prints a CPT list: "[0,1]".
std::string cpt_list(const std::vector<std::uint32_t>& cpts) {
  std::string t = "[";
  for (std::uint32_t c : cpts) t += (t.size() > 1 ? "," : "") + std::to_string(c);
  return t + "]";
}


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

// lnetctl net add: the NI, as an lnetctl YAML net (one line of flow
// style), checked here against the running configuration as its file would
// be, then by the dataplane, which serves it from now on.
Json Service::net_add(const Json& args) {
  only(args, {"net", "if", "nid", "peer_timeout", "peer_credits", "peer_buffer_credits", "credits", "cpt"});
  const Net net = required(opt_net(args, "net"), "net");
  const auto interface = opt_text(args, "if");
  const auto nid = opt_nid(args, "nid");
  if (!interface && !nid) bad("give the NI's interface (if) or its NID (nid)");
  if (nid && nid->net() != net) bad("nid " + to_string(*nid) + " is not on net " + to_string(net));
  Json ni = Json::object();
  if (interface) ni["interfaces"] = {{"0", *interface}};
  if (nid) ni["nid"] = to_string(*nid);
  Json tunables = Json::object();
  for (const char* key : {"peer_timeout", "peer_credits", "peer_buffer_credits", "credits"})
    if (const auto v = opt_int(args, key, -1, 0x7fffffff)) tunables[key] = *v;
  if (!tunables.empty()) ni["tunables"] = tunables;
  if (const auto cpt = opt_text(args, "cpt")) ni["CPT"] = cpt->starts_with("[") ? *cpt : "[" + *cpt + "]";
  const Json doc = {{"net", Json::array({{{"net type", to_string(net)}, {"local NI(s)", Json::array({ni})}}})}};
  const std::string text = doc.dump();
  config::Config next;
  {
    std::lock_guard lock(mu_);
    config::LoadOptions opts;
    opts.base = &cfg_;
    auto loaded = config::load_config(text, "net add", opts);
    if (!loaded) {
      std::string why;
      for (const auto& e : loaded.error()) why += (why.empty() ? "" : "; ") + e.to_string();
      throw ApiError{EINVAL, why};
    }
    next = std::move(loaded->config);
  }
  const auto r = dataplane<status::NetChange>("net add " + text);
  std::lock_guard lock(mu_);
  if (builder_ && !builder_->add_local_net(net))
    log("warning", "net " + to_string(net) + ": more local nets than a route table numbers (64): no route through it "
                                             "can be added");
  cfg_.nets = std::move(next.nets);
  placement_ = config::placement(cfg_);
  nets_changed_ = true;
  log("info", "net " + to_string(net) + ": NI " + joined(r.nids, ", ") + " added");
  if (ctl_) routes_changed();
  Json out = {{"net", Json::array({{{"net type", to_string(net)}, {"local NI(s)", Json::array()}}})}};
  for (const std::string& n : r.nids) out["net"][0]["local NI(s)"].push_back({{"nid", n}});
  if (!r.warnings.empty()) out["warnings"] = r.warnings;
  return out;
}

// lnetctl net del: an NI (--nid, or the net's NI on interface --if), or
// the net's only NI.  What was in flight on it is dropped as `ni_deleted`.
Json Service::net_del(const Json& args) {
  only(args, {"net", "if", "nid"});
  const Net net = required(opt_net(args, "net"), "net");
  const auto interface = opt_text(args, "if");
  auto nid = opt_nid(args, "nid");
  const auto st = dataplane<status::Status>("status");
  std::vector<std::string> on_net;
  for (const status::Ni& ni : st.nis) {
    const auto n = parse_nid(ni.nid);
    if (!n || n->net() != net) continue;
    on_net.push_back(ni.nid);
    if (!nid && interface && ni.interface == *interface) nid = *n;
  }
  if (!nid && !interface && on_net.size() == 1) nid = *parse_nid(on_net.front());
  if (on_net.empty()) throw ApiError{ENOENT, "no NI on net " + to_string(net)};
  if (!nid) {
    if (interface) throw ApiError{ENOENT, "no NI of net " + to_string(net) + " on interface " + *interface};
    bad("net " + to_string(net) + " has " + std::to_string(on_net.size()) + " NIs: give --nid or --if");
  }
  const auto in_force = std::find_if(st.nis.begin(), st.nis.end(),
                                     [&](const status::Ni& ni) { return ni.nid == to_string(*nid); });
  if (in_force == st.nis.end()) throw ApiError{ENOENT, "no NI " + to_string(*nid)};
  if (nid->net() != net) bad("nid " + to_string(*nid) + " is not on net " + to_string(net));
  const auto r = dataplane<status::NetChange>("net del " + to_string(*nid));
  std::lock_guard lock(mu_);
  for (auto n = cfg_.nets.begin(); n != cfg_.nets.end(); ++n) {
    if (n->net.value != net) continue;
    std::erase_if(n->nis, [&](const config::NiConfig& c) { return is_ni(c, net, *in_force); });
    if (n->nis.empty()) cfg_.nets.erase(n);
    break;
  }
  placement_ = config::placement(cfg_);
  nets_changed_ = true;
  const bool net_gone = std::none_of(cfg_.nets.begin(), cfg_.nets.end(), [&](const auto& n) { return n.net.value == net; });
  if (builder_ && net_gone) builder_->remove_local_net(net);
  log("info", "net " + to_string(net) + ": NI " + to_string(*nid) + " deleted (" + std::to_string(r.dropped) +
                  " message(s) dropped as ni_deleted)");
  if (ctl_) routes_changed();
  return {{"net", Json::array({{{"net type", to_string(net)}, {"local NI(s)", Json::array({{{"nid", to_string(*nid)}}})}}})},
          {"dropped", r.dropped}};
}

// lnetctl net set: conns_per_peer of an NI (nid), of a net's NIs (net) or
// of every NI (all); an LND's timeout (lnd_timeout with net: ksocklnd's
// sock_timeout or ko2iblnd's timeout, so every NI of that LND, as the
// kernel's module parameter).  0 is what the kernel takes it for: conns
// automatic (tcp: dataplane.socklnd's, else 1), the timeout LNet's
// lnd_timeout (global show's), resolved when set.
Json Service::net_set(const Json& args) {
  only(args, {"net", "nid", "all", "conns_per_peer", "lnd_timeout", "health"});
  if (args.contains("health"))
    throw ApiError{EOPNOTSUPP, "lnetr keeps no health value of its own NIs (a failed send counts against the peer or "
                               "the gateway): health is not taken"};
  const auto net = opt_net(args, "net");
  const auto nid = opt_nid(args, "nid");
  const bool all = opt_int(args, "all", 0, 1).value_or(0) == 1;
  const auto cpp = opt_int(args, "conns_per_peer", 0, 127);
  const auto timeout = opt_int(args, "lnd_timeout", 0, 0x7fffffff);
  if (!cpp && !timeout) bad("give conns_per_peer or lnd_timeout");
  if (all && nid) bad("give nid or all, not both");
  if (nid && net && nid->net() != *net) bad("nid " + to_string(*nid) + " is not on net " + to_string(*net));
  if (timeout && !net) bad("lnd_timeout is an LND's: give a net of the LND (tcp or o2ib) that takes it");
  if (cpp && !nid && !net && !all) bad("give the NI (nid), its net (net) or all");
  const auto st = dataplane<status::Status>("status");
  // The NIs conns_per_peer is for, by the value it resolves to.
  std::map<std::uint32_t, std::vector<std::string>> by_value;
  std::vector<std::string> cpp_nids;
  const std::uint32_t sock_auto = [&] {
    std::lock_guard lock(mu_);
    return static_cast<std::uint32_t>(cfg_.dataplane.socklnd.effective_conns_per_peer());
  }();
  for (const status::Ni& ni : st.nis) {
    const auto n = parse_nid(ni.nid);
    if (!cpp || !n || !(all || (nid ? *n == *nid : n->net() == *net))) continue;
    const std::uint32_t v = *cpp != 0 ? static_cast<std::uint32_t>(*cpp) : n->lnd() == LndType::sock ? sock_auto : 1;
    by_value[v].push_back(ni.nid);
    cpp_nids.push_back(ni.nid);
  }
  if (cpp && cpp_nids.empty())
    throw ApiError{ENOENT, nid ? "no NI " + to_string(*nid) : "no NI on net " + to_string(*net)};
  std::uint32_t seconds = 0;
  if (timeout) {
    if (net->lnd() != LndType::sock && net->lnd() != LndType::o2ib)
      bad("net " + to_string(*net) + ": only tcp and o2ib nets have an LND timeout here");
    std::lock_guard lock(mu_);
    seconds = *timeout != 0 ? static_cast<std::uint32_t>(*timeout) : lnet_lnd_timeout(cfg_.global);
    if (seconds == 0) seconds = 1;
  }
  // Each change recorded as soon as the dataplane took it (what save
  // writes and a restarted dataplane is given again), so that one refused
  // after it leaves no change in force unrecorded.
  const config::Source src{"lnetrctl net set", 1, 1, ""};
  auto record = [&](const std::vector<std::string>& nids, auto set) {
    std::lock_guard lock(mu_);
    for (config::NetConfig& n : cfg_.nets)
      for (config::NiConfig& c : n.nis)
        for (const status::Ni& s : st.nis)
          if (is_ni(c, n.net.value, s) && std::find(nids.begin(), nids.end(), s.nid) != nids.end()) set(c.lnd_tunables);
    nets_changed_ = true;
  };
  for (const auto& [v, nids] : by_value) {
    std::string line = "net set conns_per_peer " + std::to_string(v);
    for (const std::string& n : nids) line += " " + n;
    dataplane<status::NetChange>(line);
    record(nids, [&, v = v](config::LndTunables& l) { l.conns_per_peer = {static_cast<std::int32_t>(v), src}; });
  }
  std::vector<std::string> timed;
  if (timeout) {
    timed = dataplane<status::NetChange>("net set timeout " + std::to_string(seconds) + " " + to_string(*net)).nids;
    record(timed, [&](config::LndTunables& l) { l.timeout = {static_cast<std::int32_t>(seconds), src}; });
    if (net->lnd() == LndType::sock) {
      std::lock_guard lock(mu_);
      cfg_.dataplane.socklnd.sock_timeout = {static_cast<std::int32_t>(seconds), src};
    }
  }
  Json out = Json::object();
  if (cpp) {
    log("info", "conns_per_peer of NI(s) " + joined(cpp_nids, ", ") + " set to " + std::to_string(*cpp));
    out["conns_per_peer"] = cpp_nids;
  }
  if (timeout) {
    log("info", std::string(net->lnd() == LndType::sock ? "ksocklnd" : "ko2iblnd") + " timeout set to " +
                    std::to_string(seconds) + " s (NI(s) " + joined(timed, ", ") + ")");
    out["lnd_timeout"] = timed;
  }
  return out;
}

}  // namespace lnetr::control
