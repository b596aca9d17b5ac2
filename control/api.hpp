// The management API's Unix socket: one request document per connection
// (the client writes it, then shuts down its sending side), one response
// document back (control/request.hpp).  Each connection is served on a
// thread of its own, at most kMaxClients at once (more get EBUSY); a client
// that has not sent its whole request within kIoSeconds, or has not read
// the whole response within as long, is dropped.
//
// Two levels: the management socket takes every command; a read-only
// socket takes only those that change nothing (Service::changes()), and
// answers the others EACCES.  Who may use which is left to the sockets'
// modes and groups.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "control/service.hpp"

namespace lnetr::control {

class Api {
 public:
  enum class Level : std::uint8_t { manage, read_only };
  explicit Api(Service& svc, Level level = Level::manage) : svc_(svc), level_(level) {}
  ~Api();
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

  // Listen on `path` (replacing a stale socket), mode 0660, owned by
  // `group` if not empty.  False with `err` set for the operator (`what`
  // names the setting).
  bool open(const std::string& path, const std::string& group, std::string& err,
            const std::string& what = "control.socket");
  void start();
  void stop();

  // One request's text -> the response's text (what a connection gets);
  // `file` is a descriptor passed with it (capture start's), lent.
  static std::string respond(Service& svc, std::string_view request, Level level = Level::manage, int file = -1);

  static constexpr int kMaxClients = 16;
  static constexpr int kIoSeconds = 5;

 private:
  void run();
  void serve(int fd);
  static void send_all(int fd, const std::string& reply);

  Service& svc_;
  Level level_;
  std::string path_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;     // connections being served ...
  std::set<int> open_;  // ... and their sockets
};

}  // namespace lnetr::control
