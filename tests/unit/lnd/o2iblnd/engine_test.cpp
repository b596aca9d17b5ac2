// The o2iblnd engine over the simulated fabric (tests/support/o2ib_fabric):
// handshakes both ways, every rejection and the connecting side's
// reaction, races and restarts, credits (exhaustion, NOOPs at the
// high-water mark, back-pressure by held receive buffers), IMMEDIATE, PUT
// and optimized GET flows with their RDMA, unregistered memory, timeouts
// and keepalives on a fake clock, malformed and unexpected messages, and a
// peer that dies mid-transfer.  Every test ends with both nodes at rest:
// no descriptor or receive held, every credit back, nothing the fabric
// flagged (a SEND without a posted receive, a key that does not cover its
// memory, an identifier destroyed with work posted).
#include "lnd/o2iblnd/engine.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "router/local_msgs.hpp"
#include "tests/support/o2ib_fabric.hpp"
#include "tests/support/nid.hpp"

namespace lnetr::o2ib {
namespace {

using namespace std::chrono_literals;
using sim::Fabric;
using sim::RawPeer;
using sim::SimTransport;

using test::nid;

std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>((seed * 131 + i * 7 + (i >> 8)) & 0xff);
  return v;
}

// An LNet layer that records what it is given and answers GETs.
class TestUpper final : public lnd::Upper {
 public:
  enum class Policy { accept, discard, defer, reject };
  struct Received {
    Nid from;
    LnetHeader hdr;
    std::vector<std::uint8_t> payload;
  };

  Policy policy = Policy::accept;
  std::function<void(const lnd::Rx&)> on_received_hook;  // a look at the engine's state as it delivers
  bool answer_gets = true;  // GETs to us: a REPLY of sink_length pattern bytes
  Node* node = nullptr;
  std::vector<Received> received;
  std::vector<std::pair<const lnd::Tx*, int>> sent;
  std::vector<lnd::Rx> deferred;
  std::vector<Nid> peer_down;
  int aborted = 0;

  lnd::RxVerdict on_head(lnd::Rx& rx) override {
    if (rx.hdr.type == lnetr::MsgType::get && answer_gets) {
      auto& r = replies_.emplace_back();
      r.payload = pattern(rx.hdr.get().sink_length, 0x77);
      r.tx.hdr = make_reply(rx.hdr, rx.ni, static_cast<std::uint32_t>(r.payload.size()));
      r.tx.payload = r.payload;
      r.dest = rx.from;
      rx.reply = &r.tx;
      rx.discard = true;
      return lnd::RxVerdict::accept;
    }
    switch (policy) {
      case Policy::reject:
        return lnd::RxVerdict::reject;
      case Policy::discard:
        rx.discard = true;
        return lnd::RxVerdict::accept;
      case Policy::defer:
        deferred.push_back(rx);
        return lnd::RxVerdict::defer;
      case Policy::accept:
        break;
    }
    give_sink(rx);
    return lnd::RxVerdict::accept;
  }
  void on_received(lnd::Rx& rx) override {
    if (on_received_hook) on_received_hook(rx);
    Received r{rx.from, rx.hdr, {}};
    if (!rx.discard) r.payload.assign(rx.sink.begin(), rx.sink.end());
    received.push_back(std::move(r));
  }
  void on_rx_aborted(lnd::Rx&) override { ++aborted; }
  void on_sent(lnd::Tx& tx, int status) override { sent.emplace_back(&tx, status); }
  void on_peer_down(const Nid& peer) override { peer_down.push_back(peer); }

  void give_sink(lnd::Rx& rx) {
    if (rx.hdr.type == lnetr::MsgType::reply && !reply_into.empty()) {
      rx.sink = reply_into.first(rx.hdr.payload_length);
      return;
    }
    auto& s = sinks_.emplace_back(rx.hdr.payload_length);
    rx.sink = MutableByteSpan(s.data(), s.size());
  }
  // Where REPLYs land (an optimized GET's sink), if set.
  MutableByteSpan reply_into;
  void resume_n(std::size_t n) {
    for (std::size_t i = 0; i < n && !deferred.empty(); ++i) {
      lnd::Rx rx = deferred.front();
      deferred.erase(deferred.begin());
      give_sink(rx);
      node->resume(rx);
    }
  }
  // Resume every deferred receive, with a sink.
  void resume_all() {
    auto d = std::move(deferred);
    deferred.clear();
    for (lnd::Rx& rx : d) {
      give_sink(rx);
      node->resume(rx);
    }
  }
  // Send the REPLYs owed (after the callbacks, as a real Upper does).
  bool pump() {
    bool any = false;
    while (next_reply_ < replies_.size()) {
      auto& r = replies_[next_reply_++];
      const int rc = node->send(r.dest, r.tx);
      if (rc < 0) sent.emplace_back(&r.tx, rc);
      any = true;
    }
    return any;
  }
  // The payload of the PUT received with these match bits.
  std::vector<std::uint8_t> payload_of(std::uint64_t bits) const {
    for (const auto& r : received)
      if (r.hdr.type == lnetr::MsgType::put && r.hdr.put().match_bits == bits) return r.payload;
    return {0xde, 0xad};
  }
  int status_of(const lnd::Tx& tx) const {
    for (auto& [t, s] : sent)
      if (t == &tx) return s;
    return 1;  // not sent yet
  }

 private:
  struct Reply {
    lnd::Tx tx;
    std::vector<std::uint8_t> payload;
    Nid dest;
  };
  std::deque<Reply> replies_;
  std::size_t next_reply_ = 0;
  std::deque<std::vector<std::uint8_t>> sinks_;
};


// One node on the simulated fabric: its device, its LNet layer, its engine.
struct Host {
  Host(Fabric& f, const char* name, const char* nid_s, Clock::time_point& now, NiTunables t = {}, Options o = {},
       std::uint64_t incarnation = 0)
      : tr(f, name), me(nid(nid_s)), clock(&now) {
    tr.add_address(me.addr4());
    ni_tunables = t;
    opts = o;
    start(incarnation ? incarnation : 1000 + me.addr4());
  }
  void start(std::uint64_t incarnation) {
    LocalNi ni;
    ni.nid = me;
    ni.transport = &tr;
    ni.tunables = ni_tunables;
    ni.ready = ready;
    upper = std::make_unique<TestUpper>();
    Clock::time_point* c = clock;
    node = std::make_unique<Node>(opts, std::vector<LocalNi>{ni}, incarnation, *upper, [c] { return *c; });
    upper->node = node.get();
    if (!listening) {
      tr.listen(me.addr4(), kServicePort, [this](ConnRequest&& r) {
        if (intercept && intercept(r)) return;
        node->accept_request(std::move(r));
      });
      listening = true;
    }
  }
  // Restart: a new incarnation of the node (its old engine gone).
  void restart(std::uint64_t incarnation) {
    node.reset();
    start(incarnation);
  }

  SimTransport tr;
  Nid me;
  Clock::time_point* clock;
  NiTunables ni_tunables;
  Options opts;
  std::unique_ptr<TestUpper> upper;
  std::unique_ptr<Node> node;
  bool listening = false;
  bool ready = true;
  // A test's look at connection requests first (true: handled there).
  std::function<bool(ConnRequest&)> intercept;
};

class EngineTest : public ::testing::Test {
 protected:
  // Payloads of put(), alive until every host and the fabric are gone.
  std::deque<std::vector<std::uint8_t>> payloads_;
  Clock::time_point now{std::chrono::seconds(1'000'000)};
  Fabric fabric;
  std::list<Host> hosts;

  Host& host(const char* name, const char* n, NiTunables t = {}, Options o = {}, std::uint64_t inc = 0) {
    return hosts.emplace_back(fabric, name, n, now, t, o, inc);
  }
  // Run the fabric and the Uppers' owed replies until nothing moves.
  void settle() {
    for (int i = 0; i < 1000; ++i) {
      fabric.run();
      bool any = false;
      for (Host& h : hosts)
        if (h.node) any |= h.upper->pump();
      if (!any && fabric.idle()) return;
    }
    FAIL() << "the fabric never settled";
  }
  void advance(std::chrono::milliseconds d) {
    now += d;
    for (Host& h : hosts)
      if (h.node) h.node->tick();
    settle();
  }
  // The payload is kept by the fixture: the fabric reads it when the work
  // request runs, as a device does, not when it is posted.
  lnd::Tx put(const Host& from, const Host& to, std::vector<std::uint8_t> payload, std::uint64_t bits = 7) {
    lnd::Tx t;
    t.hdr = make_put({kPidLustre, from.me}, {kPidLustre, to.me}, 4, bits, WireHandle::none(), 0,
                     static_cast<std::uint32_t>(payload.size()));
    t.payload = payloads_.emplace_back(std::move(payload));
    return t;
  }
  // An optimized GET of `sink_len` bytes from `from` to `to`: its sink kept
  // by the fixture, as put()'s payloads are.
  lnd::Tx optimized_get(const Nid& from, const Nid& to, std::uint32_t sink_len) {
    lnd::Tx t;
    t.hdr = make_get({kPidLustre, from}, {kPidLustre, to}, 42, 9, WireHandle{1, 2}, sink_len);
    t.reply_sink = payloads_.emplace_back(sink_len);
    return t;
  }
  // Both nodes at rest: nothing held, nothing in flight, credits back.
  void expect_at_rest(Host& h) {
    SCOPED_TRACE(h.tr.name());
    EXPECT_EQ(h.node->tx_descs_in_use(), 0u);
    for (const auto& p : h.node->peers()) {
      EXPECT_EQ(p.queued_tx, 0u);
      for (const auto& c : p.conns) {
        EXPECT_EQ(c.queued, 0u);
        EXPECT_EQ(c.waiting, 0u);
        EXPECT_EQ(c.rx_held, 0u);
        EXPECT_EQ(c.sends_posted, 0);
        EXPECT_EQ(c.reserved_credits, c.queue_depth);
      }
    }
    EXPECT_TRUE(h.tr.violations.empty()) << (h.tr.violations.empty() ? "" : h.tr.violations.front());
  }
  void TearDown() override {
    settle();
    for (Host& h : hosts) {
      if (!h.node) continue;
      expect_at_rest(h);
    }
    for (Host& h : hosts)
      if (h.node) h.node->shutdown();
    settle();
    for (Host& h : hosts) {
      if (!h.node) continue;
      h.node->reap();
      EXPECT_EQ(h.node->connections(), 0u) << h.tr.name();
      EXPECT_EQ(h.tr.live_ids(), 0u) << h.tr.name();
      EXPECT_TRUE(h.tr.violations.empty()) << h.tr.name() << ": "
                                           << (h.tr.violations.empty() ? "" : h.tr.violations.front());
    }
  }
};

std::size_t slot(MsgType t) { return type_slot(t); }

// ---- connections -----------------------------------------------------------------------

TEST_F(EngineTest, FirstSendConnectsAndDeliversAnImmediate) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  const auto data = pattern(100, 1);
  lnd::Tx t = put(a, b, data);
  ASSERT_EQ(a.node->send(b.me, t), 0);
  settle();
  ASSERT_EQ(b.upper->received.size(), 1u);
  EXPECT_EQ(b.upper->received[0].from, a.me);
  EXPECT_EQ(b.upper->received[0].hdr, t.hdr);
  EXPECT_EQ(b.upper->received[0].payload, data);
  EXPECT_EQ(a.upper->status_of(t), 0);
  EXPECT_EQ(a.node->stats().conns_connected, 1u);
  EXPECT_EQ(b.node->stats().conns_accepted, 1u);
  EXPECT_EQ(a.node->stats().tx_msgs[slot(MsgType::immediate)], 1u);
  // Negotiated as Linux: version 2, queue depth 8, 257 fragments; the
  // sender spent one credit, and the receiver owes it back.
  auto pa = a.node->peers();
  ASSERT_EQ(pa.size(), 1u);
  ASSERT_EQ(pa[0].conns.size(), 1u);
  EXPECT_EQ(pa[0].conns[0].version, kVersion2);
  EXPECT_EQ(pa[0].conns[0].queue_depth, 8);
  EXPECT_EQ(pa[0].conns[0].max_frags, 257);
  EXPECT_TRUE(pa[0].conns[0].active);
  EXPECT_EQ(pa[0].conns[0].credits, 7);
  EXPECT_EQ(pa[0].incarnation, b.node->incarnation());
  auto pb = b.node->peers();
  ASSERT_EQ(pb.size(), 1u);
  EXPECT_EQ(pb[0].conns[0].outstanding_credits, 1);
  EXPECT_FALSE(pb[0].conns[0].active);
  // The connection carries traffic the other way too.
  lnd::Tx back = put(b, a, pattern(10, 2));
  ASSERT_EQ(b.node->send(a.me, back), 0);
  settle();
  ASSERT_EQ(a.upper->received.size(), 1u);
  EXPECT_EQ(b.node->stats().conns_connected, 0u);
  // B's message carried A's credit back.
  EXPECT_EQ(a.node->peers()[0].conns[0].credits, 8);
}

TEST_F(EngineTest, MessagesQueuedWhileConnectingGoInOrder) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  std::vector<std::vector<std::uint8_t>> data;
  std::deque<lnd::Tx> txs;
  for (int i = 0; i < 5; ++i) data.push_back(pattern(50 + i, i));
  for (int i = 0; i < 5; ++i) {
    txs.push_back(put(a, b, data[i], i));
    ASSERT_EQ(a.node->send(b.me, txs.back()), 0);
  }
  settle();
  ASSERT_EQ(b.upper->received.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.upper->received[i].payload, data[i]);
}

TEST_F(EngineTest, ConnsPerPeerOpensThatManyAndSpreadsMessages) {
  NiTunables t;
  t.conns_per_peer = 3;
  Host& a = host("A", "10.0.0.1@o2ib", t);
  Host& b = host("B", "10.0.0.2@o2ib");
  std::deque<lnd::Tx> txs;
  const auto d = pattern(10, 3);
  for (int i = 0; i < 9; ++i) {
    txs.push_back(put(a, b, d, i));
    ASSERT_EQ(a.node->send(b.me, txs.back()), 0);
  }
  settle();
  // 9 more, once all three are up: round robin over them.
  for (int i = 0; i < 9; ++i) {
    txs.push_back(put(a, b, d, 100 + i));
    ASSERT_EQ(a.node->send(b.me, txs.back()), 0);
  }
  settle();
  EXPECT_EQ(b.upper->received.size(), 18u);
  auto pa = a.node->peers();
  ASSERT_EQ(pa[0].conns.size(), 3u);
  EXPECT_EQ(a.node->stats().conns_connected, 3u);
  for (const auto& c : pa[0].conns) EXPECT_GE(c.tx_msgs, 3u) << "every connection carries its share";
}

TEST_F(EngineTest, UnreachablePeerFailsItsMessagesAndReportsItDown) {
  Host& a = host("A", "10.0.0.1@o2ib");
  lnd::Tx t;
  t.hdr = make_put({kPidLustre, a.me}, {kPidLustre, nid("10.0.0.9@o2ib")}, 4, 1, WireHandle::none(), 0, 0);
  ASSERT_EQ(a.node->send(nid("10.0.0.9@o2ib"), t), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(t), -EHOSTUNREACH);
  ASSERT_EQ(a.upper->peer_down.size(), 1u);
  EXPECT_EQ(a.node->stats().connect_failed[static_cast<std::size_t>(ConnectFailure::unreachable)], 1u);
  // A net we have no NI on is refused at once.
  lnd::Tx other;
  other.hdr = t.hdr;
  EXPECT_EQ(a.node->send(nid("10.0.0.9@o2ib1"), other), -EHOSTUNREACH);
}

TEST_F(EngineTest, NoListenerMeansPeerUnreachable) {
  Host& a = host("A", "10.0.0.1@o2ib");
  SimTransport nobody(fabric, "nobody");
  nobody.add_address(nid("10.0.0.5@o2ib").addr4());
  lnd::Tx t;
  t.hdr = make_put({kPidLustre, a.me}, {kPidLustre, nid("10.0.0.5@o2ib")}, 4, 1, WireHandle::none(), 0, 0);
  ASSERT_EQ(a.node->send(nid("10.0.0.5@o2ib"), t), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(t), -EHOSTUNREACH);
  EXPECT_EQ(a.node->stats().connect_failed[static_cast<std::size_t>(ConnectFailure::no_listener)], 1u);
}

}  // namespace
}  // namespace lnetr::o2ib

namespace lnetr::o2ib {
namespace {

// ---- messages and RDMA -------------------------------------------------------------------

TEST_F(EngineTest, EverySizeArrivesIntactImmediateUpTo3976ThenByRdma) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  const std::vector<std::size_t> sizes = {0, 1, 3975, 3976, 3977, 4096, 65536, 1u << 20};
  std::vector<std::vector<std::uint8_t>> data;
  for (std::size_t i = 0; i < sizes.size(); ++i) data.push_back(pattern(sizes[i], static_cast<std::uint32_t>(i)));
  std::deque<lnd::Tx> txs;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    txs.push_back(put(a, b, data[i], i));
    ASSERT_EQ(a.node->send(b.me, txs.back()), 0);
  }
  settle();
  ASSERT_EQ(b.upper->received.size(), sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(b.upper->received[i].payload, data[i]) << sizes[i];
    EXPECT_EQ(a.upper->status_of(txs[i]), 0);
  }
  const Stats& sa = a.node->stats();
  const Stats& sb = b.node->stats();
  EXPECT_EQ(sa.tx_msgs[slot(MsgType::immediate)], 4u);
  EXPECT_EQ(sa.tx_msgs[slot(MsgType::put_req)], 4u);
  EXPECT_EQ(sa.tx_msgs[slot(MsgType::put_done)], 4u);
  EXPECT_EQ(sb.tx_msgs[slot(MsgType::put_ack)], 4u);
  const std::uint64_t bulk = 3977 + 4096 + 65536 + (1u << 20);
  EXPECT_EQ(sa.rdma_bytes_written, bulk);
  EXPECT_EQ(sb.rdma_bytes_received, bulk);
  // No byte of the bulk was copied; IMMEDIATE payloads were gathered from
  // the sender's memory and copied once into the receiver's sink.
  EXPECT_EQ(sa.bytes_copied, 0u);
  EXPECT_EQ(sa.bytes_gathered, 1u + 3975 + 3976);
  EXPECT_EQ(sb.bytes_copied, 1u + 3975 + 3976);
}

TEST_F(EngineTest, DiscardedPutIsNakedAndCompletes) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  b.upper->policy = TestUpper::Policy::discard;
  const auto data = pattern(100000, 5);
  lnd::Tx t = put(a, b, data);
  ASSERT_EQ(a.node->send(b.me, t), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(t), 0);
  EXPECT_EQ(b.node->stats().tx_msgs[slot(MsgType::put_nak)], 1u);
  EXPECT_EQ(a.node->stats().rdma_bytes_written, 0u);
  ASSERT_EQ(b.upper->received.size(), 1u);
  EXPECT_TRUE(b.upper->received[0].payload.empty());
}

TEST_F(EngineTest, OptimizedGetRepliesByRdmaIntoTheRequestersSink) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  std::vector<std::uint8_t> sink(65536);
  a.upper->reply_into = sink;
  lnd::Tx get;
  get.hdr = make_get({kPidLustre, a.me}, {kPidLustre, b.me}, 42, 9, WireHandle{1, 2}, 65536);
  get.reply_sink = sink;
  ASSERT_EQ(a.node->send(b.me, get), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(get), 0);
  ASSERT_EQ(a.upper->received.size(), 1u);
  const auto& r = a.upper->received[0];
  EXPECT_EQ(r.hdr.type, lnetr::MsgType::reply);
  EXPECT_EQ(r.hdr.reply().dst_wmd, (WireHandle{1, 2}));
  EXPECT_EQ(r.hdr.src_nid, b.me);
  EXPECT_EQ(r.payload, pattern(65536, 0x77));
  EXPECT_EQ(a.node->stats().tx_msgs[slot(MsgType::get_req)], 1u);
  EXPECT_EQ(b.node->stats().tx_msgs[slot(MsgType::get_done)], 1u);
  EXPECT_EQ(b.node->stats().rdma_bytes_written, 65536u);
  EXPECT_EQ(a.node->stats().bytes_copied, 0u);
  EXPECT_EQ(b.node->stats().bytes_copied, 0u);
}

// With per-transfer keys (memory windows), the peer's key to a sink is
// dead before the sink's memory is given on: a peer writing after its
// PUT_DONE or GET_DONE cannot reach a buffer that moved on.
TEST_F(EngineTest, ASinkKeyIsDeadBeforeItsMemoryMovesOn) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  a.tr.windows = b.tr.windows = true;
  std::vector<std::size_t> a_live, b_live;
  // (Each holds one sink at a time: B the PUT's, A the GET's.)
  a.upper->on_received_hook = [&](const lnd::Rx& rx) {
    if (rx.hdr.type == lnetr::MsgType::reply) a_live.push_back(a.tr.live_windows());
  };
  b.upper->on_received_hook = [&](const lnd::Rx& rx) {
    if (rx.hdr.type == lnetr::MsgType::put) b_live.push_back(b.tr.live_windows());
  };
  std::vector<std::uint8_t> sink(65536);
  a.upper->reply_into = sink;
  const auto data = pattern(65536, 3);
  lnd::Tx p = put(a, b, data);
  lnd::Tx g = optimized_get(a.me, b.me, 65536);
  ASSERT_EQ(a.node->send(b.me, p), 0);
  ASSERT_EQ(a.node->send(b.me, g), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(p), 0);
  EXPECT_EQ(a.upper->status_of(g), 0);
  EXPECT_EQ(b.upper->payload_of(7), data);
  EXPECT_EQ(std::vector<std::uint8_t>(sink.begin(), sink.end()), pattern(65536, 0x77));
  EXPECT_EQ(b_live, std::vector<std::size_t>{0}) << "the PUT's sink key was live when its buffer was delivered";
  EXPECT_EQ(a_live, std::vector<std::size_t>{0}) << "the GET's sink key was live when its REPLY was delivered";
  EXPECT_EQ(b.node->stats().sinks_unmapping, 1u);
  EXPECT_EQ(a.node->stats().sinks_unmapping, 1u);
}

// A connection that dies while sink keys are being invalidated: the keys
// die with its queue pair, the transfers finish, nothing is held.
TEST_F(EngineTest, SinkKeysBeingInvalidatedWhenTheConnectionDiesLeaveNothingHeld) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  a.tr.windows = b.tr.windows = true;
  std::deque<lnd::Tx> txs;
  const auto data = pattern(1 << 20, 9);
  for (int i = 0; i < 6; ++i) {
    txs.push_back(put(a, b, data, i));
    ASSERT_EQ(a.node->send(b.me, txs.back()), 0);
  }
  // Run until B has an invalidation queued, then A vanishes.
  for (int i = 0; i < 10000 && b.node->stats().sinks_unmapping == 0; ++i) fabric.run(1);
  ASSERT_GT(b.node->stats().sinks_unmapping, 0u);
  a.tr.vanish();
  a.node.reset();
  settle();
  advance(51s);
  EXPECT_GT(b.upper->received.size() + static_cast<std::size_t>(b.upper->aborted), 0u);
  for (const auto& r : b.upper->received) EXPECT_EQ(r.payload, data);
  expect_at_rest(b);
  b.node->shutdown();
  settle();
  b.node->reap();
  EXPECT_EQ(b.tr.live_windows(), 0u);
}

TEST_F(EngineTest, GetsGoImmediateWhenSmallOrToARouter) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  std::vector<std::uint8_t> sink(65536);
  // Small sink: the REPLY fits an IMMEDIATE.
  lnd::Tx small;
  small.hdr = make_get({kPidLustre, a.me}, {kPidLustre, b.me}, 42, 9, WireHandle{1, 3}, 100);
  small.reply_sink = MutableByteSpan(sink.data(), 100);
  // Through a router (B is the next hop, not the destination): IMMEDIATE.
  lnd::Tx routed;
  routed.hdr = make_get({kPidLustre, a.me}, {kPidLustre, nid("10.9.0.1@tcp")}, 42, 9, WireHandle{1, 4}, 65536);
  routed.reply_sink = sink;
  b.upper->answer_gets = false;
  b.upper->policy = TestUpper::Policy::discard;
  ASSERT_EQ(a.node->send(b.me, small), 0);
  ASSERT_EQ(a.node->send(b.me, routed), 0);
  settle();
  EXPECT_EQ(a.node->stats().tx_msgs[slot(MsgType::immediate)], 2u);
  EXPECT_EQ(a.node->stats().tx_msgs[slot(MsgType::get_req)], 0u);
  EXPECT_EQ(b.upper->received.size(), 2u);
}

TEST_F(EngineTest, UnansweredOptimizedGetGetsEnodata) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  b.upper->answer_gets = false;
  b.upper->policy = TestUpper::Policy::discard;
  lnd::Tx get = optimized_get(a.me, b.me, 8192);
  ASSERT_EQ(a.node->send(b.me, get), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(get), -ENODATA);
  EXPECT_TRUE(a.upper->received.empty());
}

TEST_F(EngineTest, GetDoneClaimingMoreThanTheSinkClosesTheConnection) {
  Host& a = host("A", "10.0.0.1@o2ib");
  RawPeer r(fabric, "10.0.0.3@o2ib");
  r.listen();
  lnd::Tx get = optimized_get(a.me, r.me, 8192);
  ASSERT_EQ(a.node->send(r.me, get), 0);
  settle();
  const GetReq* req = nullptr;
  const auto got = r.messages();
  for (const Msg& m : got)
    if (m.get_req()) req = m.get_req();
  ASSERT_NE(req, nullptr);
  // The peer says it wrote far more than the 8192 bytes it was given.
  r.send(Msg{r.header(MsgType::get_done), Completion{req->cookie, 1 << 28}});
  settle();
  EXPECT_EQ(a.node->stats().closed[static_cast<std::size_t>(CloseReason::bad_message)], 1u);
  EXPECT_LT(a.upper->status_of(get), 0);
  EXPECT_TRUE(a.upper->received.empty());
  expect_at_rest(a);
}

TEST_F(EngineTest, UnregisteredMemoryIsCopiedThroughOwnBuffersAndCounted) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  a.tr.all_registered = false;
  b.tr.all_registered = false;
  const auto big = pattern(300000, 8);
  const auto small = pattern(2000, 9);
  lnd::Tx t1 = put(a, b, big, 1);
  lnd::Tx t2 = put(a, b, small, 2);
  ASSERT_EQ(a.node->send(b.me, t1), 0);
  ASSERT_EQ(a.node->send(b.me, t2), 0);
  settle();
  ASSERT_EQ(b.upper->received.size(), 2u);
  EXPECT_EQ(b.upper->payload_of(1), big);
  EXPECT_EQ(b.upper->payload_of(2), small);
  // Sender: the bulk through a bounce buffer, the IMMEDIATE copied into its
  // message; receiver: the bulk from its bounce buffer, the IMMEDIATE from
  // its receive buffer.
  EXPECT_EQ(a.node->stats().bytes_copied, big.size() + small.size());
  EXPECT_EQ(a.node->stats().bytes_gathered, 0u);
  EXPECT_EQ(b.node->stats().bytes_copied, big.size() + small.size());
  // Registered by its owner, the sender's payload goes as it is.
  lnd::Tx t3 = put(a, b, big, 3);
  a.tr.register_payload(const_cast<std::uint8_t*>(t3.payload.data()), t3.payload.size());
  ASSERT_EQ(a.node->send(b.me, t3), 0);
  settle();
  ASSERT_EQ(b.upper->received.size(), 3u);
  EXPECT_EQ(b.upper->payload_of(3), big);
  EXPECT_EQ(a.node->stats().bytes_copied, big.size() + small.size());
}

TEST_F(EngineTest, PayloadInPiecesIsWrittenFromThePieces) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  // A payload left in received frames: 700 runs of 1,448 bytes and a tail.
  const auto data = pattern(700 * 1448 + 333, 11);
  std::vector<lnd::RefChain::Piece> pieces;
  for (std::size_t at = 0; at < data.size(); at += 1448)
    pieces.push_back({data.data() + at, std::min<std::size_t>(1448, data.size() - at), nullptr});
  lnd::Tx t = put(a, b, data);
  t.pieces = pieces;
  ASSERT_EQ(a.node->send(b.me, t), 0);
  settle();
  ASSERT_EQ(b.upper->received.size(), 1u);
  EXPECT_EQ(b.upper->received[0].payload, data);
  EXPECT_EQ(a.node->stats().bytes_copied, 0u);
}

// ---- credits -----------------------------------------------------------------------------

TEST_F(EngineTest, HeldReceiveBuffersWithholdCreditsAndNoopsReturnThem) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  b.upper->policy = TestUpper::Policy::defer;
  std::deque<lnd::Tx> txs;
  std::vector<std::vector<std::uint8_t>> data;
  for (int i = 0; i < 20; ++i) data.push_back(pattern(100, i));
  for (int i = 0; i < 20; ++i) {
    txs.push_back(put(a, b, data[i], i));
    ASSERT_EQ(a.node->send(b.me, txs.back()), 0);
  }
  settle();
  // B holds 8 (the queue depth): A has no credit left and keeps the rest.
  EXPECT_EQ(b.upper->deferred.size(), 8u);
  auto ca = a.node->peers()[0].conns[0];
  EXPECT_EQ(ca.credits, 0);
  EXPECT_EQ(ca.queued, 12u);
  EXPECT_EQ(b.node->peers()[0].conns[0].rx_held, 8u);
  // Three buffers back: below the high-water mark (4), no NOOP yet.
  b.upper->resume_n(3);
  settle();
  EXPECT_EQ(b.node->stats().tx_msgs[slot(MsgType::noop)], 0u);
  EXPECT_EQ(b.node->peers()[0].conns[0].outstanding_credits, 3);
  EXPECT_EQ(a.node->peers()[0].conns[0].credits, 0);
  // The fourth: a NOOP carries four credits, and A sends four more.
  b.upper->resume_n(1);
  settle();
  EXPECT_EQ(b.node->stats().tx_msgs[slot(MsgType::noop)], 1u);
  EXPECT_EQ(b.upper->deferred.size(), 8u);
  EXPECT_EQ(a.node->peers()[0].conns[0].queued, 8u);
  // Everything, in order.
  b.upper->policy = TestUpper::Policy::accept;
  while (!b.upper->deferred.empty()) {
    b.upper->resume_all();
    settle();
  }
  ASSERT_EQ(b.upper->received.size(), 20u);
  std::vector<std::uint64_t> order;
  for (const auto& r : b.upper->received) order.push_back(r.hdr.put().match_bits);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[i], static_cast<std::uint64_t>(i));
  // B owes A at most hiw-1 credits at rest, returned with its next message.
  EXPECT_LT(b.node->peers()[0].conns[0].outstanding_credits, 4);
}

TEST_F(EngineTest, BulkRequestsTakeReservedCreditsAndAllComplete) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  b.upper->policy = TestUpper::Policy::defer;
  std::deque<lnd::Tx> txs;
  const auto data = pattern(50000, 4);
  for (int i = 0; i < 12; ++i) {
    txs.push_back(put(a, b, data, i));
    ASSERT_EQ(a.node->send(b.me, txs.back()), 0);
  }
  settle();
  EXPECT_EQ(b.upper->deferred.size(), 8u);
  auto ca = a.node->peers()[0].conns[0];
  EXPECT_EQ(ca.reserved_credits, 0);
  EXPECT_EQ(ca.credits, 0);
  b.upper->policy = TestUpper::Policy::accept;
  while (!b.upper->deferred.empty()) {
    b.upper->resume_all();
    settle();
  }
  ASSERT_EQ(b.upper->received.size(), 12u);
  for (const auto& r : b.upper->received) EXPECT_EQ(r.payload, data);
  for (auto& t : txs) EXPECT_EQ(a.upper->status_of(t), 0);
}

TEST_F(EngineTest, KeepaliveNoopAfterIdleInterval) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  lnd::Tx t = put(a, b, pattern(10, 1));
  ASSERT_EQ(a.node->send(b.me, t), 0);
  settle();
  advance(99s);
  EXPECT_EQ(a.node->stats().tx_msgs[slot(MsgType::noop)], 0u);
  advance(2s);
  EXPECT_GE(a.node->stats().tx_msgs[slot(MsgType::noop)], 1u);
  EXPECT_GE(b.node->stats().rx_msgs[slot(MsgType::noop)], 1u);
  EXPECT_EQ(a.node->connections(), 1u);
}

TEST_F(EngineTest, ChecksummedMessagesAreSentAndVerified) {
  Options o;
  o.cksum = true;
  Host& a = host("A", "10.0.0.1@o2ib", {}, o);
  Host& b = host("B", "10.0.0.2@o2ib");
  const auto small = pattern(3000, 1);
  const auto big = pattern(30000, 2);
  lnd::Tx t1 = put(a, b, small, 1), t2 = put(a, b, big, 2);
  ASSERT_EQ(a.node->send(b.me, t1), 0);
  ASSERT_EQ(a.node->send(b.me, t2), 0);
  settle();
  ASSERT_EQ(b.upper->received.size(), 2u);
  EXPECT_EQ(b.upper->payload_of(1), small);
  EXPECT_EQ(b.upper->payload_of(2), big);
}

}  // namespace
}  // namespace lnetr::o2ib

namespace lnetr::o2ib {
namespace {

// ---- the passive side's checks (o2iblnd.md §4.2) ---------------------------------------

struct RejectCase {
  const char* what;
  std::function<std::vector<std::uint8_t>(const Nid& me, const Nid& b, std::uint64_t b_stamp)> request;
  RejectReason why;
  std::uint16_t version;
  bool knows_ni;  // the reject carries B's incarnation and parameters
  std::uint16_t port = 1023;
};

class RejectTest : public EngineTest, public ::testing::WithParamInterface<int> {};

std::vector<RejectCase> reject_cases() {
  using V = std::vector<std::uint8_t>;
  return {
      {"five bytes", [](const Nid&, const Nid&, std::uint64_t) { return V(5, 0x91); }, RejectReason::fatal,
       kVersion2, false},
      {"LNet protocol probe",
       [](const Nid& me, const Nid& b, std::uint64_t) {
         V v = sim::connreq(me, 1, b);
         store<std::uint32_t>(v.data(), kLnetProtoMagic, ByteOrder::little);
         return v;
       },
       RejectReason::fatal, kVersion2, false},
      {"unknown version",
       [](const Nid& me, const Nid& b, std::uint64_t) {
         V v = sim::connreq(me, 1, b);
         store<std::uint16_t>(v.data() + 4, 0x13, ByteOrder::little);
         return v;
       },
       RejectReason::fatal, kVersion2, false},
      {"bad checksum",
       [](const Nid& me, const Nid& b, std::uint64_t) {
         V v = sim::connreq(me, 1, b);
         store<std::uint32_t>(v.data() + 12, 0x12345678, ByteOrder::little);
         return v;
       },
       RejectReason::fatal, kVersion2, false},
      {"NID not ours",
       [](const Nid& me, const Nid&, std::uint64_t) { return sim::connreq(me, 1, nid("10.0.0.99@o2ib")); },
       RejectReason::fatal, kVersion2, false},
      {"stale destination stamp",
       [](const Nid& me, const Nid& b, std::uint64_t s) { return sim::connreq(me, 1, b, s + 1); },
       RejectReason::conn_stale, kVersion2, true},
      {"CONNACK instead of CONNREQ",
       [](const Nid& me, const Nid& b, std::uint64_t) {
         V v = sim::connreq(me, 1, b);
         v[6] = static_cast<std::uint8_t>(MsgType::connack);
         return v;
       },
       RejectReason::fatal, kVersion2, true},
      {"queue depth above peer_credits",
       [](const Nid& me, const Nid& b, std::uint64_t) { return sim::connreq(me, 1, b, 0, {16, 257, 4096}); },
       RejectReason::msg_queue_size, kVersion2, true},
      {"V1 queue depth above 8",
       [](const Nid& me, const Nid& b, std::uint64_t) {
         return sim::connreq(me, 1, b, 0, {16, 257, 4096}, kVersion1);
       },
       RejectReason::fatal, kVersion1, true},
      {"too many fragments",
       [](const Nid& me, const Nid& b, std::uint64_t) { return sim::connreq(me, 1, b, 0, {8, 300, 4096}); },
       RejectReason::rdma_frags, kVersion2, true},
      {"message size above 4 KiB",
       [](const Nid& me, const Nid& b, std::uint64_t) { return sim::connreq(me, 1, b, 0, {8, 257, 8192}); },
       RejectReason::fatal, kVersion2, true},
  };
}

TEST_P(RejectTest, RequestRefusedAsLinuxRefusesIt) {
  const RejectCase c = reject_cases()[static_cast<std::size_t>(GetParam())];
  SCOPED_TRACE(c.what);
  Host& b = host("B", "10.0.0.2@o2ib");
  RawPeer r(fabric, "10.0.0.1@o2ib");
  r.connect(b.me, c.request(r.me, b.me, b.node->incarnation()), c.port);
  settle();
  ASSERT_TRUE(r.rejected);
  EXPECT_FALSE(r.established);
  EXPECT_EQ(r.reject_kind, RejectKind::consumer);
  ASSERT_EQ(r.reject.size(), kRejectSize);
  auto d = decode_reject(r.reject);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->rej.magic, kIbMagic);
  EXPECT_EQ(d->rej.why, c.why);
  EXPECT_EQ(d->rej.version, c.version);
  if (c.version == kVersion2) {
    ASSERT_TRUE(d->rej.cp);
    EXPECT_EQ(d->rej.cp->max_msg_size, 4096u);
    if (c.knows_ni) {
      EXPECT_EQ(*d->rej.incarnation, b.node->incarnation());
      EXPECT_EQ(d->rej.cp->queue_depth, 8);
      EXPECT_EQ(d->rej.cp->max_frags, 257);
    } else {
      EXPECT_EQ(*d->rej.incarnation, 0u);
      EXPECT_EQ(d->rej.cp->queue_depth, 0);
      EXPECT_EQ(d->rej.cp->max_frags, 0);
    }
  }
  EXPECT_EQ(b.node->stats().rejects_sent[static_cast<std::size_t>(c.why)], 1u);
  EXPECT_EQ(b.node->connections(), 0u);
  EXPECT_EQ(b.tr.live_ids(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Cases, RejectTest, ::testing::Range(0, static_cast<int>(reject_cases().size())));

TEST_F(EngineTest, ByteSwappedRequestIsUnderstood) {
  Host& b = host("B", "10.0.0.2@o2ib");
  RawPeer r(fabric, "10.0.0.1@o2ib");
  Msg m;
  m.hdr.type = MsgType::connreq;
  m.hdr.srcnid = r.me;
  m.hdr.srcstamp = r.stamp;
  m.hdr.dstnid = b.me;
  m.body = ConnParams{};
  std::vector<std::uint8_t> big(kConnMsgSize);
  (void)encode_msg(m, big, ByteOrder::big);
  r.connect(b.me, big);
  settle();
  EXPECT_TRUE(r.established);
  EXPECT_EQ(b.node->stats().conns_accepted, 1u);
  r.close();
  settle();
}

TEST_F(EngineTest, UnprivilegedPortRefusedWhenRequired) {
  Options o;
  o.require_privileged_port = true;
  Host& b = host("B", "10.0.0.2@o2ib", {}, o);
  RawPeer r(fabric, "10.0.0.1@o2ib");
  r.connect(b.me, sim::connreq(r.me, 1, b.me), 2000);
  settle();
  ASSERT_TRUE(r.rejected);
  EXPECT_EQ(decode_reject(r.reject)->rej.why, RejectReason::fatal);
  RawPeer ok(fabric, "10.0.0.3@o2ib");
  ok.connect(b.me, sim::connreq(ok.me, 1, b.me), 1000);
  settle();
  EXPECT_TRUE(ok.established);
  ok.close();
  settle();
}

TEST_F(EngineTest, RequestsBeforeTheNiIsUpAreEarly) {
  Fabric& f = fabric;
  (void)f;
  Host& b = host("B", "10.0.0.2@o2ib");
  b.ready = false;
  b.restart(b.node->incarnation());
  RawPeer r(fabric, "10.0.0.1@o2ib");
  r.connect(b.me, sim::connreq(r.me, 1, b.me));
  settle();
  ASSERT_TRUE(r.rejected);
  EXPECT_EQ(decode_reject(r.reject)->rej.why, RejectReason::early);
}

// ---- the connecting side's reactions (§4.4) ------------------------------------------------

// B's listener refuses the first request with `rej` (built from it), then
// lets the engine judge the next ones.
void refuse_first(Host& b, std::function<Reject(std::uint64_t)> rej, std::vector<DecodedMsg>* seen) {
  auto count = std::make_shared<int>(0);
  b.intercept = [&b, rej, seen, count](ConnRequest& r) {
    auto d = decode_msg(r.private_data());
    if (d && seen) seen->push_back(*d);
    if ((*count)++ > 0) return false;
    std::array<std::uint8_t, kRejectSize> out{};
    (void)encode_reject(rej(b.node->incarnation()), out);
    b.tr.reject(r.id, ByteSpan(out.data(), out.size()));
    b.tr.destroy(r.id);
    return true;
  };
}

// `reject` is built with B's incarnation; `check` sees A's second request
// and B's incarnation.
struct ReactionCase {
  const char* what;
  std::function<Reject(std::uint64_t)> reject;
  bool reconnects;
  std::function<void(const DecodedMsg& second, std::uint64_t b_incarnation)> check;
  // Requests B sees in all.  A V1 peer's reject carries no incarnation, so
  // the retry names the peer's as unknown (-1), as Linux does (a V1 peer
  // ignores it); B, which speaks V2 too, refuses that as stale, and the
  // third request carries B's incarnation.
  std::size_t requests = 2;
};

class ReactionTest : public EngineTest, public ::testing::WithParamInterface<int> {};

std::vector<ReactionCase> reaction_cases() {
  // A reject as Linux sends it: with the rejecter's incarnation and
  // parameters, or (a V1 peer) with neither.
  auto rej = [](RejectReason why, std::uint16_t version = kVersion2, std::optional<ConnParams> cp = ConnParams{8, 257, 4096}) {
    return [=](std::uint64_t incarnation) {
      Reject r;
      r.why = why;
      r.version = version;
      if (cp) r.incarnation = incarnation;
      r.cp = cp;
      return r;
    };
  };
  return {
      {"MSG_QUEUE_SIZE: retried with the peer's depth", rej(RejectReason::msg_queue_size, kVersion2, ConnParams{6, 257, 4096}),
       true, [](const DecodedMsg& m, std::uint64_t) { EXPECT_EQ(m.msg.connparams()->queue_depth, 6); }},
      {"RDMA_FRAGS: retried with the peer's fragments", rej(RejectReason::rdma_frags, kVersion2, ConnParams{8, 32, 4096}),
       true, [](const DecodedMsg& m, std::uint64_t) { EXPECT_EQ(m.msg.connparams()->max_frags, 32); }},
      {"CONN_STALE: retried with the peer's incarnation", rej(RejectReason::conn_stale), true,
       [](const DecodedMsg& m, std::uint64_t b) { EXPECT_EQ(m.msg.hdr.dststamp, b); }},
      {"FATAL from a V1 peer: retried with version 1", rej(RejectReason::fatal, kVersion1, std::nullopt), true,
       [](const DecodedMsg& m, std::uint64_t) {
         EXPECT_EQ(m.msg.hdr.version, kVersion1);
         EXPECT_EQ(m.msg.hdr.dststamp, ~std::uint64_t{0});
       },
       3},
      {"CONN_UNCOMPAT: retried with version 1", rej(RejectReason::conn_uncompat, kVersion1, std::nullopt), true,
       [](const DecodedMsg& m, std::uint64_t) { EXPECT_EQ(m.msg.hdr.version, kVersion1); }, 3},
      {"CONN_RACE: retried", rej(RejectReason::conn_race), true,
       [](const DecodedMsg& m, std::uint64_t) { EXPECT_EQ(m.msg.hdr.version, kVersion2); }},
      {"NO_RESOURCES: given up", rej(RejectReason::no_resources), false, nullptr},
      {"FATAL: given up", rej(RejectReason::fatal), false, nullptr},
      {"EARLY: given up", rej(RejectReason::early), false, nullptr},
  };
}

TEST_P(ReactionTest, ConnectingSideReactsAsLinux) {
  const ReactionCase c = reaction_cases()[static_cast<std::size_t>(GetParam())];
  SCOPED_TRACE(c.what);
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  std::vector<DecodedMsg> seen;
  refuse_first(b, c.reject, &seen);
  const auto data = pattern(64, 3);
  lnd::Tx t = put(a, b, data);
  ASSERT_EQ(a.node->send(b.me, t), 0);
  settle();
  if (c.reconnects) {
    ASSERT_EQ(seen.size(), c.requests);
    c.check(seen[1], b.node->incarnation());
    EXPECT_EQ(a.upper->status_of(t), 0);
    ASSERT_EQ(b.upper->received.size(), 1u);
    EXPECT_EQ(b.upper->received[0].payload, data);
    EXPECT_EQ(a.node->stats().reconnects, c.requests - 1);
  } else {
    EXPECT_EQ(seen.size(), 1u);
    EXPECT_EQ(a.upper->status_of(t), -ECONNREFUSED);
    EXPECT_EQ(a.upper->peer_down.size(), 1u);
    EXPECT_EQ(a.node->stats().reconnects, 0u);
  }
  EXPECT_EQ(a.node->stats().connect_failed[static_cast<std::size_t>(ConnectFailure::rejected)],
            c.reconnects ? c.requests - 1 : 1);
}

INSTANTIATE_TEST_SUITE_P(Cases, ReactionTest, ::testing::Range(0, static_cast<int>(reaction_cases().size())));

TEST_F(EngineTest, NegotiatedDepthIsUsedWithoutCreditOverrun) {
  NiTunables deep;
  deep.peer_credits = 32;
  Host& a = host("A", "10.0.0.1@o2ib", deep);
  Host& b = host("B", "10.0.0.2@o2ib");  // peer_credits 8: refuses 32
  b.upper->policy = TestUpper::Policy::defer;
  std::deque<lnd::Tx> txs;
  const auto d = pattern(200, 1);
  for (int i = 0; i < 40; ++i) {
    txs.push_back(put(a, b, d, i));
    ASSERT_EQ(a.node->send(b.me, txs.back()), 0);
  }
  settle();
  EXPECT_EQ(b.node->stats().rejects_sent[static_cast<std::size_t>(RejectReason::msg_queue_size)], 1u);
  EXPECT_EQ(a.node->peers()[0].conns[0].queue_depth, 8);
  EXPECT_EQ(b.upper->deferred.size(), 8u);  // never more than B's buffers
  b.upper->policy = TestUpper::Policy::accept;
  while (!b.upper->deferred.empty()) {
    b.upper->resume_all();
    settle();
  }
  EXPECT_EQ(b.upper->received.size(), 40u);
}

// A queue depth of 1 scales the high-water mark (4 of 8) down to 0:
// owed credits go back in one NOOP each, never a NOOP for nothing.
TEST_F(EngineTest, DepthOfOneReturnsEachCreditOnceWithoutANoopStorm) {
  Host& a = host("A", "10.0.0.1@o2ib");
  RawPeer r(fabric, "10.0.0.3@o2ib");
  r.connect(a.me, sim::connreq(r.me, r.stamp, a.me, 0, ConnParams{1, 257, kMaxMsgSize}));
  settle();
  ASSERT_TRUE(r.established);
  EXPECT_EQ(a.node->peers()[0].conns[0].queue_depth, 1);
  EXPECT_EQ(a.node->stats().tx_msgs[slot(MsgType::noop)], 0u);
  for (int i = 0; i < 3; ++i) {
    LnetHeader h = make_put({kPidLustre, r.me}, {kPidLustre, a.me}, 4, static_cast<std::uint64_t>(i),
                            WireHandle::none(), 0, 0);
    std::vector<std::uint8_t> out(kMaxMsgSize);
    auto n = encode_msg(Msg{r.header(MsgType::immediate, 0), Immediate{h, {}}}, out);
    ASSERT_TRUE(n);
    out.resize(*n);
    r.send(out);
    settle();
    // The one credit came back in one NOOP, and nothing more was sent.
    EXPECT_EQ(a.node->stats().tx_msgs[slot(MsgType::noop)], static_cast<std::uint64_t>(i + 1));
    EXPECT_EQ(a.node->peers()[0].conns[0].outstanding_credits, 0);
  }
  EXPECT_EQ(a.upper->received.size(), 3u);
  EXPECT_FALSE(r.disconnected);
}

TEST_F(EngineTest, ConnectionRaceLeavesTheHigherNidsConnection) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  lnd::Tx ta = put(a, b, pattern(10, 1), 1);
  lnd::Tx tb = put(b, a, pattern(10, 2), 2);
  ASSERT_EQ(a.node->send(b.me, ta), 0);
  ASSERT_EQ(b.node->send(a.me, tb), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(ta), 0);
  EXPECT_EQ(b.upper->status_of(tb), 0);
  EXPECT_EQ(a.upper->received.size(), 1u);
  EXPECT_EQ(b.upper->received.size(), 1u);
  // B's NID hash is the higher: it refused A's request and kept its own.
  EXPECT_EQ(b.node->stats().rejects_sent[static_cast<std::size_t>(RejectReason::conn_race)], 1u);
  EXPECT_EQ(a.node->stats().rejects_sent[static_cast<std::size_t>(RejectReason::conn_race)], 0u);
  EXPECT_EQ(b.node->stats().conns_connected, 1u);
  EXPECT_EQ(a.node->stats().conns_accepted, 1u);
}

// ---- restarts, timeouts, failures ------------------------------------------------------------

TEST_F(EngineTest, RestartedPeerIsReconnectedWithItsNewIncarnation) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  lnd::Tx t1 = put(a, b, pattern(10, 1), 1);
  ASSERT_EQ(a.node->send(b.me, t1), 0);
  settle();
  const std::uint64_t old = b.node->incarnation();
  // B goes away without a word (power lost), then comes back.
  b.tr.vanish();
  b.restart(old + 1000);
  // Its first message finds A still connected to the old B: A closes that
  // connection and refuses as stale, B retries with A's incarnation.
  lnd::Tx t2 = put(b, a, pattern(10, 2), 2);
  ASSERT_EQ(b.node->send(a.me, t2), 0);
  settle();
  EXPECT_EQ(b.upper->status_of(t2), 0);
  EXPECT_EQ(a.upper->received.size(), 1u);
  EXPECT_EQ(a.node->stats().closed[static_cast<std::size_t>(CloseReason::stale_peer)], 1u);
  EXPECT_EQ(a.node->stats().rejects_sent[static_cast<std::size_t>(RejectReason::conn_stale)], 1u);
  ASSERT_EQ(a.node->peers().size(), 1u);
  EXPECT_EQ(a.node->peers()[0].incarnation, old + 1000);
}

TEST_F(EngineTest, StalledPeerTimesOutTheConnection) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  lnd::Tx t1 = put(a, b, pattern(10, 1), 1);
  ASSERT_EQ(a.node->send(b.me, t1), 0);
  settle();
  // A's sends stop completing (the fabric holds them).
  for (sim::SimId* id : a.tr.ids()) id->held = true;
  lnd::Tx t2 = put(a, b, pattern(100000, 2), 2);
  ASSERT_EQ(a.node->send(b.me, t2), 0);
  settle();
  advance(49s);
  EXPECT_EQ(a.upper->status_of(t2), 1);  // still waiting
  advance(2s);
  EXPECT_LT(a.upper->status_of(t2), 0);
  EXPECT_EQ(a.node->stats().closed[static_cast<std::size_t>(CloseReason::timeout)], 1u);
  EXPECT_EQ(a.upper->peer_down.size(), 1u);
  EXPECT_EQ(b.node->stats().closed[static_cast<std::size_t>(CloseReason::peer_disconnected)], 1u);
  // It reconnects for the next message.
  lnd::Tx t3 = put(a, b, pattern(10, 3), 3);
  ASSERT_EQ(a.node->send(b.me, t3), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(t3), 0);
}

TEST_F(EngineTest, UnansweredConnectTimesOutAfterAQuarterOfTheTimeout) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  CmId* swallowed = nullptr;
  b.intercept = [&](ConnRequest& r) {
    swallowed = r.id;
    return true;
  };
  lnd::Tx t = put(a, b, pattern(10, 1));
  ASSERT_EQ(a.node->send(b.me, t), 0);
  settle();
  advance(12s);
  EXPECT_EQ(a.upper->status_of(t), 1);
  advance(1s);  // 12.5 s: max(5 s, 50 s / 4)
  EXPECT_EQ(a.upper->status_of(t), -ETIMEDOUT);
  EXPECT_EQ(a.node->stats().connect_failed[static_cast<std::size_t>(ConnectFailure::connect_timeout)], 1u);
  EXPECT_EQ(a.upper->peer_down.size(), 1u);
  b.tr.destroy(swallowed);
}

// A connection B accepted whose requester never sends the RTU is given up
// after the connect timeout, as an unanswered one of its own: a remote
// node cannot hold a queue pair open by not finishing.
TEST_F(EngineTest, AnAcceptedConnectionNeverEstablishedTimesOut) {
  Host& b = host("B", "10.0.0.2@o2ib");
  RawPeer r(fabric, "10.0.0.1@o2ib");
  r.tr.withhold_rtu = true;
  r.connect(b.me, sim::connreq(r.me, 1, b.me));
  settle();
  EXPECT_EQ(b.node->connections(), 1u);
  advance(12s);
  EXPECT_EQ(b.node->connections(), 1u);
  advance(1s);  // 12.5 s: max(5 s, 50 s / 4)
  b.node->reap();
  EXPECT_EQ(b.node->connections(), 0u);
  EXPECT_EQ(b.node->stats().connect_failed[static_cast<std::size_t>(ConnectFailure::passive_timeout)], 1u);
  r.close();
  settle();
}

// Options::max_peers: a request from a new peer while the table is full is
// rejected (no resources: a kernel peer retries later) and counted; a send
// to a new peer fails with -ENOSPC; the known peer goes on.
TEST_F(EngineTest, ANewPeerBeyondTheLimitIsRejectedAndTheKnownOneWorks) {
  Options o;
  o.max_peers = 1;
  Host& b = host("B", "10.0.0.2@o2ib", {}, o);
  Host& a = host("A", "10.0.0.1@o2ib");
  lnd::Tx t = put(a, b, pattern(100, 1));
  ASSERT_EQ(a.node->send(b.me, t), 0);
  settle();
  ASSERT_EQ(b.upper->received.size(), 1u);
  RawPeer r(fabric, "10.0.0.3@o2ib");
  r.connect(b.me, sim::connreq(r.me, 1, b.me));
  settle();
  ASSERT_TRUE(r.rejected);
  EXPECT_EQ(decode_reject(r.reject)->rej.why, RejectReason::no_resources);
  EXPECT_EQ(b.node->stats().peers_refused, 1u);
  lnd::Tx to_new = put(b, a, pattern(10, 2));
  EXPECT_EQ(b.node->send(r.me, to_new), -ENOSPC);
  EXPECT_EQ(b.node->stats().peers_refused, 2u);
  lnd::Tx again = put(a, b, pattern(100, 3));
  ASSERT_EQ(a.node->send(b.me, again), 0);
  settle();
  EXPECT_EQ(b.upper->received.size(), 2u);
  EXPECT_EQ(b.node->peer_count(), 1u);
}

// One peer cannot open connections without end: beyond twice its
// conns_per_peer and two (room for those a reconnect or a race replaces)
// its requests are rejected NO_RESOURCES, and the ones it has keep working.
TEST_F(EngineTest, APeerOpeningConnectionsBeyondItsShareIsRejected) {
  Host& b = host("B", "10.0.0.2@o2ib");
  std::list<RawPeer> same;  // one node (one NID, one incarnation), many connections
  for (int i = 0; i < 5; ++i) {
    RawPeer& r = same.emplace_back(fabric, "10.0.0.1@o2ib");
    r.connect(b.me, sim::connreq(r.me, 1, b.me), static_cast<std::uint16_t>(1023 - i));
    settle();
    if (i < 4) {
      EXPECT_TRUE(r.established) << i;
    } else {
      ASSERT_TRUE(r.rejected);
      EXPECT_EQ(decode_reject(r.reject)->rej.why, RejectReason::no_resources);
    }
  }
  EXPECT_EQ(b.node->stats().conns_refused, 1u);
  EXPECT_EQ(b.node->connections(), 4u);
  for (RawPeer& r : same) r.close();
  settle();
}

// Options::peer_idle: a peer whose connections are gone, with nothing
// queued, is freed once unused that long.
TEST_F(EngineTest, APeerWithoutConnectionsIsFreedWhenIdle) {
  Options o;
  o.peer_idle = 10s;
  Host& b = host("B", "10.0.0.2@o2ib", {}, o);
  RawPeer r(fabric, "10.0.0.1@o2ib");
  r.connect(b.me, sim::connreq(r.me, 1, b.me));
  settle();
  ASSERT_TRUE(r.established);
  advance(60s);  // connected: kept however long
  EXPECT_EQ(b.node->peer_count(), 1u);
  r.close();
  settle();
  b.node->reap();
  advance(5s);
  EXPECT_EQ(b.node->peer_count(), 1u);
  advance(6s);
  EXPECT_EQ(b.node->peer_count(), 0u);
  EXPECT_EQ(b.node->stats().peers_freed, 1u);
}

// A connection's registered receive memory outlives it for the next one:
// a peer that reconnects costs no registration (and none is leaked).
TEST_F(EngineTest, AReconnectingPeerGetsRegisteredReceiveMemory) {
  Host& b = host("B", "10.0.0.2@o2ib");
  const std::size_t idle_regions = b.tr.live_regions();
  RawPeer r(fabric, "10.0.0.1@o2ib");
  for (int i = 0; i < 3; ++i) {
    r.connect(b.me, sim::connreq(r.me, 1, b.me));
    settle();
    ASSERT_TRUE(r.established) << i;
    EXPECT_EQ(b.tr.live_regions(), idle_regions + 1) << "one registration for the receive buffers, kept";
    r.close();
    settle();
    b.node->reap();
    EXPECT_EQ(b.node->connections(), 0u);
    r.established = false;
  }
  EXPECT_EQ(b.node->stats().rx_slabs_reused, 2u);
}

// Options::connreq_rate: requests from one address beyond the rate (after
// its burst) are rejected before they are looked at; another address is
// not held back.
TEST_F(EngineTest, ConnectionRequestsFromOneAddressAreRateLimited) {
  Options o;
  o.connreq_rate = 1;  // a burst of 4
  Host& b = host("B", "10.0.0.2@o2ib", {}, o);
  std::list<RawPeer> storm;
  for (int i = 0; i < 5; ++i) {
    RawPeer& r = storm.emplace_back(fabric, "10.0.0.1@o2ib");
    r.connect(b.me, {1, 2, 3});  // nonsense: rejected as fatal, or for the rate
    settle();
    ASSERT_TRUE(r.rejected);
  }
  EXPECT_EQ(b.node->stats().connreqs_rate_limited, 1u);
  EXPECT_EQ(decode_reject(storm.back().reject)->rej.why, RejectReason::no_resources);
  RawPeer other(fabric, "10.0.0.3@o2ib");
  other.connect(b.me, sim::connreq(other.me, 1, b.me));
  settle();
  EXPECT_TRUE(other.established);
  other.close();
  settle();
}

TEST_F(EngineTest, PeerKilledMidTransferFailsWhatWasInFlightAndComesBack) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  std::deque<lnd::Tx> txs;
  const auto data = pattern(1 << 20, 5);
  for (int i = 0; i < 10; ++i) {
    txs.push_back(put(a, b, data, i));
    ASSERT_EQ(a.node->send(b.me, txs.back()), 0);
  }
  fabric.run(60);  // part of the way
  const std::size_t got = b.upper->received.size();
  EXPECT_LT(got, 10u);
  // B dies: its queue pairs are gone, A's writes and sends to it fail.
  b.tr.vanish();
  b.node.reset();
  settle();
  // Sends in flight fail at once; a request waiting for B's answer is
  // failed by the LND timeout, as Linux's "Timed out RDMA".
  advance(51s);
  int ok = 0, failed = 0;
  for (auto& t : txs) {
    const int s = a.upper->status_of(t);
    EXPECT_NE(s, 1) << "every message finished";
    (s == 0 ? ok : failed)++;
  }
  EXPECT_GT(failed, 0);
  EXPECT_EQ(a.upper->peer_down.size(), 1u);
  expect_at_rest(a);
  b.start(999);
  lnd::Tx again = put(a, b, data, 77);
  ASSERT_EQ(a.node->send(b.me, again), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(again), 0);
  EXPECT_EQ(b.upper->payload_of(77), data);
}

// ---- NIs added and deleted at run time ---------------------------------------------------------

TEST_F(EngineTest, AnNiAddedAtRunTimeServesItsNetAndADeletedOneLetsGoOfItsDevice) {
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  Host& c = host("C", "10.1.0.2@o2ib1");
  const Nid a1_nid = nid("10.1.0.1@o2ib1");
  // A's second device, on o2ib1 (as lnetrctl net add opens it).
  auto device = [&](const char* name) {
    auto t = std::make_unique<SimTransport>(fabric, name);
    t->add_address(a1_nid.addr4());
    t->listen(a1_nid.addr4(), kServicePort, [&a](ConnRequest&& r) { a.node->accept_request(std::move(r)); });
    return t;
  };
  auto a1 = device("A1");
  const auto data = pattern(1 << 20, 3);
  lnd::Tx before = put(a, c, data, 1);
  EXPECT_EQ(a.node->send(c.me, before), -EHOSTUNREACH);
  LocalNi ni;
  ni.nid = a1_nid;
  ni.transport = a1.get();
  ASSERT_TRUE(a.node->add_ni(ni));
  EXPECT_FALSE(a.node->add_ni(ni));  // in service already
  EXPECT_EQ(a.node->nis(), 2u);
  // Both ways over the new NI; o2ib untouched.
  lnd::Tx out = put(a, c, data, 2);
  ASSERT_EQ(a.node->send(c.me, out), 0);
  lnd::Tx in = put(c, a, pattern(100, 4), 3);
  in.hdr.src_nid = c.me;
  in.hdr.dest_nid = a1_nid;
  ASSERT_EQ(c.node->send(a1_nid, in), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(out), 0);
  EXPECT_EQ(c.upper->payload_of(2), data);
  EXPECT_EQ(c.upper->status_of(in), 0);
  EXPECT_EQ(a.upper->payload_of(3), pattern(100, 4));
  // Deleted under 1 MiB PUTs: each finishes (sent, or failed), the
  // connections close by name, and the device is let go of once the last
  // completion is in.
  std::deque<lnd::Tx> txs;
  for (int i = 0; i < 6; ++i) {
    txs.push_back(put(a, c, data, 10 + i));
    ASSERT_EQ(a.node->send(c.me, txs.back()), 0);
  }
  fabric.run(40);
  ASSERT_TRUE(a.node->del_ni(a1_nid));
  EXPECT_FALSE(a.node->del_ni(a1_nid));
  EXPECT_EQ(a.node->nis(), 1u);
  a.node->reap();
  EXPECT_FALSE(a.node->release_transport(a1.get()));  // (the device still holds what was posted)
  settle();
  int failed = 0;
  for (auto& t : txs) {
    const int st = a.upper->status_of(t);
    EXPECT_NE(st, 1) << "every message finished";
    failed += st != 0;
  }
  EXPECT_GT(failed, 0);
  EXPECT_GE(a.node->stats().closed[static_cast<std::size_t>(CloseReason::ni_deleted)], 1u);
  lnd::Tx after = put(a, c, data, 20);
  EXPECT_EQ(a.node->send(c.me, after), -EHOSTUNREACH);
  a.node->reap();
  EXPECT_TRUE(a.node->release_transport(a1.get()));
  EXPECT_EQ(a1->live_ids(), 0u);
  EXPECT_EQ(a1->live_regions(), 0u);
  EXPECT_TRUE(a1->violations.empty()) << (a1->violations.empty() ? "" : a1->violations.front());
  a1.reset();
  lnd::Tx still = put(a, b, pattern(10, 5), 30);
  ASSERT_EQ(a.node->send(b.me, still), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(still), 0);
  // The same NID again, on a new device: it works as the first did, and
  // goes the same way.
  auto a2 = device("A2");
  ni.transport = a2.get();
  ASSERT_TRUE(a.node->add_ni(ni));
  lnd::Tx again = put(a, c, pattern(5000, 6), 40);
  ASSERT_EQ(a.node->send(c.me, again), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(again), 0);
  EXPECT_EQ(c.upper->payload_of(40), pattern(5000, 6));
  ASSERT_TRUE(a.node->del_ni(a1_nid));
  settle();
  a.node->reap();
  EXPECT_TRUE(a.node->release_transport(a2.get()));
  EXPECT_EQ(a2->live_ids(), 0u);
  EXPECT_EQ(a2->live_regions(), 0u);
  // C saw its peer go, not a hang: its connections to A's o2ib1 NI closed.
  EXPECT_EQ(c.node->connections(), 0u);
}

// ---- malformed and unexpected messages ---------------------------------------------------------

struct BadMessageCase {
  const char* what;
  std::function<std::vector<std::uint8_t>(RawPeer&)> bytes;
  CloseReason why;
};

class BadMessageTest : public EngineTest, public ::testing::WithParamInterface<int> {};

std::vector<BadMessageCase> bad_message_cases() {
  auto enc = [](const Msg& m) {
    std::vector<std::uint8_t> out(kMaxMsgSize);
    auto n = encode_msg(m, out);
    out.resize(n ? *n : 0);
    return out;
  };
  auto imm = [](RawPeer& r, const Nid& dest) {
    LnetHeader h = make_put({kPidLustre, r.me}, {kPidLustre, dest}, 4, 1, WireHandle::none(), 0, 0);
    return Immediate{h, {}};
  };
  return {
      {"garbage", [](RawPeer&) { return std::vector<std::uint8_t>(64, 0x5a); }, CloseReason::bad_message},
      {"more credits than the queue depth",
       [enc](RawPeer& r) { return enc(Msg{r.header(MsgType::noop, 9), Noop{}}); }, CloseReason::bad_credits},
      {"another incarnation",
       [enc](RawPeer& r) {
         MsgHeader h = r.header(MsgType::noop);
         h.srcstamp += 1;
         return enc(Msg{h, Noop{}});
       },
       CloseReason::stale_message},
      {"PUT_ACK for no PUT",
       [enc](RawPeer& r) {
         static const RdmaFrag f{4096, 0x1000};
         return enc(Msg{r.header(MsgType::put_ack), PutAck{1, 2, RdmaDesc(1, std::span(&f, 1))}});
       },
       CloseReason::unmatched_completion},
      {"PUT_DONE for no PUT_ACK",
       [enc](RawPeer& r) { return enc(Msg{r.header(MsgType::put_done), Completion{5, 0}}); },
       CloseReason::unmatched_completion},
      {"GET_DONE for no GET",
       [enc](RawPeer& r) { return enc(Msg{r.header(MsgType::get_done), Completion{5, 0}}); },
       CloseReason::unmatched_completion},
      {"GET_REQ for another node",
       [enc](RawPeer& r) {
         static const RdmaFrag f{4096, 0x1000};
         LnetHeader h = make_get({kPidLustre, r.me}, {kPidLustre, nid("10.5.5.5@tcp")}, 4, 1, WireHandle{1, 1}, 4096);
         return enc(Msg{r.header(MsgType::get_req), GetReq{h, 3, RdmaDesc(1, std::span(&f, 1))}});
       },
       CloseReason::get_not_for_us},
      {"CONNREQ on a connection",
       [enc](RawPeer& r) { return enc(Msg{r.header(MsgType::connreq), ConnParams{}}); }, CloseReason::bad_message},
      {"a HELLO in an IMMEDIATE",
       [enc, imm](RawPeer& r) {
         Immediate i = imm(r, r.peer_nid);
         i.hdr.type = lnetr::MsgType::hello;
         return enc(Msg{r.header(MsgType::immediate), i});
       },
       CloseReason::upper_rejected},
      {"checksum wrong",
       [enc, imm](RawPeer& r) {
         auto v = enc(Msg{r.header(MsgType::immediate), imm(r, r.peer_nid)});
         store<std::uint32_t>(v.data() + 12, 0xbad, ByteOrder::little);
         return v;
       },
       CloseReason::bad_message},
  };
}

TEST_P(BadMessageTest, ClosesThatConnectionOnlyAndCountsIt) {
  const BadMessageCase c = bad_message_cases()[static_cast<std::size_t>(GetParam())];
  SCOPED_TRACE(c.what);
  Host& a = host("A", "10.0.0.1@o2ib");
  Host& b = host("B", "10.0.0.2@o2ib");
  // A connection A keeps: B's.
  lnd::Tx tb = put(a, b, pattern(10, 1), 1);
  ASSERT_EQ(a.node->send(b.me, tb), 0);
  settle();
  RawPeer r(fabric, "10.0.0.3@o2ib");
  r.connect(a.me, sim::connreq(r.me, r.stamp, a.me));
  settle();
  ASSERT_TRUE(r.established);
  r.send(c.bytes(r));
  settle();
  EXPECT_EQ(a.node->stats().closed[static_cast<std::size_t>(c.why)], 1u);
  EXPECT_TRUE(r.disconnected);
  EXPECT_EQ(a.node->connections(), 1u);
  lnd::Tx again = put(a, b, pattern(10, 2), 2);
  ASSERT_EQ(a.node->send(b.me, again), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(again), 0);
  EXPECT_EQ(b.upper->received.size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Cases, BadMessageTest, ::testing::Range(0, static_cast<int>(bad_message_cases().size())));

TEST_F(EngineTest, MessagesBeforeEstablishedAreHandledAfterIt) {
  Host& a = host("A", "10.0.0.1@o2ib");
  RawPeer r(fabric, "10.0.0.3@o2ib");
  r.connect(a.me, sim::connreq(r.me, r.stamp, a.me));
  // Run until the raw peer has the CONNACK but A has not yet seen
  // ESTABLISHED (it comes a step later), then send at once.
  while (!r.established && fabric.run(1) == 1) {
  }
  ASSERT_TRUE(r.established);
  LnetHeader h = make_put({kPidLustre, r.me}, {kPidLustre, a.me}, 4, 1, WireHandle::none(), 0, 5);
  const std::uint8_t five[5] = {1, 2, 3, 4, 5};
  r.send(Msg{r.header(MsgType::immediate), Immediate{h, ByteSpan(five, 5)}});
  settle();
  ASSERT_EQ(a.upper->received.size(), 1u);
  EXPECT_EQ(a.upper->received[0].payload, std::vector<std::uint8_t>(five, five + 5));
}

TEST_F(EngineTest, VersionOneConnectionsWork) {
  Host& a = host("A", "10.0.0.1@o2ib");
  RawPeer r(fabric, "10.0.0.3@o2ib");
  r.version = kVersion1;
  r.connect(a.me, sim::connreq(r.me, r.stamp, a.me, 0, {8, 257, 4096}, kVersion1));
  settle();
  ASSERT_TRUE(r.established);
  auto ack = decode_msg(r.connack);
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->msg.hdr.version, kVersion1);
  LnetHeader h = make_put({kPidLustre, r.me}, {kPidLustre, a.me}, 4, 1, WireHandle::none(), 0, 0);
  r.send(Msg{r.header(MsgType::immediate, 0), Immediate{h, {}}});
  settle();
  EXPECT_EQ(a.upper->received.size(), 1u);
  // A answers in version 1, and without out-of-band NOOPs its receive
  // buffers are two per credit.
  lnd::Tx t;
  t.hdr = make_put({kPidLustre, a.me}, {kPidLustre, r.me}, 4, 2, WireHandle::none(), 0, 0);
  ASSERT_EQ(a.node->send(r.me, t), 0);
  settle();
  auto got = r.messages();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].hdr.version, kVersion1);
  EXPECT_EQ(got[0].hdr.credits, 1);  // the credit of r's message, returned
  r.close();
  settle();
}

}  // namespace
}  // namespace lnetr::o2ib

namespace lnetr::o2ib {
namespace {

TEST_F(EngineTest, RdmaWritesNeverOverfillTheSendQueue) {
  // Sinks of 257 fragments each, apart from one another: every PUT_DONE
  // is 257 writes and a SEND.
  // Eight of them fill a queue pair of depth 8 (2,064 work requests); the
  // eight PUT_REQs that the first PUT_ACK's returned credits release come
  // on top, and whatever does not fit waits for completions instead of
  // overfilling the queue pair.
  NiTunables t;
  t.concurrent_sends = 16;
  Host& a = host("A", "10.0.0.1@o2ib", t);
  RawPeer r(fabric, "10.0.0.3@o2ib");
  r.listen();
  constexpr std::size_t kPuts = 16, kFrags = 257, kFrag = 1024;
  std::vector<std::uint8_t> sink(2 * kFrags * kFrag * kPuts);  // every other KiB
  Region sink_region;
  r.tr.register_memory(sink.data(), sink.size(), true, sink_region);
  const auto data = pattern(kFrags * kFrag, 9);
  std::deque<lnd::Tx> txs;
  for (std::size_t i = 0; i < kPuts; ++i) {
    txs.emplace_back();
    txs.back().hdr = make_put({kPidLustre, a.me}, {kPidLustre, r.me}, 4, i, WireHandle::none(), 0,
                              static_cast<std::uint32_t>(data.size()));
    txs.back().payload = data;
    ASSERT_EQ(a.node->send(r.me, txs.back()), 0);
  }
  std::size_t acked = 0;
  auto answer = [&](std::uint8_t credits) {
    settle();
    for (const Msg& m : r.messages()) {
      const auto* pr = m.put_req();
      if (!pr || pr->hdr.put().match_bits != acked) continue;
      std::vector<RdmaFrag> frags;
      for (std::size_t f = 0; f < kFrags; ++f)
        frags.push_back({kFrag, reinterpret_cast<std::uint64_t>(sink.data() + 2 * (acked * kFrags + f) * kFrag)});
      r.send(Msg{r.header(MsgType::put_ack, acked == 0 ? credits : 0),
                 PutAck{pr->cookie, 100 + acked, RdmaDesc(sink_region.rkey, frags)}});
      ++acked;
    }
  };
  // A's sends are held while the first PUT_ACKs arrive: nothing
  // completes, so every PUT_REQ and PUT_DONE it posts stays in its queue
  // pair (8 + 8 x 258 would be 8 more than it holds).
  settle();
  for (sim::SimId* id : a.tr.ids()) id->held = true;
  answer(8);  // the first eight; the first returns their credits
  settle();
  for (sim::SimId* id : a.tr.ids()) {
    EXPECT_EQ(id->sends_outstanding, id->caps.max_send_wr - kFrags - 1 + 8);
    a.tr.release(id);
  }
  answer(0);  // the other eight
  settle();
  EXPECT_EQ(acked, kPuts);
  for (auto& tx : txs) EXPECT_EQ(a.upper->status_of(tx), 0);
  for (std::size_t i = 0; i < kPuts; ++i)
    for (std::size_t f = 0; f < kFrags; ++f)
      ASSERT_TRUE(std::equal(data.begin() + static_cast<std::ptrdiff_t>(f * kFrag),
                             data.begin() + static_cast<std::ptrdiff_t>((f + 1) * kFrag),
                             sink.begin() + static_cast<std::ptrdiff_t>(2 * (i * kFrags + f) * kFrag)))
          << i << " " << f;
  EXPECT_EQ(a.node->stats().tx_msgs[slot(MsgType::put_done)], kPuts);
  r.tr.deregister(sink_region);
  r.close();
  settle();
}

}  // namespace
}  // namespace lnetr::o2ib
