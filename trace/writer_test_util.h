// Test helpers shared by the trace writers' tests: a small capture that exercises every lane,
// a scratch folder under TEST_TMPDIR, whole-file reads. Test-only.
#ifndef NRTPROF_TRACE_WRITER_TEST_UTIL_H_
#define NRTPROF_TRACE_WRITER_TEST_UTIL_H_

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "proto/nrtprof.pb.h"
#include "trace/trace_model.h"

namespace nrtprof::daemon {

// A fresh folder named `name` under the test's temporary folder.
inline std::string TempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A capture of one process: two threads with nested framework ranges and runtime calls, one
// execution on NeuronCore 0 with two engine ops, and a host-to-device DMA.
inline Trace SmallTrace() {
  Trace t;
  t.capture_id = "cap-42";
  t.realtime_offset_ns = 1'700'000'000'000'000'000;
  ProcessTrace p;
  p.pid = 100;
  p.host = "trn1";
  p.executable = "/usr/bin/python3";
  p.command_line = {"python3", "train.py", "--steps=1"};
  p.thread_names = {{101, "MainThread"}, {102, "loader"}};
  p.drops.ring_full = 2;
  p.drops.daemon_away = 1;
  p.events_received = 9;
  p.ranges.push_back({1, "forward", 101, 1000, 1000, 0, 0});
  p.ranges.push_back({2, "aten::mul", 101, 1100, 400, 1, 1});
  p.ranges.push_back({3, "load_batch", 102, 1050, 850, 0, 0});

  ApiCall exec;
  exec.correlation_id = 10;
  exec.name = "nrt_execute";
  exec.tid = 101;
  exec.start_ns = 1200;
  exec.duration_ns = 200;
  exec.model_name = "mlp";
  exec.nc_idx = 0;
  exec.repeat = 1;
  exec.range = 2;
  exec.stack = {"nrt_execute", "torch_neuronx::run", "main"};
  p.calls.push_back(exec);
  ApiCall write;
  write.correlation_id = 11;
  write.name = "nrt_tensor_write";
  write.tid = 102;
  write.start_ns = 1100;
  write.duration_ns = 200;
  write.bytes = 4096;
  write.tensor_name = "input";
  write.range = 3;
  p.calls.push_back(write);
  std::sort(p.calls.begin(), p.calls.end(),
            [](const ApiCall& a, const ApiCall& b) { return a.start_ns < b.start_ns; });

  DeviceEvent run;
  run.id = 50;
  run.kind = DeviceEventKind::kExecution;
  run.name = "nc_exec_running";
  run.nc_idx = 0;
  run.start_ns = 1250;
  run.duration_ns = 140;
  run.correlation_id = 10;
  run.model_name = "mlp";
  run.exec_id = 7;
  run.submitting_tid = 101;
  DeviceEvent dma;
  dma.id = 53;
  dma.kind = DeviceEventKind::kDma;
  dma.name = "dma_h2d";
  dma.nc_idx = 0;
  dma.start_ns = 1150;
  dma.duration_ns = 130;
  dma.correlation_id = 11;
  dma.bytes = 4096;
  dma.tensor_name = "input";
  DeviceEvent mul;
  mul.id = 51;
  mul.kind = DeviceEventKind::kEngineOp;
  mul.name = "mul";
  mul.nc_idx = 0;
  mul.start_ns = 1260;
  mul.duration_ns = 40;
  mul.parent = 50;
  mul.correlation_id = 10;
  mul.model_name = "mlp";
  mul.engine = "vector";
  mul.exec_id = 7;
  DeviceEvent add = mul;
  add.id = 52;
  add.name = "add";
  add.start_ns = 1300;
  add.duration_ns = 95;  // ends at 1395, 5 ns after its execution: clamped to 1390
  p.device = {dma, run, mul, add};
  t.processes.push_back(p);
  t.start_ns = 1000;
  t.end_ns = 2000;
  return t;
}

// An nrta_seq_t: the XU queue's id in the high 16 bits, the request's number below.
constexpr uint64_t NrtaSeq(uint64_t xu, uint64_t n) { return (xu << 48) | n; }

// A capture of one process using the async API, in microseconds from 1000 us, on NeuronCore 0:
//   - "forward" [1000, 3000) on thread 201, holding every call;
//   - nrta_tensor_write (XU 2, #1) returns at 1050; its transfer runs [1100, 1200): wait 50;
//   - three nrta_execute_schedule (XU 1, #1..#3) return at 1150, 1250, 1350; their executions
//     run back to back [1200, 1500), [1500, 1800), [1800, 2100): waits 50, 250, 450; the
//     first has an engine op inside, and found its queue empty, the other two did not;
//   - nrta_is_completed of #3 at [2500, 2510) after 7 unrecorded polls;
//   - nrta_execute_schedule #4 returns at 2650, its execution not in the capture;
//   - a synchronous nrt_execute [2700, 2900) and its execution [2720, 2820).
// Requests in flight on XU 1: 1, 2, 3 at 1150, 1250, 1350, then 2, 1, 0 at 1500, 1800, 2100,
// then 1 from 2650 to the capture's end at 3000; on XU 2: 1 from 1050 to 1200. The core is
// busy for 1100 us of the 2000 us window.
inline Trace AsyncTrace() {
  constexpr uint64_t kUs = 1000;
  Trace t;
  t.capture_id = "cap-async";
  ProcessTrace p;
  p.pid = 200;
  p.executable = "/usr/bin/python3";
  p.thread_names = {{201, "MainThread"}};
  p.ranges.push_back({1, "forward", 201, 1000 * kUs, 2000 * kUs, 0, 0});
  auto call = [&](uint64_t id, const char* name, nrtprof::ApiFunction f, uint64_t start,
                  uint64_t seq) -> ApiCall& {
    ApiCall& c = p.calls.emplace_back();
    c.correlation_id = id;
    c.name = Name::Lasting(name);
    c.function = f;
    c.tid = 201;
    c.start_ns = start * kUs;
    c.duration_ns = 50 * kUs;
    c.nc_idx = 0;
    c.nrta_seq = seq;
    c.range = 1;
    return c;
  };
  call(20, "nrta_tensor_write", nrtprof::API_NRTA_TENSOR_WRITE, 1000, NrtaSeq(2, 1)).bytes = 4096;
  call(21, "nrta_execute_schedule", nrtprof::API_NRTA_EXECUTE_SCHEDULE, 1100, NrtaSeq(1, 1));
  call(22, "nrta_execute_schedule", nrtprof::API_NRTA_EXECUTE_SCHEDULE, 1200, NrtaSeq(1, 2));
  call(23, "nrta_execute_schedule", nrtprof::API_NRTA_EXECUTE_SCHEDULE, 1300, NrtaSeq(1, 3));
  ApiCall& poll =
      call(24, "nrta_is_completed", nrtprof::API_NRTA_IS_COMPLETED, 2500, NrtaSeq(1, 3));
  poll.duration_ns = 10 * kUs;
  poll.polls = 7;
  call(25, "nrta_execute_schedule", nrtprof::API_NRTA_EXECUTE_SCHEDULE, 2600, NrtaSeq(1, 4));
  ApiCall& sync = call(26, "nrt_execute", nrtprof::API_NRT_EXECUTE, 2700, 0);
  sync.duration_ns = 200 * kUs;

  auto device = [&](uint64_t id, DeviceEventKind kind, const char* name, uint64_t start,
                    uint64_t duration, uint64_t correlation_id, uint64_t seq) -> DeviceEvent& {
    DeviceEvent& d = p.device.emplace_back();
    d.id = id;
    d.kind = kind;
    d.name = Name::Lasting(name);
    d.start_ns = start * kUs;
    d.duration_ns = duration * kUs;
    d.correlation_id = correlation_id;
    d.nrta_seq = seq;
    return d;
  };
  device(60, DeviceEventKind::kDma, "dma_h2d", 1100, 100, 20, NrtaSeq(2, 1)).bytes = 4096;
  device(61, DeviceEventKind::kExecution, "nc_exec_running", 1200, 300, 21, NrtaSeq(1, 1));
  DeviceEvent& op = device(62, DeviceEventKind::kEngineOp, "matmul", 1210, 100, 21, 0);
  op.parent = 61;
  op.engine = "tensor";
  device(63, DeviceEventKind::kExecution, "nc_exec_running", 1500, 300, 22, NrtaSeq(1, 2));
  device(64, DeviceEventKind::kExecution, "nc_exec_running", 1800, 300, 23, NrtaSeq(1, 3));
  device(65, DeviceEventKind::kExecution, "nc_exec_running", 2720, 100, 26, 0);
  t.processes.push_back(p);
  t.start_ns = 1000 * kUs;
  t.end_ns = 3000 * kUs;
  return t;
}

// Two ranks (pids 301, 302; worker_gid 0 and 1, each on its NeuronCore 0) of a job, one
// all-reduce each, scheduled on the collectives XU 32 inside an "all_reduce" range: rank 0
// schedules at 1000 us and waits in its barrier [1010, 21010) for rank 1, which schedules at
// 21000 us (barrier [21005, 21010)); both run [21010, 21030). The running event names the
// collective, the barrier does not (as the simulator's).
inline Trace CollectivesTrace() {
  constexpr uint64_t kUs = 1000;
  Trace t;
  t.capture_id = "cap-collectives";
  for (int rank = 0; rank < 2; ++rank) {
    ProcessTrace p;
    p.pid = 301 + rank;
    p.executable = "/usr/bin/cc_job";
    const uint32_t tid = p.pid;
    const uint64_t arrival = rank == 0 ? 1000 : 21000;
    p.ranges.push_back({1, "all_reduce", tid, arrival * kUs, 21040 * kUs - arrival * kUs, 0, 0});
    ApiCall& c = p.calls.emplace_back();
    c.correlation_id = 10;
    c.name = Name::Lasting("nrta_cc_schedule");
    c.function = nrtprof::API_NRTA_CC_SCHEDULE;
    c.tid = tid;
    c.start_ns = arrival * kUs;
    c.duration_ns = 5 * kUs;
    c.nc_idx = 0;
    c.nrta_seq = NrtaSeq(32, 1);
    c.range = 1;
    auto device = [&](uint64_t id, const char* name, uint64_t start, uint64_t end,
                      const char* op) {
      DeviceEvent& d = p.device.emplace_back();
      d.id = id;
      d.kind = DeviceEventKind::kCollective;
      d.name = Name::Lasting(name);
      d.start_ns = start * kUs;
      d.duration_ns = (end - start) * kUs;
      d.correlation_id = 10;
      d.submitting_tid = tid;
      d.nrta_seq = NrtaSeq(32, 1);
      d.worker_gid = rank;
      d.bytes = 4096;
      d.model_name = Name::Lasting(op);
    };
    device(20, kCcExecBarrier, rank == 0 ? 1010 : 21005, 21010, "");
    device(21, kCcRunning, 21010, 21030, "all_reduce");
    t.processes.push_back(std::move(p));
  }
  t.start_ns = 1000 * kUs;
  t.end_ns = 21040 * kUs;
  return t;
}

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_WRITER_TEST_UTIL_H_
