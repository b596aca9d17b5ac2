// The device reference of memory a port may chain frames from (the `dev`
// of a lent send-queue piece, Port::append_segment; in lnetr a router
// buffer's, lnd::Tx::payload_dev): DPDK's shared info of an external
// buffer, whose count of references is the memory's owner (one) plus every
// frame a port has chained from it and the device has not freed yet.  A
// port with chained frames sends a large message's payload from that
// memory itself (port.hpp); the owner reuses it only once no frame points
// into it any more (held_by_device()).
//
// A received frame kept by reference (lnd/ref_chain.hpp) has one too, in
// its mbuf's private area: its count is the chains and the frames sent that
// point into it, and the last to let go frees the mbuf.
#pragma once

#include <rte_mbuf.h>

#include <atomic>
#include <cstdint>

namespace lnetr::tcp {

// A port queue's received frames kept by reference (payloads received by
// reference, data held out of order, send queues holding what they send
// from them), at most `limit` references at a time: beyond it bytes are
// copied, so that the receive ring always finds free mbufs.  A send queue
// on another worker may hold one of this queue's frames, so the count is
// shared: relaxed atomics (it bounds memory, it orders nothing; two
// workers racing past the limit by one each is within the pool's slack).
struct FrameBudget {
  std::atomic<std::uint32_t> held{0};
  std::uint32_t limit = 0;
  bool take() noexcept {
    if (held.load(std::memory_order_relaxed) >= limit) return false;
    held.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  void add() noexcept { held.fetch_add(1, std::memory_order_relaxed); }
  void give() noexcept { held.fetch_sub(1, std::memory_order_relaxed); }
};

struct BufferRef {
  rte_mbuf_ext_shared_info shinfo;  // first: the device reference is its address
  const std::uint8_t* base = nullptr;
  rte_iova_t iova = RTE_BAD_IOVA;  // base's, or RTE_BAD_IOVA (virtual devices read addresses)
  FrameBudget* budget = nullptr;   // a received frame's: its queue's (null: a router buffer)

  // A buffer newly taken from its pool: one reference, its owner's.
  void reset(const std::uint8_t* buf, rte_iova_t buf_iova) noexcept {
    shinfo.free_cb = &never_freed;
    shinfo.fcb_opaque = nullptr;
    rte_mbuf_ext_refcnt_set(&shinfo, 1);
    base = buf;
    iova = buf_iova;
    budget = nullptr;
  }
  // A received frame, kept for a payload received by reference (the
  // port's FrameRefs): one reference, the receive path's, and the mbuf is
  // freed when the last reference goes (a chain's, or a frame's that was
  // attached to it for sending).  Lives in the mbuf's private area.
  void reset_frame(rte_mbuf* m, FrameBudget* frames) noexcept {
    shinfo.free_cb = &free_frame;
    shinfo.fcb_opaque = m;
    rte_mbuf_ext_refcnt_set(&shinfo, 1);
    base = static_cast<const std::uint8_t*>(m->buf_addr);
    iova = m->buf_iova;
    budget = frames;
  }
  // Drop a reference to a received frame (freed with the last one).
  void release_frame() noexcept {
    if (rte_mbuf_ext_refcnt_update(&shinfo, -1) == 0) free_frame(nullptr, shinfo.fcb_opaque);
  }
  void* handle() noexcept { return &shinfo; }
  static BufferRef* of(void* handle) noexcept { return reinterpret_cast<BufferRef*>(handle); }
  // Frames the device still holds that point into the buffer.  (Acquire:
  // a device that copied the frame on another worker did so before its
  // release of the count, and the buffer is reused after this.)
  bool held_by_device() const noexcept { return __atomic_load_n(&shinfo.refcnt, __ATOMIC_ACQUIRE) > 1; }
  rte_iova_t iova_of(const std::uint8_t* p) const noexcept {
    return iova == RTE_BAD_IOVA ? RTE_BAD_IOVA : iova + static_cast<rte_iova_t>(p - base);
  }

 private:
  // The owner's reference is never dropped through DPDK (the owner checks
  // held_by_device() and frees the buffer itself), so the count never
  // reaches zero in a frame's free.
  static void never_freed(void*, void*) noexcept {}
  static void free_frame(void*, void* m) noexcept { rte_pktmbuf_free(static_cast<rte_mbuf*>(m)); }
};

}  // namespace lnetr::tcp
