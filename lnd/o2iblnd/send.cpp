// The o2iblnd engine's send path: a message from the Upper onto a connection
// (or its peer's queue until one is up), the queues, credits and NOOPs, the
// encoding of a message and the work requests posted for it.
#include "lnd/o2iblnd/engine_internal.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace lnetr::o2ib {

// ---- sending ----------------------------------------------------------------------------

int Node::send(const Nid& dest, lnd::Tx& tx) {
  // The REPLY to an optimized GET: RDMA-written into the requester's sink,
  // then GET_DONE, on the connection the GET_REQ came in on.
  if (tx.o2ib_get != nullptr) {
    auto* d = static_cast<TxDesc*>(tx.o2ib_get);
    tx.o2ib_get = nullptr;
    if (!d->in_use || d->gen != tx.o2ib_get_gen || d->role != TxDesc::Role::reply || !d->waiting)
      return -ECONNABORTED;  // its connection is gone
    Conn* c = d->conn;
    d->tx = &tx;
    d->waiting = false;
    if (d->list) d->list->remove(d);
    if (!map_source(d, tx)) {
      d->tx = nullptr;
      d->compl_status = -ENOMEM;
      d->src.clear();
      ++stats_.tx_no_desc;
      queue_tx(d, c);
      return -ENOMEM;
    }
    queue_tx(d, c);
    return 0;
  }

  const LocalNi* ni = ni_for_net(dest.net());
  if (!ni) return -EHOSTUNREACH;
  if (!has_room(dest)) return -ENOSPC;  // a new peer, and the table is full
  Device* dev = device_of(ni);
  TxDesc* d = get_desc(dev);
  if (!d) {
    ++stats_.tx_no_desc;
    return -ENOMEM;
  }
  d->role = TxDesc::Role::send;
  d->tx = &tx;
  d->ni = ni;
  const std::uint32_t payload = tx.hdr.payload_length;
  d->payload_len = payload;
  d->type = MsgType::immediate;
  switch (tx.hdr.type) {
    case lnetr::MsgType::get: {
      // An optimized GET: only sent straight to its target, and only when
      // the REPLY would not fit an IMMEDIATE (o2iblnd.md §6.1).
      const std::uint32_t sink_len = tx.hdr.get().sink_length;
      if (!tx.reply_sink.empty() && dest == tx.hdr.dest_nid && sink_len > kImmediateMaxPayload &&
          tx.reply_sink.size() >= sink_len) {
        d->type = MsgType::get_req;
        d->waiting = true;  // for GET_DONE
      }
      break;
    }
    case lnetr::MsgType::put:
    case lnetr::MsgType::reply:
      if (payload > kImmediateMaxPayload) {
        d->type = MsgType::put_req;
        d->waiting = true;  // for PUT_ACK / PUT_NAK
        if (!map_source(d, tx)) {
          put_desc(d);
          ++stats_.tx_no_desc;
          return -ENOMEM;
        }
      }
      break;
    default:
      break;
  }
  if (d->type == MsgType::immediate && payload > 0) key_source(d, tx);  // else copied when posted
  launch(d, dest);
  return 0;
}

// Linux's kiblnd_launch_tx: queue on a connection, or wait for one.
void Node::launch(TxDesc* d, const Nid& dest) {
  Peer& p = peer(dest, d->ni);
  if (p.linked && !p.conns.empty()) {
    Conn* c = p.conns[p.next_conn++ % p.conns.size()];
    queue_tx(d, c);
    return;
  }
  const auto now = clock_();
  // Waits at most as long as a connection can take (connect timeout plus
  // address and route resolution).
  d->deadline = now + connreq_timeout(*d->ni) + 2 * kResolveTimeout;
  if (p.linked) {
    assert(p.is_connecting());
    p.tx_queue.push_back(d);
    return;
  }
  link(p);
  p.connecting = static_cast<int>(d->ni->tunables.conns_per_peer);
  p.tx_queue.push_back(d);
  for (std::uint32_t i = 0; i < d->ni->tunables.conns_per_peer; ++i) connect_peer(p);
}

// Linux's kiblnd_queue_tx_locked + kiblnd_check_sends_locked.
void Node::queue_tx(TxDesc* d, Conn* c) {
  if (c->state != ConnState::established) {
    d->status = -ECONNABORTED;
    d->waiting = false;
    if (d->list) d->list->remove(d);
    if (d->sending == 0) tx_done(d);
    return;
  }
  d->queued = true;
  d->deadline = clock_() + c->ni->tunables.timeout;
  d->conn = c;
  DescList* q = &c->tx_queue;
  switch (d->type) {
    case MsgType::put_req:
    case MsgType::get_req:
      q = &c->tx_queue_rsrvd;
      break;
    case MsgType::put_nak:
    case MsgType::put_ack:
    case MsgType::put_done:
    case MsgType::get_done:
      q = &c->tx_queue_nocred;
      break;
    case MsgType::noop:
      q = oob_capable(c->version) ? &c->tx_queue_nocred : &c->tx_noops;
      break;
    default:
      break;
  }
  q->push_back(d);
  check_sends(c);
}

// Linux's kiblnd_need_noop.
bool Node::need_noop(const Conn* c) const noexcept {
  const NiTunables& t = c->ni->tunables;
  // Scaled to a queue depth negotiated down.  At least 1: a peer asking for
  // a depth of 1 would make it 0 (a kernel peer never asks below 8), and
  // "return credits when 0 are owed" means a NOOP after every NOOP.
  const int hiw = oob_capable(c->version)
                      ? std::max(1, static_cast<int>(c->queue_depth * t.peer_credits_hiw / t.peer_credits))
                      : 7;
  const bool keepalive = opts_.keepalive.count() > 0 && clock_() >= c->last_send + opts_.keepalive;
  if (c->outstanding_credits < hiw && !keepalive) return false;
  if (oob_capable(c->version)) {
    if (!c->tx_queue_nocred.empty()) return false;  // it will carry the credits
    return c->tx_queue.empty() || c->credits == 0;
  }
  if (!c->tx_noops.empty() || !c->tx_queue_nocred.empty() || c->credits == 0) return false;
  if (c->credits == 1 && c->outstanding_credits == 0) return false;
  return c->tx_queue.empty() || c->credits == 1;
}

void Node::check_sends(Conn* c) {
  if (c->state != ConnState::established) return;
  while (c->reserved_credits > 0 && !c->tx_queue_rsrvd.empty()) {
    TxDesc* d = c->tx_queue_rsrvd.pop_front();
    c->tx_queue.push_back(d);
    --c->reserved_credits;
  }
  if (need_noop(c)) {
    if (TxDesc* d = get_desc(c->dev)) {
      d->type = MsgType::noop;
      d->ni = c->ni;
      d->queued = true;
      d->deadline = clock_() + c->ni->tunables.timeout;
      d->conn = c;
      (oob_capable(c->version) ? c->tx_queue_nocred : c->tx_noops).push_back(d);
    }
  }
  for (;;) {
    if (c->state != ConnState::established) return;
    TxDesc* d = nullptr;
    int credit = 0;
    if (!c->tx_queue_nocred.empty()) {
      d = c->tx_queue_nocred.head;
    } else if (!c->tx_noops.empty()) {
      d = c->tx_noops.head;
      credit = 1;
    } else if (!c->tx_queue.empty()) {
      d = c->tx_queue.head;
      credit = 1;
    } else {
      break;
    }
    if (post_tx(c, d, credit) != 0) break;
  }
}

// Encode `d`'s message for `c` with the credits it returns now.  The
// payload of an IMMEDIATE is gathered from the Upper's memory when the
// device takes that many pieces (`gather` set), else copied here.
std::size_t Node::encode(Conn* c, TxDesc* d, bool& gather) {
  gather = false;
  Msg m;
  m.hdr.version = c->version;
  m.hdr.type = d->type;
  m.hdr.credits = static_cast<std::uint8_t>(c->outstanding_credits);
  m.hdr.srcnid = c->ni->nid;
  m.hdr.srcstamp = incarnation_;
  m.hdr.dstnid = c->peer->nid;
  m.hdr.dststamp = c->incarnation;
  const MutableByteSpan out(d->msg, kMaxMsgSize);
  RdmaFrag frag{d->sink_len, d->sink_addr};
  switch (d->type) {
    case MsgType::noop:
      m.body = Noop{};
      break;
    case MsgType::immediate: {
      const lnd::Tx& tx = *d->tx;
      const std::uint32_t n = tx.hdr.payload_length;
      const bool can_gather = n > 0 && !d->src.empty() && d->bounce == nullptr &&
                              d->src.size() + 1 <= std::min(kMaxSge, c->dev->tr->max_send_sge()) && !opts_.cksum;
      if (can_gather) {
        gather = true;
        auto r = encode_immediate_head(m.hdr, tx.hdr, n, out, kNativeOrder);
        assert(r);
        stats_.bytes_gathered += n;
        return *r;
      }
      // Copy the payload into the message.
      std::size_t at = kImmediatePayloadOffset;
      if (!tx.pieces.empty()) {
        for (const auto& p : tx.pieces) {
          std::memcpy(d->msg + at, p.data, p.len);
          at += p.len;
        }
      } else if (n > 0) {
        std::memcpy(d->msg + at, tx.payload.data(), n);
      }
      stats_.bytes_copied += n;
      d->src.clear();
      auto r = encode_immediate_head(m.hdr, tx.hdr, n, out, kNativeOrder);
      assert(r);
      if (opts_.cksum) store_checksum(MutableByteSpan(d->msg, kImmediatePayloadOffset + n), kNativeOrder);
      return kImmediatePayloadOffset + n;
    }
    case MsgType::put_req:
      m.body = PutReq{d->tx->hdr, d->cookie()};
      break;
    case MsgType::get_req:
      m.body = GetReq{d->tx->hdr, d->cookie(), RdmaDesc(d->sink->rkey, std::span<const RdmaFrag>(&frag, 1))};
      break;
    case MsgType::put_ack:
      m.body = PutAck{d->peer_cookie, d->cookie(), RdmaDesc(d->sink->rkey, std::span<const RdmaFrag>(&frag, 1))};
      break;
    case MsgType::put_nak:
    case MsgType::put_done:
    case MsgType::get_done:
      m.body = Completion{d->peer_cookie, d->compl_status};
      break;
    default:
      m.body = Noop{};
      break;
  }
  auto r = encode_msg(m, out, kNativeOrder, opts_.cksum ? Checksum::on : Checksum::off);
  assert(r);
  return r ? *r : 0;
}

// Linux's kiblnd_post_tx_locked: 0 posted (or a redundant NOOP dropped),
// -EAGAIN not now (credits, concurrent sends), -EIO failed.
int Node::post_tx(Conn* c, TxDesc* d, int credit) {
  const int concurrent = static_cast<int>(oob_capable(c->version)
                                              ? c->ni->tunables.concurrent_sends
                                              : std::clamp<std::uint32_t>(c->ni->tunables.concurrent_sends, 4, 16));
  if (c->nsends_posted >= concurrent) return -EAGAIN;
  if (credit != 0 && c->credits == 0) return -EAGAIN;
  if (credit != 0 && !oob_capable(c->version) && c->credits == 1 && d->type != MsgType::noop) return -EAGAIN;

  DescList* from = d->list;
  from->remove(d);
  d->queued = false;
  if (d->type == MsgType::get_req && !d->sink) {
    const std::uint32_t sink_len = d->tx->hdr.get().sink_length;
    if (!map_sink(d, c->id, d->tx->reply_sink.first(sink_len))) {
      d->status = -ENOMEM;
      d->waiting = false;
      tx_done(d);
      return 0;
    }
  }
  if (d->type == MsgType::noop &&
      (!need_noop(c) || (oob_capable(c->version) && c->noops_posted == kOobMsgs))) {
    put_desc(d);  // redundant: one is queued again when needed
    return 0;
  }

  // RDMA writes first (PUT_DONE, GET_DONE with data), then the message.
  std::vector<SendWr>& wrs = scratch_wrs_;
  std::vector<Sge>& sges = scratch_sges_;
  wrs.clear();
  sges.clear();
  if ((d->type == MsgType::put_done || d->type == MsgType::get_done) && d->role != TxDesc::Role::plain) {
    d->compl_status = plan_rdma(c, d);
    if (d->compl_status < 0) wrs.clear(), sges.clear();
  }
  bool gather = false;
  const std::size_t nob = encode(c, d, gather);
  const std::size_t msg_sge = sges.size();
  sges.push_back(Sge{reinterpret_cast<std::uint64_t>(d->msg), static_cast<std::uint32_t>(
                                                                  gather ? kImmediatePayloadOffset : nob), d->lkey});
  if (gather) sges.insert(sges.end(), d->src.begin(), d->src.end());
  // (The RDMA work requests point into sges: fix their pointers now that
  // it is complete.)
  std::size_t at = 0;
  for (SendWr& w : wrs) {
    w.sge = sges.data() + at;
    at += w.num_sge;
  }
  SendWr msg;
  msg.wr_id = reinterpret_cast<std::uint64_t>(d) | kWidTx;
  msg.op = WrOp::send;
  msg.signaled = true;
  msg.sge = sges.data() + msg_sge;
  msg.num_sge = static_cast<std::uint32_t>(sges.size() - msg_sge);
  wrs.push_back(msg);
  if (c->wrs_posted + wrs.size() > c->max_send_wr) {
    // The queue pair is full (RDMA transfers' writes are many): it waits
    // for completions, first in its queue.
    from->push_front(d);
    d->queued = true;
    return -EAGAIN;
  }

  const std::uint8_t returned = static_cast<std::uint8_t>(c->outstanding_credits);
  c->credits -= credit;
  c->outstanding_credits = 0;
  ++c->nsends_posted;
  if (d->type == MsgType::noop) ++c->noops_posted;
  ++d->sending;
  c->active_txs.push_back(d);
  c->last_send = clock_();
  const int rc = c->dev->tr->post_send(c->id, wrs.data(), wrs.size());
  if (rc == 0) {
    c->wrs_posted += static_cast<std::uint32_t>(wrs.size());
    c->post_wrs.push_back(static_cast<std::uint32_t>(wrs.size()));
    ++c->n_tx;
    ++stats_.tx_msgs[type_slot(d->type)];
    if (d->type == MsgType::immediate) stats_.tx_bytes += d->payload_len;
    if ((d->type == MsgType::put_done || d->type == MsgType::get_done) && d->compl_status > 0)
      stats_.rdma_bytes_written += static_cast<std::uint64_t>(d->compl_status), stats_.tx_bytes += d->payload_len;
    return 0;
  }
  // Not posted: undo, and the connection is finished.
  c->credits += credit;
  c->outstanding_credits += returned;
  --c->nsends_posted;
  if (d->type == MsgType::noop) --c->noops_posted;
  d->status = rc;
  d->waiting = false;
  --d->sending;
  const bool done = d->sending == 0;
  if (done) c->active_txs.remove(d);
  close_conn(c, CloseReason::post_failed, rc);
  if (done) tx_done(d);
  return -EIO;
}

}  // namespace lnetr::o2ib
