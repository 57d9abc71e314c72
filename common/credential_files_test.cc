#include "common/credential_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace nrtprof {
namespace {

std::string WriteFile(const std::string& name, const std::string& text, mode_t mode) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/" + name;
  FILE* f = fopen(path.c_str(), "w");
  fputs(text.c_str(), f);
  fclose(f);
  chmod(path.c_str(), mode);
  return path;
}

TEST(TokenFile, OneLineReadWithoutItsNewline) {
  const std::string path = WriteFile("good", "0123456789abcdef0123\n", 0600);
  absl::StatusOr<std::string> token = ReadTokenFile(path, "--token_file");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "0123456789abcdef0123");
  const std::string crlf = WriteFile("crlf", "0123456789abcdef0123\r\n", 0400);
  EXPECT_EQ(ReadTokenFile(crlf, "--token_file").value_or(""), "0123456789abcdef0123");
}

TEST(TokenFile, RefusesAFileOthersCanRead) {
  const std::string path = WriteFile("open", "0123456789abcdef0123\n", 0644);
  absl::StatusOr<std::string> token = ReadTokenFile(path, "--token_file");
  ASSERT_FALSE(token.ok());
  EXPECT_EQ(token.status().message(),
            "--token_file: " + path +
                " is accessible by group or others (mode 0644); a token must be private: chmod "
                "600 " +
                path);
  EXPECT_FALSE(ReadTokenFile(WriteFile("group", "0123456789abcdef0123", 0640), "x").ok());
}

TEST(TokenFile, RefusesBadContents) {
  for (const char* text : {"", "short\n", "0123456789abcdef 0123\n",
                           "0123456789abcdef0123\nsecond line\n", "0123456789abcdef\t0123"}) {
    absl::StatusOr<std::string> token =
        ReadTokenFile(WriteFile("bad", text, 0600), "NRTPROF_TOKEN_FILE");
    EXPECT_FALSE(token.ok()) << text;
    EXPECT_EQ(token.status().message().rfind("NRTPROF_TOKEN_FILE: ", 0), 0u) << token.status();
  }
  EXPECT_FALSE(ReadTokenFile(WriteFile("long", std::string(5000, 'a'), 0600), "x").ok());
  EXPECT_FALSE(ReadTokenFile("/nonexistent/token", "x").ok());
  EXPECT_FALSE(ReadTokenFile(getenv("TEST_TMPDIR"), "x").ok());  // a folder
}

TEST(PemFile, NeedsAPemBlock) {
  EXPECT_TRUE(
      ReadPemFile(WriteFile("ca.pem", "-----BEGIN CERTIFICATE-----\nAA==\n", 0644), "x").ok());
  absl::StatusOr<std::string> bad = ReadPemFile(WriteFile("bad.pem", "hello", 0644), "--tls_ca");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("is not a PEM file"), std::string::npos);
}

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("Bearer abc", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer abd", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer ab", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer abcd", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "Bearer abc"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

}  // namespace
}  // namespace nrtprof
