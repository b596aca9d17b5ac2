#include "cli/decode/describe.hpp"

#include <array>
#include <cinttypes>

#include "cli/decode/fields.hpp"
#include "cli/decode/text.hpp"

namespace lnetr::decode {
namespace {

constexpr std::size_t kPayloadPreview = 32;  // payload bytes shown in a detail line

// ---- summaries ----------------------------------------------------------------------

std::string zc_text(const sock::MsgHeader& h, std::uint32_t version) {
  const sock::ZcAck z = sock::zc_ack_of(h, version);
  switch (z.kind) {
    case sock::ZcAck::Kind::none: return "no cookies";
    case sock::ZcAck::Kind::keepalive: return "keepalive ping (cookie 1 is reserved for keepalive)";
    case sock::ZcAck::Kind::single: return strprintf("zero-copy ACK for cookie %" PRIu64, z.first);
    case sock::ZcAck::Kind::range: return strprintf("zero-copy ACK for cookies %" PRIu64 "..%" PRIu64, z.first, z.last);
    case sock::ZcAck::Kind::pair: return strprintf("zero-copy ACK for cookies %" PRIu64 " and %" PRIu64, z.first, z.last);
    case sock::ZcAck::Kind::invalid:
      return strprintf("INVALID zero-copy ACK (%" PRIu64 ", %" PRIu64 "): cookie 1 is reserved for keepalive", z.first,
                       z.last);
  }
  return "";
}

std::string sock_msg_summary(const SockMsgPdu& s) {
  if (!s.msg.sock) return lnet_summary(*s.msg.lnet);  // V1: bare LNet header
  const sock::MsgHeader& h = *s.msg.sock;
  if (h.type == sock::kMsgNoop) return "KSOCK_MSG_NOOP = " + zc_text(h, s.version);
  std::string out = "KSOCK_MSG_LNET " + (s.msg.lnet ? lnet_summary(*s.msg.lnet) : std::string("?"));
  if (h.zc_req_cookie != 0)
    out += strprintf(" ZC-request cookie %" PRIu64 " (receiver must ACK it)", h.zc_req_cookie);
  if (h.zc_ack_cookie != 0) out += strprintf(" zc_ack=%" PRIu64 " (piggy-backed ZC-ACK)", h.zc_ack_cookie);
  if (h.csum != 0) out += strprintf(" csum=0x%08x", h.csum);
  return out;
}

std::string acceptor_summary(const AcceptorPdu& a) {
  std::string out = a.answer ? "ACCEPTOR-FORMAT ANSWER" : "ACCEPTOR REQUEST";
  if (a.magic != kAcceptorMagic) out += strprintf(" magic=0x%08x", a.magic);
  out += strprintf(" version=%u", a.version);
  if (a.view && a.view->nid.to_nid4() != 0) out += " nid=" + to_string(a.view->nid);
  return out;
}

std::string hello_summary(const HelloPdu& h) {
  const char* side = h.from == Side::connector ? "(connecting side)" : "(accepting side)";
  std::string out = hello_magic_name(h.magic).empty()
                        ? strprintf("HELLO-shaped bytes with WRONG magic 0x%08x, V%u %s", h.magic, h.version, side)
                        : strprintf("socklnd HELLO V%u %s", h.version, side);
  if (!h.view) return out;
  out += " ctype=" + conn_type_name(h.view->ctype);
  if (h.view->conn_type() == sock::ConnType::none) out += " (-1)";  // how the kernel logs it
  out += " src=" + to_string(h.view->src_nid);
  if (h.view->version != 1) out += " dst=" + to_string(h.view->dst_nid);
  return out;
}

std::string stream_bytes_summary(const StreamBytesPdu& s, std::size_t size, const Pdu& p) {
  switch (s.why) {
    case StreamBytesPdu::Why::undecodable: return strprintf("%zu undecodable bytes", size);
    case StreamBytesPdu::Why::mid_stream:
      return strprintf("%zu bytes before the first recognisable message (capture started inside the connection)", size);
    case StreamBytesPdu::Why::unfinished: return strprintf("%zu bytes of an element the capture ended inside", size);
    case StreamBytesPdu::Why::gap: {
      const SockWhere* w = p.sock();
      return strprintf("%" PRIu64 " bytes missing from the capture (TCP hole)", w ? w->end - w->begin : 0);
    }
  }
  return "";
}

std::string roce_summary(const RocePacket& pkt, const Pdu& p) {
  const Bth& b = pkt.bth;
  std::string out = name_of(b) + strprintf(" dstQP=0x%x PSN=%u", b.dest_qp, b.psn);
  if (b.ack_req) out += " AckReq";
  if (pkt.deth) out += strprintf(" srcQP=0x%x Q_Key=0x%08x", pkt.deth->src_qp, pkt.deth->qkey);
  if (pkt.reth)
    out += strprintf(" RETH: VA=0x%016" PRIx64 " R_Key=0x%08x DMA_len=%u", pkt.reth->va, pkt.reth->rkey,
                  pkt.reth->dma_length);
  if (pkt.aeth) out += strprintf(" AETH syndrome=0x%02x MSN=%u (%s)", pkt.aeth->syndrome, pkt.aeth->msn,
                              std::string(describe_syndrome(pkt.aeth->syndrome)).c_str());
  if (pkt.immediate) out += strprintf(" imm=0x%08x", *pkt.immediate);
  if (pkt.retransmission) out += " (retransmission)";
  if (p.as<PacketPdu>() && (pkt.is_write() || pkt.is_send()) && pkt.payload_size != 0)
    out += strprintf(" (%zu data bytes)", pkt.payload_size);
  return out;
}

std::string cm_header_line(const CmMessage& cm) {
  switch (cm.attr) {
    case CmAttr::req: {
      std::uint16_t port = 0;
      const std::string space = is_rdma_cm_service(cm.service_id, &port)
                                    ? strprintf(" (%s 0x%04x | port %u)", std::string(port_space_name(cm.service_id)).c_str(),
                                             static_cast<unsigned>(cm.service_id >> 16) & 0xffffu, port)
                                    : std::string();
      return strprintf("CM REQ: local_comm_id=0x%08x service_id=0x%016" PRIx64, cm.local_comm_id, cm.service_id) +
             space + strprintf(" local_QPN=0x%x start_PSN=%u", cm.local_qpn, cm.start_psn);
    }
    case CmAttr::rep:
      return strprintf("CM REP: local_comm_id=0x%08x remote_comm_id=0x%08x local_QPN=0x%x start_PSN=%u",
                    cm.local_comm_id, cm.remote_comm_id, cm.local_qpn, cm.start_psn);
    case CmAttr::rej:
      return strprintf("CM REJ: local_comm_id=0x%08x remote_comm_id=0x%08x reason=%u%s", cm.local_comm_id,
                    cm.remote_comm_id, cm.reject_reason,
                    cm.reject_reason == kCmRejectConsumer ? " (consumer defined)" : "");
    default:
      return strprintf("CM %s: local_comm_id=0x%08x remote_comm_id=0x%08x", std::string(to_string(cm.attr)).c_str(),
                    cm.local_comm_id, cm.remote_comm_id);
  }
}

std::string reject_summary(const o2ib::DecodedReject& d) {
  const o2ib::Reject& r = d.rej;
  std::string out = strprintf("o2iblnd reject why=%s version=0x%x", std::string(o2ib::to_string(r.why)).c_str(), r.version);
  if (r.incarnation) out += strprintf(" incarnation=%" PRIu64, *r.incarnation);
  if (r.cp) out += strprintf(" queue_depth=%u max_frags=%u max_msg_size=%u", r.cp->queue_depth, r.cp->max_frags,
                          r.cp->max_msg_size);
  return out + " (" + std::string(o2ib::describe(r.why)) + ")";
}

void payload_detail(ByteSpan payload, std::vector<std::string>& details) {
  if (payload.empty()) return;
  details.push_back(strprintf("payload %zu bytes, first %zu: ", payload.size(), std::min(payload.size(), kPayloadPreview)) +
                    hex_bytes(payload.first(std::min(payload.size(), kPayloadPreview))));
}

void ping_details(const PingInfo& pi, std::vector<std::string>& details) {
  std::string line = strprintf("ping info: features=0x%x (%s) pid=%u sequence=%u NIs:", pi.features,
                            ping_features(pi.features).c_str(), pi.pid, pi.sequence);
  for (const PingNi n : pi) {
    const std::string status = ni_status_name(n.status);
    line += " " + to_string(n.nid) + " " + (status.empty() ? hex64(n.status) : status);
  }
  details.push_back(std::move(line));
}



// ---- details per kind -------------------------------------------------------------------

void sock_msg_details(const SockMsgPdu& s, std::vector<std::string>& details) {
  if (s.ping) ping_details(*s.ping, details);
  else payload_detail(s.msg.payload, details);
}

void o2ib_details(const O2ibPdu& o, std::vector<std::string>& details) {
  const o2ib::Immediate* imm = o.msg.msg.immediate();
  if (!imm) return;
  if (o.ping) ping_details(*o.ping, details);
  else payload_detail(imm->payload, details);
}

void cm_details(const CmPdu& c, std::vector<std::string>& details) {
  details.push_back(cm_header_line(c.cm));
  const std::string at = strprintf("at private-data +%zu", c.ulp_offset);
  if (c.protocol_probe) details.push_back("LNet protocol probe (LNET_PROTO_MAGIC) " + at);
  if (c.msg) details.push_back(o2ib_summary(*c.msg) + " (o2iblnd message " + at + ")");
  if (c.rej) details.push_back(reject_summary(*c.rej));
}

std::string unprivileged_note(const AcceptorPdu& a, const Pdu& p) {
  const SockWhere* w = p.sock();
  if (a.answer || !w || w->src.port <= sock::kPrivilegedPortMax) return "";
  return strprintf(" (from unprivileged port %u: a Linux acceptor refuses it)", w->src.port);
}

}  // namespace


std::string conn_type_name(std::int32_t ctype) {
  const char* name = sock::to_string(static_cast<sock::ConnType>(ctype));
  if (std::string_view(name) == "?") return std::to_string(ctype);
  return name;
}

std::string ping_features(std::uint32_t features) {
  struct Feature {
    std::uint32_t bit;
    const char* name;
  };
  static constexpr std::array<Feature, 8> kNames{{
      {ping_feature::base, "BASE"},
      {ping_feature::ni_status, "NI_STATUS"},
      {ping_feature::rte_disabled, "RTE_DISABLED"},
      {ping_feature::multi_rail, "MULTI_RAIL"},
      {ping_feature::discovery, "DISCOVERY"},
      {ping_feature::large_addr, "LARGE_ADDR"},
      {ping_feature::primary_large, "PRIMARY_LARGE"},
      {ping_feature::metadata, "METADATA"},
  }};
  std::string out;
  for (const Feature& f : kNames) {
    if (!(features & f.bit)) continue;
    if (!out.empty()) out += '|';
    out += f.name;
  }
  if (features & ~ping_feature::all) out += (out.empty() ? "" : "|") + hex64(features & ~ping_feature::all);
  return out;
}

std::string lnet_summary(const LnetHeader& h) {
  std::string out = strprintf("LNET %s ", to_string(h.type)) + to_string(h.src_nid) + " -> " + to_string(h.dest_nid) +
                    strprintf(" plen=%u", h.payload_length);
  switch (h.type) {
    case MsgType::put: {
      const PutFields p = h.put();
      out += strprintf(" ptl=%u mb=0x%" PRIx64 " ack=%s", p.ptl_index, p.match_bits, p.ack_wmd.is_none() ? "no" : "yes");
      if (p.offset != 0) out += strprintf(" offset=%u", p.offset);
      if (p.hdr_data != 0) out += strprintf(" hdr_data=0x%" PRIx64, p.hdr_data);
      break;
    }
    case MsgType::get: {
      const GetFields g = h.get();
      out += strprintf(" ptl=%u mb=0x%" PRIx64 " sink_length=%u", g.ptl_index, g.match_bits, g.sink_length);
      if (g.src_offset != 0) out += strprintf(" src_offset=%u", g.src_offset);
      break;
    }
    case MsgType::reply:
      break;
    case MsgType::ack: {
      const AckFields a = h.ack();
      out += strprintf(" mb=0x%" PRIx64 " mlength=%u", a.match_bits, a.mlength);
      break;
    }
    case MsgType::hello: {
      const HelloFields hf = h.hello();
      out += strprintf(" incarnation=0x%" PRIx64 " ctype=", hf.incarnation) +
             conn_type_name(static_cast<std::int32_t>(hf.type));
      break;
    }
  }
  if (h.src_pid != kPidLustre) out += strprintf(" src_pid=%u", h.src_pid);
  if (h.dest_pid != kPidLustre) out += strprintf(" dest_pid=%u", h.dest_pid);
  return out;
}

std::string o2ib_summary(const o2ib::DecodedMsg& d) {
  const o2ib::Msg& m = d.msg;
  std::string out = strprintf("o2iblnd %s credits=%u nob=%u", std::string(o2ib::to_string(m.hdr.type)).c_str(),
                           m.hdr.credits, d.nob);
  if (const auto* cp = m.connparams()) {
    out += strprintf(" queue_depth=%u max_frags=%u max_msg_size=%u", cp->queue_depth, cp->max_frags, cp->max_msg_size);
  } else if (const auto* imm = m.immediate()) {
    out += " | " + lnet_summary(imm->hdr);
  } else if (const auto* pr = m.put_req()) {
    out += " | " + lnet_summary(pr->hdr) + " cookie=" + hex64(pr->cookie);
  } else if (const auto* pa = m.put_ack()) {
    out += " src_cookie=" + hex64(pa->src_cookie) + " dst_cookie=" + hex64(pa->dst_cookie) +
           strprintf(" rkey=0x%x nfrags=%zu", pa->rd.key(), pa->rd.nfrags());
  } else if (const auto* gr = m.get_req()) {
    out += " | " + lnet_summary(gr->hdr) + " cookie=" + hex64(gr->cookie) +
           strprintf(" rkey=0x%x nfrags=%zu", gr->rd.key(), gr->rd.nfrags());
  } else if (const auto* c = m.completion()) {
    out += " cookie=" + hex64(c->cookie) + strprintf(" status=%d", c->status);
  }
  if (d.cksum != 0) out += strprintf(" cksum=0x%08x", d.cksum);
  return out;
}

Description describe(const Pdu& p) {
  Description d;
  if (const RoceWhere* r = p.roce()) d.summary = r->packet ? roce_summary(*r->packet, p) : "RoCEv2 packet";
  if (const auto* a = p.as<AcceptorPdu>()) {
    d.summary = acceptor_summary(*a) + unprivileged_note(*a, p);
  } else if (const auto* h = p.as<HelloPdu>()) {
    d.summary = hello_summary(*h);
  } else if (const auto* s = p.as<SockMsgPdu>()) {
    d.summary = sock_msg_summary(*s);
    sock_msg_details(*s, d.details);
  } else if (const auto* b = p.as<StreamBytesPdu>()) {
    d.summary = stream_bytes_summary(*b, p.bytes.size(), p);
  } else if (const auto* o = p.as<O2ibPdu>()) {
    d.summary += "  " + o2ib_summary(o->msg);
    o2ib_details(*o, d.details);
  } else if (const auto* c = p.as<CmPdu>()) {
    d.summary += strprintf("  IB CM %s TID=0x%" PRIx64, std::string(to_string(c->cm.attr)).c_str(), c->cm.mad.tid);
    cm_details(*c, d.details);
  }
  if (p.error) d.summary += strprintf(" (undecodable: %s: %s)", std::string(name(*p.error)).c_str(),
                                      std::string(describe(*p.error)).c_str());
  d.sections = sections_of(p);
  return d;
}

}  // namespace lnetr::decode
