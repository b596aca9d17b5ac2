// Decoding a whole capture: frames in, LNet PDUs out.
//
// CaptureDecoder is pure (no I/O): the caller reads frames from wherever
// (pcap file, fuzzer) and feeds them in capture order.  TCP connections to
// or from the socklnd acceptor port (988) are reassembled and walked as
// socklnd; UDP to port 4791 is decoded as RoCEv2 / o2iblnd; everything else
// is counted and skipped.  PDUs are handed out as they complete, so memory
// stays bounded by what is in flight, not by the capture's size.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "cli/decode/frame.hpp"
#include "cli/decode/pdu.hpp"
#include "cli/decode/roce_decoder.hpp"
#include "cli/decode/sock_walker.hpp"
#include "cli/decode/tcp_reassembly.hpp"

namespace lnetr::decode {

struct CapturedFrame {
  std::int64_t time_ns = 0;  // capture time, any epoch (made relative to the first frame)
  ByteSpan data;
};

struct CaptureStats {
  std::uint64_t frames = 0;
  std::uint64_t socklnd_frames = 0;  // TCP to/from port 988
  std::uint64_t roce_frames = 0;     // UDP to port 4791
  std::uint64_t other_ip_frames = 0; // other TCP and UDP
  std::array<std::uint64_t, kFrameSkipCount> skipped{};
  std::uint64_t pdus = 0;
  std::uint64_t undecodable_pdus = 0;  // PDUs with a WireError
};

// A socklnd TCP connection as seen in the capture.
struct SockConnection {
  std::size_t index = 0;
  Endpoint connector;
  Endpoint acceptor;
  bool saw_start = false;  // the SYN was captured (else the roles are guessed)
  std::vector<TcpEvent> events;
  std::optional<std::int32_t> connector_ctype;  // from the connector's HELLO
  // The connector used an unprivileged source port, which a Linux acceptor
  // refuses ("insecure port") before reading anything.
  bool unprivileged_port() const noexcept { return connector.port > sock::kPrivilegedPortMax; }
};

class CaptureDecoder {
 public:
  explicit CaptureDecoder(LinkType link) noexcept : link_(link) {}

  // Decode one frame (frames are numbered from 1 in the order added) and
  // append the PDUs it completed to `out`.
  void add_frame(const CapturedFrame& frame, std::vector<Pdu>& out);
  // The capture has ended: report what is left (incomplete elements, bytes
  // after holes in TCP streams, unfinished multi-packet SENDs).
  void finish(std::vector<Pdu>& out);

  const CaptureStats& stats() const noexcept { return stats_; }
  std::vector<SockConnection> connections() const;

  // A hole in a TCP stream is given up on (its bytes were not captured)
  // once this many bytes after it have arrived.
  static constexpr std::size_t kHoleGiveUp = 4u << 20;

 private:
  struct Walkers {
    std::array<SockStreamWalker, 2> dir;  // as TcpConnection::dir
    // Kept here because a walker is replaced after a hole in its stream.
    std::optional<std::int32_t> connector_ctype;
  };

  void add_socklnd(const ParsedFrame& f, FrameRef ref, std::vector<Pdu>& out);
  // Walk what is contiguous in one direction; `at_end` reports leftovers.
  void drain(TcpConnection& c, int d, bool at_end, std::vector<Pdu>& out);
  // Report the element cut by a hole, skip the hole and resynchronise after it.
  void skip_hole(TcpConnection& c, int d, bool at_end, std::vector<Pdu>& out);
  void count(const std::vector<Pdu>& out, std::size_t from);

  LinkType link_;
  std::optional<std::int64_t> t0_ns_;
  CaptureStats stats_;
  TcpReassembler tcp_{sock::kAcceptPort};
  std::deque<Walkers> walkers_;  // by connection index
  RoceDecoder roce_;
};

}  // namespace lnetr::decode
