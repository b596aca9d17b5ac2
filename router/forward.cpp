#include "router/forward.hpp"
#include "router/enum_names.hpp"

#include <algorithm>
#include <array>

namespace lnetr {

LNETR_ENUM_NAMES(, DropReason, LNETR_DROP_REASONS)

std::uint32_t cpt_of(const Nid& nid, std::uint32_t ncpts) noexcept {
  if (ncpts <= 1) return 0;
  std::uint64_t sum = 0;
  if (nid.is_nid4()) {
    const std::uint64_t v = nid.to_nid4();
    for (int i = 0; i < 8; ++i) sum += (v >> (8 * i)) & 0xff;
  } else {
    sum = nid.size + nid.type + (nid.number >> 8) + (nid.number & 0xff);
    for (std::uint8_t b : nid.addr) sum += b;
  }
  return static_cast<std::uint32_t>(sum % ncpts);
}

std::uint32_t rss_hash(ByteSpan input) noexcept {
  // Each set input bit, most significant first, adds the 32 key bits that
  // start at its position.
  std::uint32_t hash = 0;
  std::uint32_t window = (std::uint32_t{kRssKey[0]} << 24) | (std::uint32_t{kRssKey[1]} << 16) |
                         (std::uint32_t{kRssKey[2]} << 8) | kRssKey[3];
  const std::size_t bits = std::min<std::size_t>(input.size(), kRssKey.size() - 4) * 8;
  for (std::size_t bit = 0; bit < bits; ++bit) {
    if ((input[bit / 8] >> (7 - bit % 8)) & 1) hash ^= window;
    const std::size_t next = bit + 32;  // the key bit that enters the window
    window = (window << 1) | (next / 8 < kRssKey.size() ? (kRssKey[next / 8] >> (7 - next % 8)) & 1u : 0u);
  }
  return hash;
}

std::uint32_t rss_hash_ipv4(std::uint32_t src, std::uint32_t dst) noexcept {
  std::array<std::uint8_t, 8> input{};
  store_be<std::uint32_t>(input.data(), src);
  store_be<std::uint32_t>(input.data() + 4, dst);
  return rss_hash(input);
}

bool LocalNis::is_local(const Nid& n) const noexcept {
  return std::find(nids.begin(), nids.end(), n) != nids.end();
}

bool LocalNis::on_local_net(Net net) const noexcept {
  return std::any_of(nids.begin(), nids.end(), [net](const Nid& n) { return n.net() == net; });
}

Verdict classify(const LnetHeader& h, const Nid& arrival, const LocalNis& locals, bool routing_enabled) noexcept {
  if (h.dest_nid == arrival) return {Disposition::for_us, DropReason::not_for_us};
  if (h.dest_nid.net() == arrival.net() || locals.is_local(h.dest_nid)) return {Disposition::reject, DropReason::protocol};
  if (!routing_enabled) return {Disposition::drop, DropReason::routing_disabled};
  return {Disposition::forward, DropReason::no_route};
}

}  // namespace lnetr
