// nrtprof_pipeline_breakdown: where the daemon's time goes, phase by phase, for the same
// synthetic processes nrtprof_loadgen sends (bench/load/synthetic_process.h), without gRPC:
//
//   decode     ShimMessage::ParseFromString of each serialized batch (what gRPC's
//              deserializer does before the service sees a batch)
//   ingest     ProcessIngest::OnBatch (checks, interning tables, records)
//   correlate  Correlate(): the capture's Trace
//   first touch  what the first writer pays extra for memory the heap does not have yet
//   lanes      BuildLanes(): the layout both trace writers draw, made once for the two
//   pftrace    PerfettoWriter::WriteLanes on those lanes, deflated and not
//   json       ChromeJsonWriter::WriteLanes on those lanes
//   summary    ComputeSummary, once, and SummarySink writing it
//   artifacts  ArtifactWriter
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
#include "daemon/artifact_writer.h"
#include "daemon/chrome_json_writer.h"
#include "daemon/correlator.h"
#include "daemon/huge_page_allocator.h"
#include "daemon/ingest.h"
#include "daemon/perfetto_writer.h"
#include "daemon/summary.h"
#include "daemon/trace_lanes.h"
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
  nrtprof::ShimMessage message;  // reused, as each stream's reactor reuses its own
  for (size_t b = 0; b < wire.size(); ++b) {
    Clock::time_point t = Clock::now();
    if (!message.ParseFromString(wire[b])) return 1;
    decode_s += Since(t);
    t = Clock::now();
    absl::StatusOr<uint64_t> ack = ingests[wire_process[b]]->OnBatch(message.batch());
    ingest_s += Since(t);
    if (!ack.ok()) {
      fprintf(stderr, "ingest refused a batch: %s\n", ack.status().ToString().c_str());
      return 1;
    }
  }
  std::vector<std::string>().swap(wire);

  // As StopCapture: the capture's big vectors reuse the pages of those it freed.
  daemon::HugePageReuse reuse;
  Clock::time_point t = Clock::now();
  std::vector<daemon::ProcessCapture> captured;
  for (auto& in : ingests) captured.push_back(in->TakeCapture());
  daemon::Trace trace = daemon::Correlate("breakdown", std::move(captured), 0);
  const double correlate_s = Since(t);
  std::vector<daemon::ProcessCapture>().swap(captured);

  // As CollectorCore::WriteCapture: the summary once, for the summary files and the reply.
  t = Clock::now();
  const daemon::Summary summary = daemon::ComputeSummary(trace);
  const double compute_summary_s = Since(t);

  mkdir(dir.c_str(), 0755);
  std::vector<std::string> files;
  auto timed = [&](daemon::TraceSink* sink, const std::string& sub) {
    const std::string out = absl::StrCat(dir, "/", sub);
    mkdir(out.c_str(), 0755);
    const Clock::time_point start = Clock::now();
    absl::Status s = sink->Write(trace, summary, out, &files);
    const double seconds = Since(start);
    if (!s.ok()) fprintf(stderr, "%s: %s\n", sub.c_str(), s.ToString().c_str());
    return seconds;
  };
  daemon::PerfettoWriter pftrace_plain({.deflate_level = 0});
  daemon::PerfettoWriter pftrace;
  daemon::ChromeJsonWriter json;
  daemon::SummarySink summary_files;
  daemon::ArtifactWriter artifacts;
  // What the daemon does (nrtprofd's sinks): the lanes once, both traces on them.
  auto timed_lanes = [&](daemon::LaneSink* sink, const daemon::TraceLanes& lanes,
                         const std::string& sub) {
    const std::string out = absl::StrCat(dir, "/", sub);
    mkdir(out.c_str(), 0755);
    const Clock::time_point start = Clock::now();
    absl::Status s = sink->WriteLanes(trace, lanes, out, &files);
    const double seconds = Since(start);
    if (!s.ok()) fprintf(stderr, "%s: %s\n", sub.c_str(), s.ToString().c_str());
    return seconds;
  };
  // The first writer after Correlate pays for faulting in the memory the writers share (the
  // heap keeps it for the later ones): timed on its own, then every writer on warm memory.
  const double first_touch_s = timed(&pftrace, "warmup") - timed(&pftrace, "warmup");
  t = Clock::now();
  double lanes_s, pftrace_plain_s, pftrace_s, json_s;
  {
    const daemon::TraceLanes lanes = daemon::BuildLanes(trace);
    lanes_s = Since(t);
    pftrace_plain_s = timed_lanes(&pftrace_plain, lanes, "plain");
    pftrace_s = timed_lanes(&pftrace, lanes, "files");
    json_s = timed_lanes(&json, lanes, "files");
  }
  const double summary_s = compute_summary_s + timed(&summary_files, "files");
  const double artifacts_s = timed(&artifacts, "files");

  const double n = static_cast<double>(total);
  auto row = [&](const char* phase, double seconds) {
    printf("  %-30s %8.3f s %8.0f ns/event %10.0f events/s\n", phase, seconds, seconds / n * 1e9,
           n / seconds);
  };
  printf("nrtprof_pipeline_breakdown: %" PRIu64 " events from %u processes, one core, CPU time\n",
         total, processes);
  row("decode (protobuf parse)", decode_s);
  row("ingest (ProcessIngest)", ingest_s);
  row("correlate", correlate_s);
  row("first touch of writers' memory", first_touch_s);
  row("lanes (BuildLanes, for both)", lanes_s);
  row("trace.pftrace, uncompressed", pftrace_plain_s);
  row("trace.pftrace (deflate 1)", pftrace_s);
  row("trace.json", json_s);
  row("summary", summary_s);
  row("artifacts", artifacts_s);
  const double to_pftrace = decode_s + ingest_s + correlate_s + first_touch_s + lanes_s + pftrace_s;
  const double everything = to_pftrace + json_s + summary_s + artifacts_s;
  row("batches -> trace.pftrace", to_pftrace);
  row("batches -> every file", everything);
  printf("BREAKDOWN events=%" PRIu64
         " decode_s=%.4f ingest_s=%.4f correlate_s=%.4f first_touch_s=%.4f lanes_s=%.4f"
         " pftrace_plain_s=%.4f"
         " pftrace_s=%.4f json_s=%.4f summary_s=%.4f artifacts_s=%.4f\n",
         total, decode_s, ingest_s, correlate_s, first_touch_s, lanes_s, pftrace_plain_s, pftrace_s,
         json_s, summary_s, artifacts_s);
  return 0;
}

}  // namespace
}  // namespace nrtprof::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return nrtprof::bench::Main();
}
