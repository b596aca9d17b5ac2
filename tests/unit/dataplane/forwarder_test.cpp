// The forwarder's LNet accounting without sockets or DPDK: router credits,
// buffer pools, peer and NI transmit credits, queueing and waking, drops,
// cross-CPT hand-off, and the answers it owes (ping REPLY, push ACK).  The
// ports below are plain memory standing in for mempools, socklnd and rings.
#include "dataplane/forwarder.hpp"

#include <gtest/gtest.h>

#include <tuple>
#include <rte_thash.h>

#include <deque>
#include <map>
#include <thread>
#include <memory>
#include <vector>

#include "router/local_msgs.hpp"
#include "router/ping_info.hpp"
#include "dataplane/shm/region.hpp"
#include "dataplane/shm/seqlock.hpp"
#include "tests/support/nid.hpp"

namespace lnetr::dp {
namespace {

using test::nid;

const Nid kNiA = nid("10.1.0.1@tcp");   // the router on tcp
const Nid kNiB = nid("10.2.0.1@tcp1");  // the router on tcp1
const Nid kA = nid("10.1.0.2@tcp");     // a client on tcp
const Nid kA2 = nid("10.1.0.3@tcp");
const Nid kB = nid("10.2.0.2@tcp1");    // a server on tcp1
const Nid kGw1 = nid("10.2.0.9@tcp1");  // gateways to tcp7
const Nid kGw2 = nid("10.2.0.10@tcp1");

// Ports over plain memory; sends are held until the test completes them.
class FakePorts final : public ForwarderPorts {
 public:
  struct Sent {
    Nid to;
    lnd::Tx* tx;
  };
  std::map<PoolClass, int> buffers_out;
  std::vector<Sent> sent;
  std::vector<lnd::Rx> resumed;
  std::deque<std::pair<std::uint32_t, RingItem>> posted;
  std::vector<std::unique_ptr<std::uint8_t[]>> memory;

  int buffers_left = -1;  // >= 0: the pools run dry after that many more
  std::size_t ring_room = ~std::size_t{0};  // items the rings take before they are full

  std::uint8_t* get_buffer(PoolClass c) override {
    if (buffers_left == 0) return nullptr;
    if (buffers_left > 0) --buffers_left;
    ++buffers_out[c];
    memory.push_back(std::make_unique<std::uint8_t[]>(pool_capacity(c)));
    return memory.back().get();
  }
  void put_buffer(PoolClass c, std::uint8_t*) override { --buffers_out[c]; }
  std::uint64_t buffer_iova(const std::uint8_t*) override { return RTE_BAD_IOVA; }
  int send(const Nid& to, lnd::Tx& tx) override {
    sent.push_back({to, &tx});
    return 0;
  }
  void resume(lnd::Rx& rx) override { resumed.push_back(rx); }
  bool post(std::uint32_t worker, const RingItem& item) override {
    if (ring_room == 0) return false;
    --ring_room;
    posted.emplace_back(worker, item);
    return true;
  }
};

Setup rig_setup(std::uint32_t ncpts = 1) {
  Setup s;
  NiSetup a, b;
  a.nid = kNiA;
  b.nid = kNiB;
  a.peer_credits = b.peer_credits = 2;
  a.peer_buffer_credits = b.peer_buffer_credits = 2;
  a.credits = b.credits = 4;
  s.nis = {a, b};
  s.buffers = {8 * ncpts, 4 * ncpts, 2 * ncpts};
  s.cores.assign(ncpts, 0);
  // Off, but where a test says otherwise: with it on, a message on its
  // last hop also sends a discovery ping.
  s.discovery = false;
  return s;
}

Setup discovering_setup() {
  Setup s = rig_setup();
  s.discovery = true;
  return s;
}

RouteTable make_routes(const Setup& s, std::vector<RouteSpec> specs = {}) {
  std::vector<Net> nets;
  for (const auto& ni : s.nis) nets.push_back(ni.nid.net());
  auto b = RouteTableBuilder::create(nets, 1);
  for (const auto& r : specs) EXPECT_TRUE(b->add(r));
  return b->build();
}

// A PUT from `from` (on tcp, so through NI kNiA) for `dest`, as a worker
// other than a Rig's receives it.
lnd::Rx put_from(const Nid& from, const Nid& dest, std::uint32_t len, std::uint64_t match_bits = 0) {
  lnd::Rx rx;
  rx.from = from;
  rx.ni = kNiA;
  rx.hdr.src_nid = from;
  rx.hdr.dest_nid = dest;
  rx.hdr.set(PutFields{WireHandle::none(), match_bits, 0, 0, 0});
  rx.hdr.payload_length = len;
  return rx;
}

struct Rig {
  Setup setup;
  SharedState shared;
  RouteTable routes;
  FakePorts ports;
  std::unique_ptr<Forwarder> fwd;
  std::deque<lnd::Rx> rxs;  // stable addresses, as a connection's rx_

  explicit Rig(Setup s, std::vector<RouteSpec> specs = {})
      : setup(std::move(s)), shared(kMaxNis, setup.ncpts()), routes(make_routes(setup, specs)) {
    fwd = std::make_unique<Forwarder>(0, setup, shared, routes.view(), ports);
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    for (std::size_t i = 0; i < setup.nis.size(); ++i) shared.ni[i].last_ping_ns = now;
  }

  // A message from `from` (arriving on `ni`) for `dest`.
  lnd::Rx& head(const Nid& from, const Nid& ni, const Nid& dest, std::uint32_t len,
                 MsgType type = MsgType::put) {
    rxs.emplace_back();
    lnd::Rx& rx = rxs.back();
    rx.from = from;
    rx.ni = ni;
    rx.hdr.src_nid = from;
    rx.hdr.dest_nid = dest;
    rx.hdr.payload_length = len;
    if (type == MsgType::put) rx.hdr.set(PutFields{WireHandle::none(), 5, 0, 42, 0});
    else rx.hdr.set(GetFields{{1, 2}, 5, 42, 0, 64});
    rx.hdr.payload_length = len;
    return rx;
  }
  std::uint64_t drops(DropReason r) const { return shared.counters[0].drops[static_cast<std::size_t>(r)].get(); }
  const Forwarder::PoolState& pool(PoolClass c) const { return fwd->pools()[static_cast<std::size_t>(c)]; }
  const PeerNi& peer(const Nid& n) const { return *fwd->peers().at(n); }
  // Forward a small message from kA to a host on tcp7; the next hop it went
  // to (the send completed).
  Nid next_hop_to_tcp7() {
    lnd::Rx& rx = head(kA, kNiA, *parse_nid("10.7.0.5@tcp7"), 10);
    EXPECT_EQ(fwd->on_head(rx), lnd::RxVerdict::accept);
    fwd->on_received(rx);
    EXPECT_EQ(ports.sent.size(), 1u);
    const Nid to = ports.sent.empty() ? Nid{} : ports.sent[0].to;
    complete();
    return to;
  }
  // Forward a message of `len` bytes from kA to kB; the send it became.
  lnd::Tx& forward_to_b(std::uint32_t len) {
    lnd::Rx& rx = head(kA, kNiA, kB, len);
    EXPECT_EQ(fwd->on_head(rx), lnd::RxVerdict::accept);
    fwd->on_received(rx);
    EXPECT_EQ(ports.sent.size(), 1u);
    return *ports.sent.back().tx;
  }
  // Complete the oldest outstanding send.
  void complete(int status = 0) {
    ASSERT_FALSE(ports.sent.empty());
    lnd::Tx* tx = ports.sent.front().tx;
    ports.sent.erase(ports.sent.begin());
    fwd->on_sent(*tx, status);
  }
  // Everything back where it started: credits at max, no buffer out.
  void expect_idle() const {
    for (const auto& p : fwd->pools()) EXPECT_EQ(p.credits.cur, static_cast<std::int32_t>(p.nbuffers));
    for (const auto& [n, p] : fwd->peers()) {
      EXPECT_EQ(p->tx.cur, p->tx.max) << to_string(n);
      EXPECT_EQ(p->rtr.cur, p->rtr.max) << to_string(n);
    }
    for (const auto& c : fwd->ni_credits()) EXPECT_EQ(c.cur, c.max);
    // Status lists exactly the forwarder's peers.
    std::size_t listed = 0;
    fwd->peer_directory().for_each([&](const PeerNi& p) {
      EXPECT_EQ(fwd->peers().at(p.nid), &p);
      ++listed;
    });
    EXPECT_EQ(listed, fwd->peers().size());
    for (const auto& [c, n] : ports.buffers_out) EXPECT_EQ(n, 0) << kPoolNames[static_cast<std::size_t>(c)];
    EXPECT_EQ(fwd->msgs_in_use(), 0u);
    EXPECT_EQ(fwd->long_replies(), 0u);
  }
};

// The hash a port's peers are placed by (router/forward.hpp) is the one
// DPDK computes in software for a device's RSS on IPv4 addresses, with
// the key the port programs.
TEST(Rss, PlacementHashIsDpdksToeplitz) {
  for (std::uint32_t i = 0; i < 200; ++i) {
    std::uint32_t tuple[2] = {0x0a000000u + i * 2654435761u % 0xffffff, 0xc0a80101u + i};
    EXPECT_EQ(rte_softrss(tuple, 2, kRssKey.data()), rss_hash_ipv4(tuple[0], tuple[1])) << i;
  }
}

TEST(Forwarder, ForwardsToALocalNetAndGivesEverythingBack) {
  Rig r(rig_setup());
  lnd::Rx& rx = r.head(kA, kNiA, kB, 5000);
  ASSERT_EQ(r.fwd->on_head(rx), lnd::RxVerdict::accept);
  ASSERT_EQ(rx.sink.size(), 5000u);
  EXPECT_EQ(r.ports.buffers_out[PoolClass::large], 1);
  EXPECT_EQ(r.pool(PoolClass::large).credits.cur, 1);
  EXPECT_EQ(r.peer(kA).rtr.cur, 1);
  r.fwd->on_received(rx);
  ASSERT_EQ(r.ports.sent.size(), 1u);
  EXPECT_EQ(r.ports.sent[0].to, kB);
  // Forwarded unchanged: the header is the received one, the payload the buffer.
  EXPECT_EQ(r.ports.sent[0].tx->hdr, rx.hdr);
  EXPECT_EQ(r.ports.sent[0].tx->payload.data(), rx.sink.data());
  EXPECT_EQ(r.peer(kB).tx.cur, 1);
  EXPECT_EQ(r.fwd->ni_credits()[1].cur, 3);
  r.complete();
  EXPECT_EQ(r.shared.counters[0].route_count.get(), 1u);
  EXPECT_EQ(r.shared.counters[0].route_length.get(), 5000u);
  r.expect_idle();
}

// A port that sent frames chained from the router buffer (zero copy) holds
// references to it until the device frees them: the buffer, the pool
// credit and the previous hop's router credit wait for that, the send's
// transmit credits do not.
TEST(Forwarder, ABufferADeviceStillHoldsIsFreedOnlyOnceTheDeviceLetsGo) {
  Rig r(rig_setup());
  lnd::Tx& tx = r.forward_to_b(65536);
  ASSERT_NE(tx.payload_dev, nullptr);  // a routed payload carries its buffer's reference
  tcp::BufferRef* ref = tcp::BufferRef::of(tx.payload_dev);
  EXPECT_EQ(ref->base, tx.payload.data());
  EXPECT_FALSE(ref->held_by_device());
  rte_mbuf_ext_refcnt_update(&ref->shinfo, 2);  // two frames chained from it, in the device
  r.complete();
  EXPECT_EQ(r.peer(kB).tx.cur, r.peer(kB).tx.max);  // the send's credits are back
  EXPECT_EQ(r.fwd->ni_credits()[1].cur, r.fwd->ni_credits()[1].max);
  EXPECT_EQ(r.fwd->held(), 1u);
  EXPECT_EQ(r.ports.buffers_out[PoolClass::large], 1);
  EXPECT_EQ(r.pool(PoolClass::large).credits.cur, 1);
  EXPECT_EQ(r.peer(kA).rtr.cur, 1);
  EXPECT_EQ(r.fwd->release_held(), 0u);
  rte_mbuf_ext_refcnt_update(&ref->shinfo, -1);  // one frame freed
  EXPECT_EQ(r.fwd->release_held(), 0u);
  EXPECT_EQ(r.ports.buffers_out[PoolClass::large], 1);
  rte_mbuf_ext_refcnt_update(&ref->shinfo, -1);  // the last
  EXPECT_EQ(r.fwd->release_held(), 1u);
  EXPECT_EQ(r.fwd->held(), 0u);
  r.expect_idle();
}

// A tiny message has no router buffer, and so no device reference.
TEST(Forwarder, OnlyRouterBuffersCarryADeviceReference) {
  Rig r(rig_setup());
  EXPECT_EQ(r.forward_to_b(0).payload_dev, nullptr);
  r.complete();
  r.expect_idle();
}

TEST(Forwarder, PoolClassFollowsThePayload) {
  dp::Setup s = rig_setup();
  s.nis[0].peer_buffer_credits = 8;
  Rig r(s);
  for (std::uint32_t len : {0u, 1u, 4096u, 4097u}) {
    lnd::Rx& rx = r.head(kA, kNiA, kB, len);
    ASSERT_EQ(r.fwd->on_head(rx), lnd::RxVerdict::accept);
    r.fwd->on_received(rx);
  }
  EXPECT_EQ(r.pool(PoolClass::tiny).credits.cur, 7);
  EXPECT_EQ(r.pool(PoolClass::small).credits.cur, 2);
  EXPECT_EQ(r.pool(PoolClass::large).credits.cur, 1);
  EXPECT_EQ(r.ports.buffers_out[PoolClass::tiny], 0);  // tiny messages carry no buffer
  while (!r.ports.sent.empty()) r.complete();
  r.expect_idle();
}

TEST(Forwarder, RouterCreditsQueuePerPeerAndWakeInOrder) {
  Rig r(rig_setup());  // peer_buffer_credits 2
  lnd::Rx& m1 = r.head(kA, kNiA, kB, 100);
  lnd::Rx& m2 = r.head(kA, kNiA, kB, 100);
  lnd::Rx& m3 = r.head(kA, kNiA, kB, 100);
  EXPECT_EQ(r.fwd->on_head(m1), lnd::RxVerdict::accept);
  EXPECT_EQ(r.fwd->on_head(m2), lnd::RxVerdict::accept);
  EXPECT_EQ(r.fwd->on_head(m3), lnd::RxVerdict::defer);  // back-pressure on A's connection
  EXPECT_EQ(r.peer(kA).rtr.cur, -1);
  EXPECT_EQ(r.peer(kA).rtr.min, -1);
  // Another peer is not held up by A's shortage.
  lnd::Rx& other = r.head(kA2, kNiA, kB, 100);
  EXPECT_EQ(r.fwd->on_head(other), lnd::RxVerdict::accept);
  r.fwd->on_received(m1);
  r.complete();  // m1 sent: its router credit goes to m3
  ASSERT_EQ(r.ports.resumed.size(), 1u);
  EXPECT_EQ(r.ports.resumed[0].cookie, m3.cookie);
  EXPECT_EQ(r.ports.resumed[0].sink.size(), 100u);
  r.fwd->on_received(m2);
  r.fwd->on_received(other);
  r.fwd->on_received(r.ports.resumed[0]);
  while (!r.ports.sent.empty()) r.complete();
  EXPECT_EQ(r.peer(kA).rtr.min, -1);  // the watermark stays
  r.expect_idle();
}

// lnetrctl net del: messages waiting for the deleted NI's peer are dropped
// at once, those its LND still held as their connections close, each
// counted as ni_deleted; credits and buffers all come back, the NI's slot
// is free again once its last peer is, and an NI added there serves.
TEST(Forwarder, ADeletedNiDropsWhatWaitsOnItByNameAndLeaksNothing) {
  Rig r(rig_setup());  // B: 2 peer credits
  for (const Nid& from : {kA, kA, kA2, kA2}) {
    lnd::Rx& rx = r.head(from, kNiA, kB, 100);
    ASSERT_EQ(r.fwd->on_head(rx), lnd::RxVerdict::accept);
    r.fwd->on_received(rx);
  }
  ASSERT_EQ(r.ports.sent.size(), 2u);  // two more wait for B's credits
  EXPECT_EQ(r.peer(kB).tx_wait.count, 2u);
  const NiSetup b = r.setup.nis[1];
  r.fwd->stop_ni(1, r.setup.placement);
  EXPECT_EQ(r.drops(DropReason::ni_deleted), 2u);
  EXPECT_FALSE(r.fwd->ni_on(1));
  r.fwd->forget_ni_peers(1);
  EXPECT_EQ(r.fwd->peers().count(kB), 0u);
  EXPECT_TRUE(r.fwd->ni_slot_busy(1));  // two messages still refer to B
  r.complete(-ENETDOWN);
  r.complete(-ENETDOWN);
  EXPECT_EQ(r.drops(DropReason::ni_deleted), 4u);
  r.fwd->tick();
  EXPECT_FALSE(r.fwd->ni_slot_busy(1));
  // B's net is no NI's now: a message for it is not forwarded.
  lnd::Rx& late = r.head(kA, kNiA, kB, 100);
  ASSERT_EQ(r.fwd->on_head(late), lnd::RxVerdict::accept);
  r.fwd->on_received(late);
  EXPECT_TRUE(r.ports.sent.empty());
  EXPECT_EQ(r.drops(DropReason::no_route), 1u);
  r.expect_idle();
  // Added again (in the same slot): B is reached as before.
  r.fwd->add_ni(1, b, r.setup.placement);
  r.forward_to_b(100);
  r.complete();
  r.expect_idle();
  EXPECT_EQ(r.peer(kB).send_count.get(), 1u);
}

// Three 64 KiB messages from two peers through a rig with 2 large
// buffers: the first two take them, the third waits for one.
std::vector<lnd::Rx*> one_more_than_the_large_pool(Rig& r) {
  std::vector<lnd::Rx*> rx;
  for (int i = 0; i < 3; ++i) rx.push_back(&r.head(i % 2 ? kA2 : kA, kNiA, kB, 65536));
  EXPECT_EQ(r.fwd->on_head(*rx[0]), lnd::RxVerdict::accept);
  EXPECT_EQ(r.fwd->on_head(*rx[1]), lnd::RxVerdict::accept);
  EXPECT_EQ(r.fwd->on_head(*rx[2]), lnd::RxVerdict::defer);
  return rx;
}

TEST(Forwarder, BufferPoolShortageQueuesAcrossPeers) {
  dp::Setup s = rig_setup();
  s.nis[0].peer_buffer_credits = 8;
  Rig r(s);  // 2 large buffers
  const std::vector<lnd::Rx*> rx = one_more_than_the_large_pool(r);
  EXPECT_EQ(r.pool(PoolClass::large).credits.cur, -1);
  EXPECT_EQ(r.ports.buffers_out[PoolClass::large], 2);
  r.fwd->on_received(*rx[0]);
  r.complete();
  ASSERT_EQ(r.ports.resumed.size(), 1u);  // the freed buffer went to the waiter
  EXPECT_EQ(r.ports.buffers_out[PoolClass::large], 2);
  r.fwd->on_received(*rx[1]);
  r.fwd->on_received(r.ports.resumed[0]);
  while (!r.ports.sent.empty()) r.complete();
  EXPECT_EQ(r.pool(PoolClass::large).credits.min, -1);
  r.expect_idle();
}

// lnetctl set large_buffers at run time, as Linux adjusts a pool: growing
// adds buffers and credits at once (a waiting message takes one);
// shrinking gives up idle buffers at once and busy ones as they come back.
TEST(Forwarder, APoolResizedAtRunTimeGrowsAtOnceAndShrinksAsBuffersReturn) {
  dp::Setup s = rig_setup();
  s.nis[0].peer_buffer_credits = 8;
  Rig r(s);  // 2 large buffers
  const std::vector<lnd::Rx*> rx = one_more_than_the_large_pool(r);
  r.fwd->resize_pool(PoolClass::large, 3);
  const Forwarder::PoolState& p = r.pool(PoolClass::large);
  EXPECT_EQ(std::tuple(p.nbuffers, p.req_nbuffers), std::tuple(3u, 3u));
  ASSERT_EQ(r.ports.resumed.size(), 1u);  // the waiter took the new buffer at once
  EXPECT_EQ(r.ports.buffers_out[PoolClass::large], 3);
  EXPECT_EQ(std::tuple(p.credits.cur, p.credits.max, p.credits.min), std::tuple(0, 3, 0));
  r.fwd->on_received(*rx[0]);
  r.fwd->on_received(*rx[1]);
  r.fwd->on_received(r.ports.resumed[0]);
  while (!r.ports.sent.empty()) r.complete();
  r.expect_idle();
  EXPECT_EQ(p.credits.cur, 3);
  // Down to 1 while all three are in use: each that comes back is given
  // up, credit and all, until the pool has one.
  for (int i = 0; i < 3; ++i) {
    lnd::Rx& m = r.head(kA, kNiA, kB, 65536);
    ASSERT_EQ(r.fwd->on_head(m), lnd::RxVerdict::accept);
    r.fwd->on_received(m);
  }
  r.fwd->resize_pool(PoolClass::large, 1);
  EXPECT_EQ(std::tuple(p.nbuffers, p.req_nbuffers, p.credits.cur), std::tuple(3u, 1u, 0));
  r.complete();
  EXPECT_EQ(std::tuple(p.nbuffers, p.credits.cur), std::tuple(2u, 0));
  r.complete();
  EXPECT_EQ(std::tuple(p.nbuffers, p.credits.cur), std::tuple(1u, 0));
  r.complete();
  EXPECT_EQ(std::tuple(p.nbuffers, p.credits.cur, p.credits.max), std::tuple(1u, 1, 1));
  r.expect_idle();
  // Up again: at once.
  r.fwd->resize_pool(PoolClass::large, 3);
  EXPECT_EQ(std::tuple(p.nbuffers, p.req_nbuffers, p.credits.cur), std::tuple(3u, 3u, 3));
  r.expect_idle();
  // Down to 2 with one in use: an idle one goes at once.
  lnd::Rx& m = r.head(kA, kNiA, kB, 65536);
  ASSERT_EQ(r.fwd->on_head(m), lnd::RxVerdict::accept);
  r.fwd->resize_pool(PoolClass::large, 2);
  EXPECT_EQ(std::tuple(p.nbuffers, p.credits.cur, p.credits.max), std::tuple(2u, 1, 2));
  r.fwd->on_received(m);
  r.complete();
  EXPECT_EQ(std::tuple(p.nbuffers, p.credits.cur), std::tuple(2u, 2));
  r.expect_idle();
}

TEST(Forwarder, PeerAndNiTransmitCreditsQueue) {
  dp::Setup s = rig_setup();
  s.nis[0].peer_buffer_credits = 8;
  s.nis[1].credits = 3;  // NI credits below 2 peers x 2 peer credits
  s.buffers = {8, 8, 2};
  Rig r(s);
  const Nid b2 = nid("10.2.0.3@tcp1");
  std::vector<lnd::Rx*> rx;
  for (int i = 0; i < 5; ++i) {
    rx.push_back(&r.head(kA, kNiA, i < 3 ? kB : b2, 10));
    ASSERT_EQ(r.fwd->on_head(*rx.back()), lnd::RxVerdict::accept);
    r.fwd->on_received(*rx.back());
  }
  // B takes 2 (peer credits), its third waits for a peer credit; b2's first
  // takes the last NI credit, its second waits for the NI.
  EXPECT_EQ(r.ports.sent.size(), 3u);
  EXPECT_EQ(r.peer(kB).tx.cur, -1);
  EXPECT_EQ(r.fwd->ni_credits()[1].cur, -1);
  while (!r.ports.sent.empty()) r.complete();
  EXPECT_EQ(r.shared.counters[0].route_count.get(), 5u);
  EXPECT_EQ(r.peer(kB).tx.min, -1);
  r.expect_idle();
}

TEST(Forwarder, AbortedWaitersPassTheirCreditsOn) {
  Rig r(rig_setup());
  lnd::Rx& m1 = r.head(kA, kNiA, kB, 100);
  lnd::Rx& m2 = r.head(kA, kNiA, kB, 100);
  lnd::Rx& m3 = r.head(kA, kNiA, kB, 100);
  lnd::Rx& m4 = r.head(kA, kNiA, kB, 100);
  EXPECT_EQ(r.fwd->on_head(m1), lnd::RxVerdict::accept);
  EXPECT_EQ(r.fwd->on_head(m2), lnd::RxVerdict::accept);
  EXPECT_EQ(r.fwd->on_head(m3), lnd::RxVerdict::defer);
  EXPECT_EQ(r.fwd->on_head(m4), lnd::RxVerdict::defer);
  r.fwd->on_rx_aborted(m3);  // its connection died while it waited
  r.fwd->on_rx_aborted(m2);  // and one that was being received
  EXPECT_EQ(r.drops(DropReason::send_failed), 2u);
  // m2's credit skipped over the aborted m3 to m4.
  ASSERT_EQ(r.ports.resumed.size(), 1u);
  EXPECT_EQ(r.ports.resumed[0].cookie, m4.cookie);
  r.fwd->on_received(m1);
  r.fwd->on_received(r.ports.resumed[0]);
  while (!r.ports.sent.empty()) r.complete();
  r.expect_idle();
}

// The LND could not carry a large NID to the next hop (socklnd V3): a drop
// of its own, not re-routed.
TEST(Forwarder, LargeNidTheNextHopCannotCarryIsDroppedByName) {
  Rig r(rig_setup());
  lnd::Rx& rx = r.head(kA, kNiA, kB, 100);
  ASSERT_EQ(r.fwd->on_head(rx), lnd::RxVerdict::accept);
  r.fwd->on_received(rx);
  r.complete(-EAFNOSUPPORT);
  EXPECT_EQ(r.drops(DropReason::large_nid), 1u);
  EXPECT_EQ(r.drops(DropReason::send_failed), 0u);
  EXPECT_EQ(r.peer(kB).drop_count, 1u);
  r.expect_idle();
}

TEST(Forwarder, FailedSendIsDroppedAndCreditsReturn) {
  Rig r(rig_setup());
  lnd::Rx& rx = r.head(kA, kNiA, kB, 100);
  ASSERT_EQ(r.fwd->on_head(rx), lnd::RxVerdict::accept);
  r.fwd->on_received(rx);
  r.complete(-ECONNRESET);
  EXPECT_EQ(r.drops(DropReason::send_failed), 1u);
  EXPECT_EQ(r.shared.counters[0].route_count.get(), 0u);
  EXPECT_EQ(r.peer(kB).drop_count, 1u);
  r.expect_idle();
}

TEST(Forwarder, DropsAndRejectsFollowLnetParse) {
  Rig r(rig_setup());
  // No route to tcp9: dropped on arrival, without a buffer.
  lnd::Rx& noroute = r.head(kA, kNiA, nid("10.9.0.1@tcp9"), 3000);
  EXPECT_EQ(r.fwd->on_head(noroute), lnd::RxVerdict::accept);
  EXPECT_TRUE(noroute.discard);
  EXPECT_EQ(r.drops(DropReason::no_route), 1u);
  // Addressed to a node on the arrival net: a protocol error.
  lnd::Rx& samenet = r.head(kA, kNiA, kA2, 0);
  EXPECT_EQ(r.fwd->on_head(samenet), lnd::RxVerdict::reject);
  EXPECT_EQ(r.drops(DropReason::protocol), 1u);
  // Routing disabled: dropped, counted.
  r.shared.routing = RoutingState::disabled;
  lnd::Rx& disabled = r.head(kA, kNiA, kB, 10);
  EXPECT_EQ(r.fwd->on_head(disabled), lnd::RxVerdict::accept);
  EXPECT_TRUE(disabled.discard);
  EXPECT_EQ(r.drops(DropReason::routing_disabled), 1u);
  EXPECT_EQ(r.shared.counters[0].drop_length.get(), 3010u);
  // Stopping still forwards (to drain).
  r.shared.routing = RoutingState::stopping;
  lnd::Rx& draining = r.head(kA, kNiA, kB, 10);
  EXPECT_EQ(r.fwd->on_head(draining), lnd::RxVerdict::accept);
  EXPECT_FALSE(draining.discard);
  r.fwd->on_received(draining);
  r.complete();
  r.expect_idle();
}

TEST(Forwarder, GatewayRoutesAndDeadPeers) {
  Rig r(rig_setup(), {{Net{2, 7}, kGw1, 1, 1}, {Net{2, 7}, kGw2, 1, 0}});
  lnd::Rx& rx = r.head(kA, kNiA, nid("10.7.0.5@tcp7"), 10);
  ASSERT_EQ(r.fwd->on_head(rx), lnd::RxVerdict::accept);
  r.fwd->on_received(rx);
  ASSERT_EQ(r.ports.sent.size(), 1u);
  EXPECT_EQ(r.ports.sent[0].to, kGw2);  // priority 0 beats 1
  EXPECT_EQ(r.ports.sent[0].tx->hdr.dest_nid, nid("10.7.0.5@tcp7"));  // not the next hop
  r.complete();
  // A next hop reported down (peer_timeout > 0): the other gateway instead.
  r.fwd->on_peer_down(kGw2);
  lnd::Rx& again = r.head(kA, kNiA, nid("10.7.0.5@tcp7"), 10);
  ASSERT_EQ(r.fwd->on_head(again), lnd::RxVerdict::accept);
  r.fwd->on_received(again);
  ASSERT_EQ(r.ports.sent.size(), 1u);
  EXPECT_EQ(r.ports.sent[0].to, kGw1);
  r.complete();
  // Both down: fail fast.
  r.fwd->on_peer_down(kGw1);
  lnd::Rx& lost = r.head(kA, kNiA, nid("10.7.0.5@tcp7"), 10);
  ASSERT_EQ(r.fwd->on_head(lost), lnd::RxVerdict::accept);
  r.fwd->on_received(lost);
  EXPECT_TRUE(r.ports.sent.empty());
  EXPECT_EQ(r.drops(DropReason::peer_down), 1u);
  r.expect_idle();
}

TEST(Forwarder, AdoptedSnapshotRoutesFromThenOn) {
  Rig r(rig_setup());  // no routes: tcp7 is unreachable
  lnd::Rx& lost = r.head(kA, kNiA, nid("10.7.0.5@tcp7"), 10);
  r.fwd->on_head(lost);
  r.fwd->on_received(lost);
  EXPECT_EQ(r.drops(DropReason::no_route), 1u);
  // A snapshot with two gateways, then one with only the other.
  auto next_hop_with = [&r](const RouteTable& t) {
    r.fwd->adopt(t.view());
    return r.next_hop_to_tcp7();
  };
  const RouteTable both = make_routes(r.setup, {{Net{2, 7}, kGw1, 1, 0}, {Net{2, 7}, kGw2, 1, 1}});
  EXPECT_EQ(next_hop_with(both), kGw1);
  const RouteTable only_gw2 = make_routes(r.setup, {{Net{2, 7}, kGw2, 1, 1}});
  EXPECT_EQ(next_hop_with(only_gw2), kGw2);
  r.expect_idle();
}

// ---- gateway checks for lnetr-control (shared-memory board) ------------------------

// A board of gateway slots in plain memory, as lnetr-control fills it.
struct Board {
  explicit Board(std::size_t size = 4) : n(size) {}
  std::size_t n;
  std::unique_ptr<shm::GatewayShm[]> slots = std::make_unique<shm::GatewayShm[]>(n);
  std::span<shm::GatewayShm> span() { return {slots.get(), n}; }
  void assign(std::uint32_t i, const Nid& gw, const Nid& via = {}, std::uint32_t owner = 0) {
    slots[i].nid = gw;
    slots[i].via = via;
    slots[i].owner = owner;
    slots[i].assigned = 1;
  }
  void ask(std::uint32_t i) { slots[i].request.fetch_add(1); }
};

// A board on which `r`'s worker watches gateway `gw` in slot `i`.
Board watching(Rig& r, std::uint32_t i, const Nid& gw) {
  Board b;
  b.assign(i, gw);
  r.fwd->attach_gateways(b.span());
  return b;
}

// The REPLY a gateway sends to `get` with its ping info listing `nis`.
lnd::Rx& ping_reply(Rig& r, const lnd::Tx& get, const std::vector<PingNi>& list, std::vector<std::uint8_t>& bytes,
                     std::uint32_t features = ping_feature::ni_status | ping_feature::multi_rail) {
  bytes.assign(kPingHeaderSize + (list.size() + 1) * kPingNid4EntrySize, 0);
  auto n = encode_ping_info({features, kPidLustre, 3, list}, bytes);
  EXPECT_TRUE(n);
  bytes.resize(n ? *n : 0);
  lnd::Rx& rx = r.head(get.hdr.dest_nid, get.hdr.src_nid, get.hdr.src_nid, 0);
  rx.hdr = make_reply(get.hdr, get.hdr.dest_nid, static_cast<std::uint32_t>(bytes.size()));
  return rx;
}

// Deliver `rx` with `payload` as socklnd would: head, bytes into the sink, end.
void deliver(Rig& r, lnd::Rx& rx, const std::vector<std::uint8_t>& payload, lnd::RxVerdict expect) {
  ASSERT_EQ(r.fwd->on_head(rx), expect);
  if (expect != lnd::RxVerdict::accept || rx.discard) return r.fwd->on_received(rx);
  ASSERT_EQ(rx.sink.size(), payload.size());
  std::copy(payload.begin(), payload.end(), rx.sink.begin());
  r.fwd->on_received(rx);
}

// `from`'s ACK of our push `push`, delivered.
void ack_push(Rig& r, const lnd::Tx& push, const Nid& from) {
  lnd::Rx& ack = r.head(from, push.hdr.src_nid, push.hdr.src_nid, 0);
  ack.hdr = make_ack(push.hdr, from, push.hdr.payload_length);
  deliver(r, ack, {}, lnd::RxVerdict::accept);
}

constexpr std::uint32_t kDiscovers = ping_feature::ni_status | ping_feature::multi_rail | ping_feature::discovery;

TEST(Forwarder, GatewayPingGoesOutAsAnLnetPingAndItsAnswerIsPosted) {
  Rig r(rig_setup());
  Board b = watching(r, 2, kGw1);
  EXPECT_EQ(r.fwd->send_pings(), 0u);  // assigned, nothing asked yet
  b.ask(2);
  ASSERT_EQ(r.fwd->send_pings(), 1u);
  EXPECT_EQ(r.fwd->send_pings(), 0u);  // once per request
  ASSERT_EQ(r.ports.sent.size(), 1u);
  const lnd::Tx get = *r.ports.sent[0].tx;
  EXPECT_EQ(r.ports.sent[0].to, kGw1);
  EXPECT_TRUE(is_ping(get.hdr));
  EXPECT_EQ(get.hdr.src_nid, kNiB);  // our NI on the gateway's net
  EXPECT_EQ(get.hdr.dest_nid, kGw1);
  EXPECT_EQ(get.hdr.get().sink_length, kLnetMtu);  // all of it, however many NIs
  EXPECT_EQ(b.slots[2].pings_sent.load(), 1u);
  r.complete();

  std::vector<std::uint8_t> info;
  const Nid far = nid("10.7.0.1@tcp7");
  lnd::Rx& rx = ping_reply(r, get, {{kGw1, kNiStatusUp}, {far, kNiStatusDown}}, info);
  deliver(r, rx, info, lnd::RxVerdict::accept);
  const shm::PingResult res = shm::load_result(b.slots[2]);
  EXPECT_EQ(res.seq, 1u);
  EXPECT_EQ(res.outcome, shm::PingOutcome::answered);
  EXPECT_EQ(res.features, ping_feature::ni_status | ping_feature::multi_rail);
  ASSERT_EQ(res.n_nis, 2u);
  EXPECT_EQ(res.nis[0].nid, kGw1);
  EXPECT_EQ(res.nis[0].status, kNiStatusUp);
  EXPECT_EQ(res.nis[1].nid, far);
  EXPECT_EQ(res.nis[1].status, kNiStatusDown);
  EXPECT_GE(res.done_ns, res.sent_ns);
  r.expect_idle();
}

TEST(Forwarder, AGatewayThatDiscoversIsPushedToAfterItsCheckAndItsOwnPushesLandOnItsSlot) {
  Rig r(discovering_setup(), {{Net{2, 7}, kGw1, 1, 0}});
  Board b = watching(r, 2, kGw1);
  b.ask(2);
  ASSERT_EQ(r.fwd->send_pings(), 1u);
  const lnd::Tx get = *r.ports.sent[0].tx;
  r.complete();
  std::vector<std::uint8_t> info;
  lnd::Rx& rx = ping_reply(r, get, {{kGw1, kNiStatusUp}}, info, kDiscovers);
  deliver(r, rx, info, lnd::RxVerdict::accept);
  // Discovery's push follows the answer, ACK asked for.
  ASSERT_EQ(r.fwd->flush_local(), 1u);
  const lnd::Tx push = *r.ports.sent[0].tx;
  EXPECT_EQ(r.ports.sent[0].to, kGw1);
  EXPECT_TRUE(is_push(push.hdr));
  EXPECT_EQ(push.hdr.src_nid, kNiB);
  EXPECT_FALSE(push.hdr.put().ack_wmd.is_none());
  EXPECT_EQ(b.slots[2].pushes_sent.load(), 1u);
  r.complete();
  ack_push(r, push, kGw1);
  EXPECT_EQ(b.slots[2].push_acks.load(), 1u);
  // The gateway stops routing and pushes its ping info: read onto its slot,
  // and ACKed.
  std::vector<std::uint8_t> pushed(kPingHeaderSize + 2 * kPingNid4EntrySize);
  const PingNi its[] = {{kGw1, kNiStatusUp}};
  auto n = encode_ping_info({kDiscovers | ping_feature::rte_disabled, kPidLustre, 4, its}, pushed);
  ASSERT_TRUE(n);
  pushed.resize(*n);
  lnd::Rx& in = r.head(kGw1, kNiB, kNiB, static_cast<std::uint32_t>(pushed.size()));
  in.hdr = make_put({kPidLustre, kGw1}, {kPidLustre, kNiB}, kLnetReservedPortal, kPingMatchBits, {5, 6}, 0,
                    static_cast<std::uint32_t>(pushed.size()));
  deliver(r, in, pushed, lnd::RxVerdict::accept);
  EXPECT_EQ(b.slots[2].pushes_received.load(), 1u);
  const shm::PingResult got = shm::load_pushed(b.slots[2]);
  EXPECT_EQ(got.outcome, shm::PingOutcome::answered);
  EXPECT_EQ(got.features, kDiscovers | ping_feature::rte_disabled);
  ASSERT_EQ(got.n_nis, 1u);
  EXPECT_EQ(got.nis[0].nid, kGw1);
  ASSERT_EQ(r.fwd->flush_local(), 1u);
  EXPECT_EQ(r.ports.sent[0].tx->hdr.type, MsgType::ack);
  r.complete();
  // Control moves to the gateway's other NI: taken with the next snapshot,
  // for messages and checks alike.
  const Nid rail = nid("10.2.0.19@tcp1");
  ASSERT_TRUE(shm::store_rail(b.slots[2], rail));
  EXPECT_EQ(r.next_hop_to_tcp7(), kGw1);  // (not before)
  const RouteTable next = make_routes(r.setup, {{Net{2, 7}, kGw1, 1, 0}});
  r.fwd->adopt(next.view());
  EXPECT_EQ(r.next_hop_to_tcp7(), rail);
  b.ask(2);
  ASSERT_EQ(r.fwd->send_pings(), 1u);
  EXPECT_EQ(r.ports.sent[0].to, rail);
  EXPECT_EQ(r.ports.sent[0].tx->hdr.dest_nid, rail);
  r.complete();
  // The NI left behind failing late says nothing of the gateway; its rail does.
  r.fwd->on_peer_down(kGw1);
  EXPECT_EQ(b.slots[2].down.load(), 0u);
  r.fwd->on_peer_down(rail);
  EXPECT_EQ(b.slots[2].down.load(), 1u);
  EXPECT_EQ(b.slots[2].down_events.load(), 1u);
  r.expect_idle();
}

// A push of `nis` with `features` from `from` (a peer on tcp1) to us.
lnd::Rx& push_from(Rig& r, const Nid& from, const std::vector<PingNi>& nis, std::uint32_t features,
                   std::uint32_t sequence, std::vector<std::uint8_t>& bytes) {
  bytes.assign(kPingHeaderSize + (nis.size() + 1) * kPingNid4EntrySize, 0);
  auto n = encode_ping_info({features, kPidLustre, sequence, nis}, bytes);
  EXPECT_TRUE(n);
  bytes.resize(n ? *n : 0);
  lnd::Rx& in = r.head(from, kNiB, kNiB, static_cast<std::uint32_t>(bytes.size()));
  in.hdr = make_put({kPidLustre, from}, {kPidLustre, kNiB}, kLnetReservedPortal, kPingMatchBits, {5, 6}, 0,
                    static_cast<std::uint32_t>(bytes.size()));
  return in;
}

PeerDiscovered learnt(const PeerDiscovery& d) { return shm::seq_load(d.gen, d.learnt); }

// Forward a message to kB, the first: its discovery ping (both sent).
lnd::Tx first_discovery_ping(Rig& r) {
  r.forward_to_b(10);
  EXPECT_EQ(r.fwd->flush_local(), 1u);
  r.complete();
  const lnd::Tx get = *r.ports.sent.at(0).tx;
  r.complete();
  EXPECT_TRUE(is_ping(get.hdr));
  return get;
}

TEST(Forwarder, APeerOnItsLastHopIsDiscoveredBesideTheMessageAndPushedToIfItDiscovers) {
  Rig r(discovering_setup());
  // The message goes out at once; the discovery ping after the event.
  r.forward_to_b(100);
  EXPECT_EQ(r.ports.sent[0].to, kB);
  ASSERT_EQ(r.fwd->flush_local(), 1u);
  ASSERT_EQ(r.ports.sent.size(), 2u);
  const lnd::Tx get = *r.ports.sent[1].tx;
  EXPECT_EQ(r.ports.sent[1].to, kB);
  EXPECT_TRUE(is_ping(get.hdr));
  EXPECT_EQ(get.hdr.src_nid, kNiB);
  EXPECT_EQ(get.hdr.dest_nid, kB);
  EXPECT_EQ(get.hdr.get().sink_length, 512u);
  r.complete();
  r.complete();
  const PeerDiscovery* d = r.peer(kB).discovery.load();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->state.get(), PeerDiscovery::State::pinging);
  // One discovery at a time: the next message sends no ping.
  r.forward_to_b(100);
  EXPECT_EQ(r.fwd->flush_local(), 0u);
  r.complete();
  EXPECT_EQ(d->pings.get(), 1u);
  // Its answer lists two NIs and says it discovers: our push follows.
  const Nid other = nid("10.9.0.2@tcp9");
  std::vector<std::uint8_t> info;
  lnd::Rx& rx = ping_reply(r, get, {{kB, kNiStatusUp}, {other, kNiStatusDown}}, info, kDiscovers);
  deliver(r, rx, info, lnd::RxVerdict::accept);
  PeerDiscovered l = learnt(*d);
  EXPECT_EQ(l.features, kDiscovers);
  EXPECT_EQ(l.sequence, 3u);
  EXPECT_FALSE(l.pushed);
  ASSERT_EQ(l.n_nis, 2u);
  EXPECT_EQ(l.nis[0].nid, kB);
  EXPECT_EQ(l.nis[1].nid, other);
  EXPECT_EQ(l.nis[1].status, kNiStatusDown);
  ASSERT_EQ(r.fwd->flush_local(), 1u);
  const lnd::Tx push = *r.ports.sent[0].tx;
  EXPECT_EQ(r.ports.sent[0].to, kB);
  EXPECT_TRUE(is_push(push.hdr));
  EXPECT_EQ(push.hdr.src_nid, kNiB);
  ASSERT_FALSE(push.hdr.put().ack_wmd.is_none());
  EXPECT_EQ(d->state.get(), PeerDiscovery::State::pushing);
  EXPECT_TRUE(r.peer(kB).multi_rail.get());
  r.complete();
  // A REPLY to that ping again is not ours any more.
  lnd::Rx& late = ping_reply(r, get, {{kB, kNiStatusUp}}, info, kDiscovers);
  ASSERT_EQ(r.fwd->on_head(late), lnd::RxVerdict::accept);
  EXPECT_TRUE(late.discard);
  r.fwd->on_received(late);
  EXPECT_EQ(r.drops(DropReason::not_for_us), 1u);
  // Its ACK ends discovery.
  ack_push(r, push, kB);
  EXPECT_EQ(d->state.get(), PeerDiscovery::State::discovered);
  EXPECT_EQ(d->pushes_sent.get(), 1u);
  EXPECT_EQ(d->push_acks.get(), 1u);
  // Its NI on tcp9 comes up: its push is kept (and ACKed), none goes back.
  std::vector<std::uint8_t> pushed;
  lnd::Rx& in = push_from(r, kB, {{kB, kNiStatusUp}, {other, kNiStatusUp}}, kDiscovers, 4, pushed);
  deliver(r, in, pushed, lnd::RxVerdict::accept);
  ASSERT_EQ(r.fwd->flush_local(), 1u);
  EXPECT_EQ(r.ports.sent[0].tx->hdr.type, MsgType::ack);
  r.complete();
  l = learnt(*d);
  EXPECT_TRUE(l.pushed);
  EXPECT_EQ(l.sequence, 4u);
  EXPECT_EQ(l.nis[1].status, kNiStatusUp);
  EXPECT_EQ(d->pushes_received.get(), 1u);
  EXPECT_EQ(d->state.get(), PeerDiscovery::State::discovered);
  // Our own changes reach it as to any Multi-Rail peer.
  EXPECT_EQ(r.fwd->push_ping_info(), 1u);
  ASSERT_EQ(r.fwd->flush_local(), 1u);
  r.complete();
  EXPECT_EQ(d->pushes_sent.get(), 2u);
  r.expect_idle();
}

TEST(Forwarder, OnlyRequestsBeginDiscoveryAndAFailedOneIsTriedAgainLater) {
  dp::Setup s = discovering_setup();
  s.transaction_timeout = std::chrono::seconds(0);  // every discovery is late at the next tick
  Rig r(s);
  // Neither a ping nor a REPLY through us begins discovery of where it goes.
  lnd::Rx& ping = r.head(kA, kNiA, kB, 0);
  ping.hdr = make_get({kPidLustre, kA}, {kPidLustre, kB}, kLnetReservedPortal, kPingMatchBits, {1, 2}, 512);
  ASSERT_EQ(r.fwd->on_head(ping), lnd::RxVerdict::accept);
  r.fwd->on_received(ping);
  lnd::Rx& reply = r.head(kA, kNiA, kB, 8);
  reply.hdr = make_reply(make_get({kPidLustre, kB}, {kPidLustre, kA}, 4, 0, {1, 2}, 8), kA, 8);
  deliver(r, reply, std::vector<std::uint8_t>(8), lnd::RxVerdict::accept);
  EXPECT_EQ(r.fwd->flush_local(), 0u);
  ASSERT_EQ(r.ports.sent.size(), 2u);
  r.complete();
  r.complete();
  EXPECT_EQ(r.peer(kB).discovery.load(), nullptr);
  // A PUT does; its ping goes unanswered past transaction_timeout: failed.
  r.forward_to_b(10);
  ASSERT_EQ(r.fwd->flush_local(), 1u);
  r.complete();
  r.complete();
  const PeerDiscovery* d = r.peer(kB).discovery.load();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->state.get(), PeerDiscovery::State::pinging);
  r.fwd->tick();
  EXPECT_EQ(d->state.get(), PeerDiscovery::State::failed);
  EXPECT_EQ(d->failures.get(), 1u);
  // Not again within the second ...
  r.forward_to_b(10);
  EXPECT_EQ(r.fwd->flush_local(), 0u);
  r.complete();
  // ... but after it; this ping cannot be sent: failed again.
  std::this_thread::sleep_for(std::chrono::milliseconds(1010));
  r.fwd->tick();
  r.forward_to_b(10);
  ASSERT_EQ(r.fwd->flush_local(), 1u);
  r.complete();
  r.complete(-EHOSTUNREACH);
  EXPECT_EQ(d->state.get(), PeerDiscovery::State::failed);
  EXPECT_EQ(d->pings.get(), 2u);
  EXPECT_EQ(d->failures.get(), 2u);
  r.expect_idle();
}

TEST(Forwarder, APeerThatPushesFirstIsGivenOurPingInfoOnceAndANonMultiRailPushIsIgnored) {
  Rig r(discovering_setup());
  // kB is known: it sent us something (a REPLY: no discovery of kA).
  lnd::Rx& hello = r.head(kB, kNiB, kA, 0);
  hello.hdr = make_reply(make_get({kPidLustre, kA}, {kPidLustre, kB}, 4, 0, {1, 2}, 0), kB, 0);
  ASSERT_EQ(r.fwd->on_head(hello), lnd::RxVerdict::accept);
  r.fwd->on_received(hello);
  r.complete();
  std::vector<std::uint8_t> bytes;
  // Not Multi-Rail: ACKed, not kept.
  lnd::Rx& plain = push_from(r, kB, {{kB, kNiStatusUp}}, ping_feature::ni_status, 1, bytes);
  deliver(r, plain, bytes, lnd::RxVerdict::accept);
  ASSERT_EQ(r.fwd->flush_local(), 1u);
  r.complete();
  EXPECT_EQ(r.peer(kB).discovery.load(), nullptr);
  // Multi-Rail, discovering: kept, ACKed, and ours pushed back.
  lnd::Rx& mr = push_from(r, kB, {{kB, kNiStatusUp}}, kDiscovers, 2, bytes);
  deliver(r, mr, bytes, lnd::RxVerdict::accept);
  ASSERT_EQ(r.fwd->flush_local(), 2u);
  EXPECT_EQ(r.ports.sent[1].tx->hdr.type, MsgType::ack);
  const lnd::Tx ours = *r.ports.sent[0].tx;
  EXPECT_TRUE(is_push(ours.hdr));
  EXPECT_EQ(ours.hdr.dest_nid, kB);
  r.complete();
  r.complete();
  const PeerDiscovery* d = r.peer(kB).discovery.load();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->state.get(), PeerDiscovery::State::pushing);
  EXPECT_EQ(d->pings.get(), 0u);
  ack_push(r, ours, kB);
  EXPECT_EQ(d->state.get(), PeerDiscovery::State::discovered);
  // Discovered: a message to it sends no ping; its next push no push back.
  r.forward_to_b(10);
  EXPECT_EQ(r.fwd->flush_local(), 0u);
  r.complete();
  lnd::Rx& again = push_from(r, kB, {{kB, kNiStatusUp}}, kDiscovers, 3, bytes);
  deliver(r, again, bytes, lnd::RxVerdict::accept);
  EXPECT_EQ(r.fwd->flush_local(), 1u);  // the ACK
  r.complete();
  EXPECT_EQ(d->pushes_received.get(), 2u);
  EXPECT_EQ(learnt(*d).sequence, 3u);
  r.expect_idle();
}

TEST(Forwarder, APeerWithMoreNisThanOurSinkIsAskedAgainForAllOfThem) {
  Rig r(discovering_setup());
  const lnd::Tx get = first_discovery_ping(r);
  // 40 NIs: 656 bytes, cut short at our 512 (as a ping target truncates).
  std::vector<PingNi> nis{{kB, kNiStatusUp}};
  for (std::uint32_t i = 1; i < 40; ++i) nis.push_back({Nid::make(Net{2, 9}, 0x0a090000u + i), kNiStatusUp});
  std::vector<std::uint8_t> info;
  lnd::Rx& cut = ping_reply(r, get, nis, info, kDiscovers);
  ASSERT_GT(info.size(), 512u);
  info.resize(512);
  cut.hdr.payload_length = 512;
  deliver(r, cut, info, lnd::RxVerdict::accept);
  // Asked again, for all of it; read whole.
  ASSERT_EQ(r.fwd->flush_local(), 1u);
  const lnd::Tx again = *r.ports.sent[0].tx;
  EXPECT_TRUE(is_ping(again.hdr));
  EXPECT_EQ(again.hdr.get().sink_length, kPingHeaderSize + 41 * kPingNid4EntrySize);
  r.complete();
  lnd::Rx& whole = ping_reply(r, again, nis, info, kDiscovers);
  deliver(r, whole, info, lnd::RxVerdict::accept);
  const PeerDiscovery* d = r.peer(kB).discovery.load();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->pings.get(), 2u);
  EXPECT_EQ(d->state.get(), PeerDiscovery::State::pushing);
  const PeerDiscovered l = learnt(*d);
  EXPECT_EQ(l.n_nis, shm::kPingNis);
  EXPECT_EQ(l.more_nis, 40u - shm::kPingNis);
  ASSERT_EQ(r.fwd->flush_local(), 1u);  // our push
  r.complete();
  EXPECT_EQ(r.fwd->long_replies(), 0u);
  r.expect_idle();
}

TEST(Forwarder, AReplyNoNewerThanAPushKeepsThePushAndADownPeerIsNotPinged) {
  Rig r(discovering_setup());
  const lnd::Tx get = first_discovery_ping(r);
  // Its push (sequence 5) crosses our ping; its REPLY says sequence 4.
  std::vector<std::uint8_t> bytes;
  const Nid other = nid("10.9.0.2@tcp9");
  lnd::Rx& in = push_from(r, kB, {{kB, kNiStatusUp}, {other, kNiStatusUp}}, kDiscovers, 5, bytes);
  deliver(r, in, bytes, lnd::RxVerdict::accept);
  ASSERT_EQ(r.fwd->flush_local(), 1u);  // its ACK
  r.complete();
  std::vector<std::uint8_t> info;
  lnd::Rx& rx = ping_reply(r, get, {{kB, kNiStatusUp}}, info, kDiscovers);
  rx.hdr.payload_length = static_cast<std::uint32_t>(info.size());
  info[kPingHeaderSize + 8] = 4;  // 0@lo's status: the sequence (native order)
  deliver(r, rx, info, lnd::RxVerdict::accept);
  const PeerDiscovery* d = r.peer(kB).discovery.load();
  ASSERT_NE(d, nullptr);
  PeerDiscovered l = learnt(*d);
  EXPECT_EQ(l.sequence, 5u);
  EXPECT_TRUE(l.pushed);
  EXPECT_EQ(l.n_nis, 2u);
  ASSERT_EQ(r.fwd->flush_local(), 1u);  // discovery's push all the same
  r.complete();
  // A peer down is not pinged: the message is dropped, as before.
  lnd::Rx& from_a2 = r.head(kA2, kNiA, kB, 10);  // (kA2 known, its discovery not begun)
  from_a2.hdr = make_reply(make_get({kPidLustre, kB}, {kPidLustre, kA2}, 4, 0, {1, 2}, 10), kA2, 10);
  deliver(r, from_a2, std::vector<std::uint8_t>(10), lnd::RxVerdict::accept);
  r.complete();
  r.fwd->on_peer_down(kA2);
  lnd::Rx& to_down = r.head(kB, kNiB, kA2, 10);
  deliver(r, to_down, std::vector<std::uint8_t>(10), lnd::RxVerdict::accept);
  EXPECT_EQ(r.drops(DropReason::peer_down), 1u);
  EXPECT_EQ(r.fwd->flush_local(), 0u);
  EXPECT_EQ(r.peer(kA2).discovery.load(), nullptr);
  r.expect_idle();
}

TEST(Forwarder, WithDiscoveryOffNoPeerIsPingedAndPushesAreOnlyAcked) {
  Rig r(rig_setup());
  r.forward_to_b(10);
  EXPECT_EQ(r.fwd->flush_local(), 0u);
  r.complete();
  std::vector<std::uint8_t> bytes;
  lnd::Rx& mr = push_from(r, kB, {{kB, kNiStatusUp}}, kDiscovers, 2, bytes);
  ASSERT_EQ(r.fwd->on_head(mr), lnd::RxVerdict::accept);
  EXPECT_TRUE(mr.discard);
  r.fwd->on_received(mr);
  EXPECT_EQ(r.fwd->flush_local(), 1u);  // its ACK only
  r.complete();
  EXPECT_EQ(r.peer(kB).discovery.load(), nullptr);
  r.expect_idle();
}

TEST(Forwarder, ALongPingReplyIsReadWholeAndSummarisedPerNet) {
  Rig r(rig_setup());
  Board b = watching(r, 1, kGw1);
  b.ask(1);
  ASSERT_EQ(r.fwd->send_pings(), 1u);
  const lnd::Tx get = *r.ports.sent[0].tx;
  r.complete();
  // 100 NIs: ours first, then 60 on tcp7 (only the last UP), 39 on tcp8 (all DOWN).
  std::vector<PingNi> nis{{kGw1, kNiStatusUp}};
  for (int i = 0; i < 60; ++i) nis.push_back({Nid::make(Net{2, 7}, 0x0a070000u + i), i == 59 ? kNiStatusUp : kNiStatusDown});
  for (int i = 0; i < 39; ++i) nis.push_back({Nid::make(Net{2, 8}, 0x0a080000u + i), kNiStatusDown});
  std::vector<std::uint8_t> info;
  lnd::Rx& rx = ping_reply(r, get, nis, info);
  ASSERT_GT(info.size(), 512u);
  deliver(r, rx, info, lnd::RxVerdict::accept);
  const shm::PingResult res = shm::load_result(b.slots[1]);
  ASSERT_EQ(res.outcome, shm::PingOutcome::answered);
  EXPECT_EQ(res.n_nis, shm::kPingNis);
  EXPECT_EQ(res.more_nis, 100u - shm::kPingNis);
  ASSERT_EQ(res.n_nets, 3u);
  EXPECT_EQ(res.more_nets, 0u);
  EXPECT_EQ(res.nets[0].net, kGw1.net().to_u32());
  EXPECT_EQ(res.nets[1].net, (Net{2, 7}.to_u32()));
  EXPECT_EQ(res.nets[1].listed, 60u);
  EXPECT_EQ(res.nets[1].up, 1u);
  EXPECT_EQ(res.nets[2].listed, 39u);
  EXPECT_EQ(res.nets[2].up, 0u);
  // One cut off mid-payload gives its buffer back: nothing posted.
  b.ask(1);
  r.fwd->send_pings();
  const lnd::Tx again = *r.ports.sent[0].tx;
  r.complete();
  lnd::Rx& cut = ping_reply(r, again, nis, info);
  ASSERT_EQ(r.fwd->on_head(cut), lnd::RxVerdict::accept);
  EXPECT_EQ(cut.sink.size(), info.size());
  EXPECT_EQ(r.fwd->long_replies(), 1u);
  r.fwd->on_rx_aborted(cut);
  EXPECT_EQ(r.fwd->long_replies(), 0u);
  EXPECT_EQ(shm::load_result(b.slots[1]).seq, 1u);
  r.expect_idle();
}

TEST(Forwarder, RoutedTrafficFromAGatewayIsCountedAsHeard) {
  Rig r(rig_setup(), {{Net{2, 7}, kGw1, 1, 0}});
  Board b = watching(r, 0, kGw1);
  b.ask(0);
  r.fwd->send_pings();  // the gateway's peer now points at its entry
  r.complete();
  // From a node behind it (source net tcp7): it forwards.
  lnd::Rx& routed = r.head(kGw1, kNiB, kA, 10);
  routed.hdr.src_nid = nid("10.7.0.5@tcp7");
  ASSERT_EQ(r.fwd->on_head(routed), lnd::RxVerdict::accept);
  r.fwd->on_received(routed);
  r.complete();
  EXPECT_EQ(b.slots[0].heard.load(), 1u);
  // Its own message (source net its own) is not forwarding.
  lnd::Rx& own = r.head(kGw1, kNiB, kA, 10);
  ASSERT_EQ(r.fwd->on_head(own), lnd::RxVerdict::accept);
  r.fwd->on_received(own);
  r.complete();
  EXPECT_EQ(b.slots[0].heard.load(), 1u);
  r.expect_idle();
}

TEST(Forwarder, LateOrForeignGatewayAnswersAreDroppedAndFailuresPosted) {
  Rig r(rig_setup());
  Board b = watching(r, 0, kGw1);
  b.ask(0);
  r.fwd->send_pings();
  const lnd::Tx first = *r.ports.sent[0].tx;
  r.complete();
  b.ask(0);
  r.fwd->send_pings();
  r.complete(-ECONNREFUSED);  // the second could not be sent
  shm::PingResult res = shm::load_result(b.slots[0]);
  EXPECT_EQ(res.seq, 2u);
  EXPECT_EQ(res.outcome, shm::PingOutcome::send_failed);
  // The answer to the first request comes late: dropped, nothing posted.
  std::vector<std::uint8_t> info;
  lnd::Rx& late = ping_reply(r, first, {{kGw1, kNiStatusUp}}, info);
  ASSERT_EQ(r.fwd->on_head(late), lnd::RxVerdict::accept);
  EXPECT_TRUE(late.discard);
  r.fwd->on_received(late);
  EXPECT_EQ(shm::load_result(b.slots[0]).outcome, shm::PingOutcome::send_failed);
  // Neither is a REPLY from another NID with our cookie.
  b.ask(0);
  r.fwd->send_pings();
  const lnd::Tx third = *r.ports.sent[0].tx;
  r.complete();
  lnd::Rx& forged = ping_reply(r, third, {{kGw2, kNiStatusUp}}, info);
  forged.hdr.src_nid = kGw2;
  ASSERT_EQ(r.fwd->on_head(forged), lnd::RxVerdict::accept);
  EXPECT_TRUE(forged.discard);
  r.fwd->on_received(forged);
  // A reply that is not a ping info is reported as such.
  lnd::Rx& bad = ping_reply(r, third, {{kGw1, kNiStatusUp}}, info);
  info[0] ^= 0xff;  // magic
  deliver(r, bad, info, lnd::RxVerdict::accept);
  res = shm::load_result(b.slots[0]);
  EXPECT_EQ(res.seq, 3u);
  EXPECT_EQ(res.outcome, shm::PingOutcome::bad_reply);
  EXPECT_EQ(r.drops(DropReason::not_for_us), 2u);
  r.expect_idle();
}

TEST(Forwarder, AnOperatorsPingOfARemoteNidGoesThroughAGatewayAndAnyWorkerTakesTheAnswer) {
  Rig r(rig_setup());
  Board b(shm::kMaxGateways + shm::kApiPingSlots);
  const std::uint32_t k = shm::kMaxGateways;  // the first API ping entry
  const Nid far = nid("10.7.0.5@tcp7");
  b.assign(k, far, kGw1);
  r.fwd->attach_gateways(b.span());
  b.ask(k);
  ASSERT_EQ(r.fwd->send_pings(), 1u);
  ASSERT_EQ(r.ports.sent.size(), 1u);
  lnd::Tx get = *r.ports.sent[0].tx;
  EXPECT_EQ(r.ports.sent[0].to, kGw1);  // through the gateway ...
  EXPECT_EQ(get.hdr.dest_nid, far);     // ... to the remote NID
  EXPECT_EQ(get.hdr.src_nid, kNiB);     // from our NI on the gateway's net
  EXPECT_TRUE(is_ping(get.hdr));
  r.complete();
  std::vector<std::uint8_t> info;
  lnd::Rx& rx = ping_reply(r, get, {{far, kNiStatusUp}}, info);
  rx.from = kGw1;
  deliver(r, rx, info, lnd::RxVerdict::accept);
  shm::PingResult res = shm::load_result(b.slots[k]);
  EXPECT_EQ(res.seq, 1u);
  EXPECT_EQ(res.outcome, shm::PingOutcome::answered);
  EXPECT_NE(res.sent_ns, 0);  // the sender times it

  // The next one is sent by another worker (it owns the gateway); its
  // reply comes back to this one through another gateway.  Matched against
  // the board, posted untimed.
  b.assign(k, far, kGw2, 1);
  b.ask(k);
  EXPECT_EQ(r.fwd->send_pings(), 0u);  // not ours to send
  GetFields g = get.hdr.get();
  g.return_wmd.object_cookie = (std::uint64_t{k} << 48) | 2;
  get.hdr.set(g);
  lnd::Rx& other = ping_reply(r, get, {{far, kNiStatusUp}}, info);
  other.from = kGw2;
  deliver(r, other, info, lnd::RxVerdict::accept);
  res = shm::load_result(b.slots[k]);
  EXPECT_EQ(res.seq, 2u);
  EXPECT_EQ(res.outcome, shm::PingOutcome::answered);
  EXPECT_EQ(res.sent_ns, 0);
  // One from another NID, or for an older request, is not taken.
  lnd::Rx& stale = ping_reply(r, get, {{far, kNiStatusUp}}, info);
  b.ask(k);
  ASSERT_EQ(r.fwd->on_head(stale), lnd::RxVerdict::accept);
  EXPECT_TRUE(stale.discard);
  r.fwd->on_received(stale);
  lnd::Rx& forged = ping_reply(r, get, {{kB, kNiStatusUp}}, info);
  g.return_wmd.object_cookie = (std::uint64_t{k} << 48) | 3;
  get.hdr.set(g);
  forged.hdr = make_reply(get.hdr, kB, static_cast<std::uint32_t>(info.size()));
  ASSERT_EQ(r.fwd->on_head(forged), lnd::RxVerdict::accept);
  EXPECT_TRUE(forged.discard);
  r.fwd->on_received(forged);
  EXPECT_EQ(shm::load_result(b.slots[k]).seq, 2u);
  EXPECT_EQ(r.drops(DropReason::not_for_us), 2u);
  r.expect_idle();
}

// drop_asym_route: a message for the router from a remote net is taken only
// through a gateway of a route back to that net (the route's NID, or another
// NID its last ping answer listed); forwarded messages are not checked.
TEST(Forwarder, DropAsymRouteTakesMessagesForUsOnlyThroughAGatewayRoutingBack) {
  Rig r(rig_setup(), {{Net{2, 7}, kGw1, 1, 0}});
  const Nid remote = nid("10.7.0.5@tcp7");
  const Nid gw1_other = nid("10.2.0.19@tcp1");  // another NID of gateway 1
  std::uint64_t cookie = 0;
  auto ping = [&](const Nid& via, const Nid& src) -> lnd::RxVerdict {
    lnd::Rx& p = r.head(via, kNiB, kNiB, 0, MsgType::get);
    p.hdr = make_get({kPidLustre, src}, {kPidLustre, kNiB}, kLnetReservedPortal, kPingMatchBits, {++cookie, 1},
                     kPingSinkLnetctl);
    return r.fwd->on_head(p);
  };
  auto answered = [&]() {
    const unsigned n = r.fwd->flush_local();
    for (unsigned i = 0; i < n; ++i) r.complete();
    return n == 1;
  };
  // Off (the default): answered whichever way it came.
  EXPECT_EQ(ping(kGw2, remote), lnd::RxVerdict::accept);
  EXPECT_TRUE(answered());
  r.shared.drop_asym_route = true;
  EXPECT_EQ(ping(kGw1, remote), lnd::RxVerdict::accept);
  EXPECT_TRUE(answered());
  EXPECT_EQ(ping(kGw2, remote), lnd::RxVerdict::accept);  // read and dropped
  EXPECT_FALSE(answered());
  EXPECT_EQ(r.drops(DropReason::asym_route), 1u);
  EXPECT_EQ(r.peer(kGw2).drop_count, 1u);
  // From its own net no gateway is involved: not checked.
  EXPECT_EQ(ping(kB, kB), lnd::RxVerdict::accept);
  EXPECT_TRUE(answered());
  // A Multi-Rail gateway through another of its NIDs: dropped until its ping
  // answer lists that NID.
  EXPECT_EQ(ping(gw1_other, remote), lnd::RxVerdict::accept);
  EXPECT_FALSE(answered());
  EXPECT_EQ(r.drops(DropReason::asym_route), 2u);
  Board b;
  b.assign(0, kGw1);
  r.fwd->attach_gateways(b.span());
  r.fwd->adopt(r.routes.view());
  shm::PingResult res{};
  res.outcome = shm::PingOutcome::answered;
  res.n_nis = 2;
  res.nis[0] = {kGw1, kNiStatusUp};
  res.nis[1] = {gw1_other, kNiStatusUp};
  ASSERT_TRUE(shm::store_result(b.slots[0], res));
  EXPECT_EQ(ping(gw1_other, remote), lnd::RxVerdict::accept);
  EXPECT_TRUE(answered());
  EXPECT_EQ(r.drops(DropReason::asym_route), 2u);
  // Forwarded traffic is not the check's business.
  lnd::Rx& fwd = r.head(kGw2, kNiB, kA, 10);
  fwd.hdr.src_nid = remote;
  EXPECT_EQ(r.fwd->on_head(fwd), lnd::RxVerdict::accept);
  EXPECT_FALSE(fwd.discard);
  r.fwd->on_received(fwd);
  r.complete();
  EXPECT_EQ(r.drops(DropReason::asym_route), 2u);
  r.expect_idle();
}

// Among routes tied on priority and hops the healthier gateway wins (health
// from lnetr-control on the board), then the one with fewer bytes queued and
// more credits as its owner worker publishes them: every worker ranks the
// gateways alike, not by its own (empty) view of them.
TEST(Forwarder, GatewaysRankByHealthThenTheirOwnersCredits) {
  Rig r(rig_setup(), {{Net{2, 7}, kGw1, 1, 0}, {Net{2, 7}, kGw2, 1, 0}});
  Board b;
  b.assign(0, kGw1, {}, 0);
  b.assign(1, kGw2, {}, 0);
  b.slots[0].health = 1000;
  b.slots[1].health = 1000;
  r.fwd->attach_gateways(b.span());
  r.fwd->adopt(r.routes.view());
  // Nothing in use yet (the owner makes no peer for a gateway it has not
  // sent to: thousands of gateways cost nothing until used).
  EXPECT_EQ(b.slots[0].tx_credits.load(), 0);
  EXPECT_EQ(r.fwd->peers().count(kGw1), 0u);
  // Equal: round robin.
  const Nid first = r.next_hop_to_tcp7();
  EXPECT_NE(r.next_hop_to_tcp7(), first);
  // Gateway 1 lost health (failed sends): gateway 2, every time.
  b.slots[0].health = 700;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.next_hop_to_tcp7(), kGw2);
  // A failed send to a gateway is counted for lnetr-control to charge.
  lnd::Rx& rx = r.head(kA, kNiA, nid("10.7.0.5@tcp7"), 10);
  ASSERT_EQ(r.fwd->on_head(rx), lnd::RxVerdict::accept);
  r.fwd->on_received(rx);
  ASSERT_EQ(r.ports.sent.size(), 1u);
  EXPECT_EQ(b.slots[1].tx_credits.load(), -1);  // one credit in use, published
  r.complete(-ECONNRESET);  // goes on through the other gateway
  EXPECT_EQ(b.slots[1].send_failures.load(), 1u);
  r.complete();
  b.slots[0].health = 1000;

  // Another worker, which owns neither gateway, ranks them by what the
  // owner published: gateway 2 with messages queued for credits loses.
  dp::Setup s2 = rig_setup(2);
  SharedState shared2(s2.nis.size(), 2);
  FakePorts p1;
  Forwarder f1(1, s2, shared2, r.routes.view(), p1);
  f1.attach_gateways(b.span());
  f1.adopt(r.routes.view());
  b.slots[1].tx_credits = -3;
  b.slots[1].queued_bytes = 3 * 4096;
  std::deque<lnd::Rx> rxs;  // held until the test ends, as a connection's
  for (std::uint32_t i = 0; i < 2; ++i) {  // (kA's two router credits)
    lnd::Rx& rx1 = rxs.emplace_back(put_from(kA, nid("10.7.0.5@tcp7"), 10));
    ASSERT_EQ(f1.on_head(rx1), lnd::RxVerdict::accept);
    f1.on_received(rx1);
    ASSERT_EQ(p1.posted.size(), i + 1);  // to the owner, worker 0
    EXPECT_EQ(static_cast<RouterMsg*>(p1.posted[i].second.ptr)->next_hop, kGw1);
  }
}

TEST(Forwarder, AGatewayWhoseConnectionsFailIsSkippedUntilHeardFrom) {
  Rig r(rig_setup(), {{Net{2, 7}, kGw1, 1, 0}, {Net{2, 7}, kGw2, 1, 1}});
  Board b;
  b.assign(0, kGw1);
  b.assign(1, kGw2);
  r.fwd->attach_gateways(b.span());
  r.fwd->adopt(r.routes.view());  // maps the snapshot's gateways to the board
  b.ask(0);
  r.fwd->send_pings();
  const lnd::Tx get = *r.ports.sent[0].tx;
  r.complete();
  auto next_hop = [&r] { return r.next_hop_to_tcp7(); };
  EXPECT_EQ(next_hop(), kGw1);  // priority 0
  r.fwd->on_peer_down(kGw1);
  EXPECT_EQ(b.slots[0].down.load(), 1u);
  EXPECT_EQ(b.slots[0].down_events.load(), 1u);
  EXPECT_EQ(next_hop(), kGw2);  // at once, without a new snapshot
  EXPECT_EQ(r.drops(DropReason::peer_down), 0u);
  // Its answer to a ping makes it usable again.
  std::vector<std::uint8_t> info;
  lnd::Rx& rx = ping_reply(r, get, {{kGw1, kNiStatusUp}}, info);
  deliver(r, rx, info, lnd::RxVerdict::accept);
  EXPECT_EQ(b.slots[0].down.load(), 0u);
  EXPECT_EQ(next_hop(), kGw1);
  r.expect_idle();
}

TEST(Forwarder, AFailedSendToAGatewayGoesThroughAnotherInsteadOfBeingDropped) {
  Rig r(rig_setup(), {{Net{2, 7}, kGw1, 1, 0}, {Net{2, 7}, kGw2, 1, 1}});
  lnd::Rx& rx = r.head(kA, kNiA, nid("10.7.0.5@tcp7"), 3000);
  ASSERT_EQ(r.fwd->on_head(rx), lnd::RxVerdict::accept);
  r.fwd->on_received(rx);
  ASSERT_EQ(r.ports.sent.size(), 1u);
  EXPECT_EQ(r.ports.sent[0].to, kGw1);
  r.complete(-ECONNRESET);  // kGw1's connection died under it
  ASSERT_EQ(r.ports.sent.size(), 1u);
  EXPECT_EQ(r.ports.sent[0].to, kGw2);
  EXPECT_EQ(r.ports.sent[0].tx->hdr.dest_nid, nid("10.7.0.5@tcp7"));
  EXPECT_EQ(r.ports.sent[0].tx->payload.size(), 3000u);
  EXPECT_EQ(r.shared.counters[0].reroutes.get(), 1u);
  // When the other fails too there is nowhere left: dropped, counted.
  r.complete(-ECONNRESET);
  EXPECT_TRUE(r.ports.sent.empty());
  EXPECT_EQ(r.drops(DropReason::send_failed), 1u);
  // A message for a peer on a local net is never re-routed.
  lnd::Rx& first = r.head(kA, kNiA, kB, 10);
  ASSERT_EQ(r.fwd->on_head(first), lnd::RxVerdict::accept);
  r.fwd->on_received(first);
  r.complete();
  r.fwd->on_peer_down(kB);
  lnd::Rx& direct = r.head(kA, kNiA, kB, 10);
  ASSERT_EQ(r.fwd->on_head(direct), lnd::RxVerdict::accept);
  r.fwd->on_received(direct);
  EXPECT_EQ(r.drops(DropReason::peer_down), 1u);
  EXPECT_EQ(r.shared.counters[0].reroutes.get(), 1u);
  r.expect_idle();
}

TEST(Forwarder, CrossCptMessagesGoHomeToBeFreed) {
  dp::Setup s = rig_setup(2);
  SharedState shared(s.nis.size(), 2);
  RouteTable routes = make_routes(s);
  FakePorts p0, p1;
  Forwarder f0(0, s, shared, routes.view(), p0), f1(1, s, shared, routes.view(), p1);
  // Pick a sender on CPT 0 and a destination on CPT 1.
  Nid src = kA, dst = kB;
  for (std::uint32_t a = 2; cpt_of(src, 2) != 0; ++a) src = Nid::make(kA.net(), 0x0a010000 + a);
  for (std::uint32_t a = 2; cpt_of(dst, 2) != 1; ++a) dst = Nid::make(kB.net(), 0x0a020000 + a);
  lnd::Rx rx = put_from(src, dst, 64);
  ASSERT_EQ(f0.on_head(rx), lnd::RxVerdict::accept);
  f0.on_received(rx);
  ASSERT_EQ(p0.posted.size(), 1u);  // to worker 1's ring
  EXPECT_EQ(p0.posted[0].first, 1u);
  f1.on_ring(p0.posted[0].second);
  ASSERT_EQ(p1.sent.size(), 1u);
  f1.on_sent(*p1.sent[0].tx, 0);
  ASSERT_EQ(p1.posted.size(), 1u);  // back home
  EXPECT_EQ(p1.posted[0].first, 0u);
  EXPECT_EQ(p0.buffers_out[PoolClass::small], 1);  // still held until home frees it
  f0.on_ring(p1.posted[0].second);
  EXPECT_EQ(p0.buffers_out[PoolClass::small], 0);
  EXPECT_EQ(f0.msgs_in_use(), 0u);
  EXPECT_EQ(shared.counters[1].route_count.get(), 1u);  // counted by the sender
}

// transaction_timeout: a message waiting longer for a router credit, a
// buffer, a peer's or an NI's transmit credit is dropped (`timeout`) and
// gives back what it held; one not yet read is read and thrown away.
TEST(Forwarder, MessagesWaitingLongerThanTheTransactionTimeoutAreDropped) {
  dp::Setup s = rig_setup();
  s.transaction_timeout = std::chrono::seconds(0);  // every waiter is due at the next scan
  {
    SCOPED_TRACE("waiting for a router credit");
    Rig r(s);
    lnd::Rx& a = r.head(kA, kNiA, kB, 10);
    lnd::Rx& b = r.head(kA, kNiA, kB, 10);
    lnd::Rx& c = r.head(kA, kNiA, kB, 10);
    ASSERT_EQ(r.fwd->on_head(a), lnd::RxVerdict::accept);
    ASSERT_EQ(r.fwd->on_head(b), lnd::RxVerdict::accept);
    ASSERT_EQ(r.fwd->on_head(c), lnd::RxVerdict::defer);  // kA has 2 router credits
    r.fwd->tick();
    ASSERT_EQ(r.ports.resumed.size(), 1u);
    EXPECT_TRUE(r.ports.resumed[0].discard);  // read and thrown away
    r.fwd->on_received(r.ports.resumed[0]);
    EXPECT_EQ(r.drops(DropReason::timeout), 1u);
    EXPECT_EQ(r.peer(kA).rtr.cur, 0);  // the two others hold theirs; nobody waits
    r.fwd->on_received(a);
    r.fwd->on_received(b);
    r.complete();
    r.complete();
    r.expect_idle();
  }
  {
    SCOPED_TRACE("waiting for a buffer");
    Rig r(s);
    lnd::Rx& a = r.head(kA, kNiA, kB, 5000);
    lnd::Rx& b = r.head(kA, kNiA, kB, 5000);
    lnd::Rx& c = r.head(kA2, kNiA, kB, 5000);
    ASSERT_EQ(r.fwd->on_head(a), lnd::RxVerdict::accept);
    ASSERT_EQ(r.fwd->on_head(b), lnd::RxVerdict::accept);
    ASSERT_EQ(r.fwd->on_head(c), lnd::RxVerdict::defer);  // 2 large buffers
    r.fwd->tick();
    ASSERT_EQ(r.ports.resumed.size(), 1u);
    EXPECT_TRUE(r.ports.resumed[0].discard);
    r.fwd->on_received(r.ports.resumed[0]);
    EXPECT_EQ(r.drops(DropReason::timeout), 1u);
    EXPECT_EQ(r.peer(kA2).rtr.cur, r.peer(kA2).rtr.max);  // its router credit back
    EXPECT_EQ(r.pool(PoolClass::large).credits.cur, 0);
    r.fwd->on_received(a);
    r.fwd->on_received(b);
    r.complete();
    r.complete();
    r.expect_idle();
  }
  {
    SCOPED_TRACE("waiting for the next hop's credit");
    Rig r(s);
    std::vector<lnd::Rx*> rx;
    for (const Nid& from : {kA, kA, kA2}) {
      rx.push_back(&r.head(from, kNiA, kB, 10));
      ASSERT_EQ(r.fwd->on_head(*rx.back()), lnd::RxVerdict::accept);
      r.fwd->on_received(*rx.back());
    }
    EXPECT_EQ(r.ports.sent.size(), 2u);  // kB has 2 transmit credits; the third waits
    r.fwd->tick();
    EXPECT_EQ(r.drops(DropReason::timeout), 1u);
    EXPECT_EQ(r.peer(kB).tx.cur, 0);
    EXPECT_EQ(r.peer(kB).tx_queued_bytes, 0u);
    r.complete();
    r.complete();
    EXPECT_TRUE(r.ports.sent.empty());  // the expired one is not sent after all
    r.expect_idle();
  }
  {
    SCOPED_TRACE("waiting for the NI's credit");
    Rig r(s);
    const Nid to[] = {kB, kB, nid("10.2.0.3@tcp1"), nid("10.2.0.3@tcp1"), nid("10.2.0.4@tcp1")};
    const Nid from[] = {kA, kA, kA2, kA2, nid("10.1.0.4@tcp")};
    for (std::size_t i = 0; i < 5; ++i) {
      lnd::Rx& rx = r.head(from[i], kNiA, to[i], 0);  // tiny: 8 buffers
      ASSERT_EQ(r.fwd->on_head(rx), lnd::RxVerdict::accept);
      r.fwd->on_received(rx);
    }
    EXPECT_EQ(r.ports.sent.size(), 4u);  // the NI has 4 credits; the fifth waits
    r.fwd->tick();
    EXPECT_EQ(r.drops(DropReason::timeout), 1u);
    EXPECT_EQ(r.fwd->ni_credits()[1].cur, 0);
    for (int i = 0; i < 4; ++i) r.complete();
    EXPECT_TRUE(r.ports.sent.empty());
    r.expect_idle();
  }
}

// A pool that runs dry although its credits said otherwise (a fault) costs
// that message, counted, and nothing else: no abort, every credit back.
TEST(Forwarder, AMissingBufferDropsThatMessageCountedAndReturnsItsCredits) {
  Rig r(rig_setup());
  r.ports.buffers_left = 0;
  lnd::Rx& rx = r.head(kA, kNiA, kB, 5000);
  ASSERT_EQ(r.fwd->on_head(rx), lnd::RxVerdict::accept);
  EXPECT_TRUE(rx.discard);
  EXPECT_TRUE(rx.sink.empty());
  r.fwd->on_received(rx);
  EXPECT_TRUE(r.ports.sent.empty());
  EXPECT_EQ(r.drops(DropReason::no_buffer), 1u);
  EXPECT_EQ(r.peer(kA).drop_count, 1u);
  r.expect_idle();
  // The pool has buffers again: the next message goes through.
  r.ports.buffers_left = -1;
  lnd::Tx& tx = r.forward_to_b(5000);
  EXPECT_EQ(tx.payload.size(), 5000u);
  r.complete();
  r.expect_idle();
}

// dataplane.limits.peer_idle: a peer with nothing in flight or waiting is
// freed once it has been quiet that long; one a message still refers to
// (as its previous hop, or holding its transmit credit) is kept.
TEST(Forwarder, PeersAtRestAreFreedAfterTheirIdleTimeAndBusyOnesKept) {
  dp::Setup s = rig_setup();
  s.peer_idle = std::chrono::seconds(0);  // due at the next tick once at rest
  Rig r(s);
  const WorkerCounters& c = r.shared.counters[0];
  lnd::Rx& rx = r.head(kA, kNiA, kB, 5000);
  ASSERT_EQ(r.fwd->on_head(rx), lnd::RxVerdict::accept);
  r.fwd->tick();  // kA holds a message: kept
  EXPECT_EQ(r.fwd->peers().count(kA), 1u);
  r.fwd->on_received(rx);
  r.fwd->tick();  // sent, not completed: kA (its router credit) and kB (its transmit credit) kept
  EXPECT_EQ(r.fwd->peers().size(), 2u);
  EXPECT_EQ(c.table(PeerTable::lnet).peers.get(), 2u);
  EXPECT_EQ(c.table(PeerTable::lnet).freed.get(), 0u);
  r.complete();
  r.expect_idle();
  r.fwd->tick();
  EXPECT_EQ(r.fwd->peers().size(), 0u);
  EXPECT_EQ(c.table(PeerTable::lnet).freed.get(), 2u);
  EXPECT_EQ(c.table(PeerTable::lnet).peers.get(), 0u);
  std::size_t listed = 0;
  r.fwd->peer_directory().for_each([&](const PeerNi&) { ++listed; });
  EXPECT_EQ(listed, 0u);
  // They come back as new peers, with full credits.
  r.forward_to_b(10);
  EXPECT_EQ(r.peer(kB).tx.cur, r.peer(kB).tx.max - 1);
  r.complete();
  r.expect_idle();
}

TEST(Forwarder, PeersActiveWithinTheIdleTimeAreKept) {
  Rig r(rig_setup());  // 180 s
  r.forward_to_b(10);
  r.complete();
  r.fwd->tick();
  EXPECT_EQ(r.fwd->peers().size(), 2u);
  EXPECT_EQ(r.shared.counters[0].table(PeerTable::lnet).freed.get(), 0u);
}

// A peer waiting for a credit is on the expiry list, not freed, and its
// waiters still expire (transaction_timeout walks only the peers with
// messages waiting).
TEST(Forwarder, APeerWithMessagesWaitingIsNotFreed) {
  dp::Setup s = rig_setup();
  s.peer_idle = std::chrono::seconds(0);
  Rig r(s);
  std::vector<lnd::Rx*> rx;
  for (int i = 0; i < 3; ++i) rx.push_back(&r.head(kA, kNiA, kB, 10));
  ASSERT_EQ(r.fwd->on_head(*rx[0]), lnd::RxVerdict::accept);
  ASSERT_EQ(r.fwd->on_head(*rx[1]), lnd::RxVerdict::accept);
  ASSERT_EQ(r.fwd->on_head(*rx[2]), lnd::RxVerdict::defer);  // waits for kA's router credit
  r.fwd->tick();
  EXPECT_EQ(r.fwd->peers().count(kA), 1u);
  r.fwd->on_received(*rx[0]);
  r.fwd->on_received(*rx[1]);
  r.complete();  // gives kA's credit to the waiter
  ASSERT_EQ(r.ports.resumed.size(), 1u);
  r.fwd->on_received(r.ports.resumed[0]);
  r.complete();
  r.complete();
  r.expect_idle();
  r.fwd->tick();  // still on the waiting list (pruned once a second): freed all the same
  EXPECT_EQ(r.fwd->peers().size(), 0u);
}

// dataplane.limits.peers: a message from, or to, a peer the full table
// does not know is dropped by name (`peer_table_full`) and counted; the
// peers it knows keep working; once one is freed a new one gets in.
TEST(Forwarder, ANewPeerBeyondTheLimitIsRefusedAndKnownOnesWork) {
  dp::Setup s = rig_setup();
  s.max_peers = 2;
  Rig r(s);
  const WorkerCounters& c = r.shared.counters[0];
  r.forward_to_b(10);  // kA and kB
  r.complete();
  lnd::Rx& from_new = r.head(kA2, kNiA, kB, 4000);
  ASSERT_EQ(r.fwd->on_head(from_new), lnd::RxVerdict::accept);
  EXPECT_TRUE(from_new.discard);  // read and thrown away: its connection goes on
  r.fwd->on_received(from_new);
  EXPECT_TRUE(r.ports.sent.empty());
  EXPECT_EQ(r.drops(DropReason::peer_table_full), 1u);
  EXPECT_EQ(c.table(PeerTable::lnet).refused.get(), 1u);
  EXPECT_EQ(r.fwd->peers().count(kA2), 0u);
  // To a new next hop: dropped once read, everything given back.
  lnd::Rx& to_new = r.head(kA, kNiA, nid("10.2.0.77@tcp1"), 4000);
  ASSERT_EQ(r.fwd->on_head(to_new), lnd::RxVerdict::accept);
  r.fwd->on_received(to_new);
  EXPECT_TRUE(r.ports.sent.empty());
  EXPECT_EQ(r.drops(DropReason::peer_table_full), 2u);
  EXPECT_EQ(c.table(PeerTable::lnet).refused.get(), 2u);
  r.expect_idle();
  // Known peers are unaffected.
  r.forward_to_b(10);
  r.complete();
  r.expect_idle();
  EXPECT_EQ(c.table(PeerTable::lnet).peers.get(), 2u);
  // kB leaves (idle); kA2 is let in.
  r.setup.peer_idle = std::chrono::seconds(0);
  r.fwd->tick();
  EXPECT_EQ(r.fwd->peers().size(), 0u);
  lnd::Rx& again = r.head(kA2, kNiA, kB, 10);
  ASSERT_EQ(r.fwd->on_head(again), lnd::RxVerdict::accept);
  EXPECT_FALSE(again.discard);
  r.fwd->on_received(again);
  r.complete();
  r.expect_idle();
  EXPECT_EQ(c.table(PeerTable::lnet).refused.get(), 2u);
}

// A full ring to another worker (a fault: rings are sized for every
// message) is back-pressure: messages wait, in order, and go when there
// is room.
TEST(Forwarder, AFullRingHoldsMessagesInOrderUntilThereIsRoom) {
  dp::Setup s = rig_setup(2);
  SharedState shared(s.nis.size(), 2);
  RouteTable routes = make_routes(s);
  FakePorts p0, p1;
  Forwarder f0(0, s, shared, routes.view(), p0), f1(1, s, shared, routes.view(), p1);
  Nid dst = kB;
  for (std::uint32_t a = 2; cpt_of(dst, 2) != 1; ++a) dst = Nid::make(kB.net(), 0x0a020000 + a);
  std::deque<lnd::Rx> rxs;
  p0.ring_room = 0;
  for (std::uint32_t i = 0; i < 2; ++i) {
    lnd::Rx& rx = rxs.emplace_back(put_from(kA, dst, 64, 100 + i));
    ASSERT_EQ(f0.on_head(rx), lnd::RxVerdict::accept);
    f0.on_received(rx);
  }
  EXPECT_TRUE(p0.posted.empty());
  EXPECT_EQ(f0.held(), 2u);
  EXPECT_EQ(shared.counters[0].ring_waits.get(), 2u);
  // Room for one: the first goes, the second still waits.
  p0.ring_room = 1;
  EXPECT_EQ(f0.release_held(), 1u);
  p0.ring_room = 10;
  EXPECT_EQ(f0.release_held(), 1u);
  EXPECT_EQ(f0.held(), 0u);
  ASSERT_EQ(p0.posted.size(), 2u);
  for (std::uint32_t i = 0; i < 2; ++i) {
    EXPECT_EQ(p0.posted[i].first, 1u);
    EXPECT_EQ(p0.posted[i].second.kind, RingItem::Kind::send);
    f1.on_ring(p0.posted[i].second);
  }
  ASSERT_EQ(p1.sent.size(), 2u);
  EXPECT_EQ(p1.sent[0].tx->hdr.put().match_bits, 100u);
  EXPECT_EQ(p1.sent[1].tx->hdr.put().match_bits, 101u);
  for (auto& sent : p1.sent) f1.on_sent(*sent.tx, 0);
  ASSERT_EQ(p1.posted.size(), 2u);
  for (auto& [w, item] : p1.posted) f0.on_ring(item);
  EXPECT_EQ(f0.msgs_in_use(), 0u);
  EXPECT_EQ(shared.counters[1].route_count.get(), 2u);
}

TEST(Forwarder, AReroutedMessageGoesOnThroughItsHome) {
  // Home 0; its first gateway belongs to worker 1, the other to worker 2.
  dp::Setup s = rig_setup(3);
  auto on = [](std::uint32_t cpt, std::uint32_t addr) {
    while (cpt_of(Nid::make(kGw1.net(), addr), 3) != cpt) ++addr;
    return Nid::make(kGw1.net(), addr);
  };
  Nid src = kA;
  for (std::uint32_t a = 2; cpt_of(src, 3) != 0; ++a) src = Nid::make(kA.net(), 0x0a010000 + a);
  const Nid gw1 = on(1, 0x0a020100), gw2 = on(2, 0x0a020200);
  SharedState shared(s.nis.size(), 3);
  RouteTable routes = make_routes(s, {{Net{2, 7}, gw1, 1, 0}, {Net{2, 7}, gw2, 1, 1}});
  FakePorts p0, p1, p2;
  Forwarder f0(0, s, shared, routes.view(), p0), f1(1, s, shared, routes.view(), p1),
      f2(2, s, shared, routes.view(), p2);
  lnd::Rx rx = put_from(src, nid("10.7.0.5@tcp7"), 64);
  ASSERT_EQ(f0.on_head(rx), lnd::RxVerdict::accept);
  f0.on_received(rx);
  ASSERT_EQ(p0.posted.size(), 1u);
  EXPECT_EQ(p0.posted[0].first, 1u);  // to gw1's worker
  f1.on_ring(p0.posted[0].second);
  ASSERT_EQ(p1.sent.size(), 1u);
  EXPECT_EQ(p1.sent[0].to, gw1);
  f1.on_sent(*p1.sent[0].tx, -ECONNRESET);
  // Worker 1 chose gw2 but hands the message back home, not to worker 2.
  ASSERT_EQ(p1.posted.size(), 1u);
  EXPECT_EQ(p1.posted[0].first, 0u);
  EXPECT_EQ(p1.posted[0].second.kind, RingItem::Kind::dispatch);
  f0.on_ring(p1.posted[0].second);
  ASSERT_EQ(p0.posted.size(), 2u);
  EXPECT_EQ(p0.posted[1].first, 2u);
  f2.on_ring(p0.posted[1].second);
  ASSERT_EQ(p2.sent.size(), 1u);
  EXPECT_EQ(p2.sent[0].to, gw2);
  f2.on_sent(*p2.sent[0].tx, 0);
  ASSERT_EQ(p2.posted.size(), 1u);
  EXPECT_EQ(p2.posted[0].first, 0u);  // home frees it
  f0.on_ring(p2.posted[0].second);
  EXPECT_EQ(f0.msgs_in_use(), 0u);
  EXPECT_EQ(p0.buffers_out[PoolClass::small], 0);
  EXPECT_EQ(shared.counters[1].reroutes.get(), 1u);
  EXPECT_EQ(shared.counters[2].route_count.get(), 1u);
}

TEST(Forwarder, AnswersPingsWithItsNisAndRoutingState) {
  Rig r(discovering_setup());
  lnd::Rx& ping = r.head(kA, kNiA, kNiA, 0, MsgType::get);
  ping.hdr = make_get({kPidLustre, kA}, {kPidLustre, kNiA}, kLnetReservedPortal, kPingMatchBits, {7, 8},
                      kPingSinkLnetctl);
  EXPECT_EQ(r.fwd->on_head(ping), lnd::RxVerdict::accept);
  EXPECT_EQ(r.fwd->flush_local(), 1u);
  ASSERT_EQ(r.ports.sent.size(), 1u);
  const lnd::Tx& reply = *r.ports.sent[0].tx;
  EXPECT_EQ(r.ports.sent[0].to, kA);
  EXPECT_EQ(reply.hdr.type, MsgType::reply);
  EXPECT_EQ(reply.hdr.src_nid, kNiA);
  EXPECT_EQ(reply.hdr.reply().dst_wmd, (WireHandle{7, 8}));
  auto info = decode_ping_info(reply.payload);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->features, 0x1au);  // NI_STATUS | MULTI_RAIL | DISCOVERY, as a kernel router
  std::vector<PingNi> nis(info->begin(), info->end());
  ASSERT_EQ(nis.size(), 2u);
  EXPECT_EQ(nis[0], (PingNi{kNiA, kNiStatusUp}));
  EXPECT_EQ(nis[1], (PingNi{kNiB, kNiStatusUp}));
  r.complete();
  // Nothing heard on tcp1 for the NI-status timeout: tcp1 goes DOWN; and
  // while routing is disabled the RTE_DISABLED bit is set.
  r.shared.ni[1].last_ping_ns = 0;
  r.shared.routing = RoutingState::disabled;
  lnd::Rx& ping2 = r.head(kA, kNiA, kNiA, 0, MsgType::get);
  ping2.hdr = ping.hdr;
  r.fwd->on_head(ping2);
  r.fwd->flush_local();
  auto info2 = decode_ping_info(r.ports.sent[0].tx->payload);
  ASSERT_TRUE(info2);
  EXPECT_EQ(info2->features, 0x1eu);
  EXPECT_EQ((std::vector<PingNi>(info2->begin(), info2->end())[1]), (PingNi{kNiB, kNiStatusDown}));
  r.complete();
  r.expect_idle();
}

TEST(Forwarder, AcksPushesAfterTheirPayload) {
  Rig r(rig_setup());
  lnd::Rx& push = r.head(kA, kNiA, kNiA, 48);
  push.hdr = make_put({kPidLustre, kA}, {kPidLustre, kNiA}, kLnetReservedPortal, kPingMatchBits, {3, 4}, 0, 48);
  EXPECT_EQ(r.fwd->on_head(push), lnd::RxVerdict::accept);
  EXPECT_TRUE(push.discard);
  EXPECT_EQ(r.fwd->flush_local(), 0u);  // nothing before the payload is in
  r.fwd->on_received(push);
  EXPECT_EQ(r.fwd->flush_local(), 1u);
  const lnd::Tx& ack = *r.ports.sent[0].tx;
  EXPECT_EQ(ack.hdr.type, MsgType::ack);
  EXPECT_EQ(ack.hdr.ack().dst_wmd, (WireHandle{3, 4}));
  EXPECT_EQ(ack.hdr.ack().mlength, 48u);
  EXPECT_EQ(ack.hdr.ack().match_bits, kPingMatchBits);
  r.complete();
  // Anything else for the router itself is dropped.
  lnd::Rx& other = r.head(kA, kNiA, kNiA, 10);
  EXPECT_EQ(r.fwd->on_head(other), lnd::RxVerdict::accept);
  EXPECT_TRUE(other.discard);
  EXPECT_EQ(r.drops(DropReason::not_for_us), 1u);
  r.expect_idle();
}

TEST(Forwarder, PushesItsPingInfoToPeersThatPushedToIt) {
  Rig r(rig_setup());
  // kB only forwards through us; kA pushed (it runs discovery).
  lnd::Rx& fwd = r.head(kB, kNiB, kA, 0);
  ASSERT_EQ(r.fwd->on_head(fwd), lnd::RxVerdict::accept);
  r.fwd->on_received(fwd);
  r.complete();
  lnd::Rx& push = r.head(kA, kNiA, kNiA, 48);
  push.hdr = make_put({kPidLustre, kA}, {kPidLustre, kNiA}, kLnetReservedPortal, kPingMatchBits, {3, 4}, 0, 48);
  r.fwd->on_head(push);
  r.fwd->on_received(push);
  r.fwd->flush_local();
  r.complete();  // our ACK of it
  r.shared.ni[1].link_up = false;  // tcp1 goes down
  EXPECT_EQ(r.fwd->push_ping_info(), 1u);
  ASSERT_EQ(r.fwd->flush_local(), 1u);
  ASSERT_EQ(r.ports.sent.size(), 1u);
  EXPECT_EQ(r.ports.sent[0].to, kA);
  const lnd::Tx& out = *r.ports.sent[0].tx;
  EXPECT_TRUE(is_push(out.hdr));
  EXPECT_EQ(out.hdr.src_nid, kNiA);
  EXPECT_FALSE(out.hdr.put().ack_wmd.is_none());
  auto info = decode_ping_info(out.payload);
  ASSERT_TRUE(info);
  std::vector<std::pair<Nid, std::uint32_t>> nis;
  for (const PingNi ni : *info) nis.emplace_back(ni.nid, ni.status);
  EXPECT_EQ(nis, (std::vector<std::pair<Nid, std::uint32_t>>{{kNiA, kNiStatusUp}, {kNiB, kNiStatusDown}}));
  EXPECT_EQ(r.shared.counters[0].pushes.get(), 1u);
  // Its ACK is taken quietly, not counted as a drop.
  lnd::Rx& ack = r.head(kA, kNiA, kNiA, 0);
  ack.hdr = make_ack(out.hdr, kA, out.hdr.payload_length);
  ack.hdr.src_nid = kA;
  ack.hdr.dest_nid = kNiA;
  r.complete();
  EXPECT_EQ(r.fwd->on_head(ack), lnd::RxVerdict::accept);
  r.fwd->on_received(ack);
  EXPECT_EQ(r.drops(DropReason::not_for_us), 0u);
  r.expect_idle();
}

}  // namespace
}  // namespace lnetr::dp
