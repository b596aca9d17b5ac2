// Management-API request documents (control/request.hpp): YAML and JSON
// forms read alike, versions and shapes checked, responses versioned.
#include "control/request.hpp"

#include <gtest/gtest.h>

namespace lnetr::control {
namespace {

Request ok(std::string_view text) {
  auto r = parse_request(text);
  if (auto* e = std::get_if<RequestError>(&r)) ADD_FAILURE() << e->descr;
  return std::holds_alternative<Request>(r) ? std::get<Request>(r) : Request{};
}

RequestError err(std::string_view text) {
  auto r = parse_request(text);
  EXPECT_TRUE(std::holds_alternative<RequestError>(r)) << text;
  return std::holds_alternative<RequestError>(r) ? std::get<RequestError>(r) : RequestError{};
}

TEST(Request, YamlAndJsonReadAlike) {
  const Request y = ok("version: 1\ncommand: route add\nargs:\n  net: tcp2\n  hop: 1\n  gateway: \"10.0.0.1@tcp1\"\n"
                       "  on: true\n  quoted: \"7\"\n  nothing: ~\n");
  const Request j = ok(R"({"version": 1, "command": "route add", "args": {"net": "tcp2", "hop": 1,
                          "gateway": "10.0.0.1@tcp1", "on": true, "quoted": "7", "nothing": null}})");
  EXPECT_EQ(y.command, "route add");
  EXPECT_EQ(y.args, j.args);
  EXPECT_EQ(y.args["hop"], 1);
  EXPECT_EQ(y.args["quoted"], "7");  // quoted stays text
  EXPECT_TRUE(y.args["nothing"].is_null());
  EXPECT_TRUE(ok("version: 1\ncommand: route show\n").args.is_object());
  EXPECT_TRUE(ok("version: 1\ncommand: route show\nargs:\n").args.empty());
}

TEST(Request, RefusesWhatItCannotRead) {
  EXPECT_EQ(err("command: route show\n").err, EPROTO);
  const RequestError v2 = err("version: 2\ncommand: route show\n");
  EXPECT_EQ(v2.err, EPROTO);
  EXPECT_EQ(v2.descr, "request 1:10: version \"2\" is not spoken here: this lnetr-control speaks version 1");
  EXPECT_EQ(err("version: 1\n").descr, "request without a command");
  EXPECT_EQ(err("version: 1\ncommand: x\nargs: [1]\n").descr, "request 3:7: args: expected a mapping, got a sequence");
  EXPECT_EQ(err("version: 1\ncommand: x\nextra: 1\n").descr,
            "request 3:1: unknown key 'extra': expected version, command, args");
  EXPECT_EQ(err("- 1\n").err, EINVAL);
  EXPECT_EQ(err("").err, EINVAL);
  EXPECT_EQ(err("version: 1\n---\nversion: 1\n").descr,
            "request 2:1: more than one YAML document; a request is one document");
  EXPECT_EQ(err(std::string(kMaxRequestBytes + 1, ' ')).err, E2BIG);
}

TEST(Request, ResponsesCarryVersionCommandAndErrno) {
  const auto s = nlohmann::json::parse(success("route show", {{"route", nlohmann::json::array()}}));
  EXPECT_EQ(s["version"], 1);
  EXPECT_EQ(s["command"], "route show");
  EXPECT_EQ(s["errno"], 0);
  EXPECT_TRUE(s["data"]["route"].is_array());
  const auto f = nlohmann::json::parse(failure("route add", EEXIST, "exists \xff"));  // invalid UTF-8 replaced
  EXPECT_EQ(f["errno"], -EEXIST);
  EXPECT_EQ(f["descr"], "exists \xEF\xBF\xBD");
}

}  // namespace
}  // namespace lnetr::control
