// A few recently used entries of a table keyed by NID, in front of it.
// A worker's per-message lookups (the previous hop of each message
// received, the next hop of each sent, the LND's peer for each send) hit
// few peers in a row: a burst from one connection, the replies to one
// next hop.  A hit costs one compare of two NIDs, where the table costs a
// hash, a division and a walk of its bucket.  Direct-mapped: each NID has
// one slot, picked by a cheap fold of its fields (colliding NIDs only
// evict each other: the table still answers).  The owner forgets an
// entry before it frees what the entry points to.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "router/nid.hpp"

namespace lnetr {

template <class T, unsigned Bits = 4>
class NidCache {
 public:
  T* find(const Nid& nid) const noexcept {
    const Slot& s = slots_[index(nid)];
    return s.value != nullptr && s.nid == nid ? s.value : nullptr;
  }
  void put(const Nid& nid, T* value) noexcept { slots_[index(nid)] = {nid, value}; }
  void forget(const Nid& nid) noexcept {
    Slot& s = slots_[index(nid)];
    if (s.nid == nid) s.value = nullptr;
  }

 private:
  static std::size_t index(const Nid& n) noexcept {
    std::uint32_t a = 0, b = 0;
    std::memcpy(&a, n.addr.data(), 4);       // an IPv4 address, or an IPv6 one's first word
    std::memcpy(&b, n.addr.data() + 12, 4);  // ... and its last
    const std::uint32_t x = a ^ b ^ (std::uint32_t{n.number} << 8) ^ n.type;
    return (x * 0x9e3779b1u) >> (32 - Bits);
  }
  struct Slot {
    Nid nid;
    T* value = nullptr;
  };
  std::array<Slot, std::size_t{1} << Bits> slots_{};
};

}  // namespace lnetr
