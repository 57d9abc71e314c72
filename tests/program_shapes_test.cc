// Programs of unusual shapes under `nrtprof run` with a real daemon (issue 11, "Never break the
// program"): main() calling pthread_exit while a worker goes on, calls made as a thread ends,
// a command line over the Hello's 1 MiB limit, every descriptor taken right after the first
// libnrt call, a limited address space (ulimit -v; rings it has no room for), and a shim that
// cannot make the helper thread its threads are made from. Each exits and prints as without the
// profiler; what the profiler could not do is said in one "nrtprof: " line, and the capture keeps
// the calls.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/background_slice.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::Background;
using testing::CallsByName;
using testing::Daemon;
using testing::ReadFile;
using testing::Result;
using testing::RunProcess;
using testing::Runfile;
using testing::TempDir;

const std::map<std::string, std::string> kPlainEnv = {
    {"NRT_SIM_TIME_SCALE", "0"}, {"NRTPROF_ADDR", ""}, {"LD_PRELOAD", ""}};

std::string Model() { return testing::AddModel(); }

std::vector<std::string> Program(const std::string& mode, int n) {
  return {Runfile("tests/program_shapes"), Model(), mode, std::to_string(n)};
}

// `command` under a shell that first runs `ulimit_flags` (e.g. "-n 128"), so that the limit is
// the program's only, not nrtprof's or the daemon's.
std::vector<std::string> Limited(const std::string& ulimit_flags,
                                 const std::vector<std::string>& command) {
  std::string script = "ulimit " + ulimit_flags + " && exec";
  for (size_t i = 0; i < command.size(); ++i) script += " \"$" + std::to_string(i + 1) + "\"";
  std::vector<std::string> argv = {"/bin/sh", "-c", script, "sh"};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::vector<std::string> NrtprofRun(const Daemon& daemon, const std::string& out,
                             const std::vector<std::string>& command) {
  std::vector<std::string> argv = {Runfile("client/nrtprof"), "run", "--addr", daemon.addr(),
                                   "--out", out, "--"};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

int64_t Calls(const std::string& capture, const std::string& name) {
  const std::map<std::string, int64_t> calls = CallsByName(capture);
  return calls.count(name) ? calls.at(name) : 0;
}

// The lines the shim wrote (nrtprof run's own say "nrtprof: capture", "nrtprof: N events",
// "nrtprof: open"); every one begins "nrtprof: ", and gRPC's own format (E1203 12:00:00...)
// never appears.
std::vector<std::string> ShimLines(const std::string& err) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(err, '\n')) {
    EXPECT_FALSE(line.size() > 5 && (line[0] == 'E' || line[0] == 'W' || line[0] == 'I') &&
                 absl::ascii_isdigit(line[1]) && absl::ascii_isdigit(line[4]))
        << "gRPC wrote on the program's stderr: " << line;
    EXPECT_FALSE(absl::StrContains(line, "terminate called")) << line;
    if (!absl::StartsWith(line, "nrtprof: ") || absl::StartsWith(line, "nrtprof: capture ") ||
        absl::StartsWith(line, "nrtprof: open ") || absl::StrContains(line, " events from ")) {
      continue;
    }
    lines.emplace_back(line);
  }
  return lines;
}

// glibc ends a process whose main() called pthread_exit when its last thread ends, with
// exit(0) and the atexit handlers; the shim's threads must not keep it alive.
TEST(ProgramShapesTest, PthreadExitFromMainEndsTheProcessAsWithoutTheProfiler) {
  const Result plain = RunProcess(Program("pthread_exit", 50), kPlainEnv);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_TRUE(absl::StrContains(plain.out, "atexit handler ran")) << plain.out;
  Daemon daemon("pthread-exit");
  ASSERT_TRUE(daemon.Start());
  const std::string dir = TempDir("pthread-exit");
  Background run(NrtprofRun(daemon, dir + "/capture", Program("pthread_exit", 50)), kPlainEnv, dir);
  // A hang guard only (the program takes well under a second): a process kept alive by the
  // shim never ends on its own.
  for (int i = 0; i < 600 && run.Running(); ++i) usleep(100 * 1000);
  if (run.Running()) {
    kill(run.pid(), SIGKILL);
    FAIL() << "the process never ended: " << run.err();
  }
  EXPECT_EQ(run.Wait(), 0) << run.err();
  EXPECT_EQ(run.out(), plain.out);
  // The exit flush ran: the worker's executions are in the capture too.
  EXPECT_EQ(Calls(dir + "/capture", "nrt_execute"), 100) << run.err();
}

// A thread's calls as it ends: from a C++ thread_local's destructor, and from a pthread key's
// destructor that glibc runs after the profiler's own (the key was made later). Every one is
// in the capture, none dropped (seen before the fix: the key destructor's 40 executions
// passed through unrecorded, counted as dropped).
TEST(ProgramShapesTest, CallsMadeAsAThreadEndsAreRecorded) {
  const Result plain = RunProcess(Program("thread_exit", 40), kPlainEnv);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_TRUE(absl::StrContains(plain.out, "key destructor checksum")) << plain.out;
  Daemon daemon("thread-exit");
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("thread-exit") + "/capture";
  const Result r = RunProcess(NrtprofRun(daemon, out, Program("thread_exit", 40)), kPlainEnv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  EXPECT_TRUE(ShimLines(r.err).empty()) << r.err;
  // main 40, the worker 40, its thread_local 40, its key 40.
  EXPECT_EQ(Calls(out, "nrt_execute"), 160) << r.err;
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/summary.txt"), "Events dropped: 0\n"))
      << ReadFile(out + "/summary.txt");
}

// A command line over the Hello's 1 MiB limit is cut with a marker; the capture is kept.
TEST(ProgramShapesTest, ACommandLineOverTheLimitKeepsTheCapture) {
  std::vector<std::string> command = Program("steady", 20);
  for (int i = 0; i < 12; ++i) command.push_back(std::string(100'000, 'a' + i));
  const Result plain = RunProcess(command, kPlainEnv);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  Daemon daemon("long-cmdline");
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("long-cmdline") + "/capture";
  const Result r = RunProcess(NrtprofRun(daemon, out, command), kPlainEnv);
  EXPECT_EQ(r.exit_code, 0) << r.err.substr(0, 2000);
  EXPECT_EQ(r.out, plain.out);
  EXPECT_FALSE(absl::StrContains(r.err, "called libnrt")) << r.err.substr(0, 2000);
  EXPECT_EQ(Calls(out, "nrt_execute"), 20);
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/trace.pftrace"), "[truncated by nrtprof]"));
}

// Every descriptor taken right after the first libnrt call: the shim cannot open its socket,
// says so in one line, keeps the events and delivers them once descriptors are back.
TEST(ProgramShapesTest, NoDescriptorsForTheSocketIsSaidAndNothingIsLost) {
  const std::vector<std::string> command = Limited("-n 128", Program("eat_fds", 100));
  const Result plain = RunProcess(command, kPlainEnv);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_TRUE(absl::StrContains(plain.out, "took all free descriptors")) << plain.out;
  Daemon daemon("no-fds");
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("no-fds") + "/capture";
  const Result r = RunProcess(NrtprofRun(daemon, out, command), kPlainEnv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  // The program takes the descriptors right after its first call, racing the flusher's
  // connection: most runs the shim finds none left and says so once, sometimes it connected
  // first and has nothing to say. Either way nothing is lost.
  const std::vector<std::string> lines = ShimLines(r.err);
  ASSERT_LE(lines.size(), 1u) << r.err;
  if (!lines.empty()) {
    EXPECT_TRUE(absl::StartsWith(lines[0], "nrtprof: cannot connect to the daemon at " +
                                               daemon.addr() + ": Too many open files"))
        << lines[0];
  }
  EXPECT_EQ(Calls(out, "nrt_execute"), 200) << r.err;
}

// Under ulimit -v, where the program runs as well bare, the shim never throws nor aborts:
// the program's exit code and output are its own, and whatever the shim could not do is said
// in "nrtprof: " lines (gRPC prints nothing of its own).
TEST(ProgramShapesTest, ALimitedAddressSpaceNeverBreaksTheProgram) {
  Daemon daemon("ulimit-v");
  ASSERT_TRUE(daemon.Start());
  for (const char* kib : {"100000", "200000", "300000", "400000", "500000"}) {
    const std::vector<std::string> command =
        Limited(std::string("-v ") + kib, Program("steady", 200));
    const Result plain = RunProcess(command, kPlainEnv);
    ASSERT_EQ(plain.exit_code, 0) << kib << ": " << plain.err;
    const std::string out = TempDir(std::string("ulimit-v-") + kib) + "/capture";
    const Result r = RunProcess(NrtprofRun(daemon, out, command), kPlainEnv);
    // The program's own 0, or 3 (nrtprof run's code for a capture left empty) where the shim
    // recorded nothing.
    EXPECT_TRUE(r.exit_code == 0 || (r.exit_code == 3 && Calls(out, "nrt_execute") == 0))
        << kib << ": " << r.exit_code << ": " << r.err;
    EXPECT_EQ(r.out, plain.out) << kib;
    ShimLines(r.err);
    // Either the capture has every call, or the shim said why not.
    const int64_t executions = Calls(out, "nrt_execute");
    if (executions != 200) {
      EXPECT_TRUE(absl::StrContains(r.err, "nrtprof: the profiler") ||
                  absl::StrContains(r.err, "nrtprof: cannot") ||
                  absl::StrContains(r.err, "nrtprof: the process's address space"))
          << kib << ": " << executions << " executions recorded, and nothing said: " << r.err;
    }
  }
}

// The figure after `"key": ` in a capture's summary.json (events_dropped's reasons), or -1.
int64_t SummaryFigure(const std::string& capture, const std::string& key) {
  const std::string json = ReadFile(capture + "/summary.json");
  const std::string quoted = "\"" + key + "\": ";
  const size_t at = json.find(quoted);
  if (at == std::string::npos) return -1;
  return strtoll(json.c_str() + at + quoted.size(), nullptr, 10);
}

// `command` under `nrtprof run` (capture in *out) with the largest rings, NRTPROF_RING_EVENTS=
// 4194304 (256 MiB each); *plain_out: its output run bare, which must succeed.
Result RunWithLargestRings(const std::string& name, const std::vector<std::string>& command,
                           std::string* out, std::string* plain_out) {
  const Result plain = RunProcess(command, kPlainEnv);
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  *plain_out = plain.out;
  Daemon daemon(name);
  EXPECT_TRUE(daemon.Start());
  *out = TempDir(name) + "/capture";
  std::map<std::string, std::string> env = kPlainEnv;
  env["NRTPROF_RING_EVENTS"] = "4194304";
  return RunProcess(NrtprofRun(daemon, *out, command), env);
}

// Threads that find no memory for their rings (rings of NRTPROF_RING_EVENTS=4194304, 256 MiB
// each, for 8 threads alive at once, under a 1.4 GB limit the program fits in bare) record
// nothing. Their calls are counted as no_memory, not ring_full (which would send the user to
// NRTPROF_RING_EVENTS), and the shim says so once; the program runs as it does bare.
TEST(ProgramShapesTest, CallsOfThreadsWithNoMemoryForARingAreCountedAsNoMemory) {
  std::string out, plain_out;
  const Result r = RunWithLargestRings("no-ring", Limited("-v 1400000", Program("threads", 20)),
                                       &out, &plain_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain_out);
  // 9 threads' 180 executions, each 4 calls (2 writes, the execution, a read): those not in the
  // capture are counted, every call of them, and as no_memory.
  const int64_t recorded = Calls(out, "nrt_execute");
  const int64_t no_memory = SummaryFigure(out, "no_memory");
  EXPECT_LT(recorded, 180) << "8 rings of 256 MiB cannot fit in 1.4 GB: " << r.err;
  EXPECT_GE(no_memory, 4 * (180 - recorded)) << r.err;
  EXPECT_EQ(SummaryFigure(out, "ring_full"), 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "nrtprof: the profiler ran out of memory")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "counted as dropped (no_memory)")) << r.err;
}

// Rings too large for the room a limited address space leaves are refused at the start, with
// the reason, instead of recording nothing (seen: a 700 MB limit with rings of 256 MiB passed
// the check and every call was dropped, counted as ring_full).
TEST(ProgramShapesTest, RingsTooLargeForTheAddressSpaceAreSaidAtTheStart) {
  std::string out, plain_out;
  const Result r = RunWithLargestRings("big-rings", Limited("-v 700000", Program("steady", 40)),
                                       &out, &plain_out);
  // The program's own 0 and nothing recorded: nrtprof run's code for an empty capture.
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, plain_out);
  EXPECT_TRUE(absl::StrContains(r.err, "the profiler needs about 1152 MiB; not profiling"))
      << r.err;
}

// Under ulimit -f, where the program runs as well bare: a file the profiler grows past the
// limit would get the program killed (SIGXFSZ; seen: exit 153 with the rings file). The rings
// file stays within it (or rings are private memory), and so does a lossless spool.
TEST(ProgramShapesTest, AFileSizeLimitNeverKillsTheProgram) {
  const std::vector<std::string> command = Limited("-f 512", Program("steady", 100));
  const Result plain = RunProcess(command, kPlainEnv);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{}, {"--mode", "lossless"}}) {
    const std::string out = TempDir(flags.empty() ? "fsize" : "fsize-lossless");
    const Result r = testing::RunProfiled(out, command, flags, kPlainEnv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, plain.out);
    EXPECT_EQ(Calls(out, "nrt_execute"), 100) << r.err;
  }
}

// se.slice of the threads in a `program_shapes slices` output: name -> slices.
std::multimap<std::string, int64_t> Slices(const std::string& out) {
  std::multimap<std::string, int64_t> slices;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    const std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() == 3 && f[0] == "slice") slices.emplace(f[1], std::stoll(f[2]));
  }
  return slices;
}

// se.slice of a thread, from its sched file; -1 if not shown.
int64_t SliceOf(const std::string& task_dir) {
  for (absl::string_view line : absl::StrSplit(ReadFile(task_dir + "/sched"), '\n')) {
    if (!absl::StartsWith(line, "se.slice")) continue;
    const size_t colon = line.find(':');
    if (colon != absl::string_view::npos) return std::stoll(std::string(line.substr(colon + 1)));
  }
  return -1;
}

// The slice a thread of this process has after asking for the long one (UseBackgroundSlice),
// or -1.
int64_t LongSliceHere() {
  int64_t slice = -1;
  std::thread([&slice] {
    if (UseBackgroundSlice()) slice = SliceOf("/proc/thread-self");
  }).join();
  return slice;
}

// The slice of the program's two threads (main and program-worker) run bare.
void ProgramSliceBare(int64_t* slice) {
  const Result plain = RunProcess(Program("slices", 5), kPlainEnv);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::multimap<std::string, int64_t> before = Slices(plain.out);
  ASSERT_EQ(before.size(), 2u) << plain.out;
  ASSERT_EQ(before.begin()->second, std::next(before.begin())->second) << plain.out;
  *slice = before.begin()->second;
}

constexpr char kNoCustomSlices[] =
    "this kernel has no custom slices for SCHED_OTHER threads (Linux 6.12+) or does not show "
    "se.slice; got ";

// A program thread that wakes on a CPU where one of the profiler's threads runs takes it at
// once, not after that thread's slice (measured: ~1 us a call on the run queue at 10,000 calls
// a second; BENCHMARKS.md, "Session 20"). The shim's threads (its flusher and gRPC's) and the
// daemon's ask for the kernel's longest slice; the program's own threads, made before or
// after the profiler started, keep theirs.
TEST(ProgramShapesTest, TheProfilersThreadsGiveWayToTheProgramsWhenTheyWake) {
  if (const int64_t probe = LongSliceHere(); probe != static_cast<int64_t>(kBackgroundSliceNs)) {
    GTEST_SKIP() << kNoCustomSlices << probe;
  }
  int64_t program_slice = -1;
  ASSERT_NO_FATAL_FAILURE(ProgramSliceBare(&program_slice));
  Daemon daemon("slices");
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("slices") + "/capture";
  const Result r = RunProcess(NrtprofRun(daemon, out, Program("slices", 5)), kPlainEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::multimap<std::string, int64_t> under = Slices(r.out);
  int shim_threads = 0;
  for (const auto& [name, slice] : under) {
    if (name == "program_shapes" || name == "program-worker") {
      EXPECT_EQ(slice, program_slice) << name << " is the program's: " << r.out;
    } else {
      EXPECT_EQ(slice, static_cast<int64_t>(kBackgroundSliceNs)) << name << ": " << r.out;
      ++shim_threads;
    }
  }
  EXPECT_EQ(under.count("program_shapes"), 1u) << r.out;
  EXPECT_EQ(under.count("program-worker"), 1u) << r.out;
  EXPECT_EQ(under.count("nrtprof-flush"), 1u) << r.out;
  EXPECT_GE(shim_threads, 2) << "the flusher and gRPC's: " << r.out;
  EXPECT_EQ(Calls(out, "nrt_execute"), 5) << r.err;
  // Every thread of the daemon, too.
  const std::string tasks = "/proc/" + std::to_string(daemon.pid()) + "/task";
  DIR* dir = opendir(tasks.c_str());
  ASSERT_NE(dir, nullptr);
  int daemon_threads = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string task = tasks + "/" + e->d_name;
    EXPECT_EQ(SliceOf(task), static_cast<int64_t>(kBackgroundSliceNs)) << ReadFile(task + "/comm");
    ++daemon_threads;
  }
  closedir(dir);
  EXPECT_GT(daemon_threads, 1);
}

// Where the short-lived thread that asks for the long slice cannot be made (a process at its
// thread limit), the shim makes its threads from the program's calling thread instead, and that
// thread keeps the scheduler's default slice: only a thread of the profiler's own ever asks.
TEST(ProgramShapesTest, WithoutItsHelperThreadTheShimStillRecordsAndLeavesTheProgramsSlice) {
  if (const int64_t probe = LongSliceHere(); probe != static_cast<int64_t>(kBackgroundSliceNs)) {
    GTEST_SKIP() << kNoCustomSlices << probe;
  }
  int64_t program_slice = -1;
  ASSERT_NO_FATAL_FAILURE(ProgramSliceBare(&program_slice));
  Daemon daemon("slices-fallback");
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("slices-fallback") + "/capture";
  std::map<std::string, std::string> env = kPlainEnv;
  env["LD_PRELOAD"] = Runfile("tests/librefuse_backend_thread.so");
  const Result r = RunProcess(NrtprofRun(daemon, out, Program("slices", 5)), env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "refused the backend's first thread")) << r.err;
  // Every thread has the default slice, the program's and the profiler's (made by the
  // program's thread, and bearing its name until they name themselves): the helper never ran.
  const std::multimap<std::string, int64_t> under = Slices(r.out);
  EXPECT_GE(under.count("program_shapes"), 1u) << r.out;
  EXPECT_EQ(under.count("program-worker"), 1u) << r.out;
  EXPECT_GE(under.size(), 4u) << "the program's two, the flusher and gRPC's: " << r.out;
  for (const auto& [name, slice] : under) EXPECT_EQ(slice, program_slice) << name << ": " << r.out;
  EXPECT_EQ(Calls(out, "nrt_execute"), 5) << r.err;
}

}  // namespace
}  // namespace nrtprof
