// Load against one daemon (issue 5): P processes x T threads, each thread executing R times a
// second for S seconds, all in one capture of a standing nrtprofd. Every program's results
// are right (each checks its own), every runtime call the programs made is in the trace or
// counted as dropped, and the daemon's memory stays within a bound of what it holds.
//
// NRTPROF_LOAD="P,T,R,S" sets the load and NRTPROF_LOAD_MODE the shim's mode (tests/BUILD: a
// small load in the suite, the 64,8,1000,60 as //tests:load_test_full and
// load_test_full_lossless). Device events are not in the accounting: the programs cannot count
// what the runtime records for them.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::Background;
using testing::Daemon;
using testing::ProcessMemoryKib;
using testing::ReadFile;
using testing::Result;
using testing::RunProcess;
using testing::Runfile;
using testing::TempDir;

const char kAddModel[] =
    "model add4\ninput a fp32 [4]\ninput b fp32 [4]\noutput out fp32 [4]\nout = add(a, b)\n";

struct Load {
  int processes = 0, threads = 0, rate = 0, seconds = 0;
};

Load LoadFromEnvironment() {
  Load load;
  const char* v = getenv("NRTPROF_LOAD");
  const std::vector<std::string> parts = absl::StrSplit(v != nullptr ? v : "", ',');
  if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &load.processes) ||
      !absl::SimpleAtoi(parts[1], &load.threads) || !absl::SimpleAtoi(parts[2], &load.rate) ||
      !absl::SimpleAtoi(parts[3], &load.seconds)) {
    ADD_FAILURE() << "NRTPROF_LOAD='" << (v != nullptr ? v : "") << "' is not P,T,R,S";
  }
  return load;
}

double Number(const google::protobuf::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? 0 : it->second.number_value();
}

TEST(LoadTest, EveryCallIsInTheTraceOrCountedAndTheDaemonStaysBounded) {
  const Load load = LoadFromEnvironment();
  ASSERT_GT(load.processes, 0);
  const std::string dir = TempDir("load");

  const std::string txt = dir + "/add.txt", model = dir + "/add.neff";
  FILE* f = fopen(txt.c_str(), "w");
  fputs(kAddModel, f);
  fclose(f);
  ASSERT_EQ(RunProcess({Runfile("sim/nrt_model_compile"), txt, model}).exit_code, 0);

  // The processes start together under one `nrtprof run`, through a shell that waits for all.
  const std::string script = dir + "/load.sh";
  f = fopen(script.c_str(), "w");
  fprintf(f, "for i in $(seq 1 %d); do\n  '%s' '%s' '%s' load %d,%d,%d > '%s/out.'$i 2>&1 &\ndone\nwait\n",
          load.processes, Runfile("tests/fault_client").c_str(), Runfile("sim/libnrt.so.1").c_str(),
          model.c_str(), load.threads, load.rate, load.seconds, dir.c_str());
  fclose(f);

  Daemon daemon("load-daemon");
  ASSERT_TRUE(daemon.Start({"--max_events_per_process=4000000"}));
  const std::string out = dir + "/capture";
  const char* mode = getenv("NRTPROF_LOAD_MODE");
  // NRTPROF_LOAD_FLUSH_MS, if set, is the programs' NRTPROF_FLUSH_TIMEOUT_MS: on a saturated
  // machine the default 2 s exit flush cuts processes off with their last batches unsent.
  const char* flush_ms = getenv("NRTPROF_LOAD_FLUSH_MS");
  Background run({Runfile("client/nrtprof"), "run", "--addr", daemon.addr(), "--mode",
                  mode != nullptr && mode[0] != '\0' ? mode : "best_effort", "--out", out, "--",
                  "/bin/sh", script},
                 {{"NRT_SIM_TIME_SCALE", "0.1"},
                  {"NRTPROF_ADDR", ""},
                  {"LD_PRELOAD", ""},
                  {"NRTPROF_FLUSH_TIMEOUT_MS", flush_ms != nullptr ? flush_ms : ""}},
                 dir);
  int64_t peak_rss_kib = 0;
  while (run.Running()) {
    peak_rss_kib = std::max(peak_rss_kib, ProcessMemoryKib(daemon.pid(), "VmRSS:"));
    usleep(200000);
  }
  ASSERT_EQ(run.Wait(), 0) << run.err();

  // Every program finished with its results right.
  uint64_t executions = 0, calls = 0;
  for (int i = 1; i <= load.processes; ++i) {
    const std::string text = ReadFile(absl::StrCat(dir, "/out.", i));
    unsigned long long e = 0, c = 0;
    int failed = -1;
    ASSERT_EQ(sscanf(text.c_str(), "executions %llu calls %llu failed_threads %d", &e, &c, &failed), 3)
        << "process " << i << ": " << text;
    EXPECT_EQ(failed, 0) << text;
    executions += e;
    calls += c;
  }

  // The table's runtime calls plus what was dropped on the way are what the programs made.
  google::protobuf::Struct summary;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ReadFile(out + "/summary.json"), &summary).ok());
  uint64_t recorded = 0;
  for (const auto& row : summary.fields().at("rows").list_value().values()) {
    const auto& fields = row.struct_value().fields();
    if (absl::StartsWith(fields.at("name").string_value(), "nrt_")) {
      recorded += static_cast<uint64_t>(fields.at("calls").number_value());
    }
  }
  const google::protobuf::Struct& drops = summary.fields().at("events_dropped").struct_value();
  const google::protobuf::Struct& lanes =
      summary.fields().at("events_dropped_by_lane").struct_value();
  // The runtime lane holds one event per libnrt call: what the table shows plus what was
  // counted lost in that lane is exactly what the programs made, whatever else was lost.
  const uint64_t runtime_dropped = static_cast<uint64_t>(Number(lanes, "runtime"));
  EXPECT_EQ(Number(summary, "cut_off_processes"), 0) << "processes ended before all they had was sent";
  EXPECT_EQ(recorded + runtime_dropped, calls)
      << "recorded " << recorded << ", counted dropped " << runtime_dropped << ", made " << calls;
  // Every event counted lost is in one lane.
  EXPECT_EQ(Number(lanes, "framework") + Number(lanes, "runtime") + Number(lanes, "hardware"),
            Number(drops, "total"));
  printf("drops: ring_full %.0f, daemon_away %.0f, oversized %.0f, spool_full %.0f, "
         "device_overwritten %.0f, daemon_overflow %.0f; by lane: runtime %.0f, hardware %.0f\n",
         Number(drops, "ring_full"), Number(drops, "daemon_away"), Number(drops, "oversized"),
         Number(drops, "spool_full"), Number(drops, "device_overwritten"),
         Number(drops, "daemon_overflow"), Number(lanes, "runtime"), Number(lanes, "hardware"));

  // The daemon holds what it received and not much more: at most 1 KiB an event over a
  // 256 MiB base.
  const int64_t received = daemon.StatusFigure("events received:");
  const int64_t alone = daemon.StatusFigure("final batches alone:");
  EXPECT_LE(peak_rss_kib, 256 * 1024 + received);
  printf("load %d x %d x %d/s x %d s: %llu executions (%.0f/s), %llu runtime calls, %llu recorded, "
         "%llu dropped, daemon received %lld events, peak RSS %lld KiB\n",
         load.processes, load.threads, load.rate, load.seconds,
         static_cast<unsigned long long>(executions), executions / static_cast<double>(load.seconds),
         static_cast<unsigned long long>(calls), static_cast<unsigned long long>(recorded),
         static_cast<unsigned long long>(runtime_dropped), static_cast<long long>(received),
         static_cast<long long>(peak_rss_kib));
  printf("processes whose final batch came alone (their stream behind at exit): %lld\n",
         static_cast<long long>(alone));
}

}  // namespace
}  // namespace nrtprof
