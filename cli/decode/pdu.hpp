// The decoded protocol data units of a capture: what lnetr-decode prints and
// what the vector tests compare with the annotated captures.
//
// A Pdu owns a copy of its wire bytes (`bytes`) and holds the codec's
// decoded view of them.  Some decoded values are views into `bytes` (an
// IMMEDIATE's payload, RDMA fragments, ping-info entries), so a Pdu is
// move-only: moving a std::vector keeps its buffer, copying would not.
#pragma once

#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include "cli/decode/frame.hpp"
#include "cli/decode/roce.hpp"
#include "lnd/o2iblnd/wire.hpp"
#include "lnd/socklnd/wire.hpp"
#include "router/lnet_header.hpp"
#include "router/ping_info.hpp"

namespace lnetr::decode {

// ---- socklnd ------------------------------------------------------------------

// Which end of a socklnd TCP connection sent a PDU.
enum class Side : std::uint8_t { connector, acceptor };

// Where a socklnd PDU lies: connection `conn` (numbered in order of
// appearance), the sender, and the byte range [begin, end) of the sender's
// TCP stream.
struct SockWhere {
  std::size_t conn = 0;
  Side from = Side::connector;
  Endpoint src;
  Endpoint dst;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

// An acceptor request (connector side) or the 16-byte acceptor-format record
// a Linux acceptor sends back when the first bytes were not a request it
// understands.  `view` is the request as the codec decodes it; for a wrong
// magic (with version 1 or 2) it is decoded from a copy carrying the right
// one, so that an operator still sees which NID the peer asked for
// (`magic`/`version` stay raw).  An unknown version leaves it empty: the
// NID's layout depends on the version.
struct AcceptorPdu {
  bool answer = false;
  std::uint32_t magic = 0;
  std::uint32_t version = 0;
  std::optional<sock::AcceptorRequest> view;
};

// A HELLO, or HELLO-shaped bytes with a wrong magic or an unknown version
// (then `view` is decoded as V3, like AcceptorPdu).
struct HelloPdu {
  Side from = Side::connector;
  std::uint32_t magic = 0;
  std::uint32_t version = 0;
  ByteOrder order = ByteOrder::little;
  std::optional<sock::Hello> view;
};

// A socklnd message after the handshake.  `msg.payload` and `ping` view
// the Pdu's bytes.
struct SockMsgPdu {
  std::uint32_t version = 3;
  ByteOrder order = ByteOrder::little;
  sock::Message msg;
  std::optional<PingInfo> ping;  // the payload, if it is a ping-info buffer
};

// Stream bytes that are not (or not yet) a PDU.
struct StreamBytesPdu {
  enum class Why : std::uint8_t {
    undecodable,    // not a valid element; the connection is unusable from here
    mid_stream,     // capture started inside the connection; skipped to the first message
    unfinished,     // the capture ended inside this element
    gap,            // bytes after a hole the capture never filled
  } why = Why::undecodable;
};

// ---- RoCE ---------------------------------------------------------------------

// Where a RoCEv2 packet was seen and its transport headers.
struct RoceWhere {
  Endpoint src;
  Endpoint dst;
  // Transport headers (payload view dropped); nothing if they did not parse.
  std::optional<RocePacket> packet;
};

// A RoCE packet whose payload is not an LNet PDU (ACK, RDMA WRITE data, a
// SEND First/Middle still being reassembled).
struct PacketPdu {};

// An o2iblnd message carried by an RC SEND (reassembled if it took several
// packets).  `bytes` is the message.
struct O2ibPdu {
  o2ib::DecodedMsg msg;
  std::optional<PingInfo> ping;  // an IMMEDIATE's payload, if it is ping info
};

// An IB CM MAD (UD SEND to QP1).  `bytes` is the CM private data.
struct CmPdu {
  CmMessage cm;
  std::optional<CmaHeader> cma;             // rdma_cm header (REQ of an IP service id)
  std::size_t ulp_offset = 0;               // where the o2iblnd data starts in `bytes`
  std::optional<o2ib::DecodedMsg> msg;      // CONNREQ (REQ), CONNACK (REP)
  std::optional<o2ib::DecodedReject> rej;   // REJ private data
  bool protocol_probe = false;              // LNet "future protocol" magic instead of o2iblnd's
};

using PduWhere = std::variant<SockWhere, RoceWhere>;
using PduWhat = std::variant<AcceptorPdu, HelloPdu, SockMsgPdu, StreamBytesPdu, PacketPdu, O2ibPdu, CmPdu>;

struct Pdu {
  FrameSpan frames;
  PduWhere where;
  PduWhat what;
  // Why the codec refused the bytes (the PDU is then shown as far as it
  // could be classified); nothing if they decoded.
  std::optional<WireError> error;
  std::vector<std::uint8_t> bytes;

  Pdu() = default;
  Pdu(Pdu&&) noexcept = default;
  Pdu& operator=(Pdu&&) noexcept = default;
  Pdu(const Pdu&) = delete;
  Pdu& operator=(const Pdu&) = delete;

  const SockWhere* sock() const noexcept { return std::get_if<SockWhere>(&where); }
  const RoceWhere* roce() const noexcept { return std::get_if<RoceWhere>(&where); }
  template <class T>
  const T* as() const noexcept { return std::get_if<T>(&what); }
};

// The LNet header a PDU carries (socklnd LNET message, IMMEDIATE, PUT_REQ,
// GET_REQ), or nullptr.
const LnetHeader* lnet_header_of(const Pdu& p) noexcept;

// The PDU's bytes as lnetr's encoders write them from the decoded values
// (acceptor request, HELLO, socklnd message, o2iblnd message, CONNREQ /
// CONNACK, reject), for comparison with `bytes`; nothing for PDUs that did
// not decode or carry no LNet structure.  A ping-info payload is re-encoded
// too, so the result covers every byte the codecs understand.
std::optional<std::vector<std::uint8_t>> reencode(const Pdu& p);

// If `payload` should be a ping-info buffer (the payload of a discovery
// PUSH, or of a REPLY that starts with the ping magic: the GET it answers may
// be outside the capture) return its decode (which may have failed), else
// nothing.
std::optional<Result<PingInfo>> ping_info_in(const LnetHeader& h, ByteSpan payload) noexcept;

}  // namespace lnetr::decode
