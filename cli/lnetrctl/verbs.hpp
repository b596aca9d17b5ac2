// lnetrctl's verbs: lnetctl's objects, actions, flags and output shapes,
// over lnetr-control's management API.  One table (verbs()) drives the
// command line, the interactive shell's completion and help, and the man
// page, so the three never disagree.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "cli/lnetrctl/client.hpp"

namespace lnetr::lnetrctl {

// What an option's value is (for checking and completion).
enum class ValueKind { none, text, integer, nid, nid_range, net, level, file, seconds };

struct OptionSpec {
  std::string names;  // CLI11 form: "-v,--verbose"
  std::string key;    // the API argument it sets ("" : the command's own)
  ValueKind kind = ValueKind::text;
  std::string help;
  bool required = false;
  long lo = 0, hi = 0;  // integer range (lo < hi: checked)
};

struct PositionalSpec {
  std::string name;  // "NID"
  ValueKind kind = ValueKind::text;
  std::string help;
  bool many = false;
  bool required = true;
};

struct VerbSpec {
  std::string object;
  std::string action;  // "" : the object alone (ping, import, export, top)
  std::string help;
  std::vector<OptionSpec> options;
  std::vector<PositionalSpec> positionals;
  bool prints = false;  // takes --json
  std::string words() const { return action.empty() ? object : object + " " + action; }
};

const std::vector<VerbSpec>& verbs();

// An option's names ("-v", "--verbose") and its long one.
std::vector<std::string> option_names(const OptionSpec& o);
std::string long_option(const OptionSpec& o);

// Where a command runs: lnetr-control's socket, and the terminal.
struct Context {
  Client client;
  std::ostream& out;
  std::ostream& err;
  bool tty = false;  // out is a terminal (top redraws in place)
};

// Exit statuses, as lnetctl's callers test them.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // lnetr-control refused or could not be asked
inline constexpr int kExitUsage = 2;   // the command line was wrong

// Run one command line (without the program name, already split).
int run_command(const std::vector<std::string>& args, Context& ctx);

// The help of every verb (`help`), or of the verbs starting with `words`.
std::string help_text(const std::vector<std::string>& words = {});

// lnetrctl.8 in man(7) roff, from the same table.
std::string man_page();

// An error as lnetctl reports one: `object: {errno, descr}`; and printed
// alone, under `action:`.
Json error_item(const std::string& object, int errnum, const std::string& descr);
void print_error(std::ostream& err, const std::string& action, const std::string& object, int errnum,
                 const std::string& descr);

}  // namespace lnetr::lnetrctl
