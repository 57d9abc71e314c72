// A program that calls nrt_execute as fast as the (simulated) device lets it, for a fixed
// time, and prints how many calls per second it completed. bench/run runs it with and without
// the shim to measure the throughput a busy program loses to the profiler. With
// NRT_SIM_TIME_SCALE=0.25 each execution of this model takes ~91 us on the host: about 10,000
// calls per second, the reference rate.
//
// With --sys_trace the program runs the runtime's system trace itself, as a profiler would
// (started after nrt_init, fetched every 100 ms from a second thread, JSON freed unread): what
// the runtime's own device tracing costs, without nrtprof.
//   usage: exec_rate SECONDS [--sys_trace]
#include <time.h>

#include <cstdio>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "nrt/nrt.h"
#include "nrt/nrt_sys_trace.h"
#include "sim/model_format.h"
#include "sim/model_text.h"

namespace {

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

void Check(NRT_STATUS s, const char* what) {
  if (s != NRT_SUCCESS) {
    fprintf(stderr, "exec_rate: %s failed with %d\n", what, static_cast<int>(s));
    exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 5.0;
  const bool sys_trace = argc > 2 && strcmp(argv[2], "--sys_trace") == 0;
  if (!(seconds > 0) || argc > 3 || (argc == 3 && !sys_trace)) {
    fprintf(stderr, "usage: exec_rate SECONDS [--sys_trace]\n");
    return 2;
  }
  auto model = nrtsim::ParseModelText(
      "model tiny\ninput a fp32 [16]\ninput b fp32 [16]\noutput out fp32 [16]\n"
      "out = add(a, b)\n");
  if (!model.ok()) return 1;
  const std::string bytes = nrtsim::EncodeModel(*model);
  Check(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), "nrt_init");
  nrt_model_t* m = nullptr;
  Check(nrt_load(bytes.data(), bytes.size(), 0, -1, &m), "nrt_load");
  nrt_tensor_t *a = nullptr, *b = nullptr, *out = nullptr;
  Check(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "a", &a), "allocate");
  Check(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "b", &b), "allocate");
  Check(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "out", &out), "allocate");
  nrt_tensor_set_t *in = nullptr, *outs = nullptr;
  Check(nrt_allocate_tensor_set(&in), "set");
  Check(nrt_allocate_tensor_set(&outs), "set");
  Check(nrt_add_tensor_to_tensor_set(in, "a", a), "add");
  Check(nrt_add_tensor_to_tensor_set(in, "b", b), "add");
  Check(nrt_add_tensor_to_tensor_set(outs, "out", out), "add");
  std::atomic<bool> done{false};
  std::thread fetcher;
  if (sys_trace) {
    nrt_sys_trace_config_t* config = nullptr;
    Check(nrt_sys_trace_config_allocate(&config), "nrt_sys_trace_config_allocate");
    nrt_sys_trace_config_set_defaults(config);
    Check(nrt_sys_trace_start(config), "nrt_sys_trace_start");
    nrt_sys_trace_config_free(config);
    fetcher = std::thread([&done] {
      while (!done.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        char* buffer = nullptr;
        size_t size = 0;
        if (nrt_sys_trace_fetch_events(&buffer, &size, nullptr) == NRT_SUCCESS) {
          nrt_sys_trace_buffer_free(buffer);
        }
      }
    });
  }
  Check(nrt_execute(m, in, outs), "warm-up nrt_execute");
  const double start = Now();
  timespec cpu0;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
  const double start_cpu = static_cast<double>(cpu0.tv_sec) + cpu0.tv_nsec * 1e-9;
  uint64_t calls = 0;
  double longest = 0;  // the longest single call, seconds
  for (double before = Now(); before - start < seconds;) {
    Check(nrt_execute(m, in, outs), "nrt_execute");
    ++calls;
    const double after = Now();
    if (after - before > longest) longest = after - before;
    before = after;
  }
  const double elapsed = Now() - start;
  timespec cpu;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  const double cpu_s = static_cast<double>(cpu.tv_sec) + cpu.tv_nsec * 1e-9 - start_cpu;
  // The calling thread's CPU time per call: the runtime's own work, plus the shim's and the
  // runtime's tracing when they are on. Steadier than the rate on a busy machine.
  printf("calls %llu seconds %.3f rate %.1f cpu_us_per_call %.2f longest_call_us %.0f\n",
         static_cast<unsigned long long>(calls), elapsed, calls / elapsed,
         calls > 0 ? cpu_s * 1e6 / static_cast<double>(calls) : 0.0, longest * 1e6);
  if (sys_trace) {
    done.store(true);
    fetcher.join();
    nrt_sys_trace_stop();
  }
  nrt_close();
  return 0;
}
