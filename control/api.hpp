// The management API's Unix socket: one request document per connection
// (the client writes it, then shuts down its sending side), one response
// document back (control/request.hpp).  Served on its own thread, one
// connection at a time; a client that sends nothing for 5 s is dropped.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "control/service.hpp"

namespace lnetr::control {

class Api {
 public:
  explicit Api(Service& svc) : svc_(svc) {}
  ~Api();
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

  // Listen on `path` (replacing a stale socket), mode 0660, owned by
  // `group` if not empty.  False with `err` set for the operator.
  bool open(const std::string& path, const std::string& group, std::string& err);
  void start();
  void stop();

  // One request's text -> the response's text (what a connection gets).
  static std::string respond(Service& svc, std::string_view request);

 private:
  void run();
  void serve(int fd);

  Service& svc_;
  std::string path_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace lnetr::control
