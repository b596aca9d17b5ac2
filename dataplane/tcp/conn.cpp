// One TCP connection's state machine (conn.hpp).
#include "dataplane/tcp/conn.hpp"

#include <algorithm>

#include "router/enum_names.hpp"

namespace lnetr::tcp {

LNETR_ENUM_NAMES(, State, LNETR_TCP_STATES)
LNETR_ENUM_NAMES(, End, LNETR_TCP_ENDS)

using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kMaxWindow = 65535;
constexpr std::uint8_t kMaxWindowScale = 14;       // RFC 7323 §2.3
constexpr std::uint16_t kMinMss = 64;              // a peer's smaller MSS is raised to this (Linux: 48)
constexpr std::uint32_t kMaxCwnd = 1u << 30;       // cwnd saturates here
constexpr std::int64_t kMaxRttMs = 60000;          // a longer "sample" from a timestamp is bogus

std::uint32_t saturating_add(std::uint32_t a, std::uint64_t b) {
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(std::uint64_t{a} + b, kMaxCwnd));
}

}  // namespace

// ---- opening -----------------------------------------------------------------------

void Conn::connect(std::uint32_t iss, Time now) {
  iss_ = snd_una_ = recover_ = iss;
  snd_nxt_ = snd_max_ = iss + 1;  // the SYN
  state_ = State::syn_sent;
  rto_ = cfg_.initial_rto;
  send_syn(false, now);
  arm_rto(now);
}

void Conn::accept(const TcpHeader& syn, std::uint32_t iss, Time now, bool answer) {
  irs_ = syn.seq;
  rcv_nxt_ = syn.seq + 1;
  take_options(syn);
  snd_wnd_ = syn.window;  // a SYN's window is never scaled
  snd_wl1_ = syn.seq;
  iss_ = snd_una_ = recover_ = iss;
  snd_nxt_ = snd_max_ = iss + 1;
  state_ = State::syn_received;
  rto_ = cfg_.initial_rto;
  if (!answer) {
    rcv_adv_ = rcv_nxt_ + kMaxWindow;  // what the cookie's SYN-ACK offered
    return;
  }
  send_syn(true, now);
  arm_rto(now);
}

// What the peer's SYN offers, against what we offer (as Linux negotiates).
void Conn::take_options(const TcpHeader& syn) {
  const TcpOptions& o = syn.options;
  const std::uint16_t floor = static_cast<std::uint16_t>(kMinMss + (cfg_.timestamps && o.timestamps ? 12 : 0));
  snd_mss_ = std::clamp<std::uint16_t>(o.mss.value_or(536), floor, std::max(cfg_.mss, floor));
  if (o.window_scale && cfg_.window_scale > 0) {
    snd_wscale_ = std::min(*o.window_scale, kMaxWindowScale);
    rcv_wscale_ = std::min(cfg_.window_scale, kMaxWindowScale);
  } else {
    snd_wscale_ = rcv_wscale_ = 0;
  }
  sack_ok_ = cfg_.sack && o.sack_permitted;
  ts_ok_ = cfg_.timestamps && o.timestamps.has_value();
  if (ts_ok_) ts_recent_ = o.timestamps->first;
  cwnd_ = cfg_.initial_cwnd_segments * snd_mss_;
}

void Conn::send_syn(bool with_ack, Time now) {
  TcpHeader h;
  h.src_port = ep_.local_port;
  h.dst_port = ep_.remote_port;
  h.seq = iss_;
  h.flags = static_cast<std::uint8_t>(tcp_flag::syn | (with_ack ? tcp_flag::ack : 0));
  h.ack = with_ack ? rcv_nxt_ : 0;
  h.window = static_cast<std::uint16_t>(std::min<std::uint32_t>(upper_.receive_space(), kMaxWindow));
  if (with_ack) rcv_adv_ = rcv_nxt_ + h.window;
  h.options.mss = cfg_.mss;
  // A SYN offers what we are configured for; a SYN-ACK only what the
  // peer offered too.
  if (with_ack ? rcv_wscale_ > 0 || snd_wscale_ > 0 : cfg_.window_scale > 0)
    h.options.window_scale = with_ack ? rcv_wscale_ : cfg_.window_scale;
  h.options.sack_permitted = with_ack ? sack_ok_ : cfg_.sack;
  if (with_ack ? ts_ok_ : cfg_.timestamps) h.options.timestamps = {{ts_now(now), with_ack ? ts_recent_ : 0}};
  out_.transmit(ep_, h, {});
  ++stats_.segments_out;
  if (!ts_ok_ && !timed_ && retries_ == 0) timed_ = {iss_ + 1, now};
}

// ---- sending -----------------------------------------------------------------------

std::size_t Conn::queue(ByteSpan data, Keep keep, Time now, void* dev, bool push_now, bool* held) {
  if (held) *held = false;
  const bool open = state_ == State::established || state_ == State::close_wait || state_ == State::syn_sent ||
                    state_ == State::syn_received;
  if (!open || fin_queued_) return 0;
  const std::size_t room = cfg_.send_buffer > queued() ? cfg_.send_buffer - queued() : 0;
  const std::size_t n = std::min(room, data.size());
  if (keep == Keep::hold && n > 0 && dev && cfg_.frames && cfg_.frames->hold(dev)) {
    sndq_.append_held(data.first(n), dev, *cfg_.frames);
    if (held) *held = true;
  } else {
    sndq_.append(data.first(n), keep == Keep::lend, dev);
  }
  if (push_now) push(now);
  return n;
}

void Conn::close(Time now) {
  switch (state_) {
    case State::syn_sent:
      end(End::closed);
      return;
    case State::syn_received:
    case State::established:
    case State::close_wait:
      fin_queued_ = true;
      push(now);
      return;
    default:
      return;  // closing already
  }
}

void Conn::abort(Time now) {
  (void)now;
  if (state_ == State::closed) return;
  if (state_ != State::syn_sent) send_rst(snd_max_, 0, false);
  end(End::aborted);
}

// Send what the peer's window and ours (cwnd) allow, then FIN if asked.
void Conn::push(Time now) {
  if (state_ != State::established && state_ != State::close_wait && state_ != State::fin_wait_1 &&
      state_ != State::closing && state_ != State::last_ack)
    return;
  const std::uint32_t max_before = snd_max_;
  for (;;) {
    // SACK recovery: the holes first, while cwnd allows one more segment
    // beyond what is estimated in the network (RFC 6675 §5).
    const std::uint32_t in_network = sack_recovery() ? pipe() : flight();
    if (sack_recovery()) {
      if (cwnd_ <= in_network || cwnd_ - in_network < snd_mss_) break;  // no room for a whole segment
      if (resend_lost(now) || resend_hole(now)) continue;
    }
    const std::size_t offset = snd_nxt_ - snd_una_;
    const std::size_t unsent = offset < queued() ? queued() - offset : 0;
    const std::uint32_t by_cwnd = cwnd_ > in_network ? cwnd_ - in_network : 0;
    const std::uint32_t by_peer = snd_wnd_ > flight() ? snd_wnd_ - flight() : 0;
    const std::uint32_t usable = std::min(by_cwnd, by_peer);
    const std::size_t most = std::max<std::size_t>(payload_mss(), cfg_.tso_bytes);
    const std::size_t len = std::min({unsent, static_cast<std::size_t>(usable), most});
    if (len == 0) {
      // Data waits on a zero window with nothing in flight: the persist
      // timer probes it (from the RTO, not backed off).
      if (unsent > 0 && snd_wnd_ == 0 && flight() == 0 && !persist_at_) {
        persist_backoff_ = rto_;
        persist_at_ = now + persist_backoff_;
      }
      break;
    }
    const bool last = len == unsent;
    send_segment(snd_nxt_, len, static_cast<std::uint8_t>(tcp_flag::ack | (last ? tcp_flag::psh : 0)), now);
    if (!ts_ok_ && !timed_ && snd_nxt_ == snd_max_) timed_ = {snd_nxt_ + static_cast<std::uint32_t>(len), now};  // Karn: new data only
    snd_nxt_ += static_cast<std::uint32_t>(len);
    if (seq_gt(snd_nxt_, snd_max_)) snd_max_ = snd_nxt_;
    if (!rto_at_) arm_rto(now);
  }
  if (snd_max_ != max_before && !tlp_at_) schedule_probe(now);
  // FIN once every byte has been sent (it takes one sequence number); again
  // after a timeout went back to it.
  if (fin_queued_ && snd_nxt_ - snd_una_ == queued() && (!fin_sent_ || snd_nxt_ == fin_seq_)) {
    if (!fin_sent_) fin_seq_ = snd_nxt_;
    send_segment(snd_nxt_, 0, tcp_flag::fin | tcp_flag::ack, now);
    ++snd_nxt_;
    if (seq_gt(snd_nxt_, snd_max_)) snd_max_ = snd_nxt_;
    fin_sent_ = true;
    if (state_ == State::established || state_ == State::syn_received) state_ = State::fin_wait_1;
    else if (state_ == State::close_wait) state_ = State::last_ack;
    if (!rto_at_) arm_rto(now);
  }
}

void Conn::send_segment(std::uint32_t seq, std::size_t len, std::uint8_t flags, Time now) {
  const TcpHeader h = header(seq, flags, now);
  out_.transmit(ep_, h, len ? Payload(sndq_, seq - snd_una_, len) : Payload{});
  stats_.segments_out += len > payload_mss() ? (len + payload_mss() - 1) / payload_mss() : 1;
  ack_pending_ = false;
  ack_at_.reset();
  unacked_segments_ = 0;
}

void Conn::send_ack(Time now) {
  const TcpHeader h = header(snd_nxt_, tcp_flag::ack, now);
  out_.transmit(ep_, h, {});
  ++stats_.segments_out;
  ack_pending_ = false;
  ack_at_.reset();
  unacked_segments_ = 0;
}

void Conn::send_rst(std::uint32_t seq, std::uint32_t ack, bool with_ack) {
  TcpHeader h;
  h.src_port = ep_.local_port;
  h.dst_port = ep_.remote_port;
  h.seq = seq;
  h.ack = with_ack ? ack : 0;
  h.flags = static_cast<std::uint8_t>(tcp_flag::rst | (with_ack ? tcp_flag::ack : 0));
  out_.transmit(ep_, h, {});
  ++stats_.segments_out;
}

TcpHeader Conn::header(std::uint32_t seq, std::uint8_t flags, Time now) {
  TcpHeader h;
  h.src_port = ep_.local_port;
  h.dst_port = ep_.remote_port;
  h.seq = seq;
  h.flags = flags;
  h.ack = (flags & tcp_flag::ack) ? rcv_nxt_ : 0;
  h.window = advertised_window();
  const std::uint32_t edge = rcv_nxt_ + (static_cast<std::uint32_t>(h.window) << rcv_wscale_);
  if (seq_gt(edge, rcv_adv_)) rcv_adv_ = edge;
  if (ts_ok_) h.options.timestamps = {{ts_now(now), ts_recent_}};
  const std::size_t max_blocks = ts_ok_ ? 3 : kMaxSackBlocks;
  if (sack_ok_ && dsack_ && (flags & tcp_flag::ack)) {
    // A duplicate received: reported once, as the first block (RFC 2883).
    h.options.sack[h.options.sack_count++] = *dsack_;
    dsack_.reset();
  }
  if (sack_ok_ && !held_.empty()) {
    // The runs of touching pieces held out of order, as blocks: the one
    // holding the latest arrival first (RFC 2018 §4), then the others in
    // order.
    std::optional<SackBlock> latest;
    std::array<SackBlock, kMaxSackBlocks> others{};
    std::size_t n = 0;
    for (auto it = held_.begin(); it != held_.end() && !(latest && n >= max_blocks);) {
      SackBlock b{it->first, it->first + it->second.size};
      for (++it; it != held_.end() && it->first == b.right; ++it) b.right = it->first + it->second.size;
      if (!latest && seq_le(b.left, last_held_) && seq_lt(last_held_, b.right))
        latest = b;
      else if (n < others.size())
        others[n++] = b;
    }
    if (latest && h.options.sack_count < max_blocks) h.options.sack[h.options.sack_count++] = *latest;
    for (std::size_t i = 0; i < n && h.options.sack_count < max_blocks; ++i)
      h.options.sack[h.options.sack_count++] = others[i];
  }
  return h;
}

// What the owner can take, but never less than what was advertised before
// (a window does not shrink, RFC 9293 §3.8.6.2.1).
std::uint16_t Conn::advertised_window() const {
  std::uint32_t space = upper_.receive_space();
  if (seq_gt(rcv_adv_, rcv_nxt_)) space = std::max(space, rcv_adv_ - rcv_nxt_);
  space = std::min<std::uint32_t>(space, kMaxWindow << rcv_wscale_);
  return static_cast<std::uint16_t>((space + (1u << rcv_wscale_) - 1) >> rcv_wscale_);
}

std::size_t Conn::held_bytes() const noexcept {
  std::size_t n = 0;
  for (const auto& [start, piece] : held_) n += piece.size;
  return n;
}

// A window update only when it matters (receiver SWS avoidance, RFC 1122
// 4.2.3.3, with Linux's rule): the window the peer may still fill has
// closed, or reading has at least doubled it and opened two segments more.
// Not one per read, which would send runs of identical ACKs that a sender
// without SACK takes for duplicate ACKs.
void Conn::window_opened(Time now) {
  if (state_ != State::established && state_ != State::fin_wait_1 && state_ != State::fin_wait_2) return;
  const std::uint32_t left = seq_gt(rcv_adv_, rcv_nxt_) ? rcv_adv_ - rcv_nxt_ : 0;
  const std::uint32_t wnd = static_cast<std::uint32_t>(advertised_window()) << rcv_wscale_;
  if (wnd <= left) return;
  if ((left == 0 && wnd > 0) || (wnd - left >= 2u * cfg_.mss && left <= wnd / 2)) send_ack(now);
}

void Conn::retransmit_first(Time now) {
  const std::size_t len = std::min(queued(), payload_mss());
  ++stats_.retransmits;
  if (len > 0) {
    send_segment(snd_una_, len, tcp_flag::ack, now);
  } else if (fin_sent_ && snd_una_ == fin_seq_) {
    send_segment(snd_una_, 0, tcp_flag::fin | tcp_flag::ack, now);
  }
}

// ---- SACK scoreboard ----------------------------------------------------------------

namespace {
constexpr std::size_t kMaxSackedRanges = 64;  // beyond this the highest ranges are forgotten
}  // namespace

void Conn::take_sack(const TcpHeader& seg) {
  const std::uint32_t floor = seq_gt(seg.ack, snd_una_) ? seg.ack : snd_una_;
  for (std::uint8_t i = 0; i < seg.options.sack_count && i < seg.options.sack.size(); ++i) {
    std::uint32_t start = seg.options.sack[i].left, stop = seg.options.sack[i].right;
    if (seq_lt(start, floor)) start = floor;     // (a D-SACK or stale block: below what is acknowledged)
    if (seq_gt(stop, snd_nxt_)) stop = snd_nxt_;   // (never beyond what is sent; after a timeout, sent again)
    if (!seq_lt(start, stop)) continue;
    // Merge into the ordered, disjoint ranges.
    auto it = sacked_.begin();
    while (it != sacked_.end() && seq_lt(it->second, start)) ++it;
    auto last = it;
    while (last != sacked_.end() && seq_le(last->first, stop)) {
      if (seq_lt(last->first, start)) start = last->first;
      if (seq_gt(last->second, stop)) stop = last->second;
      ++last;
    }
    it = sacked_.erase(it, last);
    sacked_.insert(it, {start, stop});
  }
  if (sacked_.size() > kMaxSackedRanges) sacked_.resize(kMaxSackedRanges);
}

void Conn::prune_sacked() noexcept {
  std::size_t n = 0;
  while (n < sacked_.size() && seq_le(sacked_[n].second, snd_una_)) ++n;
  sacked_.erase(sacked_.begin(), sacked_.begin() + static_cast<std::ptrdiff_t>(n));
  if (!sacked_.empty() && seq_lt(sacked_.front().first, snd_una_)) sacked_.front().first = snd_una_;
}

std::uint32_t Conn::sacked_bytes() const noexcept {
  std::uint32_t n = 0;
  for (const auto& r : sacked_) n += r.second - r.first;
  return n;
}

// RFC 6675's pipe, with every hole below the highest SACKed byte taken as
// lost: what was sent and is neither SACKed nor lost, plus what was resent.
std::uint32_t Conn::pipe() const noexcept {
  if (sacked_.empty()) return flight();
  const std::uint32_t resent_to = seq_gt(high_rxt_, snd_una_) ? high_rxt_ : snd_una_;
  std::uint32_t lost = 0, at = snd_una_;
  for (const auto& r : sacked_) {
    // The hole [at, r.first): lost, but the part below resent_to is in the network again.
    const std::uint32_t from = seq_gt(resent_to, at) ? (seq_lt(resent_to, r.first) ? resent_to : r.first) : at;
    lost += r.first - from;
    at = r.second;
  }
  for (const auto& r : relost_) lost += open_bytes(r.first, r.second, snd_una_);  // resent, and lost again
  const std::uint32_t out = flight();
  const std::uint32_t gone = sacked_bytes() + lost;
  return out > gone ? out - gone : 0;
}

bool Conn::resend_hole(Time now) {
  const auto hole = next_hole();
  if (!hole) return false;
  send_hole(hole->first, hole->second, now);
  high_rxt_ = hole->first + hole->second;
  return true;
}

void Conn::send_hole(std::uint32_t start, std::uint32_t len, Time now) {
  send_segment(start, len, tcp_flag::ack, now);
  resent_.push_back({start, start + len, snd_nxt_});
  timed_.reset();  // Karn: no RTT sample across a retransmission
  ++stats_.retransmits;
  if (!rto_at_) arm_rto(now);
}

std::uint32_t Conn::open_bytes(std::uint32_t start, std::uint32_t end, std::uint32_t acked_to) const noexcept {
  std::uint32_t from = seq_gt(acked_to, start) ? acked_to : start;
  if (!seq_lt(from, end)) return 0;
  std::uint32_t n = end - from;
  for (const auto& r : sacked_) {  // less what the peer holds of it
    const std::uint32_t lo = seq_gt(r.first, from) ? r.first : from;
    const std::uint32_t hi = seq_lt(r.second, end) ? r.second : end;
    if (seq_lt(lo, hi)) n -= hi - lo;
  }
  return n;
}

void Conn::find_lost_resends(std::uint32_t acked_to) {
  if (!sack_recovery() || sacked_.empty()) return;
  // What was found lost before and is repaired since: forgotten.
  std::erase_if(relost_, [&](const auto& r) { return open_bytes(r.first, r.second, acked_to) == 0; });
  const std::uint32_t highest = sacked_.back().second;
  std::size_t keep = 0;
  for (const Resent& r : resent_) {
    if (open_bytes(r.start, r.end, acked_to) == 0) continue;  // repaired
    if (seq_gt(highest, r.sent_after)) {  // data sent after it arrived, it did not
      relost_.emplace_back(r.start, r.end);
      continue;
    }
    resent_[keep++] = r;
  }
  resent_.resize(keep);
}

bool Conn::resend_lost(Time now) {
  while (!relost_.empty()) {
    const auto [start, end] = relost_.front();
    relost_.erase(relost_.begin());
    if (open_bytes(start, end, snd_una_) == 0) continue;
    const std::uint32_t from = seq_gt(start, snd_una_) ? start : snd_una_;
    const std::size_t off = from - snd_una_;
    const std::size_t avail = off < queued() ? queued() - off : 0;
    const std::size_t len = std::min<std::size_t>({end - from, payload_mss(), avail});
    if (len == 0) continue;
    send_hole(from, static_cast<std::uint32_t>(len), now);
    ++stats_.lost_retransmits;
    return true;
  }
  return false;
}

std::optional<std::pair<std::uint32_t, std::uint32_t>> Conn::next_hole() const noexcept {
  std::uint32_t at = seq_gt(high_rxt_, snd_una_) ? high_rxt_ : snd_una_;
  for (const auto& r : sacked_) {
    if (seq_lt(at, r.first)) {
      // Within the bytes queued (the FIN takes a number but no byte).
      const std::size_t off = at - snd_una_;
      const std::size_t avail = off < queued() ? queued() - off : 0;
      const std::size_t len = std::min<std::size_t>({r.first - at, payload_mss(), avail});
      if (len == 0) return std::nullopt;
      return std::pair{at, static_cast<std::uint32_t>(len)};
    }
    if (seq_gt(r.second, at)) at = r.second;
  }
  return std::nullopt;
}

// ---- receiving ---------------------------------------------------------------------

// RFC 9293 §3.10.7.4's acceptability test against the window we advertise.
bool Conn::acceptable(const TcpHeader& seg) const {
  const std::uint32_t len = static_cast<std::uint32_t>(seg.payload_size()) + ((seg.flags & tcp_flag::syn) ? 1 : 0) +
                            ((seg.flags & tcp_flag::fin) ? 1 : 0);
  const std::uint32_t wnd = static_cast<std::uint32_t>(advertised_window()) << rcv_wscale_;
  auto in_window = [&](std::uint32_t s) { return seq_le(rcv_nxt_, s) && seq_lt(s, rcv_nxt_ + wnd); };
  if (len == 0) return wnd == 0 ? seg.seq == rcv_nxt_ : in_window(seg.seq);
  if (wnd == 0) return false;
  return in_window(seg.seq) || in_window(seg.seq + len - 1);
}

// An RTT sample from an echoed timestamp (milliseconds of our clock); a
// negative or implausible one (a bogus TSecr) is ignored.
static std::optional<Time> ts_rtt(std::uint32_t now_ms, const TcpHeader& seg) {
  if (!seg.options.timestamps || seg.options.timestamps->second == 0) return std::nullopt;
  const std::int32_t ms = static_cast<std::int32_t>(now_ms - seg.options.timestamps->second);
  if (ms < 0 || ms > kMaxRttMs) return std::nullopt;
  return std::chrono::milliseconds(ms);
}

void Conn::input(const TcpHeader& seg, Time now) {
  ++stats_.segments_in;
  // Heard from the peer: keepalive starts its idle time again.
  if (cfg_.keepalive_idle.count() > 0 && state_ != State::closed) {
    keep_probes_ = 0;
    keep_at_ = now + cfg_.keepalive_idle;
  }
  const bool ack = (seg.flags & tcp_flag::ack) != 0;
  const bool rst = (seg.flags & tcp_flag::rst) != 0;
  const bool syn = (seg.flags & tcp_flag::syn) != 0;

  if (state_ == State::closed) return;

  if (state_ == State::syn_sent) {
    if (ack && (seq_le(seg.ack, iss_) || seq_gt(seg.ack, snd_nxt_))) {
      if (!rst) send_rst(seg.ack, 0, false);
      return;
    }
    if (rst) {
      if (ack) end(End::refused);
      return;
    }
    if (!syn) return;
    irs_ = seg.seq;
    rcv_nxt_ = seg.seq + 1;
    take_options(seg);
    snd_wnd_ = seg.window;  // unscaled in a SYN
    snd_wl1_ = seg.seq;
    if (ack) {
      snd_una_ = seg.ack;
      snd_wl2_ = seg.ack;
      if (const auto rtt = ts_ok_ ? ts_rtt(ts_now(now), seg) : std::nullopt) rtt_sample(*rtt);
      else if (timed_ && retries_ == 0) rtt_sample(now - timed_->second);
      timed_.reset();
      retries_ = 0;
      rto_at_.reset();
      state_ = State::established;
      send_ack(now);
      upper_.on_established();
      push(now);
    } else {
      state_ = State::syn_received;  // simultaneous open
      send_syn(true, now);
    }
    return;
  }

  // SYN-RECEIVED: the peer's SYN again (our SYN-ACK was lost): answer anew.
  if (state_ == State::syn_received && syn && !ack && seg.seq == irs_) {
    send_syn(true, now);
    return;
  }

  // Synchronized states.
  if (!acceptable(seg)) {
    ++stats_.duplicates;
    // Wholly below what we have: a D-SACK reports it (RFC 2883).
    if (!rst && !syn && seg.payload_size() != 0 && seq_le(seg.seq + static_cast<std::uint32_t>(seg.payload_size()), rcv_nxt_))
      dsack_ = SackBlock{seg.seq, seg.seq + static_cast<std::uint32_t>(seg.payload_size())};
    if (!rst) {
      // A closed window still takes the ACK and window of a segment that
      // starts where we expect (RFC 9293 §3.10.7.4).
      if (ack && !syn && state_ != State::syn_received && seg.seq == rcv_nxt_) process_ack(seg, now);
      ack_invalid(seg, now);
    }
    return;
  }
  if (rst) {
    // Only an exact RST resets; another in the window gets a challenge ACK
    // (RFC 5961 §3.2).
    if (seg.seq == rcv_nxt_) end(End::reset);
    else ack_invalid(seg, now);
    return;
  }
  if (syn) {  // a SYN in a synchronized state: challenge ACK (RFC 5961 §4)
    ack_invalid(seg, now);
    return;
  }
  if (!ack) return;
  // Timestamps: remember the newest from a segment at our left edge.
  if (ts_ok_ && seg.options.timestamps && seq_le(seg.seq, rcv_nxt_) &&
      seq_ge(seg.options.timestamps->first, ts_recent_))
    ts_recent_ = seg.options.timestamps->first;

  bool opened = false;
  if (state_ == State::syn_received) {
    if (seq_le(seg.ack, snd_una_) || seq_gt(seg.ack, snd_nxt_)) {
      send_rst(seg.ack, 0, false);
      return;
    }
    // Our SYN is acknowledged: it took a sequence number, not a byte.
    snd_una_ = iss_ + 1;
    state_ = State::established;
    snd_wnd_ = static_cast<std::uint32_t>(seg.window) << snd_wscale_;
    snd_wl1_ = seg.seq;
    snd_wl2_ = seg.ack;
    retries_ = 0;
    rto_at_.reset();
    if (const auto rtt = ts_ok_ ? ts_rtt(ts_now(now), seg) : std::nullopt) rtt_sample(*rtt);
    timed_.reset();
    opened = true;
  }

  if (!process_ack(seg, now)) return;
  if (opened) upper_.on_established();  // after the ACK: what it sends goes out right
  if (state_ == State::closed) return;
  if (state_ == State::fin_wait_1 && fin_acked()) state_ = State::fin_wait_2;
  if (state_ == State::closing && fin_acked()) {
    state_ = State::time_wait;
    time_wait_at_ = now + cfg_.time_wait;
  }
  if (state_ == State::last_ack && fin_acked()) {
    end(End::closed);
    return;
  }
  if (state_ == State::time_wait) {  // the peer's FIN again: ACK it, wait anew
    if (seg.flags & tcp_flag::fin) {
      send_ack(now);
      time_wait_at_ = now + cfg_.time_wait;
    }
    return;
  }

  const bool takes_data = state_ == State::established || state_ == State::fin_wait_1 || state_ == State::fin_wait_2;
  if (takes_data && seg.payload_size() != 0) process_data(seg, now);

  // FIN, once everything before it has arrived (one that arrives early is
  // sent again by the peer).
  if ((seg.flags & tcp_flag::fin) && !fin_received_ &&
      seg.seq + static_cast<std::uint32_t>(seg.payload_size()) == rcv_nxt_) {
    fin_received_ = true;
    ++rcv_nxt_;
    // The new state first: the owner may close() from on_peer_closed().
    switch (state_) {
      case State::established: state_ = State::close_wait; break;
      case State::fin_wait_1:
        state_ = fin_acked() ? State::time_wait : State::closing;
        break;
      case State::fin_wait_2: state_ = State::time_wait; break;
      default: break;
    }
    if (state_ == State::time_wait) time_wait_at_ = now + cfg_.time_wait;
    send_ack(now);
    upper_.on_peer_closed();
    if (state_ == State::closed) return;
  }
  if (!out_.defer()) push(now);
}

void Conn::flush(Time now) {
  if (state_ == State::closed) return;
  push(now);
  if (unacked_segments_ >= 2) send_ack(now);  // (unless the data just sent carried it)
}

bool Conn::process_ack(const TcpHeader& seg, Time now) {
  const std::uint32_t a = seg.ack;
  if (seq_gt(a, snd_max_)) {  // acknowledges what was never sent: drop it
    ack_invalid(seg, now);
    return false;
  }
  probes_ = 0;  // the peer answers
  const std::uint32_t wnd = static_cast<std::uint32_t>(seg.window) << snd_wscale_;
  const bool window_moved = wnd != snd_wnd_;
  if (seq_lt(snd_wl1_, seg.seq) || (snd_wl1_ == seg.seq && seq_le(snd_wl2_, a))) {
    snd_wnd_ = wnd;
    snd_wl1_ = seg.seq;
    snd_wl2_ = a;
  }
  if (snd_wnd_ > 0) persist_at_.reset();
  const std::uint32_t sacked_before = sacked_bytes();
  if (sack_ok_) take_sack(seg);
  const bool sack_news = sacked_bytes() > sacked_before;
  const bool tail_lost = probe_ack(seg);
  find_lost_resends(seq_gt(a, snd_una_) ? a : snd_una_);
  // Loss recovery: ssthresh halved; with SACK, cwnd at ssthresh and push()
  // resends the holes; without, NewReno's fast retransmit and inflation.
  // Not again before snd_una reaches the point of the last recovery or
  // timeout (after RFC 6582 §3.2): what was outstanding then is being resent.
  auto start_recovery = [&] {
    if (seq_lt(a, recover_)) return;
    ssthresh_ = std::max<std::uint32_t>(flight() / 2, 2u * snd_mss_);
    recover_ = snd_max_;
    in_recovery_ = true;
    resent_.clear();
    relost_.clear();
    tlp_at_.reset();
    tlp_high_.reset();  // (recovery's own cwnd reduction ends the episode)
    ++stats_.fast_retransmits;
    if (sack_ok_) {
      cwnd_ = ssthresh_;
      high_rxt_ = snd_una_;
      (void)resend_hole(now);  // the first hole at once, whatever the pipe (RFC 6675 §5 step 4.2)
    } else {
      retransmit_first(now);
      cwnd_ = saturating_add(ssthresh_, 3u * snd_mss_);
    }
  };
  if (seq_gt(a, snd_una_)) {
    const std::uint32_t acked = a - snd_una_;
    const std::size_t data = std::min<std::size_t>(acked, queued());
    sndq_.drop_front(data);
    stats_.bytes_acked += data;
    snd_una_ = a;
    if (seq_lt(snd_nxt_, snd_una_)) snd_nxt_ = snd_una_;
    prune_sacked();
    if (data > 0) upper_.on_acked(data);  // (the queue and snd_una_ agree again)
    // RTT: the echoed timestamp, else the one timed segment (Karn: never
    // a retransmitted one).
    if (const auto rtt = ts_ok_ ? ts_rtt(ts_now(now), seg) : std::nullopt) rtt_sample(*rtt);
    else if (timed_ && seq_ge(a, timed_->first)) rtt_sample(now - timed_->second);
    if (timed_ && seq_ge(a, timed_->first)) timed_.reset();
    retries_ = 0;
    // Congestion window (RFC 5681, NewReno's recovery RFC 6582).
    if (in_recovery_) {
      if (seq_ge(a, recover_)) {
        in_recovery_ = false;
        cwnd_ = ssthresh_;
      } else if (!sack_ok_) {  // partial ACK: the next hole, at once
        retransmit_first(now);
        cwnd_ = cwnd_ > acked ? saturating_add(cwnd_ - acked, snd_mss_) : snd_mss_;
      }  // (with SACK: the pipe shrank, push() goes on with the holes)
    } else if (cwnd_ < ssthresh_) {
      // Byte counting (RFC 3465), by every byte acknowledged as Linux does:
      // a receiver that coalesces (GRO) sends one ACK for many segments,
      // and counting one segment per ACK would leave slow start crawling.
      // Up to ssthresh, as Linux: after a timeout the ACK of the resent
      // segment may cover all that was held, which must not become one burst.
      cwnd_ = std::min(saturating_add(cwnd_, acked), std::max(ssthresh_, cwnd_));
    } else {  // about one segment per window acknowledged
      const std::uint64_t inc = std::uint64_t{snd_mss_} * acked / std::max(cwnd_, 1u);
      cwnd_ = saturating_add(cwnd_, static_cast<std::uint32_t>(std::max<std::uint64_t>(1, inc)));
    }
    dupacks_ = 0;
    if (flight() == 0) rto_at_.reset();
    else arm_rto(now);
    // New data acknowledged while the SACKs still show a loss.
    if (!in_recovery_ && sack_ok_ && (tail_lost || sacked_bytes() >= 3u * snd_mss_)) start_recovery();
    schedule_probe(now);
    return true;
  }
  // A duplicate ACK: nothing new acknowledged, and no data, same window, or
  // (with SACK) news of more bytes held above a hole (RFC 6675 §2).
  const bool plain_dup = seg.payload_size() == 0 && !window_moved && !(seg.flags & tcp_flag::fin);
  if (a == snd_una_ && flight() > 0 && (plain_dup || sack_news)) {
    ++dupacks_;
    const bool sack_lost = sack_ok_ && (tail_lost || sacked_bytes() >= 3u * snd_mss_);
    if ((dupacks_ >= 3 || sack_lost) && !in_recovery_) {
      start_recovery();
    } else if (in_recovery_ && !sack_ok_) {
      cwnd_ = saturating_add(cwnd_, snd_mss_);  // each further duplicate: a segment left the network
    }
  }
  return true;
}

void Conn::process_data(const TcpHeader& seg, Time now) {
  // The payload may lie in several pieces (a chained frame: TcpHeader::more),
  // each handed on or held with its own frame.
  const std::size_t size = seg.payload_size();
  std::size_t skip = 0;
  std::uint32_t seq = seg.seq;
  if (seq_lt(seq, rcv_nxt_)) {  // starts with bytes we have
    skip = rcv_nxt_ - seq;
    if (skip >= size) {
      ++stats_.duplicates;
      dsack_ = SackBlock{seq, seq + static_cast<std::uint32_t>(size)};
      send_ack(now);
      return;
    }
    seq = rcv_nxt_;
  }
  // Nothing beyond the window we advertised is taken.
  const std::uint32_t edge = rcv_nxt_ + (static_cast<std::uint32_t>(advertised_window()) << rcv_wscale_);
  if (!seq_lt(seq, edge)) {
    send_ack(now);
    return;
  }
  const std::size_t take = std::min<std::size_t>(size - skip, edge - seq);
  if (seq == rcv_nxt_) {
    const bool had_holes = !held_.empty();
    seg.for_each_piece(skip, take, [&](ByteSpan bytes, void* frame) { upper_.on_data(bytes, frame); });
    stats_.bytes_in += take;
    rcv_nxt_ += static_cast<std::uint32_t>(take);
    deliver_held();
    // ACK every second full segment, or after delayed_ack; at once when
    // this filled a hole (RFC 5681 §4.2).  A unit a device joined from
    // several segments (LRO) counts as the segments it holds (of the size
    // the peer sends: our MSS less its timestamps), so it is answered at
    // once, as Linux answers a GRO unit.
    const std::size_t peer_seg = cfg_.mss - (ts_ok_ ? 12u : 0u);
    unacked_segments_ += static_cast<unsigned>(std::max<std::size_t>(1, take / peer_seg));
    if (had_holes) {
      send_ack(now);
    } else if (unacked_segments_ >= 2) {
      if (!out_.defer()) send_ack(now);  // else at the burst's end, once for all its segments
    } else if (!ack_at_) {
      ack_at_ = now + cfg_.delayed_ack;
    }
    return;
  }
  // Beyond rcv_nxt_: held (copied) until the hole fills; a duplicate ACK
  // with SACK blocks at once.
  ++stats_.out_of_order;
  seg.for_each_piece(skip, take, [&](ByteSpan bytes, void* frame) {
    hold(seq, bytes, frame);
    seq += static_cast<std::uint32_t>(bytes.size());
  });
  last_held_ = seg.seq + static_cast<std::uint32_t>(skip);
  send_ack(now);
}

// Hold [seq, seq + bytes): the parts no piece holds yet, each in the
// received frame where the owner of frames lets us keep it, else copied
// (merged with the copies it touches).  Pieces stay disjoint, so what is
// held never exceeds the window.
void Conn::hold(std::uint32_t seq, ByteSpan bytes, void* frame) {
  const std::uint32_t stop = seq + static_cast<std::uint32_t>(bytes.size());
  bool kept_one = false;
  auto add = [&](std::uint32_t from, std::uint32_t to) {
    const ByteSpan part = bytes.subspan(from - seq, to - from);
    if (frame && cfg_.frames && (kept_one || held_frames_ < cfg_.max_held_frames)) {
      // One reference per piece: the first may be refused (the budget of
      // frames held is used up), a second of the same frame is shared.
      if (kept_one) {
        cfg_.frames->share(frame);
      } else {
        kept_one = cfg_.frames->retain(frame);
      }
      if (kept_one) {
        ++held_frames_;
        Held h;
        h.kept = part.data();
        h.frame = frame;
        h.size = static_cast<std::uint32_t>(part.size());
        held_.emplace(from, std::move(h));
        return;
      }
    }
    // A copy, merged with a copy ending where it starts and one starting
    // where it ends.
    auto next = held_.find(to);
    auto prev = held_.lower_bound(from);
    Held* into = nullptr;
    if (prev != held_.begin()) {
      --prev;
      if (!prev->second.frame && prev->first + prev->second.size == from) into = &prev->second;
    }
    if (!into) {
      into = &held_.emplace(from, Held{}).first->second;
      next = held_.find(to);
    }
    into->copy.insert(into->copy.end(), part.begin(), part.end());
    into->size += static_cast<std::uint32_t>(part.size());
    if (next != held_.end() && !next->second.frame) {
      into->copy.insert(into->copy.end(), next->second.copy.begin(), next->second.copy.end());
      into->size += next->second.size;
      held_.erase(next);
    }
  };
  auto it = held_.upper_bound(seq);
  if (it != held_.begin() && seq_gt(std::prev(it)->first + std::prev(it)->second.size, seq)) --it;
  std::uint32_t at = seq;
  while (seq_lt(at, stop)) {
    if (it == held_.end() || seq_ge(it->first, stop)) {
      add(at, stop);
      break;
    }
    const std::uint32_t piece_start = it->first, piece_end = it->first + it->second.size;
    ++it;  // (add() may erase only pieces at or beyond `to`, which is at most piece_start)
    if (seq_lt(at, piece_start)) add(at, piece_start);
    if (seq_gt(piece_end, at)) at = piece_end;
  }
  last_held_ = seq;
}

void Conn::deliver_held() {
  while (!held_.empty()) {
    auto it = held_.begin();
    if (seq_gt(it->first, rcv_nxt_)) break;
    const Held& h = it->second;
    const std::uint32_t stop = it->first + h.size;
    if (seq_gt(stop, rcv_nxt_)) {
      const ByteSpan rest = ByteSpan(h.data(), h.size).subspan(rcv_nxt_ - it->first);
      upper_.on_data(rest, h.frame);
      stats_.bytes_in += rest.size();
      (h.frame ? stats_.bytes_reassembled_kept : stats_.bytes_reassembled) += rest.size();
      rcv_nxt_ = stop;
    }
    if (h.frame) {
      cfg_.frames->release(h.frame);
      --held_frames_;
    }
    held_.erase(it);
  }
}

void Conn::drop_held() noexcept {
  for (auto& [start, h] : held_)
    if (h.frame) cfg_.frames->release(h.frame);
  held_.clear();
  held_frames_ = 0;
}

// ---- timers ------------------------------------------------------------------------

void Conn::rtt_sample(Time rtt) {
  // (A timed segment's sample is bounded like a timestamp's: a longer one
  // means the clock given with it was not the connection's.)
  if (rtt < Time::zero() || rtt > std::chrono::milliseconds(kMaxRttMs)) return;
  if (!have_rtt_) {
    srtt_ = rtt;
    rttvar_ = rtt / 2;
    have_rtt_ = true;
  } else {
    const Time delta = srtt_ > rtt ? srtt_ - rtt : rtt - srtt_;
    rttvar_ = (3 * rttvar_ + delta) / 4;
    srtt_ = (7 * srtt_ + rtt) / 8;
  }
  rto_ = std::clamp<Time>(srtt_ + std::max<Time>(1ms, 4 * rttvar_), cfg_.min_rto, cfg_.max_rto);
}

bool Conn::yield_time_wait(const TcpHeader& syn) noexcept {
  if (state_ != State::time_wait || !seq_gt(syn.seq, rcv_nxt_)) return false;
  end(End::closed);
  return true;
}

void Conn::set_keepalive(Time idle, Time interval, int probes, Time now) noexcept {
  cfg_.keepalive_idle = idle;
  cfg_.keepalive_interval = interval;
  cfg_.keepalive_probes = probes;
  keep_probes_ = 0;
  if (idle.count() > 0 && state_ != State::closed) keep_at_ = now + idle;
  else keep_at_.reset();
}

std::optional<Time> Conn::next_timer() const noexcept {
  std::optional<Time> t;
  for (const auto& c : {rto_at_, ack_at_, time_wait_at_, persist_at_, keep_at_, tlp_at_})
    if (c && (!t || *c < *t)) t = c;
  return t;
}

void Conn::tick(Time now) {
  if (time_wait_at_ && now >= *time_wait_at_) {
    end(End::closed);
    return;
  }
  if (ack_at_ && now >= *ack_at_) send_ack(now);
  if (keep_at_ && now >= *keep_at_) {
    keep_at_.reset();
    if (state_ == State::established || state_ == State::close_wait) {
      if (flight() > 0 || queued() > 0) {
        keep_at_ = now + cfg_.keepalive_idle;  // retransmission or the persist timer watch the peer
      } else if (keep_probes_ >= cfg_.keepalive_probes) {
        return end(End::timed_out);  // as Linux: ETIMEDOUT, no RST
      } else {
        // A segment the peer has seen (one below snd_una): it answers with an ACK.
        const TcpHeader h = header(snd_una_ - 1, tcp_flag::ack, now);
        out_.transmit(ep_, h, {});
        ++stats_.segments_out;
        ++stats_.keepalive_probes;
        ++keep_probes_;
        keep_at_ = now + cfg_.keepalive_interval;
      }
    }
  }
  if (persist_at_ && now >= *persist_at_) {
    // Zero-window probe: a segment the peer has seen (one below snd_una),
    // which it answers with its window; for as long as it answers.
    persist_at_.reset();
    if (snd_wnd_ == 0 && queued() > snd_nxt_ - snd_una_) {
      if (++probes_ > cfg_.max_retries) {
        send_rst(snd_max_, 0, false);
        return end(End::timed_out);
      }
      const TcpHeader h = header(snd_una_ - 1, tcp_flag::ack, now);
      out_.transmit(ep_, h, {});
      ++stats_.segments_out;
      persist_backoff_ = std::min(persist_backoff_ * 2, cfg_.max_rto);
      persist_at_ = now + persist_backoff_;
    } else {
      push(now);
    }
  }
  if (tlp_at_ && now >= *tlp_at_) {
    tlp_at_.reset();
    send_probe(now);
  }
  if (!rto_at_ || now < *rto_at_) return;
  rto_at_.reset();
  tlp_at_.reset();
  tlp_high_.reset();  // a timeout ends any probe episode
  // Nothing outstanding (a closed window is the persist timer's): no
  // retransmission, and no backoff, which would otherwise grow the RTO to
  // its maximum while the peer's window stays shut.
  if (flight() == 0 && state_ != State::syn_sent && state_ != State::syn_received) return;
  rto_ = std::min(rto_ * 2, cfg_.max_rto);  // back off
  timed_.reset();                             // Karn: no sample from what is resent
  if (state_ == State::syn_sent || state_ == State::syn_received) {
    if (++retries_ > cfg_.max_syn_retries) return end(End::timed_out);
    ++stats_.retransmits;
    send_syn(state_ == State::syn_received, now);
    arm_rto(now);
    return;
  }
  if (++retries_ > cfg_.max_retries) {
    send_rst(snd_max_, 0, false);
    return end(End::timed_out);
  }
  ++stats_.timeouts;
  ssthresh_ = std::max<std::uint32_t>(flight() / 2, 2u * snd_mss_);
  cwnd_ = snd_mss_;
  in_recovery_ = false;
  recover_ = snd_max_;
  dupacks_ = 0;
  resent_.clear();
  relost_.clear();
  sacked_.clear();  // go-back-N from snd_una (RFC 6675 §5.1 allows forgetting)
  // Go back to the first unacknowledged byte (or the FIN): with cwnd one
  // segment, push() resends exactly that.
  snd_nxt_ = snd_una_;
  ++stats_.retransmits;
  push(now);
  arm_rto(now);
}

void Conn::ack_invalid(const TcpHeader& seg, Time now) {
  // (As Linux: a segment that takes sequence space, data or a FIN, is not
  // part of an ACK loop.)
  const bool data = (seg.payload_size() != 0 || (seg.flags & tcp_flag::fin)) && !(seg.flags & tcp_flag::syn);
  if (!data && last_invalid_ack_ && now - *last_invalid_ack_ < cfg_.invalid_ratelimit) {
    ++stats_.invalid_acks_limited;
    return;
  }
  if (!data) last_invalid_ack_ = now;
  send_ack(now);
}

Conn::Stats& Conn::Stats::operator+=(const Stats& s) noexcept {
  segments_in += s.segments_in, segments_out += s.segments_out;
  retransmits += s.retransmits, fast_retransmits += s.fast_retransmits, timeouts += s.timeouts;
  lost_retransmits += s.lost_retransmits;
  out_of_order += s.out_of_order, duplicates += s.duplicates, bytes_reassembled += s.bytes_reassembled;
  bytes_reassembled_kept += s.bytes_reassembled_kept;
  bytes_in += s.bytes_in, bytes_acked += s.bytes_acked;
  keepalive_probes += s.keepalive_probes;
  tail_probes += s.tail_probes, tail_probe_recoveries += s.tail_probe_recoveries;
  invalid_acks_limited += s.invalid_acks_limited;
  return *this;
}

// ---- tail loss probe (RFC 8985 §7) ----------------------------------------

// Probes go only in the open state (as Linux's TCP_CA_Open): SACK on, an
// RTT measured, data outstanding and all of it sent, no recovery or
// timeout repair under way (snd_una below recover_), no episode open.
bool Conn::may_probe() const noexcept {
  return cfg_.tail_loss_probe && sack_ok_ && have_rtt_ && !in_recovery_ && !tlp_high_ && flight() > 0 &&
         snd_nxt_ == snd_max_ && !fin_sent_ && seq_ge(snd_una_, recover_) &&
         (state_ == State::established || state_ == State::close_wait);
}

void Conn::schedule_probe(Time now) {
  tlp_at_.reset();
  if (!may_probe()) return;
  // Two round trips; a lone segment may wait out the peer's delayed ACK
  // (Linux adds the minimum RTO then, else 2 ms).  Never after the RTO.
  const Time pto = 2 * srtt_ + (flight() <= payload_mss() ? cfg_.min_rto : Time{std::chrono::milliseconds(2)});
  if (rto_at_ && now + pto >= *rto_at_) return;
  tlp_at_ = now + pto;
}

void Conn::send_probe(Time now) {
  if (!may_probe()) return;
  const std::size_t unsent = queued() > flight() ? queued() - flight() : 0;
  const std::uint32_t room = snd_wnd_ > flight() ? snd_wnd_ - flight() : 0;
  std::size_t len;
  if (unsent > 0 && room > 0) {  // new data, whatever cwnd says
    len = std::min({unsent, static_cast<std::size_t>(room), payload_mss()});
    tlp_start_ = snd_nxt_;
    tlp_resend_ = false;
    send_segment(snd_nxt_, len, tcp_flag::ack | tcp_flag::psh, now);
    snd_nxt_ += static_cast<std::uint32_t>(len);
    snd_max_ = snd_nxt_;
  } else {  // the last segment again
    len = std::min<std::size_t>(flight(), payload_mss());
    tlp_start_ = snd_max_ - static_cast<std::uint32_t>(len);
    tlp_resend_ = true;
    send_segment(tlp_start_, len, tcp_flag::ack | tcp_flag::psh, now);
    timed_.reset();  // Karn
    ++stats_.retransmits;
  }
  tlp_end_ = tlp_start_ + static_cast<std::uint32_t>(len);
  tlp_high_ = snd_max_;
  tlp_dsack_ = false;
  ++stats_.tail_probes;
  arm_rto(now);
}

bool Conn::probe_ack(const TcpHeader& seg) {
  if (!tlp_high_) return false;
  const std::uint32_t a = seg.ack;
  // A D-SACK (a first block below the cumulative ACK) for the probe's
  // bytes: the original arrived too, so nothing was lost.
  if (seg.options.sack_count > 0) {
    const SackBlock& b = seg.options.sack[0];
    if (seq_le(b.right, a) && seq_lt(b.left, tlp_end_) && seq_gt(b.right, tlp_start_)) tlp_dsack_ = true;
  }
  if (seq_ge(a, *tlp_high_)) {  // the episode is over
    if (tlp_resend_ && !tlp_dsack_) {
      // The probe repaired a loss: the congestion response of any loss
      // (RFC 8985 §7.4.2), as Linux's CWR.
      ssthresh_ = std::max<std::uint32_t>(cwnd_ / 2, 2u * snd_mss_);
      cwnd_ = ssthresh_;
      ++stats_.tail_probe_recoveries;
    }
    tlp_high_.reset();
    return false;
  }
  // The probe arrived and what lies below it has not: sent earlier, those
  // segments are lost (RACK's reasoning, for this one case).
  return seq_lt(a, tlp_start_) && open_bytes(tlp_start_, tlp_end_, a) == 0;
}

void Conn::end(End why) {
  state_ = State::closed;
  sndq_.clear();  // lent memory goes back to its owner
  drop_held();    // and received frames to theirs
  rto_at_.reset();
  ack_at_.reset();
  time_wait_at_.reset();
  persist_at_.reset();
  keep_at_.reset();
  tlp_at_.reset();
  upper_.on_end(why);
}

}  // namespace lnetr::tcp
