// --help text generated from abseil flags, so that a program's flags are listed once: in their
// ABSL_FLAG definitions (name, type, default, help string). nrtprofd's --help is made here, and
// so are the flag lines of each `nrtprof COMMAND --help`.
//
// Thread-safe as abseil's flag registry is: the functions read the flags, never set them.
#ifndef NRTPROF_COMMON_FLAG_HELP_H_
#define NRTPROF_COMMON_FLAG_HELP_H_

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/strings/string_view.h"

namespace nrtprof {

// The word that stands for a flag's value in help and errors, from its type: "N" for an
// integer, "D" for a duration (10s, 1m30s), "X" for a real number, "STRING" for a string,
// "VALUE" for any other type, and "" for a bool (given alone, it means true).
std::string FlagValueWord(const absl::CommandLineFlag& flag);

// One block of lines per flag, in the order given:
//   "  --name VALUE   help string (default: D)"    ("  -o VALUE ..." for a one-letter name)
// the help strings starting in one column (a name too long for it puts its help on the next
// line), wrapped at word boundaries so that no line is longer than `width` columns (unless a
// single word is). "(default: D)" is left out when the default is empty, for bools that
// default to false, and when the help string says its default itself ("(default ...").
std::string FlagHelpLines(const std::vector<const absl::CommandLineFlag*>& flags,
                          size_t width = 100);

// The same, with the help string of some flags (by name) given here in place of their
// definitions': a flag that several commands share is defined once, its help written for one of
// them, and another command's --help says what the flag does there. "(default: D)" is added to
// these as to the others.
std::string FlagHelpLines(const std::vector<const absl::CommandLineFlag*>& flags,
                          const std::map<std::string, std::string, std::less<>>& help,
                          size_t width = 100);

// Every flag defined (ABSL_FLAG) in the source file `file` (as __FILE__ names it), sorted by
// name: a program's own flags, without abseil's or a library's.
std::vector<const absl::CommandLineFlag*> FlagsDefinedIn(absl::string_view file);

// The flag called `name` if the source file `file` defines it, else null.
absl::CommandLineFlag* FlagDefinedIn(absl::string_view file, absl::string_view name);

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_FLAG_HELP_H_
