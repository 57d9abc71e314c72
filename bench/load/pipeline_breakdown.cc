// nrtprof_pipeline_breakdown: where the daemon's time goes, phase by phase, for the same
// synthetic processes nrtprof_loadgen sends (bench/load/synthetic_process.h), without gRPC:
//
//   decode     ReadWireBatch of each serialized batch, as the collector service reads one with
//              the flight recorder on: the events straight into records, the rest by protobuf
//   ingest     ProcessIngest::OnBatch of those (checks, interning tables, records kept)
//   correlate  CaptureCorrelator::Next: each process's part of the capture's Trace
//   lanes      BuildLanes(): the layout both trace writers draw, made once for the two
//   pftrace    PerfettoWriter's stream on those lanes
//   json       ChromeJsonWriter's stream on those lanes
//   summary    SummaryBuilder, and SummarySink's stream writing it
//   artifacts  ArtifactWriter's stream
//
// Written as nrtprofd writes a capture (CollectorCore::StreamCapture): a process at a time,
// each phase's time summed over the processes, then each writer's Finish. The first process
// pays, in every phase, for memory the later ones reuse.
//
// The daemon runs these one after the other on one core: ingest while batches arrive, the rest
// in StopCapture. nrtprof_loadgen's ingest time minus decode and ingest here is gRPC's share.
// Times are the thread's CPU time (user + system). Run it pinned to one core
// (bench/load/run_load.sh does). Prints figures; asserts nothing.
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "bench/load/synthetic_process.h"
#include "trace/artifact_writer.h"
#include "trace/chrome_json_writer.h"
#include "trace/correlator.h"
#include "trace/huge_page_allocator.h"
#include "daemon/ingest.h"
#include "daemon/wire_events.h"
#include "trace/perfetto_writer.h"
#include "trace/summary.h"
#include "trace/trace_lanes.h"
#include "proto/nrtprof.pb.h"

ABSL_FLAG(uint64_t, events, 1'000'000, "events in all");
ABSL_FLAG(uint32_t, processes, 4, "synthetic processes (streams)");
ABSL_FLAG(uint32_t, threads, 2, "host threads per process");
ABSL_FLAG(uint32_t, batch_events, 1000, "events per batch");
ABSL_FLAG(std::string, output_dir, "",
          "where the files go, kept (default: a fresh folder in /tmp, removed when done)");

namespace nrtprof::bench {
namespace {

// The thread's CPU time, user and system (page faults and writes included): what a phase costs
// the core, whatever else the machine runs meanwhile. On a shared machine wall time mostly
// measures the neighbours.
struct Clock {
  using time_point = double;
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
};

double Since(Clock::time_point start) { return Clock::now() - start; }

int Main() {
  const uint64_t events = absl::GetFlag(FLAGS_events);
  const uint32_t processes = std::max<uint32_t>(absl::GetFlag(FLAGS_processes), 1);
  const uint32_t batch_events = std::max<uint32_t>(absl::GetFlag(FLAGS_batch_events), 1);
  std::string dir = absl::GetFlag(FLAGS_output_dir);
  // A folder made here is removed when done, however Main returns.
  struct RemovedWhenDone {
    std::string dir;
    ~RemovedWhenDone() {
      if (!dir.empty()) std::filesystem::remove_all(dir);
    }
  } made_here;
  if (dir.empty()) {
    char tmpl[] = "/tmp/nrtprof-breakdown-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    dir = made_here.dir = tmpl;
  }

  // The batches as they arrive on the wire, round robin over the processes (not timed).
  WireBatches made = MakeWireBatches(events, processes, absl::GetFlag(FLAGS_threads),
                                     batch_events, /*final=*/true);
  std::vector<std::string>& wire = made.batches;
  const std::vector<uint32_t>& wire_process = made.process;
  const uint64_t total = made.events;

  std::vector<std::unique_ptr<daemon::ProcessIngest>> ingests;
  for (uint32_t i = 0; i < processes; ++i) {
    SyntheticProcessOptions o;
    o.pid = 100000 + i * 1000;
    daemon::IngestLimits limits;
    limits.max_events_per_process = ~uint64_t{0};
    ingests.push_back(
        std::make_unique<daemon::ProcessIngest>(SyntheticProcess(o).MakeHello(), limits));
    ingests.back()->BeginCapture();
  }
  double decode_s = 0, ingest_s = 0;
  nrtprof::EventBatch rest;  // reused, as the service's records are its thread's
  std::vector<daemon::IngestedEvent> records;
  std::string scratch;
  for (size_t b = 0; b < wire.size(); ++b) {
    Clock::time_point t = Clock::now();
    if (!daemon::ReadWireBatch(wire[b], &rest, &records, &scratch)) return 1;
    decode_s += Since(t);
    t = Clock::now();
    absl::StatusOr<uint64_t> ack = ingests[wire_process[b]]->OnBatch(rest, records);
    ingest_s += Since(t);
    if (!ack.ok()) {
      fprintf(stderr, "ingest refused a batch: %s\n", ack.status().ToString().c_str());
      return 1;
    }
  }
  std::vector<std::string>().swap(wire);

  // As CollectorCore::StreamCapture writes a capture: a process at a time, decoded events to
  // Trace to lanes to each file, the capture's big vectors reusing the pages of those it freed
  // (so the first process pays for the memory the later ones reuse, in every phase).
  daemon::HugePageReuse reuse;
  std::vector<daemon::ProcessCapture> captured;
  for (auto& in : ingests) captured.push_back(in->TakeCapture());
  ingests.clear();
  mkdir(dir.c_str(), 0755);
  auto folder = [&](const std::string& sub) {
    const std::string out = absl::StrCat(dir, "/", sub);
    mkdir(out.c_str(), 0755);
    return out;
  };
  daemon::PerfettoWriter pftrace_sink;
  daemon::ChromeJsonWriter json_sink;
  daemon::SummarySink summary_sink;
  daemon::ArtifactWriter artifacts_sink;
  // Each phase's streams, with the seconds spent in them.
  struct Timed {
    std::unique_ptr<daemon::LaneStream> lanes;   // a trace writer's, or
    std::unique_ptr<daemon::TraceStream> trace;  // another's
    double seconds = 0;
  };
  Timed pftrace{pftrace_sink.OpenLaneStream(folder("files")), nullptr};
  Timed json{json_sink.OpenLaneStream(folder("files")), nullptr};
  Timed summary_files{nullptr, summary_sink.OpenStream(folder("files"))};
  Timed artifacts{nullptr, artifacts_sink.OpenStream(folder("files"))};
  if (!pftrace.lanes || !json.lanes || !summary_files.trace ||
      !artifacts.trace) {
    fprintf(stderr, "a writer has no stream\n");
    return 1;
  }
  auto report = [](const char* what, const absl::Status& s) {
    if (!s.ok()) fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  };
  daemon::CaptureCorrelator correlator("breakdown", 0);
  daemon::SummaryBuilder summary;
  double correlate_s = 0, lanes_s = 0, summary_s = 0;
  uint64_t next_flow_id = 1, first_ns = 0;
  bool any_slice = false;
  for (const std::vector<size_t>& group : daemon::ProcessOrder(captured)) {
    Clock::time_point t = Clock::now();
    std::vector<daemon::ProcessCapture*> streams;
    for (size_t i : group) streams.push_back(&captured[i]);
    daemon::Trace one;
    one.capture_id = "breakdown";
    one.processes.push_back(correlator.Next(streams));
    one.realtime_offset_ns = correlator.header().realtime_offset_ns;
    correlate_s += Since(t);
    t = Clock::now();
    {
      const daemon::TraceLanes lanes = daemon::BuildLanes(one, next_flow_id);
      if (lanes.flows >= next_flow_id) next_flow_id = lanes.flows + 1;
      for (const daemon::ProcessLanes& p : lanes.processes) {
        if (p.has_events && (!any_slice || p.first_ns < first_ns)) first_ns = p.first_ns;
        any_slice = any_slice || p.has_events;
      }
      lanes_s += Since(t);
      for (Timed* w : {&pftrace, &json}) {
        t = Clock::now();
        report("a trace writer", w->lanes->Add(one, lanes));
        w->seconds += Since(t);
      }
    }
    t = Clock::now();
    summary.Add(one);
    summary_s += Since(t);
    for (Timed* w : {&summary_files, &artifacts}) {
      t = Clock::now();
      report("a writer", w->trace->Add(one));
      w->seconds += Since(t);
    }
  }
  std::vector<daemon::ProcessCapture>().swap(captured);
  const daemon::Trace& header = correlator.header();
  Clock::time_point t = Clock::now();
  const daemon::Summary whole = summary.Finish(header);
  summary_s += Since(t);
  std::vector<std::string> files;
  if (!any_slice) first_ns = header.start_ns;
  for (Timed* w : {&pftrace, &json}) {
    t = Clock::now();
    report("a trace writer", w->lanes->Finish(header, first_ns, &files));
    w->seconds += Since(t);
  }
  for (Timed* w : {&summary_files, &artifacts}) {
    t = Clock::now();
    report("a writer", w->trace->Finish(header, whole, &files));
    w->seconds += Since(t);
  }
  summary_s += summary_files.seconds;
  const double pftrace_s = pftrace.seconds, json_s = json.seconds,
               artifacts_s = artifacts.seconds;

  const double n = static_cast<double>(total);
  auto row = [&](const char* phase, double seconds) {
    printf("  %-30s %8.3f s %8.0f ns/event %10.0f events/s\n", phase, seconds, seconds / n * 1e9,
           n / seconds);
  };
  printf("nrtprof_pipeline_breakdown: %" PRIu64 " events from %u processes, one core, CPU time\n",
         total, processes);
  row("decode (ReadWireBatch)", decode_s);
  row("ingest (ProcessIngest)", ingest_s);
  row("correlate", correlate_s);
  row("lanes (BuildLanes, for both)", lanes_s);
  row("trace.pftrace (deflate 1)", pftrace_s);
  row("trace.json", json_s);
  row("summary", summary_s);
  row("artifacts", artifacts_s);
  const double to_pftrace = decode_s + ingest_s + correlate_s + lanes_s + pftrace_s;
  const double everything = to_pftrace + json_s + summary_s + artifacts_s;
  row("batches -> trace.pftrace", to_pftrace);
  row("batches -> every file", everything);
  printf("BREAKDOWN events=%" PRIu64
         " decode_s=%.4f ingest_s=%.4f correlate_s=%.4f lanes_s=%.4f"
         " pftrace_s=%.4f json_s=%.4f summary_s=%.4f artifacts_s=%.4f\n",
         total, decode_s, ingest_s, correlate_s, lanes_s, pftrace_s,
         json_s, summary_s, artifacts_s);
  return 0;
}

}  // namespace
}  // namespace nrtprof::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return nrtprof::bench::Main();
}
