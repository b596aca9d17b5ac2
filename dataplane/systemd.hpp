// The daemons' side of systemd: readiness, status and watchdog
// notifications (sd_notify; no-ops when no service manager asked for them),
// and log lines with the journal's severity prefixes when stderr is the
// journal.  Shared by lnetr-dataplane and lnetr-control.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lnetr::systemd {

// True when stderr is a journal stream (systemd sets JOURNAL_STREAM to its
// device and inode): lines then start with "<N>" (the syslog priority) and
// leave the time to the journal.
bool stderr_is_journal() noexcept;

// The prefix for a level ("error", "warning", "info", anything else is
// "debug") when stderr is the journal, else "".
const char* severity_prefix(const char* level) noexcept;

void notify_ready(const std::string& status);
void notify_status(const std::string& status);
void notify_stopping();
void notify_watchdog();

// The period the unit's WatchdogSec= asks for (WATCHDOG_USEC, for this
// process), or zero when there is no watchdog.
std::chrono::microseconds watchdog_period();

// Feeds the watchdog only while every worker's loop makes progress: a check
// every half period compares each loop counter with the last check's and
// sends WATCHDOG=1 only when all moved, so that one stuck worker lets the
// service manager restart the service.
class ProgressWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // loops(i) reads worker i's loop counter; send() notifies the service
  // manager; stalled(i) is called once when worker i stops making progress.
  ProgressWatchdog(std::chrono::microseconds period, std::size_t workers,
                   std::function<std::uint64_t(std::size_t)> loops, std::function<void()> send,
                   std::function<void(std::size_t)> stalled);

  bool enabled() const noexcept { return period_.count() > 0; }
  // Called often (every 100 ms or so); checks when the half period is up.
  void tick(Clock::time_point now);

 private:
  std::chrono::microseconds period_;
  std::function<std::uint64_t(std::size_t)> loops_;
  std::function<void()> send_;
  std::function<void(std::size_t)> stalled_;
  std::vector<std::uint64_t> last_;
  std::vector<bool> reported_;
  Clock::time_point next_{};
  bool started_ = false;
};

}  // namespace lnetr::systemd
