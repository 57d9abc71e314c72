// The collector core's captures of the past, status, top and always-on fold
// (collector_recorded.cc, collector_status.cc), driven by calls with a fake clock.
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/collector_core.h"
#include "daemon/metrics.h"
#include "daemon/testing/collector_core_fixture.h"
#include "gtest/gtest.h"
#include "trace/summary.h"

namespace nrtprof::daemon {
namespace {

using core_testing::Batch;
using core_testing::CollectorCoreTest;
using core_testing::Controls;
using core_testing::Hello;

// nrtprof top: the flight recorder's recent window by process and op; a user of a shared
// service sees only their own processes; without a recorder, one clear refusal.
TEST_F(CollectorCoreTest, TopShowsTheRecentWindowOfTheCallersProcesses) {
  EXPECT_EQ(core_.Top(nrtprof::TopRequest()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  CollectorOptions options = Options();
  options.flight_recorder = true;
  CollectorCore core(options, &sink_, &clock_);
  Controls a, b;
  ASSERT_TRUE(core.OnHello(1, Hello(201), a.Sender(), Caller{1001u}).ok());
  ASSERT_TRUE(core.OnHello(2, Hello(202), b.Sender(), Caller{1002u}).ok());
  ASSERT_TRUE(core.OnBatch(1, Batch(1)).ok());
  ASSERT_TRUE(core.OnBatch(1, Batch(2)).ok());
  ASSERT_TRUE(core.OnBatch(2, Batch(1)).ok());
  clock_.Advance(2 * CollectorCore::kMetricsSettleNs);  // past the settling second

  absl::StatusOr<nrtprof::TopReply> all = core.Top(nrtprof::TopRequest());
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->processes_size(), 2);
  ASSERT_GE(all->ops_size(), 1);
  EXPECT_EQ(all->ops(0).name(), "aten::mul");
  EXPECT_EQ(all->ops(0).calls(), 3u);
  absl::StatusOr<nrtprof::TopReply> mine = core.Top(nrtprof::TopRequest(), Caller{1002u});
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_EQ(mine->processes_size(), 1);
  EXPECT_EQ(mine->processes(0).pid(), 202u);
  EXPECT_EQ(mine->ops(0).calls(), 1u);
}

// The always-on fold counts an execution once, with its model and device time, although its
// device events arrive in a batch after its call's, past the end of the fold that holds the
// call (issue 36: /metrics gave 2,987-2,993 executions per model plus model="unknown" 67,
// while the device-time histograms counted 3,001 each; the fleet store put 53.8 ms under
// "(uncorrelated)").
TEST_F(CollectorCoreTest, TheFoldCountsAnExecutionWithItsDeviceEventsThatCameLater) {
  CollectorOptions options = Options();
  options.flight_recorder = true;
  CollectorCore core(options, &sink_, &clock_);
  Controls a;
  ASSERT_TRUE(core.OnHello(1, Hello(301), a.Sender()).ok());
  const uint64_t s = 1'000'000'000;
  clock_.Advance(10 * s);
  // At 10 s, the call (9.9 s, under aten::mul) ...
  nrtprof::EventBatch calls;
  calls.set_sequence(1);
  for (auto [iid, text] : std::vector<std::pair<uint32_t, std::string>>{
           {1, "aten::mul"}, {2, "nrt_execute"}, {3, "nc_exec_running"}, {4, "aten_mul"}}) {
    nrtprof::InternedString* str = calls.add_strings();
    str->set_iid(iid);
    str->set_value(text);
  }
  nrtprof::Event* r = calls.add_events();
  r->set_kind(nrtprof::EVENT_RANGE);
  r->set_name_iid(1);
  r->set_tid(1);
  r->set_start_ns(9'900'000'000);
  r->set_duration_ns(600'000);
  nrtprof::Event* c = calls.add_events();
  c->set_kind(nrtprof::EVENT_API_CALL);
  c->set_name_iid(2);
  c->set_tid(1);
  c->set_start_ns(9'900'050'000);
  c->set_duration_ns(500'000);
  c->set_nc_idx(0);
  c->set_correlation_id(1);
  c->set_repeat(1);
  nrtprof::DeviceClockSync* sync = calls.add_clock_syncs();
  sync->set_device_ns(9'000'000'000);
  sync->set_host_monotonic_ns(9'000'000'000);
  ASSERT_TRUE(core.OnBatch(1, calls).ok());
  // ... and at 10.6 s, its execution, fetched from the runtime's trace later.
  clock_.Advance(600'000'000);
  nrtprof::EventBatch device;
  device.set_sequence(2);
  nrtprof::Event* e = device.add_events();
  e->set_kind(nrtprof::EVENT_DEVICE_EXEC);
  e->set_name_iid(3);
  e->set_model_name_iid(4);
  e->set_tid(1);
  e->set_nc_idx(0);
  e->set_device_id(7);
  e->set_start_ns(9'900'060'000);
  e->set_duration_ns(365'000);
  ASSERT_TRUE(core.OnBatch(1, device).ok());

  Metrics metrics;
  clock_.Advance(600'000'000);  // 11.2 s: the fold reads up to 10.2 s
  core.FoldMetrics(&metrics);
  clock_.Advance(2 * s);  // and then on: the execution is not counted again
  core.FoldMetrics(&metrics);
  const std::string text = metrics.Render(nrtprof::StatusReply());
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_model_executions_total{pid=\"301\",executable=\"app301\",model=\"aten_mul\"} 1\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text,
      "nrtprof_model_device_seconds_count{pid=\"301\",executable=\"app301\",model=\"aten_mul\"} 1\n"))
      << text;
  EXPECT_FALSE(absl::StrContains(text, "model=\"unknown\"")) << text;
  EXPECT_TRUE(absl::StrContains(text, "nrtprof_op_calls_total{op=\"aten::mul\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "nrtprof_op_device_seconds_total{op=\"aten::mul\"} 0.000365000\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "nrtprof_uncorrelated_device_seconds_total 0.000000000\n"))
      << text;
}

// A batch holding one nrt_execute call that ended at `end_ns` (its strings with it).
nrtprof::EventBatch OneExecuteEndingAt(uint64_t sequence, uint64_t end_ns) {
  nrtprof::EventBatch b;
  b.set_sequence(sequence);
  nrtprof::InternedString* str = b.add_strings();
  str->set_iid(1);
  str->set_value("nrt_execute");
  nrtprof::Event* c = b.add_events();
  c->set_kind(nrtprof::EVENT_API_CALL);
  c->set_name_iid(1);
  c->set_tid(1);
  c->set_start_ns(end_ns - 500'000);
  c->set_duration_ns(500'000);
  c->set_nc_idx(0);
  c->set_correlation_id(sequence);
  c->set_repeat(1);
  return b;
}

// The fold's window ends long enough ago that the batches holding its calls have come: a
// process's batch age (Hello.batch_age_ms), and a margin for a flusher late on a busy machine.
// Process 402 (its batches up to 500 ms old, the default) has its call's batch come 1.7 s after
// the call; process 401 (NRTPROF_RECORDER_BATCH_MS=5000) 4.9 s after. Each call is counted,
// once. (The window ended 1 s ago: the fold at 12 s counted 402's call, 401's never; in a
// loaded CI run /metrics said 5,997 executions of the 6,000 a program made, none dropped.)
TEST_F(CollectorCoreTest, TheFoldCountsCallsWhoseBatchesCameLate) {
  CollectorOptions options = Options();
  options.flight_recorder = true;
  CollectorCore core(options, &sink_, &clock_);
  Controls a, b;
  nrtprof::Hello slow = Hello(401);
  slow.set_batch_age_ms(5000);
  ASSERT_TRUE(core.OnHello(1, slow, a.Sender()).ok());
  ASSERT_TRUE(core.OnHello(2, Hello(402), b.Sender()).ok());
  const uint64_t s = 1'000'000'000;
  clock_.Advance(10 * s);
  const uint64_t end = 10 * s + s / 10;  // both calls end at 10.1 s
  Metrics metrics;
  auto fold_at = [&](uint64_t t) {
    clock_.Advance(t - clock_.MonotonicNs());
    core.FoldMetrics(&metrics);
  };
  fold_at(11 * s);
  fold_at(11 * s + 8 * s / 10);
  ASSERT_TRUE(core.OnBatch(2, OneExecuteEndingAt(1, end)).ok());  // at 11.8 s
  fold_at(12 * s);
  fold_at(15 * s);
  ASSERT_TRUE(core.OnBatch(1, OneExecuteEndingAt(1, end)).ok());  // at 15 s
  for (uint64_t t = 16; t <= 30; t += 2) fold_at(t * s);
  const std::string text = metrics.Render(nrtprof::StatusReply());
  EXPECT_TRUE(absl::StrContains(text, "nrtprof_runtime_calls_total{function=\"nrt_execute\",status=\"0\"} 2\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_model_executions_total{pid=\"401\",executable=\"app401\",model=\"unknown\"} 1\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_model_executions_total{pid=\"402\",executable=\"app402\",model=\"unknown\"} 1\n"))
      << text;
}

// With the default batch age alone, the window ends 2.5 s ago: a batch 1.7 s late is counted.
// A process's word holds the window back at most a minute more, and only while it is connected.
TEST_F(CollectorCoreTest, TheFoldWaitsForADefaultBatchAFlusherSentLate) {
  CollectorOptions options = Options();
  options.flight_recorder = true;
  CollectorCore core(options, &sink_, &clock_);
  Controls a;
  ASSERT_TRUE(core.OnHello(1, Hello(403), a.Sender()).ok());
  EXPECT_EQ(core.FoldSettleNs(), 2'500'000'000u);
  // A process that says its batches wait an hour holds the window back a minute at most.
  Controls b;
  nrtprof::Hello hour = Hello(404);
  hour.set_batch_age_ms(3'600'000);
  ASSERT_TRUE(core.OnHello(2, hour, b.Sender()).ok());
  EXPECT_EQ(core.FoldSettleNs(), 62'000'000'000u);
  core.OnStreamClosed(2);
  EXPECT_EQ(core.FoldSettleNs(), 2'500'000'000u);
  const uint64_t s = 1'000'000'000;
  Metrics metrics;
  clock_.Advance(11 * s + s / 2);
  core.FoldMetrics(&metrics);  // at 11.5 s: the batch has not come
  clock_.Advance(3 * s / 10);
  ASSERT_TRUE(core.OnBatch(1, OneExecuteEndingAt(1, 10 * s + s / 10)).ok());  // at 11.8 s
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(s);
    core.FoldMetrics(&metrics);
  }
  EXPECT_TRUE(absl::StrContains(metrics.Render(nrtprof::StatusReply()),
                                "nrtprof_runtime_calls_total{function=\"nrt_execute\",status=\"0\"} 1\n"))
      << metrics.Render(nrtprof::StatusReply());
}

// Two machines of one name (containers, say), each with a process of pid 301, one of them on a
// monotonic clock 100 s behind the daemon's: each process is put on the daemon's clock by its
// own wall clock. (The fold looked the shift up by pid and host: the second process's shift
// moved the first's call out of the window, and it was not counted.)
TEST_F(CollectorCoreTest, TheFoldPutsEachProcessOnTheDaemonsClockByItsOwnClock) {
  CollectorOptions options = Options();
  options.flight_recorder = true;
  CollectorCore core(options, &sink_, &clock_);
  const uint64_t s = 1'000'000'000;
  clock_.Advance(200 * s);
  Controls controls[2];
  // Each machine's process makes one nrt_execute call at 199.9 s of the daemon's clock: 199.9 s
  // and 99.9 s of its own. Its batch's clock sample says how its clock reads the wall clock.
  for (auto [stream, boot, behind_ns] :
       std::vector<std::tuple<uint64_t, std::string, uint64_t>>{{1, "boot-a", 0},
                                                                {2, "boot-b", 100 * s}}) {
    nrtprof::Hello hello = Hello(301);
    hello.set_host("node");
    hello.set_boot_id(boot);
    ASSERT_TRUE(core.OnHello(stream, hello, controls[stream - 1].Sender()).ok());
    nrtprof::EventBatch batch = OneExecuteEndingAt(1, 199'900'500'000 - behind_ns);
    batch.mutable_clock()->set_monotonic_ns(200 * s - behind_ns);
    batch.mutable_clock()->set_realtime_ns(clock_.RealtimeNs());
    ASSERT_TRUE(core.OnBatch(stream, batch).ok());
  }
  Metrics metrics;
  clock_.Advance(3'000'000'000);  // 203 s: the fold takes what ended before 200.5 s
  core.FoldMetrics(&metrics);
  const std::string text = metrics.Render(nrtprof::StatusReply());
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_runtime_calls_total{function=\"nrt_execute\",status=\"0\"} 2\n"))
      << text;
}

TEST_F(CollectorCoreTest, StatusCountsEventsAndDropsByReason) {
  Controls c1, c2;
  Start("cap");
  ASSERT_TRUE(core_.OnHello(1, Hello(7), c1.Sender()).ok());
  ASSERT_TRUE(core_.OnHello(2, Hello(8), c2.Sender()).ok());
  nrtprof::EventBatch b = Batch(1);
  b.mutable_drops()->set_ring_full(4);
  b.mutable_drops()->set_device_overwritten(2);
  ASSERT_TRUE(core_.OnBatch(1, b).ok());
  // Over the daemon's bound of 5 events per process: 3 of 8 dropped here.
  for (uint64_t seq = 1; seq <= 4; ++seq) ASSERT_TRUE(core_.OnBatch(2, Batch(seq)).ok());
  core_.OnStreamClosed(2);  // its counts stay in the daemon's totals
  clock_.Advance(5'000'000'000);

  nrtprof::StatusReply status = core_.Status();
  EXPECT_EQ(status.address(), "unix:/test.sock");
  EXPECT_EQ(status.uptime_ms(), 5000u);
  EXPECT_EQ(status.events_received(), 10u);
  ASSERT_EQ(status.processes_size(), 1);
  EXPECT_EQ(status.processes(0).pid(), 7u);
  EXPECT_EQ(status.processes(0).capture_id(), "cap");
  EXPECT_EQ(status.processes(0).events_received(), 2u);
  std::map<std::string, uint64_t> drops;
  for (const nrtprof::DropReason& d : status.dropped()) drops[d.reason()] = d.events();
  EXPECT_EQ(drops, (std::map<std::string, uint64_t>{{"ring_full", 4},
                                                    {"daemon_away", 0},
                                                    {"spool_full", 0},
                                                    {"device_overwritten", 2},
                                                    {"oversized", 0},
                                                    {"no_memory", 0},
                                                    {"device_malformed", 0},
                                                    {"daemon_overflow", 3}}));
  EXPECT_EQ(status.captures_written(), 0u);

  absl::StatusOr<nrtprof::CaptureFiles> files = Stop("cap");
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->events_dropped(), 9u);
  EXPECT_EQ(core_.Status().captures_written(), 1u);
  EXPECT_NE(files->summary_text().find("Events dropped: 9 (ring_full 4, device_overwritten 2, "
                                       "daemon_overflow 3)"),
            std::string::npos)
      << files->summary_text();
}

// A look back over more than the daemon keeps of a process (5 events here) holds the newest
// events, the seconds just before the request, and says what was left out and why; a live
// capture keeps its first (above).
TEST_F(CollectorCoreTest, ACaptureOfThePastKeepsAProcesssNewestEventsWithinTheBound) {
  CollectorOptions options = Options();
  options.flight_recorder = true;
  CollectorCore core(options, &sink_, &clock_);
  Controls c;
  ASSERT_TRUE(core.OnHello(1, Hello(7), c.Sender()).ok());
  for (uint64_t seq = 1; seq <= 4; ++seq) {  // a range and a call each, at seq * 1000 ns
    clock_.Advance(1'000'000);
    ASSERT_TRUE(core.OnBatch(1, Batch(seq)).ok());
  }
  nrtprof::StartCaptureRequest start;
  start.set_capture_id("back");
  start.set_last_ms(60'000);
  ASSERT_TRUE(core.StartCapture(start).ok());
  nrtprof::StopCaptureRequest stop;
  stop.set_capture_id("back");
  absl::StatusOr<nrtprof::CaptureFiles> files = core.StopCapture(stop);
  ASSERT_TRUE(files.ok()) << files.status();

  ASSERT_EQ(sink_.traces.size(), 1u);
  ASSERT_EQ(sink_.traces[0].processes.size(), 1u);
  const ProcessTrace& p = sink_.traces[0].processes[0];
  std::vector<uint64_t> calls, ranges;
  for (const ApiCall& call : p.calls) calls.push_back(call.start_ns);
  for (const RangeEvent& r : p.ranges) ranges.push_back(r.start_ns);
  EXPECT_EQ(calls, (std::vector<uint64_t>{2100, 3100, 4100}));
  EXPECT_EQ(ranges, (std::vector<uint64_t>{3000, 4000}));
  EXPECT_EQ(p.drops.daemon_overflow, 3u);
  EXPECT_EQ(p.drops.by_lane.framework, 2u);
  EXPECT_EQ(p.drops.by_lane.runtime, 1u);
  EXPECT_EQ(files->events(), 5u);
  EXPECT_EQ(files->events_dropped(), 3u);
  ASSERT_EQ(files->notes_size(), 1);
  EXPECT_EQ(files->notes(0),
            "pid 7: the oldest 3 of its 8 events in the window were left out: the daemon keeps "
            "at most 5 events of a process (nrtprofd --max_events_per_process); ask for a "
            "shorter window, or raise the bound");
}

// After a quiet spell the recorder reaches back less far than a look back asks for, yet lost
// nothing of the window: no note says it did. A window that reaches an evicted batch has one.
TEST_F(CollectorCoreTest, ALookBackPastAQuietSpellLostNothing) {
  CollectorOptions options = Options();
  options.flight_recorder = true;
  options.flight_recorder_limits.max_age_ns = 1'000'000'000;
  options.limits.max_events_per_process = 100;
  CollectorCore core(options, &sink_, &clock_);
  Controls c;
  ASSERT_TRUE(core.OnHello(1, Hello(7), c.Sender()).ok());
  clock_.Advance(1'000'000);
  ASSERT_TRUE(core.OnBatch(1, Batch(1)).ok());
  clock_.Advance(5'000'000'000);  // batch 1 is past the recorder's 1 s by now
  ASSERT_TRUE(core.OnBatch(1, Batch(2)).ok());
  clock_.Advance(1'000'000);
  auto look_back = [&](const std::string& id, uint32_t last_ms) {
    nrtprof::StartCaptureRequest start;
    start.set_capture_id(id);
    start.set_last_ms(last_ms);
    EXPECT_TRUE(core.StartCapture(start).ok());
    nrtprof::StopCaptureRequest stop;
    stop.set_capture_id(id);
    absl::StatusOr<nrtprof::CaptureFiles> files = core.StopCapture(stop);
    EXPECT_TRUE(files.ok()) << files.status();
    return files.value_or(nrtprof::CaptureFiles());
  };
  const nrtprof::CaptureFiles recent = look_back("recent", 2'000);
  EXPECT_EQ(recent.events(), 2u) << "batch 2's range and call";
  EXPECT_EQ(recent.notes_size(), 0) << recent.notes(0);
  const nrtprof::CaptureFiles longer = look_back("longer", 10'000);
  EXPECT_EQ(longer.events(), 2u);
  ASSERT_EQ(longer.notes_size(), 1);
  EXPECT_TRUE(absl::StartsWith(longer.notes(0), "the flight recorder held only the last "))
      << longer.notes(0);
}

}  // namespace
}  // namespace nrtprof::daemon
