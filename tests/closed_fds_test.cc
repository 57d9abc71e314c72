// Programs that close descriptors they do not own, under `nrtprof run`: servers that
// daemonize, closefrom(3), close_range(3, ~0U, 0), a loop closing 3..1023, and a program that
// closes a socket it never made and opens a file of its own in its place. The program must
// behave as it does bare (start with the descriptors it has bare: nrtprof run passes none of its
// own), its files must get the numbers they get bare and hold exactly what it wrote, gRPC must
// say nothing on its stderr, and the capture must have every call made before and after the
// closing.
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::CallsByName;
using testing::Exists;
using testing::kIsolatedEnv;
using testing::ReadFile;
using testing::Result;
using testing::RunProcess;
using testing::RunProfiled;
using testing::Runfile;
using testing::TempDir;

Result Bare(const std::string& how, const std::string& dir) {
  return RunProcess({Runfile("tests/closed_fds_client"), how, dir}, kIsolatedEnv);
}

Result Profiled(const std::string& how, const std::string& dir, const std::string& out,
                const std::vector<std::string>& flags = {}) {
  return RunProfiled(out, {Runfile("tests/closed_fds_client"), how, dir}, flags);
}

// The first lines gRPC logs on its own ("E1203 12:16:08.101964543    9579 ev_epoll1_linux.cc:373] ...").
std::vector<std::string> GrpcLines(const std::string& err) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(err, '\n')) {
    const bool log_prefix = line.size() > 6 && absl::StrContains("EWID", line.substr(0, 1)) &&
                            absl::ascii_isdigit(line[1]) && absl::ascii_isdigit(line[4]) &&
                            line[5] == ' ';
    if (log_prefix || absl::StrContains(line, ".cc:")) lines.emplace_back(line.substr(0, 160));
    if (lines.size() == 3) break;  // enough to say what it is
  }
  return lines;
}

// What the program wrote to DIR/file<k>, when it kept the file to the end.
std::string Expected(int k) {
  return absl::StrCat("first line of file ", k, "\nlast line of file ", k, "\n");
}

void ExpectSameAsBare(const std::string& how, const std::vector<std::string>& flags = {}) {
  SCOPED_TRACE(how);
  const std::string bare_dir = TempDir(how + "-bare"), dir = TempDir(how + "-profiled");
  const Result bare = Bare(how, bare_dir);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const Result r = Profiled(how, dir, dir + "/capture", flags);
  EXPECT_EQ(r.exit_code, bare.exit_code) << r.err;
  EXPECT_EQ(r.out, bare.out);
  EXPECT_EQ(GrpcLines(r.err), std::vector<std::string>()) << r.err;
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(ReadFile(absl::StrCat(bare_dir, "/file", k)), Expected(k));
    EXPECT_EQ(ReadFile(absl::StrCat(dir, "/file", k)), Expected(k));
  }
  // Every call, the 1,000 before the closing as well as the 1,000 after, and nothing lost.
  EXPECT_TRUE(absl::StrContains(r.err, "from 1 process, 0 dropped")) << r.err;
  const auto calls = CallsByName(dir + "/capture");
  EXPECT_EQ(calls.count("nrt_tensor_write") ? calls.at("nrt_tensor_write") : -1, 2000)
      << ReadFile(dir + "/capture/summary.txt");
  EXPECT_EQ(calls.count("nrt_init") ? calls.at("nrt_init") : -1, 1);
}

TEST(ClosedDescriptors, ClosingThreeTo1023OneByOne) { ExpectSameAsBare("loop"); }

TEST(ClosedDescriptors, Closefrom) { ExpectSameAsBare("closefrom"); }

TEST(ClosedDescriptors, CloseRange) { ExpectSameAsBare("close_range"); }

// Lossless mode adds the spool file, written and read back by the shim after the closing.
TEST(ClosedDescriptors, ClosefromInLosslessModeWithStacks) {
  ExpectSameAsBare("closefrom", {"--mode", "lossless", "--stacks", "8"});
}

// `command` under a shell that first runs `ulimit LIMIT` (none if empty), so that the limit is
// the program's only, not nrtprof's nor its daemon's.
std::vector<std::string> UnderUlimit(const std::string& limit,
                                     const std::vector<std::string>& command) {
  if (limit.empty()) return command;
  std::string script = "ulimit " + limit + " && exec";
  for (size_t i = 0; i < command.size(); ++i) script += absl::StrCat(" \"$", i + 1, "\"");
  std::vector<std::string> argv = {"/bin/sh", "-c", script, "sh"};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

// POSIX gives a program the lowest free descriptor numbers, and shells and daemons rely on it:
// after closing every descriptor above 2, the program's three files are 3, 4 and 5 under the
// profiler as bare, the shim's own (its rings file, gRPC's epoll sets, eventfds and socket) being
// above them. Under the machine's limit on descriptors, a smaller one (64), and a limited address
// space, where the backend does not start and the rings file is the shim's only descriptor.
TEST(ClosedDescriptors, TheProgramsFilesGetTheNumbersTheyGetBare) {
  for (const std::string limit : {"", "-n 64", "-v 400000"}) {
    SCOPED_TRACE(limit);
    const std::string bare_dir = TempDir("numbers-bare"), dir = TempDir("numbers-profiled");
    const std::string client = Runfile("tests/closed_fds_client");
    const Result bare = RunProcess(UnderUlimit(limit, {client, "closefrom", bare_dir}),
                                   kIsolatedEnv);
    ASSERT_EQ(bare.exit_code, 0) << bare.err;
    ASSERT_TRUE(absl::StrContains(bare.out, "closefrom: its files at 3, 4, 5\n")) << bare.out;
    const Result r =
        RunProfiled(dir + "/capture", UnderUlimit(limit, {client, "closefrom", dir}));
    // The program's numbers, and that it went on to its end.
    EXPECT_EQ(r.out, bare.out) << r.err;
    if (limit == "-v 400000") {
      // The case meant: the backend declined, the core's rings file was made. Nothing was
      // recorded, which nrtprof run's exit code may say.
      EXPECT_TRUE(absl::StrContains(r.err, "(ulimit -v)")) << r.err;
      continue;
    }
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "from 1 process, 0 dropped")) << r.err;
    const auto calls = CallsByName(dir + "/capture");
    EXPECT_EQ(calls.count("nrt_tensor_write") ? calls.at("nrt_tensor_write") : -1, 2000)
        << ReadFile(dir + "/capture/summary.txt");
  }
}

// The program closes the shim's connection to the daemon, its epoll sets and wakeup eventfds,
// and opens a file in the place of each, which would get its number; gRPC must never write
// to those files (a wakeup writes 8 bytes to its eventfd), nor close them.
TEST(ClosedDescriptors, DescriptorsTheProgramClosedNeverBecomeItsFiles) {
  const std::string dir = TempDir("takeover");
  const Result bare = Bare("takeover", TempDir("takeover-bare"));
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const Result r = Profiled("takeover", dir, dir + "/capture");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, bare.out);
  EXPECT_EQ(GrpcLines(r.err), std::vector<std::string>()) << r.err;
  // The shim has at least its daemon's socket: the program made a file in its place.
  ASSERT_TRUE(Exists(dir + "/file0")) << r.err;
  for (int k = 0; Exists(absl::StrCat(dir, "/file", k)); ++k) {
    EXPECT_EQ(ReadFile(absl::StrCat(dir, "/file", k)), Expected(k)) << "file" << k;
  }
  EXPECT_TRUE(absl::StrContains(r.err, "from 1 process, 0 dropped")) << r.err;
  const auto calls = CallsByName(dir + "/capture");
  EXPECT_EQ(calls.count("nrt_tensor_write") ? calls.at("nrt_tensor_write") : -1, 2000)
      << ReadFile(dir + "/capture/summary.txt");
}

}  // namespace
}  // namespace nrtprof
