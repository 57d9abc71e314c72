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

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_WRITER_TEST_UTIL_H_
