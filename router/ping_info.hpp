// The ping-info buffer: a node's self description, carried as the payload of
// a ping REPLY and of a discovery PUSH.
//
// Written in the sender's native byte order (detected from the magic): a
// 16-byte header, `nnis` 16-byte nid4 entries (entry 0 is 0@lo and carries
// the buffer's sequence number in its status field), then, if LARGE_ADDR is
// set, variable-length entries for NIDs that need the large form.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "router/bytes.hpp"
#include "router/magic.hpp"
#include "router/nid.hpp"
#include "router/result.hpp"

namespace lnetr {


namespace ping_feature {
inline constexpr std::uint32_t base = 0x01;
inline constexpr std::uint32_t ni_status = 0x02;     // entries carry status (required)
inline constexpr std::uint32_t rte_disabled = 0x04;  // this node is not routing
inline constexpr std::uint32_t multi_rail = 0x08;
inline constexpr std::uint32_t discovery = 0x10;
inline constexpr std::uint32_t large_addr = 0x20;     // large entries follow
inline constexpr std::uint32_t primary_large = 0x40;  // primary NID is the first large entry
inline constexpr std::uint32_t metadata = 0x80;
inline constexpr std::uint32_t all = 0xff;
}  // namespace ping_feature

inline constexpr std::uint32_t kNiStatusUp = 0x15AAC0DE;
inline constexpr std::uint32_t kNiStatusDown = 0xDEADFACE;
inline constexpr std::uint32_t kNiStatusInvalid = 0;

inline constexpr std::size_t kPingHeaderSize = 16;
inline constexpr std::size_t kPingNid4EntrySize = 16;
inline constexpr std::uint32_t kPingMaxNis = 4096;  // Linux lnet_interfaces_max default
inline constexpr std::uint64_t kLoNid4 = 0x0009000000000000ull;

// One NI of the pinged node and its status (UP, DOWN or invalid).
struct PingNi {
  Nid nid;
  std::uint32_t status = kNiStatusUp;
  friend constexpr bool operator==(const PingNi&, const PingNi&) = default;
};

// A decoded ping-info buffer: the header fields plus a view of the entries in
// the caller's bytes (nothing is copied or allocated).
class PingInfo {
 public:
  ByteOrder order = kNativeOrder;
  std::uint32_t features = 0;
  std::uint32_t pid = 0;
  std::uint32_t nnis = 0;      // nid4 entries including 0@lo
  std::uint32_t sequence = 0;  // entry 0's status field
  std::uint32_t msg_size = 0;  // entry 0's ns_msg_size (total size if LARGE_ADDR)

  // Forward iteration over the NIs after 0@lo: nid4 entries 1..nnis-1, then
  // the usable large entries (as Linux, entries whose NID claims more than 20
  // bytes or is the wildcard are skipped).
  class Iterator {
   public:
    using value_type = PingNi;
    using difference_type = std::ptrdiff_t;
    PingNi operator*() const noexcept;
    Iterator& operator++() noexcept;
    Iterator operator++(int) noexcept {
      Iterator it = *this;
      ++*this;
      return it;
    }
    friend bool operator==(const Iterator& a, const Iterator& b) noexcept { return a.off_ == b.off_; }

   private:
    friend class PingInfo;
    Iterator(const PingInfo* pi, std::size_t off) noexcept : pi_(pi), off_(off) {}
    void skip_unusable() noexcept;
    const PingInfo* pi_ = nullptr;
    std::size_t off_ = 0;  // byte offset of the current entry; wire_size() at the end
  };
  Iterator begin() const noexcept;
  Iterator end() const noexcept { return {this, size_}; }

  // NIs begin()..end() yields.
  std::size_t ni_count() const noexcept { return nnis == 0 ? 0 : (nnis - 1) + large_count_; }
  // Bytes the buffer claims to occupy (header, entries, large entries).
  std::size_t wire_size() const noexcept { return size_; }

 private:
  friend Result<PingInfo> decode_ping_info(ByteSpan in) noexcept;
  ByteSpan bytes_;
  std::size_t size_ = 0;
  std::size_t large_count_ = 0;
};

// Decode and validate as Linux does before using a ping reply: magic in
// either order (bad_magic), NI_STATUS set and entry 0 = 0@lo (bad_value),
// 1 <= nnis <= kPingMaxNis and a size no larger than an LNet payload
// (bad_length), every entry present (truncated: the reply was cut short by
// the requester's sink length and should be retried with ping_info_size()),
// nid4 NIDs well formed and not the wildcard (bad_nid), large entries inside
// the claimed size (bad_length).
Result<PingInfo> decode_ping_info(ByteSpan in) noexcept;

// Bytes needed to hold the whole buffer whose first bytes are `prefix`
// (at least 32 bytes: header and entry 0), or an error as decode would give.
Result<std::size_t> ping_info_size(ByteSpan prefix) noexcept;

struct PingInfoSpec {
  std::uint32_t features = ping_feature::ni_status;
  std::uint32_t pid = kPidLustre;
  std::uint32_t sequence = 1;
  std::span<const PingNi> nis;  // in order, primary first; 0@lo is implied
};

// Bytes encode_ping_info() writes for `spec`.
std::size_t ping_info_encoded_size(const PingInfoSpec& spec) noexcept;

// Encode in `order`.  nid4-compatible NIDs become nid4 entries; others become
// large entries.  LARGE_ADDR and PRIMARY_LARGE are derived from the NIs as
// Linux sets them, whatever spec.features says.  The wildcard NID cannot be
// listed (bad_nid).
Result<std::size_t> encode_ping_info(const PingInfoSpec& spec, MutableByteSpan out,
                                     ByteOrder order = kNativeOrder) noexcept;

}  // namespace lnetr
