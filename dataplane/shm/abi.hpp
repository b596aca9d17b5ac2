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
//   WorkerCounters[n_workers]              each worker's counters (dataplane/counters.hpp)
//   GatewayShm[n_gateways]                 gateway checks (kMaxGateways), then
//                                          kApiPingSlots for operators' pings
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
//
// Gateway checks (control asks, the worker owning the gateway's peer pings):
//   * Control gives each gateway a GatewayShm: it writes nid and owner
//     (cpt_of(nid)), clears the result (no one touches an unassigned
//     entry's), then sets `assigned`, before the first request and before
//     publishing a snapshot that names the gateway.  When the gateway leaves
//     the routes control clears `assigned` before publishing a snapshot
//     without it, and reuses the entry only once every worker holds (and
//     reads) a later snapshot; workers neither ping nor store results into
//     unassigned entries, and only an answer to the latest request is kept.
//   * To ask for a ping control stores a larger `request`, then increments
//     the owner's WorkerShm::ping_requests.  The worker, seeing that counter
//     change at the top of its loop, sends one LNet ping (GET portal 0, ping
//     match bits) for every slot it owns whose request it has not sent yet.
//   * The answer (or the send's failure) goes to `result` under the seqlock
//     `result_gen` (odd while a worker writes; control re-reads until it
//     sees the same even value before and after).  A writer takes the odd
//     value by compare-and-swap and never waits: if another worker is
//     writing the entry, its own result is dropped (control's timeout
//     judges).  A late answer to an older request is dropped.  No answer at
//     all is control's timeout to judge.  `nets` summarises every net the
//     reply listed, so route states never depend on how many NIs it had.
//   * The last kApiPingSlots entries serve operators' pings of any NID:
//     control rewrites nid, via and owner between pings, only once the
//     previous ping was answered or has been given up for a second or more
//     (a worker reads them right after it sees a new request).  A NID on a
//     remote net is pinged through the gateway `via` (owner: the gateway's
//     worker); its reply may come back through another gateway, so another
//     worker.  Whichever worker receives a reply matches it against the
//     entry's latest request and nid, and posts it; one that did not send
//     it posts sent_ns 0 (control times such a ping itself).  Workers never
//     map snapshot gateways to these entries.
//   * `heard` counts routed messages (source net not the gateway's) the
//     owner worker received from the gateway: a gateway that forwards is
//     alive, whatever its last ping said (control revives it).
//   * `down` is the worker's own, faster verdict: set when every connection
//     to the gateway failed (socklnd's peer down), cleared when anything
//     arrives from it.  Every worker skips routes through a gateway that is
//     down when it selects, within a loop iteration of the failure.
//     `down_events` counts the sets, for control.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "dataplane/counters.hpp"
#include "router/nid.hpp"
#include "router/route_table.hpp"

namespace lnetr::shm {

inline constexpr std::uint64_t kShmMagic = 0x4d48535254454e4cULL;  // "LNETRSHM" little-endian
inline constexpr std::uint32_t kShmLayoutVersion = 20;
inline constexpr std::uint32_t kMaxWorkers = 128;
// Gateways watched at once (slots of gateways no route names any more are
// reused once every worker has let go of them).
inline constexpr std::uint32_t kMaxGateways = 4096;
// WorkerCounters holds a counter per drop reason: adding one changes the
// layout (bump kShmLayoutVersion with this count).
static_assert(kDropReasonCount == 15, "drop reasons changed: bump kShmLayoutVersion and this count");
// Board entries after the gateways' that lnetr-control reuses for pings an
// operator asks for (any NID, one ping at a time per entry).
inline constexpr std::uint32_t kApiPingSlots = 8;
inline constexpr std::uint32_t kPingNis = 16;   // NIs of a ping reply kept (for display)
inline constexpr std::uint32_t kPingNets = 64;  // nets of a ping reply summarised (for route states)
inline constexpr std::uint32_t kRouteSlots = 4;
// The longest request line the dataplane's control socket takes.
inline constexpr std::size_t kControlRequestMax = 4096;
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
  std::uint32_t n_gateways;        // GatewayShm entries (kMaxGateways)
  std::uint32_t reserved;
  std::uint64_t gateways_offset;   // of GatewayShm[0]
  std::uint64_t counters_offset;   // of WorkerCounters[0]
  std::uint64_t counters_size;     // sizeof(WorkerCounters)
  std::uint64_t tsc_hz;            // the TSC's rate, for WorkerCounters::cycles (0: unknown)

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
  // Written by control: incremented after it asks for pings of gateways
  // this worker owns.
  alignas(64) std::atomic<std::uint64_t> ping_requests;
};
static_assert(std::is_standard_layout_v<WorkerShm>);

// What a gateway's ping reply said (or why there is none).
struct PingNiEntry {
  Nid nid;
  std::uint32_t status;  // kNiStatusUp / kNiStatusDown / other as received
};

// Per net of a ping reply: how many NIs it listed there and how many UP.
struct PingNetEntry {
  std::uint32_t net;     // Net::to_u32()
  std::uint16_t listed;  // saturating
  std::uint16_t up;      // saturating
};

enum class PingOutcome : std::uint32_t {
  none,        // nothing answered yet
  answered,    // a valid ping info came back
  send_failed, // the GET could not be sent (no connection could be made)
  bad_reply,   // the REPLY did not hold a valid ping info
};

struct PingResult {
  std::uint64_t seq;         // the request it answers
  PingOutcome outcome;
  std::uint32_t features;    // pi_features of the reply
  std::int64_t sent_ns;      // steady clock of the send
  std::int64_t done_ns;      // steady clock of the answer
  std::uint32_t n_nis;       // entries kept in nis (0@lo excluded)
  std::uint32_t more_nis;    // entries the reply listed beyond kPingNis
  PingNiEntry nis[kPingNis];
  std::uint32_t n_nets;      // entries in nets: every net the reply listed (0@lo excluded) ...
  std::uint32_t more_nets;   // ... unless it listed more than kPingNets
  PingNetEntry nets[kPingNets];
};
static_assert(std::is_trivially_copyable_v<PingResult>);

struct alignas(64) GatewayShm {
  // Written by control.
  Nid nid;
  std::atomic<std::uint32_t> owner;       // the worker that pings it (and owns its peer: the rail's, if any)
  Nid via;                                // API pings of a remote NID: the gateway to send through
  std::atomic<std::uint32_t> assigned;    // 1 once nid and owner are written
  std::atomic<std::uint64_t> request;     // the latest ping asked for (0: none)
  // Written by the owner worker.
  alignas(64) std::atomic<std::uint64_t> result_gen;  // seqlock over result
  PingResult result;
  std::atomic<std::uint32_t> down;        // 1: every connection to it failed, nothing heard since
  std::atomic<std::uint64_t> down_events; // times `down` was set
  std::atomic<std::uint64_t> pings_sent;
  std::atomic<std::uint64_t> heard;       // routed messages received from it (it forwards: it lives)
  // Selection among gateways (routing-credits.md §2.2 step 3.4), seen alike
  // by every worker: written by the owner worker, its transmit credits to
  // the gateway and the bytes waiting for them, and its failed sends ...
  std::atomic<std::int32_t> tx_credits;
  std::atomic<std::uint64_t> queued_bytes;
  std::atomic<std::uint64_t> send_failures;
  // ... and by control, the gateway's health (0..1000), which such failures
  // and failed checks lower and any reception from it restores.
  std::atomic<std::uint32_t> health;
  // Discovery, by the owner worker (the counters by fetch_add: while the
  // owner changes, two workers may count): pushes of our ping info sent to
  // it after its checks and the ACKs it gave, and the pushes of its own
  // ping info it sent us (the latest in `pushed`, under the seqlock
  // pushed_gen).
  alignas(64) std::atomic<std::uint64_t> pushes_sent;
  std::atomic<std::uint64_t> push_acks;
  std::atomic<std::uint64_t> pushes_received;
  std::atomic<std::uint64_t> pushed_gen;
  PingResult pushed;  // seq: pushes_received at the time; outcome answered
  // Multi-Rail, by control: the gateway's NI that messages and checks go
  // to while `nid` has failed (under the seqlock rail_gen; all-zero: none,
  // `nid` itself).  Control sets `owner` to the rail's worker, then
  // publishes a snapshot: workers read it when they adopt one.
  alignas(64) std::atomic<std::uint64_t> rail_gen;
  Nid rail;
};
static_assert(std::is_standard_layout_v<GatewayShm>);

struct RouteSlotHeader {
  std::uint64_t version;
  std::uint32_t n_local_nets, n_nets, n_routes, n_gateways;
  std::uint64_t local_nets_offset, nets_offset, routes_offset, gateways_offset;  // from the slot start
};
static_assert(std::is_trivially_copyable_v<RouteSlotHeader>);
static_assert(std::is_trivially_copyable_v<Net> && std::is_trivially_copyable_v<Nid>);

constexpr std::uint64_t align8(std::uint64_t n) noexcept { return (n + 7) & ~std::uint64_t{7}; }

// Bytes a region with these parameters takes.
constexpr std::uint64_t counters_offset(std::uint32_t n_workers) noexcept {
  return sizeof(ShmHeader) + std::uint64_t{n_workers} * sizeof(WorkerShm);
}
constexpr std::uint64_t gateways_offset(std::uint32_t n_workers) noexcept {
  return counters_offset(n_workers) + std::uint64_t{n_workers} * sizeof(dp::WorkerCounters);
}
constexpr std::uint64_t slots_offset(std::uint32_t n_workers) noexcept {
  return gateways_offset(n_workers) + std::uint64_t{kMaxGateways + kApiPingSlots} * sizeof(GatewayShm);
}
constexpr std::uint64_t region_size(std::uint32_t n_workers, std::uint64_t slot_bytes) noexcept {
  return slots_offset(n_workers) + kRouteSlots * slot_bytes;
}

}  // namespace lnetr::shm
