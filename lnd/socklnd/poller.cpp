#include "lnd/socklnd/poller.hpp"

#include <sys/epoll.h>
#include <unistd.h>

namespace lnetr::sock {

Poller::Poller() : epfd_(epoll_create1(EPOLL_CLOEXEC)) {}

Poller::~Poller() {
  if (waitfd_ >= 0) close(waitfd_);
  if (epfd_ >= 0) close(epfd_);
}

bool Poller::add(int fd, IoHandler* h) noexcept {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = h;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) return false;
  ++watched_;
  return true;
}

void Poller::remove(int fd) noexcept {
  if (epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr) == 0) --watched_;
}

int Poller::poll(int timeout_ms) noexcept {
  constexpr int kBatch = 64;
  epoll_event evs[kBatch];
  const int n = epoll_wait(epfd_, evs, kBatch, timeout_ms);
  for (int i = 0; i < n; ++i) static_cast<IoHandler*>(evs[i].data.ptr)->on_io(evs[i].events);
  return n < 0 ? 0 : n;
}

bool Poller::wait(int timeout_ms) noexcept {
  if (waitfd_ < 0) {
    // An epoll fd is readable while it has events ready; watching it from
    // a second set consumes none of them (not even edge-triggered ones).
    waitfd_ = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (waitfd_ < 0 || epoll_ctl(waitfd_, EPOLL_CTL_ADD, epfd_, &ev) != 0) return poll(timeout_ms) > 0;
  }
  epoll_event ev;
  return epoll_wait(waitfd_, &ev, 1, timeout_ms) > 0;
}

}  // namespace lnetr::sock
