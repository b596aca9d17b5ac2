// One TCP/IP stack on one Ethernet port (stack.hpp): ARP or neighbour discovery, ICMP echo, TCP demultiplexing.
#include "dataplane/tcp/stack.hpp"

#include <algorithm>

namespace lnetr::tcp {

struct Stack::Entry final : Output {
  Stack* stack = nullptr;
  std::unique_ptr<Conn> conn;
  bool half_open = false;  // counted in half_open_ (SYN-RECEIVED)
  bool deferred = false;   // in stack->deferred_: to be flushed at the burst's end
  void transmit(const Endpoints& ep, const TcpHeader& h, const Payload& payload) override {
    stack->transmit_tcp(ep, h, payload, stack->now_, conn->payload_mss());
  }
  bool defer() override {
    if (!stack->in_burst_) return false;
    if (!deferred) {
      deferred = true;
      stack->deferred_.push_back(this);
    }
    return true;
  }
};

void Stack::begin_burst() noexcept { in_burst_ = true; }

void Stack::end_burst(Time now) {
  in_burst_ = false;
  now_ = now;
  // (A flush may send, never end a connection: the list stays as it is.)
  for (Entry* e : deferred_) {
    e->deferred = false;
    e->conn->flush(now);
  }
  deferred_.clear();
}

Stack::Stack(const StackConfig& cfg, Port& port) : cfg_(cfg), port_(port) {
  cfg_.conn.mss = static_cast<std::uint16_t>(cfg.mtu - ip_header() - kTcpMinHeader);
  if (v6()) {
    link_local_ = link_local(cfg_.mac);
    groups_ = {multicast_mac(solicited_node(cfg_.ip)), multicast_mac(solicited_node(link_local_)),
               multicast_mac(kAllNodes)};
  }
}

Stack::~Stack() = default;

namespace {

// A connection's transmits of new data, where the device cuts segments
// (TSO): what an IPv4 packet holds with the longest TCP header (46
// segments at a 1,448-byte MSS); an IPv6 packet holds a little more.
constexpr std::uint32_t kTsoBytes = 65535 - 20 - 60;
// The most segments one such frame is cut into (net_tap's software
// segmentation takes no more than 64).
constexpr std::size_t kTsoMaxSegments = 64;
// Segments smaller than this are not left to the device (Intel NICs
// refuse an MSS under 256).
constexpr std::size_t kTsoMinSegment = 256;

// An initial sequence number: a clock ticking every 4 us plus a hash of the
// connection's addresses (RFC 6528's shape; the hash need not be secret on
// a router's own storage network).
// SYN cookies.  A cookie is the initial sequence number of a SYN-ACK sent
// without keeping state: 24 bits of a keyed hash, then the time in 64 s
// periods (its low 5 bits) and an index into kCookieMss (the largest MSS
// there not above the peer's).  The hash covers the connection's
// addresses, the peer's initial sequence number, the period and the index,
// so none of them can be changed without knowing the key.  It is good for two periods.
// When the SYN carried timestamps, the low 6 bits of our TSval carry the
// peer's window scale (15: none) and SACK permission, which its ACK echoes;
// without timestamps a cookie connection has no window scaling or SACK.
constexpr std::array<std::uint16_t, 8> kCookieMss = {536, 1220, 1360, 1440, 1460, 4036, 8400, 8960};
constexpr Time kCookiePeriod = std::chrono::seconds(64);
constexpr std::uint32_t kCookieWindow = 65535;

std::array<std::uint8_t, 48> endpoint_bytes(const Endpoints& ep, std::uint32_t x, std::uint64_t y) {
  std::array<std::uint8_t, 48> b{};
  std::copy(ep.local_ip.bytes.begin(), ep.local_ip.bytes.end(), b.begin());
  std::copy(ep.remote_ip.bytes.begin(), ep.remote_ip.bytes.end(), b.begin() + 16);
  store_be<std::uint16_t>(b.data() + 32, ep.local_port);
  store_be<std::uint16_t>(b.data() + 34, ep.remote_port);
  store_be<std::uint32_t>(b.data() + 36, x);
  store_be<std::uint64_t>(b.data() + 40, y);
  return b;
}

}  // namespace

// RFC 6528: a clock (4 us ticks) plus a keyed hash of the endpoints, so an
// off-path node can neither guess a connection's sequence numbers nor
// tell one connection's from another's.
std::uint32_t Stack::make_iss(const Endpoints& ep, Time now) const noexcept {
  const auto b = endpoint_bytes(ep, 0, 0);
  return static_cast<std::uint32_t>(siphash24(secret_, b)) + static_cast<std::uint32_t>(now.count() / 4000);
}

std::uint32_t Stack::cookie_hash(const Endpoints& ep, std::uint32_t peer_isn, std::uint64_t period,
                                 std::uint32_t mss_index) const noexcept {
  const auto b = endpoint_bytes(ep, peer_isn, (period << 3) | mss_index);
  return static_cast<std::uint32_t>(siphash24(secret_, b) >> 32);
}

void Stack::send_cookie(const Endpoints& ep, const TcpHeader& syn, Time now) {
  const TcpOptions& o = syn.options;
  const std::uint16_t peer_mss = o.mss.value_or(536);
  std::uint32_t mss_index = 0;
  for (std::uint32_t i = 0; i < kCookieMss.size(); ++i)
    if (kCookieMss[i] <= peer_mss) mss_index = i;
  const auto period = static_cast<std::uint64_t>(now / kCookiePeriod);
  TcpHeader h;
  h.src_port = ep.local_port;
  h.dst_port = ep.remote_port;
  h.seq = (cookie_hash(ep, syn.seq, period, mss_index) & ~0xffu) | static_cast<std::uint32_t>((period & 0x1f) << 3) |
          mss_index;
  h.ack = syn.seq + 1;
  h.flags = tcp_flag::syn | tcp_flag::ack;
  h.window = kCookieWindow;
  h.options.mss = cfg_.conn.mss;
  const bool ts = cfg_.conn.timestamps && o.timestamps;
  if (ts) {
    // What we offer besides the MSS needs the timestamps to come back.
    const bool ws = o.window_scale && cfg_.conn.window_scale > 0;
    if (ws) h.options.window_scale = cfg_.conn.window_scale;
    h.options.sack_permitted = cfg_.conn.sack && o.sack_permitted;
    const std::uint32_t bits = (ws ? std::min<std::uint32_t>(*o.window_scale, 14) : 15) |
                               (h.options.sack_permitted ? 0x10u : 0u);
    // No later than the connection's own clock will say (it is the same
    // clock: milliseconds), so the peer's PAWS check passes what follows.
    const auto ms = static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
    std::uint32_t tsval = (ms & ~0x3fu) | bits;
    if (tsval > ms) tsval -= 64;
    h.options.timestamps = {{tsval, o.timestamps->first}};
  }
  ++stats_.syncookies_sent;
  last_cookie_ = now;
  answer_tcp(ep, h);
}

// The SYN an ACK returning one of our cookies answers, as if it had been
// kept (its options recovered from the cookie and the echoed timestamp);
// nothing if the cookie is not ours or too old.
std::optional<TcpHeader> Stack::cookie_syn(const Endpoints& ep, const TcpHeader& ack, Time now) const {
  const std::uint32_t cookie = ack.ack - 1, peer_isn = ack.seq - 1;
  const auto period_now = static_cast<std::uint64_t>(now / kCookiePeriod);
  bool good = false;
  for (std::uint64_t back = 0; back < 2 && back <= period_now && !good; ++back) {
    const std::uint64_t period = period_now - back;
    good = ((cookie >> 3) & 0x1f) == (period & 0x1f) &&
           (cookie_hash(ep, peer_isn, period, cookie & 7) & ~0xffu) == (cookie & ~0xffu);
  }
  if (!good) return std::nullopt;
  TcpHeader syn;
  syn.src_port = ep.remote_port;
  syn.dst_port = ep.local_port;
  syn.seq = peer_isn;
  syn.flags = tcp_flag::syn;
  syn.window = 0;  // the ACK's, scaled, is taken when it is processed
  syn.options.mss = kCookieMss[cookie & 7];
  if (ack.options.timestamps && cfg_.conn.timestamps) {
    const std::uint32_t bits = ack.options.timestamps->second & 0x3f;
    if ((bits & 0xf) != 15) syn.options.window_scale = static_cast<std::uint8_t>(bits & 0xf);
    syn.options.sack_permitted = (bits & 0x10) != 0;
    syn.options.timestamps = {{ack.options.timestamps->first, 0}};
  }
  return syn;
}

Stack::Entry& Stack::add(const Endpoints& ep, Upper& owner) {
  auto e = std::make_unique<Entry>();
  e->stack = this;
  e->conn = std::make_unique<Conn>(ep, conn_config(), owner, *e);
  Entry& ref = *e;
  conns_[{key_of(ep.remote_ip), ep.remote_port, ep.local_port}] = std::move(e);
  return ref;
}

ConnConfig Stack::conn_config() const {
  ConnConfig c = cfg_.conn;
  if (port_.offloads().tso_frame > 0 && port_.max_segments() > 1) c.tso_bytes = kTsoBytes;
  return c;
}

Stack::AddrKey Stack::key_of(const IpAddr& a) noexcept {
  return {load_be<std::uint64_t>(a.bytes.data()), load_be<std::uint64_t>(a.bytes.data() + 8)};
}

IpAddr Stack::addr_of(const AddrKey& k) const noexcept {
  IpAddr a{cfg_.ip.family, {}};
  store_be<std::uint64_t>(a.bytes.data(), k.hi);
  store_be<std::uint64_t>(a.bytes.data() + 8, k.lo);
  return a;
}

bool Stack::on_subnet(const IpAddr& ip) const noexcept { return ip.same_prefix(cfg_.ip, cfg_.prefix_len); }

std::optional<Mac> Stack::neighbour(const IpAddr& ip) const {
  auto it = neighbours_.find(key_of(ip));
  return it == neighbours_.end() ? std::nullopt : it->second.mac;
}

Conn* Stack::connection(const IpAddr& remote_ip, std::uint16_t remote_port, std::uint16_t local_port) const {
  auto it = conns_.find({key_of(remote_ip), remote_port, local_port});
  return it == conns_.end() ? nullptr : it->second->conn.get();
}

void Stack::listen(std::uint16_t port, Acceptor accept) { listeners_[port] = std::move(accept); }

Conn* Stack::connect(const IpAddr& ip, std::uint16_t port, std::uint16_t local_port, Upper& owner, Time now) {
  now_ = now;
  if (local_port == 0) {
    // The next privileged port free towards that peer (as socklnd binds).
    for (int i = 0; i < 1024 && local_port == 0; ++i) {
      const std::uint16_t p = next_port_;
      next_port_ = next_port_ > 512 ? static_cast<std::uint16_t>(next_port_ - 1) : 1023;
      if (!conns_.count({key_of(ip), port, p}) && !listeners_.count(p)) local_port = p;
    }
    if (local_port == 0) return nullptr;
  } else if (conns_.count({key_of(ip), port, local_port})) {
    return nullptr;
  }
  if (ip.family != cfg_.ip.family) return nullptr;
  const Endpoints ep{cfg_.ip, ip, local_port, port};
  Conn* c = add(ep, owner).conn.get();
  c->connect(make_iss(ep, now), now);
  return c;
}

void Stack::receive(ByteSpan frame, Time now, bool verified, void* dev) {
  now_ = now;
  ++stats_.frames_in;
  auto eth = decode_ethernet(frame);
  if (!eth) {
    ++stats_.dropped_malformed;
    return;
  }
  // Ours, broadcast (ARP), or one of our groups (IPv6).
  const bool group = v6() ? std::find(groups_.begin(), groups_.end(), eth->dst) != groups_.end()
                          : eth->dst == kBroadcastMac;
  if (eth->dst != cfg_.mac && !group) {
    ++stats_.dropped_not_ours;
    return;
  }
  const ByteSpan body = frame.subspan(eth->header_size());
  if (eth->type == kEtherArp && !v6()) {
    auto a = decode_arp(body);
    if (!a) ++stats_.dropped_malformed;
    else on_arp(*a, now);
  } else if (eth->type == kEtherIpv4 && !v6()) {
    auto ip = decode_ipv4(body);
    if (!ip) {
      ++stats_.dropped_malformed;
    } else {
      frame_src_ = eth->src;
      on_ipv4(*ip, now, verified, dev);
      frame_src_.reset();
    }
  } else if (eth->type == kEtherIpv6 && v6()) {
    auto ip = decode_ipv6(body);
    if (!ip) {
      ++stats_.dropped_malformed;
    } else {
      frame_src_ = eth->src;
      on_ipv6(*ip, now, verified, dev);
      frame_src_.reset();
    }
  } else {
    ++stats_.dropped_not_ours;
  }
}

void Stack::receive_chain(const FramePiece* pieces, std::size_t count, Time now, bool verified) {
  if (count == 0) return;
  if (count == 1) return receive(pieces[0].bytes, now, verified, pieces[0].dev);
  std::size_t whole = 0;
  for (std::size_t i = 0; i < count; ++i) whole += pieces[i].bytes.size();
  const ByteSpan head = pieces[0].bytes;
  auto copied = [&] {  // received as one frame, copied
    ++stats_.chains_copied;
    stats_.chain_bytes_copied += whole;
    linear_.clear();
    for (std::size_t i = 0; i < count; ++i) linear_.insert(linear_.end(), pieces[i].bytes.begin(), pieces[i].bytes.end());
    receive(linear_, now, verified);
  };
  auto eth = decode_ethernet(head);
  if (!verified || !eth || eth->type != ether_type() || eth->dst != cfg_.mac) return copied();
  const std::size_t eh = eth->header_size();
  // The TCP segment's source, its bytes in the first piece, and its length.
  IpAddr src;
  ByteSpan l4;
  std::size_t l4_len = 0;
  if (v6()) {
    auto ip = decode_ipv6_head(head.subspan(eh), whole - eh);
    if (!ip || ip->dst != cfg_.ip || ip->next_header != kProtoTcp) return copied();
    src = ip->src, l4 = ip->payload, l4_len = ip->payload_length;
  } else {
    auto ip = decode_ipv4_head(head.subspan(eh), whole - eh);
    if (!ip || ip->dst != cfg_.ip.v4_host() || ip->protocol != kProtoTcp) return copied();
    src = IpAddr::v4(ip->src), l4 = ip->payload, l4_len = ip->total_length - ip->header_size;
  }
  // (decode_tcp would take the first piece's end for the segment's: the
  // header must lie within it)
  if (l4.size() < kTcpMinHeader || std::size_t{(l4[12] >> 4) * 4u} > l4.size()) return copied();
  auto seg = decode_tcp(l4);
  if (!seg) return copied();
  now_ = now;
  ++stats_.frames_in;
  ++stats_.csum_verified;
  ++stats_.chains_in;
  stats_.chain_pieces += count;
  // The payload's later pieces, up to the IP packet's end (what follows
  // is the Ethernet frame's padding).
  std::size_t rest = l4_len - l4.size();
  chain_.clear();
  for (std::size_t i = 1; i < count && rest > 0; ++i) {
    const std::size_t k = std::min(rest, pieces[i].bytes.size());
    chain_.push_back(FramePiece{pieces[i].bytes.first(k), pieces[i].dev});
    rest -= k;
  }
  seg->frame = pieces[0].dev;
  seg->more = chain_.data();
  seg->more_count = chain_.size();
  frame_src_ = eth->src;
  on_tcp(src, *seg, now);
  frame_src_.reset();
}

// ---- ARP ------------------------------------------------------------------------------

void Stack::on_arp(const Arp& a, Time now) {
  // Learn (or refresh) the sender if it is a neighbour we know or it asks
  // for us (RFC 826's merge rule), and send what waited for it.
  const IpAddr sender = IpAddr::v4(a.sender_ip);
  const bool for_us = a.target_ip == cfg_.ip.v4_host();
  if (neighbours_.count(key_of(sender))) learn(sender, a.sender_mac, now);
  else if (for_us && on_subnet(sender)) learn(sender, a.sender_mac, now, false);
  if (a.op == kArpRequest && for_us) {
    ++stats_.arp_requests_in;
    Arp reply;
    reply.op = kArpReply;
    reply.sender_mac = cfg_.mac;
    reply.sender_ip = cfg_.ip.v4_host();
    reply.target_mac = a.sender_mac;
    reply.target_ip = a.sender_ip;
    std::uint8_t body[kArpSize];
    encode_arp(reply, body);
    send_frame_to(a.sender_mac, kEtherArp, body);
    ++stats_.arp_replies_out;
  }
}

void Stack::learn(const IpAddr& ip, const Mac& mac, Time now, bool evict) {
  const AddrKey k = key_of(ip);
  if (!neighbours_.count(k)) {
    if (!evict && neighbours_.size() >= cfg_.max_neighbours) return;
    make_neighbour_room();
  }
  Neighbour& n = neighbours_[k];
  n.mac = mac;
  n.expires = now + cfg_.arp_lifetime;
  n.tries = 0;
  for (const auto& packet : n.held) send_frame_to(mac, ether_type(), packet);
  n.held.clear();
}

void Stack::solicit(const IpAddr& ip) {
  if (!v6()) {
    Arp req;
    req.op = kArpRequest;
    req.sender_mac = cfg_.mac;
    req.sender_ip = cfg_.ip.v4_host();
    req.target_ip = ip.v4_host();
    std::uint8_t body[kArpSize];
    encode_arp(req, body);
    send_frame_to(kBroadcastMac, kEtherArp, body);
    ++stats_.arp_requests_out;
    return;
  }
  // RFC 4861 §7.2.2: to the solicited-node group, from our address, with
  // our link-layer address.
  const IpAddr dst = solicited_node(ip);
  std::uint8_t packet[kIpv6Header + kNdSize];
  Neighbour6 ns;
  ns.type = kNdSolicitation;
  ns.target = ip;
  ns.link_addr = cfg_.mac;
  encode_nd(ns, cfg_.ip, dst, MutableByteSpan(packet).subspan(kIpv6Header));
  Ipv6 h;
  h.next_header = kProtoIcmpv6;
  h.hop_limit = 255;
  h.payload_length = kNdSize;
  h.src = cfg_.ip;
  h.dst = dst;
  encode_ipv6(h, packet);
  send_frame_to(multicast_mac(dst), kEtherIpv6, packet);
  ++stats_.nd_solicits_out;
}

// ---- IPv4, ICMP -------------------------------------------------------------------------

void Stack::on_ipv4(const Ipv4& ip, Time now, bool verified, void* dev) {
  if (ip.dst != cfg_.ip.v4_host()) {
    ++stats_.dropped_not_ours;
    return;
  }
  if (ip.protocol == kProtoTcp) {
    on_segment(IpAddr::v4(ip.src), ip.payload, now, verified, dev);
  } else if (ip.protocol == kProtoIcmp) {
    auto icmp = decode_icmp(ip.payload);
    if (!icmp) {
      ++stats_.dropped_malformed;
      return;
    }
    if (icmp->type != kIcmpEchoRequest) return;
    // The same message back as an echo reply: type 0, checksum anew.
    std::vector<std::uint8_t> reply(ip.payload.begin(), ip.payload.end());
    reply[0] = kIcmpEchoReply;
    reply[2] = reply[3] = 0;
    store_be<std::uint16_t>(reply.data() + 2, checksum(reply));
    answer_ip(IpAddr::v4(ip.src), kProtoIcmp, reply, now);
    ++stats_.icmp_echo_replies;
  } else {
    ++stats_.dropped_not_ours;
  }
}

void Stack::on_ipv6(const Ipv6& ip, Time now, bool verified, void* dev) {
  // TCP to our address; ICMPv6 also to our link-local address, our
  // solicited-node groups and all nodes.
  const bool to_us = ip.next_header == kProtoIcmpv6
                         ? ours(ip.dst) || ip.dst == solicited_node(cfg_.ip) ||
                               ip.dst == solicited_node(link_local_) || ip.dst == kAllNodes
                         : ip.dst == cfg_.ip;
  if (!to_us) {
    ++stats_.dropped_not_ours;
    return;
  }
  if (ip.next_header == kProtoTcp) {
    on_segment(ip.src, ip.payload, now, verified, dev);
  } else if (ip.next_header == kProtoIcmpv6) {
    auto icmp = decode_icmp6(ip);
    if (!icmp) {
      ++stats_.dropped_malformed;
      return;
    }
    if (icmp->type == kNdSolicitation || icmp->type == kNdAdvertisement) {
      auto n = decode_nd(ip, *icmp);
      if (!n) ++stats_.dropped_malformed;
      else on_nd(ip, *n, now);
      return;
    }
    if (icmp->type != kIcmp6EchoRequest || ip.dst != cfg_.ip) return;
    // The same message back as an echo reply, checksum anew.
    std::vector<std::uint8_t> reply(ip.payload.begin(), ip.payload.end());
    reply[0] = kIcmp6EchoReply;
    finish_icmp6_checksum(cfg_.ip, ip.src, reply);
    answer_ip(ip.src, kProtoIcmpv6, reply, now);
    ++stats_.icmp_echo_replies;
  } else {
    // Extension headers (fragments among them) and other protocols.
    ++stats_.dropped_not_ours;
  }
}

// RFC 4861 §7.2.3-7.2.5, for a host with one address and no router.
void Stack::on_nd(const Ipv6& ip, const Neighbour6& n, Time now) {
  if (n.type == kNdAdvertisement) {
    // Only a neighbour being resolved or known is learnt (no state for
    // what nobody asked); a known one's address changes only if the
    // advertisement overrides it (RFC 4861 §7.2.5: a peer that moved to
    // another NIC says so to all nodes).
    auto it = neighbours_.find(key_of(n.target));
    if (n.link_addr && it != neighbours_.end() && (n.override_ || !it->second.mac))
      learn(n.target, *n.link_addr, now);
    return;
  }
  if (!ours(n.target)) {
    ++stats_.dropped_not_ours;
    return;
  }
  ++stats_.nd_solicits_in;
  // The sender is learnt as ARP's rule has it: it may be about to talk to us.
  const bool dad = ip.src.is_unspecified();  // a duplicate address check: no source, no link-layer address
  if (dad && n.link_addr) {
    ++stats_.dropped_malformed;
    return;
  }
  if (!dad && n.link_addr && on_subnet(ip.src)) learn(ip.src, *n.link_addr, now, false);
  // The advertisement goes straight back (the sender's source may be its
  // link-local address, which is not on our subnet): to its link-layer
  // address, or the frame's source; a duplicate address check is answered
  // to all nodes.
  Neighbour6 na;
  na.type = kNdAdvertisement;
  na.target = n.target;
  na.link_addr = cfg_.mac;
  na.solicited = !dad;
  na.override_ = true;
  const IpAddr& all_nodes = kAllNodes;
  const IpAddr dst = dad ? all_nodes : ip.src;
  std::uint8_t packet[kIpv6Header + kNdSize];
  encode_nd(na, n.target, dst, MutableByteSpan(packet).subspan(kIpv6Header));
  Ipv6 h;
  h.next_header = kProtoIcmpv6;
  h.hop_limit = 255;
  h.payload_length = kNdSize;
  h.src = n.target;  // the address asked for
  h.dst = dst;
  encode_ipv6(h, packet);
  const Mac to = dad ? multicast_mac(all_nodes) : n.link_addr ? *n.link_addr : frame_src_.value_or(kBroadcastMac);
  send_frame_to(to, kEtherIpv6, packet);
  ++stats_.nd_adverts_out;
}

void Stack::on_segment(const IpAddr& src, ByteSpan segment, Time now, bool verified, void* dev) {
  if (verified) {
    ++stats_.csum_verified;
  } else if (!tcp_checksum_ok(src, cfg_.ip, segment)) {
    ++stats_.dropped_malformed;
    return;
  }
  auto seg = decode_tcp(segment);
  if (!seg) {
    ++stats_.dropped_malformed;
    return;
  }
  seg->frame = dev;
  on_tcp(src, *seg, now);
}

void Stack::on_tcp(const IpAddr& src, const TcpHeader& seg, Time now) {
  if (seg.payload_size() + ip_header() + kTcpMinHeader > cfg_.mtu) ++stats_.large_segments_in;
  const bool syn_only = (seg.flags & (tcp_flag::syn | tcp_flag::ack | tcp_flag::rst)) == tcp_flag::syn;
  auto it = conns_.find({key_of(src), seg.src_port, seg.dst_port});
  if (it != conns_.end()) {
    // Traffic from the peer confirms its neighbour entry (as Linux's
    // dst_confirm): no ARP round every arp_lifetime under load.
    // (Only from the MAC it has: a peer that moved to another is asked
    // again once the entry goes stale.)
    if (auto nb = neighbours_.find(key_of(src));
        nb != neighbours_.end() && nb->second.mac && (!frame_src_ || *frame_src_ == *nb->second.mac))
      nb->second.expires = now + cfg_.arp_lifetime;
    Entry& e = *it->second;
    Conn& c = *e.conn;
    if (!(syn_only && c.yield_time_wait(seg))) {
      c.input(seg, now);
      if (e.half_open && c.state() != State::syn_received) {
        e.half_open = false;
        --half_open_;
      }
      if (c.state() == State::closed) forget(it);
      return;
    }
    forget(it);  // a peer reconnecting from the same port: a new connection
  }
  auto l = listeners_.find(seg.dst_port);
  if (l == listeners_.end()) {
    if (!(seg.flags & tcp_flag::rst)) send_rst_for(src, seg);
    return;
  }
  const Endpoints ep{cfg_.ip, src, seg.dst_port, seg.src_port};
  if (syn_only) {
    if (half_open_ >= cfg_.max_half_open) return send_cookie(ep, seg, now);
    if (conns_.size() >= cfg_.max_connections) {
      ++stats_.dropped_overload;  // the peer retries its SYN
      return;
    }
    Upper* owner = l->second(ep);
    if (!owner) return send_rst_for(src, seg);  // refused by its owner
    Entry& e = add(ep, *owner);
    e.half_open = true;
    ++half_open_;
    e.conn->accept(seg, make_iss(ep, now), now);
    return;
  }
  // An ACK for no connection: one that returns a cookie, while cookies
  // are being sent (within their lifetime), makes the connection.
  const std::uint8_t flags = seg.flags & (tcp_flag::syn | tcp_flag::ack | tcp_flag::rst);
  if (flags == tcp_flag::ack && last_cookie_ && now - *last_cookie_ < 2 * kCookiePeriod) {
    if (conns_.size() >= cfg_.max_connections) {
      ++stats_.dropped_overload;
      return;
    }
    if (auto syn = cookie_syn(ep, seg, now)) {
      Upper* owner = l->second(ep);
      if (!owner) return send_rst_for(src, seg);  // refused by its owner
      Conn* c = add(ep, *owner).conn.get();
      c->accept(*syn, seg.ack - 1, now, false);
      c->input(seg, now);
      ++stats_.syncookies_accepted;
      if (c->state() == State::closed) forget(conns_.find({key_of(src), seg.src_port, seg.dst_port}));
      return;
    }
    ++stats_.syncookies_refused;
  }
  if (!(seg.flags & tcp_flag::rst)) send_rst_for(src, seg);
}

// RFC 9293 §3.10.7.1: the reset for a segment that matches no connection.
void Stack::send_rst_for(const IpAddr& src, const TcpHeader& seg) {
  TcpHeader r;
  r.src_port = seg.dst_port;
  r.dst_port = seg.src_port;
  if (seg.flags & tcp_flag::ack) {
    r.seq = seg.ack;
    r.flags = tcp_flag::rst;
  } else {
    r.seq = 0;
    r.ack = seg.seq + static_cast<std::uint32_t>(seg.payload_size()) + ((seg.flags & tcp_flag::syn) ? 1 : 0) +
            ((seg.flags & tcp_flag::fin) ? 1 : 0);
    r.flags = tcp_flag::rst | tcp_flag::ack;
  }
  ++stats_.resets_out;
  answer_tcp({cfg_.ip, src, seg.dst_port, seg.src_port}, r);
}

// A segment that answers the frame being handled and keeps no state (a
// reset, a SYN cookie): to the neighbour if it is known, else straight back
// to the frame's sender, so that a flood from made-up addresses neither
// grows the neighbour table nor waits on ARP.
void Stack::answer_tcp(const Endpoints& ep, const TcpHeader& h) {
  auto nb = neighbours_.find(key_of(ep.remote_ip));
  const bool resolved = nb != neighbours_.end() && nb->second.mac && now_ < nb->second.expires;
  if (!resolved && frame_src_) return transmit_built(*frame_src_, ep, h, {}, false);
  transmit_tcp(ep, h, {}, now_);
}

void Stack::transmit_tcp(const Endpoints& ep, const TcpHeader& h, const Payload& payload, Time now,
                         std::size_t seg) {
  auto nb = neighbours_.find(key_of(ep.remote_ip));
  const bool resolved = nb != neighbours_.end() && nb->second.mac && now < nb->second.expires;
  if (seg > 0 && payload.size() > seg) {
    // Several segments' bytes: in frames the device cuts (TSO) as far as
    // it can take them, the rest cut here, one segment a frame.  Only the
    // last segment keeps PSH and FIN.
    const Offloads off = port_.offloads();
    const std::size_t header = kTcpMinHeader + tcp_options_size(h.options, false);
    const std::size_t overhead = Ethernet{{}, {}, cfg_.vlan, ether_type()}.header_size() + ip_header() + header;
    std::size_t tso_seg = off.tso_frame > overhead ? std::min(seg, off.tso_frame - overhead) & ~std::size_t{1} : 0;
    if (tso_seg < kTsoMinSegment) tso_seg = 0;
    for (std::size_t at = 0; at < payload.size();) {
      const Payload rest = payload.sub(at, payload.size() - at);
      const std::size_t whole = resolved && tso_seg > 0 ? tso_extent(rest, tso_seg, header) : 0;
      const std::size_t len = whole > 0 ? whole : std::min(seg, rest.size());
      TcpHeader part = h;
      part.seq = h.seq + static_cast<std::uint32_t>(at);
      if (at + len < payload.size()) part.flags = static_cast<std::uint8_t>(h.flags & ~(tcp_flag::psh | tcp_flag::fin));
      if (whole > 0) {
        transmit_built(*nb->second.mac, ep, part, rest.sub(0, len), true, tso_seg);
      } else {
        stats_.tso_cut_here += off.tso_frame > 0;
        transmit_tcp(ep, part, rest.sub(0, len), now);
      }
      at += len;
    }
    return;
  }
  if (resolved) {
    // Payload with device references goes by reference where the port
    // chains frames (and takes that many segments); a short one is copied.
    bool chain = false;
    if (const std::size_t most = port_.max_segments(); most > 1 && payload.size() >= 64) {
      const SendQueue::Survey s = payload.survey();
      chain = s.dev && s.pieces + 1 <= most;
    }
    return transmit_built(*nb->second.mac, ep, h, payload, chain);
  }
  std::vector<std::uint8_t> bytes(kTcpMaxHeader + payload.size());
  const std::size_t n = encode_tcp(h, bytes);
  if (n == 0) return;
  payload.copy_to(bytes.data() + n);
  bytes.resize(n + payload.size());
  finish_tcp_checksum(ep.local_ip, ep.remote_ip, bytes);
  send_ip(ep.remote_ip, kProtoTcp, bytes, now);
}

std::size_t Stack::tso_extent(const Payload& payload, std::size_t seg, std::size_t header) const {
  const Offloads off = port_.offloads();
  // What one frame may carry: an IP packet (IPv6's length leaves out its
  // header), cut into kTsoMaxSegments at most.
  const std::size_t limit = std::min(std::size_t{65535} - (v6() ? 0 : kIpv4MinHeader) - header, kTsoMaxSegments * seg);
  // Pieces as far as the chain may go: no more than the device takes, in
  // all and within each segment it cuts (`window`: the segment the piece
  // starts in, `in_window` the pieces in it); none at an odd offset
  // (devices sum a chained frame segment by segment).  A copied piece goes
  // into as many buffers as it takes, each holding a segment's bytes at
  // least, so a segment the device cuts spans two of them at most: a
  // device that limits the pieces of each segment must take two more.
  std::size_t pieces = 0, at = 0, window = 0, in_window = 0;
  bool stop = false;
  payload.for_each_piece([&](ByteSpan piece, void* dev) {
    if (stop) return;
    if (at / seg != window) window = at / seg, in_window = 0;
    ++in_window;
    // (Its buffers' sizes may be odd: only where pieces may lie at odd offsets.)
    if (!dev && piece.size() > seg && off.odd_pieces &&
        (off.tso_segment_pieces == 0 || in_window + 1 <= off.tso_segment_pieces)) {
      // The buffers of what the frame takes of it (up to the limit), as
      // many as the device's count leaves (then the frame ends in it).
      const std::size_t room = off.tso_segments > pieces + 1 ? off.tso_segments - pieces - 1 : 0;
      const std::size_t k = std::min({piece.size(), limit > at ? limit - at : 0, room * seg});
      stop = k == 0;
      if (stop) return;
      pieces += (k + seg - 1) / seg;
      at += k;
      window = (at - 1) / seg, in_window = 2;  // (at most: the segment it ends in may hold two of its buffers)
      stop = k < piece.size();
      return;
    }
    stop = at >= limit || ++pieces + 1 > off.tso_segments || (at % 2 != 0 && !off.odd_pieces) ||
           (!dev && piece.size() > seg) ||
           (off.tso_segment_pieces > 0 && in_window > off.tso_segment_pieces);
    if (stop) return;
    at += piece.size();
    if (!piece.empty() && (at - 1) / seg != window) window = (at - 1) / seg, in_window = 1;  // it runs on into a later segment
  });
  if (at >= payload.size() && payload.size() <= limit) return payload.size() > seg ? payload.size() : 0;
  at = std::min(at, limit) / seg * seg;
  return at >= 2 * seg ? at : 0;
}

void Stack::transmit_built(const Mac& dst, const Endpoints& ep, const TcpHeader& h, const Payload& payload,
                           bool chain, std::size_t tso_seg) {
  Ethernet e;
  e.dst = dst;
  e.src = cfg_.mac;
  e.vlan = cfg_.vlan;
  e.type = ether_type();
  const std::size_t eh = e.header_size();
  const std::size_t ih = ip_header();
  const std::size_t in_head = chain ? 0 : payload.size();  // payload bytes in the first segment
  const std::size_t most = std::max<std::size_t>(60, eh + ih + kTcpMaxHeader + in_head);
  ++stats_.frames_out;  // sent, or as if lost on the wire
  MutableByteSpan frame = port_.alloc_frame(most);
  if (frame.size() < most) return;  // the port has no buffer
  const MutableByteSpan tcp = frame.subspan(eh + ih);
  const std::size_t n = encode_tcp(h, tcp);
  if (n == 0) return port_.send_built(0);
  const auto tcp_len = static_cast<std::uint16_t>(n + payload.size());
  Offloads off = port_.offloads();
  if (!chain) {
    payload.copy_to(tcp.data() + n);
    stats_.bytes_copied += payload.size();
  } else {
    std::size_t at = 0;
    bool ok = true, odd = false;
    std::size_t referenced = 0;
    payload.for_each_piece([&](ByteSpan piece, void* dev) {
      if (!ok) return;
      odd |= at % 2 != 0;
      at += piece.size();
      const Port::Appended how = port_.append_segment(piece, dev);
      ok = how != Port::Appended::none;
      if (how == Port::Appended::referenced) referenced += piece.size();
    });
    if (!ok) return port_.send_built(0);
    stats_.bytes_referenced += referenced;
    stats_.bytes_copied += payload.size() - referenced;
    // Some devices sum a chained frame segment by segment as if each began
    // at an even offset (net_tap does): one with a segment at an odd
    // offset is summed here instead.
    if (odd && off.tx_tcp && !off.odd_pieces && tso_seg == 0) {  // (tso_extent keeps such pieces out of frames the device cuts)
      off = {};
      ++stats_.csum_odd_chains;
    }
    if (!off.tx_tcp) {
      store_be<std::uint16_t>(tcp.data() + 16, 0);
      std::uint32_t sum = checksum_add(tcp_pseudo_sum(ep.local_ip, ep.remote_ip, tcp_len), tcp.first(n));
      at = n;
      payload.for_each([&](ByteSpan piece) {
        sum = checksum_add_at(sum, piece, at);
        at += piece.size();
      });
      store_be<std::uint16_t>(tcp.data() + 16, static_cast<std::uint16_t>(~checksum_fold(sum)));
    }
  }
  std::size_t segments = 1;
  if (tso_seg > 0) {  // cut by the device: the pseudo-header's sum without a length, as DPDK has it
    segments = (payload.size() + tso_seg - 1) / tso_seg;
    store_be<std::uint16_t>(tcp.data() + 16, tcp_pseudo_sum(ep.local_ip, ep.remote_ip, 0));
    ++stats_.tso_frames;
    stats_.tso_segments += segments;
    stats_.csum_offloaded += segments;
  } else if (off.tx_tcp) {  // the device sums the segment: the field holds the pseudo-header's sum
    store_be<std::uint16_t>(tcp.data() + 16, tcp_pseudo_sum(ep.local_ip, ep.remote_ip, tcp_len));
    ++stats_.csum_offloaded;
  } else if (!chain) {
    finish_tcp_checksum(ep.local_ip, ep.remote_ip, tcp.first(tcp_len));
  }
  encode_ip(ep.remote_ip, kProtoTcp, tcp_len, frame.subspan(eh), segments);  // (the device numbers the segments it cuts)
  if (off.tx_ipv4 && !v6()) store_be<std::uint16_t>(frame.data() + eh + 10, 0);  // the device fills it
  encode_ethernet(e, frame);
  std::size_t len = eh + ih + n + in_head;  // the first segment's bytes
  if (len < 60 && !chain) {  // Ethernet's minimum (without FCS); a chained frame is longer
    std::fill(frame.begin() + static_cast<std::ptrdiff_t>(len), frame.begin() + 60, std::uint8_t{0});
    len = 60;
  }
  port_.send_built(len, off.tx_ipv4 || off.tx_tcp ? eh : 0, tso_seg);
}

void Stack::encode_ip(const IpAddr& dst, std::uint8_t proto, std::size_t l4_len, MutableByteSpan out,
                      std::size_t count) {
  const std::uint8_t tos = proto == kProtoTcp ? cfg_.tos : 0;
  if (v6()) {
    Ipv6 h;
    h.traffic_class = tos;
    h.payload_length = static_cast<std::uint16_t>(l4_len);
    h.next_header = proto;
    h.src = cfg_.ip;
    h.dst = dst;
    encode_ipv6(h, out);
    return;
  }
  Ipv4 h;
  h.tos = tos;
  h.total_length = static_cast<std::uint16_t>(kIpv4MinHeader + l4_len);
  h.id = ip_id_;
  ip_id_ = static_cast<std::uint16_t>(ip_id_ + count);
  h.protocol = proto;
  h.src = cfg_.ip.v4_host();
  h.dst = dst.v4_host();
  encode_ipv4(h, out);
}

void Stack::answer_ip(const IpAddr& dst, std::uint8_t proto, ByteSpan l4, Time now) {
  auto nb = neighbours_.find(key_of(dst));
  const bool resolved = nb != neighbours_.end() && nb->second.mac && now < nb->second.expires;
  if (resolved || !frame_src_ || !on_subnet(dst)) return send_ip(dst, proto, l4, now);
  std::vector<std::uint8_t> packet(ip_header() + l4.size());
  encode_ip(dst, proto, l4.size(), packet);
  std::copy(l4.begin(), l4.end(), packet.begin() + static_cast<std::ptrdiff_t>(ip_header()));
  send_frame_to(*frame_src_, ether_type(), packet);
}

// RFC 3810: our solicited-node groups, joined, so that a switch that snoops
// MLD forwards the peers' solicitations to us; twice at start (its
// robustness), then every 30 s (a snooping switch forgets a listener after
// 260 s without a report; queries are not answered).
void Stack::send_mld_report() {
  const IpAddr groups[2] = {solicited_node(cfg_.ip), solicited_node(link_local_)};
  std::uint8_t packet[kIpv6Header + 8 + 8 + 40];
  const std::size_t n = encode_mld_report(link_local_, groups, groups[0] == groups[1] ? 1 : 2, packet);
  send_frame_to(multicast_mac(kAllMldRouters), kEtherIpv6, ByteSpan(packet, n));
  ++stats_.mld_reports_out;
}

void Stack::send_ip(const IpAddr& dst, std::uint8_t proto, ByteSpan l4, Time now) {
  if (!on_subnet(dst)) {
    ++stats_.dropped_not_ours;  // no gateway: LNet peers are on the NI's network
    return;
  }
  std::vector<std::uint8_t> packet(ip_header() + l4.size());
  encode_ip(dst, proto, l4.size(), packet);
  std::copy(l4.begin(), l4.end(), packet.begin() + static_cast<std::ptrdiff_t>(ip_header()));
  const AddrKey k = key_of(dst);
  if (!neighbours_.count(k)) make_neighbour_room();
  Neighbour& n = neighbours_[k];
  if (n.mac && now < n.expires) {
    send_frame_to(*n.mac, ether_type(), packet);
    return;
  }
  // Unresolved (or stale): hold the packet and ask.
  if (n.held.size() < cfg_.arp_hold) n.held.push_back(std::move(packet));
  else ++stats_.dropped_unresolved;
  // A new neighbour, or a resolved one gone stale, is asked now; the
  // retries of one being resolved are tick()'s.
  if (n.tries == 0 || n.mac) {
    n.mac.reset();
    n.tries = 1;
    n.expires = now + cfg_.arp_retry;
    solicit(dst);
  }
}

// Room for one more neighbour within max_neighbours: an unresolved one
// goes first (what it held is dropped), else the one that went stale
// first, so that no number of addresses grows the table and the peers in
// use stay.
void Stack::make_neighbour_room() {
  if (neighbours_.size() < cfg_.max_neighbours || neighbours_.empty()) return;
  auto victim = neighbours_.begin();
  for (auto it = neighbours_.begin(); it != neighbours_.end(); ++it) {
    if (!it->second.mac) {
      victim = it;
      break;
    }
    if (it->second.expires < victim->second.expires) victim = it;
  }
  stats_.dropped_unresolved += victim->second.held.size();
  neighbours_.erase(victim);
}

void Stack::send_frame_to(const Mac& dst, std::uint16_t type, ByteSpan body) {
  Ethernet e;
  e.dst = dst;
  e.src = cfg_.mac;
  e.vlan = cfg_.vlan;
  e.type = type;
  frame_.resize(e.header_size() + body.size());
  encode_ethernet(e, frame_);
  std::copy(body.begin(), body.end(), frame_.begin() + static_cast<std::ptrdiff_t>(e.header_size()));
  if (frame_.size() < 60) frame_.resize(60, 0);  // Ethernet's minimum (without FCS)
  port_.send(frame_);
  ++stats_.frames_out;
}

// ---- timers -------------------------------------------------------------------------

void Stack::tick(Time now) {
  now_ = now;
  if (v6() && cfg_.mld_reports && now >= next_mld_) {
    send_mld_report();
    next_mld_ = now + (++mld_sent_ < 2 ? std::chrono::seconds(1) : std::chrono::seconds(30));
  }
  if (now < next_walk_) return;
  next_walk_ = now + cfg_.timer_granularity;
  for (auto& [key, e] : conns_)
    if (auto t = e->conn->next_timer(); t && *t <= now) e->conn->tick(now);
  for (auto it = neighbours_.begin(); it != neighbours_.end();) {
    Neighbour& n = it->second;
    if (n.mac && now >= n.expires + cfg_.arp_lifetime) {  // unused for a lifetime since it went stale
      it = neighbours_.erase(it);
      continue;
    }
    if (!n.mac && now >= n.expires) {
      if (n.tries >= cfg_.arp_tries) {
        // Nobody answers: what waited is dropped (TCP retransmits later).
        stats_.dropped_unresolved += n.held.size();
        it = neighbours_.erase(it);
        continue;
      }
      ++n.tries;
      n.expires = now + cfg_.arp_retry;
      solicit(addr_of(it->first));
    }
    ++it;
  }
  reap();
}


void Stack::forget(decltype(conns_)::iterator it) {
  if (it->second->half_open) --half_open_;
  if (it->second->deferred) std::erase(deferred_, it->second.get());
  ended_ += it->second->conn->stats();
  conns_.erase(it);
}

void Stack::reap() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    auto next = std::next(it);
    if (it->second->conn->state() == State::closed) forget(it);
    it = next;
  }
}

Conn::Stats Stack::conn_totals() const {
  Conn::Stats t = ended_;
  for (const auto& [key, e] : conns_) t += e->conn->stats();
  return t;
}

}  // namespace lnetr::tcp
