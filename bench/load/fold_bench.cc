// nrtprof_fold_bench: the always-on fold's cost per event (issue 41: <= 400 ns per event on one
// core), without gRPC. What a standing nrtprofd with --metrics_listen and --clickhouse_url does
// all the time: each batch read as the collector service reads it (ReadWireBatch) and stored by
// CollectorCore::OnBatch with the flight recorder on, and every --fold_period_s of the stream's
// time CollectorCore::FoldMetrics (decode what the recorder received, correlate, clip to the
// window, fold into Metrics, with the fleet store's rows kept), then the rows taken as the
// fleet exporter takes them.
//
// The stream is nrtprof_loadgen's synthetic RMSNorm processes (synthetic_process.h), round robin
// over --processes streams, at the rate their synthetic clocks model (2 threads a process, an
// iteration of 43 events every ~2.4 ms: about 36,000 events a second a process). The core's
// clock follows the stream's (a batch arrives --latency_ms after its newest event), so the fold
// sees the windows a daemon would. Figures: the fold's CPU time (the thread's) per event
// received, and the ingest's beside it; a check that the fold counted every execution sent.
// Prints figures; asserts nothing about time.
//
//   bazel run -c opt //bench:nrtprof_fold_bench -- --seconds 60 --processes 4
//   taskset -c 0 bazel-bin/bench/nrtprof_fold_bench            # as BENCHMARKS.md's figures

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/load/collector_bench.h"
#include "bench/load/synthetic_process.h"
#include "daemon/collector_core.h"
#include "daemon/metrics.h"
#include "daemon/wire_events.h"
#include "google/protobuf/arena.h"
#include "proto/nrtprof.pb.h"
#include "trace/huge_page_allocator.h"

ABSL_FLAG(double, seconds, 60, "seconds of the stream's (synthetic) time");
ABSL_FLAG(uint32_t, processes, 4, "synthetic processes (streams)");
ABSL_FLAG(uint32_t, threads, 2, "host threads per process");
ABSL_FLAG(uint32_t, batch_events, 4096, "events per batch (a recorder-only shim sends big ones)");
ABSL_FLAG(double, fold_period_s, 10, "seconds between folds (nrtprofd's kFoldPeriod: 10)");
ABSL_FLAG(double, latency_ms, 25, "a batch arrives this long after its newest event");
ABSL_FLAG(bool, fleet, true, "keep the fleet store's rows, taken after each fold");
ABSL_FLAG(std::string, dump, "",
          "write /metrics at the end and every fleet row taken to this file (to compare builds)");

namespace nrtprof::bench {
namespace {

int Main() {
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const uint32_t processes = std::max<uint32_t>(absl::GetFlag(FLAGS_processes), 1);
  const uint32_t batch_events = std::max<uint32_t>(absl::GetFlag(FLAGS_batch_events), 1);
  const uint64_t period_ns = static_cast<uint64_t>(absl::GetFlag(FLAGS_fold_period_s) * 1e9);
  const uint64_t latency_ns = static_cast<uint64_t>(absl::GetFlag(FLAGS_latency_ms) * 1e6);
  const bool fleet = absl::GetFlag(FLAGS_fleet);

  std::vector<std::unique_ptr<SyntheticProcess>> procs;
  constexpr uint64_t kStartNs = 1'000'000'000'000;  // MakeWireBatches's
  for (uint32_t i = 0; i < processes; ++i) {
    SyntheticProcessOptions o;
    o.pid = 100000 + i * 1000;
    o.threads = absl::GetFlag(FLAGS_threads);
    o.start_ns = kStartNs;
    procs.push_back(std::make_unique<SyntheticProcess>(o));
  }

  daemon::CollectorOptions options;
  options.flight_recorder = true;  // nrtprofd's defaults otherwise (30 s, 256 MiB, lz4)
  NoSink sink;
  StreamClock clock;
  clock.Set(kStartNs);
  daemon::UseSteadyMallocThresholds();  // as nrtprofd does at its start
  daemon::CollectorCore core(options, &sink, &clock);
  daemon::Metrics metrics;
  metrics.KeepFleetRows(fleet);
  for (uint32_t i = 0; i < processes; ++i) {
    if (!core.OnHello(i + 1, procs[i]->MakeHello(), [](const nrtprof::CaptureControl&) {}).ok()) {
      return 1;
    }
  }

  google::protobuf::ArenaOptions arena_options;
  arena_options.start_block_size = 64 << 10;
  arena_options.max_block_size = 1 << 20;
  google::protobuf::Arena arena(arena_options);
  std::vector<daemon::IngestedEvent> records;
  std::string scratch;
  nrtprof::ShimMessage message;
  uint64_t events = 0, executions_sent = 0, batches = 0, folds = 0, fleet_rows = 0;
  uint64_t ingest_ns = 0, fold_ns = 0, max_fold_ns = 0;
  const uint64_t end_ns = kStartNs + static_cast<uint64_t>(seconds * 1e9);
  uint64_t next_fold = kStartNs + period_ns;
  std::string dump;
  auto fold = [&] {
    const uint64_t t0 = ThreadCpuNs();
    core.FoldMetrics(&metrics);
    std::vector<daemon::Metrics::FleetRow> rows;
    std::vector<daemon::Metrics::FleetRankRow> ranks;
    if (fleet) {
      rows = metrics.TakeFleetRows();
      ranks = metrics.TakeFleetRankRows();
      fleet_rows += rows.size() + ranks.size();
    }
    const uint64_t spent = ThreadCpuNs() - t0;
    for (const daemon::Metrics::FleetRow& r : rows) {
      absl::StrAppend(&dump, "fold ", folds, " ops: ", r.pid, " ", r.executable, " ", r.model,
                      " ", r.op, " ", r.calls, " ", r.host_ns, " ", r.device_ns, " ",
                      r.executions, " ", absl::StrJoin(r.device_histogram, ","), "\n");
    }
    for (const daemon::Metrics::FleetRankRow& r : ranks) {
      absl::StrAppend(&dump, "fold ", folds, " ranks: ", r.pid, " ", r.executable, " ", r.rank,
                      " ", r.job, " ", r.collectives, " ", r.wait_ns, "\n");
    }
    fold_ns += spent;
    max_fold_ns = std::max(max_fold_ns, spent);
    ++folds;
  };
  for (uint32_t i = 0; clock.MonotonicNs() < end_ns; i = (i + 1) % processes) {
    const uint32_t n = procs[i]->NextBatch(batch_events, false, message.mutable_batch());
    for (const nrtprof::Event& e : message.batch().events()) {
      if (e.kind() == nrtprof::EVENT_API_CALL && e.function() == nrtprof::API_NRT_EXECUTE) {
        ++executions_sent;
      }
    }
    const uint64_t newest = message.batch().clock().monotonic_ns();
    std::string wire = message.SerializeAsString();
    events += n;
    ++batches;
    // Due folds before this batch arrives, as the metrics server's thread would make them.
    while (next_fold <= newest + latency_ns) {
      clock.Set(next_fold);
      fold();
      next_fold += period_ns;
    }
    clock.Set(newest + latency_ns);
    const uint64_t t0 = ThreadCpuNs();
    arena.Reset();
    auto* rest = google::protobuf::Arena::CreateMessage<nrtprof::EventBatch>(&arena);
    if (!daemon::ReadWireBatch(wire, rest, &records, &scratch)) return 1;
    absl::StatusOr<uint64_t> ack = core.OnBatch(i + 1, *rest, records, std::move(wire));
    ingest_ns += ThreadCpuNs() - t0;
    if (!ack.ok()) {
      fprintf(stderr, "refused: %s\n", ack.status().ToString().c_str());
      return 1;
    }
  }
  // The last events settle, and one more fold takes them.
  clock.Set(clock.MonotonicNs() + daemon::CollectorCore::kMetricsSettleNs + latency_ns + 1);
  fold();

  // Every execution the stream made, counted once (the fold's windows neither lose nor repeat).
  uint64_t executions_folded = 0;
  const std::string text = metrics.Render(core.Status());
  for (size_t at = 0; (at = text.find("\nnrtprof_model_executions_total{", at)) !=
                      std::string::npos;) {
    at = text.find("} ", at);
    executions_folded += strtoull(text.c_str() + at + 2, nullptr, 10);
  }
  if (const std::string path = absl::GetFlag(FLAGS_dump); !path.empty()) {
    FILE* f = fopen(path.c_str(), "w");
    if (f == nullptr) return 1;
    fputs(text.c_str(), f);
    fputs(dump.c_str(), f);
    fclose(f);
  }
  const nrtprof::FlightRecorderStatus r = core.Status().flight_recorder();
  printf("%" PRIu64 " events in %" PRIu64 " batches of %u processes, %.0f s of their time "
         "(%.0f events/s); the recorder holds %" PRIu64 " events\n",
         events, batches, processes, seconds, events / seconds,
         static_cast<uint64_t>(r.events()));
  printf("ingest: %.3f s CPU, %.0f ns per event\n", ingest_ns / 1e9,
         static_cast<double>(ingest_ns) / static_cast<double>(events));
  printf("fold:   %.3f s CPU in %" PRIu64 " folds (longest %.1f ms), %.0f ns per event "
         "received%s\n",
         fold_ns / 1e9, folds, max_fold_ns / 1e6,
         static_cast<double>(fold_ns) / static_cast<double>(events),
         fleet ? ", fleet rows included" : "");
  printf("executions: %" PRIu64 " sent, %" PRIu64 " folded; %" PRIu64 " fleet rows\n",
         executions_sent, executions_folded, fleet_rows);
  return executions_folded == executions_sent ? 0 : 3;
}

}  // namespace
}  // namespace nrtprof::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return nrtprof::bench::Main();
}
