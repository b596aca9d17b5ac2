// Headers of the messages an LNet node originates itself: pings and pushes,
// PUT/GET of its own, and the answers LNet owes (REPLY to a GET, ACK to a
// PUT that asks for one).  Used by the router for its ping target and push
// target and by lnetr-peer for everything it sends.
#pragma once

#include <cstdint>

#include "router/lnet_header.hpp"

namespace lnetr {

inline constexpr std::uint32_t kPingSinkLnetctl = 3960;  // lnetctl ping
inline constexpr std::uint32_t kPingSinkDiscovery = 272; // discovery, router checks, recovery

// A GET on the reserved portal with the ping match bits.
bool is_ping(const LnetHeader& h) noexcept;
// A PUT on the reserved portal with the ping match bits: a discovery push.
bool is_push(const LnetHeader& h) noexcept;

LnetHeader make_put(const ProcessId& src, const ProcessId& dest, std::uint32_t portal, std::uint64_t match_bits,
                    const WireHandle& ack_wmd, std::uint64_t hdr_data, std::uint32_t payload_length,
                    std::uint32_t offset = 0) noexcept;
LnetHeader make_get(const ProcessId& src, const ProcessId& dest, std::uint32_t portal, std::uint64_t match_bits,
                    const WireHandle& return_wmd, std::uint32_t sink_length, std::uint32_t src_offset = 0) noexcept;

// The REPLY to `get`, sent from `me` (the NID it was addressed to) with
// `payload_length` bytes.
LnetHeader make_reply(const LnetHeader& get, const Nid& me, std::uint32_t payload_length) noexcept;
// The ACK of `put` (which must want one: ack_wmd not none) from `me`.
LnetHeader make_ack(const LnetHeader& put, const Nid& me, std::uint32_t mlength) noexcept;

// What a ping target returns for `get`: the part of the ping-info buffer
// `info` from the GET's src_offset, truncated to its sink_length (Linux's
// truncating, remotely managed ping MD).
ByteSpan ping_reply_payload(const LnetHeader& get, ByteSpan info) noexcept;

}  // namespace lnetr
