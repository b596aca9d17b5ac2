// Route selection cost per message (RouteTableView::select) for 1, 4 and 16
// routes per remote net, in two shapes side by side:
//   tie     every route has the same priority and hops: the gateway-NI
//           callback runs for each and round robin decides (the worst case);
//   ranked  distinct priorities: the first comparison decides.
// The table has 8 remote nets and selections cycle through them, as a router
// forwarding to several nets does.  Time per iteration = one selection.
// BM_RouteFind is the net lookup alone.
//   bench-route-select --benchmark_format=json
#include <benchmark/benchmark.h>

#include <array>
#include <string>
#include <vector>

#include "router/route_table.hpp"

namespace {

using namespace lnetr;

constexpr int kRemoteNets = 8;

RouteTable make_table(int routes_per_net, bool ranked) {
  const Net local[] = {Net{2, 0}, Net{5, 0}};
  auto b = *RouteTableBuilder::create(local, 1);
  for (int n = 0; n < kRemoteNets; ++n) {
    for (int g = 0; g < routes_per_net; ++g) {
      RouteSpec s;
      s.net = Net{5, static_cast<std::uint16_t>(n + 1)};
      s.gateway = Nid::make(Net{2, 0}, 0x0a000001u + static_cast<std::uint32_t>(g));
      s.hops = 1;
      s.priority = ranked ? static_cast<std::uint32_t>(g) : 0;
      (void)b.add(s);
    }
  }
  return b.build();
}

void BM_RouteSelect(benchmark::State& state) {
  const int per_net = static_cast<int>(state.range(0));
  const bool ranked = state.range(1) != 0;
  const RouteTable table = make_table(per_net, ranked);
  const RouteTableView& view = table.view();
  RouteCursor cursor(view);
  // The worker's view of each gateway's tx credits, by gateway index.
  std::vector<std::int32_t> credits(view.gateways().size(), 8);
  const LocalNetMask usable = LocalNetMask::all();
  std::array<Net, kRemoteNets> dst{};
  for (int n = 0; n < kRemoteNets; ++n) dst[static_cast<std::size_t>(n)] = Net{5, static_cast<std::uint16_t>(n + 1)};

  std::size_t i = 0;
  for (auto _ : state) {
    auto r = view.select(dst[i++ % kRemoteNets], cursor, usable,
                         [&](const Route& rt) { return credits[rt.gateway_index]; });
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(ranked ? "ranked" : "tie");
}

// The lookup of the remote net alone, for comparison: what select() costs
// beyond it is the walk over the net's routes.
void BM_RouteFind(benchmark::State& state) {
  const RouteTable table = make_table(static_cast<int>(state.range(0)), false);
  const RouteTableView& view = table.view();
  std::array<Net, kRemoteNets> dst{};
  for (int n = 0; n < kRemoteNets; ++n) dst[static_cast<std::size_t>(n)] = Net{5, static_cast<std::uint16_t>(n + 1)};
  std::size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(view.find(dst[i++ % kRemoteNets]));
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_RouteFind)->ArgName("routes_per_net")->Arg(4)->Unit(benchmark::kNanosecond);

BENCHMARK(BM_RouteSelect)
    ->ArgNames({"routes_per_net", "ranked"})
    ->ArgsProduct({{1, 4, 16}, {0, 1}})
    ->Unit(benchmark::kNanosecond);

}  // namespace

BENCHMARK_MAIN();
