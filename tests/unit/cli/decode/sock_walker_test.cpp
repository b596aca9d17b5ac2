// The socklnd stream walker on hand-built streams: streaming in arbitrary
// pieces, byte order, broken handshakes (as the v5 captures show them from
// real kernels) and resynchronisation inside a stream.
#include <gtest/gtest.h>

#include "cli/decode/sock_walker.hpp"
#include "frames.hpp"

namespace lnetr::test {
namespace {

using namespace lnetr::decode;

constexpr std::uint64_t kA = 0x000200000ac90102, kB = 0x000200000ac90104;

Bytes acceptor(ByteOrder order, std::uint32_t version = 1) {
  Bytes b(sock::kAcceptorV1Size);
  store(b.data(), kAcceptorMagic, order);
  store(b.data() + 4, version, order);
  store(b.data() + 8, kB, order);
  return b;
}

Bytes hello(ByteOrder order, sock::ConnType t = sock::ConnType::control) {
  sock::Hello h;
  h.order = order;
  h.src_nid = Nid::from_nid4(kA);
  h.dst_nid = Nid::from_nid4(kB);
  h.src_incarnation = 0x18ea46cb824220a9;
  h.ctype = static_cast<std::int32_t>(t);
  Bytes b(sock::hello_size(h));
  EXPECT_TRUE(sock::encode_hello(h, b).has_value());
  return b;
}

LnetHeader get_header() {
  LnetHeader h;
  h.dest_nid = Nid::from_nid4(kB);
  h.src_nid = Nid::from_nid4(kA);
  h.set(GetFields{WireHandle{0x18ea46cb800b8647, 0x1c11}, kPingMatchBits, 0, 0, 3960});
  return h;
}

Bytes message(const sock::MsgHeader& mh, ByteOrder order, const LnetHeader* lh = nullptr, const Bytes& payload = {}) {
  Bytes b(sock::kMsgHeaderSize + (lh ? kLnetHeaderSize : 0));
  EXPECT_TRUE(sock::encode_msg_header(mh, b, order));
  if (lh) {
    EXPECT_TRUE(encode_header(*lh, MutableByteSpan(b).subspan(sock::kMsgHeaderSize), HeaderForm::nid4));
  }
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

// A discovery PUSH: PUT to portal 0 with the ping match bits and ping info.
Bytes push(ByteOrder order) {
  const PingNi ni{Nid::from_nid4(kA), kNiStatusUp};
  const PingInfoSpec spec{ping_feature::ni_status | ping_feature::multi_rail, kPidLustre, 3, {&ni, 1}};
  Bytes info(ping_info_encoded_size(spec));
  EXPECT_TRUE(encode_ping_info(spec, info, order));
  LnetHeader h = get_header();
  h.set(PutFields{WireHandle{1, 2}, kPingMatchBits, 0, kLnetReservedPortal, 0});
  h.payload_length = static_cast<std::uint32_t>(info.size());
  sock::MsgHeader mh;
  return message(mh, order, &h, info);
}

std::vector<Pdu> walk_all(Side side, bool from_start, const Bytes& stream, std::size_t piece) {
  SockStreamWalker w(side, from_start);
  std::vector<Pdu> out;
  Bytes pending;
  for (std::size_t at = 0; at < stream.size(); at += piece) {
    const Bytes next = slice(stream, at, std::min(piece, stream.size() - at));
    pending.insert(pending.end(), next.begin(), next.end());
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(w.walk(pending, false, out)));
  }
  EXPECT_EQ(w.walk(pending, true, out), pending.size());
  return out;
}

std::vector<std::size_t> sizes(const std::vector<Pdu>& v) {
  std::vector<std::size_t> s;
  for (const Pdu& p : v) s.push_back(p.bytes.size());
  return s;
}

TEST(SockWalker, ConnectorStreamInAnyPiecesGivesTheSamePdus) {
  for (ByteOrder order : {ByteOrder::little, ByteOrder::big}) {
    SCOPED_TRACE(order == ByteOrder::little ? "little-endian peer" : "big-endian peer");
    const LnetHeader get = get_header();
    const Bytes stream = concat({acceptor(order), hello(order), message(sock::MsgHeader{}, order, &get),
                                 message(sock::make_zc_ack(2), order), push(order)});
    const std::vector<Pdu> whole = walk_all(Side::connector, true, stream, stream.size());
    ASSERT_EQ(sizes(whole), (std::vector<std::size_t>{16, 56, 96, 24, 96 + 48}));  // ping info: header, 0@lo, 1 NI
    for (std::size_t piece : {1u, 7u, 100u}) {
      SCOPED_TRACE("pieces of " + std::to_string(piece));
      EXPECT_EQ(sizes(walk_all(Side::connector, true, stream, piece)), sizes(whole));
    }
    EXPECT_EQ(whole[0].as<AcceptorPdu>()->view->order, order);
    EXPECT_EQ(whole[1].as<HelloPdu>()->view->order, order);
    const auto* m = whole[2].as<SockMsgPdu>();
    ASSERT_TRUE(m && m->msg.lnet);
    EXPECT_EQ(*m->msg.lnet, get);
    EXPECT_EQ(sock::zc_ack_of(*whole[3].as<SockMsgPdu>()->msg.sock, 3).first, 2u);
    const auto* p = whole[4].as<SockMsgPdu>();
    ASSERT_TRUE(p && p->ping);
    EXPECT_EQ(p->ping->order, order);
    EXPECT_EQ((*p->ping->begin()).nid, Nid::from_nid4(kA));
    for (const Pdu& pdu : whole) {
      EXPECT_FALSE(pdu.error.has_value());
      EXPECT_EQ(reencode(pdu), pdu.bytes);
    }
  }
}

TEST(SockWalker, HelloWithoutAcceptorRequestIsStillAHello) {
  const std::vector<Pdu> out = walk_all(Side::connector, true, hello(ByteOrder::little), 1000);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_NE(out[0].as<HelloPdu>(), nullptr);
  EXPECT_FALSE(out[0].error.has_value());
}

TEST(SockWalker, AcceptingSideAcceptorFormatAnswer) {
  const Bytes answer = {0x00, 0x71, 0xce, 0xac, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<Pdu> out = walk_all(Side::acceptor, true, answer, 1000);
  ASSERT_EQ(out.size(), 1u);
  const auto* a = out[0].as<AcceptorPdu>();
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->answer);
  EXPECT_EQ(a->version, 1u);
}

TEST(SockWalker, WrongAcceptorMagicIsClassifiedAndTheRestIsUndecodable) {
  Bytes req = acceptor(ByteOrder::little);
  store_le<std::uint32_t>(req.data(), 0x12345678);
  const std::vector<Pdu> out = walk_all(Side::connector, true, concat({req, hello(ByteOrder::little)}), 1000);
  ASSERT_EQ(out.size(), 2u);
  const auto* a = out[0].as<AcceptorPdu>();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(out[0].error, WireError::bad_magic);
  EXPECT_EQ(a->magic, 0x12345678u);
  ASSERT_TRUE(a->view.has_value());  // still shows the NID asked for
  EXPECT_EQ(a->view->nid, Nid::from_nid4(kB));
  const auto* rest = out[1].as<StreamBytesPdu>();
  ASSERT_NE(rest, nullptr);
  EXPECT_EQ(rest->why, StreamBytesPdu::Why::undecodable);
  EXPECT_EQ(out[1].error, WireError::bad_magic);
}

TEST(SockWalker, UnknownAcceptorVersion) {
  const std::vector<Pdu> out = walk_all(Side::connector, true, acceptor(ByteOrder::little, 99), 1000);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].error, WireError::bad_version);
  EXPECT_EQ(out[0].as<AcceptorPdu>()->version, 99u);
  EXPECT_FALSE(out[0].as<AcceptorPdu>()->view.has_value());  // the NID's layout depends on the version
}

TEST(SockWalker, HelloWithUnknownVersionOrWrongMagicShowsItsFields) {
  Bytes v99 = hello(ByteOrder::little);
  store_le<std::uint32_t>(v99.data() + 4, 99);
  Bytes bad = hello(ByteOrder::little, sock::ConnType::bulk_in);
  store_le<std::uint32_t>(bad.data(), 0xdeadbeef);
  for (const auto& [bytes, error] : {std::pair{v99, WireError::bad_version}, std::pair{bad, WireError::bad_magic}}) {
    const std::vector<Pdu> out = walk_all(Side::acceptor, true, bytes, 1000);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].error, error);
    const auto* h = out[0].as<HelloPdu>();
    ASSERT_TRUE(h && h->view);
    EXPECT_EQ(h->view->src_nid, Nid::from_nid4(kA));
    EXPECT_EQ(h->view->version, h->version);
    EXPECT_FALSE(reencode(out[0]).has_value());
  }
}

TEST(SockWalker, UnknownMessageTypeEndsTheWalk) {
  Bytes msg = message(sock::MsgHeader{}, ByteOrder::little, nullptr);
  store_le<std::uint32_t>(msg.data(), 0xC7);
  const std::vector<Pdu> out =
      walk_all(Side::connector, true, concat({acceptor(ByteOrder::little), hello(ByteOrder::little), msg}), 1000);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].error, WireError::bad_type);
  EXPECT_EQ(out[2].as<StreamBytesPdu>()->why, StreamBytesPdu::Why::undecodable);
}

TEST(SockWalker, ElementCutByTheEndOfTheCaptureIsUnfinished) {
  const Bytes stream = concat({acceptor(ByteOrder::little), slice(hello(ByteOrder::little), 0, 30)});
  const std::vector<Pdu> out = walk_all(Side::connector, true, stream, 1000);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].as<StreamBytesPdu>()->why, StreamBytesPdu::Why::unfinished);
  EXPECT_EQ(out[1].error, WireError::truncated);
  EXPECT_EQ(out[1].bytes.size(), 30u);
}

TEST(SockWalker, ResynchronisesOnTheFirstWholeMessageOfAJoinedStream) {
  const LnetHeader get = get_header();
  const Bytes first = push(ByteOrder::big);
  const Bytes stream = concat({slice(first, 50, first.size() - 50),  // the capture starts inside a message
                               message(sock::MsgHeader{}, ByteOrder::big, &get), push(ByteOrder::big)});
  for (std::size_t piece : {1u, 1000u}) {
    const std::vector<Pdu> out = walk_all(Side::acceptor, false, stream, piece);
    ASSERT_GE(out.size(), 3u);
    std::size_t skipped = 0, i = 0;
    for (; i < out.size() && out[i].as<StreamBytesPdu>(); ++i) {
      EXPECT_EQ(out[i].as<StreamBytesPdu>()->why, StreamBytesPdu::Why::mid_stream);
      skipped += out[i].bytes.size();
    }
    EXPECT_EQ(skipped, first.size() - 50);
    ASSERT_EQ(out.size() - i, 2u);
    EXPECT_EQ(*out[i].as<SockMsgPdu>()->msg.lnet, get);
    EXPECT_EQ(out[i].as<SockMsgPdu>()->order, ByteOrder::big);
    EXPECT_TRUE(out[i + 1].as<SockMsgPdu>()->ping.has_value());
  }
}

}  // namespace
}  // namespace lnetr::test
