// The peers a worker lists for status readers on other threads: a reader
// walking the directory while the worker adds peers and changes their
// counters sees every listed peer whole, in the order added.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <thread>

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
  std::deque<PeerNi> peers(3 * PeerDirectory::kChunk + 5);
  PeerDirectory dir;
  EXPECT_EQ(dir.size(), 0u);
  for (std::size_t i = 0; i < peers.size(); ++i) {
    peers[i].nid = Nid::make({2, 0}, static_cast<std::uint32_t>(i));
    ASSERT_TRUE(dir.add(&peers[i]));
  }
  EXPECT_EQ(dir.size(), peers.size());
  std::uint32_t next = 0;
  dir.for_each([&](const PeerNi& p) { EXPECT_EQ(p.nid.addr4(), next++); });
  EXPECT_EQ(next, peers.size());
}

// A reader on another thread while the owner adds peers and counts on
// them: every entry it reaches is a complete peer (its NID set before it
// was listed), the listing only grows, and counters never go backwards.
TEST(PeerDirectory, AReaderSeesWholePeersWhileTheOwnerAdds) {
  constexpr std::size_t kPeers = 5 * PeerDirectory::kChunk;
  std::deque<PeerNi> peers(kPeers);
  PeerDirectory dir;
  std::atomic<bool> done{false}, reading{false};
  std::size_t bad = 0, walks = 0, last_size = 0;
  std::uint64_t last_sends = 0;
  std::thread reader([&] {
    while (!done.load()) {
      std::size_t n = 0;
      std::uint64_t sends = 0;
      dir.for_each([&](const PeerNi& p) {
        if (p.nid.addr4() != n + 1 || p.ni != 7) ++bad;
        sends += p.send_count;
        ++n;
      });
      if (n < last_size || (n > 0 && sends < last_sends)) ++bad;
      last_size = n;
      last_sends = sends;
      ++walks;
      reading = true;
    }
  });
  while (!reading) std::this_thread::yield();  // the owner adds while the reader walks
  for (std::size_t i = 0; i < kPeers; ++i) {
    PeerNi& p = peers[i];
    p.nid = Nid::make({2, 0}, static_cast<std::uint32_t>(i + 1));
    p.ni = 7;
    ASSERT_TRUE(dir.add(&p));
    for (std::size_t k = 0; k <= i; k += 97) ++peers[k].send_count;
  }
  done = true;
  reader.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(walks, 0u);
  EXPECT_EQ(dir.size(), kPeers);
}

}  // namespace
}  // namespace lnetr::dp
