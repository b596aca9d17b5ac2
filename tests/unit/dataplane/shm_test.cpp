#include "dataplane/shm/region.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/nid.hpp"

namespace lnetr::shm {
namespace {

Net net(std::string_view s) { return *parse_net(s); }
using test::nid;

// A table of version `v`: routes to tcp2 via two gateways and to tcp3 via
// one, every route with priority v % 1000 (so a reader can tell a table it
// read whole from one mixed from two versions).
RouteTable table(std::uint64_t v, int extra_gateways = 0) {
  auto b = *RouteTableBuilder::create(std::vector<Net>{net("tcp"), net("tcp1")});
  const auto prio = static_cast<std::uint32_t>(v % 1000);
  EXPECT_TRUE(b.add({net("tcp2"), nid("10.0.1.1@tcp1"), 1, prio}));
  EXPECT_TRUE(b.add({net("tcp2"), nid("10.0.1.2@tcp1"), 1, prio}));
  EXPECT_TRUE(b.add({net("tcp3"), nid("10.0.0.9@tcp"), kHopsUndefined, prio}));
  for (int i = 0; i < extra_gateways; ++i)
    EXPECT_TRUE(b.add({net("tcp4"), nid("10.0.2." + std::to_string(i + 1) + "@tcp1"), 2, prio}));
  b.set_version(v);
  return b.build();
}

bool same(const RouteTableView& a, const RouteTableView& b) {
  auto eq = [](auto x, auto y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size_bytes()) == 0);
  };
  return a.version() == b.version() && eq(a.local_nets(), b.local_nets()) && eq(a.nets(), b.nets()) &&
         eq(a.routes(), b.routes()) && eq(a.gateways(), b.gateways());
}

class Shm : public ::testing::Test {
 protected:
  std::string name = "/lnetr-unit-" + std::to_string(::getpid());
  void TearDown() override { Region::unlink(name); }
  Region make(std::uint32_t workers = 1, std::uint64_t slot_bytes = 64 * 1024) {
    std::string err;
    Region r = Region::create(name, workers, slot_bytes, 42, err);
    EXPECT_TRUE(r) << err;
    return r;
  }
};

TEST_F(Shm, PublishedTableIsReadWholeByAnotherMapping) {
  Region dp = make(2);
  std::string err;
  Region control = Region::attach(name, err);
  ASSERT_TRUE(control) << err;
  EXPECT_EQ(control.header().incarnation, 42u);
  EXPECT_EQ(control.header().n_workers, 2u);

  RouteReader reader(dp, 1);
  EXPECT_FALSE(reader.poll());  // nothing published yet
  EXPECT_EQ(reader.view().routes().size(), 0u);

  const RouteTable t1 = table(1);
  ASSERT_EQ(publish(control, t1.view()), PublishResult::published);
  ASSERT_TRUE(reader.poll());
  EXPECT_TRUE(same(reader.view(), t1.view()));
  EXPECT_FALSE(reader.poll());  // no change
  EXPECT_EQ(dp.worker(1).held_version.load(), 1u);
  EXPECT_EQ(dp.worker(1).adopted.load(), 1u);

  // Selection works on the view over shared memory.
  RouteCursor cursor(reader.view());
  auto r = reader.view().select(net("tcp3"), cursor, LocalNetMask::all(), [](const Route&) { return 1; });
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)->gateway, nid("10.0.0.9@tcp"));

  const RouteTable t2 = table(2, 3);
  ASSERT_EQ(publish(control, t2.view()), PublishResult::published);
  ASSERT_TRUE(reader.poll());
  EXPECT_TRUE(same(reader.view(), t2.view()));
  EXPECT_FALSE(cursor.attached_to(reader.view()));  // a new snapshot needs a re-attached cursor
}

TEST_F(Shm, AttachRefusesForeignRegions) {
  std::string err;
  EXPECT_FALSE(Region::attach(name, err));
  EXPECT_NE(err.find("cannot open shared memory"), std::string::npos) << err;

  {  // not ours at all
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 4096), 0);
    ::close(fd);
    err.clear();
    EXPECT_FALSE(Region::attach(name, err));
    EXPECT_NE(err.find("bad magic"), std::string::npos) << err;
  }
  {  // another layout version
    Region r = make();
    r.header().layout_version = kShmLayoutVersion + 1;
    err.clear();
    EXPECT_FALSE(Region::attach(name, err));
    EXPECT_NE(err.find("layout version"), std::string::npos) << err;
  }
  {  // sizes that do not add up
    Region r = make();
    r.header().slot_bytes += 8;
    err.clear();
    EXPECT_FALSE(Region::attach(name, err));
    EXPECT_NE(err.find("inconsistent sizes"), std::string::npos) << err;
  }
  err.clear();
  EXPECT_FALSE(Region::create(name, 0, 4096, 1, err));
  EXPECT_NE(err.find("workers"), std::string::npos) << err;
}

TEST_F(Shm, ALiveRegionIsNotReplacedAStaleOneIs) {
  std::string err;
  {
    Region first = make();
    first.header().incarnation = 7;
    // A second creator of the same name while the first lives: refused,
    // and the first's region is untouched.
    EXPECT_FALSE(Region::create(name, 1, 4096, 43, err));
    EXPECT_NE(err.find("belongs to a running lnetr-dataplane"), std::string::npos) << err;
    Region seen = Region::attach(name, err);
    ASSERT_TRUE(seen) << err;
    EXPECT_EQ(seen.header().incarnation, 7u);
    // Moving the Region moves its lock.
    Region moved = std::move(first);
    EXPECT_FALSE(Region::create(name, 1, 4096, 43, err));
  }
  // Its creator gone (as if killed: the name was left behind), the next
  // creator replaces it.
  err.clear();
  Region next = Region::create(name, 1, 4096, 44, err);
  ASSERT_TRUE(next) << err;
  EXPECT_EQ(next.header().incarnation, 44u);
}

TEST_F(Shm, AResultWhoseWriterDiedMidStoreReadsAsNone) {
  Region r = make();
  GatewayShm& g = r.gateway(0);
  PingResult res{};
  res.seq = 5;
  res.outcome = PingOutcome::answered;
  store_result(g, res);
  EXPECT_EQ(load_result(g).seq, 5u);
  g.result_gen.fetch_add(1);  // odd for good, as if killed inside store_result
  const auto t0 = std::chrono::steady_clock::now();
  const PingResult stuck = load_result(g);
  EXPECT_EQ(stuck.seq, 0u);
  EXPECT_EQ(stuck.outcome, PingOutcome::none);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST_F(Shm, TooBigATableIsRefused) {
  Region r = make(1, 512);
  EXPECT_EQ(publish(r, table(1, 20).view()), PublishResult::too_big);
  EXPECT_EQ(r.header().published.load(), 0u);
  EXPECT_EQ(publish(r, table(2).view()), PublishResult::published);
}

TEST_F(Shm, MalformedSlotIsRefusedAndTheHeldTableKept) {
  Region r = make();
  RouteReader reader(r, 0);
  const RouteTable t1 = table(1);
  ASSERT_EQ(publish(r, t1.view()), PublishResult::published);
  ASSERT_TRUE(reader.poll());
  ASSERT_EQ(publish(r, table(2).view()), PublishResult::published);
  // Corrupt the new slot before the worker looks: a route range past the end.
  std::uint8_t* slot = r.slot(published_slot(r.header().published.load()));
  RouteSlotHeader sh;
  std::memcpy(&sh, slot, sizeof sh);
  sh.n_routes = 1u << 30;
  std::memcpy(slot, &sh, sizeof sh);
  EXPECT_FALSE(reader.poll());
  EXPECT_EQ(r.worker(0).rejected.load(), 1u);
  EXPECT_TRUE(same(reader.view(), t1.view()));
  EXPECT_EQ(r.worker(0).held_version.load(), 1u);
  EXPECT_EQ(r.worker(0).reading_version.load(), kNoVersion);
  // Indices that are in bounds but inconsistent are refused too.
  ASSERT_EQ(publish(r, table(3).view()), PublishResult::published);
  slot = r.slot(published_slot(r.header().published.load()));
  std::memcpy(&sh, slot, sizeof sh);
  Route route;
  std::memcpy(&route, slot + sh.routes_offset, sizeof route);
  route.gateway_index = 99;
  std::memcpy(slot + sh.routes_offset, &route, sizeof route);
  EXPECT_FALSE(reader.poll());
  EXPECT_EQ(r.worker(0).rejected.load(), 2u);
  EXPECT_EQ(reader.view().version(), 1u);
  // A good one is adopted again.
  const RouteTable t4 = table(4);
  ASSERT_EQ(publish(r, t4.view()), PublishResult::published);
  EXPECT_TRUE(reader.poll());
  EXPECT_TRUE(same(reader.view(), t4.view()));
}

TEST_F(Shm, SlotsHeldByWorkersAreNotReused) {
  Region r = make(3);
  RouteReader w0(r, 0), w1(r, 1), w2(r, 2);
  std::vector<RouteTable> tables;
  for (std::uint64_t v = 1; v <= 5; ++v) tables.push_back(table(v));
  // Each worker holds a different old snapshot.
  ASSERT_EQ(publish(r, tables[0].view()), PublishResult::published);
  ASSERT_TRUE(w0.poll());
  ASSERT_EQ(publish(r, tables[1].view()), PublishResult::published);
  ASSERT_TRUE(w1.poll());
  ASSERT_EQ(publish(r, tables[2].view()), PublishResult::published);
  ASSERT_TRUE(w2.poll());
  ASSERT_EQ(publish(r, tables[3].view()), PublishResult::published);  // the fourth slot
  // Slots of versions 1, 2, 3 are held; 4 is current: nowhere to write.
  EXPECT_EQ(publish(r, tables[4].view()), PublishResult::busy);
  EXPECT_TRUE(same(w0.view(), tables[0].view()));  // untouched
  // w0 moves on to version 4 and lets go of version 1.
  ASSERT_TRUE(w0.poll());
  EXPECT_EQ(publish(r, tables[4].view()), PublishResult::published);
  EXPECT_TRUE(same(w1.view(), tables[1].view()));
  EXPECT_TRUE(same(w2.view(), tables[2].view()));
  EXPECT_TRUE(w1.poll());
  EXPECT_TRUE(same(w1.view(), tables[4].view()));
}

TEST_F(Shm, ReadersNeverSeeATornTableWhileControlPublishes) {
  constexpr std::uint32_t kWorkers = 2;
  constexpr std::uint64_t kVersions = 3000;
  Region dp = make(kWorkers);
  std::string err;
  Region control = Region::attach(name, err);
  ASSERT_TRUE(control) << err;
  std::vector<RouteTable> tables;
  for (std::uint64_t v = 1; v <= kVersions; ++v) tables.push_back(table(v, static_cast<int>(v % 4)));

  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> bad{0}, adopted{0};
  std::vector<std::thread> workers;
  for (std::uint32_t w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      RouteReader reader(dp, w);
      std::uint64_t last = 0;
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while ((!done.load(std::memory_order_relaxed) || last < kVersions) && std::chrono::steady_clock::now() < give_up) {
        if (!reader.poll()) continue;
        const RouteTableView& v = reader.view();
        // Read the table twice over, slowly, while control keeps publishing.
        for (int pass = 0; pass < 2; ++pass)
          for (const Route& route : v.routes())
            if (route.priority != v.version() % 1000 || !same(v, tables[v.version() - 1].view())) ++bad;
        if (v.version() <= last) ++bad;  // versions only go forward
        last = v.version();
        ++adopted;
      }
    });
  }
  std::uint64_t busy = 0;
  for (const RouteTable& t : tables) {
    PublishResult res;
    while ((res = publish(control, t.view())) == PublishResult::busy) {
      ++busy;
      std::this_thread::yield();
    }
    ASSERT_EQ(res, PublishResult::published);
  }
  done = true;
  for (auto& t : workers) t.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GE(adopted.load(), 2u);
  EXPECT_EQ(published_version(dp.header().published.load()), kVersions);
  EXPECT_EQ(dp.worker(0).rejected.load(), 0u);
  EXPECT_EQ(dp.worker(0).held_version.load(), kNoVersion);  // released when the reader went
  RecordProperty("busy_retries", static_cast<int>(busy));
}

TEST_F(Shm, ALockHasOneHolderAtATime) {
  const std::string lock = name + ".test-lock";
  std::string err;
  const int first = take_lock(lock, err);
  ASSERT_GE(first, 0) << err;
  EXPECT_EQ(take_lock(lock, err), -1);
  EXPECT_TRUE(err.empty()) << err;  // held, not failed
  ::close(first);
  const int second = take_lock(lock, err);
  EXPECT_GE(second, 0) << err;
  ::close(second);
  Region::unlink(lock);
}

TEST_F(Shm, AStoreNeverWaitsForAnotherWriter) {
  Region r = make();
  GatewayShm& g = r.gateway(kMaxGateways);
  PingResult res{};
  res.seq = 3;
  EXPECT_TRUE(store_result(g, res));
  g.result_gen.fetch_add(1);  // another worker is storing
  res.seq = 4;
  EXPECT_FALSE(store_result(g, res));
  g.result_gen.fetch_add(1);  // ... and is done
  EXPECT_EQ(load_result(g).seq, 3u);
  EXPECT_TRUE(store_result(g, res));
  EXPECT_EQ(load_result(g).seq, 4u);
}

TEST_F(Shm, TwoWritersOfOneEntryNeverTearAResult) {
  // An operator's ping entry: any worker may post to it.  Every field of a
  // result from writer w, round n, says (w, n).
  Region dp = make(2);
  std::string err;
  Region control = Region::attach(name, err);
  ASSERT_TRUE(control) << err;
  GatewayShm& entry = dp.gateway(kMaxGateways + 1);
  std::atomic<bool> stop{false};
  std::array<std::atomic<std::uint64_t>, 3> stored{};  // by writer 1, 2
  auto writer = [&](std::uint64_t w) {
    for (std::uint64_t n = 1; !stop.load(); ++n) {
      PingResult r{};
      r.seq = (w << 40) | n;
      r.features = static_cast<std::uint32_t>(r.seq);
      r.sent_ns = r.done_ns = static_cast<std::int64_t>(r.seq);
      r.n_nets = kPingNets;
      for (auto& e : r.nis) e.status = static_cast<std::uint32_t>(r.seq);
      for (auto& e : r.nets) e.net = static_cast<std::uint32_t>(r.seq);
      if (store_result(entry, r)) stored[w].fetch_add(1);
    }
  };
  std::thread a(writer, 1), b(writer, 2);
  std::uint64_t torn = 0, reads = 0;
  std::array<bool, 3> seen{};
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < end) {
    const PingResult r = load_result(control.gateway(kMaxGateways + 1));
    if (r.seq == 0) continue;
    ++reads;
    const auto tag = static_cast<std::uint32_t>(r.seq);
    bool whole = r.features == tag && r.sent_ns == static_cast<std::int64_t>(r.seq) && r.done_ns == r.sent_ns;
    for (const auto& e : r.nis) whole = whole && e.status == tag;
    for (const auto& e : r.nets) whole = whole && e.net == tag;
    if (!whole) ++torn;
    if ((r.seq >> 40) <= 2) seen[r.seq >> 40] = true;
  }
  stop.store(true);
  a.join();
  b.join();
  EXPECT_EQ(torn, 0u) << "of " << reads << " reads";
  EXPECT_GT(stored[1].load(), 0u);
  EXPECT_GT(stored[2].load(), 0u);
  EXPECT_TRUE(seen[1] || seen[2]);
  EXPECT_EQ(entry.result_gen.load() % 2, 0u);  // no writer left it mid-store
}

TEST_F(Shm, GatewayBoardIsSharedAndResultsAreNeverTorn) {
  Region dp = make(2);
  std::string err;
  Region control = Region::attach(name, err);
  ASSERT_TRUE(control) << err;
  ASSERT_EQ(control.gateways().size(), kMaxGateways + kApiPingSlots);
  // What control writes, the dataplane's mapping sees.
  control.gateway(5).nid = nid("10.0.1.1@tcp1");
  control.gateway(5).owner = 1;
  control.gateway(5).assigned.store(1);
  EXPECT_EQ(dp.gateway(5).nid, nid("10.0.1.1@tcp1"));
  EXPECT_EQ(dp.gateway(5).assigned.load(), 1u);
  // Worker counters the dataplane adds to, control reads.
  dp.counters(1).route_count.add(5);
  dp.counters(1).drops[0].add();
  EXPECT_EQ(control.counters(1).route_count.get(), 5u);
  EXPECT_EQ(control.counters(1).drops[0].get(), 1u);
  EXPECT_EQ(control.counters(0).route_count.get(), 0u);
  // A worker storing results as fast as it can; control reads each whole:
  // every field of result n says n.
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    for (std::uint64_t n = 1; !stop.load(); ++n) {
      PingResult r{};
      r.seq = n;
      r.features = static_cast<std::uint32_t>(n);
      r.sent_ns = static_cast<std::int64_t>(n);
      r.done_ns = static_cast<std::int64_t>(n);
      r.n_nis = kPingNis;
      for (auto& e : r.nis) e.status = static_cast<std::uint32_t>(n);
      store_result(dp.gateway(5), r);
    }
  });
  std::uint64_t torn = 0, last = 0, reads = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < end) {
    const PingResult r = load_result(control.gateway(5));
    ++reads;
    bool whole = r.features == static_cast<std::uint32_t>(r.seq) && r.sent_ns == static_cast<std::int64_t>(r.seq) &&
                 r.done_ns == r.sent_ns;
    for (const auto& e : r.nis) whole = whole && e.status == static_cast<std::uint32_t>(r.seq);
    if (!whole) ++torn;
    EXPECT_GE(r.seq, last);
    last = r.seq;
  }
  stop.store(true);
  worker.join();
  EXPECT_EQ(torn, 0u) << "of " << reads << " reads";
  EXPECT_GT(last, 0u);
}

}  // namespace
}  // namespace lnetr::shm
