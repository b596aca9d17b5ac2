// The socklnd engine over real kernel TCP sockets on loopback addresses:
// two lnetr Nodes talking to each other, and hand-written "kernel peers"
// (blocking sockets speaking the wire protocol byte by byte) that check the
// engine's handshakes, refusals, ZC-ACKs, keepalives and timeouts as a Linux
// node would see them.  Needs root (privileged source ports).
#include "lnd/socklnd/engine.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "lnd/socklnd/acceptor.hpp"
#include "lnd/socklnd/socket.hpp"
#include "tests/support/lnd_tx.hpp"
#include "tests/support/nid.hpp"

namespace lnetr::sock {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<std::uint8_t>;

using test::nid;

const Nid kA = nid("127.0.0.11@tcp");
const Nid kB = nid("127.0.0.12@tcp");
const Nid kKernel = nid("127.0.0.13@tcp");  // the hand-written peer
const Nid kNowhere = nid("127.0.0.14@tcp"); // nobody listens there

Bytes pattern(std::size_t n, std::uint8_t seed) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(seed + i * 7);
  return b;
}

// An Upper that keeps every payload it receives and every send status.
class Recorder final : public Upper {
 public:
  struct Got {
    Nid from;
    LnetHeader hdr;
    Bytes payload;
  };
  std::vector<Got> got;
  std::map<const Tx*, int> sent;
  std::vector<Nid> down;
  std::size_t aborted = 0;
  bool defer_all = false;
  std::deque<Rx> deferred;
  std::deque<Bytes> buffers;

  RxVerdict on_head(Rx& rx) override {
    if (defer_all) {
      deferred.push_back(rx);
      return RxVerdict::defer;
    }
    give_sink(rx);
    return RxVerdict::accept;
  }
  void give_sink(Rx& rx) {
    buffers.emplace_back(rx.hdr.payload_length);
    rx.sink = buffers.back();
    rx.cookie = &buffers.back();
  }
  void on_received(Rx& rx) override {
    const auto* b = static_cast<Bytes*>(rx.cookie);
    got.push_back({rx.from, rx.hdr, *b});
  }
  void on_rx_aborted(Rx&) override { ++aborted; }
  std::function<void(Tx&)> on_sent_hook;
  std::size_t sent_calls = 0;  // every on_sent(), to see each Tx handed back once
  void on_sent(Tx& tx, int status) override {
    ++sent_calls;
    sent[&tx] = status;
    if (on_sent_hook) on_sent_hook(tx);
  }
  void on_peer_down(const Nid& peer) override { down.push_back(peer); }
};

// A node with its acceptor on one poller, as lnetr-peer runs them.
struct TestNode {
  Recorder upper;
  std::unique_ptr<Node> node;
  std::unique_ptr<Acceptor> acceptor;

  TestNode(Poller& poller, const Nid& self, Options opts = {}) {
    node = std::make_unique<Node>(opts, std::vector<LocalNi>{{self}}, new_incarnation(), poller, upper);
    acceptor = std::make_unique<Acceptor>(opts, std::vector<LocalNi>{{self}}, node->incarnation(), poller,
                                          [this](Accepted&& a) { node->adopt(std::move(a)); });
    std::string err;
    EXPECT_TRUE(acceptor->listen(err)) << err;
  }
  bool ticking = true;  // false: the Node's timers stop (events still dispatched)
  void tick() {
    if (ticking) node->tick(Clock::now());
    acceptor->tick(Clock::now());
    node->reap();
    acceptor->reap();
  }
  std::uint64_t closed(CloseReason r) const { return node->stats().closed[static_cast<std::size_t>(r)]; }
  std::uint64_t refused(CloseReason r) const { return acceptor->refused()[static_cast<std::size_t>(r)]; }
};

class Engine : public ::testing::Test {
 protected:
  Poller poller;
  std::vector<TestNode*> nodes;

  void spin() {
    for (TestNode* n : nodes) n->node->flush();
    poller.poll(1);
    for (TestNode* n : nodes) n->tick();
  }
  std::function<void()> spinner() {
    return [this] { spin(); };
  }
  // Dispatch events until `done` or the time limit.
  bool pump(const std::function<bool()>& done, std::chrono::milliseconds limit = 5000ms) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      spin();
      if (done()) return true;
    }
    return done();
  }

  // A's first PUT to B, delivered, and A's typed connections to B all up.
  ::testing::AssertionResult warm_up(TestNode& a, TestNode& b, Tx& first) {
    if (a.node->send(kB, first) != 0) return ::testing::AssertionFailure() << "send refused";
    if (!pump([&] { return b.upper.got.size() == 1; })) return ::testing::AssertionFailure() << "not delivered";
    if (!pump([&] {
          auto p = a.node->peers();
          return p.size() == 1 && p[0].conns[3] == 1;
        }))
      return ::testing::AssertionFailure() << "connections not up";
    return ::testing::AssertionSuccess();
  }

  static Tx make_put(const Nid& from, const Nid& to, const Bytes& payload) { return test::make_put(from, to, payload); }
};

// A socket speaking socklnd by hand, as a kernel peer would.  Its reads
// keep the engine's poller turning (`spin`) so that one thread runs both.
class KernelPeer {
 public:
  KernelPeer(std::function<void()> spin, std::uint16_t src_port = 1000, const Nid& self = kKernel)
      : spin_(std::move(spin)), self_(self) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const SockAddr local = to_sockaddr({IpAddr::of(self), src_port});
    EXPECT_EQ(bind(fd_, local.get(), local.len), 0) << std::strerror(errno);
  }
  ~KernelPeer() { close(); }
  // Close; with `reset`, abortively (SO_LINGER 0: the kernel sends RST).
  void close(bool reset = false) {
    if (fd_ < 0) return;
    if (reset) {
      const linger l{1, 0};
      setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    ::close(fd_);
    fd_ = -1;
  }
  bool connect_to(const Nid& target) {
    const SockAddr a = to_sockaddr({IpAddr::of(target), kAcceptPort});
    return ::connect(fd_, a.get(), a.len) == 0;
  }
  void write(const Bytes& b) {
    ASSERT_EQ(::send(fd_, b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size()));
  }
  // Read exactly n bytes; fewer if the connection ends or `limit` passes.
  Bytes read(std::size_t n, std::chrono::milliseconds limit = 3000ms) {
    Bytes b(n);
    std::size_t got = 0;
    const auto end = Clock::now() + limit;
    while (got < n && Clock::now() < end) {
      const ssize_t r = ::recv(fd_, b.data() + got, n - got, MSG_DONTWAIT);
      if (r > 0) {
        got += static_cast<std::size_t>(r);
      } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        break;
      } else {
        spin_();
      }
    }
    b.resize(got);
    return b;
  }
  // True once the other end has closed (EOF or reset) within `limit`,
  // having sent nothing more.
  bool closed_without_data(std::chrono::milliseconds limit = 3000ms) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      std::uint8_t c;
      const ssize_t r = ::recv(fd_, &c, 1, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno == ECONNRESET)) return true;
      if (r > 0) return false;
      spin_();
    }
    return false;
  }
  static Bytes request(const Nid& target, std::uint32_t version = 1) {
    Bytes b(kAcceptorV2Size);
    store(b.data(), kAcceptorMagic, kNativeOrder);
    store(b.data() + 4, version, kNativeOrder);
    store(b.data() + 8, target.to_nid4(), kNativeOrder);
    b.resize(16);
    return b;
  }
  Hello hello(const Nid& target, ConnType type, std::uint64_t incarnation = 0x1122) const {
    Hello h;
    h.src_nid = self_;
    h.dst_nid = target;
    h.src_incarnation = incarnation;
    h.ctype = static_cast<std::int32_t>(type);
    return h;
  }
  static Bytes encode(const Hello& h) {
    Bytes b(256);
    auto n = encode_hello(h, b);
    b.resize(n ? *n : 0);
    return b;
  }
  void send_handshake(const Nid& target, const Hello& h) {
    Bytes out = request(target);
    const Bytes hb = encode(h);
    out.insert(out.end(), hb.begin(), hb.end());
    write(out);
  }
  // Connect and complete a V3 handshake; the engine's HELLO reply.
  Result<Hello> handshake(const Nid& target, ConnType type, std::uint64_t incarnation = 0x1122) {
    if (!connect_to(target)) return fail(WireError::truncated);
    send_handshake(target, hello(target, type, incarnation));
    return decode_hello(read(kHelloV2Size));
  }
  static Bytes lnet_msg(const Nid& from, const Nid& to, const Bytes& payload, std::uint64_t zc_cookie = 0) {
    Bytes b(kMsgHeaderSize + kLnetHeaderSize);
    (void)encode_msg_header({kMsgLnet, 0, zc_cookie, 0}, b, kNativeOrder);
    LnetHeader h;
    h.dest_nid = to;
    h.src_nid = from;
    h.payload_length = static_cast<std::uint32_t>(payload.size());
    h.set(PutFields{WireHandle::none(), 7, 0, 4, 0});
    (void)encode_header(h, MutableByteSpan(b).subspan(kMsgHeaderSize), HeaderForm::nid4);
    b.insert(b.end(), payload.begin(), payload.end());
    return b;
  }

 private:
  std::function<void()> spin_;
  Nid self_;
  int fd_ = -1;
};

TEST_F(Engine, FirstSendOpensTypedConnectionsAndDelivers) {
  TestNode a(poller, kA), b(poller, kB);
  nodes = {&a, &b};
  const Bytes small = pattern(100, 1), big = pattern(1 << 20, 2);
  Tx t1 = make_put(kA, kB, small), t2 = make_put(kA, kB, big);
  ASSERT_EQ(a.node->send(kB, t1), 0);
  ASSERT_EQ(a.node->send(kB, t2), 0);
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == 2 && a.upper.sent.size() == 2; }));
  EXPECT_EQ(a.upper.sent[&t1], 0);
  EXPECT_EQ(a.upper.sent[&t2], 0);
  EXPECT_EQ(b.upper.got[0].from, kA);
  // Both arrive intact; the small one may overtake the big one (they travel
  // on different connections, as with Linux).
  std::map<std::size_t, Bytes> by_size;
  for (auto& g : b.upper.got) by_size[g.payload.size()] = g.payload;
  EXPECT_EQ(by_size[small.size()], small);
  EXPECT_EQ(by_size[big.size()], big);
  // One CONTROL, one BULK_IN, one BULK_OUT, and the acceptor's inverse.
  ASSERT_TRUE(pump([&] {
    auto p = a.node->peers();
    return p.size() == 1 && p[0].conns[1] == 1 && p[0].conns[2] == 1 && p[0].conns[3] == 1;
  }));
  auto pb = b.node->peers();
  ASSERT_EQ(pb.size(), 1u);
  EXPECT_EQ(pb[0].conns[1], 1u);
  EXPECT_EQ(pb[0].conns[2], 1u);
  EXPECT_EQ(pb[0].conns[3], 1u);
  EXPECT_EQ(pb[0].version, 3u);
  EXPECT_EQ(pb[0].incarnation, a.node->incarnation());
}

// A node with two NIs on one net (Multi-Rail, as a gateway may be): a peer
// connected to each has connections of both NIs; a message from one of
// them leaves on that NI's connection, and one whose interface link is
// down comes last.
TEST_F(Engine, WithTwoNisOnANetAReplyLeavesFromItsNiAndADownLinkComesLast) {
  const Nid g1 = nid("127.0.0.21@tcp"), g2 = nid("127.0.0.22@tcp");
  Recorder gu;
  Node g(Options{}, std::vector<LocalNi>{{g1}, {g2}}, new_incarnation(), poller, gu);
  Acceptor ga(Options{}, std::vector<LocalNi>{{g1}, {g2}}, g.incarnation(), poller,
              [&g](Accepted&& a) { g.adopt(std::move(a)); });
  std::string err;
  ASSERT_TRUE(ga.listen(err)) << err;
  TestNode a(poller, kA);
  nodes = {&a};
  auto turn = [&] {
    g.flush();
    spin();
    g.tick(Clock::now());
    ga.tick(Clock::now());
    g.reap();
    ga.reap();
  };
  auto until = [&](const std::function<bool()>& done) {
    const auto end = Clock::now() + 5s;
    while (Clock::now() < end && !done()) turn();
    return done();
  };
  // A reaches the node at both of its NIDs: one peer there, with the
  // connections made to each NI.
  const Bytes p = pattern(64, 1);
  Tx to1 = make_put(kA, g1, p), to2 = make_put(kA, g2, p);
  ASSERT_EQ(a.node->send(g1, to1), 0);
  ASSERT_EQ(a.node->send(g2, to2), 0);
  ASSERT_TRUE(until([&] { return gu.got.size() == 2; }));
  ASSERT_TRUE(until([&] {
    const auto peers = g.peers();
    return peers.size() == 1 && peers[0].conns[1] == 2;  // a CONTROL connection of each NI
  }));
  // From g2: on g2's connection, so A hears it from g2 (A's peer g2).
  Tx from2 = make_put(g2, kA, p);
  ASSERT_EQ(g.send(kA, from2), 0);
  ASSERT_TRUE(until([&] { return a.upper.got.size() == 1; }));
  EXPECT_EQ(a.upper.got[0].from, g2);
  Tx from1 = make_put(g1, kA, p);
  ASSERT_EQ(g.send(kA, from1), 0);
  ASSERT_TRUE(until([&] { return a.upper.got.size() == 2; }));
  EXPECT_EQ(a.upper.got[1].from, g1);
  // g2's interface loses its link: even what g2 sends leaves on g1's.
  g.set_link(g2, false);
  Tx again = make_put(g2, kA, p);
  ASSERT_EQ(g.send(kA, again), 0);
  ASSERT_TRUE(until([&] { return a.upper.got.size() == 3; }));
  EXPECT_EQ(a.upper.got[2].from, g1);
  g.shutdown();
}

// A router forwarding from an IPv6 net: a header with a large NID needs
// V4's nid16 form, so the first connection to an IPv4 peer offers V4 (which
// Linux accepts from any address) and the NIDs arrive whole.
TEST_F(Engine, LargeNidsOpenV4ToAnIpv4Peer) {
  TestNode a(poller, kA), b(poller, kB);
  nodes = {&a, &b};
  const Nid v6 = nid("fd00:1::5@tcp1");
  const Bytes payload = pattern(5000, 3);
  Tx t = make_put(v6, kB, payload);
  ASSERT_EQ(a.node->send(kB, t), 0);
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == 1 && a.upper.sent.size() == 1; }));
  EXPECT_EQ(a.upper.sent[&t], 0);
  EXPECT_EQ(b.upper.got[0].hdr.src_nid, v6);
  EXPECT_EQ(b.upper.got[0].payload, payload);
  auto pb = b.node->peers();
  ASSERT_EQ(pb.size(), 1u);
  EXPECT_EQ(pb[0].version, 4u);
}

// Once a peer speaks V3 (64-bit NIDs), a large NID cannot be carried: the
// send is refused instead of truncating the NID as Linux's nid4 packing does.
TEST_F(Engine, LargeNidsAreRefusedToAV3Peer) {
  TestNode a(poller, kA), b(poller, kB);
  nodes = {&a, &b};
  const Bytes payload = pattern(100, 4);
  Tx first = make_put(kA, kB, payload);
  ASSERT_TRUE(warm_up(a, b, first));
  Tx t = make_put(nid("fd00:1::5@tcp1"), kB, payload);
  EXPECT_EQ(a.node->send(kB, t), -EAFNOSUPPORT);
  Tx t2 = make_put(kA, nid("fd00:1::6@tcp1"), payload);
  EXPECT_EQ(a.node->send(kB, t2), -EAFNOSUPPORT);
  pump([] { return false; }, 200ms);
  EXPECT_EQ(b.upper.got.size(), 1u);
}

TEST_F(Engine, AcceptedHandshakeAnswersLikeLinux) {
  TestNode b(poller, kB);
  nodes = {&b};
  KernelPeer k(spinner());
  auto reply = k.handshake(kB, ConnType::bulk_in, 0x77);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->version, 3u);
  EXPECT_EQ(reply->src_nid, kB);
  EXPECT_EQ(reply->dst_nid, kKernel);
  EXPECT_EQ(reply->src_pid, kPidLustre);
  EXPECT_EQ(reply->dst_pid, 0u);
  EXPECT_EQ(reply->src_incarnation, b.node->incarnation());
  EXPECT_EQ(reply->dst_incarnation, 0u);
  EXPECT_EQ(reply->conn_type(), ConnType::bulk_out);  // inverted
  EXPECT_EQ(reply->nips, 0u);
  EXPECT_EQ(b.node->stats().conns_accepted, 1u);
}

TEST_F(Engine, ZeroCopyRequestIsAckedOnceAfterThePayload) {
  TestNode b(poller, kB);
  nodes = {&b};
  KernelPeer k(spinner());
  ASSERT_TRUE(k.handshake(kB, ConnType::bulk_out));
  const Bytes payload = pattern(65536, 3);
  k.write(KernelPeer::lnet_msg(kKernel, kB, payload, 7));
  const Bytes ack = k.read(kMsgHeaderSize);
  ASSERT_EQ(ack.size(), kMsgHeaderSize);
  auto h = decode_msg_header(ack, kNativeOrder);
  ASSERT_TRUE(h);
  EXPECT_EQ(*h, make_zc_ack(7));
  ASSERT_EQ(b.upper.got.size(), 1u);
  EXPECT_EQ(b.upper.got[0].payload, payload);
  // Exactly once: nothing else follows.
  EXPECT_TRUE(k.read(1, 300ms).empty());
  EXPECT_EQ(b.node->stats().zc_acks_sent, 1u);
}

TEST_F(Engine, RefusesWhatLinuxRefuses) {
  TestNode b(poller, kB);
  nodes = {&b};
  {  // wrong acceptor magic: closed, nothing sent
    KernelPeer k(spinner(), 1001);
    ASSERT_TRUE(k.connect_to(kB));
    k.write({0x78, 0x56, 0x34, 0x12, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
    EXPECT_TRUE(k.closed_without_data());
  }
  {  // a HELLO first: the acceptor-format answer {magic, 1, 0}
    KernelPeer k(spinner(), 1002);
    ASSERT_TRUE(k.connect_to(kB));
    k.write(KernelPeer::encode(k.hello(kB, ConnType::control)));
    const Bytes answer = k.read(kAcceptorV1Size);
    auto r = decode_acceptor_request(answer);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->version, 1u);
    EXPECT_EQ(r->nid.to_nid4(), 0u);
    EXPECT_TRUE(k.closed_without_data());
  }
  {  // acceptor version 99: the same answer
    KernelPeer k(spinner(), 1003);
    ASSERT_TRUE(k.connect_to(kB));
    k.write(KernelPeer::request(kB, 99));
    EXPECT_EQ(k.read(kAcceptorV1Size).size(), kAcceptorV1Size);
  }
  {  // a NID that is not ours
    KernelPeer k(spinner(), 1004);
    ASSERT_TRUE(k.connect_to(kB));
    k.write(KernelPeer::request(nid("127.0.0.99@tcp")));
    EXPECT_TRUE(k.closed_without_data());
  }
  {  // HELLO version 99: our own V3 HELLO with type NONE
    KernelPeer k(spinner(), 1005);
    ASSERT_TRUE(k.connect_to(kB));
    Bytes h = KernelPeer::encode(k.hello(kB, ConnType::control));
    store_le<std::uint32_t>(&h[4], 99);
    Bytes out = KernelPeer::request(kB);
    out.insert(out.end(), h.begin(), h.end());
    k.write(out);
    auto reply = decode_hello(k.read(kHelloV2Size));
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->version, 3u);
    EXPECT_EQ(reply->conn_type(), ConnType::none);
    EXPECT_EQ(reply->src_nid, kB);
  }
  {  // type NONE from the connector: closed without a reply
    KernelPeer k(spinner(), 1006);
    ASSERT_TRUE(k.connect_to(kB));
    k.send_handshake(kB, k.hello(kB, ConnType::none));
    EXPECT_TRUE(k.closed_without_data());
  }
  {  // an unprivileged source port under accept=secure
    KernelPeer k(spinner(), 40000);
    ASSERT_TRUE(k.connect_to(kB));
    EXPECT_TRUE(k.closed_without_data());
  }
  EXPECT_EQ(b.refused(CloseReason::bad_acceptor), 4u);
  EXPECT_EQ(b.refused(CloseReason::bad_hello), 1u);
  EXPECT_EQ(b.refused(CloseReason::insecure_port), 1u);
  EXPECT_EQ(b.closed(CloseReason::bad_conn_type), 1u);
  EXPECT_EQ(b.node->stats().conns_accepted, 0u);
}

TEST_F(Engine, UntypedConnectionIsAccepted) {
  TestNode b(poller, kB);
  nodes = {&b};
  KernelPeer k(spinner());
  auto reply = k.handshake(kB, ConnType::any);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->conn_type(), ConnType::any);
}

TEST_F(Engine, DuplicateAndStaleConnectionsAreRefusedWithNone) {
  TestNode b(poller, kB);
  nodes = {&b};
  KernelPeer first(spinner(), 1001);
  ASSERT_EQ(first.handshake(kB, ConnType::control, 0x10)->conn_type(), ConnType::control);
  KernelPeer dup(spinner(), 1002);
  EXPECT_EQ(dup.handshake(kB, ConnType::control, 0x10)->conn_type(), ConnType::none);
  EXPECT_EQ(b.closed(CloseReason::refused_duplicate), 1u);
  // The peer restarted: a new incarnation closes the old connections and
  // is refused once; the next attempt is accepted.
  KernelPeer rebooted(spinner(), 1003);
  EXPECT_EQ(rebooted.handshake(kB, ConnType::bulk_in, 0x20)->conn_type(), ConnType::none);
  EXPECT_TRUE(first.closed_without_data());
  EXPECT_EQ(b.upper.down.size(), 1u);
  KernelPeer again(spinner(), 1004);
  EXPECT_EQ(again.handshake(kB, ConnType::bulk_in, 0x20)->conn_type(), ConnType::bulk_out);
}

// Options::max_peers: a connection from a new peer while the table is full
// is refused with HELLO type NONE (a kernel peer retries later) and
// counted; a send to a new peer fails with -ENOSPC; known peers go on.
TEST_F(Engine, ANewPeerBeyondTheLimitIsRefusedAndKnownOnesWork) {
  Options o;
  o.max_peers = 1;
  TestNode a(poller, kA), b(poller, kB, o);
  nodes = {&a, &b};
  // (A Tx refers to its payload: each lives as long as the test.)
  const Bytes p1 = pattern(100, 1), p2 = pattern(10, 2), p3 = pattern(100, 3);
  Tx first = make_put(kA, kB, p1);
  ASSERT_TRUE(warm_up(a, b, first));  // kA is b's one peer
  KernelPeer other(spinner(), 1001);
  EXPECT_EQ(other.handshake(kB, ConnType::control, 0x10)->conn_type(), ConnType::none);
  EXPECT_EQ(b.closed(CloseReason::refused_peer_table_full), 1u);
  EXPECT_EQ(b.node->stats().peers_refused, 1u);
  Tx to_new = make_put(kB, kKernel, p2);
  EXPECT_EQ(b.node->send(kKernel, to_new), -ENOSPC);
  EXPECT_EQ(b.node->stats().peers_refused, 2u);
  EXPECT_EQ(b.node->peer_count(), 1u);
  Tx again = make_put(kA, kB, p3);
  ASSERT_EQ(a.node->send(kB, again), 0);
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == 2; }));
}

// Options::peer_idle: a peer with no connection left, nothing queued and
// not backing off is freed once unused that long; one with connections is
// kept however old.
TEST_F(Engine, APeerWithoutConnectionsIsFreedWhenIdle) {
  Options o;
  o.peer_idle = 5s;
  TestNode a(poller, kA), b(poller, kB, o);
  nodes = {&a, &b};
  const Bytes payload = pattern(100, 1);
  Tx first = make_put(kA, kB, payload);
  ASSERT_TRUE(warm_up(a, b, first));
  b.node->tick(Clock::now() + 60s);  // connected: kept
  EXPECT_EQ(b.node->peer_count(), 1u);
  EXPECT_EQ(b.node->stats().peers_freed, 0u);
  a.node->shutdown();  // a goes away: b's connections close
  ASSERT_TRUE(pump([&] { return b.node->peers().empty() || b.node->peers()[0].conns[1] == 0; }));
  ASSERT_TRUE(pump([&] {
    auto p = b.node->peers();
    return p.size() == 1 && p[0].conns[1] + p[0].conns[2] + p[0].conns[3] == 0;
  }));
  b.node->reap();
  b.node->tick(Clock::now() + 2s);  // not idle long enough
  EXPECT_EQ(b.node->peer_count(), 1u);
  b.node->tick(Clock::now() + 65s);
  EXPECT_EQ(b.node->peer_count(), 0u);
  EXPECT_EQ(b.node->stats().peers_freed, 1u);
}

// A peer being connected to (or backing off after a failed connect) is not
// idle; once the backoff has passed and nothing waits, it is.
TEST_F(Engine, APeerBackingOffIsKeptUntilTheBackoffEnds) {
  Options o;
  o.peer_idle = 1s;
  o.min_reconnect = 10s;
  TestNode a(poller, kA, o);
  nodes = {&a};
  const Bytes payload = pattern(10, 0);
  Tx t = make_put(kA, kNowhere, payload);
  ASSERT_EQ(a.node->send(kNowhere, t), 0);
  ASSERT_TRUE(pump([&] { return a.upper.sent.count(&t) == 1; }));
  a.node->reap();
  a.node->tick(Clock::now() + 5s);  // idle 5 s, but backing off for 10
  EXPECT_EQ(a.node->peer_count(), 1u);
  a.node->tick(Clock::now() + 15s);
  EXPECT_EQ(a.node->peer_count(), 0u);
}

// Options::max_conns: beyond it a connection is refused with HELLO NONE,
// counted; the node's own connects fail likewise.
TEST_F(Engine, ConnectionsBeyondTheLimitAreRefused) {
  Options o;
  o.max_conns = 1;
  TestNode b(poller, kB, o);
  nodes = {&b};
  KernelPeer first(spinner(), 1001);
  ASSERT_EQ(first.handshake(kB, ConnType::control, 0x10)->conn_type(), ConnType::control);
  KernelPeer second(spinner(), 1002);
  EXPECT_EQ(second.handshake(kB, ConnType::bulk_in, 0x10)->conn_type(), ConnType::none);
  EXPECT_EQ(b.closed(CloseReason::refused_too_many_conns), 1u);
  const Bytes payload = pattern(10, 0);
  Tx t = make_put(kB, kA, payload);
  ASSERT_EQ(b.node->send(kA, t), 0);
  ASSERT_TRUE(pump([&] { return b.upper.sent.count(&t) == 1; }));
  EXPECT_EQ(b.upper.sent[&t], -EMFILE);
  EXPECT_EQ(b.closed(CloseReason::refused_too_many_conns), 2u);
}

// The acceptor's bounds: connections still in their handshake, and new
// connections a second from one address (after a burst); each refused
// connection is closed at once and counted, and others go on.
TEST_F(Engine, TheAcceptorBoundsHandshakesAndConnectionsPerAddress) {
  {
    Options o;
    o.max_handshakes = 2;
    TestNode b(poller, kB, o);
    nodes = {&b};
    KernelPeer s1(spinner(), 1001), s2(spinner(), 1002), s3(spinner(), 1003);
    ASSERT_TRUE(s1.connect_to(kB));
    ASSERT_TRUE(s2.connect_to(kB));
    pump([] { return false; }, 100ms);  // both taken in, silent
    ASSERT_TRUE(s3.connect_to(kB));
    EXPECT_TRUE(s3.closed_without_data());
    EXPECT_EQ(b.refused(CloseReason::refused_handshakes), 1u);
    s1.close();
    pump([&] { return b.refused(CloseReason::peer_closed) == 1; });
    KernelPeer s4(spinner(), 1004);  // room again
    EXPECT_EQ(s4.handshake(kB, ConnType::control, 0x10)->conn_type(), ConnType::control);
  }
  {
    Options o;
    o.connect_rate = 1;  // a burst of 4
    TestNode b(poller, kB, o);
    nodes = {&b};
    std::vector<std::unique_ptr<KernelPeer>> conns;
    for (std::uint16_t i = 0; i < 5; ++i) {
      conns.push_back(std::make_unique<KernelPeer>(spinner(), static_cast<std::uint16_t>(1010 + i)));
      ASSERT_TRUE(conns.back()->connect_to(kB));
    }
    EXPECT_TRUE(conns.back()->closed_without_data());
    EXPECT_EQ(b.refused(CloseReason::refused_rate), 1u);
    // Another address is not limited by this one's rate.
    KernelPeer other(spinner(), 1020, kA);
    EXPECT_EQ(other.handshake(kB, ConnType::control, 0x10)->conn_type(), ConnType::control);
  }
}

TEST_F(Engine, MalformedMessageClosesOnlyItsConnection) {
  TestNode b(poller, kB);
  nodes = {&b};
  KernelPeer good(spinner(), 1001), bad(spinner(), 1002);
  ASSERT_TRUE(good.handshake(kB, ConnType::control));
  ASSERT_TRUE(bad.handshake(kB, ConnType::bulk_out));
  Bytes junk = KernelPeer::lnet_msg(kKernel, kB, {});
  junk[0] = 0xc2;  // no such socklnd message type
  bad.write(junk);
  EXPECT_TRUE(bad.closed_without_data());
  EXPECT_EQ(b.closed(CloseReason::bad_message), 1u);
  good.write(KernelPeer::lnet_msg(kKernel, kB, pattern(10, 9)));
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == 1; }));
  EXPECT_EQ(b.upper.got[0].payload, pattern(10, 9));
}

TEST_F(Engine, PeerCloseAndPeerResetAreCountedApart) {
  TestNode b(poller, kB);
  nodes = {&b};
  KernelPeer graceful(spinner(), 1001), aborted(spinner(), 1002);
  ASSERT_TRUE(graceful.handshake(kB, ConnType::control));
  ASSERT_TRUE(aborted.handshake(kB, ConnType::bulk_out));
  graceful.close();
  ASSERT_TRUE(pump([&] { return b.closed(CloseReason::peer_closed) == 1; }));
  aborted.close(true);
  ASSERT_TRUE(pump([&] { return b.closed(CloseReason::peer_reset) == 1; }));
  EXPECT_EQ(b.closed(CloseReason::io_error), 0u);
  EXPECT_EQ(b.closed(CloseReason::peer_closed), 1u);
}

TEST_F(Engine, OversizePayloadLengthIsAProtocolError) {
  TestNode b(poller, kB);
  nodes = {&b};
  KernelPeer k(spinner());
  ASSERT_TRUE(k.handshake(kB, ConnType::bulk_out));
  Bytes m = KernelPeer::lnet_msg(kKernel, kB, {});
  store_le<std::uint32_t>(&m[kMsgHeaderSize + 28], kLnetMtu + 1);
  k.write(m);
  EXPECT_TRUE(k.closed_without_data());
  EXPECT_EQ(b.closed(CloseReason::bad_message), 1u);
  EXPECT_TRUE(b.upper.got.empty());
}

TEST_F(Engine, DeferredReceiveAppliesBackPressureThenResumes) {
  TestNode a(poller, kA), b(poller, kB);
  nodes = {&a, &b};
  b.upper.defer_all = true;
  std::vector<Bytes> payloads;
  std::deque<Tx> txs;
  for (int i = 0; i < 5; ++i) payloads.push_back(pattern(3000, static_cast<std::uint8_t>(i)));
  for (auto& p : payloads) {
    txs.push_back(make_put(kA, kB, p));
    ASSERT_EQ(a.node->send(kB, txs.back()), 0);
  }
  ASSERT_TRUE(pump([&] { return !b.upper.deferred.empty(); }));
  pump([] { return false; }, 200ms);
  // The first head is held; the connection is not read further.
  EXPECT_EQ(b.upper.deferred.size(), 1u);
  EXPECT_TRUE(b.upper.got.empty());
  b.upper.defer_all = false;
  Rx rx = b.upper.deferred.front();
  b.upper.deferred.pop_front();
  b.upper.give_sink(rx);
  b.node->resume(rx);
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == payloads.size(); }));
  for (std::size_t i = 0; i < payloads.size(); ++i) EXPECT_EQ(b.upper.got[i].payload, payloads[i]) << i;
}

TEST_F(Engine, SimultaneousConnectsResolveAndDeliverBothWays) {
  TestNode a(poller, kA), b(poller, kB);
  nodes = {&a, &b};
  const Bytes pa = pattern(500, 1), pb = pattern(500, 2);
  Tx ta = make_put(kA, kB, pa), tb = make_put(kB, kA, pb);
  ASSERT_EQ(a.node->send(kB, ta), 0);
  ASSERT_EQ(b.node->send(kA, tb), 0);
  ASSERT_TRUE(pump([&] { return a.upper.got.size() == 1 && b.upper.got.size() == 1; }, 10000ms));
  EXPECT_EQ(a.upper.got[0].payload, pb);
  EXPECT_EQ(b.upper.got[0].payload, pa);
  EXPECT_EQ(a.upper.sent[&ta], 0);
  EXPECT_EQ(b.upper.sent[&tb], 0);
}

TEST_F(Engine, ConnectFailureFailsTheMessageAndReportsThePeerDown) {
  TestNode a(poller, kA);
  nodes = {&a};
  Tx t = make_put(kA, kNowhere, pattern(10, 0));
  ASSERT_EQ(a.node->send(kNowhere, t), 0);
  ASSERT_TRUE(pump([&] { return a.upper.sent.count(&t) == 1; }));
  EXPECT_LT(a.upper.sent[&t], 0);
  ASSERT_EQ(a.upper.down.size(), 1u);
  EXPECT_EQ(a.upper.down[0], kNowhere);
  // While backing off, new messages fail at once instead of queueing.
  Tx t2 = make_put(kA, kNowhere, pattern(10, 0));
  EXPECT_EQ(a.node->send(kNowhere, t2), -EIO);
  EXPECT_EQ(a.node->send(nid("10.0.0.1@tcp9"), t2), -EHOSTUNREACH);
}

TEST_F(Engine, KeepaliveAndStalledReceiveTimeout) {
  Options o;
  o.keepalive = 1s;
  o.timeout = 2s;
  TestNode b(poller, kB, o);
  nodes = {&b};
  KernelPeer k(spinner());
  ASSERT_TRUE(k.handshake(kB, ConnType::bulk_out));
  // Silence: a keepalive NOOP (0, 1) arrives.
  auto ka = decode_msg_header(k.read(kMsgHeaderSize), kNativeOrder);
  ASSERT_TRUE(ka);
  EXPECT_EQ(zc_ack_of(*ka, 3).kind, ZcAck::Kind::keepalive);
  // Half a header, then nothing: closed after the timeout.
  Bytes m = KernelPeer::lnet_msg(kKernel, kB, pattern(100, 0));
  m.resize(40);
  k.write(m);
  EXPECT_TRUE(pump([&] { return b.closed(CloseReason::timeout) == 1; }, 6000ms));
}

TEST_F(Engine, SendingFromOnSentKeepsTheStreamIntact) {
  // The Upper sends again from inside on_sent() while the engine is still
  // accounting a sendmsg() that completed several messages (the router does
  // this when a returned credit wakes a queued message).
  TestNode a(poller, kA), b(poller, kB);
  nodes = {&a, &b};
  const Bytes first = pattern(10, 0);  // a Tx lends its payload: keep it alive
  Tx w = make_put(kA, kB, first);
  ASSERT_TRUE(warm_up(a, b, w));
  b.upper.defer_all = true;  // let A's socket buffers fill up
  const Bytes big = pattern(1 << 20, 5), small = pattern(2048, 6), extra = pattern(2048, 7);
  std::deque<Tx> txs;
  for (int i = 0; i < 12; ++i) txs.push_back(make_put(kA, kB, big));
  txs.push_back(make_put(kA, kB, small));
  txs.push_back(make_put(kA, kB, small));
  txs[12].hdr.set(PutFields{WireHandle::none(), 200, 0, 4, 0});
  txs[13].hdr.set(PutFields{WireHandle::none(), 201, 0, 4, 0});
  Tx more = make_put(kA, kB, extra);
  more.hdr.set(PutFields{WireHandle::none(), 999, 0, 4, 0});
  bool sent_more = false;
  a.upper.on_sent_hook = [&](Tx& t) {
    if (&t == &txs[12] && !sent_more) {
      sent_more = true;
      EXPECT_EQ(a.node->send(kB, more), 0);
    }
  };
  for (Tx& t : txs) ASSERT_EQ(a.node->send(kB, t), 0);
  pump([&] { return !b.upper.deferred.empty(); });
  pump([] { return false; }, 200ms);
  b.upper.defer_all = false;
  while (!b.upper.deferred.empty()) {
    Rx rx = b.upper.deferred.front();
    b.upper.deferred.pop_front();
    b.upper.give_sink(rx);
    b.node->resume(rx);
  }
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == 1 + txs.size() + 1; }, 10000ms));
  std::map<std::uint64_t, int> seen;
  for (std::size_t i = 1; i < b.upper.got.size(); ++i) {
    const auto& g = b.upper.got[i];
    ++seen[g.hdr.put().match_bits];
    const Bytes& expect = g.hdr.put().match_bits == 999 ? extra : g.payload.size() == big.size() ? big : small;
    EXPECT_EQ(g.payload, expect);
  }
  EXPECT_EQ(seen[200], 1);
  EXPECT_EQ(seen[201], 1);
  EXPECT_EQ(seen[999], 1);
  pump([] { return false; }, 100ms);
  EXPECT_EQ(b.closed(CloseReason::bad_message), 0u);
}

TEST_F(Engine, SendsQueuedInOneBatchGoOutInOneWrite) {
  TestNode a(poller, kA), b(poller, kB);
  nodes = {&a, &b};
  const Bytes first = pattern(10, 0);  // a Tx lends its payload: keep it alive
  Tx w = make_put(kA, kB, first);
  ASSERT_TRUE(warm_up(a, b, w));
  // Connections are up; nothing is written until flush().
  const Bytes small = pattern(100, 3);
  std::deque<Tx> txs;
  for (std::uint64_t i = 0; i < 16; ++i) {
    txs.push_back(make_put(kA, kB, small));
    txs.back().hdr.set(PutFields{WireHandle::none(), 300 + i, 0, 4, 0});
  }
  const std::uint64_t writes = a.node->stats().tx_writes, msgs = a.node->stats().tx_msgs;
  for (Tx& t : txs) ASSERT_EQ(a.node->send(kB, t), 0);
  EXPECT_EQ(a.node->stats().tx_writes, writes);
  EXPECT_EQ(a.node->flush(), 1u);
  EXPECT_EQ(a.node->stats().tx_writes, writes + 1);
  EXPECT_EQ(a.node->stats().tx_msgs, msgs + txs.size());
  EXPECT_EQ(a.node->flush(), 0u);
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == 1 + txs.size(); }));
  for (std::size_t i = 0; i < txs.size(); ++i) {  // in order, intact
    EXPECT_EQ(b.upper.got[1 + i].hdr.put().match_bits, 300 + i);
    EXPECT_EQ(b.upper.got[1 + i].payload, small);
  }
}

// Payloads of zc_min_payload or more go out with MSG_ZEROCOPY.  On
// loopback the kernel copies them anyway (into the receiving socket) and
// says so in its completion: the message is handed back once complete, the
// copy counted, and the connection copies from then on.
TEST_F(Engine, ZeroCopySendFallsBackWhereTheKernelCopies) {
  TestNode a(poller, kA), b(poller, kB);
  nodes = {&a, &b};
  const Bytes big = pattern(1 << 20, 5), big2 = pattern(300000, 6);
  const Bytes tiny = pattern(10, 1);
  Tx first = make_put(kA, kB, tiny);
  ASSERT_TRUE(warm_up(a, b, first));
  if (a.node->stats().zc_unsupported) GTEST_SKIP() << "the kernel refuses SO_ZEROCOPY";
  Tx t = make_put(kA, kB, big);
  ASSERT_EQ(a.node->send(kB, t), 0);
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == 2 && a.upper.sent.count(&t) == 1; }));
  EXPECT_EQ(a.upper.sent[&t], 0);
  EXPECT_EQ(b.upper.got[1].payload, big);
  const Stats s1 = a.node->stats();
  EXPECT_GE(s1.zc_sends, 1u);
  EXPECT_EQ(s1.zc_copied, s1.zc_sends);
  EXPECT_EQ(s1.zc_fallbacks, 1u);
  EXPECT_EQ(s1.bytes_zero_copy, 0u);
  EXPECT_GE(s1.bytes_copied, big.size());  // counted from the completion
  // Copying from now on: no more zero-copy calls on that connection.
  Tx t2 = make_put(kA, kB, big2);
  ASSERT_EQ(a.node->send(kB, t2), 0);
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == 3 && a.upper.sent.count(&t2) == 1; }));
  EXPECT_EQ(b.upper.got[2].payload, big2);
  const Stats s2 = a.node->stats();
  EXPECT_EQ(s2.zc_sends, s1.zc_sends);
  EXPECT_GE(s2.bytes_copied - s1.bytes_copied, big2.size());
  // The receiver counts what it read.
  EXPECT_GE(b.node->stats().bytes_copied, big.size() + big2.size());
  EXPECT_EQ(a.upper.sent_calls, 3u);
}

// On a kernel socket, once a message has a large payload the next head is
// read alone, so that a large payload behind it is read once, straight
// into its sink: every byte after that first message is copied exactly
// once (before, up to 8 KiB of each payload came through the staging
// buffer and was copied twice).  Small messages after them still arrive
// intact.
TEST_F(Engine, AfterALargePayloadHeadsAreReadAloneAndPayloadsOnce) {
  TestNode a(poller, kA), b(poller, kB);
  nodes = {&a, &b};
  const Bytes tiny = pattern(10, 1);
  Tx first = make_put(kA, kB, tiny);
  ASSERT_TRUE(warm_up(a, b, first));
  const Bytes lead = pattern(1 << 20, 2);  // (read as before: nothing large came before it)
  Tx t0 = make_put(kA, kB, lead);
  ASSERT_EQ(a.node->send(kB, t0), 0);
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == 2; }));
  const std::uint64_t before = b.node->stats().bytes_copied;
  std::deque<Bytes> payloads;
  std::deque<Tx> txs;
  std::size_t bytes = 0;
  for (std::size_t size : {65536u, 1u << 20, 65536u, 300000u, 8192u}) {
    payloads.push_back(pattern(size, static_cast<std::uint8_t>(size)));
    bytes += size;
    txs.push_back(make_put(kA, kB, payloads.back()));
    ASSERT_EQ(a.node->send(kB, txs.back()), 0);
  }
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == 2 + txs.size(); }));
  for (std::size_t i = 0; i < payloads.size(); ++i) EXPECT_EQ(b.upper.got[2 + i].payload, payloads[i]);
  const std::size_t head = kMsgHeaderSize + kLnetHeaderSize;  // V3
  EXPECT_EQ(b.node->stats().bytes_copied - before, bytes + txs.size() * head);
  // Then small ones.
  std::deque<Tx> smalls;
  for (int i = 0; i < 20; ++i) {
    smalls.push_back(make_put(kA, kB, tiny));
    ASSERT_EQ(a.node->send(kB, smalls.back()), 0);
  }
  ASSERT_TRUE(pump([&] { return b.upper.got.size() == 2 + txs.size() + smalls.size(); }));
  for (std::size_t i = 2 + txs.size(); i < b.upper.got.size(); ++i) EXPECT_EQ(b.upper.got[i].payload, tiny);
}

// zc_min_payload decides which payloads are sent without a copy.
TEST_F(Engine, ZeroCopyFollowsZcMinPayload) {
  Options off;
  off.zc_min_payload = kLnetMtu + 1;  // never
  Options low;
  low.zc_min_payload = 2048;
  for (const Options& o : {off, low}) {
    SCOPED_TRACE(o.zc_min_payload);
    TestNode a(poller, kA, o), b(poller, kB, o);
    nodes = {&a, &b};
    const Bytes tiny = pattern(10, 1);
    Tx first = make_put(kA, kB, tiny);
    ASSERT_TRUE(warm_up(a, b, first));
    const Bytes four_k = pattern(4096, 2);
    Tx t = make_put(kA, kB, four_k);
    ASSERT_EQ(a.node->send(kB, t), 0);
    ASSERT_TRUE(pump([&] { return b.upper.got.size() == 2 && a.upper.sent.count(&t) == 1; }));
    EXPECT_EQ(b.upper.got[1].payload, four_k);
    EXPECT_EQ(a.node->stats().zc_sends, o.zc_min_payload <= 4096 ? 1u : 0u);
    nodes.clear();
  }
}

// A connection closed while the kernel still holds a zero-copy send (its
// bytes not yet on the wire: the receiver's window is shut) is only
// disconnected until the kernel lets go; then the message is handed back,
// once: as sent if it was written whole, failed if only partly.
TEST_F(Engine, ClosedWithZeroCopyPendingHandsBackOnceTheKernelLetsGo) {
  for (const bool whole : {true, false}) {
    SCOPED_TRACE(whole ? "written whole" : "written in part");
    Options ao;
    ao.timeout = 1s;                                   // the stuck message closes its connection
    ao.tx_buffer_size = whole ? 4 << 20 : 64 << 10;    // all of it in A's socket, or not
    Options bo;
    bo.rx_buffer_size = 16 << 10;                      // B's window keeps most of it there
    TestNode a(poller, kA, ao), b(poller, kB, bo);
    nodes = {&a, &b};
    const Bytes tiny = pattern(10, 1);
    Tx first = make_put(kA, kB, tiny);
    ASSERT_TRUE(warm_up(a, b, first));
    b.upper.defer_all = true;  // B reads nothing more
    const Bytes big = pattern(1 << 20, 7);
    Tx t = make_put(kA, kB, big);
    ASSERT_EQ(a.node->send(kB, t), 0);
    // Written (whole, or as far as the socket takes), and held: the kernel
    // has not completed the send.
    if (whole) {
      ASSERT_TRUE(pump([&] { return a.node->stats().tx_msgs == 2; }));
    }
    pump([] { return false; }, 300ms);
    EXPECT_EQ(a.node->stats().tx_msgs, whole ? 2u : 1u);
    EXPECT_EQ(a.upper.sent.count(&t), 0u);
    EXPECT_GE(a.node->stats().zc_sends, 1u);
    // A times the message out and closes the connection: disconnected,
    // it waits for the kernel's completions, which EPOLLERR reports (A's
    // timers stopped from here: the events alone finish the drain).
    ASSERT_TRUE(pump([&] { return a.node->stats().zc_drains == 1; }, 5000ms));
    EXPECT_EQ(a.upper.sent.count(&t), 0u);
    EXPECT_EQ(a.node->stats().zc_draining, 1u);
    a.ticking = false;
    ASSERT_TRUE(pump([&] { return a.upper.sent.count(&t) == 1; }, 5000ms));
    EXPECT_EQ(a.upper.sent[&t], whole ? 0 : -ETIMEDOUT);
    EXPECT_EQ(a.closed(CloseReason::timeout), 1u);
    EXPECT_EQ(a.node->stats().zc_draining, 0u);
    pump([] { return false; }, 200ms);
    EXPECT_EQ(a.upper.sent_calls, 2u);  // first, then t: once each
    nodes.clear();
  }
}

// A KernelStream on a loopback connection whose receiver reads nothing
// (a window far below what is sent), the engine's side of it by hand.
struct ZcPair {
  Poller poller;
  Stats stats;
  std::unique_ptr<KernelStream> s;
  int rx = -1;

  ZcPair() {
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    const int small = 256 << 10;
    setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);  // the accepted socket's window
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(l, 1), 0);
    EXPECT_EQ(getsockname(l, reinterpret_cast<sockaddr*>(&a), &len), 0);
    const int c = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    rx = accept(l, nullptr, nullptr);
    close(l);
    s = std::make_unique<KernelStream>(c, poller);
    s->count_into(stats);
    Options o;
    o.tx_buffer_size = 4 << 20;
    s->configure(o);
  }
  ~ZcPair() { close(rx); }
  ssize_t send(const Bytes& b, bool lend) {
    const iovec iov{const_cast<std::uint8_t*>(b.data()), b.size()};
    return s->sendv_lent(&iov, 1, &lend, nullptr);
  }
  // Wait (up to 2 s) for the kernel to queue a completion, without reading it.
  bool completion_queued() {
    pollfd p{s->fd(), 0, 0};
    return ::poll(&p, 1, 2000) == 1 && (p.revents & POLLERR);
  }
  // Read everything sent, and the completions that follow.
  void drain(std::uint64_t bytes) {
    std::vector<std::uint8_t> sink(1 << 20);
    std::uint64_t got = 0;
    const auto end = Clock::now() + 5s;
    while (got < bytes && Clock::now() < end) {
      const ssize_t n = ::recv(rx, sink.data(), sink.size(), MSG_DONTWAIT);
      if (n > 0) got += static_cast<std::uint64_t>(n);
      s->poll_released();
    }
    EXPECT_EQ(got, bytes);
    while (s->zc_pending() > 0 && Clock::now() < end) s->poll_released();
  }
};

// A copied completion turns the stream to copying; the calls still
// outstanding keep it lending (a message partly in them stays held) until
// they complete.
TEST(KernelStreamZeroCopy, StaysLendingWhileCallsAreOutstandingAfterAFallback) {
  ZcPair z;
  if (z.stats.zc_unsupported) GTEST_SKIP() << "the kernel refuses SO_ZEROCOPY";
  ASSERT_TRUE(z.s->lends());
  const Bytes small = pattern(1000, 1), big = pattern(4 << 20, 2), more = pattern(50000, 3);
  ASSERT_EQ(z.send(small, true), 1000);
  ASSERT_TRUE(z.completion_queued());  // loopback: copied into the receiver, acknowledged
  const ssize_t n = z.send(big, true);  // most of it waits for the window
  ASSERT_GT(n, 0);
  EXPECT_EQ(z.stats.zc_sends, 2u);
  z.s->poll_released();  // the first call's completion: copied
  EXPECT_EQ(z.stats.zc_copied, 1u);
  EXPECT_EQ(z.stats.zc_fallbacks, 1u);
  EXPECT_EQ(z.s->zc_pending(), 1u);
  EXPECT_TRUE(z.s->lends());
  EXPECT_LT(z.s->released(), z.s->taken());
  // Copying now: more goes without MSG_ZEROCOPY.
  const ssize_t m = z.send(more, true);
  ASSERT_GT(m, 0);
  EXPECT_EQ(z.stats.zc_sends, 2u);
  z.drain(1000 + static_cast<std::uint64_t>(n + m));
  EXPECT_EQ(z.s->zc_pending(), 0u);
  EXPECT_EQ(z.s->released(), z.s->taken());
  EXPECT_FALSE(z.s->lends());
}

// After a fallback the stream copies for 64 MiB, then says it lends
// again before the write that tries zero copy (the engine decides from
// lends() which messages to hold).
TEST(KernelStreamZeroCopy, TriesZeroCopyAgainAfter64MiBCopied) {
  ZcPair z;
  if (z.stats.zc_unsupported) GTEST_SKIP() << "the kernel refuses SO_ZEROCOPY";
  const Bytes small = pattern(1000, 1), chunk = pattern(1 << 20, 5);
  ASSERT_EQ(z.send(small, true), 1000);
  z.drain(1000);
  ASSERT_EQ(z.stats.zc_fallbacks, 1u);
  ASSERT_FALSE(z.s->lends());
  const std::uint64_t retry_at = 1000 + (64u << 20);
  while (z.s->taken() < retry_at) {
    ASSERT_FALSE(z.s->lends()) << z.s->taken();
    const ssize_t n = z.send(chunk, true);
    ASSERT_GT(n, 0);
    z.drain(static_cast<std::uint64_t>(n));
  }
  EXPECT_EQ(z.stats.zc_sends, 1u);  // all of it copied
  EXPECT_TRUE(z.s->lends());
  ASSERT_GT(z.send(chunk, true), 0);
  EXPECT_EQ(z.stats.zc_sends, 2u);
}

// Beyond 256 outstanding zero-copy calls the stream copies; every call
// completes and every byte is counted once.
TEST(KernelStreamZeroCopy, CopiesBeyondItsRingOfOutstandingCalls) {
  ZcPair z;
  if (z.stats.zc_unsupported) GTEST_SKIP() << "the kernel refuses SO_ZEROCOPY";
  const Bytes b = pattern(100, 4);
  for (int i = 0; i < 300; ++i) ASSERT_EQ(z.send(b, true), 100) << i;
  ASSERT_EQ(z.stats.zc_nobufs, 0u);
  EXPECT_EQ(z.stats.zc_sends, 256u);
  EXPECT_EQ(z.s->zc_pending(), 256u);
  z.drain(300 * 100);
  EXPECT_EQ(z.s->zc_pending(), 0u);
  EXPECT_EQ(z.s->released(), z.s->taken());
  EXPECT_EQ(z.s->taken(), 300u * 100);
  EXPECT_EQ(z.stats.bytes_copied + z.stats.bytes_zero_copy, 300u * 100);  // each byte once
}

TEST_F(Engine, ShutdownFailsQueuedMessages) {
  TestNode a(poller, kA);
  nodes = {&a};
  Tx t = make_put(kA, kB, pattern(10, 0));  // B is not listening: t waits for a connection
  ASSERT_EQ(a.node->send(kB, t), 0);
  a.node->shutdown();
  ASSERT_EQ(a.upper.sent.count(&t), 1u);
  EXPECT_LT(a.upper.sent[&t], 0);
}

}  // namespace
}  // namespace lnetr::sock

namespace lnetr::sock {
namespace {

// wait() blocks until an edge-triggered event is ready without using it up:
// the next poll() still dispatches it.
TEST(Poller, WaitLeavesTheEventForPoll) {
  struct Counting final : IoHandler {
    int calls = 0;
    void on_io(std::uint32_t) override { ++calls; }
  } h;
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  Poller p;
  ASSERT_TRUE(p.add(fds[0], &h));
  EXPECT_EQ(p.poll(0), 1);  // the initial write readiness
  EXPECT_FALSE(p.wait(20));  // nothing new: times out
  ASSERT_EQ(::write(fds[1], "x", 1), 1);
  EXPECT_TRUE(p.wait(1000));
  EXPECT_TRUE(p.wait(0));  // still ready: not consumed
  EXPECT_EQ(h.calls, 1);
  EXPECT_EQ(p.poll(0), 1);
  EXPECT_EQ(h.calls, 2);
  EXPECT_FALSE(p.wait(0));  // dispatched (edge-triggered): gone
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace lnetr::sock
