// What building a TCP frame on a DPDK port costs, copied or chained, side by
// side: the payload of each segment (1,448 or 8,948 bytes, from a 1 MiB
// router buffer) either copied into the frame's mbuf after the headers
// (zero_copy: 0, or a device without chained frames) or attached to the
// buffer as a second segment counted in its BufferRef (zero_copy: 1).
// The device is net_ring, a ring of mbuf pointers looped back to its own
// receive side (it takes chained frames and touches no byte, as a NIC
// whose DMA reads the frame): the frames are drained and freed after each
// burst, so that what is measured is lnetr's side only (mbuf allocation,
// the copy or the attachment, the burst, the free).
// Counters: frames and payload bytes per second.
//   bench-port-tx --benchmark_format=json
#include <benchmark/benchmark.h>
#include <rte_eal.h>
#include <rte_ethdev.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/tcp/buffer_ref.hpp"
#include "dataplane/tcp/port.hpp"

namespace {

using namespace lnetr;
using namespace lnetr::tcp;

constexpr std::size_t kHeaders = 14 + 20 + 32;  // Ethernet, IPv4, TCP with timestamps

std::unique_ptr<EthPort> g_copy, g_chain;  // net_ring0 (zero_copy: 0), net_ring1 (zero_copy: 1)

std::unique_ptr<EthPort> open_port(const char* device, bool zero_copy) {
  PortConfig cfg;
  cfg.name = device;
  cfg.device = device;
  cfg.ip = IpAddr::v4(0x0a000001);
  cfg.mtu = 9000;
  cfg.zero_copy = zero_copy;
  std::string err;
  auto p = EthPort::open(cfg, 4096, 0, err);
  if (!p) std::fprintf(stderr, "bench-port-tx: %s\n", err.c_str());
  return p;
}

// One frame a segment: headers written in the first mbuf, the payload after
// them (copied) or attached (chained); a burst every 32 frames.
void run(benchmark::State& state, EthPort* port, bool chain) {
  if (!port || (chain && !port->tx_chains())) {
    state.SkipWithError("net_ring port missing or without chained frames");
    return;
  }
  const auto payload = static_cast<std::size_t>(state.range(0));
  const auto span = static_cast<std::size_t>(state.range(1));
  std::vector<std::uint8_t> buffer(span, 0x5a);
  BufferRef ref;
  ref.reset(buffer.data(), RTE_BAD_IOVA);
  PortQueue q(*port, 0);
  std::size_t at = 0;
  std::uint64_t n = 0;
  rte_mbuf* looped[64];
  auto drain = [&] {
    (void)q.flush();
    while (const std::uint16_t k = rte_eth_rx_burst(port->port_id(), 0, looped, 64)) rte_pktmbuf_free_bulk(looped, k);
  };
  for (auto _ : state) {
    if (at + payload > span) at = 0;
    const ByteSpan piece(buffer.data() + at, payload);
    at += payload;
    MutableByteSpan frame = q.alloc_frame(kHeaders + (chain ? 0 : payload));
    if (frame.empty()) {
      state.SkipWithError("no mbuf");
      break;
    }
    std::memset(frame.data(), 0, kHeaders);
    if (chain) {
      if (q.append_segment(piece, ref.handle()) != Port::Appended::referenced) {
        state.SkipWithError("no mbuf to attach");
        break;
      }
      q.send_built(kHeaders, 0);
    } else {
      std::memcpy(frame.data() + kHeaders, piece.data(), payload);
      q.send_built(kHeaders + payload, 0);
    }
    if (++n % 32 == 0) drain();
  }
  drain();
  if (ref.held_by_device()) state.SkipWithError("the device still holds frames of the buffer");
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(payload));
}

void BM_FrameCopied(benchmark::State& state) { run(state, g_copy.get(), false); }
void BM_FrameChained(benchmark::State& state) { run(state, g_chain.get(), true); }

void sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t payload : {1448, 8948})
    for (std::int64_t span : {1 << 20, 64 << 20}) b->Args({payload, span});
}
BENCHMARK(BM_FrameCopied)->Apply(sizes);
BENCHMARK(BM_FrameChained)->Apply(sizes);

}  // namespace

int main(int argc, char** argv) {
  const char* eal[] = {"bench-port-tx", "--no-huge", "--no-shconf", "-m", "512", "--no-pci", "-l", "0",
                       "--log-level=lib.*:error", "--vdev=net_ring0", "--vdev=net_ring1"};
  if (rte_eal_init(static_cast<int>(std::size(eal)), const_cast<char**>(eal)) < 0) {
    std::fprintf(stderr, "bench-port-tx: EAL start failed\n");
    return 1;
  }
  g_copy = open_port("net_ring0", false);
  g_chain = open_port("net_ring1", true);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_copy.reset();
  g_chain.reset();
  rte_eal_cleanup();
  return 0;
}
