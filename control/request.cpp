#include "control/request.hpp"

#include <cerrno>
#include <charconv>

#include "router/yaml_tree.hpp"

namespace lnetr::control {
namespace {

Json scalar(const yaml::Node& n) {
  if (!n.plain) return n.text;
  if (yaml::is_null(n)) return nullptr;
  if (n.text == "true" || n.text == "True" || n.text == "TRUE") return true;
  if (n.text == "false" || n.text == "False" || n.text == "FALSE") return false;
  std::int64_t v = 0;
  const char* end = n.text.data() + n.text.size();
  const auto [p, ec] = std::from_chars(n.text.data(), end, v);
  if (ec == std::errc{} && p == end && !n.text.empty()) return v;
  std::uint64_t u = 0;
  const auto [pu, ecu] = std::from_chars(n.text.data(), end, u);
  if (ecu == std::errc{} && pu == end && !n.text.empty()) return u;
  double d = 0;
  const auto [q, ec2] = std::from_chars(n.text.data(), end, d);
  if (ec2 == std::errc{} && q == end && !n.text.empty() && n.text.find_first_of(".eE") != std::string::npos) return d;
  return n.text;
}

}  // namespace

Json json_of(const yaml::Node& n) {
  switch (n.kind) {
    case yaml::Node::Kind::scalar: return scalar(n);
    case yaml::Node::Kind::sequence: {
      Json a = Json::array();
      for (const yaml::Node& i : n.items) a.push_back(json_of(i));
      return a;
    }
    case yaml::Node::Kind::mapping: {
      Json o = Json::object();
      for (const yaml::Entry& e : n.entries) o[e.key] = json_of(e.value);
      return o;
    }
  }
  return nullptr;
}

namespace {

std::string at(const yaml::Mark& m) { return std::to_string(m.line) + ":" + std::to_string(m.column) + ": "; }

}  // namespace

std::variant<Request, RequestError> parse_request(std::string_view text) {
  if (text.size() > kMaxRequestBytes)
    return RequestError{E2BIG, "request larger than " + std::to_string(kMaxRequestBytes) + " bytes"};
  const yaml::Tree tree = yaml::parse(text, "a request");
  if (tree.error) return RequestError{EINVAL, "request " + at(tree.error->mark) + tree.error->message};
  if (!tree.root || tree.root->kind != yaml::Node::Kind::mapping)
    return RequestError{EINVAL, "a request is a mapping with version, command and args"};
  Request r;
  bool have_version = false;
  for (const yaml::Entry& e : tree.root->entries) {
    if (e.key == "version") {
      const Json v = json_of(e.value);
      if (!v.is_number_integer() || v.get<std::int64_t>() != kRequestVersion)
        return RequestError{EPROTO, "request " + at(e.value.mark) + "version " + yaml::describe(e.value) +
                                        " is not spoken here: this lnetr-control speaks version " +
                                        std::to_string(kRequestVersion)};
      have_version = true;
    } else if (e.key == "command") {
      if (e.value.kind != yaml::Node::Kind::scalar || e.value.text.empty())
        return RequestError{EINVAL, "request " + at(e.value.mark) + "command: expected a command such as 'route show'"};
      r.command = e.value.text;
    } else if (e.key == "args") {
      if (yaml::is_null(e.value)) continue;
      if (e.value.kind != yaml::Node::Kind::mapping)
        return RequestError{EINVAL, "request " + at(e.value.mark) + "args: expected a mapping, got " + yaml::describe(e.value)};
      r.args = json_of(e.value);
    } else {
      return RequestError{EINVAL, "request " + at(e.key_mark) + "unknown key '" + e.key + "': expected version, command, args"};
    }
  }
  if (!have_version) return RequestError{EPROTO, "request without a version: add version: " + std::to_string(kRequestVersion)};
  if (r.command.empty()) return RequestError{EINVAL, "request without a command"};
  return r;
}

std::string success(const std::string& command, const Json& data) {
  Json j = {{"version", kRequestVersion}, {"command", command}, {"errno", 0}, {"data", data}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string failure(const std::string& command, int err, const std::string& descr) {
  Json j = {{"version", kRequestVersion}, {"command", command}, {"errno", -err}, {"descr", descr}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace lnetr::control
