#include "shim/json_reader.h"

#include <string>

#include "gtest/gtest.h"

namespace nrtprof::shim {
namespace {

JsonValue Parse(const std::string& text) {
  JsonValue v;
  std::string error;
  EXPECT_TRUE(ParseJson(text, &v, &error)) << error << " in " << text;
  return v;
}

TEST(JsonReaderTest, ReadsEveryKindOfValue) {
  const JsonValue v = Parse(
      R"( {"a": [1, -2, 3.5, true, false, null, "s"], "o": {"k": "v"}, "e": [], "n": {}} )");
  ASSERT_TRUE(v.is_object());
  const JsonValue* a = v.Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->items().size(), 7u);
  EXPECT_EQ(a->items()[0].AsUint64(), 1u);
  EXPECT_EQ(a->items()[1].AsInt64(), -2);
  EXPECT_EQ(a->items()[1].AsUint64(), 0u);
  EXPECT_DOUBLE_EQ(a->items()[2].AsDouble(), 3.5);
  EXPECT_EQ(a->items()[2].AsUint64(), 3u);
  EXPECT_TRUE(a->items()[3].AsBool());
  EXPECT_FALSE(a->items()[4].AsBool());
  EXPECT_EQ(a->items()[5].type(), JsonValue::Type::kNull);
  EXPECT_EQ(a->items()[6].AsString(), "s");
  EXPECT_EQ(v.Find("o")->Find("k")->AsString(), "v");
  EXPECT_TRUE(v.Find("e")->items().empty());
  EXPECT_EQ(v.Find("missing"), nullptr);
  EXPECT_EQ(v.Find("o")->AsString(), "");
}

TEST(JsonReaderTest, SixtyFourBitIntegersStayExact) {
  // 2^53 + 1 and UINT64_MAX: a double would round both.
  const JsonValue v = Parse(R"([9007199254740993, 18446744073709551615, -9223372036854775808])");
  EXPECT_EQ(v.items()[0].AsUint64(), 9007199254740993ull);
  EXPECT_EQ(v.items()[1].AsUint64(), 18446744073709551615ull);
  EXPECT_EQ(v.items()[2].AsInt64(), INT64_MIN);
}

TEST(JsonReaderTest, EscapesDecode) {
  EXPECT_EQ(Parse(R"("a\"b\\c\/d\n\t\u0041")").AsString(), "a\"b\\c/d\n\tA");
  EXPECT_EQ(Parse(R"("\u20ac \ud83d\ude00")").AsString(), "\xE2\x82\xAC \xF0\x9F\x98\x80");
}

TEST(JsonReaderTest, ByteEscapesOfTheRuntimeRebuildUtf8) {
  // The runtime escapes "café" byte by byte: \u00c3\u00a9 are the two bytes of é.
  EXPECT_EQ(Parse(R"("caf\u00c3\u00a9")").AsString(), "caf\xC3\xA9");
  // A standard writer's \u00e9 is the code point é.
  EXPECT_EQ(Parse(R"("caf\u00e9")").AsString(), "caf\xC3\xA9");
}

TEST(JsonReaderTest, MalformedInputIsAnErrorNeverACrash) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "\"open", "tru", "01x", "[1] 2",
                          "{\"a\":}", "\"\\x\"", "\"\\u12\"", "-", "1.", "1e"}) {
    JsonValue v;
    std::string error;
    EXPECT_FALSE(ParseJson(bad, &v, &error)) << bad;
    EXPECT_FALSE(error.empty());
  }
  std::string deep(200, '[');
  deep += std::string(200, ']');
  JsonValue v;
  std::string error;
  EXPECT_FALSE(ParseJson(deep, &v, &error));
  EXPECT_NE(error.find("deeply"), std::string::npos);
}

}  // namespace
}  // namespace nrtprof::shim
