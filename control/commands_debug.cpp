// Commands that act on the network to test or debug it: LNet fault
// injection (fault add, del, show, reset), an operator's LNet ping through
// the dataplane, and captures of the DPDK ports' frames.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "control/controller.hpp"
#include "control/service.hpp"
#include "control/service_internal.hpp"
#include "router/ip_addr.hpp"

namespace lnetr::control {

using namespace std::chrono_literals;

// LNet fault injection (router/lnet_fault.hpp): add, del, show and reset
// go to the dataplane, which keeps the rules and applies them on every
// worker.  Off until an operator adds a rule; refused on the read-only
// socket as every change is.
Json Service::fault(const std::string& op, const Json& args) {
  if (op == "add") {
    only(args, {"kind", "source", "dest", "local", "type", "portal", "rate", "interval", "latency"});
    const auto kind = opt_text(args, "kind");
    if (!kind) bad("argument 'kind': drop, delay or corrupt is required");
    std::string rule = "kind=" + *kind;
    auto word = [&](const char* arg, const char* key) {
      if (auto v = opt_text(args, arg)) {
        if (v->empty() || v->find_first_of(" =\n") != std::string::npos)
          bad(std::string("argument '") + arg + "': expected one word, got '" + *v + "'");
        rule += std::string(" ") + key + "=" + *v;
      }
    };
    word("source", "src");
    word("dest", "dst");
    word("local", "local");
    word("type", "type");
    word("portal", "portal");
    word("rate", "rate");
    word("interval", "interval");
    word("latency", "latency");
    if (rule.find(" src=") == std::string::npos) rule += " src=*";
    if (rule.find(" dst=") == std::string::npos) rule += " dst=*";
    const auto r = dataplane<status::FaultAdded>("lnet_fault add " + rule);
    log("warning", "fault rule " + std::to_string(r.id) + " added: " + r.rule);
    return {{"fault", r}};
  }
  if (op == "del") {
    only(args, {"id", "all"});
    const auto id = opt_int(args, "id", 1, 0xffffffffLL);
    const bool all = opt_int(args, "all", 0, 1).value_or(0) == 1;
    if (id.has_value() == all) bad("give --id ID or --all");
    const auto r = dataplane<status::FaultsDeleted>("lnet_fault del " + (all ? std::string("all") : std::to_string(*id)));
    log("info", "fault rule(s) deleted: " + (all ? std::string("all") : std::to_string(*id)));
    return {{"fault", r}};
  }
  only(args, {});
  const auto r = dataplane<status::FaultList>(op == "show" ? "lnet_fault list" : "lnet_fault reset");
  return {{"fault", r}};
}

// ---- capture ----------------------------------------------------------------------

// The dataplane writes the frames of its DPDK ports into the file lnetrctl
// opened, whose descriptor came with the request: lnetr-control never
// opens it, so the file is wherever the operator may write.  A NID filter
// is its IPv4 address (frames to or from it: LNet traffic, ARP); o2ib NIDs
// never appear on a DPDK port.
Json Service::capture(const std::string& op, const Json& args, int file) {
  auto answer = [this](const status::CaptureState& st) {
    Json c = st;
    std::lock_guard lock(mu_);
    if (!capture_file_.empty()) c["file"] = capture_file_;
    return Json{{"capture", c}};
  };
  if (op != "start") {
    only(args, {});
    return answer(dataplane<status::CaptureState>("capture " + op));
  }
  only(args, {"port", "nid", "count", "file"});
  std::string line = "capture start";
  const auto port = opt_text(args, "port");
  if (port && (port->empty() || port->find_first_of(" =\n*") != std::string::npos))
    bad("argument 'port': expected a port's name (dataplane.ports), got '" + *port + "'");
  line += " port=" + port.value_or("*");
  if (const auto nid = opt_nid(args, "nid")) {
    if (nid->lnd() != LndType::sock)
      bad("argument 'nid': " + to_string(*nid) +
          " is not a tcp NID, and only those travel on DPDK ports (o2ib: see docs/operations.md)");
    line += " host=" + to_string(IpAddr::of(*nid));
  } else {
    line += " host=*";
  }
  line += " count=" + std::to_string(opt_int(args, "count", 1, 1LL << 40).value_or(0));
  const auto path = opt_text(args, "file");
  if (file < 0)
    throw ApiError{EBADF, "capture start needs the capture file passed with the request (lnetrctl capture start "
                          "FILE opens it)"};
  const auto st = dataplane<status::CaptureState>(line, file);
  {
    std::lock_guard lock(mu_);
    capture_file_ = path.value_or("");
  }
  log("info", "capture started" + (path ? " into " + *path : std::string()));
  return answer(st);
}

// ---- ping -------------------------------------------------------------------------

// An LNet ping of a NID, sent by the dataplane worker that owns the peer (a
// NID on one of the router's nets) or the gateway it is routed through
// (lnetctl ping's output shape, plus the RTT).
Json Service::ping(const Json& args) {
  only(args, {"nid", "timeout"});
  const Nid nid = required(opt_nid(args, "nid"), "nid");
  const auto timeout = std::chrono::seconds(opt_int(args, "timeout", 1, 300).value_or(1));
  const bool local =
      std::any_of(cfg_.nets.begin(), cfg_.nets.end(), [&](const auto& n) { return n.net.value == nid.net(); });
  std::size_t k = 0;
  std::uint64_t seq = 0, incarnation = 0;
  Clock::time_point asked;
  {
    std::lock_guard lock(mu_);
    if (!ctl_) throw ApiError{EAGAIN, "not attached to a dataplane yet"};
    // A remote NID goes through the gateway forwarding's own selection
    // picks (alive, then priority, then hops; credits are the dataplane's).
    std::optional<Nid> via;
    if (!local) {
      const RouteTable table = builder_->build();
      RouteCursor cursor(table.view());
      auto r = table.view().select(nid.net(), cursor, [](const Route&) { return true; },
                                   [](const Route&) { return 0; });
      if (!r)
        throw ApiError{EHOSTUNREACH, "failed to ping " + to_string(nid) + ": no alive route to " + to_string(nid.net())};
      via = (*r)->gateway;
    }
    const auto now = Clock::now();
    while (k < ping_busy_.size() && (ping_busy_[k] || now < ping_reuse_[k])) ++k;
    if (k == ping_busy_.size()) throw ApiError{EBUSY, "too many pings in progress; try again"};
    ping_busy_[k] = true;
    const shm::Region& region = ctl_->region();
    incarnation = region.header().incarnation;
    shm::GatewayShm& g = region.gateway(shm::kMaxGateways + static_cast<std::uint32_t>(k));
    g.nid = nid;
    g.via = via.value_or(Nid{});
    g.owner = placement_.of(via.value_or(nid), region.header().n_workers);
    g.assigned.store(1);
    asked = Clock::now();
    seq = g.request.load() + 1;
    g.request.store(seq);
    region.worker(g.owner).ping_requests.fetch_add(1);
  }
  const auto deadline = Clock::now() + timeout;
  std::optional<shm::PingResult> result;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (!ctl_ || ctl_->region().header().incarnation != incarnation || stopping_.load())
        break;  // the dataplane went away, or we are stopping
      const shm::PingResult r =
          shm::load_result(ctl_->region().gateway(shm::kMaxGateways + static_cast<std::uint32_t>(k)));
      if (r.seq == seq && r.outcome != shm::PingOutcome::none) result = r;
      if (result || Clock::now() >= deadline) {
        if (!result) ping_reuse_[k] = Clock::now() + 1s;  // a late answer must find it unused
        break;
      }
    }
    std::this_thread::sleep_for(2ms);
  }
  {
    std::lock_guard lock(mu_);
    ping_busy_[k] = false;
  }
  const std::string failed = "failed to ping " + to_string(nid);
  if (!result) throw ApiError{ETIMEDOUT, failed + ": no answer within " + std::to_string(timeout.count()) + " s"};
  if (result->outcome == shm::PingOutcome::send_failed) throw ApiError{EHOSTUNREACH, failed + ": no connection"};
  if (result->outcome == shm::PingOutcome::bad_reply)
    throw ApiError{EPROTO, failed + ": the answer was not a valid ping info"};
  Json nis = Json::array();
  for (std::uint32_t i = 0; i < result->n_nis && i < shm::kPingNis; ++i)
    nis.push_back({{"nid", to_string(result->nis[i].nid)}, {"status", result->nis[i].status == kNiStatusUp ? "up" : "down"}});
  const Nid primary = result->n_nis > 0 ? result->nis[0].nid : nid;
  // Both processes read the same monotonic clock.
  const std::int64_t sent_ns =
      result->sent_ns != 0 ? result->sent_ns
                           : std::chrono::duration_cast<std::chrono::nanoseconds>(asked.time_since_epoch()).count();
  return {{"ping",
           Json::array({{{"primary nid", to_string(primary)},
                         {"Multi-Rail", (result->features & ping_feature::multi_rail) != 0},
                         {"peer_ni", nis},
                         {"rtt_us", static_cast<double>(result->done_ns - sent_ns) / 1e3}}})}};
}

}  // namespace lnetr::control
