// THREADS threads, each making CALLS host-tensor writes, every write inside its own "step"
// range: ranges barely longer than the calls they hold, many of them on each side of the
// shim's periodic drains. Prints how many writes it made. With STAGGER_MS the threads start
// that far apart and all stay alive until the last has made its calls (a pool of long-lived
// workers started over time); the program then also prints its shared memory in use
// ("RssShmem: N kB" of /proc/self/status: under the shim, the rings file's pages).
//   usage: threads_ranges THREADS CALLS [STAGGER_MS]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "nrt/nrt.h"
#include "nrtprof/annotate.h"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 0;
  const int calls = argc > 2 ? atoi(argv[2]) : 0;
  const int stagger_ms = argc > 3 ? atoi(argv[3]) : 0;
  if (argc < 3 || argc > 4 || threads < 1 || calls < 1 || stagger_ms < 0) {
    fprintf(stderr, "usage: threads_ranges THREADS CALLS [STAGGER_MS]\n");
    return 2;
  }
  std::atomic<int> done{0};
  std::atomic<long> shmem_kib{-1};
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 1;
  std::vector<std::thread> pool;
  std::vector<int> made(threads, 0);
  for (int t = 0; t < threads; ++t) {
    if (stagger_ms > 0 && t > 0) std::this_thread::sleep_for(std::chrono::milliseconds(stagger_ms));
    pool.emplace_back([calls, &made, t, threads, stagger_ms, &done, &shmem_kib] {
      nrt_tensor_t* host = nullptr;
      if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, 64, "t", &host) != NRT_SUCCESS) return;
      char buf[64] = {};
      for (int i = 0; i < calls; ++i) {
        nrtprof::ScopedRange range("step");
        if (nrt_tensor_write(host, buf, 0, sizeof(buf)) == NRT_SUCCESS) ++made[t];
      }
      nrt_tensor_free(&host);
      if (stagger_ms == 0) return;
      // The last one reads the memory while every thread is still alive.
      if (done.fetch_add(1) + 1 == threads) {
        if (FILE* f = fopen("/proc/self/status", "r")) {
          char line[256];
          long kib = -1;
          while (fgets(line, sizeof(line), f) != nullptr) {
            if (strncmp(line, "RssShmem:", 9) == 0) kib = atol(line + 9);
          }
          fclose(f);
          shmem_kib.store(kib);
        }
      }
      while (done.load() < threads) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  }
  int total = 0;
  for (int t = 0; t < threads; ++t) {
    pool[t].join();
    total += made[t];
  }
  printf("writes %d\n", total);
  if (stagger_ms > 0) printf("RssShmem: %ld kB\n", shmem_kib.load());
  nrt_close();
  return 0;
}
