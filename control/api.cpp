#include "control/api.hpp"

#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "control/request.hpp"
#include "dataplane/unix_fd.hpp"

namespace lnetr::control {

Api::~Api() { stop(); }

bool Api::open(const std::string& path, const std::string& group, std::string& err, const std::string& what) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) {
    err = what + ": path too long: " + path;
    return false;
  }
  gid_t gid = static_cast<gid_t>(-1);
  if (!group.empty()) {
    // A name, or a number as chown(1) takes it.
    const struct group* g = ::getgrnam(group.c_str());
    if (g) {
      gid = g->gr_gid;
    } else if (group.find_first_not_of("0123456789") == std::string::npos && group.size() <= 9) {
      gid = static_cast<gid_t>(std::stoul(group));
    } else {
      err = what + "_group: no group named '" + group + "'";
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, 16) != 0) {
    err = what + " " + path + ": " + std::strerror(errno);
    return false;
  }
  if (::chmod(path.c_str(), 0660) != 0 || (gid != static_cast<gid_t>(-1) && ::chown(path.c_str(), static_cast<uid_t>(-1), gid) != 0)) {
    err = what + " " + path + ": cannot set its mode or group: " + std::strerror(errno);
    return false;
  }
  path_ = path;
  return true;
}

void Api::start() {
  if (listen_fd_ >= 0) thread_ = std::thread([this] { run(); });
}

void Api::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  {
    // Requests under way end: their clients are cut off, so none can hold
    // a thread (and pings end when the service stops).
    std::unique_lock lock(mu_);
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    idle_.wait(lock, [this] { return active_ == 0; });
  }
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    listen_fd_ = -1;
  }
}

void Api::run() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    {
      std::lock_guard lock(mu_);
      if (active_ >= kMaxClients) {
        send_all(fd, failure("", EBUSY, "too many management requests under way (" + std::to_string(kMaxClients) +
                                            "); try again"));
        ::close(fd);
        continue;
      }
      ++active_;
      open_.insert(fd);
    }
    auto done = [this, fd] {
      std::lock_guard lock(mu_);
      open_.erase(fd);
      ::close(fd);
      --active_;
      idle_.notify_all();
    };
    // Each request on its own thread: a slow client or a long ping holds
    // up nobody else.
    try {
      std::thread([this, fd, done] {
        serve(fd);
        done();
      }).detach();
    } catch (const std::system_error&) {
      done();  // no thread to be had: the client sees the connection close
    }
  }
}

void Api::send_all(int fd, const std::string& reply) {
  // The whole reply within kIoSeconds, however slowly it is read.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kIoSeconds);
  std::size_t off = 0;
  while (off < reply.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd p{fd, POLLOUT, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return;
    const ssize_t n = ::send(fd, reply.data() + off, reply.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;  // gone
    off += static_cast<std::size_t>(n);
  }
}

void Api::serve(int fd) {
  // The whole request within kIoSeconds, however it trickles in.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kIoSeconds);
  std::string req;
  char buf[16384];
  int file = -1;  // passed with the request (capture start's)
  struct Closer {
    int& fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{file};
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;  // nothing complete in time: no answer
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return;
    const ssize_t n = unix_fd::recv(fd, buf, sizeof buf, file);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the end of the request
    req.append(buf, static_cast<std::size_t>(n));
    if (req.size() > kMaxRequestBytes) break;  // refused by respond()
  }
  send_all(fd, respond(svc_, req, level_, file));
}

std::string Api::respond(Service& svc, std::string_view text, Level level, int file) {
  auto parsed = parse_request(text);
  if (auto* e = std::get_if<RequestError>(&parsed)) return failure("", e->err, e->descr);
  const Request& r = std::get<Request>(parsed);
  if (level == Level::read_only && Service::changes(r.command))
    return failure(r.command, EACCES,
                   "'" + r.command + "' is not served on the read-only socket: use the management socket "
                   "(control.socket)");
  try {
    return success(r.command, svc.handle(r.command, r.args, file));
  } catch (const ApiError& e) {
    return failure(r.command, e.err, e.descr);
  } catch (const std::exception& e) {
    return failure(r.command, EPROTO, std::string("internal error: ") + e.what());
  }
}

}  // namespace lnetr::control
