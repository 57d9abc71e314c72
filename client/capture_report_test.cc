#include "client/capture_report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace nrtprof::cli {
namespace {

// A trace.json of `bytes` in a fresh folder: sparse, so that a big one costs no disk.
std::string FolderWithJson(const std::string& name, off_t bytes) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  EXPECT_EQ(mkdir(dir.c_str(), 0700), 0);
  const int fd = open((dir + "/trace.json").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, bytes), 0);
  close(fd);
  return dir;
}

TEST(CaptureReportTest, TheClosingLineOffersOnlyTracesThatCanBeOpened) {
  const std::string small = FolderWithJson("small", 1 << 20);
  EXPECT_EQ(OpenTracesLine(small, true, true),
            "nrtprof: open " + small +
                "/trace.pftrace in the Perfetto UI (https://ui.perfetto.dev, \"Open trace "
                "file\"), or trace.json in chrome://tracing\n");
  EXPECT_EQ(OpenTracesLine(small, false, true),
            "nrtprof: open " + small + "/trace.json in chrome://tracing\n");
  EXPECT_EQ(OpenTracesLine(small, true, false),
            "nrtprof: open " + small +
                "/trace.pftrace in the Perfetto UI (https://ui.perfetto.dev, \"Open trace "
                "file\")\n");
  EXPECT_EQ(OpenTracesLine(small, false, false), "");
  // 615 MB, what 3 M events make: one JavaScript string cannot hold it.
  const std::string big = FolderWithJson("big", off_t{615} << 20);
  EXPECT_EQ(OpenTracesLine(big, true, true),
            "nrtprof: open " + big +
                "/trace.pftrace in the Perfetto UI (https://ui.perfetto.dev, \"Open trace "
                "file\"); trace.json (615 MiB) is more than chrome://tracing can read\n");
  EXPECT_EQ(OpenTracesLine(big, false, true),
            "nrtprof: " + big +
                "/trace.json (615 MiB) is more than chrome://tracing can read; nrtprof capture "
                "--files pftrace writes the trace the Perfetto UI opens\n");
  // A folder this host cannot read (a remote daemon's): offered as usual.
  EXPECT_EQ(OpenTracesLine("/nonexistent/capture", false, true),
            "nrtprof: open /nonexistent/capture/trace.json in chrome://tracing\n");
}

}  // namespace
}  // namespace nrtprof::cli
