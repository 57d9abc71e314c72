#include "common/json_text.h"

#include <string>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace nrtprof {
namespace {

// What a JSON reader (protobuf's) makes of the literal: the text a user of the file sees.
std::string ReadBack(const std::string& literal) {
  google::protobuf::Struct doc;
  const auto status = google::protobuf::util::JsonStringToMessage("{\"k\":" + literal + "}", &doc);
  EXPECT_TRUE(status.ok()) << literal << ": " << status.ToString();
  return doc.fields().at("k").string_value();
}

TEST(JsonStringTest, QuoteBackslashAndControlCharactersAreEscaped) {
  EXPECT_EQ(JsonString("aten::mul"), "\"aten::mul\"");
  EXPECT_EQ(JsonString("say \"hi\" C:\\tmp"), R"("say \"hi\" C:\\tmp")");
  EXPECT_EQ(JsonString(std::string("\b\f\n\r\t\x1f\x01", 7)), R"("\b\f\n\r\t\u001f\u0001")");
  EXPECT_EQ(JsonString(std::string("a\0b", 3)), R"("a\u0000b")");
  EXPECT_EQ(ReadBack(JsonString(std::string("a\0b\n", 4))), std::string("a\0b\n", 4));
}

TEST(JsonStringTest, SlashAndDelAreKeptAsTheyAre) {
  EXPECT_EQ(JsonString("/usr/bin/python3\x7f"), "\"/usr/bin/python3\x7f\"");
}

TEST(JsonStringTest, WellFormedUtf8IsKeptUpToFourByteSequences) {
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC \xE5\xBC\xB5\xE9\x87\x8F \xF0\x9F\x99\x82";
  EXPECT_EQ(JsonString(text), "\"" + text + "\"");
  EXPECT_EQ(ReadBack(JsonString(text)), text);
  // The last code point there is: U+10FFFF.
  EXPECT_EQ(JsonString("\xF4\x8F\xBF\xBF"), "\"\xF4\x8F\xBF\xBF\"");
}

TEST(JsonStringTest, EachByteThatIsNotUtf8BecomesOneReplacementCharacter) {
  EXPECT_EQ(JsonString("a\xFF" "b"), R"("a\ufffdb")");
  EXPECT_EQ(JsonString("ab\xE2\x82"), R"("ab\ufffd\ufffd")") << "a sequence cut short";
  EXPECT_EQ(JsonString("\x80"), R"("\ufffd")") << "a stray continuation byte";
  EXPECT_EQ(JsonString("\xC0\xAF"), R"("\ufffd\ufffd")") << "'/' in an overlong form";
  EXPECT_EQ(JsonString("\xE0\x80\xAF"), R"("\ufffd\ufffd\ufffd")") << "overlong, 3 bytes";
  EXPECT_EQ(JsonString("\xF0\x80\x80\xAF"), R"("\ufffd\ufffd\ufffd\ufffd")") << "overlong, 4";
  EXPECT_EQ(JsonString("\xED\xA0\x80"), R"("\ufffd\ufffd\ufffd")") << "a UTF-16 surrogate";
  EXPECT_EQ(JsonString("\xF4\x90\x80\x80"), R"("\ufffd\ufffd\ufffd\ufffd")") << "> U+10FFFF";
  EXPECT_EQ(ReadBack(JsonString("a\xFF" "b")), "a\xEF\xBF\xBD" "b");
}

TEST(JsonStringTest, EveryByteAndPairOfBytesGivesValidJson) {
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; b += 17) {
      const std::string s = {static_cast<char>(a), static_cast<char>(b), 'z'};
      std::string json = "{\"k\":";
      AppendJsonString(s, &json);
      json += "}";
      google::protobuf::Struct parsed;
      ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok())
          << "bytes " << a << " " << b << ": " << json;
    }
  }
}

TEST(AppendJsonStringTest, AppendsAfterWhatIsThere) {
  std::string out = "[";
  AppendJsonString("a", &out);
  out += ",";
  AppendJsonString("", &out);
  EXPECT_EQ(out, R"(["a","")");
}

TEST(Utf8SequenceLengthTest, SaysHowLongTheCharacterAtTheStartIs) {
  EXPECT_EQ(Utf8SequenceLength(""), 0u);
  EXPECT_EQ(Utf8SequenceLength("a\xC3\xA9"), 1u);
  EXPECT_EQ(Utf8SequenceLength("\xC3\xA9" "a"), 2u);
  EXPECT_EQ(Utf8SequenceLength("\xE2\x82\xAC"), 3u);
  EXPECT_EQ(Utf8SequenceLength("\xF0\x9F\x99\x82"), 4u);
  EXPECT_EQ(Utf8SequenceLength("\xF0\x9F\x99"), 0u);
  EXPECT_EQ(Utf8SequenceLength("\xC1\xBF"), 0u) << "overlong";
  EXPECT_EQ(Utf8SequenceLength("\xED\xBF\xBF"), 0u) << "surrogate";
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9"));
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_FALSE(IsValidUtf8("caf\xC3"));
}

}  // namespace
}  // namespace nrtprof
