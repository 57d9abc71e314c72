// CollectorCore's answers about what it holds: Status (connected processes, captures, drops),
// Top (a recent window of the flight recorder by process, model and op) and FoldMetrics (the
// always-on counters of /metrics and the fleet store).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/collector_core.h"
#include "daemon/collector_core_state.h"
#include "trace/correlator.h"
#include "trace/huge_page_allocator.h"
#include "trace/step_window.h"
#include "daemon/top.h"

namespace nrtprof::daemon {

nrtprof::StatusReply CollectorCore::Status(Caller caller) {
  nrtprof::StatusReply reply;
  reply.set_address(options_.address);
  reply.set_daemon_version(options_.daemon_version);
  reply.set_events_received(events_received_.load());
  if (options_.add_status) options_.add_status(&reply);
  std::lock_guard<std::mutex> lock(mu_);
  reply.set_uptime_ms((clock_->MonotonicNs() - started_ns_) / 1'000'000);
  reply.set_final_batches_alone(final_batches_alone_);
  DropCounts drops = closed_drops_;
  const bool all = IsOperator(caller);
  for (const auto& [id, s] : streams_) {
    if (!all && s->uid != caller.uid) continue;  // another user's program: not this caller's to see
    nrtprof::ConnectedProcess* p = reply.add_processes();
    p->set_pid(s->pid);
    p->set_executable(s->executable);
    p->set_capture_id(s->capture_id);
    p->set_job(s->job.from_command_line ? "" : s->job.name);
    if (s->rank >= 0) p->set_rank(s->rank);
    std::lock_guard<std::mutex> stream_lock(s->mu);
    p->set_events_received(s->ingest.events_received());
    p->set_last_step(s->ingest.last_step());
    drops += StreamsOwnDrops(*s);
  }
  for (auto [reason, events] : std::initializer_list<std::pair<const char*, uint64_t>>{
           {"ring_full", drops.ring_full},
           {"daemon_away", drops.daemon_away},
           {"spool_full", drops.spool_full},
           {"device_overwritten", drops.device_overwritten},
           {"oversized", drops.oversized},
           {"no_memory", drops.no_memory},
           {"device_malformed", drops.device_malformed},
           {"daemon_overflow", drops.daemon_overflow}}) {
    nrtprof::DropReason* d = reply.add_dropped();
    d->set_reason(reason);
    d->set_events(events);
  }
  reply.mutable_dropped_by_lane()->set_framework(drops.by_lane.framework);
  reply.mutable_dropped_by_lane()->set_runtime(drops.by_lane.runtime);
  reply.mutable_dropped_by_lane()->set_hardware(drops.by_lane.hardware);
  reply.set_captures_written(captures_written_);
  for (const auto& [id, c] : captures_) {
    if (c->starting || !MayControl(caller, c->owner)) continue;
    nrtprof::CaptureInProgress* p = reply.add_captures();
    p->set_capture_id(id);
    p->set_running_ms((clock_->MonotonicNs() - c->started_ns) / 1'000'000);
    p->set_processes(static_cast<uint32_t>(c->members.size()));
    p->set_last_ms(c->last_ms);
    p->set_iterations(c->iterations);
    p->set_first_step(c->first_step);
    p->set_output_dir(c->output_dir);
  }
  if (recorder_ != nullptr) {
    const uint64_t now = clock_->MonotonicNs();
    std::vector<uint64_t> emptied;
    recorder_->Expire(now, &emptied);
    ForgetEmptied(emptied);
    const FlightRecorder::Stats stats = recorder_->stats();
    nrtprof::FlightRecorderStatus* r = reply.mutable_flight_recorder();
    r->set_seconds_limit(options_.flight_recorder_limits.max_age_ns / 1'000'000'000);
    r->set_bytes_limit(options_.flight_recorder_limits.max_bytes);
    r->set_bytes(stats.bytes);
    r->set_batches(stats.chunks);
    r->set_events(stats.events);
    r->set_oldest_age_ms(stats.oldest_ns != 0 && now > stats.oldest_ns
                             ? (now - stats.oldest_ns) / 1'000'000
                             : 0);
    r->set_evicted_events(stats.evicted_events);
  }
  return reply;
}

uint64_t CollectorCore::FoldSettleNs() {
  std::lock_guard<std::mutex> lock(mu_);
  // No process connected: every batch has come (a stream ends after its final one).
  if (streams_.empty()) return kMetricsSettleNs;
  uint64_t longest_ms = kDefaultBatchAgeMs;
  for (const auto& [id, s] : streams_) {
    std::lock_guard<std::mutex> stream_lock(s->mu);
    longest_ms = std::max<uint64_t>(longest_ms, s->ingest.hello().batch_age_ms());
  }
  // One process's word cannot hold everyone's metrics back for long.
  longest_ms = std::min(longest_ms, kMaxBatchAgeMs);
  return std::max(kMetricsSettleNs, longest_ms * 1'000'000 + kFoldMarginNs);
}

void CollectorCore::FoldMetrics(Metrics* metrics) {
  if (recorder_ == nullptr) return;
  std::lock_guard<std::mutex> lock(metrics_mu_);
  const uint64_t now = clock_->MonotonicNs();
  const uint64_t settle = FoldSettleNs();
  if (now < settle) return;
  const uint64_t until = now - settle;
  if (until <= metrics_folded_ns_) return;
  // A process at a time: decoded, correlated, cut to the window and folded before the next is
  // read, so that the fold holds one process's events at once and the pages each frees are the
  // next one's (huge_page_allocator.h), where fresh pages were a quarter of its time (issue 41).
  HugePageReuse reuse;  // as a capture's (StopCapture)
  std::vector<std::string> notes;
  // The fold counts what ended in [begin, until) (ClipToEnds), read from all that arrived from
  // a settle before `begin` up to now: the device events of a call arrive after it (the shim
  // fetches the runtime's trace every few ms, and sends in batches), so a call near the end
  // finds its executions, and one just before the start takes its own instead of leaving them
  // to this fold as uncorrelated. Cutting by arrival, the fold split calls from their device
  // events: executions without a model ("unknown"), device time "(uncorrelated)" (issue 36).
  const uint64_t begin = metrics_folded_ns_;
  metrics_folded_ns_ = until;
  // A process whose monotonic clock is not the daemon's (on another machine: they differ by
  // far more than a second) is put on it through the wall clock both read.
  const int64_t daemon_offset =
      clock_->RealtimeNs() - static_cast<int64_t>(clock_->MonotonicNs());
  CaptureCorrelator correlator("metrics", daemon_offset);
  Trace window;  // every process's part, for the trigger rules
  ForEachRecordedProcess(
      nullptr, begin > kMetricsSettleNs ? begin - kMetricsSettleNs : 0, UINT64_MAX, &notes,
      [&](std::vector<ProcessCapture>* streams) {
        int64_t shift = 0;  // the last stream's that says, as the process's clock
        for (const ProcessCapture& p : *streams) {
          const int64_t s = p.realtime_offset_ns - daemon_offset;
          if (p.realtime_offset_ns != 0 && (s > 1'000'000'000 || s < -1'000'000'000)) shift = s;
        }
        std::vector<ProcessCapture*> group;
        for (ProcessCapture& p : *streams) group.push_back(&p);
        Trace one;
        one.processes.push_back(correlator.Next(group));
        streams->clear();  // its events are in the ProcessTrace now
        ClipToEnds(begin, until, &one, [shift](const ProcessTrace&) { return shift; });
        metrics->Add(one);
        if (options_.folded) window.processes.push_back(std::move(one.processes[0]));
      });
  if (!options_.folded || window.processes.empty()) return;
  // The window as one Trace: the correlator's header (the span of every event before the cut)
  // cut to [begin, until) as ClipToEnds cuts a whole Trace's.
  std::vector<ProcessTrace> processes = std::move(window.processes);
  window = correlator.header();
  window.processes = std::move(processes);
  if (window.end_ns != 0) {
    window.start_ns = std::max(window.start_ns, begin);
    window.end_ns = std::max(window.start_ns, std::min(window.end_ns, until));
  }
  options_.folded(window);
}

absl::StatusOr<nrtprof::TopReply> CollectorCore::Top(const nrtprof::TopRequest& request,
                                                      Caller caller) {
  if (recorder_ == nullptr) {
    return absl::FailedPreconditionError(
        "the daemon keeps no flight recorder (nrtprofd --flight_recorder_seconds 0), so it has "
        "no recent events to show");
  }
  const uint64_t window_ns = (request.window_ms() == 0 ? 5000 : request.window_ms()) * 1'000'000ull;
  const uint64_t now = clock_->MonotonicNs();
  const uint64_t until = now > kMetricsSettleNs ? now - kMetricsSettleNs : 0;
  const uint64_t since = until > window_ns ? until - window_ns : 0;
  // Whose processes: an unnamed scope of the caller's (every process, for the operator).
  Capture scope;
  if (!IsOperator(caller)) scope.owner = caller.uid;
  std::vector<std::string> notes;
  std::vector<ProcessCapture> processes = FromRecorder(&scope, since, until, &notes);
  const Trace trace = Correlate("top", std::move(processes),
                                clock_->RealtimeNs() - static_cast<int64_t>(now));
  return ComputeTop(trace, until - since);
}

}  // namespace nrtprof::daemon
