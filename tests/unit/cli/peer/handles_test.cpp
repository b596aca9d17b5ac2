// Wire handles: answers are matched to the operation by dst_wmd, and only
// while the operation waits: a retired, foreign, forged or reused handle
// matches nothing.
#include "cli/peer/handles.hpp"

#include <gtest/gtest.h>

#include <set>

namespace lnetr::peer {
namespace {

struct Thing {
  int id;
};

constexpr std::uint64_t kIncarnation = 0x18ea46cb800b8647ull;

TEST(Handles, IssuedHandleFindsItsOwnerUntilRetired) {
  HandleTable<Thing> t(kIncarnation, 16);
  Thing a{1}, b{2};
  const WireHandle ha = t.issue(&a), hb = t.issue(&b);
  EXPECT_EQ(ha.interface_cookie, kIncarnation);
  EXPECT_NE(ha, hb);
  EXPECT_EQ(t.find(ha), &a);
  EXPECT_EQ(t.find(hb), &b);
  EXPECT_EQ(t.live(), 2u);
  t.retire(ha);
  EXPECT_EQ(t.find(ha), nullptr);  // a late or duplicate answer
  EXPECT_EQ(t.find(hb), &b);
  t.retire(ha);  // twice: no effect
  EXPECT_EQ(t.live(), 1u);
}

TEST(Handles, ForeignOrForgedHandlesMatchNothing) {
  HandleTable<Thing> t(kIncarnation, 16);
  Thing a{1};
  const WireHandle h = t.issue(&a);
  EXPECT_EQ(t.find({kIncarnation + 1, h.object_cookie}), nullptr);  // a previous run's handle
  EXPECT_EQ(t.find({h.interface_cookie, h.object_cookie + 1}), nullptr);
  EXPECT_EQ(t.find({h.interface_cookie, h.object_cookie ^ (1ull << 40)}), nullptr);  // same slot, other sequence
  EXPECT_EQ(t.find(WireHandle::none()), nullptr);
  EXPECT_EQ(t.find({kIncarnation, 0xffff}), nullptr);  // a slot beyond the table
}

TEST(Handles, ReusedSlotGetsANewCookie) {
  HandleTable<Thing> t(kIncarnation, 1);
  Thing a{1}, b{2};
  const WireHandle h1 = t.issue(&a);
  t.retire(h1);
  const WireHandle h2 = t.issue(&b);
  EXPECT_NE(h1.object_cookie, h2.object_cookie);
  EXPECT_EQ(t.find(h1), nullptr);  // an answer to the old operation does not reach the new one
  EXPECT_EQ(t.find(h2), &b);
}

TEST(Handles, FullTableIssuesNone) {
  HandleTable<Thing> t(kIncarnation, 2);
  Thing a{1};
  EXPECT_FALSE(t.issue(&a).is_none());
  EXPECT_FALSE(t.issue(&a).is_none());
  EXPECT_TRUE(t.issue(&a).is_none());
}

TEST(Handles, CookiesNeverRepeat) {
  HandleTable<Thing> t(kIncarnation, 8);
  Thing a{1};
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    const WireHandle h = t.issue(&a);
    ASSERT_TRUE(seen.insert(h.object_cookie).second);
    if (i % 3 != 0) t.retire(h);
    if (t.live() == t.capacity()) {
      for (std::uint64_t c : seen) t.retire({kIncarnation, c});
    }
  }
}

}  // namespace
}  // namespace lnetr::peer
