// lnetr-dataplane: loads the configuration, brings up DPDK's EAL with one
// worker lcore per CPT, builds the per-CPT pools and the rings between
// workers, launches the workers and runs the control thread on the main
// lcore until SIGINT/SIGTERM.
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_pdump.h>
#include <rte_ring.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/control.hpp"
#include "dataplane/log.hpp"
#include "dataplane/setup.hpp"
#include "dataplane/shared.hpp"
#include "dataplane/systemd.hpp"
#include "dataplane/tcp/log.hpp"
#include "dataplane/tcp/unmap_guard.hpp"
#include "dataplane/worker.hpp"
#include "lnd/o2iblnd/verbs.hpp"

namespace lnetr::dp {
namespace {

SharedState* g_shared = nullptr;

// Bytes per route slot: room for the table from the file twice over and
// at least 1 MiB (about 25,000 routes), since lnetr-control adds routes.
std::uint64_t shm_slot_bytes(const RouteTableView& t) {
  const std::uint64_t need = 4096 + t.local_nets().size_bytes() + t.nets().size_bytes() +
                             t.routes().size_bytes() + t.gateways().size_bytes();
  return std::max<std::uint64_t>(std::uint64_t{1} << 20, 2 * need);
}

void on_signal(int) {
  if (g_shared) g_shared->stop.store(true, std::memory_order_relaxed);
}

bool hugepages_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  long value = 0;
  bool free_pages = false;
  while (meminfo >> key >> value) {
    if (key == "HugePages_Free:") free_pages = value > 0;
    meminfo.ignore(256, '\n');
  }
  std::ifstream mounts("/proc/mounts");
  std::string dev, dir, type;
  bool mounted = false;
  while (mounts >> dev >> dir >> type) {
    if (type == "hugetlbfs") mounted = true;
    mounts.ignore(1024, '\n');
  }
  return free_pages && mounted;
}

// Received frames each queue of port `p` may keep (PortQueue::retain): the
// frames of every large buffer a CPT has, and a quarter more, within
// kMaxKeptFrames.  0 without zero copy.
std::uint32_t kept_frames(const Setup& s, const PortSetup& p) {
  if (!p.zero_copy) return 0;
  const std::uint64_t per_frame = p.mtu > 100 ? p.mtu - 52u : 48u;  // IPv4, TCP, timestamps
  const std::uint64_t per_buffer = (pool_capacity(PoolClass::large) + per_frame - 1) / per_frame;
  const std::uint64_t large = std::max<std::uint32_t>(s.buffers[static_cast<std::size_t>(PoolClass::large)] / s.ncpts(), 1);
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(large * per_buffer * 5 / 4, kMaxKeptFrames));
}

// The default hugepage size (/proc/meminfo's Hugepagesize), 2 MiB if unsaid.
std::uint64_t hugepage_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "Hugepagesize:" && kb > 0) return kb << 10;
    meminfo.ignore(256, '\n');
  }
  return 2u << 20;
}

// What an object of `size` bytes takes in a mempool, which lays no object
// of a page or less across two pages: 4 KiB pages without hugepages (an
// object of 2.5 KiB, a frame's mbuf, takes a whole one), the hugepage size
// with them (a large router buffer, 1 MiB and its header, takes a whole
// 2 MiB page); larger objects are laid end to end.
std::uint64_t in_pages(std::uint64_t size, bool huge) {
  static const std::uint64_t huge_page = hugepage_bytes();
  const std::uint64_t page = huge ? huge_page : 4096;
  if (size > page) return size;
  return page / (page / size);
}

// Memory the router buffer pools need, in MB, plus room for DPDK itself.
unsigned pool_memory_mb(const Setup& s, bool huge) {
  std::uint64_t bytes = 0;
  for (std::size_t c = 0; c < kPoolClasses; ++c) {
    const std::uint64_t per_cpt = std::max<std::uint32_t>(s.buffers[c] / s.ncpts(), 1);
    bytes += per_cpt * s.ncpts() * in_pages(pool_capacity(static_cast<PoolClass>(c)) + 256, huge);
  }
  // Each port's mbufs: kPortMbufs per queue of a frame's size (and the
  // frames it may keep), and three times as many data-less ones to chain
  // router buffers with.
  for (const PortSetup& p : s.ports) {
    // An mbuf of a frame's room with its header, private area and the
    // mempool's own header and padding; a data-less one.
    const std::uint64_t frame = in_pages(std::max<std::uint64_t>(RTE_MBUF_DEFAULT_BUF_SIZE, p.mtu + 226u) + 384, huge);
    const std::uint64_t attach = in_pages(256, huge);
    const std::uint64_t steered = p.queues > 1 ? tcp::EthPort::kSteerRing : 0;  // frames in steering rings
    bytes += std::uint64_t{kPortMbufs} * p.queues * (frame + 3 * attach) + steered * p.queues * frame +
             std::uint64_t{kept_frames(s, p)} * p.queues * frame;
  }
  return static_cast<unsigned>(bytes >> 20) + 128;
}

// A PCI address ("0000:3b:00.0" or "3b:00.0"), as opposed to a virtual
// device's "net_xxx0,...".

// What the EAL leaves behind once cleaned up: its runtime directory (empty
// but for DPDK's multi-process files), one per run; and with
// dataplane.dumpcap (`prefix` not empty) the hugepages' files under the
// prefix in every hugetlbfs mount, which keep their pages reserved until
// removed.
void remove_dpdk_files(const std::string& prefix, const std::string& runtime_dir) {
  std::error_code ec;
  if (!runtime_dir.empty()) std::filesystem::remove_all(runtime_dir, ec);
  if (prefix.empty()) return;
  std::ifstream mounts("/proc/mounts");
  std::string dev, dir, type;
  std::size_t removed = 0;
  while (mounts >> dev >> dir >> type) {
    mounts.ignore(1024, '\n');
    if (type != "hugetlbfs") continue;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().filename().string().starts_with(prefix + "map_") && std::filesystem::remove(e.path(), ec)) ++removed;
  }
  log_info("dataplane.dumpcap: %zu hugepage files removed", removed);
}

bool use_hugepages(const Setup& s) {
  return s.hugepages == Hugepages::yes || (s.hugepages == Hugepages::automatic && hugepages_available());
}

std::vector<std::string> eal_args(const Setup& s) {
  std::vector<std::string> a = {"lnetr-dataplane"};
  // lcore 0 is the control thread on the main core; lcore i+1 is CPT i's
  // worker, pinned to its configured core.
  std::string lcores = "0@" + std::to_string(s.main_core);
  for (std::size_t i = 0; i < s.cores.size(); ++i)
    lcores += "," + std::to_string(i + 1) + "@" + std::to_string(s.cores[i]);
  a.push_back("--lcores=" + lcores);
  a.push_back("--main-lcore=0");
  // Only the configured PCI devices (none: no PCI scan at all); virtual
  // devices are created by their drivers at start.
  bool pci = false;
  for (const PortSetup& p : s.ports) {
    if (tcp::is_pci_address(p.device)) {
      pci = true;
      a.push_back("-a");
      a.push_back(tcp::device_name(p.device) + p.device.substr(std::min(p.device.find(','), p.device.size())));
    } else {
      a.push_back("--vdev=" + p.device);
    }
  }
  if (!pci) a.push_back("--no-pci");
  a.push_back("--log-level=lib.eal:warning");
  const bool huge = use_hugepages(s);
  if (!s.dumpcap_prefix.empty()) {
    // A secondary process (dpdk-dumpcap) attaches through the shared
    // configuration under this prefix and maps the hugepages' files;
    // those a previous run left are removed first.
    a.push_back("--file-prefix=" + s.dumpcap_prefix);
    a.push_back("--huge-unlink=existing");
    // The secondary maps the memory at the addresses the primary chose,
    // which must then be free in it too.  DPDK's default (4 GiB) is inside
    // an ASan build's shadow memory, so there the memory went just under
    // the shared libraries and collided with dumpcap's own mappings about
    // one run in five ("Cannot get a virtual area at requested address").
    // 80 TiB is below the libraries and executables, above the shadow, and
    // clear of ASan's allocator (96 TiB).
    a.push_back("--base-virtaddr=0x500000000000");
  } else if (huge) {
    a.push_back("--file-prefix=lnetr" + std::to_string(getpid()));
    a.push_back("--in-memory");
  } else {
    a.push_back("--file-prefix=lnetr" + std::to_string(getpid()));
    a.push_back("--no-huge");
    a.push_back("--no-shconf");
  }
  a.push_back("-m");
  a.push_back(std::to_string(s.memory_mb ? s.memory_mb : pool_memory_mb(s, huge)));
  for (const std::string& x : s.eal_args) a.push_back(x);
  return a;
}

int worker_main(void* arg) { return static_cast<Worker*>(arg)->run(); }

// Every connection is a descriptor: raise the soft limit to the hard one
// (systemd's default soft limit, 1024, is a few hundred peers' worth) and
// say if dataplane.limits.connections per worker cannot fit under it.
void raise_fd_limit(const Setup& setup) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
    (void)getrlimit(RLIMIT_NOFILE, &rl);
  }
  const rlim_t want = static_cast<rlim_t>(setup.sock.max_conns) * setup.ncpts() + 1024;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
    log_warn("open files limited to %llu: dataplane.limits.connections (%zu per worker) cannot all be open; "
             "connections beyond the limit fail to open (raise LimitNOFILE)",
             static_cast<unsigned long long>(rl.rlim_cur), setup.sock.max_conns);
}

int run(const Setup& setup, const config::Config& cfg) {
  raise_fd_limit(setup);
  if (!setup.dumpcap_prefix.empty() && !use_hugepages(setup)) {
    log_error("dataplane.dumpcap: dpdk-dumpcap attaches through hugepages, and none are free (reserve some: "
              "docs/operations.md, Capturing traffic)");
    return 1;
  }
  const std::vector<std::string> args = eal_args(setup);
  std::vector<char*> argv;
  std::string line;
  for (const std::string& x : args) {
    argv.push_back(const_cast<char*>(x.c_str()));
    line += " " + x;
  }
  log_info("EAL:%s", line.c_str());
  if (rte_eal_init(static_cast<int>(argv.size()), argv.data()) < 0) {
    log_error("EAL initialisation failed: %s", rte_strerror(rte_errno));
    return 1;
  }
  if (!setup.dumpcap_prefix.empty()) {
    if (rte_pdump_init() != 0) {
      log_error("dataplane.dumpcap: DPDK's packet-capture server did not start: %s", rte_strerror(rte_errno));
      return 1;
    }
    log_info("dpdk-dumpcap may attach: dpdk-dumpcap --file-prefix=%s", setup.dumpcap_prefix.c_str());
  }
  const std::uint32_t n = setup.ncpts();
  if (rte_lcore_count() != n + 1) {
    log_error("EAL gave %u lcores, %u needed", rte_lcore_count(), n + 1);
    return 1;
  }

  SharedState shared(kMaxNis, n);
  g_shared = &shared;
  const std::int64_t start = std::chrono::steady_clock::now().time_since_epoch().count();
  for (std::size_t i = 0; i < kMaxNis; ++i) shared.ni[i].last_ping_ns.store(start);
  shared.routing.store(setup.routing ? RoutingState::enabled : RoutingState::disabled);
  shared.drop_asym_route.store(setup.drop_asym_route);

  // The static route table of this issue (lnetr-control will publish it).
  std::vector<Net> local_nets;
  for (const NiSetup& ni : setup.nis) local_nets.push_back(ni.nid.net());
  auto builder = RouteTableBuilder::create(local_nets, static_cast<std::uint64_t>(start));
  if (!builder) {
    log_error("route table: %s", std::string(describe(builder.error())).c_str());
    return 1;
  }
  for (const RouteSetup& r : setup.routes) {
    auto added = builder->add({r.net, r.gateway, r.hops, r.priority});
    if (!added)
      log_warn("route to %s via %s ignored: %s", to_string(r.net).c_str(), to_string(r.gateway).c_str(),
               std::string(describe(added.error())).c_str());
  }
  const RouteTable routes = builder->build();
  // Workers take routes from shared memory only; the table from the file is
  // the first snapshot (lnetr-control publishes the later ones).
  std::string shm_err;
  shm::Region region = shm::Region::create(setup.shm_name, n, shm_slot_bytes(routes.view()),
                                           static_cast<std::uint64_t>(start), shm_err, rte_get_tsc_hz());
  if (!region) {
    log_error("%s", shm_err.c_str());
    return 1;
  }
  struct Unlink {
    const std::string& name;
    ~Unlink() { shm::Region::unlink(name); }
  } unlink_at_exit{setup.shm_name};
  // Counters live in the region from here on, where lnetr-control reads them.
  shared.counters = &region.counters(0);
  if (shm::publish(region, routes.view()) != shm::PublishResult::published) {
    log_error("shared memory %s: cannot publish the route table", setup.shm_name.c_str());
    return 1;
  }

  // Rings: a message travels only between its home and the worker sending
  // it (a re-routed one goes back through its home), so the ring from A to
  // B holds at most the messages homed at A or B - plus accepted
  // connections; round up to a power of two.
  std::uint32_t per_cpt = 0;
  for (std::uint32_t b : setup.buffers) per_cpt += std::max<std::uint32_t>(b / n, 1);
  // (An rte_ring of size N holds N - 1.)
  const std::uint32_t ring_size = rte_align32pow2(2 * per_cpt + 1024 + 1);
  Fabric fabric;
  fabric.n = n;
  fabric.message_room = 2 * per_cpt;
  fabric.rings.assign(std::size_t{n} * n, nullptr);
  for (std::uint32_t from = 0; from < n; ++from) {
    for (std::uint32_t to = 0; to < n; ++to) {
      if (from == to) continue;
      const std::string name = "lnetr_ring_" + std::to_string(from) + "_" + std::to_string(to);
      rte_ring* r = rte_ring_create_elem(name.c_str(), sizeof(RingItem), ring_size, SOCKET_ID_ANY,
                                         RING_F_SP_ENQ | RING_F_SC_DEQ);
      if (!r) {
        log_error("cannot create ring %s: %s", name.c_str(), rte_strerror(rte_errno));
        return 1;
      }
      fabric.rings[from * n + to] = r;
    }
    const std::string cname = "lnetr_cmd_" + std::to_string(from);
    fabric.commands.push_back(rte_ring_create(cname.c_str(), 64, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ));
  }

  // DPDK ports: probed by the EAL (--vdev / -a above), configured here
  // (what opening one finds is logged as our own lines).  Their drivers may
  // unmap device memory on the interrupt thread: guarded against the
  // workers' bursts from before the first port starts.
  tcp::set_log(&log_line);
  std::vector<std::unique_ptr<tcp::EthPort>> ports;
  if (!setup.ports.empty()) {
    std::string gerr;
    if (!tcp::unmap_guard::install(n, gerr)) {
      log_error("%s", gerr.c_str());
      return 1;
    }
  }
  for (const PortSetup& ps : setup.ports) {
    std::string perr;
    auto p = tcp::EthPort::open(ps, kPortMbufs, kept_frames(setup, ps), perr);
    if (!p) {
      log_error("%s", perr.c_str());
      return 1;
    }
    const auto& m = p->mac();
    log_info("port %s: %s, MAC %02x:%02x:%02x:%02x:%02x:%02x, %u queue(s), MTU %u, link %s", ps.name.c_str(),
             ps.device.c_str(), m[0], m[1], m[2], m[3], m[4], m[5], ps.queues, ps.mtu, p->link_up() ? "up" : "down");
    fabric.ports.push_back(p.get());
    ports.push_back(std::move(p));
  }

  // The RDMA device behind each o2ib NI's address.
  fabric.verbs.resize(kMaxNis);  // (by NI slot: the setup's NIs take the first)
  for (std::size_t i = 0; i < setup.nis.size(); ++i) {
    const NiSetup& ni = setup.nis[i];
    if (!ni.is_o2ib()) continue;
    std::string why;
    if (!o2ib::verbs_available(why)) {
      log_error("NI %s is on an o2ib net, but this machine has %s", to_string(ni.nid).c_str(), why.c_str());
      return 1;
    }
    fabric.verbs[i] = o2ib::VerbsDevice::open(
        ni.nid.addr4(), why, setup.o2ib_transfer_keys ? o2ib::RemoteKeys::transfer : o2ib::RemoteKeys::pool);
    if (!fabric.verbs[i]) {
      log_error("NI %s: %s", to_string(ni.nid).c_str(), why.c_str());
      return 1;
    }
    const o2ib::VerbsDevice& dev = *fabric.verbs[i];
    log_info("NI %s: RDMA device %s; remote keys %s", to_string(ni.nid).c_str(), dev.name().c_str(),
             dev.remote_keys() == o2ib::RemoteKeys::pool ? "per pool (any connected peer may write into any router buffer)"
             : dev.windows() ? "per transfer (memory windows)"
                             : "per transfer (a registration per sink: the device has no type 2 memory windows)");
  }

  // (Made before the workers, whose port queues hold its taps; gone
  // before the EAL.)
  auto capture = std::make_unique<Capture>(
      n, [&fabric](std::uint32_t i) { fabric.workers[i]->kick(); },
      [&region](std::uint32_t i) { return region.counters(i).loops.get(); });
  fabric.capture = capture.get();
  const std::uint64_t incarnation = sock::new_incarnation();
  std::vector<std::unique_ptr<Worker>> workers;
  for (std::uint32_t i = 0; i < n; ++i) {
    workers.push_back(std::make_unique<Worker>(static_cast<std::uint16_t>(i), setup, shared, fabric, region, incarnation));
    fabric.workers.push_back(workers.back().get());
  }
  for (auto& w : workers) {
    std::string err;
    if (!w->init(err)) {
      log_error("%s", err.c_str());
      return 1;
    }
  }
  // Every pool's memory registered with every RDMA device, once: router
  // buffers open to peers' RDMA writes (sinks of o2ib PUTs), mbuf pools
  // read by the device (payloads left in received frames, RDMA-written
  // from there).
  for (const auto& dev : fabric.verbs) {
    if (!dev) continue;
    std::string rerr;
    if (!register_pools(*dev, rerr)) {
      log_error("%s", rerr.c_str());
      return 1;
    }
    log_info("RDMA device %s: %zu memory regions registered", dev->name().c_str(), dev->payload_regions());
  }
  Control control(setup, cfg, shared, fabric, region);
  std::string err;
  if (!control.open(err)) {
    log_error("%s", err.c_str());
    return 1;
  }

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  unsigned lcore = 0, i = 0;
  RTE_LCORE_FOREACH_WORKER(lcore) rte_eal_remote_launch(worker_main, workers[i++].get(), lcore);
  for (const NiSetup& ni : setup.nis)
    log_info("NI %s%s%s%s", to_string(ni.nid).c_str(), ni.interface.empty() ? "" : " on ", ni.interface.c_str(),
             ni.port >= 0 ? " (DPDK port, lnetr's own TCP)" : "");
  log_info("forwarding with %u worker(s); routing %s; control socket %s", n, setup.routing ? "enabled" : "disabled",
           setup.control_socket.c_str());
  // Ready: every NI is up and the workers poll them.
  systemd::notify_ready("forwarding: " + std::to_string(setup.nis.size()) + " NI(s), " + std::to_string(n) +
                        " worker(s)");
  control.run();
  systemd::notify_stopping();
  rte_eal_mp_wait_lcore();
  drain_worker_logs();
  log_info("stopped");
  // The devices first: stopping one frees the frames it still holds, some
  // chained from router buffers, whose counts live in the workers'
  // message descriptors.
  for (auto& p : ports) p->stop();
  workers.clear();
  capture.reset();
  ports.clear();
  if (!setup.dumpcap_prefix.empty()) rte_pdump_uninit();
  const std::string runtime_dir = rte_eal_get_runtime_dir();
  rte_eal_cleanup();
  remove_dpdk_files(setup.dumpcap_prefix, runtime_dir);
  return 0;
}

}  // namespace
}  // namespace lnetr::dp

int main(int argc, char** argv) {
  CLI::App app{"lnetr-dataplane: the LNet router's forwarding process"};
  std::string config;
  std::string routing_hold;
  bool check = false;
  app.add_option("-c,--config", config, "configuration file (YAML)")->required();
  app.add_flag("--check", check, "validate the configuration and exit");
  app.add_option("--routing-hold", routing_hold,
                 "while this file exists at start, routing starts disabled whatever the configuration says "
                 "(the appliance's updates: its health check enables routing and removes the file once the new "
                 "version is healthy)");
  app.set_version_flag("--version", std::string("lnetr-dataplane ") + LNETR_VERSION);
  CLI11_PARSE(app, argc, argv);

  // Memory freed on the forwarding path (TCP send-queue chunks, released
  // as ACKs arrive) stays with the process.  Otherwise glibc hands the top
  // of a worker's heap back with madvise: a system call on the forwarding
  // path, and a TLB shootdown that interrupts every other worker of the
  // process (measured: 500 a second under 4 KiB writes, and two workers of
  // one router 20 to 40% dearer per message than two routers' workers).
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // (setting the above fixes this one too, else at 128 KiB)

  auto loaded = lnetr::config::load_config_file(config);
  if (!loaded) {
    for (const auto& e : loaded.error()) std::fprintf(stderr, "%s\n", e.to_string().c_str());
    return 2;
  }
  for (const auto& w : loaded->warnings) lnetr::dp::log_warn("%s", w.to_string().c_str());
  auto setup = lnetr::dp::make_setup(loaded->config);
  if (!setup) {
    for (const std::string& e : setup.error()) std::fprintf(stderr, "%s\n", e.c_str());
    return 2;
  }
  if (check) {
    std::printf("%s: OK\n", config.c_str());
    return 0;
  }
  lnetr::dp::Setup s = *setup;
  if (!routing_hold.empty() && s.routing && ::access(routing_hold.c_str(), F_OK) == 0) {
    s.routing = false;
    lnetr::dp::log_info("routing held disabled while %s exists (it is enabled once this version is healthy)",
                        routing_hold.c_str());
  }
  return lnetr::dp::run(s, loaded->config);
}
