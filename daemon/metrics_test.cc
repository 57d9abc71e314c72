// What Prometheus reads from /metrics: counters that add up across folds, a histogram whose
// buckets are cumulative, label values escaped, and the status's gauges.
#include "daemon/metrics.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {
namespace {

Trace OneWindow(const std::string& executable) {
  Trace t;
  ProcessTrace p;
  p.pid = 42;
  p.executable = executable;
  ApiCall exec;
  exec.name = "nrt_execute";
  exec.function = nrtprof::API_NRT_EXECUTE;
  exec.model_name = "aten_mul";
  exec.correlation_id = 1;
  exec.start_ns = 1000;
  exec.duration_ns = 500;
  p.calls.push_back(exec);
  ApiCall failed = exec;
  failed.name = "nrt_tensor_write";
  failed.function = nrtprof::API_NRT_TENSOR_WRITE;
  failed.status = 4;
  failed.correlation_id = 2;
  p.calls.push_back(failed);
  DeviceEvent run;
  run.id = 1;
  run.name = "nc_exec_running";
  run.model_name = "aten_mul";
  run.duration_ns = 300'000;  // 0.3 ms: in the 0.0005 bucket and above
  run.correlation_id = 1;
  p.device.push_back(run);
  t.processes.push_back(p);
  return t;
}

TEST(MetricsTest, CountersAddUpAcrossWindows) {
  Metrics m;
  m.Add(OneWindow("/opt/app/train"));
  m.Add(OneWindow("/opt/app/train"));
  const std::string text = m.Render(nrtprof::StatusReply());
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_runtime_calls_total{function=\"nrt_execute\",status=\"0\"} 2\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_runtime_calls_total{function=\"nrt_tensor_write\",status=\"4\"} 2\n"));
  EXPECT_TRUE(absl::StrContains(text,
                                "nrtprof_model_executions_total{pid=\"42\",executable=\"train\","
                                "model=\"aten_mul\"} 2\n"));
  const std::string labels = "pid=\"42\",executable=\"train\",model=\"aten_mul\"";
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_model_device_seconds_bucket{" + labels + ",le=\"0.00025\"} 0\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_model_device_seconds_bucket{" + labels + ",le=\"0.0005\"} 2\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_model_device_seconds_bucket{" + labels + ",le=\"+Inf\"} 2\n"));
  EXPECT_TRUE(absl::StrContains(text, "nrtprof_model_device_seconds_count{" + labels + "} 2\n"));
  EXPECT_TRUE(absl::StrContains(text, "nrtprof_model_device_seconds_sum{" + labels +
                                          "} 0.000600000\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE nrtprof_model_device_seconds histogram\n"));
}

// A program that polls for completion: nrtprof_runtime_calls_total counts every poll, those
// the shim did not record (they saw nothing new and returned NRT_SUCCESS) among them, as the
// summary's table does.
TEST(MetricsTest, RuntimeCallsCountThePollsNotRecorded) {
  Trace t;
  ProcessTrace p;
  p.pid = 43;
  p.executable = "async_train";
  ApiCall done;
  done.name = "nrta_is_completed";
  done.function = nrtprof::API_NRTA_IS_COMPLETED;
  done.polls = 41;  // the 42nd poll saw its request complete
  p.calls.push_back(done);
  ApiCall failed = done;
  failed.status = 2;  // a failed poll is recorded, with the polls before it
  failed.polls = 5;
  p.calls.push_back(failed);
  PollTally tail;
  tail.name = "nrta_is_completed";
  tail.function = nrtprof::API_NRTA_IS_COMPLETED;
  tail.polls = 100;  // after its thread's last recorded poll
  p.poll_tallies.push_back(tail);
  t.processes.push_back(p);
  Metrics m;
  m.Add(t);
  const std::string text = m.Render(nrtprof::StatusReply());
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_runtime_calls_total{function=\"nrta_is_completed\",status=\"0\"} 147\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_runtime_calls_total{function=\"nrta_is_completed\",status=\"2\"} 1\n"))
      << text;
}

// A program that runs the runtime's system trace itself sends its device events only as it
// fetches them: the executions folded before then are counted as such, by process, so that
// a dashboard can tell why executions outnumber device executions.
TEST(MetricsTest, ExecutionsHeldByTheProgramAreCountedByProcess) {
  Metrics m;
  Trace first = OneWindow("/opt/app/train");
  first.processes[0].executions_held_by_program = 3;
  m.Add(first);
  m.Add(OneWindow("/opt/app/train"));  // nothing held in this one
  Trace other = OneWindow("/opt/app/eval");
  other.processes[0].pid = 43;
  other.processes[0].executions_held_by_program = 4;
  m.Add(other);
  first.processes[0].executions_held_by_program = 2;
  m.Add(first);
  const std::string text = m.Render(nrtprof::StatusReply());
  EXPECT_TRUE(absl::StrContains(text, "# TYPE nrtprof_executions_held_by_program_total counter\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_executions_held_by_program_total{pid=\"42\",executable=\"train\"} 5\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_executions_held_by_program_total{pid=\"43\",executable=\"eval\"} 4\n"))
      << text;
}

// A process that held nothing has no series.
TEST(MetricsTest, NoHeldSeriesForAProcessThatHeldNothing) {
  Metrics m;
  m.Add(OneWindow("/opt/app/train"));
  const std::string text = m.Render(nrtprof::StatusReply());
  EXPECT_FALSE(absl::StrContains(text, "nrtprof_executions_held_by_program_total{")) << text;
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  Metrics m;
  m.Add(OneWindow("/tmp/we\"ird\\name\nx"));
  const std::string text = m.Render(nrtprof::StatusReply());
  EXPECT_TRUE(absl::StrContains(text, "executable=\"we\\\"ird\\\\name\\nx\"")) << text;
}

TEST(MetricsTest, StatusGauges) {
  nrtprof::StatusReply status;
  status.set_events_received(1234);
  status.add_processes()->set_pid(7);
  nrtprof::DropReason* d = status.add_dropped();
  d->set_reason("ring_full");
  d->set_events(5);
  status.mutable_flight_recorder()->set_bytes(4096);
  status.mutable_flight_recorder()->set_oldest_age_ms(29'500);
  const std::string text = Metrics().Render(status);
  EXPECT_TRUE(absl::StrContains(text, "\nnrtprof_events_received_total 1234\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "\nnrtprof_connected_processes 1\n"));
  EXPECT_TRUE(absl::StrContains(text, "\nnrtprof_events_dropped_total{reason=\"ring_full\"} 5\n"));
  EXPECT_TRUE(absl::StrContains(text, "\nnrtprof_flight_recorder_bytes 4096\n"));
  EXPECT_TRUE(absl::StrContains(text, "\nnrtprof_flight_recorder_oldest_age_seconds 29.500\n"));
}

}  // namespace
}  // namespace nrtprof::daemon

namespace nrtprof::daemon {
namespace {

// An op (aten::mul) that runs two models, one three times and the other once, and an
// execution no call was matched to.
Trace TwoModelsInOneOp() {
  Trace t;
  ProcessTrace p;
  p.pid = 7;
  p.executable = "/opt/train";
  RangeEvent op;
  op.id = 1;
  op.name = "aten::mul";
  op.start_ns = 0;
  op.duration_ns = 10'000'000;
  p.ranges.push_back(op);
  uint64_t id = 0;
  for (const char* model : {"mul_a", "mul_a", "mul_a", "mul_b"}) {
    ++id;
    ApiCall call;
    call.name = "nrt_execute";
    call.function = nrtprof::API_NRT_EXECUTE;
    call.model_name = Name::Lasting(model);
    call.correlation_id = id;
    call.range = 1;
    call.start_ns = id * 1000;
    call.duration_ns = 100;
    p.calls.push_back(call);
    DeviceEvent run;
    run.id = id;
    run.name = "nc_exec_running";
    run.model_name = Name::Lasting(model);
    run.duration_ns = 2'000'000;  // 2 ms: bucket 2.5 ms (index 6)
    run.correlation_id = id;
    p.device.push_back(run);
  }
  DeviceEvent stray;
  stray.id = 99;
  stray.name = "nc_exec_running";
  stray.model_name = "mul_a";
  stray.duration_ns = 20'000;  // 20 us: bucket 50 us (index 1)
  p.device.push_back(stray);
  t.processes.push_back(p);
  return t;
}

TEST(MetricsTest, FleetRowsSplitAnOpByModelAndAreTakenOnce) {
  Metrics m;
  m.Add(TwoModelsInOneOp());  // before KeepFleetRows: no fleet rows
  EXPECT_TRUE(m.TakeFleetRows().empty());
  m.KeepFleetRows(true);
  m.Add(TwoModelsInOneOp());
  const std::vector<Metrics::FleetRow> rows = m.TakeFleetRows();
  ASSERT_EQ(rows.size(), 3u);
  // Key order: (pid, executable, model, op).
  const Metrics::FleetRow& stray = rows[0];
  EXPECT_EQ(stray.op, Metrics::kUncorrelatedOp);
  EXPECT_EQ(stray.model, "mul_a");
  EXPECT_EQ(stray.calls, 0u);
  EXPECT_EQ(stray.device_ns, 20'000u);
  EXPECT_EQ(stray.device_histogram[1], 1u);
  const Metrics::FleetRow& a = rows[1];
  EXPECT_EQ(a.pid, "7");
  EXPECT_EQ(a.executable, "train");
  EXPECT_EQ(a.op, "aten::mul");
  EXPECT_EQ(a.model, "mul_a");
  EXPECT_EQ(a.calls, 1u);  // the op's one range: with the model it spent most device time in
  EXPECT_EQ(a.device_ns, 6'000'000u);
  EXPECT_EQ(a.executions, 3u);
  EXPECT_EQ(a.device_histogram[6], 3u);
  EXPECT_EQ(a.device_histogram.size(), Metrics::DeviceBuckets().size() + 1);
  const Metrics::FleetRow& b = rows[2];
  EXPECT_EQ(b.model, "mul_b");
  EXPECT_EQ(b.calls, 0u);
  EXPECT_EQ(b.device_ns, 2'000'000u);
  EXPECT_EQ(b.executions, 1u);
  EXPECT_TRUE(m.TakeFleetRows().empty());
}

// A window of a data-parallel job: `ranks` processes (`cc_job --rank R --ranks N`), each with
// `steps` collectives, a barrier then a running each; rank `slow` comes last, so it waits
// `fast_wait_ns` and every other rank `slow_wait_ns` per collective.
constexpr uint64_t kFastWaitNs = 40'000, kSlowWaitNs = 3'000'000, kRunningNs = 200'000;
Trace JobWindow(int ranks, int steps, int slow) {
  Trace t;
  for (int r = 0; r < ranks; ++r) {
    ProcessTrace p;
    p.pid = 100 + r;
    p.executable = "/opt/bin/cc_job";
    p.command_line = {"/opt/bin/cc_job", "--rank", std::to_string(r), "--ranks",
                      std::to_string(ranks)};
    for (int s = 0; s < steps; ++s) {
      DeviceEvent barrier;
      barrier.id = 2 * s + 1;
      barrier.kind = DeviceEventKind::kCollective;
      barrier.name = kCcExecBarrier;
      barrier.model_name = "all_reduce";
      barrier.start_ns = 10'000'000ull * s;
      barrier.duration_ns = r == slow ? kFastWaitNs : kSlowWaitNs;
      barrier.nrta_seq = s + 1;
      DeviceEvent running = barrier;
      running.id = 2 * s + 2;
      running.name = kCcRunning;
      running.start_ns = barrier.start_ns + barrier.duration_ns;
      running.duration_ns = kRunningNs;
      p.device.push_back(barrier);
      p.device.push_back(running);
    }
    t.processes.push_back(p);
  }
  return t;
}

// The value of the series that starts with `series` ("name{labels}"), or -1.
double Value(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

// Prometheus sees each rank's collective wait: the late rank's is the least, the others wait
// for it; the runnings are not wait; folds add up.
TEST(MetricsTest, CollectiveWaitPerRankNamesTheLateRankByTheLeastWait) {
  constexpr int kRanks = 4, kSteps = 5, kSlow = 2;
  Metrics m;
  m.Add(JobWindow(kRanks, kSteps, kSlow));
  m.Add(JobWindow(kRanks, kSteps, kSlow));
  const std::string text = m.Render(nrtprof::StatusReply());
  EXPECT_TRUE(absl::StrContains(text, "# TYPE nrtprof_collective_wait_seconds_total counter\n"));
  for (int r = 0; r < kRanks; ++r) {
    const std::string labels =
        absl::StrCat("{pid=\"", 100 + r, "\",executable=\"cc_job\",rank=\"", r, "\"}");
    EXPECT_EQ(Value(text, "nrtprof_collectives_total" + labels), 2 * kSteps) << text;
    EXPECT_NEAR(Value(text, "nrtprof_collective_wait_seconds_total" + labels),
                2 * kSteps * (r == kSlow ? kFastWaitNs : kSlowWaitNs) / 1e9, 1e-9)
        << labels;
  }
}

TEST(MetricsTest, CollectiveWaitOfAProcessThatDoesNotSayItsRank) {
  Metrics m;
  Trace t = JobWindow(1, 1, -1);
  t.processes[0].command_line = {"train"};
  m.Add(t);
  const std::string text = m.Render(nrtprof::StatusReply());
  EXPECT_TRUE(absl::StrContains(
      text, "nrtprof_collectives_total{pid=\"100\",executable=\"cc_job\",rank=\"unknown\"} 1\n"))
      << text;
  // A process without collectives has no series.
  Metrics none;
  none.Add(OneWindow("/opt/app/train"));
  EXPECT_FALSE(
      absl::StrContains(none.Render(nrtprof::StatusReply()), "nrtprof_collectives_total{"));
}

TEST(MetricsTest, FleetRankRowsCarryRankJobAndWaitAndAreTakenOnce) {
  constexpr int kRanks = 3, kSteps = 4, kSlow = 1;
  Metrics m;
  m.Add(JobWindow(kRanks, kSteps, kSlow));  // before KeepFleetRows: no rows
  EXPECT_TRUE(m.TakeFleetRankRows().empty());
  m.KeepFleetRows(true);
  m.Add(JobWindow(kRanks, kSteps, kSlow));
  const std::vector<Metrics::FleetRankRow> rows = m.TakeFleetRankRows();
  ASSERT_EQ(rows.size(), static_cast<size_t>(kRanks));
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(rows[r].pid, std::to_string(100 + r));
    EXPECT_EQ(rows[r].executable, "cc_job");
    EXPECT_EQ(rows[r].rank, r);
    EXPECT_EQ(rows[r].job, absl::StrCat("cc_job --ranks ", kRanks));
    EXPECT_EQ(rows[r].collectives, static_cast<uint64_t>(kSteps));
    EXPECT_EQ(rows[r].wait_ns, kSteps * (r == kSlow ? kFastWaitNs : kSlowWaitNs));
  }
  EXPECT_TRUE(m.TakeFleetRankRows().empty());

  // A process that names its job (NRTPROF_JOB, NEURON_RT_ROOT_COMM_ID) is of that job.
  Metrics named;
  named.KeepFleetRows(true);
  Trace t = JobWindow(kRanks, kSteps, kSlow);
  for (ProcessTrace& p : t.processes) p.job = "10.0.0.7:7000";
  named.Add(t);
  const std::vector<Metrics::FleetRankRow> named_rows = named.TakeFleetRankRows();
  ASSERT_EQ(named_rows.size(), static_cast<size_t>(kRanks));
  for (const Metrics::FleetRankRow& row : named_rows) EXPECT_EQ(row.job, "10.0.0.7:7000");
}

}  // namespace
}  // namespace nrtprof::daemon
