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
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "router/local_msgs.hpp"
#include "tests/support/o2ib_fabric.hpp"

namespace lnetr::o2ib {
namespace {

using namespace std::chrono_literals;
using sim::Fabric;
using sim::SimTransport;

Nid nid(const char* s) { return *parse_nid(s); }

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


// A peer played by hand, as the tests of a kernel's reactions need: it
// connects with any private data (and keeps the reject it gets), or accepts
// with a CONNACK it builds, and sends raw messages on its connection while
// keeping whatever it receives.
class RawPeer final : public TransportEvents {
 public:
  RawPeer(Fabric& f, const char* nid_s, std::uint64_t incarnation = 0x5f1a2b3c4d5e6ull)
      : tr(f, "raw"), me(nid(nid_s)), stamp(incarnation) {
    tr.add_address(me.addr4());
    tr.attach(this);
    mem.resize(kBufs * kMaxMsgSize);
    tr.register_memory(mem.data(), mem.size(), false, region);
  }
  ~RawPeer() { tr.deregister(region); }

  // Connect to `to` with `private_data` (a CONNREQ, or anything).
  void connect(const Nid& to, std::vector<std::uint8_t> private_data, std::uint16_t from_port = 1023) {
    int err = 0;
    tr.next_port = from_port;
    id = static_cast<sim::SimId*>(tr.resolve(me.addr4(), to.addr4(), kServicePort, true, -1, err));
    pending = std::move(private_data);
    if (from_port >= 1024) id->local_port = from_port;
  }
  // Listen, and accept each request with a CONNACK of `qd` (0: the
  // request's) unless `refuse` says otherwise.
  void listen(std::uint16_t qd = 0) {
    tr.listen(me.addr4(), kServicePort, [this, qd](ConnRequest&& r) {
      requests.push_back(std::vector<std::uint8_t>(r.data.begin(), r.data.begin() + r.len));
      auto d = decode_msg(r.private_data());
      if (on_request) {
        if (on_request(r)) return;
      }
      if (!d) return;
      id = static_cast<sim::SimId*>(r.id);
      peer_stamp = d->msg.hdr.srcstamp;
      peer_nid = d->msg.hdr.srcnid;
      version = d->msg.hdr.version;
      const ConnParams cp = *d->msg.connparams();
      queue_depth = qd ? qd : cp.queue_depth;
      make_qp();
      Msg ack;
      ack.hdr = header(MsgType::connack);
      ack.body = ConnParams{queue_depth, cp.max_frags, kMaxMsgSize};
      std::vector<std::uint8_t> out(kConnMsgSize);
      (void)encode_msg(ack, out);
      ConnectParams p;
      p.private_data = ByteSpan(out.data(), out.size());
      tr.accept(id, p);
    });
  }
  MsgHeader header(MsgType t, std::uint8_t credits = 0) const {
    MsgHeader h;
    h.version = version;
    h.type = t;
    h.credits = credits;
    h.srcnid = me;
    h.srcstamp = stamp;
    h.dstnid = peer_nid;
    h.dststamp = peer_stamp;
    return h;
  }
  // Send raw bytes as one message on the connection.
  void send(std::vector<std::uint8_t> bytes) {
    std::uint8_t* b = mem.data() + (kBufs - 1 - (sends++ % 8)) * kMaxMsgSize;
    std::memcpy(b, bytes.data(), bytes.size());
    Sge sge{reinterpret_cast<std::uint64_t>(b), static_cast<std::uint32_t>(bytes.size()), region.lkey};
    SendWr wr;
    wr.wr_id = 1;
    wr.signaled = true;
    wr.sge = &sge;
    wr.num_sge = 1;
    tr.post_send(id, &wr, 1);
  }
  void send(const Msg& m) {
    std::vector<std::uint8_t> out(kMaxMsgSize);
    auto n = encode_msg(m, out);
    out.resize(n ? *n : 0);
    send(out);
  }
  // What it received, decoded.
  std::vector<Msg> messages() const {
    std::vector<Msg> out;
    for (const auto& b : got)
      if (auto d = decode_msg(b)) out.push_back(d->msg);
    return out;
  }

  // TransportEvents
  void on_resolved(CmId* cid, int status) override {
    if (status != 0) return;
    make_qp();
    ConnectParams p;
    p.private_data = ByteSpan(pending.data(), pending.size());
    tr.connect(cid, p);
  }
  void on_established(CmId*, ByteSpan private_data) override {
    established = true;
    connack.assign(private_data.begin(), private_data.end());
    if (auto d = decode_msg(private_data)) {
      peer_stamp = d->msg.hdr.srcstamp;
      peer_nid = d->msg.hdr.srcnid;
    }
  }
  void on_rejected(CmId*, RejectKind kind, ByteSpan private_data) override {
    rejected = true;
    reject_kind = kind;
    reject.assign(private_data.begin(), private_data.end());
  }
  void on_connect_error(CmId*, int) override {}
  void on_disconnected(CmId*) override { disconnected = true; }
  void on_completion(const WorkCompletion& wc) override {
    if (wc.op != WcOp::recv) return;
    if (wc.status != 0) return;
    auto* b = reinterpret_cast<std::uint8_t*>(wc.wr_id);
    got.emplace_back(b, b + wc.byte_len);
    RecvWr r;
    r.wr_id = wc.wr_id;
    r.sge = Sge{wc.wr_id, kMaxMsgSize, region.lkey};
    if (!id->error) tr.post_recv(id, r);
  }
  void close() {
    tr.disconnect(id);
  }

  static constexpr std::size_t kBufs = 48;
  SimTransport tr;
  Nid me;
  std::uint64_t stamp;
  std::vector<std::uint8_t> mem;
  Region region;
  sim::SimId* id = nullptr;
  std::vector<std::uint8_t> pending;
  std::uint16_t version = kVersion2;
  std::uint16_t queue_depth = 8;
  Nid peer_nid;
  std::uint64_t peer_stamp = 0;
  std::function<bool(ConnRequest&)> on_request;
  std::vector<std::vector<std::uint8_t>> requests;
  bool established = false, rejected = false, disconnected = false;
  RejectKind reject_kind = RejectKind::other;
  std::vector<std::uint8_t> reject, connack;
  std::vector<std::vector<std::uint8_t>> got;
  int sends = 0;

 private:
  void make_qp() {
    QpCaps caps;
    caps.max_send_wr = 4096;
    caps.max_recv_wr = 40;
    caps.max_send_sge = 30;
    tr.create_qp(id, caps);
    for (std::size_t i = 0; i < 40; ++i) {
      RecvWr r;
      std::uint8_t* b = mem.data() + i * kMaxMsgSize;
      r.wr_id = reinterpret_cast<std::uint64_t>(b);
      r.sge = Sge{r.wr_id, kMaxMsgSize, region.lkey};
      tr.post_recv(id, r);
    }
  }
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
  lnd::Tx put(const Host& from, const Host& to, const std::vector<std::uint8_t>& payload, std::uint64_t bits = 7) {
    lnd::Tx t;
    t.hdr = make_put({kPidLustre, from.me}, {kPidLustre, to.me}, 4, bits, WireHandle::none(), 0,
                     static_cast<std::uint32_t>(payload.size()));
    t.payload = payload;
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
  std::vector<std::uint8_t> sink(8192);
  lnd::Tx get;
  get.hdr = make_get({kPidLustre, a.me}, {kPidLustre, b.me}, 42, 9, WireHandle{1, 2}, 8192);
  get.reply_sink = sink;
  ASSERT_EQ(a.node->send(b.me, get), 0);
  settle();
  EXPECT_EQ(a.upper->status_of(get), -ENODATA);
  EXPECT_TRUE(a.upper->received.empty());
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
  a.tr.register_payload(const_cast<std::uint8_t*>(big.data()), big.size());
  lnd::Tx t3 = put(a, b, big, 3);
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
