// The router's firewall, from its configuration: `lnetr-control --nftables`
// prints an nftables ruleset (table inet lnetr) that the appliance loads at
// boot (lnetr-firewall.service).  Input is dropped but for:
//   - loopback, replies to what the router sent, ICMP and ICMPv6;
//   - on every kernel-socket NI (its interface, or its address when the NI
//     is given by NID): LNet's acceptor port (dataplane.accept_port, 988);
//     on an o2ib NI also RoCEv2's UDP port 4791, which carries RDMA CM (the
//     o2iblnd service, 987) and the RDMA traffic on RoCE (InfiniBand does
//     not pass the IP stack);
//   - on control.management_interface: ssh (22), the metrics port when
//     metrics listen beyond loopback, and DHCP's client ports.
// NIs on DPDK ports are not the kernel's: nothing to filter there.
// Nothing is forwarded by the kernel.
#pragma once

#include <string>

#include "router/config.hpp"

namespace lnetr::control {

std::string nftables_ruleset(const config::Config& cfg);

}  // namespace lnetr::control
