#include "router/ping_info.hpp"

#include <algorithm>

namespace lnetr {
namespace {

constexpr std::size_t kLargeStatusSize = 4;  // ns_status before the NID
constexpr std::size_t kLargeAnyEntrySize = kLargeStatusSize + Nid::kWireSize;

// The 20-byte NID of a large entry at `nid`: only its significant bytes are on
// the wire (the padding after them is not part of the NID).
Result<Nid> load_large_nid(const std::uint8_t* nid) noexcept {
  std::uint8_t raw[Nid::kWireSize] = {};
  const std::size_t n = nid[0] == Nid::kAnySize ? Nid::kWireSize : std::min<std::size_t>(8 + nid[0], Nid::kWireSize);
  std::copy_n(nid, n, raw);
  return decode_nid20(raw);
}

// Bytes of one large entry whose NID has `nid_size` (its first byte): status
// + significant NID bytes (8 + nid_size), rounded up to 4.
constexpr std::size_t large_entry_size(std::uint8_t nid_size) noexcept {
  if (nid_size == Nid::kAnySize) return kLargeAnyEntrySize;
  return (kLargeStatusSize + 8 + std::size_t{nid_size} + 3) & ~std::size_t{3};
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
  if (total < base) return fail(WireError::bad_length);
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
  pi.large_offset_ = nid4_part_size(h->nnis);

  // A listed NI is a real address: the wildcard is as malformed as a nid4
  // with its top byte set.
  for (std::uint32_t i = 1; i < h->nnis; ++i) {
    auto nid = decode_nid8(load<std::uint64_t>(in.data() + kPingHeaderSize + i * kPingNid4EntrySize, h->order));
    if (!nid || nid->is_any()) return fail(WireError::bad_nid);
  }
  // Large entries: walk them once so that ni() can trust the layout.
  std::size_t off = pi.large_offset_;
  while (off < *size) {
    if (*size - off < kLargeStatusSize + 8) return fail(WireError::bad_length);
    const std::uint8_t* nid = in.data() + off + kLargeStatusSize;
    const std::size_t need = large_entry_size(nid[0]);
    if (nid[0] != Nid::kAnySize && nid[0] > 12) return fail(WireError::bad_nid);
    if (*size - off < need) return fail(WireError::bad_length);
    auto large = load_large_nid(nid);
    if (!large || large->is_any()) return fail(WireError::bad_nid);
    ++pi.large_count_;
    off += need;
  }
  return pi;
}

PingNi PingInfo::ni(std::size_t i) const noexcept {
  if (i + 1 < nnis) {
    const std::uint8_t* e = bytes_.data() + kPingHeaderSize + (i + 1) * kPingNid4EntrySize;
    return {Nid::from_nid4(load<std::uint64_t>(e, order)), load<std::uint32_t>(e + 8, order)};
  }
  std::size_t off = large_offset_;
  for (std::size_t k = i + 1 - nnis; k > 0; --k) {
    off += large_entry_size(bytes_[off + kLargeStatusSize]);
  }
  const std::uint8_t* e = bytes_.data() + off;
  auto nid = load_large_nid(e + kLargeStatusSize);  // validated by decode_ping_info
  return {nid ? *nid : Nid::any(), load<std::uint32_t>(e, order)};
}

std::size_t ping_info_encoded_size(const PingInfoSpec& spec) noexcept {
  std::size_t size = kPingHeaderSize + kPingNid4EntrySize;
  for (const PingNi& ni : spec.nis) size += ni.nid.is_nid4() ? kPingNid4EntrySize : large_entry_size(ni.nid.size);
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
  if (nnis > kPingMaxNis) return fail(WireError::bad_length);
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
    const std::size_t len = large_entry_size(ni.nid.size);
    std::copy_n(raw, std::min(len - kLargeStatusSize, Nid::kWireSize), e + kLargeStatusSize);
    e += len;
  }
  return size;
}

}  // namespace lnetr
