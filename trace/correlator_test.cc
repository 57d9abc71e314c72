#include "trace/correlator.h"

#include <deque>
#include <map>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "proto/nrtprof.pb.h"
#include "trace/api_function.h"

namespace nrtprof::daemon {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kMs = 1000 * kUs;
// The device clock reads 1000 s more than the host's, as in the simulator.
constexpr uint64_t kDeviceOffset = 1000ull * 1000 * kMs;

// Builds what ingest would hand the correlator for one process.
class ProcessBuilder {
 public:
  explicit ProcessBuilder(uint32_t pid = 100) {
    capture_.hello.set_pid(pid);
    capture_.hello.set_executable("/bin/app");
  }

  uint32_t Str(const std::string& s) {
    if (s.empty()) return 0;
    auto [it, inserted] = ids_.emplace(s, static_cast<uint32_t>(ids_.size() + 1));
    if (inserted) capture_.strings[it->second] = s;
    return it->second;
  }

  IngestedEvent& Range(uint32_t tid, const std::string& name, uint64_t start, uint64_t dur) {
    IngestedEvent& e = Add(nrtprof::EVENT_RANGE, tid, name, start, dur);
    return e;
  }

  IngestedEvent& Call(uint32_t tid, const std::string& name, uint64_t start, uint64_t dur,
                      int32_t status = 0) {
    IngestedEvent& e = Add(nrtprof::EVENT_API_CALL, tid, name, start, dur);
    e.correlation_id = ++next_correlation_;
    e.status = status;
    e.nc_idx = -1;
    if (name == "nrt_execute") e.repeat = 1;
    return e;
  }

  IngestedEvent& Allocate(uint32_t tid, uint64_t handle, bool device, const std::string& tensor,
                          uint64_t start) {
    IngestedEvent& e = Call(tid, "nrt_tensor_allocate", start, 1 * kUs);
    e.call.tensor = handle;
    e.placement = device ? 0 : 1;
    e.nc_idx = device ? 0 : -1;
    e.tensor_name_iid = Str(tensor);
    return e;
  }

  // A transfer call on a tensor handle.
  IngestedEvent& Transfer(uint32_t tid, const std::string& name, uint64_t handle, uint64_t start,
                          uint64_t dur, uint64_t bytes = 4096) {
    IngestedEvent& e = Call(tid, name, start, dur);
    e.call.tensor = handle;
    e.bytes = bytes;
    return e;
  }

  IngestedEvent& Free(uint32_t tid, uint64_t handle, uint64_t start) {
    IngestedEvent& e = Call(tid, "nrt_tensor_free", start, 1 * kUs);
    e.call.tensor = handle;
    return e;
  }

  // Device events take host times here and are put on the device clock.
  IngestedEvent& Exec(uint32_t tid, uint64_t host_start, uint64_t dur, uint64_t device_id,
                      const std::string& model = "", int32_t nc = 0) {
    IngestedEvent& e =
        Add(nrtprof::EVENT_DEVICE_EXEC, tid, "nc_exec_running", host_start + kDeviceOffset, dur);
    e.device.id = device_id;
    e.nc_idx = nc;
    e.model_name_iid = Str(model);
    return e;
  }

  IngestedEvent& Op(uint32_t tid, uint64_t host_start, uint64_t dur, uint64_t device_id,
                    uint64_t parent) {
    IngestedEvent& e = Add(nrtprof::EVENT_DEVICE_OP, tid, "mul", host_start + kDeviceOffset, dur);
    e.device.id = device_id;
    e.device.parent = parent;
    e.nc_idx = 0;
    e.engine_iid = Str("vector");
    return e;
  }

  IngestedEvent& Dma(uint32_t tid, const std::string& name, uint64_t host_start, uint64_t dur,
                     uint64_t device_id, const std::string& tensor = "") {
    IngestedEvent& e = Add(nrtprof::EVENT_DEVICE_DMA, tid, name, host_start + kDeviceOffset, dur);
    e.device.id = device_id;
    e.nc_idx = 0;
    e.tensor_name_iid = Str(tensor);
    return e;
  }

  void Sync(int32_t nc, uint64_t host_ns, uint64_t offset = kDeviceOffset) {
    capture_.clock_syncs.push_back({nc, host_ns + offset, host_ns});
  }

  ProcessCapture Build() {
    ProcessCapture c = capture_;
    for (const IngestedEvent& e : events_) {
      c.events.push_back(e);
      const std::string& name = capture_.strings[e.name_iid];
      if (e.kind == nrtprof::EVENT_API_CALL &&
          (CallFunction(e.function, name) == nrtprof::API_NRT_TENSOR_ALLOCATE ||
           CallFunction(e.function, name) == nrtprof::API_NRT_TENSOR_FREE ||
           CallFunction(e.function, name) == nrtprof::API_NRT_LOAD)) {
        c.handle_events.push_back(e);
      }
    }
    if (c.clock_syncs.empty()) c.clock_syncs.push_back({0, kDeviceOffset, 0});
    return c;
  }

 private:
  IngestedEvent& Add(nrtprof::EventKind kind, uint32_t tid, const std::string& name, uint64_t start,
                     uint64_t dur) {
    IngestedEvent e;
    e.kind = kind;
    e.tid = tid;
    e.name_iid = Str(name);
    e.start_ns = start;
    e.duration_ns = dur;
    events_.push_back(e);
    return events_.back();
  }

  ProcessCapture capture_;
  std::map<std::string, uint32_t> ids_;
  std::deque<IngestedEvent> events_;  // stable references for the caller's tweaks
  uint64_t next_correlation_ = 0;
};

const ProcessTrace& OnlyProcess(const Trace& t) {
  EXPECT_EQ(t.processes.size(), 1u);
  return t.processes.at(0);
}

const ApiCall& CallNamed(const ProcessTrace& p, const std::string& name, int nth = 0) {
  for (const ApiCall& c : p.calls) {
    if (c.name == name && nth-- == 0) return c;
  }
  ADD_FAILURE() << "no call " << name;
  static const ApiCall kNone;
  return kNone;
}

// Device events of one kind, in host start order.
std::vector<const DeviceEvent*> Device(const ProcessTrace& p, const std::string& name) {
  std::vector<const DeviceEvent*> out;
  for (const DeviceEvent& d : p.device) {
    if (d.name == name) out.push_back(&d);
  }
  return out;
}

// A caller's cursor only saves lookups: each event maps through the sync point nearest it,
// whatever order the events come in (forward, back, jumping between cores, off either end).
TEST(ClockMapTest, ACursorMapsEveryEventAsALookupWouldInAnyOrder) {
  std::vector<ClockSyncPoint> syncs;
  for (uint64_t k = 0; k < 50; ++k) {
    syncs.push_back({0, 1'000'000 + k * 10'000, 5'000 + k * 10'003});
    syncs.push_back({1, 1'000'000 + k * 7'000, 9'000 + k * 6'998});
  }
  const ClockMap clock(syncs);
  std::vector<std::pair<int32_t, uint64_t>> events;
  for (uint64_t t = 900'000; t < 1'600'000; t += 1'234) events.push_back({0, t});
  for (uint64_t t = 1'400'000; t > 950'000; t -= 4'321) events.push_back({1, t});
  for (uint64_t t = 990'000; t < 1'500'000; t += 2'500) {
    events.push_back({static_cast<int32_t>(t / 2'500 % 2), t});
    events.push_back({2, t});  // no sync point of its own: all the cores'
  }
  events.push_back({0, 1'000'000 + 490'000});  // on a point exactly
  events.push_back({0, 1'000'000 + 5'000});    // halfway between two
  ClockMap::Cursor cursor;
  for (const auto& [nc, device_ns] : events) {
    uint64_t looked_up = 0, with_cursor = 1;
    ASSERT_TRUE(clock.ToHost(nc, device_ns, &looked_up));
    ASSERT_TRUE(clock.ToHost(nc, device_ns, &with_cursor, &cursor));
    EXPECT_EQ(with_cursor, looked_up) << "core " << nc << " at " << device_ns;
  }
  ClockMap::Cursor none_cursor;
  uint64_t host = 0;
  EXPECT_FALSE(ClockMap({}).ToHost(0, 1, &host, &none_cursor));
}

TEST(CorrelatorTest, ExecutionsMatchTheirCallsInOrderPerThread) {
  ProcessBuilder b;
  // Two threads interleaved in time; each thread's executions go to its own calls.
  b.Call(1, "nrt_execute", 0, 500 * kUs);
  b.Call(2, "nrt_execute", 100 * kUs, 500 * kUs);
  b.Call(1, "nrt_execute", 600 * kUs, 500 * kUs);
  b.Exec(1, 10 * kUs, 400 * kUs, 11);
  b.Op(1, 20 * kUs, 5 * kUs, 12, 11);
  b.Exec(2, 410 * kUs, 150 * kUs, 21);
  b.Exec(1, 610 * kUs, 400 * kUs, 31);
  const Trace t = Correlate("c1", {b.Build()}, 0);
  const ProcessTrace& p = OnlyProcess(t);
  const std::vector<const DeviceEvent*> execs = Device(p, "nc_exec_running");
  ASSERT_EQ(execs.size(), 3u);
  EXPECT_EQ(execs[0]->correlation_id, CallNamed(p, "nrt_execute", 0).correlation_id);
  EXPECT_EQ(execs[1]->correlation_id, CallNamed(p, "nrt_execute", 1).correlation_id);
  EXPECT_EQ(execs[2]->correlation_id, CallNamed(p, "nrt_execute", 2).correlation_id);
  EXPECT_EQ(execs[1]->submitting_tid, 2u);
  // The op inside the first execution carries its call's id and points at it.
  const std::vector<const DeviceEvent*> ops = Device(p, "mul");
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]->parent, execs[0]->id);
  EXPECT_EQ(ops[0]->correlation_id, execs[0]->correlation_id);
  EXPECT_EQ(ops[0]->engine, "vector");
  EXPECT_EQ(p.device_uncorrelated, 0u);
  // Mapped to the host clock.
  EXPECT_EQ(execs[0]->start_ns, 10 * kUs);
  EXPECT_EQ(t.start_ns, 0u);
  EXPECT_EQ(t.end_ns, 1100 * kUs);
}

// The explicit async API: many requests in flight, run by the runtime's threads (the device
// events' thread is not the scheduling one), and a schedule call that returns at once, long
// before its execution starts. Each execution and transfer goes to the schedule call with its
// nrta_seq_t — here the pairs by thread, count or time would all be wrong — and work whose
// schedule was before the window stays uncorrelated.
TEST(CorrelatorTest, AsyncWorkFindsItsScheduleCallByItsSequenceNumber) {
  ProcessBuilder b;
  constexpr uint64_t kCompute = uint64_t{1} << 48, kTensorOp = uint64_t{2} << 48;
  // Thread 1 schedules three executions; thread 2 two transfers and one execution.
  auto schedule = [&](uint32_t tid, const char* name, uint64_t start, uint64_t seq) {
    IngestedEvent& e = b.Call(tid, name, start, 2 * kUs);
    e.nrta_seq = seq;
    e.repeat = std::string(name) == "nrta_execute_schedule" ? 1 : 0;
  };
  schedule(1, "nrta_execute_schedule", 0, kCompute | 1);
  schedule(2, "nrta_tensor_write", 1 * kUs, kTensorOp | 1);
  schedule(1, "nrta_execute_schedule", 3 * kUs, kCompute | 2);
  schedule(2, "nrta_execute_schedule", 4 * kUs, kCompute | 3);
  schedule(2, "nrta_tensor_read", 5 * kUs, kTensorOp | 2);
  schedule(1, "nrta_execute_schedule", 6 * kUs, kCompute | 4);
  // The device runs them later, one after another per queue, on a thread of the runtime's.
  auto exec = [&](uint64_t start, uint64_t id, uint64_t seq) {
    b.Exec(99, start, 400 * kUs, id).nrta_seq = seq;
  };
  exec(400 * kUs, 1, kCompute | 0);  // scheduled before the window: no call here
  exec(800 * kUs, 2, kCompute | 1);
  exec(1200 * kUs, 3, kCompute | 2);
  exec(1600 * kUs, 4, kCompute | 3);
  exec(2000 * kUs, 5, kCompute | 4);
  b.Dma(98, "dma_h2d", 10 * kUs, 160 * kUs, 6).nrta_seq = kTensorOp | 1;
  b.Dma(98, "dma_d2h", 2400 * kUs, 160 * kUs, 7).nrta_seq = kTensorOp | 2;
  const Trace t = Correlate("c1", {b.Build()}, 0);
  const ProcessTrace& p = OnlyProcess(t);
  std::map<uint64_t, const ApiCall*> call_by_seq;
  for (const ApiCall& c : p.calls) call_by_seq[c.nrta_seq] = &c;
  int matched = 0;
  for (const DeviceEvent& d : p.device) {
    ASSERT_NE(d.nrta_seq, 0u);
    if (d.nrta_seq == (kCompute | 0)) {
      EXPECT_EQ(d.correlation_id, 0u) << "its schedule call is not in the capture";
      continue;
    }
    ASSERT_TRUE(call_by_seq.count(d.nrta_seq)) << d.nrta_seq;
    EXPECT_EQ(d.correlation_id, call_by_seq[d.nrta_seq]->correlation_id) << d.name;
    ++matched;
  }
  EXPECT_EQ(matched, 6);
  EXPECT_EQ(p.device_uncorrelated, 1u);
  // The execution's model and core come to the call as for nrt_execute.
  EXPECT_EQ(CallNamed(p, "nrta_execute_schedule", 0).nc_idx, 0);
}

// A collective's device events (the shim sends them as executions named as the runtime names
// them) are the collective's, not executions: each goes to its nrta_cc_schedule call by its
// sequence number, with the rank's worker_gid, and leaves the thread's nrt_execute its own.
TEST(CorrelatorTest, ACollectivesBarrierAndRunningGoToItsScheduleCall) {
  ProcessBuilder b;
  constexpr uint64_t kCc = uint64_t{32} << 48;
  b.Call(1, "nrt_execute", 0, 500 * kUs);
  b.Exec(1, 100 * kUs, 300 * kUs, 1, "fwd");
  IngestedEvent& schedule = b.Call(1, "nrta_cc_schedule", 600 * kUs, 5 * kUs);
  schedule.nrta_seq = kCc | 1;
  auto collective = [&](const char* name, uint64_t start, uint64_t dur, uint64_t id,
                        const std::string& op) {
    IngestedEvent& e = b.Exec(1, start, dur, id, op);
    e.name_iid = b.Str(name);
    e.nrta_seq = kCc | 1;
    e.worker_gid = 6;
    e.bytes = 4096;
  };
  collective("cc_exec_barrier", 606 * kUs, 20000 * kUs, 2, "");
  collective("cc_running", 20606 * kUs, 22 * kUs, 3, "all_reduce");
  const Trace t = Correlate("c1", {b.Build()}, 0);
  const ProcessTrace& p = OnlyProcess(t);
  const ApiCall& cc = CallNamed(p, "nrta_cc_schedule", 0);
  const ApiCall& exec = CallNamed(p, "nrt_execute", 0);
  ASSERT_EQ(p.device.size(), 3u);
  int collectives = 0;
  for (const DeviceEvent& d : p.device) {
    if (d.name == "nc_exec_running") {
      EXPECT_EQ(d.kind, DeviceEventKind::kExecution);
      EXPECT_EQ(d.correlation_id, exec.correlation_id);
      EXPECT_EQ(d.worker_gid, -1);
      continue;
    }
    ++collectives;
    EXPECT_EQ(d.kind, DeviceEventKind::kCollective) << d.name;
    EXPECT_EQ(d.correlation_id, cc.correlation_id) << d.name;
    EXPECT_EQ(d.worker_gid, 6) << d.name;
    EXPECT_EQ(d.bytes, 4096u) << d.name;
    EXPECT_EQ(d.model_name, d.name == "cc_running" ? "all_reduce" : "") << d.name;
  }
  EXPECT_EQ(collectives, 2);
  EXPECT_EQ(cc.nc_idx, 0);  // the core its collectives ran on
  EXPECT_EQ(p.device_uncorrelated, 0u);
}

// The queues count from 1 again after nrt_close and nrt_init: a number seen twice in one
// process goes to the latest of its calls that began before the work.
TEST(CorrelatorTest, ASequenceNumberUsedAgainAfterARestartFindsItsOwnRound) {
  ProcessBuilder b;
  const uint64_t seq = (uint64_t{1} << 48) | 1;
  for (uint64_t round_start : {uint64_t{0}, 10 * kMs}) {
    IngestedEvent& call = b.Call(1, "nrta_execute_schedule", round_start, 2 * kUs);
    call.nrta_seq = seq;
    b.Exec(99, round_start + 100 * kUs, 300 * kUs, round_start + 1).nrta_seq = seq;
  }
  const Trace t = Correlate("c1", {b.Build()}, 0);
  const ProcessTrace& p = OnlyProcess(t);
  const std::vector<const DeviceEvent*> execs = Device(p, "nc_exec_running");
  ASSERT_EQ(execs.size(), 2u);
  EXPECT_EQ(execs[0]->correlation_id, CallNamed(p, "nrta_execute_schedule", 0).correlation_id);
  EXPECT_EQ(execs[1]->correlation_id, CallNamed(p, "nrta_execute_schedule", 1).correlation_id);
}

// A completion poll is recorded once it sees its request done, with the polls before it.
TEST(CorrelatorTest, ARecordedPollKeepsHowManyPollsItStandsFor) {
  ProcessBuilder b;
  IngestedEvent& poll = b.Call(1, "nrta_is_completed", 50 * kUs, 0);
  poll.nrta_seq = (uint64_t{1} << 48) | 7;
  poll.function = nrtprof::API_NRTA_IS_COMPLETED;
  poll.repeat = 12345;  // as ingest keeps Event.polls
  const Trace t = Correlate("c1", {b.Build()}, 0);
  const ApiCall& c = CallNamed(OnlyProcess(t), "nrta_is_completed");
  EXPECT_EQ(c.polls, 12345u);
  EXPECT_EQ(c.repeat, 0u);
  EXPECT_EQ(c.nrta_seq, (uint64_t{1} << 48) | 7);
}

// A thread's polls after its last recorded one come as an event that is no call
// (Event.polls_only): counted in the process's poll tallies, not a call of the trace.
TEST(CorrelatorTest, PollsAfterTheLastRecordedOneAreATallyNotACall) {
  ProcessBuilder b;
  IngestedEvent& poll = b.Call(1, "nrta_is_completed", 50 * kUs, 0);
  poll.function = nrtprof::API_NRTA_IS_COMPLETED;
  poll.repeat = 3;
  IngestedEvent& tally = b.Call(1, "nrta_is_completed", 90 * kUs, 0);
  tally.function = nrtprof::API_NRTA_IS_COMPLETED;
  tally.repeat = 12345;
  tally.polls_only = true;
  const Trace t = Correlate("c1", {b.Build()}, 0);
  const ProcessTrace& p = OnlyProcess(t);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].polls, 3u);
  ASSERT_EQ(p.poll_tallies.size(), 1u);
  EXPECT_EQ(p.poll_tallies[0].name, "nrta_is_completed");
  EXPECT_EQ(p.poll_tallies[0].function, nrtprof::API_NRTA_IS_COMPLETED);
  EXPECT_EQ(p.poll_tallies[0].tid, 1u);
  EXPECT_EQ(p.poll_tallies[0].time_ns, 90 * kUs);
  EXPECT_EQ(p.poll_tallies[0].polls, 12345u);
}

// Work sent before its execution (batches carry device events in the order the runtime's
// trace returns them) still lands inside it, and the work of an execution that was lost stays
// uncorrelated; a consumed capture gives the same Trace as a borrowed one.
TEST(CorrelatorTest, WorkFindsItsExecutionWhateverTheOrderTheyCameIn) {
  ProcessBuilder b;
  b.Call(1, "nrt_execute", 0, 500 * kUs);
  b.Call(1, "nrt_execute", 600 * kUs, 500 * kUs);
  b.Op(1, 620 * kUs, 5 * kUs, 32, 31);  // before its execution
  b.Op(1, 20 * kUs, 5 * kUs, 12, 11);
  b.Exec(1, 10 * kUs, 400 * kUs, 11);
  b.Exec(1, 610 * kUs, 400 * kUs, 31);
  b.Op(1, 630 * kUs, 5 * kUs, 33, 99);  // its execution was lost
  const ProcessCapture capture = b.Build();
  const Trace t = Correlate("c", std::vector<ProcessCapture>{capture}, 0);
  const ProcessTrace& p = OnlyProcess(t);
  const std::vector<const DeviceEvent*> execs = Device(p, "nc_exec_running");
  const std::vector<const DeviceEvent*> ops = Device(p, "mul");
  ASSERT_EQ(execs.size(), 2u);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0]->parent, execs[0]->id);
  EXPECT_EQ(ops[0]->correlation_id, CallNamed(p, "nrt_execute", 0).correlation_id);
  EXPECT_EQ(ops[1]->parent, execs[1]->id);
  EXPECT_EQ(ops[1]->correlation_id, CallNamed(p, "nrt_execute", 1).correlation_id);
  EXPECT_EQ(ops[2]->parent, 0u);
  EXPECT_EQ(ops[2]->correlation_id, 0u);
  EXPECT_EQ(p.device_uncorrelated, 1u);

  const std::vector<ProcessCapture> kept{capture};
  const Trace borrowed = Correlate("c", kept, 0);
  EXPECT_EQ(kept[0].events.size(), 7u);  // borrowed: left as it was
  const ProcessTrace& q = OnlyProcess(borrowed);
  ASSERT_EQ(q.device.size(), p.device.size());
  for (size_t i = 0; i < p.device.size(); ++i) {
    EXPECT_EQ(q.device[i].id, p.device[i].id);
    EXPECT_EQ(q.device[i].parent, p.device[i].parent);
    EXPECT_EQ(q.device[i].correlation_id, p.device[i].correlation_id);
    EXPECT_EQ(q.device[i].start_ns, p.device[i].start_ns);
  }
}

// The device profile's ops and I/O DMA name their execution by core and exec_id (no
// device_parent_id): each lands in the execution with that exec_id on that core nearest in
// time, also when an exec_id comes again (a second nrt_init) or arrives before its execution.
TEST(CorrelatorTest, ProfileWorkFindsItsExecutionByCoreAndExecId) {
  ProcessBuilder b;
  b.Call(1, "nrt_execute", 0, 500 * kUs);
  b.Call(1, "nrt_execute", 600 * kUs, 500 * kUs);
  b.Call(1, "nrt_execute", 2000 * kUs, 500 * kUs);
  IngestedEvent& early_op = b.Op(1, 2020 * kUs, 5 * kUs, 0, 0);  // before its execution
  early_op.device.exec = 5;
  b.Exec(1, 10 * kUs, 400 * kUs, 11).device.exec = 5;
  b.Exec(1, 610 * kUs, 400 * kUs, 31).device.exec = 6;
  b.Exec(1, 2010 * kUs, 400 * kUs, 41).device.exec = 5;  // exec_id 5 again, after a restart
  b.Op(1, 20 * kUs, 5 * kUs, 0, 0).device.exec = 5;
  b.Dma(1, "dma_hbm_to_sbuf", 611 * kUs, 2 * kUs, 0, "x").device.exec = 6;
  b.Op(1, 3000 * kUs, 5 * kUs, 0, 0).device.exec = 7;  // no such execution
  const Trace t = Correlate("c", {b.Build()}, 0);
  const ProcessTrace& p = OnlyProcess(t);
  const std::vector<const DeviceEvent*> execs = Device(p, "nc_exec_running");
  const std::vector<const DeviceEvent*> ops = Device(p, "mul");
  const std::vector<const DeviceEvent*> dma = Device(p, "dma_hbm_to_sbuf");
  ASSERT_EQ(execs.size(), 3u);
  ASSERT_EQ(ops.size(), 3u);
  ASSERT_EQ(dma.size(), 1u);
  EXPECT_EQ(ops[0]->parent, execs[0]->id);
  EXPECT_EQ(ops[1]->parent, execs[2]->id);
  EXPECT_EQ(ops[1]->correlation_id, CallNamed(p, "nrt_execute", 2).correlation_id);
  EXPECT_EQ(dma[0]->parent, execs[1]->id);
  EXPECT_EQ(dma[0]->correlation_id, CallNamed(p, "nrt_execute", 1).correlation_id);
  EXPECT_EQ(ops[2]->parent, 0u);
  EXPECT_EQ(ops[2]->correlation_id, 0u);
  EXPECT_EQ(p.device_uncorrelated, 1u);
}

TEST(CorrelatorTest, ExecuteRepeatTakesRepeatExecutions) {
  ProcessBuilder b;
  b.Call(1, "nrt_execute_repeat", 0, 2 * kMs).repeat = 3;
  b.Call(1, "nrt_execute", 3 * kMs, 1 * kMs);
  for (int i = 0; i < 4; ++i) b.Exec(1, (i < 3 ? i * 600 : 3100) * kUs, 500 * kUs, 10 + i);
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  const std::vector<const DeviceEvent*> execs = Device(p, "nc_exec_running");
  ASSERT_EQ(execs.size(), 4u);
  const uint64_t repeat_id = CallNamed(p, "nrt_execute_repeat").correlation_id;
  EXPECT_EQ(execs[0]->correlation_id, repeat_id);
  EXPECT_EQ(execs[1]->correlation_id, repeat_id);
  EXPECT_EQ(execs[2]->correlation_id, repeat_id);
  EXPECT_EQ(execs[3]->correlation_id, CallNamed(p, "nrt_execute").correlation_id);
  EXPECT_EQ(CallNamed(p, "nrt_execute_repeat").repeat, 3u);
}

TEST(CorrelatorTest, FailedCallsCauseNoExecution) {
  ProcessBuilder b;
  b.Call(1, "nrt_execute", 0, 10 * kUs, /*status=*/3);  // NRT_INVALID_HANDLE
  b.Call(1, "nrt_execute", 20 * kUs, 500 * kUs);
  b.Exec(1, 30 * kUs, 400 * kUs, 1);
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  EXPECT_EQ(Device(p, "nc_exec_running")[0]->correlation_id,
            CallNamed(p, "nrt_execute", 1).correlation_id);
}

TEST(CorrelatorTest, LostExecutionsFallBackToContainmentWithoutGuessing) {
  ProcessBuilder b;
  // Four calls, but the ring overwrote the first execution: counts disagree. In-order
  // matching would shift every execution onto the wrong call.
  b.Call(1, "nrt_execute", 0, 500 * kUs);
  b.Call(1, "nrt_execute", 1 * kMs, 500 * kUs);
  b.Call(1, "nrt_execute", 2 * kMs, 500 * kUs);
  b.Call(1, "nrt_execute", 2600 * kUs, 500 * kUs);
  b.Exec(1, 1100 * kUs, 300 * kUs, 2);  // inside call 1
  b.Op(1, 1200 * kUs, 10 * kUs, 5, 2);
  // Outside every call, within 1 ms of calls 2 and 3, both still short of an execution:
  // ambiguous, so left alone, with the op inside it.
  b.Exec(1, 2520 * kUs, 50 * kUs, 4);
  b.Op(1, 2530 * kUs, 10 * kUs, 6, 4);
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  const std::vector<const DeviceEvent*> execs = Device(p, "nc_exec_running");
  ASSERT_EQ(execs.size(), 2u);
  EXPECT_EQ(execs[0]->correlation_id, CallNamed(p, "nrt_execute", 1).correlation_id);
  EXPECT_EQ(execs[1]->correlation_id, 0u);
  EXPECT_EQ(Device(p, "mul")[0]->correlation_id, execs[0]->correlation_id);
  EXPECT_EQ(Device(p, "mul")[1]->correlation_id, 0u);
  EXPECT_EQ(p.device_uncorrelated, 2u);
}

const std::vector<std::string>& ThreeModels() {
  static const std::vector<std::string> kModels = {"model_a", "model_b", "model_c"};
  return kModels;
}

// A window's six calls of models a, b, c in turn from `first`, 455 us apart, each with its
// execution `offset` into it -- but the last, whose execution has not come yet.
void SixCallsOfThreeModels(ProcessBuilder* b, uint64_t first, uint64_t offset) {
  for (uint64_t k = 0; k < 6; ++k) {
    const uint64_t start = first + 455 * kUs * k;
    b->Call(1, "nrt_execute", start, 450 * kUs).call.model = 1 + k % 3;
    if (k < 5) b->Exec(1, start + offset, 360 * kUs, 101 + k, ThreeModels()[k % 3]);
  }
}

// The `early` executions before the window have no call; each call after them has its own.
void ExpectEachCallHasItsOwn(const ProcessTrace& p, size_t early) {
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(CallNamed(p, "nrt_execute", k).model_name, k < 5 ? ThreeModels()[k % 3] : "")
        << "call " << k;
  }
  const std::vector<const DeviceEvent*> execs = Device(p, "nc_exec_running");
  ASSERT_EQ(execs.size(), early + 5);
  for (size_t k = 0; k < execs.size(); ++k) {
    EXPECT_EQ(execs[k]->correlation_id,
              k < early ? 0u : CallNamed(p, "nrt_execute", k - early).correlation_id)
        << "execution " << k;
  }
  EXPECT_EQ(p.device_uncorrelated, early);
}

// Issue 36: a `capture --last` window of a program running models a, b, c in turn held the
// execution of a call made before the window (its first event) and none for its last call (not
// fetched yet): the counts agreed, and pairing in order gave each call the execution of the call
// before it, so every execution, flow arrow and device trace went to the previous model.
TEST(CorrelatorTest, CountsThatAgreeByChanceAtAWindowsEdgesDoNotShiftThePairs) {
  ProcessBuilder b;
  b.Exec(1, 50 * kUs, 350 * kUs, 100, ThreeModels()[2]);  // its call was before the window
  SixCallsOfThreeModels(&b, 455 * kUs, 40 * kUs);
  ExpectEachCallHasItsOwn(OnlyProcess(Correlate("c", {b.Build()}, 0)), 1);
}

// The same window with one more execution from before it: the counts disagree, and
// containment decides. Taken in order, the first early execution lay within the slack of the
// window's first call and took it, and every execution after it took the next call.
TEST(CorrelatorTest, AnExecutionBeforeTheWindowTakesNoCallThatHoldsAnother) {
  ProcessBuilder b;
  const uint64_t first = 1 * kMs;
  b.Exec(1, first - 896 * kUs, 365 * kUs, 98, ThreeModels()[1]);
  b.Exec(1, first - 446 * kUs, 367 * kUs, 99, ThreeModels()[2]);
  SixCallsOfThreeModels(&b, first, 6 * kUs);
  ExpectEachCallHasItsOwn(OnlyProcess(Correlate("c", {b.Build()}, 0)), 2);
}

// A device trace without its .neff says why (issue 36: five of six captures held device traces
// whose model file was not there, and said nothing).
TEST(CorrelatorTest, ExecutionsOfAModelWithoutItsFileSayWhy) {
  ProcessBuilder b;
  b.Call(1, "nrt_execute", 1 * kMs, 450 * kUs).call.model = 1;
  b.Exec(1, 1 * kMs + 6 * kUs, 367 * kUs, 11, "model_a");
  b.Call(1, "nrt_execute", 2 * kMs, 450 * kUs).call.model = 2;
  b.Exec(1, 2 * kMs + 6 * kUs, 367 * kUs, 12, "model_big");
  b.Exec(1, 5 * kMs, 367 * kUs, 13, "model_before");  // its call was before the window
  ProcessCapture c = b.Build();
  c.models.push_back({1, {"", "NEFF model_a", 0}});
  c.models.push_back({2, {"", "", 1ull << 30}});  // over the shim's limit: its size only
  const ProcessTrace p = OnlyProcess(Correlate("c", {c}, 0));
  ASSERT_EQ(p.models.size(), 2u);
  EXPECT_EQ(p.models[0].name, "model_a");
  EXPECT_EQ(p.models[1].name, "model_big");
  ASSERT_EQ(p.notices.size(), 2u);
  EXPECT_EQ(p.notices[0],
            "model files of 1 model (model_big): over the shim's size limit "
            "(NRTPROF_MAX_MODEL_BYTES), so their device traces have no .neff beside them");
  EXPECT_EQ(p.notices[1],
            "model files of 1 model (model_before): not received, or no call in the window tied "
            "them to a loaded file (their executions here were called before it), so their "
            "device traces have no .neff beside them");

  // The metrics' copy leaves the files out on purpose: nothing to say, nothing to look for.
  c.model_bytes_left_out = true;
  EXPECT_TRUE(OnlyProcess(Correlate("c", {c}, 0)).notices.empty());
}

TEST(CorrelatorTest, ContainmentUsesWhatIsLeftOfEachCall) {
  ProcessBuilder b;
  b.Call(1, "nrt_execute", 1 * kMs, 500 * kUs);
  b.Call(1, "nrt_execute", 2 * kMs, 500 * kUs);
  b.Call(1, "nrt_execute", 2600 * kUs, 500 * kUs);
  b.Exec(1, 2100 * kUs, 300 * kUs, 3);  // inside call 1
  // Within 1 ms of calls 1 and 2, but call 1 has had its one execution.
  b.Exec(1, 2520 * kUs, 50 * kUs, 4);
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  const std::vector<const DeviceEvent*> execs = Device(p, "nc_exec_running");
  EXPECT_EQ(execs[0]->correlation_id, CallNamed(p, "nrt_execute", 1).correlation_id);
  EXPECT_EQ(execs[1]->correlation_id, CallNamed(p, "nrt_execute", 2).correlation_id);
}

TEST(CorrelatorTest, ContainmentAllowsOneMillisecondOfSlack) {
  ProcessBuilder b;
  b.Call(1, "nrt_execute", 0, 500 * kUs);
  b.Call(1, "nrt_execute", 10 * kMs, 500 * kUs);
  // One execution for two calls; it ends 0.3 ms after the second call (clock error).
  b.Exec(1, 10100 * kUs, 700 * kUs, 1);
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  EXPECT_EQ(Device(p, "nc_exec_running")[0]->correlation_id,
            CallNamed(p, "nrt_execute", 1).correlation_id);
}

TEST(CorrelatorTest, ModelNamesThatDisagreePreventAMatch) {
  ProcessBuilder b;
  IngestedEvent& load = b.Call(1, "nrt_load", 0, 10 * kUs);
  load.call.model = 5;
  load.model_name_iid = b.Str("aten_mul");
  b.Call(1, "nrt_execute", 100 * kUs, 500 * kUs).call.model = 5;
  b.Exec(1, 110 * kUs, 400 * kUs, 1, "aten_add");  // not the model the call ran
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  EXPECT_EQ(Device(p, "nc_exec_running")[0]->correlation_id, 0u);
  EXPECT_EQ(CallNamed(p, "nrt_execute").model_name, "aten_mul");
}

TEST(CorrelatorTest, TransfersFollowTensorPlacementThroughHandleReuse) {
  ProcessBuilder b;
  b.Allocate(1, 0x10, /*device=*/true, "eps", 0);
  b.Transfer(1, "nrt_tensor_write", 0x10, 10 * kUs, 200 * kUs);
  b.Free(1, 0x10, 300 * kUs);
  // The handle comes back for a host tensor: writing it moves no data over DMA.
  b.Allocate(1, 0x10, /*device=*/false, "staging", 400 * kUs);
  b.Transfer(1, "nrt_tensor_write", 0x10, 500 * kUs, 10 * kUs);
  b.Free(1, 0x10, 600 * kUs);
  // And again for a device tensor, read back.
  b.Allocate(1, 0x10, /*device=*/true, "y", 700 * kUs);
  b.Transfer(1, "nrt_tensor_read", 0x10, 800 * kUs, 200 * kUs);
  b.Dma(1, "dma_h2d", 20 * kUs, 160 * kUs, 1, "eps");
  b.Dma(1, "dma_d2h", 810 * kUs, 160 * kUs, 2, "y");
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  EXPECT_EQ(Device(p, "dma_h2d")[0]->correlation_id,
            CallNamed(p, "nrt_tensor_write", 0).correlation_id);
  EXPECT_EQ(Device(p, "dma_d2h")[0]->correlation_id,
            CallNamed(p, "nrt_tensor_read", 0).correlation_id);
  EXPECT_EQ(CallNamed(p, "nrt_tensor_write", 0).tensor_name, "eps");
  EXPECT_EQ(CallNamed(p, "nrt_tensor_write", 1).tensor_name, "staging");
  EXPECT_EQ(CallNamed(p, "nrt_tensor_read", 0).nc_idx, 0);
  EXPECT_EQ(p.device_uncorrelated, 0u);
}

TEST(CorrelatorTest, TensorNamesThatDisagreePreventATransferMatch) {
  ProcessBuilder b;
  b.Allocate(1, 0x10, true, "x", 0);
  b.Transfer(1, "nrt_tensor_write", 0x10, 10 * kUs, 200 * kUs);
  b.Dma(1, "dma_h2d", 20 * kUs, 160 * kUs, 1, "weight");
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  EXPECT_EQ(Device(p, "dma_h2d")[0]->correlation_id, 0u);
  EXPECT_EQ(p.device_uncorrelated, 1u);
}

TEST(CorrelatorTest, CopiesMemsetsAndLoadsFindTheirDma) {
  ProcessBuilder b;
  b.Allocate(1, 0x1, true, "a", 0);
  b.Allocate(1, 0x2, true, "b", 0);
  b.Allocate(1, 0x3, false, "host", 0);
  IngestedEvent& d2d = b.Transfer(1, "nrt_tensor_copy", 0x1, 10 * kUs, 20 * kUs);
  d2d.call.tensor2 = 0x2;
  IngestedEvent& h2d = b.Transfer(1, "nrt_tensor_copy", 0x3, 40 * kUs, 200 * kUs);
  h2d.call.tensor2 = 0x1;
  b.Transfer(1, "nrt_tensor_memset", 0x2, 300 * kUs, 200 * kUs);
  IngestedEvent& load = b.Call(1, "nrt_load", 600 * kUs, 300 * kUs);
  load.call.model = 9;
  b.Dma(1, "dma_d2d", 15 * kUs, 5 * kUs, 1, "b");
  b.Dma(1, "dma_h2d", 50 * kUs, 160 * kUs, 2, "a");
  b.Dma(1, "dma_memset", 310 * kUs, 160 * kUs, 3, "b");
  b.Dma(1, "dma_model_load", 610 * kUs, 160 * kUs, 4, "aten_mul");
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  EXPECT_EQ(Device(p, "dma_d2d")[0]->correlation_id,
            CallNamed(p, "nrt_tensor_copy", 0).correlation_id);
  EXPECT_EQ(Device(p, "dma_h2d")[0]->correlation_id,
            CallNamed(p, "nrt_tensor_copy", 1).correlation_id);
  EXPECT_EQ(Device(p, "dma_memset")[0]->correlation_id,
            CallNamed(p, "nrt_tensor_memset").correlation_id);
  EXPECT_EQ(Device(p, "dma_model_load")[0]->correlation_id,
            CallNamed(p, "nrt_load").correlation_id);
  EXPECT_EQ(CallNamed(p, "nrt_load").model_name, "aten_mul");  // learnt from its DMA
}

TEST(CorrelatorTest, UnknownPlacementStillMatchesByContainment) {
  ProcessBuilder b;
  // Allocated before the daemon saw anything: placement unknown.
  b.Transfer(1, "nrt_tensor_write", 0x77, 0, 200 * kUs);
  b.Transfer(1, "nrt_tensor_write", 0x78, 5 * kMs, 10 * kUs);
  b.Dma(1, "dma_h2d", 10 * kUs, 160 * kUs, 1);
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  EXPECT_EQ(Device(p, "dma_h2d")[0]->correlation_id,
            CallNamed(p, "nrt_tensor_write", 0).correlation_id);
}

TEST(CorrelatorTest, RangesNestPerThreadAndCallsTakeTheInnermost) {
  ProcessBuilder b;
  b.Range(1, "rmsnorm", 0, 1000 * kUs);
  b.Range(1, "aten::add", 100 * kUs, 400 * kUs);
  b.Range(1, "aten::mul", 600 * kUs, 300 * kUs);
  b.Range(2, "other_thread", 0, 2000 * kUs);
  b.Call(1, "nrt_tensor_write", 150 * kUs, 100 * kUs);
  b.Call(1, "nrt_execute", 300 * kUs, 150 * kUs);
  b.Call(1, "nrt_execute", 950 * kUs, 20 * kUs);   // in rmsnorm only
  b.Call(1, "nrt_execute", 1500 * kUs, 20 * kUs);  // in no range of its own thread
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  ASSERT_EQ(p.ranges.size(), 4u);
  std::map<std::string, const RangeEvent*> r;
  for (const RangeEvent& e : p.ranges) r[e.name] = &e;
  EXPECT_EQ(r["rmsnorm"]->depth, 0u);
  EXPECT_EQ(r["rmsnorm"]->parent_range, 0u);
  EXPECT_EQ(r["aten::add"]->parent_range, r["rmsnorm"]->id);
  EXPECT_EQ(r["aten::add"]->depth, 1u);
  EXPECT_EQ(r["aten::mul"]->parent_range, r["rmsnorm"]->id);
  EXPECT_EQ(r["other_thread"]->parent_range, 0u);
  EXPECT_EQ(CallNamed(p, "nrt_tensor_write").range, r["aten::add"]->id);
  EXPECT_EQ(CallNamed(p, "nrt_execute", 0).range, r["aten::add"]->id);
  EXPECT_EQ(CallNamed(p, "nrt_execute", 1).range, r["rmsnorm"]->id);
  EXPECT_EQ(CallNamed(p, "nrt_execute", 2).range, 0u);
}

TEST(CorrelatorTest, DeviceTimeUsesTheNearestSyncPointPerCore) {
  ProcessBuilder b;
  // Core 0's clock drifts: 1000 s ahead at host 0, 1000 s + 10 us ahead at host 100 ms.
  b.Sync(0, 0);
  b.Sync(0, 100 * kMs, kDeviceOffset + 10 * kUs);
  b.Sync(1, 0, kDeviceOffset + 5 * kMs);                     // another core, another clock
  b.Exec(1, 1 * kMs, 10 * kUs, 1);                           // near the first point
  b.Exec(1, 99 * kMs + 10 * kUs, 10 * kUs, 2);               // near the second
  b.Exec(1, 50 * kMs + 5 * kMs, 10 * kUs, 3, "", /*nc=*/1);  // core 1's offset
  const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
  ASSERT_EQ(p.device.size(), 3u);
  EXPECT_EQ(p.device[0].nc_idx, 0);
  EXPECT_EQ(p.device[0].start_ns, 1 * kMs);
  EXPECT_EQ(p.device[1].start_ns, 99 * kMs);
  EXPECT_EQ(p.device[2].nc_idx, 1);
  EXPECT_EQ(p.device[2].start_ns, 50 * kMs);
  EXPECT_EQ(p.device_uncorrelated, 3u);  // no calls: still in the trace
}

// The runtime's trace gives each core's events in time order, the cores interleaved: the
// Trace lists them by core, then by time, an execution before work of its that starts with it.
// One event out of its core's order sorts too.
TEST(CorrelatorTest, DeviceEventsAreListedByCoreThenTime) {
  for (bool one_out_of_order : {false, true}) {
    SCOPED_TRACE(one_out_of_order ? "one out of order" : "each core in order");
    ProcessBuilder b;
    b.Sync(0, 0);
    b.Sync(1, 0);
    b.Exec(1, 10 * kUs, 50 * kUs, 1, "", /*nc=*/1);
    b.Exec(1, 20 * kUs, 50 * kUs, 2, "", /*nc=*/0);
    b.Op(1, 20 * kUs, 5 * kUs, 3, 2);
    b.Exec(1, 100 * kUs, 50 * kUs, 4, "", /*nc=*/1);
    b.Exec(1, 200 * kUs, 50 * kUs, 5, "", /*nc=*/0);
    if (one_out_of_order) b.Exec(1, 5 * kUs, 1 * kUs, 6, "", /*nc=*/0);
    const ProcessTrace p = OnlyProcess(Correlate("c", {b.Build()}, 0));
    std::vector<std::pair<int32_t, uint64_t>> listed;
    for (const DeviceEvent& e : p.device) listed.emplace_back(e.nc_idx, e.start_ns / kUs);
    std::vector<std::pair<int32_t, uint64_t>> want = {
        {0, 20}, {0, 20}, {0, 200}, {1, 10}, {1, 100}};
    if (one_out_of_order) want.insert(want.begin(), {0, 5});
    EXPECT_EQ(listed, want);
    const size_t op = one_out_of_order ? 2 : 1;
    ASSERT_EQ(p.device.size(), want.size());
    EXPECT_EQ(p.device[op].name.view(), "mul");
    EXPECT_EQ(p.device[op].parent, p.device[op - 1].id);
  }
}

TEST(CorrelatorTest, WithoutAnySyncPointDeviceEventsAreCountedAsDropped) {
  ProcessBuilder b;
  b.Exec(1, 0, 10 * kUs, 1);
  ProcessCapture c = b.Build();
  c.clock_syncs.clear();
  const ProcessTrace p = OnlyProcess(Correlate("c", {c}, 0));
  EXPECT_TRUE(p.device.empty());
  EXPECT_EQ(p.drops.no_clock_sync, 1u);
}

TEST(CorrelatorTest, IdsAreUniqueAcrossProcessesAndProcessesSortByPid) {
  ProcessBuilder a(300), b(200);
  a.Call(1, "nrt_execute", 0, 100 * kUs);
  a.Exec(1, 10 * kUs, 50 * kUs, 1);
  b.Call(1, "nrt_execute", 0, 100 * kUs);
  b.Exec(1, 10 * kUs, 50 * kUs, 1);
  b.Range(1, "r", 0, 200 * kUs);
  const Trace t = Correlate("c", {a.Build(), b.Build()}, 1234);
  ASSERT_EQ(t.processes.size(), 2u);
  EXPECT_EQ(t.processes[0].pid, 200u);
  EXPECT_EQ(t.realtime_offset_ns, 1234);
  std::set<uint64_t> ids;
  for (const ProcessTrace& p : t.processes) {
    for (const ApiCall& c : p.calls) EXPECT_TRUE(ids.insert(c.correlation_id).second);
    for (const DeviceEvent& d : p.device) EXPECT_TRUE(ids.insert(d.id).second);
    for (const RangeEvent& r : p.ranges) EXPECT_TRUE(ids.insert(r.id).second);
    EXPECT_NE(p.device[0].correlation_id, 0u);
    EXPECT_EQ(p.device[0].correlation_id, p.calls[0].correlation_id);
  }
}

// A program that runs the runtime's system trace itself hands over its device events only as
// it fetches them: a window of its executions without any says why the device lane is empty.
TEST(CorrelatorTest, AnEmptyDeviceLaneOfAProgramHoldingTheSystemTraceIsExplained) {
  // Three executions, of which the first `fetched` came with their device events; a transfer
  // whose DMA came too (before the program's own capture began).
  auto notices = [](bool waiting, int fetched) {
    ProcessBuilder b;
    b.Allocate(1, 7, /*device=*/true, "in", 0);
    b.Transfer(1, "nrt_tensor_write", 7, 10 * kUs, 10 * kUs);
    b.Dma(1, "dma_h2d", 12 * kUs, 5 * kUs, 1, "in");
    for (int i = 0; i < 3; ++i) {
      b.Call(1, "nrt_execute", (100 + 600 * i) * kUs, 500 * kUs);
      if (i < fetched) b.Exec(1, (110 + 600 * i) * kUs, 400 * kUs, 11 + i);
    }
    ProcessCapture c = b.Build();
    c.device_events_wait_for_program = waiting;
    return OnlyProcess(Correlate("c", {c}, 0)).notices;
  };
  const std::string why =
      " executions: the program runs the runtime's system trace itself (nrt_sys_trace_start), "
      "and nrtprof receives them only as the program fetches them, at the latest when it ends";
  EXPECT_EQ(notices(true, 0), std::vector<std::string>{"device events of 3 of its 3" + why});
  EXPECT_EQ(notices(true, 1), std::vector<std::string>{"device events of 2 of its 3" + why});
  ProcessBuilder b;
  b.Call(1, "nrt_execute", 0, 500 * kUs);
  ProcessCapture held = b.Build();
  held.device_events_wait_for_program = true;
  EXPECT_EQ(OnlyProcess(Correlate("c", {held}, 0)).executions_held_by_program, 1u) << "for top";
  EXPECT_TRUE(notices(true, 3).empty()) << "it fetched: the lane is there";
  // Killed before it fetched them: they will never come.
  ProcessCapture killed = held;
  killed.stream_closed = true;
  EXPECT_EQ(OnlyProcess(Correlate("c", {killed}, 0)).notices,
            std::vector<std::string>{
                "device events of 1 of its 1 executions: the program ran the runtime's system "
                "trace itself (nrt_sys_trace_start) and ended without fetching them: they are "
                "lost"});
  ProcessCapture gone = held;  // a look back: its rings file read once it was gone
  gone.records_made_known = true;
  EXPECT_EQ(OnlyProcess(Correlate("c", {gone}, 0)).notices,
            OnlyProcess(Correlate("c", {killed}, 0)).notices);
  EXPECT_TRUE(OnlyProcess(Correlate("c", {killed}, 0)).executions_held_lost) << "for top";
  EXPECT_FALSE(OnlyProcess(Correlate("c", {held}, 0)).executions_held_lost);
  ProcessCapture exited = killed;
  exited.final = true;
  EXPECT_FALSE(OnlyProcess(Correlate("c", {exited}, 0)).executions_held_lost);
  EXPECT_EQ(OnlyProcess(Correlate("c", {exited}, 0)).notices,
            std::vector<std::string>{"device events of 1 of its 1" + why})
      << "it said it was exiting: its exit fetches them";
  EXPECT_TRUE(notices(false, 1).empty()) << "the profiler's own capture lost them";
}

TEST(CorrelatorTest, StreamsOfOneReconnectedProcessMerge) {
  ProcessBuilder first(500), second(500);
  first.Call(1, "nrt_execute", 0, 100 * kUs);
  first.Exec(1, 10 * kUs, 50 * kUs, 1);
  second.Call(1, "nrt_execute", 1 * kMs, 100 * kUs);
  second.Exec(1, 1010 * kUs, 50 * kUs, 1);  // device ids restart with the stream's strings
  ProcessCapture a = first.Build(), b = second.Build();
  // The shim's counters are the process's: 1 when the capture began, 3 when the first stream
  // broke, 6 at the end of the second, which began in the capture (its start unknown).
  a.shim_at_begin.ring_full = 1;
  a.shim_at_begin_known = true;
  a.shim_at_end.ring_full = 3;
  a.drops.ring_full = 2;
  b.shim_at_end.ring_full = 6;
  b.drops.ring_full = 6;
  const Trace t = Correlate("c", {a, b}, 0);
  const ProcessTrace& p = OnlyProcess(t);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_LT(p.calls[0].start_ns, p.calls[1].start_ns);
  EXPECT_EQ(p.calls[0].function, nrtprof::API_NRT_EXECUTE);
  ASSERT_EQ(p.device.size(), 2u);
  EXPECT_EQ(p.device[0].correlation_id, p.calls[0].correlation_id);
  EXPECT_EQ(p.device[1].correlation_id, p.calls[1].correlation_id);
  EXPECT_EQ(p.drops.ring_full, 5u) << "6 - 1, not the sum of the streams' own views";
}

}  // namespace
}  // namespace nrtprof::daemon
