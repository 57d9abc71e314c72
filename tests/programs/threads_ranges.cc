// THREADS threads, each making CALLS host-tensor writes, every write inside its own "step"
// range: ranges barely longer than the calls they hold, many of them on each side of the
// shim's periodic drains. Prints how many writes it made.
//   usage: threads_ranges THREADS CALLS
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "nrt/nrt.h"
#include "nrtprof/annotate.h"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 0;
  const int calls = argc > 2 ? atoi(argv[2]) : 0;
  if (argc != 3 || threads < 1 || calls < 1) {
    fprintf(stderr, "usage: threads_ranges THREADS CALLS\n");
    return 2;
  }
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 1;
  std::vector<std::thread> pool;
  std::vector<int> made(threads, 0);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([calls, &made, t] {
      nrt_tensor_t* host = nullptr;
      if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, 64, "t", &host) != NRT_SUCCESS) return;
      char buf[64] = {};
      for (int i = 0; i < calls; ++i) {
        nrtprof::ScopedRange range("step");
        if (nrt_tensor_write(host, buf, 0, sizeof(buf)) == NRT_SUCCESS) ++made[t];
      }
      nrt_tensor_free(&host);
    });
  }
  int total = 0;
  for (int t = 0; t < threads; ++t) {
    pool[t].join();
    total += made[t];
  }
  printf("writes %d\n", total);
  nrt_close();
  return 0;
}
