// LNet fault injection, as Lustre's `lctl net_drop_add` / `net_delay_add`
// (../shared/spec/fault-injection.md): rules that match messages by source,
// destination and local NID (or net), message type and portal, and act on
// one matched message in every `rate`, or one per `interval`: drop it
// silently, hold it for `latency`, or (lnetr's own) corrupt a byte of its
// payload.  Off unless an operator adds a rule.
//
// A FaultEngine is one worker's copy of the rules with their state (where
// in its window each rule acts) and counts; the dataplane's control thread
// keeps the list and hands every worker the whole of it on each change.
// Pure: the clock and the random seed come from the caller.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "router/lnet_header.hpp"
#include "router/nid.hpp"

namespace lnetr {

enum class FaultKind : std::uint8_t { drop, delay, corrupt };
std::string_view name(FaultKind k) noexcept;  // "drop", "delay", "corrupt"

struct FaultRule {
  std::uint32_t id = 0;  // given by whoever keeps the list
  FaultKind kind = FaultKind::drop;
  // Matched against the LNet header's src_nid and dest_nid and the NI the
  // message arrived on: any() matches every NID, 255.255.255.255@NET every
  // NID of NET.
  Nid src = Nid::any(), dst = Nid::any(), local = Nid::any();
  std::uint32_t types = 0;    // bit 1 << MsgType (ACK 0, PUT 1, GET 2, REPLY 3); 0: every type
  std::uint64_t portals = 0;  // bit per portal (0..63); 0: any.  Given: PUT and GET only
  std::uint32_t rate = 0;     // one matched message in every `rate` (exactly one of rate, interval)
  std::int64_t interval_ns = 0;  // one matched message per interval
  std::int64_t latency_ns = 0;   // delay: how long a chosen message is held
  friend bool operator==(const FaultRule&, const FaultRule&) = default;
};

// Whether `r` matches a message with header `h` that arrived on `local`.
bool matches(const FaultRule& r, const LnetHeader& h, const Nid& local) noexcept;

// A rule from `kind=drop src=NID dst=NID [local=NID] [type=PUT,ACK]
// [portal=4,6] rate=N|interval=S [latency=S]` (S: seconds, may be
// fractional; NID `*`: any).  What is wrong is named.
struct FaultParse {
  std::optional<FaultRule> rule;
  std::string error;
};
FaultParse parse_fault_rule(std::string_view text);
// The same words back (what `parse_fault_rule` reads).
std::string to_string(const FaultRule& r);

class FaultEngine {
 public:
  explicit FaultEngine(std::uint64_t seed = 1) : rng_(seed) {}

  // The rules, in order; a rule kept (same id and fields) keeps its state
  // and counts.
  void set(const std::vector<FaultRule>& rules);
  bool empty() const noexcept { return rules_.empty(); }

  struct Decision {
    FaultKind kind = FaultKind::drop;
    bool act = false;
    std::int64_t latency_ns = 0;
    std::uint32_t rule = 0;  // the id of the rule that chose it
  };
  // What to do with a message: the first rule that chooses it decides.
  // Every rule that matches counts it.  `forwarded`: the message is to be
  // forwarded (delay and corrupt rules act on those only, corrupt on those
  // with a payload; for others they count the match and keep their turn).
  Decision judge(const LnetHeader& h, const Nid& local, std::int64_t now_ns, bool forwarded = true);

  struct Counts {
    std::array<std::uint64_t, 4> matched{};  // by MsgType (ACK, PUT, GET, REPLY)
    std::uint64_t acted = 0;                 // dropped, delayed or corrupted
  };
  // The counts of rule `id`, if this engine has it.
  std::optional<Counts> counts(std::uint32_t id) const noexcept;
  void reset_counts() noexcept;

 private:
  struct Entry {
    FaultRule rule;
    Counts counts;
    std::uint64_t seen = 0, pick = 0;         // rate: matches in this window, and the one acted on
    std::int64_t window_end = 0, act_at = 0;  // interval: this window, and when in it to act
    bool acted_in_window = false;
  };
  bool chooses(Entry& e, std::int64_t now_ns);
  std::vector<Entry> rules_;
  std::mt19937_64 rng_;
};

}  // namespace lnetr
