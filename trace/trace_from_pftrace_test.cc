// A trace.pftrace read back into a Trace: what a recomputed summary (nrtprof summary
// --from-trace) sees must be what the capture's own summary saw.
#include "trace/trace_from_pftrace.h"

#include <string>
#include <vector>

#include "trace/perfetto_trace_reader.h"
#include "trace/perfetto_writer.h"
#include "trace/summary.h"
#include "trace/writer_test_util.h"
#include "gtest/gtest.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {
namespace {

Trace RoundTrip(const Trace& trace, const std::string& dir_name) {
  const std::string dir = TempDir(dir_name);
  std::vector<std::string> files;
  EXPECT_TRUE(PerfettoWriter().Write(trace, ComputeSummary(trace), dir, &files).ok());
  absl::StatusOr<ReadTrace> read = ReadPerfettoTrace(ReadFile(dir + "/trace.pftrace"));
  EXPECT_TRUE(read.ok()) << read.status();
  absl::StatusOr<Trace> back = TraceFromPerfetto(*read);
  EXPECT_TRUE(back.ok()) << back.status();
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

}  // namespace
}  // namespace nrtprof::daemon
