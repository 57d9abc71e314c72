#include "trace/chrome_json_writer.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json_text.h"
#include "common/testing/struct_fields.h"
#include "trace/json_slice_args.h"
#include "trace/summary.h"
#include "trace/writer_test_util.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;
using nrtprof::testing::Num;
using nrtprof::testing::Str;

// Parses as a strict JSON reader would; fails the test on anything that is not JSON.
Struct Parse(const std::string& json) {
  Struct root;
  auto status = google::protobuf::util::JsonStringToMessage(json, &root);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json.substr(0, 2000);
  return root;
}

struct Written {
  std::string text;
  Struct root;
};

Written WriteJson(const Trace& t, const std::string& dir_name) {
  std::string dir = TempDir(dir_name);
  std::vector<std::string> files;
  absl::Status s = ChromeJsonWriter().Write(t, ComputeSummary(t), dir, &files);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(files, std::vector<std::string>{"trace.json"});
  Written w;
  w.text = ReadFile(dir + "/trace.json");
  w.root = Parse(w.text);
  return w;
}

std::vector<Struct> Events(const Struct& root) {
  std::vector<Struct> events;
  for (const Value& v : root.fields().at("traceEvents").list_value().values()) {
    events.push_back(v.struct_value());
  }
  return events;
}

// Lane name -> synthetic tid, per the thread_name metadata.
std::map<std::string, double> Lanes(const std::vector<Struct>& events) {
  std::map<std::string, double> lanes;
  for (const Struct& e : events) {
    if (Str(e, "ph") == "M" && Str(e, "name") == "thread_name") {
      lanes[e.fields().at("args").struct_value().fields().at("name").string_value()] =
          Num(e, "tid");
    }
  }
  return lanes;
}

const Struct* FindSlice(const std::vector<Struct>& events, const std::string& name) {
  for (const Struct& e : events) {
    if (Str(e, "ph") == "X" && Str(e, "name") == name) return &e;
  }
  return nullptr;
}

TEST(ChromeJsonWriterTest, LanesAreNamedThreads) {
  Written w = WriteJson(SmallTrace(), "lanes");
  EXPECT_EQ(Str(w.root, "displayTimeUnit"), "ns");
  std::vector<Struct> events = Events(w.root);
  std::map<std::string, double> lanes = Lanes(events);
  std::vector<std::string> names;
  for (const auto& [name, tid] : lanes) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"101 MainThread framework", "101 MainThread runtime",
                                             "102 loader framework", "102 loader runtime",
                                             "NeuronCore 0", "NeuronCore 0 DMA"}));
  // Lanes are numbered in that order: threads by tid, framework above runtime, then cores.
  EXPECT_EQ(lanes["101 MainThread framework"], 1);
  EXPECT_EQ(lanes["101 MainThread runtime"], 2);
  EXPECT_EQ(lanes["NeuronCore 0"], 5);
  EXPECT_EQ(lanes["NeuronCore 0 DMA"], 6);
  bool process_named = false;
  for (const Struct& e : events) {
    if (Str(e, "ph") == "M" && Str(e, "name") == "process_name") {
      EXPECT_EQ(Num(e, "pid"), 100);
      EXPECT_EQ(e.fields().at("args").struct_value().fields().at("name").string_value(), "python3");
      process_named = true;
    }
  }
  EXPECT_TRUE(process_named);
}

TEST(ChromeJsonWriterTest, SlicesAreCompleteEventsInMicroseconds) {
  Written w = WriteJson(SmallTrace(), "slices");
  std::vector<Struct> events = Events(w.root);
  std::map<std::string, double> lanes = Lanes(events);
  const Struct* call = FindSlice(events, "nrt_execute");
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(Num(*call, "tid"), lanes["101 MainThread runtime"]);
  EXPECT_EQ(Num(*call, "pid"), 100);
  EXPECT_EQ(Str(*call, "cat"), "runtime");
  EXPECT_DOUBLE_EQ(Num(*call, "ts"), 1.2);
  EXPECT_DOUBLE_EQ(Num(*call, "dur"), 0.2);
  EXPECT_TRUE(absl::StrContains(w.text, "\"ts\":1.200,\"dur\":0.200")) << "three decimals";
  const auto& args = call->fields().at("args").struct_value().fields();
  EXPECT_EQ(args.at("status").number_value(), 0);
  EXPECT_EQ(args.at("model").string_value(), "mlp");
  EXPECT_EQ(args.at("correlation_id").number_value(), 10);
  EXPECT_EQ(args.at("stack").string_value(), "nrt_execute <- torch_neuronx::run <- main");

  const Struct* add = FindSlice(events, "add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(Num(*add, "tid"), lanes["NeuronCore 0"]);
  EXPECT_DOUBLE_EQ(Num(*add, "ts") + Num(*add, "dur"), 1.39) << "clamped into its execution";
  EXPECT_EQ(add->fields().at("args").struct_value().fields().at("engine").string_value(), "vector");
  const Struct* h2d = FindSlice(events, "dma_h2d");
  ASSERT_NE(h2d, nullptr);
  EXPECT_EQ(Num(*h2d, "tid"), lanes["NeuronCore 0 DMA"]);
  EXPECT_EQ(h2d->fields().at("args").struct_value().fields().at("bytes").number_value(), 4096);

  // A process's events come in time order (this capture has one process), but for its
  // capture instant: written last, once every part of the process has added its counts.
  double last = 0;
  for (const Struct& e : events) {
    if (Str(e, "ph") == "M" || Str(e, "ph") == "i") continue;
    EXPECT_GE(Num(e, "ts"), last);
    last = Num(e, "ts");
  }
}

// Each time is written exactly, in microseconds with three decimals, from one slice to the next
// on a lane: across a change of any of its digits, of their count, and at zeros anywhere.
TEST(ChromeJsonWriterTest, EveryStartIsWrittenExactlyFromSliceToSlice) {
  const uint64_t starts[] = {0,
                             999,
                             1'000,
                             9'999'999,
                             10'000'000,
                             10'000'001,
                             10'009'999,
                             10'010'000,
                             99'999'999'999,
                             100'000'000'000,
                             100'000'000'001,
                             1'000'000'000'000'000,
                             1'000'000'009'990'001,
                             18'000'000'000'000'000'123ull};
  Trace t = SmallTrace();
  ProcessTrace& p = t.processes[0];
  p.ranges.clear();
  p.device.clear();
  p.calls.resize(1);
  ApiCall call = p.calls[0];
  call.stack.clear();
  call.duration_ns = 0;
  p.calls.clear();
  for (uint64_t start : starts) {
    call.start_ns = start;
    ++call.correlation_id;
    p.calls.push_back(call);
  }
  Written w = WriteJson(t, "starts");
  std::vector<std::string> written;
  for (size_t at = w.text.find("\"ph\":\"X\""); at != std::string::npos;
       at = w.text.find("\"ph\":\"X\"", at + 1)) {
    const size_t ts = w.text.find("\"ts\":", at) + 5;
    written.push_back(w.text.substr(ts, w.text.find(',', ts) - ts));
  }
  std::vector<std::string> expected;
  for (uint64_t start : starts) {
    char text[32];
    snprintf(text, sizeof(text), "%llu.%03llu", static_cast<unsigned long long>(start / 1000),
             static_cast<unsigned long long>(start % 1000));
    expected.push_back(text);
  }
  EXPECT_EQ(written, expected);
}

TEST(ChromeJsonWriterTest, FlowsFollowEachCorrelation) {
  Written w = WriteJson(SmallTrace(), "flows");
  std::vector<Struct> events = Events(w.root);
  std::map<std::string, double> lanes = Lanes(events);
  // id -> phases with their lanes, in file order.
  std::map<double, std::vector<std::pair<std::string, double>>> flows;
  for (const Struct& e : events) {
    std::string ph = Str(e, "ph");
    if (ph != "s" && ph != "t" && ph != "f") continue;
    EXPECT_EQ(Str(e, "cat"), "flow");
    EXPECT_EQ(Str(e, "name"), "correlation");
    EXPECT_EQ(Str(e, "bp"), ph == "f" ? "e" : "");
    flows[Num(e, "id")].push_back({ph, Num(e, "tid")});
  }
  ASSERT_EQ(flows.size(), 2u);
  std::vector<std::vector<std::pair<std::string, double>>> chains;
  for (const auto& [id, chain] : flows) chains.push_back(chain);
  // The execution's flow: aten::mul (framework) -> nrt_execute (runtime) -> nc_exec_running.
  std::vector<std::pair<std::string, double>> execute = {{"s", lanes["101 MainThread framework"]},
                                                         {"t", lanes["101 MainThread runtime"]},
                                                         {"f", lanes["NeuronCore 0"]}};
  std::vector<std::pair<std::string, double>> write = {{"s", lanes["102 loader framework"]},
                                                       {"t", lanes["102 loader runtime"]},
                                                       {"f", lanes["NeuronCore 0 DMA"]}};
  EXPECT_TRUE((chains[0] == execute && chains[1] == write) ||
              (chains[0] == write && chains[1] == execute));
}

// The async API's work: a lane per execution unit's queue, named for its core; each queue's
// requests in flight as "ph":"C" counter events; flows from the op through the schedule call
// to the work.
TEST(ChromeJsonWriterTest, AsyncQueuesAreLanesWithCountersAndFlows) {
  Written w = WriteJson(AsyncTrace(), "async");
  std::vector<Struct> events = Events(w.root);
  std::map<std::string, double> lanes = Lanes(events);
  ASSERT_EQ(lanes.count("NeuronCore 0 compute queue (XU 1)"), 1u);
  ASSERT_EQ(lanes.count("NeuronCore 0 tensor-op queue (XU 2)"), 1u);
  ASSERT_EQ(lanes.count("NeuronCore 0"), 1u);  // the synchronous execution
  const double compute = lanes["NeuronCore 0 compute queue (XU 1)"];
  std::vector<double> starts;
  double queue_wait = -1;
  for (const Struct& e : events) {
    if (Str(e, "ph") != "X" || Num(e, "tid") != compute) continue;
    EXPECT_EQ(Str(e, "cat"), "compute queue");
    if (Str(e, "name") != "nc_exec_running") continue;
    starts.push_back(Num(e, "ts"));
    if (Num(e, "ts") == 1500) {
      queue_wait = Num(e.fields().at("args").struct_value(), "queue_wait_ns");
    }
  }
  EXPECT_EQ(starts, (std::vector<double>{1200, 1500, 1800}));
  EXPECT_EQ(queue_wait, 250000);

  std::map<std::string, std::vector<std::pair<double, double>>> counters;
  for (const Struct& e : events) {
    if (Str(e, "ph") != "C") continue;
    counters[Str(e, "name")].push_back(
        {Num(e, "ts"), Num(e.fields().at("args").struct_value(), "requests")});
  }
  EXPECT_EQ(counters["NeuronCore 0 requests in flight (XU 1)"],
            (std::vector<std::pair<double, double>>{{1150, 1},
                                                    {1250, 2},
                                                    {1350, 3},
                                                    {1500, 2},
                                                    {1800, 1},
                                                    {2100, 0},
                                                    {2650, 1},
                                                    {3000, 0}}));
  EXPECT_EQ(counters["NeuronCore 0 requests in flight (XU 2)"],
            (std::vector<std::pair<double, double>>{{1050, 1}, {1200, 0}}));

  // Every flow of a schedule call: forward -> the call -> its work on a queue's lane.
  std::map<double, std::vector<std::pair<std::string, double>>> flows;
  for (const Struct& e : events) {
    const std::string ph = Str(e, "ph");
    if (ph == "s" || ph == "t" || ph == "f") flows[Num(e, "id")].push_back({ph, Num(e, "tid")});
  }
  const double framework = lanes["201 MainThread framework"];
  const double runtime = lanes["201 MainThread runtime"];
  size_t to_compute = 0, to_tensor_ops = 0;
  for (const auto& [id, chain] : flows) {
    const bool compute_work = chain.back().second == compute;
    const bool transfer = chain.back().second == lanes["NeuronCore 0 tensor-op queue (XU 2)"];
    if (!compute_work && !transfer) continue;  // the synchronous execution's, the last schedule's
    ASSERT_EQ(chain.size(), 3u) << id;
    EXPECT_EQ(chain[0], (std::pair<std::string, double>{"s", framework}));
    EXPECT_EQ(chain[1], (std::pair<std::string, double>{"t", runtime}));
    EXPECT_EQ(chain[2].first, "f");
    to_compute += compute_work;
    to_tensor_ops += transfer;
  }
  EXPECT_EQ(to_compute, 3u);
  EXPECT_EQ(to_tensor_ops, 1u);
}

// A request with an XU id of 32 or more (a collectives queue, any queue of logical core 1 and
// up) has an nrta_seq past 2^53, which a reader that keeps numbers as doubles (JavaScript's
// JSON.parse, as chrome://tracing; the protobuf Struct here) would round, 2^53 + 1 to 2^53: the
// id is a decimal string, the same digits as in trace.pftrace and the runtime's own trace, and
// the call's queue and seq stay numbers.
TEST(ChromeJsonWriterTest, RequestIdsPastTwoTo53AreExactDecimalStrings) {
  const Trace t = CollectivesTrace();  // nrta_seq NrtaSeq(32, 1) = 2^53 + 1
  Written w = WriteJson(t, "collectives");
  const std::string exact = std::to_string(NrtaSeq(32, 1));
  ASSERT_EQ(exact, "9007199254740993");
  EXPECT_TRUE(absl::StrContains(w.text, "\"nrta_seq\":\"9007199254740993\",\"queue\":32,\"seq\":1"));
  std::map<std::string, int> seen;  // slice name -> slices with the exact id
  for (const Struct& e : Events(w.root)) {
    if (Str(e, "ph") != "X" || e.fields().count("args") == 0) continue;
    const auto& args = e.fields().at("args").struct_value().fields();
    if (args.count("nrta_seq") == 0) continue;
    EXPECT_EQ(args.at("nrta_seq").kind_case(), Value::kStringValue) << Str(e, "name");
    if (args.at("nrta_seq").string_value() == exact) ++seen[Str(e, "name")];
    if (Str(e, "name") == "nrta_cc_schedule") {
      EXPECT_EQ(args.at("queue").number_value(), 32);
      EXPECT_EQ(args.at("seq").number_value(), 1);
    }
  }
  EXPECT_EQ(seen, (std::map<std::string, int>{
                      {"nrta_cc_schedule", 2}, {"cc_exec_barrier", 2}, {"cc_running", 2}}));
}

// A trigger's threshold comes from the rule (up to 10^18 ns): past 2^53 it is written as a
// string too, not as a number a JSON reader would round.
TEST(ChromeJsonWriterTest, TriggerTimesPastTwoTo53AreExactDecimalStrings) {
  Trace t = SmallTrace();
  t.trigger.rule = "slow";
  t.trigger.condition = "step > 2502 h";
  t.trigger.reason = "pid 100: step took 2503 h";
  t.trigger.value_ns = 800;
  t.trigger.threshold_ns = (uint64_t{1} << 53) + 1;
  Written w = WriteJson(t, "trigger");
  EXPECT_TRUE(absl::StrContains(
      w.text, "\"value_ns\":800,\"threshold_ns\":\"9007199254740993\"}"));
  const auto& trigger = w.root.fields().at("otherData").struct_value().fields().at("trigger");
  EXPECT_EQ(Num(trigger.struct_value(), "value_ns"), 800);
  EXPECT_EQ(Str(trigger.struct_value(), "threshold_ns"), "9007199254740993");
}

TEST(ChromeJsonWriterTest, CaptureIdAndDropsAreInOtherDataAndOnTheProcess) {
  Written w = WriteJson(SmallTrace(), "other");
  const auto& other = w.root.fields().at("otherData").struct_value().fields();
  EXPECT_EQ(other.at("capture_id").string_value(), "cap-42");
  const auto& drops = other.at("drops").struct_value().fields().at("100").struct_value().fields();
  EXPECT_EQ(drops.at("total").number_value(), 3);
  EXPECT_EQ(drops.at("ring_full").number_value(), 2);
  EXPECT_EQ(drops.at("daemon_away").number_value(), 1);
  EXPECT_EQ(drops.at("oversized").number_value(), 0);
  int instants = 0;
  for (const Struct& e : Events(w.root)) {
    if (Str(e, "ph") != "i") continue;
    ++instants;
    EXPECT_EQ(Str(e, "name"), "nrtprof capture");
    EXPECT_EQ(Str(e, "s"), "p");
    const auto& args = e.fields().at("args").struct_value().fields();
    EXPECT_EQ(args.at("capture_id").string_value(), "cap-42");
    EXPECT_EQ(args.at("drops.total").number_value(), 3);
  }
  EXPECT_EQ(instants, 1);
}

TEST(ChromeJsonWriterTest, HostileNamesNeverBreakTheJson) {
  const std::string quote_newline = "a\"b\nc\\d\t\x01";
  const std::string with_nul("x\0y", 3);
  std::string high;
  for (int c = 0x80; c <= 0xff; ++c) high.push_back(static_cast<char>(c));
  const std::string utf8 = "µs → 張量 🙂";
  const std::string truncated = "ok\xe2\x82";            // a 3-byte sequence cut short
  const std::string overlong = "\xc0\xaf/\xed\xa0\x80";  // overlong '/', UTF-16 surrogate

  Trace t = SmallTrace();
  ProcessTrace& p = t.processes[0];
  t.capture_id = quote_newline;
  p.executable = "/bin/" + with_nul;
  p.thread_names[101] = high;
  p.ranges[0].name = p.names->Intern(quote_newline);
  p.ranges[1].name = p.names->Intern(with_nul);
  p.ranges[2].name = p.names->Intern(high);
  p.calls[0].name = p.names->Intern(utf8);
  p.calls[0].model_name = p.names->Intern(truncated);
  p.calls[1].tensor_name = p.names->Intern(overlong);
  p.device[0].name = "</script>]}\"";
  Written w = WriteJson(t, "hostile");

  std::vector<Struct> events = Events(w.root);
  EXPECT_NE(FindSlice(events, quote_newline), nullptr);
  EXPECT_NE(FindSlice(events, with_nul), nullptr) << "NUL survives as \\u0000";
  EXPECT_NE(FindSlice(events, utf8), nullptr) << "well-formed UTF-8 is kept as is";
  EXPECT_NE(FindSlice(events, "</script>]}\""), nullptr);
  std::string replaced_high;
  for (int c = 0x80; c <= 0xff; ++c) replaced_high += "\xef\xbf\xbd";  // U+FFFD each
  EXPECT_NE(FindSlice(events, replaced_high), nullptr);
  const Struct* call = FindSlice(events, utf8);
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call->fields().at("args").struct_value().fields().at("model").string_value(),
            "ok\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(w.root.fields().at("otherData").struct_value().fields().at("capture_id").string_value(),
            quote_newline);
  EXPECT_TRUE(Lanes(events).count(std::to_string(101) + " " + replaced_high + " framework"));
}

// SliceArgs' arguments as JSON, written plainly: what trace.json's "args" of the slice must say
// (the same arguments trace.pftrace gives it).
std::string ArgsOf(const LaneSlice& slice) {
  std::vector<SliceArg> args;
  std::string text;
  SliceArgs(slice, &args, &text);
  if (args.empty()) return "";
  std::string out = ",\"args\":{";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out += ",";
    AppendJsonString(args[i].name, &out);
    out += ":";
    switch (args[i].type) {
      case SliceArg::Type::kString:
        AppendJsonString(args[i].string_value, &out);
        break;
      case SliceArg::Type::kUint:
        AppendJsonUint(args[i].uint_value, &out);
        break;
      case SliceArg::Type::kInt:
        if (args[i].int_value < 0) {
          const uint64_t magnitude = 0 - static_cast<uint64_t>(args[i].int_value);
          const bool quoted = magnitude > (uint64_t{1} << 53);
          absl::StrAppend(&out, quoted ? "\"-" : "-", magnitude, quoted ? "\"" : "");
        } else {
          AppendJsonUint(static_cast<uint64_t>(args[i].int_value), &out);
        }
        break;
    }
  }
  return out + "}";
}

std::string PutArgsOf(const LaneSlice& slice) {
  std::string text;
  std::string out(json_out::SliceArgsRoom(slice), '\0');
  char* end = json_out::PutSliceArgs(slice, &text, out.data());
  out.resize(static_cast<size_t>(end - out.data()));
  return out;
}

// trace.json writes a slice's arguments straight from its call or device event: each argument
// SliceArgs may give, present or not, in every combination, must come out as SliceArgs has it.
TEST(ChromeJsonWriterTest, SliceArgumentsAreSliceArgsInEveryCombination) {
  for (int bits = 0; bits < (1 << 11); ++bits) {
    auto on = [bits](int i) { return (bits >> i & 1) != 0; };
    ApiCall c;
    c.name = "nrt_execute";
    c.status = on(0) ? -3 : 0;
    c.correlation_id = on(1) ? (uint64_t{1} << 53) + 1 : 12;
    c.bytes = on(2) ? 4096 : 0;
    if (on(3)) c.model_name = "mlp";
    if (on(4)) c.tensor_name = Name::Lasting("in\"put\n");
    c.nc_idx = on(5) ? 2 : -1;
    c.repeat = on(6) ? 3 : 0;
    c.nrta_seq = on(7) ? NrtaSeq(2, 5) : 0;
    c.function = on(8) ? nrtprof::API_NRTA_IS_COMPLETED : 0;
    c.polls = 7;
    if (on(9)) c.stack = {"f", "torch::\"g\"", "main"};
    if (on(10)) c.status = INT32_MIN;
    LaneSlice slice;
    slice.call = &c;
    EXPECT_EQ(PutArgsOf(slice), ArgsOf(slice)) << "call, bits " << bits;
  }
  ApiCall scheduler;
  scheduler.start_ns = 1000;
  scheduler.duration_ns = 50;
  const DeviceEventKind kinds[] = {DeviceEventKind::kExecution, DeviceEventKind::kEngineOp,
                                   DeviceEventKind::kDma, DeviceEventKind::kCollective};
  for (DeviceEventKind kind : kinds) {
    for (int bits = 0; bits < (1 << 13); ++bits) {
      auto on = [bits](int i) { return (bits >> i & 1) != 0; };
      DeviceEvent e;
      e.kind = kind;
      e.name = on(0) ? Name(kCcRunning) : Name("mul");
      e.start_ns = on(1) ? 1020 : 1100;
      e.duration_ns = 40;
      e.parent = on(2) ? 5 : 0;
      if (on(3)) e.model_name = "mlp";
      if (on(4)) e.engine = "vector";
      e.exec_id = on(5) ? 9 : 0;
      e.bytes = 64;
      if (on(6)) e.tensor_name = "weights";
      e.correlation_id = on(7) ? 11 : 0;
      e.submitting_tid = on(8) ? 101 : 0;
      e.nrta_seq = on(9) ? NrtaSeq(1, 3) : 0;
      e.worker_gid = kind == DeviceEventKind::kCollective ? 4 : -1;
      LaneSlice slice;
      slice.device = &e;
      slice.call = on(10) ? &scheduler : nullptr;
      slice.start_ns = on(11) ? e.start_ns + 5 : e.start_ns;      // moved to nest
      slice.end_ns = e.start_ns + (on(12) ? 30 : e.duration_ns);  // cut to nest
      EXPECT_EQ(PutArgsOf(slice), ArgsOf(slice)) << "device, bits " << bits;
      }
  }
  LaneSlice range;  // a framework range: no arguments
  EXPECT_EQ(PutArgsOf(range), "");
}

TEST(AppendJsonUintTest, LargeIntegersBecomeStrings) {
  std::string out;
  AppendJsonUint(uint64_t{1} << 53, &out);
  out += ",";
  AppendJsonUint((uint64_t{1} << 53) + 1, &out);
  EXPECT_EQ(out, "9007199254740992,\"9007199254740993\"");
}

// Every number in the files is written by one hand-made formatter: it must say what printf
// says, at every count of digits and at each power of ten's edges.
TEST(AppendJsonUintTest, EveryCountOfDigitsIsWrittenAsPrintfWritesIt) {
  std::vector<uint64_t> values = {0, 1, 9};
  for (uint64_t ten = 10; ten <= (uint64_t{1} << 53) / 10; ten *= 10) {
    values.insert(values.end(), {ten - 1, ten, ten + 1, ten * 5 + 7});
  }
  for (uint64_t v : values) {
    std::string out;
    AppendJsonUint(v, &out);
    EXPECT_EQ(out, std::to_string(v));
  }
  std::string out;
  AppendJsonUint(~uint64_t{0}, &out);
  EXPECT_EQ(out, "\"18446744073709551615\"");
}

TEST(ChromeJsonWriterTest, SamePidOnTwoHostsKeepsBothDropCounts) {
  Trace t = SmallTrace();
  t.processes.push_back(t.processes[0]);
  t.processes[1].host = "trn2";
  t.processes[1].drops.ring_full = 5;
  Written w = WriteJson(t, "two_hosts");
  const auto& drops =
      w.root.fields().at("otherData").struct_value().fields().at("drops").struct_value().fields();
  EXPECT_EQ(drops.at("100").struct_value().fields().at("ring_full").number_value(), 2);
  EXPECT_EQ(drops.at("100@trn2").struct_value().fields().at("ring_full").number_value(), 5);
}

TEST(ChromeJsonWriterTest, EmptyTraceIsValidJson) {
  Trace t;
  t.capture_id = "empty";
  Written w = WriteJson(t, "empty");
  EXPECT_TRUE(Events(w.root).empty());
}

}  // namespace
}  // namespace nrtprof::daemon
