// What the shim costs a program per call: times cheap libnrt calls and annotation ranges in a
// loop. Run it once plain and once under the shim, in an optimized build:
//   bazel build -c opt //bench:shim_overhead_bench //shim:shim
//   NRT_SIM_TIME_SCALE=0 bazel-bin/bench/shim_overhead_bench
//   NRT_SIM_TIME_SCALE=0 LD_PRELOAD=$PWD/bazel-bin/shim/libnrtprof_shim.so bazel-bin/bench/shim_overhead_bench
// With --trace the program runs a system trace of its own, as the shim does: the runtime then
// records a device event per transfer, which is its cost, not the shim's.
// Prints figures; asserts nothing (a benchmark, not a test).
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "nrt/nrt.h"
#include "nrt/nrt_sys_trace.h"
#include "nrtprof/annotate.h"

namespace {

uint64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

template <typename Fn>
double NsPerCall(int calls, Fn&& fn) {
  std::vector<double> rounds;
  for (int round = 0; round < 7; ++round) {
    const uint64_t start = Now();
    for (int i = 0; i < calls; ++i) fn();
    rounds.push_back(static_cast<double>(Now() - start) / calls);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];  // the median round
}

}  // namespace

int main(int argc, char** argv) {
  const bool trace = argc > 1 && std::string(argv[1]) == "--trace";
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 1;
  if (trace) {
    nrt_sys_trace_config_t* config = nullptr;
    nrt_sys_trace_config_allocate(&config);
    nrt_sys_trace_config_set_max_events_per_nc(config, 1 << 20);
    if (nrt_sys_trace_start(config) != NRT_SUCCESS) return 1;
    nrt_sys_trace_config_free(config);
  }
  nrt_tensor_t* tensor = nullptr;
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, 0, 64, "bench", &tensor) != NRT_SUCCESS) {
    return 1;
  }
  char buf[4];
  // Within one flush period, so that no record is dropped for want of ring space.
  constexpr int kCalls = 5000;
  // One unmeasured pass: the shim's flusher starts and connects on the first libnrt call.
  for (int i = 0; i < 2; ++i) {
    nrt_tensor_read(tensor, buf, 0, sizeof(buf));
    nrtprof_push("warm-up");
    nrtprof_pop();
  }
  usleep(200000);
  const double read = NsPerCall(kCalls, [&] { nrt_tensor_read(tensor, buf, 0, sizeof(buf)); });
  const double set = NsPerCall(kCalls, [&] {
    nrt_tensor_set_t* s = nullptr;
    nrt_allocate_tensor_set(&s);
    nrt_destroy_tensor_set(&s);
  });
  const double range = NsPerCall(kCalls, [&] {
    nrtprof_push("aten::bench");
    nrtprof_pop();
  });
  printf("%s%s: nrt_tensor_read (host, 4 bytes) %.0f ns/call; nrt_allocate_tensor_set + "
         "nrt_destroy_tensor_set %.0f ns/pair; range push+pop %.0f ns/pair\n",
         getenv("LD_PRELOAD") != nullptr ? "with the shim" : "without the shim",
         trace ? ", program's own system trace on" : "", read, set,
         range);
  if (trace) nrt_sys_trace_stop();
  nrt_tensor_free(&tensor);
  nrt_close();
  return 0;
}
