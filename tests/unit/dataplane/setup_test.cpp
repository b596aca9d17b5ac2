// A configuration with DPDK ports turned into the dataplane's Setup
// (dataplane/setup.cpp): where each port's peers are placed, and the
// configurations it refuses, each error naming its file, line and field.
#include "dataplane/setup.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
