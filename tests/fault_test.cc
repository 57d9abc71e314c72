// Faults around a profiled program (issue 5): the daemon absent, killed and restarted, stopped,
// unreachable; the program forking, exec'ing, spawning 1,000 threads, calling exit() from a
// thread, dying of SIGTERM, dlclose()ing libnrt; the disk filling up under the daemon. In every
// case the program's output and exit code are what they are without the profiler, and what
// the profiler lost is counted, never silent.
//
// Real processes throughout: the shim preloaded into tests/fault_client, a real nrtprofd on a
// unix socket, the simulated runtime.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::Exists;
using testing::ReadFile;
using testing::Result;
using testing::RunProcess;
using testing::Runfile;
using testing::TempDir;
using testing::Background;
using testing::CallsByName;
using testing::Daemon;

const std::map<std::string, std::string> kPlainEnv = {
    {"NRT_SIM_TIME_SCALE", "0"}, {"NRTPROF_ADDR", ""}, {"LD_PRELOAD", ""}};

std::string Model() { return testing::AddModel(); }

std::vector<std::string> Client(const std::string& mode, int n = -1) {
  std::vector<std::string> argv = {Runfile("tests/fault_client"), Runfile("sim/libnrt.so.1"),
                                   Model(), mode};
  if (n >= 0) argv.push_back(std::to_string(n));
  return argv;
}

uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void SleepMs(int ms) { usleep(static_cast<useconds_t>(ms) * 1000); }

// The shim preloaded directly (as `nrtprof run` does), talking to `addr`, recording from the
// start as capture `capture`.
std::map<std::string, std::string> ShimEnv(const std::string& addr, const std::string& capture,
                                           const std::string& time_scale = "0") {
  return {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
          {"NRTPROF_ADDR", addr},
          {"NRTPROF_CAPTURE", capture},
          {"NRTPROF_FLUSH_TIMEOUT_MS", "500"},
          {"NRT_SIM_TIME_SCALE", time_scale}};
}

Result Profiled(const std::string& out, const std::vector<std::string>& command) {
  std::vector<std::string> argv = {Runfile("client/nrtprof"), "run", "--out", out, "--"};
  argv.insert(argv.end(), command.begin(), command.end());
  return RunProcess(argv, kPlainEnv);
}

// ---- The daemon misbehaves ----

// A profiled program that finds no daemon runs as without the profiler, and says nothing.
TEST(FaultTest, DaemonAbsentAtStart) {
  const Result plain = RunProcess(Client("steady", 200), kPlainEnv);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_TRUE(absl::StrContains(plain.out, "checksum ")) << plain.out;
  Daemon daemon("absent");  // its socket's address, nobody listening there yet
  const std::map<std::string, std::string> env = ShimEnv(daemon.addr(), "absent");
  const Result r = RunProcess(Client("steady", 200), env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  // The address was named (NRTPROF_ADDR): one line says the program ran unprofiled.
  EXPECT_EQ(r.err, "nrtprof: no daemon answered at " + daemon.addr() +
                       " (NRTPROF_ADDR) while this process ran: it was not profiled\n");
  // The shim was in that run: the same program in the same environment, once a daemon listens
  // at the address, is recorded.
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  const Result later = RunProcess(Client("steady", 200), env);
  EXPECT_EQ(later.exit_code, 0) << later.err;
  EXPECT_EQ(later.out, plain.out);
  EXPECT_GT(daemon.StatusFigure("events received:"), 0) << daemon.log();
}

TEST(FaultTest, UnwritableSocketPath) {
  // The program runs as without the profiler...
  const Result plain = RunProcess(Client("steady", 50), kPlainEnv);
  std::map<std::string, std::string> env =
      ShimEnv("unix:/proc/self/nonexistent/nrtprofd.sock", "unwritable");
  const Result r = RunProcess(Client("steady", 50), env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  // ...with the shim in it: the same environment but for a listening daemon's address is
  // recorded.
  Daemon daemon("unwritable");
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  env["NRTPROF_ADDR"] = daemon.addr();
  const Result later = RunProcess(Client("steady", 50), env);
  EXPECT_EQ(later.exit_code, 0) << later.err;
  EXPECT_EQ(later.out, plain.out);
  EXPECT_GT(daemon.StatusFigure("events received:"), 0) << daemon.log();
  // ...and a daemon told to listen there refuses in one line.
  const Result d = RunProcess({Runfile("daemon/nrtprofd"), "--socket=/proc/self/nonexistent/x.sock"},
                              kPlainEnv);
  EXPECT_NE(d.exit_code, 0);
  const std::string err(absl::StripTrailingAsciiWhitespace(d.err));
  EXPECT_FALSE(err.empty());
  EXPECT_EQ(err.find('\n'), std::string::npos) << d.err;
}

// kill -9 in the middle of a run, a new daemon on the same socket: the program's results are
// untouched, its shim finds the new daemon, and the new daemon hears from it.
TEST(FaultTest, DaemonKilledAndRestartedMidRun) {
  Daemon daemon("killed");
  ASSERT_TRUE(daemon.Start());
  const Result plain = RunProcess(Client("steady", 1500), kPlainEnv);
  ASSERT_EQ(plain.exit_code, 0);
  const std::string dir = TempDir("killed-run");
  Background program(Client("steady", 1500), ShimEnv(daemon.addr(), "killed", "1"), dir);
  SleepMs(300);
  ASSERT_TRUE(program.Running()) << "the program should run for over a second";
  EXPECT_EQ(daemon.Stop(SIGKILL), 128 + SIGKILL);
  SleepMs(100);
  ASSERT_TRUE(daemon.Start()) << "a new daemon starts over the dead one's socket: " << daemon.log();
  EXPECT_EQ(program.Wait(), 0) << program.err();
  EXPECT_EQ(program.out(), plain.out);
  EXPECT_GT(daemon.StatusFigure("events received:"), 0) << "the shim reconnected";
}

// Lossless mode, the daemon killed -9 mid-capture and started again: the new daemon carries
// the capture on (its manifest), the shim spools while no daemon listens, and the trace holds
// every call the program made.
TEST(FaultTest, LosslessLosesNothingToADaemonKilledMidCapture) {
  Daemon daemon("lossless-killed");
  ASSERT_TRUE(daemon.Start());
  const Result plain = RunProcess(Client("steady", 1500), kPlainEnv);
  const std::string dir = TempDir("lossless-run");
  const std::string out = dir + "/capture";
  std::vector<std::string> argv = {Runfile("client/nrtprof"), "run", "--addr", daemon.addr(),
                                   "--mode", "lossless", "--out", out, "--"};
  for (const std::string& a : Client("steady", 1500)) argv.push_back(a);
  Background run(argv, {{"NRT_SIM_TIME_SCALE", "1"}, {"NRTPROF_ADDR", ""}, {"LD_PRELOAD", ""}},
                 dir);
  SleepMs(400);
  ASSERT_TRUE(run.Running());
  EXPECT_EQ(daemon.Stop(SIGKILL), 128 + SIGKILL);
  SleepMs(300);
  ASSERT_TRUE(daemon.Start()) << daemon.log();
  EXPECT_EQ(run.Wait(), 0) << run.err();
  EXPECT_EQ(run.out(), plain.out);
  EXPECT_TRUE(absl::StrContains(daemon.log(), "was in progress when the daemon stopped"))
      << daemon.log();
  const std::map<std::string, int64_t> calls = CallsByName(out);
  EXPECT_EQ(calls.count("nrt_execute") ? calls.at("nrt_execute") : 0, 1500) << run.err();
  EXPECT_EQ(calls.count("nrt_tensor_write") ? calls.at("nrt_tensor_write") : 0, 3000);
  EXPECT_EQ(calls.count("nrt_tensor_read") ? calls.at("nrt_tensor_read") : 0, 1500);
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/summary.txt"), "Events dropped: 0"))
      << ReadFile(out + "/summary.txt");
  // The spool is gone once the trace is written.
  const Result ls = RunProcess({"/bin/ls", "-A", daemon.spool_dir()}, kPlainEnv);
  EXPECT_EQ(ls.out, "") << ls.out;
}

// A spool that reaches its bound: what did not fit is counted (spool_full), never written
// past the bound, and the trace says so.
TEST(FaultTest, AFullSpoolIsCountedNotUnbounded) {
  Daemon daemon("spool-full");
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("spool-full") + "/capture";
  std::vector<std::string> argv = {Runfile("client/nrtprof"), "run", "--addr", daemon.addr(),
                                   "--mode", "lossless", "--out", out, "--"};
  for (const std::string& a : Client("steady", 3000)) argv.push_back(a);
  const Result r = RunProcess(argv, {{"NRT_SIM_TIME_SCALE", "0"}, {"NRTPROF_ADDR", ""},
                                     {"LD_PRELOAD", ""}, {"NRTPROF_SPOOL_MAX_BYTES", "65536"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string summary = ReadFile(out + "/summary.txt");
  EXPECT_TRUE(absl::StrContains(summary, "spool_full")) << summary;
  const std::map<std::string, int64_t> calls = CallsByName(out);
  EXPECT_LT(calls.count("nrt_execute") ? calls.at("nrt_execute") : 0, 3000) << summary;
}

// SIGSTOP for 10 s: a stopped daemon never makes the program wait (beyond the bounded exit
// flush), and when it continues it serves the next program.
TEST(FaultTest, DaemonStoppedForTenSeconds) {
  Daemon daemon("stopped");
  ASSERT_TRUE(daemon.Start());
  const Result plain = RunProcess(Client("steady", 300), kPlainEnv);
  const uint64_t stopped_at = NowMs();
  daemon.Signal(SIGSTOP);
  const Result r = RunProcess(Client("steady", 300), ShimEnv(daemon.addr(), "stopped", "1"));
  const uint64_t program_done = NowMs();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  // The program finished while the daemon was still stopped.
  EXPECT_LT(program_done - stopped_at, 10000u);
  if (program_done - stopped_at < 10000) SleepMs(static_cast<int>(10000 - (program_done - stopped_at)));
  daemon.Signal(SIGCONT);
  const std::string out = TempDir("after-stop");
  std::vector<std::string> argv = {Runfile("client/nrtprof"), "run", "--addr", daemon.addr(),
                                   "--out", out, "--"};
  for (const std::string& a : Client("steady", 20)) argv.push_back(a);
  const Result next = RunProcess(argv, kPlainEnv);
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_TRUE(Exists(out + "/trace.pftrace")) << next.err;
}

// ---- The program does unusual things ----

struct ProgramCase {
  std::string name;
  std::vector<std::string> argv;
  int exit_code;
};

TEST(FaultTest, ProgramsBehaveAsWithoutTheProfiler) {
  for (const ProgramCase& c : std::vector<ProgramCase>{
           {"threads", Client("threads", 1000), 0},
           {"exit_from_thread", Client("exit_from_thread"), 3},
           {"sigterm", Client("sigterm", 20), 128 + SIGTERM},
           {"dlclose", Client("dlclose", 20), 0},
           {"fork_exec", Client("fork_exec", 20), 0},
       }) {
    const Result plain = RunProcess(c.argv, kPlainEnv);
    EXPECT_EQ(plain.exit_code, c.exit_code) << c.name << ": " << plain.err;
    const std::string out = TempDir("program-" + c.name);
    const Result r = Profiled(out, c.argv);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.name << ": " << r.err;
    EXPECT_EQ(r.out, plain.out) << c.name;
    EXPECT_FALSE(absl::StrContains(r.err, "Segmentation")) << c.name << ": " << r.err;
  }
}

// The trace of a program that dlclose()d libnrt and opened it again holds both halves' calls.
TEST(FaultTest, DlcloseAndReopenAreBothRecorded) {
  const std::string out = TempDir("dlclose-trace");
  const Result r = Profiled(out, Client("dlclose", 20));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string summary = ReadFile(out + "/summary.csv");
  bool found = false;
  for (absl::string_view line : absl::StrSplit(summary, '\n')) {
    if (!absl::StartsWith(line, "nrt_execute,")) continue;
    found = true;
    std::vector<std::string> cells = absl::StrSplit(line, ',');
    EXPECT_EQ(cells.back(), "40") << line;
  }
  EXPECT_TRUE(found) << summary;
}

// 1,000 short threads: every call of every thread is in the trace or counted as dropped.
TEST(FaultTest, AThousandShortThreadsLoseNothingUncounted) {
  const std::string out = TempDir("threads-trace");
  const Result r = Profiled(out, Client("threads", 1000));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, int64_t> calls = CallsByName(out);
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/summary.txt"), "Events dropped: 0"))
      << ReadFile(out + "/summary.txt");
  EXPECT_EQ(calls["nrt_tensor_allocate"], 1000 + 3);  // the threads' and the session's
  EXPECT_EQ(calls["nrt_tensor_write"], 1000);
  EXPECT_EQ(calls["nrt_tensor_read"], 1000);
  EXPECT_EQ(calls["nrt_tensor_free"], 1000);
}

// Rings far too small for the program's pace (64 slots, emptied every 25 ms, two threads
// calling flat out): most calls are dropped, and every one of them is counted in the runtime
// lane, so the table's calls plus those drops are exactly the calls the program made.
TEST(FaultTest, RingDropsAreCountedExactlyInTheRuntimeLane) {
  const std::string dir = TempDir("tiny-ring");
  std::vector<std::string> argv = {Runfile("client/nrtprof"), "run", "--out", dir + "/capture",
                                   "--"};
  for (const std::string& a : Client("load")) argv.push_back(a);
  argv.push_back("2,1000000,1");
  const Result r = RunProcess(argv, {{"NRT_SIM_TIME_SCALE", "0"}, {"NRTPROF_ADDR", ""},
                                     {"LD_PRELOAD", ""}, {"NRTPROF_RING_EVENTS", "64"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  unsigned long long executions = 0, made = 0;
  int failed = -1;
  ASSERT_EQ(sscanf(r.out.c_str(), "executions %llu calls %llu failed_threads %d", &executions,
                   &made, &failed), 3) << r.out;
  int64_t recorded = 0;
  for (const auto& [name, n] : CallsByName(dir + "/capture")) {
    if (absl::StartsWith(name, "nrt_")) recorded += n;
  }
  const std::string summary = ReadFile(dir + "/capture/summary.txt");
  const std::string lanes_line = "Events dropped by lane: framework 0, runtime ";
  const size_t at = summary.find(lanes_line);
  ASSERT_NE(at, std::string::npos) << summary;
  int64_t runtime_dropped = -1;
  ASSERT_EQ(sscanf(summary.c_str() + at + lanes_line.size(), "%" SCNd64, &runtime_dropped), 1);
  EXPECT_GT(runtime_dropped, 0) << "64-slot rings kept up with " << made << " calls: " << summary;
  EXPECT_TRUE(absl::StrContains(summary, "ring_full")) << summary;
  EXPECT_EQ(recorded + runtime_dropped, static_cast<int64_t>(made)) << summary;
}

// ---- The disk fills up while a trace is written ----

// The daemon may write files of at most 64 KiB (RLIMIT_FSIZE, as a nearly full disk would
// refuse): a small capture is written whole; a large one fails with an error the user sees,
// and leaves no torn file behind: whatever trace file its folder holds is complete.
TEST(FaultTest, AFullDiskNeverLeavesACorruptTrace) {
  Daemon daemon("diskfull");
  ASSERT_TRUE(daemon.Start({}, /*fsize_limit=*/64 * 1024));
  const auto run = [&](const std::string& out, const std::vector<std::string>& command) {
    std::vector<std::string> argv = {Runfile("client/nrtprof"), "run", "--addr", daemon.addr(),
                                     "--out", out, "--"};
    argv.insert(argv.end(), command.begin(), command.end());
    return RunProcess(argv, kPlainEnv);
  };
  const auto complete = [&](const std::string& out) {
    if (Exists(out + "/trace.json")) {
      const Result json = RunProcess({"/usr/bin/python3", "-c",
                                      "import json,sys; json.load(open(sys.argv[1]))",
                                      out + "/trace.json"},
                                     kPlainEnv);
      EXPECT_EQ(json.exit_code, 0) << out << ": " << json.err;
    }
    if (Exists(out + "/trace.pftrace")) {
      const Result pf = RunProcess(
          {Runfile("client/nrtprof"), "summary", out + "/trace.pftrace", "--format", "csv"},
          kPlainEnv);
      EXPECT_EQ(pf.exit_code, 0) << out << ": " << pf.err;
      EXPECT_TRUE(absl::StrContains(pf.out, "nrt_execute,")) << pf.out;
    }
    const Result ls = RunProcess({"/bin/ls", "-a", out}, kPlainEnv);
    EXPECT_FALSE(absl::StrContains(ls.out, "tmp")) << "a temporary file left in " << out << ":\n"
                                                   << ls.out;
  };
  const std::string small_out = daemon.dir() + "/small";
  const Result small = run(small_out, Client("steady", 3));
  ASSERT_EQ(small.exit_code, 0) << small.err;
  EXPECT_TRUE(Exists(small_out + "/trace.pftrace"));
  complete(small_out);

  const std::string large_out = daemon.dir() + "/large";
  const Result large = run(large_out, Client("steady", 3000));
  EXPECT_TRUE(absl::StrContains(large.out, "checksum ")) << "the program itself ran: " << large.err;
  // `nrtprof run` exits with the program's code; the failed capture is said on stderr.
  EXPECT_EQ(large.exit_code, 0) << large.err;
  EXPECT_TRUE(absl::StrContains(large.err, "nrtprof run: the capture was not written")) << large.err;
  complete(large_out);
  // The daemon lives on and serves the next capture.
  const std::string next_out = daemon.dir() + "/next";
  const Result next = run(next_out, Client("steady", 3));
  EXPECT_EQ(next.exit_code, 0) << next.err;
  complete(next_out);
}

}  // namespace
}  // namespace nrtprof
