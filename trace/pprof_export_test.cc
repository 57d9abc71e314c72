// Tests of StackProfile (pprof_export.h) on a hand-built capture: each range's cumulative
// device time is its summary row's NEURON total, stacks run leaf first from engine op to host
// frame, an execution's time is split among its ops without losing a nanosecond, the labels
// and the folded stacks are what a flame graph tool reads, and the gzip form inflates back.
#include "trace/pprof_export.h"

#include <zlib.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "trace/summary.h"

namespace nrtprof::daemon {
namespace {

RangeEvent Range(uint64_t id, const char* name, uint64_t start, uint64_t duration, uint64_t parent,
                 uint32_t depth) {
  RangeEvent r;
  r.id = id;
  r.name = Name::Lasting(name);
  r.tid = 1;
  r.start_ns = start;
  r.duration_ns = duration;
  r.parent_range = parent;
  r.depth = depth;
  return r;
}

ApiCall Call(uint64_t id, const char* name, uint64_t start, uint64_t duration, uint64_t range) {
  ApiCall c;
  c.correlation_id = id;
  c.name = Name::Lasting(name);
  c.tid = 1;
  c.start_ns = start;
  c.duration_ns = duration;
  c.range = range;
  c.nc_idx = 0;
  c.stack = {"run_op (train+0x10)", "main (train+0x20)"};  // as the shim's symbolizer names them
  return c;
}

DeviceEvent Device(uint64_t id, DeviceEventKind kind, const char* name, uint64_t start,
                   uint64_t duration, uint64_t call, uint64_t parent = 0) {
  DeviceEvent d;
  d.id = id;
  d.kind = kind;
  d.name = Name::Lasting(name);
  d.start_ns = start;
  d.duration_ns = duration;
  d.correlation_id = call;
  d.parent = parent;
  d.submitting_tid = 1;
  return d;
}

// Two steps of a small model: aten::mul twice and aten::add in a "layer" range in step 0,
// aten::mul alone in step 1, a model load outside any range, and device work no call caused.
// The first execution's two ops fit in it; the add's two ops ran at once and take more than it.
Trace TwoSteps() {
  Trace t;
  t.capture_id = "pprof-test";
  t.start_ns = 0;
  t.end_ns = 20'000;
  t.realtime_offset_ns = 1'700'000'000'000'000'000;
  ProcessTrace p;
  p.pid = 7;
  p.host = "trn1";
  p.executable = "train";
  p.thread_names = {{1, "MainThread"}};
  p.ranges.push_back(Range(1, "ProfilerStep#0", 0, 10'000, 0, 0));
  p.ranges.push_back(Range(2, "layer", 100, 4'900, 1, 1));
  p.ranges.push_back(Range(3, "aten::mul", 200, 800, 2, 2));
  p.ranges.push_back(Range(4, "aten::mul", 1'100, 900, 2, 2));
  p.ranges.push_back(Range(5, "aten::add", 3'000, 1'000, 2, 2));
  p.ranges.push_back(Range(6, "ProfilerStep#1", 10'000, 10'000, 0, 0));
  p.ranges.push_back(Range(7, "aten::mul", 11'000, 1'000, 6, 1));
  std::sort(p.ranges.begin(), p.ranges.end(), [](const RangeEvent& a, const RangeEvent& b) {
    return a.start_ns < b.start_ns;
  });
  ApiCall load = Call(10, "nrt_load", 50, 40, 0);
  p.calls.push_back(load);
  for (ApiCall c : {Call(11, "nrt_execute", 300, 500, 3), Call(12, "nrt_execute", 1'200, 600, 4),
                    Call(13, "nrt_tensor_write", 3'100, 200, 5),
                    Call(14, "nrt_execute", 3'400, 300, 5),
                    Call(15, "nrt_execute", 11'100, 700, 7)}) {
    if (c.correlation_id == 15) c.stack[0] = "run_op (train+0x18)";  // another call site
    if (c.name == "nrt_execute") c.model_name = Name::Lasting(c.correlation_id == 14 ? "add_model" : "mul_model");
    p.calls.push_back(c);
  }
  using K = DeviceEventKind;
  auto exec = [](uint64_t id, uint64_t start, uint64_t duration, uint64_t call, const char* model) {
    DeviceEvent d = Device(id, K::kExecution, "nc_exec_running", start, duration, call);
    d.model_name = Name::Lasting(model);
    return d;
  };
  auto op = [](uint64_t id, const char* name, const char* engine, uint64_t start, uint64_t duration,
               uint64_t parent) {
    DeviceEvent d = Device(id, K::kEngineOp, name, start, duration, 0, parent);
    d.engine = Name::Lasting(engine);
    return d;
  };
  p.device.push_back(Device(100, K::kDma, "dma_model_load", 60, 91, 10));
  p.device.push_back(exec(101, 350, 400, 11, "mul_model"));
  p.device.push_back(op(102, "mul", "vector", 360, 150, 101));
  p.device.push_back(op(103, "mul", "tensor", 520, 100, 101));
  p.device.push_back(exec(104, 1'250, 350, 12, "mul_model"));
  p.device.push_back(Device(105, K::kDma, "dma_h2d", 3'150, 77, 13));
  p.device.push_back(exec(106, 3'450, 301, 14, "add_model"));
  p.device.push_back(op(107, "add", "vector", 3'450, 200, 106));
  p.device.push_back(op(108, "copy", "scalar", 3'460, 200, 106));
  p.device.push_back(exec(109, 11'150, 500, 15, "mul_model"));
  p.device.push_back(exec(110, 15'000, 33, 0, "ghost"));
  t.processes.push_back(std::move(p));
  return t;
}

// TwoSteps, and a second thread whose call in step 1 no range of its own encloses (as PyTorch's
// autograd thread runs backward), and a collective of aten::mul's: its wait for the other
// ranks, then its running.
Trace WithHelperThreadAndCollective() {
  Trace t = TwoSteps();
  ProcessTrace& p = t.processes[0];
  ApiCall backward = Call(16, "nrt_execute", 12'500, 400, 0);
  backward.tid = 2;
  backward.model_name = Name::Lasting("mul_grad");
  backward.stack.clear();
  ApiCall cc = Call(17, "nrta_cc_schedule", 11'900, 50, 7);
  cc.nrta_seq = 5;
  p.calls.push_back(cc);
  p.calls.push_back(backward);
  p.thread_names[2] = "autograd";
  DeviceEvent grad = Device(111, DeviceEventKind::kExecution, "nc_exec_running", 12'600, 222, 16);
  grad.model_name = Name::Lasting("mul_grad");
  grad.submitting_tid = 2;
  DeviceEvent barrier = Device(112, DeviceEventKind::kCollective, kCcExecBarrier, 12'000, 64, 17);
  barrier.nrta_seq = 5;
  DeviceEvent running = Device(113, DeviceEventKind::kCollective, kCcRunning, 12'064, 16, 17);
  running.nrta_seq = 5;
  running.model_name = Name::Lasting("all_reduce");
  for (const DeviceEvent& d : {barrier, running, grad}) p.device.push_back(d);
  return t;
}

// A profile's samples, read back by name as a pprof reader would.
struct ReadSample {
  std::vector<std::string> stack;  // leaf first
  std::vector<int64_t> values;
  std::map<std::string, std::string> labels;  // numbers as text
};

std::vector<ReadSample> Read(const perftools::profiles::Profile& p) {
  std::map<uint64_t, std::string> function_name;
  for (const auto& f : p.function()) function_name[f.id()] = p.string_table(f.name());
  std::map<uint64_t, std::string> location_name;
  for (const auto& l : p.location()) location_name[l.id()] = function_name[l.line(0).function_id()];
  std::vector<ReadSample> out;
  for (const auto& s : p.sample()) {
    ReadSample r;
    for (uint64_t id : s.location_id()) r.stack.push_back(location_name.at(id));
    r.values.assign(s.value().begin(), s.value().end());
    for (const auto& l : s.label()) {
      r.labels[p.string_table(l.key())] = l.str() != 0 ? p.string_table(l.str())
                                                         : std::to_string(l.num());
    }
    out.push_back(std::move(r));
  }
  return out;
}

// pprof's cumulative figure: the value of every sample whose stack holds `frame`, once each.
int64_t Cumulative(const std::vector<ReadSample>& samples, const std::string& frame, int value) {
  int64_t sum = 0;
  for (const ReadSample& s : samples) {
    if (std::find(s.stack.begin(), s.stack.end(), frame) != s.stack.end()) sum += s.values[value];
  }
  return sum;
}

int64_t Stack(const std::vector<ReadSample>& samples, const std::vector<std::string>& stack,
              int value) {
  int64_t sum = 0;
  for (const ReadSample& s : samples) {
    if (s.stack == stack) sum += s.values[value];
  }
  return sum;
}

TEST(PprofExportTest, SampleTypesAndStringTableAsPprofWantsThem) {
  StackProfile profile;
  profile.Add(TwoSteps());
  const perftools::profiles::Profile p = profile.ToPprof();
  ASSERT_GT(p.string_table_size(), 0);
  EXPECT_EQ(p.string_table(0), "");
  ASSERT_EQ(p.sample_type_size(), 3);
  std::vector<std::string> types;
  for (const auto& t : p.sample_type()) {
    types.push_back(p.string_table(t.type()) + "/" + p.string_table(t.unit()));
  }
  EXPECT_EQ(types, (std::vector<std::string>{"device_time/nanoseconds", "host_time/nanoseconds",
                                             "executions/count"}));
  EXPECT_EQ(p.string_table(p.default_sample_type()), "device_time");
  for (const auto& s : p.sample()) {
    EXPECT_EQ(s.value_size(), 3);
    EXPECT_GT(s.location_id_size(), 0);
  }
  for (const auto& l : p.location()) EXPECT_NE(l.id(), 0u);
}

TEST(PprofExportTest, EachRangesCumulativeDeviceTimeIsItsSummaryRowsTotal) {
  const Trace trace = TwoSteps();
  const Summary summary = ComputeSummary(trace);
  StackProfile profile;
  profile.Add(trace);
  const std::vector<ReadSample> samples = Read(profile.ToPprof());
  int checked = 0;
  for (const SummaryRow& row : summary.rows) {
    if (row.name == "nrt_execute" || row.name == "nrt_tensor_write") continue;  // all in ranges
    EXPECT_EQ(Cumulative(samples, row.name, StackProfile::kDeviceNs),
              static_cast<int64_t>(row.device_total_ns))
        << row.name;
    ++checked;
  }
  EXPECT_GE(checked, 5);  // ProfilerStep*, layer, aten::mul, aten::add, nrt_load
  // Everything the summary charges, plus what no call caused.
  EXPECT_EQ(profile.Total(StackProfile::kDeviceNs),
            summary.self_device_total_ns + summary.uncorrelated_device_ns);
  EXPECT_EQ(Cumulative(samples, "(no runtime call)", StackProfile::kDeviceNs),
            static_cast<int64_t>(summary.uncorrelated_device_ns));
}

TEST(PprofExportTest, AnotherThreadsWorkInAStepAndACollectivesWaitAreWhereTheSummaryHasThem) {
  const Trace trace = WithHelperThreadAndCollective();
  const Summary summary = ComputeSummary(trace);
  StackProfile profile;
  profile.Add(trace);
  const std::vector<ReadSample> samples = Read(profile.ToPprof());
  bool wait_row = false;
  for (const SummaryRow& row : summary.rows) {
    if (absl::StartsWith(row.name, "nrt")) continue;
    wait_row = wait_row || absl::StartsWith(row.name, "collective wait");
    EXPECT_EQ(Cumulative(samples, row.name, StackProfile::kDeviceNs),
              static_cast<int64_t>(row.device_total_ns))
        << row.name;
  }
  EXPECT_TRUE(wait_row);
  // The other thread's execution is under the steps' frame, its thread named.
  bool found = false;
  for (const ReadSample& s : samples) {
    if (s.stack == std::vector<std::string>{"mul_grad", "nrt_execute", "ProfilerStep*"} &&
        s.values[StackProfile::kDeviceNs] == 222) {
      found = true;
      EXPECT_EQ(s.labels.at("thread"), "autograd");
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(profile.Total(StackProfile::kDeviceNs),
            summary.self_device_total_ns + summary.uncorrelated_device_ns);
}

TEST(PprofExportTest, HostTimeIsEveryCallsDurationAndExecutionsCountOnce) {
  const Trace trace = TwoSteps();
  StackProfile profile;
  profile.Add(trace);
  uint64_t calls_ns = 0;
  for (const ApiCall& c : trace.processes[0].calls) calls_ns += c.duration_ns;
  EXPECT_EQ(profile.Total(StackProfile::kHostNs), calls_ns);
  uint64_t executions = 0;
  for (const DeviceEvent& d : trace.processes[0].device) {
    executions += d.kind == DeviceEventKind::kExecution && d.parent == 0;
  }
  EXPECT_EQ(profile.Total(StackProfile::kExecutions), executions);
  const std::vector<ReadSample> samples = Read(profile.ToPprof());
  // The host time of a call is on the stack that ends at it, not on a model or an op.
  EXPECT_EQ(Stack(samples, {"nrt_execute", "aten::mul", "ProfilerStep*", "run_op", "main"},
                  StackProfile::kHostNs),
            700);
  EXPECT_EQ(Cumulative(samples, "mul_model", StackProfile::kHostNs), 0);
}

TEST(PprofExportTest, StacksRunLeafFirstFromEngineOpToHostFrames) {
  StackProfile profile;
  profile.Add(TwoSteps());
  const std::vector<ReadSample> samples = Read(profile.ToPprof());
  const std::vector<std::string> below = {"nrt_execute", "aten::mul", "layer",
                                          "ProfilerStep*", "run_op", "main"};
  auto with = [&](std::vector<std::string> leaf) {
    leaf.insert(leaf.end(), below.begin(), below.end());
    return leaf;
  };
  // Ops that fit in their execution keep their time; the rest stays on the model, with the
  // execution's count.
  EXPECT_EQ(Stack(samples, with({"mul [vector]", "mul_model"}), StackProfile::kDeviceNs), 150);
  EXPECT_EQ(Stack(samples, with({"mul [tensor]", "mul_model"}), StackProfile::kDeviceNs), 100);
  EXPECT_EQ(Stack(samples, with({"mul_model"}), StackProfile::kDeviceNs), 400 - 150 - 100 + 350);
  EXPECT_EQ(Stack(samples, with({"mul_model"}), StackProfile::kExecutions), 2);
  // A transfer is its own leaf under its call.
  EXPECT_EQ(Stack(samples,
                  {"dma_h2d", "nrt_tensor_write", "aten::add", "layer", "ProfilerStep*", "run_op",
                   "main"},
                  StackProfile::kDeviceNs),
            77);
}

TEST(PprofExportTest, HostFramesAreFunctionsOfTheirModuleWithACallSiteEach) {
  StackProfile profile;
  profile.Add(TwoSteps());
  const perftools::profiles::Profile p = profile.ToPprof();
  std::vector<uint64_t> run_op;  // its functions' ids
  for (const auto& f : p.function()) {
    if (p.string_table(f.name()) == "run_op") {
      run_op.push_back(f.id());
      EXPECT_EQ(p.string_table(f.filename()), "train");
    }
  }
  ASSERT_EQ(run_op.size(), 1u);
  std::set<uint64_t> addresses;
  for (const auto& l : p.location()) {
    if (l.line(0).function_id() == run_op[0]) addresses.insert(l.address());
  }
  EXPECT_EQ(addresses, (std::set<uint64_t>{0x10, 0x18}));
}

TEST(PprofExportTest, OpsThatRanAtOnceShareTheirExecutionToTheNanosecond) {
  StackProfile profile;
  profile.Add(TwoSteps());
  const std::vector<ReadSample> samples = Read(profile.ToPprof());
  const int64_t add = Cumulative(samples, "add [vector]", StackProfile::kDeviceNs);
  const int64_t copy = Cumulative(samples, "copy [scalar]", StackProfile::kDeviceNs);
  EXPECT_EQ(add + copy, 301);  // the execution's time, though its ops took 400 between them
  EXPECT_LE(std::max(add, copy) - std::min(add, copy), 1);
  EXPECT_EQ(Cumulative(samples, "add_model", StackProfile::kDeviceNs), 301);
}

TEST(PprofExportTest, LabelsNameHostProcessThreadAndCore) {
  StackProfile profile;
  profile.Add(TwoSteps());
  const std::vector<ReadSample> samples = Read(profile.ToPprof());
  ASSERT_FALSE(samples.empty());
  for (const ReadSample& s : samples) {
    EXPECT_EQ(s.labels.at("host"), "trn1");
    EXPECT_EQ(s.labels.at("pid"), "7");
    EXPECT_EQ(s.labels.at("tid"), "1");
    EXPECT_EQ(s.labels.at("thread"), "MainThread");
    if (s.values[StackProfile::kDeviceNs] != 0) {
      EXPECT_EQ(s.labels.at("neuron_core"), "0");
    }
  }
}

TEST(PprofExportTest, AMergedCapturesPartsKeepTheirHosts) {
  Trace a = TwoSteps();
  a.processes[0].host.clear();
  Trace b = TwoSteps();
  b.processes[0].host.clear();
  StackProfile profile;
  profile.Add(a, "trn1");
  profile.Add(b, "trn2");
  std::set<std::string> hosts;
  for (const ReadSample& s : Read(profile.ToPprof())) hosts.insert(s.labels.at("host"));
  EXPECT_EQ(hosts, (std::set<std::string>{"trn1", "trn2"}));
  StackProfile one;
  one.Add(TwoSteps());
  EXPECT_EQ(profile.Total(StackProfile::kDeviceNs), 2 * one.Total(StackProfile::kDeviceNs));
}

TEST(PprofExportTest, FoldedStacksAreRootFirstWithDeviceNanoseconds) {
  StackProfile profile;
  profile.Add(TwoSteps());
  const std::string folded = profile.ToCollapsed();
  EXPECT_NE(folded.find("main;run_op;ProfilerStep*;layer;aten::mul;nrt_execute;mul_model;"
                        "mul [vector] 150\n"),
            std::string::npos)
      << folded;
  EXPECT_NE(folded.find("(no runtime call);ghost 33\n"), std::string::npos) << folded;
  // Every line's value adds up to the device total; no line without device time.
  uint64_t sum = 0;
  size_t start = 0;
  for (size_t end; (end = folded.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string line = folded.substr(start, end - start);
    const uint64_t ns = std::stoull(line.substr(line.rfind(' ') + 1));
    EXPECT_GT(ns, 0u) << line;
    sum += ns;
  }
  EXPECT_EQ(sum, profile.Total(StackProfile::kDeviceNs));
}

// What the report's flame graph reads: each stack once, labels merged, a host frame as its
// function (run_op's two call sites one frame), the values adding up to the profile's.
TEST(PprofExportTest, ForEachStackGivesEachStackOnceWithItsValues) {
  Trace trace = WithHelperThreadAndCollective();
  for (ApiCall& c : trace.processes[0].calls) {
    if (c.correlation_id == 12) c.stack[0] = "run_op (train+0x18)";  // step 0's second mul
  }
  StackProfile profile;
  profile.Add(trace);
  std::map<std::vector<std::string>, std::vector<int64_t>> stacks;
  int64_t sums[StackProfile::kValues] = {0, 0, 0};
  profile.ForEachStack([&](const std::vector<std::string_view>& frames, int64_t device_ns,
                           int64_t host_ns, int64_t executions) {
    const std::vector<std::string> stack(frames.begin(), frames.end());
    EXPECT_EQ(stacks.count(stack), 0u) << "a stack twice: " << stack[0];
    stacks[stack] = {device_ns, host_ns, executions};
    sums[StackProfile::kDeviceNs] += device_ns;
    sums[StackProfile::kHostNs] += host_ns;
    sums[StackProfile::kExecutions] += executions;
  });
  for (int v = 0; v < StackProfile::kValues; ++v) {
    EXPECT_EQ(sums[v], static_cast<int64_t>(profile.Total(static_cast<StackProfile::Value>(v))))
        << v;
  }
  // Step 0's two aten::mul executions (from run_op+0x10 and run_op+0x18): one stack.
  const std::vector<std::string> mul = {"mul_model",     "nrt_execute", "aten::mul", "layer",
                                        "ProfilerStep*", "run_op",      "main"};
  ASSERT_EQ(stacks.count(mul), 1u);
  EXPECT_EQ(stacks[mul][0], 400 - 150 - 100 + 350);
  const std::vector<std::string> step1 = {"mul_model",     "nrt_execute", "aten::mul",
                                          "ProfilerStep*", "run_op",      "main"};
  ASSERT_EQ(stacks.count(step1), 1u);
  EXPECT_EQ(stacks[step1][0], 500);
  EXPECT_EQ(stacks[step1][2], 1);
  // The call's host time, on the stack that ends at the call.
  const std::vector<std::string> call1(step1.begin() + 1, step1.end());
  ASSERT_EQ(stacks.count(call1), 1u);
  EXPECT_EQ(stacks[call1], (std::vector<int64_t>{0, 700, 0}));
  // The other thread's work in step 1, under the steps' frame as in the summary's row.
  const std::vector<std::string> grad = {"mul_grad", "nrt_execute", "ProfilerStep*"};
  ASSERT_EQ(stacks.count(grad), 1u);
  EXPECT_EQ(stacks[grad][0], 222);
}

// The profile's time and duration: the capture's window as summary.json has it (go tool pprof
// prints them as Time: and Duration:), or the window SetWindow gives (the fleet store's).
TEST(PprofExportTest, TimeAndDurationAreTheCapturesWindow) {
  const Trace trace = TwoSteps();
  const Summary summary = ComputeSummary(trace);
  ASSERT_NE(summary.window_start_unix_ns, 0u);
  StackProfile profile;
  profile.Add(trace);
  const perftools::profiles::Profile p = profile.ToPprof();
  EXPECT_EQ(p.time_nanos(), static_cast<int64_t>(summary.window_start_unix_ns));
  EXPECT_EQ(p.duration_nanos(), static_cast<int64_t>(summary.window_ns));
  EXPECT_EQ(p.duration_nanos(), 20'000);  // step 0's start to step 1's end
  StackProfile fleet;
  fleet.SetWindow(1'765'000'000'000'000'000, 3'600'000'000'000);
  fleet.AddStack({"aten::mul"}, "trn1", 7, 0, "", -1, 100, 0, 0);
  const perftools::profiles::Profile f = fleet.ToPprof();
  EXPECT_EQ(f.time_nanos(), 1'765'000'000'000'000'000);
  EXPECT_EQ(f.duration_nanos(), 3'600'000'000'000);
}

TEST(PprofExportTest, GzipInflatesBackToTheProfile) {
  StackProfile profile;
  profile.Add(TwoSteps());
  const std::string bytes = profile.ToPprof().SerializeAsString();
  const std::string gz = Gzip(bytes);
  ASSERT_GE(gz.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);  // gzip's magic
  EXPECT_EQ(static_cast<unsigned char>(gz[1]), 0x8b);
  z_stream z{};
  ASSERT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string back(bytes.size() + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(back.data());
  z.avail_out = static_cast<uInt>(back.size());
  EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  back.resize(z.total_out);
  inflateEnd(&z);
  EXPECT_EQ(back, bytes);
}

TEST(PprofExportTest, AnEmptyCaptureIsAnEmptyProfile) {
  StackProfile profile;
  profile.Add(Trace{});
  EXPECT_EQ(profile.samples(), 0u);
  EXPECT_EQ(profile.ToPprof().sample_size(), 0);
  EXPECT_EQ(profile.ToCollapsed(), "");
}

}  // namespace
}  // namespace nrtprof::daemon
