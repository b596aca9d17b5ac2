// socklnd's streams on a TCP/IP stack (sock_transport.hpp): the receive
// queues, loans and gathered writes between a connection and socklnd.
#include "dataplane/sock_transport.hpp"

#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lnd/socklnd/engine.hpp"
#include "lnd/socklnd/socket.hpp"

namespace lnetr::dp {

using tcp::Conn;
using tcp::End;
using tcp::Endpoints;
using tcp::Stack;
using tcp::Time;
using tcp::Upper;

namespace {

int error_of(End why) noexcept {
  switch (why) {
    case End::closed: return 0;
    case End::reset: return -ECONNRESET;
    case End::refused: return -ECONNREFUSED;
    case End::timed_out: return -ETIMEDOUT;
    case End::aborted: return -ECONNABORTED;
  }
  return -EIO;
}

// Wake a blocked writer only for a useful amount of room.
constexpr std::size_t kWriteWakeBytes = 64 * 1024;
// A connection socklnd closed gracefully gets this long to finish (Linux's
// tcp_fin_timeout for orphaned sockets); then it is reset.
constexpr Time kOrphanTimeout = std::chrono::seconds(60);
// The receive ring starts empty and grows, in steps of at least this, up to
// the configured capacity (a SYN costs no buffer).
constexpr std::size_t kRingStep = 64 * 1024;

}  // namespace

// Bytes received and not yet read, in order: runs left in the frames they
// arrived in (each holding one reference to its frame, taken by the
// caller), and runs copied into a byte ring.  Reading copies out of either;
// a payload received by reference takes the frames' runs as they are.
class SockTransport::ReceiveQueue {
 public:
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  // Append `bytes`: kept in `frame` if set (one reference of it is the
  // queue's now), else copied into the ring.  Returns the bytes copied.
  std::size_t push(ByteSpan bytes, void* frame) {
    if (bytes.empty()) return 0;
    size_ += bytes.size();
    if (frame) {
      add_run(Run{bytes.data(), bytes.size(), frame});
      return 0;
    }
    ring_push(bytes);
    if (run_head_ < runs_.size() && !runs_.back().frame) runs_.back().len += bytes.size();
    else add_run(Run{nullptr, bytes.size(), nullptr});
    return bytes.size();
  }
  // The first bytes, where they lie in one piece in a frame (else empty).
  ByteSpan front() const noexcept {
    if (run_head_ == runs_.size() || !runs_[run_head_].frame) return {};
    return ByteSpan(runs_[run_head_].data, runs_[run_head_].len);
  }
  // Drop the first `n` bytes of front() (n <= front().size()) unread; its
  // frame, if used up, is let go through `refs`.
  void drop_front(std::size_t n, lnd::FrameRefs* refs) noexcept { consume(runs_[run_head_], n, refs); }
  // Copy the first `n` bytes (n <= size()) to `dst` and drop them; frames
  // used up are let go through `refs`.
  void pop_to(std::uint8_t* dst, std::size_t n, lnd::FrameRefs* refs) {
    while (n > 0) {
      Run& r = runs_[run_head_];
      const std::size_t k = std::min(n, r.len);
      if (r.frame) std::memcpy(dst, r.data, k);
      else ring_pop(dst, k);
      consume(r, k, refs);
      dst += k;
      n -= k;
    }
  }
  // Move the first `n` bytes (n <= size()) into `chain` as the payload
  // bytes at `where`: runs in frames by reference (their references pass
  // to the chain), runs in the ring copied to `where`.  Returns the bytes
  // copied.
  std::size_t move_to(std::uint8_t* where, std::size_t n, lnd::RefChain& chain, lnd::FrameRefs* refs) {
    std::size_t copied = 0;
    while (n > 0) {
      Run& r = runs_[run_head_];
      const std::size_t k = std::min(n, r.len);
      if (r.frame) {
        if (k < r.len) refs->share(r.frame);  // the chain takes a part, the queue keeps the rest
        chain.refer(where, ByteSpan(r.data, k), r.frame, *refs);
        size_ -= k;
        if (k == r.len) ++run_head_;  // its reference went to the chain
        else r.data += k, r.len -= k;
      } else {
        ring_pop(where, k);
        consume(r, k, refs);
        copied += k;
      }
      where += k;
      n -= k;
    }
    return copied;
  }
  // Drop everything.
  void clear(lnd::FrameRefs* refs) noexcept {
    for (std::size_t i = run_head_; i < runs_.size(); ++i)
      if (runs_[i].frame) refs->release(runs_[i].frame);
    runs_.clear();
    run_head_ = 0;
    ring_ = {};
    head_ = len_ = size_ = 0;
  }

 private:
  struct Run {
    const std::uint8_t* data;  // in its frame (null: the next len bytes of the ring)
    std::size_t len;
    void* frame;
  };

  void add_run(const Run& r) {
    if (run_head_ > 0 && run_head_ * 2 >= runs_.size()) {  // compacted once half is read
      runs_.erase(runs_.begin(), runs_.begin() + static_cast<std::ptrdiff_t>(run_head_));
      run_head_ = 0;
    }
    runs_.push_back(r);
  }
  void consume(Run& r, std::size_t k, lnd::FrameRefs* refs) noexcept {
    size_ -= k;
    if (k < r.len) {
      if (r.frame) r.data += k;
      r.len -= k;
      return;
    }
    if (r.frame) refs->release(r.frame);
    ++run_head_;
  }
  void ring_push(ByteSpan bytes) {
    const std::size_t n = bytes.size();
    if (n > ring_.size() - len_) grow(len_ + n);
    const std::size_t tail = (head_ + len_) % ring_.size();  // grown above: not empty
    const std::size_t first = std::min(n, ring_.size() - tail);
    std::memcpy(ring_.data() + tail, bytes.data(), first);
    std::memcpy(ring_.data(), bytes.data() + first, n - first);
    len_ += n;
  }
  void ring_pop(std::uint8_t* dst, std::size_t n) noexcept {
    const std::size_t first = std::min(n, ring_.size() - head_);
    std::memcpy(dst, ring_.data() + head_, first);
    std::memcpy(dst + first, ring_.data(), n - first);
    head_ = (head_ + n) % ring_.size();
    len_ -= n;
  }
  // Re-lay the ring out at the start of a buffer of at least `size` bytes.
  void grow(std::size_t size) {
    std::vector<std::uint8_t> bigger(std::max({size, ring_.size() * 2, kRingStep}));
    if (len_ > 0) {  // (an empty ring may have no storage at all)
      const std::size_t first = std::min(len_, ring_.size() - head_);
      std::memcpy(bigger.data(), ring_.data() + head_, first);
      std::memcpy(bigger.data() + first, ring_.data(), len_ - first);
    }
    ring_.swap(bigger);
    head_ = 0;
  }

  std::vector<Run> runs_;
  std::size_t run_head_ = 0;
  std::vector<std::uint8_t> ring_;  // the copied runs' bytes
  std::size_t head_ = 0, len_ = 0;
  std::size_t size_ = 0;
};

// One connection's state between the stack (as its Upper) and socklnd (as
// the Stream's reader and writer).  Outlives the Stream when the Stream is
// closed gracefully: the connection then finishes on its own.
class SockTransport::Link final : public Upper {
 public:
  Link(SockTransport& t, const Endpoints& ep, bool active, std::uint32_t capacity)
      : capacity_(capacity), t_(t), ep_(ep), active_(active) {}

  void on_established() override {
    conn_ = t_.stack_.connection(ep_.remote_ip, ep_.remote_port, ep_.local_port);
    established_ = true;
    if (active_) t_.ready(this, EPOLLOUT);
    else t_.incoming_.push_back(this);
  }
  void on_data(ByteSpan bytes, void* frame) override {
    if (bytes.empty()) return;
    if (orphan_) {  // data after socklnd closed: nobody will read it, reset (as Linux)
      abort_due_ = true;
      t_.ready(this, 0);
      return;
    }
    // The queue grows as data comes (and the window, rounded up to its
    // scale and never shrinking, may bring a little more than
    // receive_space()): every byte delivered must be taken.
    if (lent_ && rq_.empty() && lent_filled_ < lent_len_) {  // socklnd's sink: by reference, or into it
      const std::size_t k = std::min(bytes.size(), lent_len_ - lent_filled_);
      if (chain_ && frame && t_.frames_ && t_.frames_->retain(frame)) {
        chain_->refer(lent_ + lent_filled_, bytes.first(k), frame, *t_.frames_);
        t_.stats_.bytes_referenced += k;
      } else {
        std::memcpy(lent_ + lent_filled_, bytes.data(), k);
        t_.stats_.bytes_copied += k;
      }
      lent_filled_ += k;
      bytes = bytes.subspan(k);
      t_.ready(this, EPOLLIN);
      if (bytes.empty()) return;
    }
    // Kept in its frame where it may be (a payload lent later takes it as
    // it is), else copied.
    const bool keep = frame && t_.frames_ && t_.frames_->retain(frame);
    t_.stats_.bytes_copied += rq_.push(bytes, keep ? frame : nullptr);
    t_.ready(this, EPOLLIN);
  }
  std::uint32_t receive_space() const override {
    const std::size_t held = rq_.size() + lent_filled_;
    return held >= capacity_ ? 0 : static_cast<std::uint32_t>(capacity_ - held);
  }
  void on_peer_closed() override {
    peer_fin_ = true;
    t_.ready(this, EPOLLIN | EPOLLRDHUP);
  }
  // Acknowledged bytes may release memory socklnd lent: tell it (once per
  // poll, with the other events).
  void on_acked(std::size_t) override {
    if (!lending_) return;
    t_.ready(this, EPOLLOUT);
    if (conn_ && conn_->lent() == 0) lending_ = false;
  }
  void on_end(End why) override {
    ended_ = true;
    end_ = why;
    conn_ = nullptr;
    if (!stream_) t_.maybe_finished(this);
    t_.ready(this, EPOLLIN | EPOLLOUT | EPOLLHUP | (why == End::closed ? 0u : static_cast<std::uint32_t>(EPOLLERR)));
  }

  bool finished() const noexcept { return ended_ && !stream_ && !queued_; }
  void end_loan() noexcept {
    lent_ = nullptr;
    lent_len_ = lent_filled_ = 0;
    chain_ = nullptr;
  }

  ~Link() override { rq_.clear(t_.frames_); }
  std::uint32_t capacity_;

  SockTransport& t_;
  Endpoints ep_;
  bool active_;
  Conn* conn_ = nullptr;  // from established until on_end
  LinkStream* stream_ = nullptr;
  sock::IoHandler* handler_ = nullptr;
  ReceiveQueue rq_;  // received, not yet read
  bool established_ = false, peer_fin_ = false, ended_ = false;
  End end_ = End::closed;
  std::uint32_t events_ = 0;
  std::size_t index_ = 0;  // in links_
  bool reap_ = false;      // on finishing_
  bool queued_ = false;   // on ready_
  bool blocked_ = false;  // on blocked_
  bool linger0_ = false;
  bool orphan_ = false;     // socklnd closed it gracefully; finishing on its own
  bool abort_due_ = false;  // reset it at the next poll (data came after the close)
  Time orphan_until_{0};
  // Memory socklnd lent for the next bytes (its payload sink), and how much
  // of it on_data() has filled that recv() has not reported yet.
  std::uint8_t* lent_ = nullptr;
  std::size_t lent_len_ = 0, lent_filled_ = 0;
  lnd::RefChain* chain_ = nullptr;  // where bytes left in their frames are recorded, if anywhere
  // Sending: bytes the stream took, and the position before which socklnd's
  // lent memory is released; whether some of it is still held.
  std::uint64_t taken_ = 0, released_ = 0;
  bool lending_ = false;
};

class SockTransport::LinkStream final : public sock::Stream {
 public:
  explicit LinkStream(Link& l) noexcept : l_(&l) { l.stream_ = this; }
  ~LinkStream() override {
    Link& l = *l_;
    l.stream_ = nullptr;
    l.handler_ = nullptr;
    l.end_loan();  // the memory goes back to its owner
    const bool unread = !l.rq_.empty();
    l.rq_.clear(l.t_.frames_);  // nobody reads it any more
    if (l.ended_) {
      l.t_.maybe_finished(&l);
    } else if (l.conn_) {
      Conn* c = l.conn_;
      // Closed with data unread, or under SO_LINGER 0: reset, as Linux.
      if (l.linger0_ || unread) {
        c->abort(l.t_.now_);
      } else {
        // Finishing without socklnd: what it lent is copied (its memory
        // goes back to it now).
        l.t_.stats_.bytes_copied += c->own_sent();
        l.lending_ = false;
        l.orphan_ = true;
        l.orphan_until_ = l.t_.now_ + kOrphanTimeout;
        l.t_.orphans_.push_back(&l);
        c->close(l.t_.now_);  // a connection still connecting ends at once
      }
    }
  }

  bool watch(sock::IoHandler* h) noexcept override {
    l_->handler_ = h;
    if (h && (!l_->rq_.empty() || l_->peer_fin_ || l_->ended_)) l_->t_.ready(l_, EPOLLIN);
    if (h && l_->established_ && l_->active_) l_->t_.ready(l_, EPOLLOUT);
    return true;
  }

  bool lend(std::uint8_t* dst, std::size_t len, lnd::RefChain* chain) noexcept override {
    Link& l = *l_;
    if (l.lent_filled_ > 0 || len == 0 || (!l.rq_.empty() && !chain)) return false;
    l.lent_ = dst;
    l.lent_len_ = len;
    l.chain_ = chain;
    if (!l.rq_.empty()) {  // what has come already: its frames' runs pass to the chain as they are
      const std::size_t k = std::min(len, l.rq_.size());
      const std::size_t copied = l.rq_.move_to(dst, k, *chain, l.t_.frames_);
      l.t_.stats_.bytes_copied += copied;
      l.t_.stats_.bytes_referenced += k - copied;
      l.lent_filled_ = k;
    }
    return true;
  }

  ssize_t recv(std::uint8_t* dst, std::size_t len) noexcept override {
    Link& l = *l_;
    if (l.lent_) {
      if (l.lent_filled_ > 0) {  // bytes placed in lent memory come first
        const std::size_t n = std::min(len, l.lent_filled_);
        const bool elsewhere = dst != l.lent_;
        if (elsewhere) {  // read into other memory: still in order, at the cost of a copy
          if (l.chain_) l.t_.stats_.bytes_copied += l.chain_->materialize(l.lent_);
          std::memmove(dst, l.lent_, n);
          l.t_.stats_.bytes_copied += n;
        }
        l.lent_ += n;
        l.lent_len_ -= n;
        l.lent_filled_ -= n;
        // The loan ends when used up, or when read elsewhere with nothing left in it.
        if (l.lent_len_ == 0 || (elsewhere && l.lent_filled_ == 0)) l.end_loan();
        if (l.conn_) l.conn_->window_opened(l.t_.now_);
        return static_cast<ssize_t>(n);
      }
      l.end_loan();  // a read before anything arrived ends the loan
    }
    if (l.rq_.empty()) {
      if (l.peer_fin_) return 0;
      if (l.ended_) return l.end_ == End::closed ? 0 : error_of(l.end_);
      return -EAGAIN;
    }
    const std::size_t n = std::min(len, l.rq_.size());
    l.rq_.pop_to(dst, n, l.t_.frames_);
    l.t_.stats_.bytes_copied += n;
    if (l.conn_) l.conn_->window_opened(l.t_.now_);
    return static_cast<ssize_t>(n);
  }

  // A head read in place: never while a loan holds bytes of its own (they
  // come first), nor from the ring of copied bytes.
  ByteSpan peek() noexcept override { return l_->lent_ ? ByteSpan{} : l_->rq_.front(); }
  void skip(std::size_t n) noexcept override {
    Link& l = *l_;
    l.rq_.drop_front(n, l.t_.frames_);
    if (l.conn_) l.conn_->window_opened(l.t_.now_);
  }

  ssize_t sendv(const iovec* iov, std::size_t n) noexcept override { return sendv_lent(iov, n, nullptr, nullptr); }

  ssize_t sendv_lent(const iovec* iov, std::size_t n, const bool* lend_iov, void* const* dev) noexcept override {
    Link& l = *l_;
    if (!l.conn_) return l.ended_ ? (l.end_ == End::closed ? -EPIPE : error_of(l.end_)) : -EAGAIN;
    std::size_t total = 0;
    bool full = false;
    // Queued together and sent once: segments as full as the bytes allow.
    for (std::size_t i = 0; i < n && !full; ++i) {
      const ByteSpan part(static_cast<const std::uint8_t*>(iov[i].iov_base), iov[i].iov_len);
      const bool lend = lend_iov && lend_iov[i];
      void* const d = dev ? dev[i] : nullptr;
      bool held = false;
      // Not lent, in a received frame: held by the connection's own
      // reference where it may, else copied.
      const std::size_t took = !lend && d ? l.conn_->queue_only_held(part, d, held) : l.conn_->queue_only(part, lend, d);
      if (lend) l.lending_ |= took > 0;
      else if (held) l.t_.stats_.bytes_held += took;
      else l.t_.stats_.bytes_copied += took;
      total += took;
      full = took < part.size();
    }
    l.conn_->push_queued(l.t_.now_);
    l.taken_ += total;
    if (full && !l.blocked_) {
      l.blocked_ = true;
      l.t_.blocked_.push_back(&l);
    }
    return total == 0 && full ? -EAGAIN : static_cast<ssize_t>(total);
  }
  bool lends() const noexcept override { return true; }
  bool receives_in_place() const noexcept override { return true; }
  std::uint64_t taken() const noexcept override { return l_->taken_; }
  // The send queue is in stream order: while it holds lent bytes, what it
  // holds is at most what is not yet acknowledged.
  std::uint64_t released() const noexcept override {
    Link& l = *l_;
    const std::uint64_t now = l.conn_ && l.conn_->lent() > 0 ? l.taken_ - l.conn_->queued() : l.taken_;
    l.released_ = std::max(l.released_, now);
    return l.released_;
  }

  int connect_result() noexcept override {
    if (l_->established_) return 0;
    return l_->ended_ ? (l_->end_ == End::closed ? -ECONNRESET : error_of(l_->end_)) : -EINPROGRESS;
  }
  sock::Endpoint local() const noexcept override {
    return {l_->ep_.local_ip, l_->ep_.local_port};
  }
  sock::Endpoint remote() const noexcept override {
    return {l_->ep_.remote_ip, l_->ep_.remote_port};
  }
  // As socklnd sets on a kernel socket: SO_LINGER 0 (closes abort) and TCP
  // keepalive (idle, interval, probes).
  void configure(const sock::Options& o) noexcept override {
    l_->linger0_ = true;
    if (l_->conn_ && o.keepalive_idle > 0 && o.keepalive_count > 0 && o.keepalive_intvl > 0)
      l_->conn_->set_keepalive(std::chrono::seconds(o.keepalive_idle), std::chrono::seconds(o.keepalive_intvl),
                               o.keepalive_count, l_->t_.now_);
  }

 private:
  Link* l_;
};

SockTransport::SockTransport(Stack& stack, std::uint16_t port, Accept accept, std::uint32_t rx_buffer)
    : stack_(stack), port_(port), accept_(std::move(accept)), rx_buffer_(rx_buffer) {
  if (port != 0)
    stack_.listen(port, [this](const Endpoints& ep) -> Upper* {
      return add(std::make_unique<Link>(*this, ep, false, rx_buffer_));
    });
}

SockTransport::~SockTransport() {
  if (port_ != 0) stack_.unlisten(port_);
}

std::unique_ptr<sock::Stream> SockTransport::connect(const sock::IpAddr& local_ip, const sock::IpAddr& remote,
                                                     std::uint16_t port, int& error) {
  // local_ip is the stack's own address: one per port, of one family.
  if (local_ip.family != remote.family) {
    error = EAFNOSUPPORT;
    return nullptr;
  }
  Endpoints ep;
  ep.remote_ip = remote;
  ep.remote_port = port;
  auto link = std::make_unique<Link>(*this, ep, true, rx_buffer_);
  Conn* c = stack_.connect(remote, port, 0, *link, now_);
  if (!c) {
    error = EADDRINUSE;  // every privileged port to that peer is taken
    return nullptr;
  }
  link->ep_ = c->endpoints();
  link->conn_ = c;  // sends queue until it is established; a close ends it at once
  auto s = std::make_unique<LinkStream>(*link);
  add(std::move(link));
  ++stats_.connects;
  return s;
}

SockTransport::Link* SockTransport::add(std::unique_ptr<Link> l) {
  l->index_ = links_.size();
  links_.push_back(std::move(l));
  return links_.back().get();
}

// Ended, or its stream closed: freed at the end of the next poll() if it is
// then over on both sides.
void SockTransport::maybe_finished(Link* l) {
  if (l->reap_) return;
  l->reap_ = true;
  finishing_.push_back(l);
}

void SockTransport::ready(Link* l, std::uint32_t events) {
  l->events_ |= events;
  if (!l->queued_) {
    l->queued_ = true;
    ready_.push_back(l);
  }
}

std::size_t SockTransport::poll(Time now) {
  now_ = now;
  // New connections first: the acceptor starts reading their request.
  // (The lists are swapped with scratch lists: both keep their capacity.)
  scratch_.clear();
  scratch_.swap(incoming_);
  for (Link* l : scratch_) {
    if (l->ended_) continue;
    ++stats_.accepted;
    accept_(std::make_unique<LinkStream>(*l));  // the acceptor watches it (or drops it)
  }
  // Writers waiting for room.
  for (std::size_t i = 0; i < blocked_.size();) {
    Link* l = blocked_[i];
    const bool room = !l->conn_ || l->conn_->send_space() >= std::min(kWriteWakeBytes, l->conn_->send_buffer() / 2);
    if (room) {
      l->blocked_ = false;
      blocked_[i] = blocked_.back();
      blocked_.pop_back();
      ready(l, EPOLLOUT);
    } else {
      ++i;
    }
  }
  std::size_t delivered = 0;
  scratch_.clear();
  scratch_.swap(ready_);
  for (Link* l : scratch_) {
    l->queued_ = false;
    const std::uint32_t ev = l->events_;
    l->events_ = 0;
    if (l->orphan_ && l->conn_ && l->abort_due_) {
      l->conn_->abort(now_);
      continue;
    }
    if (l->stream_ && l->handler_) {
      l->handler_->on_io(ev);
      ++delivered;
    }
  }
  // Orphans that outstay their time are reset.
  for (std::size_t i = 0; i < orphans_.size();) {
    Link* l = orphans_[i];
    if (l->conn_ && now_ >= l->orphan_until_) l->conn_->abort(now_);
    if (!l->conn_) {
      orphans_[i] = orphans_.back();
      orphans_.pop_back();
    } else {
      ++i;
    }
  }
  // Free what is over on both sides (what is not yet stays a candidate).
  for (std::size_t i = 0; i < finishing_.size();) {
    Link* l = finishing_[i];
    if (!l->finished() || l->blocked_) {
      ++i;
      continue;
    }
    finishing_[i] = finishing_.back();
    finishing_.pop_back();
    const std::size_t at = l->index_;
    links_[at] = std::move(links_.back());
    links_[at]->index_ = at;
    links_.pop_back();
  }
  return delivered;
}

}  // namespace lnetr::dp
