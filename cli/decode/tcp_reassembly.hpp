// TCP reassembly: turns captured segments into the byte stream of each
// direction of each connection, remembering which frame carried every byte.
//
// Segments are placed by sequence number: retransmitted and overlapping
// bytes are kept from their first copy (what the receiver's stack delivered),
// out-of-order segments wait until the hole before them is filled, TSO
// super-frames are just long segments.  A SYN on a 4-tuple whose previous
// connection saw a FIN/RST or another ISN starts a new connection (port
// reuse).  Consumers read the contiguous bytes of a direction and consume
// them; buffered memory is what has not been consumed yet.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "cli/decode/frame.hpp"

namespace lnetr::decode {

// One direction's stream: contiguous bytes not yet consumed, plus segments
// waiting after a hole.
class StreamBuffer {
 public:
  // Place `data` at stream offset `offset` (bytes before the consumed
  // position or already present are ignored).
  void add(std::uint64_t offset, ByteSpan data, FrameRef frame);

  // The contiguous bytes after the consumed position.
  ByteSpan data() const noexcept { return {buf_.data() + consumed_, buf_.size() - consumed_}; }
  // Stream offset of data()[0].
  std::uint64_t offset() const noexcept { return base_ + consumed_; }
  // Stream offset just past the contiguous bytes.
  std::uint64_t end() const noexcept { return base_ + buf_.size(); }
  void consume(std::size_t n);

  // Frames that carried the bytes [begin, end) (which must not be consumed yet).
  FrameSpan frames(std::uint64_t begin, std::uint64_t end) const;

  // Bytes held after a hole (never delivered if the hole is never filled),
  // and where the first of them starts.
  std::size_t held_bytes() const noexcept { return held_bytes_; }
  std::optional<std::uint64_t> first_held() const noexcept;
  // Give up on the hole: make the held bytes contiguous from the first held
  // offset on (the hole's bytes are lost).  Returns the hole's size.
  std::uint64_t skip_hole();

  // Limit on bytes held out of order; beyond it new segments are dropped
  // (a capture with a huge hole would otherwise be held in memory whole).
  static constexpr std::size_t kMaxHeld = 64u << 20;

 private:
  struct Run {  // bytes [begin, end) of the stream came in `frame`
    std::uint64_t begin, end;
    FrameRef frame;
  };
  struct Held {
    std::vector<std::uint8_t> bytes;
    FrameRef frame;
  };
  void append(std::uint64_t offset, ByteSpan data, FrameRef frame);
  void drain_held();

  std::vector<std::uint8_t> buf_;
  std::size_t consumed_ = 0;
  std::uint64_t base_ = 0;  // stream offset of buf_[0]
  std::deque<Run> runs_;
  std::map<std::uint64_t, Held> held_;
  std::size_t held_bytes_ = 0;
};

// A SYN, FIN or RST seen on a connection.
struct TcpEvent {
  FrameRef frame;
  bool from_client = true;
  std::uint8_t flags = 0;
};

struct TcpDirection {
  std::optional<std::uint32_t> isn;  // from the SYN / SYN+ACK
  std::optional<std::uint32_t> seq0; // sequence number of stream offset 0
  StreamBuffer stream;
  bool fin = false;
};

struct TcpConnection {
  std::size_t index = 0;     // order of appearance
  Endpoint client;           // the SYN's sender (guessed if no SYN was captured)
  Endpoint server;
  bool saw_syn = false;      // false: the capture started inside the connection
  bool reset = false;
  std::vector<TcpEvent> events;
  std::array<TcpDirection, 2> dir;  // [0] client -> server, [1] server -> client

  bool closed() const noexcept { return reset || (dir[0].fin && dir[1].fin); }
};

class TcpReassembler {
 public:
  // `server_port`: the port that marks the server when a connection's SYN
  // was not captured (else the lower port is taken as the server's).
  explicit TcpReassembler(std::uint16_t server_port) : server_port_(server_port) {}

  struct Delivery {
    TcpConnection* conn = nullptr;
    int direction = 0;  // index into conn->dir
  };
  // Add one segment; returns the connection and direction it belongs to.
  Delivery add(const ParsedFrame& f, FrameRef frame);

  std::deque<TcpConnection>& connections() noexcept { return conns_; }
  const std::deque<TcpConnection>& connections() const noexcept { return conns_; }

 private:
  using Key = std::pair<Endpoint, Endpoint>;
  TcpConnection& open(const ParsedFrame& f, bool from_syn);
  static void place(TcpDirection& d, const TcpSegment& s, FrameRef frame);

  std::uint16_t server_port_;
  std::deque<TcpConnection> conns_;  // deque: stable addresses
  std::map<Key, std::size_t> by_tuple_;
};

}  // namespace lnetr::decode
