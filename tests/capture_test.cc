// `nrtprof capture` against a standing daemon (issue 14's first part): programs preloaded with
// the shim by hand stream to the daemon, and a capture records them for a window -- all of
// them or the named pids -- ends early on Ctrl-C, and says why when it holds nothing. Real
// nrtprofd, real programs, the real CLI.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trace/perfetto_trace_reader.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::Background;
using testing::Daemon;
using testing::Result;
using testing::RunProcess;
using testing::Runfile;

// A program that keeps calling libnrt (one nrt_tensor_write a millisecond) until killed,
// preloaded with the shim and streaming to `daemon`, recording nothing until asked.
std::unique_ptr<Background> BusyProgram(const Daemon& daemon, const std::string& dir) {
  return std::make_unique<Background>(
      std::vector<std::string>{Runfile("tests/abrupt_end"), "busy", "10"},
      std::map<std::string, std::string>{{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                                         {"NRTPROF_ADDR", daemon.addr()},
                                         {"NRT_SIM_TIME_SCALE", "0"}},
      dir);
}

std::vector<std::string> Capture(const Daemon& daemon, const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {Runfile("client/nrtprof"), "capture", "--addr", daemon.addr()};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

const std::map<std::string, std::string> kCliEnv = {{"NRTPROF_ADDR", ""}, {"LD_PRELOAD", ""}};

// Waits until the daemon has `n` processes connected.
bool AwaitConnected(Daemon& daemon, int64_t n) {
  for (int i = 0; i < 200; ++i) {
    if (daemon.StatusFigure("connected processes:") == n) return true;
    usleep(50'000);
  }
  return false;
}

TEST(CaptureTest, RecordsARunningProgramForTheWindow) {
  Daemon daemon("capture-window");
  ASSERT_TRUE(daemon.Start());
  const std::string dir = testing::TempDir("capture-window");
  auto program = BusyProgram(daemon, dir);
  ASSERT_TRUE(AwaitConnected(daemon, 1)) << program->err();
  // The program records all the time (the flight recorder): its first calls are at the daemon
  // before the window opens. (A live window takes what arrives within it: calls made up to a
  // flush period before it may be in it.)
  for (int i = 0; i < 100 && daemon.StatusFigure("events received:") < 100; ++i) usleep(50'000);
  const std::string out = dir + "/cap";
  const Result r = RunProcess(Capture(daemon, {"--duration", "1s", "--out", out}), kCliEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "recording for 1s; Ctrl-C ends it early")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "from 1 process,")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "files in " + out + ":")) << r.err;
  // About a call a millisecond for a second: the window's calls, not the program's whole life.
  const auto calls = testing::CallsByName(out);
  ASSERT_EQ(calls.count("nrt_tensor_write"), 1u) << r.err;
  EXPECT_GT(calls.at("nrt_tensor_write"), 100);
  EXPECT_EQ(calls.count("nrt_init"), 0u) << "made before the window";
  EXPECT_TRUE(program->Running()) << "the program goes on, unaware";
}

// Without the flight recorder nothing records until a capture asks: the program runs no system
// trace for the profiler meanwhile (shim/backend/sys_trace_arbiter.h), and a window on a program that
// was running before it still has the device lane, from the window's first calls.
TEST(CaptureTest, WithoutTheRecorderTheWindowStillHasTheDeviceLane) {
  Daemon daemon("capture-attach");
  ASSERT_TRUE(daemon.Start({"--flight_recorder_seconds=0"}));
  const std::string dir = testing::TempDir("capture-attach");
  auto program = BusyProgram(daemon, dir);
  ASSERT_TRUE(AwaitConnected(daemon, 1)) << program->err();
  usleep(300'000);
  EXPECT_EQ(daemon.StatusFigure("events received:"), 0) << "nothing records before the window";
  const std::string out = dir + "/cap";
  const Result r = RunProcess(Capture(daemon, {"--duration", "1s", "--out", out}), kCliEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto calls = testing::CallsByName(out);
  ASSERT_EQ(calls.count("nrt_tensor_write"), 1u) << r.err;
  EXPECT_GT(calls.at("nrt_tensor_write"), 100);
  // The writes' DMA is there, on the device's lane, each with its call.
  const std::string summary = testing::ReadFile(out + "/summary.txt");
  EXPECT_FALSE(absl::StrContains(summary, "Self NEURON time total: 0.000us")) << summary;
  EXPECT_FALSE(absl::StrContains(summary, "Uncorrelated NEURON time")) << summary;
  EXPECT_TRUE(program->Running());
}

TEST(CaptureTest, OnlyTheNamedPids) {
  Daemon daemon("capture-pids");
  ASSERT_TRUE(daemon.Start());
  const std::string dir = testing::TempDir("capture-pids");
  auto a = BusyProgram(daemon, testing::TempDir("capture-pids-a"));
  auto b = BusyProgram(daemon, testing::TempDir("capture-pids-b"));
  ASSERT_TRUE(AwaitConnected(daemon, 2));
  const std::string out = dir + "/cap";
  Background capture(Capture(daemon, {"--duration", "3s", "--pid", std::to_string(a->pid()),
                                      "--out", out}),
                     kCliEnv, testing::TempDir("capture-pids-cli"));
  // While it records: the daemon shows a in the capture and b in none.
  bool seen = false;
  std::string status;
  for (int i = 0; i < 100 && !seen; ++i) {
    status = RunProcess({Runfile("client/nrtprof"), "status", "--addr", daemon.addr()}, kCliEnv).out;
    for (absl::string_view line : absl::StrSplit(status, '\n')) {
      seen = seen || (absl::StrContains(line, absl::StrCat("pid ", a->pid(), " ")) &&
                      !absl::StrContains(line, "capture -"));
    }
    if (!seen) usleep(50'000);
  }
  ASSERT_TRUE(seen) << status;
  // And the capture itself, as status shows what is recording.
  EXPECT_TRUE(absl::StrContains(status, "recording:           capture ")) << status;
  EXPECT_TRUE(absl::StrContains(status, " so far, 1 process -> " + out + "\n")) << status;
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (absl::StrContains(line, absl::StrCat("pid ", a->pid(), " "))) {
      EXPECT_FALSE(absl::StrContains(line, "capture -")) << line;
    }
    if (absl::StrContains(line, absl::StrCat("pid ", b->pid(), " "))) {
      EXPECT_TRUE(absl::StrContains(line, "capture -")) << line;
    }
  }
  ASSERT_EQ(capture.Wait(), 0) << capture.err();
  EXPECT_TRUE(absl::StrContains(capture.err(), "from 1 process,")) << capture.err();
}

TEST(CaptureTest, CtrlCEndsTheWindowAndStillWrites) {
  Daemon daemon("capture-sigint");
  ASSERT_TRUE(daemon.Start());
  const std::string dir = testing::TempDir("capture-sigint");
  auto program = BusyProgram(daemon, dir);
  ASSERT_TRUE(AwaitConnected(daemon, 1));
  const std::string out = dir + "/cap";
  Background capture(Capture(daemon, {"--duration", "10m", "--out", out}), kCliEnv,
                     testing::TempDir("capture-sigint-cli"));
  for (int i = 0; i < 200 && !absl::StrContains(capture.err(), "Ctrl-C ends it early"); ++i) {
    usleep(50'000);
  }
  ASSERT_TRUE(absl::StrContains(capture.err(), "recording for 10m")) << capture.err();
  usleep(300'000);
  kill(capture.pid(), SIGINT);
  EXPECT_EQ(capture.Wait(), 0) << capture.err();
  EXPECT_TRUE(absl::StrContains(capture.err(), "nrtprof capture: interrupted after")) << capture.err();
  EXPECT_TRUE(absl::StrContains(capture.err(), "from 1 process,")) << capture.err();
  EXPECT_GT(testing::CallsByName(out)["nrt_tensor_write"], 0) << capture.err();
}

// An empty capture says why, and exits 3: written, but not a success a script should take it
// for (issue 36: it exited 0).
TEST(CaptureTest, AnEmptyCaptureSaysWhy) {
  Daemon daemon("capture-empty");
  ASSERT_TRUE(daemon.Start());
  const std::string dir = testing::TempDir("capture-empty");
  Result r = RunProcess(Capture(daemon, {"--duration", "200ms", "--out", dir + "/none"}), kCliEnv);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(testing::Exists(dir + "/none/summary.txt")) << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.err, "nrtprof capture: the capture is empty: no process was connected to the daemon in "
             "the window"))
      << r.err;

  r = RunProcess(Capture(daemon, {"--duration", "200ms", "--pid", "4000000", "--out",
                                  dir + "/pid"}),
                 kCliEnv);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "nrtprof capture: pid 4000000 is not connected to the daemon at " +
                                           daemon.addr()))
      << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.err, "the capture is empty: none of the pids (4000000) was connected to the daemon"))
      << r.err;
}

// The fused RMSNorm example, 3 iterations, preloaded by hand and streaming to `daemon`, run to
// its end.
Result FusedRmsnorm(const Daemon& daemon) {
  return RunProcess({Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "3"},
                    {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                     {"NRTPROF_ADDR", daemon.addr()},
                     {"NRT_SIM_TIME_SCALE", "0"}});
}

// The flight recorder: a program that ran and ended before anyone asked is in a capture of
// the last seconds, calls, device executions and model file included.
TEST(CaptureTest, LastHoldsWhatCameBeforeTheRequest) {
  Daemon daemon("capture-last");
  ASSERT_TRUE(daemon.Start());
  const std::string dir = testing::TempDir("capture-last");
  const Result program = FusedRmsnorm(daemon);
  ASSERT_EQ(program.exit_code, 0) << program.err;
  const std::string out = dir + "/cap";
  const Result r = RunProcess(Capture(daemon, {"--last", "30s", "--out", out}), kCliEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "the last 30s, from the flight recorder")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "from 1 process,")) << r.err;
  const auto calls = testing::CallsByName(out);
  EXPECT_EQ(calls.count("nrt_load") ? calls.at("nrt_load") : 0, 1) << r.err;
  EXPECT_EQ(calls.count("nrt_init") ? calls.at("nrt_init") : 0, 1) << r.err;
  // The device lane came along: the fused kernel's executions have device time.
  const std::string summary = testing::ReadFile(out + "/summary.txt");
  EXPECT_FALSE(absl::StrContains(summary, "Self NEURON time total: 0.000us")) << summary;
  EXPECT_TRUE(testing::Exists(out + "/trace.pftrace"));
  // The model file, loaded before anyone asked, is in the capture.
  const size_t model = r.err.find("\n  model_");
  ASSERT_NE(model, std::string::npos) << r.err;
  const std::string name = r.err.substr(model + 3, r.err.find('\n', model + 1) - model - 3);
  EXPECT_TRUE(absl::EndsWith(name, ".neff")) << name;
  EXPECT_TRUE(testing::Exists(out + "/" + name)) << name;
}

// A program that runs the runtime's system trace itself hands its device events over only as
// it fetches them: the mlp example fetches at its end, so a window of its run has no device
// lane, and the capture says why. The rmsnorm example fetches as it goes: its lane is there,
// with no such line.
TEST(CaptureTest, AProgramHoldingTheSystemTraceIsExplained) {
  Daemon daemon("capture-own-trace");
  ASSERT_TRUE(daemon.Start());
  const std::string dir = testing::TempDir("capture-own-trace");
  // Device time 5 times the simulator's: both run for 10 s or more (and their runtime's trace
  // rings, sized for their iterations up front, stay small).
  const std::map<std::string, std::string> env = {
      {"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
      {"NRTPROF_ADDR", daemon.addr()},
      {"NRT_SIM_TIME_SCALE", "5"}};
  Background mlp({Runfile("examples/mlp"), "--iters", "2000"}, env,
                 testing::TempDir("capture-own-trace-mlp"));
  Background rmsnorm({Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "6000"}, env,
                     testing::TempDir("capture-own-trace-rmsnorm"));
  ASSERT_TRUE(AwaitConnected(daemon, 2))
      << mlp.out() << mlp.err() << rmsnorm.out() << rmsnorm.err()
      << RunProcess({Runfile("client/nrtprof"), "status", "--addr", daemon.addr()}, kCliEnv).out;
  // Both past their start (their loads, before their own capture of the system trace): steps
  // marked, as status shows them.
  auto stepping = [&](pid_t pid) {
    const std::string status =
        RunProcess({Runfile("client/nrtprof"), "status", "--addr", daemon.addr()}, kCliEnv).out;
    for (absl::string_view line : absl::StrSplit(status, '\n')) {
      if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(line),
                           absl::StrCat("pid ", pid, " ")) &&
          !absl::StrContains(line, " step - ")) {
        return true;
      }
    }
    return false;
  };
  for (int i = 0; i < 200 && !(stepping(mlp.pid()) && stepping(rmsnorm.pid())); ++i) usleep(50'000);
  const std::string out = dir + "/cap";
  const Result r = RunProcess(Capture(daemon, {"--duration", "1s", "--out", out}), kCliEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "from 2 processes,")) << r.err;
  // Each process's "device events of N of its M executions: ..." line: (N, M), or (0, 0).
  const std::string why =
      " executions: the program runs the runtime's system trace itself (nrt_sys_trace_start), "
      "and nrtprof receives them only as the program fetches them, at the latest when it ends";
  auto without = [&](pid_t pid) {
    for (absl::string_view line : absl::StrSplit(r.err, '\n')) {
      if (!absl::StartsWith(line, absl::StrCat("Not recorded: pid ", pid, " ("))) continue;
      EXPECT_TRUE(absl::EndsWith(line, why)) << line;
      constexpr absl::string_view kCount = "): device events of ";
      const size_t at = line.find(kCount);
      std::vector<absl::string_view> words;
      if (at != absl::string_view::npos) {
        words = absl::StrSplit(line.substr(at + kCount.size()), ' ');
      }
      std::pair<int, int> n{-1, -1};
      if (words.size() < 5 || words[1] != "of" || words[2] != "its" ||
          !absl::SimpleAtoi(words[0], &n.first) || !absl::SimpleAtoi(words[3], &n.second)) {
        ADD_FAILURE() << "no count of executions in: " << line;
      }
      return n;
    }
    return std::pair<int, int>{0, 0};
  };
  // The mlp example fetched nothing in the window: none of its executions has device events.
  const auto [mlp_without, mlp_executions] = without(mlp.pid());
  EXPECT_GT(mlp_executions, 10) << r.err;
  EXPECT_EQ(mlp_without, mlp_executions) << r.err;
  // The rmsnorm example fetches every few iterations: at most those after its last fetch.
  const auto [rmsnorm_without, rmsnorm_executions] = without(rmsnorm.pid());
  EXPECT_LE(rmsnorm_without * 4, rmsnorm_executions) << r.err;
  const std::string summary = testing::ReadFile(out + "/summary.txt");
  EXPECT_FALSE(absl::StrContains(summary, "Self NEURON time total: 0.000us")) << summary;
  EXPECT_TRUE(mlp.Running() && rmsnorm.Running()) << "both go on, unaware";

  // mlp killed before its end, which is when it fetches: a look back says its device events
  // are lost for good, not that they will come.
  const pid_t mlp_pid = mlp.pid();
  kill(mlp_pid, SIGKILL);
  EXPECT_EQ(mlp.Wait(), 128 + SIGKILL);
  const Result back = RunProcess(
      Capture(daemon, {"--last", "2s", "--files", "summary", "--out", dir + "/back"}), kCliEnv);
  ASSERT_EQ(back.exit_code, 0) << back.err;
  bool said = false;
  for (absl::string_view line : absl::StrSplit(back.err, '\n')) {
    if (!absl::StartsWith(line, absl::StrCat("Not recorded: pid ", mlp_pid, " ("))) continue;
    said = absl::EndsWith(line,
                          " executions: the program ran the runtime's system trace itself "
                          "(nrt_sys_trace_start) and ended without fetching them: they are lost");
    EXPECT_TRUE(said) << line;
  }
  EXPECT_TRUE(said) << back.err;
}

// A look back at a process with more events than twice the daemon's parts (nrtprofd
// --capture_part_events) reads it in parts, each cut where no range or call of its thread is
// open, and says what a daemon reading it whole says: the naive RMSNorm example, 1000
// iterations at the simulator's own speed (some 43,000 events over a few seconds), once against
// each of two daemons.
TEST(CaptureTest, ALookBackReadsABigProcessInPartsAndSaysTheSame) {
  struct Seen {
    std::vector<std::string> rows;  // name, Self NEURON, NEURON total, # of Calls
    std::string totals;             // "Self NEURON time total: ..."
    std::string summary;
    std::set<uint32_t> sequences;  // of trace.pftrace's packets
  };
  auto look_back = [](const std::string& name, const std::string& part_events) {
    Seen seen;
    Daemon daemon(name);
    EXPECT_TRUE(daemon.Start({"--capture_part_events=" + part_events}));
    const Result program =
        RunProcess({Runfile("examples/rmsnorm"), "--variant", "naive", "--iters", "1000"},
                   {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                    {"NRTPROF_ADDR", daemon.addr()},
                    {"NRT_SIM_TIME_SCALE", "1"}});
    EXPECT_EQ(program.exit_code, 0) << program.err;
    const std::string out = testing::TempDir(name) + "/cap";
    const Result r = RunProcess(
        Capture(daemon, {"--last", "60s", "--files", "pftrace,summary", "--out", out}), kCliEnv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    seen.summary = testing::ReadFile(out + "/summary.txt");
    for (absl::string_view line : absl::StrSplit(seen.summary, '\n')) {
      if (absl::StartsWith(line, "Self NEURON time total:")) seen.totals = std::string(line);
      std::vector<absl::string_view> cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (cells.size() == 8 && cells[0] != "Name" && !absl::StartsWith(cells[0], "---")) {
        seen.rows.push_back(absl::StrCat(cells[0], " ", cells[3], " ", cells[5], " ", cells[7]));
      }
    }
    absl::StatusOr<nrtprof::daemon::ReadTrace> trace =
        nrtprof::daemon::ReadPerfettoTrace(testing::ReadFile(out + "/trace.pftrace"));
    EXPECT_TRUE(trace.ok()) << trace.status();
    if (trace.ok()) {
      for (const auto& packet : trace->trace.packet()) {
        seen.sequences.insert(packet.trusted_packet_sequence_id());
      }
    }
    return seen;
  };
  const Seen parts = look_back("capture-parts", "1000");
  const Seen whole = look_back("capture-whole", "0");
  EXPECT_GE(whole.rows.size(), 6u) << whole.summary;
  EXPECT_EQ(parts.rows, whole.rows) << parts.summary << whole.summary;
  EXPECT_EQ(parts.totals, whole.totals);
  EXPECT_NE(whole.totals, "Self NEURON time total: 0.000us");
  EXPECT_FALSE(absl::StrContains(parts.summary, "Uncorrelated")) << parts.summary;
  EXPECT_FALSE(absl::StrContains(whole.summary, "Uncorrelated")) << whole.summary;
  // Each part's lanes are sequences of their own: a process in parts has more of them.
  EXPECT_GT(parts.sequences.size(), whole.sequences.size() + 4)
      << parts.sequences.size() << " against " << whole.sequences.size();
}

// The names in folder `dir`.
std::set<std::string> FilesIn(const std::string& dir) {
  std::set<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.insert(e->d_name);
    }
    closedir(d);
  }
  return names;
}

// `--files` writes only the kinds it names; the table comes either way, and the closing line
// points only at a trace that is there.
TEST(CaptureTest, FilesWritesOnlyTheKindsNamed) {
  Daemon daemon("capture-files");
  ASSERT_TRUE(daemon.Start());
  const std::string dir = testing::TempDir("capture-files");
  const Result program = FusedRmsnorm(daemon);
  ASSERT_EQ(program.exit_code, 0) << program.err;

  const std::string traced = dir + "/pftrace-summary";
  const Result r = RunProcess(
      Capture(daemon, {"--last", "30s", "--files", "pftrace,summary", "--out", traced}), kCliEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(FilesIn(traced), (std::set<std::string>{"trace.pftrace", "summary.txt",
                                                    "summary.csv", "summary.json"}))
      << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "Self NEURON time total")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "/trace.pftrace in the Perfetto UI")) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "trace.json")) << r.err;
  EXPECT_EQ(testing::CallsByName(traced)["nrt_load"], 1) << r.err;
  // The trace holds the calls: its own table says so.
  const Result from_trace = RunProcess(
      {Runfile("client/nrtprof"), "summary", traced + "/trace.pftrace", "--from-trace",
       "--format", "csv"},
      kCliEnv);
  ASSERT_EQ(from_trace.exit_code, 0) << from_trace.err;
  EXPECT_TRUE(absl::StrContains(from_trace.out, "\nnrt_load,")) << from_trace.out;

  // Only the summary: no trace to point at; the same table.
  const std::string table = dir + "/summary-only";
  const Result only = RunProcess(
      Capture(daemon, {"--last", "30s", "--files", "summary", "--out", table}), kCliEnv);
  ASSERT_EQ(only.exit_code, 0) << only.err;
  EXPECT_EQ(FilesIn(table),
            (std::set<std::string>{"summary.txt", "summary.csv", "summary.json"}))
      << only.err;
  EXPECT_FALSE(absl::StrContains(only.err, "Perfetto")) << only.err;
  EXPECT_EQ(testing::CallsByName(table), testing::CallsByName(traced));

  // The model file and its device trace are the artifacts.
  const std::string artifacts = dir + "/artifacts";
  const Result models = RunProcess(
      Capture(daemon, {"--last", "30s", "--files", "artifacts,json", "--out", artifacts}),
      kCliEnv);
  ASSERT_EQ(models.exit_code, 0) << models.err;
  const std::set<std::string> written = FilesIn(artifacts);
  EXPECT_EQ(written.count("trace.json"), 1u) << models.err;
  EXPECT_EQ(written.count("trace.pftrace") + written.count("summary.txt"), 0u) << models.err;
  EXPECT_EQ(std::count_if(written.begin(), written.end(),
                          [](const std::string& f) { return absl::EndsWith(f, ".neff"); }),
            1)
      << models.err;
  EXPECT_TRUE(absl::StrContains(models.err, "/trace.json in chrome://tracing")) << models.err;
}

// With no capture running a process holds its events longer before it sends them
// (NRTPROF_RECORDER_BATCH_MS: here an hour); a capture's stop asks for them at once, so
// `--last` holds the calls a running program made just before the request.
TEST(CaptureTest, LastHoldsTheCallsMadeJustBeforeTheRequest) {
  Daemon daemon("capture-flush");
  ASSERT_TRUE(daemon.Start());
  const std::string dir = testing::TempDir("capture-flush");
  // nrt_init, nrt_tensor_allocate and 40 writes, then it waits (for a SIGINT never sent).
  Background program({Runfile("tests/abrupt_end"), "sigint", "40"},
                     {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                      {"NRTPROF_ADDR", daemon.addr()},
                      {"NRTPROF_RECORDER_BATCH_MS", "3600000"},
                      {"NRT_SIM_TIME_SCALE", "0"}},
                     testing::TempDir("capture-flush-program"));
  for (int i = 0; i < 200 && !absl::StrContains(program.out(), "waiting for SIGINT"); ++i) {
    usleep(50'000);
  }
  ASSERT_TRUE(absl::StrContains(program.out(), "waiting for SIGINT")) << program.err();
  EXPECT_EQ(daemon.StatusFigure("events received:"), 0) << "held in the process";
  const std::string out = dir + "/cap";
  const Result r = RunProcess(Capture(daemon, {"--last", "30s", "--out", out}), kCliEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "from 1 process,")) << r.err;
  auto calls = testing::CallsByName(out);
  EXPECT_EQ(calls["nrt_init"], 1) << r.err;
  EXPECT_EQ(calls["nrt_tensor_write"], 40) << r.err;
  EXPECT_TRUE(program.Running());
}

// Over its byte bound the recorder lets the oldest go, counts it, and says so in a capture
// that asked for more than it held.
TEST(CaptureTest, TheRecorderStaysWithinItsBound) {
  Daemon daemon("capture-bound");
  ASSERT_TRUE(daemon.Start({"--flight_recorder_bytes=1048576"}));
  const std::string dir = testing::TempDir("capture-bound");
  // Batches are kept compressed (about 16 bytes an event): 1 MiB holds some 65,000 events.
  // Three floods send more than that.
  for (int i = 0; i < 3; ++i) {
    const Result flood = RunProcess({Runfile("tests/abrupt_end"), "exit", "60000"},
                                    {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                                     {"NRTPROF_ADDR", daemon.addr()},
                                     {"NRT_SIM_TIME_SCALE", "0"}});
    ASSERT_EQ(flood.exit_code, 0) << flood.err;
  }
  const Result status =
      RunProcess({Runfile("client/nrtprof"), "status", "--addr", daemon.addr()}, kCliEnv);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(absl::StrContains(status.out, "(bounds 30 s, 1 MiB)")) << status.out;
  EXPECT_TRUE(absl::StrContains(status.out, "recording:           no capture in progress\n"))
      << status.out;
  EXPECT_FALSE(absl::StrContains(status.out, "; 0 events evicted")) << status.out;
  // The same for scripts.
  const Result json = RunProcess(
      {Runfile("client/nrtprof"), "status", "--json", "--addr", daemon.addr()}, kCliEnv);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_TRUE(absl::StartsWith(json.out, "{\"address\":\"" + daemon.addr() + "\"")) << json.out;
  EXPECT_TRUE(absl::StrContains(json.out, "\"flight_recorder\":{\"seconds_limit\":\"30\","))
      << json.out;
  EXPECT_FALSE(absl::StrContains(json.out, "\"evicted_events\":\"0\"")) << json.out;
  const Result r = RunProcess(Capture(daemon, {"--last", "1m", "--out", dir + "/cap"}), kCliEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "nrtprof capture: the flight recorder held only the last "))
      << r.err;
  // What it still held: the newest of the flood (its ranges and calls travel in batches of
  // their own, so the two may be cut at different points), never more than was made.
  auto calls = testing::CallsByName(dir + "/cap");
  EXPECT_GT(calls["step"] + calls["nrt_tensor_write"], 0) << r.err;
  EXPECT_LT(calls["step"], 3 * 60000) << r.err;
  EXPECT_LT(calls["nrt_tensor_write"], 3 * 120000) << r.err;
}

TEST(CaptureTest, LastNeedsTheRecorder) {
  Daemon daemon("capture-norecorder");
  ASSERT_TRUE(daemon.Start({"--flight_recorder_seconds=0"}));
  const Result r = RunProcess(Capture(daemon, {"--last", "5s"}), kCliEnv);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "nrtprof capture: cannot start a capture: this daemon's flight recorder is off "
            "(--flight_recorder_seconds 0): it holds no past to capture\n");
}

// Whole steps: two programs marking steps (nrtprof_step), started apart, are captured over the
// same step numbers, the first a multiple of 10.
TEST(CaptureTest, IterationsAreTheSameStepsInEveryProcess) {
  Daemon daemon("capture-steps");
  ASSERT_TRUE(daemon.Start());
  const std::string dir = testing::TempDir("capture-steps");
  std::vector<std::unique_ptr<Background>> programs;
  for (int i = 0; i < 2; ++i) {
    // At the device's pace (2.355 ms a step): long enough to be running when asked.
    programs.push_back(std::make_unique<Background>(
        std::vector<std::string>{Runfile("examples/rmsnorm"), "--variant", "naive", "--iters",
                                 "1500"},
        std::map<std::string, std::string>{{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                                           {"NRTPROF_ADDR", daemon.addr()},
                                           {"NRT_SIM_TIME_SCALE", "1"}},
        testing::TempDir(absl::StrCat("capture-steps-", i))));
    usleep(400'000);
  }
  ASSERT_TRUE(AwaitConnected(daemon, 2));
  // nrtprof status shows each process's latest step once it has marked one, its executable last.
  Result status;
  int stepping = 0;
  for (int attempt = 0; attempt < 50 && stepping < 2; ++attempt) {
    if (attempt > 0) usleep(100'000);
    status = RunProcess({Runfile("client/nrtprof"), "status", "--addr", daemon.addr()}, kCliEnv);
    ASSERT_EQ(status.exit_code, 0) << status.err;
    stepping = 0;
    for (absl::string_view line : absl::StrSplit(status.out, '\n')) {
      if (!absl::StartsWith(line, "  pid ") || !absl::EndsWith(line, "examples/rmsnorm")) continue;
      const size_t at = line.find(" step ");
      ASSERT_NE(at, absl::string_view::npos) << status.out;
      uint64_t step = 0;
      if (absl::SimpleAtoi(line.substr(at + 6, line.find(' ', at + 6) - at - 6), &step)) {
        ++stepping;
      }
    }
  }
  EXPECT_EQ(stepping, 2) << status.out;
  const std::string out = dir + "/cap";
  const Result r = RunProcess(
      Capture(daemon, {"--iterations", "5", "--step-multiple", "10", "--out", out}), kCliEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.err.find("): steps ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const uint64_t first = std::stoull(r.err.substr(at + 9));
  EXPECT_EQ(first % 10, 0u) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("steps ", first, " to ", first + 4,
                                                    " of each process")))
      << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "from 2 processes,")) << r.err;
  // Each of the five steps once per process, and no other step.
  const std::string trace = testing::ReadFile(out + "/trace.json");
  size_t steps = 0;
  for (size_t pos = 0; (pos = trace.find("\"name\":\"ProfilerStep#", pos)) != std::string::npos;
       ++pos) {
    ++steps;
  }
  EXPECT_EQ(steps, 10u);
  for (uint64_t k = first; k < first + 5; ++k) {
    const std::string name = absl::StrCat("\"name\":\"ProfilerStep#", k, "\"");
    size_t n = 0;
    for (size_t pos = 0; (pos = trace.find(name, pos)) != std::string::npos; ++pos) ++n;
    EXPECT_EQ(n, 2u) << name;
  }
  // And the table says what a step cost on the device.
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(out + "/summary.txt"), "2.355ms")) << r.err;
}

// Whole steps of a program that ends first: the capture ends when it does, says so, and writes
// the steps it made (it used to wait an hour for a step that never came).
TEST(CaptureTest, IterationsEndWhenTheProcessesEndFirst) {
  Daemon daemon("capture-steps-end");
  ASSERT_TRUE(daemon.Start());
  Background program(
      {Runfile("examples/rmsnorm"), "--variant", "naive", "--iters", "400"},
      {{"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
       {"NRTPROF_ADDR", daemon.addr()},
       {"NRT_SIM_TIME_SCALE", "1"}},
      testing::TempDir("capture-steps-end"));
  ASSERT_TRUE(AwaitConnected(daemon, 1));
  const std::string out = testing::TempDir("capture-steps-end-out") + "/cap";
  // Far more steps than the program makes; `timeout` turns the old hour's wait into a failure.
  std::vector<std::string> argv = {"/usr/bin/timeout", "60"};
  for (const std::string& a : Capture(daemon, {"--iterations", "50000", "--out", out})) {
    argv.push_back(a);
  }
  const Result r = RunProcess(argv, kCliEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(program.Wait(), 0) << program.err();
  EXPECT_TRUE(absl::StrContains(r.err, " ended before step ")) << r.err;  // its last, never made
  EXPECT_TRUE(absl::StrContains(r.err, " of the 50000 steps (the others came after")) << r.err;
  // The steps it made in the window are in the trace.
  const std::string trace = testing::ReadFile(out + "/trace.json");
  EXPECT_TRUE(absl::StrContains(trace, "\"name\":\"ProfilerStep#")) << r.err;
}

// Whole steps that no process makes (issue 36: with none connected it waited until Ctrl-C, said
// nothing, then spoke of a flight recorder that "held only the last 0.0 s of the 614.1 s asked
// for", and exited 0): it says at once that no process marks steps, and how long it waits; it
// ends by itself after --step_timeout, says so, and exits 3 for the empty capture.
TEST(CaptureTest, IterationsThatNoProcessMarksEndByThemselves) {
  // A recorder of 1 s: the wait outlasts it, as the hour did the default's 30 s.
  Daemon daemon("capture-no-steps");
  ASSERT_TRUE(daemon.Start({"--flight_recorder_seconds=1"}));
  const std::string dir = testing::TempDir("capture-no-steps");
  // `timeout` turns a wait that does not end by itself into a failure.
  auto capture = [&](const std::string& out, const std::string& step_timeout) {
    std::vector<std::string> argv = {"/usr/bin/timeout", "60"};
    for (const std::string& a : Capture(daemon, {"--iterations", "5", "--step-multiple", "10",
                                                 "--step_timeout", step_timeout, "--out", out})) {
      argv.push_back(a);
    }
    return RunProcess(argv, kCliEnv);
  };
  auto lines_with = [](const std::string& text, const std::string& part) {
    int n = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) n += absl::StrContains(line, part);
    return n;
  };

  // Nobody connected.
  Result r = capture(dir + "/nobody", "2s");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, " of each process, waiting at most 2s for a process that "
                                       "marks steps (--step_timeout); Ctrl-C ends it early\n"))
      << r.err;
  EXPECT_EQ(lines_with(r.err, "nrtprof capture: no process connected marks steps (nrtprof_step): "
                              "none is connected; waiting "),
            1)
      << r.err;
  EXPECT_EQ(lines_with(r.err, "nrtprof capture: no process marked steps (nrtprof_step) within 2s "
                              "(--step_timeout): the capture ends"),
            1)
      << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "nrtprof capture: the capture is empty: no process marked "
                                       "any of steps "))
      << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "interrupted")) << r.err;
  EXPECT_TRUE(testing::Exists(dir + "/nobody/summary.txt")) << r.err;

  // A process connected that marks no steps, streaming all the while: its events leave the 1 s
  // recorder during the wait, and no note about the recorder is made of it (no --last).
  auto program = BusyProgram(daemon, dir);
  ASSERT_TRUE(AwaitConnected(daemon, 1)) << program->err();
  r = capture(dir + "/busy", "3s");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(lines_with(r.err, "nrtprof capture: no process connected marks steps (nrtprof_step): "
                              "1 connected, none has marked one; waiting "),
            1)
      << r.err;
  EXPECT_EQ(lines_with(r.err, "within 3s (--step_timeout): the capture ends"), 1) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "flight recorder")) << r.err;
  EXPECT_GT(daemon.StatusFigure("events received:"), 1000) << "the program streamed meanwhile";
  EXPECT_TRUE(program->Running());
}

TEST(CaptureTest, BadInputIsOneLine) {
  Daemon daemon("capture-bad");
  ASSERT_TRUE(daemon.Start());
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{}, {"--duration", "0s"}, {"--duration", "25h"}}) {
    const Result r = RunProcess(Capture(daemon, flags), kCliEnv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(absl::StartsWith(r.err, "nrtprof capture: --duration must be more than 0"))
        << r.err;
  }
  const Result both = RunProcess(
      Capture(daemon, {"--iterations", "5", "--duration", "1s"}), kCliEnv);
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_TRUE(absl::StartsWith(
      both.err, "nrtprof capture: --iterations takes whole steps: not with --duration or --last"))
      << both.err;
  // A flag given with its default's value, or one that goes with another that is not given.
  const std::pair<std::vector<std::string>, std::string> one_lines[] = {
      {{"--last", "0s"}, "nrtprof capture: --last must be more than 0 and at most 24h (as 30s); "},
      {{"--last", "-5s"}, "nrtprof capture: --last must be more than 0 and at most 24h (as 30s); "},
      {{"--iterations", "0"}, "nrtprof capture: --iterations must be from 1 to 100000\n"},
      {{"--iterations", "2", "--step-multiple", "0"},
       "nrtprof capture: --iterations must be from 1 to 100000 and --step_multiple from 1 to "
       "1000000\n"},
      {{"--duration", "1s", "--step-multiple", "3"},
       "nrtprof capture: --step_multiple goes with --iterations (it picks the first step); "},
      {{"--duration", "1s", "--step_timeout", "5s"},
       "nrtprof capture: --step_timeout goes with --iterations (the wait for a process that marks "
       "steps); "},
      {{"--iterations", "2", "--step_timeout", "0s"},
       "nrtprof capture: --step_timeout must be more than 0 and at most 1h (as 60s)\n"},
      {{"--iterations", "2", "--step_timeout", "2h"},
       "nrtprof capture: --step_timeout must be more than 0 and at most 1h (as 60s)\n"},
  };
  for (const auto& [flags, line] : one_lines) {
    const Result r = RunProcess(Capture(daemon, flags), kCliEnv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(absl::StartsWith(r.err, line)) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const Result pid = RunProcess(Capture(daemon, {"--duration", "1s", "--pid", "x"}), kCliEnv);
  EXPECT_EQ(pid.exit_code, 2);
  EXPECT_EQ(pid.err, "nrtprof capture: --pid 'x' is not a process id\n");
  const Result files =
      RunProcess(Capture(daemon, {"--last", "1s", "--files", "pftrace,html"}), kCliEnv);
  EXPECT_EQ(files.exit_code, 2);
  EXPECT_EQ(files.err,
            "nrtprof capture: --files: 'html' is not a kind of capture file (pftrace, json, "
            "summary, artifacts)\n");
  const Result merged = RunProcess({Runfile("client/nrtprof"), "capture", "--last", "1s", "--files",
                                    "json", "--hosts", "a:1,b:2"},
                                   kCliEnv);
  EXPECT_EQ(merged.exit_code, 2);
  EXPECT_TRUE(absl::StartsWith(merged.err, "nrtprof capture: --hosts merges every host's"))
      << merged.err;
  const Result absent = RunProcess({Runfile("client/nrtprof"), "capture", "--duration", "1s",
                                    "--addr", "unix:/tmp/nrtprof-no-such-folder-4711/d.sock"},
                                   kCliEnv);
  EXPECT_EQ(absent.exit_code, 1) << absent.err;
  EXPECT_TRUE(absl::StrContains(absent.err, "start nrtprofd first, or use nrtprof run"))
      << absent.err;
  EXPECT_EQ(std::count(absent.err.begin(), absent.err.end(), '\n'), 1) << absent.err;
  // A path longer than a unix socket takes: one line, no gRPC log.
  const Result long_path = RunProcess(
      {Runfile("client/nrtprof"), "capture", "--duration", "1s", "--addr",
       "unix:/tmp/" + std::string(120, 'x') + "/d.sock"},
      kCliEnv);
  EXPECT_EQ(long_path.exit_code, 2) << long_path.err;
  EXPECT_TRUE(absl::StrContains(long_path.err, "bytes, the most a unix socket takes\n"))
      << long_path.err;
  EXPECT_EQ(std::count(long_path.err.begin(), long_path.err.end(), '\n'), 1) << long_path.err;
}

}  // namespace
}  // namespace nrtprof
