#include "router/local_msgs.hpp"

#include <algorithm>

namespace lnetr {

bool is_ping(const LnetHeader& h) noexcept {
  if (h.type != MsgType::get) return false;
  const GetFields g = h.get();
  return g.ptl_index == kLnetReservedPortal && g.match_bits == kPingMatchBits;
}

bool is_push(const LnetHeader& h) noexcept {
  if (h.type != MsgType::put) return false;
  const PutFields p = h.put();
  return p.ptl_index == kLnetReservedPortal && p.match_bits == kPingMatchBits;
}

LnetHeader make_put(const ProcessId& src, const ProcessId& dest, std::uint32_t portal, std::uint64_t match_bits,
                    const WireHandle& ack_wmd, std::uint64_t hdr_data, std::uint32_t payload_length,
                    std::uint32_t offset) noexcept {
  LnetHeader h;
  h.src_nid = src.nid;
  h.src_pid = src.pid;
  h.dest_nid = dest.nid;
  h.dest_pid = dest.pid;
  h.payload_length = payload_length;
  h.set(PutFields{ack_wmd, match_bits, hdr_data, portal, offset});
  return h;
}

LnetHeader make_get(const ProcessId& src, const ProcessId& dest, std::uint32_t portal, std::uint64_t match_bits,
                    const WireHandle& return_wmd, std::uint32_t sink_length, std::uint32_t src_offset) noexcept {
  LnetHeader h;
  h.src_nid = src.nid;
  h.src_pid = src.pid;
  h.dest_nid = dest.nid;
  h.dest_pid = dest.pid;
  h.payload_length = 0;
  h.set(GetFields{return_wmd, match_bits, portal, src_offset, sink_length});
  return h;
}

LnetHeader make_reply(const LnetHeader& get, const Nid& me, std::uint32_t payload_length) noexcept {
  LnetHeader h;
  h.src_nid = me;
  h.src_pid = get.dest_pid;
  h.dest_nid = get.src_nid;
  h.dest_pid = get.src_pid;
  h.payload_length = payload_length;
  h.set(ReplyFields{get.get().return_wmd});
  return h;
}

LnetHeader make_ack(const LnetHeader& put, const Nid& me, std::uint32_t mlength) noexcept {
  const PutFields p = put.put();
  LnetHeader h;
  h.src_nid = me;
  h.src_pid = put.dest_pid;
  h.dest_nid = put.src_nid;
  h.dest_pid = put.src_pid;
  h.payload_length = 0;
  h.set(AckFields{p.ack_wmd, p.match_bits, mlength});
  return h;
}

ByteSpan ping_reply_payload(const LnetHeader& get, ByteSpan info) noexcept {
  const GetFields g = get.get();
  const std::size_t off = std::min<std::size_t>(g.src_offset, info.size());
  return info.subspan(off, std::min<std::size_t>(g.sink_length, info.size() - off));
}

}  // namespace lnetr
