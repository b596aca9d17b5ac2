// Readiness polling for the kernel-socket transport: one epoll instance per
// thread, each registered fd dispatching to its IoHandler.  Workers poll with
// a zero timeout inside their loop (never blocking); lnetr-peer waits.
#pragma once

#include <cstddef>

#include <cstdint>

namespace lnetr::sock {

class IoHandler {
 public:
  // `events` is an EPOLL* mask.
  virtual void on_io(std::uint32_t events) = 0;

 protected:
  ~IoHandler() = default;
};

class Poller {
 public:
  Poller();
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // Edge-triggered registration for read and write readiness.
  bool add(int fd, IoHandler* h) noexcept;
  void remove(int fd) noexcept;
  // Dispatch ready events; timeout_ms 0 polls, -1 waits.  Returns the
  // number of events dispatched.
  int poll(int timeout_ms) noexcept;
  // Block until an event is ready (or timeout_ms passes) without
  // dispatching it: the next poll() does, so the caller can look at other
  // state first (a worker adopts a new route snapshot before it routes what
  // woke it).  True if something is ready.
  bool wait(int timeout_ms) noexcept;

  bool ok() const noexcept { return epfd_ >= 0; }
  // Descriptors registered (added and not removed).
  std::size_t watched() const noexcept { return watched_; }

 private:
  int epfd_ = -1;
  std::size_t watched_ = 0;
  int waitfd_ = -1;  // an epoll set holding epfd_ (level-triggered), for wait()
};

}  // namespace lnetr::sock
