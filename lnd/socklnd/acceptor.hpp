// The socklnd acceptor: listens on port 988 of every NI address, reads the
// acceptor request and the HELLO of each incoming connection (never
// blocking, with Linux's 5 s limit per step), refuses what Linux refuses
// the way Linux does, and hands the rest to the Node that owns the peer.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lnd/socklnd/engine.hpp"
#include "lnd/source_rate.hpp"

namespace lnetr::sock {

class Acceptor {
 public:
  // Called with every connection whose request and HELLO passed; the
  // callee owns a.stream (no longer watched).
  using Handoff = std::function<void(Accepted&&)>;

  Acceptor(Options opts, std::vector<LocalNi> nis, std::uint64_t incarnation, Poller& poller, Handoff handoff);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  // Listen with kernel sockets on every NI address that has no transport
  // of its own (nothing with accept=none).  False with
  // `err` naming the address if one cannot be bound.
  bool listen(std::string& err);
  // lnetrctl net add / del.  An NI whose connections are kernel sockets
  // comes with `listen_fd`, a socket already listening on its address (the
  // caller opened it, so that a bind error is known before anything
  // changes; -1: none, as with accept=none), which the acceptor watches
  // and closes when the last NI on that address goes.
  void add_ni(const LocalNi& ni, int listen_fd);
  void del_ni(const Nid& nid);
  // A connection accepted by another transport (the dataplane's TCP on a
  // DPDK port): read its request and HELLO as for a kernel socket's.
  void take(std::unique_ptr<Stream> s);
  // Drop connections that did not finish their handshake in time.
  void tick(Clock::time_point now);
  // Free what was closed since the last call.
  void reap();

  // Connections refused, by reason (the same table as Node's).
  const std::array<std::uint64_t, kCloseReasonCount>& refused() const noexcept { return refused_; }
  std::uint64_t handed_off() const noexcept { return handed_off_; }

 private:
  class Listener;
  class Pending;
  friend class Listener;
  friend class Pending;

  void refuse(Pending* p, CloseReason why);

  Options opts_;
  std::vector<LocalNi> nis_;
  std::uint64_t incarnation_;
  Poller& poller_;
  Handoff handoff_;
  std::vector<std::unique_ptr<Listener>> listeners_;  // (each knows its address)
  std::vector<std::unique_ptr<Pending>> pending_;
  std::size_t handshaking_ = 0;  // pending_ not done
  lnd::SourceRate rate_;
  std::array<std::uint64_t, kCloseReasonCount> refused_{};
  std::uint64_t handed_off_ = 0;
};

}  // namespace lnetr::sock
