#include "lnd/socklnd/poller.hpp"

#include <sys/epoll.h>
#include <unistd.h>

namespace lnetr::sock {

Poller::Poller() : epfd_(epoll_create1(EPOLL_CLOEXEC)) {}

Poller::~Poller() {
  if (epfd_ >= 0) close(epfd_);
}

bool Poller::add(int fd, IoHandler* h) noexcept {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = h;
  return epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

void Poller::remove(int fd) noexcept { epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr); }

int Poller::poll(int timeout_ms) noexcept {
  constexpr int kBatch = 64;
  epoll_event evs[kBatch];
  const int n = epoll_wait(epfd_, evs, kBatch, timeout_ms);
  for (int i = 0; i < n; ++i) static_cast<IoHandler*>(evs[i].data.ptr)->on_io(evs[i].events);
  return n < 0 ? 0 : n;
}

}  // namespace lnetr::sock
