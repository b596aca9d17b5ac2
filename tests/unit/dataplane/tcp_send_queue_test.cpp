// The TCP send queue (dataplane/tcp/send_queue.hpp): copied and lent
// pieces read back in order across any offsets, acknowledgement releases
// lent memory piece by piece, own_all() takes copies, held frames are let
// go once acknowledged.
#include "dataplane/tcp/send_queue.hpp"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <vector>

namespace lnetr::tcp {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes read(const SendQueue& q, std::size_t off, std::size_t len) {
  Bytes out(len);
  q.copy_out(off, len, out.data());
  return out;
}

// Lent pieces keep their device reference through partial acknowledgement;
// copied ones and own_all()'s copies have none.
TEST(SendQueue, DeviceReferencesFollowTheirLentPieces) {
  Bytes all(3000, 7);
  int dev1 = 0, dev2 = 0;  // two owners' handles
  SendQueue q;
  q.append(ByteSpan(all).first(100), false);
  q.append(ByteSpan(all).subspan(100, 1000), true, &dev1);
  q.append(ByteSpan(all).subspan(1100, 900), true);  // lent without one
  q.append(ByteSpan(all).subspan(2000, 1000), true, &dev2);
  std::vector<std::pair<std::size_t, void*>> seen;
  q.for_each_piece(50, 2900, [&](ByteSpan s, void* dev) { seen.emplace_back(s.size(), dev); });
  const std::vector<std::pair<std::size_t, void*>> want = {{50, nullptr}, {1000, &dev1}, {900, nullptr}, {950, &dev2}};
  EXPECT_EQ(seen, want);
  EXPECT_FALSE(q.survey(0, 100).dev);
  EXPECT_EQ(q.survey(0, 100).pieces, 1u);
  EXPECT_TRUE(q.survey(99, 2).dev);
  EXPECT_EQ(q.survey(99, 2).pieces, 2u);
  EXPECT_FALSE(q.survey(1100, 900).dev);
  EXPECT_TRUE(q.survey(1100, 901).dev);
  EXPECT_EQ(q.survey(0, 3000).pieces, 4u);
  q.drop_front(600);  // the first lent piece acknowledged in part
  seen.clear();
  q.for_each_piece(0, 600, [&](ByteSpan s, void* dev) { seen.emplace_back(s.size(), dev); });
  EXPECT_EQ(seen, (std::vector<std::pair<std::size_t, void*>>{{500, &dev1}, {100, nullptr}}));
  EXPECT_EQ(q.own_all(), 500u + 900u + 1000u);
  EXPECT_FALSE(q.survey(0, q.size()).dev);
}

TEST(SendQueue, MixedPiecesReadBackInOrderFromAnyOffset) {
  Bytes all(5000);
  std::iota(all.begin(), all.end(), std::uint8_t{0});
  SendQueue q;
  // Alternate copies and loans of uneven sizes.
  std::size_t at = 0;
  bool lend = false;
  for (std::size_t len : {1u, 7u, 100u, 3u, 1000u, 889u, 2000u, 1000u}) {
    q.append(ByteSpan(all).subspan(at, len), lend);
    at += len;
    lend = !lend;
  }
  ASSERT_EQ(at, all.size());
  ASSERT_EQ(q.size(), all.size());
  EXPECT_EQ(q.lent(), 7u + 3u + 889u + 1000u);
  for (std::size_t off : {0u, 1u, 8u, 107u, 110u, 1110u, 4999u})
    for (std::size_t len : {1u, 2u, 1448u}) {
      const std::size_t n = std::min(len, all.size() - off);
      EXPECT_EQ(read(q, off, n), Bytes(all.begin() + static_cast<std::ptrdiff_t>(off),
                                       all.begin() + static_cast<std::ptrdiff_t>(off + n)))
          << off << "+" << n;
    }
}

TEST(SendQueue, AcknowledgementReleasesLentMemoryPieceByPiece) {
  Bytes a(300, 1), b(300, 2);
  SendQueue q;
  q.append(a, true);
  q.append(b, true);
  q.drop_front(100);  // in the middle of the first loan
  EXPECT_EQ(q.lent(), 500u);
  EXPECT_EQ(read(q, 0, 1), Bytes{1});
  EXPECT_EQ(read(q, 200, 1), Bytes{2});
  q.drop_front(250);  // into the second
  EXPECT_EQ(q.lent(), 250u);
  EXPECT_EQ(q.size(), 250u);
  q.drop_front(1000);  // more than is queued: everything
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.lent(), 0u);
  q.append(a, false);  // and it starts again
  EXPECT_EQ(read(q, 299, 1), Bytes{1});
}

TEST(SendQueue, OwnAllCopiesLoansSoTheMemoryCanGo) {
  auto lent = std::make_unique<Bytes>(1000, 7);
  SendQueue q;
  q.append(Bytes(10, 6), false);
  q.append(*lent, true);
  q.drop_front(5);
  EXPECT_EQ(q.own_all(), 1000u);
  EXPECT_EQ(q.lent(), 0u);
  lent.reset();  // read after this: an ASan report
  Bytes want(5, 6);
  want.insert(want.end(), 1000, 7);
  EXPECT_EQ(read(q, 0, q.size()), want);
}

TEST(SendQueue, ManySmallPiecesAreFoundWithoutScanning) {
  // 100k one-byte loans (0-byte PUTs' headers would be like this, larger):
  // the pieces are found by position, and acknowledgement compacts them.
  Bytes bytes(100000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 31);
  SendQueue q;
  for (std::size_t i = 0; i < bytes.size(); ++i) q.append(ByteSpan(bytes).subspan(i, 1), true);
  for (std::size_t off = 0; off + 1448 <= bytes.size(); off += 1448) {
    ASSERT_EQ(read(q, 0, 1448), Bytes(bytes.begin() + static_cast<std::ptrdiff_t>(off),
                                      bytes.begin() + static_cast<std::ptrdiff_t>(off + 1448)));
    q.drop_front(1448);
  }
  EXPECT_EQ(q.size(), bytes.size() % 1448);
  EXPECT_EQ(q.lent(), q.size());
  q.clear();
  EXPECT_EQ(q.lent(), 0u);
}

TEST(SendQueue, CopiesCoalesceUntilSendingStarts) {
  SendQueue q;
  for (int i = 0; i < 100; ++i) q.append(Bytes(10, static_cast<std::uint8_t>(i)), false);
  std::size_t pieces = 0;
  q.for_each(0, q.size(), [&](ByteSpan) { ++pieces; });
  EXPECT_EQ(pieces, 1u);
  q.drop_front(5);  // the piece is being consumed: later copies start another
  q.append(Bytes(10, 200), false);
  pieces = 0;
  q.for_each(0, q.size(), [&](ByteSpan) { ++pieces; });
  EXPECT_EQ(pieces, 2u);
  EXPECT_EQ(read(q, q.size() - 1, 1), Bytes{200});
}

// References the queue holds, by frame.
struct Holds final : lnd::FrameRefs {
  std::map<void*, int> refs;
  bool retain(void*) noexcept override { return false; }
  void share(void*) noexcept override {}
  void release(void* f) noexcept override { --refs[f]; }
  bool hold(void* f) noexcept override {
    ++refs[f];
    return true;
  }
};

// A held piece reads back like any other, is not lent (nobody waits for
// it), keeps its frame's reference through partial acknowledgement and
// own_all(), and drops it once acknowledged whole, or cleared.
TEST(SendQueue, HeldFramesAreLetGoOnceAcknowledged) {
  Bytes f1(1000, 1), f2(1000, 2), own(100, 3);
  Holds h;
  SendQueue q;
  ASSERT_TRUE(h.hold(f1.data()));
  q.append_held(f1, f1.data(), h);
  q.append(own, false);
  ASSERT_TRUE(h.hold(f2.data()));
  q.append_held(ByteSpan(f2).first(600), f2.data(), h);
  EXPECT_EQ(q.lent(), 0u);
  EXPECT_EQ(q.held(), 1600u);
  EXPECT_EQ(q.size(), 1700u);
  std::vector<void*> devs;
  q.for_each_piece(0, q.size(), [&](ByteSpan, void* dev) { devs.push_back(dev); });
  EXPECT_EQ(devs, (std::vector<void*>{f1.data(), nullptr, f2.data()}));
  EXPECT_EQ(read(q, 999, 2), (Bytes{1, 3}));
  q.drop_front(500);  // the first in part: still held
  EXPECT_EQ(h.refs[f1.data()], 1);
  EXPECT_EQ(q.held(), 1100u);
  EXPECT_EQ(q.own_all(), 0u);  // nothing lent: held frames are the queue's own
  EXPECT_EQ(read(q, 0, 1), Bytes{1});
  q.drop_front(500);  // the rest of it
  EXPECT_EQ(h.refs[f1.data()], 0);
  EXPECT_EQ(h.refs[f2.data()], 1);
  q.clear();
  EXPECT_EQ(h.refs[f2.data()], 0);
  EXPECT_EQ(q.held(), 0u);
  {
    SendQueue gone;
    ASSERT_TRUE(h.hold(f1.data()));
    gone.append_held(f1, f1.data(), h);
  }
  EXPECT_EQ(h.refs[f1.data()], 0);  // a queue destroyed lets go too
}

}  // namespace
}  // namespace lnetr::tcp
