// A program with many threads that each make a few libnrt calls, then report the process's
// peak resident memory (VmHWM). bench/run runs it with and without the shim: the difference is
// what the profiler costs a 64-thread process in memory.
// With --sys_trace the program starts the runtime's system trace itself, as the profiler does
// with the capacity nrtprof asks for (nrtprof is not involved): the part of the difference that is the runtime's own trace
// buffers.
// With --staggered the threads start 30 ms apart (each after the profiler's next tick) and all
// stay alive until the last has made its calls: a pool of long-lived workers started over time.
//   usage: threads_rss THREADS CALLS_PER_THREAD [--sys_trace|--staggered]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "nrt/nrt.h"
#include "nrt/nrt_sys_trace.h"
#include "nrtprof/annotate.h"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 64;
  const int calls = argc > 2 ? atoi(argv[2]) : 100;
  const bool sys_trace = argc > 3 && strcmp(argv[3], "--sys_trace") == 0;
  const bool staggered = argc > 3 && strcmp(argv[3], "--staggered") == 0;
  if (threads < 1 || calls < 1 || argc > 4 || (argc == 4 && !sys_trace && !staggered)) {
    fprintf(stderr, "usage: threads_rss THREADS CALLS_PER_THREAD [--sys_trace|--staggered]\n");
    return 2;
  }
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 1;
  if (sys_trace) {
    nrt_sys_trace_config_t* config = nullptr;
    if (nrt_sys_trace_config_allocate(&config) != NRT_SUCCESS) return 1;
    nrt_sys_trace_config_set_defaults(config);
    // The capacity nrtprof asks for (shim/backend/flusher.h: a quarter of the runtime's default).
    nrt_sys_trace_config_set_max_events_per_nc(config, 8192);
    if (nrt_sys_trace_start(config) != NRT_SUCCESS) return 1;
    nrt_sys_trace_config_free(config);
  }
  std::vector<std::thread> pool;
  std::atomic<int> done{0};
  for (int t = 0; t < threads; ++t) {
    if (staggered && t > 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    pool.emplace_back([calls, staggered, threads, &done] {
      nrt_tensor_t* host = nullptr;
      if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, 64, "t", &host) != NRT_SUCCESS) {
        return;
      }
      char buf[64] = {};
      for (int i = 0; i < calls; ++i) {
        nrtprof::ScopedRange range("step");
        nrt_tensor_write(host, buf, 0, sizeof(buf));
      }
      nrt_tensor_free(&host);
      done.fetch_add(1);
      while (staggered && done.load() < threads) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  for (std::thread& t : pool) t.join();
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) printf("threads %d %s\n", threads, line.c_str());
  }
  // Now (not peak): anonymous memory is the process's own; file-backed pages (libraries'
  // code and read-only data) are shared with every process that maps the same files.
  status.clear();
  status.seekg(0);
  while (std::getline(status, line)) {
    if (line.rfind("RssAnon:", 0) == 0 || line.rfind("RssFile:", 0) == 0) {
      fprintf(stderr, "threads %d %s\n", threads, line.c_str());
    }
  }
  nrt_close();
  return 0;
}
