// A dataplane TCP/IP stack (listening on 988; IPv4 or, as the first byte's
// low bit says, IPv6) fed arbitrary frames and
// clock ticks, whole or as chains of buffers (a device's large-receive
// units), a burst at a time: nothing crashes or reads out of bounds, every
// frame it sends decodes as Ethernet and fits the MTU, and connections
// stay within max_connections.
#include <cstddef>
#include <cstdint>

#include "dataplane/tcp/stack.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;
using namespace lnetr::tcp;
using namespace std::chrono_literals;

namespace {

struct Sink : Port {
  void send(ByteSpan frame) override {
    FUZZ_CHECK(decode_ethernet(frame));
    FUZZ_CHECK(frame.size() >= 60 && frame.size() <= 1518);
  }
};

struct Owner : Upper {
  void on_established() override {}
  void on_data(ByteSpan, void*) override {}
  std::uint32_t receive_space() const override { return 65536; }
  void on_peer_closed() override {}
  void on_end(End) override {}
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Sink port;
  Owner owner;
  StackConfig cfg;
  cfg.mac = {0x02, 0, 0, 0, 0, 1};
  if (size == 0) return 0;
  const bool v6 = (data[0] & 1) != 0;
  cfg.ip = v6 ? IpAddr::v6({0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}) : IpAddr::v4(0x0a000001);
  cfg.prefix_len = v6 ? 64 : 24;
  cfg.max_connections = 16;
  Stack s(cfg, port);
  s.listen(988, [&owner](const Endpoints&) -> Upper* { return &owner; });
  Time now = 1000s;
  // Frames: a length byte, a tick byte (its low bit: checksums verified by
  // the device; the next: received as a chain, cut every (tick >> 2) + 1
  // bytes; non-zero: the clock moves, and the burst ends), then that many
  // bytes (the first 12 of a frame are replaced by our MAC and a peer's,
  // so most reach IP).
  std::size_t i = 1;
  s.begin_burst();
  while (i + 2 <= size) {
    const std::size_t len = data[i];
    now += std::chrono::milliseconds(data[i + 1] * 10);
    i += 2;
    const std::size_t n = std::min(len * 8, size - i);
    std::vector<std::uint8_t> frame(data + i, data + i + n);
    i += n;
    if (frame.size() >= 12) {
      std::copy(cfg.mac.begin(), cfg.mac.end(), frame.begin());
      frame[6] = 0x02;
    }
    // Odd tick bytes: as if the device had verified the checksums (offload),
    // so that arbitrary segments reach the TCP state machine.
    // A port with several queues steers it by its sender first: that reads
    // what an IPv4, IPv6 or ARP decode reads, and agrees with it.
    const auto from = sender_address(frame);
    if (const auto e = decode_ethernet(frame); e && e->type == kEtherIpv4) {
      const ByteSpan l3 = ByteSpan(frame).subspan(e->header_size());
      if (const auto ip = decode_ipv4(l3)) FUZZ_CHECK(from && *from == IpAddr::v4(ip->src));
      if (l3.size() < 16) FUZZ_CHECK(!from);
    } else if (e && e->type == kEtherIpv6) {
      const ByteSpan l3 = ByteSpan(frame).subspan(e->header_size());
      if (const auto ip = decode_ipv6(l3)) FUZZ_CHECK(from && *from == ip->src);
      if (l3.size() < 24) FUZZ_CHECK(!from);
    }
    const std::uint8_t tick = data[i - n - 1];
    if (tick & 2) {
      // As a chain of buffers, cut where the tick's upper bits say (every
      // 1 to 64 bytes), each its own piece.
      const std::size_t step = (tick >> 2) + 1u;
      std::vector<FramePiece> pieces;
      static int refs[256];
      for (std::size_t at = 0; at < frame.size(); at += step)
        pieces.push_back({ByteSpan(frame).subspan(at, std::min(step, frame.size() - at)), &refs[pieces.size() % 256]});
      s.receive_chain(pieces.data(), pieces.size(), now, (tick & 1) != 0);
    } else {
      s.receive(frame, now, (tick & 1) != 0);
    }
    // Bursts end where the tick moved the clock.
    if (tick != 0) {
      s.end_burst(now);
      s.tick(now);
      s.begin_burst();
    }
    FUZZ_CHECK(s.connections() <= cfg.max_connections);
  }
  s.end_burst(now);
  return 0;
}
