// nrtprof_triggers_bench: what the trigger rules (daemon/triggers.h, issue 41) cost the daemon
// beside the fold they run on: the goal is at most 5% of the fold's CPU for the same stream.
//
// The stream is nrtprof_loadgen's synthetic RMSNorm processes (synthetic_process.h: an iteration
// of 43 events, 6 executions, every ~2.4 ms per thread), stored by CollectorCore::OnBatch with
// the flight recorder on and folded every --fold_period_s of the stream's time by
// CollectorCore::FoldMetrics, as nrtprofd folds with rules (--trigger_check_ms). The fold's
// hook (CollectorOptions::folded) evaluates the seven rules on each folded window, as
// nrtprofd does, timed by itself; the fold's time without them is the rest. The synthetic
// stream marks no steps: the step rules scan its ranges and judge none; the execution rules
// judge every execution (6 of each iteration's 43 events), the status rule every call. Prints
// figures; asserts nothing about time.
//
//   bazel run -c opt //bench:nrtprof_triggers_bench -- --seconds 60 --processes 4

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/load/collector_bench.h"
#include "bench/load/synthetic_process.h"
#include "daemon/collector_core.h"
#include "daemon/metrics.h"
#include "daemon/triggers.h"
#include "daemon/wire_events.h"
#include "google/protobuf/arena.h"
#include "proto/nrtprof.pb.h"
#include "trace/huge_page_allocator.h"

ABSL_FLAG(double, seconds, 60, "seconds of the stream's (synthetic) time");
ABSL_FLAG(uint32_t, processes, 4, "synthetic processes (streams)");
ABSL_FLAG(uint32_t, batch_events, 4096, "events per batch (a recorder-only shim sends big ones)");
ABSL_FLAG(double, fold_period_s, 5, "seconds between folds (nrtprofd --trigger_check_ms: 5000)");
ABSL_FLAG(double, latency_ms, 25, "a batch arrives this long after its newest event");
ABSL_FLAG(bool, rules, true, "evaluate the rules (false: the fold alone, to compare runs)");

namespace nrtprof::bench {
namespace {

// The rules, as an operator would write them.
const std::vector<std::string> kRules = {
    "slow-step: step > 3 x median",      "slow-step-abs: step > 250 ms",
    "long-exec: execution > 5 x median", "long-exec-abs: execution > 20 ms",
    "errors: status != ok",              "crash: exit by signal",
    "cc-wait: collective wait > 10 ms"};

int Main() {
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const uint32_t processes = std::max<uint32_t>(absl::GetFlag(FLAGS_processes), 1);
  const uint32_t batch_events = std::max<uint32_t>(absl::GetFlag(FLAGS_batch_events), 1);
  const uint64_t period_ns = static_cast<uint64_t>(absl::GetFlag(FLAGS_fold_period_s) * 1e9);
  const uint64_t latency_ns = static_cast<uint64_t>(absl::GetFlag(FLAGS_latency_ms) * 1e6);

  absl::StatusOr<std::vector<daemon::TriggerRule>> rules = daemon::ParseTriggerRules(kRules);
  if (!rules.ok()) return 1;
  daemon::TriggerEvaluator evaluator(*std::move(rules));

  std::vector<std::unique_ptr<SyntheticProcess>> procs;
  constexpr uint64_t kStartNs = 1'000'000'000'000;
  for (uint32_t i = 0; i < processes; ++i) {
    SyntheticProcessOptions o;
    o.pid = 100000 + i * 1000;
    o.start_ns = kStartNs;
    procs.push_back(std::make_unique<SyntheticProcess>(o));
  }

  uint64_t eval_ns = 0, windows = 0, executions = 0, fired = 0;
  daemon::CollectorOptions options;
  options.flight_recorder = true;
  if (absl::GetFlag(FLAGS_rules)) {
    options.folded = [&](const daemon::Trace& window) {
      for (const daemon::ProcessTrace& p : window.processes) {
        for (const daemon::DeviceEvent& e : p.device) {
          executions += e.kind == daemon::DeviceEventKind::kExecution && e.parent == 0;
        }
      }
      const uint64_t t0 = ThreadCpuNs();
      fired += evaluator.Evaluate(window).size();
      eval_ns += ThreadCpuNs() - t0;
      ++windows;
    };
  }
  NoSink sink;
  StreamClock clock;
  clock.Set(kStartNs);
  daemon::UseSteadyMallocThresholds();
  daemon::CollectorCore core(options, &sink, &clock);
  daemon::Metrics metrics;
  for (uint32_t i = 0; i < processes; ++i) {
    if (!core.OnHello(i + 1, procs[i]->MakeHello(), [](const nrtprof::CaptureControl&) {}).ok()) {
      return 1;
    }
  }

  google::protobuf::Arena arena;
  std::vector<daemon::IngestedEvent> records;
  std::string scratch;
  nrtprof::ShimMessage message;
  uint64_t events = 0, folds = 0, fold_ns = 0;
  const uint64_t end_ns = kStartNs + static_cast<uint64_t>(seconds * 1e9);
  uint64_t next_fold = kStartNs + period_ns;
  auto fold = [&] {
    const uint64_t t0 = ThreadCpuNs();
    core.FoldMetrics(&metrics);
    fold_ns += ThreadCpuNs() - t0;
    ++folds;
  };
  for (uint32_t i = 0; clock.MonotonicNs() < end_ns; i = (i + 1) % processes) {
    const uint32_t n = procs[i]->NextBatch(batch_events, false, message.mutable_batch());
    const uint64_t newest = message.batch().clock().monotonic_ns();
    std::string wire = message.SerializeAsString();
    events += n;
    while (next_fold <= newest + latency_ns) {
      clock.Set(next_fold);
      fold();
      next_fold += period_ns;
    }
    clock.Set(newest + latency_ns);
    arena.Reset();
    auto* rest = google::protobuf::Arena::CreateMessage<nrtprof::EventBatch>(&arena);
    if (!daemon::ReadWireBatch(wire, rest, &records, &scratch)) return 1;
    if (!core.OnBatch(i + 1, *rest, records, std::move(wire)).ok()) return 1;
  }
  clock.Set(clock.MonotonicNs() + daemon::CollectorCore::kMetricsSettleNs + latency_ns + 1);
  fold();

  const uint64_t fold_alone_ns = fold_ns - eval_ns;
  printf("%" PRIu64 " events of %u processes, %.0f s of their time (%.0f events/s), %" PRIu64
         " folds\n",
         events, processes, seconds, events / seconds, folds);
  printf("fold without the rules: %.3f s CPU, %.0f ns per event received\n", fold_alone_ns / 1e9,
         static_cast<double>(fold_alone_ns) / static_cast<double>(events));
  if (absl::GetFlag(FLAGS_rules)) {
    printf("rules (%zu) evaluated on %" PRIu64 " windows, %" PRIu64 " executions: %.3f s CPU, "
           "%.1f ns per event received, %.2f%% of the fold's CPU; %" PRIu64 " fired\n",
           kRules.size(), windows, executions, eval_ns / 1e9,
           static_cast<double>(eval_ns) / static_cast<double>(events),
           100.0 * static_cast<double>(eval_ns) / static_cast<double>(fold_alone_ns), fired);
  }
  return 0;
}

}  // namespace
}  // namespace nrtprof::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return nrtprof::bench::Main();
}
