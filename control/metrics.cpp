// lnetr-control's Prometheus metrics: the collectable prometheus-cpp calls
// at scrape time (Families, Metrics) and what Service collects for it
// (routes, gateway health, the workers' counters in shared memory, and the
// dataplane's status document: NIs, peers, ports, socklnd, o2iblnd).
#include "control/metrics.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "control/controller.hpp"
#include "control/service.hpp"
#include "control/service_internal.hpp"

namespace lnetr::control {

void Families::add(const std::string& name, const std::string& help, prometheus::MetricType type,
                   const Labels& labels, double value) {
  prometheus::MetricFamily* f = nullptr;
  for (auto& existing : out_)
    if (existing.name == name) f = &existing;
  if (f == nullptr) {
    out_.push_back({});
    f = &out_.back();
    f->name = name;
    f->help = help;
    f->type = type;
  }
  prometheus::ClientMetric m;
  for (const auto& [k, v] : labels) m.label.push_back({k, v});
  if (type == prometheus::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  f->metric.push_back(std::move(m));
}

std::vector<prometheus::MetricFamily> Metrics::Collect() const {
  Families f;
  svc_.collect(f);
  return f.take();
}

// ---- metrics ----------------------------------------------------------------------

void Service::collect(Families& f) {
  using L = Families::Labels;
  {
    std::lock_guard lock(mu_);
    f.gauge("lnetr_up",
            "1 while lnetr-control is attached to a running dataplane; 0 means routes and health are not being managed "
            "(the dataplane, if running, forwards with its last route table)",
            {}, ctl_ ? 1 : 0);
    if (builder_)
      for (const Route& r : builder_->routes()) {
        const L l{{"net", to_string(r.net)}, {"gateway", to_string(r.gateway)}};
        f.gauge("lnetr_route_up",
                "1 if the route is used; 0 means its gateway is dead, not routing, or cannot reach the net (see "
                "lnetr-control's log for the reason)",
                l, r.alive ? 1 : 0);
        f.gauge("lnetr_route_priority", "The route's priority: among alive routes to a net the lowest is used", l,
                r.priority);
        f.gauge("lnetr_route_hops", "The route's hop count (-1: undefined, ranked as 1)", l, display_hop(r));
      }
    if (ctl_) {
      const shm::Region& region = ctl_->region();
      f.gauge("lnetr_route_table_version",
              "Version of the route table published to the dataplane; it increases on every route change", {},
              static_cast<double>(shm::published_version(region.header().published.load())));
      for (const Gateway& g : ctl_->health().gateways()) {
        const L l{{"gateway", to_string(g.nid)}};
        f.gauge("lnetr_gateway_up", "1 if the gateway answered its last check; 0 means its routes are not used", l,
                g.alive ? 1 : 0);
        f.gauge("lnetr_gateway_health",
                "Gateway health 0..1000: each failed check costs health_sensitivity, an answer restores 1000; below "
                "1000 means recent failures",
                l, g.health);
        f.gauge("lnetr_gateway_ping_rtt_seconds",
                "Round-trip time of the gateway's last answered ping through the dataplane; growth means a loaded "
                "gateway or network",
                l, static_cast<double>(g.last_rtt.count()) / 1e9);
        f.counter("lnetr_gateway_pings_total", "Checks (LNet pings) sent to the gateway", l, static_cast<double>(g.pings));
        f.counter("lnetr_gateway_failures_total",
                  "Failed checks of the gateway (timeouts, no connection, bad replies, connections lost); a rising "
                  "value means a flapping or dead gateway",
                  l, static_cast<double>(g.failures));
      }
      const std::uint32_t n = region.header().n_workers;
      const std::uint64_t inc = region.header().incarnation;
      if (inc != last_cycles_incarnation_ || last_cycles_.size() != n) {
        last_cycles_.assign(n, {0, 0});
        last_cycles_incarnation_ = inc;
      }
      f.gauge("lnetr_worker_tsc_hz", "Rate of the time-stamp counter that lnetr_worker_cycles_total counts", {},
              static_cast<double>(region.header().tsc_hz));
      std::array<double, kDropReasonCount> drops{};
      double drop_bytes = 0;
      for (std::uint32_t w = 0; w < n; ++w) {
        const dp::WorkerCounters& c = region.counters(w);
        const L l{{"cpt", std::to_string(w)}};
        f.counter("lnetr_forwarded_messages_total",
                  "Messages this CPT's worker forwarded (counted when sent); a flat line under load means traffic "
                  "is not getting through",
                  l, static_cast<double>(c.route_count.get()));
        f.counter("lnetr_forwarded_bytes_total", "Payload bytes of the forwarded messages", l,
                  static_cast<double>(c.route_length.get()));
        f.counter("lnetr_local_received_messages_total",
                  "Messages addressed to the router itself (pings, pushes, replies to its gateway checks)", l,
                  static_cast<double>(c.recv_count.get()));
        f.counter("lnetr_local_sent_messages_total", "Messages the router sent itself (ping replies, ACKs, gateway checks)",
                  l, static_cast<double>(c.send_count.get()));
        f.counter("lnetr_rerouted_messages_total",
                  "Forwarded messages sent through another gateway after theirs failed; non-zero means a gateway "
                  "failed under traffic",
                  l, static_cast<double>(c.reroutes.get()));
        f.counter("lnetr_ring_waits_total",
                  "Messages that waited for room on a full ring to another CPT's worker; rings are sized for every "
                  "message, so non-zero is a fault to report (nothing is lost: they go when there is room)",
                  l, static_cast<double>(c.ring_waits.get()));
        f.counter("lnetr_worker_log_lines_suppressed_total",
                  "Log lines of the worker dropped by its rate limit (a burst of 20, then 5 a second) or a full "
                  "queue; the journal says how many each time",
                  l, static_cast<double>(c.log_suppressed.get()));
        for (std::size_t t = 0; t < dp::kPeerTableCount; ++t) {
          const L lt{{"cpt", std::to_string(w)}, {"table", dp::kPeerTableNames[t]}};
          const dp::WorkerCounters::Table& tc = c.tables[t];
          f.gauge("lnetr_peer_table_peers",
                  "Peers this CPT's worker keeps in a peer table (lnet: LNet's peer NIs; socklnd, o2iblnd: the "
                  "LNDs' peers), at most dataplane.limits.peers each",
                  lt, static_cast<double>(tc.peers.get()));
          f.counter("lnetr_peer_table_refused_total",
                    "New peers refused because the table held dataplane.limits.peers (their messages dropped as "
                    "peer_table_full, their connections refused); non-zero means more peers than the limit, or "
                    "made-up NIDs",
                    lt, static_cast<double>(tc.refused.get()));
          f.counter("lnetr_peer_table_freed_total", "Peers freed after dataplane.limits.peer_idle with nothing in flight",
                    lt, static_cast<double>(tc.freed.get()));
        }
        f.counter("lnetr_worker_loops_total", "Iterations of the worker's poll loop", l,
                  static_cast<double>(c.loops.get()));
        f.counter("lnetr_worker_cycles_total",
                  "TSC cycles the worker's poll loop has run, sleeping included (lnetr_worker_tsc_hz per second)", l,
                  static_cast<double>(c.cycles.get()));
        f.counter("lnetr_worker_busy_cycles_total",
                  "TSC cycles of the worker's loop iterations that found work; over lnetr_forwarded_messages_total, "
                  "what a forwarded message costs the core",
                  l, static_cast<double>(c.busy_cycles.get()));
        f.counter("lnetr_worker_cpu_seconds_total",
                  "Seconds the worker's thread ran on its core; below the lnetr_worker_cycles_total seconds when "
                  "the core is shared with other threads (then busy cycles include the time they took it)",
                  l, static_cast<double>(c.cpu_ns.get()) / 1e9);
        f.counter("lnetr_bytes_copied_total",
                  "Bytes the worker copied: on DPDK ports received payload into socklnd's buffers, sent bytes into "
                  "TCP send queues and frames into mbufs; on kernel sockets every byte read, and every byte sent "
                  "except by zero copy",
                  l, static_cast<double>(c.bytes_copied.get()));
        f.counter("lnetr_bytes_referenced_total",
                  "Bytes the worker sent from router buffers without copying them: on DPDK ports frames chained "
                  "from the buffer, on kernel sockets MSG_ZEROCOPY sends the kernel completed uncopied",
                  l, static_cast<double>(c.bytes_referenced.get()));
        f.counter("lnetr_rx_bytes_referenced_total",
                  "Payload bytes the worker received on DPDK ports and left in the frames they arrived in, not "
                  "copied (zero copy: sent on from there)",
                  l, static_cast<double>(c.rx_bytes_referenced.get()));
        const std::uint64_t cycles = c.cycles.get(), busy = c.busy_cycles.get();
        const auto [last_cycles, last_busy] = last_cycles_[w];
        const double ratio =
            cycles > last_cycles ? static_cast<double>(busy - last_busy) / static_cast<double>(cycles - last_cycles) : 0.0;
        last_cycles_[w] = {cycles, busy};
        f.gauge("lnetr_worker_busy_ratio",
                "Share of the worker's cycles spent in loop iterations that found work since the previous scrape; "
                "near 1 means the CPT's core is saturated",
                l, ratio);
        for (std::size_t r = 0; r < kDropReasonCount; ++r) drops[r] += static_cast<double>(c.drops[r].get());
        drop_bytes += static_cast<double>(c.drop_length.get());
      }
      for (std::size_t r = 0; r < kDropReasonCount; ++r)
        f.counter("lnetr_dropped_messages_total",
                  "Messages the router dropped, by reason; any increase is lost traffic: the reason says why "
                  "(no_route, route_down: routes; peer_down, send_failed: a next hop failed; protocol: bad input)",
                  {{"reason", std::string(name(static_cast<DropReason>(r)))}}, drops[r]);
      f.counter("lnetr_dropped_bytes_total", "Payload bytes of the dropped messages", {}, drop_bytes);
    }
  }

  // What only the dataplane knows, from its status document.
  status::Status st;
  try {
    st = dataplane<status::Status>("status");
  } catch (const ApiError&) {
    f.gauge("lnetr_dataplane_up", "1 if the dataplane answers on its control socket; 0 means it is down or hung", {}, 0);
    return;
  }
  f.gauge("lnetr_dataplane_up", "1 if the dataplane answers on its control socket; 0 means it is down or hung", {}, 1);
  try {
    f.gauge("lnetr_routing_enabled",
            "1 while the router forwards and advertises it; 0 while routing is disabled, starting or draining", {},
            st.routing.state == "enabled" ? 1 : 0);
    for (const status::Ni& ni : st.nis) {
      const L l{{"nid", ni.nid}, {"net", ni.nid.substr(ni.nid.find('@') + 1)}};
      f.gauge("lnetr_ni_up",
              "1 if the NI is UP in the router's ping info; 0 means its link is down or no node of its net pinged it "
              "within alive_router_check_interval + router_ping_timeout, so clients avoid routes through it",
              l, ni.advertised == "up" ? 1 : 0);
      f.gauge("lnetr_ni_link_up", "1 if the NI's interface is up; 0 is a link failure", l, ni.link == "up" ? 1 : 0);
    }
    for (const status::Buffers& cpt : st.buffers) {
      const std::pair<const char*, const status::Pool&> pools[] = {
          {"tiny", cpt.tiny}, {"small", cpt.small}, {"large", cpt.large}};
      for (const auto& [pool, p] : pools) {
        const L l{{"cpt", std::to_string(cpt.cpt)}, {"pool", pool}};
        f.gauge("lnetr_router_buffers", "Router buffers of the pool on this CPT (configured)", l,
                static_cast<double>(p.nbuffers));
        f.gauge("lnetr_router_buffers_available",
                "Router buffer credits available now; negative means messages wait for a buffer (back-pressure)", l,
                static_cast<double>(p.credits));
        f.gauge("lnetr_router_buffers_min",
                "Lowest router buffer credits seen; at or below 0 the pool ran out: consider more buffers", l,
                static_cast<double>(p.mincredits));
      }
    }
    // Peers: per net always; per peer only for the busiest metrics_peers
    // (a router with tens of thousands of clients must not export a series
    // set per client).
    struct NetPeers {
      double peers = 0, down = 0, tx_min = 0, rtr_min = 0;
      double sent = 0, received = 0, sent_bytes = 0, received_bytes = 0;
      bool any = false;
    };
    std::map<std::string, NetPeers> per_net;
    std::vector<const status::Peer*> ranked;
    const std::vector<status::Peer> peers = merged_peers(st, placement_);  // one entry per peer
    for (const status::Peer& p : peers) {
      NetPeers& n = per_net[p.nid.substr(p.nid.find('@') + 1)];
      n.peers += 1;
      n.down += p.state == "up" ? 0 : 1;
      n.sent += static_cast<double>(p.send_count);
      n.received += static_cast<double>(p.recv_count);
      n.sent_bytes += static_cast<double>(p.send_bytes);
      n.received_bytes += static_cast<double>(p.recv_bytes);
      const auto tx_min = static_cast<double>(p.min_tx_credits), rtr_min = static_cast<double>(p.min_rtr_credits);
      n.tx_min = n.any ? std::min(n.tx_min, tx_min) : tx_min;
      n.rtr_min = n.any ? std::min(n.rtr_min, rtr_min) : rtr_min;
      n.any = true;
      ranked.push_back(&p);
    }
    for (const auto& [net, n] : per_net) {
      const L l{{"net", net}};
      f.gauge("lnetr_net_peers", "Peers the router knows on the net (each counted once, whichever CPTs see it)", l,
              n.peers);
      f.gauge("lnetr_net_peers_down", "Of those, peers considered down (all their connections failed)", l, n.down);
      f.counter("lnetr_net_sent_messages_total",
                "Messages sent to the net's peers (forwarded ones, and the router's own replies and pings)", l, n.sent);
      f.counter("lnetr_net_sent_bytes_total", "Payload bytes of those messages", l, n.sent_bytes);
      f.counter("lnetr_net_received_messages_total",
                "Messages received from the net's peers (to forward, or for the router itself)", l, n.received);
      f.counter("lnetr_net_received_bytes_total", "Payload bytes of those messages", l, n.received_bytes);
      f.gauge("lnetr_net_peer_tx_credits_min",
              "Lowest transmit credits any peer of the net has reached; at or below 0 a peer was a bottleneck", l,
              n.tx_min);
      f.gauge("lnetr_net_peer_router_credits_min",
              "Lowest router credits any peer of the net has reached; at or below 0 a peer's messages waited", l,
              n.rtr_min);
    }
    auto traffic = [](const status::Peer* p) { return p->send_count + p->recv_count; };
    const std::size_t keep = std::min<std::size_t>(ranked.size(), metrics_peers_);
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(keep), ranked.end(),
                      [&](const status::Peer* a, const status::Peer* b) {
                        const auto ta = traffic(a), tb = traffic(b);
                        return ta != tb ? ta > tb : a->nid < b->nid;
                      });
    ranked.resize(keep);
    std::set<std::string> exported;
    for (const status::Peer* pp : ranked) {
      const status::Peer& p = *pp;
      exported.insert(p.nid);
      const L l{{"peer", p.nid}, {"cpt", std::to_string(p.cpt)}};
      f.gauge("lnetr_peer_up", "1 while the peer is considered alive; 0 after all connections to it failed", l,
              p.state == "up" ? 1 : 0);
      f.gauge("lnetr_peer_tx_credits",
              "Transmit credits to the peer available now; negative means messages queue for it", l,
              static_cast<double>(p.available_tx_credits));
      f.gauge("lnetr_peer_tx_credits_min", "Lowest transmit credits seen; at or below 0 the peer was a bottleneck", l,
              static_cast<double>(p.min_tx_credits));
      f.gauge("lnetr_peer_router_credits",
              "Router credits of the peer available now (its messages the router may buffer); negative means its "
              "messages wait (back-pressure on it)",
              l, static_cast<double>(p.available_rtr_credits));
      f.gauge("lnetr_peer_router_credits_min", "Lowest router credits seen for the peer", l,
              static_cast<double>(p.min_rtr_credits));
    }
    // DPDK ports (lnetr's own TCP/IP): frames, drops, TCP repair work.
    for (const status::Port& p : st.ports) {
      const L l{{"port", p.name}};
      f.gauge("lnetr_port_link_up", "1 if the DPDK port's link is up", l, p.link == "up" ? 1 : 0);
      f.counter("lnetr_port_rx_frames_total", "Frames received on the DPDK port", l, static_cast<double>(p.rx_frames));
      f.counter("lnetr_port_tx_frames_total", "Frames sent on the DPDK port", l, static_cast<double>(p.tx_frames));
      f.counter("lnetr_port_rx_bytes_total", "Bytes received on the DPDK port", l, static_cast<double>(p.rx_bytes));
      f.counter("lnetr_port_tx_bytes_total", "Bytes sent on the DPDK port", l, static_cast<double>(p.tx_bytes));
      f.counter("lnetr_port_tx_dropped_total",
                "Frames the port could not send (no mbuf, or its backlog of frames the device refused was full); "
                "TCP retransmits them",
                l, static_cast<double>(p.tx_dropped));
      f.gauge("lnetr_port_tx_backlog", "Frames the device refused, waiting to be sent at the next poll", l,
              static_cast<double>(p.tx_backlog));
      f.counter("lnetr_port_rx_malformed_total", "Received frames refused by lnetr's decoders", l,
                static_cast<double>(p.dropped_malformed));
      f.gauge("lnetr_port_tcp_connections", "TCP connections of lnetr's stack on the port", l,
              static_cast<double>(p.tcp_connections));
      f.gauge("lnetr_port_tcp_half_open", "TCP connections of lnetr's stack on the port still in SYN-RECEIVED", l,
              static_cast<double>(p.tcp_half_open));
      const std::pair<const char*, std::uint64_t> syncookies[] = {
          {"sent", p.syncookies_sent}, {"accepted", p.syncookies_accepted}, {"refused", p.syncookies_refused}};
      for (const auto& [what, n] : syncookies) {
        L lw = l;
        lw.emplace_back("result", what);
        f.counter("lnetr_port_tcp_syncookies_total",
                  "SYN cookies: sent (SYNs answered without keeping state, the port's half-open connections at "
                  "their bound), accepted (connections made from one returned), refused (a wrong or expired one: "
                  "reset)",
                  lw, static_cast<double>(n));
      }
      f.counter("lnetr_port_tcp_retransmits_total",
                "TCP segments lnetr's stack sent again on the port; rising means loss on the link", l,
                static_cast<double>(p.tcp.retransmits));
      f.counter("lnetr_port_tcp_timeouts_total",
                "Retransmission timeouts on the port's connections; each stalls a connection for an RTO", l,
                static_cast<double>(p.tcp.timeouts));
      f.counter("lnetr_port_tcp_resets_sent_total", "TCP resets lnetr's stack sent on the port", l,
                static_cast<double>(p.resets_out));
      f.counter("lnetr_port_tso_frames_total",
                "Frames sent for the device to cut into TCP segments (segmentation offload)", l,
                static_cast<double>(p.tso_frames));
      f.counter("lnetr_port_tso_segments_total", "TCP segments the device cut those frames into", l,
                static_cast<double>(p.tso_segments));
      f.counter("lnetr_port_lro_frames_total",
                "Frames the device joined from several received TCP segments (large receive offload)", l,
                static_cast<double>(p.rx_lro));
      f.counter("lnetr_port_rx_steered_total",
                "Frames a queue received for a peer another queue owns, passed to that queue's worker (the "
                "device's RSS does not place them, or it has none)",
                l, static_cast<double>(p.rx_steered));
      f.counter("lnetr_port_rx_steer_dropped_total",
                "Frames dropped because the owning queue's steering ring was full (its worker is overloaded)", l,
                static_cast<double>(p.rx_steer_dropped));
      for (const status::PortQueue& q : p.per_queue) {
        const L ql{{"port", p.name}, {"queue", std::to_string(q.queue)}};
        f.counter("lnetr_port_queue_rx_frames_total", "Frames the device delivered to the queue", ql,
                  static_cast<double>(q.rx_frames));
        f.counter("lnetr_port_queue_tx_frames_total", "Frames sent on the queue", ql, static_cast<double>(q.tx_frames));
      }
    }
    const status::Socklnd& sock = st.socklnd;
    for (const auto& [reason, n] : sock.closed.by_name)
      f.counter("lnetr_socklnd_connections_closed_total",
                "socklnd connections closed, by reason; protocol or timeout reasons point at a bad or stuck peer",
                {{"reason", reason}}, static_cast<double>(n));
    for (const auto& [reason, n] : sock.refused.by_name)
      f.counter("lnetr_socklnd_connections_refused_total",
                "Incoming connections the acceptor refused, by reason (e.g. bad magic, insecure port)",
                {{"reason", reason}}, static_cast<double>(n));
    // Zero-copy sends on kernel sockets (MSG_ZEROCOPY).
    f.counter("lnetr_socklnd_zero_copy_sends_total",
              "sendmsg calls on kernel sockets that sent payload with MSG_ZEROCOPY", {},
              static_cast<double>(sock.zc_sends));
    f.counter("lnetr_socklnd_zero_copy_copied_total",
              "Of those, calls the kernel reported it copied anyway (a route to a local socket, a device without "
              "scatter-gather, a packet capture)",
              {}, static_cast<double>(sock.zc_copied));
    f.counter("lnetr_socklnd_zero_copy_fallbacks_total",
              "Times a kernel-socket connection went back to copying because the kernel copied anyway or refused "
              "(ENOBUFS); it tries zero copy again after 64 MiB",
              {}, static_cast<double>(sock.zc_fallbacks));
    f.gauge("lnetr_socklnd_zero_copy_draining",
            "Kernel-socket connections closed while the kernel still held zero-copy sends, kept until it lets go "
            "of them (their buffers and credits held meanwhile); lasting non-zero is a fault to report",
            {}, static_cast<double>(sock.zc_draining));
    if (st.o2iblnd) o2iblnd_metrics(f, *st.o2iblnd, exported);
  } catch (const std::exception& e) {
    log("warning", std::string("metrics: unexpected dataplane status document: ") + e.what());
  }
}

// o2iblnd (verbs NIs): connections, rejects and closes by reason, messages
// by type, RDMA and copied bytes, completions, and every connection's
// credits.
void Service::o2iblnd_metrics(Families& f, const status::O2iblnd& ib, const std::set<std::string>& peers) const {
  using L = Families::Labels;
  f.counter("lnetr_o2iblnd_connections_total",
            "o2iblnd connections established, by who connected (active: the router connected)",
            L{{"side", "active"}}, static_cast<double>(ib.conns_connected));
  f.counter("lnetr_o2iblnd_connections_total",
            "o2iblnd connections established, by who connected (active: the router connected)",
            L{{"side", "passive"}}, static_cast<double>(ib.conns_accepted));
  for (const auto& [name, n] : ib.connect_failed.by_name)
    f.counter("lnetr_o2iblnd_connect_failures_total",
              "Attempts to connect to an o2ib peer that failed, by reason; unreachable or no_listener means the "
              "peer's address or its o2iblnd is down, rejected: see lnetr_o2iblnd_rejects_received_total",
              L{{"reason", name}}, static_cast<double>(n));
  for (const auto& [name, n] : ib.closed.by_name)
    f.counter("lnetr_o2iblnd_connections_closed_total",
              "o2iblnd connections closed, by reason; bad_message, bad_credits, stale_message or "
              "unmatched_completion point at a misbehaving peer, timeout at a stuck one, tx_failed at the fabric",
              L{{"reason", name}}, static_cast<double>(n));
  for (const auto& [name, n] : ib.rejects_sent.by_name)
    f.counter("lnetr_o2iblnd_rejects_sent_total",
              "Connection requests the router refused, by o2iblnd reason (CONN_RACE and CONN_STALE are normal "
              "after restarts and races; FATAL and MSG_QUEUE_SIZE mean a peer's settings do not match)",
              L{{"reason", name}}, static_cast<double>(n));
  for (const auto& [name, n] : ib.rejects_received.by_name)
    f.counter("lnetr_o2iblnd_rejects_received_total",
              "The router's connection requests peers refused, by o2iblnd reason (the router retries for "
              "CONN_RACE, CONN_STALE, MSG_QUEUE_SIZE, RDMA_FRAGS and version fallback, not for the others)",
              L{{"reason", name}}, static_cast<double>(n));
  for (const auto& [name, n] : ib.tx_msgs.by_name)
    f.counter("lnetr_o2iblnd_tx_messages_total", "o2iblnd messages sent, by type (NOOP: credit returns and keepalives)",
              L{{"type", name}}, static_cast<double>(n));
  for (const auto& [name, n] : ib.rx_msgs.by_name)
    f.counter("lnetr_o2iblnd_rx_messages_total", "o2iblnd messages received, by type", L{{"type", name}},
              static_cast<double>(n));
  f.counter("lnetr_o2iblnd_rdma_bytes_total",
            "Payload bytes moved by RDMA write: out, the router wrote into peers' sinks; in, peers wrote into "
            "router buffers",
            L{{"direction", "out"}}, static_cast<double>(ib.rdma_bytes_written));
  f.counter("lnetr_o2iblnd_rdma_bytes_total",
            "Payload bytes moved by RDMA write: out, the router wrote into peers' sinks; in, peers wrote into "
            "router buffers",
            L{{"direction", "in"}}, static_cast<double>(ib.rdma_bytes_received));
  f.counter("lnetr_o2iblnd_bytes_copied_total",
            "Payload bytes o2iblnd copied: IMMEDIATE payloads (up to 3,976 bytes each, as Linux copies them) and, "
            "in lnetr_o2iblnd_bytes_bounced_total, memory that was not registered",
            {}, static_cast<double>(ib.bytes_copied));
  f.counter("lnetr_o2iblnd_bytes_bounced_total",
            "Payload bytes copied through o2iblnd's own buffers because their memory was not registered with the "
            "device; non-zero on the router means a zero-copy path failed",
            {}, static_cast<double>(ib.bytes_bounced));
  f.counter("lnetr_o2iblnd_sink_windows_total",
            "Memory windows bound to one router buffer for one transfer (remote_keys: transfer): the keys peers "
            "were given",
            {}, static_cast<double>(ib.sink_windows));
  f.counter("lnetr_o2iblnd_sink_windows_refused_total",
            "Transfers refused (PUT_NAK, or the GET failed) because the connection or the worker had every "
            "memory window in use",
            {}, static_cast<double>(ib.sink_windows_refused));
  f.counter("lnetr_o2iblnd_completions_total", "Work completions the workers polled from their completion queues", {},
            static_cast<double>(ib.completions));
  f.counter("lnetr_o2iblnd_post_failures_total",
            "Work requests the device refused; non-zero closes connections: check the device", {},
            static_cast<double>(ib.post_failures));
  f.counter("lnetr_o2iblnd_tx_timeouts_total",
            "Messages failed after waiting longer than the connect timeout for a connection to their peer", {},
            static_cast<double>(ib.tx_timeouts));
  f.counter("lnetr_o2iblnd_connections_refused_total",
            "Connection requests rejected, or connects not made, because a worker held "
            "dataplane.limits.connections",
            {}, static_cast<double>(ib.conns_refused));
  f.counter("lnetr_o2iblnd_connreqs_rate_limited_total",
            "Connection requests rejected because their address sent more than dataplane.limits.connect_rate a "
            "second",
            {}, static_cast<double>(ib.connreqs_rate_limited));
  if (peers.empty()) return;
  std::map<std::string, int> nth;  // a peer's connections (conns_per_peer), numbered
  for (const status::O2ibConnection& c : o2ib_connections(peers)) {
    const std::string& peer = c.peer;
    if (!peers.contains(peer)) continue;  // per-peer series for the exported peers only
    const L l{{"peer", peer}, {"cpt", std::to_string(c.cpt)}, {"conn", std::to_string(nth[peer]++)}};
    f.gauge("lnetr_o2iblnd_connection_credits",
            "Credits of the o2iblnd connection to the peer (receive buffers it has posted for us); 0 with "
            "messages queued means the peer is slow to return them",
            l, static_cast<double>(c.credits));
    f.gauge("lnetr_o2iblnd_connection_queued", "Messages waiting on the connection for credits or send slots", l,
            static_cast<double>(c.queued));
    f.gauge("lnetr_o2iblnd_connection_rx_held",
            "The peer's messages the router holds without a router buffer (their credits are withheld: "
            "back-pressure on the peer)",
            l, static_cast<double>(c.rx_held));
  }
}

}  // namespace lnetr::control
