// The o2iblnd engine's RDMA transfers and their end: the writes into a
// peer's sink (plan_rdma), and a finished descriptor's account to the Upper
// (tx_done), including the REPLY of an optimized GET.
#include "lnd/o2iblnd/engine_internal.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "router/local_msgs.hpp"

namespace lnetr::o2ib {

// ---- RDMA ----------------------------------------------------------------------------------

// The RDMA writes of `d`'s payload into the peer's sink (Linux's
// kiblnd_init_rdma), appended to the scratch lists: one work request per
// run of local pieces while the remote fragment stays the same, at most as
// many pieces per request as the device takes, at most max_frags requests.
// Returns the bytes to be written, or -errno (nothing written: the
// completion carries the error).
std::int32_t Node::plan_rdma(Conn* c, TxDesc* d) {
  if (d->compl_status < 0) return d->compl_status;  // decided already (no memory)
  // A PUT fills the sink the peer named (it may take less than was sent);
  // a REPLY is written whole.  Either side running out is an error.
  std::uint32_t resid = d->type == MsgType::put_done ? total(d->remote) : d->payload_len;
  if (resid == 0) return 0;
  const std::uint32_t per_wr = std::min(kMaxSge, c->dev->tr->max_send_sge());
  std::vector<SendWr>& wrs = scratch_wrs_;
  std::vector<Sge>& sges = scratch_sges_;
  std::size_t si = 0, di = 0;
  std::uint32_t soff = 0, doff = 0;
  const std::uint32_t written = resid;
  while (resid > 0) {
    if (si >= d->src.size()) return -EPROTO;
    if (di >= d->remote.size()) return -EPROTO;
    const Sge& s = d->src[si];
    const RdmaFrag& r = d->remote[di];
    const std::uint32_t n = std::min({s.length - soff, r.nob - doff, resid});
    if (wrs.empty() || wrs.back().num_sge == per_wr ||
        wrs.back().remote_addr + wr_bytes(wrs.back(), sges) != r.addr + doff) {
      if (wrs.size() >= c->max_frags) return -EMSGSIZE;
      SendWr w;
      w.wr_id = reinterpret_cast<std::uint64_t>(d) | kWidRdma;
      w.op = WrOp::rdma_write;
      w.signaled = false;
      w.remote_addr = r.addr + doff;
      w.rkey = d->rkey;
      w.num_sge = 0;
      wrs.push_back(w);
    }
    sges.push_back(Sge{s.addr + soff, n, s.lkey});
    ++wrs.back().num_sge;
    soff += n;
    doff += n;
    resid -= n;
    if (soff == s.length) ++si, soff = 0;
    if (doff == r.nob) ++di, doff = 0;
  }
  return static_cast<std::int32_t>(written);
}

std::uint32_t Node::total(const std::vector<RdmaFrag>& frags) noexcept {
  std::uint64_t n = 0;
  for (const RdmaFrag& f : frags) n += f.nob;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(n, UINT32_MAX));
}

std::uint64_t Node::wr_bytes(const SendWr& w, const std::vector<Sge>& sges) noexcept {
  // The work request's pieces are the last num_sge entries.
  std::uint64_t n = 0;
  for (std::size_t i = sges.size() - w.num_sge; i < sges.size(); ++i) n += sges[i].length;
  return n;
}

// ---- completion of messages ----------------------------------------------------------------

// A descriptor is finished: give the Upper what it is owed and free it.
void Node::tx_done(TxDesc* d) {
  assert(d->list == nullptr && d->sending == 0);
  // The peer's key to our sink dies before the sink's memory moves on
  // (delivered, aborted, or given to another transfer): a key that is
  // invalidated through the connection finishes this on its completion.
  if (d->sink && d->conn && !d->conn->destroyed) {
    const Sink s = *d->sink;
    d->sink.reset();
    if (d->dev->tr->unmap_sink(s, reinterpret_cast<std::uint64_t>(d) | kWidUnmap)) {
      ++d->sending;
      d->conn->unmapping.push_back(d);
      ++stats_.sinks_unmapping;
      return;
    }
  }
  const TxDesc::Role role = d->role;
  const int status = d->status;
  lnd::Tx* tx = d->tx;
  const MsgType type = d->type;
  const std::uint32_t reply_len = d->reply_len;
  const Nid from = d->conn ? d->conn->peer->nid : Nid{};
  const LocalNi* ni = d->conn ? d->conn->ni : d->ni;
  lnd::Rx rx = d->rx;
  if (role == TxDesc::Role::sink && status >= 0 && d->bounce) {
    std::memcpy(d->bounce_to.data(), d->bounce->mem, d->bounce_to.size());
    stats_.bytes_copied += d->bounce_to.size();
    stats_.bytes_bounced += d->bounce_to.size();
  }
  // An optimized GET's REPLY landed in our sink: through a bounce, copied.
  std::optional<std::pair<Bounce*, std::uint32_t>> get_bounce_data;
  if (role == TxDesc::Role::send && type == MsgType::get_req && status >= 0 && d->bounce)
    get_bounce_data = {{d->bounce, reply_len}};
  if (get_bounce_data) {
    // Keep the bounce until the REPLY is delivered below.
    d->bounce = nullptr;
  }
  put_desc(d);

  switch (role) {
    case TxDesc::Role::plain:
      break;
    case TxDesc::Role::sink:
      if (status >= 0) {
        upper_.on_received(rx);
      } else {
        upper_.on_rx_aborted(rx);
      }
      break;
    case TxDesc::Role::reply:
      if (tx) upper_.on_sent(*tx, status < 0 ? status : 0);
      break;
    case TxDesc::Role::send:
      if (type == MsgType::get_req && status >= 0) deliver_get_reply(*tx, from, ni, reply_len, get_bounce_data);
      if (get_bounce_data) ni_device_free_bounce(ni, get_bounce_data->first);
      upper_.on_sent(*tx, status < 0 ? status : 0);
      break;
  }
}

// GET_DONE completed an optimized GET: its REPLY, whose payload is already
// in the sink, reaches the Upper as a received message (Linux finalises
// the REPLY message LNet created for the GET).
void Node::deliver_get_reply(lnd::Tx& get, const Nid& from, const LocalNi* ni, std::uint32_t len,
                             const std::optional<std::pair<Bounce*, std::uint32_t>>& bounce) {
  lnd::Rx rx;
  rx.conn = nullptr;
  rx.from = from;
  rx.ni = ni ? ni->nid : get.hdr.src_nid;
  rx.hdr = make_reply(get.hdr, get.hdr.dest_nid, len);
  ++stats_.rx_msgs[type_slot(MsgType::get_done)];
  stats_.rx_bytes += len;
  if (upper_.on_head(rx) != lnd::RxVerdict::accept) {
    upper_.on_rx_aborted(rx);
    return;
  }
  if (!rx.discard && !rx.sink.empty()) {
    const std::size_t n = std::min<std::size_t>(rx.sink.size(), len);
    const std::uint8_t* from_mem = bounce ? bounce->first->mem : get.reply_sink.data();
    if (from_mem != rx.sink.data()) {
      std::memmove(rx.sink.data(), from_mem, n);
      stats_.bytes_copied += n;
      if (bounce) stats_.bytes_bounced += n;
    }
  }
  upper_.on_received(rx);
}

}  // namespace lnetr::o2ib
