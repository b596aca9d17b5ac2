// What a DPDK port is opened with (EthPort::open, port.hpp): its device,
// address, queues and offload choices, and the test-only impairment of
// received frames.  No DPDK here, so that configuration code fills it
// without the ports' headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "router/ip_addr.hpp"

namespace lnetr::tcp {

// Received frames dropped, duplicated, reordered and delayed on purpose
// (tests only), seeded so that a run repeats.  Probabilities are 0..1.
struct Impairment {
  std::uint64_t seed = 1;
  double loss = 0.0;       // a received frame is dropped
  double duplicate = 0.0;  // ... delivered twice
  double reorder = 0.0;    // ... held back and delivered after the next one
  std::uint32_t delay_us = 0;  // every frame delivered this much later
  bool active() const noexcept { return loss > 0 || duplicate > 0 || reorder > 0 || delay_us > 0; }
};

struct PortConfig {
  std::string name;    // for messages
  std::string device;  // a virtual device's arguments ("net_af_packet0,iface=veth1") or a PCI address
  IpAddr ip;  // the stack's address (IPv4 or IPv6), which also steers frames to queues
  std::uint32_t prefix_len = 24;
  std::uint16_t mtu = 1500;
  std::uint16_t queues = 1;  // RX/TX queue pairs, one per stack that serves the port
  std::optional<std::uint16_t> vlan;
  // Send payloads from the caller's memory by chaining frames where the
  // device takes chained frames, and keep received frames for payloads
  // received by reference; false: always copy.
  bool zero_copy = true;
  // Segmentation offload: on, off, or (unset) on where the device cuts
  // segments in hardware.
  std::optional<bool> tso;
  // Large receive offload: on (unset) where the device has it; false: off.
  std::optional<bool> lro;
  Impairment impair;
};

}  // namespace lnetr::tcp
