// A TCP connection's send queue: the bytes from snd_una on, sent or not, as
// a sequence of pieces.  A piece is either copied in (owned here) or lent
// by the caller, who keeps the memory valid until the queue lets go of it:
// when the peer acknowledges those bytes, when own_all() copies them, or
// when the queue is cleared.  Lent pieces are how the router sends a
// message's header and payload from its own buffers without copying them
// into the connection (issue 6's zero copy: the buffer is given back when
// the peer has acknowledged it, and retransmissions read it again).
//
// A lent piece may carry a device reference (`dev`): an opaque handle the
// port uses to hand the memory itself to the device (a DPDK external
// buffer's shared info, whose count of references keeps the memory's owner
// from reusing it while a frame still points at it).  Frames are then
// chained from the memory instead of copied out of it.
//
// Positions are absolute stream offsets (bytes ever appended), so that
// finding the piece under a segment is a binary search, whatever the
// number of small pieces queued.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lnd/ref_chain.hpp"
#include "router/bytes.hpp"

namespace lnetr::tcp {

class SendQueue {
 public:
  SendQueue() = default;
  ~SendQueue() { clear(); }
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  // Bytes queued (not yet acknowledged).
  std::size_t size() const noexcept { return static_cast<std::size_t>(end_ - front_); }
  bool empty() const noexcept { return end_ == front_; }
  // Append `data`: copied, or (lend) referenced until released, with the
  // device reference `dev` (may be null) of its memory.
  void append(ByteSpan data, bool lend, void* dev = nullptr);
  // Append `data`, in a received frame (device reference `dev`) that
  // `frames` held for this queue (FrameRefs::hold): kept by that
  // reference, which the queue drops through `frames` once the bytes are
  // acknowledged or cleared.  Not lent: its owner has nothing to wait for.
  void append_held(ByteSpan data, void* dev, lnd::FrameRefs& frames);
  // The first `n` bytes were acknowledged: let go of them.
  void drop_front(std::size_t n) noexcept;
  // Copy every lent byte still queued into owned storage; the bytes copied.
  std::size_t own_all();
  // Let go of everything.
  void clear() noexcept;
  // Lent bytes still referenced.
  std::size_t lent() const noexcept { return lent_; }
  // Bytes kept in held frames (append_held).
  std::size_t held() const noexcept { return held_; }

  // Calls f(ByteSpan) for the pieces covering [offset, offset + len) of the
  // queued bytes, in order.  offset + len <= size().
  template <class F>
  void for_each(std::size_t offset, std::size_t len, F&& f) const {
    for_each_piece(offset, len, [&f](ByteSpan s, void*) { f(s); });
  }
  // As for_each, with each piece's device reference: f(ByteSpan, void*),
  // null for bytes owned here or lent without one.
  template <class F>
  void for_each_piece(std::size_t offset, std::size_t len, F&& f) const {
    if (len == 0) return;
    std::uint64_t pos = front_ + offset;
    for (std::size_t i = find(pos); len > 0; ++i) {
      const Piece& p = pieces_[i];
      const std::size_t skip = static_cast<std::size_t>(pos - p.start);
      const std::size_t k = len < p.len - skip ? len : p.len - skip;
      f(ByteSpan(p.data() + skip, k), p.ref ? p.dev : nullptr);
      pos += k;
      len -= k;
    }
  }
  // The pieces covering [offset, offset + len), and whether any of them
  // has a device reference.
  struct Survey {
    std::size_t pieces = 0;
    bool dev = false;
  };
  Survey survey(std::size_t offset, std::size_t len) const {
    Survey s;
    for_each_piece(offset, len, [&s](ByteSpan, void* dev) {
      ++s.pieces;
      s.dev |= dev != nullptr;
    });
    return s;
  }
  // Copy [offset, offset + len) to `dst`.
  void copy_out(std::size_t offset, std::size_t len, std::uint8_t* dst) const;

 private:
  struct Piece {
    std::uint64_t start = 0;          // absolute position of data()[0]
    std::size_t len = 0;              // bytes from data()
    const std::uint8_t* ref = nullptr;  // lent memory, or null: own[off..]
    void* dev = nullptr;                // ref's device reference, if any
    bool held = false;                  // ref is in a frame the queue holds a reference of (dev)
    std::vector<std::uint8_t> own;
    std::size_t off = 0;
    const std::uint8_t* data() const noexcept { return ref ? ref : own.data() + off; }
  };
  Piece& add_piece(std::size_t len);
  // Index of the piece holding absolute position `pos` (front_ <= pos < end_).
  std::size_t find(std::uint64_t pos) const noexcept;

  std::vector<Piece> pieces_;  // from head_ on
  std::size_t head_ = 0;
  std::uint64_t front_ = 0, end_ = 0;
  std::size_t lent_ = 0;
  std::size_t held_ = 0;
  lnd::FrameRefs* frames_ = nullptr;  // of the held pieces
};

// One segment's payload as Output::transmit() gets it: a run of a send
// queue, or a single span.
class Payload {
 public:
  Payload() = default;
  Payload(ByteSpan one) noexcept : one_(one), len_(one.size()) {}  // NOLINT: implicit by design
  Payload(const SendQueue& q, std::size_t offset, std::size_t len) noexcept : q_(&q), off_(offset), len_(len) {}
  std::size_t size() const noexcept { return len_; }
  bool empty() const noexcept { return len_ == 0; }
  // Bytes [offset, offset + len) of this payload.
  Payload sub(std::size_t offset, std::size_t len) const noexcept {
    return q_ ? Payload(*q_, off_ + offset, len) : Payload(one_.subspan(offset, len));
  }
  template <class F>
  void for_each(F&& f) const {
    if (q_) q_->for_each(off_, len_, f);
    else if (len_) f(one_);
  }
  // f(ByteSpan, void* dev) per piece (SendQueue::for_each_piece).
  template <class F>
  void for_each_piece(F&& f) const {
    if (q_) q_->for_each_piece(off_, len_, f);
    else if (len_) f(one_, nullptr);
  }
  SendQueue::Survey survey() const { return q_ ? q_->survey(off_, len_) : SendQueue::Survey{len_ ? 1u : 0u, false}; }
  void copy_to(std::uint8_t* dst) const {
    if (q_) q_->copy_out(off_, len_, dst);
    else if (len_) std::copy(one_.begin(), one_.end(), dst);
  }

 private:
  const SendQueue* q_ = nullptr;
  ByteSpan one_;
  std::size_t off_ = 0, len_ = 0;
};

}  // namespace lnetr::tcp
