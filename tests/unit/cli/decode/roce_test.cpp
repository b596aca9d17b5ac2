// RoCEv2 parsing and o2iblnd decoding on hand-built packets: BTH and its
// extension headers, pad bytes, multi-packet SEND reassembly, out-of-sequence
// and retransmitted packets, and IB CM REQ / REJ carrying rdma_cm and
// o2iblnd private data.
#include <gtest/gtest.h>

#include "cli/decode/capture.hpp"
#include "cli/decode/roce.hpp"
#include "cli/decode/roce_decoder.hpp"
#include "frames.hpp"

namespace lnetr::test {
namespace {

using namespace lnetr::decode;

constexpr std::uint8_t kSendFirst = 0x00, kSendMiddle = 0x01, kSendLast = 0x02, kSendOnly = 0x04,
                       kWriteFirst = 0x06, kAcknowledge = 0x11, kUdSendOnly = 0x64;
constexpr std::uint32_t kQp = 0x11;
constexpr std::uint64_t kP = 0x000500000ac90102, kQ = 0x000500000ac90104;  // P and Q @o2ib

Bytes reth(std::uint64_t va, std::uint32_t rkey, std::uint32_t len) {
  Bytes b;
  put32(b, static_cast<std::uint32_t>(va >> 32));
  put32(b, static_cast<std::uint32_t>(va));
  put32(b, rkey);
  put32(b, len);
  return b;
}

o2ib::MsgHeader o2ib_header(o2ib::MsgType t) {
  o2ib::MsgHeader h;
  h.type = t;
  h.credits = 1;
  h.srcnid = Nid::from_nid4(kP);
  h.srcstamp = 1795325402645298;
  h.dstnid = Nid::from_nid4(kQ);
  h.dststamp = 1795325402627816;
  return h;
}

// An o2iblnd IMMEDIATE carrying an LNet PUT of `payload`.
Bytes immediate(const Bytes& payload) {
  LnetHeader lh;
  lh.dest_nid = Nid::from_nid4(kQ);
  lh.src_nid = Nid::from_nid4(kP);
  lh.set(PutFields{WireHandle::none(), 0x7ddb000000000002, 0, 52, 0});
  lh.payload_length = static_cast<std::uint32_t>(payload.size());
  const o2ib::Msg m{o2ib_header(o2ib::MsgType::immediate), o2ib::Immediate{lh, payload}};
  Bytes out(o2ib::wire_size(m));
  EXPECT_TRUE(o2ib::encode_msg(m, out, ByteOrder::little).has_value());
  return out;
}

Bytes payload_of(std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(i * 7);
  return b;
}

struct Feed {
  RoceDecoder dec;
  std::vector<Pdu> out;
  std::uint32_t frame = 0;
  void packet(const Bytes& roce, bool from_p = true) {
    Ipv4Spec ip;
    if (!from_p) std::swap(ip.src, ip.dst);
    const Bytes f = udp_frame(ip, 49152, kRoceV2Port, roce);
    auto p = parse_frame(LinkType::ethernet, f);
    ASSERT_TRUE(p.has_value());
    dec.add(*p, {++frame, frame * 0.001}, out);
  }
};

// ---- headers ---------------------------------------------------------------------------

TEST(RoceParse, SendOnlyStripsPadAndIcrc) {
  const Bytes data = {1, 2, 3, 4, 5};
  const Bytes packet = roce_packet(kSendOnly, kQp, 77, {}, data, 3);  // payload views it
  auto p = parse_roce(packet);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(name_of(p->bth), "RC SEND Only");
  EXPECT_EQ(p->bth.dest_qp, kQp);
  EXPECT_EQ(p->bth.psn, 77u);
  EXPECT_TRUE(p->bth.ack_req);
  EXPECT_EQ(p->bth.pad_count, 3);
  EXPECT_EQ(Bytes(p->payload.begin(), p->payload.end()), data);
  EXPECT_EQ(p->icrc, 0xdeadbeefu);
  EXPECT_EQ(p->part(), MsgPart::only);
}

TEST(RoceParse, ExtensionHeaders) {
  auto w = parse_roce(roce_packet(kWriteFirst, kQp, 1, reth(0xffff8a90d5387000, 0xb6e, 4096), payload_of(1024)));
  ASSERT_TRUE(w && w->reth);
  EXPECT_EQ(w->reth->va, 0xffff8a90d5387000u);
  EXPECT_EQ(w->reth->rkey, 0xb6eu);
  EXPECT_EQ(w->reth->dma_length, 4096u);
  EXPECT_EQ(w->payload_size, 1024u);
  EXPECT_TRUE(w->is_write());

  auto a = parse_roce(roce_packet(kAcknowledge, kQp, 9, {0x1f, 0, 0, 5}, {}, 0, false));
  ASSERT_TRUE(a && a->aeth);
  EXPECT_EQ(a->aeth->syndrome, 0x1f);
  EXPECT_EQ(a->aeth->msn, 5u);
  EXPECT_EQ(describe_syndrome(0x1f), "ACK");
  EXPECT_EQ(describe_syndrome(0x60), "NAK (PSN sequence error)");

  Bytes deth;
  put32(deth, 0x80010000);
  put32(deth, 1);
  auto u = parse_roce(roce_packet(kUdSendOnly, 1, 0, deth, {}));
  ASSERT_TRUE(u && u->deth);
  EXPECT_EQ(u->deth->qkey, 0x80010000u);
  EXPECT_EQ(u->deth->src_qp, 1u);
}

TEST(RoceParse, RejectsTruncatedAndUnknownPackets) {
  EXPECT_EQ(parse_roce(Bytes(15, 0)).error(), WireError::truncated);
  EXPECT_EQ(parse_roce(roce_packet(kWriteFirst, kQp, 1, Bytes(8, 0), {})).error(), WireError::truncated);  // RETH cut
  EXPECT_EQ(parse_roce(roce_packet(0x15, kQp, 1, {}, {})).error(), WireError::bad_type);  // reserved opcode
  EXPECT_EQ(parse_roce(roce_packet(kUdSendOnly + 0x06, 1, 0, Bytes(8, 0), {})).error(), WireError::bad_type);
}

// ---- SEND reassembly --------------------------------------------------------------------

TEST(RoceDecoder, MultiPacketSendIsReassembledPerQp) {
  const Bytes msg = immediate(payload_of(2001));  // 2121 bytes: 1024 + 1024 + 73
  Feed f;
  f.packet(roce_packet(kSendFirst, kQp, 100, {}, slice(msg, 0, 1024)));
  f.packet(roce_packet(kAcknowledge, kQp, 5, {0, 0, 0, 1}, {}), false);  // the other way: does not interfere
  f.packet(roce_packet(kSendMiddle, kQp, 101, {}, slice(msg, 1024, 1024)));
  f.packet(roce_packet(kSendLast, kQp, 102, {}, slice(msg, 2048, 73), 3));
  ASSERT_EQ(f.out.size(), 4u);
  EXPECT_NE(f.out[0].as<PacketPdu>(), nullptr);
  EXPECT_NE(f.out[2].as<PacketPdu>(), nullptr);
  const Pdu& last = f.out[3];
  const auto* o = last.as<O2ibPdu>();
  ASSERT_NE(o, nullptr) << (last.error ? std::string(name(*last.error)) : "");
  EXPECT_EQ(last.bytes, msg);
  EXPECT_EQ(last.frames.first, 1u);
  EXPECT_EQ(last.frames.last, 4u);
  EXPECT_EQ(last.frames.count, 3u);
  ASSERT_NE(o->msg.msg.immediate(), nullptr);
  EXPECT_EQ(o->msg.msg.immediate()->payload.size(), 2001u);
  EXPECT_EQ(o->msg.msg.immediate()->hdr.put().ptl_index, 52u);
  EXPECT_EQ(reencode(last), msg);
}

TEST(RoceDecoder, MiddleWithoutFirstIsReportedNotDecoded) {
  const Bytes msg = immediate(payload_of(1500));
  Feed f;
  f.packet(roce_packet(kSendMiddle, kQp, 101, {}, slice(msg, 0, 1024)));
  f.packet(roce_packet(kSendLast, kQp, 102, {}, slice(msg, 1024, msg.size() - 1024)));
  ASSERT_EQ(f.out.size(), 2u);
  EXPECT_EQ(f.out[0].error, WireError::truncated);
  EXPECT_EQ(f.out[1].error, WireError::truncated);
  EXPECT_EQ(f.out[1].as<O2ibPdu>(), nullptr);
}

TEST(RoceDecoder, RetransmittedSendIsMarkedAndNotDecodedTwice) {
  const Bytes msg = immediate(payload_of(16));
  Feed f;
  f.packet(roce_packet(kSendOnly, kQp, 500, {}, msg));
  f.packet(roce_packet(kSendOnly, kQp, 501, {}, msg));
  f.packet(roce_packet(kSendOnly, kQp, 500, {}, msg));  // the requester retried PSN 500
  ASSERT_EQ(f.out.size(), 3u);
  EXPECT_NE(f.out[0].as<O2ibPdu>(), nullptr);
  EXPECT_NE(f.out[1].as<O2ibPdu>(), nullptr);
  EXPECT_TRUE(f.out[2].roce()->packet->retransmission);
  EXPECT_EQ(f.out[2].as<O2ibPdu>(), nullptr);
}

TEST(RoceDecoder, QpReusedWithAnEarlierStartPsnIsNotARetransmission) {
  const Bytes msg = immediate({});
  Feed f;
  f.packet(roce_packet(kSendOnly, kQp, 0x800000, {}, msg));
  f.packet(roce_packet(kSendOnly, kQp, 0x100000, {}, msg));  // a new connection on the same QP number
  ASSERT_EQ(f.out.size(), 2u);
  EXPECT_FALSE(f.out[1].roce()->packet->retransmission);
  EXPECT_NE(f.out[1].as<O2ibPdu>(), nullptr);
}

TEST(RoceDecoder, PsnWrapIsNotARetransmission) {
  const Bytes msg = immediate({});
  Feed f;
  f.packet(roce_packet(kSendOnly, kQp, kPsnMask, {}, msg));
  f.packet(roce_packet(kSendOnly, kQp, 0, {}, msg));
  ASSERT_EQ(f.out.size(), 2u);
  EXPECT_FALSE(f.out[1].roce()->packet->retransmission);
  EXPECT_NE(f.out[1].as<O2ibPdu>(), nullptr);
}

TEST(RoceDecoder, UnfinishedSendIsReportedAtTheEnd) {
  const Bytes msg = immediate(payload_of(1500));
  Feed f;
  f.packet(roce_packet(kSendFirst, kQp, 7, {}, slice(msg, 0, 1024)));
  f.dec.finish(f.out);
  ASSERT_EQ(f.out.size(), 2u);
  EXPECT_EQ(f.out[1].error, WireError::truncated);
  EXPECT_EQ(f.out[1].bytes, slice(msg, 0, 1024));
}

// ---- IB CM ----------------------------------------------------------------------------------

// A CM MAD (UD SEND Only to QP1): header, message fields, private data at `private_at`.
Bytes cm_packet(std::uint16_t attr, std::size_t private_at, const Bytes& fields, const Bytes& private_data) {
  Bytes mad = {1, kMgmtClassCm, 2, 3, 0, 0, 0, 0};
  put32(mad, 0x2);
  put32(mad, 0xd6ff185f);  // TID
  put16(mad, attr);
  put16(mad, 0);
  put32(mad, 0);
  Bytes cm = fields;
  cm.resize(private_at, 0);
  cm.insert(cm.end(), private_data.begin(), private_data.end());
  cm.resize(kMadSize - kMadHeaderSize, 0);
  Bytes deth;
  put32(deth, 0x80010000);
  put32(deth, 1);
  return roce_packet(kUdSendOnly, kGsiQp, 0, deth, concat({mad, cm}));
}

TEST(RoceDecoder, CmRequestCarriesRdmaCmHeaderAndConnreq) {
  const o2ib::Msg req{o2ib_header(o2ib::MsgType::connreq), o2ib::ConnParams{8, 257, 4096}};
  Bytes connreq(o2ib::kConnMsgSize);
  ASSERT_TRUE(o2ib::encode_msg(req, connreq, ByteOrder::little));
  Bytes cma_hdr = {0x00, 0x40, 0x03, 0xff};  // version 0, IPv4, port 1023
  cma_hdr.resize(4 + 12, 0);
  put32(cma_hdr, 0x0ac90102);
  cma_hdr.resize(20 + 12, 0);
  put32(cma_hdr, 0x0ac90104);
  Bytes fields;
  put32(fields, 0x5f18ffd6);  // local comm id
  put32(fields, 0);
  put32(fields, 0x00000000);  // service id: RDMA_PS_TCP, port 987
  put32(fields, 0x010603db);
  fields.resize(32, 0);
  put32(fields, 0x00001100);  // local QPN 0x11, responder resources 0
  fields.resize(44, 0);
  put32(fields, 0xa5792e00);  // starting PSN 0xa5792e
  Feed f;
  f.packet(cm_packet(0x0010, 140, fields, concat({cma_hdr, connreq})));
  ASSERT_EQ(f.out.size(), 1u);
  const auto* c = f.out[0].as<CmPdu>();
  ASSERT_NE(c, nullptr) << (f.out[0].error ? std::string(name(*f.out[0].error)) : "");
  EXPECT_EQ(c->cm.attr, CmAttr::req);
  EXPECT_EQ(c->cm.mad.tid, 0x2d6ff185fu);
  EXPECT_EQ(c->cm.local_comm_id, 0x5f18ffd6u);
  EXPECT_EQ(c->cm.service_id, 0x00000000010603dbu);
  EXPECT_EQ(c->cm.local_qpn, 0x11u);
  EXPECT_EQ(c->cm.start_psn, 0xa5792eu);
  std::uint16_t port = 0;
  EXPECT_TRUE(is_rdma_cm_service(c->cm.service_id, &port));
  EXPECT_EQ(port, 987);
  ASSERT_TRUE(c->cma.has_value());
  EXPECT_EQ(c->cma->port, 1023);
  EXPECT_EQ(to_string(c->cma->src), "10.201.1.2");
  EXPECT_EQ(to_string(c->cma->dst), "10.201.1.4");
  ASSERT_TRUE(c->msg.has_value());
  EXPECT_EQ(c->msg->msg, req);
  EXPECT_EQ(reencode(f.out[0]), f.out[0].bytes);
}

TEST(RoceDecoder, CmRejectCarriesTheO2iblndReject) {
  const o2ib::Reject rej{kIbMagic, o2ib::kVersion2, o2ib::RejectReason::conn_race, 1795325402627816,
                         o2ib::ConnParams{8, 257, 4096}};
  Bytes pd(o2ib::kRejectSize);
  ASSERT_TRUE(o2ib::encode_reject(rej, pd, ByteOrder::little));
  Bytes fields;
  put32(fields, 0x8ea1c4ad);
  put32(fields, 0x5f18ffd6);
  put16(fields, 0);
  put16(fields, kCmRejectConsumer);
  Feed f;
  f.packet(cm_packet(0x0012, 84, fields, pd), false);
  ASSERT_EQ(f.out.size(), 1u);
  const auto* c = f.out[0].as<CmPdu>();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->cm.attr, CmAttr::rej);
  EXPECT_EQ(c->cm.reject_reason, kCmRejectConsumer);
  EXPECT_EQ(c->cm.remote_comm_id, 0x5f18ffd6u);
  ASSERT_TRUE(c->rej.has_value());
  EXPECT_EQ(c->rej->rej, rej);
  EXPECT_EQ(reencode(f.out[0]), f.out[0].bytes);
}

TEST(RoceDecoder, NonCmMadOnQp1IsNotMistakenForCm) {
  Bytes mad(kMadSize, 0);
  mad[1] = 0x03;  // subnet administration
  Bytes deth(8, 0);
  Feed f;
  f.packet(roce_packet(kUdSendOnly, kGsiQp, 0, deth, mad));
  ASSERT_EQ(f.out.size(), 1u);
  EXPECT_EQ(f.out[0].as<CmPdu>(), nullptr);
  EXPECT_EQ(f.out[0].error, WireError::bad_type);
}

}  // namespace
}  // namespace lnetr::test
