// The status ABI (dataplane/status.hpp): every answer record survives the
// trip through its JSON unchanged, keeps the wire shape the tests and
// operators read, and an answer of another version is refused.
#include "dataplane/status.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lnetr::status {
namespace {

using Doc = nlohmann::ordered_json;

// What lnetr-control does with an answer: parse it, check its version, read
// the record.
template <class Answer>
Answer round_trip(const Answer& a) {
  const Doc doc = Doc::parse(encode(a));
  EXPECT_EQ(version_error(doc), std::nullopt);
  return doc.get<Answer>();
}

Counts counts(std::initializer_list<std::pair<const char*, std::uint64_t>> l) {
  Counts c;
  for (const auto& [name, n] : l) c.add(name, n);
  return c;
}

Status filled() {
  Status s;
  s.routing = {"stopping", 2, 42, 3};
  s.drop_asym_route = 1;
  s.control_clients_timed_out = 5;
  s.tsc_hz = 2'400'000'000;
  Ni tcp{"10.0.0.1@tcp", "eth0", "socket", "up", "up", "down", 256, 8, 0, 180, {0, 1}, std::nullopt, {}};
  tcp.lnd_tunables.conns_per_peer = 1;
  tcp.lnd_tunables.timeout = 50;
  tcp.lnd_tunables.tos = -1;
  Ni ib{"192.168.1.1@o2ib", "ib0", "verbs", "down", "down", "down", 256, 8, 8, 180, {1}, "rxe0", {}};
  ib.lnd_tunables = {6, 1, 8, 512, 2, 60, 106};
  s.nis = {tcp, ib};
  s.buffers.push_back({0, {0, 512, 510, -3}, {1, 4096, 4096, 4000}, {256, 64, 0, -1}, {{"10.0.0.1@tcp", 256, 250, -2}}});
  s.buffers.push_back({1, {0, 512, 512, 512}, {1, 4096, 4096, 4096}, {256, 64, 64, 64}, {}});
  s.peers.push_back({"10.0.0.2@tcp", 1, "up", true, 8, 7, -1, 8, 8, 0, 2, 0, 10, 11, 1, 1000, 1100,
                     PeerDiscovery{"discovered", 0x1a, 3, true, {{"10.0.0.2@tcp", "up"}, {"10.0.1.2@tcp1", "down"}}, 0,
                                   1, 2, 2, 1, 0}});
  s.peers.push_back({"192.168.1.2@o2ib", 0, "down", false, 8, 8, 8, 8, 8, 8, 0, 0, 0, 0, 0, 0, 0, std::nullopt});
  s.statistics = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  s.drops = counts({{"no_route", 3}, {"route_down", 0}, {"peer_down", 1}});
  s.peer_tables = {1000, 600, {2, 0, 1}, {1, 3, 0}, {1, 0, 0}};
  s.socklnd = {1, 2, 3, 4, 5, 65536, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
               counts({{"eof", 1}, {"timeout", 2}}), counts({{"bad_magic", 0}, {"insecure_port", 4}})};
  O2iblnd& o = s.o2iblnd.emplace();
  o.conns_accepted = 3;
  o.connect_failed = counts({{"unreachable", 1}, {"rejected", 2}});
  o.closed = counts({{"timeout", 1}});
  o.rejects_sent = counts({{"CONN_RACE", 1}, {"CONN_STALE", 0}});
  o.rejects_received = counts({{"CONN_RACE", 0}, {"CONN_STALE", 2}});
  o.tx_msgs = counts({{"CONNREQ", 1}, {"NOOP", 5}});
  o.rx_msgs = counts({{"CONNACK", 1}, {"IMMEDIATE", 9}});
  o.rdma_bytes_written = 1 << 20;
  o.remote_keys = "transfer";
  o.connections = 2;
  Port p;
  p.name = "p0";
  p.device = "net_memif0";
  p.mac = "02:00:00:00:00:01";
  p.link = "up";
  p.mtu = 9000;
  p.queues = 2;
  p.rx_frames = 100;
  p.zero_copy = true;
  p.checksum_offload = {true, false, true};
  p.tso = true;
  p.tso_segments = 12;
  p.tcp.retransmits = 3;
  p.tcp.duplicates = 1;
  p.impair = {1, 2, 3, 4};
  p.rss = true;
  p.per_queue = {{0, 0, 50, 40, 1, 2, 3, 4}, {1, 1, 50, 41, 2, 1, 1, 5}};
  s.ports = {p};
  Worker w;
  w.cpt = 1;
  w.core = 3;
  w.cycles = 1000;
  w.busy_cycles = 10;
  w.status_answered = true;
  w.route_snapshots_rejected = 1;
  s.workers = {Worker{}, w};
  return s;
}

TEST(Status, RoundTripsThroughItsJson) {
  const Status s = filled();
  EXPECT_EQ(round_trip(s), s);
  // Without the optional parts: no o2iblnd, routing enabled.
  Status t = s;
  t.o2iblnd.reset();
  t.routing.peers_unaware.reset();
  t.nis[1].device.reset();
  EXPECT_EQ(round_trip(t), t);
}

// The dataplane writes as it walks a record; lnetr-control writes records
// into its documents with to_json: both say the same.
TEST(Status, TheWriterAndToJsonAgree) {
  const Status s = filled();
  Doc j;
  j["version"] = kStatusVersion;
  Doc k;
  to_json(k, s);
  for (const auto& [key, v] : k.items()) j[key] = v;
  EXPECT_EQ(Doc::parse(encode(s)), j);
  // Strings that need escaping, or are not UTF-8.
  const Error e{-22, "'a\"b\\c\n\x01\xff' is not a NID"};
  const Doc doc = Doc::parse(encode(e));
  EXPECT_EQ(doc["descr"], "'a\"b\\c\n\x01\xef\xbf\xbd' is not a NID");
}

TEST(Status, KeepsTheWireShape) {
  Status s = filled();
  const Doc doc = Doc::parse(encode(s));
  // The version first, then the members in the order declared (lnetr-control
  // passes some records on as they come).
  std::vector<std::string> keys;
  for (const auto& [k, v] : doc.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"version", "routing", "drop_asym_route", "control_clients_timed_out",
                                            "tsc_hz", "nis", "buffers", "peers", "statistics", "drops", "peer_tables",
                                            "socklnd", "o2iblnd", "ports", "workers"}));
  EXPECT_EQ(doc["version"], kStatusVersion);
  EXPECT_EQ(doc["routing"]["peers_unaware"], 3);
  EXPECT_EQ(doc["peers"][0]["available_tx_credits"], 7);
  EXPECT_EQ(doc["peers"][0]["min_tx_credits"], -1);
  EXPECT_EQ(doc["buffers"][0]["tiny"]["mincredits"], -3);
  EXPECT_EQ(doc["buffers"][0]["ni_tx"][0]["available_tx_credits"], 250);
  EXPECT_EQ(doc["peer_tables"]["socklnd"]["refused"], 3);
  EXPECT_EQ(doc["peer_tables"]["limit_per_cpt"], 1000);
  EXPECT_EQ(doc["socklnd"]["closed"], Doc::parse(R"({"eof": 1, "timeout": 2})"));
  EXPECT_EQ(doc["ports"][0]["tcp"]["retransmits"], 3);
  EXPECT_EQ(doc["workers"][1]["status_answered"], true);
  // Counters by name keep the dataplane's order.
  std::vector<std::string> reasons;
  for (const auto& [k, v] : doc["drops"].items()) reasons.push_back(k);
  EXPECT_EQ(reasons, (std::vector<std::string>{"no_route", "route_down", "peer_down"}));
  // A socklnd NI's lnd tunables are socklnd's three, an o2ib NI's all.
  EXPECT_EQ(doc["nis"][0]["lnd_tunables"], Doc::parse(R"({"conns_per_peer": 1, "timeout": 50, "tos": -1})"));
  EXPECT_FALSE(doc["nis"][0].contains("device"));
  EXPECT_EQ(doc["nis"][1]["device"], "rxe0");
  EXPECT_EQ(doc["nis"][1]["lnd_tunables"].size(), 7u);
  // Optional parts absent: their keys absent.
  s.o2iblnd.reset();
  s.routing.peers_unaware.reset();
  const Doc bare = Doc::parse(encode(s));
  EXPECT_FALSE(bare.contains("o2iblnd"));
  EXPECT_FALSE(bare["routing"].contains("peers_unaware"));
}

TEST(Status, OtherAnswersRoundTrip) {
  const O2ibConnections c{{{"192.168.1.2@o2ib", 1, 18, true, 32, 256, 30, 1, 2, 3, 4, 5, 0, 100, 99}}};
  EXPECT_EQ(round_trip(c), c);
  EXPECT_EQ(round_trip(O2ibConnections{}), O2ibConnections{});
  const RoutingSet r{"stopping", 2};
  EXPECT_EQ(round_trip(r), r);
  EXPECT_EQ(round_trip(DropAsymRoute{1}), DropAsymRoute{1});
  const FaultAdded added{1, "drop src=* dst=* rate=2", "a worker was slow"};
  EXPECT_EQ(round_trip(added), added);
  EXPECT_EQ(round_trip(FaultAdded{2, "delay", std::nullopt}), (FaultAdded{2, "delay", std::nullopt}));
  EXPECT_EQ(round_trip(FaultsDeleted{3, std::nullopt}), (FaultsDeleted{3, std::nullopt}));
  FaultList list;
  list.faults.push_back({1, "drop", "drop src=* dst=*", counts({{"ACK", 1}, {"PUT", 2}, {"GET", 0}, {"REPLY", 0}}), 3,
                         std::nullopt, std::nullopt});
  list.faults.push_back({2, "corrupt", "corrupt src=* dst=*", counts({{"PUT", 4}}), std::nullopt, std::nullopt, 4});
  list.held = 7;
  EXPECT_EQ(round_trip(list), list);
  EXPECT_EQ(round_trip(Stalled{1, 3}), (Stalled{1, 3}));
  EXPECT_EQ(round_trip(Error{-22, "bad"}), (Error{-22, "bad"}));

  // What a rule did is keyed by its kind; an error is errno and descr.
  const Doc doc = Doc::parse(encode(list));
  EXPECT_EQ(doc["faults"][0]["dropped"], 3);
  EXPECT_EQ(doc["faults"][1]["corrupted"], 4);
  EXPECT_FALSE(doc["faults"][1].contains("dropped"));
  EXPECT_EQ(Doc::parse(encode(Error{-16, "busy"})),
            Doc::parse(R"({"version": )" + std::to_string(kStatusVersion) + R"(, "errno": -16, "descr": "busy"})"));
  EXPECT_FALSE(Doc::parse(encode(FaultsDeleted{3, std::nullopt})).contains("warning"));
}

TEST(Status, AnotherVersionIsRefused) {
  Doc doc = Doc::parse(encode(filled()));
  doc["version"] = kStatusVersion + 1;
  const auto e = version_error(doc);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->find("status version " + std::to_string(kStatusVersion + 1)), std::string::npos) << *e;
  EXPECT_NE(e->find("reads version " + std::to_string(kStatusVersion)), std::string::npos) << *e;
  // None given (a dataplane from before the versioned status), or no object.
  doc.erase("version");
  ASSERT_TRUE(version_error(doc).has_value());
  EXPECT_NE(version_error(doc)->find("version 0 (none given)"), std::string::npos) << *version_error(doc);
  EXPECT_TRUE(version_error(Doc::array()).has_value());
  EXPECT_TRUE(version_error(Doc::parse(R"({"version": "1"})")).has_value());
}

TEST(Status, AMissingMemberIsAnError) {
  Doc doc = Doc::parse(encode(filled()));
  doc["peers"][0].erase("available_tx_credits");
  EXPECT_THROW(doc.get<Status>(), nlohmann::json::exception);
  Doc wrong = Doc::parse(encode(filled()));
  wrong["statistics"]["route_count"] = "many";
  EXPECT_THROW(wrong.get<Status>(), nlohmann::json::exception);
}

}  // namespace
}  // namespace lnetr::status
