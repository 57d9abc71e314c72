#include "daemon/rings_reader.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "common/rings_file.h"
#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

// A rings file as a shim writes it: a header, `rings` rings of 8 KiB with their counters.
class RingsFileTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kStride = 8192;

  void SetUp() override {
    fd_ = memfd_create("nrtprof-rings-test", MFD_CLOEXEC);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override { close(fd_); }

  void Write(uint32_t rings) {
    std::vector<char> file(kRingsFileHeaderBytes + rings * kStride, 0);
    auto* h = reinterpret_cast<RingsFileHeader*>(file.data());
    memcpy(h->magic, kRingsFileMagic, sizeof(h->magic));
    h->version = kRingsFileVersion;
    h->header_bytes = kRingsFileHeaderBytes;
    h->ring_stride = kStride;
    h->rings_made.store(rings);
    h->retired_committed[kRingsKindCall].store(100);  // a thread that exited
    h->retired_dropped[kRingsKindCall].store(3);
    h->lost[kRingsKindRange].store(2);
    for (uint32_t i = 0; i < rings; ++i) {
      auto* c = reinterpret_cast<RingCounters*>(file.data() + kRingsFileHeaderBytes + i * kStride +
                                                kRingCountersOffset);
      c->committed[kRingsKindCall] = 10 * (i + 1);
      c->committed[kRingsKindRange] = 5;
      c->dropped[kRingsKindCall] = 1;
    }
    header_ = h;
    ASSERT_EQ(pwrite(fd_, file.data(), file.size(), 0), static_cast<ssize_t>(file.size()));
    ASSERT_EQ(ftruncate(fd_, static_cast<off_t>(file.size())), 0);
  }

  int fd_ = -1;
  RingsFileHeader* header_ = nullptr;
};

TEST_F(RingsFileTest, CountsEveryRingAndWhatLeftThem) {
  Write(2);
  absl::StatusOr<LaneDropCounts> made = ReadRecordsMade(fd_);
  ASSERT_TRUE(made.ok()) << made.status();
  // Calls: retired 100 + 3 refused, rings 10 + 20 committed and 1 + 1 refused.
  EXPECT_EQ(made->runtime, 135u);
  // Ranges: 5 + 5 committed, 2 lost outside any ring.
  EXPECT_EQ(made->framework, 12u);
  EXPECT_EQ(made->hardware, 0u);
}

TEST_F(RingsFileTest, AFileThatIsNotOneIsRefused) {
  Write(1);
  char junk[8] = {'n', 'o', 't', ' ', 'r', 'i', 'n', 'g'};
  ASSERT_EQ(pwrite(fd_, junk, sizeof(junk), 0), 8);
  EXPECT_EQ(ReadRecordsMade(fd_).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RingsFileTest, AHeaderThatDoesNotFitTheFileIsRefused) {
  Write(1);
  // More rings than the file holds, then a stride past its end: refused, nothing read past.
  uint32_t rings = 5;
  ASSERT_EQ(pwrite(fd_, &rings, sizeof(rings), offsetof(RingsFileHeader, rings_made)), 4);
  absl::StatusOr<LaneDropCounts> made = ReadRecordsMade(fd_);
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << made.status();
  rings = 1;
  ASSERT_EQ(pwrite(fd_, &rings, sizeof(rings), offsetof(RingsFileHeader, rings_made)), 4);
  const uint64_t stride = uint64_t{1} << 40;
  ASSERT_EQ(pwrite(fd_, &stride, sizeof(stride), offsetof(RingsFileHeader, ring_stride)), 8);
  EXPECT_EQ(ReadRecordsMade(fd_).status().code(), absl::StatusCode::kInvalidArgument);
  // And an empty file.
  ASSERT_EQ(ftruncate(fd_, 0), 0);
  EXPECT_EQ(ReadRecordsMade(fd_).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RingsReaderTest, OnlyAProcessesRingsFileIsOpened) {
  // This process's stdin is no rings file; a pid that does not exist has none.
  EXPECT_EQ(OpenRingsFile(static_cast<uint32_t>(getpid()), 0), -1);
  for (const char* name : {"something-else", "nrtprof-rings-of-another-kind"}) {
    const int fd = memfd_create(name, MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(OpenRingsFile(static_cast<uint32_t>(getpid()), fd), -1) << name;
    close(fd);
  }
  const int rings = memfd_create(kRingsFileName, MFD_CLOEXEC);
  ASSERT_GE(rings, 0);
  const int own = OpenRingsFile(static_cast<uint32_t>(getpid()), rings);
  EXPECT_GE(own, 0);
  if (own >= 0) close(own);
  close(rings);
  EXPECT_FALSE(ProcessEnded(static_cast<uint32_t>(getpid())));
}

}  // namespace
}  // namespace nrtprof::daemon
