// socklnd over the dataplane's own TCP (dataplane/sock_transport.hpp): two
// socklnd Nodes with their acceptors, each on a tcp::Stack, the stacks
// joined by an Ethernet link in memory.  The engine is the one that runs on
// kernel sockets; here it handshakes, types its connections, carries PUTs
// of every size both ways intact, and sees a peer's death.
#include "dataplane/sock_transport.hpp"

#include <gtest/gtest.h>
#include <sys/epoll.h>

#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "lnd/socklnd/acceptor.hpp"
#include "lnd/socklnd/engine.hpp"
#include "tests/support/lnd_tx.hpp"

namespace lnetr::tcp {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<std::uint8_t>;
using dp::SockTransport;
using dp::SockTransportStats;

const Nid kA = *parse_nid("10.0.0.1@tcp");
const Nid kB = *parse_nid("10.0.0.2@tcp");

Time now() { return lnd::Clock::now().time_since_epoch(); }

Bytes pattern(std::size_t n, std::uint8_t seed) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(seed + i * 7 + (i >> 9));
  return b;
}

class Recorder final : public lnd::Upper {
 public:
  struct Got {
    Nid from;
    Bytes payload;
    lnd::RefChain* chain = nullptr;  // keep_chains: its chain, if it had one
  };
  std::vector<Got> got;
  std::map<const lnd::Tx*, int> sent;
  std::vector<Nid> down;
  std::deque<Bytes> buffers;
  // Payloads of 4 KiB+ received by reference where the stream may (as the
  // router's large ones): each read back out of its chain's pieces.
  bool chains = false;
  std::size_t chain_min = 4097;  // ... of this many bytes or more
  bool keep_chains = false;  // on_received leaves them for the test (as the router, to send on)
  std::deque<lnd::RefChain> rx_chains;
  std::size_t referenced = 0;  // payload bytes that came by reference
  lnd::RxVerdict on_head(lnd::Rx& rx) override {
    buffers.emplace_back(rx.hdr.payload_length);
    rx.sink = buffers.back();
    rx.cookie = &buffers.back();
    if (chains && rx.hdr.payload_length >= chain_min) {
      rx_chains.emplace_back();
      rx_chains.back().reset(buffers.back().data(), buffers.back().size(), nullptr);
      rx.chain = &rx_chains.back();
    }
    return lnd::RxVerdict::accept;
  }
  void on_received(lnd::Rx& rx) override {
    auto& buf = *static_cast<Bytes*>(rx.cookie);
    if (rx.chain) {
      Bytes whole;
      for (const auto& p : rx.chain->pieces()) whole.insert(whole.end(), p.data, p.data + p.len);
      referenced += rx.chain->referenced();
      if (!keep_chains) rx.chain->release();
      buf = std::move(whole);
    }
    got.push_back({rx.from, buf, keep_chains ? rx.chain : nullptr});
  }
  void on_rx_aborted(lnd::Rx&) override {}
  std::function<void(lnd::Tx&, int)> on_sent_hook;  // e.g. the owner reusing its buffer
  void on_sent(lnd::Tx& tx, int status) override {
    sent[&tx] = status;
    if (on_sent_hook) on_sent_hook(tx, status);
  }
  void on_peer_down(const Nid& peer) override { down.push_back(peer); }
};

// Received frames as a DPDK port keeps them (dataplane/tcp/port.hpp), on the
// heap: each is freed by its last reference, at most `budget` references
// are taken by retain(), and `live` counts the frames not yet freed.
struct KeptFrames final : lnd::FrameRefs {
  struct Frame {
    Bytes bytes;
    int refs = 1;  // the delivery's
  };
  std::size_t budget = SIZE_MAX, held = 0, refused = 0, live = 0, holds = 0;
  bool retain(void* f) noexcept override {
    if (held >= budget) {
      ++refused;
      return false;
    }
    share(f);
    return true;
  }
  bool hold(void* f) noexcept override {  // (every dev here is a frame: buffers have none)
    if (!retain(f)) return false;
    ++holds;
    return true;
  }
  void share(void* f) noexcept override {
    ++static_cast<Frame*>(f)->refs;
    ++held;
  }
  void release(void* f) noexcept override {
    --held;
    drop(static_cast<Frame*>(f));
  }
  void drop(Frame* f) noexcept {
    if (--f->refs == 0) {
      delete f;
      --live;
    }
  }
};

struct Wire;

// One host: a port on the wire, its stack, transport, socklnd Node and acceptor.
struct Host : Port {
  Wire* wire = nullptr;
  int index = 0;
  sock::Poller poller;  // unused by these streams; the Node wants one
  Recorder upper;
  std::unique_ptr<Stack> stack;
  std::unique_ptr<SockTransport> transport;
  std::unique_ptr<sock::Node> node;
  std::unique_ptr<sock::Acceptor> acceptor;
  void send(ByteSpan frame) override;

  void start(const Nid& self, const Mac& mac, const sock::Options& opts = {}, KeptFrames* kept = nullptr) {
    StackConfig c;
    c.mac = mac;
    c.ip = IpAddr::of(self);
    c.mtu = 1500;
    c.conn.time_wait = 500ms;  // graceful closes linger this long
    stack = std::make_unique<Stack>(c, *this);
    transport = std::make_unique<SockTransport>(*stack, sock::kAcceptPort,
                                                [this](std::unique_ptr<sock::Stream> s) { acceptor->take(std::move(s)); });
    transport->set_now(now());  // what the Node does before the first poll happens now
    if (kept) transport->set_frame_refs(kept);
    const std::vector<sock::LocalNi> nis{{self, transport.get()}};
    node = std::make_unique<sock::Node>(opts, nis, sock::new_incarnation(), poller, upper);
    acceptor = std::make_unique<sock::Acceptor>(opts, nis, node->incarnation(), poller,
                                                [this](sock::Accepted&& a) { node->adopt(std::move(a)); });
    std::string err;
    EXPECT_TRUE(acceptor->listen(err)) << err;  // no kernel listener: the NI has a transport
  }
  // The host goes away at once, as in a crash: the stack forgets its
  // connections without a word on the wire.
  void crash();
  // socklnd shuts down; the stack stays to finish the closes.
  void stop() {
    acceptor.reset();
    node->shutdown();
    node->reap();
    node.reset();
  }
};

struct Wire {
  std::deque<std::pair<int, Bytes>> frames;  // (to, frame)
  // Host 1 keeps the frames it receives (set_frame_refs) when set.
  KeptFrames* kept = nullptr;
  bool up = true;
  // Loss: every n-th frame of more than 100 bytes towards host 1 (0: none).
  unsigned drop_every = 0;
  unsigned seen = 0, dropped = 0;
  // Loss of the first sending of every short frame (a message's last few
  // bytes) towards host 1.
  bool drop_short_once = false;
  std::set<std::uint32_t> short_seqs;
  Host hosts[2];
  explicit Wire(const sock::Options& opts = {}, KeptFrames* keep = nullptr) : kept(keep) {
    for (int i = 0; i < 2; ++i) {
      hosts[i].wire = this;
      hosts[i].index = i;
    }
    hosts[0].start(kA, {2, 0, 0, 0, 0, 0xa}, opts);
    hosts[1].start(kB, {2, 0, 0, 0, 0, 0xb}, opts, kept);
  }
  void spin() {
    const Time t = now();
    for (int round = 0; round < 64 && !frames.empty(); ++round) {
      auto [to, f] = std::move(frames.front());
      frames.pop_front();
      if (kept && to == 1) {  // delivered with its reference, which the delivery then drops
        auto* frame = new KeptFrames::Frame{std::move(f)};
        ++kept->live;
        hosts[to].stack->receive(frame->bytes, t, false, frame);
        kept->drop(frame);
        continue;
      }
      hosts[to].stack->receive(f, t);
    }
    for (Host& h : hosts) {
      h.transport->poll(t);
      h.stack->tick(t);
      if (!h.node) continue;
      h.node->flush();
      h.node->tick(lnd::Clock::now());
      h.acceptor->tick(lnd::Clock::now());
      h.node->reap();
      h.acceptor->reap();
    }
  }
  // A bare stream pair (no socklnd) through a listener on `port` of host 1
  // (which replaces its socklnd transport): {client, server}, or nulls.
  std::pair<std::unique_ptr<sock::Stream>, std::unique_ptr<sock::Stream>> stream_pair(std::uint16_t port);
  bool pump(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
    const auto end = lnd::Clock::now() + limit;
    while (lnd::Clock::now() < end) {
      spin();
      if (done()) return true;
    }
    return done();
  }
};

std::pair<std::unique_ptr<sock::Stream>, std::unique_ptr<sock::Stream>> Wire::stream_pair(std::uint16_t port) {
  auto server = std::make_shared<std::unique_ptr<sock::Stream>>();
  hosts[1].transport = std::make_unique<SockTransport>(
      *hosts[1].stack, port, [server](std::unique_ptr<sock::Stream> s) { *server = std::move(s); });
  if (kept) hosts[1].transport->set_frame_refs(kept);
  int err = 0;
  auto client = hosts[0].transport->connect(sock::IpAddr::of(kA), sock::IpAddr::of(kB), port, err);
  if (!client || !pump([&] { return *server != nullptr; })) return {};
  return {std::move(client), std::move(*server)};
}

void Host::crash() {
  wire->up = false;
  acceptor.reset();
  node->shutdown();
  node->reap();
  node.reset();
  wire->up = true;
  transport.reset();  // it stops listening on the stack
  stack.reset();
}

void Host::send(ByteSpan frame) {
  if (!wire->up) return;
  if (wire->drop_short_once && index == 0 && frame.size() > 66 && frame.size() <= 66 + 72) {
    const std::uint32_t seq = load_be<std::uint32_t>(frame.data() + 14 + 20 + 4);  // Ethernet, IPv4, TCP's seq
    if (wire->short_seqs.insert(seq).second) {
      ++wire->dropped;
      return;
    }
  }
  if (wire->drop_every && index == 0 && frame.size() > 100 && ++wire->seen % wire->drop_every == 0) {
    ++wire->dropped;
    return;
  }
  wire->frames.emplace_back(1 - index, Bytes(frame.begin(), frame.end()));
}

using test::make_put;

TEST(SockTransport, PutsOfEverySizeBothWaysIntact) {
  Wire w;
  Host& a = w.hosts[0];
  Host& b = w.hosts[1];
  const std::vector<std::size_t> sizes = {0, 1, 100, 4095, 4096, 65536, 1048575, 1 << 20};  // LNet carries at most 1 MiB
  std::deque<Bytes> payloads;
  std::deque<lnd::Tx> txs;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    payloads.push_back(pattern(sizes[i], static_cast<std::uint8_t>(i)));
    txs.push_back(make_put(kA, kB, payloads.back()));
    ASSERT_EQ(a.node->send(kB, txs.back()), 0);
    payloads.push_back(pattern(sizes[i], static_cast<std::uint8_t>(100 + i)));
    txs.push_back(make_put(kB, kA, payloads.back()));
    ASSERT_EQ(b.node->send(kA, txs.back()), 0);
  }
  ASSERT_TRUE(w.pump([&] { return a.upper.got.size() == sizes.size() && b.upper.got.size() == sizes.size(); }))
      << "A got " << a.upper.got.size() << ", B got " << b.upper.got.size() << [&] {
           std::string r;
           for (auto& g : b.upper.got) r += " " + std::to_string(g.payload.size());
           for (std::uint16_t lp = 1023; lp > 1010; --lp) {
             Conn* c = a.stack->connection(IpAddr::of(kB), 988, lp);
             if (c) r += " [A:" + std::to_string(lp) + " st=" + std::string(name(c->state())) + " q=" + std::to_string(c->queued()) + " cwnd=" + std::to_string(c->cwnd()) + " rto=" + std::to_string(c->rto().count()) + "]";
             Conn* d = b.stack->connection(IpAddr::of(kA), lp, 988);
             if (d) r += " [B:" + std::to_string(lp) + " st=" + std::string(name(d->state())) + " q=" + std::to_string(d->queued()) + " held=" + std::to_string(d->held_bytes()) + "]";
           }
           for (int h = 0; h < 2; ++h)
             for (std::size_t k = 0; k < sock::kCloseReasonCount; ++k)
               if (w.hosts[h].node->stats().closed[k]) r += " " + std::to_string(h) + ":" + std::string(sock::name(static_cast<sock::CloseReason>(k))) + "=" + std::to_string(w.hosts[h].node->stats().closed[k]);
           for (int h = 0; h < 2; ++h)
             for (std::size_t k = 0; k < sock::kCloseReasonCount; ++k)
               if (w.hosts[h].acceptor->refused()[k]) r += " acc" + std::to_string(h) + ":" + std::string(sock::name(static_cast<sock::CloseReason>(k))) + "=" + std::to_string(w.hosts[h].acceptor->refused()[k]);
           r += " | a sent:";
           for (auto& [tx, st] : a.upper.sent) r += " " + std::to_string(tx->payload.size()) + "=" + std::to_string(st);
           return r;
         }();
  // In order per direction only for messages on the same connection: match by size.
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const Bytes& to_b = payloads[2 * i];
    const Bytes& to_a = payloads[2 * i + 1];
    EXPECT_TRUE(std::any_of(b.upper.got.begin(), b.upper.got.end(), [&](const Recorder::Got& g) { return g.payload == to_b; }))
        << "size " << sizes[i] << " A->B";
    EXPECT_TRUE(std::any_of(a.upper.got.begin(), a.upper.got.end(), [&](const Recorder::Got& g) { return g.payload == to_a; }))
        << "size " << sizes[i] << " B->A";
  }
  for (const auto& g : b.upper.got) EXPECT_EQ(g.from, kA);
  ASSERT_TRUE(w.pump([&] { return a.upper.sent.size() == txs.size() / 2 && b.upper.sent.size() == txs.size() / 2; }));
  for (const auto& [tx, status] : a.upper.sent) EXPECT_EQ(status, 0);
  // Linux's typed set: each side has CONTROL, BULK_IN and BULK_OUT to the other.
  ASSERT_TRUE(w.pump([&] {
    auto p = a.node->peers();
    return p.size() == 1 && p[0].conns[1] >= 1 && p[0].conns[2] >= 1 && p[0].conns[3] >= 1;
  }));
  EXPECT_GT(a.transport->stats().connects, 0u);
  EXPECT_GT(b.transport->stats().accepted, 0u);
  // Received payload is copied once (into the sink); sent payload is lent.
  EXPECT_GE(a.transport->stats().bytes_copied, 2u * (1u << 20));
  EXPECT_EQ(a.node->stats().closed[static_cast<std::size_t>(sock::CloseReason::bad_message)], 0u);
}

TEST(SockTransport, APeerThatRestartsResetsTheOldConnectionsAndIsReachedAgain) {
  Wire w;
  Host& a = w.hosts[0];
  Bytes p1 = pattern(1000, 1);
  lnd::Tx first = make_put(kA, kB, p1);
  ASSERT_EQ(a.node->send(kB, first), 0);
  ASSERT_TRUE(w.pump([&] { return w.hosts[1].upper.got.size() == 1; }));
  // B crashes and comes back with the same address: its stack knows none
  // of A's connections and resets them when A next sends.
  w.hosts[1].crash();
  w.hosts[1].start(kB, {2, 0, 0, 0, 0, 0xb});
  Bytes p2 = pattern(200000, 2);
  lnd::Tx second = make_put(kA, kB, p2);
  ASSERT_EQ(a.node->send(kB, second), 0);
  ASSERT_TRUE(w.pump([&] { return a.node->stats().closed[static_cast<std::size_t>(sock::CloseReason::peer_reset)] > 0; }));
  // A reconnects to the new B for a later message (sends fail with -EIO
  // while A backs off after a failed connect, as Linux's do).
  Bytes p3 = pattern(300000, 3);
  lnd::Tx third = make_put(kA, kB, p3);
  ASSERT_TRUE(w.pump([&] { return a.upper.sent.count(&second) == 1; }));
  ASSERT_TRUE(w.pump([&] { return a.node->send(kB, third) == 0; }));
  ASSERT_TRUE(w.pump([&] {
    const auto& got = w.hosts[1].upper.got;
    return std::any_of(got.begin(), got.end(), [&](const Recorder::Got& g) { return g.payload == p3; });
  }, 20s));
}

TEST(SockTransport, ClosedStreamsAreFreed) {
  Wire w;
  Host& a = w.hosts[0];
  Bytes p = pattern(5000, 3);
  lnd::Tx t = make_put(kA, kB, p);
  ASSERT_EQ(a.node->send(kB, t), 0);
  ASSERT_TRUE(w.pump([&] { return w.hosts[1].upper.got.size() == 1; }));
  ASSERT_GT(a.transport->links(), 0u);
  a.stop();
  w.hosts[1].stop();
  ASSERT_TRUE(w.pump([&] { return a.transport->links() == 0 && w.hosts[1].transport->links() == 0; }))
      << a.transport->links() << " and " << w.hosts[1].transport->links() << " links left; A has "
      << a.stack->connections() << " connections, B " << w.hosts[1].stack->connections();
}

}  // namespace
}  // namespace lnetr::tcp

namespace lnetr::tcp {
namespace {

struct Catcher final : sock::IoHandler {
  std::uint32_t events = 0;
  void on_io(std::uint32_t e) override { events |= e; }
};

TEST(SockTransport, StreamCarriesBytesInOrder) {
  Wire w;
  auto streams = w.stream_pair(7000);
  auto& client = streams.first;
  auto& server = streams.second;
  ASSERT_TRUE(client && server);
  Catcher cc, sc;
  client->watch(&cc);
  server->watch(&sc);
  const Bytes data = pattern(6 << 20, 9);
  std::size_t sent = 0, got = 0, bad = 0;
  Bytes buf(100000);
  ASSERT_TRUE(w.pump([&] {
    while (sent < data.size()) {
      iovec iov[2] = {{const_cast<std::uint8_t*>(data.data()) + sent, std::min<std::size_t>(70001, data.size() - sent)},
                      {nullptr, 0}};
      const ssize_t n = client->sendv(iov, 1);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    for (;;) {
      const ssize_t n = server->recv(buf.data(), 1 + (got % 99991));
      if (n <= 0) break;
      for (ssize_t i = 0; i < n; ++i) bad += buf[static_cast<std::size_t>(i)] != data[got + static_cast<std::size_t>(i)];
      got += static_cast<std::size_t>(n);
    }
    return got == data.size();
  }));
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace lnetr::tcp

namespace lnetr::tcp {
namespace {

// Write what the stream takes of `data` from `sent` on.
void send_some(sock::Stream& client, const Bytes& data, std::size_t& sent) {
  while (sent < data.size()) {
    iovec iov{const_cast<std::uint8_t*>(data.data()) + sent, data.size() - sent};
    const ssize_t n = client.sendv(&iov, 1);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
}

// A reader that lends its buffer whenever the stream is empty gets the
// bytes placed there directly: in order, intact, copied once.
TEST(SockTransport, LentMemoryIsFilledDirectly) {
  Wire w;
  auto streams = w.stream_pair(7001);
  auto& client = streams.first;
  auto& server = streams.second;
  ASSERT_TRUE(client && server);
  const Bytes data = pattern(3 << 20, 5);
  Bytes sink(data.size());
  std::size_t sent = 0, got = 0, lends = 0;
  ASSERT_TRUE(w.pump([&] {
    send_some(*client, data, sent);
    for (;;) {
      const ssize_t n = server->recv(sink.data() + got, sink.size() - got);
      if (n == -EAGAIN) {
        lends += server->lend(sink.data() + got, sink.size() - got, nullptr);
        break;
      }
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    return got == data.size();
  }));
  EXPECT_EQ(sink, data);
  EXPECT_GT(lends, 0u);
  // Every byte crossed into the sink once, never through the ring and out again.
  EXPECT_LT(w.hosts[1].transport->stats().bytes_copied, data.size() + data.size() / 4);
}

}  // namespace
}  // namespace lnetr::tcp

namespace lnetr::tcp {
namespace {

// A connection the acceptor refuses is closed; data the peer sends after
// that is answered with a reset (as Linux answers data on a closed socket),
// and nothing of it is kept.
TEST(SockTransport, DataAfterARefusalIsReset) {
  Wire w;
  Host& a = w.hosts[0];
  Host& b = w.hosts[1];
  int err = 0;
  auto client = a.transport->connect(sock::IpAddr::of(kA), sock::IpAddr::of(kB), sock::kAcceptPort, err);
  ASSERT_TRUE(client);
  Catcher cc;
  client->watch(&cc);
  ASSERT_TRUE(w.pump([&] { return (cc.events & EPOLLOUT) != 0; }));
  Bytes junk(64, 0x5a);  // not an acceptor request
  iovec iov{junk.data(), junk.size()};
  ASSERT_EQ(client->sendv(&iov, 1), 64);
  ASSERT_TRUE(w.pump([&] {
    return b.acceptor->refused()[static_cast<std::size_t>(sock::CloseReason::bad_acceptor)] == 1;
  }));
  Bytes more(100000, 1);
  iovec iov2{more.data(), more.size()};
  (void)client->sendv(&iov2, 1);
  ssize_t last = 0;
  ASSERT_TRUE(w.pump([&] {
    last = client->recv(more.data(), more.size());
    return last < 0 && last != -EAGAIN;
  }));
  EXPECT_EQ(last, -ECONNRESET);  // what was sent is not kept: the connection is reset
  ASSERT_TRUE(w.pump([&] { return b.transport->links() == 0 && b.stack->connections() == 0; }))
      << b.transport->links() << " links, " << b.stack->connections() << " connections left";
}

}  // namespace
}  // namespace lnetr::tcp

namespace lnetr::tcp {
namespace {

// The connections A opened to B.
std::vector<Conn*> outgoing(Host& a) {
  std::vector<Conn*> r;
  for (std::uint16_t lp = 1023; lp > 1000; --lp)
    if (Conn* c = a.stack->connection(IpAddr::of(kB), sock::kAcceptPort, lp)) r.push_back(c);
  return r;
}

// Bytes A's connections to B hold lent.
std::size_t lent_to_b(Host& a) {
  std::size_t n = 0;
  for (Conn* c : outgoing(a)) n += c->lent();
  return n;
}

// A message goes out from the sender's memory, not a copy of it: the
// connection holds it lent, the sender gets it back (on_sent) only once B
// acknowledged it, and the frames lost on the way are resent from it.
TEST(SockTransport, SentMessagesAreLentUntilAcknowledged) {
  Wire w;
  Host& a = w.hosts[0];
  Host& b = w.hosts[1];
  w.drop_every = 13;
  const Bytes payload = pattern(1 << 20, 9);
  lnd::Tx tx = make_put(kA, kB, payload);
  ASSERT_EQ(a.node->send(kB, tx), 0);
  ASSERT_TRUE(w.pump([&] { return lent_to_b(a) > 0; }));
  EXPECT_EQ(a.upper.sent.count(&tx), 0u) << "handed back while the connection still reads it";
  ASSERT_TRUE(w.pump([&] { return a.upper.sent.count(&tx) == 1; })) << [&] {
    std::string r = "B got " + std::to_string(b.upper.got.size()) + " dropped " + std::to_string(w.dropped);
    for (Conn* c : outgoing(a))
      r += " [" + std::string(name(c->state())) + " q=" + std::to_string(c->queued()) + " lent=" + std::to_string(c->lent()) +
           " rexmit=" + std::to_string(c->stats().retransmits) + " rto=" + std::to_string(c->stats().timeouts) + " fr=" + std::to_string(c->stats().fast_retransmits) + " cwnd=" + std::to_string(c->cwnd()) + " ssth=" + std::to_string(c->ssthresh()) + " rto_ms=" + std::to_string(c->rto().count() / 1000000) + "]";
    return r;
  }();
  EXPECT_EQ(a.upper.sent[&tx], 0);
  EXPECT_EQ(lent_to_b(a), 0u);
  ASSERT_EQ(b.upper.got.size(), 1u);
  EXPECT_EQ(b.upper.got[0].payload, payload);
  EXPECT_GT(w.dropped, 5u);
  std::uint64_t retransmits = 0;
  for (Conn* c : outgoing(a)) retransmits += c->stats().retransmits + c->stats().fast_retransmits;
  EXPECT_GT(retransmits, 0u);
  // A copied only handshake and control bytes, none of the 1 MiB.
  EXPECT_LT(a.transport->stats().bytes_copied, 4096u);
}

// socklnd closing a connection gracefully with lent bytes unacknowledged
// gets its memory back at once: the connection copies what it still needs
// and finishes on its own.
TEST(SockTransport, AGracefulCloseCopiesWhatWasLent) {
  Wire w;
  auto streams = w.stream_pair(7002);
  auto& client = streams.first;
  auto& server = streams.second;
  ASSERT_TRUE(client && server);
  ASSERT_TRUE(client->lends());
  auto data = std::make_unique<Bytes>(pattern(200000, 3));
  const Bytes expect = *data;
  iovec iov{data->data(), data->size()};
  const bool lend = true;
  const ssize_t n = client->sendv_lent(&iov, 1, &lend, nullptr);
  ASSERT_GT(n, 0);
  EXPECT_LT(client->released(), static_cast<std::uint64_t>(n));
  const std::uint64_t copied = w.hosts[0].transport->stats().bytes_copied;
  client.reset();  // graceful: the connection finishes alone
  EXPECT_GE(w.hosts[0].transport->stats().bytes_copied, copied + 1);
  std::fill(data->begin(), data->end(), std::uint8_t{0});
  data.reset();  // the memory is gone
  Bytes got(expect.size());
  std::size_t off = 0;
  ASSERT_TRUE(w.pump([&] {
    for (;;) {
      const ssize_t k = server->recv(got.data() + off, got.size() - off);
      if (k <= 0) break;
      off += static_cast<std::size_t>(k);
    }
    return off == static_cast<std::size_t>(n);
  }));
  got.resize(off);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), expect.begin()));
}

// A peer that stops acknowledging (gone without a reset) does not hold the
// sender's memory for as long as TCP retries: like a message waiting for a
// zero-copy ACK in Linux's socklnd, one unacknowledged for sock_timeout
// closes the connection, and the message is handed back.
TEST(SockTransport, AMessageUnacknowledgedForTheTimeoutClosesTheConnection) {
  sock::Options opts;
  opts.timeout = 2s;
  Wire w(opts);
  Host& a = w.hosts[0];
  const Bytes payload = pattern(1 << 20, 4);
  lnd::Tx tx = make_put(kA, kB, payload);
  ASSERT_EQ(a.node->send(kB, tx), 0);
  ASSERT_TRUE(w.pump([&] { return lent_to_b(a) > 0; }));
  w.up = false;  // B is gone: nothing more crosses
  const auto start = lnd::Clock::now();
  ASSERT_TRUE(w.pump([&] { return a.upper.sent.count(&tx) == 1; }, 8s));
  EXPECT_GE(lnd::Clock::now() - start, 1s);
  EXPECT_GE(a.node->stats().closed[static_cast<std::size_t>(sock::CloseReason::timeout)], 1u);
  EXPECT_EQ(lent_to_b(a), 0u);
}

// A message is handed back only when none of it is lent any more, counting
// the handshake bytes the stream carried first: with the last bytes of
// each message lost once (and resent from the lent memory), an owner that
// reuses its buffer the moment it gets it back still has every message
// delivered intact.  (Handshake bytes once left out of the count made the
// engine hand messages back up to 72 bytes early.)
TEST(SockTransport, AMessageIsHandedBackOnlyWhenNoneOfItIsLent) {
  Wire w;
  Host& a = w.hosts[0];
  Host& b = w.hosts[1];
  w.drop_short_once = true;
  std::size_t early = 0;
  a.upper.on_sent_hook = [&](lnd::Tx& tx, int status) {
    if (status != 0) return;
    early += lent_to_b(a) > 0;
    auto* p = const_cast<std::uint8_t*>(tx.payload.data());
    std::fill(p, p + tx.payload.size(), std::uint8_t{0xee});
  };
  std::mt19937 rng(1);
  std::size_t corrupt = 0;
  for (int i = 0; i < 100; ++i) {
    Bytes payload = pattern(1 + rng() % 20000, static_cast<std::uint8_t>(i));
    const Bytes expect = payload;
    lnd::Tx tx = make_put(kA, kB, payload);
    ASSERT_EQ(a.node->send(kB, tx), 0);
    const std::size_t before = b.upper.got.size();
    ASSERT_TRUE(w.pump([&] { return a.upper.sent.count(&tx) == 1 && b.upper.got.size() == before + 1; })) << i;
    corrupt += b.upper.got.back().payload != expect;
    a.upper.sent.erase(&tx);
  }
  EXPECT_GT(w.dropped, 10u);
  EXPECT_EQ(early, 0u);
  EXPECT_EQ(corrupt, 0u);
}

}  // namespace
}  // namespace lnetr::tcp

namespace lnetr::tcp {
namespace {

// A stream pair whose server side keeps the frames it receives.
struct KeptPair {
  KeptFrames kept;
  Wire w{{}, &kept};
  std::unique_ptr<sock::Stream> client, server;
  explicit KeptPair(std::uint16_t port, std::size_t budget = SIZE_MAX) {
    kept.budget = budget;
    std::tie(client, server) = w.stream_pair(port);
  }
  // Queue all of `data` on the client (it fits its send buffer).
  bool send(const Bytes& data) {
    iovec iov{const_cast<std::uint8_t*>(data.data()), data.size()};
    return client->sendv(&iov, 1) == static_cast<ssize_t>(data.size());
  }
  // Send `data` and read it as socklnd reads a payload received by
  // reference: `sink` lent with `chain` before every read.
  bool receive_by_reference(const Bytes& data) {
    sink.assign(data.size(), 0);
    chain.reset(sink.data(), sink.size(), nullptr);
    std::size_t sent = 0, got = 0;
    return w.pump([&] {
      send_some(*client, data, sent);
      for (;;) {
        (void)server->lend(sink.data() + got, sink.size() - got, &chain);
        const ssize_t n = server->recv(sink.data() + got, sink.size() - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      return got == data.size();
    });
  }
  Bytes sink;
  lnd::RefChain chain;
};

Bytes whole(lnd::RefChain& chain) {
  Bytes out;
  for (const auto& p : chain.pieces()) out.insert(out.end(), p.data, p.data + p.len);
  return out;
}

// A payload lent with a chain stays in the frames it arrived in: the
// pieces read back intact, almost nothing is copied, and every frame is
// freed once the chain lets go.
TEST(SockTransport, APayloadLentWithAChainStaysInItsFrames) {
  KeptPair t(7002);
  ASSERT_TRUE(t.client && t.server);
  KeptFrames& kept = t.kept;
  lnd::RefChain& chain = t.chain;
  const Bytes data = pattern(1 << 20, 3);
  ASSERT_TRUE(t.receive_by_reference(data));
  EXPECT_EQ(whole(chain), data);
  const SockTransportStats& st = t.w.hosts[1].transport->stats();
  EXPECT_EQ(st.bytes_referenced, chain.referenced());
  EXPECT_GT(chain.referenced(), data.size() * 99 / 100);
  EXPECT_EQ(st.bytes_copied + st.bytes_referenced, data.size());
  EXPECT_GT(chain.pieces().size(), data.size() / 1460);  // (a piece per frame, and the gaps)
  EXPECT_EQ(kept.refused, 0u);
  EXPECT_GT(kept.live, 0u);
  chain.release();
  EXPECT_EQ(kept.held, 0u);
  EXPECT_EQ(kept.live, 0u);
}

// Beyond its budget of kept frames a stream copies: the payload is as
// intact, partly in the sink and partly by reference.
TEST(SockTransport, FramesBeyondTheBudgetAreCopied) {
  KeptPair t(7003, 50);
  ASSERT_TRUE(t.client && t.server);
  KeptFrames& kept = t.kept;
  lnd::RefChain& chain = t.chain;
  const Bytes data = pattern(1 << 20, 4);
  ASSERT_TRUE(t.receive_by_reference(data));
  EXPECT_EQ(whole(chain), data);
  EXPECT_GT(kept.refused, 0u);
  EXPECT_LE(kept.held, 50u);
  EXPECT_GT(chain.referenced(), 0u);
  EXPECT_LT(chain.referenced(), 50u * 1460);
  chain.release();
  EXPECT_EQ(kept.live, 0u);
}

// Bytes that came while nothing was lent wait in their frames; a sink lent
// later with a chain takes them by reference, and a plain read copies them
// out.  Either way they are intact, and no frame outlives its bytes.
TEST(SockTransport, QueuedFramesPassToALaterChainOrAreCopiedOut) {
  KeptPair t(7004);
  ASSERT_TRUE(t.client && t.server);
  const Bytes data = pattern(300000, 5);
  ASSERT_TRUE(t.send(data));
  ASSERT_TRUE(t.w.pump([&] { return t.kept.held >= (data.size() + 1447) / 1448; }));  // all of it, in full segments
  auto& server = t.server;
  // The first 1000 bytes read plainly (as socklnd reads a message head).
  Bytes head(1000);
  ASSERT_EQ(server->recv(head.data(), head.size()), 1000);
  EXPECT_TRUE(std::equal(head.begin(), head.end(), data.begin()));
  // The next 200,000 into a sink lent with a chain: all queued already.
  Bytes sink(200000);
  lnd::RefChain chain;
  chain.reset(sink.data(), sink.size(), nullptr);
  ASSERT_TRUE(server->lend(sink.data(), sink.size(), &chain));
  ASSERT_EQ(server->recv(sink.data(), sink.size()), 200000);
  EXPECT_TRUE(std::equal(data.begin() + 1000, data.begin() + 201000, whole(chain).begin()));
  EXPECT_GT(chain.referenced(), 190000u);
  // The rest read plainly, then everything let go.
  Bytes rest(data.size() - 201000);
  ASSERT_EQ(server->recv(rest.data(), rest.size()), static_cast<ssize_t>(rest.size()));
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), data.begin() + 201000));
  chain.release();
  EXPECT_EQ(t.kept.held, 0u);
  EXPECT_EQ(t.kept.live, 0u);
}

// A read into other memory than the lent sink gets the bytes all the same:
// what the chain holds of them is copied back first.
TEST(SockTransport, AReadElsewhereTakesBackWhatTheChainHeld) {
  KeptPair t(7005);
  ASSERT_TRUE(t.client && t.server);
  const Bytes data = pattern(100000, 6);
  Bytes sink(data.size());
  lnd::RefChain chain;
  chain.reset(sink.data(), sink.size(), nullptr);
  ASSERT_TRUE(t.server->lend(sink.data(), sink.size(), &chain));  // nothing queued: a plain loan
  ASSERT_TRUE(t.send(data));
  ASSERT_TRUE(t.w.pump([&] { return chain.referenced() == data.size(); }));
  Bytes other(data.size());
  ASSERT_EQ(t.server->recv(other.data(), other.size()), static_cast<ssize_t>(data.size()));
  EXPECT_EQ(other, data);
  EXPECT_EQ(chain.referenced(), 0u);
  EXPECT_EQ(t.kept.held, 0u);
  EXPECT_EQ(t.kept.live, 0u);
}

// A small payload received by reference and sent on from its frames (as
// the router forwards one) is not copied at all: the sending connection
// holds those frames itself, so the message is handed back at once (its
// owner releases its chain then) and the frames live on until the peer
// has acknowledged them.  Every payload arrives intact, every frame is
// freed in the end.
TEST(SockTransport, SmallPayloadsAreSentOnFromTheirFramesHeldBySendQueue) {
  KeptFrames kept;
  Wire w({}, &kept);
  Host& a = w.hosts[0];
  Host& b = w.hosts[1];
  b.stack->set_frame_refs(&kept);
  b.upper.chains = true;
  b.upper.chain_min = 1;
  b.upper.keep_chains = true;
  std::mt19937 rng(7);
  std::deque<Bytes> payloads;
  std::deque<lnd::Tx> txs;
  std::size_t total = 0;
  for (int i = 0; i < 40; ++i) {
    payloads.push_back(pattern(1 + rng() % 16000, static_cast<std::uint8_t>(i)));  // below zc_min_payload
    total += payloads.back().size();
    txs.push_back(make_put(kA, kB, payloads.back()));
    ASSERT_EQ(a.node->send(kB, txs.back()), 0);
  }
  ASSERT_TRUE(w.pump([&] { return b.upper.got.size() == payloads.size(); }));
  EXPECT_GT(b.upper.referenced, total * 95 / 100);
  // B sends each back from its chain's pieces, and lets go of the chain
  // the moment the message is handed back.
  std::deque<lnd::Tx> back;
  std::map<const lnd::Tx*, lnd::RefChain*> chain_of;
  std::size_t still_held = 0;
  b.upper.on_sent_hook = [&](lnd::Tx& tx, int status) {
    EXPECT_EQ(status, 0);
    chain_of.at(&tx)->release();
    still_held += kept.held > 0;  // the send queue's references, until the ACK
  };
  const SockTransportStats before = b.transport->stats();
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    ASSERT_NE(b.upper.got[i].chain, nullptr);
    lnd::RefChain& chain = *b.upper.got[i].chain;
    back.push_back(make_put(kB, kA, b.upper.got[i].payload));
    back.back().pieces = chain.pieces();
    chain_of[&back.back()] = &chain;
    ASSERT_EQ(b.node->send(kA, back.back()), 0);
  }
  ASSERT_TRUE(w.pump([&] { return a.upper.got.size() == payloads.size() && b.upper.sent.size() == back.size(); }));
  for (const Bytes& p : payloads)
    EXPECT_TRUE(std::any_of(a.upper.got.begin(), a.upper.got.end(), [&](const Recorder::Got& g) { return g.payload == p; }))
        << "size " << p.size();
  const SockTransportStats& after = b.transport->stats();
  EXPECT_GT(after.bytes_held - before.bytes_held, total * 95 / 100);
  EXPECT_LT(after.bytes_copied - before.bytes_copied, total / 20);  // (headers, and what came before a loan)
  EXPECT_GT(kept.holds, 0u);
  EXPECT_GT(still_held, 0u);
  ASSERT_TRUE(w.pump([&] { return kept.held == 0; }));
  EXPECT_EQ(kept.live, 0u);
}

// socklnd's engine decodes each message head where it lies in its frame:
// only heads split between two frames pass through the stage.
TEST(SockTransport, MessageHeadsAreDecodedInTheFramesTheyArrivedIn) {
  KeptFrames kept;
  Wire w({}, &kept);
  Host& a = w.hosts[0];
  Host& b = w.hosts[1];
  constexpr std::size_t kMsgs = 300;
  constexpr std::size_t kHead = 96;  // V3: socklnd's 24 bytes and LNet's 72
  std::deque<Bytes> payloads;
  std::deque<lnd::Tx> txs;
  std::size_t payload_bytes = 0;
  for (std::size_t i = 0; i < kMsgs; ++i) {
    payloads.push_back(pattern(i % 3 == 0 ? 0 : i % 200, static_cast<std::uint8_t>(i)));
    payload_bytes += payloads.back().size();
    txs.push_back(make_put(kA, kB, payloads.back()));
    ASSERT_EQ(a.node->send(kB, txs.back()), 0);
  }
  ASSERT_TRUE(w.pump([&] { return b.upper.got.size() == kMsgs; }));
  for (std::size_t i = 0; i < kMsgs; ++i) EXPECT_EQ(b.upper.got[i].payload, payloads[i]) << "message " << i;
  // Copied: the payloads (into their sinks), the handshake, and the heads
  // that straddled a frame boundary; a copy of every head would be 28,800
  // bytes more.
  const SockTransportStats& st = b.transport->stats();
  EXPECT_GE(st.bytes_copied, payload_bytes);
  EXPECT_LT(st.bytes_copied, payload_bytes + kMsgs * kHead / 4);
  ASSERT_TRUE(w.pump([&] { return kept.held == 0 && a.upper.sent.size() == txs.size(); }));
  EXPECT_EQ(kept.live, 0u);
}

// A head decoded in its frame is word from the peer, as a head read out of
// the stream is: 0-byte messages have no payload to read, and a peer that
// sends only those is alive (no keepalive due, no receive timeout).
TEST(SockTransport, AHeadDecodedInItsFrameIsHeardFromThePeer) {
  sock::Options opts;
  opts.keepalive = 1s;
  KeptFrames kept;
  Wire w(opts, &kept);
  Host& a = w.hosts[0];
  Host& b = w.hosts[1];
  std::deque<lnd::Tx> txs;
  const auto end = lnd::Clock::now() + 2500ms;
  while (lnd::Clock::now() < end) {
    txs.push_back(make_put(kA, kB, {}));
    ASSERT_EQ(a.node->send(kB, txs.back()), 0);
    const std::size_t n = txs.size();
    ASSERT_TRUE(w.pump([&] { return b.upper.got.size() == n; }));
    (void)w.pump([] { return false; }, 100ms);
  }
  EXPECT_GE(b.upper.got.size(), 15u);
  EXPECT_EQ(b.node->stats().keepalives_sent, 0u);
  ASSERT_TRUE(w.pump([&] { return kept.held == 0 && a.upper.sent.size() == txs.size(); }));
}

// socklnd's engine on a stream that keeps frames: large payloads arrive by
// reference (the head never passes the stage with payload behind it),
// every payload intact, every frame freed.
TEST(SockTransport, SocklndReceivesLargePayloadsByReference) {
  KeptFrames kept;
  Wire w({}, &kept);
  Host& a = w.hosts[0];
  Host& b = w.hosts[1];
  b.upper.chains = true;
  const std::vector<std::size_t> sizes = {0, 1, 4096, 4097, 65536, 1 << 20, 1 << 20, 300000};
  std::deque<Bytes> payloads;
  std::deque<lnd::Tx> txs;
  std::size_t large = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    payloads.push_back(pattern(sizes[i], static_cast<std::uint8_t>(i)));
    txs.push_back(make_put(kA, kB, payloads.back()));
    ASSERT_EQ(a.node->send(kB, txs.back()), 0);
    if (sizes[i] > 4096) large += sizes[i];
  }
  ASSERT_TRUE(w.pump([&] { return b.upper.got.size() == sizes.size(); }));
  for (const Bytes& p : payloads)
    EXPECT_TRUE(std::any_of(b.upper.got.begin(), b.upper.got.end(), [&](const Recorder::Got& g) { return g.payload == p; }))
        << "size " << p.size();
  EXPECT_GT(b.upper.referenced, large * 98 / 100);
  EXPECT_EQ(b.transport->stats().bytes_referenced, b.upper.referenced);
  ASSERT_TRUE(w.pump([&] { return kept.held == 0 && a.upper.sent.size() == txs.size(); }));  // (txs go before w)
  EXPECT_EQ(kept.live, 0u);
}

}  // namespace
}  // namespace lnetr::tcp
