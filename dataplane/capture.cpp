#include "dataplane/capture.hpp"

#include <fcntl.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_pcapng.h>
#include <rte_ring.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "dataplane/log.hpp"

namespace lnetr::dp {

namespace {

constexpr unsigned kPoolMbufs = 8191;   // copies' segments in flight between the workers and the file, in all
constexpr unsigned kRingSize = 2048;    // per worker
constexpr unsigned kWriteBurst = 32;
// The pcapng blocks the control thread writes, one whole frame each in one
// segment (DPDK 22.11's rte_pcapng_copy gives a block of several segments
// the length of its first): the largest an mbuf holds, frames cut to it
// (a 64 KiB TSO frame loses its last bytes; the block says how long it was).
constexpr unsigned kBlocks = 2 * kWriteBurst;
constexpr std::uint16_t kBlockRoom = UINT16_MAX;
constexpr std::uint32_t kMaxSnap = kBlockRoom - RTE_PKTMBUF_HEADROOM - 64;  // (the block's header and options)

// What a worker notes beside its copy (the mbuf's private area).
struct CopyMeta {
  std::uint64_t tsc;
  std::uint16_t port;
  std::uint16_t queue;
  bool sent;
};

CopyMeta& meta(rte_mbuf* m) { return *static_cast<CopyMeta*>(rte_mbuf_to_priv(m)); }

constexpr auto kQuiet = std::chrono::seconds(1);  // the longest stop() waits for the workers

// The filter, packed into one word the workers read as they copy: the
// IPv4 address (its wire bytes) in the low 32 bits, whether there is one,
// the ethdev port id, whether there is one; whether there is an IPv6 host
// (Capture::host6_ holds it).
constexpr std::uint64_t kHasHost = 1ull << 32;
constexpr std::uint64_t kHasPort = 1ull << 33;
constexpr std::uint64_t kHasHost6 = 1ull << 34;
constexpr int kPortShift = 40;

std::uint64_t pack(const Capture::Filter& f) {
  std::uint64_t w = 0;
  if (f.host && f.host->is_v4()) {
    std::uint32_t wire = 0;
    std::memcpy(&wire, f.host->bytes.data(), 4);
    w |= kHasHost | wire;
  } else if (f.host) {
    w |= kHasHost6;
  }
  if (f.port >= 0) w |= kHasPort | (static_cast<std::uint64_t>(f.port & 0xffff) << kPortShift);
  return w;
}

// The EtherType of `m` and where its network header starts (behind one
// 802.1Q tag at most); false if it is too short.
bool network_header(const rte_mbuf* m, std::uint16_t& type, std::uint32_t& off) {
  std::uint8_t b[14];
  const auto* eth = static_cast<const std::uint8_t*>(rte_pktmbuf_read(m, 0, 14, b));
  if (!eth) return false;
  off = 14;
  type = static_cast<std::uint16_t>(eth[12] << 8 | eth[13]);
  if (type == 0x8100) {
    const auto* tag = static_cast<const std::uint8_t*>(rte_pktmbuf_read(m, 16, 2, b));
    if (!tag) return false;
    type = static_cast<std::uint16_t>(tag[0] << 8 | tag[1]);
    off = 18;
  }
  return true;
}

// Whether an IPv6 frame has `host` (its bytes as two words) as its source
// or destination.
bool has_host6(const rte_mbuf* m, const std::array<std::atomic<std::uint64_t>, 2>& host) {
  std::uint16_t type = 0;
  std::uint32_t off = 0;
  if (!network_header(m, type, off) || type != 0x86dd) return false;
  std::uint8_t b[32];
  const auto* a = static_cast<const std::uint8_t*>(rte_pktmbuf_read(m, off + 8, 32, b));
  if (!a) return false;
  std::uint64_t h[2] = {host[0].load(std::memory_order_relaxed), host[1].load(std::memory_order_relaxed)};
  return std::memcmp(a, h, 16) == 0 || std::memcmp(a + 16, h, 16) == 0;
}

// Whether an IPv4 or ARP frame has `host` as one of its addresses (behind
// one 802.1Q tag at most).
bool has_host(const rte_mbuf* m, std::uint32_t host) {
  std::uint8_t b[4];
  std::uint16_t type = 0;
  std::uint32_t off = 0;
  if (!network_header(m, type, off)) return false;
  auto addr_at = [&](std::uint32_t at, std::uint32_t& out) {
    const void* p = rte_pktmbuf_read(m, at, 4, b);
    if (!p) return false;
    std::memcpy(&out, p, 4);
    return true;
  };
  std::uint32_t a = 0, z = 0;
  if (type == 0x0800) return addr_at(off + 12, a) && addr_at(off + 16, z) && (a == host || z == host);
  if (type == 0x0806) return addr_at(off + 14, a) && addr_at(off + 24, z) && (a == host || z == host);
  return false;
}

}  // namespace

// A worker's tap: the frames of its queues that match are copied (in
// segments of the copy pool, with the port, queue, direction and TSC
// beside them) and passed to the control thread on its ring.  The pcapng
// block is made there: rte_pcapng_copy keeps a clock of its own that it
// updates without a lock, so only one thread may call it.
class Capture::Tap final : public tcp::FrameTap {
 public:
  Tap(const std::atomic<std::uint64_t>& filter, const std::array<std::atomic<std::uint64_t>, 2>& host6)
      : filter_(filter), host6_(host6) {}
  ~Tap() {
    if (ring_) rte_ring_free(ring_);
  }
  void frames(std::uint16_t port, std::uint16_t queue, rte_mbuf* const* m, unsigned n, bool sent) noexcept override {
    const std::uint64_t f = filter_.load(std::memory_order_relaxed);
    if ((f & kHasPort) != 0 && (f >> kPortShift & 0xffff) != port) return;
    const std::uint64_t now = rte_get_tsc_cycles();
    for (unsigned i = 0; i < n; ++i) {
      if ((f & kHasHost) != 0 && !has_host(m[i], static_cast<std::uint32_t>(f))) continue;
      if ((f & kHasHost6) != 0 && !has_host6(m[i], host6_)) continue;
      rte_mbuf* c = rte_pktmbuf_copy(m[i], pool_, 0, UINT32_MAX);
      if (c) {
        meta(c) = {now, port, queue, sent};
        if (rte_ring_sp_enqueue(ring_, c) == 0) continue;
        rte_pktmbuf_free(c);
      }
      dropped.fetch_add(1, std::memory_order_relaxed);
    }
  }
  void set(bool on) noexcept { on_.store(on, std::memory_order_release); }

  const std::atomic<std::uint64_t>& filter_;
  const std::array<std::atomic<std::uint64_t>, 2>& host6_;
  rte_mempool* pool_ = nullptr;
  rte_ring* ring_ = nullptr;
  std::atomic<std::uint64_t> dropped{0};  // written by the worker only
};

Capture::Capture(std::uint32_t workers, std::function<void(std::uint32_t)> kick,
                 std::function<std::uint64_t(std::uint32_t)> loops)
    : kick_(std::move(kick)), loops_(std::move(loops)) {
  for (std::uint32_t i = 0; i < workers; ++i) taps_.push_back(std::make_unique<Tap>(filter_, host6_));
}

Capture::~Capture() {
  if (file_) rte_pcapng_close(file_);  // (Control stops a capture before the workers go)
  taps_.clear();  // (their rings; what is left in them goes with the pool)
  if (pool_) rte_mempool_free(pool_);
  if (blocks_) rte_mempool_free(blocks_);
}

tcp::FrameTap& Capture::tap(std::uint32_t worker) noexcept { return *taps_[worker]; }

bool Capture::make_pool(std::string& err) {
  if (pool_) return true;
  rte_mempool* pool = rte_pktmbuf_pool_create("lnetr_capture", kPoolMbufs, 256, sizeof(CopyMeta),
                                              RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  rte_mempool* blocks = pool ? rte_pktmbuf_pool_create("lnetr_capture_blocks", kBlocks, 0, 0, kBlockRoom, SOCKET_ID_ANY)
                             : nullptr;
  if (!blocks) {
    err = std::string("no memory for the capture's buffers: ") + rte_strerror(rte_errno);
    if (pool) rte_mempool_free(pool);
    return false;
  }
  for (std::size_t i = 0; i < taps_.size(); ++i) {
    const std::string name = "lnetr_capture_" + std::to_string(i);
    taps_[i]->ring_ = rte_ring_create(name.c_str(), kRingSize, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (!taps_[i]->ring_) {
      err = "cannot create ring " + name + ": " + rte_strerror(rte_errno);
      for (auto& t : taps_) {
        if (t->ring_) rte_ring_free(t->ring_);
        t->ring_ = nullptr;
      }
      rte_mempool_free(pool);
      rte_mempool_free(blocks);
      return false;
    }
    taps_[i]->pool_ = pool;
  }
  pool_ = pool;
  blocks_ = blocks;
  return true;
}

bool Capture::start(int fd, Filter filter, std::uint64_t count, std::string& err) {
  if (running()) {
    err = "a capture is running already (capture stop ends it)";
    if (fd >= 0) ::close(fd);
    return false;
  }
  struct stat st{};
  const int mode = fd >= 0 ? ::fcntl(fd, F_GETFL) : -1;
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || mode < 0 || (mode & O_ACCMODE) == O_RDONLY) {
    err = "the capture file must be a regular file open for writing";
    if (fd >= 0) ::close(fd);
    return false;
  }
  if (!make_pool(err)) {
    ::close(fd);
    return false;
  }
  // The file is emptied only now that it is taken (lnetrctl opens it
  // without truncating, so that a refused start leaves it as it was).
  if (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0) {
    err = std::string("cannot write the capture file: ") + std::strerror(errno);
    ::close(fd);
    return false;
  }
  utsname u{};
  ::uname(&u);
  const std::string os = std::string(u.sysname) + " " + u.release;
  file_ = rte_pcapng_fdopen(fd, os.c_str(), nullptr, "lnetr-dataplane " LNETR_VERSION, nullptr);
  if (!file_) {
    err = std::string("cannot write the capture file: ") + rte_strerror(rte_errno);
    ::close(fd);
    return false;
  }
  take_rings(kRingSize, false);  // (copies a worker made after the last capture's end)
  filter_shown_ = std::move(filter);
  if (filter_shown_.host) {
    std::uint64_t h[2];
    std::memcpy(h, filter_shown_.host->bytes.data(), 16);
    host6_[0].store(h[0], std::memory_order_relaxed);
    host6_[1].store(h[1], std::memory_order_relaxed);
  }
  filter_.store(pack(filter_shown_), std::memory_order_relaxed);
  count_ = count;
  frames_ = bytes_ = write_dropped_ = 0;
  dropped_base_ = dropped_total();
  stopped_.reset();
  for (auto& t : taps_) t->set(true);
  log_info("capture started: %s, %s%s",
           filter_shown_.port_name.empty() ? "every port" : ("port " + filter_shown_.port_name).c_str(),
           filter_shown_.host ? ("frames of " + filter_shown_.host_name).c_str() : "every frame",
           count ? (", " + std::to_string(count) + " at most").c_str() : "");
  return true;
}

std::uint64_t Capture::dropped_total() const noexcept {
  std::uint64_t d = 0;
  for (const auto& t : taps_) d += t->dropped.load(std::memory_order_relaxed);
  return d;
}

void Capture::drain() {
  // At most a ring's worth from each worker a call: the control thread
  // has its other work, and workers that copy faster than the file takes
  // them lose frames to their full rings (counted), not the thread.
  take_rings(kRingSize, true);
}

void Capture::take_rings(unsigned per_ring, bool to_file) {
  for (auto& t : taps_) {
    for (unsigned taken = 0; taken < per_ring;) {
      rte_mbuf* m[kWriteBurst];
      const unsigned got = rte_ring_sc_dequeue_burst(t->ring_, reinterpret_cast<void**>(m), kWriteBurst, nullptr);
      if (got == 0) break;
      taken += got;
      if (to_file && running()) write(m, got);  // (which may end the capture: the rest is thrown away)
      rte_pktmbuf_free_bulk(m, got);
    }
  }
}

void Capture::write(rte_mbuf* const* copies, unsigned n) {
  unsigned take = n;
  if (count_ != 0 && frames_ + take > count_) take = static_cast<unsigned>(count_ - frames_);  // (the rest: past it)
  rte_mbuf* blocks[kWriteBurst];
  unsigned k = 0;
  std::uint64_t want = 0;
  for (unsigned i = 0; i < take; ++i) {
    const CopyMeta& c = meta(copies[i]);
    const std::uint32_t len = std::min(rte_pktmbuf_pkt_len(copies[i]), kMaxSnap);
    rte_mbuf* b = rte_pcapng_copy(c.port, c.queue, copies[i], blocks_, len, c.tsc,
                                  c.sent ? RTE_PCAPNG_DIRECTION_OUT : RTE_PCAPNG_DIRECTION_IN);
    if (!b) {
      ++write_dropped_;
      continue;
    }
    want += rte_pktmbuf_pkt_len(b);
    blocks[k++] = b;
  }
  if (k == 0) return;
  const ssize_t w = rte_pcapng_write_packets(file_, blocks, static_cast<std::uint16_t>(k));
  const int e = errno;
  rte_pktmbuf_free_bulk(blocks, k);
  if (w < 0 || static_cast<std::uint64_t>(w) != want) {
    // (A short write leaves a torn block: nothing after it would be read.)
    write_dropped_ += k;
    end(w < 0 ? std::string("the capture file refused a write: ") + std::strerror(e)
              : std::string("the capture file took a write only in part (is the disk full?)"));
    return;
  }
  frames_ += k;
  bytes_ += want;
  if (count_ != 0 && frames_ >= count_) end("the count was reached");
}

void Capture::stop(bool workers_running) {
  if (running()) end("", workers_running);
}

void Capture::end(const std::string& why, bool workers_running) {
  // The workers stop copying; once each has gone round its loop (woken if
  // it sleeps) none is inside frames(), and the rings hold all there is.
  // (The fence: the taps' stores before the counters' loads.)
  for (auto& t : taps_) t->set(false);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!workers_running) stopping_ = true;
  if (!stopping_) {
    std::vector<std::uint64_t> seen;
    for (std::uint32_t i = 0; i < taps_.size(); ++i) seen.push_back(loops_(i));
    const auto deadline = std::chrono::steady_clock::now() + kQuiet;
    for (std::uint32_t i = 0; i < taps_.size(); ++i) {
      while (loops_(i) == seen[i] && std::chrono::steady_clock::now() < deadline) {
        kick_(i);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }
  // What they copied, all of it (up to the count, which ends it itself;
  // none after the file failed).  A ring holds kRingSize at most.
  take_rings(kRingSize, why.empty());
  if (!file_) return;
  rte_pcapng_close(file_);  // (closes the descriptor)
  file_ = nullptr;
  if (!why.empty()) stopped_ = why;
  log_info("capture ended%s%s: %llu frames, %llu bytes written, %llu dropped", why.empty() ? "" : ": ", why.c_str(),
           static_cast<unsigned long long>(frames_), static_cast<unsigned long long>(bytes_),
           static_cast<unsigned long long>(dropped()));
}

std::uint64_t Capture::dropped() const noexcept {
  // (The taps' counts stop moving once it ended: they copy nothing then.)
  return dropped_total() - dropped_base_ + write_dropped_;
}

status::CaptureState Capture::state() const {
  status::CaptureState s;
  s.state = running() ? "running" : "off";
  if (!filter_shown_.port_name.empty()) s.port = filter_shown_.port_name;
  if (filter_shown_.host) s.host = filter_shown_.host_name;
  s.count = count_;
  s.frames = frames_;
  s.bytes = bytes_;
  s.dropped = dropped();
  s.stopped = stopped_;
  return s;
}

}  // namespace lnetr::dp
