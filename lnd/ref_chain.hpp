// A payload received by reference (issue 6's zero copy on receive).
//
// A message's payload has a place: the router buffer its credits paid for.
// A stream whose received bytes sit in memory it can keep (a DPDK port's
// received frames) may leave them there instead of copying them into that
// buffer: it records each run as a reference to the frame, which it
// retained, in the message's RefChain.  Bytes it could not keep (arrived
// before the buffer was lent, reassembled out of order, or beyond the
// budget of frames a worker may hold) are copied into the buffer as
// before.  The payload is then the buffer's runs and the frames' runs, in
// order (pieces()), and is sent from there with each run's device
// reference; the chain's owner lets go of the frames when the message is
// done (release()).
//
// Pure: the references are opaque, taken and dropped through FrameRefs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "router/bytes.hpp"

namespace lnetr::lnd {

// How a stream keeps received frames: one more reference, or one fewer.
class FrameRefs {
 public:
  // Keep `frame` for a chain; false if this one may not (its budget of
  // frames held is used up: the bytes are copied instead).
  virtual bool retain(void* frame) noexcept = 0;
  // One more reference to a frame kept already (a run of it split in
  // two): not refused.
  virtual void share(void* frame) noexcept = 0;
  virtual void release(void* frame) noexcept = 0;
  // Keep the memory of a piece sent with device reference `dev` by a
  // reference of one's own (a send queue, until the peer acknowledges
  // it), so that whoever lent it may have it back at once: only a
  // received frame can be (not a router buffer, whose owner reuses it),
  // within the same budget as retain().  Dropped with release().  False:
  // copy it.
  virtual bool hold(void* dev) noexcept {
    (void)dev;
    return false;
  }

 protected:
  ~FrameRefs() = default;
};

class RefChain {
 public:
  // A run of the payload and its memory's device reference (null: none).
  struct Piece {
    const std::uint8_t* data = nullptr;
    std::size_t len = 0;
    void* dev = nullptr;
  };

  RefChain() = default;
  ~RefChain() { release(); }
  RefChain(const RefChain&) = delete;
  RefChain& operator=(const RefChain&) = delete;
  // Moved with its references (and its storage: a reused chain allocates
  // nothing); what the target held is let go first.
  RefChain(RefChain&& o) noexcept { take(o); }
  RefChain& operator=(RefChain&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }

  // A new payload of `len` bytes whose place is `buf` (device reference
  // `buf_dev`, may be null); references of the previous one are dropped.
  void reset(std::uint8_t* buf, std::size_t len, void* buf_dev) noexcept {
    release();
    buf_ = buf;
    len_ = len;
    buf_dev_ = buf_dev;
  }
  // The payload bytes that belong at `where` (inside the buffer, after
  // every run referred so far) are `data`, in frame `frame`, which `refs`
  // retained for this chain.
  void refer(std::uint8_t* where, ByteSpan data, void* frame, FrameRefs& refs) {
    refs_.push_back(Ref{static_cast<std::size_t>(where - buf_), data.data(), data.size(), frame});
    owner_ = &refs;
    referenced_ += data.size();
    built_ = false;
  }
  // Copy the referred bytes that belong at `from` or after into the buffer
  // and let go of their frames (a reader wants them in the buffer after
  // all).  Returns the bytes copied.
  std::size_t materialize(const std::uint8_t* from) noexcept {
    const auto off = static_cast<std::size_t>(from - buf_);
    std::size_t copied = 0;
    while (!refs_.empty() && refs_.back().off + refs_.back().len > off) {
      Ref& r = refs_.back();
      // (A run starting before `from` is copied whole: its bytes belong there too.)
      std::memcpy(buf_ + r.off, r.data, r.len);
      copied += r.len;
      referenced_ -= r.len;
      owner_->release(r.frame);
      refs_.pop_back();
    }
    built_ = false;
    return copied;
  }
  // Let go of every frame: the payload is the buffer's (as far as it was
  // copied there).
  void release() noexcept {
    for (const Ref& r : refs_) owner_->release(r.frame);
    refs_.clear();
    referenced_ = 0;
    built_ = false;
  }
  // Payload bytes held by reference.
  std::size_t referenced() const noexcept { return referenced_; }
  // The payload as runs in order: the buffer's between referred ones.
  // Valid until the chain changes.
  const std::vector<Piece>& pieces() {
    if (!built_) build();
    return pieces_;
  }

 private:
  struct Ref {
    std::size_t off;  // in the payload
    const std::uint8_t* data;
    std::size_t len;
    void* frame;
  };

  void take(RefChain& o) noexcept {
    buf_ = o.buf_;
    len_ = o.len_;
    buf_dev_ = o.buf_dev_;
    owner_ = o.owner_;
    refs_.swap(o.refs_);
    pieces_.swap(o.pieces_);
    referenced_ = o.referenced_;
    built_ = o.built_;
    o.refs_.clear();
    o.referenced_ = 0;
    o.built_ = false;
  }

  void build() {
    pieces_.clear();
    std::size_t at = 0;
    for (const Ref& r : refs_) {
      if (r.off > at) pieces_.push_back(Piece{buf_ + at, r.off - at, buf_dev_});
      pieces_.push_back(Piece{r.data, r.len, r.frame});
      at = r.off + r.len;
    }
    if (len_ > at) pieces_.push_back(Piece{buf_ + at, len_ - at, buf_dev_});
    built_ = true;
  }

  std::uint8_t* buf_ = nullptr;
  std::size_t len_ = 0;
  void* buf_dev_ = nullptr;
  FrameRefs* owner_ = nullptr;
  std::vector<Ref> refs_;
  std::size_t referenced_ = 0;
  std::vector<Piece> pieces_;
  bool built_ = false;
};

}  // namespace lnetr::lnd
