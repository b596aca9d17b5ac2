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

#include "router/yaml_tree.hpp"

namespace lnetr::control {

// Documents keep their keys in the order written (lnetctl's order, which
// lnetrctl prints).
using Json = nlohmann::ordered_json;

inline constexpr int kRequestVersion = 1;
inline constexpr std::size_t kMaxRequestBytes = 1 << 20;

struct Request {
  std::string command;
  Json args = Json::object();
};

struct RequestError {
  int err;  // positive errno
  std::string descr;
};

std::variant<Request, RequestError> parse_request(std::string_view text);

// A YAML node as a document: plain scalars that read as integers, numbers
// with a fraction or exponent, booleans or null become those; everything
// else (quoted scalars, keys) stays a string.
Json json_of(const yaml::Node& n);

std::string success(const std::string& command, const Json& data);
std::string failure(const std::string& command, int err, const std::string& descr);

}  // namespace lnetr::control
