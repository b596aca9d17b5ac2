// What the dataplane TCP costs per byte and per segment, CPU only: 4 MiB
// moved from one connection to another (dataplane/tcp/conn.hpp) through
// memory, in two shapes side by side:
//   engine  segments handed over as headers and a payload copy (what a
//           NIC's DMA costs is not counted, the copy stands in for it);
//   codec   each segment also encoded, checksummed, checked and decoded
//           (dataplane/tcp/wire.hpp), as the stack does without offloads.
// Counters: bytes per second and seconds per data segment.
//   bench-tcp-conn --benchmark_format=json
#include <benchmark/benchmark.h>

#include <deque>
#include <memory>
#include <vector>

#include "dataplane/tcp/conn.hpp"

namespace {

using namespace lnetr;
using namespace lnetr::tcp;
using namespace std::chrono_literals;

struct Pipe;

struct Side final : Upper, Output {
  Pipe* pipe = nullptr;
  int index = 0;
  std::unique_ptr<Conn> conn;
  std::uint64_t got = 0;
  void on_established() override {}
  void on_data(ByteSpan b, void*) override { got += b.size(); }
  std::uint32_t receive_space() const override { return 4u << 20; }
  void on_peer_closed() override {}
  void on_end(End) override {}
  void transmit(const Endpoints& ep, const TcpHeader& h, const Payload& payload) override;
};

struct Pipe {
  bool codec = false;
  struct Seg {
    TcpHeader h;
    std::vector<std::uint8_t> bytes;  // payload, or the whole segment (codec)
  };
  std::deque<Seg> q[2];
  Side sides[2];
  std::uint64_t data_segments = 0;
  Time now = 1000s;

  explicit Pipe(bool with_codec) : codec(with_codec) {
    for (int i = 0; i < 2; ++i) {
      sides[i].pipe = this;
      sides[i].index = i;
      const IpAddr one = IpAddr::v4(1), two = IpAddr::v4(2);
      const Endpoints ep = i == 0 ? Endpoints{one, two, 1023, 988} : Endpoints{two, one, 988, 1023};
      sides[i].conn = std::make_unique<Conn>(ep, ConnConfig{}, sides[i], sides[i]);
    }
    sides[0].conn->connect(1, now);
    Seg syn = std::move(q[1].front());
    q[1].pop_front();
    sides[1].conn->accept(codec ? *decode_tcp(syn.bytes) : syn.h, 7, now);
    pump();
    if (sides[0].conn->state() != State::established) std::abort();
  }

  void deliver(int to, Seg& s) {
    if (!codec) {
      s.h.payload = s.bytes;
      sides[to].conn->input(s.h, now);
      return;
    }
    const Endpoints& ep = sides[1 - to].conn->endpoints();
    if (!tcp_checksum_ok(ep.local_ip, ep.remote_ip, s.bytes)) std::abort();
    auto h = decode_tcp(s.bytes);
    sides[to].conn->input(*h, now);
  }

  void pump() {
    for (bool moved = true; moved;) {
      moved = false;
      now += 10us;
      for (int to = 0; to < 2; ++to) {
        while (!q[to].empty()) {
          Seg s = std::move(q[to].front());
          q[to].pop_front();
          deliver(to, s);
          moved = true;
        }
      }
      for (auto& s : sides)
        if (auto t = s.conn->next_timer(); t && *t <= now) s.conn->tick(now);
    }
  }
};

void Side::transmit(const Endpoints& ep, const TcpHeader& h, const Payload& payload) {
  Pipe::Seg s;
  if (!payload.empty()) ++pipe->data_segments;
  if (pipe->codec) {
    s.bytes.resize(kTcpMaxHeader + payload.size());
    const std::size_t n = encode_tcp(h, s.bytes);
    payload.copy_to(s.bytes.data() + n);
    s.bytes.resize(n + payload.size());
    finish_tcp_checksum(ep.local_ip, ep.remote_ip, s.bytes);
  } else {
    s.h = h;
    s.bytes.resize(payload.size());
    payload.copy_to(s.bytes.data());
  }
  pipe->q[1 - index].push_back(std::move(s));
}

void BM_TcpTransfer(benchmark::State& state) {
  const bool codec = state.range(0) != 0;
  constexpr std::size_t kBytes = 4 << 20;
  const std::vector<std::uint8_t> chunk(256 << 10, 0x5a);
  std::uint64_t bytes = 0, segments = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Pipe p(codec);
    state.ResumeTiming();
    std::size_t queued = 0;
    for (int rounds = 0; p.sides[1].got < kBytes; ++rounds) {
      if (rounds > 10'000'000) std::abort();  // stuck: a bug, not a measurement
      if (queued < kBytes) queued += p.sides[0].conn->send(chunk, p.now);
      p.pump();
    }
    bytes += kBytes;
    segments += p.data_segments;
  }
  state.SetLabel(codec ? "codec" : "engine");
  state.counters["bytes_per_s"] = benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsRate);
  state.counters["seconds_per_segment"] = benchmark::Counter(
      static_cast<double>(segments), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_TcpTransfer)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
