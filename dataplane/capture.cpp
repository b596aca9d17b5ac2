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

constexpr unsigned kPoolMbufs = 8191;   // copies in flight between the workers and the file, in all
constexpr unsigned kRingSize = 2048;    // per worker
constexpr unsigned kWriteBurst = 32;
constexpr auto kQuiet = std::chrono::seconds(1);  // the longest stop() waits for the workers

// The filter, packed into one word the workers read as they copy: the
// IPv4 address (its wire bytes) in the low 32 bits, whether there is one,
// the ethdev port id, whether there is one.
constexpr std::uint64_t kHasHost = 1ull << 32;
constexpr std::uint64_t kHasPort = 1ull << 33;
constexpr int kPortShift = 40;

std::uint64_t pack(const Capture::Filter& f) {
  std::uint64_t w = 0;
  if (f.host) w |= kHasHost | *f.host;
  if (f.port >= 0) w |= kHasPort | (static_cast<std::uint64_t>(f.port & 0xffff) << kPortShift);
  return w;
}

// Whether an IPv4 or ARP frame has `host` as one of its addresses (behind
// one 802.1Q tag at most).
bool has_host(const rte_mbuf* m, std::uint32_t host) {
  std::uint8_t b[28];
  const auto* eth = static_cast<const std::uint8_t*>(rte_pktmbuf_read(m, 0, 14, b));
  if (!eth) return false;
  std::uint32_t off = 14;
  std::uint16_t type = static_cast<std::uint16_t>(eth[12] << 8 | eth[13]);
  if (type == 0x8100) {
    const auto* tag = static_cast<const std::uint8_t*>(rte_pktmbuf_read(m, 16, 2, b));
    if (!tag) return false;
    type = static_cast<std::uint16_t>(tag[0] << 8 | tag[1]);
    off = 18;
  }
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

// A worker's tap: the frames of its queues that match are copied and
// passed to the control thread on its ring.
class Capture::Tap final : public tcp::FrameTap {
 public:
  Tap(const std::atomic<std::uint64_t>& filter) : filter_(filter) {}
  ~Tap() {
    if (ring_) rte_ring_free(ring_);
  }
  void frames(std::uint16_t port, std::uint16_t queue, rte_mbuf* const* m, unsigned n, bool sent) noexcept override {
    const std::uint64_t f = filter_.load(std::memory_order_relaxed);
    if ((f & kHasPort) != 0 && (f >> kPortShift & 0xffff) != port) return;
    const std::uint64_t now = rte_get_tsc_cycles();
    for (unsigned i = 0; i < n; ++i) {
      if ((f & kHasHost) != 0 && !has_host(m[i], static_cast<std::uint32_t>(f))) continue;
      rte_mbuf* c = rte_pcapng_copy(port, queue, m[i], pool_, UINT32_MAX, now,
                                    sent ? RTE_PCAPNG_DIRECTION_OUT : RTE_PCAPNG_DIRECTION_IN);
      if (!c) {
        dropped.fetch_add(1, std::memory_order_relaxed);
      } else if (rte_ring_sp_enqueue(ring_, c) != 0) {
        rte_pktmbuf_free(c);
        dropped.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  void set(bool on) noexcept { on_.store(on, std::memory_order_release); }

  const std::atomic<std::uint64_t>& filter_;
  rte_mempool* pool_ = nullptr;
  rte_ring* ring_ = nullptr;
  std::atomic<std::uint64_t> dropped{0};  // written by the worker only
};

Capture::Capture(std::uint32_t workers, std::function<void(std::uint32_t)> kick,
                 std::function<std::uint64_t(std::uint32_t)> loops)
    : kick_(std::move(kick)), loops_(std::move(loops)) {
  for (std::uint32_t i = 0; i < workers; ++i) taps_.push_back(std::make_unique<Tap>(filter_));
}

Capture::~Capture() {
  if (file_) rte_pcapng_close(file_);  // (Control stops a capture before the workers go)
  taps_.clear();
  if (pool_) rte_mempool_free(pool_);
}

tcp::FrameTap& Capture::tap(std::uint32_t worker) noexcept { return *taps_[worker]; }

bool Capture::make_pool(std::string& err) {
  if (pool_) return true;
  rte_mempool* pool = rte_pktmbuf_pool_create("lnetr_capture", kPoolMbufs, 256, 0,
                                              static_cast<std::uint16_t>(rte_pcapng_mbuf_size(RTE_MBUF_DEFAULT_DATAROOM)),
                                              SOCKET_ID_ANY);
  if (!pool) {
    err = std::string("no memory for the capture's buffers: ") + rte_strerror(rte_errno);
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
      return false;
    }
    taps_[i]->pool_ = pool;
  }
  pool_ = pool;
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
  } else if (make_pool(err)) {
    utsname u{};
    ::uname(&u);
    const std::string os = std::string(u.sysname) + " " + u.release;
    file_ = rte_pcapng_fdopen(fd, os.c_str(), nullptr, "lnetr-dataplane " LNETR_VERSION, nullptr);
    if (!file_) err = std::string("cannot write the capture file: ") + rte_strerror(rte_errno);
  }
  if (!file_) {
    if (fd >= 0) ::close(fd);
    return false;
  }
  filter_shown_ = std::move(filter);
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
  if (!running()) return;
  for (auto& t : taps_) {
    rte_mbuf* m[kWriteBurst];
    unsigned got;
    while (running() && (got = rte_ring_sc_dequeue_burst(t->ring_, reinterpret_cast<void**>(m), kWriteBurst, nullptr)) > 0) {
      unsigned take = got;
      if (count_ != 0 && frames_ + take > count_) take = static_cast<unsigned>(count_ - frames_);
      if (take > 0) {
        const ssize_t w = rte_pcapng_write_packets(file_, m, static_cast<std::uint16_t>(take));
        if (w < 0) {
          const int e = errno;
          write_dropped_ += take;
          rte_pktmbuf_free_bulk(m, got);
          end(std::string("the capture file refused a write: ") + std::strerror(e));
          return;
        }
        frames_ += take;
        bytes_ += static_cast<std::uint64_t>(w);
      }
      rte_pktmbuf_free_bulk(m, got);  // (those past the count too)
      if (count_ != 0 && frames_ >= count_) end("the count was reached");
    }
  }
}

void Capture::stop() {
  if (running()) end("");
}

void Capture::end(const std::string& why) {
  // The workers stop copying; once each has gone round its loop (woken if
  // it sleeps) none is inside frames(), and the rings hold all there is.
  for (auto& t : taps_) t->set(false);
  std::vector<std::uint64_t> seen;
  for (std::uint32_t i = 0; i < taps_.size(); ++i) seen.push_back(loops_(i));
  const auto deadline = std::chrono::steady_clock::now() + kQuiet;
  for (std::uint32_t i = 0; i < taps_.size(); ++i) {
    while (loops_(i) == seen[i] && std::chrono::steady_clock::now() < deadline) {
      kick_(i);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  if (why.empty()) drain();  // (which ends it itself if that reaches the count)
  for (auto& t : taps_) {
    rte_mbuf* m[kWriteBurst];
    unsigned got;
    while ((got = rte_ring_sc_dequeue_burst(t->ring_, reinterpret_cast<void**>(m), kWriteBurst, nullptr)) > 0)
      rte_pktmbuf_free_bulk(m, got);
  }
  if (!file_) return;
  rte_pcapng_close(file_);  // (closes the descriptor)
  file_ = nullptr;
  dropped_last_ = dropped_total() - dropped_base_ + write_dropped_;
  if (!why.empty()) stopped_ = why;
  log_info("capture ended%s%s: %llu frames, %llu bytes written, %llu dropped", why.empty() ? "" : ": ", why.c_str(),
           static_cast<unsigned long long>(frames_), static_cast<unsigned long long>(bytes_),
           static_cast<unsigned long long>(dropped_last_));
}

status::CaptureState Capture::state() const {
  status::CaptureState s;
  s.state = running() ? "running" : "off";
  if (!filter_shown_.port_name.empty()) s.port = filter_shown_.port_name;
  if (filter_shown_.host) s.host = filter_shown_.host_name;
  s.count = count_;
  s.frames = frames_;
  s.bytes = bytes_;
  s.dropped = running() ? dropped_total() - dropped_base_ + write_dropped_ : dropped_last_;
  s.stopped = stopped_;
  return s;
}

}  // namespace lnetr::dp
