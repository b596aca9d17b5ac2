#include "dataplane/shm/region.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <optional>
#include <utility>

#include "dataplane/shm/seqlock.hpp"

namespace lnetr::shm {

namespace {

std::string sys_error(const std::string& what, const std::string& name) {
  return what + " " + name + ": " + std::strerror(errno);
}

template <class T>
std::uint64_t array_bytes(std::size_t n) noexcept {
  return align8(std::uint64_t{n} * sizeof(T));
}

}  // namespace

int take_lock(const std::string& name, std::string& err) {
  err.clear();
  // Read-only is enough to lock, so whoever created it, anyone may lock it.
  const int fd = ::shm_open(name.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    err = sys_error("cannot open lock", name);
    return -1;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) err = sys_error("cannot lock", name);
    ::close(fd);
    return -1;
  }
  return fd;
}

// ---- Region --------------------------------------------------------------------

Region::Region(Region&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), size_(std::exchange(o.size_, 0)), lock_fd_(std::exchange(o.lock_fd_, -1)) {}

Region& Region::operator=(Region&& o) noexcept {
  if (this != &o) {
    release();
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    lock_fd_ = std::exchange(o.lock_fd_, -1);
  }
  return *this;
}

Region::~Region() { release(); }

void Region::release() noexcept {
  if (base_) ::munmap(base_, size_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
  base_ = nullptr;
  lock_fd_ = -1;
}

WorkerShm& Region::worker(std::uint32_t i) const noexcept {
  return reinterpret_cast<WorkerShm*>(static_cast<std::uint8_t*>(base_) + header().workers_offset)[i];
}

dp::WorkerCounters& Region::counters(std::uint32_t i) const noexcept {
  return reinterpret_cast<dp::WorkerCounters*>(static_cast<std::uint8_t*>(base_) + header().counters_offset)[i];
}

GatewayShm& Region::gateway(std::uint32_t i) const noexcept {
  return reinterpret_cast<GatewayShm*>(static_cast<std::uint8_t*>(base_) + header().gateways_offset)[i];
}

std::span<GatewayShm> Region::gateways() const noexcept {
  if (!base_) return {};
  return {&gateway(0), header().n_gateways};
}

std::uint8_t* Region::slot(std::uint32_t i) const noexcept {
  return static_cast<std::uint8_t*>(base_) + header().slots_offset + i * header().slot_bytes;
}

Region Region::create(const std::string& name, std::uint32_t n_workers, std::uint64_t slot_bytes,
                      std::uint64_t incarnation, std::string& err, std::uint64_t tsc_hz) {
  if (n_workers == 0 || n_workers > kMaxWorkers) {
    err = "shared memory " + name + ": " + std::to_string(n_workers) + " workers (1.." +
          std::to_string(kMaxWorkers) + " expected)";
    return {};
  }
  slot_bytes = align8(std::max<std::uint64_t>(slot_bytes, sizeof(RouteSlotHeader)));
  const std::uint64_t size = region_size(n_workers, slot_bytes);
  // The name's lock first (never unlinked, so every creator locks the same
  // file): a region whose creator still holds it is live.
  std::string lock_err;
  const int lock_fd = take_lock(name + ".lock", lock_err);
  if (lock_fd < 0) {
    err = lock_err.empty() ? "shared memory " + name + " belongs to a running lnetr-dataplane: give this one "
                             "another dataplane.shm_name (or stop that one)"
                           : lock_err;
    return {};
  }
  ::shm_unlink(name.c_str());
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    err = sys_error("cannot create shared memory", name);
    ::close(lock_fd);
    return {};
  }
  const bool sized = ::ftruncate(fd, static_cast<off_t>(size)) == 0;
  void* base = sized ? ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (base == MAP_FAILED) {
    err = sys_error(sized ? "cannot map shared memory" : "cannot size shared memory", name);
    ::close(fd);
    ::close(lock_fd);
    ::shm_unlink(name.c_str());
    return {};
  }
  ::close(fd);  // the mapping stays
  // The object is zero-filled; construct the atomics in place, then the
  // constants, magic last.
  auto* h = new (base) ShmHeader{};
  h->layout_version = kShmLayoutVersion;
  h->header_size = sizeof(ShmHeader);
  h->total_size = size;
  h->incarnation = incarnation;
  h->tsc_hz = tsc_hz;
  h->n_workers = n_workers;
  h->n_route_slots = kRouteSlots;
  h->slot_bytes = slot_bytes;
  h->workers_offset = sizeof(ShmHeader);
  h->n_gateways = kMaxGateways + kApiPingSlots;
  h->gateways_offset = gateways_offset(n_workers);
  h->counters_offset = counters_offset(n_workers);
  h->counters_size = sizeof(dp::WorkerCounters);
  for (std::uint32_t i = 0; i < n_workers; ++i)
    new (static_cast<std::uint8_t*>(base) + h->counters_offset + i * sizeof(dp::WorkerCounters)) dp::WorkerCounters{};
  h->slots_offset = slots_offset(n_workers);
  for (std::uint32_t i = 0; i < n_workers; ++i)
    new (static_cast<std::uint8_t*>(base) + h->workers_offset + i * sizeof(WorkerShm)) WorkerShm{};
  for (std::uint32_t i = 0; i < h->n_gateways; ++i)
    new (static_cast<std::uint8_t*>(base) + h->gateways_offset + i * sizeof(GatewayShm)) GatewayShm{};
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kShmMagic;
  return Region(base, size, lock_fd);
}

Region Region::attach(const std::string& name, std::string& err) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    err = sys_error("cannot open shared memory", name);
    return {};
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < sizeof(ShmHeader)) {
    err = "shared memory " + name + " is too small to hold a header";
    ::close(fd);
    return {};
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    err = sys_error("cannot map shared memory", name);
    return {};
  }
  Region r(base, size);
  const ShmHeader& h = r.header();
  if (h.magic != kShmMagic) {
    err = "shared memory " + name + " is not an lnetr region (bad magic)";
  } else if (h.layout_version != kShmLayoutVersion || h.header_size != sizeof(ShmHeader)) {
    err = "shared memory " + name + " has layout version " + std::to_string(h.layout_version) +
          "; this program speaks version " + std::to_string(kShmLayoutVersion) + " (same lnetr release needed)";
  } else if (h.n_workers == 0 || h.n_workers > kMaxWorkers || h.n_route_slots != kRouteSlots ||
             h.slot_bytes < sizeof(RouteSlotHeader) || h.total_size != size ||
             h.workers_offset != sizeof(ShmHeader) ||
             h.n_gateways != kMaxGateways + kApiPingSlots || h.gateways_offset != gateways_offset(h.n_workers) ||
             h.counters_offset != counters_offset(h.n_workers) || h.counters_size != sizeof(dp::WorkerCounters) ||
             h.slots_offset != slots_offset(h.n_workers) ||
             region_size(h.n_workers, h.slot_bytes) != size) {
    err = "shared memory " + name + " has inconsistent sizes";
  } else {
    return r;
  }
  return {};
}

void Region::unlink(const std::string& name) noexcept { ::shm_unlink(name.c_str()); }

// ---- gateway ping results ---------------------------------------------------------

bool store_result(GatewayShm& g, const PingResult& r) noexcept { return seq_store(g.result_gen, g.result, r); }
PingResult load_result(const GatewayShm& g) noexcept { return seq_load(g.result_gen, g.result); }
bool store_pushed(GatewayShm& g, const PingResult& r) noexcept { return seq_store(g.pushed_gen, g.pushed, r); }
PingResult load_pushed(const GatewayShm& g) noexcept { return seq_load(g.pushed_gen, g.pushed); }
bool store_rail(GatewayShm& g, const Nid& rail) noexcept { return seq_store(g.rail_gen, g.rail, rail); }
Nid load_rail(const GatewayShm& g) noexcept { return seq_load(g.rail_gen, g.rail); }

// ---- publication ---------------------------------------------------------------

bool fits(const Region& region, const RouteTableView& table) noexcept {
  const std::uint64_t bytes = align8(sizeof(RouteSlotHeader)) + array_bytes<Net>(table.local_nets().size()) +
                              array_bytes<RouteNet>(table.nets().size()) + array_bytes<Route>(table.routes().size()) +
                              array_bytes<Nid>(table.gateways().size());
  return bytes <= region.header().slot_bytes;
}

PublishResult publish(Region& region, const RouteTableView& table) noexcept {
  ShmHeader& h = region.header();
  const std::uint64_t current = h.published.load(std::memory_order_seq_cst);
  // Versions of what each slot holds, read from the slots themselves.
  std::uint32_t free_slot = kRouteSlots;
  for (std::uint32_t s = 0; s < kRouteSlots && free_slot == kRouteSlots; ++s) {
    if (current != 0 && s == published_slot(current)) continue;
    std::uint64_t v = 0;
    std::memcpy(&v, region.slot(s) + offsetof(RouteSlotHeader, version), sizeof v);
    bool held = false;
    for (std::uint32_t w = 0; w < h.n_workers && !held && v != kNoVersion; ++w) {
      const WorkerShm& ws = region.worker(w);
      // reading before held: a worker moves v from reading to held, and
      // reading the two the other way round could miss it in between.
      const std::uint64_t reading = ws.reading_version.load(std::memory_order_seq_cst);
      const std::uint64_t in_use = ws.held_version.load(std::memory_order_seq_cst);
      held = reading == v || in_use == v;
    }
    if (!held) free_slot = s;
  }
  if (free_slot == kRouteSlots) return PublishResult::busy;

  RouteSlotHeader sh{};
  sh.version = table.version();
  sh.n_local_nets = static_cast<std::uint32_t>(table.local_nets().size());
  sh.n_nets = static_cast<std::uint32_t>(table.nets().size());
  sh.n_routes = static_cast<std::uint32_t>(table.routes().size());
  sh.n_gateways = static_cast<std::uint32_t>(table.gateways().size());
  sh.local_nets_offset = align8(sizeof(RouteSlotHeader));
  sh.nets_offset = sh.local_nets_offset + array_bytes<Net>(sh.n_local_nets);
  sh.routes_offset = sh.nets_offset + array_bytes<RouteNet>(sh.n_nets);
  sh.gateways_offset = sh.routes_offset + array_bytes<Route>(sh.n_routes);
  if (sh.gateways_offset + array_bytes<Nid>(sh.n_gateways) > h.slot_bytes) return PublishResult::too_big;

  std::uint8_t* slot = region.slot(free_slot);
  auto copy = [slot](std::uint64_t off, auto span) {
    if (!span.empty()) std::memcpy(slot + off, span.data(), span.size_bytes());
  };
  std::memcpy(slot, &sh, sizeof sh);
  copy(sh.local_nets_offset, table.local_nets());
  copy(sh.nets_offset, table.nets());
  copy(sh.routes_offset, table.routes());
  copy(sh.gateways_offset, table.gateways());
  h.published.store(pack_published(table.version(), free_slot), std::memory_order_seq_cst);
  return PublishResult::published;
}

// ---- RouteReader ---------------------------------------------------------------

RouteReader::RouteReader(const Region& region, std::uint32_t worker) noexcept
    : region_(region), me_(region.worker(worker)) {}

RouteReader::~RouteReader() {
  me_.reading_version.store(kNoVersion, std::memory_order_seq_cst);
  me_.held_version.store(kNoVersion, std::memory_order_seq_cst);
}

bool RouteReader::poll() noexcept {
  const ShmHeader& h = region_.header();
  const std::uint64_t p = h.published.load(std::memory_order_seq_cst);
  if (p == seen_) return false;
  seen_ = p;
  const std::uint64_t version = published_version(p);
  const std::uint32_t slot = published_slot(p);
  if (version == kNoVersion || slot >= kRouteSlots) return false;
  me_.reading_version.store(version, std::memory_order_seq_cst);
  // Still current after our announcement: control will not reuse the slot.
  if (h.published.load(std::memory_order_seq_cst) != p) {
    me_.reading_version.store(kNoVersion, std::memory_order_seq_cst);
    seen_ = 0;  // look again next time
    return false;
  }
  const bool ok = read_slot(slot, version);
  if (ok) {
    me_.held_version.store(version, std::memory_order_seq_cst);
    me_.adopted.fetch_add(1, std::memory_order_relaxed);
  } else {
    me_.rejected.fetch_add(1, std::memory_order_relaxed);
  }
  me_.reading_version.store(kNoVersion, std::memory_order_seq_cst);
  return ok;
}

namespace {

// The table in `slot` if it is the well-formed table of `version`.
std::optional<RouteTableView> view_of_slot(const Region& region, std::uint32_t slot, std::uint64_t version) noexcept {
  const std::uint8_t* base = region.slot(slot);
  const std::uint64_t cap = region.header().slot_bytes;
  RouteSlotHeader sh;
  std::memcpy(&sh, base, sizeof sh);
  auto fits = [cap](std::uint64_t off, std::uint64_t n, std::uint64_t elem) {
    return off % 8 == 0 && off <= cap && n <= (cap - off) / elem;
  };
  if (sh.version != version || !fits(sh.local_nets_offset, sh.n_local_nets, sizeof(Net)) ||
      !fits(sh.nets_offset, sh.n_nets, sizeof(RouteNet)) || !fits(sh.routes_offset, sh.n_routes, sizeof(Route)) ||
      !fits(sh.gateways_offset, sh.n_gateways, sizeof(Nid)))
    return std::nullopt;
  RouteTableView v(version, {reinterpret_cast<const Net*>(base + sh.local_nets_offset), sh.n_local_nets},
                   {reinterpret_cast<const RouteNet*>(base + sh.nets_offset), sh.n_nets},
                   {reinterpret_cast<const Route*>(base + sh.routes_offset), sh.n_routes},
                   {reinterpret_cast<const Nid*>(base + sh.gateways_offset), sh.n_gateways});
  if (!v.well_formed()) return std::nullopt;
  return v;
}

}  // namespace

bool RouteReader::read_slot(std::uint32_t slot, std::uint64_t version) noexcept {
  const auto v = view_of_slot(region_, slot, version);
  if (!v) return false;
  view_ = *v;
  return true;
}

std::optional<RouteTable> published_table(const Region& region) {
  const std::uint64_t p = region.header().published.load(std::memory_order_seq_cst);
  const std::uint64_t version = published_version(p);
  if (version == kNoVersion || published_slot(p) >= kRouteSlots) return std::nullopt;
  const auto v = view_of_slot(region, published_slot(p), version);
  if (!v) return std::nullopt;
  return RouteTable::copy_of(*v);
}

}  // namespace lnetr::shm
