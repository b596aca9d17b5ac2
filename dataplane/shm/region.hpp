// The shared-memory region of shm/abi.hpp: created by lnetr-dataplane,
// attached by lnetr-control; and route-snapshot publication through it
// (control: publish(); worker: RouteReader).  Control-plane set-up
// allocates and makes system calls; RouteReader::poll() does neither.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "dataplane/shm/abi.hpp"
#include "router/route_table.hpp"

namespace lnetr::shm {

class Region {
 public:
  Region() = default;
  Region(Region&& o) noexcept;
  Region& operator=(Region&& o) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();

  // Create (replacing a stale one of the same name) the region `name`
  // (a POSIX shm name, "/lnetr-..."), initialised and empty.  The creator
  // holds take_lock(name + ".lock") while the Region lives (the kernel
  // drops it when the process dies): a region whose creator still runs is
  // not replaced, so a second dataplane cannot take a live one's name.
  static Region create(const std::string& name, std::uint32_t n_workers, std::uint64_t slot_bytes,
                       std::uint64_t incarnation, std::string& err, std::uint64_t tsc_hz = 0);
  // Map an existing region; refuses (empty Region, err set) one whose
  // magic, layout version or sizes do not match this build.
  static Region attach(const std::string& name, std::string& err);
  // Remove the name (the mapping stays valid while mapped).
  static void unlink(const std::string& name) noexcept;

  explicit operator bool() const noexcept { return base_ != nullptr; }
  ShmHeader& header() const noexcept { return *static_cast<ShmHeader*>(base_); }
  WorkerShm& worker(std::uint32_t i) const noexcept;
  GatewayShm& gateway(std::uint32_t i) const noexcept;
  dp::WorkerCounters& counters(std::uint32_t i) const noexcept;
  std::span<GatewayShm> gateways() const noexcept;  // empty when not mapped
  std::uint8_t* slot(std::uint32_t i) const noexcept;
  std::uint64_t size() const noexcept { return size_; }

 private:
  void release() noexcept;
  Region(void* base, std::uint64_t size, int lock_fd = -1) noexcept : base_(base), size_(size), lock_fd_(lock_fd) {}
  void* base_ = nullptr;
  std::uint64_t size_ = 0;
  int lock_fd_ = -1;  // the creator's: holds the lock
};

// An exclusive lock on the POSIX shm object `name` (created empty if need
// be, never removed): the descriptor holding it, or -1 - with `err` empty
// when another process holds it, else saying what failed.  The kernel
// drops the lock when the holder exits, however it exits.
int take_lock(const std::string& name, std::string& err);

// The seqlock over GatewayShm::result.  Workers store (never block: false,
// nothing stored, while another store is in progress); control loads
// (retries while a store is in progress; a result with seq 0 if the store
// never ends: its writer died in it).
bool store_result(GatewayShm& g, const PingResult& r) noexcept;
PingResult load_result(const GatewayShm& g) noexcept;
// The same seqlock over GatewayShm::pushed (workers store) and
// GatewayShm::rail (control stores; a torn or abandoned read gives Nid{}).
bool store_pushed(GatewayShm& g, const PingResult& r) noexcept;
PingResult load_pushed(const GatewayShm& g) noexcept;
bool store_rail(GatewayShm& g, const Nid& rail) noexcept;
Nid load_rail(const GatewayShm& g) noexcept;

enum class PublishResult : std::uint8_t {
  published,
  busy,     // every other slot is still held by a worker: try again shortly
  too_big,  // the table does not fit in a slot
};

// Control: copy `table` into a slot no worker holds and make it current.
// Versions must increase; the table's own version is used.
PublishResult publish(Region& region, const RouteTableView& table) noexcept;
// Whether `table` fits in one of the region's route slots (publish() would
// not answer too_big).
bool fits(const Region& region, const RouteTableView& table) noexcept;

// Control, re-attaching: a copy of the table published now (nullopt if none
// or malformed).  Only safe for the one publisher (nobody else reuses slots).
std::optional<RouteTable> published_table(const Region& region);

// Worker: follows the published snapshot.  poll() at the top of the loop:
// true when it adopted a new one (then re-attach the route cursor).  A
// malformed slot is refused (counted in WorkerShm::rejected) and the
// previous snapshot kept.
class RouteReader {
 public:
  RouteReader(const Region& region, std::uint32_t worker) noexcept;
  ~RouteReader();  // releases the held slot
  RouteReader(const RouteReader&) = delete;
  RouteReader& operator=(const RouteReader&) = delete;

  bool poll() noexcept;
  const RouteTableView& view() const noexcept { return view_; }

 private:
  bool read_slot(std::uint32_t slot, std::uint64_t version) noexcept;

  const Region& region_;
  WorkerShm& me_;
  std::uint64_t seen_ = 0;  // last `published` value looked at
  RouteTableView view_;
};

}  // namespace lnetr::shm
