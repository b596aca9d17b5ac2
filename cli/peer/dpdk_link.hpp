// lnetr-peer on a DPDK port: its NI's TCP connections on lnetr's own TCP/IP
// library (dataplane/tcp: the stack over one queue of a DPDK device) and
// socklnd's transport on it (dataplane/sock_transport), the same code the
// router's ports run.  With a net_memif device on both sides, a peer and
// the router exchange frames through shared memory with no kernel on the
// path: the benchmark of lnetr's own cost (tests/bench/memif_bench.py).
//
// One thread: the Endpoint's loop polls the link (frames in, the stack's
// readiness to socklnd) and flushes it (frames out) on every turn, and naps
// between empty turns unless told to poll busily.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/sock_transport.hpp"
#include "lnd/socklnd/stream.hpp"

namespace lnetr::tcp {
class EthPort;
class PortQueue;
namespace unmap_guard {
class Poller;
}
}  // namespace lnetr::tcp

namespace lnetr::peer {

struct DpdkOptions {
  std::string device;  // a virtual device's arguments ("net_memif0,role=client,...") or a PCI address
  std::uint32_t prefix_len = 24;
  std::uint16_t mtu = 1500;
  std::optional<unsigned> core;  // pin the thread there (else: any core the process may use)
  bool busy = false;             // never nap between empty turns
};

struct DpdkCounters {
  std::uint64_t rx_frames = 0, tx_frames = 0, tx_dropped = 0;
  std::uint64_t bytes_copied = 0;  // by the stack, the port and the transport
  std::uint64_t retransmits = 0;
  std::uint64_t tso_frames = 0, tso_segments = 0;  // frames sent for the device to cut, and their segments
  std::uint64_t rx_lro = 0;                        // frames received joined from several segments
};

class DpdkLink {
 public:
  // Bring up the EAL (no hugepages, no PCI scan unless `device` is a PCI
  // address), open the device with one queue and the stack on it with
  // address `ip` (IPv4 or IPv6).  Connections accepted on `port` (0: none)
  // go to `accept`.  nullptr with `err` for the operator.
  static std::unique_ptr<DpdkLink> open(const DpdkOptions& o, const IpAddr& ip, std::uint16_t port,
                                        dp::SockTransport::Accept accept, std::string& err);
  ~DpdkLink();
  DpdkLink(const DpdkLink&) = delete;
  DpdkLink& operator=(const DpdkLink&) = delete;

  sock::Transport& transport() noexcept;
  // Frames in, to the stack; its timers; readiness out to socklnd.  Returns
  // the work done (frames and events).
  unsigned poll();
  // Frames out.  Returns the frames sent.
  unsigned flush();
  // After each turn, with the work it did: after a run of turns that found
  // nothing, a short nap (unless polling busily).
  void rest(unsigned work);
  DpdkCounters counters() const;
  // Connections still open (or closing) on the stack.
  std::size_t connections() const noexcept;

 private:
  DpdkLink() = default;
  DpdkOptions opts_;
  bool eal_ = false;
  std::unique_ptr<tcp::EthPort> port_;
  std::unique_ptr<tcp::PortQueue> queue_;
  std::unique_ptr<tcp::Stack> stack_;
  std::unique_ptr<dp::SockTransport> transport_;
  std::unique_ptr<tcp::unmap_guard::Poller> reader_;
  unsigned idle_turns_ = 0;
};

}  // namespace lnetr::peer
