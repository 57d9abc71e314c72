#include <set>
#include <string>

#include "gtest/gtest.h"
#include "shim/backend/stack_table.h"
#include "shim/backend/string_table.h"
#include "shim/backend/utf8.h"

namespace nrtprof::shim {
namespace {

TEST(Utf8Test, ValidTextIsKeptAndInvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(SanitizeUtf8("aten::mul"), "aten::mul");
  EXPECT_EQ(SanitizeUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(SanitizeUtf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(SanitizeUtf8("\xC3"), "\xEF\xBF\xBD") << "a cut sequence";
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD") << "an overlong form";
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD")
      << "a surrogate";
  EXPECT_EQ(SanitizeUtf8(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Utf8Test, ANameCutInsideACharacterLosesOnlyThatCharacter) {
  EXPECT_EQ(TrimIncompleteUtf8Tail("ab\xE2\x82"), "ab");
  EXPECT_EQ(TrimIncompleteUtf8Tail("ab\xE2\x82\xAC"), "ab\xE2\x82\xAC");
  EXPECT_EQ(TrimIncompleteUtf8Tail("ab\xF0"), "ab");
  EXPECT_EQ(TrimIncompleteUtf8Tail("abc"), "abc");
  EXPECT_EQ(TrimIncompleteUtf8Tail(""), "");
}

TEST(StringTableTest, EachDistinctStringGetsOneIdFromOne) {
  StringTable table;
  EXPECT_EQ(table.Intern("nrt_execute"), 1u);
  EXPECT_EQ(table.Intern("aten::mul"), 2u);
  EXPECT_EQ(table.Intern("nrt_execute"), 1u);
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.Get(2), "aten::mul");
  EXPECT_EQ(table.Get(0), "");
  EXPECT_EQ(table.Get(99), "");
}

TEST(StringTableTest, InvalidUtf8IsStoredSanitized) {
  StringTable table;
  const uint32_t a = table.Intern("x\xFF");
  EXPECT_EQ(table.Get(a), "x\xEF\xBF\xBD");
  EXPECT_EQ(table.Intern("x\xEF\xBF\xBD"), a) << "the same string once sanitized";
}

TEST(StringTableTest, PastTheBoundNewStringsShareOneOverflowId) {
  StringTable table(4);
  const uint32_t a = table.Intern("a"), b = table.Intern("b"), c = table.Intern("c");
  const uint32_t d = table.Intern("d"), e = table.Intern("e");
  EXPECT_EQ(std::set<uint32_t>({a, b, c}).size(), 3u);
  EXPECT_EQ(d, e);
  EXPECT_EQ(table.Get(d), StringTable::kOverflowString);
  EXPECT_EQ(table.Intern("a"), a) << "known strings keep their ids";
}

TEST(StackTableTest, StacksAndFramesAreInternedAndEachAddressSymbolizedOnce) {
  StringTable strings;
  int symbolized = 0;
  StackTable stacks(&strings, [&](uintptr_t pc) {
    ++symbolized;
    return "f" + std::to_string(pc) + " (m+0x" + std::to_string(pc) + ")";
  });
  const uintptr_t s1[] = {10, 20, 30};
  const uintptr_t s2[] = {10, 20, 40};
  const uint32_t a = stacks.Intern(s1, 3);
  const uint32_t b = stacks.Intern(s2, 3);
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  EXPECT_EQ(stacks.Intern(s1, 3), a);
  EXPECT_EQ(stacks.Intern(s1, 2), 3u) << "a prefix is another stack";
  EXPECT_EQ(stacks.Intern(s1, 0), 0u);
  EXPECT_EQ(symbolized, 4) << "10, 20, 30, 40";
  ASSERT_EQ(stacks.FrameIids(a).size(), 3u);
  EXPECT_EQ(strings.Get(stacks.FrameIids(a)[0]), "f10 (m+0x10)");
  EXPECT_EQ(stacks.FrameIids(b)[0], stacks.FrameIids(a)[0]);
  EXPECT_TRUE(stacks.FrameIids(0).empty());
}

}  // namespace
}  // namespace nrtprof::shim
