// Wire handles of the operations lnetr-peer has in flight, and the matching
// of the answers (ACK, REPLY) that name them.
//
// A PUT asking for an ACK names an ack_wmd, a GET a return_wmd; the target
// echoes it as the answer's dst_wmd, and that is all the originator has to
// find the operation (LNet's MD handle lookup).  Here:
//   interface cookie = the process's incarnation (one value per run, so a
//                      late answer from a previous run never matches);
//   object cookie    = (sequence << kSlotBits) | slot: a counter that is
//                      never reused in the process's life (upper bits) and
//                      the slot of the operation (low bits), so the lookup
//                      is one array access and a comparison.
// Retiring a handle (answer received, operation failed or timed out) makes
// any later answer naming it unmatched.  Fixed capacity, allocated once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "router/lnet_header.hpp"

namespace lnetr::peer {

template <class T>
class HandleTable {
 public:
  static constexpr unsigned kSlotBits = 16;
  static constexpr std::size_t kCapacity = std::size_t{1} << kSlotBits;

  explicit HandleTable(std::uint64_t interface_cookie, std::size_t capacity = 4096)
      : interface_(interface_cookie), slots_(capacity < kCapacity ? capacity : kCapacity) {
    free_.reserve(slots_.size());
    for (std::size_t i = slots_.size(); i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
  }

  // A new handle naming `owner`; WireHandle::none() if every slot is taken.
  WireHandle issue(T* owner) noexcept {
    if (free_.empty()) return WireHandle::none();
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    const std::uint64_t cookie = (++sequence_ << kSlotBits) | slot;
    slots_[slot] = {cookie, owner};
    ++live_;
    return {interface_, cookie};
  }

  // The owner named by `h`, or nullptr if no live handle is `h`.
  T* find(const WireHandle& h) const noexcept {
    if (h.interface_cookie != interface_) return nullptr;
    const std::size_t slot = h.object_cookie & (kCapacity - 1);
    if (slot >= slots_.size()) return nullptr;
    const Slot& s = slots_[slot];
    return s.owner != nullptr && s.cookie == h.object_cookie ? s.owner : nullptr;
  }

  // Forget `h` (no-op if it is not live).
  void retire(const WireHandle& h) noexcept {
    if (find(h) == nullptr) return;
    const auto slot = static_cast<std::uint32_t>(h.object_cookie & (kCapacity - 1));
    slots_[slot] = {};
    free_.push_back(slot);
    --live_;
  }

  std::size_t live() const noexcept { return live_; }
  std::size_t capacity() const noexcept { return slots_.size(); }
  std::uint64_t interface_cookie() const noexcept { return interface_; }

 private:
  struct Slot {
    std::uint64_t cookie = 0;
    T* owner = nullptr;
  };
  std::uint64_t interface_;
  std::uint64_t sequence_ = 0;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;
  std::size_t live_ = 0;
};

}  // namespace lnetr::peer
