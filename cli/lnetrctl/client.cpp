#include "cli/lnetrctl/client.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dataplane/unix_fd.hpp"

namespace lnetr::lnetrctl {

Json Client::call(const std::string& command, const Json& args, int file) const {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path_.size() >= sizeof a.sun_path) throw CallError{ENAMETOOLONG, "socket path too long: " + path_};
  std::memcpy(a.sun_path, path_.c_str(), path_.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw CallError{errno, std::string("socket: ") + std::strerror(errno)};
  timeval tv{timeout_s_, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    ::close(fd);
    throw CallError{e, "cannot reach lnetr-control on " + path_ + ": " + std::strerror(e) +
                           " (is it running? --socket or LNETR_SOCKET name another socket)"};
  }
  const std::string req = Json{{"version", control::kRequestVersion}, {"command", command}, {"args", args}}.dump();
  std::size_t off = 0;
  while (off < req.size()) {
    // (The descriptor goes with the first bytes.)
    const ssize_t n = unix_fd::send(fd, req.data() + off, req.size() - off, off == 0 ? file : -1, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string reply;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      ::close(fd);
      throw CallError{ETIMEDOUT, "lnetr-control on " + path_ + " did not answer within " +
                                     std::to_string(timeout_s_) + " s"};
    }
    if (n <= 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (reply.empty()) throw CallError{EPROTO, "lnetr-control on " + path_ + " closed the connection without an answer"};
  Json r = Json::parse(reply, nullptr, false);
  if (r.is_discarded() || !r.is_object() || !r.contains("errno"))
    throw CallError{EPROTO, "lnetr-control's answer on " + path_ + " is not a response document"};
  const int e = r["errno"].is_number_integer() ? r["errno"].get<int>() : -EPROTO;
  if (e != 0) throw CallError{-e, r.value("descr", std::string("request failed"))};
  return r.value("data", Json::object());
}

}  // namespace lnetr::lnetrctl
