// The peers a worker lists for status readers on other threads: a reader
// walking the directory while the worker adds and retires peers and
// changes their counters sees every listed peer whole and alive.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <thread>
#include <vector>

#include "dataplane/message.hpp"

namespace lnetr::dp {
namespace {

TEST(Relaxed, CountsAndConvertsLikeItsValue) {
  Relaxed<std::int32_t> r = 5;
  ++r;
  r += 10;
  --r;
  r -= 3;
  EXPECT_EQ(r.get(), 12);
  Relaxed<std::int32_t> copy = r;
  r = -1;
  EXPECT_EQ(static_cast<std::int32_t>(copy), 12);
  EXPECT_LT(r, 0);
}

TEST(Relaxed, CreditsTakeAndGiveAsLNetCounts) {
  Credits c = Credits::of(2);
  EXPECT_TRUE(c.take());
  EXPECT_TRUE(c.take());
  EXPECT_FALSE(c.take());  // the third waits
  EXPECT_EQ(c.cur.get(), -1);
  EXPECT_EQ(c.min.get(), -1);
  EXPECT_TRUE(c.give());   // owed to the waiter
  EXPECT_FALSE(c.give());
  EXPECT_EQ(c.cur.get(), 1);
  EXPECT_EQ(c.min.get(), -1);
  EXPECT_EQ(c.max.get(), 2);
}

TEST(PeerDirectory, ListsPeersInTheOrderAdded) {
  const std::size_t n = 3 * PeerDirectory::kChunk + 5;
  PeerDirectory dir;
  EXPECT_EQ(dir.size(), 0u);
  for (std::size_t i = 0; i < n; ++i) {
    PeerNi* p = dir.create(Nid::make({2, 0}, static_cast<std::uint32_t>(i)), 3);
    ASSERT_TRUE(p->listed);
    EXPECT_EQ(p->ni, 3u);
  }
  EXPECT_EQ(dir.size(), n);
  std::uint32_t next = 0;
  dir.for_each([&](const PeerNi& p) { EXPECT_EQ(p.nid.addr4(), next++); });
  EXPECT_EQ(next, n);
}

// A retired peer leaves the listing at once, its entry is reused, and it is
// deleted when no reader walks (ASan reports a use after free otherwise).
TEST(PeerDirectory, RetiredPeersLeaveAndTheirEntriesAreReused) {
  PeerDirectory dir;
  std::vector<PeerNi*> peers;
  for (std::uint32_t i = 0; i < 10; ++i) peers.push_back(dir.create(Nid::make({2, 0}, i), 0));
  for (std::uint32_t i = 0; i < 10; i += 2) dir.retire(peers[i]);
  EXPECT_EQ(dir.retired(), 5u);
  std::vector<std::uint32_t> seen;
  dir.for_each([&](const PeerNi& p) { seen.push_back(p.nid.addr4()); });
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{1, 3, 5, 7, 9}));
  EXPECT_EQ(dir.reclaim(), 5u);
  EXPECT_EQ(dir.retired(), 0u);
  PeerNi* again = dir.create(Nid::make({2, 0}, 100), 0);
  EXPECT_LT(again->dir_slot, 10u);  // a freed entry, not a new one
  EXPECT_EQ(dir.size(), 10u);
  seen.clear();
  dir.for_each([&](const PeerNi& p) { seen.push_back(p.nid.addr4()); });
  EXPECT_EQ(seen.size(), 6u);
}

// While a reader walks, a peer retired meanwhile is not deleted; once the
// walk ends it is.
TEST(PeerDirectory, APeerRetiredDuringAWalkOutlivesTheWalk) {
  PeerDirectory dir;
  PeerNi* a = dir.create(Nid::make({2, 0}, 1), 0);
  PeerNi* b = dir.create(Nid::make({2, 0}, 2), 0);
  std::size_t during = 99;
  dir.for_each([&](const PeerNi& p) {
    if (&p != a) return;
    dir.retire(b);
    during = dir.reclaim();  // the walk started before b went
  });
  EXPECT_EQ(during, 0u);
  EXPECT_EQ(dir.reclaim(), 1u);
}

// A reader on another thread while the owner adds peers, counts on them
// and retires some: every entry it reaches is a whole, live peer (its NID
// and NI set before it was listed; ASan and the canary catch a deleted
// one), and counters never go backwards.
TEST(PeerDirectory, AReaderSeesWholeLivePeersWhileTheOwnerAddsAndRetires) {
  constexpr std::size_t kPeers = 5 * PeerDirectory::kChunk;
  PeerDirectory dir;
  std::atomic<bool> done{false}, reading{false};
  std::size_t bad = 0, walks = 0;
  std::thread reader([&] {
    while (!done.load()) {
      dir.for_each([&](const PeerNi& p) {
        if (p.nid.addr4() == 0 || p.nid.addr4() > kPeers || p.ni != 7) ++bad;
        if (p.send_count.get() != 0 && p.send_count.get() != 0x5eed) ++bad;
      });
      ++walks;
      reading = true;
    }
  });
  while (!reading) std::this_thread::yield();  // the owner works while the reader walks
  std::deque<PeerNi*> live;
  std::size_t retired = 0, deleted = 0;
  for (std::size_t i = 0; i < kPeers; ++i) {
    PeerNi* p = dir.create(Nid::make({2, 0}, static_cast<std::uint32_t>(i + 1)), 7);
    p->send_count = 0x5eed;
    live.push_back(p);
    if (live.size() > 100) {  // the oldest goes
      PeerNi* old = live.front();
      live.pop_front();
      old->send_count = 0x5eed;
      dir.retire(old);
      ++retired;
    }
    deleted += dir.reclaim();
  }
  done = true;
  reader.join();
  deleted += dir.reclaim();
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(walks, 0u);
  EXPECT_EQ(deleted, retired);
  std::size_t listed = 0;
  dir.for_each([&](const PeerNi&) { ++listed; });
  EXPECT_EQ(listed, live.size());
}

}  // namespace
}  // namespace lnetr::dp
