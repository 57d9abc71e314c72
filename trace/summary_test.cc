#include "trace/summary.h"

#include <functional>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/summary_file.pb.h"
#include "trace/writer_test_util.h"

namespace nrtprof::daemon {
namespace {

constexpr uint64_t kUs = 1000;

// Builds a ProcessTrace as the correlator would.
class TraceBuilder {
 public:
  explicit TraceBuilder(uint32_t pid) { p_.pid = pid; }
  uint64_t Range(const std::string& name, uint64_t start, uint64_t dur, uint64_t parent = 0) {
    RangeEvent r;
    r.id = next_id_++;
    r.name = Name::Lasting(name);
    r.tid = 1;
    r.start_ns = start;
    r.duration_ns = dur;
    r.parent_range = parent;
    p_.ranges.push_back(r);
    return r.id;
  }
  uint64_t Call(const std::string& name, uint64_t start, uint64_t dur, uint64_t range) {
    ApiCall c;
    c.correlation_id = next_id_++;
    c.name = Name::Lasting(name);
    c.tid = 1;
    c.start_ns = start;
    c.duration_ns = dur;
    c.range = range;
    p_.calls.push_back(c);
    return c.correlation_id;
  }
  uint64_t Device(DeviceEventKind kind, const std::string& name, uint64_t dur, uint64_t correlation,
                  uint64_t parent = 0) {
    DeviceEvent d;
    d.id = next_id_++;
    d.kind = kind;
    d.name = Name::Lasting(name);
    d.duration_ns = dur;
    d.correlation_id = correlation;
    d.parent = parent;
    p_.device.push_back(d);
    return d.id;
  }
  ProcessTrace& process() { return p_; }

 private:
  ProcessTrace p_;
  uint64_t next_id_ = 1;
};

// rmsnorm ⊃ {aten::mul, aten::add}; a load outside any range; one stray execution.
Trace AnnotatedTrace() {
  TraceBuilder b(10);
  const uint64_t rms = b.Range("rmsnorm", 0, 1000 * kUs);
  const uint64_t mul = b.Range("aten::mul", 100 * kUs, 200 * kUs, rms);
  const uint64_t add = b.Range("aten::add", 400 * kUs, 300 * kUs, rms);
  const uint64_t exec1 = b.Call("nrt_execute", 150 * kUs, 100 * kUs, mul);
  const uint64_t write = b.Call("nrt_tensor_write", 410 * kUs, 90 * kUs, add);
  const uint64_t exec2 = b.Call("nrt_execute", 510 * kUs, 180 * kUs, add);
  const uint64_t load = b.Call("nrt_load", 2000 * kUs, 50 * kUs, 0);
  const uint64_t e1 = b.Device(DeviceEventKind::kExecution, "nc_exec_running", 80 * kUs, exec1);
  b.Device(DeviceEventKind::kEngineOp, "mul", 10 * kUs, exec1, e1);  // inside e1: not again
  b.Device(DeviceEventKind::kDma, "dma_h2d", 60 * kUs, write);
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 150 * kUs, exec2);
  b.Device(DeviceEventKind::kDma, "dma_model_load", 40 * kUs, load);
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 7 * kUs, 0);  // uncorrelated
  b.process().drops.ring_full = 3;
  b.process().drops.device_overwritten = 2;
  b.process().drops.by_lane.framework = 1;
  b.process().drops.by_lane.runtime = 2;
  b.process().drops.by_lane.hardware = 2;
  Trace t;
  t.capture_id = "cap";
  t.processes.push_back(b.process());
  return t;
}

std::map<std::string, SummaryRow> ByName(const Summary& s) {
  std::map<std::string, SummaryRow> rows;
  for (const SummaryRow& r : s.rows) rows[r.name] = r;
  return rows;
}

TEST(SummaryTest, SelfAndTotalTimes) {
  const Summary s = ComputeSummary(AnnotatedTrace());
  std::map<std::string, SummaryRow> rows = ByName(s);
  ASSERT_EQ(rows.size(), 4u);  // rmsnorm, aten::mul, aten::add, nrt_load

  const SummaryRow& rms = rows["rmsnorm"];
  EXPECT_EQ(rms.calls, 1u);
  EXPECT_EQ(rms.self_cpu_ns, 500 * kUs);  // 1000 - 200 - 300
  EXPECT_EQ(rms.cpu_total_ns, 1000 * kUs);
  EXPECT_EQ(rms.self_device_ns, 0u);
  EXPECT_EQ(rms.device_total_ns, 290 * kUs);  // 80 + 60 + 150

  EXPECT_EQ(rows["aten::mul"].self_cpu_ns, 200 * kUs);
  EXPECT_EQ(rows["aten::mul"].self_device_ns, 80 * kUs);
  EXPECT_EQ(rows["aten::mul"].device_total_ns, 80 * kUs);
  EXPECT_EQ(rows["aten::add"].self_device_ns, 210 * kUs);  // its transfer and execution

  // A runtime call outside every range has a row of its own.
  EXPECT_EQ(rows["nrt_load"].calls, 1u);
  EXPECT_EQ(rows["nrt_load"].self_cpu_ns, 50 * kUs);
  EXPECT_EQ(rows["nrt_load"].self_device_ns, 40 * kUs);

  EXPECT_EQ(s.self_cpu_total_ns, 1050 * kUs);
  EXPECT_EQ(s.self_device_total_ns, 330 * kUs);
  EXPECT_EQ(s.uncorrelated_device_events, 1u);
  EXPECT_EQ(s.uncorrelated_device_ns, 7 * kUs);
  EXPECT_EQ(s.drops.total(), 5u);
  EXPECT_EQ(s.capture_id, "cap");
}

// An execution's input transfer from the device profile whose execution is not in the capture
// is inside an execution's time all the same: never device time of its own, uncorrelated or
// not. A host-initiated transfer without its call is uncorrelated device time.
TEST(SummaryTest, ProfileDmaWithoutItsExecutionAddsNoDeviceTime) {
  TraceBuilder b(10);
  const uint64_t exec = b.Call("nrt_execute", 0, 500 * kUs, 0);
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 300 * kUs, exec);
  b.Device(DeviceEventKind::kDma, "dma_hbm_to_sbuf", 5 * kUs, 0);
  b.process().device.back().exec_id = 9;
  b.Device(DeviceEventKind::kDma, "dma_h2d", 7 * kUs, 0);
  Trace t;
  t.processes.push_back(b.process());
  const Summary s = ComputeSummary(t);
  EXPECT_EQ(s.self_device_total_ns, 300 * kUs);
  EXPECT_EQ(s.uncorrelated_device_events, 1u);
  EXPECT_EQ(s.uncorrelated_device_ns, 7 * kUs);
}

TEST(SummaryTest, NestedRangesOfOneNameCountOnce) {
  TraceBuilder b(1);
  const uint64_t outer = b.Range("f", 0, 100 * kUs);
  const uint64_t inner = b.Range("f", 10 * kUs, 50 * kUs, outer);
  const uint64_t call = b.Call("nrt_execute", 20 * kUs, 30 * kUs, inner);
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 20 * kUs, call);
  Trace t;
  t.processes.push_back(b.process());
  const SummaryRow f = ByName(ComputeSummary(t))["f"];
  EXPECT_EQ(f.calls, 2u);
  EXPECT_EQ(f.cpu_total_ns, 100 * kUs);  // the inner one is inside the outer one's time
  EXPECT_EQ(f.self_cpu_ns, 100 * kUs);   // (100 - 50) + 50
  EXPECT_EQ(f.self_device_ns, 20 * kUs);
  EXPECT_EQ(f.device_total_ns, 20 * kUs);  // not 40
}

// Steps of two numbers, one inside the other around another range: the steps' one row takes
// each execution's time once, and every execution under a range counts, not just its first.
TEST(SummaryTest, NestedStepsShareOneRowAndChargeItOnce) {
  TraceBuilder b(1);
  const uint64_t outer = b.Range("ProfilerStep#2", 0, 100 * kUs);
  const uint64_t g = b.Range("g", 5 * kUs, 90 * kUs, outer);
  const uint64_t inner = b.Range("ProfilerStep#3", 10 * kUs, 50 * kUs, g);
  const uint64_t call = b.Call("nrt_execute", 20 * kUs, 30 * kUs, inner);
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 20 * kUs, call);
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 5 * kUs, call);
  Trace t;
  t.processes.push_back(b.process());
  std::map<std::string, SummaryRow> rows = ByName(ComputeSummary(t));
  ASSERT_EQ(rows.count("ProfilerStep*"), 1u);
  const SummaryRow& steps = rows["ProfilerStep*"];
  EXPECT_EQ(steps.calls, 2u);
  EXPECT_EQ(steps.self_device_ns, 25 * kUs);
  EXPECT_EQ(steps.device_total_ns, 25 * kUs);  // not 50
  EXPECT_EQ(rows["g"].self_device_ns, 0u);
  EXPECT_EQ(rows["g"].device_total_ns, 25 * kUs);
}

// A step is the process's: PyTorch's autograd engine runs a device's backward on a thread of its
// own, whose ops do not nest in the step's range (it is on the thread that called backward()).
// Their device time during the step is the step's; after the last step, or between steps, not.
TEST(SummaryTest, AStepTakesTheDeviceTimeOfEveryThreadDuringIt) {
  TraceBuilder b(1);
  const uint64_t step = b.Range("ProfilerStep#7", 0, 100 * kUs);
  const uint64_t forward = b.Range("aten::addmm", 5 * kUs, 20 * kUs, step);
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 10 * kUs,
           b.Call("nrt_execute", 6 * kUs, 15 * kUs, forward));
  const uint64_t backward = b.Range("aten::mm", 40 * kUs, 30 * kUs);  // the engine's thread
  b.process().ranges.back().tid = 2;
  const uint64_t exec = b.Call("nrt_execute", 45 * kUs, 20 * kUs, backward);
  b.process().calls.back().tid = 2;
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 12 * kUs, exec);
  b.Device(DeviceEventKind::kDma, "dma_h2d", 3 * kUs, b.Call("nrt_tensor_write", 80 * kUs, 5 * kUs, 0));
  b.process().calls.back().tid = 3;  // no range at all, still during the step
  const uint64_t after = b.Range("aten::mm", 150 * kUs, 30 * kUs);  // after the last step
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 50 * kUs,
           b.Call("nrt_execute", 155 * kUs, 20 * kUs, after));
  Trace t;
  t.processes.push_back(b.process());
  std::map<std::string, SummaryRow> rows = ByName(ComputeSummary(t));
  EXPECT_EQ(rows["ProfilerStep*"].calls, 1u);
  EXPECT_EQ(rows["ProfilerStep*"].self_device_ns, 0u);
  EXPECT_EQ(rows["ProfilerStep*"].device_total_ns, 25 * kUs);  // 10 + 12 + 3, not the 50 after
  EXPECT_EQ(rows["aten::mm"].self_device_ns, 62 * kUs);
  EXPECT_EQ(rows["aten::addmm"].device_total_ns, 10 * kUs);
}

TEST(SummaryTest, ProcessWithoutRangesHasOneRowPerFunction) {
  TraceBuilder b(1);
  const uint64_t c1 = b.Call("nrt_execute", 0, 500 * kUs, 0);
  const uint64_t c2 = b.Call("nrt_execute", 600 * kUs, 500 * kUs, 0);
  b.Call("nrt_tensor_read", 2000 * kUs, 200 * kUs, 0);
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 400 * kUs, c1);
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 300 * kUs, c2);
  Trace t;
  t.processes.push_back(b.process());
  std::map<std::string, SummaryRow> rows = ByName(ComputeSummary(t));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows["nrt_execute"].calls, 2u);
  EXPECT_EQ(rows["nrt_execute"].self_cpu_ns, 1000 * kUs);
  EXPECT_EQ(rows["nrt_execute"].self_device_ns, 700 * kUs);
  EXPECT_EQ(rows["nrt_tensor_read"].self_device_ns, 0u);
}

TEST(SummaryTest, RowsOfTheSameNameMergeAcrossProcesses) {
  TraceBuilder a(1), b(2);
  const uint64_t ra = a.Range("step", 0, 10 * kUs);
  const uint64_t rb = b.Range("step", 0, 30 * kUs);
  a.Device(DeviceEventKind::kExecution, "x", 5 * kUs, a.Call("nrt_execute", 1, 1, ra));
  b.Device(DeviceEventKind::kExecution, "x", 7 * kUs, b.Call("nrt_execute", 1, 1, rb));
  Trace t;
  t.processes = {a.process(), b.process()};
  const Summary s = ComputeSummary(t);
  ASSERT_EQ(s.rows.size(), 1u);
  EXPECT_EQ(s.rows[0].calls, 2u);
  EXPECT_EQ(s.rows[0].self_device_ns, 12 * kUs);
}

TEST(SummaryTest, DurationsAsPyTorchPrintsThem) {
  EXPECT_EQ(FormatDuration(0), "0.000us");
  EXPECT_EQ(FormatDuration(999), "0.999us");
  EXPECT_EQ(FormatDuration(154'321), "154.321us");
  EXPECT_EQ(FormatDuration(2'355'000), "2.355ms");
  EXPECT_EQ(FormatDuration(2'000'000'000), "2.000s");
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The table's lines, from its first rule on: without the header above it.
std::vector<std::string> TableLines(const std::string& text) {
  std::vector<std::string> lines = Lines(text);
  while (!lines.empty() && lines[0].rfind("---", 0) != 0) lines.erase(lines.begin());
  return lines;
}

// Above the table: what was captured, where and when, and the totals.
TEST(SummaryTest, TextHeader) {
  Trace trace = AnnotatedTrace();
  trace.capture_id = "20261203-101500";
  trace.realtime_offset_ns = 1'764'756'900'000'000'000;  // 2025-12-03 10:15:00 UTC at 0
  trace.processes[0].host = "trn1-a";
  trace.processes[0].command_line = {"python3", "train.py", "--steps", "10"};
  ProcessTrace quiet;
  quiet.pid = 11;
  quiet.executable = "/usr/bin/sleeper";
  trace.processes.push_back(quiet);
  const std::vector<std::string> lines = Lines(FormatSummary(ComputeSummary(trace)));
  ASSERT_GE(lines.size(), 5u);
  EXPECT_EQ(lines[0], "Capture 20261203-101500 on trn1-a: 2025-12-03 10:15:00.000 UTC, window 2.050ms");
  EXPECT_EQ(lines[1], "pid 10: python3 train.py --steps 10");
  EXPECT_EQ(lines[2], "pid 11: /usr/bin/sleeper");  // no command line: its executable
  EXPECT_EQ(lines[3], "Totals: 13 events, Self CPU 1.050ms, Self NEURON 330.000us");
  EXPECT_EQ(lines[4].find_first_not_of("- "), std::string::npos);  // the table's rule

  // The same header read back from summary.json.
  absl::StatusOr<Summary> back = ParseSummaryJson(
      FormatSummary(ComputeSummary(trace), SummarySortKey::kSelfDevice, SummaryFormat::kJson));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(Lines(FormatSummary(*back)), lines);
}

// summary.json has one definition, proto/summary_file.proto: the writer prints what the proto
// defines, every key of it and no other (a strict parse refuses a key the proto lacks), and each
// field is of a type the writer prints as a plain JSON number, string or object.
TEST(SummaryTest, SummaryJsonIsItsProtoDefinition) {
  Summary s = ComputeSummary(AnnotatedTrace());
  s.notices = {"pid 1 (app): a notice"};
  s.processes.push_back({7, "hostA", "app --flag", "job-7"});
  const std::string json = FormatSummary(s, SummarySortKey::kName, SummaryFormat::kJson);
  summary_json::SummaryFile strict;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &strict, options).ok()) << json;
  EXPECT_EQ(strict.rows_size(), static_cast<int>(s.rows.size()));
  EXPECT_EQ(strict.notices(0), "pid 1 (app): a notice");
  ASSERT_GE(strict.processes_size(), 1);
  EXPECT_EQ(strict.processes(strict.processes_size() - 1).host(), "hostA");
  EXPECT_EQ(strict.processes(strict.processes_size() - 1).job(), "job-7");
  // The header says the job after the command line; a process of none, nothing.
  const std::string text = FormatSummary(s, SummarySortKey::kName, SummaryFormat::kText);
  EXPECT_TRUE(absl::StrContains(text, ": app --flag (job job-7)\n")) << text;
  EXPECT_EQ(text.find("(job "), text.rfind("(job ")) << text;
  // Every key the proto defines is in the file, zero or not.
  std::function<void(const google::protobuf::Descriptor*)> check =
      [&](const google::protobuf::Descriptor* d) {
        for (int i = 0; i < d->field_count(); ++i) {
          const google::protobuf::FieldDescriptor* f = d->field(i);
          EXPECT_TRUE(absl::StrContains(json, absl::StrCat("\"", f->name(), "\": ")))
              << d->name() << "." << f->name() << " is not in the file";
          using FD = google::protobuf::FieldDescriptor;
          const FD::CppType t = f->cpp_type();
          EXPECT_TRUE(t == FD::CPPTYPE_UINT64 || t == FD::CPPTYPE_UINT32 ||
                      t == FD::CPPTYPE_STRING || t == FD::CPPTYPE_MESSAGE)
              << d->name() << "." << f->name() << ": a type summary.cc's writer does not print";
          if (t == FD::CPPTYPE_MESSAGE) check(f->message_type());
        }
      };
  check(summary_json::SummaryFile::descriptor());
  // 64-bit counts are plain numbers, as the published file has them.
  EXPECT_TRUE(absl::StrContains(json, absl::StrCat("\"calls\": ", s.rows[0].calls, ", "))) << json;
  EXPECT_FALSE(absl::StrContains(json, "\"calls\": \"")) << json;
}

TEST(SummaryTest, TextTable) {
  const std::string text = FormatSummary(ComputeSummary(AnnotatedTrace()));
  const std::vector<std::string> lines = TableLines(text);
  ASSERT_EQ(lines.size(), 13u) << text;  // rule, header, rule, 4 rows, rule, 5 closing lines
  EXPECT_EQ(lines[0].find_first_not_of("- "), std::string::npos);
  for (const char* header : {"Name", "Self CPU", "CPU total", "Self NEURON", "Self NEURON %",
                             "NEURON total", "NEURON time avg", "# of Calls"}) {
    EXPECT_NE(lines[1].find(header), std::string::npos) << header;
  }
  // Sorted by Self NEURON: aten::add (210 us), aten::mul (80), nrt_load (40), rmsnorm (0).
  EXPECT_NE(lines[3].find("aten::add"), std::string::npos);
  EXPECT_NE(lines[3].find("210.000us"), std::string::npos);
  EXPECT_NE(lines[3].find("63.64%"), std::string::npos);  // 210 / 330
  EXPECT_NE(lines[4].find("aten::mul"), std::string::npos);
  EXPECT_NE(lines[5].find("nrt_load"), std::string::npos);
  EXPECT_NE(lines[6].find("rmsnorm"), std::string::npos);
  EXPECT_NE(lines[6].find("290.000us"), std::string::npos);
  // Every table line is as wide as the rules.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(lines[i].size(), lines[0].size()) << lines[i];
  EXPECT_EQ(lines[8], "Self CPU time total: 1.050ms");
  EXPECT_EQ(lines[9], "Self NEURON time total: 330.000us");
  EXPECT_EQ(lines[10], "Uncorrelated NEURON time: 7.000us in 1 device events (in no row)");
  EXPECT_EQ(lines[11], "Events dropped: 5 (ring_full 3, device_overwritten 2)");
  EXPECT_EQ(lines[12], "Events dropped by lane: framework 1, runtime 2, hardware 2");
}

TEST(SummaryTest, NoDropsStillSaysSo) {
  const std::string text = FormatSummary(ComputeSummary(Trace()));
  EXPECT_NE(text.find("\nEvents dropped: 0\n"), std::string::npos) << text;
}

TEST(SummaryTest, LongNamesAreCut) {
  TraceBuilder b(1);
  b.Range(std::string(80, 'n'), 0, 1);
  Trace t;
  t.processes.push_back(b.process());
  const std::vector<std::string> lines = TableLines(FormatSummary(ComputeSummary(t)));
  EXPECT_NE(lines[3].find(std::string(52, 'n') + "..."), std::string::npos) << lines[3];
  EXPECT_EQ(lines[3].size(), lines[0].size());
}

// Found by the fuzz tests: a name holding a newline or a NUL broke the table's one line per
// row, and a long name of multi-byte characters was cut inside a character (invalid UTF-8,
// which a proto3 string in StopCapture's reply cannot carry).
TEST(SummaryTest, HostileNamesStayOnOneLineAsUtf8) {
  TraceBuilder b(1);
  std::string accents;
  for (int i = 0; i < 40; ++i) accents += "\xc3\xa9";  // 'é' x 40: 80 bytes
  b.Range("two\nlines", 0, 1);
  b.Range(std::string("nul\0tab\t\x7f", 9), 2, 1);
  b.Range("x" + accents, 4, 1);
  b.Range("bad\xff", 6, 1);
  Trace t;
  t.processes.push_back(b.process());
  const std::string text = FormatSummary(ComputeSummary(t), SummarySortKey::kName);
  const std::vector<std::string> lines = TableLines(text);
  ASSERT_EQ(lines.size(), 11u) << text;  // rule, header, rule, 4 rows, rule, 3 closing lines
  EXPECT_EQ(text.find('\0'), std::string::npos);
  EXPECT_NE(lines[3].find("bad\xef\xbf\xbd "), std::string::npos) << lines[3];
  EXPECT_NE(lines[4].find("nul\\0tab\\t\\x7f "), std::string::npos) << lines[4];
  EXPECT_NE(lines[5].find("two\\nlines "), std::string::npos) << lines[5];
  // Cut at 52 bytes would split an 'é': the cut is at 51, a character boundary.
  std::string cut = "x";
  for (int i = 0; i < 25; ++i) cut += "\xc3\xa9";
  EXPECT_NE(lines[6].find(" " + cut + "...  "), std::string::npos) << lines[6];
  // The JSON form keeps names as they are: the CLI prints the same table from it.
  absl::StatusOr<Summary> back = ParseSummaryJson(
      FormatSummary(ComputeSummary(t), SummarySortKey::kName, SummaryFormat::kJson));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(FormatSummary(*back, SummarySortKey::kName), text);
}

// Names and notices are what the programs sent: an ESC sequence (or the C1 CSI, U+009B) in
// one must not drive the terminal that `nrtprof summary` or `nrtprof run` prints the table on.
TEST(SummaryTest, TerminalEscapesInNamesAndNoticesAreShownAsText) {
  TraceBuilder b(1);
  b.Range("aten::\x1b]0;pwned\x07mul", 0, 1);
  b.Range("csi\xc2\x9b" "2J", 2, 1);
  Trace t;
  t.processes.push_back(b.process());
  t.processes[0].notices = {"the runtime said \x1b[2J"};
  const std::string text = FormatSummary(ComputeSummary(t), SummarySortKey::kName);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find("\xc2\x9b"), std::string::npos) << text;
  EXPECT_NE(text.find(" aten::\\x1b]0;pwned\\x07mul  "), std::string::npos) << text;
  EXPECT_NE(text.find(" csi\\u009b2J  "), std::string::npos) << text;
  EXPECT_NE(text.find("the runtime said \\x1b[2J\n"), std::string::npos) << text;
}

TEST(SummaryTest, JsonNeverPassesBytesThatAreNotUtf8) {
  TraceBuilder b(1);
  b.Range("\xf8\x80\x80 \xff\xbf\xbf", 0, 1);  // lead bytes no UTF-8 character starts with
  Trace t;
  t.processes.push_back(b.process());
  absl::StatusOr<Summary> back = ParseSummaryJson(
      FormatSummary(ComputeSummary(t), SummarySortKey::kName, SummaryFormat::kJson));
  ASSERT_TRUE(back.ok()) << back.status();
  std::string want;
  for (int i = 0; i < 3; ++i) want += "\xef\xbf\xbd";
  EXPECT_EQ(back->rows[0].name, want + " " + want);
}

TEST(SummaryTest, SortKeysAndLimit) {
  const Summary s = ComputeSummary(AnnotatedTrace());
  auto first_names = [&](SummarySortKey key, int limit) {
    std::vector<std::string> names;
    const std::string csv = FormatSummary(s, key, SummaryFormat::kCsv, limit);
    std::vector<std::string> lines = Lines(csv);
    for (size_t i = 1; i < lines.size(); ++i)
      names.push_back(lines[i].substr(0, lines[i].find(',')));
    return names;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(first_names(SummarySortKey::kSelfDevice, 0),
            (V{"aten::add", "aten::mul", "nrt_load", "rmsnorm"}));
  EXPECT_EQ(first_names(SummarySortKey::kDeviceTotal, 2), (V{"rmsnorm", "aten::add"}));
  EXPECT_EQ(first_names(SummarySortKey::kSelfCpu, 1), (V{"rmsnorm"}));
  EXPECT_EQ(first_names(SummarySortKey::kCpuTotal, 2), (V{"rmsnorm", "aten::add"}));
  EXPECT_EQ(first_names(SummarySortKey::kName, 0),
            (V{"aten::add", "aten::mul", "nrt_load", "rmsnorm"}));
  // Ties (one call each) fall back to the name.
  EXPECT_EQ(first_names(SummarySortKey::kCalls, 3), (V{"aten::add", "aten::mul", "nrt_load"}));

  EXPECT_EQ(ParseSummarySortKey("device_total").value(), SummarySortKey::kDeviceTotal);
  EXPECT_EQ(ParseSummarySortKey("bogus").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSummaryFormat("csv").value(), SummaryFormat::kCsv);
  EXPECT_FALSE(ParseSummaryFormat("xml").ok());
}

TEST(SummaryTest, CsvHasRawNanoseconds) {
  const std::string csv =
      FormatSummary(ComputeSummary(AnnotatedTrace()), SummarySortKey::kName, SummaryFormat::kCsv);
  const std::vector<std::string> lines = Lines(csv);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0],
            "name,self_cpu_ns,cpu_total_ns,self_device_ns,device_total_ns,device_avg_ns,calls");
  EXPECT_EQ(lines[1], "aten::add,300000,300000,210000,210000,210000,1");
  EXPECT_EQ(lines[4], "rmsnorm,500000,1000000,0,290000,290000,1");
}

TEST(SummaryTest, CsvQuotesAwkwardNames) {
  TraceBuilder b(1);
  b.Range("a,\"b\"", 0, 1);
  Trace t;
  t.processes.push_back(b.process());
  const std::string csv =
      FormatSummary(ComputeSummary(t), SummarySortKey::kName, SummaryFormat::kCsv);
  EXPECT_NE(csv.find("\n\"a,\"\"b\"\"\",1,"), std::string::npos) << csv;
}

void ExpectSameSummary(const Summary& a, const Summary& b) {
  EXPECT_EQ(a.capture_id, b.capture_id);
  EXPECT_EQ(a.self_cpu_total_ns, b.self_cpu_total_ns);
  EXPECT_EQ(a.self_device_total_ns, b.self_device_total_ns);
  EXPECT_EQ(a.uncorrelated_device_events, b.uncorrelated_device_events);
  EXPECT_EQ(a.uncorrelated_device_ns, b.uncorrelated_device_ns);
  EXPECT_EQ(a.drops.ring_full, b.drops.ring_full);
  EXPECT_EQ(a.drops.device_overwritten, b.drops.device_overwritten);
  EXPECT_EQ(a.drops.total(), b.drops.total());
  std::map<std::string, SummaryRow> ra = ByName(a), rb = ByName(b);
  ASSERT_EQ(ra.size(), rb.size());
  for (const auto& [name, row] : ra) {
    const SummaryRow& other = rb[name];
    EXPECT_EQ(row.self_cpu_ns, other.self_cpu_ns) << name;
    EXPECT_EQ(row.cpu_total_ns, other.cpu_total_ns) << name;
    EXPECT_EQ(row.self_device_ns, other.self_device_ns) << name;
    EXPECT_EQ(row.device_total_ns, other.device_total_ns) << name;
    EXPECT_EQ(row.calls, other.calls) << name;
  }
}

TEST(SummaryTest, NoticesFollowTheTableAndRoundTrip) {
  Trace t = AnnotatedTrace();
  t.processes[0].executable = "/usr/bin/python3";
  t.processes[0].drops.no_memory = 4;
  t.processes[0].drops.by_lane.runtime += 4;
  t.processes[0].notices = {"/opt/libnrt.so.1 is loaded into a separate link-map namespace "
                            "(dlmopen); its libnrt calls there are not recorded"};
  const Summary s = ComputeSummary(t);
  EXPECT_TRUE(absl::StrContains(FormatSummary(s),
                                "\nNot recorded: pid 10 (/usr/bin/python3): /opt/libnrt.so.1 is "
                                "loaded into a separate link-map namespace (dlmopen)"))
      << FormatSummary(s);
  EXPECT_TRUE(absl::StrContains(FormatSummary(s), "no_memory 4")) << FormatSummary(s);
  absl::StatusOr<Summary> back =
      ParseSummaryJson(FormatSummary(s, SummarySortKey::kSelfDevice, SummaryFormat::kJson));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->notices, s.notices);
  EXPECT_EQ(back->drops.no_memory, 4u);
  EXPECT_EQ(FormatSummary(*back), FormatSummary(s));
  EXPECT_FALSE(ParseSummaryJson(R"({"rows": [], "self_cpu_total_ns": 0,
      "self_device_total_ns": 0, "notices": {"not": "a list"}})").ok());
}

TEST(SummaryTest, JsonRoundTrip) {
  Trace t = AnnotatedTrace();
  // Names that JSON must escape, UTF-8 that it must keep, and huge counts.
  t.processes[0].ranges[1].name =
      "tab\there \"quoted\" back\\slash \xc3\xa9t\xc3\xa9 \xf0\x9f\x94\xa5";
  t.processes[0].ranges[2].duration_ns = 18'000'000'000'000'000'000ull;
  const Summary s = ComputeSummary(t);
  const std::string json = FormatSummary(s, SummarySortKey::kSelfDevice, SummaryFormat::kJson);
  absl::StatusOr<Summary> back = ParseSummaryJson(json);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
  ExpectSameSummary(s, *back);
  // And the text the CLI prints from it is the daemon's.
  EXPECT_EQ(FormatSummary(*back), FormatSummary(s));
}

TEST(SummaryTest, InvalidUtf8BecomesReplacementCharacters) {
  TraceBuilder b(1);
  b.Range("bad\xff\xfe", 0, 1);
  Trace t;
  t.processes.push_back(b.process());
  const std::string json =
      FormatSummary(ComputeSummary(t), SummarySortKey::kName, SummaryFormat::kJson);
  absl::StatusOr<Summary> back = ParseSummaryJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rows[0].name, "bad\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(SummaryTest, MalformedJsonIsRefusedClearly) {
  struct Case {
    std::string json;
    const char* message;  // in the error, after "summary.json: "; "" where protobuf words it
  };
  const std::string totals = R"("self_cpu_total_ns": 1, "self_device_total_ns": 1)";
  const std::string row =
      R"({"name": "a", "self_cpu_ns": 1, "cpu_total_ns": 1, "self_device_ns": 1,)"
      R"( "device_total_ns": 1, "calls": 1})";
  for (const Case& c : std::initializer_list<Case>{
           {"", ""},
           {"[]", ""},
           {"\xff", ""},
           {"{\"rows\": [\"unterminated]}", ""},
           {"{\"rows\": [], " + totals + "} x", ""},
           {"{\"rows\": 3, " + totals + "}", "rows"},
           {"{\"rows\": [{\"name\": \"a\", \"self_cpu_ns\": -1}]}", "self_cpu_ns"},
           {"{" + totals + "}", "no \"rows\" array"},
           {"{\"rows\": [[]], " + totals + "}", "a row is not an object"},
           {"{\"rows\": [" + std::string(1000, '[') + std::string(1000, ']') + "], " + totals + "}",
            "nested deeper than 64 levels"},
           {"{\"rows\": [{\"calls\": 1}], " + totals + "}", "a row without a \"name\" string"},
           {"{\"rows\": [{\"name\": \"a\"}], " + totals + "}", "row \"a\" has no \"self_cpu_ns\""},
           {"{\"rows\": [{\"name\": \"a\\nb\"}], " + totals + "}",
            "row \"a\\nb\" has no \"self_cpu_ns\""},
           {"{\"rows\": [" + row + "], \"self_device_total_ns\": 1}", "no \"self_cpu_total_ns\""},
           {"{\"rows\": [" + row + "], \"self_cpu_total_ns\": 1}", "no \"self_device_total_ns\""},
           {"{\"rows\": [], \"processes\": [{\"pid\": 1}], " + totals + "}",
            "a process is not {\"pid\": N, \"host\": \"...\", \"command\": \"...\"}"},
       }) {
    absl::StatusOr<Summary> s = ParseSummaryJson(c.json);
    ASSERT_FALSE(s.ok()) << c.json;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(s.status().message());
    EXPECT_TRUE(absl::StartsWith(message, "summary.json: ")) << c.json << " -> " << message;
    EXPECT_GT(message.size(), strlen("summary.json: ")) << c.json;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
    EXPECT_NE(message.find(c.message), std::string::npos) << c.json << " -> " << message;
  }
}

TEST(SummaryTest, JsonFromANewerDaemonStillReads) {
  absl::StatusOr<Summary> s = ParseSummaryJson(R"({"format_version": 9, "rows": [
      {"name": "aten::mul", "self_cpu_ns": 5, "cpu_total_ns": 6, "self_device_ns": 7,
       "device_total_ns": 8, "calls": 2, "flops": 1e12, "by_core": {"0": [1, 2]}}],
      "self_cpu_total_ns": 5, "self_device_total_ns": 7, "energy": {"joules": 3.5}})");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->rows.size(), 1u);
  EXPECT_EQ(s->rows[0].name, "aten::mul");
  EXPECT_EQ(s->rows[0].calls, 2u);
  EXPECT_EQ(s->self_device_total_ns, 7u);
}

TEST(SummaryTest, AnEmptyTableReads) {
  absl::StatusOr<Summary> s =
      ParseSummaryJson(R"({"rows": [], "self_cpu_total_ns": 0, "self_device_total_ns": 0})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->rows.empty());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SummaryTest, SinkWritesThreeFiles) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  SummarySink sink;
  std::vector<std::string> files;
  const Trace trace = AnnotatedTrace();
  ASSERT_TRUE(sink.Write(trace, ComputeSummary(trace), dir, &files).ok());
  EXPECT_EQ(files, (std::vector<std::string>{"summary.txt", "summary.csv", "summary.json"}));
  const Summary s = ComputeSummary(AnnotatedTrace());
  EXPECT_EQ(ReadFile(dir + "/summary.txt"), FormatSummary(s));
  absl::StatusOr<Summary> back = ParseSummaryJson(ReadFile(dir + "/summary.json"));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameSummary(s, *back);
  EXPECT_EQ(ReadFile(dir + "/summary.csv").substr(0, 5), "name,");
}

TEST(SummaryTest, SinkReportsAnUnwritableFolder) {
  SummarySink sink;
  std::vector<std::string> files;
  const Trace trace = AnnotatedTrace();
  const absl::Status s = sink.Write(trace, ComputeSummary(trace), "/nonexistent/folder", &files);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(files.empty());
}

// The async API (writer_test_util.h's AsyncTrace, in us): each request's device time goes to
// the op that scheduled it, through its schedule call; the op's queue wait is the average of
// its transfer's 50, and its executions' 50, 250 and 450; the core worked 1100 of the 2000 us
// window; one of the three executions found its queue empty.
TEST(SummaryTest, AsyncWorkIsChargedToItsOpWithItsQueueWait) {
  const Summary s = ComputeSummary(AsyncTrace());
  std::map<std::string, SummaryRow> rows = ByName(s);
  ASSERT_EQ(rows.size(), 1u);
  const SummaryRow& forward = rows["forward"];
  EXPECT_EQ(forward.self_device_ns, 1100 * kUs);  // 100 + 3 x 300 async, 100 synchronous
  EXPECT_EQ(forward.queue_waits, 4u);
  EXPECT_EQ(forward.queue_wait_ns, 800 * kUs);
  EXPECT_EQ(s.async_device_events, 4u);
  EXPECT_EQ(s.async_executions, 3u);
  EXPECT_EQ(s.async_executions_queue_empty, 1u);
  EXPECT_EQ(s.device_busy_ns, (std::map<int32_t, uint64_t>{{0, 1100 * kUs}}));
  EXPECT_EQ(s.window_ns, 2000 * kUs);
  EXPECT_EQ(s.completion_polls, 8u);  // the recorded poll and the 7 before it
  EXPECT_EQ(s.completion_polls_recorded, 1u);

  const std::vector<std::string> lines = TableLines(FormatSummary(s));
  ASSERT_GE(lines.size(), 4u);
  EXPECT_TRUE(absl::EndsWith(lines[1], "  NEURON time avg  Queue wait avg    # of Calls"))
      << lines[1];
  EXPECT_TRUE(absl::EndsWith(lines[3], "          1.100ms       200.000us             1"))
      << lines[3];
  std::vector<std::string> closing(lines.begin() + 5, lines.end());
  EXPECT_EQ(closing, (std::vector<std::string>{
                         "Self CPU time total: 2.000ms",
                         "Self NEURON time total: 1.100ms",
                         "NEURON idle of the 2.000ms window: NeuronCore 0 45.00% (1 - "
                         "busy/window; overlapping work once)",
                         "Async executions scheduled onto an empty queue: 1 of 3 (no earlier "
                         "request of the queue in flight: the device waited for the host)",
                         "Completion polls: 8, of which 1 recorded (those that saw their request "
                         "done; the rest are counted in their rows' calls, not timed)",
                         "Events dropped: 0"}));

  // CSV: the average in ns before calls; JSON: the sum and count, read back to the same table.
  const std::vector<std::string> csv =
      Lines(FormatSummary(s, SummarySortKey::kName, SummaryFormat::kCsv));
  ASSERT_EQ(csv.size(), 2u);
  EXPECT_EQ(csv[0],
            "name,self_cpu_ns,cpu_total_ns,self_device_ns,device_total_ns,device_avg_ns,"
            "queue_wait_avg_ns,calls");
  EXPECT_EQ(csv[1], "forward,2000000,2000000,1100000,1100000,1100000,200000,1");
  absl::StatusOr<Summary> back =
      ParseSummaryJson(FormatSummary(s, SummarySortKey::kSelfDevice, SummaryFormat::kJson));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(FormatSummary(*back), FormatSummary(s));
}

// A rank's step: forward (an execution), then all_reduce scheduling the collective, which
// waits 30 ms for the other ranks (its barrier) and runs 20 us. The wait is its own row by
// collective, in no op's or range's device time; the running is all_reduce's device time.
TEST(SummaryTest, CollectiveWaitIsItsOwnRowNeverTheOpsDeviceTime) {
  TraceBuilder b(10);
  constexpr uint64_t kCc = uint64_t{32} << 48;
  const uint64_t step = b.Range("ProfilerStep#0", 0, 40000 * kUs);
  const uint64_t forward = b.Range("forward", 0, 500 * kUs, step);
  b.Device(DeviceEventKind::kExecution, "nc_exec_running", 400 * kUs,
           b.Call("nrt_execute", 10 * kUs, 450 * kUs, forward));
  const uint64_t all_reduce = b.Range("all_reduce", 500 * kUs, 39000 * kUs, step);
  const uint64_t cc = b.Call("nrta_cc_schedule", 510 * kUs, 10 * kUs, all_reduce);
  b.process().calls.back().nrta_seq = kCc | 1;
  auto collective = [&](const char* name, uint64_t start, uint64_t dur, const char* op) {
    b.Device(DeviceEventKind::kCollective, name, dur, cc);
    DeviceEvent& d = b.process().device.back();
    d.start_ns = start;
    d.nrta_seq = kCc | 1;
    d.model_name = Name::Lasting(op);
  };
  collective(kCcExecBarrier, 520 * kUs, 30000 * kUs, "");  // the barrier does not say
  collective(kCcRunning, 30520 * kUs, 20 * kUs, "all_reduce");
  Trace t;
  t.processes.push_back(std::move(b.process()));
  const Summary s = ComputeSummary(t);
  std::map<std::string, SummaryRow> rows = ByName(s);
  ASSERT_TRUE(rows.count("collective wait (AllReduce)")) << FormatSummary(s);
  const SummaryRow& wait = rows["collective wait (AllReduce)"];
  EXPECT_EQ(wait.self_device_ns, 30000 * kUs);
  EXPECT_EQ(wait.device_total_ns, 30000 * kUs);
  EXPECT_EQ(wait.calls, 1u);
  EXPECT_EQ(wait.self_cpu_ns, 0u);
  EXPECT_EQ(rows["all_reduce"].self_device_ns, 20 * kUs);
  EXPECT_EQ(rows["all_reduce"].device_total_ns, 20 * kUs);
  EXPECT_EQ(rows["ProfilerStep*"].device_total_ns, 420 * kUs);  // forward and the running
  EXPECT_EQ(rows["forward"].self_device_ns, 400 * kUs);
  // Not async work of the table's kind (no queue wait column), not busy time of the core.
  EXPECT_EQ(s.async_device_events, 0u);
  EXPECT_EQ(rows["all_reduce"].queue_waits, 0u);
  EXPECT_EQ(s.device_busy_ns, (std::map<int32_t, uint64_t>{{0, 420 * kUs}}));

  const std::string text = FormatSummary(s);
  const std::vector<std::string> lines = TableLines(text);
  ASSERT_GE(lines.size(), 4u);
  EXPECT_TRUE(absl::StrContains(lines[3], "collective wait (AllReduce)")) << text;  // the most
  EXPECT_TRUE(absl::StrContains(
      text, "Collective wait: 30.000ms of it (98.62%) in 1 collectives, the ranks waiting for "
            "each other: not compute\n"))
      << text;
  absl::StatusOr<Summary> back =
      ParseSummaryJson(FormatSummary(s, SummarySortKey::kSelfDevice, SummaryFormat::kJson));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(FormatSummary(*back), text);
}

// A row without async work shows "-" (blank in the CSV) beside one with it.
TEST(SummaryTest, RowsWithoutAsyncWorkHaveNoQueueWait) {
  Trace t = AsyncTrace();
  t.processes[0].ranges.push_back({2, "idle_op", 201, 2950 * kUs, 10 * kUs, 0, 0});
  const Summary s = ComputeSummary(t);
  const std::string text = FormatSummary(s, SummarySortKey::kName);
  bool found = false;
  for (const std::string& line : Lines(text)) {
    if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "idle_op")) continue;
    found = true;
    EXPECT_TRUE(absl::EndsWith(line, "  0.000us               -             1")) << line;
  }
  EXPECT_TRUE(found) << text;
  EXPECT_TRUE(absl::StrContains(FormatSummary(s, SummarySortKey::kName, SummaryFormat::kCsv),
                                "\nidle_op,10000,10000,0,0,0,,1\n"));
}

// A poll outside any op is a row of its own, and its calls are every poll the program made:
// the recorded one and the unrecorded ones it stands for.
TEST(SummaryTest, APollRowCountsThePollsItStandsFor) {
  Trace t = AsyncTrace();
  ApiCall& poll = t.processes[0].calls.emplace_back();
  poll.correlation_id = 999;
  poll.name = "nrta_is_completed";
  poll.function = nrtprof::API_NRTA_IS_COMPLETED;
  poll.tid = 7;
  poll.start_ns = 1990 * kUs;
  poll.polls = 41;
  const Summary s = ComputeSummary(t);
  std::map<std::string, SummaryRow> rows = ByName(s);
  EXPECT_EQ(rows["nrta_is_completed"].calls, 42u);
  EXPECT_EQ(s.completion_polls, 50u);
  EXPECT_EQ(s.completion_polls_recorded, 2u);
}

// A thread's polls after its last recorded one (counted by the shim when the thread ended) are
// calls of their function's row and completion polls, none of them recorded.
TEST(SummaryTest, PollsAfterAThreadsLastRecordedOneAreCounted) {
  Trace t = AsyncTrace();
  t.processes[0].poll_tallies = {
      {"nrta_is_completed", nrtprof::API_NRTA_IS_COMPLETED, 7, 2950 * kUs, 1000},
      {"nrta_is_completed", nrtprof::API_NRTA_IS_COMPLETED, 8, 2960 * kUs, 234},
      {"nrta_get_sequence", nrtprof::API_NRTA_GET_SEQUENCE, 8, 2960 * kUs, 5}};
  const Summary s = ComputeSummary(t);
  std::map<std::string, SummaryRow> rows = ByName(s);
  EXPECT_EQ(rows["nrta_is_completed"].calls, 1234u);
  EXPECT_EQ(rows["nrta_get_sequence"].calls, 5u);
  EXPECT_EQ(rows["nrta_get_sequence"].self_cpu_ns, 0u) << "not timed";
  EXPECT_EQ(s.completion_polls, 8u + 1239u);  // AsyncTrace's recorded poll and its 7, and these
  EXPECT_EQ(s.completion_polls_recorded, 1u);
  EXPECT_TRUE(absl::StrContains(FormatSummary(s), "Completion polls: 1247, of which 1 recorded"))
      << FormatSummary(s);
}

// A capture without async work: no queue wait column, no lines about it, the CSV's 7 columns.
TEST(SummaryTest, SyncCapturesSayNothingOfQueues) {
  const Summary s = ComputeSummary(AnnotatedTrace());
  EXPECT_EQ(s.async_device_events, 0u);
  const std::string text = FormatSummary(s);
  EXPECT_FALSE(absl::StrContains(text, "Queue wait")) << text;
  EXPECT_FALSE(absl::StrContains(text, "idle")) << text;
  EXPECT_FALSE(absl::StrContains(text, "Async")) << text;
  EXPECT_FALSE(absl::StrContains(FormatSummary(s, SummarySortKey::kName, SummaryFormat::kCsv),
                                 "queue_wait"));
}

}  // namespace
}  // namespace nrtprof::daemon
