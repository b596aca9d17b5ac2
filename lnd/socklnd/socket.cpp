#include "lnd/socklnd/socket.hpp"

#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
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
  const int fd = socket(af(ip), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
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
    const int fd = socket(af(local_ip), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
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
    if (n > 0 && stats_) stats_->bytes_copied += static_cast<std::uint64_t>(n);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  }
}

ssize_t KernelStream::sendv(const iovec* iov, std::size_t n) noexcept { return send_run(iov, n, false); }

// One sendmsg() of iov[0..n): bytes taken, -EAGAIN, or -errno.
ssize_t KernelStream::send_run(const iovec* iov, std::size_t n, bool zero_copy) noexcept {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = n;
  for (;;) {
    const ssize_t w = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT | (zero_copy ? MSG_ZEROCOPY : 0));
    if (w > 0) {
      const auto took = static_cast<std::uint64_t>(w);
      if (zero_copy) {
        // The kernel numbered this call zc_first_id_ + zc_count_ (a call
        // that took nothing gets no number); it completes it later.
        const std::size_t slot = (zc_head_ + zc_count_) % kZcCalls;
        zc_calls_[slot] = {taken_, taken_ + took, false};
        ++zc_count_;
        if (stats_) ++stats_->zc_sends;
      } else if (stats_) {
        stats_->bytes_copied += took;
      }
      taken_ += took;
      return w;
    }
    if (w == 0) return 0;
    if (errno == EINTR) continue;
    // Zero copy refused for this call (the socket's option memory or the
    // locked-memory limit): the same bytes copied instead.
    if (zero_copy && errno == ENOBUFS) {
      if (stats_) ++stats_->zc_nobufs;
      if (zc_count_ == 0)
        fall_back();  // nothing to wait for: a limit, not a passing shortage
      else
        zc_nobufs_ = true;
      zero_copy = false;
      continue;
    }
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  }
}

ssize_t KernelStream::sendv_lent(const iovec* iov, std::size_t n, const bool* lend, void* const* dev) noexcept {
  (void)dev;
  if (!zc_ || zc_nobufs_) {
    const ssize_t w = send_run(iov, n, false);
    // Long enough copying: see whether the kernel still copies, from the
    // next write on (the engine asks lends() before a write, to know which
    // messages to hold).
    if (!zc_ && zc_retry_at_ != 0 && taken_ >= zc_retry_at_) {
      zc_ = true;
      zc_retry_at_ = 0;
    }
    return w;
  }
  // Runs of iovecs alike in being lent or not, one call each; lent runs
  // with MSG_ZEROCOPY while a slot for its completion is free.
  std::size_t total = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i + 1, want = iov[i].iov_len;
    while (j < n && lend[j] == lend[i]) want += iov[j++].iov_len;
    const bool zero_copy = zc_ && !zc_nobufs_ && lend[i] && zc_count_ < kZcCalls;
    const ssize_t w = send_run(iov + i, j - i, zero_copy);
    if (w < 0) return total > 0 ? static_cast<ssize_t>(total) : w;
    total += static_cast<std::size_t>(w);
    if (static_cast<std::size_t>(w) < want) break;  // the socket is full
    i = j;
  }
  return static_cast<ssize_t>(total);
}

std::uint64_t KernelStream::released() const noexcept {
  return zc_count_ == 0 ? taken_ : zc_calls_[zc_head_].begin;
}

void KernelStream::completed(std::uint32_t lo, std::uint32_t hi, bool copied) noexcept {
  // Calls lo..hi (the kernel's numbers, wrapping at 2^32) of those still
  // outstanding, zc_first_id_ on.  On TCP they complete in order, but need
  // not; the walk is over our ring, whatever the range says.
  for (std::size_t at = 0; at < zc_count_; ++at) {
    const std::uint32_t id = zc_first_id_ + static_cast<std::uint32_t>(at);
    if (id - lo > hi - lo) continue;
    ZcCall& c = zc_calls_[(zc_head_ + at) % kZcCalls];
    if (c.done) continue;
    c.done = true;
    if (stats_ && !aborted_) {  // (after an abort: bytes purged, never sent)
      (copied ? stats_->bytes_copied : stats_->bytes_zero_copy) += c.end - c.begin;
      if (copied) ++stats_->zc_copied;
    }
  }
  if (copied && zc_ && !aborted_) fall_back();  // the kernel copies on this route anyway
  while (zc_count_ > 0 && zc_calls_[zc_head_].done) {
    zc_head_ = (zc_head_ + 1) % kZcCalls;
    --zc_count_;
    ++zc_first_id_;
  }
  if (zc_count_ == 0) zc_nobufs_ = false;
}

void KernelStream::fall_back() noexcept {
  zc_ = false;
  zc_retry_at_ = taken_ + kZcRetryBytes;
  if (stats_) ++stats_->zc_fallbacks;
}

void KernelStream::poll_released() noexcept {
  while (zc_count_ > 0) {
    alignas(cmsghdr) std::uint8_t control[CMSG_SPACE(sizeof(sock_extended_err) + sizeof(sockaddr_in6))];
    msghdr msg{};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    if (::recvmsg(fd_, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
      if (errno == EINTR) continue;
      return;  // EAGAIN: nothing more
    }
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
      if (!((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
            (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR)))
        continue;
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(cm), sizeof ee);
      if (ee.ee_errno != 0 || ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      completed(ee.ee_info, ee.ee_data, (ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) != 0);
    }
  }
}

bool KernelStream::abort_holding() noexcept {
  poll_released();
  if (zc_count_ == 0) return false;
  // Disconnect without closing: a RST, the queues dropped (which frees
  // what the kernel still held of them), and the error queue still
  // readable for the completions that follow.
  zc_ = false;
  zc_retry_at_ = 0;
  aborted_ = true;
  sockaddr unspec{};
  unspec.sa_family = AF_UNSPEC;
  // Should it fail, the socket is still dropped when TCP gives up on it:
  // what it holds is let go of then (the drain waits, counted in status).
  if (::connect(fd_, &unspec, sizeof unspec) != 0 && stats_) ++stats_->zc_disconnect_failures;
  return true;
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

void KernelStream::configure(const Options& opts) noexcept {
  setup_conn_socket(fd_, opts);
  if (opts.zc_min_payload > kLnetMtu || zc_ || !zc_calls_.empty()) return;  // off, or already on
  const int on = 1;
  if (setsockopt(fd_, SOL_SOCKET, SO_ZEROCOPY, &on, sizeof on) != 0) {
    if (stats_) ++stats_->zc_unsupported;  // an older kernel: every send copies
    return;
  }
  zc_calls_.resize(kZcCalls);
  zc_ = true;
}

std::unique_ptr<Stream> KernelTransport::connect(const IpAddr& local_ip, const IpAddr& remote_ip,
                                                 std::uint16_t port, int& error) {
  const int fd = connect_privileged(local_ip, remote_ip, port, error);
  if (fd < 0) return nullptr;
  return std::make_unique<KernelStream>(fd, poller_);
}

}  // namespace lnetr::sock
