// The status ABI between lnetr-dataplane and lnetr-control: every answer on
// the dataplane's control socket (dataplane/control.hpp) is one of the
// records below, defined once for both processes.  The dataplane fills a
// record and encode()s it; lnetr-control parses the answer into the same
// record and reads its members.  A member renamed on one side fails to
// build on the other, not at run time.
//
// On the wire a record is a JSON object (which is also YAML, so people and
// the tests read it too): each member is the key of its name, in the order
// declared (lnetr-control prints some records as they come, and lnetrctl
// keeps the order it is given).  An empty std::optional member is left
// out; when reading, a member that is not optional must be there.
// Counters named by a reason or a type (drops by reason, messages by type)
// are Counts: one key per name, in the dataplane's order.
//
// Every answer carries "version": kStatusVersion besides its record's
// members.  Any change to a record here (a member added, removed, renamed
// or retyped) changes kStatusVersion: both processes are built from one
// tree, and lnetr-control refuses the answers of a dataplane of another
// version (version_error()) rather than misread them.
//
// No DPDK here: lnetr-control includes it.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace lnetr::status {

inline constexpr std::uint32_t kStatusVersion = 3;

// ---- how a record is written and read ---------------------------------------------

// A record lists its members once, as members(record, f): f(key, member)
// for each.  Its JSON both ways (to_json, from_json: lnetr-control's
// documents) and the dataplane's writer (encode) follow that list.
#define LNETR_STATUS_MEMBER(m) f(#m, r.m);
#define LNETR_STATUS_RECORD(Type, ...)                                       \
  template <class R, class F>                                                \
    requires std::same_as<std::remove_const_t<R>, Type>                      \
  void members(R& r, F&& f) {                                                \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(LNETR_STATUS_MEMBER, __VA_ARGS__)) \
  }

namespace detail {

struct AnyMember {
  template <class T>
  void operator()(const char*, T&) const {}
};

}  // namespace detail

template <class R>
concept Record = requires(R& r) { members(r, detail::AnyMember{}); };

// Counters by name (a reason, a message type), in the order the dataplane
// gives them; on the wire {"name": count, ...}.
struct Counts {
  std::vector<std::pair<std::string, std::uint64_t>> by_name;

  void add(std::string name, std::uint64_t n) { by_name.emplace_back(std::move(name), n); }
  bool operator==(const Counts&) const = default;
};

namespace detail {

template <class J, class T>
void put(J& j, const char* key, const T& v) {
  j[key] = v;
}
template <class J, class T>
void put(J& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}
template <class J, class T>
void get(const J& j, const char* key, T& v) {
  j.at(key).get_to(v);
}
template <class J, class T>
void get(const J& j, const char* key, std::optional<T>& v) {
  const auto it = j.find(key);
  if (it == j.end()) v.reset();
  else v = it->template get<T>();
}

// Writes a record's JSON as it walks it, with no document built in between
// (a status with 100,000 peers is 30 MB of text and several times that as
// a document).
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  template <class T>
  void member(bool& first, const char* key, const T& v) {
    out_ += first ? "\"" : ",\"";
    first = false;
    out_ += key;
    out_ += "\":";
    value(v);
  }
  template <class T>
  void member(bool& first, const char* key, const std::optional<T>& v) {
    if (v) member(first, key, *v);
  }

  void value(bool v) { out_ += v ? "true" : "false"; }
  template <std::integral T>
  void value(T v) {
    char buf[24];
    const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
    out_.append(buf, end);
  }
  void value(const std::string& s) {
    const bool plain = std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; });
    if (plain) {
      out_ += '"';
      out_ += s;
      out_ += '"';
    } else {  // escapes, and bytes that are not UTF-8 replaced
      out_ += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  template <class T>
  void value(const std::vector<T>& v) {
    out_ += '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out_ += ',';
      value(v[i]);
    }
    out_ += ']';
  }
  void value(const Counts& c) {
    out_ += '{';
    for (std::size_t i = 0; i < c.by_name.size(); ++i) {
      if (i > 0) out_ += ',';
      value(c.by_name[i].first);
      out_ += ':';
      value(c.by_name[i].second);
    }
    out_ += '}';
  }
  template <Record R>
  void value(const R& r) {
    out_ += '{';
    bool first = true;
    members(r, [&](const char* key, const auto& v) { member(first, key, v); });
    out_ += '}';
  }

 private:
  std::string& out_;
};

}  // namespace detail

template <class J, Record R>
void to_json(J& j, const R& r) {
  j = J::object();
  members(r, [&j](const char* key, const auto& v) { detail::put(j, key, v); });
}
template <class J, Record R>
void from_json(const J& j, R& r) {
  members(r, [&j](const char* key, auto& v) { detail::get(j, key, v); });
}

template <class J>
void to_json(J& j, const Counts& r) {
  j = J::object();
  for (const auto& [name, n] : r.by_name) j[name] = n;
}
template <class J>
void from_json(const J& j, Counts& r) {
  r.by_name.clear();
  for (auto it = j.begin(); it != j.end(); ++it) r.by_name.emplace_back(it.key(), it->template get<std::uint64_t>());
}

// ---- status -------------------------------------------------------------------------

// Routing as Linux's `routing` sysfs and lnetctl show it.
struct Routing {
  std::string state;          // disabled, starting, enabled, stopping
  int enable = 0;             // lnetctl's `enable:` value for it (0, 1, 2 stopping, 3 starting)
  std::int64_t since_s = 0;   // in that state for
  // While not routing, or draining: peers that used the router as a gateway
  // and have not learnt yet that it stopped (a drain waits for them).
  std::optional<std::uint64_t> peers_unaware;
  bool operator==(const Routing&) const = default;
};
LNETR_STATUS_RECORD(Routing, state, enable, since_s, peers_unaware)

// An NI's LND tunables in force: socklnd's (the last three), or o2iblnd's
// (all, clamped as Linux clamps them).
struct LndTunables {
  std::optional<std::uint64_t> peercredits_hiw;
  std::optional<std::uint64_t> map_on_demand;
  std::optional<std::uint64_t> concurrent_sends;
  std::optional<std::uint64_t> ntx;
  std::uint64_t conns_per_peer = 0;
  std::int64_t timeout = 0;
  std::int64_t tos = 0;
  bool operator==(const LndTunables&) const = default;
};
LNETR_STATUS_RECORD(LndTunables, peercredits_hiw, map_on_demand, concurrent_sends, ntx, conns_per_peer, timeout, tos)

struct Ni {
  std::string nid;
  std::string interface;
  std::string transport;   // socket, dpdk, verbs
  std::string status;      // up or down, as lnetctl's net show: its link
  std::string link;        // up or down
  std::string advertised;  // in the router's ping info: also down while no node of its net pings it
  std::uint64_t credits = 0;
  std::uint64_t peer_credits = 0;
  std::uint64_t peer_buffer_credits = 0;
  std::uint64_t peer_timeout = 0;
  std::vector<std::uint32_t> cpts;  // the CPTs whose workers serve its peers
  std::optional<std::string> device;  // an o2ib NI's RDMA device
  LndTunables lnd_tunables;
  bool operator==(const Ni&) const = default;
};
LNETR_STATUS_RECORD(Ni, nid, interface, transport, status, link, advertised, credits, peer_credits,
                    peer_buffer_credits, peer_timeout, cpts, device, lnd_tunables)

// A router buffer pool of one CPT.
struct Pool {
  std::uint64_t npages = 0;
  std::uint64_t nbuffers = 0;
  std::int64_t credits = 0;  // available now; negative: messages wait for a buffer
  std::int64_t mincredits = 0;
  bool operator==(const Pool&) const = default;
};
LNETR_STATUS_RECORD(Pool, npages, nbuffers, credits, mincredits)

// An NI's transmit credits on one CPT.
struct NiTx {
  std::string nid;
  std::int64_t max_tx_credits = 0;
  std::int64_t available_tx_credits = 0;
  std::int64_t min_tx_credits = 0;
  bool operator==(const NiTx&) const = default;
};
LNETR_STATUS_RECORD(NiTx, nid, max_tx_credits, available_tx_credits, min_tx_credits)

// One CPT's router buffers (its pools, as router/forward.hpp's kPoolNames)
// and NI credits.
struct Buffers {
  std::uint32_t cpt = 0;
  Pool tiny;
  Pool small;
  Pool large;
  std::vector<NiTx> ni_tx;
  bool operator==(const Buffers&) const = default;
};
LNETR_STATUS_RECORD(Buffers, cpt, tiny, small, large, ni_tx)

// An NI a discovered peer listed, with the status it gave.
struct DiscoveredNi {
  std::string nid;
  std::string state;  // up or down
  bool operator==(const DiscoveredNi&) const = default;
};
LNETR_STATUS_RECORD(DiscoveredNi, nid, state)

// Discovery of a peer the router forwards to (or that pushed to it): where
// it is, and what the peer's ping info (REPLY or push) last said.
struct PeerDiscovery {
  std::string state;  // pinging, pushing, discovered or failed
  std::uint32_t features = 0;
  std::uint32_t sequence = 0;
  bool pushed = false;  // what it last said came in a push
  std::vector<DiscoveredNi> nis;  // primary first
  std::uint32_t more_nis = 0;
  std::uint64_t pings = 0;
  std::uint64_t pushes_sent = 0;
  std::uint64_t push_acks = 0;
  std::uint64_t pushes_received = 0;
  std::uint64_t failures = 0;
  bool operator==(const PeerDiscovery&) const = default;
};
LNETR_STATUS_RECORD(PeerDiscovery, state, features, sequence, pushed, nis, more_nis, pings, pushes_sent, push_acks,
                    pushes_received, failures)

// A peer NI as one CPT's worker knows it: a peer served by several CPTs
// appears once per CPT (its credits are the owning CPT's).
struct Peer {
  std::string nid;
  std::uint32_t cpt = 0;
  std::string state;  // up or down
  bool multi_rail = false;
  std::int64_t max_ni_tx_credits = 0;
  std::int64_t available_tx_credits = 0;
  std::int64_t min_tx_credits = 0;
  std::int64_t max_rtr_credits = 0;
  std::int64_t available_rtr_credits = 0;
  std::int64_t min_rtr_credits = 0;
  std::uint64_t tx_q_num_of_buf = 0;
  std::uint64_t rtr_q_num_of_buf = 0;
  std::uint64_t send_count = 0;
  std::uint64_t recv_count = 0;
  std::uint64_t drop_count = 0;
  std::uint64_t send_bytes = 0;
  std::uint64_t recv_bytes = 0;
  std::optional<PeerDiscovery> discovery;  // none: never begun
  bool operator==(const Peer&) const = default;
};
LNETR_STATUS_RECORD(Peer, nid, cpt, state, multi_rail, max_ni_tx_credits, available_tx_credits, min_tx_credits,
                    max_rtr_credits, available_rtr_credits, min_rtr_credits, tx_q_num_of_buf, rtr_q_num_of_buf,
                    send_count, recv_count, drop_count, send_bytes, recv_bytes, discovery)

// The workers' counters summed (lnetctl's stats show).
struct Statistics {
  std::uint64_t route_count = 0;
  std::uint64_t route_length = 0;
  std::uint64_t drop_count = 0;
  std::uint64_t drop_length = 0;
  std::uint64_t recv_count = 0;
  std::uint64_t send_count = 0;
  std::uint64_t reroute_count = 0;
  std::uint64_t push_count = 0;
  std::uint64_t ring_waits = 0;
  bool operator==(const Statistics&) const = default;
};
LNETR_STATUS_RECORD(Statistics, route_count, route_length, drop_count, drop_length, recv_count, send_count,
                    reroute_count, push_count, ring_waits)

// A peer table, summed over the workers.
struct PeerTable {
  std::uint64_t peers = 0;    // kept now
  std::uint64_t refused = 0;  // new peers refused while it was full
  std::uint64_t freed = 0;    // freed when idle
  bool operator==(const PeerTable&) const = default;
};
LNETR_STATUS_RECORD(PeerTable, peers, refused, freed)

// The peer tables a remote node can grow (dataplane/counters.hpp's
// kPeerTableNames), and their limit.
struct PeerTables {
  std::uint64_t limit_per_cpt = 0;
  std::uint64_t peer_idle_s = 0;
  PeerTable lnet;
  PeerTable socklnd;
  PeerTable o2iblnd;
  bool operator==(const PeerTables&) const = default;
};
LNETR_STATUS_RECORD(PeerTables, limit_per_cpt, peer_idle_s, lnet, socklnd, o2iblnd)

// socklnd: its connections and sends, summed over the workers.
struct Socklnd {
  std::uint64_t conns_accepted = 0;
  std::uint64_t conns_connected = 0;
  std::uint64_t connect_failures = 0;
  std::uint64_t tx_msgs = 0;
  std::uint64_t tx_writes = 0;
  std::uint64_t zero_copy_min_payload = 0;
  std::uint64_t bytes_copied = 0;
  std::uint64_t bytes_zero_copy = 0;
  std::uint64_t zc_sends = 0;
  std::uint64_t zc_copied = 0;
  std::uint64_t zc_fallbacks = 0;
  std::uint64_t zc_unsupported = 0;
  std::uint64_t zc_nobufs = 0;
  std::uint64_t zc_drains = 0;
  std::uint64_t zc_draining = 0;
  std::uint64_t zc_disconnect_failures = 0;
  Counts closed;   // connections closed, by reason
  Counts refused;  // incoming connections refused, by reason
  bool operator==(const Socklnd&) const = default;
};
LNETR_STATUS_RECORD(Socklnd, conns_accepted, conns_connected, connect_failures, tx_msgs, tx_writes,
                    zero_copy_min_payload, bytes_copied, bytes_zero_copy, zc_sends, zc_copied, zc_fallbacks,
                    zc_unsupported, zc_nobufs, zc_drains, zc_draining, zc_disconnect_failures, closed, refused)

// o2iblnd (only with an o2ib NI): the engines' counters and the verbs
// transports', summed over the workers.
struct O2iblnd {
  std::uint64_t conns_accepted = 0;
  std::uint64_t conns_connected = 0;
  std::uint64_t reconnects = 0;
  Counts connect_failed;    // by reason
  Counts closed;            // by reason
  Counts rejects_sent;      // by o2iblnd reject reason
  Counts rejects_received;  // by o2iblnd reject reason
  Counts tx_msgs;           // by message type
  Counts rx_msgs;           // by message type
  std::uint64_t rx_bytes = 0;
  std::uint64_t tx_bytes = 0;
  std::uint64_t rdma_bytes_written = 0;
  std::uint64_t rdma_bytes_received = 0;
  std::uint64_t bytes_copied = 0;
  std::uint64_t bytes_gathered = 0;
  std::uint64_t bytes_bounced = 0;
  std::uint64_t completions = 0;
  std::uint64_t cq_polls = 0;
  std::uint64_t cm_events = 0;
  std::uint64_t send_posts = 0;
  std::uint64_t recv_posts = 0;
  std::uint64_t post_failures = 0;
  std::uint64_t cq_errors = 0;
  std::uint64_t sink_registrations = 0;
  std::uint64_t sink_registration_ns = 0;
  std::uint64_t sink_windows = 0;
  std::uint64_t sink_windows_refused = 0;
  std::uint64_t windows_allocated = 0;
  std::uint64_t windows_lost = 0;
  std::string remote_keys;  // transfer or pool
  std::uint64_t tx_timeouts = 0;
  std::uint64_t tx_no_desc = 0;
  std::uint64_t tx_descs = 0;
  std::uint64_t conns_refused = 0;
  std::uint64_t connreqs_rate_limited = 0;
  std::uint64_t connections = 0;  // now; each with its credits in O2ibConnections
  bool operator==(const O2iblnd&) const = default;
};
LNETR_STATUS_RECORD(O2iblnd, conns_accepted, conns_connected, reconnects, connect_failed, closed, rejects_sent,
                    rejects_received, tx_msgs, rx_msgs, rx_bytes, tx_bytes, rdma_bytes_written, rdma_bytes_received,
                    bytes_copied, bytes_gathered, bytes_bounced, completions, cq_polls, cm_events, send_posts,
                    recv_posts, post_failures, cq_errors, sink_registrations, sink_registration_ns, sink_windows,
                    sink_windows_refused, windows_allocated, windows_lost, remote_keys, tx_timeouts, tx_no_desc,
                    tx_descs, conns_refused, connreqs_rate_limited, connections)

struct ChecksumOffload {
  bool tx_ipv4 = false;
  bool tx_tcp = false;
  bool rx = false;
  bool operator==(const ChecksumOffload&) const = default;
};
LNETR_STATUS_RECORD(ChecksumOffload, tx_ipv4, tx_tcp, rx)

// What lnetr's TCP counted on a port's connections.
struct Tcp {
  std::uint64_t segments_in = 0;
  std::uint64_t segments_out = 0;
  std::uint64_t retransmits = 0;
  std::uint64_t fast_retransmits = 0;
  std::uint64_t timeouts = 0;
  std::uint64_t lost_retransmits = 0;
  std::uint64_t tail_probes = 0;
  std::uint64_t tail_probe_recoveries = 0;
  std::uint64_t invalid_acks_limited = 0;
  std::uint64_t out_of_order = 0;
  std::uint64_t bytes_reassembled = 0;
  std::uint64_t bytes_reassembled_kept = 0;
  std::uint64_t duplicates = 0;
  bool operator==(const Tcp&) const = default;
};
LNETR_STATUS_RECORD(Tcp, segments_in, segments_out, retransmits, fast_retransmits, timeouts, lost_retransmits,
                    tail_probes, tail_probe_recoveries, invalid_acks_limited, out_of_order, bytes_reassembled,
                    bytes_reassembled_kept, duplicates)

// Frames the port's test impairment (dataplane.ports[].impair) acted on.
struct Impair {
  std::uint64_t dropped = 0;
  std::uint64_t duplicated = 0;
  std::uint64_t reordered = 0;
  std::uint64_t delayed = 0;
  bool operator==(const Impair&) const = default;
};
LNETR_STATUS_RECORD(Impair, dropped, duplicated, reordered, delayed)

// A port's IPv6 neighbour discovery and multicast listening.
struct Nd {
  std::uint64_t solicits_in = 0;   // neighbour solicitations for its addresses
  std::uint64_t adverts_out = 0;   // ... answered
  std::uint64_t solicits_out = 0;  // ... sent to find a neighbour
  std::uint64_t mld_reports_out = 0;  // MLDv2 reports of its solicited-node groups
  bool operator==(const Nd&) const = default;
};
LNETR_STATUS_RECORD(Nd, solicits_in, adverts_out, solicits_out, mld_reports_out)

// One queue of a port, and the worker serving it.
struct PortQueue {
  std::uint64_t queue = 0;
  std::uint64_t worker = 0;
  std::uint64_t rx_frames = 0;
  std::uint64_t tx_frames = 0;
  std::uint64_t rx_steered_out = 0;
  std::uint64_t rx_steered_in = 0;
  std::uint64_t tcp_connections = 0;
  std::uint64_t tcp_segments_in = 0;
  bool operator==(const PortQueue&) const = default;
};
LNETR_STATUS_RECORD(PortQueue, queue, worker, rx_frames, tx_frames, rx_steered_out, rx_steered_in, tcp_connections,
                    tcp_segments_in)

// A DPDK port: the device, and what its queues' stacks counted (summed over
// the workers serving them).
struct Port {
  std::string name;
  std::string device;
  std::string mac;
  std::string link;  // up or down
  std::uint64_t mtu = 0;
  std::uint64_t queues = 0;
  std::uint64_t rx_frames = 0;
  std::uint64_t tx_frames = 0;
  std::uint64_t rx_bytes = 0;
  std::uint64_t tx_bytes = 0;
  std::uint64_t tx_dropped = 0;
  std::uint64_t tx_backlog = 0;
  std::uint64_t rx_multiseg = 0;
  std::uint64_t tcp_connections = 0;
  std::uint64_t bytes_copied = 0;
  bool zero_copy = false;
  std::uint64_t bytes_referenced = 0;
  bool rx_zero_copy = false;
  std::uint64_t rx_bytes_referenced = 0;
  std::uint64_t rx_frames_kept = 0;
  std::uint64_t rx_frames_held = 0;
  std::uint64_t rx_frames_budget = 0;
  std::uint64_t rx_keep_refused = 0;
  std::uint64_t tx_bytes_held = 0;    // small payloads sent from the received frames they lie in, held by the send queue
  std::uint64_t tx_frames_held = 0;   // ... the references to frames taken so
  std::uint64_t tx_hold_refused = 0;  // ... refused: the frame's queue's budget was used up (copied instead)
  std::uint64_t tx_stalls = 0;
  std::uint64_t tx_chained = 0;
  std::uint64_t csum_odd_chains = 0;
  ChecksumOffload checksum_offload;
  bool tso = false;
  std::uint64_t tso_frames = 0;
  std::uint64_t tso_segments = 0;
  std::uint64_t tso_cut_here = 0;
  bool lro = false;                  // the device joins received segments (large receive offload)
  std::uint64_t rx_lro = 0;          // frames it joined from several segments
  std::uint64_t large_segments_in = 0;  // TCP segments received with more than an MTU's payload
  std::uint64_t rx_chained = 0;      // frames received in a chain of buffers, payload left where it lies
  std::uint64_t rx_chain_buffers = 0;  // ... the buffers they came in
  std::uint64_t csum_offloaded = 0;
  std::uint64_t csum_verified = 0;
  std::uint64_t arp_requests_in = 0;
  std::uint64_t arp_replies_out = 0;
  std::uint64_t arp_requests_out = 0;
  Nd nd;  // IPv6
  std::uint64_t icmp_echo_replies = 0;
  std::uint64_t resets_out = 0;
  std::uint64_t dropped_malformed = 0;
  std::uint64_t dropped_not_ours = 0;
  std::uint64_t dropped_unresolved = 0;
  std::uint64_t dropped_overload = 0;
  std::uint64_t tcp_half_open = 0;
  std::uint64_t syncookies_sent = 0;
  std::uint64_t syncookies_accepted = 0;
  std::uint64_t syncookies_refused = 0;
  Tcp tcp;
  Impair impair;
  bool rss = false;  // the device steers peers to their queues itself
  std::uint64_t rx_steered = 0;  // frames passed to another queue's worker
  std::uint64_t rx_steer_dropped = 0;
  std::vector<PortQueue> per_queue;
  bool operator==(const Port&) const = default;
};
LNETR_STATUS_RECORD(Port, name, device, mac, link, mtu, queues, rx_frames, tx_frames, rx_bytes, tx_bytes, tx_dropped,
                    tx_backlog, rx_multiseg, tcp_connections, bytes_copied, zero_copy, bytes_referenced,
                    rx_zero_copy, rx_bytes_referenced, rx_frames_kept, rx_frames_held, rx_frames_budget,
                    rx_keep_refused, tx_bytes_held, tx_frames_held, tx_hold_refused, tx_stalls, tx_chained, csum_odd_chains, checksum_offload, tso, tso_frames,
                    tso_segments, tso_cut_here, lro, rx_lro, large_segments_in, rx_chained, rx_chain_buffers,
                    csum_offloaded, csum_verified, arp_requests_in, arp_replies_out,
                    arp_requests_out, nd, icmp_echo_replies, resets_out, dropped_malformed, dropped_not_ours,
                    dropped_unresolved, dropped_overload, tcp_half_open, syncookies_sent, syncookies_accepted,
                    syncookies_refused, tcp, impair, rss, rx_steered, rx_steer_dropped, per_queue)

// A worker (one per CPT): its loop, rings and route snapshot.
struct Worker {
  std::uint64_t cpt = 0;
  std::uint64_t core = 0;
  std::uint64_t loops = 0;
  std::uint64_t busy_loops = 0;
  std::uint64_t cycles = 0;  // TSC cycles (Status::tsc_hz)
  std::uint64_t busy_cycles = 0;
  std::uint64_t cpu_ns = 0;
  std::uint64_t route_count = 0;
  std::uint64_t route_length = 0;
  std::uint64_t bytes_copied = 0;
  std::uint64_t bytes_referenced = 0;
  std::uint64_t rx_bytes_referenced = 0;
  std::uint64_t ring_size = 0;     // each of its inbound rings
  std::uint64_t ring_backlog = 0;  // waiting in them now
  bool status_answered = false;    // false: it was slow, its last counters are shown
  std::uint64_t conns_misplaced = 0;
  std::uint64_t conns_opened = 0;
  std::uint64_t rx_msgs = 0;
  std::uint64_t tx_msgs = 0;
  std::uint64_t route_version = 0;
  std::uint64_t route_snapshots_adopted = 0;
  std::uint64_t route_snapshots_rejected = 0;
  bool operator==(const Worker&) const = default;
};
LNETR_STATUS_RECORD(Worker, cpt, core, loops, busy_loops, cycles, busy_cycles, cpu_ns, route_count, route_length,
                    bytes_copied, bytes_referenced, rx_bytes_referenced, ring_size, ring_backlog, status_answered,
                    conns_misplaced, conns_opened, rx_msgs, tx_msgs, route_version, route_snapshots_adopted,
                    route_snapshots_rejected)

// The answer to `status`.
struct Status {
  Routing routing;
  int drop_asym_route = 0;
  std::uint64_t control_clients_timed_out = 0;
  std::uint64_t tsc_hz = 0;  // the rate of the workers' cycles
  std::vector<Ni> nis;
  std::vector<Buffers> buffers;  // per CPT
  std::vector<Peer> peers;
  Statistics statistics;
  Counts drops;  // by reason (router/forward.hpp's DropReason)
  PeerTables peer_tables;
  Socklnd socklnd;
  std::optional<O2iblnd> o2iblnd;
  std::vector<Port> ports;
  std::vector<Worker> workers;
  bool operator==(const Status&) const = default;
};
LNETR_STATUS_RECORD(Status, routing, drop_asym_route, control_clients_timed_out, tsc_hz, nis, buffers, peers,
                    statistics, drops, peer_tables, socklnd, o2iblnd, ports, workers)

// ---- the other answers ----------------------------------------------------------------

// `o2ib connections [NID...]`: each connection with its credits.
struct O2ibConnection {
  std::string peer;
  std::uint64_t cpt = 0;
  std::uint64_t version = 0;  // o2iblnd protocol version
  bool active = false;        // the router connected
  std::uint64_t queue_depth = 0;
  std::uint64_t max_frags = 0;
  std::int64_t credits = 0;
  std::int64_t reserved_credits = 0;
  std::int64_t outstanding_credits = 0;
  std::int64_t sends_posted = 0;
  std::uint64_t queued = 0;
  std::uint64_t waiting = 0;
  std::uint64_t rx_held = 0;
  std::uint64_t tx_msgs = 0;
  std::uint64_t rx_msgs = 0;
  bool operator==(const O2ibConnection&) const = default;
};
LNETR_STATUS_RECORD(O2ibConnection, peer, cpt, version, active, queue_depth, max_frags, credits, reserved_credits,
                    outstanding_credits, sends_posted, queued, waiting, rx_held, tx_msgs, rx_msgs)

struct O2ibConnections {
  std::vector<O2ibConnection> connections;
  bool operator==(const O2ibConnections&) const = default;
};
LNETR_STATUS_RECORD(O2ibConnections, connections)

// `routing 0|1`: the state it is in now.
struct RoutingSet {
  std::string routing;
  int enable = 0;
  bool operator==(const RoutingSet&) const = default;
};
LNETR_STATUS_RECORD(RoutingSet, routing, enable)

// `drop_asym_route [0|1]`.
struct DropAsymRoute {
  int drop_asym_route = 0;
  bool operator==(const DropAsymRoute&) const = default;
};
LNETR_STATUS_RECORD(DropAsymRoute, drop_asym_route)

// `lnet_fault add RULE`.
struct FaultAdded {
  std::uint64_t id = 0;
  std::string rule;
  std::optional<std::string> warning;  // a worker was slow to take it
  bool operator==(const FaultAdded&) const = default;
};
LNETR_STATUS_RECORD(FaultAdded, id, rule, warning)

// `lnet_fault del ID|all`.
struct FaultsDeleted {
  std::uint64_t deleted = 0;
  std::optional<std::string> warning;
  bool operator==(const FaultsDeleted&) const = default;
};
LNETR_STATUS_RECORD(FaultsDeleted, deleted, warning)

// A fault rule and what it did, summed over the workers: the one of
// dropped, delayed, corrupted its kind names.
struct FaultCounts {
  std::uint64_t id = 0;
  std::string kind;  // drop, delay, corrupt (router/lnet_fault.hpp)
  std::string rule;
  Counts matched;  // by LNet message type
  std::optional<std::uint64_t> dropped;
  std::optional<std::uint64_t> delayed;
  std::optional<std::uint64_t> corrupted;
  bool operator==(const FaultCounts&) const = default;
};
LNETR_STATUS_RECORD(FaultCounts, id, kind, rule, matched, dropped, delayed, corrupted)

// `lnet_fault list|reset`: the rules in force.
struct FaultList {
  std::vector<FaultCounts> faults;
  std::uint64_t held = 0;  // messages delayed now
  bool operator==(const FaultList&) const = default;
};
LNETR_STATUS_RECORD(FaultList, faults, held)

// `capture start|stop|show`: the capture of the DPDK ports' frames into
// a pcapng file (dataplane/capture.hpp).
struct CaptureState {
  std::string state;                // running, or off
  std::optional<std::string> port;  // only this port's frames (its name), else every port's
  std::optional<std::string> host;  // only frames to or from this IPv4 address
  std::uint64_t count = 0;          // frames after which it stops itself (0: until stopped)
  std::uint64_t frames = 0;         // frames written to the file
  std::uint64_t bytes = 0;          // bytes written to the file
  std::uint64_t dropped = 0;        // frames that matched but are not in the file: no buffer to copy
                                    // them into, a worker's ring full, or the file refused them
  std::optional<std::string> stopped;  // why it stopped itself: the count reached, or the file's error
  bool operator==(const CaptureState&) const = default;
};
LNETR_STATUS_RECORD(CaptureState, state, port, host, count, frames, bytes, dropped, stopped)

// `buffers tiny|small|large N`: a router buffer pool resized at run time.
struct BuffersSet {
  std::string pool;            // tiny, small or large
  std::uint64_t total = 0;     // over all CPTs, as set (0 given: the default)
  std::uint64_t per_cpt = 0;   // what each CPT's pool is to have
  std::optional<std::string> warning;
  bool operator==(const BuffersSet&) const = default;
};
LNETR_STATUS_RECORD(BuffersSet, pool, total, per_cpt, warning)

// `net add DOC` / `net del NID` / `net set ...`: NIs added, deleted or
// retuned at run time.
struct NetChange {
  std::string action;              // added, deleted or set
  std::vector<std::string> nids;   // the NIs
  std::uint64_t dropped = 0;       // deleted: messages dropped as ni_deleted so far, all NIs
  std::vector<std::string> warnings;  // the configuration's, "file:line:column: field: message"
  bool operator==(const NetChange&) const = default;
};
LNETR_STATUS_RECORD(NetChange, action, nids, dropped, warnings)

// `fault stall WORKER SECONDS` (tests only).
struct Stalled {
  std::uint64_t stalled = 0;  // the worker
  std::uint64_t seconds = 0;
  bool operator==(const Stalled&) const = default;
};
LNETR_STATUS_RECORD(Stalled, stalled, seconds)

// A request refused: a negative errno and why ({"errno": .., "descr": ..}).
struct Error {
  int err = 0;
  std::string descr;
  bool operator==(const Error&) const = default;
};
template <class R, class F>
  requires std::same_as<std::remove_const_t<R>, Error>
void members(R& r, F&& f) {
  f("errno", r.err);  // (errno is a macro: no member of that name)
  f("descr", r.descr);
}

#undef LNETR_STATUS_RECORD
#undef LNETR_STATUS_MEMBER

// ---- the envelope ---------------------------------------------------------------------

// An answer as the dataplane sends it: {"version": kStatusVersion, the
// record's members...} and a newline.
template <Record Answer>
std::string encode(const Answer& answer) {
  std::string out = "{\"version\":" + std::to_string(kStatusVersion);
  detail::Writer w(out);
  bool first = false;
  members(answer, [&](const char* key, const auto& v) { w.member(first, key, v); });
  out += "}\n";
  return out;
}

// Why an answer cannot be read as the records here say (it is of another
// status version, or carries none: the text names both versions), or
// nothing.  Checked before its record, or its error, is read.
template <class J>
std::optional<std::string> version_error(const J& answer) {
  std::uint64_t v = 0;
  if (answer.is_object()) {
    const auto it = answer.find("version");
    if (it != answer.end() && it->is_number_unsigned()) v = it->template get<std::uint64_t>();
  }
  if (v == kStatusVersion) return std::nullopt;
  return "lnetr-dataplane answers in status version " + (v == 0 ? std::string("0 (none given)") : std::to_string(v)) +
         ", lnetr-control reads version " + std::to_string(kStatusVersion) +
         ": run the two from the same lnetr release (restart the one left from an older one)";
}

}  // namespace lnetr::status
