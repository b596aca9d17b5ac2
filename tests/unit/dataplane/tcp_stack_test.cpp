// Two dataplane TCP/IP stacks (dataplane/tcp/stack.hpp) joined by an
// Ethernet link in memory, on a simulated clock: ARP resolution both ways,
// a connection to a listener carrying data in both directions and closing,
// ICMP echo, resets for closed ports, neighbours that never answer,
// malformed frames, VLAN tags.
#include "dataplane/tcp/stack.hpp"

#include <gtest/gtest.h>

#include <deque>

namespace lnetr::tcp {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr IpAddr kIp6A = IpAddr::v6({0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
constexpr IpAddr kIp6B = IpAddr::v6({0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2});
const Mac kMacA = {0x02, 0, 0, 0, 0, 0x0a}, kMacB = {0x02, 0, 0, 0, 0, 0x0b};

struct Owner : Upper {
  std::vector<std::uint8_t> got;
  bool established = false, peer_closed = false;
  std::optional<End> ended;
  void on_established() override { established = true; }
  void on_data(ByteSpan b, void*) override { got.insert(got.end(), b.begin(), b.end()); }
  std::uint32_t receive_space() const override { return 1 << 20; }
  void on_peer_closed() override { peer_closed = true; }
  void on_end(End why) override { ended = why; }
};

struct Link;

struct Side : Port {
  Link* link = nullptr;
  int index = 0;
  std::unique_ptr<Stack> stack;
  std::vector<std::vector<std::uint8_t>> sent;  // every frame it sent
  void send(ByteSpan frame) override;
  // A device with checksum offload (as net_tap's, or a NIC's): it finishes
  // the checksums of the frames handed to it for that.
  Offloads off;
  std::vector<std::uint8_t> building;
  std::size_t offloaded = 0, pseudo_sums_right = 0;
  Offloads offloads() const override { return off; }
  MutableByteSpan alloc_frame(std::size_t len) override {
    building.resize(len);
    chained.clear();
    return building;
  }
  // A device that takes chained frames (zero copy): segments appended by
  // reference are read where they lie when the frame is sent, as a NIC's
  // DMA (or a virtual device's copy) would.
  bool chain = false;
  std::vector<std::pair<ByteSpan, void*>> chained;
  std::vector<std::pair<ByteSpan, void*>> referenced;  // every segment appended by reference
  std::size_t most = 8;           // segments a chained frame may have
  std::size_t longest_chain = 0;  // segments appended to one frame, at most
  std::size_t chained_frames = 0;  // frames sent with segments appended
  std::size_t max_segments() const override { return chain ? most : 1; }
  std::size_t odd_pieces = 0;  // segments appended at an odd offset into the payload
  Appended append_segment(ByteSpan data, void* dev) override {
    EXPECT_TRUE(chain);
    std::size_t at = 0;
    for (const auto& c : chained) at += c.first.size();
    odd_pieces += at % 2;
    chained.emplace_back(data, dev);
    if (dev) referenced.emplace_back(data, dev);
    return dev ? Appended::referenced : Appended::copied;
  }
  // A device with segmentation offload (as a NIC's, or net_tap's software
  // segmentation): it cuts the frames handed to it with a segment size.
  std::size_t tso_frames = 0, tso_segments = 0, tso_pseudo_right = 0, tso_longest = 0;
  std::size_t drop_every = 0;  // every n-th frame cut is lost (0: none)
  // A virtio device's pair: a frame to cut goes whole to the other side,
  // whose device hands it over as a large-receive unit in a chain of
  // buffers of this size (0: cut here); every n-th such unit is lost.
  std::size_t lro_piece = 0, lro_units = 0, lro_drop_every = 0;
  void send_whole(std::size_t l2_len);
  void send_built(std::size_t len, std::size_t l2_len, std::size_t tso_seg) override {
    building.resize(len);
    const std::size_t head = len;
    std::vector<ByteSpan> segs;
    for (const auto& [data, dev] : chained) {
      building.insert(building.end(), data.begin(), data.end());
      segs.push_back(data);
    }
    chained.clear();
    longest_chain = std::max(longest_chain, segs.size());
    chained_frames += !segs.empty();
    if (tso_seg > 0) {
      EXPECT_LE(segs.size() + 1, off.tso_segments);
      if (off.tso_segment_pieces > 0) {  // the pieces each cut segment spans
        std::vector<std::size_t> per(1);
        std::size_t at = 0;
        for (ByteSpan s : segs) {
          for (std::size_t w = at / tso_seg; w <= (at + s.size() - 1) / tso_seg; ++w) {
            if (per.size() <= w) per.resize(w + 1);
            ++per[w];
          }
          at += s.size();
        }
        for (std::size_t n : per) EXPECT_LE(n, off.tso_segment_pieces);
      }
      return cut(l2_len, tso_seg);
    }
    if (l2_len > 0 && !segs.empty()) {
      // A device that sums a chained frame segment by segment, each as if it
      // began at an even offset (as net_tap does).
      ++offloaded;
      const MutableByteSpan ip = MutableByteSpan(building).subspan(l2_len);
      const std::uint16_t total = load_be<std::uint16_t>(ip.data() + 2);
      const std::uint32_t src = load_be<std::uint32_t>(ip.data() + 12), dst = load_be<std::uint32_t>(ip.data() + 16);
      if (off.tx_ipv4) store_be<std::uint16_t>(ip.data() + 10, checksum(ip.first(20)));
      const MutableByteSpan tcp = ip.subspan(20, head - l2_len - 20);
      pseudo_sums_right += load_be<std::uint16_t>(tcp.data() + 16) == tcp_pseudo_sum(src, dst, static_cast<std::uint16_t>(total - 20u));
      store_be<std::uint16_t>(tcp.data() + 16, 0);
      std::uint32_t sum = checksum_add(tcp_pseudo_sum(src, dst, static_cast<std::uint16_t>(total - 20u)), tcp);
      for (ByteSpan seg : segs) sum = checksum_add(sum, seg);
      store_be<std::uint16_t>(tcp.data() + 16, static_cast<std::uint16_t>(~checksum_fold(sum)));
      return send(building);
    }
    if (l2_len > 0) {
      ++offloaded;
      const MutableByteSpan ip = MutableByteSpan(building).subspan(l2_len);
      auto h = decode_ipv4(ip);  // (its header checksum is left to a device that fills it in: refused)
      const std::uint16_t total = load_be<std::uint16_t>(ip.data() + 2);
      const std::uint32_t src = load_be<std::uint32_t>(ip.data() + 12), dst = load_be<std::uint32_t>(ip.data() + 16);
      EXPECT_EQ(!h, off.tx_ipv4);
      if (off.tx_ipv4) {
        EXPECT_EQ(load_be<std::uint16_t>(ip.data() + 10), 0);
        store_be<std::uint16_t>(ip.data() + 10, checksum(ip.first(20)));
      }
      const MutableByteSpan seg = ip.subspan(20, total - 20u);
      pseudo_sums_right += load_be<std::uint16_t>(seg.data() + 16) == tcp_pseudo_sum(src, dst, static_cast<std::uint16_t>(seg.size()));
      finish_tcp_checksum(src, dst, seg);
    }
    send(building);
  }
  void cut(std::size_t l2_len, std::size_t seg) {
    EXPECT_GT(off.tso_frame, 0u);
    if (lro_piece > 0) return send_whole(l2_len);
    EXPECT_GT(l2_len, 0u);
    ++tso_frames;
    const MutableByteSpan ip = MutableByteSpan(building).subspan(l2_len);
    const std::uint32_t src = load_be<std::uint32_t>(ip.data() + 12), dst = load_be<std::uint32_t>(ip.data() + 16);
    const std::size_t tcp_len = (ip[20 + 12] >> 4) * 4u, head = l2_len + 20 + tcp_len;
    EXPECT_EQ(load_be<std::uint16_t>(ip.data() + 2), building.size() - l2_len);
    EXPECT_LE(head + seg, off.tso_frame);
    tso_pseudo_right += load_be<std::uint16_t>(ip.data() + 20 + 16) == tcp_pseudo_sum(src, dst, 0);
    tso_longest = std::max(tso_longest, building.size() - head);
    const std::uint32_t seq = load_be<std::uint32_t>(ip.data() + 24);
    const std::uint16_t id = load_be<std::uint16_t>(ip.data() + 4);
    const std::uint8_t flags = ip[20 + 13];
    const std::vector<std::uint8_t> whole = std::move(building);
    EXPECT_LE((whole.size() - head + seg - 1) / seg, 64u);  // as net_tap's software segmentation takes
    for (std::size_t at = head, i = 0; at < whole.size(); at += seg, ++i) {
      const std::size_t k = std::min(seg, whole.size() - at);
      std::vector<std::uint8_t> f(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(head));
      f.insert(f.end(), whole.begin() + static_cast<std::ptrdiff_t>(at), whole.begin() + static_cast<std::ptrdiff_t>(at + k));
      const MutableByteSpan fip = MutableByteSpan(f).subspan(l2_len);
      store_be<std::uint16_t>(fip.data() + 2, static_cast<std::uint16_t>(f.size() - l2_len));
      store_be<std::uint16_t>(fip.data() + 4, static_cast<std::uint16_t>(id + i));
      store_be<std::uint32_t>(fip.data() + 24, seq + static_cast<std::uint32_t>(at - head));
      if (at + k < whole.size()) fip[20 + 13] = static_cast<std::uint8_t>(flags & ~(tcp_flag::psh | tcp_flag::fin));
      store_be<std::uint16_t>(fip.data() + 10, 0);
      store_be<std::uint16_t>(fip.data() + 10, checksum(fip.first(20)));
      finish_tcp_checksum(src, dst, fip.subspan(20));
      ++tso_segments;
      if (drop_every > 0 && tso_segments % drop_every == 0) continue;
      send(f);
    }
  }
};

struct Link {
  Time now = 1000s;
  Time latency = 100us;
  bool up = true;
  struct Frame {
    Time at;
    int to;
    std::vector<std::uint8_t> bytes;
    std::size_t piece = 0;  // > 0: received as a chain of buffers of this size, checksum verified (LRO)
  };
  // Devices' references of the buffers of chained frames received (each
  // piece's is the address of its entry).
  std::deque<int> buffers;
  // Frames due at the same time for the same side go to its stack as one
  // burst (begin_burst ... end_burst), as a port queue's poll hands them.
  bool bursts = false;
  std::deque<Frame> inflight;
  Side sides[2];
  Owner accepted;  // B's owner of what it accepts

  IpAddr ip_a = IpAddr::v4(kIpA), ip_b = IpAddr::v4(kIpB);
  // > 0: every frame is received as a chain of buffers of this size, its
  // checksums verified by the device (as a large-receive unit).
  std::size_t rx_piece = 0;

  explicit Link(std::optional<std::uint16_t> vlan = std::nullopt, bool timestamps = true,
                std::uint32_t initial_cwnd_segments = 10, std::size_t b_half_open = 256, bool ipv6 = false) {
    if (ipv6) ip_a = kIp6A, ip_b = kIp6B;
    for (int i = 0; i < 2; ++i) {
      sides[i].link = this;
      sides[i].index = i;
      StackConfig c;
      c.mac = i == 0 ? kMacA : kMacB;
      c.ip = i == 0 ? ip_a : ip_b;
      c.vlan = vlan;
      c.conn.max_syn_retries = 2;
      c.conn.timestamps = timestamps;
      c.conn.initial_cwnd_segments = initial_cwnd_segments;
      if (i == 1) c.max_half_open = b_half_open;
      sides[i].stack = std::make_unique<Stack>(c, sides[i]);
    }
    sides[1].stack->listen(988, [this](const Endpoints&) -> Upper* { return &accepted; });
  }
  // A's connection to B's listener, established; null if it was not.
  Conn* open(Owner& mine) {
    Conn* c = a().connect(ip_b, 988, 0, mine, now);
    if (c) run(now + 50ms);
    return c && mine.established ? c : nullptr;
  }
  Stack& a() { return *sides[0].stack; }
  Stack& b() { return *sides[1].stack; }

  void run(Time until) {
    while (now < until) {
      if (!inflight.empty() && inflight.front().at <= until) {
        Frame f = std::move(inflight.front());
        inflight.pop_front();
        now = std::max(now, f.at);
        if (bursts && f.piece == 0) {
          Stack& s = *sides[f.to].stack;
          s.begin_burst();
          s.receive(f.bytes, now);
          while (!inflight.empty() && inflight.front().at <= now && inflight.front().to == f.to &&
                 inflight.front().piece == 0) {
            s.receive(inflight.front().bytes, now);
            inflight.pop_front();
          }
          s.end_burst(now);
          continue;
        }
        if (f.piece == 0) {
          sides[f.to].stack->receive(f.bytes, now);
          continue;
        }
        std::vector<FramePiece> pieces;
        for (std::size_t at = 0; at < f.bytes.size(); at += f.piece) {
          buffers.push_back(0);
          pieces.push_back({ByteSpan(f.bytes).subspan(at, std::min(f.piece, f.bytes.size() - at)), &buffers.back()});
        }
        sides[f.to].stack->receive_chain(pieces.data(), pieces.size(), now, true);
        continue;
      }
      // No frame due: step the clock to the next millisecond boundary.
      now = std::min(until, now + 1ms);
      for (auto& s : sides) s.stack->tick(now);
    }
  }
};

void Side::send_whole(std::size_t l2_len) {
  const MutableByteSpan ip = MutableByteSpan(building).subspan(l2_len);
  EXPECT_EQ(load_be<std::uint16_t>(ip.data() + 2), building.size() - l2_len);
  EXPECT_TRUE(decode_ipv4(ip));  // the IPv4 header's checksum was filled in by the stack
  ++lro_units;
  sent.push_back(std::move(building));
  if (link->up && !(lro_drop_every > 0 && lro_units % lro_drop_every == 0))
    link->inflight.push_back({link->now + link->latency, 1 - index, sent.back(), lro_piece});
}

void Side::send(ByteSpan frame) {
  sent.emplace_back(frame.begin(), frame.end());
  if (link->up) link->inflight.push_back({link->now + link->latency, 1 - index, sent.back(), link->rx_piece});
}

// An Ethernet frame carrying `l4` over IPv4.
std::vector<std::uint8_t> ipv4_frame(const Mac& dst_mac, const Mac& src_mac, std::uint32_t src, std::uint32_t dst,
                                     std::uint8_t proto, const std::vector<std::uint8_t>& l4) {
  std::vector<std::uint8_t> frame(14 + 20 + l4.size());
  encode_ethernet({dst_mac, src_mac, std::nullopt, kEtherIpv4}, frame);
  Ipv4 ip;
  ip.total_length = static_cast<std::uint16_t>(20 + l4.size());
  ip.protocol = proto;
  ip.src = src;
  ip.dst = dst;
  encode_ipv4(ip, MutableByteSpan(frame).subspan(14));
  std::copy(l4.begin(), l4.end(), frame.begin() + 34);
  return frame;
}

// A frame from B to A carrying `l4` over IPv4.
std::vector<std::uint8_t> frame_from_b(std::uint8_t proto, const std::vector<std::uint8_t>& l4) {
  return ipv4_frame(kMacA, kMacB, kIpB, kIpA, proto, l4);
}

std::vector<std::uint8_t> pattern(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + (i >> 10));
  return v;
}

// 300,000 bytes from A's connection `c` to B's accepted one, then 100,000
// back to `mine`, each arriving intact.
void carry_both_ways(Link& l, Conn& c, Owner& mine) {
  const auto up = pattern(300000), down = pattern(100000);
  std::size_t off = 0;
  while (l.accepted.got.size() < up.size() && l.now < 1100s) {
    off += c.send(ByteSpan(up).subspan(off), l.now);
    l.run(l.now + 5ms);
  }
  EXPECT_EQ(l.accepted.got, up);
  Conn* theirs = l.b().connection(l.ip_a, 1023, 988);
  ASSERT_NE(theirs, nullptr);
  off = 0;
  while (mine.got.size() < down.size() && l.now < 1200s) {
    off += theirs->send(ByteSpan(down).subspan(off), l.now);
    l.run(l.now + 5ms);
  }
  EXPECT_EQ(mine.got, down);
}

TEST(TcpStack, ResolvesConnectsCarriesBothWaysAndCloses) {
  Link l;
  Owner mine;
  Conn* c = l.a().connect(l.ip_b, 988, 0, mine, l.now);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->endpoints().local_port, 1023);  // a privileged port, as socklnd binds
  l.run(l.now + 50ms);
  EXPECT_TRUE(mine.established);
  EXPECT_TRUE(l.accepted.established);
  EXPECT_EQ(l.a().neighbour(l.ip_b), kMacB);
  EXPECT_EQ(l.b().neighbour(l.ip_a), kMacA);  // learned from A's request
  EXPECT_EQ(l.a().stats().arp_requests_out, 1u);
  EXPECT_EQ(l.b().stats().arp_requests_out, 0u);
  EXPECT_EQ(l.b().connections(), 1u);
  carry_both_ways(l, *c, mine);
  // Every frame either side sent fits the MTU.
  for (const auto& s : l.sides)
    for (const auto& f : s.sent) EXPECT_LE(f.size(), 1514u);
  c->close(l.now);
  l.run(l.now + 100ms);
  EXPECT_TRUE(l.accepted.peer_closed);
  EXPECT_EQ(c->state(), State::fin_wait_2);
}

TEST(TcpStack, AnswersPingsAndArpRequests) {
  Link l;
  // B pings A by hand-built frames: ARP first, then the echo request.
  Arp req;
  req.op = kArpRequest;
  req.sender_mac = kMacB;
  req.sender_ip = kIpB;
  req.target_ip = kIpA;
  std::vector<std::uint8_t> frame(60);
  Ethernet e{kBroadcastMac, kMacB, std::nullopt, kEtherArp};
  encode_arp(req, MutableByteSpan(frame).subspan(encode_ethernet(e, frame)));
  l.a().receive(frame, l.now);
  ASSERT_EQ(l.sides[0].sent.size(), 1u);
  auto eth = decode_ethernet(l.sides[0].sent[0]);
  ASSERT_TRUE(eth);
  EXPECT_EQ(eth->dst, kMacB);
  auto reply = decode_arp(ByteSpan(l.sides[0].sent[0]).subspan(14));
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->op, kArpReply);
  EXPECT_EQ(reply->sender_mac, kMacA);

  std::vector<std::uint8_t> icmp = {8, 0, 0, 0, 0x12, 0x34, 0, 7, 'l', 'n', 'e', 't'};
  store_be<std::uint16_t>(icmp.data() + 2, checksum(icmp));
  l.a().receive(frame_from_b(kProtoIcmp, icmp), l.now);
  ASSERT_EQ(l.sides[0].sent.size(), 2u);
  auto rip = decode_ipv4(ByteSpan(l.sides[0].sent[1]).subspan(14));
  ASSERT_TRUE(rip);
  EXPECT_EQ(rip->dst, kIpB);
  auto echo = decode_icmp(rip->payload);
  ASSERT_TRUE(echo);
  EXPECT_EQ(echo->type, kIcmpEchoReply);
  EXPECT_EQ(echo->id, 0x1234);
  EXPECT_EQ(echo->sequence, 7);
  EXPECT_EQ(std::vector<std::uint8_t>(echo->data.begin(), echo->data.end()),
            (std::vector<std::uint8_t>{'l', 'n', 'e', 't'}));
}

TEST(TcpStack, AClosedPortIsRefusedWithAReset) {
  Link l;
  Owner mine;
  Conn* c = l.a().connect(l.ip_b, 989, 0, mine, l.now);  // nobody listens on 989
  ASSERT_NE(c, nullptr);
  l.run(l.now + 50ms);
  EXPECT_EQ(mine.ended, End::refused);
  EXPECT_EQ(l.b().stats().resets_out, 1u);
  EXPECT_EQ(l.a().connections(), 0u);  // reaped
}

TEST(TcpStack, ANeighbourThatNeverAnswers) {
  Link l;
  l.up = false;  // nothing arrives anywhere
  Owner mine;
  l.a().connect(l.ip_b, 988, 0, mine, l.now);
  l.run(l.now + 3500ms);
  EXPECT_EQ(l.a().stats().arp_requests_out, 3u);  // arp_tries, a second apart
  EXPECT_GE(l.a().stats().dropped_unresolved, 1u);  // the SYN that waited
  l.run(l.now + 20s);
  EXPECT_EQ(mine.ended, End::timed_out);  // its SYN retries ran out (each asked again)
  EXPECT_FALSE(l.a().neighbour(l.ip_b));
}

// An Ethernet frame carrying `l4` over IPv6 (hop limit as given).
std::vector<std::uint8_t> ipv6_frame(const Mac& dst_mac, const Mac& src_mac, const IpAddr& src, const IpAddr& dst,
                                     std::uint8_t proto, std::vector<std::uint8_t> l4, std::uint8_t hops = 64) {
  std::vector<std::uint8_t> frame(14 + kIpv6Header + l4.size());
  encode_ethernet({dst_mac, src_mac, std::nullopt, kEtherIpv6}, frame);
  Ipv6 ip;
  ip.payload_length = static_cast<std::uint16_t>(l4.size());
  ip.next_header = proto;
  ip.hop_limit = hops;
  ip.src = src;
  ip.dst = dst;
  encode_ipv6(ip, MutableByteSpan(frame).subspan(14));
  if (proto == kProtoIcmpv6) finish_icmp6_checksum(src, dst, l4);
  std::copy(l4.begin(), l4.end(), frame.begin() + 14 + kIpv6Header);
  return frame;
}

// A neighbour solicitation for `target` from `src` (with B's MAC as its
// link-layer address unless `src` is unspecified).
std::vector<std::uint8_t> solicitation(const IpAddr& src, const IpAddr& target, std::uint8_t hops = 255) {
  Neighbour6 ns;
  ns.target = target;
  if (!src.is_unspecified()) ns.link_addr = kMacB;
  std::vector<std::uint8_t> m(kNdSize);
  m.resize(encode_nd(ns, src, solicited_node(target), m));
  return ipv6_frame(multicast_mac(solicited_node(target)), kMacB, src, solicited_node(target), kProtoIcmpv6, m, hops);
}

// What a frame a stack sent says as an IPv6 neighbour advertisement.
struct Sent6 {
  Mac to{};
  Ipv6 ip;
  std::optional<Neighbour6> nd;
  std::optional<Icmp6> icmp;
};
Sent6 sent6(const std::vector<std::uint8_t>& frame) {
  Sent6 r;
  auto eth = decode_ethernet(frame);
  EXPECT_TRUE(eth && eth->type == kEtherIpv6);
  if (!eth) return r;
  r.to = eth->dst;
  auto ip = decode_ipv6(ByteSpan(frame).subspan(14));
  EXPECT_TRUE(ip);
  if (!ip) return r;
  r.ip = *ip;
  if (ip->next_header != kProtoIcmpv6) return r;
  auto m = decode_icmp6(*ip);  // its checksum verified
  EXPECT_TRUE(m);
  if (!m) return r;
  r.icmp = *m;
  if (auto nd = decode_nd(*ip, *m)) r.nd = *nd;
  return r;
}

// IPv6: a neighbour solicitation to the solicited-node group finds the
// peer (no ARP), TCP carries both ways over IPv6 with its smaller MSS,
// and chains of buffers (a device's large-receive units) are taken in
// place as over IPv4.
TEST(TcpStack, Ipv6ResolvesByNeighbourDiscoveryConnectsAndCarriesBothWays) {
  for (const std::size_t piece : {std::size_t{0}, std::size_t{700}}) {
    SCOPED_TRACE(piece ? "received in chains of 700-byte buffers" : "received whole");
    Link l(std::nullopt, true, 10, 256, true);
    l.rx_piece = piece;
    Owner mine;
    Conn* c = l.a().connect(l.ip_b, 988, 0, mine, l.now);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(l.a().connect(IpAddr::v4(kIpB), 988, 0, mine, l.now), nullptr);  // not this stack's family
    l.run(l.now + 50ms);
    ASSERT_TRUE(mine.established);
    EXPECT_TRUE(l.accepted.established);
    EXPECT_EQ(l.a().neighbour(l.ip_b), kMacB);
    EXPECT_EQ(l.b().neighbour(l.ip_a), kMacA);  // learnt from A's solicitation
    // A's first frame: a solicitation to B's solicited-node group.
    const Sent6 ns = sent6(l.sides[0].sent.front());
    EXPECT_EQ(ns.to, (Mac{0x33, 0x33, 0xff, 0, 0, 2}));
    EXPECT_EQ(ns.ip.dst, solicited_node(l.ip_b));
    EXPECT_EQ(ns.ip.hop_limit, 255);
    ASSERT_TRUE(ns.nd);
    EXPECT_EQ(ns.nd->type, kNdSolicitation);
    EXPECT_EQ(ns.nd->target, l.ip_b);
    EXPECT_EQ(ns.nd->link_addr, kMacA);
    // B's first: the advertisement back, solicited, overriding.
    const Sent6 na = sent6(l.sides[1].sent.front());
    EXPECT_EQ(na.to, kMacA);
    ASSERT_TRUE(na.nd);
    EXPECT_EQ(na.nd->type, kNdAdvertisement);
    EXPECT_TRUE(na.nd->solicited && na.nd->override_ && !na.nd->router);
    EXPECT_EQ(na.nd->link_addr, kMacB);
    EXPECT_EQ(l.a().stats().nd_solicits_out, 1u);
    EXPECT_EQ(l.b().stats().nd_solicits_in, 1u);
    EXPECT_EQ(l.b().stats().nd_adverts_out, 1u);
    EXPECT_EQ(l.a().stats().arp_requests_out + l.b().stats().arp_requests_out, 0u);
    EXPECT_EQ(c->payload_mss(), 1500u - 40 - 20 - 12);  // IPv6 and TCP headers, timestamps
    carry_both_ways(l, *c, mine);
    for (const auto& side : l.sides) {
      EXPECT_EQ(side.stack->stats().dropped_malformed, 0u);
      const Mac mac = side.index == 0 ? kMacA : kMacB;
      std::size_t mld = 0;
      for (const auto& f : side.sent) {
        EXPECT_LE(f.size(), 1514u);
        const Sent6 m = sent6(f);
        if (m.ip.next_header != 0) {
          EXPECT_EQ(m.ip.src, side.index == 0 ? l.ip_a : l.ip_b);
          continue;
        }
        // An MLDv2 report (RFC 3810 §5.2) from the link-local address to
        // ff02::16, hop limit 1, behind a router alert; its groups: both
        // addresses' solicited-node ones.
        ++mld;
        EXPECT_EQ(m.to, (Mac{0x33, 0x33, 0, 0, 0, 0x16}));
        EXPECT_EQ(m.ip.src, link_local(mac));
        EXPECT_EQ(m.ip.dst, kAllMldRouters);
        EXPECT_EQ(m.ip.hop_limit, 1);
        ASSERT_GE(m.ip.payload.size(), 8u + 8 + 40);
        EXPECT_EQ(std::vector<std::uint8_t>(m.ip.payload.begin(), m.ip.payload.begin() + 8),
                  (std::vector<std::uint8_t>{kProtoIcmpv6, 0, 5, 2, 0, 0, 1, 0}));
        Ipv6 icmp = m.ip;
        icmp.next_header = kProtoIcmpv6;
        icmp.payload = m.ip.payload.subspan(8);
        icmp.payload_length = static_cast<std::uint16_t>(icmp.payload.size());
        auto report = decode_icmp6(icmp);  // its checksum right
        ASSERT_TRUE(report);
        EXPECT_EQ(report->type, kMldV2Report);
        EXPECT_EQ(load_be<std::uint16_t>(report->body.data() + 2), 2);  // records
        IpAddr g1 = IpAddr::v6({}), g2 = IpAddr::v6({});
        std::copy_n(report->body.data() + 8, 16, g1.bytes.begin());
        std::copy_n(report->body.data() + 28, 16, g2.bytes.begin());
        EXPECT_EQ(report->body[4], 4);  // CHANGE_TO_EXCLUDE_MODE: joined
        EXPECT_EQ(g1, solicited_node(side.index == 0 ? l.ip_a : l.ip_b));
        EXPECT_EQ(g2, solicited_node(link_local(mac)));
      }
      EXPECT_GE(mld, 1u);  // at the first tick, a second later, then every 30 s
      EXPECT_EQ(side.stack->stats().mld_reports_out, mld);
    }
    if (piece > 0) {
      EXPECT_GT(l.b().stats().chains_in, 200u);  // data segments, in place
      EXPECT_EQ(l.b().stats().chains_copied, 0u);
    }
    c->close(l.now);
    l.run(l.now + 100ms);
    EXPECT_TRUE(l.accepted.peer_closed);
  }
}

// IPv6 as Linux peers speak it: a solicitation from a link-local address
// (off our subnet) is answered straight back and learns nothing; one from
// a subnet address teaches us the peer; a duplicate address check is
// answered to all nodes; an echo request is answered; and what RFC 4861
// refuses (a hop limit below 255) or is another host's is dropped.
TEST(TcpStack, Ipv6AnswersSolicitationsAndPingsAsAHostOnOneSubnet) {
  Link l(std::nullopt, true, 10, 256, true);
  auto& out = l.sides[0].sent;
  const IpAddr link_local = IpAddr::v6({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xb});
  l.a().receive(solicitation(link_local, l.ip_a), l.now);
  ASSERT_EQ(out.size(), 1u);
  Sent6 na = sent6(out.back());
  EXPECT_EQ(na.to, kMacB);
  EXPECT_EQ(na.ip.dst, link_local);
  EXPECT_EQ(na.ip.src, l.ip_a);
  EXPECT_EQ(na.ip.hop_limit, 255);
  ASSERT_TRUE(na.nd);
  EXPECT_EQ(na.nd->target, l.ip_a);
  EXPECT_EQ(na.nd->link_addr, kMacA);
  EXPECT_TRUE(na.nd->solicited);
  EXPECT_FALSE(l.a().neighbour(link_local));
  // From its subnet address: learnt.
  l.a().receive(solicitation(l.ip_b, l.ip_a), l.now);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(l.a().neighbour(l.ip_b), kMacB);
  // A duplicate address check (no source): to all nodes, not solicited.
  l.a().receive(solicitation(IpAddr::v6({}), l.ip_a), l.now);
  ASSERT_EQ(out.size(), 3u);
  na = sent6(out.back());
  EXPECT_EQ(na.to, (Mac{0x33, 0x33, 0, 0, 0, 1}));
  EXPECT_EQ(na.ip.dst, IpAddr::v6({0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}));
  ASSERT_TRUE(na.nd);
  EXPECT_FALSE(na.nd->solicited);
  EXPECT_EQ(l.a().stats().nd_solicits_in, 3u);
  EXPECT_EQ(l.a().stats().nd_adverts_out, 3u);
  // An echo request: the same message back as a reply.
  std::vector<std::uint8_t> echo = {kIcmp6EchoRequest, 0, 0, 0, 0x12, 0x34, 0, 7, 'l', 'n', 'e', 't'};
  l.a().receive(ipv6_frame(kMacA, kMacB, l.ip_b, l.ip_a, kProtoIcmpv6, echo), l.now);
  ASSERT_EQ(out.size(), 4u);
  const Sent6 reply = sent6(out.back());
  EXPECT_EQ(reply.to, kMacB);
  EXPECT_EQ(reply.ip.dst, l.ip_b);
  ASSERT_TRUE(reply.icmp);
  EXPECT_EQ(reply.icmp->type, kIcmp6EchoReply);
  EXPECT_EQ(std::vector<std::uint8_t>(reply.icmp->body.begin(), reply.icmp->body.end()),
            (std::vector<std::uint8_t>{0x12, 0x34, 0, 7, 'l', 'n', 'e', 't'}));
  EXPECT_EQ(l.a().stats().icmp_echo_replies, 1u);
  // Refused or not ours: nothing sent.
  l.a().receive(solicitation(l.ip_b, l.ip_a, 64), l.now);  // a hop limit below 255: maybe routed, forged
  EXPECT_EQ(l.a().stats().dropped_malformed, 1u);
  l.a().receive(solicitation(l.ip_b, kIp6B), l.now);  // another host's
  std::vector<std::uint8_t> bad = echo;
  auto frame = ipv6_frame(kMacA, kMacB, l.ip_b, l.ip_a, kProtoIcmpv6, bad);
  frame.back() ^= 1;  // its checksum no longer right
  l.a().receive(frame, l.now);
  EXPECT_EQ(l.a().stats().dropped_malformed, 2u);
  // IPv4 and ARP reach an IPv6 stack as another protocol.
  l.a().receive(frame_from_b(kProtoTcp, std::vector<std::uint8_t>(20)), l.now);
  EXPECT_EQ(out.size(), 4u);
  EXPECT_EQ(l.a().stats().dropped_not_ours, 2u);
}

// What a peer on an IPv6 /64 sends unasked grows nothing: solicitations
// from ever new addresses fill only free neighbour slots, never push out a
// neighbour in use; echo requests from unknown addresses are answered
// straight back with no neighbour kept and nothing solicited.  A peer that
// moved to another MAC and says so (an overriding advertisement to all
// nodes) is followed; one that does not override is not.
TEST(TcpStack, Ipv6NeighboursPeersCannotChurnAndMovesThatOverride) {
  struct Record : Port {
    std::vector<std::vector<std::uint8_t>> frames;
    void send(ByteSpan f) override { frames.emplace_back(f.begin(), f.end()); }
  } port;
  StackConfig cfg;
  cfg.mac = kMacA;
  cfg.ip = kIp6A;
  cfg.prefix_len = 64;
  cfg.max_neighbours = 4;
  Stack s(cfg, port);
  Time now = 1000s;
  // B is a neighbour in use: resolved by our solicitation and its answer.
  Owner mine;
  ASSERT_NE(s.connect(kIp6B, 988, 0, mine, now), nullptr);
  Neighbour6 na;
  na.type = kNdAdvertisement;
  na.target = kIp6B;
  na.link_addr = kMacB;
  na.solicited = na.override_ = true;
  std::vector<std::uint8_t> m(kNdSize);
  encode_nd(na, kIp6B, kIp6A, m);
  s.receive(ipv6_frame(kMacA, kMacB, kIp6B, kIp6A, kProtoIcmpv6, m, 255), now);
  ASSERT_EQ(s.neighbour(kIp6B), kMacB);
  // 100 solicitations from 100 made-up addresses of the /64.
  for (std::uint8_t i = 0; i < 100; ++i) {
    IpAddr from = kIp6A;
    from.bytes[14] = 0x77;
    from.bytes[15] = i;
    s.receive(solicitation(from, kIp6A), now);
  }
  EXPECT_EQ(s.neighbour(kIp6B), kMacB);  // still there
  EXPECT_EQ(s.stats().nd_adverts_out, 100u);  // each answered all the same
  // 100 echo requests from made-up addresses: answered to the frame's
  // sender, with no solicitation and no neighbour.
  const std::size_t before = port.frames.size();
  for (std::uint8_t i = 0; i < 100; ++i) {
    IpAddr from = kIp6A;
    from.bytes[14] = 0x88;
    from.bytes[15] = i;
    std::vector<std::uint8_t> echo = {kIcmp6EchoRequest, 0, 0, 0, 0, 1, 0, i};
    s.receive(ipv6_frame(kMacA, kMacB, from, kIp6A, kProtoIcmpv6, echo), now);
    EXPECT_FALSE(s.neighbour(from));
  }
  EXPECT_EQ(port.frames.size(), before + 100);
  EXPECT_EQ(s.stats().icmp_echo_replies, 100u);
  EXPECT_EQ(s.stats().nd_solicits_out, 1u);  // B's, at the start
  EXPECT_EQ(decode_ethernet(port.frames.back())->dst, kMacB);
  // B moves to another MAC and says so to all nodes, overriding: followed.
  const Mac moved = {0x02, 0, 0, 0, 0, 0x0c};
  na.solicited = false;
  na.link_addr = moved;
  m.assign(kNdSize, 0);
  encode_nd(na, kIp6B, kAllNodes, m);
  s.receive(ipv6_frame(multicast_mac(kAllNodes), moved, kIp6B, kAllNodes, kProtoIcmpv6, m, 255), now);
  EXPECT_EQ(s.neighbour(kIp6B), moved);
  // Without the override flag, an advertisement does not move it.
  na.override_ = false;
  na.link_addr = kMacB;
  m.assign(kNdSize, 0);
  encode_nd(na, kIp6B, kAllNodes, m);
  s.receive(ipv6_frame(multicast_mac(kAllNodes), kMacB, kIp6B, kAllNodes, kProtoIcmpv6, m, 255), now);
  EXPECT_EQ(s.neighbour(kIp6B), moved);
  EXPECT_EQ(s.stats().dropped_malformed, 0u);
}

TEST(TcpStack, MalformedAndForeignFramesAreCountedAndDropped) {
  Link l;
  const std::vector<std::uint8_t> runt(10, 0);
  l.a().receive(runt, l.now);
  std::vector<std::uint8_t> other(60, 0);
  encode_ethernet({{0x02, 9, 9, 9, 9, 9}, kMacB, std::nullopt, kEtherIpv4}, other);
  l.a().receive(other, l.now);  // another host's MAC
  std::vector<std::uint8_t> bad_ip(60, 0);
  encode_ethernet({kMacA, kMacB, std::nullopt, kEtherIpv4}, bad_ip);
  bad_ip[14] = 0x45;  // an IPv4 header with a wrong checksum
  bad_ip[17] = 40;
  l.a().receive(bad_ip, l.now);
  EXPECT_EQ(l.a().stats().dropped_malformed, 2u);
  EXPECT_EQ(l.a().stats().dropped_not_ours, 1u);
  EXPECT_TRUE(l.sides[0].sent.empty());
}

TEST(TcpStack, ASynFloodHoldsNoMoreThanMaxConnections) {
  struct Count : Port {
    std::size_t frames = 0;
    void send(ByteSpan) override { ++frames; }
  } port;
  Owner owner;
  StackConfig cfg;
  cfg.mac = kMacA;
  cfg.ip = IpAddr::v4(kIpA);
  cfg.max_connections = 16;
  Stack s(cfg, port);
  s.listen(988, [&owner](const Endpoints&) -> Upper* { return &owner; });
  for (std::uint16_t p = 0; p < 40; ++p) {
    TcpHeader syn;
    syn.src_port = static_cast<std::uint16_t>(2000 + p);
    syn.dst_port = 988;
    syn.seq = 1;
    syn.flags = tcp_flag::syn;
    syn.window = 1000;
    std::vector<std::uint8_t> seg(kTcpMaxHeader);
    seg.resize(encode_tcp(syn, seg));
    finish_tcp_checksum(kIpB, kIpA, seg);
    s.receive(frame_from_b(kProtoTcp, seg), 1000s);
  }
  EXPECT_EQ(s.connections(), 16u);
  EXPECT_EQ(s.stats().dropped_overload, 24u);
}

// A SYN to B's listener from `src` (a spoofed address on the subnet).
std::vector<std::uint8_t> syn_to_b(std::uint32_t src, std::uint16_t port, std::uint32_t seq) {
  TcpHeader syn;
  syn.src_port = port;
  syn.dst_port = 988;
  syn.seq = seq;
  syn.flags = tcp_flag::syn;
  syn.window = 65535;
  syn.options.mss = 1460;
  std::vector<std::uint8_t> seg(kTcpMaxHeader);
  seg.resize(encode_tcp(syn, seg));
  finish_tcp_checksum(src, kIpB, seg);
  return ipv4_frame(kMacB, Mac{0x02, 0, 0, 0, 0, 0x66}, src, kIpB, kProtoTcp, seg);
}

TEST(TcpStack, ASynFloodGetsCookiesAndARealPeerStillConnects) {
  for (const bool timestamps : {true, false}) {
    SCOPED_TRACE(timestamps ? "timestamps" : "no timestamps");
    Link l(std::nullopt, timestamps, 10, 8);  // B keeps 8 connections in SYN-RECEIVED at most
    for (std::uint32_t i = 0; i < 200; ++i)
      l.b().receive(syn_to_b(kIpA + 100 + (i % 100), static_cast<std::uint16_t>(3000 + i), i * 7919), l.now);
    EXPECT_EQ(l.b().half_open(), 8u);
    EXPECT_EQ(l.b().connections(), 8u);  // the flood holds 8 slots, not 200
    EXPECT_EQ(l.b().stats().syncookies_sent, 192u);
    // A real peer, meanwhile: its SYN gets a cookie, its ACK makes the
    // connection, and data goes both ways at full segment size.
    Owner mine;
    Conn* c = l.open(mine);
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(l.accepted.established);
    EXPECT_EQ(l.b().stats().syncookies_sent, 193u);
    EXPECT_EQ(l.b().stats().syncookies_accepted, 1u);
    Conn* theirs = l.b().connection(l.ip_a, c->endpoints().local_port, 988);
    ASSERT_NE(theirs, nullptr);
    EXPECT_EQ(theirs->state(), State::established);
    EXPECT_EQ(theirs->payload_mss(), c->payload_mss());  // the MSS (and timestamps) survived the cookie
    const auto up = pattern(300000), down = pattern(100000);
    std::size_t off = 0;
    while (l.accepted.got.size() < up.size() && l.now < 1100s) {
      off += c->send(ByteSpan(up).subspan(off), l.now);
      l.run(l.now + 5ms);
    }
    EXPECT_EQ(l.accepted.got, up);
    off = 0;
    while (mine.got.size() < down.size() && l.now < 1200s) {
      off += theirs->send(ByteSpan(down).subspan(off), l.now);
      l.run(l.now + 5ms);
    }
    EXPECT_EQ(mine.got, down);
    // The flood's half-open connections give up (their SYN-ACKs go
    // unanswered) and their slots come back.
    l.run(l.now + 30s);
    EXPECT_EQ(l.b().half_open(), 0u);
    EXPECT_EQ(l.b().connections(), 1u);
  }
}

TEST(TcpStack, AForgedOrExpiredCookieIsRefused) {
  struct Record : Port {
    std::vector<std::vector<std::uint8_t>> frames;
    void send(ByteSpan f) override { frames.emplace_back(f.begin(), f.end()); }
  } port;
  Owner owner;
  StackConfig cfg;
  cfg.mac = kMacA;
  cfg.ip = IpAddr::v4(kIpA);
  cfg.max_half_open = 0;  // every SYN gets a cookie
  Stack s(cfg, port);
  int made = 0;
  s.listen(988, [&](const Endpoints&) -> Upper* {
    ++made;
    return &owner;
  });
  // A knows B's MAC from B's ARP request.
  Arp req;
  req.op = kArpRequest;
  req.sender_mac = kMacB;
  req.sender_ip = kIpB;
  req.target_ip = kIpA;
  std::vector<std::uint8_t> arp(60);
  encode_arp(req, MutableByteSpan(arp).subspan(encode_ethernet({kBroadcastMac, kMacB, std::nullopt, kEtherArp}, arp)));
  Time now = 1000s;
  s.receive(arp, now);
  auto segment = [&](std::uint8_t flags, std::uint32_t seq, std::uint32_t ack, std::uint16_t from = 2000,
                     std::uint32_t src = kIpB) {
    TcpHeader h;
    h.src_port = from;
    h.dst_port = 988;
    h.seq = seq;
    h.ack = ack;
    h.flags = flags;
    h.window = 1000;
    h.options.mss = 1460;
    std::vector<std::uint8_t> seg(kTcpMaxHeader);
    seg.resize(encode_tcp(h, seg));
    finish_tcp_checksum(src, kIpA, seg);
    return ipv4_frame(kMacA, kMacB, src, kIpA, kProtoTcp, seg);
  };
  auto last_tcp = [&] {
    auto ip = decode_ipv4(ByteSpan(port.frames.back()).subspan(14));
    EXPECT_TRUE(ip);
    auto t = decode_tcp(ip->payload);
    EXPECT_TRUE(t);
    return *t;
  };
  s.receive(segment(tcp_flag::syn, 5000, 0), now);
  const TcpHeader synack = last_tcp();
  EXPECT_EQ(synack.flags, tcp_flag::syn | tcp_flag::ack);
  EXPECT_EQ(synack.ack, 5001u);
  EXPECT_EQ(s.connections(), 0u);  // nothing kept
  EXPECT_EQ(made, 0);
  const std::uint32_t cookie = synack.seq;
  // A guess (the cookie's neighbour), another peer sequence number, and
  // the right cookie in the second period after its own: reset, nothing made.
  s.receive(segment(tcp_flag::ack, 5001, cookie + 2), now);
  s.receive(segment(tcp_flag::ack, 5002, cookie + 1), now);
  s.receive(segment(tcp_flag::ack, 5001, cookie + 1), now + 127s);
  EXPECT_EQ(s.stats().syncookies_refused, 3u);
  EXPECT_EQ(s.stats().resets_out, 3u);
  EXPECT_EQ(made, 0);
  EXPECT_EQ(s.connections(), 0u);
  // The right one in time: established, with the MSS the SYN offered.
  s.receive(segment(tcp_flag::ack, 5001, cookie + 1), now + 70s);
  EXPECT_EQ(s.stats().syncookies_accepted, 1u);
  EXPECT_EQ(made, 1);
  ASSERT_EQ(s.connections(), 1u);
  Conn* c = s.connection(IpAddr::v4(kIpB), 2000, 988);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->state(), State::established);
  EXPECT_TRUE(owner.established);
  EXPECT_EQ(c->payload_mss(), 1460u);
  // A SYN from an address never resolved: its cookie goes straight back to
  // the frame's sender, with no ARP request and no neighbour kept.
  const std::size_t frames = port.frames.size();
  const std::uint32_t stranger = kIpB + 50;
  s.receive(segment(tcp_flag::syn, 7000, 0, 2002, stranger), now);
  ASSERT_EQ(port.frames.size(), frames + 1);
  EXPECT_EQ(decode_ethernet(port.frames.back())->dst, kMacB);
  EXPECT_EQ(last_tcp().flags, tcp_flag::syn | tcp_flag::ack);
  EXPECT_FALSE(s.neighbour(IpAddr::v4(stranger)));
  // With no cookie sent for two periods, an ACK is not taken for one.
  s.receive(segment(tcp_flag::ack, 5001, cookie + 1, 2001), now + 400s);
  EXPECT_EQ(s.stats().syncookies_refused, 3u);
  EXPECT_EQ(s.stats().resets_out, 4u);
  EXPECT_EQ(s.connections(), 1u);
}

TEST(TcpStack, VlanTaggedLinksWork) {
  Link l(100);
  Owner mine;
  Conn* c = l.open(mine);
  ASSERT_NE(c, nullptr);
  const auto data = pattern(20000);
  c->send(data, l.now);
  l.run(l.now + 100ms);
  EXPECT_EQ(l.accepted.got, data);
  auto eth = decode_ethernet(l.sides[0].sent.back());
  ASSERT_TRUE(eth);
  EXPECT_EQ(eth->vlan, 100);
}

// A device with segmentation offload: a connection's new data leaves in
// frames the device cuts (here, as net_tap, into frames of at most the MTU
// counting the Ethernet header), each segment with its own headers and
// checksums; what the device cannot take whole (a piece at an odd offset,
// a chain longer than it takes) is cut here.  Every byte arrives once and
// in order, also when cut segments are lost, and FIN rides on the last.
TEST(TcpStack, LargeTransmitsAreCutIntoSegmentsByADeviceWithSegmentationOffload) {
  struct Device {
    std::uint16_t most, per_segment;  // chain segments in a frame, within each segment cut (0: any)
  };
  for (const std::size_t drop : {std::size_t{0}, std::size_t{23}})
    for (const Device d : {Device{64, 0}, Device{3, 0}, Device{64, 2}}) {
      const std::uint16_t most = d.most;
      SCOPED_TRACE("every " + std::to_string(drop) + "th segment lost, chains of " + std::to_string(most) +
                   ", pieces per segment " + std::to_string(d.per_segment));
      Link l;
      Side& a = l.sides[0];
      a.chain = true;
      a.off = {true, true, 1500, most, d.per_segment};
      a.drop_every = drop;
      Owner mine;
      Conn* c = l.a().connect(l.ip_b, 988, 0, mine, l.now);
      ASSERT_NE(c, nullptr);
      // Queued before the connection opens, so that transmits grow with
      // the congestion window: three bytes copied, then loans of 1,001
      // bytes and of 1,000 bytes (one queue piece each).  The first
      // transmit has a piece at an odd offset (3); the later ones start
      // where a segment ended and find the boundaries at even offsets.
      const auto lent = pattern(300001);
      int dev = 0;
      const std::vector<std::uint8_t> three = {1, 2, 3};
      ASSERT_EQ(c->send(three, l.now), 3u);
      for (std::size_t off = 0; off < lent.size();) {
        const std::size_t k = std::min<std::size_t>(off == 0 ? 1001 : 1000, lent.size() - off);
        ASSERT_EQ(c->lend(ByteSpan(lent).subspan(off, k), l.now, &dev), k);
        off += k;
      }
      l.run(l.now + 1ms);
      ASSERT_TRUE(mine.established);
      c->close(l.now);  // FIN after the data
      l.run(l.now + 3s);
      std::vector<std::uint8_t> want(three);
      want.insert(want.end(), lent.begin(), lent.end());
      EXPECT_EQ(l.accepted.got, want);  // B checked every checksum
      EXPECT_TRUE(l.accepted.peer_closed);
      EXPECT_EQ(l.b().stats().dropped_malformed, 0u);
      const StackStats& s = l.a().stats();
      EXPECT_EQ(s.tso_frames, a.tso_frames);
      EXPECT_EQ(s.tso_segments, a.tso_segments);
      EXPECT_EQ(a.tso_pseudo_right, a.tso_frames);
      EXPECT_GT(s.tso_cut_here, 0u);  // the bytes around offset 3 at least
      if (most == 64 && d.per_segment == 0) {
        EXPECT_GT(a.tso_frames, 0u);
        EXPECT_GT(s.tso_segments, 150u);  // most of the 300 KB went cut by the device
        EXPECT_GT(a.tso_longest, 8u * 1434);  // (as much as the congestion window let go at once)
      } else if (most == 3) {
        EXPECT_LE(a.tso_longest, 2000u);  // two pieces of 1,000 bytes at most
      } else {
        EXPECT_GT(a.tso_frames, 0u);  // runs of segments spanning two pieces each
        EXPECT_GT(s.tso_cut_here, 100u);  // and segments spanning three, cut here
      }
      EXPECT_EQ(c->stats().retransmits > 0, drop > 0);
      // Every frame on the wire holds at most one segment of at most the MSS.
      for (const auto& f : a.sent) EXPECT_LE(f.size(), 14u + 20 + 32 + 1448);
    }
}

// A device cutting small frames (576 bytes): a connection's transmit of
// about 64 KB (its first, with an initial window of 100 segments) is more
// than 64 of them, so it goes as several frames of 64 segments at most.
TEST(TcpStack, ATransmitOfMoreSegmentsThanAFrameIsCutIntoGoesAsSeveralFrames) {
  Link l(std::nullopt, true, 100);
  Side& a = l.sides[0];
  a.chain = true;
  a.off = {true, true, 576, 64};
  Owner mine;
  Conn* c = l.a().connect(l.ip_b, 988, 0, mine, l.now);
  ASSERT_NE(c, nullptr);
  const auto lent = pattern(1 << 20);
  int dev = 0;
  ASSERT_EQ(c->lend(lent, l.now, &dev), lent.size());
  l.run(l.now + 3s);
  EXPECT_EQ(l.accepted.got, lent);
  EXPECT_GT(a.tso_frames, 0u);
  EXPECT_EQ(a.tso_longest, 64u * 510);  // 576 less 66 bytes of headers, 64 times
  EXPECT_EQ(l.b().stats().dropped_malformed, 0u);
}

}  // namespace
}  // namespace lnetr::tcp

namespace lnetr::tcp {
namespace {

// The side that closed first waits in TIME-WAIT; a peer reconnecting from
// the same port (as socklnd does, from 1023 down) is taken at once, as
// Linux does (RFC 6191), not after a SYN timeout.
TEST(TcpStack, ASynInTimeWaitStartsTheNewConnectionAtOnce) {
  Link l;
  Owner first;
  Conn* c = l.a().connect(l.ip_b, 988, 1023, first, l.now);
  ASSERT_NE(c, nullptr);
  l.run(l.now + 50ms);
  ASSERT_TRUE(l.accepted.established);
  Conn* theirs = l.b().connection(l.ip_a, 1023, 988);
  ASSERT_NE(theirs, nullptr);
  theirs->close(l.now);  // B closes first: B ends in TIME-WAIT
  l.run(l.now + 20ms);
  c->close(l.now);
  l.run(l.now + 20ms);
  theirs = l.b().connection(l.ip_a, 1023, 988);
  ASSERT_NE(theirs, nullptr);
  EXPECT_EQ(theirs->state(), State::time_wait);
  ASSERT_TRUE(first.ended);
  l.accepted = Owner{};
  Owner second;
  const Time t0 = l.now;
  Conn* again = l.a().connect(l.ip_b, 988, 1023, second, l.now);
  ASSERT_NE(again, nullptr);
  l.run(l.now + 50ms);
  EXPECT_TRUE(second.established);
  EXPECT_TRUE(l.accepted.established);
  EXPECT_LT(l.now - t0, 100ms);
  EXPECT_EQ(l.b().connection(l.ip_a, 1023, 988)->state(), State::established);
}

// A device with checksum offload gets frames whose checksums it fills in
// (the TCP field holding the pseudo-header's sum), and a received segment
// the device verified is not summed again.
// On a device that takes chained frames, lent bytes with a device reference
// leave by reference (the frame points into the lender's memory) and
// everything else is copied; the frames are the same bytes either way, and
// their checksums are right whether the device or the stack sums them
// (pieces start at odd offsets: copied runs of odd length between loans).
// Without TCP timestamps the headers (54 bytes) are shorter than Ethernet's
// minimum frame, which a chained frame's payload makes up (no padding
// between header and payload).
TEST(TcpStack, LentPayloadWithADeviceReferenceIsChainedNotCopied) {
  for (const bool offload : {false, true})
    for (const bool timestamps : {true, false}) {
      SCOPED_TRACE(std::string(offload ? "checksum offload" : "software checksums") +
                   (timestamps ? ", timestamps" : ", no timestamps"));
      Link l(std::nullopt, timestamps);
      l.sides[0].chain = true;
      l.sides[0].off = {offload, offload};
      Owner mine;
      Conn* c = l.open(mine);
      ASSERT_NE(c, nullptr);
      const auto lent = pattern(200001);
      int dev = 0;  // the lender's handle
      std::vector<std::uint8_t> want;
      // Three bytes copied, 100,001 lent, five copied, the rest lent without a
      // device reference (copied into frames: it has no device handle).
      // Queued back to back, so that segments straddle the pieces.
      struct Piece {
        ByteSpan bytes;
        bool lend;
        void* dev;
      };
      const std::vector<std::uint8_t> three = {1, 2, 3}, five = {4, 5, 6, 7, 8};
      const std::vector<Piece> pieces = {{three, false, nullptr},
                                         {ByteSpan(lent).first(100001), true, &dev},
                                         {five, false, nullptr},
                                         {ByteSpan(lent).subspan(100001), true, nullptr}};
      for (const Piece& p : pieces) {
        std::size_t off = 0;
        for (;;) {
          off += p.lend ? c->lend(p.bytes.subspan(off), l.now, p.dev) : c->send(p.bytes.subspan(off), l.now);
          if (off == p.bytes.size() || l.now > 1100s) break;
          l.run(l.now + 1ms);
        }
        want.insert(want.end(), p.bytes.begin(), p.bytes.end());
      }
      const std::size_t copied = three.size() + five.size() + (lent.size() - 100001);
      l.run(l.now + 200ms);
      EXPECT_EQ(l.accepted.got, want);  // B checked every checksum
      EXPECT_EQ(l.b().stats().dropped_malformed, 0u);
      const StackStats& s = l.a().stats();
      EXPECT_EQ(c->stats().retransmits, 0u);  // a lossless link: each byte left once
      EXPECT_EQ(s.bytes_referenced + s.bytes_copied, want.size());
      // All of the loan went by reference but for frames too short to chain
      // (under 64 bytes of payload: at most one at each end of it).
      EXPECT_LE(s.bytes_referenced, 100001u);
      EXPECT_GE(s.bytes_referenced, 100001u - 2 * 63);
      EXPECT_LE(s.bytes_copied, copied + 2 * 63);
      EXPECT_GT(l.sides[0].chained_frames, 60u);
      // Every segment sent by reference pointed into the lent memory, with its handle.
      std::size_t in_loan = 0;
      for (const auto& [data, d] : l.sides[0].referenced) {
        EXPECT_EQ(d, &dev);
        EXPECT_GE(data.data(), lent.data());
        EXPECT_LE(data.data() + data.size(), lent.data() + 100001);
        in_loan += data.size();
      }
      EXPECT_EQ(in_loan, s.bytes_referenced);
      EXPECT_EQ(l.sides[0].offloaded > 0, offload);
      EXPECT_EQ(l.sides[0].pseudo_sums_right, l.sides[0].offloaded);
      EXPECT_GT(l.sides[0].odd_pieces, 0u);  // summed at odd offsets
      EXPECT_LE(l.sides[0].longest_chain, 7u);
      // With offload, those frames were summed by the stack (the device would
      // have got them wrong), the others by the device.
      EXPECT_EQ(s.csum_odd_chains > 0, offload);
    }
}

// A device that takes at most two segments a frame: a segment that would
// need more (a copied run beside a loan) is copied whole; the others are
// chained.
TEST(TcpStack, AFrameNeedingMoreSegmentsThanTheDeviceTakesIsCopied) {
  Link l;
  l.sides[0].chain = true;
  l.sides[0].most = 2;
  Owner mine;
  Conn* c = l.a().connect(l.ip_b, 988, 0, mine, l.now);
  ASSERT_NE(c, nullptr);
  // Queued before the connection opens: the segments straddle the pieces.
  const auto lent = pattern(50001);
  int dev = 0;
  const std::vector<std::uint8_t> three = {1, 2, 3}, five = {4, 5, 6, 7, 8};
  ASSERT_EQ(c->send(three, l.now), 3u);
  ASSERT_EQ(c->lend(lent, l.now, &dev), lent.size());
  ASSERT_EQ(c->send(five, l.now), 5u);
  l.run(l.now + 200ms);
  std::vector<std::uint8_t> want(three);
  want.insert(want.end(), lent.begin(), lent.end());
  want.insert(want.end(), five.begin(), five.end());
  EXPECT_EQ(l.accepted.got, want);
  EXPECT_EQ(l.sides[0].longest_chain, 1u);
  const StackStats& s = l.a().stats();
  EXPECT_GT(s.bytes_referenced, 40000u);
  EXPECT_EQ(s.bytes_referenced + s.bytes_copied, want.size());
  EXPECT_GE(s.bytes_copied, 8u + 1400u);  // the two frames beside the loan's ends, whole
}

TEST(TcpStack, ChecksumsAreLeftToADeviceThatOffloadsThem) {
  Link l;
  l.sides[0].off = {true, true};
  Owner mine;
  Conn* c = l.open(mine);
  ASSERT_NE(c, nullptr);
  const auto up = pattern(50000);
  std::size_t off = 0;
  while (l.accepted.got.size() < up.size() && l.now < 1100s) {
    off += c->send(ByteSpan(up).subspan(off), l.now);
    l.run(l.now + 5ms);
  }
  EXPECT_EQ(l.accepted.got, up);  // B checked every checksum the "device" filled in
  EXPECT_GT(l.sides[0].offloaded, 30u);
  EXPECT_EQ(l.sides[0].pseudo_sums_right, l.sides[0].offloaded);
  EXPECT_EQ(l.a().stats().csum_offloaded, l.sides[0].offloaded);
  EXPECT_EQ(l.b().stats().csum_offloaded, 0u);
  EXPECT_EQ(l.b().stats().dropped_malformed, 0u);

  // A segment with a wrong TCP checksum: dropped when A sums it, taken
  // when the device says it verified it (here: a reset for a closed port).
  TcpHeader h;
  h.src_port = 4000;
  h.dst_port = 5000;
  h.flags = tcp_flag::syn;
  std::vector<std::uint8_t> seg(20);
  ASSERT_EQ(encode_tcp(h, seg), 20u);
  store_be<std::uint16_t>(seg.data() + 16, 0x1234);
  const auto frame = frame_from_b(kProtoTcp, seg);
  const auto resets = l.a().stats().resets_out;
  l.a().receive(frame, l.now);
  EXPECT_EQ(l.a().stats().dropped_malformed, 1u);
  EXPECT_EQ(l.a().stats().resets_out, resets);
  l.a().receive(frame, l.now, true);
  EXPECT_EQ(l.a().stats().dropped_malformed, 1u);
  EXPECT_EQ(l.a().stats().csum_verified, 1u);
  EXPECT_EQ(l.a().stats().resets_out, resets + 1);
}

// Large receive offload, as between two virtio devices: A's transmits of
// up to 64 KiB go whole, and B's device hands each over as one unit in a
// chain of 2,000-byte buffers.  B takes a unit's payload where it lies,
// piece by piece with each buffer's reference, answers each unit with an
// ACK at once, and holds out-of-order units' pieces until a loss is
// repaired.
struct PieceOwner : Owner {
  std::size_t calls = 0, in_frames = 0;
  void on_data(ByteSpan b, void* frame) override {
    Owner::on_data(b, frame);
    ++calls;
    in_frames += frame != nullptr;
  }
};

TEST(TcpStack, LargeReceiveUnitsAreTakenWhereTheyLieInTheirChainOfBuffers) {
  for (const std::size_t drop : {std::size_t{0}, std::size_t{5}}) {
    SCOPED_TRACE(drop ? "every 5th unit lost" : "no loss");
    Link l;
    Side& a = l.sides[0];
    a.chain = true;
    a.off = {false, true, 1514, 64};  // as virtio: TCP's checksum and TSO, no IPv4 header checksum
    a.lro_piece = 2000;
    a.lro_drop_every = drop;
    PieceOwner got;
    l.sides[1].stack->listen(989, [&got](const Endpoints&) -> Upper* { return &got; });
    Owner mine;
    Conn* c = l.a().connect(l.ip_b, 989, 0, mine, l.now);
    ASSERT_NE(c, nullptr);
    const auto lent = pattern(1 << 20);
    int dev = 0;
    ASSERT_EQ(c->lend(lent, l.now, &dev), lent.size());
    l.run(l.now + 5s);
    EXPECT_EQ(got.got, lent);
    const StackStats& b = l.b().stats();
    EXPECT_GT(a.lro_units, 16u);
    EXPECT_GT(b.chains_in, a.lro_units / 2);
    EXPECT_EQ(b.chains_copied, 0u);
    EXPECT_GE(b.large_segments_in, b.chains_in);
    EXPECT_EQ(b.dropped_malformed, 0u);
    const Conn* bc = l.b().connection(l.ip_a, c->endpoints().local_port, 989);
    ASSERT_NE(bc, nullptr);
    if (drop == 0) {
      EXPECT_EQ(b.chains_in, a.lro_units);
      EXPECT_EQ(b.csum_verified, b.chains_in);  // every unit's checksum taken as the device's
      // Most units are 64 KiB, in 33 buffers of 2,000 bytes.
      EXPECT_GT(b.chain_pieces, 16 * b.chains_in);
      // Each unit delivered piece by piece from its buffers, with their
      // references: no byte copied.
      EXPECT_EQ(got.calls, b.chain_pieces);
      EXPECT_EQ(got.in_frames, got.calls);
      EXPECT_EQ(bc->stats().out_of_order, 0u);
      // An ACK for every unit (as Linux answers a GRO unit), not for every
      // second one.
      EXPECT_GE(bc->stats().segments_out, a.lro_units);
      EXPECT_EQ(c->stats().retransmits, 0u);
    } else {
      EXPECT_GT(bc->stats().out_of_order, 0u);
      EXPECT_GT(bc->stats().bytes_reassembled, 0u);
      EXPECT_GT(c->stats().retransmits, 0u);
    }
  }
}

// A chain whose headers do not all lie in its first buffer, or whose
// checksum the device did not verify, is copied into one buffer and
// received as one frame: the data arrives all the same, and a bad
// checksum is still found.
TEST(TcpStack, AChainThatCannotBeTakenInPlaceIsCopiedWhole) {
  Link l;
  Owner mine;
  Conn* c = l.open(mine);
  ASSERT_NE(c, nullptr);
  // B's next segment to A, built by hand with the sequence and ACK numbers
  // of B's last: 3,000 bytes of payload.
  std::uint32_t next = 0, acked = 0;
  for (auto it = l.sides[1].sent.rbegin(); it != l.sides[1].sent.rend(); ++it) {
    auto ip = decode_ipv4(ByteSpan(*it).subspan(14));
    if (!ip || ip->protocol != kProtoTcp) continue;
    auto t = decode_tcp(ip->payload);
    ASSERT_TRUE(t);
    next = t->seq + static_cast<std::uint32_t>(t->payload.size()) + ((t->flags & tcp_flag::syn) ? 1 : 0);
    acked = t->ack;
    break;
  }
  const auto data = pattern(3000);
  TcpHeader h;
  h.src_port = 988;
  h.dst_port = c->endpoints().local_port;
  h.ack = acked;
  h.flags = tcp_flag::ack | tcp_flag::psh;
  h.window = 1000;
  std::vector<std::uint8_t> seg(20 + data.size());
  auto send_as_chain = [&](std::uint32_t seq, std::size_t first, bool verified, bool good) {
    h.seq = seq;
    ASSERT_EQ(encode_tcp(h, seg), 20u);
    std::copy(data.begin(), data.end(), seg.begin() + 20);
    finish_tcp_checksum(kIpB, kIpA, seg);
    if (!good) seg[30] ^= 1;
    const auto frame = frame_from_b(kProtoTcp, seg);
    int refs[2];
    const FramePiece pieces[2] = {{ByteSpan(frame).first(first), &refs[0]}, {ByteSpan(frame).subspan(first), &refs[1]}};
    l.a().receive_chain(pieces, 2, l.now, verified);
  };
  const StackStats& s = l.a().stats();
  send_as_chain(next, 14 + 20 + 10, true, true);  // the TCP header split across buffers
  EXPECT_EQ(s.chains_copied, 1u);
  EXPECT_EQ(s.chains_in, 0u);
  send_as_chain(next, 14 + 20 + 20 + 100, false, false);  // not verified, and damaged
  EXPECT_EQ(s.chains_copied, 2u);
  EXPECT_EQ(s.dropped_malformed, 1u);
  send_as_chain(next + 3000, 14 + 20 + 20 + 100, true, true);  // verified, in place
  EXPECT_EQ(s.chains_in, 1u);
  auto want = data;
  want.insert(want.end(), data.begin(), data.end());
  EXPECT_EQ(mine.got, want);
  EXPECT_EQ(s.chain_bytes_copied, 2 * (14 + 20 + 20 + 3000u));
}

// Frames received in bursts: what a burst's segments let a connection
// send goes at the burst's end.  The receiver answers a burst of data with
// one ACK instead of one per two segments, and the sender, whose device
// cuts segments (TSO), turns a burst of ACKs into one transmit: larger
// frames, far fewer ACKs, the same bytes.
TEST(TcpStack, ABurstOfSegmentsDrawsOneAckAndABurstOfAcksOneTransmit) {
  struct Run {
    std::size_t acks = 0, tso_frames = 0, tso_segments = 0;
  };
  auto run = [](bool bursts) {
    Link l(std::nullopt, true, 10);
    l.bursts = bursts;
    Side& a = l.sides[0];
    a.chain = true;
    a.off = {true, true, 1514, 64};
    Owner mine;
    Conn* c = l.open(mine);
    EXPECT_NE(c, nullptr);
    if (!c) return Run{};
    const auto lent = pattern(4 << 20);
    int dev = 0;
    std::size_t off = 0;
    while (l.accepted.got.size() < lent.size() && l.now < 1100s) {
      off += c->lend(ByteSpan(lent).subspan(off), l.now, &dev);
      l.run(l.now + 1ms);
    }
    EXPECT_EQ(l.accepted.got, lent);
    EXPECT_EQ(c->stats().retransmits, 0u);
    const Conn* bc = l.b().connection(l.ip_a, c->endpoints().local_port, 988);
    return Run{bc ? static_cast<std::size_t>(bc->stats().segments_out) : 0, a.tso_frames, a.tso_segments};
  };
  const Run one = run(false), burst = run(true);
  EXPECT_GT(one.acks, 1000u);  // 2,900 segments, an ACK per two
  EXPECT_LT(burst.acks * 4, one.acks);
  ASSERT_GT(one.tso_frames, 0u);
  ASSERT_GT(burst.tso_frames, 0u);
  EXPECT_NEAR(static_cast<double>(burst.tso_segments), static_cast<double>(one.tso_segments), 0.05 * static_cast<double>(one.tso_segments));
  // Segments per frame the device cut.
  EXPECT_GT(burst.tso_segments * one.tso_frames, 2 * one.tso_segments * burst.tso_frames);
}

}  // namespace
}  // namespace lnetr::tcp
