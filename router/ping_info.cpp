#include "router/ping_info.hpp"

#include <algorithm>

#include "router/lnet_header.hpp"

namespace lnetr {
namespace {

constexpr std::size_t kLargeStatusSize = 4;  // ns_status before the NID

// Bytes of the large entry at `e`, keyed on its NID's first two bytes as
// Linux's walk is: the wildcard takes a whole 20-byte NID, a nid4-sized NID
// the size of a nid4 entry, others status + significant NID bytes (8 + size)
// rounded up to 4.  Needs kLargeStatusSize + 2 bytes at `e`.
std::size_t large_entry_size(const std::uint8_t* e) noexcept {
  const std::uint8_t size = e[kLargeStatusSize], type = e[kLargeStatusSize + 1];
  if (type == Nid::kAnyType) return kLargeStatusSize + Nid::kWireSize;
  if (size == 0) return kPingNid4EntrySize;
  return (kLargeStatusSize + 8 + std::size_t{size} + 3) & ~std::size_t{3};
}

constexpr std::size_t large_entry_size(const Nid& nid) noexcept {
  return (kLargeStatusSize + 8 + std::size_t{nid.size} + 3) & ~std::size_t{3};
}

// The NID of the large entry at `e` if it names a usable NI: only its
// significant bytes are on the wire (padding after them is not part of it).
// Linux skips entries claiming more than 20 bytes; the wildcard names no NI.
Result<Nid> large_entry_nid(const std::uint8_t* e) noexcept {
  const std::uint8_t* nid = e + kLargeStatusSize;
  if (nid[0] > Nid::kWireSize - 8 || nid[1] == Nid::kAnyType) return fail(WireError::bad_nid);
  std::uint8_t raw[Nid::kWireSize] = {};
  std::copy_n(nid, 8 + std::size_t{nid[0]}, raw);
  return decode_nid20(raw);
}

struct Header {
  ByteOrder order;
  std::uint32_t features, pid, nnis, sequence, msg_size;
};

// Header and entry 0, the part every size computation needs.
Result<Header> decode_head(ByteSpan in) noexcept {
  if (in.size() < kPingHeaderSize) return fail(WireError::truncated);
  const MagicMatch m = match_magic(in.data(), kPingMagic);
  if (!m.matched) return fail(WireError::bad_magic);
  Header h{m.order, load<std::uint32_t>(in.data() + 4, m.order), load<std::uint32_t>(in.data() + 8, m.order),
           load<std::uint32_t>(in.data() + 12, m.order), 0, 0};
  if (!(h.features & ping_feature::ni_status)) return fail(WireError::bad_value);
  if (h.nnis < 1 || h.nnis > kPingMaxNis) return fail(WireError::bad_length);
  if (in.size() < kPingHeaderSize + kPingNid4EntrySize) return fail(WireError::truncated);
  const std::uint8_t* e0 = in.data() + kPingHeaderSize;
  if (load<std::uint64_t>(e0, m.order) != kLoNid4) return fail(WireError::bad_value);
  h.sequence = load<std::uint32_t>(e0 + 8, m.order);
  h.msg_size = load<std::uint32_t>(e0 + 12, m.order);
  return h;
}

std::size_t nid4_part_size(std::uint32_t nnis) noexcept {
  return kPingHeaderSize + std::size_t{nnis} * kPingNid4EntrySize;
}

Result<std::size_t> claimed_size(const Header& h) noexcept {
  const std::size_t base = nid4_part_size(h.nnis);
  if (!(h.features & ping_feature::large_addr)) return base;
  const std::size_t total = h.msg_size & ~std::uint32_t{3};
  // Never trust a length field: a ping info travels as one LNet payload.
  if (total < base || total > kLnetMtu) return fail(WireError::bad_length);
  return total;
}

}  // namespace

Result<std::size_t> ping_info_size(ByteSpan prefix) noexcept {
  auto h = decode_head(prefix);
  if (!h) return fail(h.error());
  return claimed_size(*h);
}

Result<PingInfo> decode_ping_info(ByteSpan in) noexcept {
  auto h = decode_head(in);
  if (!h) return fail(h.error());
  auto size = claimed_size(*h);
  if (!size) return fail(size.error());
  if (in.size() < *size) return fail(WireError::truncated);

  PingInfo pi;
  pi.order = h->order;
  pi.features = h->features;
  pi.pid = h->pid;
  pi.nnis = h->nnis;
  pi.sequence = h->sequence;
  pi.msg_size = h->msg_size;
  pi.bytes_ = in.first(*size);
  pi.size_ = *size;

  // A listed NI is a real address: the wildcard is as malformed as a nid4
  // with its top byte set.
  for (std::uint32_t i = 1; i < h->nnis; ++i) {
    auto nid = decode_nid8(load<std::uint64_t>(in.data() + kPingHeaderSize + i * kPingNid4EntrySize, h->order));
    if (!nid || nid->is_any()) return fail(WireError::bad_nid);
  }
  // Large entries: walk them once so that iteration can trust the layout.
  for (std::size_t off = nid4_part_size(h->nnis); off < *size;) {
    if (*size - off < kLargeStatusSize + 8) return fail(WireError::bad_length);
    const std::size_t len = large_entry_size(in.data() + off);
    if (*size - off < len) return fail(WireError::bad_length);
    if (large_entry_nid(in.data() + off)) ++pi.large_count_;
    off += len;
  }
  return pi;
}

PingInfo::Iterator PingInfo::begin() const noexcept {
  Iterator it{this, kPingHeaderSize + kPingNid4EntrySize};  // after 0@lo
  it.skip_unusable();
  return it;
}

// In the large part, move past entries that name no usable NI.
void PingInfo::Iterator::skip_unusable() noexcept {
  const std::size_t large = nid4_part_size(pi_->nnis);
  while (off_ >= large && off_ < pi_->size_ && !large_entry_nid(pi_->bytes_.data() + off_))
    off_ += large_entry_size(pi_->bytes_.data() + off_);
}

PingInfo::Iterator& PingInfo::Iterator::operator++() noexcept {
  off_ += off_ < nid4_part_size(pi_->nnis) ? kPingNid4EntrySize : large_entry_size(pi_->bytes_.data() + off_);
  skip_unusable();
  return *this;
}

PingNi PingInfo::Iterator::operator*() const noexcept {
  const std::uint8_t* e = pi_->bytes_.data() + off_;
  if (off_ < nid4_part_size(pi_->nnis))
    return {Nid::from_nid4(load<std::uint64_t>(e, pi_->order)), load<std::uint32_t>(e + 8, pi_->order)};
  auto nid = large_entry_nid(e);  // usable: skip_unusable() stopped here
  return {nid ? *nid : Nid::any(), load<std::uint32_t>(e, pi_->order)};
}

std::size_t ping_info_encoded_size(const PingInfoSpec& spec) noexcept {
  std::size_t size = kPingHeaderSize + kPingNid4EntrySize;
  for (const PingNi& ni : spec.nis) size += ni.nid.is_nid4() ? kPingNid4EntrySize : large_entry_size(ni.nid);
  return size;
}

Result<std::size_t> encode_ping_info(const PingInfoSpec& spec, MutableByteSpan out, ByteOrder order) noexcept {
  const std::size_t size = ping_info_encoded_size(spec);
  if (out.size() < size) return fail(WireError::truncated);
  // LARGE_ADDR and PRIMARY_LARGE describe the layout, so they are derived
  // from the NIs, never taken from the caller.
  std::uint32_t features = spec.features & ~(ping_feature::large_addr | ping_feature::primary_large);
  std::uint32_t nnis = 1;
  std::size_t nlarge = 0;
  for (const PingNi& ni : spec.nis) {
    if (ni.nid.is_any()) return fail(WireError::bad_nid);
    if (ni.nid.is_nid4()) ++nnis; else ++nlarge;
  }
  if (nnis > kPingMaxNis || size > kLnetMtu) return fail(WireError::bad_length);
  if (nlarge != 0) {
    // As Linux builds it: LARGE_ADDR with the total size in entry 0, and
    // PRIMARY_LARGE when the first NI is a large one.
    features |= ping_feature::large_addr;
    if (!spec.nis.front().nid.is_nid4()) features |= ping_feature::primary_large;
  }

  std::uint8_t* p = out.data();
  std::fill_n(p, size, 0);
  store(p, kPingMagic, order);
  store(p + 4, features, order);
  store(p + 8, spec.pid, order);
  store(p + 12, nnis, order);
  std::uint8_t* e = p + kPingHeaderSize;
  store(e, kLoNid4, order);
  store(e + 8, spec.sequence, order);
  if (nlarge != 0) store(e + 12, static_cast<std::uint32_t>(size), order);
  e += kPingNid4EntrySize;
  for (const PingNi& ni : spec.nis) {
    if (!ni.nid.is_nid4()) continue;
    store(e, ni.nid.to_nid4(), order);
    store(e + 8, ni.status, order);
    e += kPingNid4EntrySize;
  }
  for (const PingNi& ni : spec.nis) {
    if (ni.nid.is_nid4()) continue;
    store(e, ni.status, order);
    std::uint8_t raw[Nid::kWireSize];
    encode_nid20(ni.nid, raw);
    const std::size_t len = large_entry_size(ni.nid);
    std::copy_n(raw, std::min(len - kLargeStatusSize, Nid::kWireSize), e + kLargeStatusSize);
    e += len;
  }
  return size;
}

}  // namespace lnetr
