#include "cli/lnetrctl/system.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>

extern char** environ;

namespace lnetr::lnetrctl {

namespace {

constexpr const char* kUpdate = "/usr/sbin/lnetr-update";

Json dataplane_state(Context& ctx) {
  return ctx.client.call("system show").at("system").at("dataplane");
}

}  // namespace

int drain(Context& ctx, const DrainOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start).count(); };
  try {
    Json dp = dataplane_state(ctx);
    if (dp.value("state", "") != "up") {
      print_error(ctx.err, "manage", "drain", EHOSTDOWN,
                  "the dataplane is not running: " + dp.value("reason", std::string("(no reason given)")));
      return kExitFailed;
    }
    const std::string before = dp.value("routing", "");
    if (before == "enabled" || before == "starting") ctx.client.call("set routing", {{"enable", 0}});
    const int interval = dp.value("alive_router_check_interval", 60);
    ctx.out << "drain: routing " << (before == "disabled" || before == "stopping" ? "was already disabled" : "disabled")
            << " (peers are told; forwarding goes on while they move off); waiting at most " << o.timeout << " s\n";
    ctx.out.flush();
    std::uint64_t last = dp.value("forwarded", std::uint64_t{0});
    auto last_change = Clock::now();
    long reported = -1;
    for (;;) {
      dp = dataplane_state(ctx);
      if (dp.value("state", "") != "up") {
        print_error(ctx.err, "manage", "drain", EHOSTDOWN, "the dataplane stopped while draining");
        return kExitFailed;
      }
      const std::uint64_t fwd = dp.value("forwarded", std::uint64_t{0});
      if (fwd != last) last = fwd, last_change = Clock::now();
      const long quiet = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - last_change).count();
      const std::int64_t held = dp.value("buffers_held", std::int64_t{0});
      const std::string state = dp.value("routing", "");
      if (state == "disabled") {
        ctx.out << "drain: done after " << elapsed() << " s: routing disabled, no router buffer held\n";
        break;
      }
      if (state == "enabled" || state == "starting") {
        print_error(ctx.err, "manage", "drain", ECANCELED, "routing was enabled again while draining");
        return kExitFailed;
      }
      // Every peer that used us as a gateway has seen routing disabled (it
      // pinged us since, or took our push), or had a check interval to.
      const std::uint64_t unaware = dp.value("peers_unaware", std::uint64_t{0});
      if ((unaware == 0 || elapsed() >= interval) && held == 0 && quiet >= o.quiet) {
        ctx.out << "drain: done after " << elapsed() << " s: "
                << (unaware == 0 ? "every peer using this router has seen routing disabled, "
                                 : "peers had a gateway check interval to see routing disabled, ")
                << "no router buffer held and nothing forwarded for " << quiet << " s\n";
        break;
      }
      if (elapsed() >= o.timeout) {
        ctx.out.flush();
        print_error(ctx.err, "manage", "drain", ETIMEDOUT,
                    "clients have not moved off after " + std::to_string(o.timeout) + " s: " + std::to_string(held) +
                        " router buffer(s) held, last message forwarded " + std::to_string(quiet) + " s ago");
        return kExitFailed;
      }
      if (elapsed() / 5 != reported) {
        reported = elapsed() / 5;
        ctx.out << "drain: " << elapsed() << " s: " << unaware << " peer(s) yet to see routing disabled, " << held
                << " router buffer(s) held, last message forwarded " << quiet << " s ago, routing " << state << "\n";
        ctx.out.flush();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  } catch (const CallError& e) {
    print_error(ctx.err, "manage", "drain", e.err, e.descr);
    return kExitFailed;
  }
  ctx.out.flush();
  return kExitOk;
}

int appliance(Context& ctx, const std::string& verb, const std::vector<std::string>& args) {
  ctx.out.flush();
  if (::access(kUpdate, X_OK) != 0) {
    print_error(ctx.err, "manage", "system", ENOTSUP,
                "system " + verb + ": this is not the lnetr appliance image (no " + kUpdate +
                    "): on a system installed from the package, use its own boot and package tools");
    return kExitFailed;
  }
  std::vector<std::string> argv;
  if (::geteuid() != 0) argv = {"sudo", "-n", "--"};
  argv.push_back(kUpdate);
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, cargv[0], nullptr, nullptr, cargv.data(), environ);
  if (rc != 0) {
    print_error(ctx.err, "manage", "system", rc, "cannot run " + argv[0] + ": " + std::strerror(rc));
    return kExitFailed;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? kExitOk : kExitFailed;
}

}  // namespace lnetr::lnetrctl
