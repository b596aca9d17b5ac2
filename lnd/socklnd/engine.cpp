#include "lnd/socklnd/engine.hpp"
#include "router/enum_names.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lnd/socklnd/socket.hpp"

namespace lnetr::sock {

// ---- names ------------------------------------------------------------------

LNETR_ENUM_NAMES(, CloseReason, LNETR_SOCK_CLOSE_REASONS)

std::uint64_t new_incarnation() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// ---- TxQueue ----------------------------------------------------------------

void TxQueue::push(Tx* t) noexcept {
  t->next = nullptr;
  if (tail) tail->next = t; else head = t;
  tail = t;
  ++count;
  bytes += t->total();
}

void TxQueue::push_front(Tx* t) noexcept {
  t->next = head;
  head = t;
  if (!tail) tail = t;
  ++count;
  bytes += t->total();
}

Tx* TxQueue::pop() noexcept {
  Tx* t = head;
  if (!t) return nullptr;
  head = t->next;
  if (!head) tail = nullptr;
  t->next = nullptr;
  --count;
  bytes -= t->total();
  return t;
}

// ---- connection and peer ------------------------------------------------------

namespace {

constexpr std::size_t kStageSize = 8192;  // head staging: also soaks up small payloads
constexpr std::size_t kHandshakeMax = kAcceptorV2Size + kHelloV4Size + 4 * kHelloMaxIps;
constexpr std::size_t kMaxPendingAcks = 256;
constexpr std::size_t kIovMax = 64;
constexpr auto kKeepaliveRetry = std::chrono::seconds(10);

std::size_t type_index(ConnType t) noexcept {
  switch (t) {
    case ConnType::control: return 1;
    case ConnType::bulk_in: return 2;
    case ConnType::bulk_out: return 3;
    default: return 0;
  }
}

bool sendable_type(std::int32_t t) noexcept {
  return t == static_cast<std::int32_t>(ConnType::any) || t == static_cast<std::int32_t>(ConnType::control) ||
         t == static_cast<std::int32_t>(ConnType::bulk_in) || t == static_cast<std::int32_t>(ConnType::bulk_out);
}

// Protocol version to offer a peer first: V4 carries large NIDs.
std::uint32_t default_version(const Nid& peer) noexcept { return peer.is_nid4() ? 3 : 4; }

// A header with a large (IPv6) NID fits only V4's nid16 form.
bool needs_v4(const Tx& t) noexcept { return !t.hdr.src_nid.fits_nid4() || !t.hdr.dest_nid.fits_nid4(); }

}  // namespace

class Conn final : public IoHandler {
 public:
  enum class State : std::uint8_t { connecting, hello_wait, established, closed };
  enum class RxState : std::uint8_t { head, payload, deferred };

  Conn(Node& node, std::unique_ptr<Stream> s, bool active) : node_(node), s_(std::move(s)), active_(active) {
    s_->count_into(node_.stats_);
    ++node_.conns_;
  }

  ~Conn();
  void on_io(std::uint32_t events) override;
  // The peer it belongs to, which is kept while any connection refers to it.
  void attach(Peer* p) noexcept;

  Node& node_;
  Peer* peer_ = nullptr;
  std::unique_ptr<Stream> s_;  // null once closed
  bool active_;
  State state_ = State::connecting;
  ConnType type_ = ConnType::any;  // our end's type
  std::uint32_t version_ = 3;
  ByteOrder order_ = kNativeOrder;  // the peer's order for socklnd headers
  const LocalNi* ni_ = nullptr;
  Endpoint local_{};
  Endpoint remote_{};
  bool user_peer_ = false;  // unprivileged source port under accept=all

  // Handshake bytes still to write (request + HELLO, or our HELLO reply).
  std::array<std::uint8_t, kHandshakeMax> hs_out_{};
  std::size_t hs_len_ = 0, hs_sent_ = 0;
  std::uint32_t hs_version_ = 3;

  // Receive.
  std::array<std::uint8_t, kStageSize> stage_{};
  std::size_t stage_off_ = 0, stage_len_ = 0;
  RxState rx_state_ = RxState::head;
  Rx rx_;
  std::size_t rx_got_ = 0;
  std::uint64_t pending_zc_ = 0;  // the message's ZC request, ACKed after its payload
  bool large_last_ = false;        // the last message's payload filled the stage or more
  Clock::time_point rx_deadline_{};

  // Send.
  TxQueue txq_;
  // Written to a lending stream, waiting for it to release their memory.
  TxQueue unreleased_;
  // Control bytes (NOOPs: ZC-ACKs, keepalive) written between messages.
  std::array<std::uint8_t, kMsgHeaderSize * 8> ctl_{};
  std::size_t ctl_len_ = 0, ctl_sent_ = 0;
  std::array<std::uint64_t, kMaxPendingAcks> acks_{};
  std::size_t acks_head_ = 0, acks_count_ = 0;
  bool keepalive_due_ = false;
  bool writable_ = false;
  bool in_write_ = false;
  bool flush_pending_ = false;  // on node_.flush_: write at the next flush()
  Clock::time_point tx_deadline_{};

  bool closed() const noexcept { return state_ == State::closed; }
  // Messages with at least zc_min_payload bytes of payload are lent to a
  // stream that can send them by reference (and handed back once it has let
  // go of them); smaller ones are copied and handed back at once, as Linux's
  // socklnd sends only payloads of zc_min_payload or more by zero copy.
  // Waiting for the ACK of every small message would hold its credits for a
  // round trip (and a receiver's delayed ACK).
  bool lent_by_reference(const Tx& t) const noexcept { return t.payload.size() >= node_.opts_.zc_min_payload; }
  std::size_t queued_bytes() const noexcept { return txq_.bytes + acks_count_ * kMsgHeaderSize; }

  void start_established();
  void close(CloseReason why, int err);
  void do_read();
  void do_write();
  bool read_some(std::uint8_t* dst, std::size_t len, std::size_t& got);
  void heard();
  bool handshake_read();
  void finish_active_hello(const Hello& h);
  void on_message_head(const MessageHead& head);
  void payload_done();
  void queue_zc_ack(std::uint64_t cookie);
  void fill_ctl() noexcept;
  void queue(Tx& t);
  void complete_released();
  void drain();
  void want_write() noexcept;
  bool handshake_write();
};

class Peer {
 public:
  Peer(Node& node, const Nid& nid, const LocalNi& ni) : node_(node), nid_(nid), ni_(&ni) {}

  Node& node_;
  Nid nid_;
  const LocalNi* ni_;
  std::vector<Conn*> conns_;
  TxQueue waiting_;  // no suitable connection yet
  std::uint32_t version_ = 0;  // 0: to be (re)negotiated
  std::uint64_t incarnation_ = 0;
  Conn* connecting_ = nullptr;
  bool connect_set_ = false;  // we connect to this peer: complete the typed set
  std::uint32_t connect_version_ = 0;  // version to offer next (0: default)
  Clock::time_point next_connect_{};
  std::chrono::milliseconds retry_interval_{0};
  int retries_ = 0;  // consecutive retry-type outcomes
  Clock::time_point last_alive_{};
  Clock::time_point keepalive_sent_{};
  // For freeing it when idle (Node::sweep_idle): connections (open,
  // closed, draining) that refer to it, and when it last had a use.
  std::uint32_t conn_refs_ = 0;
  Clock::time_point last_used_{};
  bool at_rest(Clock::time_point now) const noexcept {
    return conn_refs_ == 0 && conns_.empty() && connecting_ == nullptr && waiting_.empty() && now >= next_connect_;
  }

  Conn* choose(const Tx& t) const noexcept;
  void place(Tx& t);
  void flush_waiting();
  void want_connections(Clock::time_point now);
  std::size_t count(ConnType t) const noexcept;
  void connect(ConnType type, Clock::time_point now);
  void connect_failed(int err, bool retry_soon);
  void conn_gone(Conn* c, bool was_established);
  void close_all(CloseReason why, int err, const Conn* except = nullptr);
  void fail_waiting(int err);
  void tick(Clock::time_point now);
};

Conn::~Conn() {
  if (peer_ != nullptr) --peer_->conn_refs_;
  --node_.conns_;
}

void Conn::attach(Peer* p) noexcept {
  peer_ = p;
  ++p->conn_refs_;
}

// ---- Conn: I/O dispatch ---------------------------------------------------------

namespace {

// The close reason for a failed recv/send.
CloseReason error_reason(int err) {
  return err == ECONNRESET || err == EPIPE ? CloseReason::peer_reset : CloseReason::io_error;
}

}  // namespace

void Conn::on_io(std::uint32_t events) {
  if (closed()) {
    if (s_ && (events & EPOLLERR)) drain();  // still held by the kernel (Node::draining_)
    return;
  }
  if (state_ == State::connecting) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    const int err = s_->connect_result();
    if (err != 0) {
      Peer* p = peer_;
      close(CloseReason::io_error, err);
      if (p) p->connect_failed(err, false);
      return;
    }
    local_ = s_->local();
    state_ = State::hello_wait;
    writable_ = true;
    do_write();
    if (!closed()) do_read();
    return;
  }
  if (events & (EPOLLOUT | EPOLLERR)) {
    if (events & EPOLLOUT) writable_ = true;
    if (events & EPOLLERR) s_->poll_released();
    complete_released();
    if (closed()) return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) do_read();
  if (!closed() && writable_) do_write();
}

// Bytes came from the peer: the receive deadline starts again, and the
// peer is alive (no keepalive due).
void Conn::heard() {
  const Clock::time_point now = node_.turn_time();
  rx_deadline_ = now + node_.timeout_of(ni_);
  if (peer_) peer_->last_alive_ = now;
}

// Read up to `len` bytes; false when the connection was closed.
bool Conn::read_some(std::uint8_t* dst, std::size_t len, std::size_t& got) {
  got = 0;
  const ssize_t n = s_->recv(dst, len);
  if (n > 0) {
    got = static_cast<std::size_t>(n);
    heard();
    return true;
  }
  if (n == 0) {
    close(CloseReason::peer_closed, -ECONNRESET);
    return false;
  }
  if (n == -EAGAIN) return true;
  close(error_reason(static_cast<int>(-n)), static_cast<int>(n));
  return false;
}

void Conn::do_read() {
  for (;;) {
    if (closed()) return;
    if (state_ == State::hello_wait) {
      if (!handshake_read()) return;
      continue;
    }
    if (state_ != State::established || rx_state_ == RxState::deferred) return;

    if (rx_state_ == RxState::payload) {
      const std::size_t want = rx_.hdr.payload_length - rx_got_;
      if (stage_len_ > 0) {  // payload bytes that arrived with the head
        const std::size_t n = std::min(want, stage_len_);
        if (!rx_.discard) {
          std::memcpy(rx_.sink.data() + rx_got_, stage_.data() + stage_off_, n);
          node_.stats_.bytes_copied += n;  // a second copy of what the stream read into the stage
        }
        rx_got_ += n;
        stage_off_ += n;
        stage_len_ -= n;
      } else {
        std::size_t got = 0;
        std::uint8_t* dst = rx_.discard ? stage_.data() : rx_.sink.data() + rx_got_;
        // A payload that may stay where it arrived is lent before reading:
        // what the stream holds already passes to it as it is.
        if (rx_.chain && !rx_.discard) (void)s_->lend(dst, want, rx_.chain);
        if (!read_some(dst, rx_.discard ? std::min(want, stage_.size()) : want, got)) return;
        if (got == 0) {  // would block: the stream may place what comes straight into the sink
          if (!rx_.discard) (void)s_->lend(dst, want, rx_.chain);
          return;
        }
        rx_got_ += got;
      }
      if (rx_got_ == rx_.hdr.payload_length) payload_done();
      continue;
    }

    // RxState::head: decode it where the stream holds it in one piece (a
    // received frame), else from the stage; else read more into the stage.
    const ByteSpan held = stage_len_ == 0 ? s_->peek() : ByteSpan{};
    const bool in_place = !held.empty();
    const ByteSpan bytes = in_place ? held : ByteSpan(stage_.data() + stage_off_, stage_len_);
    auto need = message_head_bytes_needed(bytes, version_, order_);
    if (!need) {
      close(CloseReason::bad_message, -EPROTO);
      return;
    }
    if (bytes.size() >= *need) {
      auto head = decode_message_head(bytes, version_, order_);
      if (!head) {
        close(CloseReason::bad_message, -EPROTO);
        return;
      }
      if (in_place) {
        s_->skip(head->size);
        heard();
      } else {
        stage_off_ += head->size;
        stage_len_ -= head->size;
      }
      on_message_head(*head);
      continue;
    }
    if (stage_off_ + stage_len_ == stage_.size() || (stage_len_ == 0 && stage_off_ != 0)) {
      std::memmove(stage_.data(), stage_.data() + stage_off_, stage_len_);
      stage_off_ = 0;
    }
    // A stream that lends is read no further than the head: the payload
    // after it is read into its sink (or lent) without passing the stage.
    // Kernel sockets: as much as fits, one system call for many small
    // messages; but after a large payload, no further than a whole
    // message head (a large one is likely next, as on a bulk connection):
    // its payload is then read once, straight into its sink, at the cost
    // of one more call per message.
    const std::size_t room = stage_.size() - stage_off_ - stage_len_;
    std::size_t ask = room;
    if (s_->receives_in_place()) {
      ask = std::min(room, *need - stage_len_);  // (a head begun in a frame: all it needs)
    } else if (large_last_) {
      const std::size_t whole = (version_ != 1 ? kMsgHeaderSize : 0) + header_size(header_form(version_));
      ask = std::min(room, std::max(*need, whole) - stage_len_);
    }
    std::size_t got = 0;
    if (!read_some(stage_.data() + stage_off_ + stage_len_, ask, got)) return;
    if (got == 0) return;
    stage_len_ += got;
  }
}

void Conn::on_message_head(const MessageHead& head) {
  if (head.sock) {
    const ZcAck ack = zc_ack_of(*head.sock, version_);
    // lnetr never asks for zero-copy, so an ACK can only be a keepalive.
    if (ack.kind != ZcAck::Kind::none && ack.kind != ZcAck::Kind::keepalive) {
      close(CloseReason::bad_zc_ack, -EPROTO);
      return;
    }
    if (!head.lnet) return;  // NOOP
  }
  if (check_header(*head.lnet)) {
    close(CloseReason::bad_message, -EPROTO);
    return;
  }
  rx_ = Rx{};
  rx_.conn = this;
  rx_.from = peer_->nid_;
  rx_.ni = ni_->nid;
  rx_.hdr = *head.lnet;
  if (user_peer_) {  // Linux rewrites a user-space peer's identity
    rx_.hdr.src_nid = peer_->nid_;
    rx_.hdr.src_pid = static_cast<std::uint32_t>(remote_.port) | kPidUserFlag;
  }
  rx_got_ = 0;
  large_last_ = rx_.hdr.payload_length >= kStageSize;
  pending_zc_ = head.sock ? head.sock->zc_req_cookie : 0;
  ++node_.stats_.rx_msgs;
  switch (node_.upper_.on_head(rx_)) {
    case RxVerdict::reject:
      close(CloseReason::upper_rejected, -EPROTO);
      return;
    case RxVerdict::defer:
      rx_state_ = RxState::deferred;
      return;
    case RxVerdict::accept:
      rx_state_ = RxState::payload;
      if (rx_.hdr.payload_length == 0) payload_done();
      return;
  }
}

void Conn::payload_done() {
  node_.stats_.rx_bytes += rx_.hdr.payload_length;
  rx_state_ = RxState::head;
  if (pending_zc_ != 0) {
    queue_zc_ack(pending_zc_);
    pending_zc_ = 0;
  }
  node_.upper_.on_received(rx_);
}

// ---- Conn: sending --------------------------------------------------------------

void Conn::queue_zc_ack(std::uint64_t cookie) {
  if (acks_count_ == acks_.size()) {
    // More un-ACKed zero-copy requests than any peer's credits allow.
    close(CloseReason::bad_message, -EPROTO);
    return;
  }
  acks_[(acks_head_ + acks_count_) % acks_.size()] = cookie;
  ++acks_count_;
  want_write();
}

// Messages and ACKs queued while handling one batch of events go out
// together at Node::flush(): one sendmsg() (and fewer, fuller segments)
// instead of one per message.
void Conn::want_write() noexcept {
  if (flush_pending_ || in_write_) return;
  flush_pending_ = true;
  node_.flush_.push_back(this);
}

// Build NOOPs (ZC-ACKs first, then a due keepalive) into the control buffer;
// only called between messages, when the buffer is empty.
void Conn::fill_ctl() noexcept {
  ctl_len_ = ctl_sent_ = 0;
  while (acks_count_ > 0 && ctl_len_ + kMsgHeaderSize <= ctl_.size()) {
    (void)encode_msg_header(make_zc_ack(acks_[acks_head_]), MutableByteSpan(ctl_).subspan(ctl_len_), kNativeOrder);
    acks_head_ = (acks_head_ + 1) % acks_.size();
    --acks_count_;
    ctl_len_ += kMsgHeaderSize;
    ++node_.stats_.zc_acks_sent;
  }
  if (keepalive_due_ && ctl_len_ + kMsgHeaderSize <= ctl_.size()) {
    (void)encode_msg_header(make_keepalive(), MutableByteSpan(ctl_).subspan(ctl_len_), kNativeOrder);
    ctl_len_ += kMsgHeaderSize;
    keepalive_due_ = false;
    ++node_.stats_.keepalives_sent;
  }
}

// Encode `t` for this connection's version and queue it.
void Conn::queue(Tx& t) {
  std::size_t n = 0;
  if (version_ != 1) {
    (void)encode_msg_header(MsgHeader{}, MutableByteSpan(t.wire), kNativeOrder);
    n = kMsgHeaderSize;
  }
  auto h = encode_header(t.hdr, MutableByteSpan(t.wire).subspan(n), header_form(version_));
  t.wire_len = static_cast<std::uint32_t>(n + (h ? *h : 0));
  t.sent = 0;
  t.held_status = 0;
  t.piece = t.piece_at = 0;
  if (txq_.empty() && ctl_len_ == ctl_sent_) tx_deadline_ = node_.turn_time() + node_.timeout_of(ni_);
  txq_.push(&t);
  want_write();
}

bool Conn::handshake_write() {
  while (hs_sent_ < hs_len_) {
    const iovec iov{hs_out_.data() + hs_sent_, hs_len_ - hs_sent_};
    const ssize_t n = s_->sendv(&iov, 1);
    if (n < 0) {
      if (n == -EAGAIN) {
        writable_ = false;
        return false;
      }
      close(error_reason(static_cast<int>(-n)), static_cast<int>(n));
      return false;
    }
    hs_sent_ += static_cast<std::size_t>(n);
  }
  return true;
}

void Conn::do_write() {
  // Upper::on_sent() may queue more on this connection: those sends only
  // queue (the loop below writes them) instead of writing from stale offsets.
  if (closed() || !writable_ || in_write_) return;
  if (!handshake_write() || state_ != State::established) return;
  in_write_ = true;
  struct Clear {
    bool& flag;
    ~Clear() { flag = false; }
  } clear{in_write_};
  for (;;) {
    if (ctl_sent_ == ctl_len_ && (txq_.empty() || txq_.head->sent == 0) && (acks_count_ > 0 || keepalive_due_))
      fill_ctl();
    iovec iov[kIovMax];
    bool lend[kIovMax];  // control bytes are rewritten in place: only large messages are lent
    void* dev[kIovMax];
    std::size_t niov = 0;
    if (ctl_sent_ < ctl_len_) {
      lend[niov] = false;
      dev[niov] = nullptr;
      iov[niov++] = {ctl_.data() + ctl_sent_, ctl_len_ - ctl_sent_};
    }
    for (Tx* t = txq_.head; t && niov + 2 <= kIovMax; t = t->next) {
      const bool large = lent_by_reference(*t);
      const std::size_t wire_left = t->sent < t->wire_len ? t->wire_len - t->sent : 0;
      if (wire_left) {
        lend[niov] = large;
        dev[niov] = nullptr;
        iov[niov++] = {t->wire.data() + t->sent, wire_left};
      }
      const std::size_t pay_done = t->sent > t->wire_len ? t->sent - t->wire_len : 0;
      if (t->payload.size() <= pay_done) continue;
      if (t->pieces.empty()) {
        lend[niov] = large;
        dev[niov] = large ? t->payload_dev : nullptr;
        iov[niov++] = {const_cast<std::uint8_t*>(t->payload.data()) + pay_done, t->payload.size() - pay_done};
        continue;
      }
      // A payload in runs: from the one holding pay_done, as many as fit.
      while (t->piece_at + t->pieces[t->piece].len <= pay_done) t->piece_at += t->pieces[t->piece++].len;
      std::size_t skip = pay_done - t->piece_at;
      for (std::size_t i = t->piece; i < t->pieces.size() && niov < kIovMax; ++i, skip = 0) {
        const lnd::RefChain::Piece& p = t->pieces[i];
        lend[niov] = large;
        dev[niov] = p.dev;  // (not lent: a stream may still hold a received frame by a reference of its own)
        iov[niov++] = {const_cast<std::uint8_t*>(p.data) + skip, p.len - skip};
      }
    }
    if (niov == 0) return;
    const bool lent = s_->lends();  // before the write: a stream may stop lending in it
    const ssize_t n = s_->sendv_lent(iov, niov, lend, dev);
    if (n < 0) {
      if (n == -EAGAIN) {
        writable_ = false;
        return;
      }
      close(error_reason(static_cast<int>(-n)), static_cast<int>(n));
      return;
    }
    const Clock::time_point now = Clock::now();
    tx_deadline_ = now + node_.timeout_of(ni_);
    ++node_.stats_.tx_writes;
    auto left = static_cast<std::size_t>(n);
    const std::size_t c = std::min(left, ctl_len_ - ctl_sent_);
    ctl_sent_ += c;
    left -= c;
    // The stream position of each message's end, from the stream's own
    // count (handshake bytes included).
    std::uint64_t pos = s_->taken() - static_cast<std::uint64_t>(n) + c;
    // Credit every byte written first, then hand the finished messages back.
    TxQueue done;
    while (txq_.head && (left > 0 || txq_.head->sent == txq_.head->total())) {
      Tx* t = txq_.head;
      const std::size_t take = std::min(left, t->total() - t->sent);
      t->sent += static_cast<std::uint32_t>(take);
      left -= take;
      pos += take;
      if (t->sent < t->total()) break;
      t->stream_end = pos;
      done.push(txq_.pop());
    }
    while (Tx* t = done.pop()) {
      ++node_.stats_.tx_msgs;
      node_.stats_.tx_bytes += t->payload.size();
      if (lent && lent_by_reference(*t)) {
        t->written_at = now;
        unreleased_.push(t);
      } else {
        node_.upper_.on_sent(*t, 0);
      }
    }
    if (closed()) return;
    if (lent) complete_released();  // what the stream copied after all
    if (closed()) return;
  }
}

// Hand back the messages whose memory the stream no longer holds (all of
// them once the stream is gone: it let go of everything).
void Conn::complete_released() {
  const std::uint64_t released = s_ ? s_->released() : UINT64_MAX;
  while (unreleased_.head && unreleased_.head->stream_end <= released) {
    Tx* t = unreleased_.pop();
    node_.upper_.on_sent(*t, t->held_status);
  }
}

// A closed connection whose stream still holds lent memory: hand back what
// it let go of, and once that is everything, close it for good.
void Conn::drain() {
  s_->poll_released();
  complete_released();
  if (unreleased_.head) return;
  s_.reset();
  std::erase(node_.draining_, this);
  node_.stats_.zc_draining = node_.draining_.size();
  node_.bury(this);
}

// ---- Conn: handshake ------------------------------------------------------------

// Active side: read and check the peer's HELLO.  False: wait or closed.
bool Conn::handshake_read() {
  const ByteSpan staged(stage_.data() + stage_off_, stage_len_);
  auto need = hello_bytes_needed(staged);
  if (!need) {
    Peer* p = peer_;
    close(CloseReason::bad_hello, -EPROTO);
    if (p) p->connect_failed(-EPROTO, false);
    return false;
  }
  if (stage_len_ < *need) {
    std::size_t got = 0;
    if (!read_some(stage_.data() + stage_off_ + stage_len_, *need - stage_len_, got)) {
      if (peer_) peer_->connect_failed(-ECONNRESET, false);
      return false;
    }
    stage_len_ += got;
    return got != 0;
  }
  auto hello = decode_hello(staged.first(*need));
  stage_off_ += *need;
  stage_len_ -= *need;
  if (!hello) {
    Peer* p = peer_;
    close(CloseReason::bad_hello, -EPROTO);
    if (p) p->connect_failed(-EPROTO, false);
    return false;
  }
  finish_active_hello(*hello);
  return !closed();
}

void Conn::finish_active_hello(const Hello& h) {
  Peer& p = *peer_;
  if (h.conn_type() == ConnType::none) {
    // Same version: lost a race or a duplicate, retry later.  Another
    // version: the peer tells us what it speaks, retry with it at once.
    const bool renegotiate = h.version != hs_version_;
    if (renegotiate) p.connect_version_ = h.version;
    close(CloseReason::peer_refused, -EALREADY);
    p.connect_failed(-EALREADY, true);
    if (renegotiate) p.next_connect_ = Clock::now();
    return;
  }
  if (h.src_nid != p.nid_ || h.src_pid != kPidLustre) {
    close(CloseReason::wrong_identity, -EPROTO);
    p.connect_failed(-EPROTO, false);
    return;
  }
  if (invert(h.conn_type()) != type_) {
    close(CloseReason::bad_conn_type, -EPROTO);
    p.connect_failed(-EPROTO, false);
    return;
  }
  if (p.version_ != 0 && (p.version_ != h.version || p.incarnation_ != h.src_incarnation)) {
    // The peer restarted (or changed version): its old connections die.
    p.close_all(CloseReason::refused_stale, -ESTALE, this);
    p.version_ = 0;
  }
  if (p.version_ == 0) {
    p.version_ = h.version;
    p.incarnation_ = h.src_incarnation;
  }
  version_ = h.version;
  order_ = h.order;
  p.connecting_ = nullptr;
  p.retries_ = 0;
  p.retry_interval_ = std::chrono::milliseconds(0);
  ++node_.stats_.conns_connected;
  start_established();
  p.conns_.push_back(this);
  p.flush_waiting();
  p.want_connections(Clock::now());
}

void Conn::start_established() {
  state_ = State::established;
  if (ni_ != nullptr && ni_->tos >= 0) {
    Options o = node_.opts_;
    o.tos = ni_->tos;
    s_->configure(o);
  } else {
    s_->configure(node_.opts_);
  }
  rx_state_ = RxState::head;
  rx_deadline_ = Clock::now() + node_.timeout_of(ni_);
  if (peer_) peer_->last_alive_ = Clock::now();
}

void Conn::close(CloseReason why, int err) {
  if (closed()) return;
  const bool was_established = state_ == State::established;
  state_ = State::closed;
  node_.count_close(why);
  // Abortive (SO_LINGER 0).  Lent memory is let go of with the stream,
  // unless the kernel still holds some (zero-copy sends not completed: it
  // may yet read those pages for the device).  Then the socket is only
  // disconnected, and this connection drains until the kernel says so
  // (at shutdown nothing is reused any more: let go at once).
  Tx* partial = txq_.head && txq_.head->sent > 0 && lent_by_reference(*txq_.head) ? txq_.head : nullptr;
  const bool holding = s_ && (unreleased_.head || partial) && !node_.shutting_down_ && s_->abort_holding();
  if (!holding) s_.reset();
  if (was_established && (rx_state_ == RxState::payload || rx_state_ == RxState::deferred))
    node_.upper_.on_rx_aborted(rx_);
  // A message partly written fails, but the kernel may hold what was
  // written of it: handed back (failed) once released too.
  if (holding && partial) {
    txq_.pop();
    partial->stream_end = s_->taken();
    partial->held_status = err < 0 ? err : -EIO;
    unreleased_.push(partial);
  }
  // Written in full: sent, as far as LNet knows (as with a kernel socket's
  // buffer).  Not -EIO, as Linux reports a message still waiting for its
  // zero-copy ACK: this one may well have arrived (only the TCP ACK lost),
  // and the router would send a failed message again by another gateway.
  complete_released();
  while (Tx* t = txq_.pop()) node_.upper_.on_sent(*t, err < 0 ? err : -EIO);
  if (peer_) peer_->conn_gone(this, was_established);
  if (holding && unreleased_.head) {
    ++node_.stats_.zc_drains;
    node_.draining_.push_back(this);
    node_.stats_.zc_draining = node_.draining_.size();
  } else {
    s_.reset();
    node_.bury(this);
  }
}

// ---- Peer ----------------------------------------------------------------------

std::size_t Peer::count(ConnType t) const noexcept {
  std::size_t n = 0;
  for (const Conn* c : conns_) n += c->type_ == t;
  return n;
}

// The connection for `t` as Linux's V3 placement does it: small messages on
// CONTROL, bulk on BULK_OUT, each the other's fallback; never on BULK_IN
// (the peer's ACK connection) or untyped connections.  Least queued first.
// With several NIs on a net (Linux keeps a peer per NI): connections of an
// NI whose link is down come last, and a message from one of our NIs (a
// REPLY or ACK leaves from the NI its request came to) goes on a
// connection of that NI if the peer has one.
Conn* Peer::choose(const Tx& t) const noexcept {
  const std::size_t nob = kMsgHeaderSize + kLnetHeaderSize + t.payload.size();
  const ConnType want = nob < node_.opts_.min_bulk ? ConnType::control : ConnType::bulk_out;
  Conn* best = nullptr;
  int best_rank = -1;
  for (Conn* c : conns_) {
    if (c->closed() || (c->type_ != ConnType::control && c->type_ != ConnType::bulk_out)) continue;
    const bool link = c->ni_ == nullptr || !c->ni_->link_down;
    const int rank = (link ? 4 : 0) + (c->ni_ != nullptr && c->ni_->nid == t.hdr.src_nid ? 2 : 0) +
                     (c->type_ == want ? 1 : 0);
    if (!best || rank > best_rank || (rank == best_rank && c->queued_bytes() < best->queued_bytes())) {
      best = c;
      best_rank = rank;
    }
  }
  return best;
}

void Peer::place(Tx& t) {
  if (Conn* c = choose(t)) {
    c->queue(t);
    return;
  }
  t.queued_at = node_.turn_time();
  waiting_.push(&t);
  want_connections(t.queued_at);
}

void Peer::flush_waiting() {
  TxQueue still, refused;
  while (Tx* t = waiting_.pop()) {
    if (needs_v4(*t) && version_ != 0 && version_ < 4) refused.push(t);  // the peer settled on V3
    else if (Conn* c = choose(*t)) c->queue(*t);
    else still.push(t);
  }
  waiting_ = still;
  while (Tx* t = refused.pop()) node_.upper_.on_sent(*t, -EAFNOSUPPORT);
}

// Once a message has had to wait for a connection, open the whole typed
// set: CONTROL, then BULK_IN and BULK_OUT (conns_per_peer of each), one at a
// time, as Linux does on a peer's first send.
void Peer::want_connections(Clock::time_point now) {
  if (!waiting_.empty()) connect_set_ = true;
  if (connecting_ || !connect_set_ || now < next_connect_) return;
  const std::uint32_t n = node_.conns_per_peer_of(ni_);
  if (count(ConnType::control) == 0) return connect(ConnType::control, now);
  if (count(ConnType::bulk_in) < n && count(ConnType::bulk_in) <= count(ConnType::bulk_out))
    return connect(ConnType::bulk_in, now);
  if (count(ConnType::bulk_out) < n) return connect(ConnType::bulk_out, now);
  connect_set_ = false;  // complete
}

void Peer::connect(ConnType type, Clock::time_point now) {
  if (node_.conns_ >= node_.opts_.max_conns) {  // dataplane.limits.connections
    node_.count_close(CloseReason::refused_too_many_conns);
    connect_failed(-EMFILE, false);
    return;
  }
  int error = 0;
  Transport& t = ni_->transport ? *ni_->transport : node_.kernel_;
  auto stream = t.connect(IpAddr::of(ni_->nid), IpAddr::of(nid_), node_.opts_.port, error);
  if (!stream) {
    connect_failed(-error, false);
    return;
  }
  auto* c = new Conn(node_, std::move(stream), true);
  c->attach(this);
  c->ni_ = ni_;
  c->type_ = type;
  c->remote_ = {IpAddr::of(nid_), node_.opts_.port};
  // The version the peer speaks now, else the default, or V4 if a waiting
  // message has a large NID: Linux takes V4 from an IPv4 peer too.
  std::uint32_t first = node_.opts_.offer_v4 ? 4 : default_version(nid_);
  for (const Tx* w = waiting_.head; w && first < 4; w = w->next)
    if (needs_v4(*w)) first = 4;
  c->hs_version_ = connect_version_ != 0 ? connect_version_ : version_ != 0 ? version_ : first;
  c->version_ = c->hs_version_;
  c->rx_deadline_ = now + node_.timeout_of(ni_);
  // The acceptor request and our HELLO go out together once connected.
  AcceptorRequest req{nid_.is_nid4() ? 1u : 2u, nid_, kNativeOrder};
  Hello h;
  h.version = c->hs_version_;
  h.order = kNativeOrder;
  h.src_nid = ni_->nid;
  h.dst_nid = nid_;
  h.src_incarnation = node_.incarnation_;
  h.ctype = static_cast<std::int32_t>(type);
  auto n1 = encode_acceptor_request(req, MutableByteSpan(c->hs_out_));
  auto n2 = encode_hello(h, MutableByteSpan(c->hs_out_).subspan(n1 ? *n1 : 0));
  c->hs_len_ = (n1 ? *n1 : 0) + (n2 ? *n2 : 0);
  connecting_ = c;
  if (!c->s_->watch(c)) {
    c->close(CloseReason::io_error, -EIO);
    return;
  }
}

// A connection attempt ended without a connection.  `retry_soon`: the peer
// refused for a reason that a later attempt can overcome (race, duplicate,
// version): keep the waiting messages.
void Peer::connect_failed(int err, bool retry_soon) {
  connecting_ = nullptr;
  ++node_.stats_.connect_failures;
  const auto min = node_.opts_.min_reconnect, max = node_.opts_.max_reconnect;
  if (retry_soon && ++retries_ < 3) {
    next_connect_ = Clock::now() + min;
    return;
  }
  retries_ = 0;
  retry_interval_ = retry_interval_.count() == 0 ? min : std::min(max, retry_interval_ * 2);
  next_connect_ = Clock::now() + retry_interval_;
  if (conns_.empty()) {
    fail_waiting(err);
    // Nothing left to send: connect again only when there is (a peer
    // made up by a remote node is not dialled every backoff forever).
    connect_set_ = false;
    node_.upper_.on_peer_down(nid_);
  }
}

// A connection closed.  When the last established one goes, the protocol
// version is renegotiated by the next connection and, unless one is being
// made, LNet is told the peer is down.
void Peer::conn_gone(Conn* c, bool was_established) {
  if (connecting_ == c) connecting_ = nullptr;
  if (!was_established) return;
  conns_.erase(std::remove(conns_.begin(), conns_.end(), c), conns_.end());
  if (!conns_.empty()) return;
  version_ = 0;
  if (!connecting_) node_.upper_.on_peer_down(nid_);
}

void Peer::close_all(CloseReason why, int err, const Conn* except) {
  // Each close() takes its connection out of conns_.
  for (;;) {
    auto it = std::find_if(conns_.begin(), conns_.end(), [except](const Conn* c) { return c != except; });
    if (it == conns_.end()) return;
    (*it)->close(why, err);
  }
}

void Peer::fail_waiting(int err) {
  while (Tx* t = waiting_.pop()) node_.upper_.on_sent(*t, err);
}

void Peer::tick(Clock::time_point now) {
  const auto timeout = node_.timeout_of(ni_);
  // Messages that waited a whole timeout for a connection fail.
  while (waiting_.head && now - waiting_.head->queued_at >= timeout) {
    Tx* t = waiting_.pop();
    node_.upper_.on_sent(*t, -ETIMEDOUT);
  }
  if (connecting_ && now > connecting_->rx_deadline_) {
    Conn* c = connecting_;
    c->close(CloseReason::timeout, -ETIMEDOUT);
    connect_failed(-ETIMEDOUT, false);
  }
  // A stalled receive or send closes every connection to the peer; so does
  // a message written to a lending stream and not acknowledged by the peer
  // within the timeout (as Linux does with messages awaiting a zero-copy
  // ACK), which would otherwise hold its router buffer for as long as TCP
  // retries.
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    if (conns_[i]->s_) conns_[i]->s_->poll_released();
    conns_[i]->complete_released();
  }
  for (Conn* c : conns_) {
    const bool rx_stalled = (c->rx_state_ != Conn::RxState::head || c->stage_len_ > 0) && now > c->rx_deadline_;
    const bool tx_stalled = (!c->txq_.empty() || c->ctl_sent_ < c->ctl_len_) && now > c->tx_deadline_;
    const bool unacked = c->unreleased_.head && now - c->unreleased_.head->written_at > node_.timeout_of(ni_);
    if (rx_stalled || tx_stalled || unacked) {
      c->close(CloseReason::timeout, -ETIMEDOUT);
      close_all(CloseReason::siblings_closed, -ETIMEDOUT);
      return;
    }
  }
  // Keepalive: nothing heard for `keepalive`, a NOOP (0, 1) on the ACK
  // connection, at most every 10 s, unless that connection is busy.
  if (version_ >= 3 && !conns_.empty() && node_.opts_.keepalive.count() > 0 &&
      now - last_alive_ >= node_.opts_.keepalive && now - keepalive_sent_ >= kKeepaliveRetry) {
    keepalive_sent_ = now;
    Conn* best = nullptr;
    for (Conn* c : conns_)
      if (!best || type_index(c->type_) == type_index(ConnType::bulk_in)) best = c;
    if (best && best->txq_.empty()) {
      best->keepalive_due_ = true;
      best->do_write();
    }
  }
  want_connections(now);
}

// ---- Node ----------------------------------------------------------------------

Node::Node(Options opts, std::vector<LocalNi> nis, std::uint64_t incarnation, Poller& poller, Upper& upper)
    : opts_(opts), incarnation_(incarnation), poller_(poller), kernel_(poller), upper_(upper) {
  for (const LocalNi& n : nis) nis_.push_back(std::make_unique<LocalNi>(n));
}

bool Node::add_ni(const LocalNi& ni) {
  if (ni_by_nid(ni.nid) != nullptr) return false;
  nis_.push_back(std::make_unique<LocalNi>(ni));
  return true;
}

bool Node::del_ni(const Nid& nid) {
  auto it = std::find_if(nis_.begin(), nis_.end(), [&nid](const auto& n) { return n->nid == nid; });
  if (it == nis_.end()) return false;
  const LocalNi* ni = it->get();
  deleted_nis_.push_back(std::move(*it));
  nis_.erase(it);  // (no new send or connection finds it from here on)
  std::vector<Peer*> gone;
  for (auto& [pnid, p] : peers_)
    if (p->ni_ == ni) gone.push_back(p.get());
  for (Peer* p : gone) {
    if (p->connecting_) p->connecting_->close(CloseReason::ni_deleted, -ENETDOWN);
    p->close_all(CloseReason::ni_deleted, -ENETDOWN);
    p->fail_waiting(-ENETDOWN);
    p->next_connect_ = Clock::time_point{};  // (no reconnect to wait for)
  }
  // Connections draining zero-copy sends keep their peer until the kernel
  // lets go; the rest go now.
  sweep_deleted();
  return true;
}

bool Node::tune_ni(const Nid& nid, std::uint32_t conns_per_peer, std::chrono::seconds timeout) noexcept {
  for (auto& n : nis_) {
    if (n->nid != nid) continue;
    if (conns_per_peer != 0) n->conns_per_peer = conns_per_peer;
    if (timeout.count() > 0) n->timeout = timeout;
    return true;
  }
  return false;
}

void Node::set_link(const Nid& nid, bool up) noexcept {
  for (auto& n : nis_)
    if (n->nid == nid) n->link_down = !up;
}

// Peers of deleted NIs, freed as soon as nothing refers to them; and the
// deleted NIs none of whose peers is left.
void Node::sweep_deleted() {
  if (deleted_nis_.empty()) return;
  const Clock::time_point now = turn_time();
  auto on_deleted = [this](const LocalNi* ni) {
    return std::any_of(deleted_nis_.begin(), deleted_nis_.end(), [ni](const auto& d) { return d.get() == ni; });
  };
  stats_.peers_freed += std::erase_if(peers_, [&](auto& kv) {
    if (!on_deleted(kv.second->ni_) || !kv.second->at_rest(now)) return false;
    recent_.forget(kv.first);
    return true;
  });
  std::erase_if(deleted_nis_, [this](const auto& d) {
    return std::none_of(peers_.begin(), peers_.end(), [&d](const auto& kv) { return kv.second->ni_ == d.get(); });
  });
}

Node::~Node() {
  shutdown();
  reap();
}

const LocalNi* Node::ni_for_net(Net net) const noexcept {
  for (const auto& n : nis_)
    if (n->nid.net() == net) return n.get();
  return nullptr;
}

const LocalNi* Node::ni_by_nid(const Nid& nid) const noexcept {
  for (const auto& n : nis_)
    if (n->nid == nid) return n.get();
  return nullptr;
}

Peer* Node::find_peer(const Nid& nid) noexcept {
  if (Peer* p = recent_.find(nid)) return p;
  auto it = peers_.find(nid);
  if (it == peers_.end()) return nullptr;
  recent_.put(nid, it->second.get());
  return it->second.get();
}

Peer* Node::peer(const Nid& nid, const LocalNi& ni) {
  if (Peer* known = find_peer(nid)) {
    known->last_used_ = turn_time();
    return known;
  }
  if (peers_.size() >= opts_.max_peers) {
    ++stats_.peers_refused;
    return nullptr;
  }
  auto& slot = peers_[nid];
  slot = std::make_unique<Peer>(*this, nid, ni);
  slot->last_used_ = turn_time();
  return slot.get();
}

int Node::send(const Nid& dest, Tx& tx) {
  const LocalNi* ni = ni_for_net(dest.net());
  if (!ni) return -EHOSTUNREACH;
  Peer* known = peer(dest, *ni);
  if (known == nullptr) return -ENOSPC;  // a new peer, and the table is full
  Peer& p = *known;
  // V1-V3 headers carry 64-bit NIDs only: Linux would truncate a large NID
  // to its first four address bytes (a NID nobody has); refuse instead.
  if (p.version_ != 0 && p.version_ < 4 && needs_v4(tx)) return -EAFNOSUPPORT;
  if (p.conns_.empty() && !p.connecting_ && turn_time() < p.next_connect_ && p.retry_interval_.count() > 0)
    return -EIO;  // backing off after failed connects, as Linux does
  p.place(tx);
  return 0;
}

void Node::resume(Rx& rx) {
  Conn* c = static_cast<Conn*>(rx.conn);
  if (!c || c->closed() || c->rx_state_ != Conn::RxState::deferred) return;
  c->rx_ = rx;
  c->rx_state_ = Conn::RxState::payload;
  if (c->rx_.hdr.payload_length == 0) c->payload_done();
  c->do_read();
}

Nid peer_nid_of(const Accepted& a) noexcept {
  return a.remote.port > kPrivilegedPortMax ? make_nid(a.request.nid.net(), a.remote.ip) : a.hello.src_nid;
}

void Node::adopt(Accepted&& a) {
  a.stream->attach(poller_);
  auto* c = new Conn(*this, std::move(a.stream), false);
  c->local_ = a.local;
  c->remote_ = a.remote;
  c->ni_ = ni_by_nid(a.request.nid);
  if (!c->ni_) {  // the acceptor checks this; a Node serving other NIs refuses too
    count_close(CloseReason::bad_acceptor);
    delete c;
    return;
  }
  const Hello& h = a.hello;
  c->version_ = h.version;
  c->order_ = h.order;
  c->user_peer_ = a.remote.port > kPrivilegedPortMax;
  const Nid peer_nid = peer_nid_of(a);

  // Our reply: our HELLO with the inverted type, or type NONE to refuse.
  Hello reply;
  reply.version = h.version;
  reply.order = kNativeOrder;
  reply.src_nid = c->ni_->nid;
  reply.dst_nid = h.src_nid;
  reply.src_incarnation = incarnation_;
  auto refuse = [&](CloseReason why) {
    reply.ctype = static_cast<std::int32_t>(ConnType::none);
    auto n = encode_hello(reply, MutableByteSpan(c->hs_out_));
    if (n) {
      const iovec iov{c->hs_out_.data(), *n};
      (void)c->s_->sendv(&iov, 1);
    }
    count_close(why);
    delete c;
  };

  if (!sendable_type(h.ctype)) {  // NONE or unknown: close without a reply
    count_close(CloseReason::bad_conn_type);
    delete c;
    return;
  }
  c->type_ = invert(h.conn_type());
  if (conns_ > opts_.max_conns) return refuse(CloseReason::refused_too_many_conns);  // (c counts itself)
  Peer* known = peer(peer_nid, *c->ni_);
  if (known == nullptr) return refuse(CloseReason::refused_peer_table_full);
  Peer& p = *known;
  // Connection race: the higher NID's own connection wins.
  if (peer_nid < c->ni_->nid && p.connecting_) return refuse(CloseReason::refused_race);
  if (p.version_ != 0 && (p.version_ != h.version || p.incarnation_ != h.src_incarnation)) {
    p.close_all(CloseReason::refused_stale, -ESTALE);
    p.version_ = 0;
    return refuse(CloseReason::refused_stale);
  }
  // Duplicates beyond conns_per_peer of a type (loopback exempt).
  if (a.remote.ip != a.local.ip) {
    std::size_t dup = 0;
    for (const Conn* o : p.conns_)
      dup += o->type_ == c->type_ && o->remote_.ip == a.remote.ip && o->local_.ip == a.local.ip;
    if (dup >= conns_per_peer_of(c->ni_)) return refuse(CloseReason::refused_duplicate);
  }
  if (p.version_ == 0) {
    p.version_ = h.version;
    p.incarnation_ = h.src_incarnation;
  }
  reply.ctype = static_cast<std::int32_t>(c->type_);
  auto n = encode_hello(reply, MutableByteSpan(c->hs_out_));
  c->hs_len_ = n ? *n : 0;
  c->attach(&p);
  c->writable_ = true;
  if (!c->s_->watch(c)) {
    count_close(CloseReason::io_error);
    delete c;
    return;
  }
  ++stats_.conns_accepted;
  c->start_established();
  p.conns_.push_back(c);
  c->do_write();
  if (c->closed()) return;
  p.flush_waiting();
  c->do_read();
}

void Node::tick(Clock::time_point now) {
  // Connections closed while the kernel held their memory: EPOLLERR
  // reports its completions; this is in case one was missed.
  for (std::size_t i = draining_.size(); i-- > 0;) draining_[i]->drain();
  // Peers' ticks hand messages back (Upper::on_sent), which may send to a
  // peer not yet known: peers_ may grow, so walk a copy of it.
  tick_peers_.clear();
  for (auto& [nid, p] : peers_) tick_peers_.push_back(p.get());
  for (Peer* p : tick_peers_) p->tick(now);
  sweep_deleted();
  if (now >= next_sweep_) {
    next_sweep_ = now + std::chrono::seconds(1);
    sweep_idle(now);
  }
}

// A peer with no connection (nor a closed one still held), nothing
// waiting, not backing off, and no use for peer_idle is freed, as Linux
// frees a ksocklnd peer once its last connection and message are gone.
std::size_t Node::sweep_idle(Clock::time_point now) {
  const std::size_t n = std::erase_if(peers_, [&](auto& kv) {
    Peer& p = *kv.second;
    if (!p.conns_.empty()) p.last_used_ = now;  // in use
    const bool idle = p.at_rest(now) && now - p.last_used_ >= opts_.peer_idle;
    if (idle) recent_.forget(kv.first);
    return idle;
  });
  stats_.peers_freed += n;
  return n;
}

void Node::bury(Conn* c) { graveyard_.push_back(c); }

void Node::reap() {
  for (Conn* c : graveyard_) {
    if (c->flush_pending_) std::erase(flush_, c);
    delete c;
  }
  graveyard_.clear();
}

std::size_t Node::flush() {
  std::size_t n = 0;
  // do_write() may queue on other connections (Upper::on_sent): index, not iterators.
  for (std::size_t i = 0; i < flush_.size(); ++i) {
    Conn* c = flush_[i];
    c->flush_pending_ = false;
    if (c->closed() || !c->writable_) continue;
    c->do_write();
    ++n;
  }
  flush_.clear();
  return n;
}

void Node::shutdown() {
  shutting_down_ = true;
  while (!draining_.empty()) {
    Conn* c = draining_.back();
    draining_.pop_back();
    c->s_.reset();
    c->complete_released();
    bury(c);
  }
  stats_.zc_draining = 0;
  for (auto& [nid, p] : peers_) {
    if (p->connecting_) p->connecting_->close(CloseReason::shutdown, -ESHUTDOWN);
    p->close_all(CloseReason::shutdown, -ESHUTDOWN);
    p->fail_waiting(-ESHUTDOWN);
  }
}


std::vector<Node::PeerInfo> Node::peers() const {
  std::vector<PeerInfo> out;
  for (const auto& [nid, p] : peers_) {
    PeerInfo i;
    i.nid = nid;
    i.version = p->version_;
    i.incarnation = p->incarnation_;
    for (const Conn* c : p->conns_) ++i.conns[type_index(c->type_)];
    i.queued_tx = p->waiting_.count;
    i.connecting = p->connecting_ != nullptr;
    out.push_back(i);
  }
  return out;
}

}  // namespace lnetr::sock
