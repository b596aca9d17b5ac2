// The dataplane TCP connection against an arbitrary peer: after a
// handshake, fuzz bytes become segments (any flags, sequence and ACK
// numbers near or far from the window, options, payloads) and clock ticks.
// Nothing crashes or reads out of bounds; what the connection queues stays
// within its send buffer; an ended connection stays ended; every segment it
// sends encodes.  Lent memory is freed as soon as the connection releases
// it (acknowledged, copied by own_sent(), or the end), so that a read of
// released memory is an AddressSanitizer report.  Lent blocks may carry a
// device reference, which every piece sent from them keeps.  Segments may
// lie in "received frames" the connection can keep (out of order) within a
// budget, and so may bytes sent (held by the send queue until acknowledged
// instead of copied): each frame is freed when its last reference goes,
// and none is left once the connection is gone.  Half the inputs (the peer's ISS odd) run
// with segmentation offload: new data may leave several segments at once,
// never more than tso_bytes (nor more than one segment without it).
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "dataplane/tcp/conn.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace lnetr;
using namespace lnetr::tcp;
using namespace std::chrono_literals;

namespace {

// Memory lent to the connection, each block until the stream position
// past its last byte is acknowledged.
struct Lender {
  std::uint64_t queued = 0, acked = 0;  // stream bytes taken by send()/lend(), acknowledged
  std::deque<std::pair<std::uint64_t, std::unique_ptr<std::uint8_t[]>>> blocks;
  void release() {
    while (!blocks.empty() && blocks.front().first <= acked) blocks.pop_front();
  }
};

// Received frames: reference counts, a budget, and the memory freed with
// the last reference.
struct Frames final : lnd::FrameRefs {
  std::map<void*, std::pair<int, std::unique_ptr<std::uint8_t[]>>> live;
  std::size_t held = 0, budget = 8;
  bool retain(void* f) noexcept override {
    if (held >= budget) return false;
    share(f);
    return true;
  }
  bool hold(void* f) noexcept override { return retain(f); }  // (a send queue's: the same budget)
  void share(void* f) noexcept override {
    auto it = live.find(f);
    FUZZ_CHECK(it != live.end());
    ++it->second.first;
    ++held;
  }
  void release(void* f) noexcept override {
    auto it = live.find(f);
    FUZZ_CHECK(it != live.end() && it->second.first > 0 && held > 0);
    --held;
    if (--it->second.first == 0) live.erase(it);
  }
};

struct Sink : Upper, Output {
  std::uint32_t space = 65536;
  bool ended = false;
  std::size_t delivered = 0;
  Lender* lender = nullptr;
  Frames* frames = nullptr;
  const Conn* conn = nullptr;
  std::size_t most = 0;  // ConnConfig::tso_bytes
  void on_acked(std::size_t n) override {
    lender->acked += n;
    FUZZ_CHECK(lender->acked <= lender->queued);
    lender->release();
  }
  void on_established() override {}
  void on_data(ByteSpan b, void* frame) override {
    delivered += b.size();
    // A frame passed with bytes is one the connection still holds.
    if (frame) FUZZ_CHECK(frames->live.count(frame) && frames->live[frame].first > 0);
    for (std::uint8_t x : b) FUZZ_CHECK(x == 0x5a);
  }
  std::uint32_t receive_space() const override { return space; }
  void on_peer_closed() override {}
  void on_end(End) override {
    FUZZ_CHECK(!ended);  // once
    ended = true;
    lender->blocks.clear();  // an ended connection holds nothing
  }
  void transmit(const Endpoints&, const TcpHeader& h, const Payload& payload) override {
    std::uint8_t buf[kTcpMaxHeader];
    FUZZ_CHECK(encode_tcp(h, buf) > 0);
    FUZZ_CHECK(payload.size() <= 65535);
    FUZZ_CHECK(payload.size() <= std::max(most, conn->payload_mss()));
    std::size_t total = 0;
    std::uint32_t sum = 0;  // every byte read
    payload.for_each_piece([&](ByteSpan piece, void* dev) {
      total += piece.size();
      for (std::uint8_t b : piece) sum += b;
      // A device reference names the block the piece lies in (its start).
      if (dev) FUZZ_CHECK(static_cast<const std::uint8_t*>(dev) <= piece.data());
    });
    FUZZ_CHECK(total == payload.size());
    FUZZ_CHECK(sum == 0x5au * total);
  }
};

struct Reader {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t u8() { return n ? (--n, *p++) : 0; }
  std::uint32_t u32() { return std::uint32_t{u8()} << 24 | std::uint32_t{u8()} << 16 | std::uint32_t{u8()} << 8 | u8(); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader r{data, size};
  Lender lender;
  Frames frames;
  Sink sink;
  sink.lender = &lender;
  sink.frames = &frames;
  const std::uint32_t peer_iss = r.u32();
  ConnConfig cfg;
  cfg.send_buffer = 20000;
  cfg.frames = &frames;
  if (peer_iss & 1) cfg.tso_bytes = 65535 - 20 - 60;
  sink.most = cfg.tso_bytes;
  auto conn = std::make_unique<Conn>(Endpoints{IpAddr::v4(1), IpAddr::v4(2), 988, 1023}, cfg, sink, sink);
  Conn& c = *conn;
  sink.conn = conn.get();
  Time now = 1000s;
  TcpHeader syn;
  syn.flags = tcp_flag::syn;
  syn.seq = peer_iss;
  syn.window = static_cast<std::uint16_t>(r.u32());
  if (r.u8() & 1) syn.options.mss = static_cast<std::uint16_t>(r.u32());
  if (r.u8() & 1) syn.options.window_scale = r.u8();
  syn.options.sack_permitted = r.u8() & 1;
  if (r.u8() & 1) syn.options.timestamps = {{r.u32(), 0}};
  c.accept(syn, 7777, now);
  std::vector<std::uint8_t> payload(4096, 0x5a);
  while (r.n > 0 && !sink.ended) {
    const std::uint8_t op = r.u8();
    now += std::chrono::milliseconds(r.u8());
    switch (op % 8) {
      case 0: {  // a segment near the connection's numbers
        TcpHeader h;
        h.flags = r.u8();
        h.seq = peer_iss + 1 + (r.u32() % 200000) - 1000;
        h.ack = 7777 + (r.u32() % 200000) - 1000;
        h.window = static_cast<std::uint16_t>(r.u32());
        if (r.u8() & 1) h.options.timestamps = {{r.u32(), r.u32()}};
        h.options.sack_count = static_cast<std::uint8_t>(r.u8() % 4);
        for (std::uint8_t i = 0; i < h.options.sack_count; ++i) h.options.sack[i] = {r.u32(), r.u32()};
        const std::size_t len = r.u32() % payload.size();
        if (r.u8() & 1) {  // in a received frame of its own
          auto bytes = std::make_unique<std::uint8_t[]>(len + 1);
          std::fill(bytes.get(), bytes.get() + len, std::uint8_t{0x5a});
          void* f = bytes.get();
          frames.live[f] = {0, std::move(bytes)};
          h.payload = ByteSpan(static_cast<const std::uint8_t*>(f), len);
          h.frame = f;
          c.input(h, now);
          if (auto it = frames.live.find(f); it != frames.live.end() && it->second.first == 0) frames.live.erase(it);
        } else {
          h.payload = ByteSpan(payload).first(len);
          c.input(h, now);
        }
        break;
      }
      case 1: {  // a segment anywhere
        TcpHeader h;
        h.flags = r.u8();
        h.seq = r.u32();
        h.ack = r.u32();
        h.window = static_cast<std::uint16_t>(r.u32());
        h.payload = ByteSpan(payload).first(r.u8());
        c.input(h, now);
        break;
      }
      case 2: {
        const std::size_t len = r.u32() % payload.size();
        if (r.u8() & 1) {  // from a received frame, held by the connection or copied; freed when unheld
          auto bytes = std::make_unique<std::uint8_t[]>(len + 1);
          std::fill(bytes.get(), bytes.get() + len, std::uint8_t{0x5a});
          void* f = bytes.get();
          frames.live[f] = {0, std::move(bytes)};
          bool held = false;
          lender.queued += c.queue_only_held(ByteSpan(static_cast<const std::uint8_t*>(f), len), f, held);
          c.push_queued(now);
          auto it = frames.live.find(f);
          FUZZ_CHECK(held == (it != frames.live.end() && it->second.first > 0));
          if (it != frames.live.end() && it->second.first == 0) frames.live.erase(it);
        } else {
          lender.queued += c.send(ByteSpan(payload).first(len), now);
        }
        break;
      }
      case 6: {  // lent memory
        const std::size_t len = r.u32() % payload.size();
        auto block = std::make_unique<std::uint8_t[]>(len + 1);
        std::fill(block.get(), block.get() + len, std::uint8_t{0x5a});
        void* dev = (r.u8() & 1) ? block.get() : nullptr;  // with a device reference, or without
        const std::size_t took = c.lend(ByteSpan(block.get(), len), now, dev);
        lender.queued += took;
        if (took > 0) lender.blocks.emplace_back(lender.queued, std::move(block));
        FUZZ_CHECK(c.lent() <= c.queued());
        break;
      }
      case 7:  // the lender wants its memory back
        (void)c.own_sent();
        lender.blocks.clear();
        FUZZ_CHECK(c.lent() == 0);
        break;
      case 3: now += std::chrono::seconds(r.u8()); c.tick(now); break;
      case 4: sink.space = r.u32() % 200000; c.window_opened(now); break;
      case 5: (r.u8() & 1) ? c.close(now) : c.abort(now); break;
    }
    FUZZ_CHECK(c.queued() <= cfg.send_buffer);
    FUZZ_CHECK(c.queued() == lender.queued - lender.acked || sink.ended);
    FUZZ_CHECK(c.consistent());
    FUZZ_CHECK(c.held_bytes() <= 200000 + (1u << 14));  // within the largest window the sink allows (+ rounding)
    FUZZ_CHECK(c.cwnd() >= 1 && c.send_mss() >= 64);
    if (sink.ended) FUZZ_CHECK(c.state() == State::closed);
  }
  conn.reset();
  FUZZ_CHECK(frames.live.empty() && frames.held == 0);  // every frame let go
  return 0;
}
