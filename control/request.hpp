// The management API's request documents (version 1), parsed from YAML or
// JSON text, and its response documents (JSON, which is also YAML).
//
//   request:   {version: 1, command: "route add", args: {net: tcp2, gateway: 10.0.0.1@tcp1}}
//   success:   {"version": 1, "command": "route add", "errno": 0, "data": {...}}
//   failure:   {"version": 1, "command": "route add", "errno": -17, "descr": "..."}
//
// Scalars written plain in YAML become numbers, booleans and null as JSON
// reads them; quoted ones stay strings.  Pure functions: fuzzed.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>

namespace lnetr::control {

inline constexpr int kRequestVersion = 1;
inline constexpr std::size_t kMaxRequestBytes = 1 << 20;

struct Request {
  std::string command;
  nlohmann::json args = nlohmann::json::object();
};

struct RequestError {
  int err;  // positive errno
  std::string descr;
};

std::variant<Request, RequestError> parse_request(std::string_view text);

std::string success(const std::string& command, const nlohmann::json& data);
std::string failure(const std::string& command, int err, const std::string& descr);

}  // namespace lnetr::control
