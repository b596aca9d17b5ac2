// A connection's send queue of copied and lent pieces (send_queue.hpp).
#include "dataplane/tcp/send_queue.hpp"

#include <algorithm>
#include <cstring>

namespace lnetr::tcp {

namespace {
// Copied bytes go into the last owned piece while it is untouched and this
// small; otherwise a new piece starts (no piece is ever compacted).
constexpr std::size_t kOwnedPiece = 64 * 1024;
}  // namespace

void SendQueue::append(ByteSpan data, bool lend, void* dev) {
  if (data.empty()) return;
  if (!lend && head_ < pieces_.size()) {
    Piece& last = pieces_.back();
    if (!last.ref && last.off == 0 && last.start >= front_ && last.own.size() + data.size() <= kOwnedPiece) {
      last.own.insert(last.own.end(), data.begin(), data.end());
      last.len += data.size();
      end_ += data.size();
      return;
    }
  }
  Piece& p = add_piece(data.size());
  if (lend) {
    p.ref = data.data();
    p.dev = dev;
    lent_ += data.size();
  } else {
    p.own.assign(data.begin(), data.end());
  }
}

void SendQueue::append_held(ByteSpan data, void* dev, lnd::FrameRefs& frames) {
  if (data.empty()) {
    frames.release(dev);
    return;
  }
  Piece& p = add_piece(data.size());
  p.ref = data.data();
  p.dev = dev;
  p.held = true;
  held_ += data.size();
  frames_ = &frames;
}

// A new piece of `len` bytes at the end.  The vector of pieces is
// compacted (pieces moved, never their bytes) once the acknowledged ones
// are half of it.
SendQueue::Piece& SendQueue::add_piece(std::size_t len) {
  if (head_ > 0 && head_ * 2 >= pieces_.size()) {
    pieces_.erase(pieces_.begin(), pieces_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
  Piece& p = pieces_.emplace_back();
  p.start = end_;
  p.len = len;
  end_ += len;
  return p;
}

void SendQueue::drop_front(std::size_t n) noexcept {
  n = std::min(n, size());
  front_ += n;
  while (head_ < pieces_.size()) {
    Piece& p = pieces_[head_];
    if (p.start + p.len <= front_) {
      if (p.held) {
        held_ -= p.len;
        frames_->release(p.dev);
      } else if (p.ref) {
        lent_ -= p.len;
      }
      p = Piece{};  // its storage goes now
      ++head_;
      continue;
    }
    if (p.start < front_) {  // acknowledged in part
      const std::size_t k = static_cast<std::size_t>(front_ - p.start);
      if (p.ref) {
        p.ref += k;
        (p.held ? held_ : lent_) -= k;
      } else {
        p.off += k;
      }
      p.len -= k;
      p.start = front_;
    }
    break;
  }
  if (head_ == pieces_.size()) {
    pieces_.clear();
    head_ = 0;
  }
}

std::size_t SendQueue::own_all() {
  std::size_t copied = 0;
  for (std::size_t i = head_; i < pieces_.size(); ++i) {
    Piece& p = pieces_[i];
    if (!p.ref || p.held) continue;  // (held: the queue's own)
    p.own.assign(p.ref, p.ref + p.len);
    p.off = 0;
    p.ref = nullptr;
    p.dev = nullptr;
    copied += p.len;
  }
  lent_ = 0;
  return copied;
}

void SendQueue::clear() noexcept {
  for (std::size_t i = head_; i < pieces_.size(); ++i)
    if (pieces_[i].held) frames_->release(pieces_[i].dev);
  pieces_.clear();
  head_ = 0;
  front_ = end_;
  lent_ = held_ = 0;
}

std::size_t SendQueue::find(std::uint64_t pos) const noexcept {
  auto it = std::upper_bound(pieces_.begin() + static_cast<std::ptrdiff_t>(head_), pieces_.end(), pos,
                             [](std::uint64_t v, const Piece& p) { return v < p.start; });
  return static_cast<std::size_t>(it - pieces_.begin()) - 1;
}

void SendQueue::copy_out(std::size_t offset, std::size_t len, std::uint8_t* dst) const {
  for_each(offset, len, [&dst](ByteSpan s) {
    std::memcpy(dst, s.data(), s.size());
    dst += s.size();
  });
}

}  // namespace lnetr::tcp
