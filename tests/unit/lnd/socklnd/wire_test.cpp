#include "lnd/socklnd/wire.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "tests/support/hex.hpp"
#include "tests/support/nid.hpp"

namespace lnetr::sock {
namespace {

using test::hex;
using Bytes = std::vector<std::uint8_t>;

using test::nid;

template <class T, class F>
Bytes encode_with(const T& value, std::size_t size, F encode) {
  Bytes out(size);
  auto n = encode(value, MutableByteSpan(out));
  EXPECT_TRUE(n.has_value());
  if (n) out.resize(*n);
  return out;
}

Bytes encode(const AcceptorRequest& r) { return encode_with(r, 64, encode_acceptor_request); }
Bytes encode(const Hello& h) { return encode_with(h, 256, encode_hello); }

// ---- acceptor request (socklnd.md §3, §11.1) --------------------------------

const Bytes kSpecAcceptor = hex("00 71 ce ac 01 00 00 00 0a 01 a8 c0 00 00 02 00");

TEST(Acceptor, SpecRequestRoundTrips) {
  EXPECT_EQ(*acceptor_bytes_needed(ByteSpan(kSpecAcceptor).first(8)), kAcceptorV1Size);
  auto r = decode_acceptor_request(kSpecAcceptor);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->version, 1u);
  EXPECT_EQ(r->order, ByteOrder::little);
  EXPECT_EQ(r->nid, nid("192.168.1.10@tcp"));
  EXPECT_EQ(encode(*r), kSpecAcceptor);
}

TEST(Acceptor, SwappedSenderIsDetected) {
  const Bytes be = hex("ac ce 71 00 00 00 00 01 00 02 00 00 c0 a8 01 0a");
  auto r = decode_acceptor_request(be);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->order, ByteOrder::big);
  EXPECT_EQ(r->nid, nid("192.168.1.10@tcp"));
  EXPECT_EQ(encode(*r), be);
}

TEST(Acceptor, Version2CarriesALargeNid) {
  AcceptorRequest r{2, nid("2001:db8::7@tcp"), ByteOrder::little};
  const Bytes b = encode(r);
  ASSERT_EQ(b.size(), kAcceptorV2Size);
  EXPECT_EQ(b[8], 12);  // nid_size of the 20-byte NID
  EXPECT_EQ(*acceptor_bytes_needed(b), kAcceptorV2Size);
  EXPECT_EQ(*decode_acceptor_request(b), r);
  EXPECT_EQ(encode_acceptor_request(r, MutableByteSpan()).error(), WireError::truncated);
  Bytes out(16);
  EXPECT_EQ(encode_acceptor_request({1, r.nid, ByteOrder::little}, out).error(), WireError::bad_nid);
}

TEST(Acceptor, KernelAnswerToAWrongFirstRecord) {
  // v5 conn 1/2: a Linux acceptor answers a HELLO (or acceptor version 99)
  // with {magic, 1, nid 0}.
  const Bytes answer = hex("00 71 ce ac 01 00 00 00 00 00 00 00 00 00 00 00");
  auto r = decode_acceptor_request(answer);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->nid.to_nid4(), 0u);
  EXPECT_EQ(encode(acceptor_answer()), answer);
}

TEST(Acceptor, HelloSentFirstIsRecognised) {
  EXPECT_TRUE(is_hello_magic(hex("63 69 72 45")));  // V2+ little-endian
  EXPECT_TRUE(is_hello_magic(hex("45 72 69 63")));  // V2+ big-endian
  EXPECT_TRUE(is_hello_magic(hex("ed 0d bc ee")));  // V1
  EXPECT_FALSE(is_hello_magic(hex("00 71 ce ac")));
  EXPECT_FALSE(is_hello_magic(hex("78 56 34 12")));
  EXPECT_FALSE(is_hello_magic(hex("63 69 72")));
}

TEST(Acceptor, BadRequestsFromTheV5Capture) {
  EXPECT_EQ(acceptor_bytes_needed(hex("78 56 34 12 01 00 00 00")).error(), WireError::bad_magic);
  EXPECT_EQ(acceptor_bytes_needed(hex("00 71 ce ac 63 00 00 00")).error(), WireError::bad_version);
  // A HELLO sent without the acceptor request.
  EXPECT_EQ(acceptor_bytes_needed(hex("63 69 72 45 03 00 00 00")).error(), WireError::bad_magic);
  for (std::size_t n = 0; n < 8; ++n) EXPECT_EQ(*acceptor_bytes_needed(ByteSpan(kSpecAcceptor).first(n)), 8u);
  for (std::size_t n = 0; n < kSpecAcceptor.size(); ++n)
    EXPECT_FALSE(decode_acceptor_request(ByteSpan(kSpecAcceptor).first(n))) << n;
  Bytes top = kSpecAcceptor;
  top[15] = 0x10;  // top byte of the nid4 set
  EXPECT_EQ(decode_acceptor_request(top).error(), WireError::bad_nid);
}

// ---- HELLO (socklnd.md §4, §11.2-11.3) -------------------------------------

const Bytes kSpecClientHello = hex(
    "63 69 72 45 03 00 00 00 14 01 a8 c0 00 00 02 00"
    "0a 01 a8 c0 00 00 02 00 39 30 00 00 00 00 00 00"
    "08 f7 e6 d5 c4 b3 a2 17 00 00 00 00 00 00 00 00"
    "01 00 00 00 00 00 00 00");

const Bytes kSpecRouterHello = hex(
    "63 69 72 45 03 00 00 00 0a 01 a8 c0 00 00 02 00"
    "14 01 a8 c0 00 00 02 00 39 30 00 00 00 00 00 00"
    "01 00 00 00 c4 b3 a2 17 00 00 00 00 00 00 00 00"
    "01 00 00 00 00 00 00 00");

TEST(Hello, SpecClientHelloV3) {
  EXPECT_EQ(*hello_bytes_needed(ByteSpan(kSpecClientHello).first(8)), kHelloV2Size);
  EXPECT_EQ(*hello_bytes_needed(kSpecClientHello), kHelloV2Size);
  auto h = decode_hello(kSpecClientHello);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->version, 3u);
  EXPECT_EQ(h->order, ByteOrder::little);
  EXPECT_EQ(h->src_nid, nid("192.168.1.20@tcp"));
  EXPECT_EQ(h->dst_nid, nid("192.168.1.10@tcp"));
  EXPECT_EQ(h->src_pid, kPidLustre);
  EXPECT_EQ(h->dst_pid, 0u);
  EXPECT_EQ(h->src_incarnation, 0x17A2B3C4D5E6F708ull);
  EXPECT_EQ(h->dst_incarnation, 0u);
  EXPECT_EQ(h->conn_type(), ConnType::control);
  EXPECT_EQ(h->nips, 0u);
  EXPECT_EQ(encode(*h), kSpecClientHello);
}

TEST(Hello, SpecRouterReplyIsBuiltFromTheRequest) {
  const Hello req = *decode_hello(kSpecClientHello);
  Hello reply;
  reply.version = req.version;
  reply.src_nid = req.dst_nid;
  reply.dst_nid = req.src_nid;
  reply.src_incarnation = 0x17A2B3C400000001ull;
  reply.ctype = static_cast<std::int32_t>(invert(req.conn_type()));
  reply.order = ByteOrder::little;
  EXPECT_EQ(encode(reply), kSpecRouterHello);
}

TEST(Hello, ConnectionTypesInvert) {
  EXPECT_EQ(invert(ConnType::bulk_in), ConnType::bulk_out);
  EXPECT_EQ(invert(ConnType::bulk_out), ConnType::bulk_in);
  EXPECT_EQ(invert(ConnType::control), ConnType::control);
  EXPECT_EQ(invert(ConnType::any), ConnType::any);
  EXPECT_STREQ(to_string(ConnType::bulk_out), "BULK_OUT");
  EXPECT_STREQ(to_string(ConnType::none), "NONE");
  EXPECT_STREQ(to_string(static_cast<ConnType>(7)), "?");
}

TEST(Hello, CapturedRefusalWithTypeNone) {
  // v5 frame 44: a kernel answers an unknown HELLO version with its own V3
  // HELLO of type NONE (0xffffffff).
  Hello h = *decode_hello(kSpecRouterHello);
  h.ctype = static_cast<std::int32_t>(ConnType::none);
  const Bytes b = encode(h);
  EXPECT_EQ(load_le<std::uint32_t>(&b[48]), 0xffffffffu);
  EXPECT_EQ(decode_hello(b)->conn_type(), ConnType::none);
}

TEST(Hello, SwappedSenderSwapsEveryField) {
  Hello h = *decode_hello(kSpecClientHello);
  h.order = ByteOrder::big;
  const Bytes be = encode(h);
  EXPECT_EQ(be[0], 0x45);  // "Eric" written big-endian
  EXPECT_EQ(load_be<std::uint64_t>(&be[8]), nid("192.168.1.20@tcp").to_nid4());
  EXPECT_EQ(load_be<std::uint32_t>(&be[48]), 1u);
  auto back = decode_hello(be);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->order, ByteOrder::big);
  EXPECT_EQ(*back, h);
}

TEST(Hello, V2WithAddressList) {
  Hello h = *decode_hello(kSpecClientHello);
  h.version = 2;
  h.nips = 2;
  h.ips[0] = 0xc0a80114;
  h.ips[1] = 0x0a000001;
  const Bytes b = encode(h);
  ASSERT_EQ(b.size(), kHelloV2Size + 8);
  EXPECT_EQ(*hello_bytes_needed(ByteSpan(b).first(kHelloV2Size)), kHelloV2Size + 8);
  EXPECT_EQ(*decode_hello(b), h);
  Bytes zero_ip = b;
  store_le<std::uint32_t>(&zero_ip[60], 0);
  EXPECT_EQ(decode_hello(zero_ip).error(), WireError::bad_value);
  Bytes too_many = b;
  store_le<std::uint32_t>(&too_many[52], 17);
  EXPECT_EQ(hello_bytes_needed(too_many).error(), WireError::bad_length);
  EXPECT_EQ(decode_hello(ByteSpan(b).first(kHelloV2Size + 4)).error(), WireError::truncated);
}

TEST(Hello, V4CarriesLargeNids) {
  Hello h;
  h.version = 4;
  h.src_nid = nid("2001:db8::20@tcp");
  h.dst_nid = nid("2001:db8::10@tcp");
  h.src_incarnation = 0x18ea46cb824220a9ull;
  h.ctype = static_cast<std::int32_t>(ConnType::bulk_out);
  const Bytes b = encode(h);
  ASSERT_EQ(b.size(), kHelloV4Size);
  EXPECT_EQ(b[8], 12);   // src nid_size
  EXPECT_EQ(b[28], 12);  // dst nid_size
  EXPECT_EQ(load_le<std::uint32_t>(&b[48]), kPidLustre);
  EXPECT_EQ(load_le<std::uint64_t>(&b[56]), h.src_incarnation);
  EXPECT_EQ(load_le<std::uint32_t>(&b[72]), 3u);
  EXPECT_EQ(*hello_bytes_needed(ByteSpan(b).first(8)), kHelloV4Size);
  EXPECT_EQ(*decode_hello(b), h);
  // V4 peers do not use nips: any value is accepted and no list follows.
  Bytes odd = b;
  store_le<std::uint32_t>(&odd[76], 1000);
  auto back = decode_hello(odd);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->nips, 1000u);
  EXPECT_EQ(encode(*back), odd);
}

TEST(Hello, V1IsALegacyLnetHeader) {
  Hello h;
  h.version = 1;
  h.order = ByteOrder::little;
  h.src_nid = nid("192.168.1.20@tcp");
  h.src_incarnation = 0x1122334455667788ull;
  h.ctype = static_cast<std::int32_t>(ConnType::bulk_in);
  h.nips = 1;
  h.ips[0] = 0xc0a80114;
  const Bytes b = encode(h);
  ASSERT_EQ(b.size(), kHelloV1Size + 4);
  EXPECT_EQ(hex("ed 0d bc ee 01 00 00 00"), Bytes(b.begin(), b.begin() + 8));
  auto lnet = decode_header(b, HeaderForm::nid4);  // it parses as an LNet header
  ASSERT_TRUE(lnet);
  EXPECT_EQ(lnet->type, MsgType::hello);
  EXPECT_EQ(lnet->payload_length, 4u);
  EXPECT_EQ(lnet->hello().incarnation, h.src_incarnation);
  EXPECT_EQ(lnet->hello().type, 2u);
  EXPECT_EQ(*hello_bytes_needed(ByteSpan(b).first(8)), 32u);
  EXPECT_EQ(*hello_bytes_needed(b), kHelloV1Size + 4);
  EXPECT_EQ(*decode_hello(b), h);
  Bytes not_hello = b;
  not_hello[24] = 1;
  EXPECT_EQ(decode_hello(not_hello).error(), WireError::bad_value);
  Bytes v1_1 = b;
  v1_1[6] = 1;  // version 1.1 does not exist
  EXPECT_EQ(hello_bytes_needed(v1_1).error(), WireError::bad_version);
}

TEST(Hello, BadHellosFromTheV5Capture) {
  Bytes b = kSpecClientHello;
  store_le<std::uint32_t>(&b[0], 0xdeadbeef);
  EXPECT_EQ(hello_bytes_needed(b).error(), WireError::bad_magic);
  b = kSpecClientHello;
  b[4] = 99;
  EXPECT_EQ(hello_bytes_needed(b).error(), WireError::bad_version);
  EXPECT_EQ(decode_hello(b).error(), WireError::bad_version);
  b = kSpecClientHello;
  b[15] = 1;  // src_nid top byte
  EXPECT_EQ(decode_hello(b).error(), WireError::bad_nid);
  for (std::size_t n = 0; n < kSpecClientHello.size(); ++n)
    EXPECT_FALSE(decode_hello(ByteSpan(kSpecClientHello).first(n))) << n;
  Hello big = *decode_hello(kSpecClientHello);
  big.src_nid = nid("2001:db8::1@tcp");
  Bytes out(64);
  EXPECT_EQ(encode_hello(big, out).error(), WireError::bad_nid);  // V3 carries nid4 only
}

// ---- messages (socklnd.md §6, §8, §11.4-11.5) -------------------------------

const Bytes kSpecFramedPut = hex(
    "c1 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 05 00 00 0a 00 00 05 00"
    "14 01 a8 c0 00 00 02 00 39 30 00 00 39 30 00 00"
    "01 00 00 00 08 00 00 00 88 77 66 55 44 33 22 11"
    "bc 0a 00 00 00 00 00 00 ab 12 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 04 00 00 00 00 00 00 00"
    "41 42 43 44 45 46 47 48");

TEST(Message, SpecFramedPut) {
  const ByteSpan all(kSpecFramedPut);
  EXPECT_EQ(*message_bytes_needed(all.first(10), 3, ByteOrder::little), kMsgHeaderSize);
  EXPECT_EQ(*message_bytes_needed(all.first(24), 3, ByteOrder::little), 96u);
  EXPECT_EQ(*message_bytes_needed(all.first(96), 3, ByteOrder::little), 104u);
  auto m = decode_message(all, 3, ByteOrder::little);
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->sock && m->lnet);
  EXPECT_EQ(*m->sock, (MsgHeader{kMsgLnet, 0, 0, 0}));
  EXPECT_EQ(m->lnet->dest_nid, nid("10.0.0.5@o2ib"));
  EXPECT_EQ(m->lnet->put().match_bits, 0x12ABull);
  EXPECT_EQ(std::string(m->payload.begin(), m->payload.end()), "ABCDEFGH");
  EXPECT_EQ(decode_message(all.first(103), 3, ByteOrder::little).error(), WireError::truncated);
  Bytes hdr(kMsgHeaderSize);
  ASSERT_TRUE(encode_msg_header(*m->sock, hdr, ByteOrder::little));
  EXPECT_EQ(hdr, Bytes(kSpecFramedPut.begin(), kSpecFramedPut.begin() + 24));
}

TEST(Message, HeadComesBeforeThePayload) {
  // A receiver reads the 96-byte head, then reads payload_length bytes into
  // a buffer of its choosing.
  const ByteSpan head_bytes = ByteSpan(kSpecFramedPut).first(96);
  EXPECT_EQ(*message_head_bytes_needed(head_bytes.first(4), 3, ByteOrder::little), kMsgHeaderSize);
  EXPECT_EQ(*message_head_bytes_needed(head_bytes.first(24), 3, ByteOrder::little), 96u);
  EXPECT_EQ(decode_message_head(head_bytes.first(95), 3, ByteOrder::little).error(), WireError::truncated);
  auto head = decode_message_head(head_bytes, 3, ByteOrder::little);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->size, 96u);
  EXPECT_EQ(head->payload_length(), 8u);
  EXPECT_EQ(head->lnet->src_nid, nid("192.168.1.20@tcp"));
  EXPECT_EQ(*message_head_bytes_needed(head_bytes, 1, ByteOrder::little), kLnetHeaderSize);  // V1: bare header
  Bytes noop(kMsgHeaderSize);
  ASSERT_TRUE(encode_msg_header(make_keepalive(), noop, ByteOrder::little));
  auto nh = decode_message_head(noop, 3, ByteOrder::little);
  ASSERT_TRUE(nh);
  EXPECT_FALSE(nh->lnet);
  EXPECT_EQ(nh->size, kMsgHeaderSize);
  EXPECT_EQ(nh->payload_length(), 0u);
}

TEST(Message, SpecNoops) {
  const Bytes zc_ack = hex("c0 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 05 00 00 00 00 00 00 00");
  const Bytes keepalive = hex("c0 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00");
  Bytes out(kMsgHeaderSize);
  ASSERT_TRUE(encode_msg_header(make_zc_ack(5), out, ByteOrder::little));
  EXPECT_EQ(out, zc_ack);
  ASSERT_TRUE(encode_msg_header(make_keepalive(), out, ByteOrder::little));
  EXPECT_EQ(out, keepalive);
  EXPECT_EQ(*message_bytes_needed(zc_ack, 3, ByteOrder::little), kMsgHeaderSize);
  auto m = decode_message(zc_ack, 3, ByteOrder::little);
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->lnet);
  EXPECT_EQ(zc_ack_of(*m->sock, 3), (ZcAck{ZcAck::Kind::single, 5, 5}));
  EXPECT_EQ(zc_ack_of(*decode_msg_header(keepalive, ByteOrder::little), 3).kind, ZcAck::Kind::keepalive);
}

TEST(Message, ZcAckEncodingsLinuxAccepts) {
  using K = ZcAck::Kind;
  EXPECT_EQ(zc_ack_of({kMsgNoop, 0, 3, 9}, 3), (ZcAck{K::range, 3, 9}));
  EXPECT_EQ(zc_ack_of({kMsgNoop, 0, 9, 3}, 3), (ZcAck{K::pair, 9, 3}));
  EXPECT_EQ(zc_ack_of({kMsgNoop, 0, 6, 6}, 3), (ZcAck{K::single, 6, 6}));
  EXPECT_EQ(zc_ack_of({kMsgNoop, 0, 0, 0}, 3).kind, K::none);
  // An LNET message may carry its own request and piggy-back an ACK.
  EXPECT_EQ(zc_ack_of({kMsgLnet, 0, 7, 4}, 3), (ZcAck{K::single, 4, 4}));
  EXPECT_EQ(zc_ack_of({kMsgLnet, 0, 7, 0}, 3).kind, K::none);
}

TEST(Message, ReservedCookieOneIsAKeepaliveFromV3On) {
  using K = ZcAck::Kind;
  EXPECT_EQ(zc_ack_of({kMsgNoop, 0, 0, 1}, 3).kind, K::keepalive);
  EXPECT_EQ(zc_ack_of({kMsgNoop, 0, 1, 1}, 4).kind, K::keepalive);
  EXPECT_EQ(zc_ack_of({kMsgLnet, 0, 9, 1}, 3).kind, K::keepalive);  // piggy-backed keepalive
  EXPECT_EQ(zc_ack_of({kMsgNoop, 0, 5, 1}, 3).kind, K::invalid);    // Linux: protocol error
  // V2 has no keepalive: cookie 1 is just an (unknown) cookie.
  EXPECT_EQ(zc_ack_of({kMsgNoop, 0, 0, 1}, 2), (ZcAck{K::single, 1, 1}));
}

TEST(Message, SwappedConnectionsSwapTheSocklndHeaderOnly) {
  MsgHeader h{kMsgLnet, 0, 0x2, 0};
  Bytes b(kMsgHeaderSize + kLnetHeaderSize);
  ASSERT_TRUE(encode_msg_header(h, b, ByteOrder::big));
  std::copy(kSpecFramedPut.begin() + 24, kSpecFramedPut.begin() + 96, b.begin() + 24);
  b[24 + 28] = 0;  // no payload
  EXPECT_EQ(b[3], 0xc1);
  auto m = decode_message(b, 3, ByteOrder::big);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->sock->zc_req_cookie, 2u);
  EXPECT_EQ(m->lnet->dest_nid, nid("10.0.0.5@o2ib"));  // LNet header stays little-endian
  EXPECT_EQ(decode_message(b, 3, ByteOrder::little).error(), WireError::bad_type);
}

TEST(Message, V1AndV4Framing) {
  // V1: a bare LNet header and its payload.
  const ByteSpan v1 = ByteSpan(kSpecFramedPut).subspan(24);
  EXPECT_EQ(*message_bytes_needed(v1.first(10), 1, ByteOrder::little), kLnetHeaderSize);
  EXPECT_EQ(*message_bytes_needed(v1, 1, ByteOrder::little), 80u);
  auto m1 = decode_message(v1, 1, ByteOrder::little);
  ASSERT_TRUE(m1);
  EXPECT_FALSE(m1->sock);
  EXPECT_EQ(m1->payload.size(), 8u);
  // V4: socklnd header + 96-byte nid16 header.
  LnetHeader h = *decode_header(v1, HeaderForm::nid4);
  Bytes v4(kMsgHeaderSize + kLnetHeader16Size + 8);
  ASSERT_TRUE(encode_msg_header({}, v4, ByteOrder::little));
  ASSERT_TRUE(encode_header(h, MutableByteSpan(v4).subspan(kMsgHeaderSize), HeaderForm::nid16));
  EXPECT_EQ(*message_bytes_needed(ByteSpan(v4).first(24), 4, ByteOrder::little), 120u);
  EXPECT_EQ(*message_bytes_needed(v4, 4, ByteOrder::little), 128u);
  auto m4 = decode_message(v4, 4, ByteOrder::little);
  ASSERT_TRUE(m4);
  EXPECT_EQ(*m4->lnet, h);
}

TEST(Message, FramingRefusesWhatLinuxRefuses) {
  Bytes b = kSpecFramedPut;
  b[0] = 0xc2;
  EXPECT_EQ(message_bytes_needed(b, 3, ByteOrder::little).error(), WireError::bad_type);
  b = kSpecFramedPut;
  store_le<std::uint32_t>(&b[24 + 28], kLnetMtu + 1);  // payload beyond 1 MiB
  EXPECT_EQ(message_bytes_needed(b, 3, ByteOrder::little).error(), WireError::bad_length);
  b = kSpecFramedPut;
  b[24 + 24] = 7;  // LNet type 7
  EXPECT_EQ(decode_message(b, 3, ByteOrder::little).error(), WireError::bad_type);
  EXPECT_EQ(message_bytes_needed(kSpecFramedPut, 5, ByteOrder::little).error(), WireError::bad_version);
}

TEST(Checksum, MatchesCrc32WithoutFinalInversion) {
  // zlib's CRC-32 of "123456789" is 0xCBF43926; socklnd V2 leaves out the
  // final inversion.
  const std::string s = "123456789";
  const ByteSpan all(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
  Checksum whole;
  whole.update(all);
  EXPECT_EQ(whole.value(), 0xCBF43926u ^ 0xffffffffu);
  Checksum pieces;
  pieces.update(all.first(4));
  pieces.update(all.subspan(4));
  EXPECT_EQ(pieces.value(), whole.value());
}

}  // namespace
}  // namespace lnetr::sock
