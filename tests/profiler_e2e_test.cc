// The profiler end to end, as a user runs it: `nrtprof run -- PROGRAM` with the real daemon
// (started privately by nrtprof), the real shim preloaded, the simulated runtime, and the
// files a user opens afterwards: the table, trace.pftrace (read with our declaration of
// Perfetto's trace protos), trace.json and the artifacts.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/testing/spawn.h"
#include "common/testing/struct_fields.h"
#include "trace/perfetto_trace_reader.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/perfetto_trace.pb.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::Exists;
using testing::Num;
using testing::ReadFile;
using testing::Result;
using testing::RunProcess;
using testing::Runfile;
using testing::Str;
using testing::TempDir;

const std::map<std::string, std::string>& kEnv = testing::kIsolatedEnv;

Result Profile(const std::string& out, const std::vector<std::string>& command,
               const std::map<std::string, std::string>& env = kEnv) {
  return testing::RunProfiled(out, command, {}, env);
}

google::protobuf::Struct ParseJson(const std::string& text) {
  google::protobuf::Struct doc;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &doc).ok())
      << text.substr(0, 300);
  return doc;
}

// summary.json's rows by name.
std::map<std::string, google::protobuf::Struct> SummaryRows(const std::string& dir) {
  std::map<std::string, google::protobuf::Struct> rows;
  const google::protobuf::Struct doc = ParseJson(ReadFile(dir + "/summary.json"));
  auto it = doc.fields().find("rows");
  if (it == doc.fields().end()) return rows;
  for (const auto& v : it->second.list_value().values()) {
    rows[Str(v.struct_value(), "name")] = v.struct_value();
  }
  return rows;
}

// What the Perfetto UI would draw from trace.pftrace.
struct Slice {
  std::string name;
  std::string track;        // the track's name
  std::string parent_track; // its parent's name ("" for process/thread tracks' parents)
  std::vector<uint64_t> flows, terminating;
};

struct PerfettoView {
  std::map<uint64_t, std::string> track_name;
  std::map<uint64_t, uint64_t> track_parent;
  std::vector<Slice> slices;
  size_t begins = 0, ends = 0;
  size_t unknown_fields = 0;
};

PerfettoView ReadPerfetto(const std::string& path) {
  PerfettoView view;
  // As trace processor reads it: compressed bundles expanded into their packets.
  absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoTrace(ReadFile(path));
  EXPECT_TRUE(read.ok()) << path << ": " << read.status();
  if (!read.ok()) return view;
  const perfetto::protos::Trace& trace = read->trace;
  std::map<uint64_t, std::string> names;
  std::vector<perfetto::protos::TrackEvent> events;
  for (const auto& packet : trace.packet()) {
    if (!packet.unknown_fields().empty()) ++view.unknown_fields;
    for (const auto& n : packet.interned_data().event_names()) names[n.iid()] = n.name();
    if (packet.has_track_descriptor()) {
      const auto& t = packet.track_descriptor();
      std::string name = t.name();
      if (t.has_thread()) name = t.thread().thread_name();
      if (t.has_process()) name = t.process().process_name();
      view.track_name[t.uuid()] = name;
      view.track_parent[t.uuid()] = t.parent_uuid();
    }
    if (!packet.has_track_event()) continue;
    const auto& e = packet.track_event();
    if (e.type() == perfetto::protos::TrackEvent::TYPE_SLICE_END) ++view.ends;
    if (e.type() != perfetto::protos::TrackEvent::TYPE_SLICE_BEGIN) continue;
    ++view.begins;
    Slice s;
    s.name = e.has_name_iid() ? names[e.name_iid()] : e.name();
    s.track = view.track_name[e.track_uuid()];
    s.parent_track = view.track_name[view.track_parent[e.track_uuid()]];
    s.flows.assign(e.flow_ids().begin(), e.flow_ids().end());
    s.terminating.assign(e.terminating_flow_ids().begin(), e.terminating_flow_ids().end());
    view.slices.push_back(s);
  }
  return view;
}

size_t CountSlices(const PerfettoView& v, const std::string& name, const std::string& track) {
  size_t n = 0;
  for (const Slice& s : v.slices) n += s.name == name && s.track == track;
  return n;
}

std::string CompileModel(const std::string& text) {
  const std::string dir = TempDir("model");
  const std::string txt = dir + "/m.txt", neff = dir + "/m.neff";
  FILE* f = fopen(txt.c_str(), "w");
  fputs(text.c_str(), f);
  fclose(f);
  const Result r = RunProcess({Runfile("sim/nrt_model_compile"), txt, neff});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return neff;
}

const char kAddModel[] =
    "model add4\ninput a fp32 [4]\ninput b fp32 [4]\noutput out fp32 [4]\nout = add(a, b)\n";

TEST(ProfilerEndToEnd, NaiveRmsNormTableChargesDeviceTimeToTheFrameworkOps) {
  const std::string out = TempDir("naive");
  const Result r = Profile(out, {Runfile("examples/rmsnorm"), "--variant", "naive", "--iters", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "-> OK")) << r.out;  // the program's own output, intact

  // The printed table: aten::mul is the first row, and the totals close it.
  const std::vector<std::string> lines = absl::StrSplit(r.err, '\n');
  std::string first_row;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    if (absl::StrContains(lines[i], "Self CPU") && absl::StrContains(lines[i], "# of Calls")) {
      first_row = lines[i + 2];  // header, rule, first row
      break;
    }
  }
  EXPECT_TRUE(absl::StartsWith(absl::StripLeadingAsciiWhitespace(first_row), "aten::mul"))
      << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "Self NEURON time total")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "trace.pftrace")) << r.err;

  const auto rows = SummaryRows(out);
  ASSERT_TRUE(rows.count("aten::mul") && rows.count("rmsnorm") && rows.count("aten::add"));
  EXPECT_EQ(Num(rows.at("aten::mul"), "calls"), 3 * 11);  // 10 iterations and the warm-up
  EXPECT_EQ(Num(rows.at("rmsnorm"), "calls"), 10);
  // Per iteration: 2.355 ms of device time, all of it under the ops the iteration ran.
  const double per_iteration_ms = Num(rows.at("rmsnorm"), "device_total_ns") / 10 / 1e6;
  EXPECT_NEAR(per_iteration_ms, 2.355, 0.05 * 2.355);
  EXPECT_EQ(Num(rows.at("rmsnorm"), "self_device_ns"), 0);
  // aten::add carries the epsilon copy: a host-to-device DMA as well as its execution.
  EXPECT_GT(Num(rows.at("aten::add"), "self_device_ns") / 11,
            Num(rows.at("aten::rsqrt"), "self_device_ns") / 11 + 100000);
  const google::protobuf::Struct doc = ParseJson(ReadFile(out + "/summary.json"));
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/summary.txt"), "Events dropped: 0"));
  (void)doc;
}

TEST(ProfilerEndToEnd, FusedAndCompiledShowOneOp) {
  for (const auto& [variant, op, ms] :
       std::vector<std::tuple<std::string, std::string, double>>{
           {"fused", "aten::rms_norm", 0.4033}, {"compiled", "CompiledFunction", 0.3755}}) {
    const std::string out = TempDir(variant);
    const Result r = Profile(out, {Runfile("examples/rmsnorm"), "--variant", variant, "--iters", "5"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto rows = SummaryRows(out);
    ASSERT_TRUE(rows.count(op)) << variant;
    EXPECT_EQ(Num(rows.at(op), "calls"), 6);
    EXPECT_NEAR(Num(rows.at(op), "device_total_ns") / 6 / 1e6, ms, 0.05 * ms) << variant;
    // The one op holds all the device time of the iterations.
    EXPECT_NEAR(Num(rows.at("rmsnorm"), "device_total_ns"), 5 * Num(rows.at(op), "self_device_ns") / 6,
                1000) << variant;
  }
}

TEST(ProfilerEndToEnd, PerfettoTraceHasThreeLanesLinkedByFlows) {
  const std::string out = TempDir("lanes");
  const Result r = Profile(out, {Runfile("examples/rmsnorm"), "--variant", "naive", "--iters", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const PerfettoView v = ReadPerfetto(out + "/trace.pftrace");
  EXPECT_EQ(v.unknown_fields, 0u);
  EXPECT_EQ(v.begins, v.ends);
  std::set<std::string> tracks;
  for (const auto& [uuid, name] : v.track_name) tracks.insert(name);
  for (const char* lane : {"framework", "runtime", "NeuronCore 0", "executions", "DMA"}) {
    EXPECT_TRUE(tracks.count(lane)) << lane;
  }
  // 6 executions per iteration, 4 iterations: on the runtime lane and on the NeuronCore.
  EXPECT_EQ(CountSlices(v, "nrt_execute", "runtime"), 24u);
  EXPECT_EQ(CountSlices(v, "nc_exec_running", "executions"), 24u);
  EXPECT_EQ(CountSlices(v, "aten::mul", "framework"), 12u);
  // Every nrt_execute starts or continues a flow that ends on an nc_exec_running.
  std::set<uint64_t> ending_on_exec;
  for (const Slice& s : v.slices) {
    if (s.name == "nc_exec_running") ending_on_exec.insert(s.terminating.begin(), s.terminating.end());
  }
  size_t linked = 0;
  for (const Slice& s : v.slices) {
    if (s.name != "nrt_execute") continue;
    for (uint64_t f : s.flows) linked += ending_on_exec.count(f);
  }
  EXPECT_EQ(linked, 24u);
  // Framework ops start those flows.
  size_t from_framework = 0;
  for (const Slice& s : v.slices) {
    if (s.track != "framework") continue;
    for (uint64_t f : s.flows) from_framework += ending_on_exec.count(f);
  }
  EXPECT_EQ(from_framework, 24u);
}

TEST(ProfilerEndToEnd, ChromeJsonAndArtifacts) {
  const std::string out = TempDir("json");
  const Result r = Profile(out, {Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const google::protobuf::Struct doc = ParseJson(ReadFile(out + "/trace.json"));
  ASSERT_TRUE(doc.fields().count("traceEvents"));
  std::map<std::string, int> phases;
  std::map<std::string, int> names;
  for (const auto& e : doc.fields().at("traceEvents").list_value().values()) {
    ++phases[Str(e.struct_value(), "ph")];
    ++names[Str(e.struct_value(), "name")];
  }
  EXPECT_GT(phases["X"], 0);
  EXPECT_GT(phases["s"], 0);
  EXPECT_EQ(phases["s"], phases["f"]);
  EXPECT_EQ(names["nc_exec_running"], 3);
  EXPECT_EQ(names["aten::rms_norm"], 3);
  // The model file and its device trace, paired by hash.
  DIR* d = opendir(out.c_str());
  ASSERT_NE(d, nullptr);
  std::vector<std::string> neffs, ntffs;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (absl::EndsWith(n, ".neff")) neffs.push_back(n.substr(0, n.size() - 5));
    if (absl::EndsWith(n, ".ntff.json")) ntffs.push_back(n);
  }
  closedir(d);
  ASSERT_EQ(neffs.size(), 1u);
  ASSERT_EQ(ntffs.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(ntffs[0], neffs[0] + "_nc0")) << ntffs[0];
}

TEST(ProfilerEndToEnd, ProgramOutputAndExitCodeAreUnchanged) {
  const std::vector<std::string> program = {Runfile("examples/rmsnorm"), "--variant", "naive",
                                            "--iters", "3", "--dtype", "fp32"};
  const Result plain = RunProcess(program, kEnv);
  const Result profiled = Profile(TempDir("same"), program);
  EXPECT_EQ(plain.exit_code, 0);
  EXPECT_EQ(profiled.exit_code, plain.exit_code);
  EXPECT_EQ(profiled.out, plain.out);
  // A failing program fails the same way under the profiler.
  const Result bad = Profile(TempDir("bad"), {Runfile("examples/rmsnorm"), "--variant", "bogus"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bad.err, "--variant must be naive, fused or compiled"));
}

TEST(ProfilerEndToEnd, ManyThreadsOnTwoCores) {
  const std::string out = TempDir("mlp");
  const Result r = Profile(out, {Runfile("examples/mlp"), "--threads", "8", "--cores", "2",
                                 "--iters", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = SummaryRows(out);
  ASSERT_TRUE(rows.count("aten::linear"));
  EXPECT_EQ(Num(rows.at("aten::linear"), "calls"), 2 * 8 * 5);
  const PerfettoView v = ReadPerfetto(out + "/trace.pftrace");
  EXPECT_EQ(CountSlices(v, "nc_exec_running", "executions"), 3u * 8 * 5);
  EXPECT_EQ(CountSlices(v, "nrt_execute", "runtime"), 3u * 8 * 5);
  std::set<std::string> cores;
  for (const Slice& s : v.slices) {
    if (s.name == "nc_exec_running") cores.insert(s.parent_track);
  }
  EXPECT_EQ(cores, (std::set<std::string>{"NeuronCore 0", "NeuronCore 1"}));
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/summary.txt"), "Events dropped: 0"));
}

// Every write is inside its own range, barely longer than the write: the table charges each to
// its range (no row of its own), however the shim's drains and clock conversion fall between
// a write and the end of its range. (Seen: a few writes of 6,400 escaping their ranges when
// each drain converted TSC ticks with its own anchor.)
TEST(ProfilerEndToEnd, CallsInsideTightRangesStayInside) {
  const std::string out = TempDir("ranges");
  const Result r = Profile(out, {Runfile("tests/threads_ranges"), "64", "200"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "writes 12800")) << r.out;
  const auto rows = SummaryRows(out);
  ASSERT_TRUE(rows.count("step")) << ReadFile(out + "/summary.txt");
  EXPECT_EQ(Num(rows.at("step"), "calls"), 64 * 200);
  EXPECT_EQ(rows.count("nrt_tensor_write"), 0u) << ReadFile(out + "/summary.txt");
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/summary.txt"), "Events dropped: 0"));
}

// A pool of long-lived threads started one after another: each may take the ring the shim
// keeps ready for a new thread, but that ring is faulted in only for what new threads wrote
// before, so the pool's rings stay small (with every spare at 1 MiB, 16 threads held 17 MiB).
TEST(ProfilerEndToEnd, ThreadsStartedOneAfterAnotherKeepTheirRingsSmall) {
  const std::string out = TempDir("staggered");
  const Result r = Profile(out, {Runfile("tests/threads_ranges"), "16", "50", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "writes 800")) << r.out;
  long shmem_kib = -1;
  const size_t at = r.out.find("RssShmem: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  shmem_kib = atol(r.out.c_str() + at + strlen("RssShmem: "));
  EXPECT_GT(shmem_kib, 0) << r.out;  // the rings file is there
  EXPECT_LT(shmem_kib, 6 * 1024) << r.out;
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/summary.txt"), "Events dropped: 0"));
}

TEST(ProfilerEndToEnd, DlopenAndCtypesProgramsAreProfiled) {
  const std::string model = CompileModel(kAddModel);
  const std::string lib = Runfile("sim/libnrt.so.1");
  struct Case {
    std::string name;
    std::vector<std::string> argv;
  };
  for (const Case& c : std::vector<Case>{
           {"dlopen", {Runfile("shim/testing/dlopen_client"), lib, model, "7"}},
           // A rank's model, loaded as torch-neuronx's distributed jobs load theirs.
           {"collectives", {Runfile("shim/testing/dlopen_client"), lib, model, "7", "collectives"}},
           {"ctypes", {"/usr/bin/python3", Runfile("tests/programs/ctypes_client.py"), lib, model, "7"}}}) {
    const std::string out = TempDir(c.name);
    const Result plain = RunProcess(c.argv, kEnv);
    const Result r = Profile(out, c.argv);
    ASSERT_EQ(r.exit_code, 0) << c.name << ": " << r.err;
    EXPECT_EQ(r.out, plain.out) << c.name;
    EXPECT_TRUE(absl::StrContains(r.out, "out: 2 4 6 8") || absl::StrContains(r.out, "out: 1.5 2.5 3.5 4.5"))
        << r.out;
    const auto rows = SummaryRows(out);  // no annotations: a row per libnrt function
    ASSERT_TRUE(rows.count("nrt_execute")) << c.name << ": " << ReadFile(out + "/summary.txt");
    EXPECT_EQ(Num(rows.at("nrt_execute"), "calls"), 7) << c.name;
    EXPECT_GT(Num(rows.at("nrt_execute"), "self_device_ns"), 7 * 360000) << c.name;
    const char* load = c.name == "collectives" ? "nrt_load_collectives" : "nrt_load";
    ASSERT_TRUE(rows.count(load)) << c.name << ": " << ReadFile(out + "/summary.txt");
    EXPECT_EQ(Num(rows.at(load), "calls"), 1) << c.name;
    // The model's copy to the device is the load's device time, whichever function loaded it.
    EXPECT_GT(Num(rows.at(load), "self_device_ns"), 0) << c.name;
    // The executions (and their device work) name the model the load brought, whichever
    // function loaded it.
    const std::string trace = ReadFile(out + "/trace.json");
    size_t named = 0;
    for (size_t at = 0; (at = trace.find("\"model\":\"add4\"", at)) != std::string::npos; ++at) {
      ++named;
    }
    EXPECT_GE(named, 7u) << c.name;
  }
}

TEST(ProfilerEndToEnd, ForkingProgram) {
  const std::string model = CompileModel(kAddModel);
  const std::vector<std::string> argv = {Runfile("shim/testing/fork_client"), "children", model,
                                         "4"};
  const Result plain = RunProcess(argv, kEnv);
  const std::string out = TempDir("fork");
  const Result r = Profile(out, argv);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  EXPECT_EQ(r.out, "children: 7 0\n");
  const auto rows = SummaryRows(out);
  ASSERT_TRUE(rows.count("nrt_execute"));
  EXPECT_EQ(Num(rows.at("nrt_execute"), "calls"), 8);  // the parent's, before and after fork
}

TEST(ProfilerEndToEnd, CliErrorsAreOneLine) {
  const std::string nrtprof = Runfile("client/nrtprof");
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {nrtprof, "frobnicate"},
           {nrtprof, "run"},
           {nrtprof, "run", "--stacks", "99", "--", "/bin/true"},
           {nrtprof, "run", "--", "/nonexistent/program"},
           {nrtprof, "run", "--", "no-such-program-on-path"},
           {nrtprof, "summary", "/nonexistent"},
           {nrtprof, "summary", "/etc/hostname"},
           {nrtprof, "summary", TempDir("empty"), "--sort", "bogus"},
           {nrtprof, "status", "--addr", "unix:/nonexistent/socket"}}) {
    const Result r = RunProcess(argv, kEnv);
    EXPECT_NE(r.exit_code, 0) << argv[1];
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << argv[1] << ": " << r.err;
  }
  // A bad setting is bad input, like a bad flag: exit 2, one line naming it.
  std::map<std::string, std::string> env = kEnv;
  env["NRTPROF_SERVICE_USER"] = "no-such-user-nrtprof";
  const Result r = RunProcess({nrtprof, "status"}, env);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "NRTPROF_SERVICE_USER='no-such-user-nrtprof'")) << r.err;
}

TEST(ProfilerEndToEnd, SummaryCommandResortsASavedCapture) {
  const std::string out = TempDir("resort");
  ASSERT_EQ(Profile(out, {Runfile("examples/rmsnorm"), "--variant", "naive", "--iters", "2"})
                .exit_code, 0);
  const Result by_calls =
      RunProcess({Runfile("client/nrtprof"), "summary", out, "--sort", "calls", "--format", "csv",
           "--limit", "2"}, kEnv);
  ASSERT_EQ(by_calls.exit_code, 0) << by_calls.err;
  const std::vector<std::string> lines =
      absl::StrSplit(by_calls.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << by_calls.out;  // header and two rows
  EXPECT_TRUE(absl::EndsWith(lines[0], ",calls")) << lines[0];
  auto calls = [](const std::string& line) { return std::stoull(line.substr(line.rfind(',') + 1)); };
  // The most called rows first: the naive variant's tensor-set calls (16 per setup) and
  // aten::mul (3 per iteration, 3 iterations with the warm-up) are both ahead of aten::mean.
  EXPECT_GE(calls(lines[1]), calls(lines[2]));
  EXPECT_GE(calls(lines[2]), 9u) << by_calls.out;
  const Result from_trace = RunProcess({Runfile("client/nrtprof"), "summary", out + "/trace.pftrace"}, kEnv);
  EXPECT_EQ(from_trace.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(from_trace.out, "aten::mul"));
}

// Several processes in one capture: a shell starting two programs at once. The shell itself
// never calls libnrt, so it never connects.
TEST(ProfilerEndToEnd, TwoProcessesInOneCapture) {
  const std::string out = TempDir("two");
  const std::string rmsnorm = Runfile("examples/rmsnorm");
  const Result r = Profile(
      out, {"/bin/sh", "-c",
            rmsnorm + " --variant fused --iters 2 & " + rmsnorm +
                " --variant compiled --iters 2 --core 1; wait"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "from 2 processes")) << r.err;
  const auto rows = SummaryRows(out);
  ASSERT_TRUE(rows.count("aten::rms_norm") && rows.count("CompiledFunction"));
  EXPECT_EQ(Num(rows.at("aten::rms_norm"), "calls"), 3);
  EXPECT_EQ(Num(rows.at("CompiledFunction"), "calls"), 3);
  EXPECT_EQ(Num(rows.at("rmsnorm"), "calls"), 4);
}

// --stacks: each runtime call carries its call site, symbolized ("function (module+0xoffset)").
TEST(ProfilerEndToEnd, CallStacksNameTheCallSite) {
  const std::string out = TempDir("stacks");
  const Result r = RunProcess({Runfile("client/nrtprof"), "run", "--stacks", "8", "--out", out,
                               "--", Runfile("examples/rmsnorm"), "--variant", "fused",
                               "--iters", "2"},
                              kEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const google::protobuf::Struct doc = ParseJson(ReadFile(out + "/trace.json"));
  size_t executes = 0, with_stack = 0;
  for (const auto& v : doc.fields().at("traceEvents").list_value().values()) {
    const auto& e = v.struct_value();
    if (Str(e, "name") != "nrt_execute" || Str(e, "ph") != "X") continue;
    ++executes;
    auto args = e.fields().find("args");
    if (args == e.fields().end()) continue;
    const std::string stack = Str(args->second.struct_value(), "stack");
    // The example's own frames: the call site in rmsnorm's Execute() helper.
    if (absl::StrContains(stack, "rmsnorm")) ++with_stack;
  }
  EXPECT_EQ(executes, 3u);
  EXPECT_EQ(with_stack, executes);
}

// The caller's NRTPROF_STACKS reaches the program when no --stacks says otherwise (before, only
// the flag counted), and an invalid one is reported as without nrtprof run.
TEST(ProfilerEndToEnd, StacksFromTheEnvironment) {
  const std::string out = TempDir("stacks-env");
  std::map<std::string, std::string> env = kEnv;
  env["NRTPROF_STACKS"] = "8";
  Result r = RunProcess({Runfile("client/nrtprof"), "run", "--out", out, "--",
                         Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "2"},
                        env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/trace.json"), "\"stack\":")) << r.err;
  env["NRTPROF_STACKS"] = "lots";
  const Result bare = RunProcess({Runfile("examples/rmsnorm"), "--variant", "fused", "--iters",
                                  "1"},
                                 {{"NRTPROF_STACKS", "lots"},
                                  {"LD_PRELOAD", Runfile("shim/libnrtprof_shim.so")},
                                  {"NRTPROF_ADDR", "unix:/nonexistent/d.sock"},
                                  {"NRT_SIM_TIME_SCALE", "0"}});
  const size_t said = bare.err.find("NRTPROF_STACKS");
  ASSERT_NE(said, std::string::npos) << bare.err;
  const std::string line = bare.err.substr(bare.err.rfind('\n', said) + 1,
                                           bare.err.find('\n', said) - bare.err.rfind('\n', said));
  r = RunProcess({Runfile("client/nrtprof"), "run", "--out", TempDir("stacks-bad"), "--",
                  Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "1"},
                 env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, line)) << "without nrtprof run: " << line << "\nwith: " << r.err;
}

// A standing daemon, as an operator runs one: `nrtprof run --addr` uses it, and
// `nrtprof status` reports what it received and wrote.
TEST(ProfilerEndToEnd, StandingDaemonAndStatus) {
  const std::string dir = TempDir("standing");
  // Unix socket paths are limited to 107 bytes, which TEST_TMPDIR can exceed: this folder may
  // be in /tmp. It is removed, spool/ and all, however the test ends.
  const testing::SocketFolder socket_dir("nrtprof-e2e");
  ASSERT_FALSE(socket_dir.path().empty());
  const std::string socket = socket_dir.path() + "/nrtprofd.sock";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t daemon = fork();
  if (daemon == 0) {
    close(ready[0]);
    const std::string binary = Runfile("daemon/nrtprofd");
    const std::string socket_flag = "--socket=" + socket;
    const std::string ready_flag = "--ready_fd=" + std::to_string(ready[1]);
    const std::string root_flag = "--output_root=" + dir;
    execl(binary.c_str(), binary.c_str(), socket_flag.c_str(), ready_flag.c_str(),
          root_flag.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(ready[1]);
  char buf[8] = {};
  pollfd pfd{ready[0], POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 20000), 1);
  ASSERT_GT(read(ready[0], buf, sizeof(buf)), 0);
  close(ready[0]);

  const std::string addr = "unix:" + socket;
  const Result before = RunProcess({Runfile("client/nrtprof"), "status", "--addr", addr}, kEnv);
  EXPECT_EQ(before.exit_code, 0) << before.err;
  EXPECT_TRUE(absl::StrContains(before.out, "captures written:    0")) << before.out;

  const Result run = RunProcess({Runfile("client/nrtprof"), "run", "--addr", addr, "--out",
                                 dir + "/capture", "--", Runfile("examples/rmsnorm"),
                                 "--variant", "fused", "--iters", "3"},
                                kEnv);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(absl::StrContains(run.err, "private to this run")) << run.err;
  EXPECT_TRUE(Exists(dir + "/capture/trace.pftrace"));

  const Result after = RunProcess({Runfile("client/nrtprof"), "status", "--addr", addr}, kEnv);
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_TRUE(absl::StrContains(after.out, "captures written:    1")) << after.out;
  EXPECT_TRUE(absl::StrContains(after.out, "final batches alone: 0")) << after.out;
  EXPECT_TRUE(absl::StrContains(after.out, "events dropped:      0")) << after.out;
  EXPECT_FALSE(absl::StrContains(after.out, "events received:     0\n")) << after.out;

  kill(daemon, SIGTERM);
  int status = 0;
  waitpid(daemon, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(Exists(socket));  // removed on the way out
}

}  // namespace
}  // namespace nrtprof
