#include "common/spool_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace nrtprof {
namespace {

std::string TempDir() {
  std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/spoolXXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

TEST(SpoolFileTest, RecordsComeBackInOrder) {
  const std::string dir = TempDir() + "/spool";
  SpoolWriter w;
  std::string error;
  ASSERT_TRUE(w.Open(dir, SpoolFileName("cap-1", 42, 123456789), 1 << 20, &error)) << error;
  EXPECT_EQ(w.path(), dir + "/cap-1.42.123456789.spool");
  ASSERT_TRUE(w.Append("hello"));
  ASSERT_TRUE(w.Append(std::string(1000, 'x')));
  ASSERT_TRUE(w.Append(""));
  SpoolContents c;
  ASSERT_TRUE(ReadSpool(w.path(), &c, &error)) << error;
  ASSERT_EQ(c.records.size(), 3u);
  EXPECT_EQ(c.records[0], "hello");
  EXPECT_EQ(c.records[1], std::string(1000, 'x'));
  EXPECT_EQ(c.records[2], "");
  EXPECT_FALSE(c.torn_tail);
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat(w.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A second writer never takes over an existing file.
  SpoolWriter again;
  EXPECT_FALSE(again.Open(dir, SpoolFileName("cap-1", 42, 123456789), 1 << 20, &error));
  EXPECT_NE(error.find("cannot create spool file"), std::string::npos) << error;
}

// A spool folder others can write (or someone else's) would hand them the process's events:
// nothing is written there.
TEST(SpoolFileTest, AFolderOthersCanWriteIsRefused) {
  const std::string dir = TempDir() + "/spool";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  SpoolWriter w;
  std::string error;
  EXPECT_FALSE(w.Open(dir, SpoolFileName("cap-1", 42, 1), 1 << 20, &error));
  EXPECT_NE(error.find("spool folder " + dir), std::string::npos) << error;
  EXPECT_NE(error.find("is writable by everyone (mode 0777)"), std::string::npos) << error;
  EXPECT_NE(access((dir + "/" + SpoolFileName("cap-1", 42, 1)).c_str(), F_OK), 0);
}

TEST(SpoolFileTest, TheBoundRefusesWhatWouldNotFit) {
  SpoolWriter w;
  std::string error;
  ASSERT_TRUE(w.Open(TempDir(), "c.1.2.spool", 8 + 4 + 10 + 4 + 5, &error)) << error;
  EXPECT_TRUE(w.Append("0123456789"));
  EXPECT_FALSE(w.Append("012345")) << "one byte over";
  EXPECT_TRUE(w.Append("01234"));
  EXPECT_FALSE(w.Append(""));
  EXPECT_EQ(w.bytes(), 31u);
}

TEST(SpoolFileTest, TheReserveIsForWhatSaysWhatWasLost) {
  SpoolWriter w;
  std::string error;
  const uint64_t max = 4 * SpoolWriter::kReserveBytes;
  ASSERT_TRUE(w.Open(TempDir(), "c.1.2.spool", max, &error)) << error;
  const std::string big(SpoolWriter::kReserveBytes, 'b');
  EXPECT_TRUE(w.Append(big));
  EXPECT_TRUE(w.Append(big));
  EXPECT_FALSE(w.Append(big)) << "the last 64 KiB are the reserve's";
  EXPECT_TRUE(w.Append("drops: 1 batch", /*reserve=*/true));
  EXPECT_LE(w.bytes(), max);
}

TEST(SpoolFileTest, ATornLastRecordIsSaidAndTheRestKept) {
  SpoolWriter w;
  std::string error;
  ASSERT_TRUE(w.Open(TempDir(), "c.1.2.spool", 1 << 20, &error)) << error;
  ASSERT_TRUE(w.Append("first"));
  ASSERT_TRUE(w.Append("second"));
  ASSERT_EQ(truncate(w.path().c_str(), static_cast<off_t>(w.bytes() - 2)), 0);
  SpoolContents c;
  ASSERT_TRUE(ReadSpool(w.path(), &c, &error)) << error;
  ASSERT_EQ(c.records.size(), 1u);
  EXPECT_EQ(c.records[0], "first");
  EXPECT_TRUE(c.torn_tail);
}

TEST(SpoolFileTest, ACursorReadsWhatTheWriterAppendsAsItGoes) {
  const std::string dir = TempDir() + "/spool";
  SpoolWriter w;
  std::string error;
  ASSERT_TRUE(w.Open(dir, SpoolFileName("cap", 1, 2), 1 << 20, &error)) << error;
  ASSERT_TRUE(w.Append("hello"));
  SpoolCursor cursor;
  ASSERT_TRUE(cursor.Open(w.path(), 0, &error)) << error;
  std::string record;
  ASSERT_EQ(cursor.Read(&record, &error), SpoolCursor::Next::kRecord);
  EXPECT_EQ(record, "hello");
  const uint64_t after_hello = cursor.offset();
  EXPECT_EQ(after_hello, w.bytes());
  EXPECT_EQ(cursor.Read(&record, &error), SpoolCursor::Next::kEnd);
  ASSERT_TRUE(w.Append(std::string(70000, 'b')));
  ASSERT_TRUE(w.Append("c"));
  ASSERT_EQ(cursor.Read(&record, &error), SpoolCursor::Next::kRecord);
  EXPECT_EQ(record, std::string(70000, 'b'));
  ASSERT_EQ(cursor.Read(&record, &error), SpoolCursor::Next::kRecord);
  EXPECT_EQ(record, "c");
  EXPECT_EQ(cursor.Read(&record, &error), SpoolCursor::Next::kEnd);
  // From a record's offset, later: the same records again.
  SpoolCursor again;
  ASSERT_TRUE(again.Open(w.path(), after_hello, &error)) << error;
  ASSERT_EQ(again.Read(&record, &error), SpoolCursor::Next::kRecord);
  EXPECT_EQ(record.size(), 70000u);
}

TEST(SpoolFileTest, ACursorStopsBeforeAHalfWrittenRecord) {
  const std::string dir = TempDir();
  const std::string path = dir + "/torn.spool";
  // The magic, one whole record of 3 bytes, then a header for 10 bytes and only 2 of them.
  const std::string data = std::string("NRTSPOOL") + std::string("\x03\0\0\0", 4) + "abc" +
                           std::string("\x0a\0\0\0", 4) + "de";
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  close(fd);
  SpoolCursor cursor;
  std::string error, record;
  ASSERT_TRUE(cursor.Open(path, 0, &error)) << error;
  ASSERT_EQ(cursor.Read(&record, &error), SpoolCursor::Next::kRecord);
  EXPECT_EQ(record, "abc");
  EXPECT_EQ(cursor.Read(&record, &error), SpoolCursor::Next::kEnd);
  EXPECT_EQ(cursor.offset(), 15u);
  SpoolCursor not_spool;
  EXPECT_FALSE(not_spool.Open(dir + "/missing.spool", 0, &error));
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
}

TEST(SpoolFileTest, NotASpoolFileIsAnError) {
  const std::string path = TempDir() + "/x.spool";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0600);
  ASSERT_EQ(write(fd, "NRTSPOOX\0\0\0\0", 12), 12);
  close(fd);
  SpoolContents c;
  std::string error;
  EXPECT_FALSE(ReadSpool(path, &c, &error));
  EXPECT_EQ(error, path + " is not a spool file");
  // A length over the limit is refused, not allocated.
  const int fd2 = open(path.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_EQ(write(fd2, "NRTSPOOL\xff\xff\xff\xff", 12), 12);
  close(fd2);
  EXPECT_FALSE(ReadSpool(path, &c, &error));
  EXPECT_NE(error.find("over the limit"), std::string::npos) << error;
}

TEST(SpoolFileTest, NamesSayTheirCapture) {
  EXPECT_EQ(CaptureOfSpoolFile(SpoolFileName("20261202-181416", 7, 99)), "20261202-181416");
  EXPECT_EQ(CaptureOfSpoolFile("a.b.c.1.2.spool"), "a.b.c");
  EXPECT_EQ(CaptureOfSpoolFile("cap.x.2.spool"), "");
  EXPECT_EQ(CaptureOfSpoolFile("cap.1.2.spool.tmp"), "");
  EXPECT_EQ(CaptureOfSpoolFile(".1.2.spool"), "");
}

}  // namespace
}  // namespace nrtprof
