#include "cli/peer/dpdk_link.hpp"

#include <rte_eal.h>
#include <rte_errno.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <cstdio>
#include <ctime>

#include "dataplane/tcp/log.hpp"
#include "dataplane/tcp/port.hpp"
#include "dataplane/tcp/unmap_guard.hpp"

namespace lnetr::peer {

namespace {

constexpr std::uint32_t kMbufs = 4096;  // the queue's RX and TX rings and frames in flight
constexpr std::uint32_t kChainFrames = 64;  // net_vhost: see open()
constexpr std::uint32_t kReceiveBuffer = 4u << 20;  // per connection, as a kernel socket's
constexpr unsigned kIdleTurns = 256;  // empty turns before a nap
constexpr long kNapNs = 20000;

// "0@(2,3)": the EAL's one lcore on `core`, or on every core the process
// may run on.
std::string lcores(const DpdkOptions& o) {
  if (o.core) return "0@" + std::to_string(*o.core);
  cpu_set_t set;
  CPU_ZERO(&set);
  std::string cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
  return cpus.empty() ? "0@0" : "0@(" + cpus + ")";
}

// The port's own lines (what opening it found), as ours.
void log_line(const char* level, const char* fmt, std::va_list ap) noexcept {
  char msg[512];
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  std::fprintf(stderr, "lnetr-peer: %s: %s\n", level, msg);
}

}  // namespace

std::unique_ptr<DpdkLink> DpdkLink::open(const DpdkOptions& o, const IpAddr& ip, std::uint16_t port,
                                         dp::SockTransport::Accept accept, std::string& err) {
  std::unique_ptr<DpdkLink> l(new DpdkLink);
  l->opts_ = o;
  tcp::set_log(&log_line);
  std::vector<std::string> args = {"lnetr-peer", "--lcores=" + lcores(o), "--main-lcore=0", "--no-huge",
                                   "--no-shconf", "-m", "256", "--log-level=lib.eal:warning",
                                   "--file-prefix=lnetr-peer" + std::to_string(getpid())};
  if (tcp::is_pci_address(o.device)) {
    const std::size_t comma = o.device.find(',');
    args.push_back("-a");
    args.push_back(tcp::device_name(o.device) + o.device.substr(std::min(comma, o.device.size())));
  } else {
    args.push_back("--no-pci");
    args.push_back("--vdev=" + o.device);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  if (rte_eal_init(static_cast<int>(argv.size()), argv.data()) < 0) {
    err = std::string("DPDK EAL initialisation failed: ") + rte_strerror(rte_errno);
    return nullptr;
  }
  l->eal_ = true;
  // The device may unmap its memory on the EAL's interrupt thread (memif,
  // when the other side goes): not while this thread is in a burst.
  if (!tcp::unmap_guard::install(1, err)) return nullptr;
  l->reader_ = std::make_unique<tcp::unmap_guard::Poller>(0);

  tcp::PortConfig ps;
  ps.name = "peer";
  ps.device = o.device;
  ps.ip = ip;
  ps.prefix_len = o.prefix_len;
  ps.mtu = o.mtu;
  // Payloads are copied into our sinks: no received frame is kept (kept 0
  // below).  On net_vhost (the far side of a port of lnetr's on
  // net_virtio_user, a NIC's stand-in) frames are chained, and with the
  // device's tso=1 (host TSO offered to the virtio side, which then sends
  // 64 KiB units) sent in such units too, which the vhost library hands
  // to the virtio side whole, for its large receive offload: a virtio side
  // that takes them (lnetr's port with lro on) is asked for with tso=1.
  const bool vhost = tcp::device_name(o.device).rfind("net_vhost", 0) == 0;
  ps.zero_copy = vhost;
  if (vhost) ps.tso = o.device.find(",tso=1") != std::string::npos;
  // On net_vhost, a received unit of up to 64 KiB comes in a chain of
  // buffers: with a budget of kept frames the port hands the chain over
  // in place (the transport keeps none: it copies into our sinks) instead
  // of copying it into one buffer first.
  l->port_ = tcp::EthPort::open(ps, kMbufs, vhost ? kChainFrames : 0, err);
  if (!l->port_) return nullptr;
  l->queue_ = std::make_unique<tcp::PortQueue>(*l->port_, 0);
  tcp::StackConfig sc;
  sc.mac = l->port_->mac();
  sc.ip = ip;
  sc.prefix_len = o.prefix_len;
  sc.mtu = o.mtu;
  l->stack_ = std::make_unique<tcp::Stack>(sc, *l->queue_);
  l->transport_ = std::make_unique<dp::SockTransport>(*l->stack_, port, std::move(accept), kReceiveBuffer);
  return l;
}

DpdkLink::~DpdkLink() {
  transport_.reset();
  stack_.reset();
  if (port_) port_->stop();  // it frees what it still holds
  queue_.reset();
  port_.reset();
  reader_.reset();
  if (eal_) {
    // (The EAL leaves its runtime directory, one per run.)
    const std::string runtime_dir = rte_eal_get_runtime_dir();
    rte_eal_cleanup();
    std::error_code ec;
    std::filesystem::remove_all(runtime_dir, ec);
  }
}

sock::Transport& DpdkLink::transport() noexcept { return *transport_; }

unsigned DpdkLink::poll() {
  reader_->quiescent();  // between two bursts
  const tcp::Time now = std::chrono::steady_clock::now().time_since_epoch();
  unsigned work = queue_->poll(*stack_, now);
  stack_->tick(now);
  work += static_cast<unsigned>(transport_->poll(now));
  return work;
}

unsigned DpdkLink::flush() { return queue_->flush(); }

void DpdkLink::rest(unsigned work) {
  if (work) {
    idle_turns_ = 0;
    return;
  }
  if (opts_.busy || ++idle_turns_ < kIdleTurns) return;
  queue_->release_sent();
  const timespec nap{0, kNapNs};
  nanosleep(&nap, nullptr);
  idle_turns_ = kIdleTurns / 2;
}

std::size_t DpdkLink::connections() const noexcept { return transport_->links(); }

DpdkCounters DpdkLink::counters() const {
  DpdkCounters c;
  const tcp::PortStats& p = queue_->stats();
  c.rx_frames = p.rx_frames;
  c.tx_frames = p.tx_frames;
  c.tx_dropped = p.tx_dropped;
  c.bytes_copied = p.bytes_copied + stack_->stats().bytes_copied + stack_->stats().chain_bytes_copied +
                   transport_->stats().bytes_copied;
  c.retransmits = stack_->conn_totals().retransmits;
  c.tso_frames = stack_->stats().tso_frames;
  c.tso_segments = stack_->stats().tso_segments;
  c.rx_lro = p.rx_lro;
  return c;
}

}  // namespace lnetr::peer
