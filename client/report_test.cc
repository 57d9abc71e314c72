// The report's reading of a trace.pftrace: the lanes, slices, flows and metadata the daemon
// wrote, and what the page's data says of them (the drawn and the sampled, per-core use).
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/report_page.h"
#include "client/report_trace.h"
#include "daemon/perfetto_trace_reader.h"
#include "daemon/perfetto_writer.h"
#include "daemon/summary.h"
#include "daemon/writer_test_util.h"
#include "gtest/gtest.h"

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
