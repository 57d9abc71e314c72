// The checks must refuse what a reader would: otherwise the fuzzer's verdicts mean nothing.
#include "tests/fuzz/output_checks.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace nrtprof::fuzz {
namespace {

TEST(CheckUtf8Test, RefusesMalformedSequences) {
  EXPECT_TRUE(CheckUtf8("plain, \xc3\xa9t\xc3\xa9, \xf0\x9f\x98\x80").ok());
  EXPECT_TRUE(CheckUtf8(std::string("nul\0inside", 10)).ok());
  for (const char* bad : {"\x80", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                          "\xff"}) {
    EXPECT_FALSE(CheckUtf8(bad).ok()) << bad;
  }
}

TEST(CheckJsonTest, AcceptsJsonAndRefusesTheRest) {
  EXPECT_TRUE(CheckJson(R"({"a":[1,-2.5e3,true,false,null,"x\u0000\n"],"b":{}})").ok());
  EXPECT_TRUE(CheckJson(" [] \n").ok());
  for (const std::string& bad :
       {std::string("{\"a\":1,}"), std::string("[1 2]"), std::string("\"tab\there\""),
        std::string("\"\\x\""), std::string("[01]"), std::string("{} {}"), std::string("\"\xff\""),
        std::string("[\"a\0\"]", 6), std::string("")}) {
    EXPECT_FALSE(CheckJson(bad).ok()) << bad;
  }
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

constexpr char kTable[] =
    "----  --\nName  X\n----  --\na     1\nb     2\n----  --\nSelf CPU time total: 1\n"
    "Self NEURON time total: 2\nEvents dropped: 0\n";

TEST(CheckCaptureFolderTest, NamesTheFileThatDoesNotReadBack) {
  const std::string dir = std::string(getenv("TEST_TMPDIR")) + "/capture";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  Write(dir + "/summary.txt", kTable);
  Write(dir + "/summary.csv", "name,a,b,c,d,e,f\n\"a,\"\"x\"\"\",1,2,3,4,5,6\nb,1,2,3,4,5,6\n");
  Write(dir + "/trace.json", "{\"traceEvents\":[]}");
  Write(dir + "/model_0123456789abcdef_nc0.ntff.json", "[]");
  Write(dir + "/model_0123456789abcdef.neff", "bytes");
  EXPECT_TRUE(CheckCaptureFolder(dir, 2).ok()) << CheckCaptureFolder(dir, 2);

  // A row whose name holds a newline is two lines of the table.
  EXPECT_FALSE(CheckCaptureFolder(dir, 3).ok());
  Write(dir + "/summary.txt",
        "----  --\nName  X\n----  --\na\nx   1\nb     2\n----  --\nSelf CPU time total: 1\n"
        "Self NEURON time total: 2\nEvents dropped: 0\n");
  EXPECT_NE(CheckCaptureFolder(dir, 2).message().find("summary.txt"), absl::string_view::npos);
  Write(dir + "/summary.txt", kTable);

  Write(dir + "/trace.json", "{\"traceEvents\":[}");
  EXPECT_NE(CheckCaptureFolder(dir, 2).message().find("trace.json: not JSON"),
            absl::string_view::npos);
  Write(dir + "/trace.json", "{}");

  Write(dir + "/summary.csv", "name,a,b,c,d,e,f\na\nb,1,2,3,4,5,6\n");
  EXPECT_NE(CheckCaptureFolder(dir, 2).message().find("summary.csv"), absl::string_view::npos);
  Write(dir + "/summary.csv", "name,a,b,c,d,e,f\na,1,2,3,4,5,6\nb,1,2,3,4,5,6\n");
  EXPECT_TRUE(CheckCaptureFolder(dir, 2).ok());

  Write(dir + "/trace.pftrace", "\x0a\x05garbage");
  EXPECT_NE(CheckCaptureFolder(dir, 2).message().find("trace.pftrace"), absl::string_view::npos);
  ASSERT_EQ(remove((dir + "/trace.pftrace").c_str()), 0);

  Write(dir + "/..evil", "x");
  EXPECT_NE(CheckCaptureFolder(dir, 2).message().find("no writer names so"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace nrtprof::fuzz
