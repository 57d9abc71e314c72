// Per-call cost of cheap intercepted libnrt calls and annotation ranges, as Google Benchmark
// microbenchmarks, plus the clock reads a tracer is built on, for reference. The same binary
// runs plain, under the nrtprof shim and under the LTTng-UST peer (LD_PRELOAD applies per
// process): bench/micro/run_micro.sh drives the configurations and prints the comparison.
//
// Every recorded call must reach the trace, or the comparison flatters the tracer that drops.
// So the traced benchmarks run a fixed number of calls per repetition (--calls, sized to fit
// the shim's per-thread ring and LTTng's sub-buffers), and after each repetition the process
// sleeps --settle_ms, untimed, so that the tracer's consumer (the shim's flusher, LTTng's
// consumer daemon) drains before the next one. The drivers then check that nothing was lost.
//
// Before the benchmarks, --warm_chunks chunks of --calls writes (each followed by the settle)
// pass through the tracer's whole buffer once: on this VM the first write to each page of
// freshly mapped memory costs about 6 us (a hypervisor fault the guest never counts), which is
// a once-per-thread cost, not a per-call one. The first chunk's ns/call is reported as the
// context entry "first_calls_ns_per_call".
//
//   bazel build --config=opt //bench:micro_bench
//   NRT_SIM_TIME_SCALE=0 bazel-bin/bench/micro_bench [--calls=N] [--settle_ms=MS]
//       [--warm_chunks=N] [--start_thread=1] [--benchmark_repetitions=N]
//       [--benchmark_format=json] ...
//
// --start_thread=1 starts (and joins) a thread before anything else. A process that has ever had
// a second thread stays multi-threaded for glibc, whose locks then take their atomic paths: the
// simulated runtime's calls cost ~20 ns more (its reader-writer lock). Under a tracer the
// process always is (the shim's flusher, LTTng's listener threads), and so is every program of
// the real runtime; the plain run with this flag is the baseline that leaves that out of what
// the tracer is said to add.
//
// At exit it prints on stderr how many traced calls it made ("micro_bench: traced calls: ..."),
// which the drivers compare with what each tracer recorded.
// Prints figures; asserts nothing about time (a benchmark, not a test).
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "benchmark/benchmark.h"
#include "nrt/nrt.h"
#include "nrtprof/annotate.h"

namespace {

// Calls per repetition of a traced benchmark. nrtprof records one event per call (a range is
// one event at its pop), and its default ring holds 32768 64-byte slots per thread (a call
// takes one, a named range two); LTTng writes about 25
// bytes per event into the channel's sub-buffers.
int64_t g_calls = 10000;
int g_settle_ms = 150;
// Warm-up: 60000 writes, the shim's 32768-slot ring 1.8 times over, LTTng's 1 MiB 1.5 times.
int g_warm_chunks = 6;
// Clock reads per repetition: untraced, so they may run long enough to be steady.
constexpr int64_t kClockReads = 1000000;
constexpr char kRangeName[] = "aten::bench";

nrt_tensor_t* g_tensor = nullptr;  // a HOST tensor: reads and writes are a memcpy, no device time

// What this process asked the tracers to record, to compare with what they did record.
int64_t g_writes = 0;
int64_t g_reads = 0;
int64_t g_range_pairs = 0;

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepMs(int ms) { usleep(static_cast<useconds_t>(ms) * 1000); }

// Untimed: the tracer's consumer drains while the benchmark thread sleeps.
void Settle(const benchmark::State&) { SleepMs(g_settle_ms); }

void WriteOnce() {
  const uint32_t value = 0x3f800000;  // 1.0f
  benchmark::DoNotOptimize(nrt_tensor_write(g_tensor, &value, 0, sizeof(value)));
}

void BM_TensorWrite4B(benchmark::State& state) {
  for (auto _ : state) WriteOnce();
  g_writes += static_cast<int64_t>(state.iterations());
}

void BM_TensorRead4B(benchmark::State& state) {
  uint32_t value = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(nrt_tensor_read(g_tensor, &value, 0, sizeof(value)));
  }
  benchmark::DoNotOptimize(value);
  g_reads += static_cast<int64_t>(state.iterations());
}

// One push and one pop: the pair is what a program pays for one annotated op.
void BM_RangePushPop(benchmark::State& state) {
  for (auto _ : state) {
    nrtprof_push(kRangeName);
    nrtprof_pop();
  }
  g_range_pairs += static_cast<int64_t>(state.iterations());
}

void BM_ClockGettimeMonotonic(benchmark::State& state) {
  timespec ts;
  for (auto _ : state) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    benchmark::DoNotOptimize(ts);
  }
}

void BM_Rdtsc(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(__rdtsc());
}

// Takes --name=VALUE out of argv (so Google Benchmark does not see it); false if absent.
bool TakeFlag(int* argc, char** argv, const char* name, long* value) {
  const size_t len = strlen(name);
  for (int i = 1; i < *argc; ++i) {
    if (strncmp(argv[i], name, len) != 0 || argv[i][len] != '=') continue;
    char* end = nullptr;
    *value = strtol(argv[i] + len + 1, &end, 10);
    if (end == argv[i] + len + 1 || *end != '\0' || *value < 0 || *value > 100000000) {
      fprintf(stderr, "micro_bench: %s needs an integer from 0 to 100000000, got '%s'\n", name,
              argv[i]);
      exit(2);
    }
    for (int j = i; j + 1 < *argc; ++j) argv[j] = argv[j + 1];
    --*argc;
    return true;
  }
  return false;
}

// Runs the tracer through its buffers once, in chunks it can drain; ns/call of the first chunk.
void* DoNothing(void*) { return nullptr; }

double WarmUp() {
  double first_ns_per_call = 0;
  for (int chunk = 0; chunk < g_warm_chunks; ++chunk) {
    const uint64_t start = MonotonicNs();
    for (int64_t i = 0; i < g_calls; ++i) WriteOnce();
    if (chunk == 0) first_ns_per_call = static_cast<double>(MonotonicNs() - start) / g_calls;
    g_writes += g_calls;
    SleepMs(g_settle_ms);
  }
  return first_ns_per_call;
}

}  // namespace

int main(int argc, char** argv) {
  long value = 0;
  if (TakeFlag(&argc, argv, "--calls", &value)) g_calls = value > 0 ? value : 1;
  if (TakeFlag(&argc, argv, "--settle_ms", &value)) g_settle_ms = static_cast<int>(value);
  if (TakeFlag(&argc, argv, "--warm_chunks", &value)) g_warm_chunks = static_cast<int>(value);
  if (TakeFlag(&argc, argv, "--start_thread", &value) && value != 0) {
    pthread_t thread;
    if (pthread_create(&thread, nullptr, &DoNothing, nullptr) == 0) pthread_join(thread, nullptr);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;

  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) {
    fprintf(stderr, "micro_bench: nrt_init failed\n");
    return 1;
  }
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, 0, 64, "bench", &g_tensor) != NRT_SUCCESS) {
    fprintf(stderr, "micro_bench: nrt_tensor_allocate failed\n");
    return 1;
  }
  // One-time costs stay out of the figures: the shim loads its backend and connects at the
  // first libnrt call, and starts the runtime's system trace at nrt_init.
  uint32_t scratch = 0;
  for (int i = 0; i < 100; ++i) {
    nrt_tensor_read(g_tensor, &scratch, 0, sizeof(scratch));
    nrtprof_push(kRangeName);
    nrtprof_pop();
  }
  g_reads += 100;
  g_range_pairs += 100;
  SleepMs(200);
  const double first_calls = WarmUp();

  benchmark::RegisterBenchmark("nrt_tensor_write/host/4B", BM_TensorWrite4B)
      ->Iterations(g_calls)
      ->Teardown(Settle);
  benchmark::RegisterBenchmark("nrt_tensor_read/host/4B", BM_TensorRead4B)
      ->Iterations(g_calls)
      ->Teardown(Settle);
  benchmark::RegisterBenchmark("range_push_pop", BM_RangePushPop)
      ->Iterations(g_calls)
      ->Teardown(Settle);
  benchmark::RegisterBenchmark("clock_gettime/MONOTONIC", BM_ClockGettimeMonotonic)
      ->Iterations(kClockReads);
  benchmark::RegisterBenchmark("rdtsc", BM_Rdtsc)->Iterations(kClockReads);
  benchmark::AddCustomContext("calls_per_repetition", std::to_string(g_calls));
  benchmark::AddCustomContext("settle_ms", std::to_string(g_settle_ms));
  benchmark::AddCustomContext("first_calls_ns_per_call", std::to_string(first_calls));
  const char* preload = getenv("LD_PRELOAD");
  benchmark::AddCustomContext("ld_preload", preload != nullptr ? preload : "");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  nrt_tensor_free(&g_tensor);
  nrt_close();
  fprintf(stderr,
          "micro_bench: traced calls: nrt_tensor_write=%lld nrt_tensor_read=%lld "
          "range_pairs=%lld\n",
          static_cast<long long>(g_writes), static_cast<long long>(g_reads),
          static_cast<long long>(g_range_pairs));
  return 0;
}
