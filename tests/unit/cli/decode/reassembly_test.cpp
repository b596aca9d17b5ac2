// Frame parsing and TCP reassembly on hand-built frames: VLAN tags,
// Ethernet padding, TSO super-frames, out-of-order and retransmitted
// segments, sequence-number wrap, port reuse, holes, and a whole socklnd
// handshake delivered out of order through CaptureDecoder.
#include <gtest/gtest.h>

#include "cli/decode/capture.hpp"
#include "cli/decode/frame.hpp"
#include "cli/decode/tcp_reassembly.hpp"
#include "frames.hpp"

namespace lnetr::test {
namespace {

using namespace lnetr::decode;

constexpr std::uint8_t kSyn = tcp_flag::syn, kAck = tcp_flag::ack, kFin = tcp_flag::fin, kRst = tcp_flag::rst;

ParsedFrame parse(const Bytes& f) {
  auto p = parse_frame(LinkType::ethernet, f);
  EXPECT_TRUE(p.has_value()) << (p ? "" : std::string(name(p.error())));
  return p ? *p : ParsedFrame{};
}

Bytes bytes_of(ByteSpan s) { return Bytes(s.begin(), s.end()); }

Bytes pattern(std::size_t n, std::uint8_t base) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(base + i);
  return b;
}

// ---- frames -------------------------------------------------------------------------

TEST(Frame, TrimsEthernetPaddingToTheIpLength) {
  TcpSpec s;
  const Bytes f = tcp_frame(s, {1, 2, 3});  // 54 + 3 bytes, padded to 60 with 0xEE
  ASSERT_EQ(f.size(), 60u);
  EXPECT_EQ(bytes_of(parse(f).tcp.payload), (Bytes{1, 2, 3}));
}

TEST(Frame, ReadsThroughVlanAndQinQTags) {
  TcpSpec s;
  s.ip.vlan = 0x0123;
  s.ip.outer_vlan = 0x0456;
  const Bytes f = tcp_frame(s, {9});  // the parsed frame views these bytes
  const ParsedFrame p = parse(f);
  EXPECT_EQ(p.vlan, 0x0456);  // the outermost tag
  EXPECT_EQ(p.src.port, 1023);
  EXPECT_EQ(to_string(p.dst), "10.201.1.4:988");
  EXPECT_EQ(bytes_of(p.tcp.payload), Bytes{9});
}

TEST(Frame, TsoSuperFrameWithZeroIpLengthUsesTheWholeFrame) {
  TcpSpec s;
  s.ip.zero_total_length = true;
  const Bytes data = pattern(3000, 0);
  EXPECT_EQ(parse(tcp_frame(s, data)).tcp.payload.size(), 3000u);
}

TEST(Frame, ReportsWhyAFrameIsSkipped) {
  Bytes arp = tcp_frame({}, {});
  arp[12] = 0x08;  // EtherType ARP
  arp[13] = 0x06;
  EXPECT_EQ(parse_frame(LinkType::ethernet, arp).error(), FrameSkip::not_ip);
  TcpSpec s;
  Bytes frag = tcp_frame(s, {1});
  frag[14 + 6] |= 0x20;  // more fragments
  EXPECT_EQ(parse_frame(LinkType::ethernet, frag).error(), FrameSkip::ip_fragment);
  const Bytes whole = tcp_frame(s, pattern(40, 0));
  EXPECT_EQ(parse_frame(LinkType::ethernet, ByteSpan(whole).first(40)).error(), FrameSkip::truncated);
}

// ---- stream buffer ---------------------------------------------------------------------

TEST(StreamBuffer, OutOfOrderSegmentWaitsForTheHole) {
  StreamBuffer s;
  const Bytes data = pattern(30, 0);
  s.add(10, ByteSpan(data).subspan(10, 10), {7, 0.7});
  s.add(20, ByteSpan(data).subspan(20, 10), {8, 0.8});
  EXPECT_TRUE(s.data().empty());
  EXPECT_EQ(s.held_bytes(), 20u);
  s.add(0, ByteSpan(data).first(10), {9, 0.9});  // the hole, filled last
  EXPECT_EQ(bytes_of(s.data()), data);
  EXPECT_EQ(s.held_bytes(), 0u);
  const FrameSpan all = s.frames(0, 30);
  EXPECT_EQ(all.first, 7u);  // lowest frame number, not the first byte's
  EXPECT_EQ(all.last, 9u);
  EXPECT_EQ(all.count, 3u);
  EXPECT_DOUBLE_EQ(all.time, 0.7);
  const FrameSpan tail = s.frames(15, 25);
  EXPECT_EQ(tail.first, 7u);
  EXPECT_EQ(tail.last, 8u);
  EXPECT_EQ(tail.count, 2u);
}

TEST(StreamBuffer, RetransmittedOverlapKeepsTheFirstCopy) {
  StreamBuffer s;
  const Bytes first = pattern(10, 0);
  Bytes again = pattern(10, 5);  // covers 5..14; its first half differs from what we have
  again[0] = again[1] = 0xAA;
  s.add(0, first, {1, 0});
  s.add(5, again, {2, 0});
  s.add(0, first, {3, 0});  // a pure duplicate
  const Bytes want = concat({first, slice(again, 5, 5)});
  EXPECT_EQ(bytes_of(s.data()), want);
  EXPECT_EQ(s.frames(0, 10).count, 1u);  // bytes 5..9 came with frame 1
  EXPECT_EQ(s.frames(0, 15).last, 2u);
  EXPECT_EQ(s.frames(12, 15).first, 2u);
}

TEST(StreamBuffer, OverlappingHeldSegmentsAreMerged) {
  StreamBuffer s;
  const Bytes data = pattern(40, 0);
  s.add(20, slice(data, 20, 20), {2, 0});
  s.add(10, slice(data, 10, 15), {3, 0});  // overlaps the held one
  s.add(0, slice(data, 0, 10), {4, 0});
  EXPECT_EQ(bytes_of(s.data()), data);
}

TEST(StreamBuffer, ConsumeAndSkipHole) {
  StreamBuffer s;
  const Bytes data = pattern(20, 0);
  s.add(0, slice(data, 0, 5), {1, 0});
  s.add(15, slice(data, 15, 5), {2, 0});
  s.consume(5);
  EXPECT_EQ(s.offset(), 5u);
  ASSERT_EQ(s.first_held(), 15u);
  EXPECT_EQ(s.skip_hole(), 10u);
  EXPECT_EQ(s.offset(), 15u);
  EXPECT_EQ(bytes_of(s.data()), slice(data, 15, 5));
  EXPECT_EQ(s.frames(15, 20).first, 2u);
}

// ---- connections ------------------------------------------------------------------------

struct Conversation {
  TcpReassembler tcp{988};
  std::uint32_t frame = 0;
  TcpReassembler::Delivery send(const TcpSpec& s, const Bytes& payload = {}) {
    return tcp.add(parse(tcp_frame(s, payload)), {++frame, 0});
  }
};

TcpSpec client(std::uint32_t seq, std::uint8_t flags) {
  TcpSpec s;
  s.seq = seq;
  s.flags = flags;
  return s;
}

TcpSpec server(std::uint32_t seq, std::uint8_t flags) {
  TcpSpec s;
  std::swap(s.ip.src, s.ip.dst);
  std::swap(s.sport, s.dport);
  s.seq = seq;
  s.flags = flags;
  return s;
}

TEST(TcpReassembler, SynSetsTheStreamStartAndRecordsEvents) {
  Conversation c;
  c.send(client(1000, kSyn));
  c.send(server(5000, kSyn | kAck));
  const auto d = c.send(client(1001, kAck), {1, 2, 3});
  c.send(server(5001, kAck), {4});
  c.send(client(1004, kFin | kAck));
  ASSERT_NE(d.conn, nullptr);
  EXPECT_EQ(d.direction, 0);
  EXPECT_TRUE(d.conn->saw_syn);
  EXPECT_EQ(to_string(d.conn->client), "10.201.1.2:1023");
  EXPECT_EQ(bytes_of(d.conn->dir[0].stream.data()), (Bytes{1, 2, 3}));
  EXPECT_EQ(bytes_of(d.conn->dir[1].stream.data()), Bytes{4});
  ASSERT_EQ(d.conn->events.size(), 3u);
  EXPECT_EQ(d.conn->events[1].flags, kSyn | kAck);
  EXPECT_FALSE(d.conn->events[1].from_client);
  EXPECT_TRUE(d.conn->dir[0].fin);
}

TEST(TcpReassembler, SequenceNumbersWrapAround) {
  Conversation c;
  const std::uint32_t isn = 0xFFFFFFF0;
  c.send(client(isn, kSyn));
  const Bytes data = pattern(64, 0);
  c.send(client(isn + 1 + 32, kAck), slice(data, 32, 32));  // wraps past 2^32; out of order too
  const auto d = c.send(client(isn + 1, kAck), slice(data, 0, 32));
  EXPECT_EQ(bytes_of(d.conn->dir[0].stream.data()), data);
}

TEST(TcpReassembler, NewSynAfterResetIsANewConnection) {
  Conversation c;
  c.send(client(100, kSyn));
  c.send(server(900, kSyn | kAck));
  c.send(server(901, kRst));
  c.send(server(901, kRst));  // a second RST belongs to the same, closed connection
  c.send(client(100, kSyn));  // same ISN, but the old connection is closed
  const auto d = c.send(client(101, kAck), {7});
  ASSERT_EQ(c.tcp.connections().size(), 2u);
  EXPECT_EQ(c.tcp.connections()[0].events.size(), 4u);
  EXPECT_EQ(d.conn->index, 1u);
  EXPECT_EQ(bytes_of(d.conn->dir[0].stream.data()), Bytes{7});
}

TEST(TcpReassembler, RepeatedSynIsTheSameConnection) {
  Conversation c;
  c.send(client(100, kSyn));
  c.send(client(100, kSyn));  // retransmitted SYN
  EXPECT_EQ(c.tcp.connections().size(), 1u);
}

TEST(TcpReassembler, MidStreamConnectionGuessesTheServerByPort) {
  Conversation c;
  const auto d = c.send(server(777, kAck), {1, 2});  // first frame seen: from port 988
  EXPECT_FALSE(d.conn->saw_syn);
  EXPECT_EQ(d.conn->server.port, 988);
  EXPECT_EQ(d.direction, 1);
  EXPECT_EQ(bytes_of(d.conn->dir[1].stream.data()), (Bytes{1, 2}));
}

// ---- a whole socklnd handshake through CaptureDecoder ------------------------------------

Bytes acceptor_request() {
  Bytes b(sock::kAcceptorV1Size);
  sock::AcceptorRequest r;
  r.nid = Nid::from_nid4(0x000200000ac90104);
  r.order = ByteOrder::little;
  EXPECT_TRUE(sock::encode_acceptor_request(r, b).has_value());
  return b;
}

Bytes hello(std::uint64_t src, std::uint64_t dst, sock::ConnType t) {
  sock::Hello h;
  h.order = ByteOrder::little;
  h.src_nid = Nid::from_nid4(src);
  h.dst_nid = Nid::from_nid4(dst);
  h.ctype = static_cast<std::int32_t>(t);
  Bytes b(sock::hello_size(h));
  EXPECT_TRUE(sock::encode_hello(h, b).has_value());
  return b;
}

TEST(CaptureDecoder, HandshakeDeliveredOutOfOrderWithRetransmissionsAndVlan) {
  const Bytes req = acceptor_request();
  const Bytes hello_c = hello(0x000200000ac90102, 0x000200000ac90104, sock::ConnType::control);
  const Bytes hello_s = hello(0x000200000ac90104, 0x000200000ac90102, sock::ConnType::control);
  const Bytes stream = concat({req, hello_c});
  std::vector<Bytes> frames;
  auto vlan = [](TcpSpec s) {
    s.ip.vlan = 42;
    return s;
  };
  frames.push_back(tcp_frame(vlan(client(10, kSyn))));                        // 1
  frames.push_back(tcp_frame(vlan(server(50, kSyn | kAck))));                 // 2
  frames.push_back(tcp_frame(vlan(client(11 + 40, kAck)), slice(stream, 40, 32)));  // 3: HELLO tail first
  frames.push_back(tcp_frame(vlan(client(11, kAck)), slice(stream, 0, 30)));  // 4: request + HELLO head
  frames.push_back(tcp_frame(vlan(client(11, kAck)), slice(stream, 0, 45)));  // 5: retransmission, overlapping
  frames.push_back(tcp_frame(vlan(server(51, kAck)), hello_s));               // 6

  CaptureDecoder dec(LinkType::ethernet);
  std::vector<Pdu> out;
  for (const Bytes& f : frames) dec.add_frame({0, f}, out);
  dec.finish(out);

  ASSERT_EQ(out.size(), 3u);
  const Pdu& a = out[0];
  ASSERT_NE(a.as<AcceptorPdu>(), nullptr);
  EXPECT_EQ(a.frames.first, 4u);
  EXPECT_EQ(a.frames.last, 4u);
  const Pdu& h = out[1];
  ASSERT_NE(h.as<HelloPdu>(), nullptr);
  EXPECT_FALSE(h.error.has_value());
  EXPECT_EQ(h.bytes, hello_c);
  // HELLO bytes 16..71: 16..29 from frame 4, 30..39 from the retransmission
  // (frame 5), 40..71 from frame 3.
  EXPECT_EQ(h.frames.first, 3u);
  EXPECT_EQ(h.frames.last, 5u);
  EXPECT_EQ(h.frames.count, 3u);
  EXPECT_EQ(h.sock()->begin, 16u);
  EXPECT_EQ(h.sock()->end, 72u);
  EXPECT_EQ(out[2].as<HelloPdu>()->from, Side::acceptor);
  EXPECT_EQ(dec.connections().at(0).connector_ctype, static_cast<std::int32_t>(sock::ConnType::control));
  EXPECT_EQ(dec.stats().socklnd_frames, 6u);
}

TEST(CaptureDecoder, HoleInTheCaptureIsReportedAndDecodingResumesAfterIt) {
  // A connection captured from its start, then a message lost to the
  // capture, then a whole message: the hole becomes a gap PDU and the walker
  // resynchronises on the next message.
  const Bytes req = acceptor_request();
  const Bytes hc = hello(0x000200000ac90102, 0x000200000ac90104, sock::ConnType::control);
  LnetHeader lh;
  lh.dest_nid = Nid::from_nid4(0x000200000ac90104);
  lh.src_nid = Nid::from_nid4(0x000200000ac90102);
  lh.set(GetFields{WireHandle{1, 2}, kPingMatchBits, 0, 0, 272});
  Bytes msg(sock::kMsgHeaderSize + kLnetHeaderSize);
  ASSERT_TRUE(sock::encode_msg_header(sock::MsgHeader{}, msg, ByteOrder::little));
  ASSERT_TRUE(encode_header(lh, MutableByteSpan(msg).subspan(sock::kMsgHeaderSize), HeaderForm::nid4));

  CaptureDecoder dec(LinkType::ethernet);
  std::vector<Pdu> out;
  std::uint32_t seq = 1;
  auto send = [&](const Bytes& b, bool lost) {
    if (!lost) dec.add_frame({0, tcp_frame(client(seq, kAck), b)}, out);
    seq += static_cast<std::uint32_t>(b.size());
  };
  dec.add_frame({0, tcp_frame(client(0, kSyn))}, out);
  send(concat({req, hc}), false);
  send(msg, true);   // lost
  send(msg, false);  // after the hole
  EXPECT_EQ(out.size(), 2u) << "nothing after the hole until the hole is given up";
  dec.finish(out);
  ASSERT_EQ(out.size(), 4u);
  const auto* gap = out[2].as<StreamBytesPdu>();
  ASSERT_NE(gap, nullptr);
  EXPECT_EQ(gap->why, StreamBytesPdu::Why::gap);
  EXPECT_EQ(out[2].sock()->end - out[2].sock()->begin, msg.size());
  const auto* m = out[3].as<SockMsgPdu>();
  ASSERT_TRUE(m && m->msg.lnet);
  EXPECT_EQ(*m->msg.lnet, lh);
}

}  // namespace
}  // namespace lnetr::test
