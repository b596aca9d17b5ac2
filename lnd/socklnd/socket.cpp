#include "lnd/socklnd/socket.hpp"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lnd/socklnd/engine.hpp"
#include "lnd/socklnd/stream.hpp"

namespace lnetr::sock {
namespace {

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

template <class T>
void setopt(int fd, int level, int name, T value) noexcept {
  setsockopt(fd, level, name, &value, sizeof value);
}

}  // namespace

int listen_on(const IpAddr& ip, std::uint16_t port, int backlog, std::string& err) {
  const int fd = socket(ip.af(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = errno_text("socket");
    return -1;
  }
  setopt(fd, SOL_SOCKET, SO_REUSEADDR, 1);
  const SockAddr a = to_sockaddr({ip, port});
  if (bind(fd, a.get(), a.len) != 0) {
    err = errno_text(("bind " + to_string(Endpoint{ip, port})).c_str());
    close(fd);
    return -1;
  }
  if (listen(fd, backlog) != 0) {
    err = errno_text("listen");
    close(fd);
    return -1;
  }
  return fd;
}

int connect_privileged(const IpAddr& local_ip, const IpAddr& remote_ip, std::uint16_t port, int& error) {
  if (local_ip.family != remote_ip.family) {
    error = EAFNOSUPPORT;
    return -1;
  }
  const SockAddr remote = to_sockaddr({remote_ip, port});
  for (int p = kPrivilegedPortMax; p >= kPrivilegedPortMin; --p) {
    const int fd = socket(local_ip.af(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = errno;
      return -1;
    }
    // SO_REUSEADDR lets one privileged port serve connections to several
    // peers; the 4-tuple still has to be unique.
    setopt(fd, SOL_SOCKET, SO_REUSEADDR, 1);
    const SockAddr local = to_sockaddr({local_ip, static_cast<std::uint16_t>(p)});
    if (bind(fd, local.get(), local.len) != 0) {
      error = errno;
      close(fd);
      if (error == EADDRINUSE) continue;  // that port is taken: try the next one down
      return -1;                          // EACCES (not root), EADDRNOTAVAIL (not our address), ...
    }
    if (connect(fd, remote.get(), remote.len) == 0 || errno == EINPROGRESS)
      return fd;
    error = errno;
    close(fd);
    if (error == EADDRINUSE || error == EADDRNOTAVAIL) continue;  // the 4-tuple exists already
    return -1;
  }
  error = EADDRINUSE;
  return -1;
}

int accept_one(int listen_fd, Endpoint& remote) noexcept {
  SockAddr a;
  a.len = sizeof a.storage;
  const int fd = accept4(listen_fd, a.get(), &a.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) remote = from_sockaddr(a.get(), a.len).value_or(Endpoint{});
  return fd;
}

void setup_conn_socket(int fd, const Options& o) noexcept {
  if (!o.nagle) setopt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
  setopt(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
  setopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, o.keepalive_idle);
  setopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, o.keepalive_intvl);
  setopt(fd, IPPROTO_TCP, TCP_KEEPCNT, o.keepalive_count);
  if (o.tx_buffer_size > 0) setopt(fd, SOL_SOCKET, SO_SNDBUF, o.tx_buffer_size);
  if (o.rx_buffer_size > 0) setopt(fd, SOL_SOCKET, SO_RCVBUF, o.rx_buffer_size);
  setopt(fd, SOL_SOCKET, SO_LINGER, linger{1, 0});
  if (o.tos >= 0) {
    int domain = AF_INET;
    socklen_t len = sizeof domain;
    (void)getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len);
    if (domain == AF_INET6) setopt(fd, IPPROTO_IPV6, IPV6_TCLASS, o.tos); else setopt(fd, IPPROTO_IP, IP_TOS, o.tos);
  }
}

bool local_address(int fd, Endpoint& e) noexcept {
  SockAddr a;
  a.len = sizeof a.storage;
  if (getsockname(fd, a.get(), &a.len) != 0) return false;
  auto got = from_sockaddr(a.get(), a.len);
  if (got) e = *got;
  return got.has_value();
}


// ---- KernelStream / KernelTransport -------------------------------------------------

KernelStream::~KernelStream() {
  if (watched_) poller_->remove(fd_);
  ::close(fd_);
}

bool KernelStream::watch(IoHandler* h) noexcept {
  if (watched_) poller_->remove(fd_);
  watched_ = h != nullptr && poller_->add(fd_, h);
  return h == nullptr || watched_;
}

ssize_t KernelStream::recv(std::uint8_t* dst, std::size_t len) noexcept {
  for (;;) {
    const ssize_t n = ::recv(fd_, dst, len, 0);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  }
}

ssize_t KernelStream::sendv(const iovec* iov, std::size_t n) noexcept {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = n;
  for (;;) {
    const ssize_t w = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) return w;
    if (errno == EINTR) continue;
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  }
}

int KernelStream::connect_result() noexcept {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return -errno;
  return -err;
}

Endpoint KernelStream::local() const noexcept {
  Endpoint e;
  (void)local_address(fd_, e);
  return e;
}

Endpoint KernelStream::remote() const noexcept {
  if (have_remote_) return remote_;
  SockAddr a;
  a.len = sizeof a.storage;
  if (getpeername(fd_, a.get(), &a.len) != 0) return {};
  return from_sockaddr(a.get(), a.len).value_or(Endpoint{});
}

void KernelStream::configure(const Options& opts) noexcept { setup_conn_socket(fd_, opts); }

std::unique_ptr<Stream> KernelTransport::connect(const IpAddr& local_ip, const IpAddr& remote_ip,
                                                 std::uint16_t port, int& error) {
  const int fd = connect_privileged(local_ip, remote_ip, port, error);
  if (fd < 0) return nullptr;
  return std::make_unique<KernelStream>(fd, poller_);
}

}  // namespace lnetr::sock
