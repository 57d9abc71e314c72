#include "common/flag_help.h"

#include <algorithm>
#include <cstdint>

#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"

namespace nrtprof {
namespace {

// Where the help strings start: after the longest "  --name VALUE" and two spaces, but no
// further right than this, so that the help keeps most of the line.
constexpr size_t kMaxHelpColumn = 36;

// abseil records a flag's file as __FILE__ with its leading slashes removed.
absl::string_view AsAbseilNamesIt(absl::string_view file) {
  const size_t start = file.find_first_not_of('/');
  return start == absl::string_view::npos ? absl::string_view() : file.substr(start);
}

bool DefinedIn(const absl::CommandLineFlag& flag, absl::string_view file) {
  return flag.Filename() == AsAbseilNamesIt(file);
}

std::string Invocation(const absl::CommandLineFlag& flag) {
  const std::string word = FlagValueWord(flag);
  // A one-letter flag is written as such flags usually are: -o FILE.
  return absl::StrCat(flag.Name().size() == 1 ? "  -" : "  --", flag.Name(),
                      word.empty() ? "" : " ", word);
}

// `help`: the flag's help string, its definition's or one given in its place.
std::string Description(const absl::CommandLineFlag& flag, const std::string& help) {
  const std::string fallback = flag.IsOfType<bool>() ? "false" : "";
  const std::string default_value = flag.DefaultValue();
  // A help string that says its default itself knows it better (-1 for "not given", say).
  if (default_value == fallback || absl::StrContains(help, "(default")) return help;
  return absl::StrCat(help, " (default: ", default_value, ")");
}

// `text` as lines of at most `width` columns, the first after `first` (padded to `indent`
// columns), the others indented by `indent` spaces.
std::string Wrap(const std::string& first, absl::string_view text, size_t indent, size_t width) {
  std::string out = first;
  size_t column = first.size();
  if (column + 2 > indent) {  // no room before the help's column: the help starts below
    out += '\n';
    column = 0;
  }
  bool line_empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line_empty && column + 1 + word.size() > width) {
      out += '\n';
      column = 0;
      line_empty = true;
    }
    if (column < indent) {
      out.append(indent - column, ' ');
      column = indent;
    } else if (!line_empty) {
      out += ' ';
      ++column;
    }
    out.append(word.data(), word.size());
    column += word.size();
    line_empty = false;
  }
  return out + '\n';
}

}  // namespace

std::string FlagValueWord(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "";
  if (flag.IsOfType<int>() || flag.IsOfType<unsigned>() || flag.IsOfType<int64_t>() ||
      flag.IsOfType<uint64_t>() || flag.IsOfType<int16_t>() || flag.IsOfType<uint16_t>()) {
    return "N";
  }
  if (flag.IsOfType<absl::Duration>()) return "D";
  if (flag.IsOfType<double>() || flag.IsOfType<float>()) return "X";
  if (flag.IsOfType<std::string>()) return "STRING";
  return "VALUE";
}

std::string FlagHelpLines(const std::vector<const absl::CommandLineFlag*>& flags, size_t width) {
  return FlagHelpLines(flags, {}, width);
}

std::string FlagHelpLines(const std::vector<const absl::CommandLineFlag*>& flags,
                          const std::map<std::string, std::string, std::less<>>& help,
                          size_t width) {
  size_t column = 0;
  for (const absl::CommandLineFlag* flag : flags) {
    column = std::max(column, Invocation(*flag).size() + 2);
  }
  column = std::min(column, kMaxHelpColumn);
  std::string out;
  for (const absl::CommandLineFlag* flag : flags) {
    const auto given = help.find(flag->Name());
    out +=
        Wrap(Invocation(*flag),
             Description(*flag, given != help.end() ? given->second : flag->Help()), column, width);
  }
  return out;
}

std::vector<const absl::CommandLineFlag*> FlagsDefinedIn(absl::string_view file) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (DefinedIn(*flag, file)) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  return flags;
}

absl::CommandLineFlag* FlagDefinedIn(absl::string_view file, absl::string_view name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && DefinedIn(*flag, file) ? flag : nullptr;
}

}  // namespace nrtprof
