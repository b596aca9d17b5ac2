// The o2iblnd engine's descriptors and memory: transmit descriptors (grown
// in registered chunks, per device), bounce buffers for memory the transport
// cannot key, and the keys of the sources and sinks given to the device.
#include "lnd/o2iblnd/engine_internal.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace lnetr::o2ib {

// ---- descriptors and buffers -------------------------------------------------------------

Device* Node::device_of(const LocalNi* ni) noexcept {
  for (auto& d : devices_)
    if (d->tr == ni->transport) return d.get();
  return nullptr;
}

TxDesc* Node::get_desc(Device* dev) {
  if (dev->free.empty()) {
    // Grows by a chunk to the peak in flight (bounded by credits); never
    // shrinks.  Each chunk is one registration.
    if (dev->chunks.size() >= kMaxDescChunks) return nullptr;
    const std::size_t n = dev->chunk;
    void* mem = std::aligned_alloc(4096, n * kMaxMsgSize);
    if (!mem) return nullptr;
    Region r;
    if (!dev->tr->register_memory(mem, n * kMaxMsgSize, false, r)) {
      std::free(mem);
      return nullptr;
    }
    auto chunk = std::make_unique<TxDesc[]>(n);
    const auto base = static_cast<std::uint32_t>(dev->chunks.size() * n);
    for (std::size_t i = n; i-- > 0;) {
      TxDesc& d = chunk[i];
      d.dev = dev;
      d.index = base + static_cast<std::uint32_t>(i);
      d.msg = static_cast<std::uint8_t*>(mem) + i * kMaxMsgSize;
      d.lkey = r.lkey;
      dev->free.push_back(&d);
    }
    dev->chunks.push_back(std::move(chunk));
    dev->chunk_mem.push_back(static_cast<std::uint8_t*>(mem));
    dev->chunk_regions.push_back(r);
    stats_.tx_descs += n;
  }
  TxDesc* d = dev->free.back();
  dev->free.pop_back();
  d->in_use = true;
  d->conn = nullptr;
  d->role = TxDesc::Role::plain;
  d->queued = d->waiting = false;
  d->sending = 0;
  d->status = 0;
  d->tx = nullptr;
  d->ni = nullptr;
  d->rx = lnd::Rx{};
  d->peer_cookie = 0;
  d->compl_status = 0;
  d->reply_len = 0;
  d->rkey = 0;
  d->remote.clear();
  d->src.clear();
  d->payload_len = 0;
  d->sink.reset();
  d->sink_addr = 0;
  d->sink_len = 0;
  d->bounce = nullptr;
  d->bounce_to = {};
  return d;
}

void Node::put_desc(TxDesc* d) noexcept {
  assert(d->in_use && d->list == nullptr);
  if (d->sink) {
    (void)d->dev->tr->unmap_sink(*d->sink, 0);
    d->sink.reset();
  }
  if (d->bounce) {
    d->dev->free_bounces.push_back(d->bounce);
    d->bounce = nullptr;
  }
  d->in_use = false;
  ++d->gen;  // its cookie and any Tx's record of it are void from now on
  d->tx = nullptr;
  d->dev->free.push_back(d);
}

Bounce* Node::get_bounce(Device* dev) {
  if (!dev->free_bounces.empty()) {
    Bounce* b = dev->free_bounces.back();
    dev->free_bounces.pop_back();
    return b;
  }
  if (dev->bounces.size() >= kMaxBounce) return nullptr;
  void* mem = std::aligned_alloc(4096, kBounceSize);
  if (!mem) return nullptr;
  Bounce b;
  b.mem = static_cast<std::uint8_t*>(mem);
  if (!dev->tr->register_memory(mem, kBounceSize, true, b.region)) {
    std::free(mem);
    return nullptr;
  }
  dev->bounces.push_back(b);
  return &dev->bounces.back();
}

// The payload of `tx` as the device reads it (desc->src), if all of it is
// memory the transport can key; else desc->src is left empty.
bool Node::key_source(TxDesc* d, const lnd::Tx& tx) {
  Transport* tr = d->dev->tr;
  d->src.clear();
  d->payload_len = tx.hdr.payload_length;
  bool keyed = true;
  auto add = [&](const std::uint8_t* p, std::size_t len) {
    if (len == 0) return;
    auto k = tr->lkey(p, len);
    if (!k) {
      keyed = false;
      return;
    }
    // A run longer than one SGE may carry is split.
    while (len > 0) {
      const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::size_t>(len, 1u << 30));
      d->src.push_back(Sge{reinterpret_cast<std::uint64_t>(p), n, *k});
      p += n;
      len -= n;
    }
  };
  if (!tx.pieces.empty()) {
    for (const auto& piece : tx.pieces) add(piece.data, piece.len);
  } else {
    add(tx.payload.data(), tx.payload.size());
  }
  if (!keyed) d->src.clear();
  return keyed;
}

// As key_source(), and through a bounce buffer (copied, counted) if any of
// it is not registered memory.  False if that is needed and none is left.
bool Node::map_source(TxDesc* d, const lnd::Tx& tx) {
  if (key_source(d, tx)) return true;
  Bounce* b = get_bounce(d->dev);
  if (!b) return false;
  d->bounce = b;
  std::size_t at = 0;
  if (!tx.pieces.empty()) {
    for (const auto& piece : tx.pieces) {
      std::memcpy(b->mem + at, piece.data, piece.len);
      at += piece.len;
    }
  } else {
    std::memcpy(b->mem, tx.payload.data(), tx.payload.size());
    at = tx.payload.size();
  }
  stats_.bytes_copied += at;
  stats_.bytes_bounced += at;
  if (at > 0) d->src.push_back(Sge{reinterpret_cast<std::uint64_t>(b->mem), static_cast<std::uint32_t>(at), b->region.lkey});
  return true;
}

// Open `sink` to the peer on `conn` (PUT_ACK, GET_REQ): desc->sink, or a
// bounce buffer whose bytes are copied to `sink` at the end.
bool Node::map_sink(TxDesc* d, CmId* id, MutableByteSpan sink) {
  Transport* tr = d->dev->tr;
  d->sink_len = static_cast<std::uint32_t>(sink.size());
  bool busy = false;
  if (auto s = tr->map_sink(id, sink.data(), sink.size(), busy)) {
    d->sink = *s;
    d->sink_addr = s->addr;
    return true;
  }
  if (busy) return false;  // no key to give now, whatever the memory
  Bounce* b = get_bounce(d->dev);
  if (!b) return false;
  d->bounce = b;
  d->bounce_to = sink;
  auto s = tr->map_sink(id, b->mem, sink.size(), busy);
  if (!s) return false;
  d->sink = *s;
  d->sink_addr = s->addr;
  return true;
}

void Node::ni_device_free_bounce(const LocalNi* ni, Bounce* b) {
  if (Device* dev = device_of(ni)) dev->free_bounces.push_back(b);
}

}  // namespace lnetr::o2ib
