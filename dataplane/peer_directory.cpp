// PeerDirectory (message.hpp): the worker's peers, listed for readers on
// other threads, deleted once no reader can see them.
#include "dataplane/message.hpp"

namespace lnetr::dp {

PeerDirectory::~PeerDirectory() {
  const std::size_t n = size_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < n; ++i) delete chunks_[i / kChunk].load(std::memory_order_relaxed)[i % kChunk].load();
  for (const Retired& r : retired_) delete r.peer;
  for (auto& c : chunks_) delete[] c.load(std::memory_order_relaxed);
}

PeerNi* PeerDirectory::create(const Nid& nid, std::uint32_t ni) {
  auto* p = new PeerNi();
  p->nid = nid;
  p->ni = ni;
  std::size_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = size_.load(std::memory_order_relaxed);
    if (slot == kChunk * kMaxChunks) return p;  // unlisted
    if (chunks_[slot / kChunk].load(std::memory_order_relaxed) == nullptr)
      chunks_[slot / kChunk].store(new std::atomic<PeerNi*>[kChunk](), std::memory_order_release);
  }
  p->dir_slot = static_cast<std::uint32_t>(slot);
  p->listed = true;
  // Published with its fixed fields set (sequentially consistent store).
  chunks_[slot / kChunk].load(std::memory_order_relaxed)[slot % kChunk].store(p);
  if (slot == size_.load(std::memory_order_relaxed)) size_.store(slot + 1, std::memory_order_release);
  return p;
}

void PeerDirectory::retire(PeerNi* p) {
  if (p->listed) {
    chunks_[p->dir_slot / kChunk].load(std::memory_order_relaxed)[p->dir_slot % kChunk].store(nullptr);
    free_slots_.push_back(p->dir_slot);
    p->listed = false;
  }
  retired_.push_back({gen_.load(std::memory_order_relaxed), p});
  gen_.fetch_add(1);  // after the entry was emptied (sequentially consistent)
}

std::size_t PeerDirectory::reclaim() {
  if (retired_.empty()) return 0;
  const std::uint64_t reader = reader_gen_.load();
  std::size_t n = 0;
  // Retired in generation order: those before the reader's start (or all,
  // with no reader) are out of every walk's reach.
  while (n < retired_.size() && (reader == 0 || retired_[n].gen < reader)) delete retired_[n++].peer;
  retired_.erase(retired_.begin(), retired_.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

}  // namespace lnetr::dp
