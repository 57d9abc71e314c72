#include "trace/trace_lanes.h"

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trace/writer_test_util.h"

namespace nrtprof::daemon {
namespace {

// Checks what a viewer needs: begins in time order, every end matching the innermost open
// slice, every slice inside the one it begins in.
void ExpectWellNested(const std::vector<NestInterval>& iv, const std::vector<size_t>& order) {
  ASSERT_EQ(order.size(), iv.size());
  std::vector<size_t> open;
  uint64_t last = 0;
  for (size_t i : order) {
    const NestInterval& v = iv[i];
    ASSERT_LE(v.start_ns, v.end_ns);
    ASSERT_GE(v.start_ns, last) << "begins out of order";
    last = v.start_ns;
    while (!open.empty() && iv[open.back()].end_ns <= v.start_ns) open.pop_back();
    if (!open.empty()) {
      EXPECT_GE(v.start_ns, iv[open.back()].start_ns);
      EXPECT_LE(v.end_ns, iv[open.back()].end_ns) << "slice " << i << " outlasts its parent";
    }
    open.push_back(i);
  }
}

TEST(NestIntervalsTest, ChildOutlastingItsParentIsClamped) {
  std::vector<NestInterval> iv = {{100, 200, 1, 0}, {150, 210, 2, 1}};
  auto order = NestIntervals(&iv);
  EXPECT_EQ(order, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(iv[1].start_ns, 150u);
  EXPECT_EQ(iv[1].end_ns, 200u);
  ExpectWellNested(iv, order);
}

TEST(NestIntervalsTest, ChildStartingBeforeItsParentIsClamped) {
  std::vector<NestInterval> iv = {{100, 200, 1, 0}, {95, 150, 2, 1}};
  auto order = NestIntervals(&iv);
  EXPECT_EQ(order, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(iv[1].start_ns, 100u);
  EXPECT_EQ(iv[1].end_ns, 150u);
}

TEST(NestIntervalsTest, EqualTimesPutTheParentOutside) {
  // Child listed first, same interval as its parent: the parent must still begin first.
  std::vector<NestInterval> iv = {{100, 200, 2, 1}, {100, 200, 1, 0}, {100, 100, 3, 2}};
  auto order = NestIntervals(&iv);
  EXPECT_EQ(order, (std::vector<size_t>{1, 0, 2}));
  ExpectWellNested(iv, order);
}

TEST(NestIntervalsTest, OverlappingSiblingsDoNotNest) {
  // Two host calls overlapping by 1 ns of clock noise: the second starts when the first ends.
  std::vector<NestInterval> iv = {{100, 200, 0, 0}, {199, 300, 0, 0}};
  auto order = NestIntervals(&iv);
  EXPECT_EQ(iv[0].end_ns, 200u);
  EXPECT_EQ(iv[1].start_ns, 200u);
  EXPECT_EQ(iv[1].end_ns, 300u);
  ExpectWellNested(iv, order);
}

TEST(NestIntervalsTest, BackToBackSlicesAreSiblings) {
  std::vector<NestInterval> iv = {{100, 200, 0, 0}, {200, 200, 0, 0}, {200, 300, 0, 0}};
  auto order = NestIntervals(&iv);
  ExpectWellNested(iv, order);
  EXPECT_EQ(iv[2].start_ns, 200u);
  EXPECT_EQ(iv[0].end_ns, 200u);
}

TEST(NestIntervalsTest, DeclaredChildFarFromItsParentKeepsItsTimes) {
  std::vector<NestInterval> iv = {{100, 200, 1, 0}, {500, 600, 2, 1}};
  auto order = NestIntervals(&iv);
  EXPECT_EQ(iv[1].start_ns, 500u);
  EXPECT_EQ(iv[1].end_ns, 600u);
  ExpectWellNested(iv, order);
}

TEST(NestIntervalsTest, ParentCyclesAreCut) {
  std::vector<NestInterval> iv = {{100, 200, 1, 2}, {120, 180, 2, 1}, {130, 150, 3, 3}};
  auto order = NestIntervals(&iv);
  ExpectWellNested(iv, order);
}

TEST(NestIntervalsTest, RandomInputAlwaysNests) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 500; ++round) {
    size_t n = 1 + rng() % 30;
    std::vector<NestInterval> iv(n);
    for (size_t i = 0; i < n; ++i) {
      iv[i].start_ns = rng() % 100;
      iv[i].end_ns = iv[i].start_ns + rng() % 40;
      iv[i].id = i + 1;
      iv[i].parent_id = rng() % 3 == 0 ? 0 : 1 + rng() % n;
    }
    auto order = NestIntervals(&iv);
    ExpectWellNested(iv, order);
    // LaneEdges replays the same nesting: one begin and one end per slice, ends match.
    Lane lane;
    for (size_t i : order) {
      LaneSlice s;
      s.start_ns = iv[i].start_ns;
      s.end_ns = iv[i].end_ns;
      lane.slices.push_back(s);
    }
    std::vector<size_t> open;
    uint64_t last = 0;
    size_t begins = 0;
    for (const SliceEdge& e : LaneEdges(lane)) {
      ASSERT_GE(e.ts, last);
      last = e.ts;
      if (e.begin) {
        ++begins;
        open.push_back(e.slice);
      } else {
        ASSERT_FALSE(open.empty());
        ASSERT_EQ(open.back(), e.slice);
        open.pop_back();
      }
    }
    EXPECT_EQ(begins, n);
    EXPECT_TRUE(open.empty());
  }
}

Trace OneProcess() {
  Trace t;
  t.capture_id = "cap";
  ProcessTrace p;
  p.pid = 10;
  p.ranges.push_back({1, "step", 11, 1000, 1000, 0, 0});
  ApiCall call;
  call.correlation_id = 77;
  call.name = "nrt_execute";
  call.tid = 11;
  call.start_ns = 1100;
  call.duration_ns = 500;
  call.range = 1;
  p.calls.push_back(call);
  ApiCall write = call;
  write.correlation_id = 78;
  write.name = "nrt_tensor_write";
  write.start_ns = 1700;
  write.duration_ns = 100;
  write.range = 0;
  p.calls.push_back(write);
  DeviceEvent exec;
  exec.id = 5;
  exec.name = "nc_exec_running";
  exec.start_ns = 1200;
  exec.duration_ns = 300;
  exec.correlation_id = 77;
  p.device.push_back(exec);
  DeviceEvent io = exec;
  io.id = 6;
  io.kind = DeviceEventKind::kDma;
  io.name = "dma_hbm_to_sbuf";
  io.parent = 5;
  io.duration_ns = 10;
  p.device.push_back(io);
  t.processes.push_back(p);
  return t;
}

TEST(BuildLanesTest, FlowRunsFromRangeThroughCallToExecution) {
  Trace t = OneProcess();
  TraceLanes lanes = BuildLanes(t);
  ASSERT_EQ(lanes.processes.size(), 1u);
  const ProcessLanes& p = lanes.processes[0];
  ASSERT_EQ(p.threads.size(), 1u);
  ASSERT_EQ(p.cores.size(), 1u);
  const LaneSlice& range = p.threads[0].framework.slices[0];
  const LaneSlice& call = p.threads[0].runtime.slices[0];
  const LaneSlice& exec = p.cores[0].executions.slices[0];
  ASSERT_EQ(range.flow_ids.size(), 1u);
  EXPECT_EQ(call.flow_ids, range.flow_ids);
  EXPECT_EQ(exec.terminating_flow_ids, range.flow_ids);
  // A call with nothing before or after it draws no arrow; an I/O DMA is not a flow step.
  const LaneSlice& write = p.threads[0].runtime.slices[1];
  EXPECT_TRUE(write.flow_ids.empty());
  EXPECT_TRUE(write.terminating_flow_ids.empty());
  EXPECT_TRUE(p.cores[0].dma.slices[0].flow_ids.empty());
  EXPECT_TRUE(p.cores[0].dma.slices[0].terminating_flow_ids.empty());
  EXPECT_EQ(lanes.first_ns, 1000u);
}

// Events out of begin order in their lists, correlation ids far apart, and a call's two
// executions listed in the opposite order to their starts: each arrow still joins the right
// slices, in time order.
TEST(BuildLanesTest, FlowsFollowTheirSlicesWhateverTheOrderOfEventsAndIds) {
  Trace t;
  ProcessTrace p;
  p.pid = 10;
  auto call = [](uint64_t correlation_id, const char* name, uint64_t start_ns) {
    ApiCall c;
    c.correlation_id = correlation_id;
    c.name = Name::Lasting(name);
    c.tid = 11;
    c.start_ns = start_ns;
    c.duration_ns = 100;
    return c;
  };
  auto execution = [](uint64_t id, const char* name, int32_t nc, uint64_t start_ns,
                      uint64_t correlation_id) {
    DeviceEvent e;
    e.id = id;
    e.name = Name::Lasting(name);
    e.nc_idx = nc;
    e.start_ns = start_ns;
    e.duration_ns = 50;
    e.correlation_id = correlation_id;
    return e;
  };
  const ApiCall late = call(1'000'000'000'000, "nrt_execute", 5000);
  const ApiCall early = call(3, "nrt_tensor_read", 1000);
  p.calls = {late, early};
  const DeviceEvent second = execution(10, "second", 0, 5300, late.correlation_id);  // first here
  const DeviceEvent first = execution(11, "first", 1, 5200, late.correlation_id);
  const DeviceEvent read = execution(12, "read", 0, 1050, early.correlation_id);
  p.device = {second, first, read};
  t.processes.push_back(p);

  const TraceLanes lanes = BuildLanes(t);
  ASSERT_EQ(lanes.processes.size(), 1u);
  const ProcessLanes& out = lanes.processes[0];
  ASSERT_EQ(out.threads.size(), 1u);
  ASSERT_EQ(out.cores.size(), 2u);
  const auto& calls = out.threads[0].runtime.slices;
  const auto& core0 = out.cores[0].executions.slices;
  const auto& core1 = out.cores[1].executions.slices;
  ASSERT_EQ(calls.size(), 2u);
  ASSERT_EQ(core0.size(), 2u);
  ASSERT_EQ(core1.size(), 1u);
  // Each lane in begin order.
  EXPECT_EQ(calls[0].name.view(), "nrt_tensor_read");
  EXPECT_EQ(calls[1].name.view(), "nrt_execute");
  EXPECT_EQ(core0[0].name.view(), "read");
  EXPECT_EQ(core0[1].name.view(), "second");
  EXPECT_EQ(core1[0].name.view(), "first");
  EXPECT_EQ(lanes.flows, 2u);
  // The read: call -> its transfer.
  ASSERT_EQ(calls[0].flow_ids.size(), 1u);
  EXPECT_EQ(core0[0].terminating_flow_ids, calls[0].flow_ids);
  EXPECT_TRUE(core0[0].flow_ids.empty());
  // The execute: call -> the execution that started first -> the one that started second.
  ASSERT_EQ(calls[1].flow_ids.size(), 1u);
  EXPECT_NE(calls[1].flow_ids, calls[0].flow_ids);
  EXPECT_EQ(core1[0].flow_ids, calls[1].flow_ids);
  EXPECT_TRUE(core1[0].terminating_flow_ids.empty());
  EXPECT_EQ(core0[1].terminating_flow_ids, calls[1].flow_ids);
  EXPECT_TRUE(core0[1].flow_ids.empty());
}

TEST(BuildLanesTest, CaptureArgsCarryEveryDropCounter) {
  Trace t = OneProcess();
  t.processes[0].drops.ring_full = 3;
  t.processes[0].drops.oversized = 1;
  std::vector<SliceArg> args = CaptureArgs(t, t.processes[0]);
  std::map<std::string, uint64_t> counters;
  for (const SliceArg& a : args) {
    if (a.type == SliceArg::Type::kUint) counters[a.name] = a.uint_value;
  }
  EXPECT_EQ(counters["drops.total"], 4u);
  EXPECT_EQ(counters["drops.ring_full"], 3u);
  EXPECT_EQ(counters["drops.oversized"], 1u);
  EXPECT_EQ(counters.count("drops.daemon_away"), 1u);
  EXPECT_EQ(counters.count("drops.spool_full"), 1u);
  EXPECT_EQ(counters.count("drops.device_overwritten"), 1u);
}

// What a slice's arguments say, as text.
std::map<std::string, std::string> ArgsOf(const LaneSlice& s) {
  std::map<std::string, std::string> args;
  std::vector<SliceArg> list;
  std::string text;
  SliceArgs(s, &list, &text);
  for (const SliceArg& a : list) {
    args[a.name] = a.type == SliceArg::Type::kString ? std::string(a.string_value)
                   : a.type == SliceArg::Type::kUint ? std::to_string(a.uint_value)
                                                     : std::to_string(a.int_value);
  }
  return args;
}

TEST(BuildLanesTest, WorkInsideAnExecutionLeavesTheSharedArgumentsToIt) {
  Trace t = OneProcess();
  ProcessTrace& p = t.processes[0];
  DeviceEvent& exec = p.device[0];
  exec.model_name = "mlp";
  exec.exec_id = 9;
  exec.submitting_tid = 11;
  DeviceEvent& io = p.device[1];
  io.model_name = "mlp";
  io.exec_id = 9;
  io.submitting_tid = 11;
  io.bytes = 4096;
  io.tensor_name = "input";
  DeviceEvent op = exec;
  op.id = 7;
  op.kind = DeviceEventKind::kEngineOp;
  op.name = "mul";
  op.engine = "vector";
  op.parent = 5;
  op.start_ns = 1250;
  op.duration_ns = 20;
  p.device.push_back(op);
  DeviceEvent orphan = op;  // its execution was lost: nothing to share with
  orphan.id = 8;
  orphan.parent = 0;
  orphan.start_ns = 1600;
  p.device.push_back(orphan);

  TraceLanes lanes = BuildLanes(t);
  const CoreLanes& core = lanes.processes[0].cores[0];
  ASSERT_EQ(core.executions.slices.size(), 3u);
  EXPECT_EQ(ArgsOf(core.executions.slices[0]),
            (std::map<std::string, std::string>{{"model", "mlp"},
                                                {"exec_id", "9"},
                                                {"correlation_id", "77"},
                                                {"submitting_tid", "11"}}));
  EXPECT_EQ(ArgsOf(core.executions.slices[1]),
            (std::map<std::string, std::string>{{"engine", "vector"}}));
  EXPECT_EQ(ArgsOf(core.executions.slices[2]),
            (std::map<std::string, std::string>{{"model", "mlp"},
                                                {"exec_id", "9"},
                                                {"engine", "vector"},
                                                {"correlation_id", "77"},
                                                {"submitting_tid", "11"}}));
  // A DMA of the execution is on the DMA track, away from it: its exec_id says whose it is.
  EXPECT_EQ(ArgsOf(core.dma.slices[0]),
            (std::map<std::string, std::string>{
                {"exec_id", "9"}, {"bytes", "4096"}, {"tensor", "input"}}));
}

// The async API's work: on a lane per execution unit's queue of its core, named for what ran
// there; synchronous work where it always was.
TEST(BuildLanesTest, AsyncWorkIsOnItsQueuesLanes) {
  const Trace t = AsyncTrace();
  const TraceLanes lanes = BuildLanes(t);
  ASSERT_EQ(lanes.processes[0].cores.size(), 1u);
  const CoreLanes& core = lanes.processes[0].cores[0];
  ASSERT_EQ(core.queues.size(), 2u);
  const Lane& compute = core.queues[0];
  const Lane& tensor_ops = core.queues[1];
  EXPECT_EQ(LaneName(compute), "compute queue (XU 1)");
  EXPECT_EQ(LaneName(tensor_ops), "tensor-op queue (XU 2)");
  std::vector<std::string> names;
  for (const LaneSlice& s : compute.slices) names.push_back(std::string(s.name.view()));
  EXPECT_EQ(names, (std::vector<std::string>{"nc_exec_running", "matmul", "nc_exec_running",
                                             "nc_exec_running"}));
  ASSERT_EQ(tensor_ops.slices.size(), 1u);
  EXPECT_EQ(tensor_ops.slices[0].name.view(), "dma_h2d");
  // The synchronous execution stays on the core's executions lane.
  ASSERT_EQ(core.executions.slices.size(), 1u);
  EXPECT_EQ(core.executions.slices[0].start_ns, 2720'000u);
  EXPECT_TRUE(core.dma.slices.empty());
}

TEST(BuildLanesTest, AsyncFlowsRunFromTheOpThroughTheScheduleCallToItsWork) {
  const Trace t = AsyncTrace();
  const TraceLanes lanes = BuildLanes(t);
  const ProcessLanes& p = lanes.processes[0];
  const LaneSlice& range = p.threads[0].framework.slices[0];
  const auto& calls = p.threads[0].runtime.slices;
  const auto& compute = p.cores[0].queues[0].slices;
  ASSERT_EQ(calls[1].name.view(), "nrta_execute_schedule");
  ASSERT_EQ(calls[1].flow_ids.size(), 1u);
  // forward -> the first schedule call -> its execution, on the compute queue's lane.
  const uint64_t flow = calls[1].flow_ids[0];
  EXPECT_NE(std::find(range.flow_ids.begin(), range.flow_ids.end(), flow), range.flow_ids.end());
  EXPECT_EQ(compute[0].terminating_flow_ids, (absl::InlinedVector<uint64_t, 1>{flow}));
  // ... and the transfer's, to the tensor-op queue's lane.
  ASSERT_EQ(calls[0].flow_ids.size(), 1u);
  EXPECT_EQ(p.cores[0].queues[1].slices[0].terminating_flow_ids, calls[0].flow_ids);
}

// A collective's barrier and running are two slices, one after the other, on the collectives
// queue's lane of the rank's core, reached from the op by one flow through the schedule call;
// its request is in flight until the running ends.
TEST(BuildLanesTest, ACollectivesBarrierAndRunningAreOnItsCollectivesQueue) {
  const Trace t = CollectivesTrace();
  const TraceLanes lanes = BuildLanes(t);
  ASSERT_EQ(lanes.processes.size(), 2u);
  for (const ProcessLanes& p : lanes.processes) {
    SCOPED_TRACE(p.process->pid);
    ASSERT_EQ(p.cores.size(), 1u);
    const CoreLanes& core = p.cores[0];
    EXPECT_TRUE(core.executions.slices.empty());
    ASSERT_EQ(core.queues.size(), 1u);
    const Lane& queue = core.queues[0];
    EXPECT_EQ(LaneName(queue), "collectives queue (XU 32)");
    ASSERT_EQ(queue.slices.size(), 2u);
    EXPECT_EQ(queue.slices[0].name.view(), "cc_exec_barrier");
    EXPECT_EQ(queue.slices[1].name.view(), "cc_running");
    EXPECT_EQ(queue.slices[0].end_ns, queue.slices[1].start_ns);
    const auto& call = p.threads[0].runtime.slices[0];
    ASSERT_EQ(call.flow_ids.size(), 1u);
    EXPECT_EQ(queue.slices[0].flow_ids, call.flow_ids);
    EXPECT_EQ(queue.slices[1].terminating_flow_ids, call.flow_ids);
    std::vector<SliceArg> args;
    std::string text;
    SliceArgs(queue.slices[1], &args, &text);
    std::map<std::string, std::string> shown;
    for (const SliceArg& a : args) {
      shown[a.name] = a.type == SliceArg::Type::kString ? std::string(a.string_value)
                      : a.type == SliceArg::Type::kUint ? std::to_string(a.uint_value)
                                                        : std::to_string(a.int_value);
    }
    EXPECT_EQ(shown["collective"], "all_reduce");
    EXPECT_EQ(shown["bytes"], "4096");
    EXPECT_EQ(shown["worker_gid"], std::to_string(p.process->pid - 301));
    EXPECT_EQ(shown.count("queue_wait_ns"), 0u);  // it waited in the barrier
    ASSERT_EQ(core.in_flight.size(), 1u);
    EXPECT_EQ(core.in_flight[0].points.back().ts, 21030'000u);
    EXPECT_EQ(core.in_flight[0].points.back().value, 0);
  }
}

// Requests in flight per queue: +1 as each schedule call returns, -1 as its work ends; the
// schedule whose work is not in the capture is retired at the capture's end.
TEST(BuildLanesTest, InFlightCounterRisesToTheQueueDepthAndReturnsToZero) {
  const Trace t = AsyncTrace();
  const TraceLanes lanes = BuildLanes(t);
  const CoreLanes& core = lanes.processes[0].cores[0];
  ASSERT_EQ(core.in_flight.size(), 2u);
  EXPECT_EQ(QueueCounterName(core.in_flight[0]), "requests in flight (XU 1)");
  auto values = [](const QueueCounter& c) {
    std::vector<std::pair<uint64_t, int64_t>> v;
    for (const CounterPoint& p : c.points) v.emplace_back(p.ts / 1000, p.value);
    return v;
  };
  EXPECT_EQ(values(core.in_flight[0]),
            (std::vector<std::pair<uint64_t, int64_t>>{{1150, 1},
                                                       {1250, 2},
                                                       {1350, 3},
                                                       {1500, 2},
                                                       {1800, 1},
                                                       {2100, 0},
                                                       {2650, 1},
                                                       {3000, 0}}));
  EXPECT_EQ(values(core.in_flight[1]),
            (std::vector<std::pair<uint64_t, int64_t>>{{1050, 1}, {1200, 0}}));
}

// A request ends no later than the next one of its queue starts: a schedule whose work is
// missing retires there, not at the capture's end; work without its call is not counted.
TEST(BuildLanesTest, RequestsWithoutTheirWorkOrCallNeverLeaveTheCounterOff) {
  Trace t = AsyncTrace();
  ProcessTrace& p = t.processes[0];
  // #2's execution lost: #2 retires when #3's starts (1800). #1's call lost: not counted.
  p.device.erase(std::remove_if(p.device.begin(), p.device.end(),
                                [](const DeviceEvent& d) { return d.id == 63; }),
                 p.device.end());
  p.calls.erase(p.calls.begin() + 1);  // #1's schedule call, correlation id 21
  p.device[1].correlation_id = 0;      // ... and so its execution, id 61, uncorrelated
  ASSERT_EQ(p.device[1].id, 61u);
  const std::vector<AsyncRequest> requests = AsyncRequests(p);
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t, bool>> got;  // seq, from, to, has work
  for (const AsyncRequest& r : requests) {
    if (r.xu == 1) got.emplace_back(r.seq, r.scheduled_ns / 1000, r.retired_ns / 1000, r.device);
  }
  EXPECT_EQ(got, (std::vector<std::tuple<uint64_t, uint64_t, uint64_t, bool>>{
                     {2, 1250, 1800, false}, {3, 1350, 2100, true}, {4, 2650, 3000, false}}));
  const TraceLanes lanes = BuildLanes(t);
  const CoreLanes& core = lanes.processes[0].cores[0];
  EXPECT_EQ(core.in_flight[0].points.back().value, 0);
  for (const CounterPoint& point : core.in_flight[0].points) EXPECT_GE(point.value, 0);
}

TEST(BuildLanesTest, AsyncArgumentsSayTheRequestItsPollsAndItsQueueWait) {
  const Trace t = AsyncTrace();
  const TraceLanes lanes = BuildLanes(t);
  const ProcessLanes& p = lanes.processes[0];
  const auto& calls = p.threads[0].runtime.slices;
  std::map<std::string, std::string> schedule = ArgsOf(calls[2]);
  EXPECT_EQ(schedule["nrta_seq"], std::to_string(NrtaSeq(1, 2)));
  EXPECT_EQ(schedule["queue"], "1");
  EXPECT_EQ(schedule["seq"], "2");
  EXPECT_EQ(schedule.count("polls"), 0u);
  std::map<std::string, std::string> poll = ArgsOf(calls[4]);
  EXPECT_EQ(poll["polls"], "7");
  EXPECT_EQ(poll["seq"], "3");
  // The second execution started 250 us after its schedule call returned.
  std::map<std::string, std::string> exec = ArgsOf(p.cores[0].queues[0].slices[2]);
  EXPECT_EQ(exec["nrta_seq"], std::to_string(NrtaSeq(1, 2)));
  EXPECT_EQ(exec["queue_wait_ns"], "250000");
  EXPECT_EQ(exec["correlation_id"], "22");
  // Its engine op shares all that with it; a synchronous call has none of it.
  EXPECT_EQ(ArgsOf(p.cores[0].queues[0].slices[1]),
            (std::map<std::string, std::string>{{"engine", "tensor"}}));
  EXPECT_EQ(ArgsOf(calls[6]).count("nrta_seq"), 0u);
  EXPECT_EQ(ArgsOf(calls[6]).count("polls"), 0u);
}

}  // namespace
}  // namespace nrtprof::daemon
