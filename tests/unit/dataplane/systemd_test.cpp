// The service watchdog is fed only while every worker loop moves, and the
// journal prefixes follow the levels.
#include "dataplane/systemd.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace lnetr::systemd {
namespace {

using namespace std::chrono_literals;

struct Rig {
  std::vector<std::uint64_t> loops = std::vector<std::uint64_t>(3, 0);
  int sent = 0;
  std::vector<std::size_t> stalled;
  ProgressWatchdog dog{
      2s, 3, [this](std::size_t i) { return loops[i]; }, [this] { ++sent; },
      [this](std::size_t i) { stalled.push_back(i); }};
  ProgressWatchdog::Clock::time_point t{};
  void all_move() {
    for (auto& l : loops) l += 7;
  }
  void advance(std::chrono::milliseconds d) { t += d; dog.tick(t); }
};

TEST(ProgressWatchdog, FedEveryHalfPeriodWhileAllWorkersLoop) {
  Rig r;
  r.dog.tick(r.t);  // first readings
  for (int i = 0; i < 10; ++i) {
    r.all_move();
    r.advance(100ms);
  }
  // 1 s: one half period, one feed.
  EXPECT_EQ(r.sent, 1);
  for (int i = 0; i < 10; ++i) {
    r.all_move();
    r.advance(100ms);
  }
  EXPECT_EQ(r.sent, 2);
  EXPECT_TRUE(r.stalled.empty());
}

TEST(ProgressWatchdog, OneStuckWorkerStopsTheFeedAndIsNamedOnce) {
  Rig r;
  r.dog.tick(r.t);
  for (int i = 0; i < 50; ++i) {
    r.loops[0] += 1;
    r.loops[2] += 1;  // worker 1 never moves
    r.advance(100ms);
  }
  EXPECT_EQ(r.sent, 0);
  ASSERT_EQ(r.stalled.size(), 1u);
  EXPECT_EQ(r.stalled[0], 1u);
  // It moves again: fed at the next check, and named again if it stops.
  for (int i = 0; i < 10; ++i) {
    r.all_move();
    r.advance(100ms);
  }
  EXPECT_EQ(r.sent, 1);
  for (int i = 0; i < 10; ++i) {
    r.loops[0] += 1;
    r.loops[2] += 1;
    r.advance(100ms);
  }
  EXPECT_EQ(r.stalled.size(), 2u);
}

TEST(ProgressWatchdog, WithoutAPeriodNothingIsChecked) {
  int sent = 0, read = 0;
  ProgressWatchdog dog{0us, 1, [&](std::size_t) { return std::uint64_t(++read); }, [&] { ++sent; },
                       [](std::size_t) {}};
  EXPECT_FALSE(dog.enabled());
  for (int i = 0; i < 100; ++i) dog.tick(ProgressWatchdog::Clock::time_point{} + std::chrono::seconds(i));
  EXPECT_EQ(sent, 0);
  EXPECT_EQ(read, 0);
}

}  // namespace
}  // namespace lnetr::systemd
