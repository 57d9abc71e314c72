// Processes that end abruptly under `nrtprof run` (real daemon, shim and runtime): SIGKILL,
// _exit, SIGSEGV, abort. They never send their last events; the daemon reads the memory they
// recorded into (the rings file, common/rings_file.h) and counts what they made and never sent
// as process_died. The check is exact: in each lane, the events in the capture plus those
// counted as dropped are the events the program made.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::kIsolatedEnv;
using testing::ReadFile;
using testing::Result;
using testing::RunProcess;
using testing::RunProfiled;
using testing::Runfile;
using testing::TempDir;

// "Events dropped by lane: framework F, runtime R, hardware H" of summary.txt, by lane.
std::map<std::string, int64_t> DroppedByLane(const std::string& summary) {
  std::map<std::string, int64_t> lanes;
  for (absl::string_view line : absl::StrSplit(summary, '\n')) {
    if (!absl::ConsumePrefix(&line, "Events dropped by lane: ")) continue;
    for (absl::string_view part : absl::StrSplit(line, ", ")) {
      const std::vector<absl::string_view> words = absl::StrSplit(part, ' ');
      int64_t n = 0;
      if (words.size() == 2 && absl::SimpleAtoi(words[1], &n)) lanes[std::string(words[0])] = n;
    }
  }
  return lanes;
}

constexpr int kN = 400;

// Runs abrupt_end ending `how`, bare and profiled with `flags`, and checks the lanes.
void ExpectEveryRecordAccountedFor(const std::string& how,
                                   const std::vector<std::string>& flags) {
  SCOPED_TRACE(how);
  {
    const std::vector<std::string> command = {Runfile("tests/abrupt_end"), how,
                                              std::to_string(kN)};
    const Result bare = RunProcess(command, kIsolatedEnv);
    const std::string out = TempDir("abrupt-" + how);
    const Result profiled = RunProfiled(out, command, flags);
    EXPECT_EQ(profiled.exit_code, bare.exit_code) << profiled.err;
    EXPECT_EQ(profiled.out, bare.out);
    const std::string summary = ReadFile(out + "/summary.txt");
    const std::map<std::string, int64_t> dropped = DroppedByLane(summary);
    // Counted in the trace: the summary's rows leave out calls made inside a range, which
    // they count as the range's time.
    const std::string trace = ReadFile(out + "/trace.json");
    auto count = [&trace](const std::string& what) {
      int64_t n = 0;
      for (size_t at = trace.find(what); at != std::string::npos; at = trace.find(what, at + 1)) {
        ++n;
      }
      return n;
    };
    const int64_t runtime_recorded = count("\"ph\":\"X\",\"cat\":\"runtime\",\"name\":\"nrt_");
    const int64_t ranges_recorded = count("\"ph\":\"X\",\"cat\":\"framework\",\"name\":\"step\"");
    const int64_t runtime_dropped = dropped.count("runtime") ? dropped.at("runtime") : 0;
    const int64_t framework_dropped = dropped.count("framework") ? dropped.at("framework") : 0;
    const bool at_once = how == "at_once";
    static_assert(kN % 4 == 0, "the threads share the second half equally");
    EXPECT_EQ(runtime_recorded + runtime_dropped, at_once ? 2 + kN : 2 + 2 * kN) << summary;
    EXPECT_EQ(ranges_recorded + framework_dropped, at_once ? 0 : kN) << summary;
    // The first half was sent before the end (it waited); the rest was counted, not lost.
    // Its device lane too (issue 17: a crashed program lost its device events whole): the
    // runtime's transfers fetched before the end are in the capture, each with its call.
    if (!at_once) {
      EXPECT_GE(runtime_recorded, 2 + kN) << summary;
      EXPECT_GE(count("\"ph\":\"X\",\"cat\":\"DMA\",\"name\":\"dma_h2d\""), kN) << summary;
      EXPECT_FALSE(absl::StrContains(summary, "Uncorrelated NEURON time")) << summary;
    }
    if (runtime_dropped + framework_dropped > 0) {
      EXPECT_TRUE(absl::StrContains(summary, "process_died")) << summary;
    }
    EXPECT_FALSE(absl::StrContains(summary, "Processes cut off")) << summary;
  }
}

TEST(AbruptEndTest, WhatADeadProcessMadeIsInTheCaptureOrCounted) {
  for (const char* how : {"kill", "exit", "segv", "abort"}) ExpectEveryRecordAccountedFor(how, {});
}

TEST(AbruptEndTest, KilledRightAfterItsFirstCalls) {
  // Before its first batch could go: the daemon knows the process from its Hello all the same
  // (the first libnrt call waits for that), and counts every call from its rings file.
  ExpectEveryRecordAccountedFor("at_once", {});
}

TEST(AbruptEndTest, ThreadsThatTookAnEndedThreadsRing) {
  // A thread that ends leaves its ring to the next new thread (the profiler keeps it as a
  // spare): what each made is counted once, and the last one's, never sent, from its ring.
  ExpectEveryRecordAccountedFor("threads", {});
}

TEST(AbruptEndTest, LosslessToo) {
  // The daemon reads the spool for what was spooled, the rings file for the rest.
  ExpectEveryRecordAccountedFor("kill", {"--mode", "lossless"});
}

}  // namespace
}  // namespace nrtprof
