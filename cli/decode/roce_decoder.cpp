#include "cli/decode/roce_decoder.hpp"

namespace lnetr::decode {
namespace {

constexpr std::uint32_t kPsnHalfRange = (kPsnMask + 1) / 2;
// A request at most this far behind the queue pair's next PSN is a
// retransmission (a requester never has more outstanding); further back, the
// queue pair number was reused by a new connection with its own start PSN.
constexpr std::int32_t kRetransmitWindow = 1 << 16;

// Signed distance from `b` to `a` in the 24-bit PSN space.
std::int32_t psn_delta(std::uint32_t a, std::uint32_t b) noexcept {
  const std::uint32_t d = (a - b) & kPsnMask;
  return d >= kPsnHalfRange ? static_cast<std::int32_t>(d) - static_cast<std::int32_t>(kPsnMask + 1)
                            : static_cast<std::int32_t>(d);
}

// Packets that consume a PSN of the requester's sequence.
bool is_request(const RocePacket& p) noexcept {
  const IbOperation op = p.bth.operation();
  return p.is_send() || p.is_write() || op == IbOperation::read_request || op == IbOperation::compare_swap ||
         op == IbOperation::fetch_add;
}

FrameSpan single(FrameRef f) noexcept { return {f.number, f.number, 1, f.time}; }

RoceWhere where_of(const ParsedFrame& f, const RocePacket& pkt) {
  RoceWhere w{f.src, f.dst, pkt};
  w.packet->payload = {};  // views the frame, which the PDU does not keep
  return w;
}

}  // namespace

void RoceDecoder::add(const ParsedFrame& f, FrameRef frame, std::vector<Pdu>& out) {
  auto pkt = parse_roce(f.udp.payload);
  if (!pkt) {
    Pdu p;
    p.frames = single(frame);
    p.where = RoceWhere{f.src, f.dst, std::nullopt};
    p.what = PacketPdu{};
    p.error = pkt.error();
    p.bytes.assign(f.udp.payload.begin(), f.udp.payload.end());
    out.push_back(std::move(p));
    return;
  }
  QpState& qp = qps_[QpKey{f.src.ip, f.dst.ip, pkt->bth.dest_qp}];
  Pdu p;
  if (is_request(*pkt) && pkt->bth.service() != IbService::ud) {
    const std::int32_t behind = qp.next_psn ? -psn_delta(pkt->bth.psn, *qp.next_psn) : 0;
    if (behind > 0 && behind <= kRetransmitWindow) {
      pkt->retransmission = true;
    } else {
      qp.next_psn = (pkt->bth.psn + 1) & kPsnMask;
    }
  }
  if (pkt->retransmission) {
    p.what = PacketPdu{};
  } else if (pkt->bth.service() == IbService::ud && pkt->bth.dest_qp == kGsiQp) {
    p = cm_pdu(pkt->payload);
  } else if (pkt->is_send()) {
    p = send_pdu(f, *pkt, frame, qp);
  } else {
    p.what = PacketPdu{};
  }
  if (p.frames.count == 0) p.frames = single(frame);
  p.where = where_of(f, *pkt);
  out.push_back(std::move(p));
}

Pdu RoceDecoder::send_pdu(const ParsedFrame& f, const RocePacket& pkt, FrameRef frame, QpState& qp) {
  const ByteSpan data = pkt.payload;
  Pdu p;
  p.what = PacketPdu{};
  switch (pkt.part()) {
    case MsgPart::only:
      qp.send.reset();
      return message_pdu({data.begin(), data.end()});
    case MsgPart::first:
      qp.send = Assembly{{data.begin(), data.end()}, single(frame), where_of(f, pkt)};
      return p;
    case MsgPart::middle:
    case MsgPart::last:
      break;
    case MsgPart::none:
      return p;
  }
  if (!qp.send) {
    p.error = WireError::truncated;  // its First packet was not captured
    return p;
  }
  Assembly& a = *qp.send;
  a.bytes.insert(a.bytes.end(), data.begin(), data.end());
  a.frames.last = frame.number;
  ++a.frames.count;
  if (pkt.part() == MsgPart::middle) return p;
  Pdu msg = message_pdu(std::move(a.bytes));
  msg.frames = a.frames;
  qp.send.reset();
  return msg;
}

Pdu RoceDecoder::message_pdu(std::vector<std::uint8_t> bytes) {
  Pdu p;
  p.bytes = std::move(bytes);
  auto m = o2ib::decode_msg(p.bytes);
  if (!m) {
    p.what = PacketPdu{};
    p.error = m.error();
    return p;
  }
  O2ibPdu o{*m, std::nullopt};
  if (const o2ib::Immediate* imm = m->msg.immediate()) {
    if (auto ping = ping_info_in(imm->hdr, imm->payload)) {
      if (*ping) o.ping = **ping;
      else p.error = ping->error();
    }
  }
  p.what = std::move(o);
  return p;
}

Pdu RoceDecoder::cm_pdu(ByteSpan mad) {
  Pdu p;
  p.what = PacketPdu{};
  auto cm = parse_cm_mad(mad);
  if (!cm) {
    p.error = cm.error();
    p.bytes.assign(mad.begin(), mad.end());
    return p;
  }
  p.bytes.assign(cm->private_data.begin(), cm->private_data.end());
  CmPdu c{*cm, std::nullopt, 0, std::nullopt, std::nullopt, false};
  c.cm.private_data = p.bytes;
  if (cm->attr == CmAttr::req && is_rdma_cm_service(cm->service_id)) {
    auto h = parse_cma_header(p.bytes);
    if (h) {
      c.cma = *h;
      c.ulp_offset = kCmaHeaderSize;
    } else {
      p.error = h.error();
    }
  }
  const ByteSpan ulp = ByteSpan(p.bytes).subspan(c.ulp_offset);
  const bool o2ib_magic = ulp.size() >= 4 && match_magic(ulp.data(), kIbMagic).matched;
  if (cm->attr == CmAttr::rej) {
    if (cm->reject_reason == kCmRejectConsumer && (o2ib_magic || o2ib::is_protocol_probe(ulp))) {
      auto r = o2ib::decode_reject(ulp);
      if (r) c.rej = *r;
      else p.error = r.error();
    }
  } else if (cm->attr == CmAttr::req || cm->attr == CmAttr::rep) {
    if (o2ib::is_protocol_probe(ulp)) {
      c.protocol_probe = true;
    } else if (o2ib_magic) {
      auto m = o2ib::decode_msg(ulp);
      if (m) c.msg = *m;
      else p.error = m.error();
    }
  }
  p.what = std::move(c);
  return p;
}

void RoceDecoder::finish(std::vector<Pdu>& out) {
  for (auto& [key, qp] : qps_) {
    if (!qp.send) continue;
    Pdu p;
    p.frames = qp.send->frames;
    p.where = qp.send->last;
    p.what = PacketPdu{};
    p.error = WireError::truncated;  // the capture ended before its Last packet
    p.bytes = std::move(qp.send->bytes);
    out.push_back(std::move(p));
    qp.send.reset();
  }
}

}  // namespace lnetr::decode
