// The shared-memory ABI between lnetr-dataplane and lnetr-control: one
// versioned layout, included by both.  Change anything here and bump
// kShmLayoutVersion; attach() refuses a region of another magic, version or
// size, so the two programs never read each other's memory wrongly.
//
// Region (a POSIX shared-memory object the dataplane creates, mode 0600;
// lnetr-control maps it read-write):
//
//   ShmHeader                              one cache line per writer
//   WorkerShm[n_workers]                   one per dataplane worker
//   route slot 0 .. n_route_slots-1        slot_bytes each
//
// Route snapshots (control writes, workers read; no locks):
//   * A slot holds one immutable route table: RouteSlotHeader, then the four
//     arrays of a RouteTableView (local nets, remote nets, routes, gateways),
//     each at an offset aligned to 8 bytes.
//   * `published` names the current slot and its version.  Control fills a
//     slot no worker holds, then stores `published`.
//   * A worker adopting a snapshot reads `published`, announces the version
//     in its WorkerShm::reading_version, then reads `published` again: only
//     if it is unchanged does it read the slot (a hazard pointer).  Once the
//     slot checks out it moves the version to held_version (the snapshot it
//     forwards with) and clears reading_version; a malformed slot is refused
//     and the held one kept.  Control reuses a slot only when no worker's
//     reading_version or held_version (loaded in that order) is that slot's
//     version.
//   * All four stores/loads of that hand-shake are sequentially consistent.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "router/nid.hpp"
#include "router/route_table.hpp"

namespace lnetr::shm {

inline constexpr std::uint64_t kShmMagic = 0x4d48535254454e4cULL;  // "LNETRSHM" little-endian
inline constexpr std::uint32_t kShmLayoutVersion = 1;
inline constexpr std::uint32_t kMaxWorkers = 128;
inline constexpr std::uint32_t kRouteSlots = 4;
inline constexpr std::uint64_t kNoVersion = 0;  // held_version of a worker holding nothing

// `published`: version in the high 56 bits, slot in the low 8.
constexpr std::uint64_t pack_published(std::uint64_t version, std::uint32_t slot) noexcept {
  return (version << 8) | (slot & 0xffu);
}
constexpr std::uint64_t published_version(std::uint64_t p) noexcept { return p >> 8; }
constexpr std::uint32_t published_slot(std::uint64_t p) noexcept { return static_cast<std::uint32_t>(p & 0xffu); }

struct alignas(64) ShmHeader {
  // Written once by the dataplane before anyone attaches.
  std::uint64_t magic;
  std::uint32_t layout_version;
  std::uint32_t header_size;       // sizeof(ShmHeader)
  std::uint64_t total_size;        // bytes of the whole region
  std::uint64_t incarnation;       // the dataplane's start time (ns): a restart is a new region
  std::uint32_t n_workers;
  std::uint32_t n_route_slots;
  std::uint64_t slot_bytes;        // bytes per route slot
  std::uint64_t workers_offset;    // of WorkerShm[0]
  std::uint64_t slots_offset;      // of route slot 0

  // Written by control.
  alignas(64) std::atomic<std::uint64_t> published;   // pack_published(version, slot); 0: none yet
  std::atomic<std::uint64_t> control_pid;              // 0: no control process attached
};
static_assert(std::is_standard_layout_v<ShmHeader>);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

struct alignas(64) WorkerShm {
  // Written by the worker.
  std::atomic<std::uint64_t> held_version;     // the snapshot it forwards with (kNoVersion: none)
  std::atomic<std::uint64_t> reading_version;  // the snapshot it is checking (kNoVersion: none)
  std::atomic<std::uint64_t> adopted;       // snapshots adopted since start
  std::atomic<std::uint64_t> rejected;      // snapshots refused as malformed
};
static_assert(std::is_standard_layout_v<WorkerShm>);

struct RouteSlotHeader {
  std::uint64_t version;
  std::uint32_t n_local_nets, n_nets, n_routes, n_gateways;
  std::uint64_t local_nets_offset, nets_offset, routes_offset, gateways_offset;  // from the slot start
};
static_assert(std::is_trivially_copyable_v<RouteSlotHeader>);
static_assert(std::is_trivially_copyable_v<Net> && std::is_trivially_copyable_v<Nid>);

constexpr std::uint64_t align8(std::uint64_t n) noexcept { return (n + 7) & ~std::uint64_t{7}; }

// Bytes a region with these parameters takes.
constexpr std::uint64_t region_size(std::uint32_t n_workers, std::uint64_t slot_bytes) noexcept {
  return sizeof(ShmHeader) + std::uint64_t{n_workers} * sizeof(WorkerShm) + kRouteSlots * slot_bytes;
}

}  // namespace lnetr::shm
