#include "cli/decode/tcp_reassembly.hpp"

#include <algorithm>

namespace lnetr::decode {
namespace {

// Consumed bytes are dropped from the front of the buffer once there are
// this many of them and they are at least half of it (amortised O(1)).
constexpr std::size_t kCompactAfter = 64u << 10;

}  // namespace

// ---- StreamBuffer -----------------------------------------------------------------

void StreamBuffer::add(std::uint64_t offset, ByteSpan data, FrameRef frame) {
  if (data.empty()) return;
  const std::uint64_t seg_end = offset + data.size();
  if (seg_end <= end()) return;  // a retransmission of bytes we have
  if (offset <= end()) {
    append(end(), data.subspan(static_cast<std::size_t>(end() - offset)), frame);
    drain_held();
    return;
  }
  if (held_bytes_ + data.size() > kMaxHeld) return;
  auto it = held_.find(offset);
  if (it != held_.end()) {
    if (it->second.bytes.size() >= data.size()) return;  // keep the longer copy
    held_bytes_ -= it->second.bytes.size();
    held_.erase(it);
  }
  held_.emplace(offset, Held{{data.begin(), data.end()}, frame});
  held_bytes_ += data.size();
}

void StreamBuffer::append(std::uint64_t offset, ByteSpan data, FrameRef frame) {
  if (data.empty()) return;
  buf_.insert(buf_.end(), data.begin(), data.end());
  if (!runs_.empty() && runs_.back().frame.number == frame.number && runs_.back().end == offset) {
    runs_.back().end += data.size();
  } else {
    runs_.push_back({offset, offset + data.size(), frame});
  }
}

void StreamBuffer::drain_held() {
  while (!held_.empty() && held_.begin()->first <= end()) {
    auto node = held_.extract(held_.begin());
    held_bytes_ -= node.mapped().bytes.size();
    const std::uint64_t at = node.key();
    const ByteSpan bytes = node.mapped().bytes;
    if (at + bytes.size() > end()) {
      append(end(), bytes.subspan(static_cast<std::size_t>(end() - at)), node.mapped().frame);
    }
  }
}

void StreamBuffer::consume(std::size_t n) {
  consumed_ += std::min(n, buf_.size() - consumed_);
  while (!runs_.empty() && runs_.front().end <= offset()) runs_.pop_front();
  if (consumed_ >= kCompactAfter && consumed_ * 2 >= buf_.size()) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(consumed_));
    base_ += consumed_;
    consumed_ = 0;
  }
}

FrameSpan StreamBuffer::frames(std::uint64_t begin, std::uint64_t stop) const {
  FrameSpan span;
  auto it = std::partition_point(runs_.begin(), runs_.end(), [&](const Run& r) { return r.end <= begin; });
  std::vector<std::uint32_t> seen;
  for (; it != runs_.end() && it->begin < stop; ++it) {
    if (seen.empty() || it->frame.number < span.first) {
      span.first = it->frame.number;
      span.time = it->frame.time;
    }
    span.last = std::max(span.last, it->frame.number);
    seen.push_back(it->frame.number);
  }
  std::sort(seen.begin(), seen.end());
  span.count = static_cast<std::uint32_t>(std::unique(seen.begin(), seen.end()) - seen.begin());
  return span;
}

std::optional<std::uint64_t> StreamBuffer::first_held() const noexcept {
  if (held_.empty()) return std::nullopt;
  return held_.begin()->first;
}

std::uint64_t StreamBuffer::skip_hole() {
  if (held_.empty()) return 0;
  const std::uint64_t next = held_.begin()->first;
  const std::uint64_t hole = next - end();
  // Everything before the hole is dropped; the stream resumes at `next`.
  buf_.clear();
  runs_.clear();
  consumed_ = 0;
  base_ = next;
  drain_held();
  return hole;
}

// ---- TcpReassembler -------------------------------------------------------------

TcpConnection& TcpReassembler::open(const ParsedFrame& f, bool from_syn) {
  TcpConnection c;
  c.index = conns_.size();
  c.saw_syn = from_syn;
  const bool src_is_client = from_syn || f.dst.port == server_port_ ||
                             (f.src.port != server_port_ && f.src.port > f.dst.port);
  c.client = src_is_client ? f.src : f.dst;
  c.server = src_is_client ? f.dst : f.src;
  conns_.push_back(std::move(c));
  by_tuple_[std::minmax(f.src, f.dst)] = conns_.back().index;
  return conns_.back();
}

void TcpReassembler::place(TcpDirection& d, const TcpSegment& s, FrameRef frame) {
  std::uint32_t seq = s.seq;
  if (s.flags & tcp_flag::syn) {
    d.isn = seq;
    d.seq0 = seq + 1;  // the SYN occupies one sequence number
    ++seq;
  }
  if (!d.seq0) d.seq0 = seq;  // joined mid-stream: this segment is offset 0
  // Place relative to the contiguous end, so that 32-bit sequence numbers
  // wrapping around on a long stream do not matter.
  const std::uint64_t cur = d.stream.end();
  const auto cur_seq = static_cast<std::uint32_t>(*d.seq0 + cur);
  const auto delta = static_cast<std::int32_t>(seq - cur_seq);
  ByteSpan data = s.payload;
  std::uint64_t offset = 0;
  if (delta < 0 && static_cast<std::uint64_t>(-static_cast<std::int64_t>(delta)) > cur) {
    // Starts before the stream's first byte (data with a retransmitted SYN).
    const auto before = static_cast<std::uint64_t>(-static_cast<std::int64_t>(delta)) - cur;
    if (before >= data.size()) data = {};
    else data = data.subspan(static_cast<std::size_t>(before));
  } else {
    offset = static_cast<std::uint64_t>(static_cast<std::int64_t>(cur) + delta);
  }
  d.stream.add(offset, data, frame);
  if (s.flags & tcp_flag::fin) d.fin = true;
}

TcpReassembler::Delivery TcpReassembler::add(const ParsedFrame& f, FrameRef frame) {
  const TcpSegment& s = f.tcp;
  const bool syn = s.flags & tcp_flag::syn;
  const bool ack = s.flags & tcp_flag::ack;
  auto it = by_tuple_.find(std::minmax(f.src, f.dst));
  TcpConnection* c = it == by_tuple_.end() ? nullptr : &conns_[it->second];
  if (syn && !ack) {
    // A new connection attempt unless it repeats the SYN we already have.
    const bool repeat = c && c->saw_syn && c->client == f.src && c->dir[0].isn == s.seq && !c->closed();
    if (!repeat) c = &open(f, true);
  } else if (!c) {
    c = &open(f, false);
  }
  const int d = f.src == c->client ? 0 : 1;
  if (s.flags & (tcp_flag::syn | tcp_flag::fin | tcp_flag::rst)) c->events.push_back({frame, d == 0, s.flags});
  if (s.flags & tcp_flag::rst) {
    c->reset = true;
    return {c, d};
  }
  // A SYN+ACK whose ISN differs from the one we have answers another attempt.
  if (syn && c->dir[d].isn && *c->dir[d].isn != s.seq) return {c, d};
  place(c->dir[d], s, frame);
  return {c, d};
}

}  // namespace lnetr::decode
