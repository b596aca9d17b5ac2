// Why the dataplane last stopped, as its unit's ExecStopPost writes it
// (deploy/systemd/lnetr-dataplane-exited): key=value lines in a file beside
// the dataplane's control socket.  lnetr-control reads it to say why the
// dataplane is down (system show, and every answer that finds it down); the
// appliance's login banner reads it too.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace lnetr::control {

struct ExitRecord {
  std::string time;     // UTC, ISO 8601
  std::string result;   // systemd's $SERVICE_RESULT: success, exit-code, signal, core-dump, watchdog, timeout, ...
  std::string code;     // $EXIT_CODE: exited, killed, dumped
  std::string status;   // $EXIT_STATUS: the exit status, or the signal's name
  std::string restarts; // the unit's NRestarts when it stopped
  std::string message;  // the last error the run logged
};

// The record in `text`; nullopt unless it has a time and a result.
std::optional<ExitRecord> parse_exit_record(std::string_view text);
// The record in `path`, if any.
std::optional<ExitRecord> read_exit_record(const std::string& path);

// One line: "stopped with exit status 79 at 2026-...: <message>", "killed by
// signal ILL at ...", "stopped by its watchdog at ...", "stopped at ...".
std::string describe(const ExitRecord& r);

// Where lnetr-control looks for it: beside the dataplane's control socket.
std::string exit_record_path(const std::string& control_socket);

}  // namespace lnetr::control
