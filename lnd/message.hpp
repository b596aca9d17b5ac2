// What every LND engine (socklnd, o2iblnd) exchanges with the LNet layer
// above it (the router's forwarder, lnetr-peer's endpoint): a received
// message (Rx), a message to send (Tx) and the Upper callbacks.  The Upper
// never sees which LND carried a message; the worker routes send() and
// resume() to the engine of the NI's LND.
//
// Ownership of a message in flight:
//   receive  head decoded by the engine -> Upper::on_head() names the sink
//            (a buffer the Upper owns), asks to discard, or defers (no
//            buffer yet: the engine stops taking that connection's data,
//            which is the back-pressure: socklnd stops reading the socket,
//            o2iblnd holds the receive buffer and so the sender's credit)
//            -> payload placed in the sink -> Upper::on_received() (or
//            on_rx_aborted() if the connection dies).
//   send     Upper fills a Tx it owns and calls the engine's send(); the
//            engine sends header and payload from the Upper's memory ->
//            Upper::on_sent(tx, status) hands it back once the engine and
//            its transport are done with that memory.
#pragma once

#include <chrono>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "lnd/ref_chain.hpp"
#include "router/bytes.hpp"
#include "router/lnet_header.hpp"
#include "router/nid.hpp"

namespace lnetr::lnd {

using Clock = std::chrono::steady_clock;

// socklnd's message header (its wire.hpp checks this against its layout).
inline constexpr std::size_t kSockHeaderMax = 24;

// A message to send: filled by the Upper, owned by it, lent to an engine
// from send() until Upper::on_sent().
struct Tx {
  LnetHeader hdr;
  ByteSpan payload;  // hdr.payload_length bytes, in the Upper's memory
  // The payload memory's device reference, if any (Stream::sendv_lent): a
  // DPDK port may then send the memory itself, which its owner keeps until
  // the device has let go of it (the dataplane counts those references).
  void* payload_dev = nullptr;
  // Or the payload as runs, each with its device reference (a payload
  // received by reference, ref_chain.hpp): sent from there when set.
  std::span<const RefChain::Piece> pieces;
  // A GET the Upper sends itself (not a forwarded one): where the REPLY's
  // payload is to land, hdr.get().sink_length bytes.  An LND that can have
  // the target write the REPLY straight there (o2iblnd's GET_REQ) does so
  // for a GET sent directly to its target; the REPLY then still reaches the
  // Upper as a received message, its payload already in place.  Empty: the
  // REPLY comes back as an ordinary message.
  MutableByteSpan reply_sink;
  void* cookie = nullptr;

  // ---- the engine's part, while it holds the Tx ----
  Tx* next = nullptr;
  Clock::time_point queued_at{};
  // socklnd: the socklnd + LNet header bytes, progress, lent positions.
  std::uint32_t wire_len = 0;  // socklnd + LNet header bytes in wire[]
  std::uint32_t sent = 0;      // bytes of wire[] + payload written so far
  std::array<std::uint8_t, kSockHeaderMax + kLnetHeader16Size> wire{};
  std::uint64_t stream_end = 0;    // written to a lending stream: its position after the last byte
  Clock::time_point written_at{};  // ... and when (unreleased for sock_timeout: the peer is stuck)
  std::int32_t held_status = 0;    // ... the status to hand it back with once released
  std::size_t piece = 0, piece_at = 0;  // pieces: the one being written, and its payload offset
  // o2iblnd: the REPLY this Tx carries answers an optimized GET (see
  // Rx::reply): the engine's record of it, and that record's generation.
  void* o2ib_get = nullptr;
  std::uint64_t o2ib_get_gen = 0;

  std::size_t total() const noexcept { return wire_len + payload.size(); }
};

// One received message, from its head to the end of its payload.
struct Rx {
  void* conn = nullptr;  // the engine's handle of this receive
  Nid from;              // the peer (previous hop)
  Nid ni;                // the local NI it arrived on
  LnetHeader hdr;
  // Set by Upper::on_head(), or before the engine's resume() after a deferral.
  MutableByteSpan sink;  // hdr.payload_length bytes
  // With a sink: the stream may leave payload bytes where they arrived and
  // record them here instead (Stream::lend).
  RefChain* chain = nullptr;
  bool discard = false;
  void* cookie = nullptr;
  // A GET the Upper answers (a ping): the Tx it will send as the REPLY, set
  // in on_head().  An LND whose REPLY to this GET must travel on the GET's
  // own exchange (o2iblnd's GET_REQ: RDMA into the requester's sink, then
  // GET_DONE) keeps it to recognise that Tx when it is sent; otherwise, and
  // for every other LND, the REPLY is an ordinary message.  A GET left
  // without one was matched by nothing (o2iblnd answers GET_DONE -ENODATA).
  Tx* reply = nullptr;
};

enum class RxVerdict : std::uint8_t {
  accept,  // rx.sink (or rx.discard) set: take the payload now
  defer,   // no resources: hold this connection's data until resume()
  reject,  // protocol error: close the connection
};

class Upper {
 public:
  virtual RxVerdict on_head(Rx& rx) = 0;
  virtual void on_received(Rx& rx) = 0;
  // The connection died after on_head() accepted or deferred `rx`.
  virtual void on_rx_aborted(Rx& rx) = 0;
  // status 0: every byte handed to the transport (a lending stream: and
  // released by it; RDMA: written and the completion sent); else -errno.
  virtual void on_sent(Tx& tx, int status) = 0;
  // A peer's last connection is gone and none is being made (Linux's
  // "peer down" notification to LNet).
  virtual void on_peer_down(const Nid& peer) = 0;

 protected:
  ~Upper() = default;
};

}  // namespace lnetr::lnd
