#include "trace/atomic_file.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

std::string MakeTempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  return names;
}

bool RunningAsRoot() { return geteuid() == 0; }

TEST(AtomicFileTest, OldFileStaysUntilCommit) {
  std::string dir = MakeTempDir("commit");
  std::string path = dir + "/trace.json";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());

  AtomicFile file;
  ASSERT_TRUE(file.Open(path).ok());
  ASSERT_TRUE(file.Append("new ").ok());
  ASSERT_TRUE(file.Append("contents").ok());
  EXPECT_EQ(ReadFile(path), "old");    // readers still see the old, complete file
  EXPECT_EQ(ListDir(dir).size(), 2u);  // the file and one temporary
  ASSERT_TRUE(file.Commit().ok());
  EXPECT_EQ(ReadFile(path), "new contents");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"trace.json"});
}

TEST(AtomicFileTest, AbandonedWriterLeavesOldFileAndNoTemporary) {
  std::string dir = MakeTempDir("abandon");
  std::string path = dir + "/trace.pftrace";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  {
    AtomicFile file;
    ASSERT_TRUE(file.Open(path).ok());
    ASSERT_TRUE(file.Append("half a trace").ok());
  }
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"trace.pftrace"});
}

TEST(AtomicFileTest, LargeWritesCrossTheBufferIntact) {
  std::string dir = MakeTempDir("large");
  std::string path = dir + "/big";
  std::string expected;
  AtomicFile file;
  ASSERT_TRUE(file.Open(path).ok());
  for (int i = 0; i < 3000; ++i) {
    std::string chunk(1000 + i, static_cast<char>('a' + i % 26));
    expected += chunk;
    ASSERT_TRUE(file.Append(chunk).ok());
  }
  std::string huge(3 << 20, 'z');  // bigger than the buffer: written straight through
  expected += huge;
  ASSERT_TRUE(file.Append(huge).ok());
  ASSERT_TRUE(file.Append("end").ok());
  expected += "end";
  ASSERT_TRUE(file.Commit().ok());
  EXPECT_EQ(ReadFile(path), expected);
}

// A file that outgrows the buffer is written straight to the disk in whole blocks, its end
// through the page cache: whatever its length and however it was appended, it reads back whole.
TEST(AtomicFileTest, FilesOfEveryLengthAroundTheBlocksReadBackWhole) {
  const std::string dir = MakeTempDir("lengths");
  for (size_t length : {size_t{1} << 20, (size_t{1} << 20) + 1, size_t{2} << 20,
                        (size_t{2} << 20) + 4095, (size_t{5} << 20) + 4097}) {
    for (size_t piece : {size_t{4096}, size_t{1000}, size_t{3} << 20}) {
      const std::string path = absl::StrCat(dir, "/f", length, "_", piece);
      std::string expected;
      for (size_t i = 0; i < length; ++i) expected.push_back(static_cast<char>('a' + i * 7 % 26));
      AtomicFile file;
      ASSERT_TRUE(file.Open(path).ok());
      for (size_t at = 0; at < length; at += piece) {
        ASSERT_TRUE(file.Append(absl::string_view(expected).substr(at, piece)).ok());
      }
      ASSERT_TRUE(file.Commit().ok());
      EXPECT_TRUE(ReadFile(path) == expected) << length << " bytes in pieces of " << piece;
    }
  }
}

// The text of a large file as a writer with a buffer of its own hands it over: 2 MiB at a time
// from one aligned buffer that is written over at once with the next piece, while earlier blocks
// may still be on their way to the disk. Byte i of the file is Pattern(i), so a block lost, repeated, reordered
// or taken from the buffer after it was reused shows.
char Pattern(size_t i) { return static_cast<char>('a' + (i / 4096 * 31 + i * 7) % 26); }

absl::Status AppendFromReusedBuffer(AtomicFile* file, size_t length) {
  constexpr size_t kPiece = 2 << 20;
  void* p = nullptr;
  if (posix_memalign(&p, 4096, kPiece) != 0) return absl::ResourceExhaustedError("no memory");
  std::unique_ptr<char, decltype(&free)> buffer(static_cast<char*>(p), &free);
  for (size_t at = 0; at < length; at += kPiece) {
    const size_t n = std::min(kPiece, length - at);
    for (size_t i = 0; i < n; ++i) buffer.get()[i] = Pattern(at + i);
    absl::Status s = file->Append(absl::string_view(buffer.get(), n));
    memset(buffer.get(), '#', kPiece);  // the caller's next piece
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

TEST(AtomicFileTest, ManyBlocksWrittenWhileTheNextIsFilledReadBackWhole) {
  const std::string dir = MakeTempDir("overlap");
  const std::string path = dir + "/trace.json";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  const size_t length = (41 << 20) + 12345;  // many blocks, and a partial one at the end
  AtomicFile file;
  ASSERT_TRUE(file.Open(path).ok());
  ASSERT_TRUE(AppendFromReusedBuffer(&file, length).ok());
  ASSERT_TRUE(file.Append("]}\n").ok());
  EXPECT_EQ(ReadFile(path), "old");
  ASSERT_TRUE(file.Commit().ok());
  std::string expected(length, ' ');
  for (size_t i = 0; i < length; ++i) expected[i] = Pattern(i);
  expected += "]}\n";
  const std::string got = ReadFile(path);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected) << "first difference at byte "
                               << std::mismatch(got.begin(), got.end(), expected.begin()).first -
                                      got.begin();
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"trace.json"});
}

TEST(AtomicFileTest, AbandonedWhileBlocksAreBeingWrittenLeavesOldFileAndNoTemporary) {
  const std::string dir = MakeTempDir("overlap-abandon");
  const std::string path = dir + "/trace.json";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  {
    AtomicFile file;
    ASSERT_TRUE(file.Open(path).ok());
    ASSERT_TRUE(AppendFromReusedBuffer(&file, 17 << 20).ok());
  }
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"trace.json"});
}

// `text` written in place as json_out.h writes it: piece after piece (of the sizes given, in
// turn) in the space the file lends, handed over at the first piece's end past `full`, or when
// the next piece does not fit.
absl::Status WriteInPlace(AtomicFile* file, absl::string_view text,
                          const std::vector<size_t>& pieces) {
  AtomicFile::Space space{nullptr, nullptr, nullptr};
  char* at = nullptr;
  for (size_t i = 0; !text.empty(); ++i) {
    const size_t n = std::min(pieces[i % pieces.size()], text.size());
    if (at == nullptr || static_cast<size_t>(space.end - at) < n) {
      if (at != nullptr) {
        absl::Status s = file->EndWrite(at);
        if (!s.ok()) return s;
      }
      space = file->BeginWrite(n);
      if (static_cast<size_t>(space.end - space.begin) < n) {
        return absl::InternalError(absl::StrCat("lent ", space.end - space.begin, " bytes of ", n));
      }
      at = space.begin;
    }
    memcpy(at, text.data(), n);
    at += n;
    text.remove_prefix(n);
    if (at >= space.full) {
      absl::Status s = file->EndWrite(at);
      if (!s.ok()) return s;
      at = nullptr;
    }
  }
  return at != nullptr ? file->EndWrite(at) : absl::OkStatus();
}

std::string PatternText(size_t length) {
  std::string text(length, ' ');
  for (size_t i = 0; i < length; ++i) text[i] = Pattern(i);
  return text;
}

// Where got and want first differ, for a failure's message.
size_t FirstDifference(const std::string& got, const std::string& want) {
  const size_t n = std::min(got.size(), want.size());
  return static_cast<size_t>(std::mismatch(got.begin(), got.begin() + n, want.begin()).first -
                             got.begin());
}

// Pieces of a trace's entries' sizes, many of them crossing the end of a block (1 MiB, 4 KiB
// aligned), and files that end anywhere around a block.
TEST(AtomicFileTest, TextWrittenInPlaceReadsBackWhole) {
  const std::string dir = MakeTempDir("in-place");
  for (size_t length : {size_t{100}, (size_t{1} << 20) - 1, size_t{1} << 20,
                        (size_t{1} << 20) + 4097, (size_t{23} << 20) + 12345}) {
    for (const std::vector<size_t>& pieces :
         {std::vector<size_t>{187, 203, 311, 1, 4096}, std::vector<size_t>{4096},
          std::vector<size_t>{65536, 7}}) {
      const std::string path = absl::StrCat(dir, "/f", length, "_", pieces[0]);
      const std::string want = PatternText(length);
      AtomicFile file;
      ASSERT_TRUE(file.Open(path).ok());
      ASSERT_TRUE(WriteInPlace(&file, want, pieces).ok());
      ASSERT_TRUE(file.Commit().ok());
      const std::string got = ReadFile(path);
      ASSERT_EQ(got.size(), want.size()) << length << " bytes in pieces of " << pieces[0];
      EXPECT_TRUE(got == want) << length << " bytes in pieces of " << pieces[0]
                               << ": first difference at byte " << FirstDifference(got, want);
    }
  }
}

// Append and writes in place, one after the other, keep the file's order.
TEST(AtomicFileTest, AppendsAndWritesInPlaceMixReadBackInOrder) {
  const std::string path = MakeTempDir("mixed") + "/trace.json";
  const std::string want = PatternText((size_t{9} << 20) + 333);
  AtomicFile file;
  ASSERT_TRUE(file.Open(path).ok());
  size_t at = 0;
  for (int i = 0; at < want.size(); ++i) {
    const size_t n = std::min<size_t>(i % 3 == 0 ? 5000 : 700000, want.size() - at);
    const absl::string_view part = absl::string_view(want).substr(at, n);
    if (i % 2 == 0) {
      ASSERT_TRUE(file.Append(part).ok());
    } else {
      ASSERT_TRUE(WriteInPlace(&file, part, {129, 4000}).ok());
    }
    at += n;
  }
  ASSERT_TRUE(file.Commit().ok());
  const std::string got = ReadFile(path);
  EXPECT_TRUE(got == want) << "first difference at byte " << FirstDifference(got, want)
                           << " of " << got.size();
}

// A piece larger than a block (a name of megabytes), at the file's start and once it goes
// straight to the disk.
TEST(AtomicFileTest, PieceLargerThanABlockWrittenInPlaceReadsBackWhole) {
  const std::string path = MakeTempDir("in-place-huge") + "/trace.json";
  const std::string want = PatternText((size_t{10} << 20) + 99);
  const size_t huge = (size_t{3} << 20) + 5;
  AtomicFile file;
  ASSERT_TRUE(file.Open(path).ok());
  absl::string_view text(want);
  ASSERT_TRUE(WriteInPlace(&file, text.substr(0, huge), {huge}).ok());
  ASSERT_TRUE(WriteInPlace(&file, text.substr(huge, 1 << 20), {100}).ok());
  ASSERT_TRUE(WriteInPlace(&file, text.substr(huge + (1 << 20), huge), {huge}).ok());
  ASSERT_TRUE(WriteInPlace(&file, text.substr(2 * huge + (1 << 20)), {250}).ok());
  ASSERT_TRUE(file.Commit().ok());
  const std::string got = ReadFile(path);
  EXPECT_TRUE(got == want) << "first difference at byte " << FirstDifference(got, want)
                           << " of " << got.size();
}

// Where O_DIRECT is not to be had (set_direct(false) does as such a filesystem does), the whole
// file goes through the page cache, the same bytes.
TEST(AtomicFileTest, WithoutDirectWritesTheSameBytes) {
  const std::string dir = MakeTempDir("no-direct");
  const std::string want = PatternText((size_t{7} << 20) + 4097);
  {
    AtomicFile file;
    file.set_direct(false);
    ASSERT_TRUE(file.Open(dir + "/in-place").ok());
    ASSERT_TRUE(WriteInPlace(&file, want, {187, 203, 65536}).ok());
    ASSERT_TRUE(file.Commit().ok());
  }
  {
    AtomicFile file;
    file.set_direct(false);
    ASSERT_TRUE(file.Open(dir + "/appended").ok());
    ASSERT_TRUE(AppendFromReusedBuffer(&file, want.size()).ok());
    ASSERT_TRUE(file.Commit().ok());
  }
  for (const char* name : {"/in-place", "/appended"}) {
    const std::string got = ReadFile(dir + name);
    EXPECT_TRUE(got == want) << name << ": first difference at byte "
                             << FirstDifference(got, want) << " of " << got.size();
  }
}

// tmpfs refuses O_DIRECT before Linux 6.6 and takes it since: either way the same bytes.
TEST(AtomicFileTest, TextWrittenInPlaceOnTmpfsReadsBackWhole) {
  struct stat st;
  if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode) || access("/dev/shm", W_OK) != 0) {
    GTEST_SKIP() << "no /dev/shm to write";
  }
  const std::string path = absl::StrCat("/dev/shm/atomic_file_test.", getpid());
  const std::string want = PatternText((size_t{6} << 20) + 1234);
  AtomicFile file;
  ASSERT_TRUE(file.Open(path).ok());
  ASSERT_TRUE(WriteInPlace(&file, want, {187, 3000}).ok());
  ASSERT_TRUE(file.Commit().ok());
  const std::string got = ReadFile(path);
  unlink(path.c_str());
  EXPECT_TRUE(got == want) << "first difference at byte " << FirstDifference(got, want) << " of "
                           << got.size();
}

// What a write and the Commit after it said, the file limited to `limit` bytes (the file-size
// limit, which binds root too, stands in for a disk that fills up; SIGXFSZ ignored, so that the
// write gets EFBIG instead of the signal).
struct LimitedWrite {
  absl::Status first;   // the write's error, else Commit's
  absl::Status commit;
};
LimitedWrite WriteUnderSizeLimit(const std::string& path, rlim_t limit,
                                 const std::function<absl::Status(AtomicFile*)>& write) {
  LimitedWrite result;
  rlimit old_limit;
  if (getrlimit(RLIMIT_FSIZE, &old_limit) != 0) {
    result.first = result.commit = absl::InternalError("getrlimit failed");
    ADD_FAILURE() << result.first;
    return result;
  }
  rlimit small = old_limit;
  small.rlim_cur = limit;
  sighandler_t old_handler = signal(SIGXFSZ, SIG_IGN);
  if (setrlimit(RLIMIT_FSIZE, &small) != 0) {
    signal(SIGXFSZ, old_handler);
    result.first = result.commit = absl::InternalError("setrlimit failed");
    ADD_FAILURE() << result.first;
    return result;
  }
  {
    AtomicFile file;
    result.first = file.Open(path);
    if (result.first.ok()) result.first = write(&file);
    result.commit = file.Commit();
    if (result.first.ok()) result.first = result.commit;
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  signal(SIGXFSZ, old_handler);
  return result;
}

// A disk that fills up while text is written in place: the error names the file, Commit
// reports it, and nothing changes.
TEST(AtomicFileTest, WriteErrorWhileWritingInPlaceIsReportedAndChangesNothing) {
  std::string dir = MakeTempDir("full-in-place");
  std::string path = dir + "/trace.json";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  const LimitedWrite w = WriteUnderSizeLimit(path, 6 << 20, [&](AtomicFile* file) {
    return WriteInPlace(file, PatternText(20 << 20), {187, 203});
  });
  const absl::Status& s = w.first;
  EXPECT_FALSE(w.commit.ok()) << "Commit must report the earlier write error";
  EXPECT_EQ(w.commit.message(), s.message()) << "the first error, every time";
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "File too large")) << s;
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"trace.json"});
}

TEST(AtomicFileTest, WritingInPlaceWithoutAFileIsReportedNotFatal) {
  AtomicFile file;
  EXPECT_EQ(file.EndWrite(nullptr).code(), absl::StatusCode::kFailedPrecondition);
  AtomicFile::Space space = file.BeginWrite(10);
  ASSERT_GE(space.end - space.begin, 10);
  memcpy(space.begin, "0123456789", 10);
  EXPECT_EQ(file.EndWrite(space.begin + 10).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(AtomicFileTest, CannotWriteSaysWhyBeforeAnythingIsWritten) {
  const std::string dir = MakeTempDir("cannot-write");
  EXPECT_EQ(CannotWrite(dir + "/out.html"), "");
  EXPECT_EQ(CannotWrite(dir + "/no/such/folder/out.html"), "No such file or directory");
  EXPECT_EQ(CannotWrite(dir), "Is a directory");
  std::ofstream(dir + "/plain") << "x";
  EXPECT_EQ(CannotWrite(dir + "/plain/out.html"), "Not a directory");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"plain"}) << "nothing written";
}

TEST(AtomicFileTest, MissingFolderIsAClearError) {
  std::string path = MakeTempDir("missing") + "/no/such/folder/trace.json";
  AtomicFile file;
  absl::Status s = file.Open(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "No such file or directory")) << s;
  EXPECT_FALSE(WriteFileAtomically(path, "x").ok());
}

TEST(AtomicFileTest, ReadOnlyFolderIsAClearErrorAndChangesNothing) {
  if (RunningAsRoot()) GTEST_SKIP() << "root ignores folder permissions";
  std::string dir = MakeTempDir("readonly");
  std::string path = dir + "/trace.json";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  ASSERT_EQ(chmod(dir.c_str(), 0555), 0);
  absl::Status s = WriteFileAtomically(path, "new");
  chmod(dir.c_str(), 0755);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"trace.json"});
}

// A disk that fills up mid-write, simulated with the file-size limit (which binds root too).
TEST(AtomicFileTest, WriteErrorIsReportedWithThePathAndChangesNothing) {
  std::string dir = MakeTempDir("full");
  std::string path = dir + "/trace.pftrace";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  const LimitedWrite w = WriteUnderSizeLimit(path, 64 << 10, [&](AtomicFile* file) {
    const std::string chunk(100 << 10, 'x');
    absl::Status s;
    for (int i = 0; i < 30 && s.ok(); ++i) s = file->Append(chunk);
    return s;
  });
  const absl::Status& s = w.first;
  EXPECT_FALSE(w.commit.ok()) << "Commit must report the earlier write error";
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "cannot write")) << s;
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"trace.pftrace"});
}

// The same, many blocks into the file: the write that fails is one of those made while the
// caller goes on appending, and still Commit reports it and nothing changes.
TEST(AtomicFileTest, WriteErrorOfABlockWrittenMeanwhileIsReportedAndChangesNothing) {
  std::string dir = MakeTempDir("full-overlap");
  std::string path = dir + "/trace.json";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  const LimitedWrite w = WriteUnderSizeLimit(path, 6 << 20, [&](AtomicFile* file) {
    return AppendFromReusedBuffer(file, 20 << 20);
  });
  const absl::Status& s = w.first;
  EXPECT_FALSE(w.commit.ok()) << "Commit must report the earlier write error";
  EXPECT_EQ(w.commit.message(), s.message()) << "the first error, every time";
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "cannot write")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "File too large")) << s;
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"trace.json"});
}

TEST(AtomicFileTest, FailedRenameRemovesTheTemporary) {
  std::string dir = MakeTempDir("rename");
  // A folder where the file should go: rename(2) refuses to replace it.
  std::string path = dir + "/occupied";
  ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((path + "/inside").c_str(), 0755), 0);
  absl::Status s = WriteFileAtomically(path, "data");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"occupied"});
}

TEST(AtomicFileTest, MisuseIsReportedNotFatal) {
  AtomicFile file;
  EXPECT_EQ(file.Append("x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(file.Commit().code(), absl::StatusCode::kFailedPrecondition);
  std::string path = MakeTempDir("misuse") + "/f";
  ASSERT_TRUE(file.Open(path).ok());
  EXPECT_EQ(file.Open(path).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(file.Commit().ok());
  EXPECT_EQ(file.Commit().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(AtomicFile().Open("").code(), absl::StatusCode::kInvalidArgument);
}

TEST(AtomicFileTest, TwoWritersOfOneNameDoNotShareATemporary) {
  std::string path = MakeTempDir("two") + "/f";
  AtomicFile a, b;
  ASSERT_TRUE(a.Open(path).ok());
  ASSERT_TRUE(b.Open(path).ok());
  ASSERT_TRUE(a.Append("aaaa").ok());
  ASSERT_TRUE(b.Append("bb").ok());
  ASSERT_TRUE(a.Commit().ok());
  EXPECT_EQ(ReadFile(path), "aaaa");
  ASSERT_TRUE(b.Commit().ok());
  EXPECT_EQ(ReadFile(path), "bb");  // last commit wins, each whole
}

}  // namespace
}  // namespace nrtprof::daemon
