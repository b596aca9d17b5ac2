// The router's LNet layer, no I/O: what to do with a received message, LNet's
// credit counters, the router buffer pools' size classes, the CPT of a NID,
// and the named reasons a message is dropped (spec: routing-credits.md,
// lnet-header.md §4).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>
#include <span>
#include <string_view>

#include "router/bytes.hpp"
#include "router/ip_addr.hpp"
#include "router/lnet_header.hpp"
#include "router/nid.hpp"

namespace lnetr {

// ---- drop reasons ------------------------------------------------------------

// Every message the router does not deliver, by reason: the enum, the
// counter name and what an operator should make of a non-zero count.
#define LNETR_DROP_REASONS(X)                                                                        \
  X(routing_disabled, "routed messages arrived while routing is disabled (peers still use this "   \
                      "router: check their routes and our ping's RTE_DISABLED bit)")               \
  X(no_route, "no route to the destination net (route table may be misconfigured)")               \
  X(route_down, "every route to the destination net is down (gateways dead or unusable)")         \
  X(peer_down, "the next hop was down (its connections failed) and peer_timeout is set")          \
  X(send_failed, "the next hop's connection failed before the message was sent")                  \
  X(large_nid, "a message with an IPv6 (large) NID was for a next hop whose socklnd connections are "  \
               "V3, which carries 64-bit NIDs only (the peer connected with V3: it cannot reach IPv6 nets)") \
  X(not_for_us, "a message addressed to this router that it has no use for (not a ping or push)") \
  X(protocol, "a message breaking LNet's rules (wrong net, another local NID, bad lengths)")       \
  X(asym_route, "a message for the router came through a gateway that is not on a route back to its "   \
                "source net (drop_asym_route)")                                                     \
  X(timeout, "waited longer than transaction_timeout for credits or a router buffer (a next hop or "      \
             "the buffer pools too slow to drain: check peers' credits and the pools' minimums)")           \
  X(no_buffer, "a router buffer was missing though a pool credit was held (a fault: report it)")   \
  X(peer_table_full, "from or to a peer the router did not know while its peer table was full "       \
                     "(dataplane.limits.peers: many made-up NIDs, or more peers than the limit)")   \
  X(fault, "dropped by an LNet fault injection rule (lnetrctl fault drop)")                        \
  X(shutdown, "dropped while the router was stopping")                                           \
  X(ni_deleted, "its NI was deleted (lnetrctl net del) while it waited, was read or was sent, or it was "  \
                "routed through one just deleted")

enum class DropReason : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_DROP_REASONS(LNETR_X)
#undef LNETR_X
};
inline constexpr std::size_t kDropReasonCount = 0
#define LNETR_X(n, text) +1
    LNETR_DROP_REASONS(LNETR_X)
#undef LNETR_X
    ;
std::string_view name(DropReason r) noexcept;
std::string_view describe(DropReason r) noexcept;

// ---- single-writer values ------------------------------------------------------

// A value one thread writes and others may read at any time: plain loads
// and stores (relaxed atomics, no locked instruction), so that a reader sees
// each field whole without slowing its writer.  Updates are load-then-store:
// only the owner may write.
template <class T>
class Relaxed {
  static_assert(std::atomic<T>::is_always_lock_free, "a Relaxed value must be a plain load and store");

 public:
  constexpr Relaxed(T v = T{}) noexcept : v_(v) {}
  Relaxed(const Relaxed& o) noexcept : v_(o.get()) {}
  Relaxed& operator=(const Relaxed& o) noexcept { return *this = o.get(); }
  Relaxed& operator=(T v) noexcept {
    v_.store(v, std::memory_order_relaxed);
    return *this;
  }
  operator T() const noexcept { return get(); }
  T get() const noexcept { return v_.load(std::memory_order_relaxed); }
  Relaxed& operator+=(T d) noexcept { return *this = static_cast<T>(get() + d); }
  Relaxed& operator-=(T d) noexcept { return *this = static_cast<T>(get() - d); }
  Relaxed& operator++() noexcept { return *this += T{1}; }
  Relaxed& operator--() noexcept { return *this -= T{1}; }

 private:
  std::atomic<T> v_;
};

// ---- credits -----------------------------------------------------------------

// An LNet credit counter: starts at `max`, goes negative while messages
// wait for it (-n = n waiting), and remembers its lowest value (lnetctl's
// "min" columns).  Its owner changes it; status readers may read it at any
// time.
struct Credits {
  Relaxed<std::int32_t> max = 0;
  Relaxed<std::int32_t> cur = 0;
  Relaxed<std::int32_t> min = 0;

  static constexpr Credits of(std::int32_t n) noexcept { return {n, n, n}; }
  // Take one; false if none was free (the caller queues the message).
  bool take() noexcept {
    const std::int32_t c = cur - 1;
    cur = c;
    if (c < min) min = c;
    return c >= 0;
  }
  // Give one back; true if a waiter is owed it (the caller wakes the first).
  bool give() noexcept {
    const std::int32_t c = cur + 1;
    cur = c;
    return c <= 0;
  }
};

// ---- router buffer pools -------------------------------------------------------

enum class PoolClass : std::uint8_t { tiny = 0, small = 1, large = 2 };
inline constexpr std::size_t kPoolClasses = 3;
inline constexpr std::uint32_t kPageSize = 4096;
inline constexpr std::array<std::uint32_t, kPoolClasses> kPoolPages = {0, 1, kLnetMtu / kPageSize};
inline constexpr std::array<std::uint32_t, kPoolClasses> kDefaultPoolBuffers = {2048, 16384, 1024};
// The fewest per CPT Linux recommends (it warns below them).
inline constexpr std::array<std::uint32_t, kPoolClasses> kMinPoolBuffers = {512, 4096, 256};
inline constexpr std::array<std::string_view, kPoolClasses> kPoolNames = {"tiny", "small", "large"};

// The first pool whose buffers hold `payload` bytes (payload <= kLnetMtu).
constexpr PoolClass pool_for(std::uint32_t payload) noexcept {
  return payload == 0 ? PoolClass::tiny : payload <= kPageSize ? PoolClass::small : PoolClass::large;
}
constexpr std::uint32_t pool_capacity(PoolClass c) noexcept {
  return kPoolPages[static_cast<std::size_t>(c)] * kPageSize;
}

// ---- CPTs --------------------------------------------------------------------

// Linux's CPT of a nid4 NID: the sum of its 8 bytes modulo the number of
// CPTs; large NIDs hash all their bytes the same way.
std::uint32_t cpt_of(const Nid& nid, std::uint32_t ncpts) noexcept;

// ---- steering a DPDK port's peers to their queues ---------------------------------------

// The Toeplitz hash NICs compute for receive-side scaling, over IPv4 source
// then destination address (both host order here), with kRssKey: the
// well-known default key (Microsoft's RSS verification key), which a port
// with several queues programs into its device.
inline constexpr std::array<std::uint8_t, 40> kRssKey = {
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
    0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
    0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};
std::uint32_t rss_hash_ipv4(std::uint32_t src, std::uint32_t dst) noexcept;
// The same over any input of up to 36 bytes (IPv6: source then destination
// address, 32 bytes, as a NIC's RSS on IPv6 addresses reads them).
std::uint32_t rss_hash(ByteSpan input) noexcept;

// The redirection table's low bits that pick a queue: a port programs
// entry k of its table with (k % kRssTableSpan) % queues, which is the same
// queue for every table size that is a multiple of the span.
inline constexpr std::uint32_t kRssTableSpan = 64;
constexpr std::uint32_t rss_queue(std::uint32_t hash, std::uint32_t queues) noexcept {
  return queues <= 1 ? 0 : (hash % kRssTableSpan) % queues;
}

// The queue (and so the worker) of a port with `queues` queues and address
// `local` that owns everything from `peer`: its ARP, its pings and all its
// TCP connections, whatever their ports (the hash covers addresses only).
inline std::uint32_t steer_queue(std::uint32_t peer, std::uint32_t local, std::uint32_t queues) noexcept {
  return queues <= 1 ? 0 : rss_queue(rss_hash_ipv4(peer, local), queues);
}
inline std::uint32_t steer_queue(const IpAddr& peer, const IpAddr& local, std::uint32_t queues) noexcept {
  if (queues <= 1) return 0;
  if (peer.is_v4()) return steer_queue(peer.v4_host(), local.v4_host(), queues);
  std::array<std::uint8_t, 32> input{};
  std::copy(peer.bytes.begin(), peer.bytes.end(), input.begin());
  std::copy(local.bytes.begin(), local.bytes.end(), input.begin() + 16);
  return rss_queue(rss_hash(input), queues);
}

// The worker that owns a peer (its connections, its credits): the CPT of
// its NID, among its NI's CPTs where the NI has a CPT list (as Linux
// hashes into ni_cpts), except on a net served by a DPDK port, whose
// connections live in the worker polling the port queue that receives
// them: queue q is polled by the worker of its NI's q-th CPT (CPT q
// without a list), and a peer's queue is steer_queue() of its NID's
// address.  Messages from other workers reach those peers through the
// rings.
struct PortPlacement {
  Net net;
  IpAddr local;  // the port's address
  std::uint32_t queues = 1;
  std::vector<std::uint32_t> cpts;  // queue q's CPT; empty: q
  std::uint32_t cpt_of_queue(std::uint32_t q) const noexcept { return q < cpts.size() ? cpts[q] : q; }
};
struct NetCpts {
  Net net;
  std::vector<std::uint32_t> cpts;  // in the order written, no repeats, each below the number of CPTs
};
struct Placement {
  std::vector<PortPlacement> pinned;
  std::vector<NetCpts> restricted;
  std::uint32_t of(const Nid& nid, std::uint32_t ncpts) const noexcept {
    for (const PortPlacement& p : pinned)
      if (nid.net() == p.net) return p.cpt_of_queue(steer_queue(IpAddr::of(nid), p.local, p.queues));
    for (const NetCpts& r : restricted)
      if (nid.net() == r.net && !r.cpts.empty())
        return r.cpts[cpt_of(nid, static_cast<std::uint32_t>(r.cpts.size()))];
    return cpt_of(nid, ncpts);
  }
};

// ---- what to do with a received message ---------------------------------------------

struct LocalNis {
  std::span<const Nid> nids;
  bool is_local(const Nid& n) const noexcept;
  bool on_local_net(Net net) const noexcept;
};

enum class Disposition : std::uint8_t {
  for_us,   // addressed to the NI it arrived on
  forward,  // someone else's: route it
  drop,     // discard its payload, count `reason`
  reject,   // a protocol error: the LND closes the connection
};

struct Verdict {
  Disposition what = Disposition::drop;
  DropReason reason = DropReason::protocol;
};

// LNet's checks of lnet_parse() for a header that arrived on local NI
// `arrival`, in Linux's order: for us; else on the arrival net (the sender
// should have sent it directly) or for another local NI: reject; else drop
// if routing is disabled; else forward.
Verdict classify(const LnetHeader& h, const Nid& arrival, const LocalNis& locals, bool routing_enabled) noexcept;

}  // namespace lnetr
