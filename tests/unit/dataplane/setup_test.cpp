// A configuration with DPDK ports turned into the dataplane's Setup
// (dataplane/setup.cpp): where each port's peers are placed, and the
// configurations it refuses, each error naming its file, line and field.
#include "dataplane/setup.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace lnetr::dp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

SetupResult setup_of(const std::string& yaml) {
  auto loaded = config::load_config(yaml, "lnetr.yaml");
  if (!loaded) {
    std::vector<std::string> errors;
    for (const auto& e : loaded.error()) errors.push_back(e.to_string());
    ADD_FAILURE() << "config refused: " << (errors.empty() ? "" : errors[0]);
    return errors;
  }
  return make_setup(loaded->config);
}

// Net tcp on port p0 (10.1.0.1, `queues` queues); net tcp1 on port p1.
std::string two_nets(unsigned queues) {
  return "net:\n"
         "  - net type: tcp\n"
         "    local NI(s):\n"
         "      - interfaces:\n"
         "          0: p0\n"
         "  - net type: tcp1\n"
         "    local NI(s):\n"
         "      - interfaces:\n"
         "          0: p1\n"
         "dataplane:\n"
         "  cores: [0, 1, 2]\n"
         "  ports:\n"
         "    - name: p0\n"
         "      device: \"net_af_packet0,iface=v0\"\n"
         "      address: 10.1.0.1/24\n"
         "      queues: " + std::to_string(queues) + "\n"
         "    - name: p1\n"
         "      device: \"net_af_packet1,iface=v1\"\n"
         "      address: 10.2.0.1/24\n";
}

// docs/operations.md's examples of nets on DPDK ports, as written: each
// loads, and its NI has the NID its comment says ("the NID is ...").
TEST(Setup, TheOperationsGuidesPortExamplesGiveTheNidsTheySay) {
  std::ifstream in(std::string(LNETR_SOURCE_DIR) + "/docs/operations.md");
  ASSERT_TRUE(in);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::regex block("```yaml\n([^`]*)```"), said("the NID is ([^ \n]+)");
  int examples = 0;
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), block); it != std::sregex_iterator(); ++it) {
    const std::string yaml = (*it)[1];
    std::smatch nid;
    if (yaml.find("    ports:") == std::string::npos || !std::regex_search(yaml, nid, said)) continue;
    SCOPED_TRACE(yaml);
    const SetupResult s = setup_of(yaml);
    ASSERT_TRUE(s) << s.error()[0];
    ASSERT_EQ(s->nis.size(), 1u);
    EXPECT_EQ(to_string(s->nis[0].nid), nid[1].str());
    EXPECT_EQ(s->nis[0].port, 0);
    ++examples;
  }
  EXPECT_EQ(examples, 2);  // an IPv4 port and an IPv6 one
}

TEST(Setup, APortsPeersArePlacedByTheQueueTheirAddressHashesTo) {
  const SetupResult s = setup_of(two_nets(3));
  ASSERT_TRUE(s) << s.error()[0];
  ASSERT_EQ(s->ports.size(), 2u);
  EXPECT_EQ(s->ports[0].queues, 3);
  for (std::uint32_t a = 2; a < 60; ++a) {
    // tcp: the queue of p0 that steer_queue() gives; tcp1 (one queue): worker 0.
    EXPECT_EQ(s->placement.of(Nid::make(Net{2, 0}, 0x0a010000 + a), 3), steer_queue(0x0a010000 + a, 0x0a010001, 3));
    EXPECT_EQ(s->placement.of(Nid::make(Net{2, 1}, 0x0a020000 + a), 3), 0u);
  }
}

TEST(Setup, ANetOnSeveralPortsNeedsOneQueueOnEach) {
  const std::string yaml =
      "net:\n"
      "  - net type: tcp\n"
      "    local NI(s):\n"
      "      - interfaces:\n"
      "          0: p0\n"
      "      - interfaces:\n"
      "          0: p1\n"
      "dataplane:\n"
      "  cores: [0, 1]\n"
      "  ports:\n"
      "    - name: p0\n"
      "      device: \"net_af_packet0,iface=v0\"\n"
      "      address: 10.1.0.1/24\n"
      "    - name: p1\n"
      "      device: \"net_af_packet1,iface=v1\"\n"
      "      address: 10.1.1.1/24\n";
  EXPECT_TRUE(setup_of(yaml));  // one queue each: all on worker 0
  const SetupResult s = setup_of(yaml + "      queues: 2\n");
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error(), ElementsAre(HasSubstr("lnetr.yaml:17:15: dataplane.ports[1].queues: port p1 has 2 queues "
                                                "but net tcp is also served by port p0: a net on several ports "
                                                "needs one queue on each")));
}

}  // namespace
}  // namespace lnetr::dp

namespace lnetr::dp {
namespace {

// An o2ib NI given by NID (the dataplane finds its RDMA device at start):
// its tunables in force are Linux's clamps of the file's.
TEST(Setup, DumpcapRunsUnderTheShmNamesPrefixAndNeedsHugepages) {
  std::string yaml = two_nets(1);
  yaml.insert(yaml.find("  ports:\n"), "  dumpcap: 1\n  shm_name: /site7\n");
  const SetupResult s = setup_of(yaml);
  ASSERT_TRUE(s) << s.error()[0];
  EXPECT_EQ(s->dumpcap_prefix, "site7");
  EXPECT_EQ(setup_of(two_nets(1))->dumpcap_prefix, "");  // off unless asked for
  yaml.insert(yaml.find("  ports:\n"), "  hugepages: no\n");
  const SetupResult refused = setup_of(yaml);
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error(), ElementsAre("lnetr.yaml:12:12: dataplane.dumpcap: dpdk-dumpcap attaches through "
                                           "hugepages, and dataplane.hugepages is no"));
}

TEST(Setup, O2ibNiTunablesAreClampedAsLinuxClampsThem) {
  const SetupResult s = setup_of(
      "net:\n"
      "  - net type: o2ib\n"
      "    local NI(s):\n"
      "      - nid: 10.9.0.1@o2ib\n"
      "        tunables: {peer_credits: 4, credits: 128}\n"
      "        lnd tunables: {peercredits_hiw: 7, concurrent_sends: 100, conns_per_peer: 2, ntx: 1024, tos: 96}\n"
      "  - net type: o2ib1\n"
      "    local NI(s):\n"
      "      - nid: 10.9.1.1@o2ib1\n"
      "        tunables: {peer_credits: 32}\n"
      "dataplane:\n"
      "  o2iblnd: {keepalive: 20, remote_keys: transfer}\n");
  ASSERT_TRUE(s) << s.error()[0];
  ASSERT_EQ(s->nis.size(), 2u);
  const NiSetup& a = s->nis[0];
  EXPECT_TRUE(a.is_o2ib());
  EXPECT_EQ(a.o2ib.peer_credits, 8u);       // at least 8
  EXPECT_EQ(a.peer_credits, 8u);            // LNet's peer credits are those in force
  EXPECT_EQ(a.o2ib.peer_credits_hiw, 7u);   // within [peer_credits/2, peer_credits-1]
  EXPECT_EQ(a.o2ib.concurrent_sends, 16u);  // at most 2 x peer_credits
  EXPECT_EQ(a.o2ib.conns_per_peer, 2u);
  EXPECT_EQ(a.o2ib.ntx, 1024u);
  EXPECT_EQ(a.o2ib.tos, 96);
  const NiSetup& b = s->nis[1];
  EXPECT_EQ(b.o2ib.peer_credits, 32u);
  EXPECT_EQ(b.o2ib.peer_credits_hiw, 16u);  // 0: computed, peer_credits/2
  EXPECT_EQ(b.o2ib.concurrent_sends, 32u);  // 0: peer_credits
  EXPECT_EQ(s->o2ib.keepalive, std::chrono::seconds(20));
  EXPECT_TRUE(s->o2ib_transfer_keys);
}

// zc_min_payload is in force as Linux's ksocklnd takes it: at least 2 KiB,
// a smaller value said by name at load time.
TEST(Setup, ZcMinPayloadIsRaisedTo2KiBWithAWarning) {
  const std::string yaml =
      "net:\n"
      "  - net type: tcp\n"
      "    local NI(s):\n"
      "      - interfaces:\n"
      "          0: eth0\n"
      "dataplane:\n"
      "  socklnd:\n"
      "    zc_min_payload: ";
  auto low = config::load_config(yaml + "1000\n", "lnetr.yaml");
  ASSERT_TRUE(low);
  ASSERT_EQ(low->warnings.size(), 1u);
  EXPECT_EQ(low->warnings[0].to_string(),
            "lnetr.yaml:8:5: dataplane.socklnd.zc_min_payload: zc_min_payload 1000 is below 2048: 2048 is in force, "
            "as Linux's ksocklnd raises it");
  const SetupResult s = make_setup(low->config);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->sock.zc_min_payload, 2048u);
  const SetupResult big = setup_of(yaml + "65536\n");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->sock.zc_min_payload, 65536u);
  const SetupResult dflt = setup_of(yaml + "16384\n");
  ASSERT_TRUE(dflt);
  EXPECT_EQ(dflt->sock.zc_min_payload, 16384u);
}

TEST(Setup, AnO2ibNiCannotBeOnADpdkPort) {
  auto loaded = config::load_config("net:\n"
                                    "  - net type: o2ib\n"
                                    "    local NI(s):\n"
                                    "      - interfaces:\n"
                                    "          0: p0\n"
                                    "dataplane:\n"
                                    "  ports:\n"
                                    "    - name: p0\n"
                                    "      device: \"net_af_packet0,iface=v0\"\n"
                                    "      address: 10.1.0.1/24\n",
                                    "lnetr.yaml");
  ASSERT_TRUE(loaded);
  const SetupResult s = make_setup(loaded->config);
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error(), ElementsAre("lnetr.yaml:5:14: net[0].local NI(s)[0].interfaces.0: interface p0 names a DPDK "
                                     "port, which serves tcp nets only; an o2ib NI names the IPoIB or RoCE interface of "
                                     "an RDMA device"));
}

}  // namespace
}  // namespace lnetr::dp
