// A worker's log lines: queued without blocking, rate-limited, drained by
// another thread, suppressions counted and reported.
#include "dataplane/log.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace lnetr::dp {
namespace {

using Lines = std::vector<std::pair<std::string, std::string>>;

Lines drain(WorkerLog& log) {
  Lines out;
  log.drain([&out](const char* level, const char* text) { out.emplace_back(level, text); });
  return out;
}

constexpr std::uint64_t kSecond = 1000000000;

TEST(WorkerLog, BurstThenSuppressed) {
  std::atomic<std::uint64_t> suppressed{0};
  WorkerLog log(3, suppressed);
  const std::uint64_t t = 5 * kSecond;
  int accepted = 0;
  for (int i = 0; i < 30; ++i) accepted += log.push("warning", ("line " + std::to_string(i)).c_str(), t) ? 1 : 0;
  EXPECT_EQ(accepted, static_cast<int>(WorkerLog::kBurst));
  EXPECT_EQ(log.suppressed(), 30 - static_cast<std::uint64_t>(WorkerLog::kBurst));
  EXPECT_EQ(suppressed.load(), log.suppressed());  // the counter the metrics read
  const Lines lines = drain(log);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(WorkerLog::kBurst));
  EXPECT_EQ(lines.front(), (std::pair<std::string, std::string>{"warning", "line 0"}));
  EXPECT_EQ(lines.back().second, "line 19");
  EXPECT_TRUE(drain(log).empty());
}

TEST(WorkerLog, RefillsAtItsRate) {
  std::atomic<std::uint64_t> suppressed{0};
  WorkerLog log(0, suppressed);
  std::uint64_t t = kSecond;
  while (log.push("info", "x", t)) {
  }
  const std::uint64_t before = log.suppressed();
  t += kSecond;  // kPerSecond more
  int accepted = 0;
  for (int i = 0; i < 20; ++i) accepted += log.push("info", "y", t) ? 1 : 0;
  EXPECT_EQ(accepted, static_cast<int>(WorkerLog::kPerSecond));
  EXPECT_EQ(log.suppressed(), before + 20 - static_cast<std::uint64_t>(WorkerLog::kPerSecond));
}

TEST(WorkerLog, AFullRingSuppressesRatherThanOverwrites) {
  std::atomic<std::uint64_t> suppressed{0};
  WorkerLog log(0, suppressed);
  std::uint64_t t = kSecond;
  int accepted = 0;
  for (std::size_t i = 0; i < WorkerLog::kSlots + 10; ++i, t += kSecond)  // within the rate, never drained
    accepted += log.push("info", ("n" + std::to_string(i)).c_str(), t) ? 1 : 0;
  EXPECT_EQ(accepted, static_cast<int>(WorkerLog::kSlots));
  EXPECT_EQ(log.suppressed(), 10u);
  const Lines lines = drain(log);
  ASSERT_EQ(lines.size(), WorkerLog::kSlots);
  EXPECT_EQ(lines.front().second, "n0");  // the oldest kept, the newest refused
  EXPECT_EQ(lines.back().second, "n" + std::to_string(WorkerLog::kSlots - 1));
  EXPECT_TRUE(log.push("info", "after", t));
}

TEST(WorkerLog, TruncatesALongLine) {
  std::atomic<std::uint64_t> suppressed{0};
  WorkerLog log(0, suppressed);
  const std::string long_line(1000, 'a');
  ASSERT_TRUE(log.push("info", long_line.c_str(), kSecond));
  const Lines lines = drain(log);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].second, long_line.substr(0, WorkerLog::kLineBytes - 1));
}

// A worker thread logging through its WorkerLog writes nothing itself; the
// drain on another thread writes its lines and how many were suppressed.
TEST(WorkerLog, WorkerThreadQueuesAndTheDrainWrites) {
  std::atomic<std::uint64_t> suppressed{0};
  WorkerLog log(7, suppressed);
  register_worker_log(&log);
  testing::internal::CaptureStderr();
  std::thread worker([&log] {
    log_through(&log);
    for (int i = 0; i < 100; ++i) log_warn("refusing connection %d from 10.0.0.%d", i, i);
    log_through(nullptr);
  });
  worker.join();
  const std::string before_drain = testing::internal::GetCapturedStderr();
  EXPECT_EQ(before_drain, "");
  testing::internal::CaptureStderr();
  drain_worker_logs();
  drain_worker_logs();  // nothing new: no second report
  const std::string out = testing::internal::GetCapturedStderr();
  unregister_worker_log(&log);
  EXPECT_NE(out.find("refusing connection 0 from 10.0.0.0"), std::string::npos) << out;
  EXPECT_NE(out.find("refusing connection 19 from 10.0.0.19"), std::string::npos) << out;
  EXPECT_EQ(out.find("refusing connection 20 "), std::string::npos) << out;
  EXPECT_NE(out.find("worker 7: 80 log line(s) suppressed"), std::string::npos) << out;
  std::size_t reports = 0;
  for (std::size_t p = out.find("suppressed"); p != std::string::npos; p = out.find("suppressed", p + 1)) ++reports;
  EXPECT_EQ(reports, 1u);
}

// Another thread's lines are written at once, as before.
TEST(WorkerLog, OtherThreadsWriteDirectly) {
  testing::internal::CaptureStderr();
  log_info("control thread line %d", 42);
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("info: control thread line 42"), std::string::npos) << out;
}

}  // namespace
}  // namespace lnetr::dp
