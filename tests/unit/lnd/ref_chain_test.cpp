// A payload received by reference (lnd/ref_chain.hpp): its runs in
// order with the buffer's between them, references let go exactly once.
#include "lnd/ref_chain.hpp"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

namespace lnetr::lnd {
namespace {

struct Counted final : FrameRefs {
  std::map<void*, int> refs;  // references taken and not dropped, per frame
  bool retain(void* f) noexcept override {
    ++refs[f];
    return true;
  }
  void share(void* f) noexcept override { ++refs[f]; }
  void release(void* f) noexcept override { --refs[f]; }
  int total() const {
    return std::accumulate(refs.begin(), refs.end(), 0, [](int n, const auto& kv) { return n + kv.second; });
  }
};

using Bytes = std::vector<std::uint8_t>;

Bytes read(RefChain& c) {
  Bytes out;
  for (const auto& p : c.pieces()) out.insert(out.end(), p.data, p.data + p.len);
  return out;
}

struct RefChainTest : ::testing::Test {
  Bytes buf = Bytes(100, 0xbb);  // the payload's place
  Bytes frame1 = Bytes(30, 0x11), frame2 = Bytes(30, 0x22);
  int buf_dev = 0;
  Counted refs;
  RefChain chain;
  void SetUp() override { chain.reset(buf.data(), buf.size(), &buf_dev); }
  void refer(std::size_t at, Bytes& frame, std::size_t len) {
    refs.retain(frame.data());
    chain.refer(buf.data() + at, ByteSpan(frame.data(), len), frame.data(), refs);
  }
};

TEST_F(RefChainTest, NothingReferredIsTheBufferWhole) {
  ASSERT_EQ(chain.pieces().size(), 1u);
  EXPECT_EQ(chain.pieces()[0].data, buf.data());
  EXPECT_EQ(chain.pieces()[0].len, 100u);
  EXPECT_EQ(chain.pieces()[0].dev, &buf_dev);
  EXPECT_EQ(chain.referenced(), 0u);
}

TEST_F(RefChainTest, ReferredRunsSitBetweenTheBuffersRuns) {
  refer(10, frame1, 30);  // [10, 40) in frame1
  refer(40, frame2, 20);  // [40, 60) in frame2
  const auto& p = chain.pieces();
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].data, buf.data());
  EXPECT_EQ(p[0].len, 10u);
  EXPECT_EQ(p[1].dev, frame1.data());
  EXPECT_EQ(p[2].dev, frame2.data());
  EXPECT_EQ(p[2].len, 20u);
  EXPECT_EQ(p[3].data, buf.data() + 60);
  EXPECT_EQ(p[3].len, 40u);
  EXPECT_EQ(p[3].dev, &buf_dev);
  EXPECT_EQ(chain.referenced(), 50u);
  Bytes want(100, 0xbb);
  std::fill(want.begin() + 10, want.begin() + 40, 0x11);
  std::fill(want.begin() + 40, want.begin() + 60, 0x22);
  EXPECT_EQ(read(chain), want);
  chain.release();
  EXPECT_EQ(refs.total(), 0);
  EXPECT_EQ(read(chain), Bytes(100, 0xbb));  // the buffer alone again
}

TEST_F(RefChainTest, MaterializeCopiesTheRunsFromAPointOnIntoTheBuffer) {
  refer(0, frame1, 30);
  refer(30, frame2, 30);
  EXPECT_EQ(chain.materialize(buf.data() + 30), 30u);  // frame2's run only
  EXPECT_EQ(refs.refs[frame2.data()], 0);
  EXPECT_EQ(refs.refs[frame1.data()], 1);
  EXPECT_TRUE(std::all_of(buf.begin() + 30, buf.begin() + 60, [](std::uint8_t b) { return b == 0x22; }));
  EXPECT_EQ(chain.referenced(), 30u);
  EXPECT_EQ(chain.pieces().size(), 2u);
  EXPECT_EQ(chain.materialize(buf.data() + 10), 30u);  // a run starting before: copied whole
  EXPECT_EQ(refs.total(), 0);
  EXPECT_EQ(chain.referenced(), 0u);
}

TEST_F(RefChainTest, AResetOrADestructionLetsGo) {
  refer(0, frame1, 30);
  chain.reset(buf.data(), 50, nullptr);
  EXPECT_EQ(refs.total(), 0);
  {
    RefChain other;
    other.reset(buf.data(), 100, nullptr);
    refs.retain(frame2.data());
    other.refer(buf.data(), ByteSpan(frame2.data(), 30), frame2.data(), refs);
  }
  EXPECT_EQ(refs.total(), 0);
}

TEST_F(RefChainTest, AMoveCarriesTheReferencesAndDropsTheTargets) {
  refer(0, frame1, 30);
  RefChain target;
  target.reset(buf.data(), 100, nullptr);
  refs.retain(frame2.data());
  target.refer(buf.data(), ByteSpan(frame2.data(), 30), frame2.data(), refs);
  target = std::move(chain);
  EXPECT_EQ(refs.refs[frame2.data()], 0);  // the target's own, dropped
  EXPECT_EQ(refs.refs[frame1.data()], 1);  // moved, not dropped
  EXPECT_EQ(target.referenced(), 30u);
  EXPECT_EQ(chain.referenced(), 0u);
  RefChain moved(std::move(target));
  EXPECT_EQ(moved.referenced(), 30u);
  moved.release();
  EXPECT_EQ(refs.total(), 0);
}

}  // namespace
}  // namespace lnetr::lnd
