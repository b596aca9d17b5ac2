#include "dataplane/tcp/conn.hpp"

#include <algorithm>

#include "router/enum_names.hpp"

namespace lnetr::tcp {

LNETR_ENUM_NAMES(, State, LNETR_TCP_STATES)
LNETR_ENUM_NAMES(, End, LNETR_TCP_ENDS)

using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kMaxWindow = 65535;
constexpr std::uint8_t kMaxWindowScale = 14;      // RFC 7323 §2.3
constexpr std::size_t kTimestampBytes = 12;       // NOP NOP TS: what each data segment's header carries

}  // namespace

// ---- opening -----------------------------------------------------------------------

void Conn::connect(std::uint32_t iss, Time now) {
  iss_ = snd_una_ = iss;
  snd_nxt_ = snd_max_ = iss + 1;  // the SYN
  state_ = State::syn_sent;
  rto_ = cfg_.initial_rto;
  send_syn(false, now);
  arm_rto(now);
}

void Conn::accept(const TcpHeader& syn, std::uint32_t iss, Time now) {
  irs_ = syn.seq;
  rcv_nxt_ = syn.seq + 1;
  take_options(syn);
  snd_wnd_ = syn.window;  // a SYN's window is never scaled
  snd_wl1_ = syn.seq;
  iss_ = snd_una_ = iss;
  snd_nxt_ = snd_max_ = iss + 1;
  state_ = State::syn_received;
  rto_ = cfg_.initial_rto;
  send_syn(true, now);
  arm_rto(now);
}

// What the peer's SYN offers, against what we offer (as Linux negotiates).
void Conn::take_options(const TcpHeader& syn) {
  const TcpOptions& o = syn.options;
  snd_mss_ = std::min<std::uint16_t>(o.mss.value_or(536), cfg_.mss);
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

std::size_t Conn::send(ByteSpan data, Time now) {
  const bool open = state_ == State::established || state_ == State::close_wait || state_ == State::syn_sent ||
                    state_ == State::syn_received;
  if (!open || fin_queued_) return 0;
  const std::size_t room = cfg_.send_buffer > sndq_.size() ? cfg_.send_buffer - sndq_.size() : 0;
  const std::size_t n = std::min(room, data.size());
  sndq_.insert(sndq_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n));
  push(now);
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
  if (state_ != State::syn_sent) send_rst(snd_nxt_, 0, false);
  end(End::aborted);
}

// Send what the peer's window and ours (cwnd) allow, then FIN if asked.
void Conn::push(Time now) {
  if (state_ != State::established && state_ != State::close_wait && state_ != State::fin_wait_1 &&
      state_ != State::closing && state_ != State::last_ack)
    return;
  const std::size_t payload_mss = snd_mss_ - (ts_ok_ ? kTimestampBytes : 0);
  for (;;) {
    const std::size_t offset = snd_nxt_ - snd_una_;
    const std::size_t unsent = offset < sndq_.size() ? sndq_.size() - offset : 0;
    const std::uint32_t wnd = std::min(snd_wnd_, cwnd_);
    const std::uint32_t usable = wnd > flight() ? wnd - flight() : 0;
    const std::size_t len = std::min({unsent, static_cast<std::size_t>(usable), payload_mss});
    if (len == 0) {
      // Data waits on a zero window with nothing in flight: probe it later.
      if (unsent > 0 && flight() == 0 && !rto_at_) arm_rto(now);
      break;
    }
    const bool last = len == unsent;
    send_segment(snd_nxt_, len, static_cast<std::uint8_t>(tcp_flag::ack | (last ? tcp_flag::psh : 0)), now);
    if (!ts_ok_ && !timed_) timed_ = {snd_nxt_ + static_cast<std::uint32_t>(len), now};
    snd_nxt_ += static_cast<std::uint32_t>(len);
    if (seq_gt(snd_nxt_, snd_max_)) snd_max_ = snd_nxt_;
    if (!rto_at_) arm_rto(now);
  }
  // FIN once every byte has been sent (it takes one sequence number).
  if (fin_queued_ && !fin_sent_ && snd_nxt_ - snd_una_ == sndq_.size()) {
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
  const std::size_t at = seq - snd_una_;
  out_.transmit(ep_, h, ByteSpan(sndq_).subspan(at, len));
  ++stats_.segments_out;
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

TcpHeader Conn::header(std::uint32_t seq, std::uint8_t flags, Time now) const {
  TcpHeader h;
  h.src_port = ep_.local_port;
  h.dst_port = ep_.remote_port;
  h.seq = seq;
  h.flags = flags;
  h.ack = (flags & tcp_flag::ack) ? rcv_nxt_ : 0;
  h.window = advertised_window();
  if (ts_ok_) h.options.timestamps = {{ts_now(now), ts_recent_}};
  if (sack_ok_ && !held_.empty()) {
    // The blocks held out of order, merged, first ones first.
    const std::size_t max_blocks = ts_ok_ ? 3 : kMaxSackBlocks;
    for (const auto& [start, bytes] : held_) {
      const std::uint32_t stop = start + static_cast<std::uint32_t>(bytes.size());
      if (h.options.sack_count > 0 && seq_le(start, h.options.sack[h.options.sack_count - 1].right)) {
        SackBlock& last = h.options.sack[h.options.sack_count - 1];
        if (seq_gt(stop, last.right)) last.right = stop;
      } else if (h.options.sack_count < max_blocks) {
        h.options.sack[h.options.sack_count++] = {start, stop};
      }
    }
  }
  return h;
}

std::uint16_t Conn::advertised_window() const {
  const std::uint32_t space = std::min<std::uint32_t>(upper_.receive_space(), kMaxWindow << rcv_wscale_);
  return static_cast<std::uint16_t>(space >> rcv_wscale_);
}

void Conn::window_opened(Time now) {
  if (state_ == State::established || state_ == State::fin_wait_1 || state_ == State::fin_wait_2) send_ack(now);
}

void Conn::retransmit_first(Time now) {
  const std::size_t len = std::min<std::size_t>(sndq_.size(), snd_mss_ - (ts_ok_ ? kTimestampBytes : 0));
  ++stats_.retransmits;
  if (len > 0) {
    send_segment(snd_una_, len, tcp_flag::ack, now);
  } else if (fin_sent_) {
    send_segment(snd_una_, 0, tcp_flag::fin | tcp_flag::ack, now);
  }
}

// ---- receiving ---------------------------------------------------------------------

// RFC 9293 §3.10.7.4's acceptability test against the window we advertise.
bool Conn::acceptable(const TcpHeader& seg) const {
  const std::uint32_t len = static_cast<std::uint32_t>(seg.payload.size()) + ((seg.flags & tcp_flag::syn) ? 1 : 0) +
                            ((seg.flags & tcp_flag::fin) ? 1 : 0);
  const std::uint32_t wnd = static_cast<std::uint32_t>(advertised_window()) << rcv_wscale_;
  auto in_window = [&](std::uint32_t s) { return seq_le(rcv_nxt_, s) && seq_lt(s, rcv_nxt_ + wnd); };
  if (len == 0) return wnd == 0 ? seg.seq == rcv_nxt_ : in_window(seg.seq);
  if (wnd == 0) return false;
  return in_window(seg.seq) || in_window(seg.seq + len - 1);
}

void Conn::input(const TcpHeader& seg, Time now) {
  ++stats_.segments_in;
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
      if (ts_ok_ && seg.options.timestamps && seg.options.timestamps->second != 0)
        rtt_sample(std::chrono::milliseconds(ts_now(now) - seg.options.timestamps->second));
      else if (timed_ && retries_ == 0)
        rtt_sample(now - timed_->second);
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

  // Synchronized states.
  if (!acceptable(seg)) {
    ++stats_.duplicates;
    if (!rst) send_ack(now);
    return;
  }
  if (rst) {
    end(End::reset);
    return;
  }
  if (syn) {  // a SYN in a synchronized state: challenge ACK (RFC 5961 §4)
    send_ack(now);
    return;
  }
  if (!ack) return;
  if (ts_ok_ && seg.options.timestamps && seq_le(seg.seq, rcv_nxt_)) ts_recent_ = seg.options.timestamps->first;

  if (state_ == State::syn_received) {
    if (seq_le(seg.ack, snd_una_) || seq_gt(seg.ack, snd_nxt_)) {
      send_rst(seg.ack, 0, false);
      return;
    }
    state_ = State::established;
    snd_wnd_ = static_cast<std::uint32_t>(seg.window) << snd_wscale_;
    snd_wl1_ = seg.seq;
    snd_wl2_ = seg.ack;
    upper_.on_established();
  }

  process_ack(seg, now);
  if (state_ == State::closed) return;
  const bool fin_acked = fin_sent_ && snd_una_ == snd_max_;
  if (state_ == State::fin_wait_1 && fin_acked) state_ = State::fin_wait_2;
  if (state_ == State::closing && fin_acked) {
    state_ = State::time_wait;
    time_wait_at_ = now + cfg_.time_wait;
  }
  if (state_ == State::last_ack && fin_acked) {
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
  if (takes_data && !seg.payload.empty()) process_data(seg, now);

  // FIN, once everything before it has arrived.
  if ((seg.flags & tcp_flag::fin) && !fin_received_ &&
      seg.seq + static_cast<std::uint32_t>(seg.payload.size()) == rcv_nxt_) {
    fin_received_ = true;
    ++rcv_nxt_;
    send_ack(now);
    upper_.on_peer_closed();
    switch (state_) {
      case State::syn_received:
      case State::established: state_ = State::close_wait; break;
      case State::fin_wait_1:
        state_ = snd_una_ == snd_max_ ? State::time_wait : State::closing;
        if (state_ == State::time_wait) time_wait_at_ = now + cfg_.time_wait;
        break;
      case State::fin_wait_2:
        state_ = State::time_wait;
        time_wait_at_ = now + cfg_.time_wait;
        break;
      default: break;
    }
  }
  push(now);
}

void Conn::process_ack(const TcpHeader& seg, Time now) {
  const std::uint32_t a = seg.ack;
  if (seq_gt(a, snd_max_)) {  // acknowledges what was never sent
    send_ack(now);
    return;
  }
  const std::uint32_t wnd = static_cast<std::uint32_t>(seg.window) << snd_wscale_;
  const bool window_moved = wnd != snd_wnd_;
  if (seq_lt(snd_wl1_, seg.seq) || (snd_wl1_ == seg.seq && seq_le(snd_wl2_, a))) {
    snd_wnd_ = wnd;
    snd_wl1_ = seg.seq;
    snd_wl2_ = a;
  }
  if (seq_gt(a, snd_una_)) {
    const std::uint32_t acked = a - snd_una_;
    const std::size_t data = std::min<std::size_t>(acked, sndq_.size());
    sndq_.erase(sndq_.begin(), sndq_.begin() + static_cast<std::ptrdiff_t>(data));
    stats_.bytes_acked += data;
    snd_una_ = a;
    if (seq_lt(snd_nxt_, snd_una_)) snd_nxt_ = snd_una_;
    // RTT: the echoed timestamp, else the one timed segment (Karn: never
    // a retransmitted one).
    if (ts_ok_ && seg.options.timestamps && seg.options.timestamps->second != 0)
      rtt_sample(std::chrono::milliseconds(ts_now(now) - seg.options.timestamps->second));
    else if (timed_ && seq_ge(a, timed_->first))
      rtt_sample(now - timed_->second);
    if (timed_ && seq_ge(a, timed_->first)) timed_.reset();
    retries_ = 0;
    // Congestion window (RFC 5681, NewReno's recovery RFC 6582).
    if (in_recovery_) {
      if (seq_ge(a, recover_)) {
        in_recovery_ = false;
        cwnd_ = ssthresh_;
      } else {  // partial ACK: the next hole, at once
        retransmit_first(now);
        cwnd_ = cwnd_ > acked ? cwnd_ - acked + snd_mss_ : snd_mss_;
      }
    } else if (cwnd_ < ssthresh_) {
      cwnd_ += std::min<std::uint32_t>(acked, snd_mss_);
    } else {
      cwnd_ += std::max<std::uint32_t>(1, snd_mss_ * snd_mss_ / cwnd_);
    }
    dupacks_ = 0;
    if (snd_una_ == snd_max_) rto_at_.reset();
    else arm_rto(now);
    return;
  }
  // A duplicate ACK: nothing new acknowledged, no data, same window.
  if (a == snd_una_ && seg.payload.empty() && !window_moved && flight() > 0 && !(seg.flags & tcp_flag::fin)) {
    ++dupacks_;
    if (dupacks_ == 3 && !in_recovery_) {
      ssthresh_ = std::max<std::uint32_t>(flight() / 2, 2u * snd_mss_);
      recover_ = snd_max_;
      in_recovery_ = true;
      ++stats_.fast_retransmits;
      retransmit_first(now);
      cwnd_ = ssthresh_ + 3u * snd_mss_;
    } else if (in_recovery_) {
      cwnd_ += snd_mss_;  // each further duplicate: a segment left the network
    }
  }
}

void Conn::process_data(const TcpHeader& seg, Time now) {
  ByteSpan bytes = seg.payload;
  std::uint32_t seq = seg.seq;
  if (seq_lt(seq, rcv_nxt_)) {  // starts with bytes we have
    const std::uint32_t skip = rcv_nxt_ - seq;
    if (skip >= bytes.size()) {
      ++stats_.duplicates;
      send_ack(now);
      return;
    }
    bytes = bytes.subspan(skip);
    seq = rcv_nxt_;
  }
  if (seq == rcv_nxt_) {
    const bool had_holes = !held_.empty();
    upper_.on_data(bytes);
    stats_.bytes_in += bytes.size();
    rcv_nxt_ += static_cast<std::uint32_t>(bytes.size());
    deliver_held();
    // ACK every second full segment, or after delayed_ack; at once when
    // this filled a hole (RFC 5681 §4.2).
    if (had_holes || ++unacked_segments_ >= 2) {
      send_ack(now);
    } else if (!ack_at_) {
      ack_at_ = now + cfg_.delayed_ack;
    }
    return;
  }
  // Beyond rcv_nxt_: held (copied) until the hole fills; a duplicate ACK
  // with SACK blocks at once.
  ++stats_.out_of_order;
  auto it = held_.find(seq);
  if (it == held_.end() || it->second.size() < bytes.size()) held_[seq].assign(bytes.begin(), bytes.end());
  send_ack(now);
}

void Conn::deliver_held() {
  while (!held_.empty()) {
    auto it = held_.begin();
    if (seq_gt(it->first, rcv_nxt_)) break;
    const std::uint32_t stop = it->first + static_cast<std::uint32_t>(it->second.size());
    if (seq_gt(stop, rcv_nxt_)) {
      const ByteSpan rest = ByteSpan(it->second).subspan(rcv_nxt_ - it->first);
      upper_.on_data(rest);
      stats_.bytes_in += rest.size();
      rcv_nxt_ = stop;
    }
    held_.erase(it);
  }
}

// ---- timers ------------------------------------------------------------------------

void Conn::rtt_sample(Time rtt) {
  if (rtt < Time::zero()) return;
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

std::optional<Time> Conn::next_timer() const noexcept {
  std::optional<Time> t;
  for (const auto& c : {rto_at_, ack_at_, time_wait_at_})
    if (c && (!t || *c < *t)) t = c;
  return t;
}

void Conn::tick(Time now) {
  if (time_wait_at_ && now >= *time_wait_at_) {
    end(End::closed);
    return;
  }
  if (ack_at_ && now >= *ack_at_) send_ack(now);
  if (!rto_at_ || now < *rto_at_) return;
  rto_at_.reset();
  rto_ = std::min(rto_ * 2, cfg_.max_rto);  // back off
  timed_.reset();                             // Karn: no sample from what is resent
  if (state_ == State::syn_sent || state_ == State::syn_received) {
    if (++retries_ > cfg_.max_syn_retries) return end(End::timed_out);
    ++stats_.retransmits;
    send_syn(state_ == State::syn_received, now);
    arm_rto(now);
    return;
  }
  if (flight() > 0) {
    if (++retries_ > cfg_.max_retries) {
      send_rst(snd_nxt_, 0, false);
      return end(End::timed_out);
    }
    ++stats_.timeouts;
    ssthresh_ = std::max<std::uint32_t>(flight() / 2, 2u * snd_mss_);
    cwnd_ = snd_mss_;
    in_recovery_ = false;
    dupacks_ = 0;
    // Go back to the first unacknowledged byte (and the FIN, if it was
    // sent): with cwnd one segment, push() resends exactly that.
    snd_nxt_ = snd_una_;
    fin_sent_ = false;
    ++stats_.retransmits;
    push(now);
    arm_rto(now);
    return;
  }
  // Nothing in flight but data waiting on a zero window: one byte probes it.
  const std::size_t unsent = sndq_.size() - (snd_nxt_ - snd_una_);
  if (unsent > 0 && snd_wnd_ == 0) {
    send_segment(snd_nxt_, 1, tcp_flag::ack, now);
    ++snd_nxt_;
    if (seq_gt(snd_nxt_, snd_max_)) snd_max_ = snd_nxt_;
    arm_rto(now);
  } else {
    push(now);
  }
}

void Conn::end(End why) {
  state_ = State::closed;
  rto_at_.reset();
  ack_at_.reset();
  time_wait_at_.reset();
  upper_.on_end(why);
}

}  // namespace lnetr::tcp
