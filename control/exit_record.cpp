#include "control/exit_record.hpp"

#include <fstream>
#include <iterator>

namespace lnetr::control {

std::optional<ExitRecord> parse_exit_record(std::string_view text) {
  ExitRecord r;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, eq);
    std::string value(line.substr(eq + 1));
    if (key == "time") r.time = std::move(value);
    else if (key == "result") r.result = std::move(value);
    else if (key == "code") r.code = std::move(value);
    else if (key == "status") r.status = std::move(value);
    else if (key == "restarts") r.restarts = std::move(value);
    else if (key == "message") r.message = std::move(value);
  }
  if (r.time.empty() || r.result.empty()) return std::nullopt;
  return r;
}

std::optional<ExitRecord> read_exit_record(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_exit_record(text);
}

std::string describe(const ExitRecord& r) {
  std::string s;
  if (r.result == "success") s = "stopped";
  else if (r.result == "watchdog") s = "stopped by its watchdog (a worker stopped making progress)";
  else if (r.result == "timeout") s = "did not start or stop in time";
  else if (r.result == "start-limit-hit") s = "restarted too often, given up";
  else if (r.code == "killed" || r.code == "dumped" || r.result == "signal" || r.result == "core-dump")
    s = "killed by signal " + (r.status.empty() ? std::string("?") : r.status);
  else if (!r.status.empty()) s = "stopped with exit status " + r.status;
  else s = "stopped (" + r.result + ")";
  s += " at " + r.time;
  if (!r.restarts.empty() && r.restarts != "0") s += " after " + r.restarts + " restart(s)";
  if (!r.message.empty()) s += ": " + r.message;
  return s;
}

std::string exit_record_path(const std::string& control_socket) {
  const std::size_t slash = control_socket.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : control_socket.substr(0, slash == 0 ? 1 : slash);
  return (dir == "/" ? "" : dir) + "/dataplane.exit";
}

}  // namespace lnetr::control
