// lnetrctl's connection to lnetr-control: one management-API request per
// connection on its Unix socket (control/api.hpp).
#pragma once

#include <string>

#include "control/request.hpp"

namespace lnetr::lnetrctl {

using Json = control::Json;

// A request that did not succeed: lnetr-control's errno and description,
// or why lnetr-control could not be asked.
struct CallError {
  int err;  // positive errno
  std::string descr;
};

class Client {
 public:
  explicit Client(std::string socket_path, int timeout_s = 30) : path_(std::move(socket_path)), timeout_s_(timeout_s) {}
  const std::string& path() const noexcept { return path_; }

  // The response's data; CallError thrown on failure.  `file`: a
  // descriptor passed with the request (capture start's file), if not -1.
  Json call(const std::string& command, const Json& args = Json::object(), int file = -1) const;

 private:
  std::string path_;
  int timeout_s_;
};

}  // namespace lnetr::lnetrctl
