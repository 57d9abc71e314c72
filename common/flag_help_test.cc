// The generated --help lines, as a user reads them, for flags this file defines.
#include "common/flag_help.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

ABSL_FLAG(bool, verbose, false, "say more");
ABSL_FLAG(bool, colour, true, "colour the table");
ABSL_FLAG(std::string, where, "", "the folder to write to");
ABSL_FLAG(std::string, name_of_a_rather_long_flag, "x", "a flag whose name leaves no room");
ABSL_FLAG(uint64_t, bytes, 1024,
          "the most it keeps, in bytes; beyond it the oldest go first, and every one that goes "
          "is counted and shown in the status, so that nothing is dropped without a word about "
          "it anywhere");
ABSL_FLAG(absl::Duration, every, absl::Seconds(2), "how often");
ABSL_FLAG(std::string, o, "", "the file to write");
ABSL_FLAG(int, depth, -1, "how deep (default: $DEPTH, else 0)");

namespace nrtprof {
namespace {

std::vector<std::string> Names(const std::vector<const absl::CommandLineFlag*>& flags) {
  std::vector<std::string> names;
  for (const absl::CommandLineFlag* flag : flags) names.emplace_back(flag->Name());
  return names;
}

TEST(FlagHelp, FindsTheFlagsOfOneFileOnly) {
  EXPECT_EQ(Names(FlagsDefinedIn(__FILE__)),
            (std::vector<std::string>{"bytes", "colour", "depth", "every",
                                      "name_of_a_rather_long_flag", "o", "verbose", "where"}));
  EXPECT_NE(FlagDefinedIn(__FILE__, "where"), nullptr);
  EXPECT_EQ(FlagDefinedIn(__FILE__, "nowhere"), nullptr);
  EXPECT_EQ(FlagDefinedIn("common/another_file.cc", "where"), nullptr);
}

TEST(FlagHelp, ValueWordsComeFromTheType) {
  EXPECT_EQ(FlagValueWord(*FlagDefinedIn(__FILE__, "verbose")), "");
  EXPECT_EQ(FlagValueWord(*FlagDefinedIn(__FILE__, "where")), "STRING");
  EXPECT_EQ(FlagValueWord(*FlagDefinedIn(__FILE__, "bytes")), "N");
  EXPECT_EQ(FlagValueWord(*FlagDefinedIn(__FILE__, "every")), "D");
}

TEST(FlagHelp, OneAlignedEntryPerFlagWithItsDefault) {
  const std::string help =
      FlagHelpLines({FlagDefinedIn(__FILE__, "verbose"), FlagDefinedIn(__FILE__, "colour"),
                     FlagDefinedIn(__FILE__, "where"), FlagDefinedIn(__FILE__, "every"),
                     FlagDefinedIn(__FILE__, "o"), FlagDefinedIn(__FILE__, "depth")});
  EXPECT_EQ(help,
            "  --verbose       say more\n"
            "  --colour        colour the table (default: true)\n"
            "  --where STRING  the folder to write to\n"
            "  --every D       how often (default: 2s)\n"
            "  -o STRING       the file to write\n"
            "  --depth N       how deep (default: $DEPTH, else 0)\n")
      << help;
}

// A flag shared by several commands: the help given for one command takes the place of its
// definition's, with the default added as to any other; the flags without one keep their own.
TEST(FlagHelp, AGivenHelpTakesTheDefinitionsPlace) {
  const std::string help =
      FlagHelpLines({FlagDefinedIn(__FILE__, "where"), FlagDefinedIn(__FILE__, "every")},
                    {{"every", "how often this command looks"}});
  EXPECT_EQ(help,
            "  --where STRING  the folder to write to\n"
            "  --every D       how often this command looks (default: 2s)\n")
      << help;
}

TEST(FlagHelp, LongHelpIsWrappedUnderItsColumn) {
  const absl::CommandLineFlag* bytes = FlagDefinedIn(__FILE__, "bytes");
  const absl::CommandLineFlag* verbose = FlagDefinedIn(__FILE__, "verbose");
  for (size_t width : {100, 60}) {
    const std::string help = FlagHelpLines({bytes, verbose}, width);
    std::vector<std::string> lines = absl::StrSplit(help, '\n', absl::SkipEmpty());
    ASSERT_GE(lines.size(), 3u) << help;
    EXPECT_EQ(lines.back(), "  --verbose  say more");
    lines.pop_back();
    std::vector<std::string> words;
    for (const std::string& line : lines) {
      EXPECT_LE(line.size(), width) << help;
      absl::string_view rest = line;
      if (&line == &lines.front()) {
        ASSERT_TRUE(absl::ConsumePrefix(&rest, "  --bytes N  ")) << help;
      } else {
        ASSERT_TRUE(absl::ConsumePrefix(&rest, "             ")) << help;
      }
      EXPECT_NE(rest[0], ' ') << help;
      words.push_back(std::string(rest));
    }
    EXPECT_EQ(absl::StrJoin(words, " "), bytes->Help() + " (default: 1024)");
  }
}

TEST(FlagHelp, ANameLongerThanTheColumnPutsItsHelpBelow) {
  const std::string help = FlagHelpLines(
      {FlagDefinedIn(__FILE__, "verbose"), FlagDefinedIn(__FILE__, "name_of_a_rather_long_flag")});
  // The help column stays at 36: the long name does not push every flag's help right.
  const std::string column(36, ' ');
  EXPECT_EQ(help, "  --verbose" + column.substr(11) + "say more\n" +
                      "  --name_of_a_rather_long_flag STRING\n" + column +
                      "a flag whose name leaves no room (default: x)\n")
      << help;
}

}  // namespace
}  // namespace nrtprof
