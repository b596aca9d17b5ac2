#include "router/route_table.hpp"
#include "router/enum_names.hpp"

#include <cerrno>
#include <cstring>

namespace lnetr {

std::string_view name(RouteError e) noexcept {
  switch (e) {
#define LNETR_X(n, err, text) \
  case RouteError::n:         \
    return #n;
    LNETR_ROUTE_ERRORS(LNETR_X)
#undef LNETR_X
  }
  return "unknown";
}

std::string_view describe(RouteError e) noexcept {
  switch (e) {
#define LNETR_X(n, err, text) \
  case RouteError::n:         \
    return text;
    LNETR_ROUTE_ERRORS(LNETR_X)
#undef LNETR_X
  }
  return "unknown";
}

int errno_of(RouteError e) noexcept {
  switch (e) {
#define LNETR_X(n, err, text) \
  case RouteError::n:         \
    return err;
    LNETR_ROUTE_ERRORS(LNETR_X)
#undef LNETR_X
  }
  return EINVAL;
}

LNETR_ENUM_NAMES(, NoRoute, LNETR_NO_ROUTE_REASONS)

// ---- RouteCursor -------------------------------------------------------------

void RouteCursor::attach(const RouteTableView& table) {
  const auto n = static_cast<std::uint32_t>(table.routes().size());
  if (n > capacity_ || !seq_) {
    // Whole cache lines, so that the last line holds nothing of anyone else.
    const std::uint32_t cap = std::max<std::uint32_t>((n + 7u) & ~7u, 8u);
    seq_.reset(static_cast<std::uint64_t*>(::operator new[](cap * sizeof(std::uint64_t), std::align_val_t{64})));
    capacity_ = cap;
  }
  std::memset(seq_.get(), 0, capacity_ * sizeof(std::uint64_t));
  version_ = table.version();
  routes_ = n;
  tick_ = 0;
}

bool RouteCursor::attached_to(const RouteTableView& table) const noexcept {
  return version_ == table.version() && routes_ == table.routes().size();
}

// ---- RouteTableView ----------------------------------------------------------

std::optional<std::uint8_t> RouteTableView::local_slot(Net net) const noexcept {
  const auto it = std::lower_bound(local_nets_.begin(), local_nets_.end(), net);
  if (it == local_nets_.end() || *it != net) return std::nullopt;
  return static_cast<std::uint8_t>(it - local_nets_.begin());
}

bool RouteTableView::well_formed() const noexcept {
  if (local_nets_.size() > kMaxLocalNets) return false;
  for (std::size_t i = 1; i < local_nets_.size(); ++i)
    if (!(local_nets_[i - 1] < local_nets_[i])) return false;
  for (std::size_t i = 1; i < gateways_.size(); ++i)
    if (!(gateways_[i - 1] < gateways_[i])) return false;

  std::size_t next = 0;  // ranges tile routes() in order
  for (std::size_t i = 0; i < nets_.size(); ++i) {
    const RouteNet& n = nets_[i];
    if (i > 0 && !(nets_[i - 1].net.to_u32() < n.net.to_u32())) return false;
    if (n.count == 0 || n.first != next || n.count > routes_.size() - next) return false;
    next += n.count;
    for (const Route& r : routes_of(n)) {
      if (r.net != n.net) return false;
      if (r.local_slot >= local_nets_.size() || local_nets_[r.local_slot] != r.gateway.net()) return false;
      if (r.gateway_index >= gateways_.size() || gateways_[r.gateway_index] != r.gateway) return false;
    }
  }
  return next == routes_.size();
}

// ---- RouteTable --------------------------------------------------------------

RouteTable RouteTable::copy_of(const RouteTableView& v) {
  RouteTable t;
  t.version_ = v.version();
  t.local_nets_.assign(v.local_nets().begin(), v.local_nets().end());
  t.nets_.assign(v.nets().begin(), v.nets().end());
  t.routes_.assign(v.routes().begin(), v.routes().end());
  t.gateways_.assign(v.gateways().begin(), v.gateways().end());
  t.repoint();
  return t;
}

RouteTable::RouteTable(const RouteTable& o)
    : version_(o.version_), local_nets_(o.local_nets_), nets_(o.nets_), routes_(o.routes_), gateways_(o.gateways_) {
  repoint();
}

RouteTable& RouteTable::operator=(const RouteTable& o) {
  if (this != &o) {
    version_ = o.version_;
    local_nets_ = o.local_nets_;
    nets_ = o.nets_;
    routes_ = o.routes_;
    gateways_ = o.gateways_;
    repoint();
  }
  return *this;
}

RouteTable::RouteTable(RouteTable&& o) noexcept
    : version_(o.version_),
      local_nets_(std::move(o.local_nets_)),
      nets_(std::move(o.nets_)),
      routes_(std::move(o.routes_)),
      gateways_(std::move(o.gateways_)) {
  repoint();
  o.version_ = 0;
  o.local_nets_.clear();
  o.nets_.clear();
  o.routes_.clear();
  o.gateways_.clear();
  o.repoint();
}

RouteTable& RouteTable::operator=(RouteTable&& o) noexcept {
  if (this != &o) {
    version_ = o.version_;
    local_nets_ = std::move(o.local_nets_);
    nets_ = std::move(o.nets_);
    routes_ = std::move(o.routes_);
    gateways_ = std::move(o.gateways_);
    repoint();
    o.version_ = 0;
    o.local_nets_.clear();
    o.nets_.clear();
    o.routes_.clear();
    o.gateways_.clear();
    o.repoint();
  }
  return *this;
}

void RouteTable::repoint() noexcept { view_ = RouteTableView(version_, local_nets_, nets_, routes_, gateways_); }

// ---- RouteTableBuilder -------------------------------------------------------

Result<RouteTableBuilder, RouteError> RouteTableBuilder::create(std::span<const Net> local_nets, std::uint64_t seed) {
  RouteTableBuilder b;
  b.rng_ = seed;
  for (const Net& n : local_nets) {
    if (n.lnd() == LndType::any) return fail(RouteError::bad_net);
    if (n.lnd() == LndType::lo) continue;
    b.local_nets_.push_back(n);
  }
  std::sort(b.local_nets_.begin(), b.local_nets_.end());
  b.local_nets_.erase(std::unique(b.local_nets_.begin(), b.local_nets_.end()), b.local_nets_.end());
  if (b.local_nets_.size() > kMaxLocalNets) return fail(RouteError::too_many_local_nets);
  return b;
}

RouteTableBuilder::RouteTableBuilder(const RouteTable& base, std::uint64_t seed)
    : version_(base.version() + 1),
      rng_(seed),
      local_nets_(base.view().local_nets().begin(), base.view().local_nets().end()),
      routes_(base.view().routes().begin(), base.view().routes().end()) {}

std::optional<std::uint8_t> RouteTableBuilder::slot_of(Net net) const noexcept {
  const auto it = std::lower_bound(local_nets_.begin(), local_nets_.end(), net);
  if (it == local_nets_.end() || *it != net) return std::nullopt;
  return static_cast<std::uint8_t>(it - local_nets_.begin());
}

bool RouteTableBuilder::add_local_net(Net net) {
  if (net.lnd() == LndType::lo || slot_of(net)) return true;
  if (local_nets_.size() >= kMaxLocalNets) return false;
  local_nets_.insert(std::lower_bound(local_nets_.begin(), local_nets_.end(), net), net);
  renumber_slots();
  return true;
}

void RouteTableBuilder::remove_local_net(Net net) {
  const auto it = std::lower_bound(local_nets_.begin(), local_nets_.end(), net);
  if (it == local_nets_.end() || *it != net) return;
  if (std::any_of(routes_.begin(), routes_.end(), [&net](const Route& r) { return r.gateway.net() == net; })) return;
  local_nets_.erase(it);
  renumber_slots();
}

void RouteTableBuilder::renumber_slots() noexcept {
  for (Route& r : routes_)
    if (const auto slot = slot_of(r.gateway.net())) r.local_slot = *slot;
}

// splitmix64: only needs to spread routes over positions, not be unpredictable.
std::uint64_t RouteTableBuilder::next_random() noexcept {
  std::uint64_t z = (rng_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Result<Route, RouteError> RouteTableBuilder::add(const RouteSpec& spec) {
  if (spec.gateway.is_any() || spec.gateway.lnd() == LndType::lo) return fail(RouteError::bad_gateway);
  // Only socklnd (V4) carries large NIDs; lnetr serves them on tcp nets.
  if (!spec.gateway.is_nid4() && spec.gateway.lnd() != LndType::sock) return fail(RouteError::large_nid_gateway);
  if (spec.net.lnd() == LndType::any || spec.net.lnd() == LndType::lo) return fail(RouteError::bad_net);
  if (spec.gateway.net() == spec.net) return fail(RouteError::gateway_on_remote_net);
  if (spec.hops != kHopsUndefined && (spec.hops < 1 || spec.hops > kHopsMax)) return fail(RouteError::bad_hops);
  if (spec.health_sensitivity != kSensitivityGlobal && spec.health_sensitivity > kSensitivityMax)
    return fail(RouteError::bad_sensitivity);
  if (slot_of(spec.net)) return fail(RouteError::net_is_local);
  const std::optional<std::uint8_t> slot = slot_of(spec.gateway.net());
  if (!slot) return fail(RouteError::gateway_unreachable);

  const auto [lo, hi] = std::equal_range(routes_.begin(), routes_.end(), spec.net,
                                         [](const auto& a, const auto& b) {
                                           if constexpr (std::is_same_v<std::decay_t<decltype(a)>, Net>)
                                             return a < b.net;
                                           else
                                             return a.net < b;
                                         });
  for (auto it = lo; it != hi; ++it)
    if (it->gateway == spec.gateway) return fail(RouteError::duplicate);

  Route r;
  r.gateway = spec.gateway;
  r.net = spec.net;
  r.hops = spec.hops;
  r.priority = spec.priority;
  r.health_sensitivity = spec.health_sensitivity;
  r.local_slot = *slot;
  const auto count = static_cast<std::uint64_t>(hi - lo);
  const auto pos = static_cast<std::ptrdiff_t>(next_random() % (count + 1));
  routes_.insert(lo + pos, r);
  return r;
}

namespace {

bool matches(const Route& r, const std::optional<Net>& net, const std::optional<Nid>& gateway) {
  return (!net || r.net == *net) && (!gateway || r.gateway == *gateway);
}

}  // namespace

std::size_t RouteTableBuilder::remove(std::optional<Net> net, std::optional<Nid> gateway) {
  return static_cast<std::size_t>(
      std::erase_if(routes_, [&](const Route& r) { return matches(r, net, gateway); }));
}

std::size_t RouteTableBuilder::set_alive(std::optional<Net> net, std::optional<Nid> gateway, bool alive) {
  std::size_t n = 0;
  for (Route& r : routes_) {
    if (!matches(r, net, gateway)) continue;
    r.alive = alive;
    ++n;
  }
  return n;
}

bool RouteTableBuilder::set_single_hop(Net net, const Nid& gateway, SingleHop single_hop) {
  for (Route& r : routes_) {
    if (r.net == net && r.gateway == gateway) {
      r.single_hop = single_hop;
      return true;
    }
  }
  return false;
}

RouteTable RouteTableBuilder::build() const {
  RouteTable t;
  t.version_ = version_;
  t.local_nets_ = local_nets_;
  t.routes_ = routes_;

  t.gateways_.reserve(routes_.size());
  for (const Route& r : routes_) t.gateways_.push_back(r.gateway);
  std::sort(t.gateways_.begin(), t.gateways_.end());
  t.gateways_.erase(std::unique(t.gateways_.begin(), t.gateways_.end()), t.gateways_.end());

  for (std::size_t i = 0; i < t.routes_.size(); ++i) {
    Route& r = t.routes_[i];
    r.gateway_index = static_cast<std::uint32_t>(
        std::lower_bound(t.gateways_.begin(), t.gateways_.end(), r.gateway) - t.gateways_.begin());
    if (t.nets_.empty() || t.nets_.back().net != r.net)
      t.nets_.push_back(RouteNet{r.net, static_cast<std::uint32_t>(i), 0});
    ++t.nets_.back().count;
  }
  t.repoint();
  return t;
}

}  // namespace lnetr
