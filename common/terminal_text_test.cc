#include "common/terminal_text.h"

#include <string>

#include "gtest/gtest.h"

namespace nrtprof {
namespace {

TEST(TerminalTextTest, PrintableTextIsKeptAsItIs) {
  EXPECT_EQ(TerminalText("/usr/bin/python3 train.py --lr=0.1 \"x\" C:\\tmp ~"),
            "/usr/bin/python3 train.py --lr=0.1 \"x\" C:\\tmp ~");
  const std::string utf8 = "caf\xC3\xA9 \xE2\x82\xAC \xE5\xBC\xB5 \xF0\x9F\x99\x82 \xC2\xA0";
  EXPECT_EQ(TerminalText(utf8), utf8);
  EXPECT_EQ(TerminalText(""), "");
}

TEST(TerminalTextTest, TerminalEscapeSequencesBecomeVisible) {
  EXPECT_EQ(TerminalText("job\x1b]0;pwned\x07"), "job\\x1b]0;pwned\\x07");
  EXPECT_EQ(TerminalText("\x1b[2J\x1b[H"), "\\x1b[2J\\x1b[H");
  // U+009B, the one-character CSI of C1, is a control too.
  EXPECT_EQ(TerminalText("a\xC2\x9B" "2Jb\xC2\x80\xC2\x9F"), "a\\u009b2Jb\\u0080\\u009f");
}

TEST(TerminalTextTest, EveryControlCharacterStaysOnTheLine) {
  EXPECT_EQ(TerminalText(std::string("two\nlines\r\tnul\0del\x7f\x01\x1f", 21)),
            "two\\nlines\\r\\tnul\\0del\\x7f\\x01\\x1f");
  for (int c = 0; c < 0x20; ++c) {
    const std::string shown = TerminalText(std::string(1, static_cast<char>(c)));
    EXPECT_EQ(shown[0], '\\') << c;
    for (char k : shown) EXPECT_GE(k, 0x20) << c;
  }
}

TEST(TerminalTextTest, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  EXPECT_EQ(TerminalText("bad\xff" "x"), "bad\xef\xbf\xbd" "x");
  EXPECT_EQ(TerminalText("\xC3"), "\xef\xbf\xbd") << "a cut sequence";
  EXPECT_EQ(TerminalText("\xC0\xAF"), "\xef\xbf\xbd\xef\xbf\xbd") << "an overlong form";
  // A lone 0x9b byte (8-bit CSI) is not UTF-8: replaced, never passed through.
  EXPECT_EQ(TerminalText("\x9b" "2J"), "\xef\xbf\xbd" "2J");
}

TEST(TerminalTextTest, ClippedAtACharacterBoundary) {
  EXPECT_EQ(TerminalTextClipped("short", 8), "short");
  EXPECT_EQ(TerminalTextClipped("abcdefghij", 8), "abcde...");
  std::string accents;
  for (int i = 0; i < 5; ++i) accents += "\xC3\xA9";
  // 8 - 3 = 5 bytes would end inside the third 'é': cut after the second.
  EXPECT_EQ(TerminalTextClipped(accents, 8), "\xC3\xA9\xC3\xA9...");
  // The escapes count in the width: what is printed is what is measured.
  EXPECT_EQ(TerminalTextClipped("\x1b\x1b\x1b", 8), "\\x1b\\...");
}

}  // namespace
}  // namespace nrtprof
