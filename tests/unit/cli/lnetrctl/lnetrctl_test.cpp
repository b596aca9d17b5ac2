// lnetrctl's pure parts: its YAML output in lnetctl's layout (and read back
// the same), the shell's word splitting and completion, top's frames, and
// help and man page covering every verb of the table.
#include <gtest/gtest.h>

#include <algorithm>

#include "cli/lnetrctl/shell.hpp"
#include "cli/lnetrctl/top.hpp"
#include "cli/lnetrctl/verbs.hpp"
#include "cli/lnetrctl/yaml_out.hpp"
#include "router/yaml_tree.hpp"

namespace lnetr::lnetrctl {
namespace {

Json roundtrip(const Json& j) {
  const auto tree = yaml::parse(to_yaml(j), "t");
  EXPECT_FALSE(tree.error) << to_yaml(j);
  return tree.root ? control::json_of(*tree.root) : Json();
}

TEST(YamlOut, NetShowHasLnetctlsLayout) {
  const Json doc = Json::parse(R"j({"net": [{"net type": "tcp", "local NI(s)": [{"nid": "192.168.1.10@tcp",
      "status": "up", "interfaces": {"0": "eth0"}, "CPT": "[0,1]"}]}]})j");
  EXPECT_EQ(to_yaml(doc),
            "net:\n"
            "    - net type: tcp\n"
            "      local NI(s):\n"
            "        - nid: 192.168.1.10@tcp\n"
            "          status: up\n"
            "          interfaces:\n"
            "              0: eth0\n"
            "          CPT: \"[0,1]\"\n");
  EXPECT_EQ(roundtrip(doc), doc);
}

TEST(YamlOut, RoutingShowAndErrorsHaveLnetctlsLayout) {
  const Json routing = Json::parse(R"j({"routing": [{"cpt[0]": {"tiny": {"npages": 0, "nbuffers": 2048}}},
      {"enable": 1}], "buffers": {"tiny": 2048}})j");
  EXPECT_EQ(to_yaml(routing),
            "routing:\n"
            "    - cpt[0]:\n"
            "          tiny:\n"
            "              npages: 0\n"
            "              nbuffers: 2048\n"
            "    - enable: 1\n"
            "buffers:\n"
            "    tiny: 2048\n");
  std::ostringstream err;
  print_error(err, "add", "route", 17, "route tcp2 via 10.0.0.1@tcp1 exists already");
  EXPECT_EQ(err.str(),
            "add:\n"
            "    - route:\n"
            "          errno: -17\n"
            "          descr: route tcp2 via 10.0.0.1@tcp1 exists already\n");
}

TEST(YamlOut, ScalarsAreQuotedOnlyWhereYamlWouldMisreadThem) {
  EXPECT_EQ(yaml_scalar("10.0.0.1@tcp"), "10.0.0.1@tcp");
  EXPECT_EQ(yaml_scalar("local NI(s)"), "local NI(s)");
  for (const char* s : {"10", "-1", "1.5", "1e3", "true", "False", "null", "~", "yes", "", " x", "x ", "a: b",
                        "a #b", "-x", "[0,1]", "{a}", "*x", "&x", "!x", "|", ">", "'q'", "\"q\"", "%x", "@x",
                        "line\nbreak", "tab\there", "1:30", "a:b", "2001-12-14 21:59:43.10 -5", "=", "<<x",
                        "nel\u0085x", "ls\u2028x", "c1\u0081x", "del\x7f; ~\u009f|", "nonchar\uffffx"}) {
    const Json j = std::string(s);
    EXPECT_EQ(yaml_scalar(j).front(), '"') << s;
    EXPECT_EQ(roundtrip(Json{{"k", j}}), (Json{{"k", j}})) << s;
  }
  EXPECT_EQ(yaml_scalar(Json(true)), "true");
  EXPECT_EQ(yaml_scalar(Json(nullptr)), "~");
  EXPECT_EQ(yaml_scalar(Json(-17)), "-17");
}

TEST(YamlOut, EveryShapeReadsBackTheSame) {
  const Json doc = Json::parse(R"j({"a": [1, -2, 3.25, true, null, "10", [], {}, [1, [2, 3]], {"b": {"c": []}}],
      "e": {}, "f": [], "0": "key that looks like a number", "big": 18446744073709551615, "neg": -9223372036854775808})j");
  EXPECT_EQ(roundtrip(doc), doc);
  EXPECT_EQ(roundtrip(Json("top")), Json("top"));
  EXPECT_EQ(roundtrip(Json("...")), Json("..."));  // not the end of the document
  EXPECT_EQ(roundtrip(Json::array({1, 2})), Json::array({1, 2}));
}

TEST(Shell, SplitsLikeAShell) {
  EXPECT_EQ(split_line("  route add --net tcp2  ").words, (std::vector<std::string>{"route", "add", "--net", "tcp2"}));
  EXPECT_EQ(split_line("import 'my file.yaml'").words, (std::vector<std::string>{"import", "my file.yaml"}));
  EXPECT_EQ(split_line(R"(a\ b "c d" e"f")").words, (std::vector<std::string>{"a b", "c d", "ef"}));
  EXPECT_FALSE(split_line("ping 'x").ok);
}

TEST(Shell, CompletesVerbsFlagsAndKnownNids) {
  const std::vector<std::string> nids = {"10.0.0.1@tcp", "10.0.1.9@tcp1"}, nets = {"tcp", "tcp1"};
  using V = std::vector<std::string>;
  EXPECT_EQ(completions("ro", nids, nets), (V{"route", "routing"}));
  EXPECT_EQ(completions("route ", nids, nets), (V{"add", "del", "show"}));
  EXPECT_EQ(completions("route add --n", nids, nets), (V{"--net"}));
  EXPECT_EQ(completions("route add --net ", nids, nets), nets);
  EXPECT_EQ(completions("route add --net tcp2 --gateway 10.0.1", nids, nets), (V{"10.0.1.9@tcp1"}));
  // Options given already are not offered again; show verbs take --json.
  const V show = completions("route show --net tcp ", nids, nets);
  EXPECT_EQ(std::count(show.begin(), show.end(), "--net"), 0);
  EXPECT_EQ(std::count(show.begin(), show.end(), "--json"), 1);
  EXPECT_EQ(completions("ping 10", nids, nets), nids);
  EXPECT_EQ(completions("set ", nids, nets).front(), "alive_router_check_interval");
  EXPECT_EQ(completions("help rou", nids, nets), (V{"route", "routing"}));
  EXPECT_EQ(completions("ex", nids, nets), (V{"exit", "export"}));
  EXPECT_TRUE(completions("frobnicate ", nids, nets).empty());
}

TEST(Top, AFrameShowsRatesPerNetAndPeerBusiestFirst) {
  auto peer = [](const char* nid, std::uint64_t sent, std::uint64_t recv) {
    return Json{{"primary nid", nid},
                {"peer ni", Json::array({Json{{"nid", nid},
                                              {"state", "up"},
                                              {"available_tx_credits", 8},
                                              {"available_rtr_credits", 7},
                                              {"statistics", {{"send_count", sent}, {"recv_count", recv}, {"drop_count", 0}}}}})}};
  };
  // Busy by cycles (a few long iterations), not by iterations.
  auto worker = [](std::uint64_t cycles, std::uint64_t busy) {
    return Json{{"cpt", 0}, {"core", 1}, {"loops", 1000}, {"busy_loops", 1}, {"cycles", cycles}, {"busy_cycles", busy}};
  };
  TopSample a, b;
  a.t = 10;
  b.t = 12;
  a.stats = {{"route_count", 1000}, {"route_length", 0}, {"drop_count", 0}, {"reroute_count", 0}};
  b.stats = {{"route_count", 3000}, {"route_length", 4194304}, {"drop_count", 4}, {"reroute_count", 0}};
  a.peers = {{"peer", Json::array({peer("10.0.0.2@tcp", 0, 100), peer("10.0.1.3@tcp1", 50, 0)})}};
  b.peers = {{"peer", Json::array({peer("10.0.0.2@tcp", 0, 2100), peer("10.0.1.3@tcp1", 3050, 0),
                                   peer("10.0.1.4@tcp1", 10, 0)})}};
  a.dataplane = {{"workers", Json::array({worker(100, 10)})}};
  b.dataplane = {{"workers", Json::array({worker(300, 110)})}};
  TopOptions o;
  o.peers = 2;
  const std::string f = top_frame(a, b, o, "title");
  EXPECT_NE(f.find("forwarded       1000 msg/s      2.00 MiB/s   dropped        2 msg/s"), std::string::npos) << f;
  EXPECT_NE(f.find(" 50% busy"), std::string::npos) << f;
  EXPECT_NE(f.find("tcp                     0         1000          0      1"), std::string::npos) << f;
  EXPECT_NE(f.find("tcp1                 1505            0          0      2"), std::string::npos) << f;
  // Busiest first, at most o.peers of them.
  EXPECT_LT(f.find("10.0.1.3@tcp1"), f.find("10.0.0.2@tcp")) << f;
  EXPECT_EQ(f.find("10.0.1.4@tcp1 "), std::string::npos) << f;
  EXPECT_NE(f.find("(1 more peers)"), std::string::npos) << f;
}

TEST(YamlOut, AnEmptyValueIsPrintedAsLnetctlDoes) {
  const Json err = Json::parse(R"j({"manage": [{"ping": null, "errno": -110, "descr": "failed to ping 10.0.0.9@o2ib"}]})j");
  EXPECT_EQ(to_yaml(err),
            "manage:\n"
            "    - ping:\n"
            "      errno: -110\n"
            "      descr: failed to ping 10.0.0.9@o2ib\n");
  EXPECT_EQ(roundtrip(err), err);
}

// No socket: what must be refused before lnetr-control is asked exits 2,
// anything else fails to connect (1); nothing throws.
TEST(Verbs, BadCommandLinesAreRefusedAndNothingThrows) {
  std::ostringstream out, err;
  Context ctx{Client("/nonexistent/lnetr.sock"), out, err};
  const std::vector<std::vector<std::string>> usage = {
      {"net", "show", "-v", "tcp"},   {"net", "show", "-v", "9"},       {"net", "show", "-v=x"},
      {"route", "add", "--net", "tcp2", "--gateway", "10.0.0.1@tcp", "--hop", "0x10"},
      {"route", "add", "--net", "tcp2", "--gateway", "10.0.0.1@tcp", "--priority", "010x"},
      {"route", "show", "--hop", "256"}, {"set", "health_sensitivity", "99999999999999999999"},
      {"set", "health_sensitivity", "nan"}, {"set", "routing", "x"},  {"set", "routing", "2"},
      {"top", "--interval", "nan"},     {"top", "--interval", "0"},      {"top", "--interval", "1e-300"},
      {"peer", "show", "-v", "10.0.0.1@tcp"}, {"frobnicate"},            {"route"},
      {"ping"},                          {"ping", "not-a-nid"},           {},
  };
  for (const auto& args : usage) {
    err.str("");
    EXPECT_EQ(run_command(args, ctx), kExitUsage) << ::testing::PrintToString(args) << err.str();
    EXPECT_NE(err.str().find("lnetrctl: "), std::string::npos) << ::testing::PrintToString(args);
  }
  err.str("");
  EXPECT_EQ(run_command({"frobnicate"}, ctx), kExitUsage);
  EXPECT_NE(err.str().find("unknown command 'frobnicate'"), std::string::npos) << err.str();
  err.str("");
  EXPECT_EQ(run_command({"route", "show", "--hop", "-1", "-v", "2"}, ctx), kExitFailed);
  EXPECT_NE(err.str().find("show:\n    - route:\n          errno: -2\n"), std::string::npos) << err.str();
}

TEST(Verbs, HelpAndManPageCoverEveryVerb) {
  const std::string help = help_text(), man = man_page();
  EXPECT_EQ(man.rfind(".TH LNETRCTL 8", 0), 0u);
  for (const VerbSpec& v : verbs()) {
    EXPECT_NE(help.find("lnetrctl " + v.words()), std::string::npos) << v.words();
    EXPECT_NE(man.find("lnetrctl " + v.words()), std::string::npos) << v.words();
    for (const OptionSpec& o : v.options) {
      EXPECT_FALSE(o.help.empty()) << v.words() << " " << o.names;
      std::string escaped;
      for (char c : long_option(o)) escaped += c == '-' ? std::string("\\-") : std::string(1, c);
      EXPECT_NE(man.find(escaped), std::string::npos) << v.words() << " " << o.names;
    }
  }
  EXPECT_NE(help_text({"route", "add"}).find("--health_sensitivity"), std::string::npos);
  EXPECT_TRUE(help_text({"frobnicate"}).empty());
}

}  // namespace
}  // namespace lnetr::lnetrctl
