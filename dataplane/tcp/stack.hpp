// One worker's TCP/IP stack on one Ethernet port (issue 6), IPv4 or IPv6 as
// its address is: ARP or IPv6 neighbour discovery (answers, solicitations
// with retries, a neighbour table with expiry, packets held while their
// neighbour resolves), ICMP or ICMPv6 echo replies, and TCP: the connections of
// this worker by address and ports, listeners, RST for what matches
// nothing, and each connection's timers.  Frames come in through
// receive() and go out through Port::send(); time moves by tick().
//
// Pure over a caller's port and clock (no DPDK here): the DPDK port layer
// (port.hpp) and, in the dataplane, the socklnd binding
// (dataplane/sock_transport.hpp) sit on top; the unit tests join two
// stacks by a wire in memory.  One address on one subnet (LNet peers are on
// the NI's own network): no router, no link-local address, no duplicate
// address detection of its own.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "dataplane/tcp/conn.hpp"
#include "dataplane/tcp/wire.hpp"
#include "router/siphash.hpp"

namespace lnetr::tcp {

// Checksums a device computes or verifies (DPDK checksum offload).
struct Offloads {
  bool tx_ipv4 = false;  // fills the IPv4 header checksum of frames sent
  bool tx_tcp = false;   // fills the TCP checksum, from the pseudo-header sum in the field
  // TCP segmentation offload: the device cuts a chained frame given a
  // segment size into frames of at most this many bytes (Ethernet header
  // included), each with its own headers and checksums; 0: no TSO.
  std::uint16_t tso_frame = 0;
  std::uint16_t tso_segments = 0;  // chain segments such a frame may have
  // chain segments one cut segment's payload may span (0: any; Intel NICs
  // take 8 descriptors per segment, its header's included)
  std::uint16_t tso_segment_pieces = 0;
  // The device sums a chained frame right whatever its pieces' offsets (a
  // NIC's DMA, virtio); false: it sums each piece as if it began at an even
  // offset (net_tap's software checksum), so no piece may lie at an odd one.
  bool odd_pieces = false;
};

class Port {
 public:
  virtual ~Port() = default;
  virtual Offloads offloads() const { return {}; }
  // Send one Ethernet frame (valid until return).
  virtual void send(ByteSpan frame) = 0;
  // Room for a frame of up to `len` bytes, to be written in place and sent
  // by send_built() (a DPDK port hands out an mbuf's data); empty if there
  // is none.  Default: a scratch buffer passed to send().
  virtual MutableByteSpan alloc_frame(std::size_t len) {
    scratch_.resize(len);
    return scratch_;
  }
  // Send the first `len` bytes of what alloc_frame() returned: an IPv4
  // packet after `l2_len` bytes of Ethernet header whose checksums are
  // left to the device as offloads() says (l2_len 0: nothing is).
  // `tso_seg` > 0: a chained frame for the device to cut into segments of
  // that many payload bytes (Offloads::tso_frame).
  virtual void send_built(std::size_t len, std::size_t l2_len = 0, std::size_t tso_seg = 0) {
    (void)l2_len;
    (void)tso_seg;
    if (len > 0) send(ByteSpan(scratch_.data(), len));
  }
  // Chained frames (zero copy): the most segments a frame may have (1: no
  // chaining).  A frame from alloc_frame() may then be followed by
  // segments appended with append_segment() before send_built() (whose
  // `len` then counts the first segment only).
  virtual std::size_t max_segments() const { return 1; }
  // Append `data` to the frame being built: by reference when `dev` (the
  // memory's device reference, send_queue.hpp) is set and the device can
  // read that memory, else copied.  How it went; `none` if the port has no
  // buffer for it (the frame is then abandoned).
  enum class Appended : std::uint8_t { none, copied, referenced };
  virtual Appended append_segment(ByteSpan data, void* dev) {
    (void)data;
    (void)dev;
    return Appended::none;
  }

 private:
  std::vector<std::uint8_t> scratch_;
};

struct StackConfig {
  Mac mac{};
  IpAddr ip;  // IPv4 or IPv6: the stack speaks that family only
  std::uint32_t prefix_len = 24;
  std::optional<std::uint16_t> vlan;
  std::uint16_t mtu = 1500;
  std::uint8_t tos = 0;  // IP type of service of its TCP segments (the NI's `tos`)
  // IPv6: this stack sends the port's MLD reports (one stack per port does:
  // the stacks of a port's queues share its addresses).
  bool mld_reports = true;
  ConnConfig conn;  // mss is derived from mtu
  Time arp_retry = std::chrono::seconds(1);
  int arp_tries = 3;
  Time arp_lifetime = std::chrono::seconds(60);  // a resolved neighbour, before it is asked again
  std::size_t arp_hold = 64;                     // frames held per unresolved neighbour
  std::size_t max_neighbours = 4096;             // beyond, the stalest (or an unresolved) one is forgotten
  std::size_t max_connections = 4096;            // beyond this a SYN is dropped (a flood holds no more)
  // Connections in SYN-RECEIVED at most (Linux's SYN queue); beyond, a SYN
  // to a listener is answered with a SYN cookie and no state is kept, so a
  // flood of spoofed SYNs holds no connection slot.
  std::size_t max_half_open = 256;
  // tick() looks at the connections' timers and the neighbours at most
  // this often (a walk of every connection; called every loop turn it
  // cost a busy worker a twentieth of its time).  Linux's timers have a
  // jiffy's granularity, 1 to 4 ms.  0: every tick().
  Time timer_granularity = std::chrono::milliseconds(1);
};

// Counters, one writer (the worker).
struct StackStats {
  std::uint64_t frames_in = 0, frames_out = 0;
  std::uint64_t arp_requests_in = 0, arp_replies_out = 0, arp_requests_out = 0;
  std::uint64_t nd_solicits_in = 0, nd_adverts_out = 0, nd_solicits_out = 0;  // IPv6 neighbour discovery
  std::uint64_t mld_reports_out = 0;  // MLDv2 reports of our solicited-node groups (IPv6)
  std::uint64_t icmp_echo_replies = 0;  // ICMP or ICMPv6
  std::uint64_t resets_out = 0;
  std::uint64_t dropped_malformed = 0;  // refused by a decoder (wire.hpp)
  std::uint64_t dropped_not_ours = 0;   // another host's address, another protocol
  std::uint64_t dropped_unresolved = 0;  // held for a neighbour that never answered
  std::uint64_t dropped_overload = 0;    // SYNs beyond max_connections
  std::uint64_t syncookies_sent = 0;      // SYN-ACKs carrying a cookie (max_half_open reached)
  std::uint64_t syncookies_accepted = 0;  // connections made from a cookie the peer returned
  std::uint64_t syncookies_refused = 0;   // ACKs to a listener with a wrong or expired cookie (reset)
  std::uint64_t bytes_copied = 0;        // TCP payload bytes copied into frames sent
  std::uint64_t bytes_referenced = 0;    // ... and chained by reference instead (zero copy)
  std::uint64_t csum_offloaded = 0;      // segments sent with their checksums left to the device
  std::uint64_t csum_odd_chains = 0;     // chained segments summed here all the same (a piece at an odd offset)
  std::uint64_t csum_verified = 0;       // segments received whose checksum the device had verified
  std::uint64_t tso_frames = 0;          // frames sent for the device to cut into segments (TSO)
  std::uint64_t tso_segments = 0;        // ... the segments they were cut into
  std::uint64_t tso_cut_here = 0;        // segments of a transmit the device could not take whole, cut here
  std::uint64_t chains_in = 0;           // frames received in a chain of buffers, payload left in place
  std::uint64_t chain_pieces = 0;        // ... the buffers they came in
  std::uint64_t chains_copied = 0;       // chained frames copied into one buffer (receive_chain)
  std::uint64_t chain_bytes_copied = 0;  // ... their bytes
  std::uint64_t large_segments_in = 0;   // TCP segments received with more than one MSS of payload (LRO units)
};

class Stack {
 public:
  Stack(const StackConfig& cfg, Port& port);
  ~Stack();
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;

  // Who owns a new connection: an accepted one (on a listened port) or one
  // this side opened.  The owner outlives the connection (on_end).
  using Acceptor = std::function<Upper*(const Endpoints&)>;
  // Where new connections' out-of-order bytes may keep their received
  // frames (ConnConfig::frames); null: copied.
  void set_frame_refs(lnd::FrameRefs* frames) noexcept { cfg_.conn.frames = frames; }
  // The type of service of segments sent from now on (an NI added on the port).
  void set_tos(std::uint8_t tos) noexcept { cfg_.tos = tos; }
  void listen(std::uint16_t port, Acceptor accept);
  void unlisten(std::uint16_t port) { listeners_.erase(port); }
  // Open a connection from `local_port` (0: a free one) to ip:port.
  Conn* connect(const IpAddr& ip, std::uint16_t port, std::uint16_t local_port, Upper& owner, Time now);

  // `verified`: the device checked the frame's IPv4 and TCP checksums and
  // found them good (checksum offload); they are not computed again.
  // `dev`: the frame's device reference (a DPDK port's received mbuf), for
  // connections whose owner keeps payload where it arrived (TcpHeader::frame).
  void receive(ByteSpan frame, Time now, bool verified = false, void* dev = nullptr);
  // A frame in a chain of buffers (a device's large-receive unit, a jumbo
  // frame over several buffers): its Ethernet, IPv4 and TCP headers in the
  // first piece and its payload in all of them, each left where it lies
  // with its own device reference.  A chain that is not so (headers split
  // across buffers, not TCP to us, checksums not verified by the device)
  // is copied into one buffer and received as one (chains_copied).
  void receive_chain(const FramePiece* pieces, std::size_t count, Time now, bool verified);
  // A burst of received frames (a port queue's poll): between the two,
  // what each frame lets a connection send waits for end_burst(), so that
  // the burst's ACKs release one transmit per connection and its data
  // segments draw one ACK (the effect of a receiver's GRO, as Linux's
  // stretch ACKs, without joining the segments).
  void begin_burst() noexcept;
  void end_burst(Time now);
  void tick(Time now);

  const StackStats& stats() const noexcept { return stats_; }
  // Every connection's counters summed, the ended ones included.
  Conn::Stats conn_totals() const;
  std::size_t connections() const noexcept { return conns_.size(); }
  std::size_t half_open() const noexcept { return half_open_; }
  // The connection with that peer and local port, if any.
  Conn* connection(const IpAddr& remote_ip, std::uint16_t remote_port, std::uint16_t local_port) const;
  std::optional<Mac> neighbour(const IpAddr& ip) const;

 private:
  // An address as two words, for the tables looked up per segment (an
  // IpAddr compares byte by byte: twice the time per lookup, measured);
  // the stack's family is implied.
  struct AddrKey {
    std::uint64_t hi = 0, lo = 0;
    friend auto operator<=>(const AddrKey&, const AddrKey&) = default;
  };
  static AddrKey key_of(const IpAddr& a) noexcept;
  IpAddr addr_of(const AddrKey& k) const noexcept;
  using Key = std::tuple<AddrKey, std::uint16_t, std::uint16_t>;  // remote ip, remote port, local port
  struct Entry;  // a connection and how it sends

  void on_arp(const Arp& a, Time now);
  void on_ipv4(const Ipv4& ip, Time now, bool verified, void* dev);
  void on_ipv6(const Ipv6& ip, Time now, bool verified, void* dev);
  void on_nd(const Ipv6& ip, const Neighbour6& n, Time now);
  // A TCP segment for us (its checksum checked), from `src`.
  void on_segment(const IpAddr& src, ByteSpan segment, Time now, bool verified, void* dev);
  void on_tcp(const IpAddr& src, const TcpHeader& seg, Time now);
  void send_rst_for(const IpAddr& src, const TcpHeader& seg);
  void answer_tcp(const Endpoints& ep, const TcpHeader& h);
  void make_neighbour_room();
  // SYN cookies: the SYN-ACK that keeps no state, and the SYN an ACK
  // returning it stands for (nothing if the cookie is not ours or too old).
  void send_cookie(const Endpoints& ep, const TcpHeader& syn, Time now);
  std::optional<TcpHeader> cookie_syn(const Endpoints& ep, const TcpHeader& ack, Time now) const;
  std::uint32_t cookie_hash(const Endpoints& ep, std::uint32_t peer_isn, std::uint64_t period,
                            std::uint32_t mss_index) const noexcept;
  std::uint32_t make_iss(const Endpoints& ep, Time now) const noexcept;
  Entry& add(const Endpoints& ep, Upper& owner);
  // Send an IP packet (header built here) carrying `l4` to `dst`.
  void send_ip(const IpAddr& dst, std::uint8_t proto, ByteSpan l4, Time now);
  // The IP header of this stack's family, written at `out` (kIpv4MinHeader or
  // kIpv6Header bytes); `count` packets' worth of IPv4 ids are used.
  void encode_ip(const IpAddr& dst, std::uint8_t proto, std::size_t l4_len, MutableByteSpan out,
                 std::size_t count = 1);
  bool v6() const noexcept { return !cfg_.ip.is_v4(); }
  std::size_t ip_header() const noexcept { return v6() ? kIpv6Header : kIpv4MinHeader; }
  std::uint16_t ether_type() const noexcept { return v6() ? kEtherIpv6 : kEtherIpv4; }
  // `seg` > 0: the payload may hold several segments of at most that many
  // bytes (ConnConfig::tso_bytes), sent whole for the device to cut where
  // it can (TSO), else cut here.
  void transmit_tcp(const Endpoints& ep, const TcpHeader& h, const Payload& payload, Time now,
                    std::size_t seg = 0);
  // The first bytes of `payload` that may go as one frame for the device
  // to cut into `seg`-byte segments, a multiple of `seg` (all of it if it
  // ends there); 0 if not even two segments may.
  std::size_t tso_extent(const Payload& payload, std::size_t seg, std::size_t header) const;
  // transmit_tcp's frame to a resolved neighbour: headers built in place,
  // the payload copied after them or (chain) referenced.
  void transmit_built(const Mac& dst, const Endpoints& ep, const TcpHeader& h, const Payload& payload, bool chain,
                      std::size_t tso_seg = 0);
  ConnConfig conn_config() const;
  void send_frame_to(const Mac& dst, std::uint16_t type, ByteSpan body);
  // Ask for a neighbour's MAC: ARP, or a neighbour solicitation.
  void solicit(const IpAddr& ip);
  // `evict`: make room if the table is full (else a new neighbour is not
  // learnt): what a peer's unasked message teaches may not push out
  // neighbours in use.
  void learn(const IpAddr& ip, const Mac& mac, Time now, bool evict = true);
  // Send an echo reply (or another answer that keeps no state) to `dst`: by
  // its neighbour entry if resolved, else straight back to the frame's sender.
  void answer_ip(const IpAddr& dst, std::uint8_t proto, ByteSpan l4, Time now);
  // IPv6: our addresses (the configured one and the link-local one MLD
  // reports come from), and the groups we listen to.
  bool ours(const IpAddr& a) const noexcept { return a == cfg_.ip || (v6() && a == link_local_); }
  void send_mld_report();
  bool on_subnet(const IpAddr& ip) const noexcept;
  void reap();
  void forget(std::map<Key, std::unique_ptr<Entry>>::iterator it);

  StackConfig cfg_;
  Port& port_;
  StackStats stats_;
  Conn::Stats ended_{};  // counters of the connections reaped
  Time now_{0};  // the time of the event being handled (for transmissions from Conn)
  Time next_walk_{0};  // tick() walks the timers again from then
  SipKey secret_ = random_sip_key();  // keys initial sequence numbers and SYN cookies
  std::size_t half_open_ = 0;         // connections in SYN-RECEIVED (accepted, not yet acknowledged)
  std::optional<Time> last_cookie_;   // when a SYN was last answered with a cookie
  std::optional<Mac> frame_src_;      // the sender of the frame being handled
  std::map<std::uint16_t, Acceptor> listeners_;
  std::map<Key, std::unique_ptr<Entry>> conns_;
  struct Neighbour {
    std::optional<Mac> mac;
    Time expires{0};      // resolved: until then; unresolved: next request
    int tries = 0;
    std::vector<std::vector<std::uint8_t>> held;  // IP packets waiting for the MAC
  };
  std::map<AddrKey, Neighbour> neighbours_;
  // IPv6: the link-local address, and the Ethernet groups of both
  // addresses' solicited-node groups and of all nodes.
  IpAddr link_local_;
  std::array<Mac, 3> groups_{};
  Time next_mld_{0};  // the next MLD report is due then
  int mld_sent_ = 0;
  std::uint16_t ip_id_ = 1;
  std::uint16_t next_port_ = 1023;  // socklnd connects from privileged ports, downwards
  std::vector<std::uint8_t> frame_;  // scratch for building frames
  std::vector<std::uint8_t> linear_;  // a chained frame copied whole (receive_chain)
  std::vector<FramePiece> chain_;      // the later pieces of the chained frame being received
  bool in_burst_ = false;
  std::vector<Entry*> deferred_;       // connections with sending left for end_burst()
};

}  // namespace lnetr::tcp
