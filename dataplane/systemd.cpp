#include "dataplane/systemd.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <sys/stat.h>
#include <systemd/sd-daemon.h>

namespace lnetr::systemd {

bool stderr_is_journal() noexcept {
  static const bool journal = [] {
    const char* e = std::getenv("JOURNAL_STREAM");
    if (e == nullptr) return false;
    unsigned long long dev = 0, ino = 0;
    if (std::sscanf(e, "%llu:%llu", &dev, &ino) != 2) return false;
    struct stat st {};
    if (::fstat(2, &st) != 0) return false;
    return static_cast<unsigned long long>(st.st_dev) == dev && static_cast<unsigned long long>(st.st_ino) == ino;
  }();
  return journal;
}

const char* severity_prefix(const char* level) noexcept {
  if (!stderr_is_journal()) return "";
  if (std::strcmp(level, "error") == 0) return SD_ERR;
  if (std::strcmp(level, "warning") == 0) return SD_WARNING;
  if (std::strcmp(level, "info") == 0) return SD_INFO;
  return SD_DEBUG;
}

void notify_ready(const std::string& status) { sd_notify(0, ("READY=1\nSTATUS=" + status).c_str()); }

void notify_status(const std::string& status) { sd_notify(0, ("STATUS=" + status).c_str()); }

void notify_stopping() { sd_notify(0, "STOPPING=1"); }

void notify_watchdog() { sd_notify(0, "WATCHDOG=1"); }

std::chrono::microseconds watchdog_period() {
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0) return std::chrono::microseconds(0);
  return std::chrono::microseconds(usec);
}

ProgressWatchdog::ProgressWatchdog(std::chrono::microseconds period, std::size_t workers,
                                   std::function<std::uint64_t(std::size_t)> loops, std::function<void()> send,
                                   std::function<void(std::size_t)> stalled)
    : period_(period),
      loops_(std::move(loops)),
      send_(std::move(send)),
      stalled_(std::move(stalled)),
      last_(workers, 0),
      reported_(workers, false) {}

void ProgressWatchdog::tick(Clock::time_point now) {
  if (!enabled()) return;
  if (!started_) {
    // The first readings: progress is measured from here.
    for (std::size_t i = 0; i < last_.size(); ++i) last_[i] = loops_(i);
    next_ = now + period_ / 2;
    started_ = true;
    return;
  }
  if (now < next_) return;
  next_ = now + period_ / 2;
  bool all = true;
  for (std::size_t i = 0; i < last_.size(); ++i) {
    const std::uint64_t v = loops_(i);
    const bool moved = v != last_[i];
    last_[i] = v;
    if (moved) {
      reported_[i] = false;
      continue;
    }
    all = false;
    if (!reported_[i]) {
      reported_[i] = true;
      stalled_(i);
    }
  }
  if (all) send_();
}

}  // namespace lnetr::systemd
