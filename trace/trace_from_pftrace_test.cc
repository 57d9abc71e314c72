// A trace.pftrace read back into a Trace: what a recomputed summary (nrtprof summary
// --from-trace) sees must be what the capture's own summary saw.
#include "trace/trace_from_pftrace.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trace/collectives.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/perfetto_writer.h"
#include "trace/summary.h"
#include "trace/writer_test_util.h"
#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {
namespace {

// Everything a Trace holds, one line per event, for comparing two of them whole.
std::string Dump(const Trace& t) {
  std::string out = absl::StrCat("capture ", t.capture_id, " ", t.start_ns, "-", t.end_ns, " ",
                                 t.realtime_offset_ns, "\n");
  if (!t.trigger.rule.empty()) {
    absl::StrAppend(&out, "trigger ", t.trigger.rule, " (", t.trigger.condition, "): ",
                    t.trigger.reason, " ", t.trigger.value_ns, "/", t.trigger.threshold_ns, " at ",
                    t.trigger.at_ns, "\n");
  }
  for (const ProcessTrace& p : t.processes) {
    absl::StrAppend(&out, "process ", p.pid, " host=", p.host, " exe=", p.executable, " cmd=",
                    absl::StrJoin(p.command_line, " "), " job=", p.job, " rank=", p.rank,
                    " received=", p.events_received,
                    " drops=", p.drops.total(), "/", p.drops.ring_full, "/", p.drops.daemon_away,
                    " uncorrelated=", p.device_uncorrelated, " missing=", p.batches_missing,
                    " cut_off=", p.cut_off, " notices=", absl::StrJoin(p.notices, "|"), "\n");
    for (const auto& [tid, name] : p.thread_names) absl::StrAppend(&out, " thread ", tid, " ", name, "\n");
    for (const RangeEvent& r : p.ranges) {
      absl::StrAppend(&out, " range ", r.id, " ", r.name.str(), " ", r.tid, " ", r.start_ns, "+",
                      r.duration_ns, " depth=", r.depth, " parent=", r.parent_range, "\n");
    }
    for (const ApiCall& c : p.calls) {
      absl::StrAppend(&out, " call ", c.correlation_id, " ", c.name.str(), " f=", c.function, " ",
                      c.tid, " ", c.start_ns, "+", c.duration_ns, " status=", c.status,
                      " bytes=", c.bytes, " model=", c.model_name.str(), " tensor=",
                      c.tensor_name.str(), " nc=", c.nc_idx, " repeat=", c.repeat, " seq=",
                      c.nrta_seq, " polls=", c.polls, " range=", c.range, " stack=",
                      absl::StrJoin(c.stack, "<"), "\n");
    }
    for (const DeviceEvent& d : p.device) {
      absl::StrAppend(&out, " device ", d.id, " ", static_cast<int>(d.kind), " ", d.name.str(),
                      " nc=", d.nc_idx, " ", d.start_ns, "+", d.duration_ns, " parent=", d.parent,
                      " corr=", d.correlation_id, " model=", d.model_name.str(), " engine=",
                      d.engine.str(), " exec=", d.exec_id, " bytes=", d.bytes, " tensor=",
                      d.tensor_name.str(), " tid=", d.submitting_tid, " gid=", d.worker_gid,
                      " seq=", d.nrta_seq, "\n");
    }
  }
  return out;
}

// What either reader makes of `bytes` rebuilt: the Trace dumped, or the first error.
std::string Rebuilt(absl::StatusOr<ReadTrace> read) {
  if (!read.ok()) return absl::StrCat("error: ", read.status().message());
  absl::StatusOr<Trace> back = TraceFromPerfetto(*read);
  if (!back.ok()) return absl::StrCat("error: ", back.status().message());
  return Dump(*back);
}

// The trace written and read back both ways, as messages (ReadPerfettoTrace, the tests' and
// the report's) and as packets' bytes (ReadPerfettoPackets, export's and summary's): the same
// Trace from both.
Trace RoundTrip(const Trace& trace, const std::string& dir_name) {
  const std::string dir = TempDir(dir_name);
  std::vector<std::string> files;
  EXPECT_TRUE(PerfettoWriter().Write(trace, ComputeSummary(trace), dir, &files).ok());
  const std::string bytes = ReadFile(dir + "/trace.pftrace");
  absl::StatusOr<ReadTrace> read = ReadPerfettoTrace(bytes);
  EXPECT_TRUE(read.ok()) << read.status();
  absl::StatusOr<Trace> back = TraceFromPerfetto(*read);
  EXPECT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(Rebuilt(ReadPerfettoPackets(bytes)), back.ok() ? Dump(*back) : "");
  return back.ok() ? *back : Trace();
}

TEST(TraceFromPerfettoTest, TheRecomputedSummaryIsTheCapturesOwn) {
  Trace trace = SmallTrace();
  trace.processes[0].notices = {"NRTPROF_STACKS=99 is not a number"};
  trace.processes[0].cut_off = true;
  const Trace back = RoundTrip(trace, "summary_round_trip");
  // The one engine op that had to be clamped to its execution ends 5 ns sooner in the file,
  // but ops are inside executions: no row's time changes.
  EXPECT_EQ(FormatSummary(ComputeSummary(back)), FormatSummary(ComputeSummary(trace)));
  EXPECT_EQ(FormatSummary(ComputeSummary(back), SummarySortKey::kName, SummaryFormat::kJson),
            FormatSummary(ComputeSummary(trace), SummarySortKey::kName, SummaryFormat::kJson));
}

// A capture a trigger rule took: the rule and its reason come back from the "nrtprof
// triggers" track's instant, so `nrtprof summary --from-trace` says why, as the capture's own
// summary did, and the anomaly's time with them.
TEST(TraceFromPerfettoTest, ATriggersRuleAndReasonComeBack) {
  Trace trace = SmallTrace();
  trace.trigger = {"errors", "errors: status != ok",
                   "pid 100 (python3): nrt_execute returned status 4 (NRT_TIMEOUT)", 0, 0, 1200};
  const Trace back = RoundTrip(trace, "trigger_round_trip");
  EXPECT_EQ(back.trigger.rule, "errors");
  EXPECT_EQ(back.trigger.condition, "errors: status != ok");
  EXPECT_EQ(back.trigger.reason, trace.trigger.reason);
  EXPECT_EQ(back.trigger.at_ns, 1200u);
  const std::string summary = FormatSummary(ComputeSummary(back));
  EXPECT_NE(summary.find("Triggered by rule errors (errors: status != ok): pid 100 (python3): "
                         "nrt_execute returned status 4 (NRT_TIMEOUT)\n"),
            std::string::npos)
      << summary;
  EXPECT_EQ(summary, FormatSummary(ComputeSummary(trace)));
  // The slow step's figures too.
  trace.trigger = {"slow", "slow: step > 250 ms", "step 3 took 300 ms", 300'000'000,
                   250'000'000, 1100};
  const Trace slow = RoundTrip(trace, "trigger_values_round_trip");
  EXPECT_EQ(slow.trigger.value_ns, 300'000'000u);
  EXPECT_EQ(slow.trigger.threshold_ns, 250'000'000u);
  // None from a capture someone asked for.
  EXPECT_TRUE(RoundTrip(SmallTrace(), "no_trigger_round_trip").trigger.rule.empty());
}

// Two executions of one core that overlap by a few ns (device clocks mapped through two sync
// points): the later one's slice starts where the first ends, and keeps its own duration in an
// argument, so the recomputed table charges what the capture's did (seen: 367.534 us against
// 367.535 us on aten::mul, from a demo that fetched every iteration).
TEST(TraceFromPerfettoTest, AnExecutionCutToNestKeepsItsOwnDuration) {
  Trace trace = SmallTrace();
  ProcessTrace& p = trace.processes[0];
  const DeviceEvent* first = nullptr;
  for (const DeviceEvent& d : p.device) {
    if (d.kind == DeviceEventKind::kExecution && d.parent == 0) {
      first = &d;
      break;
    }
  }
  ASSERT_NE(first, nullptr);
  DeviceEvent next = *first;
  next.id = 9999;
  next.start_ns = first->start_ns + first->duration_ns - 5;  // overlaps the first by 5 ns
  next.duration_ns = 367531;
  p.device.push_back(next);
  const Trace back = RoundTrip(trace, "cut_round_trip");
  EXPECT_EQ(FormatSummary(ComputeSummary(back), SummarySortKey::kName, SummaryFormat::kJson),
            FormatSummary(ComputeSummary(trace), SummarySortKey::kName, SummaryFormat::kJson));
}

// The async API's queues' tracks are read as the core's executions and transfers, with their
// requests: the recomputed summary has the same queue waits, idle share and empty queues.
TEST(TraceFromPerfettoTest, AsyncWorkComesBackFromItsQueuesTracks) {
  const Trace trace = AsyncTrace();
  const Trace back = RoundTrip(trace, "async_round_trip");
  ASSERT_EQ(back.processes.size(), 1u);
  size_t async_work = 0;
  for (const DeviceEvent& d : back.processes[0].device) async_work += d.nrta_seq != 0;
  EXPECT_EQ(async_work, 4u);
  EXPECT_EQ(back.processes[0].device.size(), trace.processes[0].device.size());
  const Summary again = ComputeSummary(back);
  EXPECT_EQ(again.async_executions_queue_empty, 1u);
  EXPECT_EQ(FormatSummary(again), FormatSummary(ComputeSummary(trace)));
  EXPECT_EQ(FormatSummary(again, SummarySortKey::kName, SummaryFormat::kJson),
            FormatSummary(ComputeSummary(trace), SummarySortKey::kName, SummaryFormat::kJson));
}

// A thread's polls after its last recorded one have no slice: the process's capture instant
// carries their sums, and the recomputed table counts them as the capture's own did.
TEST(TraceFromPerfettoTest, PollsAfterTheLastRecordedOnesComeBackAsTheirSums) {
  constexpr uint64_t kUs = 1000;
  Trace trace = AsyncTrace();
  trace.processes[0].poll_tallies = {
      {"nrta_is_completed", nrtprof::API_NRTA_IS_COMPLETED, 201, 2950 * kUs, 1000},
      {"nrta_is_completed", nrtprof::API_NRTA_IS_COMPLETED, 202, 2960 * kUs, 234},
      {"nrta_get_sequence", nrtprof::API_NRTA_GET_SEQUENCE, 202, 2960 * kUs, 5}};
  const Trace back = RoundTrip(trace, "poll_tallies_round_trip");
  ASSERT_EQ(back.processes.size(), 1u);
  EXPECT_EQ(back.processes[0].calls.size(), trace.processes[0].calls.size()) << "no slice";
  const Summary again = ComputeSummary(back);
  EXPECT_EQ(again.completion_polls, 8u + 1239u);
  EXPECT_EQ(FormatSummary(again), FormatSummary(ComputeSummary(trace)));
  EXPECT_EQ(FormatSummary(again, SummarySortKey::kName, SummaryFormat::kJson),
            FormatSummary(ComputeSummary(trace), SummarySortKey::kName, SummaryFormat::kJson));
}

// A collectives queue's track holds a collective's barrier and running: read back as the
// collective's events with its name, size and rank's core, and the same table.
TEST(TraceFromPerfettoTest, CollectivesComeBackFromTheirQueuesTracks) {
  const Trace trace = CollectivesTrace();
  const Trace back = RoundTrip(trace, "collectives_round_trip");
  ASSERT_EQ(back.processes.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const ProcessTrace& p = back.processes[i];
    ASSERT_EQ(p.device.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      const DeviceEvent& d = p.device[k];
      const DeviceEvent& was = trace.processes[i].device[k];
      EXPECT_EQ(d.kind, DeviceEventKind::kCollective);
      EXPECT_EQ(d.name, was.name.str());
      EXPECT_EQ(d.start_ns, was.start_ns);
      EXPECT_EQ(d.duration_ns, was.duration_ns);
      EXPECT_EQ(d.model_name, was.model_name.str());
      EXPECT_EQ(d.worker_gid, was.worker_gid);
      EXPECT_EQ(d.bytes, 4096u);
      EXPECT_EQ(d.nrta_seq, was.nrta_seq);
      EXPECT_EQ(d.correlation_id, p.calls[0].correlation_id);
    }
  }
  EXPECT_EQ(FormatSummary(ComputeSummary(back)), FormatSummary(ComputeSummary(trace)));
}

// A process's job and its rank from the environment (torchrun's RANK) come back: `nrtprof
// collectives` numbers the ranks by them, the summary's header shows the job.
TEST(TraceFromPerfettoTest, JobAndRankComeBack) {
  Trace trace = SmallTrace();
  trace.processes[0].job = "10.0.0.7:62182";
  trace.processes[0].rank = 3;
  const Trace back = RoundTrip(trace, "job_rank_round_trip");
  ASSERT_EQ(back.processes.size(), 1u);
  EXPECT_EQ(back.processes[0].job, "10.0.0.7:62182");
  EXPECT_EQ(back.processes[0].rank, 3);
  EXPECT_EQ(RankOf(back.processes[0]), 3);
  EXPECT_NE(FormatSummary(ComputeSummary(back)).find("(job 10.0.0.7:62182)"), std::string::npos)
      << FormatSummary(ComputeSummary(back));
}

TEST(TraceFromPerfettoTest, ProcessesThreadsAndLanesComeBack) {
  const Trace back = RoundTrip(SmallTrace(), "lanes_round_trip");
  EXPECT_EQ(back.capture_id, "cap-42");
  ASSERT_EQ(back.processes.size(), 1u);
  const ProcessTrace& p = back.processes[0];
  EXPECT_EQ(p.pid, 100u);
  EXPECT_EQ(p.host, "trn1");
  EXPECT_EQ(p.executable, "/usr/bin/python3");
  EXPECT_EQ(p.command_line, (std::vector<std::string>{"python3", "train.py", "--steps=1"}));
  EXPECT_EQ(p.thread_names.at(102), "loader");
  EXPECT_EQ(p.drops.ring_full, 2u);
  EXPECT_EQ(p.drops.daemon_away, 1u);
  EXPECT_EQ(p.events_received, 9u);
  EXPECT_EQ(p.job, "");
  EXPECT_EQ(p.rank, -1) << "no rank said, none read back";

  ASSERT_EQ(p.ranges.size(), 3u);
  const RangeEvent* forward = nullptr;
  const RangeEvent* mul = nullptr;
  for (const RangeEvent& r : p.ranges) {
    if (r.name == "forward") forward = &r;
    if (r.name == "aten::mul") mul = &r;
  }
  ASSERT_NE(forward, nullptr);
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(mul->parent_range, forward->id);
  EXPECT_EQ(mul->depth, 1u);
  EXPECT_EQ(mul->start_ns, 1100u);
  EXPECT_EQ(mul->duration_ns, 400u);

  ASSERT_EQ(p.calls.size(), 2u);
  const ApiCall& exec = p.calls[1];
  EXPECT_EQ(exec.name, "nrt_execute");
  EXPECT_EQ(exec.function, nrtprof::API_NRT_EXECUTE);  // what /metrics and the summary count by
  EXPECT_EQ(exec.range, mul->id);  // the innermost range around it
  EXPECT_EQ(exec.model_name, "mlp");
  EXPECT_EQ(exec.nc_idx, 0);
  EXPECT_EQ(exec.stack, (std::vector<std::string>{"nrt_execute", "torch_neuronx::run", "main"}));

  int executions = 0, ops = 0, dma = 0;
  for (const DeviceEvent& d : p.device) {
    switch (d.kind) {
      case DeviceEventKind::kExecution:
        ++executions;
        EXPECT_EQ(d.correlation_id, exec.correlation_id);
        EXPECT_EQ(d.duration_ns, 140u);
        break;
      case DeviceEventKind::kEngineOp:
        ++ops;
        EXPECT_NE(d.parent, 0u);
        EXPECT_EQ(d.engine, "vector");
        break;
      case DeviceEventKind::kDma:
        ++dma;
        EXPECT_EQ(d.parent, 0u);  // host-initiated: the tensor write's
        EXPECT_EQ(d.bytes, 4096u);
        break;
      case DeviceEventKind::kCollective:
        ADD_FAILURE() << "no collective in this trace: " << d.name.str();
        break;
    }
  }
  EXPECT_EQ(executions, 1);
  EXPECT_EQ(ops, 2);
  EXPECT_EQ(dma, 1);
}

// An execution's own DMA sits on the DMA track without a call: it is the execution's work, not
// device time of its own.
TEST(TraceFromPerfettoTest, AnExecutionsDmaIsItsWork) {
  Trace trace = SmallTrace();
  DeviceEvent io;
  io.id = 60;
  io.kind = DeviceEventKind::kDma;
  io.name = "dma_hbm_to_sbuf";
  io.nc_idx = 0;
  io.start_ns = 1255;
  io.duration_ns = 5;
  io.parent = 50;
  io.exec_id = 7;
  io.correlation_id = 10;
  io.bytes = 64;
  trace.processes[0].device.push_back(io);
  const Trace back = RoundTrip(trace, "io_dma_round_trip");
  bool found = false;
  for (const DeviceEvent& d : back.processes.at(0).device) {
    if (d.name != "dma_hbm_to_sbuf") continue;
    found = true;
    EXPECT_NE(d.parent, 0u);
    EXPECT_EQ(d.correlation_id, 10u);
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(FormatSummary(ComputeSummary(back)), FormatSummary(ComputeSummary(trace)));
}

TEST(TraceFromPerfettoTest, AFileNotLaidOutAsOursIsRefused) {
  ReadTrace read;
  perfetto::protos::TracePacket* p = read.trace.add_packet();
  p->mutable_track_event()->set_track_uuid(7);
  p->mutable_track_event()->set_type(perfetto::protos::TrackEvent::TYPE_SLICE_BEGIN);
  read.times.push_back(100);
  absl::StatusOr<Trace> back = TraceFromPerfetto(read);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("no track descriptor"), std::string::npos)
      << back.status();
}

// Perfetto's rules, not only our writer's order: a parent described after its children, and a
// global track (no parent, no process: the host tracks of `capture --hosts`'s merged trace)
// with an instant on it, read as the same processes (before: "track 1 names parent 0, which
// no earlier track descriptor defines").
TEST(TraceFromPerfettoTest, ParentsDescribedLaterAndGlobalTracksAreRead) {
  const std::string dir = TempDir("perfetto_layout");
  const Trace trace = SmallTrace();
  std::vector<std::string> files;
  ASSERT_TRUE(PerfettoWriter().Write(trace, ComputeSummary(trace), dir, &files).ok());
  absl::StatusOr<ReadTrace> read = ReadPerfettoTrace(ReadFile(dir + "/trace.pftrace"));
  ASSERT_TRUE(read.ok()) << read.status();

  ReadTrace moved;
  perfetto::protos::TracePacket* global = moved.trace.add_packet();
  global->mutable_track_descriptor()->set_uuid(1'000'000);
  global->mutable_track_descriptor()->set_name("host a:1");
  moved.times.push_back(0);
  perfetto::protos::TracePacket* instant = moved.trace.add_packet();
  instant->mutable_track_event()->set_track_uuid(1'000'000);
  instant->mutable_track_event()->set_type(perfetto::protos::TrackEvent::TYPE_INSTANT);
  instant->mutable_track_event()->set_name("nrtprof host clock");
  moved.times.push_back(1);
  // Every packet, the process's descriptor moved to the end.
  const perfetto::protos::TracePacket* process = nullptr;
  for (int i = 0; i < read->trace.packet_size(); ++i) {
    if (read->trace.packet(i).track_descriptor().has_process()) {
      process = &read->trace.packet(i);
      continue;
    }
    *moved.trace.add_packet() = read->trace.packet(i);
    moved.times.push_back(read->times[i]);
  }
  ASSERT_NE(process, nullptr);
  *moved.trace.add_packet() = *process;
  moved.times.push_back(0);

  absl::StatusOr<Trace> back = TraceFromPerfetto(moved);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->processes.size(), 1u);
  EXPECT_EQ(FormatSummary(ComputeSummary(*back), SummarySortKey::kName, SummaryFormat::kJson),
            FormatSummary(ComputeSummary(trace), SummarySortKey::kName, SummaryFormat::kJson));

  // What is malformed still is: a parent that no descriptor in the file describes.
  perfetto::protos::TracePacket* orphan = moved.trace.add_packet();
  orphan->mutable_track_descriptor()->set_uuid(2'000'000);
  orphan->mutable_track_descriptor()->set_parent_uuid(3'000'000);
  orphan->mutable_track_descriptor()->set_name("runtime");
  moved.times.push_back(0);
  back = TraceFromPerfetto(moved);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().message(),
            "track 2000000 names parent 3000000, which no track descriptor defines");
}

// Enough iterations of a training step for the file to hold several bundles: ranges with a
// call each, its execution with two engine ops, and a transfer.
Trace ManySteps(int steps) {
  Trace t;
  t.capture_id = "many";
  ProcessTrace p;
  p.pid = 7;
  p.thread_names = {{8, "MainThread"}};
  const char* const models[] = {"mlp", "attention", "embedding"};
  uint64_t ts = 5'000'000'000;
  uint64_t next_id = 1;
  for (int i = 0; i < steps; ++i, ts += 100'000) {
    const uint64_t range = next_id++;
    p.ranges.push_back({range, "aten::linear", 8, ts, 90'000, 0, 0});
    ApiCall c;
    c.correlation_id = static_cast<uint64_t>(i) + 1;
    c.name = i % 5 == 0 ? Name("nrt_tensor_write") : Name("nrt_execute");
    c.tid = 8;
    c.start_ns = ts + 1'000;
    c.duration_ns = 80'000;
    c.model_name = p.names->Intern(models[i % 3]);
    c.tensor_name = p.names->Intern(absl::StrCat("input", i % 4));
    c.nc_idx = i % 2;
    c.range = range;
    c.stack = {"nrt_execute", absl::StrCat("step", i % 7), "main"};
    p.calls.push_back(c);
    DeviceEvent run;
    run.id = next_id++;
    run.name = "nc_exec_running";
    run.nc_idx = i % 2;
    run.start_ns = ts + 5'000;
    run.duration_ns = 70'000;
    run.correlation_id = c.correlation_id;
    run.model_name = c.model_name;
    run.exec_id = static_cast<uint64_t>(i) + 1;
    run.submitting_tid = 8;
    p.device.push_back(run);
    for (int op = 0; op < 2; ++op) {
      DeviceEvent o = run;
      o.id = next_id++;
      o.kind = DeviceEventKind::kEngineOp;
      o.name = op == 0 ? Name("matmul") : Name("gelu");
      o.engine = op == 0 ? Name("tensor") : Name("vector");
      o.parent = run.id;
      o.start_ns = run.start_ns + 1'000 + op * 30'000;
      o.duration_ns = 20'000;
      p.device.push_back(o);
    }
    DeviceEvent dma;
    dma.id = next_id++;
    dma.kind = DeviceEventKind::kDma;
    dma.name = "dma_h2d";
    dma.nc_idx = i % 2;
    dma.start_ns = ts + 80'000;
    dma.duration_ns = 5'000;
    dma.bytes = 4096 + static_cast<uint64_t>(i);
    dma.tensor_name = c.tensor_name;
    dma.correlation_id = c.correlation_id;
    p.device.push_back(dma);
  }
  std::stable_sort(p.device.begin(), p.device.end(), [](const DeviceEvent& a, const DeviceEvent& b) {
    return a.nc_idx != b.nc_idx ? a.nc_idx < b.nc_idx : a.start_ns < b.start_ns;
  });
  t.processes.push_back(std::move(p));
  t.start_ns = 5'000'000'000;
  t.end_ns = ts;
  return t;
}

std::string Written(const Trace& trace, const std::string& dir_name, int deflate_level) {
  const std::string dir = TempDir(dir_name);
  std::vector<std::string> files;
  PerfettoWriter::Options options;
  options.deflate_level = deflate_level;
  EXPECT_TRUE(PerfettoWriter(options).Write(trace, ComputeSummary(trace), dir, &files).ok());
  return ReadFile(dir + "/trace.pftrace");
}

// The two readers read the same packets at the same times, bundles or not, and the Trace
// rebuilt from either is the same, event for event.
TEST(TraceFromPerfettoTest, PacketsAndMessagesReadTheSame) {
  for (int level : {0, 6}) {
    SCOPED_TRACE(absl::StrCat("deflate level ", level));
    const std::string bytes = Written(ManySteps(4000), absl::StrCat("many_", level), level);
    absl::StatusOr<ReadTrace> messages = ReadPerfettoTrace(bytes);
    absl::StatusOr<ReadTrace> packets = ReadPerfettoPackets(bytes);
    ASSERT_TRUE(messages.ok()) << messages.status();
    ASSERT_TRUE(packets.ok()) << packets.status();
    EXPECT_EQ(packets->trace.packet_size(), 0);
    EXPECT_EQ(messages->packet_bytes.size(), 0u);
    ASSERT_EQ(packets->packet_bytes.size(), static_cast<size_t>(messages->trace.packet_size()));
    EXPECT_EQ(packets->packet_count(), messages->packet_count());
    EXPECT_GT(packets->packet_count(), 8000u);
    EXPECT_EQ(packets->times, messages->times);
    EXPECT_EQ(packets->sequence_runs, messages->sequence_runs);
    EXPECT_GT(packets->sequence_runs.size(), 4u);  // the first sequence, then each lane's
    EXPECT_EQ(packets->bundles, messages->bundles);
    if (level > 0) {
      EXPECT_GT(packets->bundles, 2u);
    }
    EXPECT_EQ(packets->counters, messages->counters);
    for (size_t i = 0; i < packets->packet_bytes.size(); i += 997) {
      perfetto::protos::TracePacket packet;
      ASSERT_TRUE(packet.ParseFromArray(packets->packet_bytes[i].data(),
                                        static_cast<int>(packets->packet_bytes[i].size())));
      EXPECT_EQ(packet.SerializeAsString(),
                messages->trace.packet(static_cast<int>(i)).SerializeAsString());
    }
    const std::string rebuilt = Rebuilt(*std::move(packets));
    EXPECT_EQ(rebuilt, Rebuilt(*std::move(messages)));
    EXPECT_NE(rebuilt.find(" 1 gelu nc=1 "), std::string::npos);  // an engine op, with its core
    EXPECT_NE(rebuilt.find("stack=nrt_execute<step6<main"), std::string::npos);
    // WithMessages makes of the packets what ReadPerfettoTrace made.
    absl::StatusOr<ReadTrace> parsed = WithMessages(*ReadPerfettoPackets(bytes));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->trace.SerializeAsString(), ReadPerfettoTrace(bytes)->trace.SerializeAsString());
    EXPECT_EQ(parsed->times, ReadPerfettoTrace(bytes)->times);
  }
}

// The packets given up (TraceFromPerfetto(ReadTrace&&), `nrtprof export`'s): the same Trace,
// and the ReadTrace is left without its packets, their memory given back.
TEST(TraceFromPerfettoTest, PacketsGivenUpRebuildTheSameTrace) {
  const std::string bytes = Written(ManySteps(4000), "given_up", 6);
  absl::StatusOr<ReadTrace> kept = ReadPerfettoPackets(bytes);
  absl::StatusOr<ReadTrace> given = ReadPerfettoPackets(bytes);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(given.ok()) << given.status();
  absl::StatusOr<Trace> from_kept = TraceFromPerfetto(*kept);
  absl::StatusOr<Trace> from_given = TraceFromPerfetto(std::move(*given));
  ASSERT_TRUE(from_kept.ok()) << from_kept.status();
  ASSERT_TRUE(from_given.ok()) << from_given.status();
  EXPECT_EQ(Dump(*from_given), Dump(*from_kept));
  EXPECT_NE(Dump(*from_given).find("stack=nrt_execute<step6<main"), std::string::npos);
  EXPECT_GT(kept->packet_count(), 8000u);
  EXPECT_EQ(given->packet_count(), 0u);
  EXPECT_TRUE(given->packet_bytes.empty());
  EXPECT_TRUE(given->buffers.empty());
}

// "ok" and the Trace, or "error": what a user gets from either reader.
std::string Outcome(const std::string& rebuilt) {
  return rebuilt.rfind("error: ", 0) == 0 ? "error" : rebuilt;
}

// A file cut short, or with a byte changed, anywhere: the packets' reader and the rebuild from
// them refuse what protobuf's parser refuses (one error, no crash) and read the same Trace from
// what it reads.
TEST(TraceFromPerfettoTest, DamagedBytesAreReadAsProtobufReadsThem) {
  const std::string bytes = Written(SmallTrace(), "damaged", 0);
  ASSERT_GT(bytes.size(), 500u);
  const google::protobuf::LogSilencer quiet;  // its complaints of damaged text, by the thousand
  size_t refused = 0, cases = 0;
  auto check = [&](const std::string& damaged, const std::string& what) {
    const std::string want = Outcome(Rebuilt(ReadPerfettoTrace(damaged)));
    const std::string got = Outcome(Rebuilt(ReadPerfettoPackets(damaged)));
    EXPECT_EQ(got, want) << what;
    refused += want == "error";
    ++cases;
  };
  for (size_t n = 0; n < bytes.size(); ++n) check(bytes.substr(0, n), absl::StrCat("cut at ", n));
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int value : {0x00, bytes[i] ^ 0x01, bytes[i] ^ 0x80}) {
      std::string damaged = bytes;
      damaged[i] = static_cast<char>(value);
      check(damaged, absl::StrCat("byte ", i, " = ", value & 0xff));
    }
  }
  EXPECT_GT(refused, cases / 4);  // the check sees both sides
  EXPECT_LT(refused, cases);
}

// A changed byte in a bundle: the bundle's checksum fails, and the error says so.
TEST(TraceFromPerfettoTest, ADamagedBundleIsNamed) {
  std::string bytes = Written(ManySteps(2000), "damaged_bundle", 6);
  bytes[bytes.size() / 2] ^= 0x10;
  for (const auto& read : {ReadPerfettoTrace(bytes), ReadPerfettoPackets(bytes)}) {
    EXPECT_EQ(read.status().message(), "a compressed_packets bundle is corrupt");
  }
}

}  // namespace
}  // namespace nrtprof::daemon
