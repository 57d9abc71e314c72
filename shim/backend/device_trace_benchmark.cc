// How fast the shim reads a fetched system-trace document.
//
//   bazel run -c opt //shim/backend:device_trace_benchmark
//
// The documents hold the same work: 2000 executions (each an nrt_execute span around a
// device_exec span: 4 events in the real shape) and 500 host-to-device writes (a tensor_write
// span around its device-memory copy: 4 events), 10000 events in all, about what the flusher
// fetches in 25 ms from a busy NeuronCore. (The tree parser this reader replaced, measured
// against it in shim/README.md, was removed once nothing but this benchmark used it.)
#include <cstdio>
#include <string>

#include "benchmark/benchmark.h"
#include "shim/backend/device_trace.h"
#include "shim/backend/sys_trace_reader.h"

namespace nrtprof::shim {
namespace {

constexpr int kExecutions = 2000;
constexpr int kWrites = 500;

std::string RealShapeDocument() {
  std::string doc = "{\"events\":[";
  char buf[512];
  uint64_t id = 1;
  const uint64_t wall = 1796310196000000000ull, device = 1000000000000ull;
  auto add = [&](const char* type, const char* phase, const std::string& data, uint64_t ts) {
    snprintf(buf, sizeof(buf),
             "%s{\"event_type\":\"%s\",\"phase\":\"%s\",\"id\":%llu,\"nc_idx\":0,"
             "\"nc_local_id\":%llu,\"tracking_id\":%llu,\"thread_id\":20417,\"worker_gid\":0,"
             "\"data\":%s,\"timestamp_ns\":%llu}",
             id == 1 ? "" : ",", type, phase, static_cast<unsigned long long>(id),
             static_cast<unsigned long long>(id), static_cast<unsigned long long>(id),
             data.c_str(), static_cast<unsigned long long>(ts));
    ++id;
    doc += buf;
  };
  for (int i = 0; i < kExecutions; ++i) {
    const uint64_t t = static_cast<uint64_t>(i) * 400000;
    add("nrt_execute", "start", "{\"model_id\":3,\"model_name\":\"aten_mul\"}", wall + t);
    add("device_exec", "start",
        "{\"device_core_idx\":0,\"exec_id\":" + std::to_string(i + 1) +
            ",\"nc_timestamp_ns\":" + std::to_string(device + t + 1000) +
            ",\"model_id\":3,\"model_name\":\"aten_mul\"}",
        device + t + 1000);
    add("device_exec", "stop", "{\"nc_timestamp_ns\":" + std::to_string(device + t + 376000) + "}",
        device + t + 376000);
    add("nrt_execute", "stop", "{}", wall + t + 380000);
  }
  for (int i = 0; i < kWrites; ++i) {
    const uint64_t t = 900000000ull + static_cast<uint64_t>(i) * 200000;
    add("tensor_write", "start", "{\"tensor_id\":94526644522400,\"size\":4}", wall + t);
    add("dmem_buf_copyin", "start",
        "{\"mem_type\":1,\"mem_handle\":94526644522400,\"offset\":0,\"size\":4}", wall + t);
    add("dmem_buf_copyin", "stop", "{}", wall + t + 154000);
    add("tensor_write", "stop", "{}", wall + t + 154000);
  }
  return doc + "],\"data_version\":2}";
}

void BM_StreamingReaderOnly_RealShape(benchmark::State& state) {
  const std::string doc = RealShapeDocument();
  for (auto _ : state) {
    SysTraceReadStats stats;
    std::string error;
    uint64_t sum = 0;
    benchmark::DoNotOptimize(
        ReadSysTrace(doc, [&](const SysTraceEvent& e) { sum += e.timestamp_ns; }, &stats, &error));
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * doc.size()));
}
BENCHMARK(BM_StreamingReaderOnly_RealShape);

void BM_DeviceTraceParser_RealShape(benchmark::State& state) {
  const std::string doc = RealShapeDocument();
  StringTable strings;
  DeviceTraceParser parser(&strings);
  parser.set_realtime_offset_for_testing(1700000000000000000);
  uint64_t generation = 0;
  for (auto _ : state) {
    DeviceTraceOutput out;
    std::string error;
    benchmark::DoNotOptimize(parser.Parse(++generation, doc, &out, &error));
    if (out.events.size() != kExecutions + kWrites) state.SkipWithError("wrong event count");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * doc.size()));
  state.counters["doc_bytes"] = static_cast<double>(doc.size());
}
BENCHMARK(BM_DeviceTraceParser_RealShape);

// What the flusher parses at 10,000 async executions a second (bench/apps/run_async_cpu.sh):
// the types its capture asks for only (device_exec spans of async requests, the eleventh
// member nrta_seq_id), each event encoded as its bytes, the output reused between documents.
std::string AsyncShapeDocument() {
  std::string doc = "{\"events\":[";
  char buf[512];
  uint64_t id = 1;
  const uint64_t device = 1796310196000000000ull;
  for (int i = 0; i < kExecutions; ++i) {
    const uint64_t t = device + static_cast<uint64_t>(i) * 100000;
    for (int stop = 0; stop < 2; ++stop) {
      snprintf(buf, sizeof(buf),
               "%s{\"event_type\":\"device_exec\",\"phase\":\"%s\",\"id\":%llu,\"nc_idx\":0,"
               "\"nc_local_id\":%llu,\"tracking_id\":%llu,\"thread_id\":20417,\"worker_gid\":0,"
               "\"data\":{\"device_core_idx\":0,\"exec_id\":%d,\"nc_timestamp_ns\":%llu,"
               "\"model_id\":1},\"timestamp_ns\":%llu,\"nrta_seq_id\":%d}",
               id == 1 ? "" : ",", stop ? "stop" : "start", static_cast<unsigned long long>(id),
               static_cast<unsigned long long>(id), static_cast<unsigned long long>(id), i + 1,
               static_cast<unsigned long long>(t + stop * 37000),
               static_cast<unsigned long long>(t + stop * 37000), i + 1);
      ++id;
      doc += buf;
    }
  }
  return doc + "],\"data_version\":2}";
}

void BM_DeviceTraceParser_AsyncShapeEncoded(benchmark::State& state) {
  const std::string doc = AsyncShapeDocument();
  StringTable strings;
  DeviceTraceParser parser(&strings);
  parser.set_realtime_offset_for_testing(1700000000000000000);
  uint64_t generation = 0;
  DeviceTraceOutput out;
  for (auto _ : state) {
    out.Clear();
    out.encode = true;
    std::string error;
    benchmark::DoNotOptimize(parser.Parse(++generation, doc, &out, &error));
    if (out.event_count() != kExecutions) state.SkipWithError("wrong event count");
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * 2 * kExecutions));
  state.counters["doc_bytes"] = static_cast<double>(doc.size());
}
BENCHMARK(BM_DeviceTraceParser_AsyncShapeEncoded);

}  // namespace
}  // namespace nrtprof::shim

BENCHMARK_MAIN();
