#include "dataplane/worker.hpp"

#include <rte_errno.h>
#include <rte_lcore.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <algorithm>
#include <optional>
#include <string>
#include <thread>

#include "dataplane/log.hpp"
#include "dataplane/tcp/unmap_guard.hpp"
#include "lnd/o2iblnd/verbs.hpp"
#include "lnd/socklnd/socket.hpp"
#include "router/local_msgs.hpp"
#include "router/ping_info.hpp"

namespace lnetr::dp {
namespace {

constexpr unsigned kBurst = 32;
constexpr unsigned kCmBatch = 1;  // connection-manager events a turn takes (each may make a queue pair)
constexpr unsigned kIdleLoopsBeforeSleep = 256;
constexpr int kSleepMs = 100;
constexpr unsigned kEpollEvery = 64;  // turns between epoll polls when it holds no kernel socket
constexpr long kPortNapNs = 20000;  // idle naps of a worker serving DPDK ports
constexpr auto kTickPeriod = std::chrono::milliseconds(100);
constexpr std::size_t kMsgChunk = 256;
// Received bytes socklnd has not read yet, per connection on a DPDK port:
// the TCP receive window it advertises.
constexpr std::uint32_t kStreamReceiveBuffer = 2u << 20;

}  // namespace

Worker::Worker(std::uint16_t index, const Setup& setup, SharedState& shared, Fabric& fabric,
               const shm::Region& region, std::uint64_t incarnation)
    : index_(index),
      log_(std::make_unique<WorkerLog>(index, shared.counters[index].log_suppressed.v)),
      setup_(setup), shared_(shared), fabric_(fabric), incarnation_(incarnation),
      routes_(region, index), forwarder_(index, setup, shared, RouteTableView{}, *this),
      shm_me_(region.worker(index)) {
  register_worker_log(log_.get());
  forwarder_.attach_gateways(region.gateways());
  if (routes_.poll()) forwarder_.adopt(routes_.view());
}

// The worker's wake-up eventfd as an epoll handler: reading it is all.
class Worker::WakeHandler final : public sock::IoHandler {
 public:
  explicit WakeHandler(int fd) : fd_(fd) {}
  void on_io(std::uint32_t) override {
    std::uint64_t v;
    while (::read(fd_, &v, sizeof v) > 0) {
    }
  }

 private:
  int fd_;
};

// A verbs channel in the worker's epoll set: connection-manager events, or
// the completion channel that wakes a sleeping worker.
class Worker::VerbsHandler final : public sock::IoHandler {
 public:
  VerbsHandler(o2ib::VerbsTransport& t, bool cm) : t_(t), cm_(cm) {}
  void on_io(std::uint32_t) override {
    if (cm_) {
      t_.poll_cm(kCmBatch);
    } else {
      t_.on_wake();
    }
  }

 private:
  o2ib::VerbsTransport& t_;
  bool cm_;
};

// A connection request worker 0's listener took for a peer another worker
// owns, on its way there (the identifier already on the owner's channel).
struct O2ibHandoff {
  std::size_t ni = 0;
  rdma_cm_id* raw = nullptr;
  o2ib::ConnRequest req;
};

Worker::~Worker() {
  drain_worker_logs();
  unregister_worker_log(log_.get());
  node_.reset();
  acceptor_.reset();
  o2ib_.reset();
  for (std::uint32_t i = 0; i < verbs_.size(); ++i) unwatch_verbs(i);
  verbs_handlers_.clear();
  verbs_.clear();
  forwarder_.drop_frames();  // (they are the lanes' frames)
  lanes_.clear();
  for (rte_mempool* p : pool_)
    if (p) rte_mempool_free(p);
  for (const auto& more : more_pools_)
    for (rte_mempool* p : more) rte_mempool_free(p);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

bool Worker::init(std::string& err) {
  // The DPDK ports' queues this worker serves, each with its own stack.
  lanes_.resize(fabric_.ports.size());
  for (std::size_t i = 0; i < fabric_.ports.size(); ++i) {
    tcp::EthPort& port = *fabric_.ports[i];
    const PortSetup& ps = setup_.ports[i];
    const int queue = ps.queue_of(index_);
    if (queue < 0) continue;
    tcp::StackConfig sc;
    sc.mac = port.mac();
    sc.ip = ps.ip;
    sc.prefix_len = ps.prefix_len;
    sc.mld_reports = queue == 0;
    sc.vlan = ps.vlan;
    sc.mtu = ps.mtu;
    for (const NiSetup& n : setup_.nis)  // the port's NI's tos, as IP_TOS on a kernel socket
      // (Without the ECN bits, which Linux clears from IP_TOS on TCP sockets.)
      if (n.port == static_cast<int>(i) && n.tos >= 0) sc.tos = static_cast<std::uint8_t>(n.tos & 0xfc);
    auto lane = std::make_unique<Lane>(port, static_cast<std::uint16_t>(queue), sc);
    if (fabric_.capture) lane->rxtx.set_tap(&fabric_.capture->tap(index_));
    // Connections accepted on the port go through the acceptor as kernel
    // sockets' do (request and HELLO read there, then the owning Node).
    lane->transport = std::make_unique<SockTransport>(
        lane->stack, setup_.sock.accept == sock::AcceptMode::none ? 0 : setup_.sock.port,
        [this](std::unique_ptr<sock::Stream> st) {
          if (acceptor_) acceptor_->take(std::move(st));
        },
        kStreamReceiveBuffer);
    if (port.frames_budget() > 0) {
      lane->transport->set_frame_refs(&lane->rxtx);
      lane->stack.set_frame_refs(&lane->rxtx);
    }
    lanes_[i] = std::move(lane);
  }
  // socklnd serves the tcp NIs (an o2ib NI's address takes no TCP
  // connection: its interface may be an IPoIB one Linux's ksocklnd does
  // not listen on either).
  std::vector<sock::LocalNi> nis;
  for (const NiSetup& n : setup_.nis)
    if (!n.is_o2ib()) nis.push_back(sock_ni(n));
  node_ = std::make_unique<sock::Node>(setup_.sock, nis, incarnation_, poller_, forwarder_);
  if (!init_o2ib(err)) return false;

  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  wake_ = std::make_unique<WakeHandler>(wake_fd_);
  poller_.add(wake_fd_, wake_.get());
  own_fds_ = poller_.watched();  // (with the verbs channels, added above)

  for (std::size_t c = 0; c < kPoolClasses; ++c) {
    const std::uint32_t n = forwarder_.pools()[c].nbuffers;
    const std::uint32_t size = pool_capacity(static_cast<PoolClass>(c));
    if (size == 0) continue;  // tiny messages carry no payload: credits only
    const std::string name = "lnetr_" + std::string(kPoolNames[c]) + "_" + std::to_string(index_);
    pool_[c] = make_router_pool(name, static_cast<PoolClass>(c), n);
    if (!pool_[c]) {
      err = "cannot create the " + std::string(kPoolNames[c]) + " router buffer pool of CPT " +
            std::to_string(index_) + " (" + std::to_string(n) + " x " + std::to_string(size) +
            " bytes): " + rte_strerror(rte_errno);
      return false;
    }
  }

  // Worker 0 accepts kernel sockets' connections; every worker serving a
  // port queue, the connections its stacks accept.  A connection belongs to
  // its peer's owner: a kernel socket is handed to it through the rings,
  // while a port's connection already lives in its owner's stack, the
  // worker its peer's frames are steered to.
  const bool ports_here = std::any_of(lanes_.begin(), lanes_.end(), [](const auto& l) { return l != nullptr; });
  if (index_ == 0 || ports_here) {
    acceptor_ = std::make_unique<sock::Acceptor>(
        setup_.sock, nis, incarnation_, poller_, [this](sock::Accepted&& a) {
          const std::uint32_t owner = forwarder_.placement().of(sock::peer_nid_of(a), fabric_.n);
          if (owner == index_) return node_->adopt(std::move(a));
          if (on_port(a)) {
            // Only where a port has several queues, and the peer's NID is
            // not the address it connects from: its frames come here, its
            // messages are the owner's.
            ++conns_misplaced_;
            log_warn("worker %u: %s connected from %s, not its NID's address, through a port with several "
                     "queues: closed (a peer must connect from its NID's address there)",
                     index_, to_string(a.hello.src_nid).c_str(), sock::to_string(a.remote).c_str());
            return;  // a.stream closes
          }
          // Only into the ring's spare room: the rest is for messages,
          // whose posts must never fail.
          if (rte_ring_free_count(fabric_.ring(index_, owner)) <= fabric_.message_room) {
            log_warn("worker %u: CPT %u is not taking connections fast enough: closing one from %s",
                        index_, owner, to_string(a.hello.src_nid).c_str());
            return;  // a.stream closes
          }
          auto* moved = new sock::Accepted(std::move(a));
          if (!push(owner, {RingItem::Kind::accepted, moved})) delete moved;
        });
    if (index_ == 0 && !acceptor_->listen(err)) return false;
  }
  return true;
}

// socklnd's view of a tcp NI.
sock::LocalNi Worker::sock_ni(const NiSetup& n) {
  sock::Transport* t = nullptr;
  if (n.port >= 0) {
    // The port's NI: its stack where this worker polls the port; elsewhere
    // nothing (its peers are pinned to that worker, never connected from here).
    const auto& lane = lanes_[static_cast<std::size_t>(n.port)];
    t = lane ? static_cast<sock::Transport*>(lane->transport.get()) : &no_port_;
  }
  return {n.nid, t, n.tos, n.conns_per_peer, n.sock_timeout};
}

void Worker::add_ni(std::uint32_t slot, const NiSetup& ni, const Placement& placement, int listen_fd) {
  forwarder_.add_ni(slot, ni, placement);
  if (ni.is_o2ib()) {
    o2ib::LocalNi l;
    l.nid = ni.nid;
    l.transport = verbs_[slot].get();
    l.tunables = ni.o2ib;
    if (!o2ib_) {
      o2ib_ = std::make_unique<o2ib::Node>(setup_.o2ib, std::vector<o2ib::LocalNi>{l}, incarnation_ / 1000, forwarder_,
                                           &lnd::Clock::now, fabric_.n);
    } else if (!o2ib_->add_ni(l)) {
      log_error("worker %u: NI %s is in o2iblnd already", index_, to_string(ni.nid).c_str());  // (control checked)
    }
    log_info("worker %u: NI %s added", index_, to_string(ni.nid).c_str());
    return;
  }
  if (ni.port >= 0)
    if (const auto& lane = lanes_[static_cast<std::size_t>(ni.port)])  // (as at start: without the ECN bits)
      lane->stack.set_tos(ni.tos >= 0 ? static_cast<std::uint8_t>(ni.tos & 0xfc) : 0);
  const sock::LocalNi s = sock_ni(ni);
  node_->add_ni(s);
  if (acceptor_) acceptor_->add_ni(s, listen_fd);
  else if (listen_fd >= 0) ::close(listen_fd);
  log_info("worker %u: NI %s added", index_, to_string(ni.nid).c_str());
}

void Worker::del_ni(std::uint32_t slot, const Placement& placement) {
  const Nid nid = forwarder_.ni(slot).nid;
  const bool ib = forwarder_.ni(slot).is_o2ib();
  forwarder_.stop_ni(slot, placement);
  if (ib) {
    if (slot < verbs_.size() && verbs_[slot]) verbs_[slot]->unlisten();
    if (o2ib_) {
      o2ib_->del_ni(nid);
      o2ib_->reap();
    }
    forwarder_.forget_ni_peers(slot);
    return;
  }
  if (acceptor_) acceptor_->del_ni(nid);
  node_->del_ni(nid);
  node_->reap();
  forwarder_.forget_ni_peers(slot);
}

void Worker::tune_ni(const NiSetup& ni) {
  if (ni.is_o2ib()) {
    if (o2ib_) o2ib_->tune_ni(ni.nid, ni.o2ib.conns_per_peer, ni.o2ib.timeout);
    return;
  }
  node_->tune_ni(ni.nid, ni.conns_per_peer, ni.sock_timeout);
}

// This worker's transport on the device of each o2ib NI, and the engine
// over them; worker 0 listens on every o2ib NI (as it accepts kernel
// sockets' connections) and hands each request to its peer's owner.
bool Worker::init_o2ib(std::string& err) {
  verbs_.resize(kMaxNis);
  verbs_handlers_.resize(kMaxNis);
  std::vector<o2ib::LocalNi> nis;
  for (std::size_t i = 0; i < setup_.nis.size(); ++i) {
    const NiSetup& n = setup_.nis[i];
    if (!n.is_o2ib()) continue;
    auto t = std::make_unique<o2ib::VerbsTransport>(fabric_.verbs[i]);
    if (!t->init(err)) {
      err = "NI " + to_string(n.nid) + ": " + err;
      return false;
    }
    o2ib::LocalNi ni;
    ni.nid = n.nid;
    ni.transport = t.get();
    ni.tunables = n.o2ib;
    nis.push_back(ni);
    verbs_[i] = std::move(t);
  }
  if (nis.empty()) return true;
  // One incarnation for the router (Linux: microseconds at NI start).
  o2ib_ = std::make_unique<o2ib::Node>(setup_.o2ib, nis, incarnation_ / 1000, forwarder_, &lnd::Clock::now, fabric_.n);
  for (std::uint32_t i = 0; i < verbs_.size(); ++i) {
    if (!verbs_[i]) continue;
    if (!watch_verbs(i, err)) return false;
    if (index_ == 0) {
      err = listen_o2ib(i);
      if (!err.empty()) return false;
    }
  }
  return true;
}

// Slot `slot`'s transport's channels into the epoll set.
bool Worker::watch_verbs(std::uint32_t slot, std::string& err) {
  o2ib::VerbsTransport& t = *verbs_[slot];
  auto cm = std::make_unique<VerbsHandler>(t, true);
  auto comp = std::make_unique<VerbsHandler>(t, false);
  if (!poller_.add(t.cm_fd(), cm.get()) || !poller_.add(t.comp_fd(), comp.get())) {
    err = std::string("epoll: ") + std::strerror(errno);
    poller_.remove(t.cm_fd());
    return false;
  }
  verbs_handlers_[slot] = {std::move(cm), std::move(comp)};
  return true;
}

void Worker::unwatch_verbs(std::uint32_t slot) {
  if (slot >= verbs_.size() || !verbs_[slot] || !verbs_handlers_[slot][0]) return;
  poller_.remove(verbs_[slot]->cm_fd());
  poller_.remove(verbs_[slot]->comp_fd());
  verbs_handlers_[slot] = {};
}

// Worker 0: listen on o2ib NI `slot`'s address; "" or why not.
std::string Worker::listen_o2ib(std::uint32_t slot) {
  const NiSetup& n = forwarder_.ni(slot);
  std::string err;
  if (!verbs_[slot]->listen(n.nid.addr4(), setup_.o2ib.service,
                            [this, slot](o2ib::ConnRequest&& r) { take_o2ib_request(slot, std::move(r)); }, err))
    return "NI " + to_string(n.nid) + ": " + err;
  return {};
}

std::string Worker::open_transport(std::uint32_t slot, std::shared_ptr<o2ib::VerbsDevice> dev) {
  auto t = std::make_unique<o2ib::VerbsTransport>(std::move(dev));
  std::string err;
  if (!t->init(err)) return err;
  verbs_[slot] = std::move(t);
  if (!watch_verbs(slot, err)) {
    verbs_[slot].reset();
    return err;
  }
  own_fds_ += 2;  // (its own descriptors: they do not make every turn poll epoll)
  return {};
}

void Worker::retire_transport(std::uint32_t slot) {
  if (slot >= verbs_.size() || !verbs_[slot]) return;
  // Requests worker 0's listener handed over before it closed may still be
  // in worker 0's ring to us, their identifiers already on this
  // transport's channel: it stays until this worker has read the ring up
  // to where it ends now.
  const std::uint32_t upto = index_ == 0 ? 0 : fabric_.ring(0, index_)->prod.tail;
  retiring_.push_back({slot, upto});
  release_transports();
}

// Retiring transports the engine has let go of are freed (with the
// device's last reference, the device).
void Worker::release_transports() {
  if (o2ib_) o2ib_->reap();
  std::erase_if(retiring_, [this](const Retiring& r) {
    const std::uint32_t slot = r.slot;
    if (index_ != 0 && static_cast<std::int32_t>(fabric_.ring(0, index_)->cons.tail - r.ring_upto) < 0) return false;
    if (o2ib_ && !o2ib_->release_transport(verbs_[slot].get())) return false;
    unwatch_verbs(slot);
    retired_verbs_.push_back(verbs_[slot]->stats());
    verbs_[slot].reset();
    own_fds_ -= 2;
    log_info("worker %u: the RDMA transport of NI slot %u is closed", index_, slot);
    return true;
  });
}

// Worker 0: a request taken by the listener of NI `ni`.  Its peer's owner
// judges it (races and incarnations are its peer state).
void Worker::take_o2ib_request(std::size_t ni, o2ib::ConnRequest&& r) {
  const auto who = o2ib::requester_of(r.private_data());
  const std::uint32_t owner = who ? forwarder_.placement().of(*who, fabric_.n) : index_;
  if (owner == index_) return o2ib_->accept_request(std::move(r));
  o2ib::VerbsTransport* to = fabric_.workers[owner]->verbs_transport(ni);
  // Only into the ring's spare room: the rest is for messages.
  if (!to || rte_ring_free_count(fabric_.ring(index_, owner)) <= fabric_.message_room) {
    log_warn("worker %u: CPT %u is not taking connections fast enough: refusing one from %s", index_, owner,
             who ? to_string(*who).c_str() : "?");
    return o2ib_->refuse_request(std::move(r), o2ib::RejectReason::no_resources);
  }
  rdma_cm_id* raw = verbs_[ni]->release(r.id, *to);
  if (!raw) {
    log_warn("worker %u: cannot move a connection request to CPT %u: %s", index_, owner, std::strerror(errno));
    return o2ib_->refuse_request(std::move(r), o2ib::RejectReason::no_resources);
  }
  auto* h = new O2ibHandoff{ni, raw, std::move(r)};
  h->req.id = nullptr;
  if (!push(owner, {RingItem::Kind::o2ib_request, h})) {
    rdma_destroy_id(raw);  // (cannot happen: room was checked)
    delete h;
  }
}

o2ib::VerbsTransport* Worker::verbs_transport(std::size_t ni) const noexcept {
  return ni < verbs_.size() ? verbs_[ni].get() : nullptr;
}

std::vector<o2ib::VerbsStats> Worker::verbs_stats() const {
  std::vector<o2ib::VerbsStats> out(verbs_.size());
  for (std::size_t i = 0; i < verbs_.size(); ++i)
    if (verbs_[i]) out[i] = verbs_[i]->stats();
  // (And the transports of deleted NIs: the sums never go back.)
  out.insert(out.end(), retired_verbs_.begin(), retired_verbs_.end());
  return out;
}

unsigned Worker::poll_verbs() {
  unsigned n = 0;
  for (auto& t : verbs_)
    if (t) {
      n += t->poll_cq(kBurst);
      if (t->cm_backlog()) n += t->poll_cm(kCmBatch);  // a storm, taken one a turn
    }
  return n;
}

// Whether an accepted connection came in through a DPDK port (to one of
// the port NIs' addresses).
bool Worker::on_port(const sock::Accepted& a) const noexcept {
  for (std::uint32_t i = 0; i < kMaxNis; ++i) {
    const NiSetup& n = forwarder_.ni(i);
    if (forwarder_.ni_on(i) && n.port >= 0 && sock::IpAddr::of(n.nid) == a.local.ip) return true;
  }
  return false;
}

// ---- the loop ---------------------------------------------------------------------

int Worker::run() {
  // From here on this thread's lines are queued, never written (log.hpp).
  log_through(log_.get());
  log_info("worker %u running on lcore %u (CPT %u)", index_, rte_lcore_id(), index_);
  // A worker serving DPDK ports is a reader of their device memory: between
  // two loop iterations it is in none of their bursts (unmap_guard.hpp).
  std::optional<tcp::unmap_guard::Poller> device_reader;
  if (!lanes_.empty()) device_reader.emplace(index_);
  WorkerCounters& c = shared_.counters[index_];
  std::uint64_t tsc = rte_rdtsc();
  clock_.sync(lnd::Clock::now(), tsc);
  count_cpu_time();
  while (!shared_.stop.load(std::memory_order_relaxed)) {
    const unsigned work = iterate(clock_.at(tsc));
    c.loops.add();
    if (work) c.busy_loops.add();
    if (device_reader) device_reader->quiescent();
    sleep_if_idle(work);  // (an iteration with work never sleeps)
    const std::uint64_t now = rte_rdtsc();
    c.cycles.add(now - tsc);
    if (work) c.busy_cycles.add(now - tsc);
    tsc = now;
  }
  count_cpu_time();
  run_commands();  // what the control thread still asked (each command freed)
  node_->shutdown();
  node_->reap();
  if (o2ib_) {
    o2ib_->shutdown();
    o2ib_->reap();
  }
  return 0;
}

// One turn of the loop, sleeping aside: returns the work it found.  Kept a
// function of its own (not inlined) so that a profile shows the turns
// apart from the sleeps.
[[gnu::noinline]] unsigned Worker::iterate(lnd::Clock::time_point now) {
  node_->set_turn_time(now);
  if (routes_.poll()) forwarder_.adopt(routes_.view());  // a new route table
  // The epoll set: every turn while it holds kernel sockets (connections,
  // listeners); else only the worker's own descriptors are there (its
  // wake-up eventfd, verbs channels whose completions are polled
  // directly), and a system call every turn would cost a DPDK-only
  // worker a tenth of its time: every kEpollEvery turns.
  unsigned work = 0;
  if (poller_.watched() > own_fds_ || ++epoll_turn_ >= kEpollEvery) {
    epoll_turn_ = 0;
    work += static_cast<unsigned>(poller_.poll(0));
  }
  work += poll_ports(now);
  if (o2ib_) work += poll_verbs();
  // Gateway pings lnetr-control asked for (one load when there are none).
  const std::uint64_t pings = shm_me_.ping_requests.load(std::memory_order_acquire);
  if (pings != pings_seen_) {
    pings_seen_ = pings;
    work += forwarder_.send_pings();
  }
  work += drain_rings();
  work += forwarder_.flush_local();
  if (forwarder_.held() > 0) work += forwarder_.release_held();
  work += run_commands();
  if (page_wanted_.load(std::memory_order_relaxed) != page_seen_) work += fill_status_page();
  // Ticks queue keepalives and may fail sends onto other peers: before the
  // flush, so that nothing they queue waits out a sleep.
  if (now >= next_tick_) tick();
  work += static_cast<unsigned>(node_->flush());
  work += flush_ports();
  node_->reap();
  if (o2ib_) o2ib_->reap();
  if (acceptor_) acceptor_->reap();
  return work;
}

void Worker::tick() {
  const auto now = lnd::Clock::now();
  clock_.sync(now, rte_rdtsc());
  count_cpu_time();
  next_tick_ = now + kTickPeriod;
  node_->tick(now);
  {
    // What the kernel sockets copied, and what the kernel sent from router
    // buffers without a copy (MSG_ZEROCOPY), with the ports' counts.
    const sock::Stats& ks = node_->stats();
    WorkerCounters& c = shared_.counters[index_];
    c.bytes_copied.add(ks.bytes_copied - sock_copied_seen_);
    c.bytes_referenced.add(ks.bytes_zero_copy - sock_zero_copy_seen_);
    sock_copied_seen_ = ks.bytes_copied;
    sock_zero_copy_seen_ = ks.bytes_zero_copy;
    WorkerCounters::Table& t = c.table(PeerTable::socklnd);
    t.peers.set(node_->peer_count());
    t.refused.set(ks.peers_refused);
    t.freed.set(ks.peers_freed);
  }
  if (!retiring_.empty()) release_transports();
  if (o2ib_) {
    o2ib_->tick();
    // What o2iblnd copied (IMMEDIATE payloads, unregistered memory), with
    // the ports' counts.
    const std::uint64_t copied = o2ib_->stats().bytes_copied;
    shared_.counters[index_].bytes_copied.add(copied - o2ib_copied_seen_);
    o2ib_copied_seen_ = copied;
    WorkerCounters::Table& t = shared_.counters[index_].table(PeerTable::o2iblnd);
    t.peers.set(o2ib_->peer_count());
    t.refused.set(o2ib_->stats().peers_refused);
    t.freed.set(o2ib_->stats().peers_freed);
  }
  if (acceptor_) acceptor_->tick(now);
  for (auto& lane : lanes_)
    if (lane) lane->rxtx.release_sent();
  // Connections on an interface whose link went down are chosen last (a
  // peer that has connections to another of our NIs on the net is
  // reached through them meanwhile).
  for (std::uint32_t i = 0; i < kMaxNis; ++i)
    if (forwarder_.ni_on(i) && !forwarder_.ni(i).is_o2ib())
      node_->set_link(forwarder_.ni(i).nid, shared_.ni[i].link_up.load(std::memory_order_relaxed));
  forwarder_.tick();
}

// The thread's CPU time since the previous tick, into cpu_ns.
void Worker::count_cpu_time() {
  timespec t{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return;
  const auto ns = static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(t.tv_nsec);
  if (ns > cpu_ns_seen_) shared_.counters[index_].cpu_ns.add(ns - cpu_ns_seen_);
  cpu_ns_seen_ = ns;
}

// Adaptive polling: after a run of empty iterations, wait in epoll (with the
// eventfd producers write when they see us sleeping).  Busy mode never sleeps.
bool Worker::sleep_if_idle(unsigned work) {
  if (work) {
    idle_ = 0;
    return false;
  }
  if (setup_.busy_poll || ++idle_ < kIdleLoopsBeforeSleep) return false;
  if (!lanes_.empty() || forwarder_.held() > 0) {
    // A DPDK port cannot wake us (nor a device freeing frames chained from
    // our buffers): nap briefly instead of spinning, so that a core shared
    // with other work is given back while idle (poll: busy never naps).
    const timespec nap{0, kPortNapNs};
    nanosleep(&nap, nullptr);
    idle_ = kIdleLoopsBeforeSleep / 2;
    return true;
  }
  // Publish "sleeping" before re-checking the rings; pairs with the
  // producer's enqueue, fence, load in kick(), so that one of the two sees
  // the other (store-load ordering needs the seq_cst store here and the
  // fence there: the ring's enqueue is only a release).
  sleeping_.store(true, std::memory_order_seq_cst);
  bool pending = false;
  // RDMA completions wake us through the completion channels, armed now;
  // what completed before they were armed is taken first.
  for (auto& t : verbs_)
    if (t && (!t->arm() || t->poll_cq(kBurst) > 0)) pending = true;
  for (std::uint32_t from = 0; from < fabric_.n && !pending; ++from)
    if (from != index_ && rte_ring_count(fabric_.ring(from, index_)) > 0) pending = true;
  // Wait without dispatching: what wakes us is handled at the top of the
  // loop, after the worker has adopted any route snapshot published while
  // it slept.
  if (!pending && rte_ring_count(fabric_.commands[index_]) == 0 &&
      page_wanted_.load(std::memory_order_seq_cst) == page_seen_)
    poller_.wait(kSleepMs);
  sleeping_.store(false, std::memory_order_relaxed);
  idle_ = 0;
  return true;
}

// Frames in, to each lane's stack; then the readiness that produced, to
// socklnd (which reads, and queues replies and forwards).
unsigned Worker::poll_ports(lnd::Clock::time_point turn) {
  if (lanes_.empty()) return 0;
  const tcp::Time now = turn.time_since_epoch();
  unsigned work = 0;
  for (auto& lane : lanes_) {
    if (!lane) continue;
    work += lane->rxtx.poll(lane->stack, now);
    lane->stack.tick(now);
    work += static_cast<unsigned>(lane->transport->poll(now));
  }
  return work;
}

// ---- status -----------------------------------------------------------------------

unsigned Worker::fill_status_page() {
  const std::uint64_t wanted = page_wanted_.load(std::memory_order_acquire);
  std::unique_lock lock(page_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;  // a reader is copying it: next turn
  count_cpu_time();  // (the status reads it beside the cycles, which are counted every turn)
  page_.sock = node_->stats();
  if (acceptor_) page_.refused = acceptor_->refused();
  page_.lanes = lane_stats();
  page_.conns_misplaced = conns_misplaced_;
  page_.has_o2ib = o2ib_ != nullptr;
  if (o2ib_) {
    page_.ib = o2ib_->stats();
    page_.ib_connections = o2ib_->connections();
    page_.verbs = verbs_stats();
  }
  lock.unlock();
  page_seen_ = wanted;
  page_filled_.store(wanted, std::memory_order_release);
  return 1;
}

std::uint64_t Worker::request_status_page() noexcept {
  const std::uint64_t request = page_wanted_.fetch_add(1, std::memory_order_seq_cst) + 1;
  kick();
  return request;
}

bool Worker::read_status_page(std::uint64_t request, std::chrono::steady_clock::time_point deadline, StatusPage& out) {
  bool fresh = true;
  while (page_filled_.load(std::memory_order_acquire) < request) {
    if (std::chrono::steady_clock::now() >= deadline) {
      fresh = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::lock_guard lock(page_mu_);
  out = page_;
  return fresh;
}

std::vector<Worker::LaneStats> Worker::lane_stats() const {
  std::vector<LaneStats> out(lanes_.size());
  for (std::size_t i = 0; i < lanes_.size(); ++i) {
    if (!lanes_[i]) continue;
    out[i] = {true, lanes_[i]->rxtx.queue(), lanes_[i]->rxtx.stats(), lanes_[i]->stack.stats(), lanes_[i]->stack.conn_totals(),
              lanes_[i]->transport->stats(), lanes_[i]->stack.connections(), lanes_[i]->stack.half_open()};
  }
  return out;
}

// After socklnd's writes: what the stacks queued goes out; bytes copied on
// the way are counted.
unsigned Worker::flush_ports() {
  if (lanes_.empty()) return 0;
  unsigned work = 0;
  std::uint64_t copied = 0, referenced = 0, kept = 0;
  for (auto& lane : lanes_) {
    if (!lane) continue;
    work += lane->rxtx.flush();
    copied += lane->transport->stats().bytes_copied + lane->stack.stats().bytes_copied + lane->rxtx.stats().bytes_copied;
    referenced += lane->stack.stats().bytes_referenced;
    kept += lane->transport->stats().bytes_referenced;
  }
  WorkerCounters& c = shared_.counters[index_];
  c.bytes_copied.add(copied - copied_seen_);
  c.bytes_referenced.add(referenced - referenced_seen_);
  c.rx_bytes_referenced.add(kept - kept_seen_);
  copied_seen_ = copied;
  referenced_seen_ = referenced;
  kept_seen_ = kept;
  return work;
}

void Worker::kick() noexcept {
  // Order the caller's ring enqueue (a release store) before the load of
  // sleeping_: without a full fence x86 may satisfy the load first.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // One wake-up per sleep: the first producer to see it asleep clears the flag.
  if (sleeping_.load(std::memory_order_seq_cst) && sleeping_.exchange(false, std::memory_order_seq_cst)) {
    const std::uint64_t one = 1;
    (void)::write(wake_fd_, &one, sizeof one);
  }
}

bool Worker::push(std::uint32_t to, RingItem item) {
  if (rte_ring_enqueue_elem(fabric_.ring(index_, to), &item, sizeof item) != 0) return false;
  fabric_.workers[to]->kick();
  return true;
}

// ---- ForwarderPorts ------------------------------------------------------------

std::uint8_t* Worker::get_buffer(PoolClass c) {
  const auto k = static_cast<std::size_t>(c);
  void* buf = nullptr;
  // Pools added at run time first, the newest first (more_pools_).
  for (auto p = more_pools_[k].rbegin(); p != more_pools_[k].rend(); ++p)
    if (rte_mempool_get(*p, &buf) == 0) return static_cast<std::uint8_t*>(buf);
  if (rte_mempool_get(pool_[k], &buf) == 0) return static_cast<std::uint8_t*>(buf);
  return nullptr;  // credits say never
}

void Worker::put_buffer(PoolClass c, std::uint8_t* buf) {
  const auto k = static_cast<std::size_t>(c);
  // (With pools added, the buffer's own, from its object header.)
  rte_mempool_put(more_pools_[k].empty() ? pool_[k] : rte_mempool_from_obj(buf), buf);
}

rte_mempool* make_router_pool(const std::string& name, PoolClass c, std::uint32_t n) {
  return rte_mempool_create(name.c_str(), n, pool_capacity(c), 0, 0, nullptr, nullptr, nullptr, nullptr,
                            static_cast<int>(rte_socket_id()), RTE_MEMPOOL_F_SP_PUT | RTE_MEMPOOL_F_SC_GET);
}

bool register_pools(o2ib::VerbsDevice& dev, std::string& err) {
  struct Walk {
    o2ib::VerbsDevice* dev;
    std::string* err;
    bool ok = true;
  } w{&dev, &err};
  rte_mempool_walk(
      [](rte_mempool* mp, void* arg) {
        auto* walk = static_cast<Walk*>(arg);
        const std::string name = mp->name;
        const bool remote = name.rfind("lnetr_small_", 0) == 0 || name.rfind("lnetr_large_", 0) == 0;
        walk->ok = walk->ok && each_chunk(mp, [&](void* addr, std::size_t len) {
                     return walk->dev->register_payload(addr, len, remote, *walk->err);
                   });
      },
      &w);
  return w.ok;
}

bool each_chunk(rte_mempool* mp, const std::function<bool(void*, std::size_t)>& reg) {
  struct Walk {
    const std::function<bool(void*, std::size_t)>* reg;
    bool ok = true;
  } walk{&reg};
  rte_mempool_mem_iter(
      mp,
      [](rte_mempool*, void* arg, rte_mempool_memhdr* mh, unsigned) {
        auto* w = static_cast<Walk*>(arg);
        if (w->ok && !(*w->reg)(mh->addr, mh->len)) w->ok = false;
      },
      &walk);
  return walk.ok;
}

std::uint64_t Worker::buffer_iova(const std::uint8_t* buf) { return rte_mempool_virt2iova(buf); }

int Worker::send(const Nid& next_hop, lnd::Tx& tx) {
  if (lnd_is_o2ib(next_hop)) return o2ib_->send(next_hop, tx);
  return node_->send(next_hop, tx);
}

void Worker::resume(lnd::Rx& rx) {
  if (lnd_is_o2ib(rx.ni)) return o2ib_->resume(rx);
  node_->resume(rx);
}

bool Worker::post(std::uint32_t worker, const RingItem& item) {
  // A ring keeps room for every message homed at either end (accepted
  // connections use only what is left); the forwarder copes if it is full.
  return push(worker, item);
}

unsigned Worker::drain_rings() {
  unsigned n = 0;
  for (std::uint32_t from = 0; from < fabric_.n; ++from) {
    if (from == index_) continue;
    RingItem items[kBurst];
    const unsigned got = rte_ring_dequeue_burst_elem(fabric_.ring(from, index_), items, sizeof(RingItem), kBurst, nullptr);
    for (unsigned i = 0; i < got; ++i) {
      if (items[i].kind == RingItem::Kind::accepted) {
        auto* a = static_cast<sock::Accepted*>(items[i].ptr);
        node_->adopt(std::move(*a));
        delete a;
      } else if (items[i].kind == RingItem::Kind::o2ib_request) {
        auto* h = static_cast<O2ibHandoff*>(items[i].ptr);
        // (Its transport stays until this ring has passed it: retire_transport.)
        if (!o2ib_ || h->ni >= verbs_.size() || !verbs_[h->ni]) {
          rdma_destroy_id(h->raw);  // (cannot happen: control orders the steps)
          delete h;
          continue;
        }
        h->req.id = verbs_[h->ni]->adopt(h->raw);
        h->req.via = verbs_[h->ni].get();
        o2ib_->accept_request(std::move(h->req));
        delete h;
      } else {
        forwarder_.on_ring(items[i]);
      }
    }
    n += got;
  }
  return n;
}

unsigned Worker::run_commands() {
  void* p = nullptr;
  unsigned n = 0;
  while (rte_ring_dequeue(fabric_.commands[index_], &p) == 0) {
    auto* c = static_cast<Command*>(p);
    c->fn(*this);
    // Release: the command's results are visible to the control thread
    // once it sees done (its acquire load).
    c->done.store(true, std::memory_order_release);
    c->release();
    ++n;
  }
  return n;
}

}  // namespace lnetr::dp
