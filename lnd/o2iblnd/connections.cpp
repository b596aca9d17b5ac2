// The o2iblnd engine's connection manager: connecting and accepting (CONNREQ
// and CONNACK over rdma_cm), queue pairs and their receive buffers, rejects
// both ways, races and reconnects, and a connection's close down to its reaping.
#include "lnd/o2iblnd/engine_internal.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace lnetr::o2ib {

// ---- connections ---------------------------------------------------------------------------

std::size_t Node::max_conns_per_peer(const LocalNi& ni) noexcept {
  return 2u * std::max<std::uint32_t>(ni.tunables.conns_per_peer, 1) + 2u;
}

std::chrono::milliseconds Node::connreq_timeout(const LocalNi& ni) const noexcept {
  return std::max<std::chrono::milliseconds>(kResolveTimeout, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                  ni.tunables.timeout) / 4);
}

Conn* Node::new_conn(Peer& p) {
  auto* c = new Conn();
  c->peer = &p;
  ++p.conn_refs;
  return c;
}

void Node::free_conn(Conn* c) {
  if (c->peer != nullptr) --c->peer->conn_refs;
  std::free(c->rx_mem);
  delete c;
}

void Node::connect_peer(Peer& p) {
  const LocalNi* ni = p.ni;
  if (conns_.size() >= opts_.max_conns) {  // dataplane.limits.connections
    ++stats_.conns_refused;
    peer_connect_failed(p, true, -EMFILE);
    return;
  }
  Conn* c = new_conn(p);
  c->ni = ni;
  c->dev = device_of(ni);
  c->active = true;
  c->state = ConnState::resolving;
  int err = 0;
  CmId* id = ni->transport->resolve(ni->nid.addr4(), p.nid.addr4(), opts_.service, opts_.use_privileged_port,
                                    ni->tunables.tos, err);
  if (!id) {
    free_conn(c);
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::unreachable)];
    peer_connect_failed(p, true, err ? err : -EHOSTUNREACH);
    return;
  }
  c->id = id;
  id->context = c;
  c->connect_started = clock_();
  c->index = conns_.size();
  conns_.push_back(c);
}

void Node::on_resolved(CmId* id, int status) {
  auto* c = static_cast<Conn*>(id->context);
  if (!c || c->state != ConnState::resolving) return;
  if (status != 0) {
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::unreachable)];
    connreq_done(c, status);
    return;
  }
  active_connect(c);
}

// The queue pair and receive buffers of `c` (queue depth lowered until the
// device can make it, as Linux does).  False: none could be made.
bool Node::make_qp(Conn* c) {
  Peer& p = *c->peer;
  if (p.queue_depth_mod && p.queue_depth_mod < c->queue_depth) c->queue_depth = p.queue_depth_mod;
  Transport* tr = c->dev->tr;
  for (;;) {
    QpCaps caps;
    caps.max_send_wr = (1u + c->max_frags) * c->queue_depth;
    caps.max_recv_wr = rx_msgs(c->queue_depth, c->version);
    caps.max_send_sge = std::min(kMaxSge, tr->max_send_sge());
    // PUT_ACK sinks are at most queue_depth (each holds its PUT_REQ's
    // credit until PUT_DONE); GETs the router sends hold a sink until
    // GET_DONE, at most the NI's peer_credits of them (LNet's credits to
    // the peer); twice that, for windows still being invalidated.
    caps.max_sinks = 2u * (c->queue_depth + static_cast<std::uint32_t>(c->ni->tunables.peer_credits));
    const int rc = tr->create_qp(c->id, caps);
    if (rc == 0) {
      c->max_send_wr = caps.max_send_wr;
      break;
    }
    if (rc != -ENOMEM || c->queue_depth < 2) return false;
    --c->queue_depth;
  }
  if (!p.queue_depth_mod && c->queue_depth != p.queue_depth) p.queue_depth_mod = c->queue_depth;
  const std::uint32_t n = rx_msgs(c->queue_depth, c->version);
  auto& slabs = c->dev->rx_slabs;
  if (auto it = std::find_if(slabs.begin(), slabs.end(), [n](const Device::RxSlab& r) { return r.msgs == n; });
      it != slabs.end()) {
    c->rx_mem = it->mem;
    c->rx_region = it->region;
    c->dev->rx_slab_bytes -= std::size_t{n} * kMaxMsgSize;
    *it = slabs.back();
    slabs.pop_back();
    ++stats_.rx_slabs_reused;
  } else {
    c->rx_mem = static_cast<std::uint8_t*>(std::aligned_alloc(4096, std::size_t{n} * kMaxMsgSize));
    if (!c->rx_mem) return false;
    if (!tr->register_memory(c->rx_mem, std::size_t{n} * kMaxMsgSize, false, c->rx_region)) return false;
  }
  c->rx_registered = true;
  c->rxs.resize(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    c->rxs[i].conn = c;
    c->rxs[i].buf = c->rx_mem + std::size_t{i} * kMaxMsgSize;
  }
  for (RxDesc& rx : c->rxs) {
    post_rx(&rx, PostCredit::none);
    if (!rx.posted) return false;
  }
  return true;
}

// Linux's kiblnd_active_connect.
void Node::active_connect(Conn* c) {
  Peer& p = *c->peer;
  c->version = p.version ? p.version : kVersion2;
  c->queue_depth = p.queue_depth;
  c->max_frags = p.max_frags;
  if (!make_qp(c)) {
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::no_resources)];
    connreq_done(c, -ENOMEM);
    return;
  }
  Msg m;
  m.hdr.version = c->version;
  m.hdr.type = MsgType::connreq;
  m.hdr.srcnid = c->ni->nid;
  m.hdr.srcstamp = incarnation_;
  m.hdr.dstnid = p.nid;
  m.hdr.dststamp = p.incarnation;
  m.body = ConnParams{c->queue_depth, c->max_frags, kMaxMsgSize};
  auto r = encode_msg(m, c->conn_msg, kNativeOrder, opts_.cksum ? Checksum::on : Checksum::off);
  assert(r);
  ConnectParams cp;
  cp.private_data = ByteSpan(c->conn_msg.data(), r ? *r : 0);
  cp.retry_count = opts_.retry_count;
  cp.rnr_retry_count = opts_.rnr_retry_count;
  c->state = ConnState::active_connect;
  c->connect_started = clock_();
  c->last_send = c->connect_started;
  ++stats_.tx_msgs[type_slot(MsgType::connreq)];
  const int rc = c->dev->tr->connect(c->id, cp);
  if (rc != 0) {
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::connect_error)];
    connreq_done(c, rc);
  }
}

// Linux's kiblnd_passive_connect: judge a request (o2iblnd.md §4.2, in
// that order) and accept or reject it.
void Node::accept_request(ConnRequest&& r) {
  ++stats_.rx_msgs[type_slot(MsgType::connreq)];
  const ByteSpan priv = r.private_data();
  const LocalNi* listener = nullptr;
  for (const LocalNi& ni : nis_)
    if (!ni.deleted && ni.nid.addr4() == r.local_ip) listener = &ni;
  // (An NI deleted since the request was taken: refused on its own transport.)
  Transport* tr = r.via ? r.via : listener ? listener->transport : first_transport();
  Reject rej;
  rej.magic = kIbMagic;
  rej.why = RejectReason::fatal;
  rej.version = kVersion2;
  std::uint16_t version = kVersion2;
  const LocalNi* ni = nullptr;

  auto refuse = [&](RejectReason why) {
    rej.why = why;
    rej.version = version;
    rej.incarnation = ni ? incarnation_ : 0;
    rej.cp = ConnParams{0, 0, kMaxMsgSize};
    if (ni) {
      rej.cp->queue_depth = static_cast<std::uint16_t>(msg_queue_size(version, *ni));
      rej.cp->max_frags = kMaxRdmaFrags;
    }
    std::array<std::uint8_t, kRejectSize> out{};
    (void)encode_reject(rej, out, kNativeOrder);
    ++stats_.rejects_sent[static_cast<std::size_t>(why) < kRejectSlots ? static_cast<std::size_t>(why) : 0];
    if (tr) {
      tr->reject(r.id, ByteSpan(out.data(), out.size()));
      tr->destroy(r.id);
    }
  };

  // A storm of requests from one address: rejected before anything is
  // decoded or made for it (a kernel peer retries later).
  const std::array<std::uint8_t, 4> source{static_cast<std::uint8_t>(r.remote_ip >> 24),
                                           static_cast<std::uint8_t>(r.remote_ip >> 16),
                                           static_cast<std::uint8_t>(r.remote_ip >> 8),
                                           static_cast<std::uint8_t>(r.remote_ip)};
  if (!connreq_rate_.allow(source, clock_())) {
    ++stats_.connreqs_rate_limited;
    return refuse(RejectReason::no_resources);
  }
  if (opts_.require_privileged_port && r.remote_port >= 1024) return refuse(RejectReason::fatal);
  if (priv.size() < 6) return refuse(RejectReason::fatal);
  if (is_protocol_probe(priv)) return refuse(RejectReason::fatal);
  auto dm = decode_msg(priv);
  if (!dm) return refuse(RejectReason::fatal);
  const MsgHeader& h = dm->msg.hdr;
  ni = ni_by_nid(h.dstnid);
  if (!ni) {
    // Not (yet) one of ours: too early if an NI on this device is not up.
    for (const LocalNi& other : nis_)
      if (!other.deleted && other.transport == tr && !other.ready) return refuse(RejectReason::early);
  }
  if (!ni || !listener || ni->transport != listener->transport) {
    ni = nullptr;
    return refuse(RejectReason::fatal);
  }
  if (!ni->ready) return refuse(RejectReason::early);
  if (h.dststamp != 0 && h.dststamp != incarnation_) return refuse(RejectReason::conn_stale);
  version = h.version;
  if (h.type != MsgType::connreq) return refuse(RejectReason::fatal);
  const ConnParams& cp = *dm->msg.connparams();
  if (cp.queue_depth > msg_queue_size(version, *ni))
    return refuse(version == kVersion2 ? RejectReason::msg_queue_size : RejectReason::fatal);
  if (cp.max_frags > kMaxRdmaFrags) return refuse(version >= kVersion2 ? RejectReason::rdma_frags : RejectReason::fatal);
  // (A peer offering fewer fragments is fine: our sinks are one fragment.)
  if (cp.max_msg_size > kMaxMsgSize) return refuse(RejectReason::fatal);
  if (cp.queue_depth == 0) return refuse(RejectReason::fatal);

  if (!has_room(h.srcnid)) return refuse(RejectReason::no_resources);
  if (conns_.size() >= opts_.max_conns) {
    ++stats_.conns_refused;
    return refuse(RejectReason::no_resources);
  }
  Peer& p = peer(h.srcnid, ni);
  if (p.linked) {
    if (p.version == 0) {
      p.version = version;
      p.incarnation = h.srcstamp;
    }
    if (p.incarnation != h.srcstamp || p.version != version) {
      // Not the node I have been talking to: it restarted.
      close_peer_conns(p, CloseReason::stale_peer, -ESTALE);
      if (p.linked) {
        p.incarnation = h.srcstamp;
        p.version = version;
      }
      return refuse(RejectReason::conn_stale);
    }
    // Its connections: conns_per_peer, and room for those a reconnect or a
    // race replaces until they are closed.  More is a peer opening
    // connections for their own sake.
    if (p.conns.size() >= max_conns_per_peer(*ni)) {
      ++stats_.conns_refused;
      return refuse(RejectReason::no_resources);
    }
    // A connection race: the higher NID hash keeps its own connection, unless
    // it keeps losing (the other side may be stuck connecting).
    if (p.connecting != 0 && nidhash(h.srcnid) < nidhash(ni->nid) && p.races < kMaxConnRaces) {
      ++p.races;
      return refuse(RejectReason::conn_race);
    }
    p.reconnecting = 0;
    p.races = 0;
    ++p.accepting;
    p.max_frags = cp.max_frags;
    p.queue_depth = cp.queue_depth;
  } else {
    link(p);
    p.accepting = 1;
    p.version = version;
    p.incarnation = h.srcstamp;
    p.max_frags = cp.max_frags;
    p.queue_depth = cp.queue_depth;
  }

  Conn* c = new_conn(p);
  c->ni = ni;
  c->dev = device_of(ni);
  c->id = r.id;
  r.id->context = c;
  c->active = false;
  c->version = version;
  c->queue_depth = p.queue_depth;
  c->max_frags = p.max_frags;
  c->state = ConnState::passive_wait;
  c->connect_started = clock_();
  c->index = conns_.size();
  conns_.push_back(c);
  if (!make_qp(c)) {
    // (Not rejected through refuse(): the identifier is the connection's now.)
    rej.why = RejectReason::no_resources;
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::no_resources)];
    send_reject_for(c, RejectReason::no_resources, version);
    connreq_done(c, -ENOMEM);
    return;
  }
  c->incarnation = h.srcstamp;
  c->credits = c->queue_depth;
  c->reserved_credits = c->queue_depth;

  Msg ack;
  ack.hdr.version = version;
  ack.hdr.type = MsgType::connack;
  ack.hdr.srcnid = ni->nid;
  ack.hdr.srcstamp = incarnation_;
  ack.hdr.dstnid = h.srcnid;
  ack.hdr.dststamp = h.srcstamp;
  ack.body = ConnParams{c->queue_depth, c->max_frags, kMaxMsgSize};
  auto n = encode_msg(ack, c->conn_msg, kNativeOrder, opts_.cksum ? Checksum::on : Checksum::off);
  assert(n);
  ConnectParams params;
  params.private_data = ByteSpan(c->conn_msg.data(), n ? *n : 0);
  params.retry_count = opts_.retry_count;
  params.rnr_retry_count = opts_.rnr_retry_count;
  ++stats_.tx_msgs[type_slot(MsgType::connack)];
  const int rc = c->dev->tr->accept(c->id, params);
  if (rc != 0) {
    send_reject_for(c, RejectReason::fatal, version);
    connreq_done(c, rc);
  }
}

void Node::refuse_request(ConnRequest&& r, RejectReason why) {
  const LocalNi* listener = nullptr;
  for (const LocalNi& ni : nis_)
    if (!ni.deleted && ni.nid.addr4() == r.local_ip) listener = &ni;
  if (!listener)
    for (const LocalNi& ni : nis_)
      if (!ni.deleted && listener == nullptr) listener = &ni;
  Transport* tr = r.via ? r.via : listener ? listener->transport : nullptr;
  if (!tr) return;
  Reject rej;
  rej.magic = kIbMagic;
  rej.version = kVersion2;
  rej.why = why;
  rej.incarnation = incarnation_;
  const std::uint32_t depth = listener ? listener->tunables.peer_credits : effective(NiTunables{}).peer_credits;
  rej.cp = ConnParams{static_cast<std::uint16_t>(depth), kMaxRdmaFrags, kMaxMsgSize};
  std::array<std::uint8_t, kRejectSize> out{};
  (void)encode_reject(rej, out, kNativeOrder);
  ++stats_.rejects_sent[static_cast<std::size_t>(why) < kRejectSlots ? static_cast<std::size_t>(why) : 0];
  tr->reject(r.id, ByteSpan(out.data(), out.size()));
  tr->destroy(r.id);
}

void Node::send_reject_for(Conn* c, RejectReason why, std::uint16_t version) {
  Reject rej;
  rej.magic = kIbMagic;
  rej.version = version;
  rej.why = why;
  rej.incarnation = incarnation_;
  rej.cp = ConnParams{static_cast<std::uint16_t>(msg_queue_size(version, *c->ni)), kMaxRdmaFrags, kMaxMsgSize};
  std::array<std::uint8_t, kRejectSize> out{};
  (void)encode_reject(rej, out, kNativeOrder);
  ++stats_.rejects_sent[static_cast<std::size_t>(why)];
  c->dev->tr->reject(c->id, ByteSpan(out.data(), out.size()));
}

std::uint32_t Node::msg_queue_size(std::uint16_t version, const LocalNi& ni) const noexcept {
  return version == kVersion1 ? 8u : ni.tunables.peer_credits;
}

void Node::on_established(CmId* id, ByteSpan private_data) {
  auto* c = static_cast<Conn*>(id->context);
  if (!c) return;
  if (c->state == ConnState::passive_wait) {
    connreq_done(c, 0);
  } else if (c->state == ConnState::active_connect) {
    check_connreply(c, private_data);
  }
}

// Linux's kiblnd_check_connreply.
void Node::check_connreply(Conn* c, ByteSpan priv) {
  ++stats_.rx_msgs[type_slot(MsgType::connack)];
  auto dm = decode_msg(priv);
  int rc = 0;
  if (!dm) {
    rc = -EPROTO;
  } else {
    const MsgHeader& h = dm->msg.hdr;
    const ConnParams* cp = dm->msg.connparams();
    if (h.type != MsgType::connack || !cp || h.version != c->version || cp->queue_depth > c->queue_depth ||
        cp->max_frags > c->max_frags || cp->max_msg_size > kMaxMsgSize || cp->queue_depth == 0) {
      rc = -EPROTO;
    } else if (h.dstnid != c->ni->nid || h.dststamp != incarnation_) {
      rc = -ESTALE;
    } else {
      c->incarnation = h.srcstamp;
      c->credits = cp->queue_depth;
      c->reserved_credits = cp->queue_depth;
      c->queue_depth = cp->queue_depth;
      c->max_frags = cp->max_frags;
    }
  }
  if (rc != 0) {
    // The queue pair is up already: established, then torn down at once.
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::bad_connack)];
    c->comms_error = rc;
    c->close_reason = CloseReason::bad_connack;
  }
  connreq_done(c, 0);
}

void Node::on_rejected(CmId* id, RejectKind kind, ByteSpan priv) {
  auto* c = static_cast<Conn*>(id->context);
  if (!c) return;
  if (c->state == ConnState::passive_wait) {
    connreq_done(c, -ECONNRESET);
  } else if (c->state == ConnState::active_connect) {
    rejected(c, kind, priv);
  }
}

// Linux's kiblnd_rejected: the connecting side's reactions (§4.4).
void Node::rejected(Conn* c, RejectKind kind, ByteSpan priv) {
  int status = -ECONNREFUSED;
  ConnectFailure why_failed = ConnectFailure::rejected;
  switch (kind) {
    case RejectKind::stale_conn:
      check_reconnect(c, kVersion2, 0, RejectReason::conn_stale, nullptr);
      break;
    case RejectKind::invalid_service_id:
      status = -EHOSTUNREACH;
      why_failed = ConnectFailure::no_listener;
      break;
    case RejectKind::consumer: {
      auto dr = decode_reject(priv);
      if (!dr) break;  // not an o2iblnd or LNet reject: fatal
      Reject& rej = dr->rej;
      const std::size_t slot = static_cast<std::size_t>(rej.why) < kRejectSlots ? static_cast<std::size_t>(rej.why) : 0;
      ++stats_.rejects_received[slot];
      // Without the full reject (a V1 peer) the incarnation is "unknown"
      // (-1), so that an upgraded peer sees the stale stamp.
      const std::uint64_t incarnation = rej.cp ? rej.incarnation.value_or(0) : ~std::uint64_t{0};
      if (rej.version != kVersion1 && rej.version != kVersion2) break;
      if (rej.why == RejectReason::fatal && rej.version == kVersion1 && c->version != kVersion1)
        rej.why = RejectReason::conn_uncompat;
      switch (rej.why) {
        case RejectReason::conn_race:
        case RejectReason::conn_stale:
        case RejectReason::conn_uncompat:
        case RejectReason::msg_queue_size:
        case RejectReason::rdma_frags:
          check_reconnect(c, rej.version, incarnation, rej.why, rej.cp ? &*rej.cp : nullptr);
          break;
        default:
          break;
      }
      break;
    }
    case RejectKind::other:
      break;
  }
  ++stats_.connect_failed[static_cast<std::size_t>(why_failed)];
  connreq_done(c, status);
}

// Linux's kiblnd_check_reconnect: retry if the peer is still wanted and
// nothing else is under way, with what the reject taught us.
void Node::check_reconnect(Conn* c, std::uint16_t version, std::uint64_t incarnation, RejectReason why,
                           const ConnParams* cp) {
  Peer& p = *c->peer;
  const bool wanted = (!p.tx_queue.empty() || p.version != version) && p.connecting > 0 && p.accepting == 0;
  if (!wanted) return;
  switch (why) {
    case RejectReason::rdma_frags:
      if (!cp || c->max_frags <= cp->max_frags) return;
      p.max_frags = cp->max_frags;
      break;
    case RejectReason::msg_queue_size:
      if (!cp || c->queue_depth <= cp->queue_depth) return;
      p.queue_depth = cp->queue_depth;
      break;
    default:
      break;
  }
  c->reconnect = true;
  ++p.reconnecting;
  p.version = version;
  if (incarnation != 0) p.incarnation = incarnation;
}

void Node::on_connect_error(CmId* id, int status) {
  auto* c = static_cast<Conn*>(id->context);
  if (!c) return;
  if (c->state == ConnState::resolving) {
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::unreachable)];
    connreq_done(c, status ? status : -EHOSTUNREACH);
  } else if (c->state == ConnState::active_connect || c->state == ConnState::passive_wait) {
    ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::connect_error)];
    connreq_done(c, -ENETDOWN);
  }
}

void Node::on_disconnected(CmId* id) {
  auto* c = static_cast<Conn*>(id->context);
  if (!c) return;
  if (c->state < ConnState::established) {
    if (c->state == ConnState::active_connect)
      ++stats_.connect_failed[static_cast<std::size_t>(ConnectFailure::connect_error)];
    connreq_done(c, -ECONNRESET);
  } else if (c->state == ConnState::established) {
    close_conn(c, CloseReason::peer_disconnected, 0);
  }
}

// Linux's kiblnd_connreq_done.
void Node::connreq_done(Conn* c, int status) {
  Peer& p = *c->peer;
  const bool active = c->active;
  if (status != 0) {
    peer_connect_failed(p, active, status);
    finalise(c);
    return;
  }
  c->state = ConnState::established;
  c->last_send = clock_();
  p.last_alive = c->last_send;
  p.conns.push_back(c);
  p.reconnected = 0;
  if (active) {
    --p.connecting;
    ++stats_.conns_connected;
  } else {
    --p.accepting;
    ++stats_.conns_accepted;
  }
  if (p.version == 0) {
    p.version = c->version;
    p.incarnation = c->incarnation;
  }
  if (p.version != c->version || p.incarnation != c->incarnation) {
    close_stale_conns(p, c->version, c->incarnation);
    p.version = c->version;
    p.incarnation = c->incarnation;
  }
  DescList waiting;
  while (TxDesc* d = p.tx_queue.pop_front()) waiting.push_back(d);
  if (!p.linked || c->comms_error != 0) {
    close_conn(c, c->comms_error ? c->close_reason : CloseReason::shutdown, c->comms_error ? c->comms_error : -ECONNABORTED);
    while (TxDesc* d = waiting.pop_front()) {
      d->status = -ECONNABORTED;
      d->waiting = false;
      tx_done(d);
    }
    return;
  }
  while (TxDesc* d = waiting.pop_front()) {
    if (c->state != ConnState::established) {
      d->status = -ECONNABORTED;
      d->waiting = false;
      tx_done(d);
      continue;
    }
    queue_tx(d, c);
  }
  check_sends(c);
  // Messages that arrived before ESTABLISHED reached us.
  std::vector<RxDesc*> early;
  early.swap(c->early_rxs);
  for (RxDesc* rx : early) {
    if (c->state != ConnState::established) {
      rx->held = false;
      continue;
    }
    handle_rx(rx);
  }
  maybe_destroy(c);
}

// Linux's kiblnd_peer_connect_failed.
void Node::peer_connect_failed(Peer& p, bool active, int error) {
  if (active) {
    --p.connecting;
  } else {
    --p.accepting;
  }
  if (p.is_connecting()) return;  // another attempt is under way
  p.reconnected = 0;
  if (!p.conns.empty()) return;
  DescList zombies;
  while (TxDesc* d = p.tx_queue.pop_front()) zombies.push_back(d);
  if (p.linked) unlink(p);
  p.error = error;
  peer_notify(p);
  while (TxDesc* d = zombies.pop_front()) {
    d->status = error;
    d->waiting = false;
    tx_done(d);
  }
}

void Node::peer_notify(Peer& p) {
  if (p.is_connecting() || !p.conns.empty() || p.error == 0) return;
  if (p.ni != nullptr && p.ni->deleted) return;  // (its NID may be a new NI's peer's by now)
  p.error = 0;
  upper_.on_peer_down(p.nid);
}

void Node::close_peer_conns(Peer& p, CloseReason why, int error) {
  std::vector<Conn*> conns = p.conns;
  for (Conn* c : conns) close_conn(c, why, error);
}

void Node::close_stale_conns(Peer& p, std::uint16_t version, std::uint64_t incarnation) {
  std::vector<Conn*> conns = p.conns;
  for (Conn* c : conns)
    if (c->version != version || c->incarnation != incarnation) close_conn(c, CloseReason::stale_peer, -ESTALE);
}

// Linux's kiblnd_close_conn_locked, then (at once: one thread) the connd's
// disconnect and finalise.
void Node::close_conn(Conn* c, CloseReason why, int error) {
  if (error != 0 && c->comms_error == 0) c->comms_error = error;
  if (c->state != ConnState::established) return;  // being handled already
  ++stats_.closed[static_cast<std::size_t>(why)];
  c->close_reason = why;
  Peer& p = *c->peer;
  auto it = std::find(p.conns.begin(), p.conns.end(), c);
  if (it != p.conns.end()) p.conns.erase(it);
  if (p.conns.empty() && p.linked && !p.is_connecting()) {
    unlink(p);
    p.error = c->comms_error;
  }
  finalise(c);
  peer_notify(p);
}

// The queue pair to the error state (everything posted completes, flushed),
// every message not in the device's hands finished with -ECONNABORTED,
// held receives aborted; destroyed once the device has given everything
// back.
void Node::finalise(Conn* c) {
  c->state = ConnState::closing;
  if (c->id) c->dev->tr->disconnect(c->id);
  c->state = ConnState::disconnected;
  for (DescList* q : {&c->tx_noops, &c->tx_queue, &c->tx_queue_rsrvd, &c->tx_queue_nocred}) {
    while (TxDesc* d = q->pop_front()) {
      d->queued = false;
      d->status = -ECONNABORTED;
      d->waiting = false;
      if (d->sending == 0) {
        tx_done(d);
      } else {
        c->active_txs.push_back(d);
      }
    }
  }
  // Waiting for the peer: finished now unless the device still holds it.
  std::vector<TxDesc*> active;
  for (TxDesc* d = c->active_txs.head; d; d = d->next) active.push_back(d);
  for (TxDesc* d : active) {
    d->status = d->status ? d->status : -ECONNABORTED;
    d->waiting = false;
    if (d->sending == 0) {
      c->active_txs.remove(d);
      tx_done(d);
    }
  }
  // Receives the Upper was holding, or that arrived before ESTABLISHED.
  for (RxDesc* rx : c->early_rxs) rx->held = false;
  c->early_rxs.clear();
  for (RxDesc& rx : c->rxs)
    if (rx.held) {
      rx.held = false;
      lnd::Rx r = rx.rx;
      upper_.on_rx_aborted(r);
    }
  maybe_destroy(c);
}

void Node::maybe_destroy(Conn* c) {
  if (c->destroyed || c->state != ConnState::disconnected) return;
  if (c->nsends_posted > 0 || c->posted_rx > 0 || !c->active_txs.empty() || !c->unmapping.empty()) return;
  for (const RxDesc& rx : c->rxs)
    if (rx.held) return;
  c->destroyed = true;
  if (c->id) {
    c->id->context = nullptr;
    c->dev->tr->destroy(c->id);
    c->id = nullptr;
  }
  if (c->rx_registered) {
    // Kept registered for the next connection, up to kRxSlabBytes a device.
    const std::size_t bytes = c->rxs.size() * kMaxMsgSize;
    if (c->dev->rx_slab_bytes + bytes <= kRxSlabBytes) {
      c->dev->rx_slabs.push_back(Device::RxSlab{c->rx_mem, static_cast<std::uint32_t>(c->rxs.size()), c->rx_region});
      c->dev->rx_slab_bytes += bytes;
      c->rx_mem = nullptr;
    } else {
      c->dev->tr->deregister(c->rx_region);
    }
  }
  c->rx_registered = false;
  conns_[c->index] = conns_.back();
  conns_[c->index]->index = c->index;
  conns_.pop_back();
  graveyard_.push_back(c);
  if (c->reconnect) {
    Peer& p = *c->peer;
    if (p.reconnected < kReconnHighRace) {
      reconnect_peer(p);
    } else {
      // Too many quick reconnects: the next one waits a second.
      ++p.pending_reconnects;
      p.reconnect_at = clock_() + std::chrono::seconds(1);
    }
  }
}

// Linux's kiblnd_reconnect_peer.
void Node::reconnect_peer(Peer& p) {
  if (p.reconnecting == 0) return;  // accepted or connected meanwhile
  --p.reconnecting;
  if (!p.linked) {
    fail_queued(p, -ECONNABORTED);
    return;
  }
  ++p.connecting;
  ++p.reconnected;
  ++stats_.reconnects;
  connect_peer(p);
}

void Node::reap() {
  for (Conn* c : graveyard_) free_conn(c);
  graveyard_.clear();
}

}  // namespace lnetr::o2ib
