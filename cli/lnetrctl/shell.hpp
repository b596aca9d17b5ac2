// lnetrctl's interactive shell (no command given): a prompt with history
// (~/.lnetrctl_history) and tab completion of verbs, flags and the NIDs
// lnetr-control knows, on libedit (BSD licence).  Each line runs as a
// command line would; `help [object [action]]`, `exit`, `quit` and `shell`
// are the shell's own.
#pragma once

#include <string>
#include <vector>

#include "cli/lnetrctl/verbs.hpp"

namespace lnetr::lnetrctl {

int run_shell(Context& ctx);

// Whether the shell's `shell` may start a system shell: root, or a member
// of group sudo (Debian's administrators).
bool may_use_system_shell();

// A line split as a shell would split it: whitespace between words, single
// or double quotes around one word, backslash escapes the next character.
// nullopt-like: `ok` false on an unterminated quote.
struct Split {
  std::vector<std::string> words;
  bool ok = true;
};
Split split_line(const std::string& line);

// What completes the last (partial) word of `before` (the line up to the
// cursor): candidates starting with that word.  `nids` and `nets` are what
// lnetr-control knows.  Pure: tested.
std::vector<std::string> completions(const std::string& before, const std::vector<std::string>& nids,
                                     const std::vector<std::string>& nets);

}  // namespace lnetr::lnetrctl
