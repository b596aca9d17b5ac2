// socklnd over the dataplane's own TCP (issue 6): a sock::Transport whose
// streams are connections of one worker's tcp::Stack (the TCP/IP library,
// dataplane/tcp).  The socklnd engine and acceptor run on these streams
// unchanged; the workers and lnetr-peer's DPDK link use it.
//
// Readiness is queued, never called back from inside the stack: the stack
// delivers data and state changes while it handles a frame, and an engine
// reacting at once would re-enter that connection.  poll() hands the queued
// events out (edge-triggered, like epoll) and new connections to the
// acceptor, after the worker has fed the stack its frames.
//
// Pure (no DPDK): the unit tests run socklnd Nodes over two stacks joined
// in memory.  Its own static library (meson: sock_transport_dep), so that
// lnetr-peer links it without the rest of the dataplane.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dataplane/tcp/stack.hpp"
#include "lnd/socklnd/stream.hpp"

namespace lnetr::dp {

struct SockTransportStats {
  std::uint64_t connects = 0;   // streams opened by this side
  std::uint64_t accepted = 0;   // streams handed to the acceptor
  std::uint64_t bytes_copied = 0;  // payload bytes copied between the stack and socklnd
  std::uint64_t bytes_referenced = 0;  // ... and left in their received frames instead (RefChain)
  std::uint64_t bytes_held = 0;  // payload bytes sent, not lent, from received frames the stack held (no copy)
};

class SockTransport final : public sock::Transport {
 public:
  using Accept = std::function<void(std::unique_ptr<sock::Stream>)>;
  // Listen on `port` of `stack` (0: do not listen); each connection, once
  // established, goes to `accept`.  `rx_buffer`: bytes received and not yet
  // read by socklnd, per connection (the receive window it advertises).
  SockTransport(tcp::Stack& stack, std::uint16_t port, Accept accept, std::uint32_t rx_buffer = 4u << 20);
  ~SockTransport() override;
  SockTransport(const SockTransport&) = delete;
  SockTransport& operator=(const SockTransport&) = delete;

  // IPv4 only (EAFNOSUPPORT otherwise): the stack speaks IPv4.
  std::unique_ptr<sock::Stream> connect(const sock::IpAddr& local_ip, const sock::IpAddr& remote_ip,
                                        std::uint16_t port, int& error) override;

  // Received frames a stream may keep for a payload received by reference
  // (null: none, every byte is copied).  Outlives the transport.
  void set_frame_refs(lnd::FrameRefs* frames) noexcept { frames_ = frames; }

  // The worker's clock for what streams do until the next poll().
  void set_now(tcp::Time now) noexcept { now_ = now; }
  // Hand out queued readiness and new connections; free finished ones.
  // Returns the number of events delivered.
  std::size_t poll(tcp::Time now);

  const SockTransportStats& stats() const noexcept { return stats_; }
  std::size_t links() const noexcept { return links_.size(); }

 private:
  class ReceiveQueue;
  class Link;
  class LinkStream;
  friend class Link;
  friend class LinkStream;

  void ready(Link* l, std::uint32_t events);
  Link* add(std::unique_ptr<Link> l);
  void maybe_finished(Link* l);

  tcp::Stack& stack_;
  std::uint16_t port_;
  Accept accept_;
  std::uint32_t rx_buffer_;
  tcp::Time now_{0};
  lnd::FrameRefs* frames_ = nullptr;
  SockTransportStats stats_;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<Link*> ready_;     // links with events to deliver
  std::vector<Link*> incoming_;  // accepted and established, for accept_
  std::vector<Link*> blocked_;   // a write found the send buffer full
  std::vector<Link*> orphans_;   // closed gracefully by socklnd, finishing on their own
  std::vector<Link*> finishing_;  // ended or closed: freed once over on both sides
  std::vector<Link*> scratch_;    // the batch poll() hands out
};

}  // namespace lnetr::dp
