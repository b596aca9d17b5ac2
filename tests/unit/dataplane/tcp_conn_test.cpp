// The dataplane TCP connection (dataplane/tcp/conn.hpp) on a simulated
// clock: two connections joined by a wire that encodes every segment to
// bytes (checksum included) and decodes it at the other end, with a latency
// and a hook that drops or delays segments.  Handshakes, options, bulk data
// across the sequence-number wrap, loss with fast retransmit and with
// timeouts (backoff), reordering with SACK blocks, zero windows, closes,
// resets and timeouts.
#include "dataplane/tcp/conn.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <set>

namespace lnetr::tcp {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;

struct Wire;

// One end: the connection, its owner and what it received.
struct End_ : Upper, Output {
  Wire* wire = nullptr;
  int side = 0;
  std::unique_ptr<Conn> conn;
  std::vector<std::uint8_t> got;
  std::uint32_t space = 1 << 20;
  bool established = false, peer_closed = false;
  std::optional<End> ended;
  std::vector<TcpHeader> sent;  // every header it sent (payload cleared)
  std::vector<std::uint8_t> greeting;  // sent from on_established()
  bool close_on_fin = false;           // close() from on_peer_closed()

  void on_established() override {
    established = true;
    if (!greeting.empty()) conn->send(greeting, Time::zero() + 1000s);
  }
  std::vector<std::pair<std::size_t, void*>> runs;  // each delivery: its size and frame
  void on_data(ByteSpan b, void* frame) override {
    got.insert(got.end(), b.begin(), b.end());
    runs.emplace_back(b.size(), frame);
  }
  std::uint32_t receive_space() const override { return space; }
  void on_peer_closed() override {
    peer_closed = true;
    if (close_on_fin) conn->close(Time::zero() + 1000s);
  }
  void on_end(End why) override { ended = why; }
  void transmit(const Endpoints& ep, const TcpHeader& h, const Payload& payload) override;
};

struct Wire {
  struct Packet {
    Time at;
    int to;
    std::vector<std::uint8_t> bytes;
  };
  Time now = 1000s;  // timestamps start well away from 0
  Time latency = 1ms;
  std::deque<Packet> inflight;
  // Return true to drop a segment `from` sends (its header as sent).
  std::function<bool(int from, const TcpHeader&)> drop;
  // Extra delay for a segment (reordering).
  std::function<Time(int from, const TcpHeader&)> delay;
  End_ ends[2];
  std::uint64_t dropped = 0;

  Wire() {
    for (int i = 0; i < 2; ++i) {
      ends[i].wire = this;
      ends[i].side = i;
    }
  }
  Endpoints ep(int side) const {
    const IpAddr a = IpAddr::v4(kIpA), b = IpAddr::v4(kIpB);
    return side == 0 ? Endpoints{a, b, 1023, 988} : Endpoints{b, a, 988, 1023};
  }
  Conn& make(int side, ConnConfig cfg = {}) {
    ends[side].conn = std::make_unique<Conn>(ep(side), cfg, ends[side], ends[side]);
    return *ends[side].conn;
  }

  void send(int from, const TcpHeader& h, ByteSpan payload) {
    std::vector<std::uint8_t> bytes(kTcpMaxHeader + payload.size());
    const std::size_t n = encode_tcp(h, bytes);
    EXPECT_GT(n, 0u);
    std::copy(payload.begin(), payload.end(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    bytes.resize(n + payload.size());
    const Endpoints e = ep(from);
    finish_tcp_checksum(e.local_ip, e.remote_ip, bytes);
    TcpHeader rec = h;
    rec.payload = {};
    ends[from].sent.push_back(rec);
    TcpHeader full = h;  // what the hooks see: the header with its payload
    full.payload = payload;
    if (drop && drop(from, full)) {
      ++dropped;
      return;
    }
    const Time extra = delay ? delay(from, full) : Time::zero();
    inflight.push_back({now + latency + extra, 1 - from, std::move(bytes)});
    std::stable_sort(inflight.begin(), inflight.end(), [](const Packet& a, const Packet& b) { return a.at < b.at; });
  }

  // Run events until `until` or nothing is left to do.
  void run(Time until) {
    while (true) {
      std::optional<Time> next;
      if (!inflight.empty()) next = inflight.front().at;
      for (auto& e : ends)
        if (e.conn && e.conn->state() != State::closed)
          if (auto t = e.conn->next_timer(); t && (!next || *t < *next)) next = t;
      if (!next || *next > until) {
        now = until;
        return;
      }
      now = std::max(now, *next);
      if (!inflight.empty() && inflight.front().at <= now) {
        Packet p = std::move(inflight.front());
        inflight.pop_front();
        const Endpoints e = ep(1 - p.to);
        ASSERT_TRUE(tcp_checksum_ok(e.local_ip, e.remote_ip, p.bytes));
        auto h = decode_tcp(p.bytes);
        ASSERT_TRUE(h);
        End_& to = ends[p.to];
        if (to.conn && to.conn->state() != State::closed) to.conn->input(*h, now);
        continue;
      }
      for (auto& e : ends)
        if (e.conn && e.conn->state() != State::closed)
          if (auto t = e.conn->next_timer(); t && *t <= now) e.conn->tick(now);
    }
  }

  // A connects, B accepts A's SYN (as a listener would).
  void open(ConnConfig a = {}, ConnConfig b = {}, std::uint32_t iss_a = 1000, std::uint32_t iss_b = 500000) {
    make(0, a).connect(iss_a, now);
    ASSERT_EQ(inflight.size(), 1u);
    Packet syn = std::move(inflight.front());
    inflight.pop_front();
    auto h = decode_tcp(syn.bytes);
    ASSERT_TRUE(h);
    now = syn.at;
    make(1, b).accept(*h, iss_b, now);
    run(now + 10ms);
  }
};

void End_::transmit(const Endpoints&, const TcpHeader& h, const Payload& payload) {
  std::vector<std::uint8_t> bytes(payload.size());
  payload.copy_to(bytes.data());
  wire->send(side, h, bytes);
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed = 0) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 131 + seed + (i >> 12));
  return v;
}

// Feed `data` into side `from` as the send buffer takes it, running the
// wire, until it has all been delivered (or `limit` passes).
void transfer(Wire& w, int from, const std::vector<std::uint8_t>& data, Time limit = 600s) {
  std::size_t off = 0;
  const Time end = w.now + limit;
  while (w.ends[1 - from].got.size() < data.size() && w.now < end) {
    if (off < data.size()) off += w.ends[from].conn->send(ByteSpan(data).subspan(off), w.now);
    w.run(w.now + 5ms);
  }
}

TEST(TcpConn, HandshakeNegotiatesLikeLinux) {
  Wire w;
  ConnConfig b;
  b.window_scale = 9;
  b.mss = 1400;
  w.open({}, b);
  EXPECT_EQ(w.ends[0].conn->state(), State::established);
  EXPECT_EQ(w.ends[1].conn->state(), State::established);
  EXPECT_TRUE(w.ends[0].established && w.ends[1].established);
  const TcpHeader& syn = w.ends[0].sent.at(0);
  EXPECT_EQ(syn.flags, tcp_flag::syn);
  EXPECT_EQ(syn.options.mss, 1460);
  EXPECT_EQ(syn.options.window_scale, 7);
  EXPECT_TRUE(syn.options.sack_permitted);
  EXPECT_TRUE(syn.options.timestamps);
  const TcpHeader& synack = w.ends[1].sent.at(0);
  EXPECT_EQ(synack.flags, tcp_flag::syn | tcp_flag::ack);
  EXPECT_EQ(synack.ack, 1001u);
  EXPECT_EQ(synack.options.window_scale, 9);
  EXPECT_EQ(w.ends[0].conn->send_mss(), 1400);  // the smaller of the two
  EXPECT_EQ(w.ends[1].conn->send_mss(), 1400);
  // Without the peer's offer, no scaling, SACK or timestamps in the answer.
  Wire v;
  ConnConfig bare;
  bare.window_scale = 0;
  bare.sack = false;
  bare.timestamps = false;
  v.open(bare, {});
  const TcpHeader& plain = v.ends[1].sent.at(0);
  EXPECT_FALSE(plain.options.window_scale);
  EXPECT_FALSE(plain.options.sack_permitted);
  EXPECT_FALSE(plain.options.timestamps);
  EXPECT_EQ(v.ends[1].conn->state(), State::established);
}

TEST(TcpConn, BulkDataBothWaysAcrossTheSequenceWrap) {
  Wire w;
  w.open({}, {}, 0xfff00000u, 0xffffff00u);  // both sides wrap within the first MiB
  const auto ab = pattern(3 << 20, 1), ba = pattern(1 << 20, 2);
  transfer(w, 0, ab);
  // Delayed ACKs: fewer ACKs than segments (B has sent only ACKs).
  const std::size_t acks = w.ends[1].sent.size() - 1;  // less the SYN-ACK
  const std::size_t segs = ab.size() / (1460 - 12);
  EXPECT_LT(acks, segs * 8 / 10) << acks << " ACKs for " << segs << " segments";
  transfer(w, 1, ba);
  EXPECT_EQ(w.ends[1].got, ab);
  EXPECT_EQ(w.ends[0].got, ba);
  EXPECT_EQ(w.ends[0].conn->stats().retransmits, 0u);
  EXPECT_EQ(w.ends[0].conn->queued(), 0u);
  EXPECT_GT(w.ends[0].conn->cwnd(), 10u * 1448);  // slow start grew it
}

// Segmentation offload (ConnConfig::tso_bytes): new data leaves in
// transmits of several segments' bytes (for the stack or the device to
// cut), as much as the windows allow at once and no more than tso_bytes;
// what is resent goes one segment at a time; segments_out counts the
// segments the transmits are cut into.
TEST(TcpConn, WithSegmentationOffloadNewDataLeavesInTransmitsOfSeveralSegments) {
  Wire w;
  ConnConfig a;
  a.tso_bytes = 65535 - 20 - 60;
  w.open(a, {});
  std::vector<std::size_t> lens, resent;  // payload sizes of A's data transmits, of its resends
  std::uint32_t next = 1001;            // the sequence after the highest sent
  bool lost = false;
  w.drop = [&](int from, const TcpHeader& h) {
    if (from != 0 || h.payload.empty()) return false;
    (seq_lt(h.seq, next) ? resent : lens).push_back(h.payload.size());
    if (seq_gt(h.seq + static_cast<std::uint32_t>(h.payload.size()), next))
      next = h.seq + static_cast<std::uint32_t>(h.payload.size());
    if (lens.size() == 3 && !lost) return lost = true;  // the third transmit, once
    return false;
  };
  const auto data = pattern(1 << 20, 5);
  transfer(w, 0, data);
  EXPECT_EQ(w.ends[1].got, data);
  ASSERT_GE(lens.size(), 3u);
  EXPECT_EQ(lens[0], 10u * 1460);  // the initial window (RFC 6928: 10 MSS, in bytes) in one transmit
  EXPECT_LE(*std::max_element(lens.begin(), lens.end()), a.tso_bytes);
  EXPECT_GT(*std::max_element(lens.begin(), lens.end()), 20u * 1448);  // as the window grew
  // (The receiver ACKs every transmit of two segments or more at once,
  // as Linux does a GRO unit: each ACK releases a transmit of a few.)
  EXPECT_LT(lens.size(), data.size() / 1448 / 3);
  ASSERT_FALSE(resent.empty());
  for (std::size_t n : resent) EXPECT_LE(n, 1448u);
  const auto& st = w.ends[0].conn->stats();
  EXPECT_EQ(st.retransmits, resent.size());
  EXPECT_GE(st.segments_out, data.size() / 1448);
}

TEST(TcpConn, AcksEverySecondSegmentOrAfterTheDelay) {
  Wire w;
  w.open();
  const std::size_t before = w.ends[1].sent.size();
  w.ends[0].conn->send(pattern(2 * 1448), w.now);  // two full segments
  w.run(w.now + 5ms);
  EXPECT_EQ(w.ends[1].sent.size(), before + 1);  // one ACK, at once
  w.ends[0].conn->send(pattern(100), w.now);  // one small segment
  w.run(w.now + 30ms);
  EXPECT_EQ(w.ends[1].sent.size(), before + 1);  // held ...
  w.run(w.now + 20ms);
  EXPECT_EQ(w.ends[1].sent.size(), before + 2);  // ... until delayed_ack (40 ms)
  EXPECT_EQ(w.ends[1].sent.back().ack, 1001u + 2 * 1448 + 100);
}

TEST(TcpConn, LossIsRepairedByFastRetransmitAndNewReno) {
  Wire w;
  w.open();
  int data_segments = 0;
  w.drop = [&](int from, const TcpHeader& h) {
    // Every 50th data segment from A, the first time it is sent.
    return from == 0 && !h.payload.empty() && ++data_segments % 50 == 0;
  };
  const auto data = pattern(2 << 20, 3);
  transfer(w, 0, data);
  EXPECT_EQ(w.ends[1].got, data);
  EXPECT_GT(w.dropped, 10u);
  // Repaired by retransmission: fast retransmits start recoveries, NewReno's
  // partial ACKs repair further holes within one.
  const auto& st = w.ends[0].conn->stats();
  EXPECT_GT(st.fast_retransmits, 2u);
  EXPECT_GE(st.retransmits, w.dropped);
  EXPECT_GT(w.ends[1].conn->stats().out_of_order, 10u);
  // The receiver's duplicate ACKs carried SACK blocks.
  bool sacked = false;
  for (const TcpHeader& h : w.ends[1].sent) sacked = sacked || h.options.sack_count > 0;
  EXPECT_TRUE(sacked);
}

// Four segments lost from one window, each the first time it is sent.
// With SACK, one recovery resends exactly those four, nothing the peer
// already holds, without a timeout; NewReno (no SACK) repairs them too.
TEST(TcpConn, SackRecoveryResendsEveryHoleOfAWindowAtOnce) {
  struct Run {
    Conn::Stats st;
    Time took{};
    bool intact = false;
    std::vector<Time> resent;  // when each retransmission left
  };
  auto run = [](bool sack) {
    Wire w;
    w.latency = 10ms;
    ConnConfig c;
    c.sack = sack;
    w.open(c, c);
    std::set<std::uint32_t> seen;
    std::vector<Time> resent;
    int n = 0;
    w.drop = [&](int from, const TcpHeader& h) {
      if (from != 0 || h.payload.empty()) return false;
      if (!seen.insert(h.seq).second) {
        resent.push_back(w.now);
        return false;
      }
      ++n;
      return n == 40 || n == 44 || n == 48 || n == 52;
    };
    const auto data = pattern(300 * 1448, 9);
    const Time start = w.now;
    transfer(w, 0, data);
    Run r;
    r.took = w.now - start;
    r.st = w.ends[0].conn->stats();
    r.intact = w.ends[1].got == data;
    r.resent = resent;
    return r;
  };
  const Run sack = run(true), newreno = run(false);
  EXPECT_TRUE(sack.intact);
  EXPECT_TRUE(newreno.intact);
  EXPECT_EQ(sack.st.timeouts, 0u);
  EXPECT_EQ(sack.st.fast_retransmits, 1u);
  EXPECT_EQ(sack.st.retransmits, 4u) << "exactly the holes, nothing SACKed sent again";
  EXPECT_GE(newreno.st.retransmits, 4u);
  // SACK: the four resent within one round trip (20 ms) of the first;
  // NewReno learns of each next hole only from a partial ACK, a round trip
  // after resending the previous one.
  ASSERT_EQ(sack.resent.size(), 4u);
  EXPECT_LE(sack.resent.back() - sack.resent.front(), 20ms);
  ASSERT_GE(newreno.resent.size(), 4u);
  EXPECT_GE(newreno.resent[3] - newreno.resent[0], 60ms);
  // All four holes repaired in about a round trip (10 ms each way): the
  // whole transfer takes no longer than a few round trips more than the
  // same transfer with nothing lost.
  EXPECT_LT(sack.took, 400ms) << "timeouts " << sack.st.timeouts;
}

// Every resend of the first two holes is lost until a timeout follows.
// The ACKs of what go-back-N then resends still carry SACK blocks: they
// must not start a recovery before the timeout's point is reached (with a
// pipe of nothing, that once let 262 segments out at one instant).
TEST(TcpConn, NoSecondRecoveryAfterATimeout) {
  Wire w;
  w.latency = 10ms;
  w.open();
  std::map<std::uint32_t, int> sent_times;
  std::set<std::uint32_t> lose_twice;
  std::map<Time, int> burst;  // data segments leaving A per instant, after the timeout
  int n = 0;
  w.drop = [&](int from, const TcpHeader& h) {
    if (from != 0 || h.payload.empty()) return false;
    const int k = ++sent_times[h.seq];
    if (w.ends[0].conn->stats().timeouts > 0) ++burst[w.now];
    if (k == 1) {
      ++n;
      if (n == 40 || n == 44) lose_twice.insert(h.seq);
      return n == 40 || n == 44 || n == 48 || n == 52;
    }
    // Every resend of the first two holes is lost until a timeout (a lost
    // resend is otherwise found and sent again without one).
    return lose_twice.count(h.seq) > 0 && w.ends[0].conn->stats().timeouts == 0;
  };
  const auto data = pattern(300 * 1448, 9);
  transfer(w, 0, data);
  EXPECT_EQ(w.ends[1].got, data);
  const auto& st = w.ends[0].conn->stats();
  EXPECT_GE(st.timeouts, 1u);
  int worst = 0;
  for (const auto& [at, k] : burst) worst = std::max(worst, k);
  EXPECT_LE(worst, 20) << "segments at one instant after the timeout";
}

// A hole's resend is lost too.  The SACKs for new data sent after it show
// that it was (the hole is still open below them): it is sent again within
// a few round trips, without waiting for a timeout.
TEST(TcpConn, ALostResendIsFoundAndSentAgainWithoutATimeout) {
  Wire w;
  w.latency = 10ms;
  w.open();
  std::map<std::uint32_t, int> sent_times;
  std::vector<Time> lost_hole_sent;  // when the twice-lost segment left
  std::uint32_t twice = 0;
  int n = 0;
  w.drop = [&](int from, const TcpHeader& h) {
    if (from != 0 || h.payload.empty()) return false;
    const int k = ++sent_times[h.seq];
    if (k == 1 && ++n == 40) twice = h.seq;
    if (h.seq == twice && twice != 0) lost_hole_sent.push_back(w.now);
    if (k == 1) return n == 40 || n == 44;
    return k == 2 && h.seq == twice;
  };
  const auto data = pattern(300 * 1448, 9);
  const Time start = w.now;
  transfer(w, 0, data);
  EXPECT_EQ(w.ends[1].got, data);
  const auto& st = w.ends[0].conn->stats();
  EXPECT_EQ(st.timeouts, 0u);
  EXPECT_EQ(st.lost_retransmits, 1u);
  EXPECT_EQ(st.retransmits, 3u) << "the two holes, and the lost resend once more";
  ASSERT_EQ(lost_hole_sent.size(), 3u);
  // Found lost by the SACKs of what left after it: a few round trips (20 ms
  // each), well inside the 200 ms a timeout takes at the least.
  EXPECT_LE(lost_hole_sent[2] - lost_hole_sent[1], 100ms);
  EXPECT_LT(w.now - start, 500ms);
}

// The tail of a burst lost: no later segment can reveal it, so without a
// probe only the retransmission timeout (200 ms at the least) repairs it.
// A tail loss probe, two round trips after the last ACK, does it in a
// fraction of that.  `lost` of the burst's last segments are dropped the
// first time they are sent.
struct TailLoss {
  Wire w;
  Time took{};
  explicit TailLoss(int lost, bool probe = true) {
    ConnConfig c;
    c.tail_loss_probe = probe;
    w.latency = 5ms;  // the probe (2 RTT) before B's delayed ACK (40 ms) of the segment before
    w.open(c, c);
    transfer(w, 0, pattern(100, 1));  // a round trip measured
    w.run(w.now + 100ms);             // (and its delayed ACK in)
    w.ends[1].got.clear();
    const std::uint32_t mss = 1448, first = 1001 + 100;
    std::map<std::uint32_t, int> times;
    w.drop = [&, lost, first](int from, const TcpHeader& h) {
      if (from != 0 || h.payload.empty()) return false;
      return ++times[h.seq] == 1 && h.seq >= first + (10 - lost) * mss;
    };
    const auto data = pattern(10 * mss, 2);  // ten segments: the initial window
    const Time start = w.now;
    transfer(w, 0, data);
    took = w.now - start;
    w.run(w.now + 100ms);  // the last ACKs in
    EXPECT_EQ(w.ends[1].got, data);
    w.drop = nullptr;
  }
  const Conn::Stats& a() const { return w.ends[0].conn->stats(); }
};

TEST(TcpConn, ALostTailIsProbedInsteadOfTimedOut) {
  TailLoss t(1);
  EXPECT_EQ(t.a().timeouts, 0u);
  EXPECT_EQ(t.a().tail_probes, 1u);
  EXPECT_EQ(t.a().tail_probe_recoveries, 1u) << "the probe repaired a loss: cwnd reduced";
  EXPECT_LT(t.took, 150ms);
  TailLoss without(1, false);
  EXPECT_EQ(without.a().tail_probes, 0u);
  EXPECT_EQ(without.a().timeouts, 1u);
  EXPECT_GE(without.took, 200ms);
}

TEST(TcpConn, AProbesSackRevealsTheLostSegmentsBelowIt) {
  TailLoss t(3);
  EXPECT_EQ(t.a().timeouts, 0u);
  EXPECT_EQ(t.a().tail_probes, 1u);
  EXPECT_EQ(t.a().fast_retransmits, 1u) << "SACK recovery started by the probe's SACK";
  EXPECT_EQ(t.a().retransmits, 3u) << "the probe, then the two holes below it";
  EXPECT_LT(t.took, 150ms);
}

// The burst's last ACK held up past the probe timeout: the probe resends a
// segment B has, B reports it in a D-SACK, and A, seeing nothing was lost,
// keeps its congestion window.
TEST(TcpConn, AProbeOfWhatArrivedDrawsADsackAndNoReduction) {
  Wire w;
  w.latency = 10ms;
  w.open();
  transfer(w, 0, pattern(100, 1));
  w.run(w.now + 100ms);
  const std::uint32_t end = 1001 + 100 + 10 * 1448;
  bool held = false;
  w.delay = [&](int from, const TcpHeader& h) {
    if (from != 1 || h.ack != end || held) return Time::zero();
    held = true;
    return Time{100ms};
  };
  const std::uint32_t cwnd = w.ends[0].conn->cwnd();
  const auto data = pattern(10 * 1448, 3);
  w.ends[1].got.clear();
  transfer(w, 0, data);
  w.run(w.now + 300ms);
  EXPECT_EQ(w.ends[1].got, data);
  const auto& st = w.ends[0].conn->stats();
  EXPECT_EQ(st.tail_probes, 1u);
  EXPECT_EQ(st.tail_probe_recoveries, 0u);
  EXPECT_EQ(st.timeouts, 0u);
  EXPECT_GE(w.ends[0].conn->cwnd(), cwnd);
  EXPECT_EQ(w.ends[1].conn->stats().duplicates, 1u);
  int dsacks = 0;
  for (const TcpHeader& h : w.ends[1].sent)
    dsacks += h.options.sack_count > 0 && seq_le(h.options.sack[0].right, h.ack);
  EXPECT_EQ(dsacks, 1);
}

// Without SACK (a peer that does not offer it), loss is still repaired.
TEST(TcpConn, LossIsRepairedWithoutSackByNewReno) {
  Wire w;
  ConnConfig c;
  c.sack = false;
  w.open(c, c);
  int data_segments = 0;
  w.drop = [&](int from, const TcpHeader& h) {
    return from == 0 && !h.payload.empty() && ++data_segments % 50 == 0;
  };
  const auto data = pattern(1 << 20, 5);
  transfer(w, 0, data);
  EXPECT_EQ(w.ends[1].got, data);
  EXPECT_GT(w.dropped, 5u);
  EXPECT_GT(w.ends[0].conn->stats().fast_retransmits, 2u);
  for (const TcpHeader& h : w.ends[1].sent) EXPECT_EQ(h.options.sack_count, 0);
}

TEST(TcpConn, TimeoutsBackOffThenRecover) {
  Wire w;
  w.open();
  bool cut = true;
  w.drop = [&](int from, const TcpHeader&) { return cut && from == 0; };
  const auto data = pattern(10000, 4);
  EXPECT_EQ(w.ends[0].conn->send(data, w.now), data.size());
  w.run(w.now + 20s);
  // Resent after the RTO, which doubles each time (from 200 ms, the
  // minimum over a 2 ms round trip): 0.2 + 0.4 + 0.8 + 1.6 + 3.2 + 6.4 s
  // fit in 20 s.
  const auto& sent = w.ends[0].sent;
  EXPECT_GE(w.ends[0].conn->stats().timeouts, 4u);
  EXPECT_GE(w.ends[0].conn->rto(), 3200ms);
  cut = false;
  w.run(w.now + 140s);
  EXPECT_EQ(w.ends[1].got, data);
  EXPECT_EQ(w.ends[0].conn->state(), State::established);
  EXPECT_LT(w.ends[0].conn->rto(), 1s);  // reset by the fresh RTT samples
  EXPECT_GE(sent.size(), 8u);              // the segments and their resends
}

TEST(TcpConn, ReorderingIsHeldAndDeliveredInOrder) {
  Wire w;
  w.open();
  int n = 0;
  w.delay = [&](int from, const TcpHeader& h) {
    return from == 0 && !h.payload.empty() && ++n % 3 == 0 ? Time(2ms) : Time::zero();
  };
  const auto data = pattern(500000, 5);
  transfer(w, 0, data);
  EXPECT_EQ(w.ends[1].got, data);
  EXPECT_GT(w.ends[1].conn->stats().out_of_order, 10u);
}

TEST(TcpConn, AZeroWindowIsProbedForAsLongAsThePeerAnswers) {
  Wire w;
  w.ends[1].space = 8000;  // B offers 8000 bytes ...
  w.open();
  w.ends[1].space = 0;  // ... and then takes no more
  const auto data = pattern(50000, 6);
  w.ends[0].conn->send(data, w.now);
  w.run(w.now + 3000s);  // longer than max_retries backed-off RTOs
  // The window: it never shrank, and nothing beyond it was taken (it is
  // advertised in units of 2^7, rounded up as Linux rounds it).
  const std::size_t taken = w.ends[1].got.size();
  EXPECT_GE(taken, 8000u);
  EXPECT_LT(taken, 8000u + 1024);
  EXPECT_EQ(w.ends[0].conn->state(), State::established);  // probes answered: no timeout
  EXPECT_EQ(w.ends[0].conn->stats().timeouts, 0u);
  std::size_t probes = 0;  // segments one below snd_una, no data
  for (const TcpHeader& h : w.ends[0].sent) probes += h.seq == 1001u + taken - 1 && h.flags == tcp_flag::ack;
  EXPECT_GT(probes, 10u);
  const auto cwnd = w.ends[0].conn->cwnd();
  EXPECT_GT(cwnd, 2u * 1448);  // probing is not loss
  // The window opens: the rest flows at once (no backed-off timer to wait).
  w.ends[1].space = 1 << 20;
  w.ends[1].conn->window_opened(w.now);
  w.run(w.now + 1s);
  EXPECT_EQ(w.ends[1].got, data);
}

TEST(TcpConn, OrderlyCloseFromEitherSideAndBoth) {
  Wire w;
  w.open();
  const auto data = pattern(30000, 7);
  w.ends[0].conn->send(data, w.now);
  w.ends[0].conn->close(w.now);  // FIN after the data
  w.run(w.now + 1s);
  EXPECT_EQ(w.ends[1].got, data);
  EXPECT_TRUE(w.ends[1].peer_closed);
  EXPECT_EQ(w.ends[1].conn->state(), State::close_wait);
  EXPECT_EQ(w.ends[0].conn->state(), State::fin_wait_2);
  w.ends[1].conn->close(w.now);
  w.run(w.now + 1s);
  EXPECT_EQ(w.ends[1].ended, End::closed);  // LAST-ACK acknowledged
  EXPECT_EQ(w.ends[0].conn->state(), State::time_wait);
  w.run(w.now + 61s);
  EXPECT_EQ(w.ends[0].ended, End::closed);

  // Both close at once: FIN-WAIT-1 -> CLOSING -> TIME-WAIT on both.
  Wire s;
  s.open();
  s.ends[0].conn->close(s.now);
  s.ends[1].conn->close(s.now);
  s.run(s.now + 1s);
  EXPECT_EQ(s.ends[0].conn->state(), State::time_wait);
  EXPECT_EQ(s.ends[1].conn->state(), State::time_wait);
}

TEST(TcpConn, ResetsAndRefusals) {
  Wire w;
  w.open();
  w.ends[0].conn->abort(w.now);
  EXPECT_EQ(w.ends[0].ended, End::aborted);
  w.run(w.now + 10ms);
  EXPECT_EQ(w.ends[1].ended, End::reset);

  // A SYN answered by RST+ACK (nobody listens): refused.
  Wire r;
  Conn& a = r.make(0);
  a.connect(77, r.now);
  r.inflight.clear();
  TcpHeader rst;
  rst.src_port = 988;
  rst.dst_port = 1023;
  rst.flags = tcp_flag::rst | tcp_flag::ack;
  rst.ack = 78;
  a.input(rst, r.now);
  EXPECT_EQ(r.ends[0].ended, End::refused);

  // An RST outside the window is dropped, unanswered (RFC 5961 §3.2).
  Wire o;
  o.open();
  TcpHeader stray;
  stray.flags = tcp_flag::rst;
  stray.seq = 12345;
  const std::size_t before = o.ends[0].sent.size();
  o.ends[0].conn->input(stray, o.now);
  EXPECT_EQ(o.ends[0].conn->state(), State::established);
  EXPECT_EQ(o.ends[0].sent.size(), before);
}

TEST(TcpConn, AnUnansweredPeerTimesOut) {
  Wire w;
  ConnConfig c;
  c.max_retries = 3;
  w.open(c);
  w.drop = [](int, const TcpHeader&) { return true; };
  w.ends[0].conn->send(pattern(1000), w.now);
  w.run(w.now + 600s);
  EXPECT_EQ(w.ends[0].ended, End::timed_out);
  // A SYN nobody answers.
  Wire s;
  s.drop = [](int, const TcpHeader&) { return true; };
  ConnConfig q;
  q.max_syn_retries = 2;
  s.make(0, q).connect(5, s.now);
  s.run(s.now + 60s);
  EXPECT_EQ(s.ends[0].ended, End::timed_out);
  EXPECT_EQ(s.ends[0].sent.size(), 3u);  // the SYN and two retries
}

TEST(TcpConn, DataSentBeforeOrAsTheConnectionOpensArrivesWhole) {
  Wire w;
  w.ends[1].greeting = pattern(3000, 9);  // B sends from on_established()
  w.make(0).connect(1000, w.now);
  Wire::Packet syn = std::move(w.inflight.front());
  w.inflight.pop_front();
  w.now = syn.at;
  w.make(1).accept(*decode_tcp(syn.bytes), 500000, w.now);
  const auto early = pattern(100, 8);
  EXPECT_EQ(w.ends[1].conn->send(early, w.now), early.size());  // in SYN-RECEIVED
  w.run(w.now + 1s);
  std::vector<std::uint8_t> want = early;
  want.insert(want.end(), w.ends[1].greeting.begin(), w.ends[1].greeting.end());
  EXPECT_EQ(w.ends[0].got, want);
}

TEST(TcpConn, ClosingFromTheFinCallbackGoesStraightToLastAck) {
  Wire w;
  w.open();
  w.ends[1].close_on_fin = true;
  w.ends[0].conn->close(w.now);
  w.run(w.now + 100ms);
  EXPECT_EQ(w.ends[1].ended, End::closed);  // LAST-ACK, answered at once
  EXPECT_EQ(w.ends[0].conn->state(), State::time_wait);
}

TEST(TcpConn, AFinResentAfterATimeoutIsAcknowledged) {
  Wire w;
  w.open();
  bool cut = true;
  w.drop = [&](int from, const TcpHeader&) { return cut && from == 0; };
  const auto data = pattern(5000, 10);
  w.ends[0].conn->send(data, w.now);
  w.ends[0].conn->close(w.now);  // data, then FIN, all lost
  w.run(w.now + 3s);
  EXPECT_GT(w.ends[0].conn->stats().timeouts, 1u);
  cut = false;
  w.run(w.now + 30s);
  EXPECT_EQ(w.ends[1].got, data);
  EXPECT_TRUE(w.ends[1].peer_closed);
  EXPECT_EQ(w.ends[0].conn->state(), State::fin_wait_2);
}

TEST(TcpConn, OutOfOrderDataIsHeldMergedAndWithinTheWindow) {
  Wire w;
  w.ends[1].space = 20000;
  w.open();
  Conn& b = *w.ends[1].conn;
  // A flood of overlapping segments one byte apart, all beyond a hole.
  std::vector<std::uint8_t> bytes(1460, 0x77);
  for (std::uint32_t i = 0; i < 5000; ++i) {
    TcpHeader h;
    h.flags = tcp_flag::ack;
    h.seq = 1001 + 100 + i;
    h.ack = 500001;
    h.window = 1000;
    h.payload = bytes;
    b.input(h, w.now);
  }
  EXPECT_LE(b.held_bytes(), 20000u);
  // The hole fills: everything held is delivered, in order.
  TcpHeader fill;
  fill.flags = tcp_flag::ack;
  fill.seq = 1001;
  fill.ack = 500001;
  fill.window = 1000;
  fill.payload = ByteSpan(bytes).first(100);
  b.input(fill, w.now);
  EXPECT_EQ(b.held_bytes(), 0u);
  EXPECT_LE(w.ends[1].got.size(), 20000u + 128);
  EXPECT_GT(w.ends[1].got.size(), 6000u);
}

// Received frames as a port keeps them: references counted per frame,
// within a budget of frames held.  A frame's bytes are scribbled over
// once nothing holds it (as a freed mbuf is reused), so a byte delivered
// from a frame let go shows.
struct CountedFrames final : lnd::FrameRefs {
  std::map<void*, int> refs;
  std::map<void*, std::vector<std::uint8_t>> bytes;  // the frames' memory
  std::size_t budget = 1000;
  std::size_t held() const {
    std::size_t n = 0;
    for (const auto& [f, r] : refs) n += static_cast<std::size_t>(r);
    return n;
  }
  bool retain(void* f) noexcept override {
    if (held() >= budget) return false;
    ++refs[f];
    return true;
  }
  void share(void* f) noexcept override { ++refs[f]; }
  void release(void* f) noexcept override {
    if (--refs[f] < 0) ADD_FAILURE() << "a frame released more often than kept";
    if (refs[f] == 0) scribble(f);
  }
  void scribble(void* f) {
    auto& b = bytes[f];
    std::fill(b.begin(), b.end(), std::uint8_t{0xee});
  }
  // Bytes [from, to) of `data` in a frame of their own.
  void* frame(const std::vector<std::uint8_t>& data, std::uint32_t from, std::uint32_t to) {
    std::vector<std::uint8_t> b(data.begin() + from, data.begin() + to);
    void* f = b.data();
    bytes[f] = std::move(b);  // (the heap block does not move)
    return f;
  }
};

// Bytes [from, to) of `data` (relative to B's first expected byte, 1001)
// into B, in their own received frame (none: `frames` null); the frame is
// scribbled over at once if B did not keep it.
void receive(Wire& w, CountedFrames* frames, const std::vector<std::uint8_t>& data, std::uint32_t from,
             std::uint32_t to) {
  TcpHeader h;
  h.flags = tcp_flag::ack;
  h.seq = 1001 + from;
  h.ack = 500001;
  h.window = 1000;
  void* f = frames ? frames->frame(data, from, to) : nullptr;
  h.payload = f ? ByteSpan(static_cast<const std::uint8_t*>(f), to - from) : ByteSpan(data).subspan(from, to - from);
  h.frame = f;
  w.ends[1].conn->input(h, w.now);
  if (f && frames->refs[f] == 0) frames->scribble(f);
}

TEST(TcpConn, OutOfOrderBytesStayInTheirFramesWithinTheBudget) {
  CountedFrames frames;  // (outlives the connections)
  frames.budget = 4;
  Wire w;
  ConnConfig b;
  b.frames = &frames;
  w.open({}, b);
  const auto data = pattern(8000, 5);
  auto refs = [&] {
    std::vector<int> out;
    for (const auto& [f, r] : frames.refs) out.push_back(r);
    std::sort(out.begin(), out.end());
    return out;
  };
  receive(w, &frames, data, 2000, 3000);
  receive(w, &frames, data, 3000, 4000);
  receive(w, &frames, data, 2500, 4500);  // overlaps: only [4000, 4500) is new
  receive(w, &frames, data, 2000, 3000);  // a duplicate: nothing kept
  EXPECT_EQ(refs(), (std::vector<int>{0, 1, 1, 1}));
  // Around what is held: two pieces of one frame, the second shared.
  receive(w, &frames, data, 1500, 5000);
  EXPECT_EQ(refs(), (std::vector<int>{0, 1, 1, 1, 2}));
  // The budget is used up: later ones are copied, merged with the copies
  // before and after them.
  receive(w, &frames, data, 6000, 7000);
  receive(w, &frames, data, 7000, 8000);
  receive(w, &frames, data, 5500, 6000);
  EXPECT_EQ(frames.held(), 5u);
  EXPECT_EQ(w.ends[1].conn->held_bytes(), 6000u);
  // SACK: the touching pieces are one block each, the one with the latest
  // arrival first.
  const TcpHeader& ack = w.ends[1].sent.back();
  ASSERT_EQ(ack.options.sack_count, 2);
  EXPECT_EQ(ack.options.sack[0].left, 1001u + 5500) << "the latest first";
  EXPECT_EQ(ack.options.sack[0].right, 1001u + 8000);
  EXPECT_EQ(ack.options.sack[1].left, 1001u + 1500);
  EXPECT_EQ(ack.options.sack[1].right, 1001u + 5000);
  // The first hole fills: what is held up to the next hole is delivered
  // with the frames it lies in, and those frames are let go.
  receive(w, nullptr, data, 0, 1500);
  EXPECT_EQ(frames.held(), 0u);
  std::vector<std::size_t> sizes;
  std::size_t kept = 0;
  for (const auto& [n, f] : w.ends[1].runs) {
    sizes.push_back(n);
    kept += f ? 1 : 0;
  }
  EXPECT_EQ(sizes, (std::vector<std::size_t>{1500, 500, 1000, 1000, 500, 500}));
  EXPECT_EQ(kept, 5u);
  receive(w, nullptr, data, 5000, 5500);
  EXPECT_EQ(w.ends[1].runs.back(), (std::pair<std::size_t, void*>{2500, nullptr}));  // the merged copy
  EXPECT_EQ(w.ends[1].got, data);  // nothing read from a frame let go
  EXPECT_EQ(w.ends[1].conn->stats().bytes_reassembled_kept, 3500u);
  EXPECT_EQ(w.ends[1].conn->stats().bytes_reassembled, 2500u);
  EXPECT_EQ(w.ends[1].conn->held_bytes(), 0u);
}

TEST(TcpConn, AConnectionKeepsNoMoreThanItsShareOfFrames) {
  CountedFrames frames;
  Wire w;
  ConnConfig b;
  b.frames = &frames;
  b.max_held_frames = 2;
  w.open({}, b);
  const auto data = pattern(5000, 9);
  for (std::uint32_t at = 1000; at < 5000; at += 1000) receive(w, &frames, data, at, at + 1000);
  EXPECT_EQ(frames.held(), 2u);  // the third and fourth copied, though the budget had room
  receive(w, nullptr, data, 0, 1000);
  EXPECT_EQ(frames.held(), 0u);
  EXPECT_EQ(w.ends[1].got, data);
  EXPECT_EQ(w.ends[1].conn->stats().bytes_reassembled_kept, 2000u);
  EXPECT_EQ(w.ends[1].conn->stats().bytes_reassembled, 2000u);
}

TEST(TcpConn, FramesHeldOutOfOrderAreLetGoWhenTheConnectionEnds) {
  for (const bool reset : {true, false}) {
    CountedFrames frames;
    Wire w;
    ConnConfig b;
    b.frames = &frames;
    w.open({}, b);
    const auto data = pattern(4000);
    receive(w, &frames, data, 1000, 2000);
    receive(w, &frames, data, 3000, 4000);
    EXPECT_EQ(frames.held(), 2u);
    if (reset) {
      TcpHeader rst;
      rst.flags = tcp_flag::rst;
      rst.seq = 1001;
      w.ends[1].conn->input(rst, w.now);
      EXPECT_TRUE(w.ends[1].ended);
    } else {
      w.ends[1].conn.reset();  // destroyed as it was
    }
    EXPECT_EQ(frames.held(), 0u) << (reset ? "reset" : "destroyed");
  }
}

TEST(TcpConn, OnlyAnExactResetResets) {
  Wire w;
  w.open();
  const std::size_t sent = w.ends[0].sent.size();
  TcpHeader rst;
  rst.flags = tcp_flag::rst;
  rst.seq = 500001 + 10;  // in the window, not at its left edge
  w.ends[0].conn->input(rst, w.now);
  EXPECT_EQ(w.ends[0].conn->state(), State::established);
  ASSERT_EQ(w.ends[0].sent.size(), sent + 1);
  EXPECT_EQ(w.ends[0].sent.back().flags, tcp_flag::ack);  // the challenge ACK
  rst.seq = 500001;
  w.ends[0].conn->input(rst, w.now);
  EXPECT_EQ(w.ends[0].ended, End::reset);
}

TEST(TcpConn, InvalidSegmentsWithoutDataAreAnsweredAtMostTwiceASecond) {
  // A challenged RST, an out-of-window ACK, an ACK of what was never sent
  // and a SYN: each would get an ACK, and another stack that finds those
  // unacceptable answers them the same way.  One answer per 500 ms breaks
  // the loop; data below the window is always acknowledged (D-SACK).
  Wire w;
  w.open();
  Conn& c = *w.ends[0].conn;
  const std::size_t sent = w.ends[0].sent.size();
  TcpHeader rst;
  rst.flags = tcp_flag::rst;
  rst.seq = 500001 + 10;
  TcpHeader stale;
  stale.flags = tcp_flag::ack;
  stale.seq = 500001 + (1u << 30);  // far outside the window
  stale.ack = 1;
  TcpHeader syn;
  syn.flags = tcp_flag::syn;
  syn.seq = 500001;
  for (int i = 0; i < 100; ++i) {
    c.input(rst, w.now);
    c.input(stale, w.now);
    c.input(syn, w.now);
  }
  EXPECT_EQ(c.state(), State::established);
  EXPECT_EQ(w.ends[0].sent.size(), sent + 1);
  EXPECT_EQ(c.stats().invalid_acks_limited, 299u);
  w.now += 499ms;
  c.input(stale, w.now);
  EXPECT_EQ(w.ends[0].sent.size(), sent + 1);
  w.now += 1ms;
  c.input(stale, w.now);
  EXPECT_EQ(w.ends[0].sent.size(), sent + 2);
  // A retransmission of data already received: a duplicate ACK every time.
  TcpHeader dup;
  dup.flags = tcp_flag::ack;
  dup.seq = 500001 - 100;
  dup.ack = 1;
  const auto data = pattern(100);
  dup.payload = data;
  for (int i = 0; i < 3; ++i) c.input(dup, w.now);
  EXPECT_EQ(w.ends[0].sent.size(), sent + 5);
  // So is a FIN again (our ACK of it was lost): it takes sequence space.
  TcpHeader fin;
  fin.flags = tcp_flag::fin | tcp_flag::ack;
  fin.seq = 500001 - 1;
  fin.ack = 1;
  for (int i = 0; i < 3; ++i) c.input(fin, w.now);
  EXPECT_EQ(w.ends[0].sent.size(), sent + 8);
}

TEST(TcpConn, APeersAbsurdMssAndTimestampsAreContained) {
  // MSS 0 in the SYN: raised to a working minimum (no division by zero).
  Wire w;
  w.make(1);
  TcpHeader syn;
  syn.src_port = 1023;
  syn.dst_port = 988;
  syn.flags = tcp_flag::syn;
  syn.seq = 41;
  syn.window = 65535;
  syn.options.mss = 0;
  syn.options.timestamps = {{1, 0}};
  Conn& b = *w.ends[1].conn;
  b.accept(syn, 9000, w.now);
  EXPECT_GE(b.send_mss(), 64 + 12);
  TcpHeader ack;
  ack.flags = tcp_flag::ack;
  ack.seq = 42;
  ack.ack = 9001;
  ack.window = 65535;
  ack.options.timestamps = {{2, static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      w.now).count()) + 5}};  // echoes a time 5 ms in our future
  b.input(ack, w.now);
  EXPECT_EQ(b.state(), State::established);
  EXPECT_LE(b.rto(), 1s);  // the bogus sample was not taken
  b.send(pattern(1000), w.now);
  b.close(w.now);
  w.run(w.now + 10s);  // nobody answers: retransmissions, no crash
  EXPECT_GT(b.stats().retransmits, 0u);
}

TEST(TcpSeq, ComparisonsWrap) {
  EXPECT_TRUE(seq_lt(0xfffffff0u, 0x10u));
  EXPECT_TRUE(seq_gt(0x10u, 0xfffffff0u));
  EXPECT_TRUE(seq_le(5u, 5u));
  EXPECT_FALSE(seq_lt(5u, 5u));
}

}  // namespace
}  // namespace lnetr::tcp

namespace lnetr::tcp {
namespace {

TEST(TcpConn, KeepaliveProbesAnIdlePeerAndEndsWhenItIsGone) {
  Wire w;
  w.open();
  Conn& a = *w.ends[0].conn;
  a.set_keepalive(2s, 500ms, 3, w.now);
  // An answering peer: probes go out after the idle time and are answered,
  // and the connection stays up.
  w.run(w.now + 10s);
  const auto probes = a.stats().keepalive_probes;
  EXPECT_GE(probes, 3u);
  EXPECT_EQ(a.state(), State::established);
  // Traffic resets the idle time: no probe while data flows every second.
  for (int i = 0; i < 5; ++i) {
    w.ends[1].conn->send(pattern(10), w.now);
    w.run(w.now + 1s);
  }
  EXPECT_EQ(a.stats().keepalive_probes, probes);
  // The peer vanishes: 3 probes unanswered, then the connection ends.
  w.drop = [](int, const TcpHeader&) { return true; };
  w.run(w.now + 2s + 3 * 500ms + 600ms);
  EXPECT_EQ(a.stats().keepalive_probes, probes + 3);
  ASSERT_TRUE(w.ends[0].ended);
  EXPECT_EQ(*w.ends[0].ended, End::timed_out);
}

TEST(TcpConn, KeepaliveWaitsWhileDataIsOutstanding) {
  Wire w;
  w.open();
  Conn& a = *w.ends[0].conn;
  a.set_keepalive(1s, 200ms, 2, w.now);
  w.drop = [](int from, const TcpHeader& h) { return from == 0 && !h.payload.empty(); };
  a.send(pattern(1000), w.now);
  w.run(w.now + 3s);
  // Retransmissions watch this peer, not keepalive probes.
  EXPECT_EQ(a.stats().keepalive_probes, 0u);
  EXPECT_GT(a.stats().timeouts, 0u);
  EXPECT_EQ(a.state(), State::established);
}

}  // namespace
}  // namespace lnetr::tcp
