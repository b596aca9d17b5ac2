// The byte streams socklnd runs on.  A Stream is one TCP connection as the
// engine and the acceptor use it: non-blocking reads and gathered writes,
// and edge-triggered readiness reported to an IoHandler with EPOLL* bits.
// Two transports provide them: kernel sockets (KernelTransport, here) and
// the dataplane's own TCP on a DPDK port (dataplane/sock_transport), chosen
// per NI.  The engine's protocol code is the same over both; a stream that
// lends() sends messages from the engine's memory without copying (the
// dataplane's TCP keeps references until the peer acknowledges them; a
// kernel socket sends them with MSG_ZEROCOPY), and the engine hands each
// message back only once the stream has released it.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "lnd/socklnd/address.hpp"
#include "lnd/socklnd/poller.hpp"
#include "lnd/ref_chain.hpp"
#include "router/bytes.hpp"

namespace lnetr::sock {

struct Options;
struct Stats;

class Stream {
 public:
  // Closes: gracefully (queued bytes, then FIN), or abortively (RST) once
  // configure() set socklnd's SO_LINGER 0.
  virtual ~Stream() = default;

  // Report readiness to `h` (nullptr: stop).  Edge-triggered: after a
  // report, read or write until -EAGAIN before expecting another.  A
  // connecting stream reports EPOLLOUT (or EPOLLERR) when it is done.
  virtual bool watch(IoHandler* h) noexcept = 0;
  // > 0 bytes read, 0 at the peer's FIN, -EAGAIN when nothing is there,
  // else -errno (the connection is dead).
  virtual ssize_t recv(std::uint8_t* dst, std::size_t len) noexcept = 0;
  // After recv() found nothing: the next `len` bytes to arrive may be put
  // straight into `dst` (saving a copy through the stream's own buffer);
  // the next recv() into `dst` then reports them without copying.  The
  // memory must stay valid until those bytes are read or the stream is
  // destroyed.  With a `chain` (ref_chain.hpp) the stream may also leave
  // bytes where they were received and record them there instead; recv()
  // reports them the same.  False if the stream does not do this (kernel
  // sockets).
  virtual bool lend(std::uint8_t* dst, std::size_t len, lnd::RefChain* chain) noexcept {
    (void)dst;
    (void)len;
    (void)chain;
    return false;
  }
  // Bytes taken (>= 0, possibly fewer than offered), -EAGAIN if none could
  // be, else -errno.
  virtual ssize_t sendv(const iovec* iov, std::size_t n) noexcept = 0;
  // As sendv(), but a stream that lends() may keep the bytes of each
  // iov[i] with lend[i] set by reference instead of copying them: their
  // memory must then stay valid until released() has passed them, or the
  // stream is destroyed (the dataplane's TCP keeps them until the peer
  // acknowledges them, for retransmission).  dev[i] (dev may be null) is
  // the memory's device reference, if it has one: an opaque handle a DPDK
  // port may pass to the device with the memory itself (Tx::payload_dev).
  // An iov not lent but with a device reference may still be kept without
  // a copy where that memory is a received frame the stream can hold by a
  // reference of its own (lnd::FrameRefs::hold): its owner need not wait.
  virtual ssize_t sendv_lent(const iovec* iov, std::size_t n, const bool* lend, void* const* dev) noexcept {
    (void)lend;
    (void)dev;
    return sendv(iov, n);
  }
  // Whether sendv_lent() keeps references now (false: it copies, like
  // sendv()).  May turn false while memory is still lent (a kernel socket
  // whose sends the kernel copied anyway): released() still reports it.
  virtual bool lends() const noexcept { return false; }
  // Whether received payload is best read straight into its sink (or
  // lent), the stream's buffer holding it already: the engine then reads
  // no further than a message's head.  False (kernel sockets): read as
  // much as fits, one system call for many small messages.
  virtual bool receives_in_place() const noexcept { return false; }
  // The next bytes to read, where the stream holds them in one piece (a
  // received frame), without taking them: the engine decodes a message's
  // head there, and skip()s it, instead of copying it out.  Empty when
  // nothing is held in one piece (kernel sockets: always).
  virtual ByteSpan peek() noexcept { return {}; }
  // Drop the first n bytes (n <= peek().size()) as read.
  virtual void skip(std::size_t n) noexcept { (void)n; }
  // Its position: bytes taken by sendv()/sendv_lent() since the stream
  // opened, whoever wrote them (a stream that lends).
  virtual std::uint64_t taken() const noexcept { return 0; }
  // A position before which no lent memory is referenced any more.
  virtual std::uint64_t released() const noexcept { return 0; }
  // Learn what the kernel has let go of since (a kernel socket: the
  // MSG_ZEROCOPY completions on its error queue, which EPOLLERR reports);
  // released() then tells.  Call on EPOLLERR and now and then.
  virtual void poll_released() noexcept {}
  // Abort the connection (RST, as destroying it does) but keep the memory
  // lent to it referenced: true if the stream holds some, and must then be
  // kept, watched and polled until released() reaches taken() (a kernel
  // socket whose zero-copy sends the kernel has not completed: their pages
  // may still be on their way to the device); false if it holds none
  // (destroy it).
  virtual bool abort_holding() noexcept { return false; }
  // Count copies and zero-copy sends into `s` (the owning Node's).
  virtual void count_into(Stats& s) noexcept { (void)s; }
  // After a connecting stream's readiness: 0 if connected, else -errno.
  virtual int connect_result() noexcept = 0;
  virtual Endpoint local() const noexcept = 0;
  virtual Endpoint remote() const noexcept = 0;
  // Apply socklnd's per-connection options (kernel sockets: NODELAY,
  // keepalive, buffer sizes, linger).
  virtual void configure(const Options&) noexcept {}
  // Move an unwatched stream to the thread polling with `p` (a connection
  // accepted on one worker and adopted by another).
  virtual void attach(Poller& p) noexcept { (void)p; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Start a connect from local_ip and a free privileged port to
  // remote_ip:port (both of one family).  nullptr with `error` (an errno)
  // on failure; EAFNOSUPPORT for a family the transport does not carry.
  virtual std::unique_ptr<Stream> connect(const IpAddr& local_ip, const IpAddr& remote_ip, std::uint16_t port,
                                          int& error) = 0;
};

// Kernel TCP sockets, polled by one Poller.
//
// Zero copy (configure() with Options::zero_copy): lent bytes go out with
// MSG_ZEROCOPY, the kernel sending from the engine's memory.  Each such
// sendmsg() that takes bytes is numbered by the kernel (0, 1, ... per
// socket); when the kernel lets go of a range of them it queues a
// notification on the socket's error queue (EPOLLERR), saying also
// whether it had to copy after all (SO_EE_CODE_ZEROCOPY_COPIED: a route
// delivering to a local socket, a device without scatter-gather).  Once a
// notification says so the stream copies (the pinning and the
// notifications would buy nothing), trying zero copy again after
// kZcRetryBytes lent bytes copied: what made the kernel copy may have been
// passing (a packet capture on the device, a route change).  ENOBUFS (the
// socket's option memory, the locked-memory limit) copies that call, and
// the next ones until what is outstanding completes (with nothing
// outstanding, it is a fallback).  Runs of bytes not lent (control
// messages, small messages handed back at once) are sent by plain copying
// sendmsg() calls of their own: MSG_ZEROCOPY covers every byte of a call.
class KernelStream final : public Stream {
 public:
  KernelStream(int fd, Poller& poller) noexcept : fd_(fd), poller_(&poller) {}
  // An accepted socket, with the peer's address accept() gave.
  KernelStream(int fd, Poller& poller, const Endpoint& remote) noexcept
      : fd_(fd), poller_(&poller), remote_(remote), have_remote_(true) {}
  ~KernelStream() override;
  bool watch(IoHandler* h) noexcept override;
  ssize_t recv(std::uint8_t* dst, std::size_t len) noexcept override;
  ssize_t sendv(const iovec* iov, std::size_t n) noexcept override;
  ssize_t sendv_lent(const iovec* iov, std::size_t n, const bool* lend, void* const* dev) noexcept override;
  // While zero-copy calls are outstanding too, after a fallback: a message
  // written partly by them is held until they complete.
  bool lends() const noexcept override { return zc_ || zc_count_ > 0; }
  std::uint64_t taken() const noexcept override { return taken_; }
  std::uint64_t released() const noexcept override;
  void poll_released() noexcept override;
  bool abort_holding() noexcept override;
  void count_into(Stats& s) noexcept override { stats_ = &s; }
  int connect_result() noexcept override;
  Endpoint local() const noexcept override;
  Endpoint remote() const noexcept override;
  void configure(const Options& opts) noexcept override;
  void attach(Poller& p) noexcept override { poller_ = &p; }
  int fd() const noexcept { return fd_; }

  // Zero-copy sends the kernel has not completed yet.
  std::size_t zc_pending() const noexcept { return zc_count_; }

 private:
  // One MSG_ZEROCOPY sendmsg() that took bytes: its stream positions.
  struct ZcCall {
    std::uint64_t begin = 0, end = 0;
    bool done = false;
  };
  static constexpr std::size_t kZcCalls = 256;  // outstanding at most; beyond: copied
  static constexpr std::uint64_t kZcRetryBytes = 64ull << 20;

  ssize_t send_run(const iovec* iov, std::size_t n, bool zero_copy) noexcept;
  void completed(std::uint32_t lo, std::uint32_t hi, bool copied) noexcept;
  void fall_back() noexcept;

  int fd_;
  Poller* poller_;
  Endpoint remote_{};
  bool have_remote_ = false;
  bool watched_ = false;
  Stats* stats_ = nullptr;
  std::uint64_t taken_ = 0;
  bool zc_ = false;                  // sending lent runs with MSG_ZEROCOPY
  bool zc_nobufs_ = false;           // ... not until what is outstanding completes (ENOBUFS)
  bool aborted_ = false;             // disconnected: completions now are of purged bytes
  std::uint64_t zc_retry_at_ = 0;    // fallen back: zero copy again at this taken() (0: never)
  std::vector<ZcCall> zc_calls_;     // a ring of kZcCalls, oldest at zc_head_
  std::size_t zc_head_ = 0, zc_count_ = 0;
  std::uint32_t zc_first_id_ = 0;    // the kernel's number of the oldest outstanding call
};

class KernelTransport final : public Transport {
 public:
  explicit KernelTransport(Poller& poller) noexcept : poller_(poller) {}
  std::unique_ptr<Stream> connect(const IpAddr& local_ip, const IpAddr& remote_ip, std::uint16_t port,
                                  int& error) override;

 private:
  Poller& poller_;
};

}  // namespace lnetr::sock
