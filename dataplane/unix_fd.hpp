// A descriptor passed beside a request on a Unix socket (SCM_RIGHTS): how
// lnetrctl hands lnetr-control the file it opened for a capture, and
// lnetr-control hands it to the dataplane.  Header only, no DPDK: the
// three programs include it.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

namespace lnetr::unix_fd {

// recv(), also taking a descriptor passed with the bytes: the first one
// into `passed` while it is -1; any other is closed.
inline ssize_t recv(int sock, void* buf, std::size_t len, int& passed) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  iovec iov{buf, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (cmsghdr* h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t j = 0; j < k; ++j) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(h) + j * sizeof(int), sizeof fd);
      if (passed < 0) passed = fd;
      else ::close(fd);
    }
  }
  return n;
}

// send() of the first bytes of a request with `fd` beside them (none if
// -1); the rest goes by plain send().
inline ssize_t send(int sock, const void* buf, std::size_t len, int fd, int flags) {
  if (fd < 0) return ::send(sock, buf, len, flags);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{const_cast<void*>(buf), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* h = CMSG_FIRSTHDR(&msg);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(h), &fd, sizeof fd);
  return ::sendmsg(sock, &msg, flags);
}

}  // namespace lnetr::unix_fd
