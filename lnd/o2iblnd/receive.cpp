// The o2iblnd engine's receive path: receive buffers posted, work completions
// dispatched, messages checked, credits taken and owed, completions matched
// to their requests, and IMMEDIATE / PUT_REQ / GET_REQ handed to the Upper.
#include "lnd/o2iblnd/engine_internal.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "router/lnet_header.hpp"

namespace lnetr::o2ib {

// ---- receiving -----------------------------------------------------------------------------

// Post `rx` again; `credit`: what its reposting gives back (Linux's
// IBLND_POSTRX_*).
void Node::post_rx(RxDesc* rx, PostCredit credit) {
  Conn* c = rx->conn;
  rx->held = false;
  if (c->state > ConnState::established) {
    maybe_destroy(c);
    return;  // no more posts
  }
  RecvWr wr;
  wr.wr_id = reinterpret_cast<std::uint64_t>(rx) | kWidRx;
  wr.sge = Sge{reinterpret_cast<std::uint64_t>(rx->buf), kMaxMsgSize, c->rx_region.lkey};
  const int rc = c->dev->tr->post_recv(c->id, wr);
  if (rc != 0) {
    if (c->state == ConnState::established) close_conn(c, CloseReason::post_failed, rc);
    return;
  }
  rx->posted = true;
  ++c->posted_rx;
  if (c->state < ConnState::established || credit == PostCredit::none) return;
  if (credit == PostCredit::peer) {
    ++c->outstanding_credits;
  } else {
    ++c->reserved_credits;
  }
  check_sends(c);
}

void Node::on_completion(const WorkCompletion& wc) {
  ++stats_.completions;
  const std::uint64_t kind = wc.wr_id & kWidMask;
  void* ptr = reinterpret_cast<void*>(wc.wr_id & ~kWidMask);
  switch (kind) {
    case kWidRx:
      rx_complete(static_cast<RxDesc*>(ptr), wc);
      break;
    case kWidTx:
      tx_complete(static_cast<TxDesc*>(ptr), wc);
      break;
    case kWidRdma: {
      // Unsignaled: only a failure completes one.  The SEND after it
      // completes (flushed) and finishes the descriptor.
      auto* d = static_cast<TxDesc*>(ptr);
      if (wc.status != 0 && d->conn && d->conn->state == ConnState::established)
        close_conn(d->conn, wc.flushed ? CloseReason::peer_disconnected : CloseReason::tx_failed, -EIO);
      break;
    }
    case kWidUnmap: {
      // The sink's key is dead (invalidated, or flushed with its queue
      // pair): the transfer finishes as it would have without the wait.
      auto* d = static_cast<TxDesc*>(ptr);
      Conn* c = d->conn;
      if (!d->in_use || c == nullptr || d->list != &c->unmapping) break;  // (abandoned at shutdown)
      c->unmapping.remove(d);
      --d->sending;
      tx_done(d);
      maybe_destroy(c);
      break;
    }
    default:
      break;
  }
}

// Linux's kiblnd_tx_complete.
void Node::tx_complete(TxDesc* d, const WorkCompletion& wc) {
  Conn* c = d->conn;
  const bool failed = wc.status != 0;
  if (failed) {
    if (c->state == ConnState::established)
      close_conn(c, wc.flushed ? CloseReason::peer_disconnected : CloseReason::tx_failed, -EIO);
  } else {
    c->peer->last_alive = clock_();
  }
  --d->sending;
  --c->nsends_posted;
  if (d->type == MsgType::noop) --c->noops_posted;
  if (!c->post_wrs.empty()) {
    c->wrs_posted -= c->post_wrs.front();
    c->post_wrs.pop_front();
  }
  if (failed) {
    d->waiting = false;
    d->status = -EIO;
  }
  const bool idle = d->sending == 0 && !d->waiting && !d->queued;
  if (idle && d->list) d->list->remove(d);
  check_sends(c);
  if (idle) tx_done(d);
  maybe_destroy(c);
}

// Linux's kiblnd_rx_complete.
void Node::rx_complete(RxDesc* rx, const WorkCompletion& wc) {
  Conn* c = rx->conn;
  rx->posted = false;
  --c->posted_rx;
  if (c->state > ConnState::established) {
    maybe_destroy(c);
    return;
  }
  if (wc.status != 0) {
    if (c->state == ConnState::established) {
      // Flushed: the queue pair went to the error state under us (the peer
      // disconnected); any other status is the receive's own failure.
      close_conn(c, wc.flushed ? CloseReason::peer_disconnected : CloseReason::rx_failed, -EIO);
    } else {
      c->comms_error = -EIO;
    }
    maybe_destroy(c);
    return;
  }
  auto d = decode_msg(ByteSpan(rx->buf, std::min<std::size_t>(wc.byte_len, kMaxMsgSize)));
  if (!d) {
    fail_rx(c, CloseReason::bad_message, -EPROTO);
    return;
  }
  const MsgHeader& h = d->msg.hdr;
  if (h.srcnid != c->peer->nid || h.dstnid != c->ni->nid || h.srcstamp != c->incarnation ||
      h.dststamp != incarnation_) {
    fail_rx(c, CloseReason::stale_message, -ESTALE);
    return;
  }
  c->peer->last_alive = clock_();
  rx->msg = *d;
  if (c->state < ConnState::established) {
    // Before ESTABLISHED reached us (passive): handled once it does.
    rx->held = true;
    c->early_rxs.push_back(rx);
    return;
  }
  handle_rx(rx);
}

void Node::fail_rx(Conn* c, CloseReason why, int error) {
  if (c->state == ConnState::established) {
    close_conn(c, why, error);
  } else if (c->comms_error == 0) {
    c->comms_error = error;
    c->close_reason = why;
  }
  maybe_destroy(c);
}

// Linux's kiblnd_handle_rx.
void Node::handle_rx(RxDesc* rx) {
  Conn* c = rx->conn;
  const Msg& m = rx->msg.msg;
  const int credits = m.hdr.credits;
  ++stats_.rx_msgs[type_slot(m.hdr.type)];
  ++c->n_rx;
  if (credits != 0) {
    if (c->credits + credits > c->queue_depth) {
      close_conn(c, CloseReason::bad_credits, -EPROTO);
      post_rx(rx, PostCredit::none);
      return;
    }
    c->credits += credits;
    if (m.hdr.type == MsgType::noop && !oob_capable(c->version)) ++c->outstanding_credits;
    check_sends(c);
  }
  PostCredit post = PostCredit::none;
  switch (m.hdr.type) {
    case MsgType::noop:
      post = oob_capable(c->version) || credits != 0 ? PostCredit::none : PostCredit::peer;
      break;
    case MsgType::immediate:
    case MsgType::put_req:
    case MsgType::get_req:
      parse(rx);
      return;  // reposted once the Upper is done with it
    case MsgType::put_nak:
      post_rx(rx, PostCredit::reserved);
      handle_completion(c, MsgType::put_req, m.completion()->status, m.completion()->cookie);
      return;
    case MsgType::put_ack: {
      const PutAck& pa = *m.put_ack();
      TxDesc* d = find_waiting(c, MsgType::put_req, pa.src_cookie);
      if (!d) {
        post_rx(rx, PostCredit::reserved);
        close_conn(c, CloseReason::unmatched_completion, -EPROTO);
        return;
      }
      // The payload goes to the sink it names, then PUT_DONE.
      d->rkey = pa.rd.key();
      d->remote.clear();
      for (std::size_t i = 0; i < pa.rd.nfrags(); ++i) d->remote.push_back(pa.rd.frag(i));
      d->peer_cookie = pa.dst_cookie;
      d->type = MsgType::put_done;
      d->waiting = false;
      if (d->list) d->list->remove(d);
      post_rx(rx, PostCredit::reserved);
      queue_tx(d, c);
      return;
    }
    case MsgType::put_done:
      post_rx(rx, PostCredit::peer);
      handle_completion(c, MsgType::put_ack, m.completion()->status, m.completion()->cookie);
      return;
    case MsgType::get_done:
      post_rx(rx, PostCredit::reserved);
      handle_completion(c, MsgType::get_req, m.completion()->status, m.completion()->cookie);
      return;
    default:  // CONNREQ / CONNACK on a connection
      close_conn(c, CloseReason::bad_message, -EPROTO);
      break;
  }
  post_rx(rx, post);
}

// The waiting request of `type` that `cookie` names on `c`.
TxDesc* Node::find_waiting(Conn* c, MsgType type, Cookie cookie) noexcept {
  TxDesc* d = c->dev->by_index(static_cast<std::uint32_t>(cookie));
  if (!d || !d->in_use || d->gen != static_cast<std::uint32_t>(cookie >> 32) || d->conn != c || !d->waiting ||
      d->type != type)
    return nullptr;
  return d;
}

// Linux's kiblnd_handle_completion.
void Node::handle_completion(Conn* c, MsgType type, std::int32_t status, Cookie cookie) {
  TxDesc* d = find_waiting(c, type, cookie);
  if (!d) {
    close_conn(c, CloseReason::unmatched_completion, -EPROTO);
    return;
  }
  // GET_DONE's status is what the peer wrote into our sink: never more
  // than the sink it was given.
  if (type == MsgType::get_req && status > 0 && static_cast<std::uint32_t>(status) > d->sink_len) {
    close_conn(c, CloseReason::bad_message, -EPROTO);
    return;
  }
  if (d->status == 0) {
    if (status < 0) {
      d->status = status;
    } else if (type == MsgType::get_req) {
      d->reply_len = static_cast<std::uint32_t>(status);
      stats_.rdma_bytes_received += d->reply_len;
    } else if (type == MsgType::put_ack) {
      stats_.rdma_bytes_received += static_cast<std::uint32_t>(status);
      stats_.rx_bytes += d->rx.hdr.payload_length;
    }
  }
  d->waiting = false;
  const bool idle = !d->queued && d->sending == 0;
  if (idle) {
    if (d->list) d->list->remove(d);
    tx_done(d);
  }
}

// An IMMEDIATE, PUT_REQ or GET_REQ for LNet (Linux's lnet_parse).
void Node::parse(RxDesc* rx) {
  Conn* c = rx->conn;
  const Msg& m = rx->msg.msg;
  const LnetHeader* hdr = nullptr;
  if (const auto* im = m.immediate()) hdr = &im->hdr;
  if (const auto* pr = m.put_req()) hdr = &pr->hdr;
  if (const auto* gr = m.get_req()) hdr = &gr->hdr;
  assert(hdr);
  if (m.get_req() && hdr->dest_nid != c->ni->nid) {
    // Optimized GETs are only sent straight to their target (§6.5).
    post_rx(rx, PostCredit::peer);
    close_conn(c, CloseReason::get_not_for_us, -EPROTO);
    return;
  }
  if (check_header(*hdr)) {
    post_rx(rx, PostCredit::peer);
    close_conn(c, CloseReason::upper_rejected, -EPROTO);
    return;
  }
  rx->rx = lnd::Rx{};
  rx->rx.conn = rx;
  rx->rx.from = c->peer->nid;
  rx->rx.ni = c->ni->nid;
  rx->rx.hdr = *hdr;
  rx->held = true;
  switch (upper_.on_head(rx->rx)) {
    case lnd::RxVerdict::reject:
      rx->held = false;
      post_rx(rx, PostCredit::peer);
      close_conn(c, CloseReason::upper_rejected, -EPROTO);
      return;
    case lnd::RxVerdict::defer:
      return;  // held: its buffer, and the sender's credit, wait for resume()
    case lnd::RxVerdict::accept:
      break;
  }
  recv(rx);
}

void Node::resume(lnd::Rx& r) {
  auto* rx = static_cast<RxDesc*>(r.conn);
  if (!rx || !rx->held) return;
  rx->rx = r;
  if (rx->conn->state != ConnState::established) {
    rx->held = false;
    upper_.on_rx_aborted(rx->rx);
    maybe_destroy(rx->conn);
    return;
  }
  recv(rx);
}

// Linux's kiblnd_recv: the Upper has said where the payload goes.
void Node::recv(RxDesc* rx) {
  Conn* c = rx->conn;
  const Msg& m = rx->msg.msg;
  lnd::Rx& r = rx->rx;
  if (const auto* im = m.immediate()) {
    if (!r.discard && r.sink.size() > im->payload.size()) {
      rx->held = false;
      upper_.on_rx_aborted(r);
      post_rx(rx, PostCredit::peer);
      close_conn(c, CloseReason::bad_payload, -EPROTO);
      return;
    }
    if (!r.discard && !r.sink.empty()) {
      std::memcpy(r.sink.data(), im->payload.data(), r.sink.size());
      stats_.bytes_copied += r.sink.size();
    }
    stats_.rx_bytes += im->payload.size();
    lnd::Rx done = r;
    if (r.hdr.type == lnetr::MsgType::get && r.hdr.dest_nid == c->ni->nid) {
      // A GET for us: LNet finishes receiving it (the buffer goes back,
      // its credit owed) before it sends the REPLY, which carries the credit.
      post_rx(rx, PostCredit::peer);
      upper_.on_received(done);
    } else {
      // Anything else is finished inside the receive: an ACK it asks for,
      // or the send of a routed message, leaves before the buffer goes back
      // and does not carry this credit yet.
      upper_.on_received(done);
      post_rx(rx, PostCredit::peer);
    }
    return;
  }
  if (const auto* pr = m.put_req()) {
    const Cookie cookie = pr->cookie;
    if (r.discard || r.sink.empty()) {
      // Nothing wanted: PUT_NAK with status 0.
      lnd::Rx done = r;
      send_completion(c, MsgType::put_nak, 0, cookie);
      upper_.on_received(done);
      post_rx(rx, PostCredit::peer);
      return;
    }
    TxDesc* d = get_desc(c->dev);
    if (!d) {
      // Not answering would leave the peer's PUT hanging: close instead.
      lnd::Rx done = r;
      rx->held = false;
      post_rx(rx, PostCredit::peer);
      close_conn(c, CloseReason::no_resources, -ENOMEM);
      upper_.on_rx_aborted(done);
      return;
    }
    d->role = TxDesc::Role::sink;
    d->type = MsgType::put_ack;
    d->ni = c->ni;
    d->rx = r;
    d->rx.conn = nullptr;  // the receive buffer goes back now
    d->peer_cookie = cookie;
    if (!map_sink(d, c->id, r.sink)) {
      put_desc(d);
      lnd::Rx done = r;
      rx->held = false;
      send_completion(c, MsgType::put_nak, -ENOMEM, cookie);
      post_rx(rx, PostCredit::peer);
      upper_.on_rx_aborted(done);
      return;
    }
    d->waiting = true;  // for PUT_DONE
    rx->held = false;
    queue_tx(d, c);
    // The buffer is reposted now; its credit goes back with PUT_DONE.
    post_rx(rx, PostCredit::none);
    return;
  }
  if (const auto* gr = m.get_req()) {
    const Cookie cookie = gr->cookie;
    lnd::Rx done = r;
    lnd::Tx* reply = r.reply;
    if (reply) {
      // The Upper will send its REPLY: keep the requester's sink until then.
      TxDesc* d = get_desc(c->dev);
      if (d) {
        d->role = TxDesc::Role::reply;
        d->type = MsgType::get_done;
        d->ni = c->ni;
        d->conn = c;
        d->peer_cookie = cookie;
        d->rkey = gr->rd.key();
        for (std::size_t i = 0; i < gr->rd.nfrags(); ++i) d->remote.push_back(gr->rd.frag(i));
        d->waiting = true;
        d->deadline = clock_() + c->ni->tunables.timeout;
        c->active_txs.push_back(d);
        reply->o2ib_get = d;
        reply->o2ib_get_gen = d->gen;
      } else {
        send_completion(c, MsgType::get_done, -ENOMEM, cookie);
        reply->o2ib_get = nullptr;
      }
    } else {
      send_completion(c, MsgType::get_done, -ENODATA, cookie);
    }
    upper_.on_received(done);
    post_rx(rx, PostCredit::peer);
    return;
  }
}

// PUT_NAK, or GET_DONE without data.
void Node::send_completion(Conn* c, MsgType type, std::int32_t status, Cookie cookie) {
  TxDesc* d = get_desc(c->dev);
  if (!d) {
    close_conn(c, CloseReason::no_resources, -ENOMEM);
    return;
  }
  d->type = type;
  d->ni = c->ni;
  d->peer_cookie = cookie;
  d->compl_status = status;
  queue_tx(d, c);
}

}  // namespace lnetr::o2ib
