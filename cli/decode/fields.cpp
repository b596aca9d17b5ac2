#include "cli/decode/fields.hpp"

#include <algorithm>

#include "cli/decode/roce.hpp"
#include "cli/decode/text.hpp"

namespace lnetr::decode {
namespace {

// ---- wire layouts (offsets from the start of each structure) -------------------

// Acceptor request (socklnd.md §3).
constexpr std::size_t kAcrMagic = 0, kAcrVersion = 4, kAcrNid = 8;

// HELLO V2/V3 and V4 (socklnd.md §4.2, §4.3); magic and version lead all forms.
constexpr std::size_t kHelloMagic = 0, kHelloVersion = 4;
struct HelloOffsets {
  std::size_t src_nid, dst_nid, src_pid, dst_pid, src_inc, dst_inc, ctype, nips, nid_size, ips;
};
constexpr HelloOffsets kHelloV3{8, 16, 24, 28, 32, 40, 48, 52, 8, 56};
constexpr HelloOffsets kHelloV4{8, 28, 48, 52, 56, 64, 72, 76, 20, 80};
// HELLO V1: a nid4 LNet header whose dest_nid carries magic and version.
constexpr std::size_t kV1Major = 4, kV1Minor = 6, kV1SrcNid = 8, kV1DstPid = 16, kV1SrcPid = 20, kV1Type = 24,
                      kV1PayloadLength = 28, kV1Incarnation = 32, kV1Ctype = 40, kV1Ips = 72;

// socklnd message header (socklnd.md §6.1).
constexpr std::size_t kKshType = 0, kKshCsum = 4, kKshZcReq = 8, kKshZcAck = 16;

// LNet header (lnet-header.md): common part per form, then the 40-byte
// type-specific part.
struct LnetOffsets {
  std::size_t dest_nid, src_nid, nid_size, dest_pid, src_pid, type, payload_length, msg;
};
constexpr LnetOffsets kLnet4{0, 8, 8, 16, 20, 24, 28, 32};
constexpr LnetOffsets kLnet16{0, 20, 20, 40, 44, 48, 52, 56};
constexpr std::size_t kWmdIface = 0, kWmdObject = 8, kMatchBits = 16;
constexpr std::size_t kPutHdrData = 24, kPutPtl = 32, kPutOffset = 36;
constexpr std::size_t kGetPtl = 24, kGetSrcOffset = 28, kGetSinkLength = 32;
constexpr std::size_t kAckMlength = 24;
constexpr std::size_t kHelloIncarnation = 0, kHelloType = 8;

// Ping info (ping-discovery-health.md): header, then 16-byte nid4 entries.
constexpr std::size_t kPiMagic = 0, kPiFeatures = 4, kPiPid = 8, kPiNnis = 12;
constexpr std::size_t kNsNid = 0, kNsStatus = 8, kNsMsgSize = 12;

// o2iblnd message (o2iblnd.md §2, §3).
constexpr std::size_t kIbmMagic = 0, kIbmVersion = 4, kIbmType = 6, kIbmCredits = 7, kIbmNob = 8, kIbmCksum = 12,
                      kIbmSrcNid = 16, kIbmSrcStamp = 24, kIbmDstNid = 32, kIbmDstStamp = 40, kIbmBody = 48;
constexpr std::size_t kCpQueueDepth = 0, kCpMaxFrags = 2, kCpMaxMsgSize = 4;
constexpr std::size_t kPutReqCookie = kIbmBody + kLnetHeaderSize;
constexpr std::size_t kPutAckSrcCookie = kIbmBody, kPutAckDstCookie = kIbmBody + 8, kPutAckRd = kIbmBody + 16;
constexpr std::size_t kGetReqCookie = kIbmBody + kLnetHeaderSize, kGetReqRd = kGetReqCookie + 8;
constexpr std::size_t kRdKey = 0, kRdNfrags = 4, kRdFrags = 8, kFragNob = 0, kFragAddr = 4;
constexpr std::size_t kCompletionCookie = kIbmBody, kCompletionStatus = kIbmBody + 8;

// o2iblnd reject (o2iblnd.md §5).
constexpr std::size_t kIbrMagic = 0, kIbrVersion = 4, kIbrWhy = 6, kIbrPadding = 7, kIbrIncarnation = 8,
                      kIbrCp = 16;

// ---- field builders ----------------------------------------------------------------

// Appends fields to a section, offsets relative to `at` within the section.
class FieldList {
 public:
  FieldList(std::vector<Field>& out, std::size_t at = 0) : out_(out), at_(at) {}
  FieldList sub(std::size_t at) const { return {out_, at_ + at}; }

  void dec(std::size_t off, std::size_t size, std::string name, std::uint64_t v, std::string meaning = {}) const {
    out_.push_back({at_ + off, size, std::move(name), v, std::move(meaning), Field::Radix::dec});
  }
  void sdec(std::size_t off, std::size_t size, std::string name, std::int64_t v) const {
    out_.push_back({at_ + off, size, std::move(name), static_cast<std::uint64_t>(v), {}, Field::Radix::sdec});
  }
  void hex(std::size_t off, std::size_t size, std::string name, std::uint64_t v, std::string meaning = {}) const {
    out_.push_back({at_ + off, size, std::move(name), v, std::move(meaning), Field::Radix::hex});
  }
  void text(std::size_t off, std::size_t size, std::string name, std::string meaning) const {
    out_.push_back({at_ + off, size, std::move(name), 0, std::move(meaning), Field::Radix::none});
  }
  // A 64-bit wire NID, or a 20-byte one.
  void nid(std::size_t off, std::size_t size, std::string name, const Nid& n) const {
    if (size == Nid::kWireSize) return text(off, size, std::move(name), to_string(n));
    const std::uint64_t v = n.to_nid4();
    hex(off, size, std::move(name), v, v == 0 ? "" : to_string(n));
  }

 private:
  std::vector<Field>& out_;
  std::size_t at_;
};

std::string_view ksock_type_name(std::uint32_t t) {
  if (t == sock::kMsgLnet) return "KSOCK_MSG_LNET";
  if (t == sock::kMsgNoop) return "KSOCK_MSG_NOOP";
  return "";
}



void acceptor_fields(const AcceptorPdu& a, std::vector<Field>& out) {
  const FieldList f(out);
  f.hex(kAcrMagic, 4, "acr_magic", a.magic);
  f.dec(kAcrVersion, 4, "acr_version", a.version);
  if (a.view) f.nid(kAcrNid, a.version == 2 ? Nid::kWireSize : 8, "acr_nid", a.view->nid);
}

void hello_fields(const HelloPdu& h, std::vector<Field>& out) {
  if (!h.view) return;
  const sock::Hello& v = *h.view;
  const FieldList f(out);
  if (h.magic == kTcpProtoMagic) {
    f.hex(kHelloMagic, 4, "magic", h.magic, hello_magic_name(h.magic));
    f.dec(kV1Major, 2, "version_major", 1);
    f.dec(kV1Minor, 2, "version_minor", 0);
    f.nid(kV1SrcNid, 8, "src_nid", v.src_nid);
    f.dec(kV1DstPid, 4, "dest_pid", v.dst_pid);
    f.dec(kV1SrcPid, 4, "src_pid", v.src_pid);
    f.dec(kV1Type, 4, "type", static_cast<std::uint32_t>(MsgType::hello), "HELLO");
    f.dec(kV1PayloadLength, 4, "payload_length", 4 * std::uint64_t{v.nips});
    f.hex(kV1Incarnation, 8, "hello.incarnation", v.src_incarnation);
    f.dec(kV1Ctype, 4, "hello.type", static_cast<std::uint32_t>(v.ctype), conn_type_name(v.ctype));
    for (std::uint32_t i = 0; i < std::min(v.nips, sock::kHelloMaxIps); ++i)
      f.hex(kV1Ips + 4 * i, 4, strprintf("ips[%u]", i), v.ips[i], to_string(IpAddress::v4(v.ips[i])));
    return;
  }
  const HelloOffsets& o = v.version == 4 ? kHelloV4 : kHelloV3;
  f.hex(kHelloMagic, 4, "kshm_magic", h.magic, hello_magic_name(h.magic));
  f.dec(kHelloVersion, 4, "kshm_version", h.version);
  f.nid(o.src_nid, o.nid_size, "kshm_src_nid", v.src_nid);
  f.nid(o.dst_nid, o.nid_size, "kshm_dst_nid", v.dst_nid);
  f.dec(o.src_pid, 4, "kshm_src_pid", v.src_pid);
  f.dec(o.dst_pid, 4, "kshm_dst_pid", v.dst_pid);
  f.hex(o.src_inc, 8, "kshm_src_incarnation", v.src_incarnation);
  f.hex(o.dst_inc, 8, "kshm_dst_incarnation", v.dst_incarnation);
  const std::string ctype_name = conn_type_name(v.ctype);
  f.dec(o.ctype, 4, "kshm_ctype", static_cast<std::uint32_t>(v.ctype),
        ctype_name == std::to_string(v.ctype) ? "" : ctype_name);
  f.dec(o.nips, 4, "kshm_nips", v.nips);
  if (v.version == 4) return;
  for (std::uint32_t i = 0; i < std::min(v.nips, sock::kHelloMaxIps); ++i)
    f.hex(o.ips + 4 * i, 4, strprintf("kshm_ips[%u]", i), v.ips[i], to_string(IpAddress::v4(v.ips[i])));
}

void lnet_fields(const LnetHeader& h, HeaderForm form, const FieldList& f) {
  const LnetOffsets& o = form == HeaderForm::nid4 ? kLnet4 : kLnet16;
  f.nid(o.dest_nid, o.nid_size, "dest_nid", h.dest_nid);
  f.nid(o.src_nid, o.nid_size, "src_nid", h.src_nid);
  f.dec(o.dest_pid, 4, "dest_pid", h.dest_pid);
  f.dec(o.src_pid, 4, "src_pid", h.src_pid);
  f.dec(o.type, 4, "type", static_cast<std::uint32_t>(h.type), to_string(h.type));
  f.dec(o.payload_length, 4, "payload_length", h.payload_length);
  const FieldList m = f.sub(o.msg);
  auto wmd = [&](const char* prefix, const WireHandle& w) {
    m.hex(kWmdIface, 8, std::string(prefix) + ".iface", w.interface_cookie);
    m.hex(kWmdObject, 8, std::string(prefix) + ".object", w.object_cookie);
  };
  switch (h.type) {
    case MsgType::put: {
      const PutFields p = h.put();
      wmd("put.ack_wmd", p.ack_wmd);
      m.hex(kMatchBits, 8, "put.match_bits", p.match_bits);
      m.hex(kPutHdrData, 8, "put.hdr_data", p.hdr_data);
      m.dec(kPutPtl, 4, "put.ptl_index", p.ptl_index);
      m.dec(kPutOffset, 4, "put.offset", p.offset);
      break;
    }
    case MsgType::get: {
      const GetFields g = h.get();
      wmd("get.return_wmd", g.return_wmd);
      m.hex(kMatchBits, 8, "get.match_bits", g.match_bits);
      m.dec(kGetPtl, 4, "get.ptl_index", g.ptl_index);
      m.dec(kGetSrcOffset, 4, "get.src_offset", g.src_offset);
      m.dec(kGetSinkLength, 4, "get.sink_length", g.sink_length);
      break;
    }
    case MsgType::reply:
      wmd("reply.dst_wmd", h.reply().dst_wmd);
      break;
    case MsgType::ack: {
      const AckFields a = h.ack();
      wmd("ack.dst_wmd", a.dst_wmd);
      m.hex(kMatchBits, 8, "ack.match_bits", a.match_bits);
      m.dec(kAckMlength, 4, "ack.mlength", a.mlength);
      break;
    }
    case MsgType::hello: {
      const HelloFields hf = h.hello();
      m.hex(kHelloIncarnation, 8, "hello.incarnation", hf.incarnation);
      m.dec(kHelloType, 4, "hello.type", hf.type, conn_type_name(static_cast<std::int32_t>(hf.type)));
      break;
    }
  }
}

void ping_fields(const PingInfo& pi, ByteSpan bytes, std::vector<Field>& out) {
  const FieldList f(out);
  f.hex(kPiMagic, 4, "pi_magic", kPingMagic);
  f.hex(kPiFeatures, 4, "pi_features", pi.features, ping_features(pi.features));
  f.dec(kPiPid, 4, "pi_pid", pi.pid);
  f.dec(kPiNnis, 4, "pi_nnis", pi.nnis);
  auto ni_it = pi.begin();  // the nid4 entries come first
  for (std::uint32_t i = 0; i < pi.nnis; ++i) {
    const std::size_t entry = kPingHeaderSize + i * kPingNid4EntrySize;
    const FieldList e = f.sub(entry);
    const std::string ni = strprintf("ni[%u].", i);
    // ns_msg_size of nid4 entries is not interpreted by LNet (PingInfo does
    // not expose it); shown as it is on the wire.
    const auto msg_size = load<std::uint32_t>(bytes.data() + entry + kNsMsgSize, pi.order);
    if (i == 0) {
      e.nid(kNsNid, 8, ni + "ns_nid", Nid::from_nid4(kLoNid4));
      e.dec(kNsStatus, 4, ni + "ns_status", pi.sequence);
      e.dec(kNsMsgSize, 4, ni + "ns_msg_size", pi.msg_size);
      continue;
    }
    const PingNi n = *ni_it++;
    e.nid(kNsNid, 8, ni + "ns_nid", n.nid);
    e.hex(kNsStatus, 4, ni + "ns_status", n.status, ni_status_name(n.status));
    e.dec(kNsMsgSize, 4, ni + "ns_msg_size", msg_size);
  }
}

void rd_fields(const o2ib::RdmaDesc& rd, const std::string& prefix, const FieldList& f) {
  f.hex(kRdKey, 4, prefix + "rd_key", rd.key());
  f.dec(kRdNfrags, 4, prefix + "rd_nfrags", rd.nfrags());
  for (std::size_t i = 0; i < rd.nfrags(); ++i) {
    const FieldList fr = f.sub(kRdFrags + i * o2ib::kRdmaFragSize);
    const o2ib::RdmaFrag frag = rd.frag(i);
    fr.dec(kFragNob, 4, prefix + strprintf("frag[%zu].nob", i), frag.nob);
    fr.hex(kFragAddr, 8, prefix + strprintf("frag[%zu].addr", i), frag.addr);
  }
}

// An o2iblnd message as up to three sections, all with offsets from the
// message's start (at `base` in the PDU's bytes): header and body, the LNet
// header it carries, and what follows that header (cookie, RDMA descriptor).
void o2ib_sections(const o2ib::DecodedMsg& d, std::size_t base, std::string title, std::vector<Section>& out) {
  const o2ib::Msg& m = d.msg;
  Section head{section::pdu, std::move(title), base, {}};
  const FieldList f(head.fields);
  f.hex(kIbmMagic, 4, "ibm_magic", kIbMagic);
  f.hex(kIbmVersion, 2, "ibm_version", m.hdr.version);
  f.hex(kIbmType, 1, "ibm_type", static_cast<std::uint8_t>(m.hdr.type), std::string(o2ib::to_string(m.hdr.type)));
  f.dec(kIbmCredits, 1, "ibm_credits", m.hdr.credits);
  f.dec(kIbmNob, 4, "ibm_nob", d.nob);
  f.hex(kIbmCksum, 4, "ibm_cksum", d.cksum);
  f.nid(kIbmSrcNid, 8, "ibm_srcnid", m.hdr.srcnid);
  f.dec(kIbmSrcStamp, 8, "ibm_srcstamp", m.hdr.srcstamp);
  f.nid(kIbmDstNid, 8, "ibm_dstnid", m.hdr.dstnid);
  f.dec(kIbmDstStamp, 8, "ibm_dststamp", m.hdr.dststamp);
  const LnetHeader* lnet = nullptr;
  Section tail{section::pdu, strprintf("%s body after the LNet header", std::string(o2ib::to_string(m.hdr.type)).c_str()),
               base, {}};
  const FieldList t(tail.fields);
  if (const auto* cp = m.connparams()) {
    const FieldList body = f.sub(kIbmBody);
    body.dec(kCpQueueDepth, 2, "connparams.queue_depth", cp->queue_depth);
    body.dec(kCpMaxFrags, 2, "connparams.max_frags", cp->max_frags);
    body.dec(kCpMaxMsgSize, 4, "connparams.max_msg_size", cp->max_msg_size);
  } else if (const auto* imm = m.immediate()) {
    lnet = &imm->hdr;
  } else if (const auto* pr = m.put_req()) {
    lnet = &pr->hdr;
    t.hex(kPutReqCookie, 8, "putreq.cookie", pr->cookie);
  } else if (const auto* pa = m.put_ack()) {
    f.hex(kPutAckSrcCookie, 8, "putack.src_cookie", pa->src_cookie);
    f.hex(kPutAckDstCookie, 8, "putack.dst_cookie", pa->dst_cookie);
    rd_fields(pa->rd, "putack.rd.", f.sub(kPutAckRd));
  } else if (const auto* gr = m.get_req()) {
    lnet = &gr->hdr;
    t.hex(kGetReqCookie, 8, "get.cookie", gr->cookie);
    rd_fields(gr->rd, "get.rd.", t.sub(kGetReqRd));
  } else if (const auto* c = m.completion()) {
    f.hex(kCompletionCookie, 8, "completion.cookie", c->cookie);
    f.sdec(kCompletionStatus, 4, "completion.status", c->status);
  }
  out.push_back(std::move(head));
  if (!lnet) return;
  Section l{section::pdu, strprintf("LNet header (nid4, %zu B) at +%zu", kLnetHeaderSize, kIbmBody), base, {}};
  lnet_fields(*lnet, HeaderForm::nid4, FieldList(l.fields, kIbmBody));
  out.push_back(std::move(l));
  if (!tail.fields.empty()) out.push_back(std::move(tail));
}

void reject_fields(const o2ib::DecodedReject& d, std::vector<Field>& out) {
  const FieldList f(out);
  const o2ib::Reject& r = d.rej;
  f.hex(kIbrMagic, 4, "ibr_magic", r.magic);
  f.hex(kIbrVersion, 2, "ibr_version", r.version);
  f.dec(kIbrWhy, 1, "ibr_why", static_cast<std::uint8_t>(r.why), std::string(o2ib::to_string(r.why)));
  f.dec(kIbrPadding, 1, "ibr_padding", 0);
  if (r.incarnation) f.dec(kIbrIncarnation, 8, "ibr_incarnation", *r.incarnation);
  if (r.cp) {
    const FieldList cp = f.sub(kIbrCp);
    cp.dec(kCpQueueDepth, 2, "ibr_cp.queue_depth", r.cp->queue_depth);
    cp.dec(kCpMaxFrags, 2, "ibr_cp.max_frags", r.cp->max_frags);
    cp.dec(kCpMaxMsgSize, 4, "ibr_cp.max_msg_size", r.cp->max_msg_size);
  }
}

void cma_fields(const CmaHeader& h, std::vector<Field>& out) {
  const FieldList f(out);
  f.dec(kCmaVersion, 1, "cma.version", h.version);
  f.hex(kCmaIpVersion, 1, "cma.ip_version", h.ip_version);
  f.dec(kCmaPort, 2, "cma.port", h.port);
  f.text(kCmaSrc, kCmaAddrSize, "cma.src_addr", to_string(h.src));
  f.text(kCmaDst, kCmaAddrSize, "cma.dst_addr", to_string(h.dst));
}
std::string ping_title(const PingInfo& pi) {
  return strprintf("ping info buffer (%zu bytes, sender %s-endian)", pi.wire_size(),
                   pi.order == ByteOrder::little ? "little" : "big");
}

void ping_section(const PingInfo& pi, std::size_t at, ByteSpan bytes, std::vector<Section>& out) {
  Section s{section::ping, ping_title(pi), at, {}};
  ping_fields(pi, bytes.subspan(at), s.fields);
  out.push_back(std::move(s));
}

void sock_msg_sections(const SockMsgPdu& s, ByteSpan bytes, std::vector<Section>& out) {
  std::size_t at = 0;
  if (s.msg.sock) {
    const sock::MsgHeader& h = *s.msg.sock;
    Section head{section::pdu, "socklnd message header", 0, {}};
    const FieldList f(head.fields);
    f.hex(kKshType, 4, "ksh_type", h.type, std::string(ksock_type_name(h.type)));
    f.hex(kKshCsum, 4, "ksh_csum", h.csum);
    f.dec(kKshZcReq, 8, "ksh_zc_cookies[0]", h.zc_req_cookie);
    f.dec(kKshZcAck, 8, "ksh_zc_cookies[1]", h.zc_ack_cookie);
    out.push_back(std::move(head));
    at = sock::kMsgHeaderSize;
  }
  if (!s.msg.lnet) return;
  const HeaderForm form = sock::header_form(s.version);
  Section lnet{section::pdu,
               strprintf("LNet header (%s, %zu B) at +%zu", form == HeaderForm::nid4 ? "nid4" : "nid16",
                         header_size(form), at),
               0, {}};
  lnet_fields(*s.msg.lnet, form, FieldList(lnet.fields, at));
  out.push_back(std::move(lnet));
  if (s.ping) ping_section(*s.ping, at + header_size(form), bytes, out);
}

void cm_sections(const CmPdu& c, std::vector<Section>& out) {
  if (c.cma) {
    Section cma{section::cma, "rdma_cm private-data header", 0, {}};
    cma_fields(*c.cma, cma.fields);
    out.push_back(std::move(cma));
  }
  const std::string at = strprintf("at private-data +%zu", c.ulp_offset);
  if (c.msg) o2ib_sections(*c.msg, c.ulp_offset, "o2iblnd message " + at, out);
  if (c.rej) {
    Section r{section::pdu, "o2iblnd reject " + at, c.ulp_offset, {}};
    reject_fields(*c.rej, r.fields);
    out.push_back(std::move(r));
  }
}

}  // namespace

std::string hello_magic_name(std::uint32_t m) {
  if (m == kLnetProtoMagic) return "LNET_PROTO_MAGIC";
  if (m == kTcpProtoMagic) return "LNET_PROTO_TCP_MAGIC";
  return "";
}

std::string ni_status_name(std::uint32_t s) {
  if (s == kNiStatusUp) return "UP";
  if (s == kNiStatusDown) return "DOWN";
  if (s == kNiStatusInvalid) return "INVALID";
  return "";
}

std::vector<Section> sections_of(const Pdu& p) {
  std::vector<Section> out;
  if (const auto* a = p.as<AcceptorPdu>()) {
    out.push_back({section::pdu, "", 0, {}});
    acceptor_fields(*a, out.back().fields);
  } else if (const auto* h = p.as<HelloPdu>()) {
    out.push_back({section::pdu, "", 0, {}});
    hello_fields(*h, out.back().fields);
  } else if (const auto* s = p.as<SockMsgPdu>()) {
    sock_msg_sections(*s, p.bytes, out);
  } else if (const auto* o = p.as<O2ibPdu>()) {
    o2ib_sections(o->msg, 0, "o2iblnd message", out);
    if (o->ping) ping_section(*o->ping, o2ib::kImmediatePayloadOffset, p.bytes, out);
  } else if (const auto* c = p.as<CmPdu>()) {
    cm_sections(*c, out);
  }
  return out;
}

}  // namespace lnetr::decode
