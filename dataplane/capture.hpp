// Captures of the DPDK ports' frames into pcapng files (lnetrctl capture
// start|stop|show), for an operator chasing a protocol problem on a port
// that tcpdump cannot see.
//
// Each worker has a tap (tcp::FrameTap) that its port queues show their
// frames to while a capture runs.  The frames that match the filter are
// copied into a pool set aside for captures, with the port, queue,
// direction and a TSC time stamp beside them, and passed on a ring of the
// worker's own to the control thread, which makes each a pcapng block
// (rte_pcapng_copy, which only one thread may call) and writes it to the
// file.  A frame that finds no buffer or a full ring is counted as
// dropped, never waited for.  The pools and the rings are made at the
// first capture; with none running a queue copies nothing and pays two
// loads and two branches per burst received and per frame sent.
//
// The file is the operator's: lnetrctl opens it and its descriptor is
// passed along the Unix sockets (SCM_RIGHTS), so the dataplane writes where
// the operator may, and nowhere else.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/status.hpp"
#include "dataplane/tcp/port.hpp"

struct rte_mbuf;
struct rte_mempool;
struct rte_ring;
struct rte_pcapng;

namespace lnetr::dp {

class Capture {
 public:
  struct Filter {
    int port = -1;                       // an ethdev port id; -1: every port
    std::optional<IpAddr> host;          // frames from or to it (IPv4 and ARP, or IPv6, frames)
    std::string port_name, host_name;    // the two as the operator gave them (for show)
  };

  // `kick` wakes worker i if it sleeps; `loops` reads its loop counter.
  Capture(std::uint32_t workers, std::function<void(std::uint32_t)> kick,
          std::function<std::uint64_t(std::uint32_t)> loops);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // Worker i's tap, for each of its port queues (before the workers start).
  tcp::FrameTap& tap(std::uint32_t worker) noexcept;

  // The rest is the control thread's.
  // Start writing the frames that match `filter` into `fd` (taken over:
  // closed when the capture ends, or here on failure), `count` of them at
  // most (0: until stopped).  False with `err` if one is running already,
  // `fd` is not a regular file open for writing, or no pool can be made.
  bool start(int fd, Filter filter, std::uint64_t count, std::string& err);
  // End the capture: the workers stop copying, what they copied is written
  // and the file closed.  `workers_running`: wait until each worker has
  // gone round its loop (else the dataplane is stopping: copies still
  // under way are not waited for).
  void stop(bool workers_running = true);
  // Write what the workers copied; the capture ends itself once `count`
  // frames are written or the file refuses one.  Called often while
  // running() (each turn of the control loop).
  void drain();
  bool running() const noexcept { return file_ != nullptr; }
  status::CaptureState state() const;

 private:
  class Tap;
  bool make_pool(std::string& err);
  std::uint64_t dropped_total() const noexcept;
  void end(const std::string& why, bool workers_running = true);
  // Frames the workers copied, as pcapng blocks into the file.
  void write(rte_mbuf* const* copies, unsigned n);
  // Up to `per_ring` copies from each worker's ring: written (while the
  // capture runs) or thrown away.
  void take_rings(unsigned per_ring, bool to_file);
  // Frames of this capture (or the last) that are not in the file.
  std::uint64_t dropped() const noexcept;

  std::vector<std::unique_ptr<Tap>> taps_;
  std::function<void(std::uint32_t)> kick_;
  std::function<std::uint64_t(std::uint32_t)> loops_;
  std::atomic<std::uint64_t> filter_{0};  // the filter packed for the workers (pack() in capture.cpp)
  // An IPv6 host of the filter (its bytes as two words): set before a
  // capture starts (the taps' flag publishes it), read by the workers while
  // it runs; atomic, as filter_, for a worker still in a burst of the last
  // capture when the next starts.
  std::array<std::atomic<std::uint64_t>, 2> host6_{};
  rte_mempool* pool_ = nullptr;    // the workers' copies
  rte_mempool* blocks_ = nullptr;  // the control thread's pcapng blocks
  rte_pcapng* file_ = nullptr;
  Filter filter_shown_;
  std::uint64_t count_ = 0, frames_ = 0, bytes_ = 0;
  std::uint64_t dropped_base_ = 0;   // the taps' drops when it started
  std::uint64_t write_dropped_ = 0;  // frames the file refused
  std::optional<std::string> stopped_;
  bool stopping_ = false;  // the workers are stopping: end() waits for none
};

}  // namespace lnetr::dp
