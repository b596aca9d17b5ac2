// A PUT to send in tests (any LND): an LNet PUT header (portal 4, match bits
// 0x1234, no ACK) from `from` to `to` carrying `payload` (borrowed: it must
// outlive the Tx's sending).
#pragma once

#include <cstdint>
#include <vector>

#include "lnd/message.hpp"

namespace lnetr::test {

inline lnd::Tx make_put(const Nid& from, const Nid& to, const std::vector<std::uint8_t>& payload) {
  lnd::Tx t;
  t.hdr.dest_nid = to;
  t.hdr.src_nid = from;
  t.hdr.payload_length = static_cast<std::uint32_t>(payload.size());
  t.hdr.set(PutFields{WireHandle::none(), 0x1234, 0, 4, 0});
  t.payload = payload;
  return t;
}

}  // namespace lnetr::test
