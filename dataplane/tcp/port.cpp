// DPDK ports (port.hpp): opening a device for the stack, and each queue's
// bursts, chained frames, kept frames and impairment.
#include "dataplane/tcp/port.hpp"

#include "dataplane/tcp/buffer_ref.hpp"
#include "dataplane/tcp/log.hpp"
#include "router/forward.hpp"

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_ether.h>
#include <rte_ring.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace lnetr::tcp {

namespace {

constexpr std::uint16_t kRxDesc = 1024, kTxDesc = 1024;
// Frames the device refuses wait, in order, for the next flush(), up to
// this many; beyond it new frames are dropped (TCP retransmits them), as a
// full qdisc would.  A peer that drains its ring slowly (a memif peer
// process, a busy NIC) then slows the connections down instead of making
// every burst a loss and every loss a retransmission timeout.
constexpr std::size_t kTxBacklog = 2048;
constexpr int kTxRetries = 4;  // bursts tried per flush()
// A backlog the device has taken nothing from for this long is dropped (a
// peer gone for good: a memif peer process that died, a link down), as
// Linux's transmit watchdog resets a stuck device: the frames it held,
// and the router buffers they were chained from, are let go, and TCP
// retransmits or gives up on its own.
constexpr auto kTxStall = std::chrono::seconds(5);

}  // namespace

std::string device_name(const std::string& device) {
  std::string name = device.substr(0, device.find(','));
  // A PCI address without its domain ("3b:00.0"): DPDK names it "0000:3b:00.0".
  if (name.rfind("net_", 0) != 0 && std::count(name.begin(), name.end(), ':') == 1 &&
      name.find('.') != std::string::npos)
    name = "0000:" + name;
  return name;
}

bool is_pci_address(const std::string& d) {
  const std::string name = d.substr(0, d.find(','));
  return !name.empty() && name.find(':') != std::string::npos && name.find('.') != std::string::npos &&
         name.rfind("net_", 0) != 0;
}

namespace {

// net_memif's packet buffer size: its bsize argument, else its default.
std::uint32_t memif_buffer_size(const std::string& device) {
  for (std::size_t at = device.find(','); at != std::string::npos; at = device.find(',', at + 1)) {
    if (device.compare(at + 1, 6, "bsize=") != 0) continue;
    const std::string v = device.substr(at + 7, device.find(',', at + 1) - at - 7);
    char* end = nullptr;
    const unsigned long n = std::strtoul(v.c_str(), &end, 0);
    if (end && *end == '\0' && n > 0 && n <= UINT32_MAX) return static_cast<std::uint32_t>(n);
  }
  return 2048;
}

// A port's pool of mbufs with `priv` bytes of private area and `room`
// bytes of buffer.  `packed`: its objects laid end to end in one piece of
// memory, none skipped to keep it within a page.  net_af_xdp needs that:
// it registers the pool's memory as its UMEM, sized as if the objects were
// packed from the first one, and an object beyond that size is a buffer
// the kernel refuses (receiving stops once the pool hands those out; with
// 4 KiB pages and 2.4 KiB objects, that is two objects in five).  Its
// mbufs then have no IOVA of their own, which the device does not use.
rte_mempool* create_pool(const std::string& name, std::uint32_t n, std::uint16_t priv, std::uint16_t room,
                         bool packed) {
  const int socket = static_cast<int>(rte_socket_id());
  if (!packed) return rte_pktmbuf_pool_create(name.c_str(), n, 256, priv, room, socket);
  rte_mempool* mp = rte_mempool_create_empty(name.c_str(), n, static_cast<unsigned>(sizeof(rte_mbuf) + priv + room), 256,
                                             sizeof(rte_pktmbuf_pool_private), socket,
                                             RTE_MEMPOOL_F_NO_IOVA_CONTIG);
  if (!mp) return nullptr;
  rte_pktmbuf_pool_private info{};
  info.mbuf_data_room_size = room;
  info.mbuf_priv_size = priv;
  if (rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), nullptr) != 0) {
    rte_mempool_free(mp);
    return nullptr;
  }
  rte_pktmbuf_pool_init(mp, &info);
  if (rte_mempool_populate_default(mp) < 0) {
    rte_mempool_free(mp);
    return nullptr;
  }
  rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
  return mp;
}

}  // namespace

std::unique_ptr<EthPort> EthPort::open(const PortConfig& cfg, std::uint32_t mbufs, std::uint32_t kept,
                                       std::string& err) {
  const std::string name = device_name(cfg.device);
  auto fail = [&](const std::string& what, int rc) {
    err = "port " + cfg.name + " (" + cfg.device + "): " + what + (rc ? std::string(": ") + rte_strerror(-rc) : "");
    return nullptr;
  };
  std::uint16_t pid = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &pid) != 0)
    return fail("no such DPDK device (was it probed? a virtual device needs its driver, a PCI one a DPDK-bound NIC)",
                0);
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(pid, &info); rc != 0) return fail("cannot read the device's capabilities", rc);
  if (cfg.mtu > info.max_mtu)
    return fail("MTU " + std::to_string(cfg.mtu) + " is above the device's maximum " + std::to_string(info.max_mtu), 0);
  // The longest frame the MTU makes (Ethernet header, a VLAN tag, the FCS,
  // as ethdev counts them) against the longest the device says it takes.
  // net_memif says 1,518 whatever its buffers (bsize, 2,048 by default):
  // it is configured at what it says, and sends and receives frames of the
  // MTU asked as long as each fits one of its buffers.  A longer frame
  // goes in a chain of buffers, which DPDK 22.11's memif does not receive
  // intact (measured: damaged frames and a flood of bogus ones), so that
  // is refused.
  const bool memif = name.rfind("net_memif", 0) == 0;
  // (As ethdev counts a frame: no VLAN tag, which devices take out or add.)
  const std::uint32_t frame_len = cfg.mtu + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
  if (memif) {
    const std::uint32_t bsize = memif_buffer_size(cfg.device);
    const std::uint32_t in_buffer = cfg.mtu + RTE_ETHER_HDR_LEN + (cfg.vlan ? 4u : 0u);
    if (in_buffer > bsize)
      return fail("MTU " + std::to_string(cfg.mtu) + " makes frames of " + std::to_string(in_buffer) +
                      " bytes, more than one of net_memif's buffers holds (bsize " + std::to_string(bsize) +
                      "); give the device bsize=16384 (the other end too): frames chained over several buffers "
                      "are not received intact",
                  0);
  }
  std::uint16_t device_mtu = cfg.mtu;
  if (info.max_rx_pktlen && frame_len > info.max_rx_pktlen) {
    if (!memif)
      return fail("MTU " + std::to_string(cfg.mtu) + " makes frames of " + std::to_string(frame_len) +
                      " bytes; the device takes at most " + std::to_string(info.max_rx_pktlen),
                  0);
    device_mtu = static_cast<std::uint16_t>(info.max_rx_pktlen - (frame_len - cfg.mtu));
    log_info("port %s: net_memif reports frames of at most %u bytes but its buffers hold %u: configured at "
             "MTU %u, sending and receiving frames of MTU %u",
             cfg.name.c_str(), info.max_rx_pktlen, memif_buffer_size(cfg.device), device_mtu, cfg.mtu);
  }
  if (cfg.queues > info.max_rx_queues || cfg.queues > info.max_tx_queues)
    return fail(std::to_string(cfg.queues) + " queues asked, the device has " +
                    std::to_string(std::min(info.max_rx_queues, info.max_tx_queues)),
                0);

  // Room for a whole frame in one mbuf (headroom, Ethernet, VLAN tag, MTU),
  // and at least DPDK's default (some drivers read into fixed 2 KiB frames).
  // The stack reserves room for the longest TCP header before it knows the
  // options: Ethernet + VLAN, IPv4, 60 bytes of TCP header, the MSS.
  const std::uint32_t room =
      std::max<std::uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE, RTE_PKTMBUF_HEADROOM + 18 + 20 + 60 + cfg.mtu);
  const std::string pool_name = "lnetr_port_" + std::to_string(pid);  // (pool names are short)
  // Each mbuf's private area holds its BufferRef, for a frame kept by reference.
  const auto priv = static_cast<std::uint16_t>(RTE_ALIGN(sizeof(BufferRef), RTE_MBUF_PRIV_ALIGN));
  // memif in its own zero-copy mode sends only mbufs from its shared
  // regions (nothing can be chained from router buffers there) and refills
  // its rings with the mbufs it received (none is kept).
  const bool memif_zc = memif && cfg.device.find("zero-copy=yes") != std::string::npos;
  if (!cfg.zero_copy || memif_zc) kept = 0;
  const std::uint32_t per_queue = mbufs + kept + (cfg.queues > 1 ? kSteerRing : 0);
  rte_mempool* pool = create_pool(pool_name, per_queue * cfg.queues, priv, static_cast<std::uint16_t>(room),
                                  name.rfind("net_af_xdp", 0) == 0);
  if (!pool)
    return fail("cannot create its mbuf pool (" + std::to_string(per_queue * cfg.queues) + " x " +
                    std::to_string(room) + " bytes)",
                -rte_errno);
  std::unique_ptr<EthPort> p(new EthPort(cfg, pid, pool));
  p->frames_budget_ = kept;
  p->budgets_ = std::make_unique<FrameBudget[]>(cfg.queues);
  for (std::uint16_t q = 0; q < cfg.queues; ++q) p->budgets_[q].limit = kept;
  p->needs_iova_ = name.rfind("net_", 0) != 0;  // not a virtual device

  rte_eth_conf conf{};
  conf.rxmode.mtu = device_mtu;
  // Checksums: the device's, where it has them (software otherwise).  The
  // stack checks a received IPv4 header's checksum itself (20 bytes): what
  // counts is the TCP checksum (virtio devices verify TCP's alone).
  constexpr std::uint64_t kTxCsum = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
  constexpr std::uint64_t kRxCsum = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM;
  conf.txmode.offloads = info.tx_offload_capa & kTxCsum;
  if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_TCP_CKSUM) conf.rxmode.offloads = info.rx_offload_capa & kRxCsum;
  p->tx_offloads_.tx_ipv4 = (conf.txmode.offloads & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) != 0;
  p->tx_offloads_.tx_tcp = (conf.txmode.offloads & RTE_ETH_TX_OFFLOAD_TCP_CKSUM) != 0;
  p->rx_checksum_ = conf.rxmode.offloads != 0;
  // net_tap sums chained frames in software, each piece as if it began at
  // an even offset; devices that checksum in hardware or whose far side
  // sums the whole frame (virtio) take pieces at any offset.
  p->tx_offloads_.odd_pieces = name.rfind("net_tap", 0) != 0;
  // Large receive offload: where the device joins a connection's in-order
  // segments into one frame of up to 64 KiB (a NIC's LRO, a virtio device's
  // guest TSO), the stack takes each such unit once, its payload left in
  // the chain of buffers it arrived in (Stack::receive_chain).  It needs the
  // device's TCP checksum: a unit's checksum field is not the unit's.
  if (p->rx_checksum_ && (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_TCP_LRO) && cfg.lro.value_or(true)) {
    conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_TCP_LRO;
    // (The most the device says it joins; one that says nothing, virtio,
    // must be given 0, which ethdev takes as its frame size.)
    conf.rxmode.max_lro_pkt_size = info.max_lro_pkt_size;
    p->lro_ = true;
  }
  if (cfg.zero_copy && !memif_zc && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS)) {
    // Chained frames: at most what the device takes per MTU-sized frame
    // (0: it does not say), and a pool of data-less mbufs to attach to
    // router buffers (three per frame the port may hold).
    std::uint16_t most = std::min(info.tx_desc_lim.nb_seg_max, info.tx_desc_lim.nb_mtu_seg_max);
    if (most == 0) most = std::max(info.tx_desc_lim.nb_seg_max, info.tx_desc_lim.nb_mtu_seg_max);
    if (most == 0) most = 16;
    if (most > 1) {
      const std::string attach_name = "lnetr_attach_" + std::to_string(pid);
      p->attach_pool_ = rte_pktmbuf_pool_create(attach_name.c_str(), 3 * mbufs * cfg.queues, 256, 0, 0,
                                                static_cast<int>(rte_socket_id()));
      if (!p->attach_pool_) return fail("cannot create its pool of attachable mbufs", -rte_errno);
      conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
      p->max_segments_ = most;
    }
  }
  // Segmentation offload: on chained frames whose checksums the device
  // fills in.  net_tap segments in software (rte_gso), at a higher cost
  // than the stack's own cutting: only when asked for.  It cuts frames of
  // at most the MTU counting the Ethernet header; a NIC cuts IP packets of
  // the MTU.  A device that gives no limit on a frame's segments gets
  // frames of up to 64.
  // TSO needs the device to fill in each cut segment's IPv4 checksum,
  // except on virtio, whose far side takes the unit whole or rebuilds the
  // headers (the stack fills in the unit's IPv4 checksum there).
  // net_vhost does not list TSO, but the vhost library hands a frame
  // marked for segmentation to the virtio side whole, as a unit for its
  // large receive (which that side takes only if it negotiated it,
  // VIRTIO_NET_F_GUEST_TSO4): only when asked.
  constexpr std::uint64_t kTso = RTE_ETH_TX_OFFLOAD_TCP_TSO;
  const bool tap = name.rfind("net_tap", 0) == 0;
  const bool vhost = name.rfind("net_vhost", 0) == 0;
  const bool tso_capable = (info.tx_offload_capa & kTso) || (vhost && cfg.tso.value_or(false));
  const std::string driver = info.driver_name ? info.driver_name : "";
  const bool virtio = driver.rfind("net_virtio", 0) == 0 || vhost;
  // net_tap's software segmentation (DPDK 22.11's GSO) cuts TCP over IPv4
  // only: an IPv6 frame would leave whole.
  const bool v6 = !cfg.ip.is_v4();
  if (tap && v6 && cfg.tso.value_or(false))
    log_info("port %s: tso off: net_tap segments TCP over IPv4 only", cfg.name.c_str());
  if (cfg.tso.value_or(!tap) && !(tap && v6) && p->max_segments_ > 1 && p->tx_offloads_.tx_tcp &&
      (p->tx_offloads_.tx_ipv4 || virtio) && tso_capable) {
    if (info.tx_offload_capa & kTso) conf.txmode.offloads |= kTso;
    p->tx_offloads_.tso_frame = static_cast<std::uint16_t>(cfg.mtu + (tap ? 0 : 14 + (cfg.vlan ? 4 : 0)));
    p->tx_offloads_.tso_segments = info.tx_desc_lim.nb_seg_max ? std::min<std::uint16_t>(info.tx_desc_lim.nb_seg_max, 255) : 64;
    const std::uint16_t per_segment = info.tx_desc_lim.nb_mtu_seg_max;  // descriptors, the header's among them
    p->tx_offloads_.tso_segment_pieces = per_segment > 1 ? static_cast<std::uint16_t>(per_segment - 1) : 0;
  }
  // Several queues: RSS on IP addresses with lnetr's key, where the
  // device has it (its redirection table is filled once started).  Two
  // IPv4 addresses read 12 bytes of key, two IPv6 ones 36: a device with a
  // longer key (52 bytes on some NICs) gets lnetr's, zero-padded; 0 means
  // it does not say.
  const std::size_t key_len = info.hash_key_size ? info.hash_key_size : kRssKey.size();
  const std::uint64_t rss_hf = (v6 ? RTE_ETH_RSS_IPV6 : RTE_ETH_RSS_IPV4) & info.flow_type_rss_offloads;
  const bool rss = cfg.queues > 1 && rss_hf != 0 && key_len >= (v6 ? 36u : 12u) && key_len <= UINT8_MAX &&
                   info.reta_size >= kRssTableSpan && info.reta_size % kRssTableSpan == 0;
  if (rss) {
    // (The device may read the key as late as its start: the port keeps it.)
    std::vector<std::uint8_t>& rss_key = p->rss_key_;
    rss_key.assign(key_len, 0);
    std::copy_n(kRssKey.begin(), std::min(key_len, kRssKey.size()), rss_key.begin());
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_key = rss_key.data();
    conf.rx_adv_conf.rss_conf.rss_key_len = static_cast<std::uint8_t>(rss_key.size());
    conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
  } else if (cfg.queues > 1) {
    log_info("port %s: the device has no RSS on %s addresses lnetr can program: its workers pass each other "
             "the frames that arrive on the wrong queue", cfg.name.c_str(), v6 ? "IPv6" : "IPv4");
  }
  if (cfg.queues > 1) {
    for (std::uint16_t q = 0; q < cfg.queues; ++q) {
      const std::string ring_name = "lnetr_steer_" + std::to_string(pid) + "_" + std::to_string(q);
      rte_ring* r = rte_ring_create(ring_name.c_str(), kSteerRing, static_cast<int>(rte_socket_id()), RING_F_SC_DEQ);
      if (!r) return fail("cannot create the steering ring of queue " + std::to_string(q), -rte_errno);
      p->steer_.push_back(r);
    }
  }
  if (int rc = rte_eth_dev_configure(pid, cfg.queues, cfg.queues, &conf); rc != 0) return fail("cannot configure it", rc);
  std::uint16_t nrx = kRxDesc, ntx = kTxDesc;
  (void)rte_eth_dev_adjust_nb_rx_tx_desc(pid, &nrx, &ntx);
  const int socket = rte_eth_dev_socket_id(pid);
  const unsigned sock_id = socket < 0 ? rte_socket_id() : static_cast<unsigned>(socket);
  for (std::uint16_t q = 0; q < cfg.queues; ++q) {
    if (int rc = rte_eth_rx_queue_setup(pid, q, nrx, sock_id, nullptr, pool); rc != 0)
      return fail("cannot set up RX queue " + std::to_string(q), rc);
    if (int rc = rte_eth_tx_queue_setup(pid, q, ntx, sock_id, nullptr); rc != 0)
      return fail("cannot set up TX queue " + std::to_string(q), rc);
  }
  if (int rc = rte_eth_dev_start(pid); rc != 0) return fail("cannot start it", rc);
  p->started_ = true;
  if (rss) {  // entry k: queue (k % span) % queues, as steer_queue() computes
    std::vector<rte_eth_rss_reta_entry64> reta(info.reta_size / RTE_ETH_RETA_GROUP_SIZE);
    for (std::uint32_t k = 0; k < info.reta_size; ++k) {
      auto& group = reta[k / RTE_ETH_RETA_GROUP_SIZE];
      group.mask |= std::uint64_t{1} << (k % RTE_ETH_RETA_GROUP_SIZE);
      group.reta[k % RTE_ETH_RETA_GROUP_SIZE] = static_cast<std::uint16_t>(rss_queue(k, cfg.queues));
    }
    p->rss_steers_ = rte_eth_dev_rss_reta_update(pid, reta.data(), info.reta_size) == 0;
  }
  rte_ether_addr mac{};
  if (int rc = rte_eth_macaddr_get(pid, &mac); rc != 0) return fail("cannot read its MAC address", rc);
  std::copy(std::begin(mac.addr_bytes), std::end(mac.addr_bytes), p->mac_.begin());
  if (v6) {
    // Neighbour solicitations come to the solicited-node groups of the
    // address and of the link-local one, a peer's new MAC to all nodes:
    // the device lets those groups' frames in (a filter, else all
    // multicast; virtual devices over the kernel take every frame anyway).
    const Mac groups[3] = {multicast_mac(solicited_node(cfg.ip)), multicast_mac(solicited_node(link_local(p->mac_))),
                           multicast_mac(kAllNodes)};
    rte_ether_addr mc[3]{};
    for (int i = 0; i < 3; ++i) std::copy(groups[i].begin(), groups[i].end(), std::begin(mc[i].addr_bytes));
    if (rte_eth_dev_set_mc_addr_list(pid, mc, 3) != 0 && rte_eth_allmulticast_enable(pid) != 0)
      log_info("port %s: the device takes no multicast filter: IPv6 peers find it only if it sees their "
               "neighbour solicitations anyway", cfg.name.c_str());
  }
  const Offloads& o = p->tx_offloads_;
  log_info("port %s: checksums by the device: IPv4 %s, TCP %s on send, %s on receive; chained frames of up to %u "
           "segments; TSO %s (frames of %u bytes, %u segments at most); LRO %s",
           cfg.name.c_str(), o.tx_ipv4 ? "yes" : "no", o.tx_tcp ? "yes" : "no", p->rx_checksum_ ? "yes" : "no",
           p->max_segments_, o.tso_frame ? "on" : "off", o.tso_frame, o.tso_segments, p->lro_ ? "on" : "off");
  return p;
}

void EthPort::stop() noexcept {
  if (started_) (void)rte_eth_dev_stop(port_id_);
  started_ = false;
}

EthPort::~EthPort() {
  stop();
  (void)rte_eth_dev_close(port_id_);
  for (rte_ring* r : steer_) {
    void* m = nullptr;
    while (rte_ring_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
    rte_ring_free(r);
  }
  rte_mempool_free(pool_);
  if (attach_pool_) rte_mempool_free(attach_pool_);
}

int EthPort::owner_of(const rte_mbuf* m) const noexcept {
  const auto from = sender_address(ByteSpan(rte_pktmbuf_mtod(m, const std::uint8_t*), rte_pktmbuf_data_len(m)));
  return from && from->family == cfg_.ip.family ? static_cast<int>(steer_queue(*from, cfg_.ip, cfg_.queues)) : -1;
}

bool EthPort::link_up() const noexcept {
  rte_eth_link link{};
  return rte_eth_link_get_nowait(port_id_, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
}

// ---- PortQueue ----------------------------------------------------------------------

PortQueue::PortQueue(EthPort& port, std::uint16_t queue)
    : port_(port), queue_(queue), budget_(port.budget(queue)), rng_(port.config().impair.seed + queue) {
  tx_.reserve(kTxBacklog);
  tx_len_.reserve(kTxBacklog);
}

PortQueue::~PortQueue() {
  // (Not sent: the device is stopped by now; see EthPort::stop.)
  rte_pktmbuf_free_bulk(tx_.data(), static_cast<unsigned>(tx_.size()));
  if (held_) rte_pktmbuf_free(held_);
  if (building_) rte_pktmbuf_free(building_);
  for (auto& d : delayed_) rte_pktmbuf_free(d.second);
}

void PortQueue::deliver(rte_mbuf* m, Stack& stack, Time now) {
  // A driver that took the 802.1Q tag out of the frame (af_packet does,
  // from the kernel's metadata): put it back, the stack reads it there.
  if ((m->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED) && rte_vlan_insert(&m) != 0) {
    rte_pktmbuf_free(m);
    return;
  }
  // The TCP checksum verified by the device, or the data vouched for where
  // the field is not final (L4_CKSUM_NONE: a virtio peer's offloaded sum, a
  // large-receive unit): the stack need not sum the frame.  (The IPv4
  // header's the stack checks itself.)
  const std::uint64_t l4 = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;
  const bool verified =
      port_.rx_checksum() && (l4 == RTE_MBUF_F_RX_L4_CKSUM_GOOD || l4 == RTE_MBUF_F_RX_L4_CKSUM_NONE);
  if (m->ol_flags & RTE_MBUF_F_RX_LRO) ++stats_.rx_lro;
  if (m->nb_segs == 1) {
    const ByteSpan frame(rte_pktmbuf_mtod(m, const std::uint8_t*), rte_pktmbuf_data_len(m));
    if (port_.frames_budget() == 0) {
      stack.receive(frame, now, verified);
    } else {  // its payload may be kept (retain()): the last reference frees it
      auto* ref = static_cast<BufferRef*>(rte_mbuf_to_priv(m));
      ref->reset_frame(m, &budget_);
      stack.receive(frame, now, verified, ref->handle());
      ref->release_frame();
      return;
    }
  } else if (port_.frames_budget() > 0) {
    // A chained frame (a large-receive unit, jumbo on some devices): each
    // buffer taken out of the chain and handed over where it lies, with a
    // reference of its own, so that each is freed when its last user lets go.
    chain_.clear();
    for (rte_mbuf* s = m; s != nullptr;) {
      rte_mbuf* next = s->next;
      s->next = nullptr;
      s->nb_segs = 1;
      s->pkt_len = s->data_len;
      auto* ref = static_cast<BufferRef*>(rte_mbuf_to_priv(s));
      ref->reset_frame(s, &budget_);
      chain_.push_back(FramePiece{ByteSpan(rte_pktmbuf_mtod(s, const std::uint8_t*), rte_pktmbuf_data_len(s)),
                                  ref->handle()});
      s = next;
    }
    stack.receive_chain(chain_.data(), chain_.size(), now, verified);
    for (const FramePiece& piece : chain_) BufferRef::of(piece.dev)->release_frame();
    return;
  } else {  // a chained frame, with no frame kept: the stack wants it whole
    ++stats_.rx_multiseg;
    stats_.bytes_copied += rte_pktmbuf_pkt_len(m);
    linear_.resize(rte_pktmbuf_pkt_len(m));
    const void* p = rte_pktmbuf_read(m, 0, static_cast<std::uint32_t>(linear_.size()), linear_.data());
    if (p) stack.receive(ByteSpan(static_cast<const std::uint8_t*>(p), linear_.size()), now, verified);
  }
  rte_pktmbuf_free(m);
}

bool PortQueue::retain(void* frame) noexcept {
  BufferRef* ref = BufferRef::of(frame);
  if (ref->budget == nullptr || !ref->budget->take()) {
    ++stats_.rx_keep_refused;
    return false;
  }
  rte_mbuf_ext_refcnt_update(&ref->shinfo, 1);
  ++stats_.rx_frames_kept;
  return true;
}

void PortQueue::share(void* frame) noexcept {
  BufferRef* ref = BufferRef::of(frame);
  ref->budget->add();
  rte_mbuf_ext_refcnt_update(&ref->shinfo, 1);
}

void PortQueue::release(void* frame) noexcept {
  BufferRef* ref = BufferRef::of(frame);
  ref->budget->give();
  ref->release_frame();
}

bool PortQueue::hold(void* dev) noexcept {
  BufferRef* ref = BufferRef::of(dev);
  if (ref->budget == nullptr) return false;  // a router buffer: its owner reuses it, copy it
  if (!ref->budget->take()) {
    ++stats_.tx_hold_refused;
    return false;
  }
  rte_mbuf_ext_refcnt_update(&ref->shinfo, 1);
  ++stats_.tx_frames_held;
  return true;
}

void PortQueue::impair(rte_mbuf* m, Stack& stack, Time now) {
  const Impairment& im = port_.config().impair;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (u(rng_) < im.loss) {
    ++stats_.impair_dropped;
    rte_pktmbuf_free(m);
    return;
  }
  if (u(rng_) < im.duplicate) {
    if (rte_mbuf* copy = rte_pktmbuf_copy(m, port_.pool(), 0, UINT32_MAX)) {
      ++stats_.impair_duplicated;
      impair_next_.push_back(copy);
    }
  }
  if (!held_ && u(rng_) < im.reorder) {
    ++stats_.impair_reordered;
    held_ = m;  // goes after the next frame
    return;
  }
  const Time delay = std::chrono::microseconds(im.delay_us);
  auto out = [&](rte_mbuf* f) {
    if (delay.count() > 0) {
      ++stats_.impair_delayed;
      delayed_.emplace_back(now + delay, f);
    } else {
      deliver(f, stack, now);
    }
  };
  out(m);
  if (held_ && held_ != m) {
    rte_mbuf* h = held_;
    held_ = nullptr;
    out(h);
  }
}

void PortQueue::take(rte_mbuf* m, Stack& stack, Time now) {
  if (!port_.config().impair.active()) return deliver(m, stack, now);
  impair(m, stack, now);
  while (!impair_next_.empty()) {  // duplicates go straight after their original
    rte_mbuf* d = impair_next_.back();
    impair_next_.pop_back();
    deliver(d, stack, now);
  }
}

void PortQueue::to_tap(rte_mbuf* const* m, unsigned n, bool sent) noexcept {
  tap_->frames(port_.port_id(), queue_, m, n, sent);
}

unsigned PortQueue::poll(Stack& stack, Time now) {
  stack.begin_burst();
  const unsigned n = poll_burst(stack, now);
  stack.end_burst(now);
  return n;
}

unsigned PortQueue::poll_burst(Stack& stack, Time now) {
  while (!delayed_.empty() && delayed_.front().first <= now) {
    rte_mbuf* m = delayed_.front().second;
    delayed_.pop_front();
    deliver(m, stack, now);
  }
  rte_mbuf* burst[kBurst];
  const std::uint16_t n = rte_eth_rx_burst(port_.port_id(), queue_, burst, kBurst);
  if (n > 0 && tap_ && tap_->on()) [[unlikely]]
    to_tap(burst, n, false);
  const bool steering = port_.config().queues > 1;
  // Frames for other queues, with their owner, passed on after the burst:
  // one enqueue per owner.
  rte_mbuf* away[kBurst];
  std::uint16_t away_owner[kBurst];
  unsigned n_away = 0;
  for (std::uint16_t i = 0; i < n; ++i) {
    ++stats_.rx_frames;
    stats_.rx_bytes += rte_pktmbuf_pkt_len(burst[i]);
    if (steering) {
      const int owner = port_.owner_of(burst[i]);
      if (owner >= 0 && owner != queue_) {
        away[n_away] = burst[i];
        away_owner[n_away++] = static_cast<std::uint16_t>(owner);
        continue;
      }
    }
    take(burst[i], stack, now);
  }
  if (!steering) return n;
  while (n_away > 0) {
    // The first one's owner: its frames, in order; the others stay.
    const std::uint16_t owner = away_owner[0];
    rte_mbuf* to[kBurst];
    unsigned k = 0, rest = 0;
    for (unsigned i = 0; i < n_away; ++i) {
      if (away_owner[i] == owner) {
        to[k++] = away[i];
      } else {
        away[rest] = away[i];
        away_owner[rest++] = away_owner[i];
      }
    }
    n_away = rest;
    const unsigned passed =
        rte_ring_mp_enqueue_burst(port_.steer_ring(owner), reinterpret_cast<void* const*>(to), k, nullptr);
    stats_.rx_steered_out += passed;
    // Its worker is not keeping up: the rest is a loss, which TCP repairs.
    stats_.rx_steer_dropped += k - passed;
    rte_pktmbuf_free_bulk(to + passed, k - passed);
  }
  // What other queues passed here: a few bursts' worth (a queue the device
  // fills with another's frames may pass on more than one burst per loop).
  unsigned in = 0;
  for (int b = 0; b < kSteerBursts; ++b) {
    void* steered[kBurst];
    const unsigned got = rte_ring_sc_dequeue_burst(port_.steer_ring(queue_), steered, kBurst, nullptr);
    for (unsigned i = 0; i < got; ++i) take(static_cast<rte_mbuf*>(steered[i]), stack, now);
    in += got;
    if (got < kBurst) break;
  }
  stats_.rx_steered_in += in;
  return n + in;
}

void PortQueue::send(ByteSpan frame) {
  rte_mbuf* m = rte_pktmbuf_alloc(port_.pool());
  if (!m) {
    ++stats_.tx_dropped;
    return;
  }
  char* dst = rte_pktmbuf_append(m, static_cast<std::uint16_t>(frame.size()));
  if (!dst) {
    ++stats_.tx_dropped;
    rte_pktmbuf_free(m);
    return;
  }
  std::memcpy(dst, frame.data(), frame.size());
  stats_.bytes_copied += frame.size();
  queue_tx(m);
}

void PortQueue::queue_tx(rte_mbuf* m) {
  if (tx_.size() >= kTxBacklog) {
    ++stats_.tx_dropped;
    rte_pktmbuf_free(m);
    return;
  }
  if (tap_ && tap_->on()) [[unlikely]]
    to_tap(&m, 1, true);
  tx_.push_back(m);
  tx_len_.push_back(rte_pktmbuf_pkt_len(m));
  if (tx_.size() % kBurst == 0) (void)flush();
}

MutableByteSpan PortQueue::alloc_frame(std::size_t len) {
  if (building_) rte_pktmbuf_free(building_);
  building_tail_ = nullptr;
  building_ = rte_pktmbuf_alloc(port_.pool());
  if (!building_) {
    ++stats_.tx_dropped;
    return {};
  }
  char* p = len <= UINT16_MAX ? rte_pktmbuf_append(building_, static_cast<std::uint16_t>(len)) : nullptr;
  if (!p) {
    ++stats_.tx_dropped;
    rte_pktmbuf_free(building_);
    building_ = nullptr;
    return {};
  }
  return {reinterpret_cast<std::uint8_t*>(p), len};
}

Port::Appended PortQueue::append_segment(ByteSpan data, void* dev) {
  if (!building_ || data.size() > UINT16_MAX) return Appended::none;
  // Memory the device cannot address is copied into the frame.
  if (dev && port_.needs_iova() && BufferRef::of(dev)->iova_of(data.data()) == RTE_BAD_IOVA) dev = nullptr;
  auto link = [this](rte_mbuf* m) {
    rte_mbuf* tail = building_tail_ ? building_tail_ : building_;
    tail->next = m;
    building_tail_ = m;
    ++building_->nb_segs;
    building_->pkt_len += m->data_len;
  };
  if (dev) {  // the router buffer's own memory, one more reference to it
    rte_mbuf* m = rte_pktmbuf_alloc(port_.attach_pool());
    if (!m) {
      ++stats_.tx_dropped;
      return Appended::none;
    }
    const auto len = static_cast<std::uint16_t>(data.size());
    BufferRef* ref = BufferRef::of(dev);
    auto* p = const_cast<std::uint8_t*>(data.data());
    rte_mbuf_ext_refcnt_update(&ref->shinfo, 1);
    rte_pktmbuf_attach_extbuf(m, p, ref->iova_of(p), len, &ref->shinfo);
    m->data_len = len;
    link(m);
    return Appended::referenced;
  }
  // Copied, into as many buffers as it takes (a piece of a frame the
  // device cuts into segments may be longer than one buffer).  A failure
  // abandons the frame, with what was linked to it.
  for (std::size_t at = 0; at < data.size();) {
    rte_mbuf* m = rte_pktmbuf_alloc(port_.pool());
    const std::size_t k = m ? std::min<std::size_t>(data.size() - at, rte_pktmbuf_tailroom(m)) : 0;
    if (k == 0) {
      ++stats_.tx_dropped;
      rte_pktmbuf_free(m);
      return Appended::none;
    }
    std::memcpy(rte_pktmbuf_append(m, static_cast<std::uint16_t>(k)), data.data() + at, k);
    link(m);
    at += k;
  }
  return Appended::copied;
}

void PortQueue::send_built(std::size_t len, std::size_t l2_len, std::size_t tso_seg) {
  rte_mbuf* m = building_;
  building_ = nullptr;
  const bool chained = building_tail_ != nullptr;
  building_tail_ = nullptr;
  if (!m) return;
  // The first segment keeps its first `len` bytes (trimmed by hand: the
  // chain's later segments stay as they are).
  if (len == 0 || len > rte_pktmbuf_data_len(m)) {
    rte_pktmbuf_free(m);
    return;
  }
  const auto cut = static_cast<std::uint16_t>(rte_pktmbuf_data_len(m) - len);
  m->data_len = static_cast<std::uint16_t>(m->data_len - cut);
  m->pkt_len -= cut;
  if (chained) ++stats_.tx_chained;
  if (l2_len > 0) {  // an IPv4 or IPv6 TCP frame whose checksums the device fills in
    const Offloads& off = port_.tx_offloads();
    const bool v6 = !port_.config().ip.is_v4();
    const std::size_t l3_len = v6 ? kIpv6Header : kIpv4MinHeader;
    m->l2_len = static_cast<std::uint64_t>(l2_len) & 0x7f;
    m->l3_len = static_cast<std::uint64_t>(l3_len) & 0x1ff;
    const std::uint8_t* tcp = rte_pktmbuf_mtod_offset(m, const std::uint8_t*, l2_len + l3_len);
    m->l4_len = static_cast<std::uint64_t>(tcp[12] >> 4) * 4;
    m->ol_flags |= (v6 ? RTE_MBUF_F_TX_IPV6 : RTE_MBUF_F_TX_IPV4 | (off.tx_ipv4 ? RTE_MBUF_F_TX_IP_CKSUM : 0)) |
                   (off.tx_tcp ? RTE_MBUF_F_TX_TCP_CKSUM : 0);
    if (tso_seg > 0) {
      m->ol_flags |= RTE_MBUF_F_TX_TCP_SEG;
      m->tso_segsz = static_cast<std::uint64_t>(tso_seg) & 0xffff;
    }
  }
  queue_tx(m);
}

void PortQueue::release_sent() {
  // A NIC frees what it sent lazily, during later bursts: without more
  // traffic, the router buffers its last frames were chained from would
  // stay out of their pools.
  if (cleanup_ && port_.tx_chains()) cleanup_ = rte_eth_tx_done_cleanup(port_.port_id(), queue_, 0) != -ENOTSUP;
}

unsigned PortQueue::flush() {
  if (tx_.empty()) {
    if (port_.tx_chains() && stats_.tx_chained != chained_seen_) {
      chained_seen_ = stats_.tx_chained;
      release_sent();
    }
    return 0;
  }
  unsigned sent = 0;
  for (int tries = 0; sent < tx_.size() && tries < kTxRetries; ++tries)
    sent += rte_eth_tx_burst(port_.port_id(), queue_, tx_.data() + sent, static_cast<std::uint16_t>(tx_.size() - sent));
  if (sent == 0) {
    const auto now = std::chrono::steady_clock::now();
    if (!stalled_since_) {
      stalled_since_ = now;
    } else if (now - *stalled_since_ >= kTxStall) {
      stats_.tx_dropped += tx_.size();
      ++stats_.tx_stalls;
      rte_pktmbuf_free_bulk(tx_.data(), static_cast<unsigned>(tx_.size()));
      tx_.clear();
      tx_len_.clear();
      stalled_since_.reset();
    }
    stats_.tx_backlog = tx_.size();
    return 0;
  }
  stalled_since_.reset();
  // (lengths kept aside: the device owns, and may have freed, what it took)
  for (unsigned i = 0; i < sent; ++i) stats_.tx_bytes += tx_len_[i];
  stats_.tx_frames += sent;
  // What the device refused waits at the front for the next flush().
  tx_.erase(tx_.begin(), tx_.begin() + static_cast<std::ptrdiff_t>(sent));
  tx_len_.erase(tx_len_.begin(), tx_len_.begin() + static_cast<std::ptrdiff_t>(sent));
  stats_.tx_backlog = tx_.size();
  return sent;
}

}  // namespace lnetr::tcp
