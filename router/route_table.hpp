// The route table: remote net -> routes (gateway, hops, priority, aliveness),
// as the control process builds it and the dataplane workers read it
// (routing-credits.md §1, §2.2; ping-discovery-health.md §5.2).
//
// Three roles:
//   RouteTableBuilder  control process: validates additions with LNet's
//                      add-route rules, deletes, records gateway health, and
//                      produces immutable snapshots.  Allocates; not for the
//                      dataplane.
//   RouteTable         one immutable snapshot, owning its arrays.
//   RouteTableView     a read-only view over a snapshot's flat arrays.  Every
//                      element is trivially copyable and refers to others by
//                      index only, so the arrays can be copied as they are
//                      into shared memory and a worker builds a view over
//                      them there.  Lookup and selection neither allocate nor
//                      write into the snapshot.
//
// Round robin among equal routes needs state that changes per selection; it
// lives in a RouteCursor owned by each worker (one per worker, never shared),
// so that selection only ever writes to the selecting worker's memory.
//
// A worker, on adopting a new snapshot (top of its loop): builds the view,
// attach()es its cursor, maps gateway_index -> its gateway peer NI and
// local_slot -> "has an NI up" (a LocalNetMask).  Per message: select().
//
// Gateways are identified by NID.  LNet identifies a gateway by its peer
// (all NIDs of a Multi-Rail router); the control process passes the peer's
// primary NID here, as lnetctl's delete does.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "router/nid.hpp"
#include "router/result.hpp"

namespace lnetr {

// Hop count "undefined" (LNET_UNDEFINED_HOPS); lnetctl shows it as -1 and
// selection compares it as 1.
inline constexpr std::uint32_t kHopsUndefined = 0xffffffff;
inline constexpr std::uint32_t kHopsMax = 255;
// Local nets are numbered 0..63 in a snapshot so that "which local nets have
// an NI up" is one 64-bit mask (LocalNetMask).
inline constexpr std::size_t kMaxLocalNets = 64;
// A route's health_sensitivity when none was given: use the global one.
inline constexpr std::uint16_t kSensitivityGlobal = 0xffff;
inline constexpr std::uint16_t kSensitivityMax = 1000;

// Why a route could not be added (or a builder created), with the errno Linux
// returns for it.  Config loaders ignore the EEXIST and EHOSTUNREACH cases
// (net_is_local, gateway_unreachable, duplicate); the API reports them.
#define LNETR_ROUTE_ERRORS(X)                                                                      \
  X(bad_gateway, EINVAL, "the gateway is the wildcard NID or a loopback NID")                      \
  X(large_nid_gateway, EAFNOSUPPORT, "the gateway's NID is IPv6 on a net that carries IPv4 NIDs only (IPv6: tcp)")  \
  X(bad_net, EINVAL, "the net is the wildcard net or the loopback net")                            \
  X(gateway_on_remote_net, EINVAL, "the gateway is on the remote net itself")                      \
  X(bad_hops, EINVAL, "the hop count must be 1..255 or undefined (-1)")                            \
  X(bad_sensitivity, EINVAL, "the health sensitivity must be 0..1000")                              \
  X(net_is_local, EEXIST, "the remote net is a local net: it needs no route")                      \
  X(gateway_unreachable, EHOSTUNREACH, "the gateway is not on a local net")                        \
  X(duplicate, EEXIST, "a route to this net through this gateway exists already")                  \
  X(too_many_local_nets, E2BIG, "more local nets than a route table numbers (64)")

enum class RouteError : std::uint8_t {
#define LNETR_X(n, err, text) n,
  LNETR_ROUTE_ERRORS(LNETR_X)
#undef LNETR_X
};

std::string_view name(RouteError e) noexcept;
std::string_view describe(RouteError e) noexcept;
// The positive errno Linux's lnet_add_route returns for the same case.
int errno_of(RouteError e) noexcept;

// Why selection found no gateway for a destination net.  Each is a drop
// reason on a router (Linux fails both with EHOSTUNREACH).
#define LNETR_NO_ROUTE_REASONS(X)                                                                  \
  X(no_route, "no route to the destination net (the route table may be misconfigured)")           \
  X(no_alive_route, "every route to the destination net is down")                                  \
  X(no_usable_route, "the alive routes' gateways are on local nets with no NI up")

enum class NoRoute : std::uint8_t {
#define LNETR_X(n, text) n,
  LNETR_NO_ROUTE_REASONS(LNETR_X)
#undef LNETR_X
};

std::string_view name(NoRoute r) noexcept;
std::string_view describe(NoRoute r) noexcept;

// What the last ping of the gateway said about the route's remote net: did
// the gateway list an NI on it (the route is single-hop)?
enum class SingleHop : std::uint8_t { unknown, no, yes };

// One route.  Fixed layout, no pointers: a snapshot's routes are an array of
// these, grouped by remote net in display order.
struct Route {
  Nid gateway;                        // as configured (the gateway peer's NID)
  Net net;                            // remote net
  std::uint32_t hops = kHopsUndefined;
  std::uint32_t priority = 0;         // lower is preferred
  std::uint32_t gateway_index = 0;    // into RouteTableView::gateways()
  std::uint8_t local_slot = 0;        // gateway's net, index into local_nets()
  bool alive = true;                  // route aliveness, kept by gateway health
  SingleHop single_hop = SingleHop::unknown;
  std::uint8_t reserved = 0;
  // What a failed check of the gateway costs its health (0..1000), or
  // kSensitivityGlobal: the global health_sensitivity.
  std::uint16_t health_sensitivity = kSensitivityGlobal;
  std::uint16_t reserved2 = 0;
};
static_assert(std::is_trivially_copyable_v<Route> && std::is_standard_layout_v<Route>);
static_assert(sizeof(Route) == 44);

// Hops as selection compares them: undefined counts as 1.
constexpr std::uint32_t rank_hops(const Route& r) noexcept {
  return r.hops == kHopsUndefined ? 1 : r.hops;
}
// `hop:` as lnetctl shows it: -1 when undefined.
constexpr int display_hop(const Route& r) noexcept {
  return r.hops == kHopsUndefined ? -1 : static_cast<int>(r.hops);
}
// `state:` as lnetctl shows it.
constexpr std::string_view display_state(const Route& r) noexcept { return r.alive ? "up" : "down"; }
// `type:` as lnetctl shows it: single-hop only once a ping reply showed it.
constexpr std::string_view display_type(const Route& r) noexcept {
  return r.single_hop == SingleHop::yes ? "single-hop" : "multi-hop";
}
// Whether the asymmetric-failure check applies (ping-discovery-health.md
// §5.2): configured hop = 1, or the gateway listed an NI on the remote net.
constexpr bool counts_as_single_hop(const Route& r) noexcept {
  return r.hops == 1 || r.single_hop == SingleHop::yes;
}

// The routes to one remote net: routes()[first .. first+count).
struct RouteNet {
  Net net;
  std::uint32_t first = 0;
  std::uint32_t count = 0;
};
static_assert(std::is_trivially_copyable_v<RouteNet> && std::is_standard_layout_v<RouteNet>);

// What the selecting worker knows of a gateway's NI on the usable local net
// (routing-credits.md §2.2 step 3.4): higher health, then fewer bytes
// queued, then more available transmit credits is better.
struct GatewayNiState {
  std::int32_t tx_credits = 0;  // may be negative (messages queued)
  std::uint32_t health = 1000;  // 0..1000
  std::uint64_t queued_bytes = 0;
};

// <0: a is better, >0: b is better, 0: equal.
constexpr int compare_gateway_ni(const GatewayNiState& a, const GatewayNiState& b) noexcept {
  if (a.health != b.health) return a.health > b.health ? -1 : 1;
  if (a.queued_bytes != b.queued_bytes) return a.queued_bytes < b.queued_bytes ? -1 : 1;
  if (a.tx_credits != b.tx_credits) return a.tx_credits > b.tx_credits ? -1 : 1;
  return 0;
}

// A "usable" predicate for select(): the local nets (by slot) on which the
// worker has an NI up.
struct LocalNetMask {
  std::uint64_t up = 0;

  static constexpr LocalNetMask all() noexcept { return {~std::uint64_t{0}}; }
  constexpr void set(std::uint8_t slot, bool is_up = true) noexcept {
    const std::uint64_t bit = std::uint64_t{1} << (slot & 63u);
    up = is_up ? (up | bit) : (up & ~bit);
  }
  constexpr bool operator()(const Route& r) const noexcept { return (up >> (r.local_slot & 63u)) & 1u; }
};

class RouteTableView;

// Per-worker round-robin state for one snapshot: a last-chosen sequence per
// route (Linux's lr_seq, but private to the worker).  attach() sizes it for a
// snapshot and allocates; do it when the worker adopts a new snapshot, not
// per message.  Aligned to a cache line, with storage padded to whole lines,
// so that no two workers' cursors share one.
class alignas(64) RouteCursor {
 public:
  RouteCursor() = default;
  explicit RouteCursor(const RouteTableView& table) { attach(table); }
  RouteCursor(RouteCursor&&) noexcept = default;
  RouteCursor& operator=(RouteCursor&&) noexcept = default;

  // Size for `table` and restart the rotation.
  void attach(const RouteTableView& table);
  bool attached_to(const RouteTableView& table) const noexcept;

 private:
  friend class RouteTableView;
  struct AlignedDelete {
    void operator()(std::uint64_t* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
  };

  std::uint64_t version_ = 0;
  std::uint32_t routes_ = 0;    // routes in the attached snapshot
  std::uint32_t capacity_ = 0;  // entries allocated in seq_
  std::uint64_t tick_ = 0;      // last sequence handed out
  std::unique_ptr<std::uint64_t[], AlignedDelete> seq_;  // per route: tick when last chosen
};

// A read-only view over a snapshot's arrays (which it does not own).
class RouteTableView {
 public:
  RouteTableView() = default;
  // Over arrays produced by a RouteTable (possibly copied elsewhere, e.g.
  // shared memory).  Check well_formed() before trusting copied arrays.
  RouteTableView(std::uint64_t version, std::span<const Net> local_nets, std::span<const RouteNet> nets,
                 std::span<const Route> routes, std::span<const Nid> gateways) noexcept
      : version_(version), local_nets_(local_nets), nets_(nets), routes_(routes), gateways_(gateways) {}

  std::uint64_t version() const noexcept { return version_; }
  // Sorted, unique, at most kMaxLocalNets; a route's local_slot indexes it.
  std::span<const Net> local_nets() const noexcept { return local_nets_; }
  // Remote nets, sorted by net; for display iterate these and routes_of().
  std::span<const RouteNet> nets() const noexcept { return nets_; }
  // Every route, grouped by remote net in the order of nets().
  std::span<const Route> routes() const noexcept { return routes_; }
  // Distinct gateway NIDs, sorted; a route's gateway_index indexes it.
  std::span<const Nid> gateways() const noexcept { return gateways_; }

  std::span<const Route> routes_of(const RouteNet& n) const noexcept { return routes_.subspan(n.first, n.count); }
  // The remote net's entry, or nullptr if there is no route to it.
  const RouteNet* find(Net net) const noexcept;
  // Whether the net is reachable through a gateway at all (has any route,
  // alive or not).
  bool reachable(Net net) const noexcept { return find(net) != nullptr; }
  std::span<const Route> routes_to(Net net) const noexcept {
    const RouteNet* n = find(net);
    return n ? routes_of(*n) : std::span<const Route>{};
  }
  std::optional<std::uint8_t> local_slot(Net net) const noexcept;
  std::uint32_t index_of(const Route& r) const noexcept { return static_cast<std::uint32_t>(&r - routes_.data()); }

  // The indices are consistent (nets sorted and unique, route ranges in
  // bounds and matching their nets, slots and gateway indices in range).
  bool well_formed() const noexcept;

  // Choose the gateway for a message to remote net `dst` (routing-credits.md
  // §2.2 step 3, without UDSP).  Among the routes that are alive and for
  // which usable(route) is true (the gateway's local net has an NI up —
  // e.g. a LocalNetMask), the best is the one with
  //   1. the lowest priority value, then
  //   2. the fewest hops (undefined = 1), then
  //   3. the better gateway NI: gateway_state(route) returns either the
  //      available tx credits (an integer; more is better) or a
  //      GatewayNiState; it is only called for routes tied on 1 and 2, then
  //   4. round robin: the one this cursor chose least recently (in table
  //      order among never-chosen ones); the chosen route becomes the most
  //      recent.
  // Writes only to `cursor`, which must be attached to this snapshot.  The
  // route returned lives as long as the snapshot.
  template <class Usable, class GatewayState>
  Result<const Route*, NoRoute> select(Net dst, RouteCursor& cursor, Usable&& usable,
                                       GatewayState&& gateway_state) const noexcept;
  template <class Usable, class GatewayState>
  Result<const Route*, NoRoute> select(const RouteNet& dst, RouteCursor& cursor, Usable&& usable,
                                       GatewayState&& gateway_state) const noexcept;

 private:
  std::uint64_t version_ = 0;
  std::span<const Net> local_nets_;
  std::span<const RouteNet> nets_;
  std::span<const Route> routes_;
  std::span<const Nid> gateways_;
};

// One immutable snapshot.  Copies and moves keep the view pointing at the
// object's own arrays.
class RouteTable {
 public:
  RouteTable() = default;  // empty, version 0
  RouteTable(const RouteTable& o);
  RouteTable& operator=(const RouteTable& o);
  RouteTable(RouteTable&& o) noexcept;
  RouteTable& operator=(RouteTable&& o) noexcept;
  ~RouteTable() = default;

  const RouteTableView& view() const noexcept { return view_; }
  std::uint64_t version() const noexcept { return view_.version(); }
  // A table owning copies of a view's arrays (e.g. one read from shared
  // memory), with its version.
  static RouteTable copy_of(const RouteTableView& v);

 private:
  friend class RouteTableBuilder;
  void repoint() noexcept;

  std::uint64_t version_ = 0;
  std::vector<Net> local_nets_;
  std::vector<RouteNet> nets_;
  std::vector<Route> routes_;
  std::vector<Nid> gateways_;
  RouteTableView view_;
};

// A route as the operator asks for it (`lnetctl route add`).
struct RouteSpec {
  Net net;
  Nid gateway;
  std::uint32_t hops = kHopsUndefined;
  std::uint32_t priority = 0;
  std::uint16_t health_sensitivity = kSensitivityGlobal;  // 0..1000 or global
};

// Builds snapshots.  Starts from a set of local nets (empty table) or from an
// existing snapshot (its local nets, routes and states; the new snapshot's
// version is one more).  Control-process code: allocates.
class RouteTableBuilder {
 public:
  // Fails with bad_net if a local net is the wildcard, too_many_local_nets
  // beyond kMaxLocalNets distinct nets.  The loopback net is dropped (routes
  // through it are refused anyway).  `seed` drives the random insertion
  // position of new routes: give each router its own (e.g. from
  // std::random_device) so that routers do not all prefer the same gateway.
  static Result<RouteTableBuilder, RouteError> create(std::span<const Net> local_nets, std::uint64_t seed = 0);
  explicit RouteTableBuilder(const RouteTable& base, std::uint64_t seed = 0);

  // lnet_add_route's rules, in its order: EINVAL cases (bad_gateway,
  // bad_net, gateway_on_remote_net, bad_hops), then net_is_local, then
  // gateway_unreachable, then duplicate (same net, same gateway NID).  The
  // new route is alive and goes to a random position among the net's routes
  // (so that different routers prefer different gateways).  On error nothing
  // changes.  Returns the route as stored.  Unlike Linux, which refuses only
  // 0@lo, any loopback gateway is bad_gateway.
  Result<Route, RouteError> add(const RouteSpec& spec);

  // Removes every route matching the net and the gateway (nullopt matches
  // any; both nullopt removes all).  Returns how many were removed.
  std::size_t remove(std::optional<Net> net, std::optional<Nid> gateway);

  // Gateway health: set `alive` on the matching routes; returns how many
  // matched.
  std::size_t set_alive(std::optional<Net> net, std::optional<Nid> gateway, bool alive);
  // Record the ping observation for the route net/gateway; false if absent.
  bool set_single_hop(Net net, const Nid& gateway, SingleHop single_hop);

  // lnetrctl net add / del.  A local net from now on: routes through it may
  // be added (false, nothing changed: more than kMaxLocalNets).  No longer
  // one: routes through it stay, as Linux keeps them when a net is
  // deleted, unusable while no NI serves it (the net keeps its slot until
  // the last of them is deleted); without any, it leaves the table.
  bool add_local_net(Net net);
  void remove_local_net(Net net);

  // Version of the next build() (default: base version + 1, or 1).
  void set_version(std::uint64_t v) noexcept { version_ = v; }

  std::span<const Net> local_nets() const noexcept { return local_nets_; }
  // Current routes, grouped by net (sorted), in display order per net.
  std::span<const Route> routes() const noexcept { return routes_; }

  RouteTable build() const;

 private:
  RouteTableBuilder() = default;
  std::optional<std::uint8_t> slot_of(Net net) const noexcept;
  std::uint64_t next_random() noexcept;
  void renumber_slots() noexcept;

  std::uint64_t version_ = 1;
  std::uint64_t rng_ = 0;
  std::vector<Net> local_nets_;  // sorted, unique, no lo
  std::vector<Route> routes_;    // sorted by net; order within a net kept
};

// ---- selection (inline: the callbacks inline into the worker's loop) --------

inline const RouteNet* RouteTableView::find(Net net) const noexcept {
  const std::uint32_t key = net.to_u32();
  const auto it = std::lower_bound(nets_.begin(), nets_.end(), key,
                                   [](const RouteNet& n, std::uint32_t k) { return n.net.to_u32() < k; });
  return it != nets_.end() && it->net.to_u32() == key ? &*it : nullptr;
}

template <class Usable, class GatewayState>
Result<const Route*, NoRoute> RouteTableView::select(Net dst, RouteCursor& cursor, Usable&& usable,
                                                     GatewayState&& gateway_state) const noexcept {
  const RouteNet* n = find(dst);
  if (n == nullptr) return fail(NoRoute::no_route);
  return select(*n, cursor, usable, gateway_state);
}

namespace route_detail {

// The gateway-NI key select() compares: plain tx credits when that is what
// the caller supplies (one integer compare), else a GatewayNiState.
template <class R>
using GatewayKey = std::conditional_t<std::is_same_v<std::decay_t<R>, GatewayNiState>, GatewayNiState, std::int32_t>;

constexpr int compare_key(std::int32_t a, std::int32_t b) noexcept { return a == b ? 0 : (a > b ? -1 : 1); }
constexpr int compare_key(const GatewayNiState& a, const GatewayNiState& b) noexcept {
  return compare_gateway_ni(a, b);
}

}  // namespace route_detail

template <class Usable, class GatewayState>
Result<const Route*, NoRoute> RouteTableView::select(const RouteNet& dst, RouteCursor& cursor, Usable&& usable,
                                                     GatewayState&& gateway_state) const noexcept {
  using Returned = decltype(gateway_state(std::declval<const Route&>()));
  static_assert(std::is_same_v<std::decay_t<Returned>, GatewayNiState> || std::is_integral_v<std::decay_t<Returned>>,
                "gateway_state returns tx credits or a GatewayNiState");
  using Key = route_detail::GatewayKey<Returned>;
  auto key_of = [&](const Route& r) noexcept -> Key { return static_cast<Key>(gateway_state(r)); };

  assert(cursor.attached_to(*this));
  // A cursor sized for another snapshot must not be indexed out of bounds;
  // without one, ties go to the first in table order.
  std::uint64_t* const seq = cursor.routes_ == routes_.size() ? cursor.seq_.get() : nullptr;

  const Route* const base = routes_.data();
  const std::uint32_t end = dst.first + dst.count;
  const Route* best = nullptr;
  std::uint32_t best_i = 0;
  std::uint32_t best_hops = 0;
  Key best_key{};
  bool best_key_known = false;
  std::uint64_t best_seq = 0;
  bool any_alive = false;

  for (std::uint32_t i = dst.first; i != end; ++i) {
    const Route& r = base[i];
    if (!r.alive) continue;
    any_alive = true;
    if (!usable(r)) continue;
    const std::uint32_t hops = rank_hops(r);
    if (best != nullptr) {
      if (r.priority != best->priority) {
        if (r.priority > best->priority) continue;
      } else if (hops != best_hops) {
        if (hops > best_hops) continue;
      } else {
        if (!best_key_known) {
          best_key = key_of(*best);
          best_key_known = true;
        }
        const Key k = key_of(r);
        const int c = route_detail::compare_key(k, best_key);
        const std::uint64_t s = seq != nullptr ? seq[i] : 0;
        const bool take = c < 0 || (c == 0 && s < best_seq);
        best = take ? &r : best;
        best_i = take ? i : best_i;
        best_key = take ? k : best_key;
        best_seq = take ? s : best_seq;
        continue;
      }
    }
    best = &r;
    best_i = i;
    best_hops = hops;
    best_seq = seq != nullptr ? seq[i] : 0;
    best_key_known = false;
  }

  if (best == nullptr) return fail(any_alive ? NoRoute::no_usable_route : NoRoute::no_alive_route);
  if (seq != nullptr) seq[best_i] = ++cursor.tick_;
  return best;
}

}  // namespace lnetr
