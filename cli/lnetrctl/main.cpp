// lnetrctl: lnetctl's commands for an lnetr router, over lnetr-control's
// management socket (cli/lnetrctl/verbs.hpp).  With no command: the
// interactive shell.
//
//   lnetrctl [--socket PATH] OBJECT [ACTION] [OPTIONS]
//   lnetrctl [--socket PATH]
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/lnetrctl/shell.hpp"
#include "cli/lnetrctl/verbs.hpp"

namespace {

constexpr const char* kDefaultSocket = "/run/lnetr/control.sock";

}  // namespace

int main(int argc, char** argv) {
  using namespace lnetr::lnetrctl;
  std::vector<std::string> args(argv + 1, argv + argc);
  const char* env = std::getenv("LNETR_SOCKET");
  std::string socket = env && *env ? env : kDefaultSocket;
  // lnetrctl's own options come before the command.
  while (!args.empty()) {
    const std::string& a = args.front();
    if (a == "--socket" || a.starts_with("--socket=")) {
      if (a == "--socket" && args.size() < 2) {
        std::cerr << "lnetrctl: --socket: expected the path of lnetr-control's management socket\n";
        return kExitUsage;
      }
      socket = a == "--socket" ? args[1] : a.substr(std::strlen("--socket="));
      args.erase(args.begin(), args.begin() + (a == "--socket" ? 2 : 1));
    } else if (a == "--version") {
      std::cout << "lnetrctl " << LNETR_VERSION << "\n";
      return kExitOk;
    } else if (a == "--man") {
      std::cout << man_page();
      return kExitOk;
    } else if (a == "--list-commands") {
      for (const VerbSpec& v : verbs()) std::cout << v.words() << "\n";
      return kExitOk;
    } else if (a == "help" || a == "-h" || a == "--help") {
      std::vector<std::string> words(args.begin() + 1, args.end());
      const std::string text = help_text(words);
      if (text.empty()) {
        std::cerr << "lnetrctl: no such command: 'lnetrctl help' lists them\n";
        return kExitUsage;
      }
      std::cout << (words.empty() ? "usage: lnetrctl [--socket PATH] OBJECT [ACTION] [OPTIONS]; no command: the shell\n\n"
                                  : "")
                << text;
      return kExitOk;
    } else {
      break;
    }
  }
  Context ctx{Client(socket), std::cout, std::cerr, ::isatty(STDOUT_FILENO) == 1};
  if (args.empty()) return run_shell(ctx);
  // As a login shell, a command comes as `-c "COMMAND"` (ssh admin@router 'route show').
  if (args[0] == "-c") {
    if (args.size() != 2) {
      std::cerr << "lnetrctl: -c: expected one command line\n";
      return kExitUsage;
    }
    const Split s = split_line(args[1]);
    if (!s.ok || s.words.empty()) {
      std::cerr << "lnetrctl: -c: " << (s.ok ? "empty command" : "unterminated quote") << "\n";
      return kExitUsage;
    }
    return run_command(s.words, ctx);
  }
  return run_command(args, ctx);
}
