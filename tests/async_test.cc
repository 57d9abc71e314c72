// The explicit async API (nrt/nrt_async.h) under `nrtprof run` with a real daemon (issue 38):
// tests/programs/async_client.c, written from the public documentation only, runs bare and
// profiled in each of its shapes — one thread polling, two threads scheduling, NRT_QUEUE_FULL
// met and retried, completion through an eventfd, and a fork between rounds. Each profiled run
// prints what the bare one printed, and in its trace every device execution is linked to its
// own nrta_execute_schedule call, one to one, by the request's sequence number.
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

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

std::vector<std::string> Client(const std::string& mode, int n, int depth) {
  return {Runfile("tests/async_client"), Model(), mode, std::to_string(n),
          std::to_string(depth)};
}

// `command` under `nrtprof run` against `daemon`, its capture written to `out`.
Result ProfiledRun(const Daemon& daemon, const std::string& out,
                   const std::vector<std::string>& command,
                   const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {Runfile("client/nrtprof"), "run", "--addr", daemon.addr(),
                                   "--out", out, "--"};
  argv.insert(argv.end(), command.begin(), command.end());
  return RunProcess(argv, env);
}

struct Links {
  size_t executions = 0;          // nc_exec_running slices
  size_t schedules = 0;           // nrta_execute_schedule slices
  size_t linked = 0;              // executions whose correlation id is a schedule's
  size_t distinct = 0;            // distinct schedule ids among them
  std::set<std::string> tracks;   // the executions' lanes ("cat")
};

// Every execution's correlation id, against the nrta_execute_schedule calls', in trace.json.
Links LinksIn(const std::string& capture) {
  Links links;
  google::protobuf::Value doc;
  const std::string json = ReadFile(capture + "/trace.json");
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &doc).ok()) << capture;
  const google::protobuf::Value& events = doc.struct_value().fields().at("traceEvents");
  std::set<double> schedule_ids;
  std::vector<double> execution_ids;
  for (const google::protobuf::Value& e : events.list_value().values()) {
    const auto& f = e.struct_value().fields();
    if (!f.count("name") || !f.count("args") || f.at("ph").string_value() != "X") continue;
    const std::string& name = f.at("name").string_value();
    const auto& args = f.at("args").struct_value().fields();
    const double id = args.count("correlation_id") ? args.at("correlation_id").number_value() : 0;
    if (name == "nrta_execute_schedule") {
      ++links.schedules;
      schedule_ids.insert(id);
    } else if (name == "nc_exec_running") {
      ++links.executions;
      execution_ids.push_back(id);
      links.tracks.insert(f.count("cat") ? f.at("cat").string_value() : "");
    }
  }
  std::set<double> used;
  for (double id : execution_ids) {
    if (id != 0 && schedule_ids.count(id)) {
      ++links.linked;
      used.insert(id);
    }
  }
  links.distinct = used.size();
  return links;
}

struct Case {
  std::string mode;
  int executions, depth;
  size_t schedules;  // the profiled process's (the forked child's are not recorded)
  std::map<std::string, std::string> env;
};

void RunCase(const Case& c) {
  std::map<std::string, std::string> env = kPlainEnv;
  for (const auto& [k, v] : c.env) env[k] = v;
  const Result plain = RunProcess(Client(c.mode, c.executions, c.depth), env);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  Daemon daemon("async-" + c.mode);
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("async-" + c.mode) + "/capture";
  const Result r = ProfiledRun(daemon, out, Client(c.mode, c.executions, c.depth), env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out) << "the program behaves as without the profiler";
  const std::map<std::string, int64_t> calls = CallsByName(out);
  EXPECT_EQ(calls.count("nrta_execute_schedule") ? calls.at("nrta_execute_schedule") : 0,
            static_cast<int64_t>(c.schedules))
      << r.err;
  const Links links = LinksIn(out);
  EXPECT_EQ(links.schedules, c.schedules);
  EXPECT_EQ(links.executions, c.schedules);
  EXPECT_EQ(links.linked, links.executions) << "an execution not linked to a schedule call";
  EXPECT_EQ(links.distinct, links.executions) << "two executions linked to one schedule call";
  EXPECT_EQ(links.tracks.size(), 1u);
}

TEST(AsyncTest, OneThreadPolling) { RunCase({"poll", 40, 8, 40, {}}); }

// A polling loop does not flood the trace: of its nrta_is_completed calls only the poll that
// saw its request done is recorded — one per wait: two input writes, the execution and the
// output read of each of the 40 — and the table's calls count every poll the program made.
TEST(AsyncTest, PollsAreCountedNotRecordedOneByOne) {
  Daemon daemon("async-polls");
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("async-polls") + "/capture";
  // The device's time passes (scale 1), so that most polls find the request still running.
  std::map<std::string, std::string> env = kPlainEnv;
  env["NRT_SIM_TIME_SCALE"] = "1";
  const Result r = ProfiledRun(daemon, out, Client("poll", 40, 8), env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  google::protobuf::Value doc;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ReadFile(out + "/trace.json"), &doc).ok());
  size_t recorded = 0;
  double unrecorded = 0;
  for (const google::protobuf::Value& e :
       doc.struct_value().fields().at("traceEvents").list_value().values()) {
    const auto& f = e.struct_value().fields();
    if (!f.count("name") || f.at("name").string_value() != "nrta_is_completed") continue;
    ++recorded;
    unrecorded += f.at("args").struct_value().fields().at("polls").number_value();
  }
  EXPECT_EQ(recorded, 160u);
  EXPECT_GT(unrecorded, 160) << "the polls that saw nothing new";
  const std::map<std::string, int64_t> calls = CallsByName(out);
  EXPECT_EQ(calls.at("nrta_is_completed"), static_cast<int64_t>(recorded + unrecorded));
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/summary.txt"),
                                "Completion polls: " + std::to_string(calls.at("nrta_is_completed")) +
                                    ", of which 160 recorded"))
      << ReadFile(out + "/summary.txt");
}

// The program's own counts of its polls (async_client's "main: nrta_is_completed calls N,
// nrta_get_sequence calls M" line, after its checksum); false if it printed none.
bool ProgramsPollCounts(const std::string& out, long* is_completed, long* get_sequence) {
  return sscanf(out.c_str(),
                "main: checksum %*f\nmain: nrta_is_completed calls %ld, "
                "nrta_get_sequence calls %ld",
                is_completed, get_sequence) == 2;
}

// The capture's table has exactly the program's own counts of the two polled functions' calls.
void ExpectTheTableCountsThem(const std::string& capture, long is_completed, long get_sequence) {
  const std::map<std::string, int64_t> calls = CallsByName(capture);
  EXPECT_EQ(calls.count("nrta_is_completed") ? calls.at("nrta_is_completed") : 0, is_completed)
      << ReadFile(capture + "/summary.txt");
  EXPECT_EQ(calls.count("nrta_get_sequence") ? calls.at("nrta_get_sequence") : 0, get_sequence)
      << ReadFile(capture + "/summary.txt");
}

// The polls a thread makes after its last recorded one are no call of the trace, and no later
// poll carries them: the shim counts them when the thread ends (three threads, each with 5000
// polls of an execution still running; three more that call nothing but nrta_is_completed, so
// have recorded nothing, 5000 polls each) and when the process exits (the main thread's 5000
// nrta_get_sequence polls with nothing left to complete, the first recorded). The table's
// calls are exactly the program's own counts; the trace draws only the recorded polls.
TEST(AsyncTest, PollsAfterAThreadsLastRecordedOneAreCountedWhenItEnds) {
  Daemon daemon("async-tail");
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("async-tail") + "/capture";
  // The device's time passes (scale 100), so that each thread's last execution is still
  // running through its 5000 polls.
  std::map<std::string, std::string> env = kPlainEnv;
  env["NRT_SIM_TIME_SCALE"] = "100";
  const Result r = ProfiledRun(daemon, out, Client("tail", 5000, 1), env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  long is_completed = -1, get_sequence = -1;
  ASSERT_TRUE(ProgramsPollCounts(r.out, &is_completed, &get_sequence)) << r.out;
  EXPECT_GT(is_completed, 6 * 5000);
  EXPECT_EQ(get_sequence, 5000);
  ExpectTheTableCountsThem(out, is_completed, get_sequence);
  // The trace: the recorded polls only, with the polls each stands for; the 3 x 5000 polls
  // after the threads' last ones (and the main thread's 4999) are in none of them.
  google::protobuf::Value doc;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ReadFile(out + "/trace.json"), &doc).ok());
  size_t recorded = 0, recorded_get_sequence = 0;
  double on_slices = 0;
  for (const google::protobuf::Value& e :
       doc.struct_value().fields().at("traceEvents").list_value().values()) {
    const auto& f = e.struct_value().fields();
    if (!f.count("name") || f.at("ph").string_value() != "X") continue;
    const std::string& name = f.at("name").string_value();
    if (name == "nrta_get_sequence") ++recorded_get_sequence;
    if (name != "nrta_is_completed") continue;
    ++recorded;
    on_slices += 1 + f.at("args").struct_value().fields().at("polls").number_value();
  }
  EXPECT_EQ(recorded_get_sequence, 1u);
  EXPECT_LE(on_slices + 3 * 5000, is_completed) << "the threads' last polls drawn as calls";
  EXPECT_TRUE(absl::StrContains(
      ReadFile(out + "/summary.txt"),
      absl::StrCat("Completion polls: ", is_completed + get_sequence, ", of which ",
                   recorded + recorded_get_sequence, " recorded")))
      << ReadFile(out + "/summary.txt");
}

// A thread still running when the process exits never ends, so no exit destructor writes its
// polls after its last recorded one: the exit flush counts them (one thread, 5000
// nrta_is_completed polls of an execution in flight, then 5000 nrta_get_sequence polls, the
// first recorded, then a wait that outlasts main). The table's calls and the summary's
// completion polls are exactly the program's own counts.
TEST(AsyncTest, PollsOfAThreadStillRunningAtExitAreCounted) {
  Daemon daemon("async-running");
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("async-running") + "/capture";
  std::map<std::string, std::string> env = kPlainEnv;
  env["NRT_SIM_TIME_SCALE"] = "100";
  const Result r = ProfiledRun(daemon, out, Client("running", 5000, 1), env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  long is_completed = -1, get_sequence = -1;
  ASSERT_TRUE(ProgramsPollCounts(r.out, &is_completed, &get_sequence)) << r.out;
  EXPECT_GT(is_completed, 5000);
  EXPECT_EQ(get_sequence, 5000);
  ExpectTheTableCountsThem(out, is_completed, get_sequence);
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/summary.txt"),
                                absl::StrCat("Completion polls: ", is_completed + get_sequence)))
      << ReadFile(out + "/summary.txt");
}

// The same for a thread that keeps polling while the process exits (nrta_get_sequence, with
// nothing left to complete): the capture counts at least the polls made before main returned,
// less the one that may be between the program's count and the shim's, and no more than the
// program had made once the profiler's exit flush was over (a handler exit() runs after it).
TEST(AsyncTest, PollsOfAThreadPollingThroughExitAreCountedOnce) {
  Daemon daemon("async-spinning");
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("async-spinning") + "/capture";
  const Result r = ProfiledRun(daemon, out, Client("spinning", 100000, 1), kPlainEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  long before_exit = -1, after_flush = -1;
  ASSERT_EQ(sscanf(r.out.c_str(), "main: checksum %*f\nmain: nrta_get_sequence calls %ld\n"
                                  "at exit: nrta_get_sequence calls %ld",
                   &before_exit, &after_flush),
            2)
      << r.out;
  ASSERT_GE(before_exit, 100000);
  const std::map<std::string, int64_t> calls = CallsByName(out);
  const int64_t counted = calls.count("nrta_get_sequence") ? calls.at("nrta_get_sequence") : 0;
  EXPECT_GE(counted, before_exit - 1) << ReadFile(out + "/summary.txt");
  EXPECT_LE(counted, after_flush) << ReadFile(out + "/summary.txt");
}

TEST(AsyncTest, TwoThreadsSchedulingOnOneModel) { RunCase({"threads", 30, 6, 60, {}}); }

// A queue of two, and twelve executions scheduled back to back with the device's time passing
// (scale 20: each takes ~7 ms), so that the third schedule meets NRT_QUEUE_FULL; a refused
// schedule is recorded too, with no sequence number, and links to nothing.
TEST(AsyncTest, QueueFullMetAndRetried) {
  Case c{"full", 12, 12, 0, {{"NRT_SIM_ASYNC_QUEUE_DEPTH", "2"}, {"NRT_SIM_TIME_SCALE", "20"}}};
  std::map<std::string, std::string> env = kPlainEnv;
  for (const auto& [k, v] : c.env) env[k] = v;
  const Result plain = RunProcess(Client(c.mode, c.executions, c.depth), env);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_TRUE(absl::StrContains(plain.out, "queue full met: yes")) << plain.out;
  Daemon daemon("async-full");
  ASSERT_TRUE(daemon.Start());
  const std::string out = TempDir("async-full") + "/capture";
  const Result r = ProfiledRun(daemon, out, Client(c.mode, c.executions, c.depth), env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "queue full met: yes")) << r.out;
  const Links links = LinksIn(out);
  EXPECT_EQ(links.executions, 12u);
  EXPECT_GT(links.schedules, 12u) << "the refused schedules are recorded too";
  EXPECT_EQ(links.linked, 12u);
  EXPECT_EQ(links.distinct, 12u);
}

TEST(AsyncTest, CompletionThroughAnEventfd) { RunCase({"eventfd", 20, 4, 20, {}}); }

// The child of a process the profiler started runs unprofiled (as documented for fork); the
// parent's rounds before and after it are whole.
TEST(AsyncTest, AForkBetweenRounds) { RunCase({"fork", 10, 4, 20, {}}); }

// The program runs the runtime's own profiling session (nrt_inspect_*) while nrtprof profiles
// it: both want the system trace. Each gets every execution — the session's file holds all of
// them, and nrtprof's capture links all of them — and the program prints what it printed bare.
TEST(AsyncTest, TheRuntimesOwnInspectSessionBesideNrtprof) {
  const std::string inspect_dir = TempDir("async-inspect-out");
  RunCase({"inspect", 16, 4, 16,
           {{"NEURON_RT_INSPECT_ENABLE", "1"},
            {"NEURON_RT_INSPECT_OUTPUT_DIR", inspect_dir},
            {"NEURON_RT_INSPECT_DEVICE_PROFILE", "0"}}});
  // Two runs wrote there: the bare one and the profiled one, each a file of its own process.
  const Result files = RunProcess({"/bin/sh", "-c", "cat " + inspect_dir + "/*/*.json"});
  ASSERT_EQ(files.exit_code, 0) << files.err;
  size_t starts = 0;
  for (size_t at = files.out.find("\"event_type\":\"device_exec\",\"phase\":\"start\"");
       at != std::string::npos;
       at = files.out.find("\"event_type\":\"device_exec\",\"phase\":\"start\"", at + 1)) {
    ++starts;
  }
  EXPECT_EQ(starts, 32u) << "16 executions in each run's session file";
}

}  // namespace
}  // namespace nrtprof
