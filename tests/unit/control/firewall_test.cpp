#include "control/firewall.hpp"

#include <gtest/gtest.h>

namespace lnetr::control {
namespace {

config::Config load(const std::string& text) {
  auto r = config::load_config(text, "lnetr.yaml");
  EXPECT_TRUE(r) << (r ? "" : r.error().front().to_string());
  return r ? r->config : config::Config{};
}

const char* kNets = R"(net:
    - net type: tcp
      local NI(s):
        - interfaces:
              0: lan0
    - net type: tcp1
      local NI(s):
        - nid: 10.9.0.1@tcp1
    - net type: o2ib
      local NI(s):
        - interfaces:
              0: ib0
    - net type: tcp2
      local NI(s):
        - interfaces:
              0: dpdk0
dataplane:
    accept_port: 1988
    ports:
        - name: dpdk0
          device: net_null0
          address: 10.3.0.1/24
)";

TEST(Firewall, LNetOnTheNIsSshAndMetricsOnManagementOnly) {
  const std::string r = nftables_ruleset(load(std::string(kNets) + R"(control:
    management_interface: mgmt0
    metrics: 0.0.0.0:9100
)"));
  EXPECT_NE(r.find("policy drop;"), std::string::npos) << r;
  for (const char* rule : {"iifname \"lan0\" tcp dport 1988 accept", "ip daddr 10.9.0.1 tcp dport 1988 accept",
                           "iifname \"ib0\" udp dport 4791 accept", "iifname \"mgmt0\" tcp dport 22 accept",
                           "iifname \"mgmt0\" tcp dport 9100 accept", "iif \"lo\" accept",
                           "ct state established,related accept"})
    EXPECT_NE(r.find(rule), std::string::npos) << rule << "\n" << r;
  // An o2ib NI takes no TCP, a DPDK port is not the kernel's, and nothing
  // else is opened anywhere.
  EXPECT_EQ(r.find("iifname \"ib0\" tcp"), std::string::npos) << r;
  EXPECT_EQ(r.find("dpdk0"), std::string::npos) << r;
  std::size_t accepts = 0;
  for (std::size_t at = 0; (at = r.find(" accept", at)) != std::string::npos; ++at) ++accepts;
  EXPECT_EQ(accepts, 9u) << r;  // lo, established, ICMP, 3 NIs, ssh, metrics, DHCP
}

TEST(Firewall, NoManagementInterfaceClosesSshAndLoopbackMetricsNeedNoRule) {
  const std::string r = nftables_ruleset(load(kNets));
  EXPECT_EQ(r.find("dport 22"), std::string::npos) << r;
  EXPECT_EQ(r.find("9798"), std::string::npos) << r;
  EXPECT_NE(r.find("no control.management_interface"), std::string::npos) << r;
}

TEST(Firewall, ManagementMustNotCarryLNet) {
  auto r = config::load_config(std::string(kNets) + "control:\n    management_interface: lan0\n", "lnetr.yaml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().front().to_string(),
            "lnetr.yaml:24:27: control.management_interface: management_interface lan0 is also the interface of "
            "an NI on tcp: management needs an interface of its own");
}

}  // namespace
}  // namespace lnetr::control
