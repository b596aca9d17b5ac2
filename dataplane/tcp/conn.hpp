// One TCP connection of the dataplane's own TCP (issue 6): the state
// machine of RFC 9293, with MSS, window scaling, SACK-permitted and
// timestamps negotiated as Linux does, retransmission by RFC 6298 (timer
// with exponential backoff, RTT from timestamps, else Karn's rule), fast
// retransmit and NewReno recovery (RFC 6582), delayed ACKs, SACK blocks
// for data held out of order, a receive window its owner sizes (the router
// buffers it has: that is the back-pressure), FIN/RST handling, TIME_WAIT
// and sequence-number wrap.
//
// Pure logic over a caller's clock: segments come in through input() (the
// caller has checked the checksum), go out through Output::transmit(), and
// time moves only when the caller says (tick()).  Nothing here allocates
// per segment on the in-order path: in-order payload is handed to the
// owner straight from the received segment; only out-of-order bytes are
// copied, to be held.
//
// A zero window is probed (persist timer, RFC 9293 §3.8.6.1) for as long
// as the peer answers; out-of-order data is held as merged intervals inside
// the window we advertised, which never shrinks.
//
// The send queue copies what send() gives it, or keeps a reference to what
// lend() gives it until the peer acknowledges it (send_queue.hpp).
//
// With SACK negotiated, loss recovery follows the peer's SACK blocks (RFC
// 6675's conservative recovery): recovery starts on three duplicate ACKs or
// three segments' worth SACKed above the first hole, every hole below the
// highest SACKed byte is resent once per recovery within cwnd, against an
// estimate of what is still in the network ("pipe").  Without SACK, NewReno.
//
// A lost tail (the last segments of a burst, which no later segment can
// reveal) is probed instead of waiting out a timeout: the tail loss probe
// of RFC 8985 §7, as Linux sends it.  Two smoothed round trips after the
// last ACK with data outstanding, one segment goes (new data if any, else
// the last one again); its SACK reveals the holes below it, which start
// SACK recovery at once.  An episode whose probe was a resend and drew no
// D-SACK (so the original was lost too) ends in a cwnd reduction.  As a
// receiver, a duplicate segment is reported in a D-SACK block (RFC 2883).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "dataplane/tcp/send_queue.hpp"
#include "lnd/ref_chain.hpp"
#include "dataplane/tcp/wire.hpp"

namespace lnetr::tcp {

using Time = std::chrono::nanoseconds;  // a monotonic clock's reading

// Sequence-number comparisons modulo 2^32 (RFC 9293 §3.4).
constexpr bool seq_lt(std::uint32_t a, std::uint32_t b) noexcept { return static_cast<std::int32_t>(a - b) < 0; }
constexpr bool seq_le(std::uint32_t a, std::uint32_t b) noexcept { return static_cast<std::int32_t>(a - b) <= 0; }
constexpr bool seq_gt(std::uint32_t a, std::uint32_t b) noexcept { return seq_lt(b, a); }
constexpr bool seq_ge(std::uint32_t a, std::uint32_t b) noexcept { return seq_le(b, a); }

#define LNETR_TCP_STATES(X)                          \
  X(closed, "CLOSED")                                \
  X(syn_sent, "SYN-SENT")                            \
  X(syn_received, "SYN-RECEIVED")                    \
  X(established, "ESTABLISHED")                      \
  X(fin_wait_1, "FIN-WAIT-1")                        \
  X(fin_wait_2, "FIN-WAIT-2")                        \
  X(closing, "CLOSING")                              \
  X(time_wait, "TIME-WAIT")                          \
  X(close_wait, "CLOSE-WAIT")                        \
  X(last_ack, "LAST-ACK")

enum class State : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_TCP_STATES(LNETR_X)
#undef LNETR_X
};
std::string_view name(State s) noexcept;
std::string_view describe(State s) noexcept;

// Why a connection ended.
#define LNETR_TCP_ENDS(X)                                                    \
  X(closed, "closed by both sides")                                          \
  X(reset, "reset by the peer")                                              \
  X(refused, "the peer refused the connection (RST to our SYN)")             \
  X(timed_out, "retransmissions went unanswered")                            \
  X(aborted, "aborted by this side")

enum class End : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_TCP_ENDS(LNETR_X)
#undef LNETR_X
};
std::string_view name(End e) noexcept;
std::string_view describe(End e) noexcept;

struct Endpoints {
  IpAddr local_ip, remote_ip;
  std::uint16_t local_port = 0, remote_port = 0;
};

struct ConnConfig {
  std::uint16_t mss = 1460;        // what we accept (our MTU - 40)
  std::uint8_t window_scale = 7;   // what we offer
  bool sack = true;
  bool timestamps = true;
  std::uint32_t send_buffer = 4 << 20;  // bytes queued (sent or not) at most
  Time initial_rto = std::chrono::seconds(1);
  Time min_rto = std::chrono::milliseconds(200);
  Time max_rto = std::chrono::seconds(120);
  int max_retries = 15;  // retransmissions of one segment before timed_out (tcp_retries2)
  int max_syn_retries = 6;
  Time delayed_ack = std::chrono::milliseconds(40);
  Time time_wait = std::chrono::seconds(60);
  std::uint32_t initial_cwnd_segments = 10;  // RFC 6928
  // Segmentation offload: data may go out in transmits of up to this many
  // bytes, which the stack or the device cuts into segments of at most
  // payload_mss() (TSO); fast retransmits, SACK recovery and probes stay
  // one segment each (after a timeout, sending again from the first
  // unacknowledged byte is like sending new data).  0: one segment per
  // transmit.  segments_out counts payload_mss() segments (a device may
  // cut smaller ones: StackStats::tso_segments).
  std::uint32_t tso_bytes = 0;
  // Keepalive (RFC 1122 4.2.3.6, Linux's SO_KEEPALIVE): after this long
  // with nothing heard and nothing outstanding, probe every interval; that
  // many probes unanswered end the connection.  0: off.
  Time keepalive_idle{0};
  Time keepalive_interval = std::chrono::seconds(75);
  int keepalive_probes = 9;
  bool tail_loss_probe = true;  // RFC 8985 §7 (needs SACK)
  // ACKs answering segments without data that are out of the window, or a
  // RST or SYN that must be challenged (RFC 5961), at most one per this
  // interval (Linux's tcp_invalid_ratelimit): two stacks that each find the
  // other's ACKs unacceptable would otherwise answer each other forever.
  Time invalid_ratelimit = std::chrono::milliseconds(500);
  // Where bytes held out of order may keep the received frame they lie in
  // (TcpHeader::frame) instead of being copied; null: always copied.
  lnd::FrameRefs* frames = nullptr;
  // Of those, at most this many per connection (a hole that never fills
  // must not keep a whole queue's frames from the other connections).
  std::uint32_t max_held_frames = 1024;
};

// What a connection emits.
class Output {
 public:
  virtual ~Output() = default;
  // Send this segment (header without checksum; payload valid until return).
  virtual void transmit(const Endpoints& ep, const TcpHeader& h, const Payload& payload) = 0;
  // Whether what a received segment lets the connection send (new data
  // the ACK made room for, an ACK owed for two segments) may wait for the
  // end of the burst of received frames it came in, when Conn::flush() is
  // called: a burst's ACKs then release one transmit, which a device with
  // segmentation offload takes whole, and its data segments draw one ACK.
  virtual bool defer() { return false; }
};

// Its owner.
class Upper {
 public:
  virtual ~Upper() = default;
  virtual void on_established() = 0;
  // In-order bytes from the peer (valid until return); all of them are
  // taken.
  // `frame`: the device reference of the received frame they lie in
  // (TcpHeader::frame), null for bytes copied (held here out of order
  // without their frame).
  virtual void on_data(ByteSpan bytes, void* frame) = 0;
  // Bytes the owner can take now: the receive window advertised.
  virtual std::uint32_t receive_space() const = 0;
  // The peer sent FIN: no more data will come.
  virtual void on_peer_closed() = 0;
  // The connection is over (after this the Conn may be destroyed).
  virtual void on_end(End why) = 0;
  // The peer acknowledged `n` more bytes of what was sent (lent memory
  // among them is released).
  virtual void on_acked(std::size_t n) { (void)n; }
};

class Conn {
 public:
  Conn(const Endpoints& ep, const ConnConfig& cfg, Upper& upper, Output& out) noexcept
      : ep_(ep), cfg_(cfg), upper_(upper), out_(out) {}
  ~Conn() { drop_held(); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // Active open: send SYN with initial sequence `iss`.
  void connect(std::uint32_t iss, Time now);
  // Passive open: `syn` arrived for a listener; answer SYN-ACK.
  // `answer` false: the SYN-ACK already went (a SYN cookie), so none is
  // sent or retransmitted; the ACK that follows establishes it.
  void accept(const TcpHeader& syn, std::uint32_t iss, Time now, bool answer = true);
  // A segment for this connection (checksum already verified).
  void input(const TcpHeader& seg, Time now);
  // Queue bytes to send; how many were taken (the send buffer may be full).
  // send() copies them; lend() keeps a reference to the caller's memory,
  // which must stay valid until on_acked() has covered them, own_sent()
  // copied them, or the connection ended.
  std::size_t send(ByteSpan data, Time now) { return queue(data, Keep::copy, now); }
  // `dev`: the memory's device reference, if it has one (send_queue.hpp).
  std::size_t lend(ByteSpan data, Time now, void* dev = nullptr) { return queue(data, Keep::lend, now, dev); }
  // As send() or lend(), without sending yet: several writes then go out
  // as full segments at push_queued() (one write of a gather list).
  std::size_t queue_only(ByteSpan data, bool lend, void* dev) {
    return queue(data, lend ? Keep::lend : Keep::copy, Time{}, dev, false);
  }
  // As queue_only() of bytes not lent whose memory has the device
  // reference `dev`: where that is a received frame the connection may
  // hold (ConnConfig::frames, FrameRefs::hold), kept by a reference of its
  // own until acknowledged (`held` set), else copied.  Either way the
  // caller may have the memory back at once.
  std::size_t queue_only_held(ByteSpan data, void* dev, bool& held) {
    return queue(data, Keep::hold, Time{}, dev, false, &held);
  }
  void push_queued(Time now) { push(now); }
  // What input() left for the end of the burst (Output::defer): the data
  // the window lets go, and the ACK owed.
  void flush(Time now);
  // Copy lent bytes still queued into the connection's own storage (their
  // owner wants the memory back); the bytes copied.
  std::size_t own_sent() { return sndq_.own_all(); }
  // Send FIN once everything queued has been sent.
  void close(Time now);
  // Send RST and end now.
  void abort(Time now);
  // The owner took bytes: the window opened (maybe worth a window update).
  void window_opened(Time now);
  // A new SYN for a connection in TIME-WAIT (RFC 6191, as Linux): if its
  // sequence is beyond what this one received, end it now (on_end(closed))
  // so that the new connection can take its place; false otherwise.
  bool yield_time_wait(const TcpHeader& syn) noexcept;
  // Turn keepalive on (idle > 0) or off, as setsockopt would.
  void set_keepalive(Time idle, Time interval, int probes, Time now) noexcept;
  // Timers; returns when it next wants to be called (nullopt: no timer).
  void tick(Time now);
  std::optional<Time> next_timer() const noexcept;

  State state() const noexcept { return state_; }
  const Endpoints& endpoints() const noexcept { return ep_; }

  // For tests and counters.
  struct Stats {
    std::uint64_t segments_in = 0, segments_out = 0;
    std::uint64_t retransmits = 0, fast_retransmits = 0, timeouts = 0;
    std::uint64_t lost_retransmits = 0;  // resends found lost and sent again, without a timeout
    std::uint64_t out_of_order = 0, duplicates = 0;
    std::uint64_t bytes_reassembled = 0;  // bytes held out of order (copied), delivered once the hole filled
    std::uint64_t bytes_reassembled_kept = 0;  // ... held in their received frames instead (not copied)
    std::uint64_t bytes_in = 0, bytes_acked = 0;
    std::uint64_t keepalive_probes = 0;
    std::uint64_t tail_probes = 0;            // tail loss probes sent
    std::uint64_t tail_probe_recoveries = 0;  // ... that repaired a loss (cwnd reduced)
    std::uint64_t invalid_acks_limited = 0;   // answers to invalid segments not sent (invalid_ratelimit)
    Stats& operator+=(const Stats& s) noexcept;  // totals over connections
  };
  const Stats& stats() const noexcept { return stats_; }
  std::uint32_t cwnd() const noexcept { return cwnd_; }
  std::uint32_t ssthresh() const noexcept { return ssthresh_; }
  Time rto() const noexcept { return rto_; }
  std::uint16_t send_mss() const noexcept { return snd_mss_; }
  // Payload bytes a segment carries: the MSS less the timestamp option.
  std::size_t payload_mss() const noexcept { return snd_mss_ - (ts_ok_ ? 12u : 0u); }
  std::size_t queued() const noexcept { return sndq_.size(); }  // bytes not yet acked
  std::size_t lent() const noexcept { return sndq_.lent(); }    // of which lent
  // Bytes send() would take now.
  std::size_t send_buffer() const noexcept { return cfg_.send_buffer; }
  std::size_t send_space() const noexcept { return cfg_.send_buffer > queued() ? cfg_.send_buffer - queued() : 0; }
  std::size_t held_bytes() const noexcept;  // out-of-order bytes held
  // Sequence invariants (for the fuzzer): una <= nxt <= max.
  bool consistent() const noexcept { return seq_le(snd_una_, snd_nxt_) && seq_le(snd_nxt_, snd_max_); }

 private:
  // Sending.
  enum class Keep : std::uint8_t { copy, lend, hold };
  std::size_t queue(ByteSpan data, Keep keep, Time now, void* dev = nullptr, bool push_now = true,
                    bool* held = nullptr);
  void send_syn(bool with_ack, Time now);
  void push(Time now);  // send what the windows allow
  // Answer an invalid segment with an ACK, unless one was sent for another
  // within invalid_ratelimit (segments with data are always answered).
  void ack_invalid(const TcpHeader& seg, Time now);
  void send_segment(std::uint32_t seq, std::size_t len, std::uint8_t flags, Time now);
  void send_ack(Time now);
  void send_rst(std::uint32_t seq, std::uint32_t ack, bool with_ack);
  void retransmit_first(Time now);
  TcpHeader header(std::uint32_t seq, std::uint8_t flags, Time now);
  std::uint16_t advertised_window() const;
  void hold(std::uint32_t seq, ByteSpan bytes, void* frame);
  void deliver_held();
  void drop_held() noexcept;  // releases the frames held
  bool fin_acked() const noexcept { return fin_sent_ && seq_gt(snd_una_, fin_seq_); }
  // Receiving.
  bool process_ack(const TcpHeader& seg, Time now);  // false: the segment is to be dropped
  // SACK recovery.
  bool sack_recovery() const noexcept { return in_recovery_ && sack_ok_; }
  void take_sack(const TcpHeader& seg);  // add its blocks to the scoreboard
  void prune_sacked() noexcept;          // drop what snd_una_ passed
  std::uint32_t sacked_bytes() const noexcept;
  std::uint32_t pipe() const noexcept;   // bytes estimated in the network (RFC 6675)
  // The next hole to resend in SACK recovery: [start, start + len).
  std::optional<std::pair<std::uint32_t, std::uint32_t>> next_hole() const noexcept;
  bool resend_hole(Time now);  // send next_hole(), if any
  // Lost resends: a SACK for data sent after a hole was resent, while the
  // hole is still open, means the resend was lost too (Linux's
  // lost-retransmit detection, which RACK generalises); such a hole goes
  // again before any other, instead of waiting for a timeout.
  void find_lost_resends(std::uint32_t acked_to);
  bool resend_lost(Time now);
  // Tail loss probe: arm the probe timeout where RFC 8985 §7.2 allows one;
  // send the probe; follow the episode on each ACK (true: the probe's SACK
  // shows the segments below it lost).
  void schedule_probe(Time now);
  void send_probe(Time now);
  bool probe_ack(const TcpHeader& seg);
  bool may_probe() const noexcept;
  void send_hole(std::uint32_t start, std::uint32_t len, Time now);
  // Bytes of [start, end) neither acknowledged (below acked_to) nor SACKed.
  std::uint32_t open_bytes(std::uint32_t start, std::uint32_t end, std::uint32_t acked_to) const noexcept;
  void process_data(const TcpHeader& seg, Time now);
  void take_options(const TcpHeader& syn);
  bool acceptable(const TcpHeader& seg) const;
  // Timers and RTT.
  void rtt_sample(Time rtt);
  void arm_rto(Time now) { rto_at_ = now + rto_; }
  void end(End why);
  std::uint32_t ts_now(Time now) const noexcept {
    return static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
  }
  std::uint32_t flight() const noexcept { return snd_nxt_ - snd_una_; }

  Endpoints ep_;
  ConnConfig cfg_;
  Upper& upper_;
  Output& out_;
  State state_ = State::closed;

  // Send sequence space (RFC 9293 §3.3.1).
  std::uint32_t iss_ = 0, snd_una_ = 0, snd_nxt_ = 0, snd_max_ = 0;
  std::uint32_t snd_wnd_ = 0;  // scaled
  std::uint32_t snd_wl1_ = 0, snd_wl2_ = 0;
  std::uint16_t snd_mss_ = 536;
  std::uint8_t snd_wscale_ = 0;  // the peer's (applied to windows it sends)
  std::uint8_t rcv_wscale_ = 0;  // ours (applied to windows we send)
  bool sack_ok_ = false, ts_ok_ = false;
  SendQueue sndq_;                  // bytes from snd_una_ on (sent or not)
  bool fin_queued_ = false;         // close(): FIN after sndq_
  bool fin_sent_ = false;
  std::uint32_t fin_seq_ = 0;       // the FIN's sequence number, once sent

  // Receive sequence space.
  std::uint32_t irs_ = 0, rcv_nxt_ = 0;
  std::uint32_t rcv_adv_ = 0;  // right edge of the window last advertised (never moved left)
  std::uint32_t last_held_ = 0;  // start of the latest segment held (first SACK block)
  std::uint32_t ts_recent_ = 0;
  // Bytes held out of order: disjoint pieces by first sequence number,
  // each in its received frame (one reference to it) or copied (adjacent
  // copies merged).  SACK blocks are the runs of touching pieces.
  struct Held {
    const std::uint8_t* kept = nullptr;  // in `frame`
    void* frame = nullptr;
    std::vector<std::uint8_t> copy;
    std::uint32_t size = 0;
    const std::uint8_t* data() const noexcept { return frame ? kept : copy.data(); }
  };
  using HeldMap = std::map<std::uint32_t, Held, bool (*)(std::uint32_t, std::uint32_t)>;
  HeldMap held_{seq_lt};
  std::uint32_t held_frames_ = 0;  // pieces of held_ in frames
  bool fin_received_ = false;

  // Congestion control (NewReno).
  std::uint32_t cwnd_ = 0, ssthresh_ = 0xffffffff;
  int dupacks_ = 0;
  bool in_recovery_ = false;
  std::uint32_t recover_ = 0;
  // SACK scoreboard: disjoint, ordered ranges [start, end) above snd_una_
  // the peer reported holding; and in SACK recovery, how far holes have
  // been resent.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> sacked_;
  std::uint32_t high_rxt_ = 0;
  struct Resent {
    std::uint32_t start, end;  // the hole's bytes
    std::uint32_t sent_after;  // snd_nxt_ when it was resent: what lies above went later
  };
  std::vector<Resent> resent_;                                   // this recovery's resends, in order
  std::vector<std::pair<std::uint32_t, std::uint32_t>> relost_;  // resends found lost: to go again
  // Tail loss probe: when it is due; the open episode (snd_max_ when the
  // probe went, until acknowledged), the probe's bytes, whether it was a
  // resend, and whether a D-SACK showed the original arrived after all.
  std::optional<Time> tlp_at_;
  std::optional<std::uint32_t> tlp_high_;
  std::uint32_t tlp_start_ = 0, tlp_end_ = 0;
  bool tlp_resend_ = false, tlp_dsack_ = false;
  // A duplicate segment received: reported first in our next ACK's SACK blocks.
  std::optional<SackBlock> dsack_;
  std::optional<Time> last_invalid_ack_;  // when an invalid segment was last answered

  // Timers.
  Time srtt_{0}, rttvar_{0};
  Time rto_{std::chrono::seconds(1)};
  bool have_rtt_ = false;
  std::optional<Time> rto_at_, ack_at_, time_wait_at_, persist_at_;
  std::optional<Time> keep_at_;  // keepalive: the next probe (or the first, after idle)
  int keep_probes_ = 0;          // probes sent since the peer was last heard
  Time persist_backoff_{0};
  int probes_ = 0;  // zero-window probes unanswered
  int retries_ = 0;
  // Karn: one timed segment when timestamps are off.
  std::optional<std::pair<std::uint32_t, Time>> timed_;
  bool ack_pending_ = false;
  unsigned unacked_segments_ = 0;  // full segments received since our last ACK

  Stats stats_;
};

}  // namespace lnetr::tcp
