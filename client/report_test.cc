// The report's reading of a trace.pftrace: the lanes, slices, flows and metadata the daemon
// wrote, and what the page's data says of them (the drawn and the sampled, per-core use, the
// flame graph's frames).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/capture_stacks.h"
#include "client/collectives_table.h"
#include "client/report_page.h"
#include "client/report_trace.h"
#include "gtest/gtest.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/perfetto_writer.h"
#include "trace/pprof_export.h"
#include "trace/summary.h"
#include "trace/writer_test_util.h"

namespace nrtprof::cli {
namespace {

ReportTrace WrittenAndRead(const daemon::Trace& trace) {
  const std::string dir = daemon::TempDir("report-trace");
  std::vector<std::string> files;
  EXPECT_TRUE(
      daemon::PerfettoWriter().Write(trace, daemon::ComputeSummary(trace), dir, &files).ok());
  absl::StatusOr<daemon::ReadTrace> read =
      daemon::ReadPerfettoTrace(daemon::ReadFile(dir + "/trace.pftrace"));
  EXPECT_TRUE(read.ok()) << read.status();
  absl::StatusOr<ReportTrace> report = ReadReportTrace(*read);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : ReportTrace();
}

const ReportSlice* Find(const ReportTrace& t, const std::string& name, std::string* kind) {
  for (const ReportLane& lane : t.lanes) {
    for (const ReportSlice& s : lane.slices) {
      if (t.names[s.name] == name) {
        *kind = lane.kind;
        return &s;
      }
    }
  }
  return nullptr;
}

TEST(ReportTraceTest, LanesSlicesFlowsAndMetadataAsWritten) {
  const ReportTrace t = WrittenAndRead(daemon::SmallTrace());
  ASSERT_EQ(t.processes.size(), 1u);
  EXPECT_EQ(t.processes[0].pid, 100);
  EXPECT_EQ(t.processes[0].name, "python3");
  EXPECT_EQ(t.processes[0].cmdline, "python3 train.py --steps=1");
  EXPECT_EQ(t.processes[0].Metadata("host"), "trn1");
  EXPECT_EQ(t.processes[0].Metadata("drops.total"), "3");
  std::vector<std::string> lanes;
  for (const ReportLane& l : t.lanes) lanes.push_back(l.owner + " " + l.kind);
  EXPECT_EQ(lanes,
            (std::vector<std::string>{"tid 101 MainThread framework", "tid 101 MainThread runtime",
                                      "tid 102 loader framework", "tid 102 loader runtime",
                                      "NeuronCore 0 executions", "NeuronCore 0 DMA"}));
  EXPECT_EQ(t.first_ns, 1000u);
  EXPECT_EQ(t.last_ns, 2000u);
  ASSERT_TRUE(t.realtime_offset_ns.has_value());
  EXPECT_EQ(*t.realtime_offset_ns, 1'700'000'000'000'000'000);
  // The chain: aten::mul -> nrt_execute -> nc_exec_running share one flow; the engine op inside
  // the execution is nested, not a step of it.
  std::string kind;
  const ReportSlice* mul = Find(t, "aten::mul", &kind);
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(kind, "framework");
  EXPECT_EQ(mul->depth, 1u);
  ASSERT_EQ(mul->flows.size(), 1u);
  const ReportSlice* call = Find(t, "nrt_execute", &kind);
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call->flows, mul->flows);
  EXPECT_TRUE(absl::StrContains(call->args, "correlation_id=10")) << call->args;
  const ReportSlice* run = Find(t, "nc_exec_running", &kind);
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(kind, "executions");
  EXPECT_EQ(run->flows, mul->flows);
  const ReportSlice* op = Find(t, "mul", &kind);
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->depth, 1u);
  EXPECT_TRUE(op->flows.empty());
}

TEST(ReportPageTest, SaysWhatItDrawsAndHowBusyEachCoreWas) {
  const ReportTrace t = WrittenAndRead(daemon::SmallTrace());
  daemon::Summary summary;
  summary.capture_id = "cap-42";
  ReportOptions options;
  const std::string whole = ReportPageData(t, summary, options);
  EXPECT_TRUE(absl::StrContains(whole, "\"truncated\":false")) << whole;
  // 140 ns of execution in a 1000 ns window; the ops inside it count once.
  EXPECT_TRUE(absl::StrContains(whole,
                                "\"core\":\"NeuronCore 0\",\"executions\":1,"
                                "\"busy\":\"0.140us\",\"utilization\":\"14.0%\""))
      << whole;
  // Past max_slices: the earliest slices, never more, and the page says how many of all.
  options.max_slices = 4;
  const size_t drawn = DrawnSlices(t, options.max_slices);
  EXPECT_GT(drawn, 0u);
  EXPECT_LE(drawn, 4u);
  const std::string sampled = ReportPageData(t, summary, options);
  EXPECT_TRUE(
      absl::StrContains(sampled, absl::StrCat("\"drawn\":{\"slices\":", drawn,
                                              ",\"total\":", t.slices, ",\"truncated\":true")))
      << sampled;
  EXPECT_TRUE(absl::StrContains(sampled, "\"density\":[1,1,")) << "the rest as busy time";
  const std::string page = RenderReportPage(t, summary, options);
  EXPECT_TRUE(absl::StartsWith(page, "<!DOCTYPE html>"));
  EXPECT_TRUE(absl::StrContains(page, "default-src 'none'"));
}

// A capture with async work: the page's table has the text table's Queue wait avg column (a
// cell and a value before the count) and says so; one without keeps its eight cells.
TEST(ReportPageTest, TheTableOfACaptureWithAsyncWorkHasItsQueueWait) {
  const daemon::Trace async = daemon::AsyncTrace();
  const std::string with = ReportPageData(WrittenAndRead(async), daemon::ComputeSummary(async),
                                          ReportOptions());
  EXPECT_TRUE(absl::StrContains(with, "\"async\":true")) << with;
  // forward: 1.100ms of device time, a queue wait of 200 us on average, one call.
  EXPECT_TRUE(absl::StrContains(with, "\"1.100ms\",\"200.000us\",\"1\"]")) << with;
  EXPECT_TRUE(absl::StrContains(with, ",1100000,200000,1]}")) << with;
  const daemon::Trace sync = daemon::SmallTrace();
  const std::string without = ReportPageData(WrittenAndRead(sync), daemon::ComputeSummary(sync),
                                             ReportOptions());
  EXPECT_TRUE(absl::StrContains(without, "\"async\":false")) << without;
  EXPECT_FALSE(absl::StrContains(without, "Queue wait")) << without;
}

// A trace of one process with three steps on its thread. Step 1 (ProfilerStep#1, 200 ns) makes
// two runtime calls whose executions (80 ns) run during step 2, which makes one of 60 ns; step 0
// makes one of 30 ns.
ReportTrace ThreeSteps() {
  ReportTrace t;
  t.names = {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2", "nrt_execute",
             "nc_exec_running"};
  t.processes.resize(1);
  t.first_ns = 1000;
  t.last_ns = 1450;
  const auto slice = [](uint64_t start, uint64_t dur, uint32_t name, std::vector<uint64_t> flows) {
    ReportSlice s;
    s.start_ns = start;
    s.dur_ns = dur;
    s.name = name;
    s.flows = std::move(flows);
    return s;
  };
  t.lanes.resize(3);
  t.lanes[0].kind = "framework";
  t.lanes[0].slices = {slice(1000, 100, 0, {}), slice(1100, 200, 1, {}), slice(1300, 100, 2, {})};
  t.lanes[1].kind = "runtime";
  t.lanes[1].slices = {slice(1010, 5, 3, {1}), slice(1110, 5, 3, {2}), slice(1150, 5, 3, {3}),
                       slice(1310, 5, 3, {4})};
  t.lanes[2].kind = "executions";
  t.lanes[2].slices = {slice(1020, 30, 4, {1}), slice(1310, 40, 4, {2}), slice(1350, 40, 4, {3}),
                       slice(1390, 60, 4, {4})};
  for (const ReportLane& lane : t.lanes) t.slices += lane.slices.size();
  return t;
}

// A distributed job's page has a Collectives section: the collectives of most skew, the most
// first and no more than asked, then the straggler table and the slowest rank's line, cell for
// cell as the command's; a page without collectives has none.
TEST(ReportPageTest, TheCollectivesSectionShowsTheWorstCollectivesAndTheStragglers) {
  CollectivesTable table;
  table.heading = "3 ranks on vm, 3 collectives";
  for (const auto& [number, skew] :
       std::vector<std::pair<std::string, uint64_t>>{{"#1", 1}, {"#2", 30}, {"#3", 20}}) {
    table.instances.push_back({"0", number + " on queue 32", "3/3", absl::StrCat(skew, "ms"), "2",
                               "-", "-", "host: stall 100%"});
    table.skew_ns.push_back(skew);
  }
  table.stragglers.push_back({"2", "vm", "42", "3", "51ms", "0ms", "host: stall 100%"});
  table.slowest = "Slowest rank: 2 (vm pid 42)";
  const ReportTrace t = WrittenAndRead(daemon::SmallTrace());
  ReportOptions options;
  options.collectives = &table;
  options.worst_collectives = 2;
  const std::string data = ReportPageData(t, daemon::Summary(), options);
  const size_t second = data.find("[\"0\",\"#2 on queue 32\"");
  const size_t third = data.find("[\"0\",\"#3 on queue 32\"");
  EXPECT_NE(second, std::string::npos) << data;
  EXPECT_NE(third, std::string::npos) << data;
  EXPECT_LT(second, third) << "the most skew first";
  EXPECT_FALSE(absl::StrContains(data, "#1 on queue 32")) << "only the worst 2";
  EXPECT_TRUE(absl::StrContains(data, "\"total\":3,")) << data;
  EXPECT_TRUE(
      absl::StrContains(data, "[\"2\",\"vm\",\"42\",\"3\",\"51ms\",\"0ms\",\"host: stall 100%\"]"))
      << data;
  EXPECT_TRUE(absl::StrContains(data, "\"slowest\":\"Slowest rank: 2 (vm pid 42)\"")) << data;
  EXPECT_TRUE(absl::StrContains(ReportPageData(t, daemon::Summary(), ReportOptions()),
                                "\"collectives\":null"));
}

// The timeline opens on the step whose calls caused the most device time, wherever that time
// fell, with a margin of 2% of the step on each side; the page says which step it is.
TEST(ReportPageTest, OpensOnTheBusiestStep) {
  const ReportTrace t = ThreeSteps();
  const InitialView view = ChooseInitialView(t, ReportOptions().max_slices);
  EXPECT_EQ(view.step, 1);
  EXPECT_EQ(view.device_ns, 80u);
  EXPECT_EQ(view.step_ns, 200u);
  EXPECT_EQ(view.start_ns, 96u);
  EXPECT_EQ(view.end_ns, 304u);
  const std::string data = ReportPageData(t, daemon::Summary(), ReportOptions());
  EXPECT_TRUE(absl::StrContains(data,
                                "\"initial\":{\"start_ns\":96,\"end_ns\":304,\"step\":1,"
                                "\"step_length\":\"0.200us\",\"device\":\"0.080us\""))
      << data;
  // Past max_slices only the steps drawn one by one whole can be opened on: here step 0.
  EXPECT_EQ(ChooseInitialView(t, 4).step, 0);
}

// Without steps: the whole window where its slices are wide enough to see; else the stretch
// of 25 typical slices where the most device time starts.
TEST(ReportPageTest, WithoutStepsOpensWhereSlicesCanBeSeen) {
  const ReportTrace small = WrittenAndRead(daemon::SmallTrace());
  const InitialView whole = ChooseInitialView(small, ReportOptions().max_slices);
  EXPECT_EQ(whole.step, -1);
  EXPECT_FALSE(whole.busiest_stretch);
  EXPECT_EQ(whole.start_ns, 0u);
  EXPECT_EQ(whole.end_ns, small.last_ns - small.first_ns);

  // 200 calls of 10 ns, one every 1000 ns; three executions of 10 ns at 150 us.
  ReportTrace t;
  t.names = {"nrt_execute", "nc_exec_running"};
  t.processes.resize(1);
  t.lanes.resize(2);
  t.lanes[0].kind = "runtime";
  t.lanes[1].kind = "executions";
  for (uint64_t i = 0; i < 200; ++i) {
    ReportSlice call;
    call.start_ns = 1000 * i;
    call.dur_ns = 10;
    t.lanes[0].slices.push_back(call);
  }
  for (uint64_t i = 0; i < 3; ++i) {
    ReportSlice run;
    run.start_ns = 150'000 + 20 * i;
    run.dur_ns = 10;
    run.name = 1;
    t.lanes[1].slices.push_back(run);
  }
  t.first_ns = 0;
  t.last_ns = 199'010;
  t.slices = 203;
  const InitialView stretch = ChooseInitialView(t, ReportOptions().max_slices);
  EXPECT_EQ(stretch.step, -1);
  EXPECT_TRUE(stretch.busiest_stretch);
  EXPECT_EQ(stretch.end_ns - stretch.start_ns, 250u);
  EXPECT_LE(stretch.start_ns, 150'000u);
  EXPECT_GE(stretch.end_ns, 150'050u);
}

// One step of a training loop, in ns: on the main thread ProfilerStep#0 [1000, 3000) holds
// aten::mul, whose nrt_execute's execution (mul_model, 100) has an engine op "mul" on the vector
// engine (60); during the step the autograd thread makes an nrt_execute in no range of its own
// (mul_grad, 300), as PyTorch's backward does.
daemon::Trace StepWithAutogradThread() {
  daemon::Trace t;
  t.capture_id = "cap-flame";
  t.realtime_offset_ns = 1'700'000'000'000'000'000;
  daemon::ProcessTrace p;
  p.pid = 300;
  p.host = "trn1";
  p.executable = "/usr/bin/python3";
  p.thread_names = {{301, "MainThread"}, {302, "autograd"}};
  p.ranges.push_back({1, "ProfilerStep#0", 301, 1000, 2000, 0, 0});
  p.ranges.push_back({2, "aten::mul", 301, 1100, 400, 1, 1});
  auto call = [&](uint64_t id, uint32_t tid, uint64_t start, const char* model, uint64_t range) {
    daemon::ApiCall& c = p.calls.emplace_back();
    c.correlation_id = id;
    c.name = daemon::Name::Lasting("nrt_execute");
    c.tid = tid;
    c.start_ns = start;
    c.duration_ns = 200;
    c.model_name = daemon::Name::Lasting(model);
    c.nc_idx = 0;
    c.repeat = 1;
    c.range = range;
  };
  call(10, 301, 1200, "mul_model", 2);
  call(11, 302, 1600, "mul_grad", 0);
  auto device = [&](uint64_t id, daemon::DeviceEventKind kind, const char* name, uint64_t start,
                    uint64_t duration, uint64_t call, const char* model, uint32_t tid,
                    uint64_t exec_id) -> daemon::DeviceEvent& {
    daemon::DeviceEvent& d = p.device.emplace_back();
    d.id = id;
    d.kind = kind;
    d.name = daemon::Name::Lasting(name);
    d.nc_idx = 0;
    d.start_ns = start;
    d.duration_ns = duration;
    d.correlation_id = call;
    d.model_name = daemon::Name::Lasting(model);
    d.submitting_tid = tid;
    d.exec_id = exec_id;
    return d;
  };
  device(50, daemon::DeviceEventKind::kExecution, "nc_exec_running", 1250, 100, 10, "mul_model",
         301, 7);
  daemon::DeviceEvent& op =
      device(51, daemon::DeviceEventKind::kEngineOp, "mul", 1260, 60, 10, "mul_model", 301, 7);
  op.parent = 50;
  op.engine = daemon::Name::Lasting("vector");
  device(52, daemon::DeviceEventKind::kExecution, "nc_exec_running", 1700, 300, 11, "mul_grad", 302,
         8);
  t.processes.push_back(p);
  t.start_ns = 1000;
  t.end_ns = 3000;
  return t;
}

// The flame graph's frames in the page's data, as the script reads them.
struct FlameFrame {
  std::string name;
  size_t parent = 0;
  int64_t device_ns = 0;
  std::string time, share;
  int64_t host_ns = 0, executions = 0;
};

// The flame graph's frames in the page's data, and (into `totals`, when given) each name's
// "[ns,time,share,frames]" of all its frames.
std::vector<FlameFrame> FlameFrames(const std::string& data,
                                    std::map<std::string, std::string>* totals = nullptr) {
  std::vector<FlameFrame> out;
  const size_t names_at = data.find("\"flame\":{\"names\":[\"");
  const size_t frames_at = data.find("],\"frames\":[[", names_at);
  const size_t end = data.find("]],\"totals\":[[", frames_at);
  const size_t totals_end = data.find("]]}", end);
  if (names_at == std::string::npos || frames_at == std::string::npos || end == std::string::npos ||
      totals_end == std::string::npos) {
    ADD_FAILURE() << "no flame graph in the page's data: " << data;
    return out;
  }
  const size_t first_name = names_at + std::string("\"flame\":{\"names\":[\"").size();
  const std::vector<std::string> names =
      absl::StrSplit(data.substr(first_name, frames_at - 1 - first_name), "\",\"");
  const size_t first_frame = frames_at + std::string("],\"frames\":[[").size();
  for (absl::string_view frame :
       absl::StrSplit(data.substr(first_frame, end - first_frame), "],[")) {
    const std::vector<std::string> f = absl::StrSplit(frame, ',');
    EXPECT_EQ(f.size(), 7u) << frame;
    if (f.size() != 7) continue;
    const auto unquote = [](const std::string& s) { return s.substr(1, s.size() - 2); };
    out.push_back({names.at(std::stoul(f[0])), std::stoul(f[1]), std::stoll(f[2]), unquote(f[3]),
                   unquote(f[4]), std::stoll(f[5]), std::stoll(f[6])});
  }
  const size_t first_total = end + std::string("]],\"totals\":[[").size();
  const std::vector<std::string> each =
      absl::StrSplit(data.substr(first_total, totals_end - first_total), "],[");
  EXPECT_EQ(each.size(), names.size());
  for (size_t n = 0; totals != nullptr && n < each.size() && n < names.size(); ++n) {
    (*totals)[names[n]] = "[" + each[n] + "]";
  }
  return out;
}

// The flame graph: the export's stacks root first (the step, the op, the runtime call, the model,
// the engine op), a frame per name along a path, siblings the widest first, each with its device
// time as the table writes it and its share. The step's frame holds the autograd thread's work
// as the table's ProfilerStep* row does, though no step range encloses it on its thread.
TEST(ReportPageTest, TheFlameGraphHasTheExportsStacksAndTheStepHoldsEveryThreadsWork) {
  const daemon::Trace trace = StepWithAutogradThread();
  const daemon::Summary summary = daemon::ComputeSummary(trace);
  const std::string dir = daemon::TempDir("report-flame");
  std::vector<std::string> files;
  ASSERT_TRUE(daemon::PerfettoWriter().Write(trace, summary, dir, &files).ok());
  absl::StatusOr<daemon::ReadTrace> read =
      daemon::ReadPerfettoTrace(daemon::ReadFile(dir + "/trace.pftrace"));
  ASSERT_TRUE(read.ok()) << read.status();
  absl::StatusOr<ReportTrace> report = ReadReportTrace(*read);
  ASSERT_TRUE(report.ok()) << report.status();
  daemon::StackProfile stacks;
  ASSERT_TRUE(AddCaptureStacks(*read, dir + "/trace.pftrace", &stacks).ok());
  ReportOptions options;
  options.stacks = &stacks;
  std::map<std::string, std::string> totals;
  const std::vector<FlameFrame> frames =
      FlameFrames(ReportPageData(*report, summary, options), &totals);
  ASSERT_FALSE(frames.empty());

  // Each frame as "parent's path > name": device ns, time, share.
  std::vector<std::string> paths(frames.size()), seen;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i > 0) {
      ASSERT_LT(frames[i].parent, i) << "a frame comes after its parent";
      paths[i] = absl::StrCat(frames[i].parent == 0 ? "" : paths[frames[i].parent] + " > ",
                              frames[i].name);
    }
    seen.push_back(absl::StrCat(i == 0 ? "(root) " + frames[i].name : paths[i], ": ",
                                frames[i].device_ns, " ", frames[i].time, " ", frames[i].share));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "(root) all: 400 0.400us 100.00%",
                      "ProfilerStep*: 400 0.400us 100.00%",
                      "ProfilerStep* > nrt_execute: 300 0.300us 75.00%",
                      "ProfilerStep* > nrt_execute > mul_grad: 300 0.300us 75.00%",
                      "ProfilerStep* > aten::mul: 100 0.100us 25.00%",
                      "ProfilerStep* > aten::mul > nrt_execute: 100 0.100us 25.00%",
                      "ProfilerStep* > aten::mul > nrt_execute > mul_model: 100 0.100us 25.00%",
                      "ProfilerStep* > aten::mul > nrt_execute > mul_model > mul [vector]: 60 "
                      "0.060us 15.00%",
                  }));
  // The table's ProfilerStep* row: the same device time.
  for (const daemon::SummaryRow& row : summary.rows) {
    if (row.name == "ProfilerStep*") {
      EXPECT_EQ(row.device_total_ns, 400u);
    }
    if (row.name == "aten::mul") {
      EXPECT_EQ(row.device_total_ns, 100u);
    }
  }
  // What all frames of a name hold: nrt_execute's two, the step's one.
  EXPECT_EQ(totals["nrt_execute"], "[400,\"0.400us\",\"100.00%\",2]");
  EXPECT_EQ(totals["aten::mul"], "[100,\"0.100us\",\"25.00%\",1]");
  // Host time and executions: every call's, each execution once.
  EXPECT_EQ(frames[0].host_ns, 400);
  EXPECT_EQ(frames[0].executions, 2);
}

// Without stacks (a trace that cannot be rebuilt into them) the page says why, and stands.
TEST(ReportPageTest, WithoutStacksThePageSaysWhyThereIsNoFlameGraph) {
  ReportOptions options;
  options.stacks_error = "trace.pftrace is not laid out as nrtprof writes it (no process)";
  const std::string data =
      ReportPageData(WrittenAndRead(daemon::SmallTrace()), daemon::Summary(), options);
  EXPECT_TRUE(absl::StrContains(
      data,
      "\"flame\":{\"error\":\"trace.pftrace is not laid out as nrtprof writes it (no "
      "process)\"}"))
      << data;
}

// A name that would close the script element stays inside the data.
TEST(ReportPageTest, ANameCannotEndTheScript) {
  daemon::Trace trace = daemon::SmallTrace();
  trace.processes[0].ranges[0].name = "</script><script>alert(1)</script>";
  const ReportTrace t = WrittenAndRead(trace);
  daemon::Summary summary;
  const std::string page = RenderReportPage(t, summary, ReportOptions());
  EXPECT_EQ(page.find("</script><script>alert"), std::string::npos);
  EXPECT_TRUE(absl::StrContains(page, "\\u003c/script>\\u003cscript>alert(1)"));
}

}  // namespace
}  // namespace nrtprof::cli
