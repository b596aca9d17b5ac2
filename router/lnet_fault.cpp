#include "router/lnet_fault.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace lnetr {

namespace {

constexpr std::string_view kTypeNames[] = {"ACK", "PUT", "GET", "REPLY"};
constexpr std::int64_t kNsPerS = 1'000'000'000;
constexpr double kMaxSeconds = 86400;

bool nid_matches(const Nid& rule, const Nid& nid) noexcept {
  if (rule.is_any()) return true;
  if (rule.is_nid4() && rule.addr4() == 0xffffffffu) return rule.net() == nid.net();
  return rule == nid;
}

std::uint32_t type_bit(MsgType t) noexcept { return 1u << static_cast<std::uint32_t>(t); }

std::optional<std::uint64_t> number(std::string_view s, std::uint64_t max) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v > max) return std::nullopt;
  return v;
}

std::optional<std::int64_t> seconds(std::string_view s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v) || v < 0 || v > kMaxSeconds)
    return std::nullopt;
  return std::llround(v * static_cast<double>(kNsPerS));  // (to the nearest: "8.2" is 8,200,000,000 ns)
}

std::string secs(std::int64_t ns) {
  char b[32];
  auto [p, ec] = std::to_chars(b, b + sizeof b, static_cast<double>(ns) / static_cast<double>(kNsPerS));
  return ec == std::errc() ? std::string(b, p) : "0";
}

std::string nid_text(const Nid& n) { return n.is_any() ? "*" : to_string(n); }

}  // namespace

std::string_view name(FaultKind k) noexcept {
  switch (k) {
    case FaultKind::drop: return "drop";
    case FaultKind::delay: return "delay";
    case FaultKind::corrupt: return "corrupt";
  }
  return "?";
}

bool matches(const FaultRule& r, const LnetHeader& h, const Nid& local) noexcept {
  const auto t = static_cast<std::uint32_t>(h.type);
  if (t > 3) return false;
  if (r.types != 0 && (r.types & (1u << t)) == 0) return false;
  if (r.portals != 0) {  // only PUT and GET name a portal
    std::uint32_t portal = 0;
    if (h.type == MsgType::put) portal = h.put().ptl_index;
    else if (h.type == MsgType::get) portal = h.get().ptl_index;
    else return false;
    if (portal >= 64 || (r.portals & (std::uint64_t{1} << portal)) == 0) return false;
  }
  return nid_matches(r.src, h.src_nid) && nid_matches(r.dst, h.dest_nid) && nid_matches(r.local, local);
}

FaultParse parse_fault_rule(std::string_view text) {
  FaultParse out;
  FaultRule r;
  bool kind = false;
  auto fail = [&out](std::string e) {
    out.error = std::move(e);
    return out;
  };
  while (!text.empty()) {
    const std::size_t sp = text.find(' ');
    const std::string_view word = text.substr(0, sp);
    text = sp == std::string_view::npos ? std::string_view{} : text.substr(sp + 1);
    if (word.empty()) continue;
    const std::size_t eq = word.find('=');
    if (eq == std::string_view::npos) return fail("'" + std::string(word) + "': expected KEY=VALUE");
    const std::string_view key = word.substr(0, eq), value = word.substr(eq + 1);
    const std::string k(key), v(value);
    if (key == "kind") {
      if (value == "drop") r.kind = FaultKind::drop;
      else if (value == "delay") r.kind = FaultKind::delay;
      else if (value == "corrupt") r.kind = FaultKind::corrupt;
      else return fail("kind: expected drop, delay or corrupt, got '" + v + "'");
      kind = true;
    } else if (key == "src" || key == "dst" || key == "local") {
      Nid n = Nid::any();
      if (value != "*") {
        auto p = parse_nid(value);
        if (!p) return fail(k + ": expected a NID (or * for any, 255.255.255.255@NET for a whole net), got '" + v + "'");
        n = *p;
      }
      (key == "src" ? r.src : key == "dst" ? r.dst : r.local) = n;
    } else if (key == "type") {
      for (std::string_view rest = value; !rest.empty();) {
        const std::size_t c = rest.find(',');
        const std::string_view t = rest.substr(0, c);
        rest = c == std::string_view::npos ? std::string_view{} : rest.substr(c + 1);
        const auto* it = std::find(std::begin(kTypeNames), std::end(kTypeNames), t);
        if (it == std::end(kTypeNames)) return fail("type: expected PUT, ACK, GET or REPLY, got '" + std::string(t) + "'");
        r.types |= 1u << static_cast<std::uint32_t>(it - std::begin(kTypeNames));
      }
    } else if (key == "portal") {
      for (std::string_view rest = value; !rest.empty();) {
        const std::size_t c = rest.find(',');
        const std::string_view p = rest.substr(0, c);
        rest = c == std::string_view::npos ? std::string_view{} : rest.substr(c + 1);
        auto n = number(p, 63);
        if (!n) return fail("portal: expected portal numbers 0..63, got '" + std::string(p) + "'");
        r.portals |= std::uint64_t{1} << *n;
      }
    } else if (key == "rate") {
      auto n = number(value, 1u << 30);
      if (!n || *n == 0) return fail("rate: expected an integer 1..1073741824, got '" + v + "'");
      r.rate = static_cast<std::uint32_t>(*n);
    } else if (key == "interval") {
      auto s = seconds(value);
      if (!s || *s <= 0) return fail("interval: expected seconds above 0 (at most a day), got '" + v + "'");
      r.interval_ns = *s;
    } else if (key == "latency") {
      auto s = seconds(value);
      if (!s || *s <= 0) return fail("latency: expected seconds above 0 (at most a day), got '" + v + "'");
      r.latency_ns = *s;
    } else {
      return fail("unknown key '" + k + "': expected kind, src, dst, local, type, portal, rate, interval or latency");
    }
  }
  if (!kind) return fail("kind: missing (drop, delay or corrupt)");
  if ((r.rate != 0) == (r.interval_ns != 0)) return fail("give exactly one of rate and interval");
  if (r.kind == FaultKind::delay && r.latency_ns == 0) return fail("latency: a delay rule needs one");
  if (r.kind != FaultKind::delay && r.latency_ns != 0) return fail("latency: only a delay rule takes one");
  if (r.portals != 0) {
    // Only PUT and GET carry a portal: the type narrows to them.
    const std::uint32_t put_get = type_bit(MsgType::put) | type_bit(MsgType::get);
    if (r.types != 0 && (r.types & put_get) == 0) return fail("portal: only PUT and GET name a portal");
    r.types = r.types == 0 ? put_get : r.types & put_get;
  }
  out.rule = r;
  return out;
}

std::string to_string(const FaultRule& r) {
  std::string s = "kind=" + std::string(name(r.kind)) + " src=" + nid_text(r.src) + " dst=" + nid_text(r.dst);
  if (!r.local.is_any()) s += " local=" + nid_text(r.local);
  if (r.types != 0) {
    std::string t;
    for (std::uint32_t i = 0; i < 4; ++i)
      if (r.types & (1u << i)) t += (t.empty() ? "" : ",") + std::string(kTypeNames[i]);
    s += " type=" + t;
  }
  if (r.portals != 0) {
    std::string p;
    for (std::uint32_t i = 0; i < 64; ++i)
      if (r.portals & (std::uint64_t{1} << i)) p += (p.empty() ? "" : ",") + std::to_string(i);
    s += " portal=" + p;
  }
  if (r.rate != 0) s += " rate=" + std::to_string(r.rate);
  if (r.interval_ns != 0) s += " interval=" + secs(r.interval_ns);
  if (r.latency_ns != 0) s += " latency=" + secs(r.latency_ns);
  return s;
}

void FaultEngine::set(const std::vector<FaultRule>& rules) {
  std::vector<Entry> next;
  next.reserve(rules.size());
  for (const FaultRule& r : rules) {
    auto it = std::find_if(rules_.begin(), rules_.end(), [&r](const Entry& e) { return e.rule == r; });
    if (it != rules_.end()) {
      next.push_back(*it);
      continue;
    }
    Entry e;
    e.rule = r;
    if (r.rate != 0) e.pick = rng_() % r.rate;
    next.push_back(e);
  }
  rules_ = std::move(next);
}

// Whether this matched message is the one its window acts on: a random
// position in each window of `rate` matches, or a random moment in each
// `interval` (the first match at or after it), as Lustre spreads them.
bool FaultEngine::chooses(Entry& e, std::int64_t now_ns) {
  const FaultRule& r = e.rule;
  if (r.rate != 0) {
    const bool hit = e.seen == e.pick;
    if (++e.seen == r.rate) {
      e.seen = 0;
      e.pick = rng_() % r.rate;
    }
    return hit;
  }
  if (now_ns >= e.window_end) {
    const std::int64_t start = e.window_end == 0 ? now_ns : std::max(e.window_end, now_ns - r.interval_ns + 1);
    e.window_end = start + r.interval_ns;
    e.act_at = start + static_cast<std::int64_t>(rng_() % static_cast<std::uint64_t>(r.interval_ns));
    e.acted_in_window = false;
  }
  if (e.acted_in_window || now_ns < e.act_at) return false;
  e.acted_in_window = true;
  return true;
}

FaultEngine::Decision FaultEngine::judge(const LnetHeader& h, const Nid& local, std::int64_t now_ns, bool forwarded) {
  Decision d;
  for (Entry& e : rules_) {
    if (!matches(e.rule, h, local)) continue;
    ++e.counts.matched[static_cast<std::size_t>(h.type) & 3];
    const bool can = e.rule.kind == FaultKind::drop ||
                     (forwarded && (e.rule.kind == FaultKind::delay || h.payload_length > 0));
    if (d.act || !can || !chooses(e, now_ns)) continue;
    ++e.counts.acted;
    d.act = true;
    d.kind = e.rule.kind;
    d.latency_ns = e.rule.latency_ns;
    d.rule = e.rule.id;
  }
  return d;
}

std::optional<FaultEngine::Counts> FaultEngine::counts(std::uint32_t id) const noexcept {
  for (const Entry& e : rules_)
    if (e.rule.id == id) return e.counts;
  return std::nullopt;
}

void FaultEngine::reset_counts() noexcept {
  for (Entry& e : rules_) e.counts = {};
}

}  // namespace lnetr
