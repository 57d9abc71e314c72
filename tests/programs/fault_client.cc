// A program that uses libnrt the way the fault tests need, loading it with dlopen so that it
// can also dlclose it. Every mode prints what it computed (a checksum of tensor contents read
// back from the device), so a test can compare the output with and without the profiler.
//
//   fault_client LIBNRT MODEL MODE [N]
//     steady N          N executions of `out = a + b`, then prints the checksum
//     threads N         N short threads, 32 at a time, each writing, reading and checking a tensor
//     exit_from_thread  executions on the main thread until another thread calls exit(3)
//     sigterm N         N executions, then SIGTERM to itself (default action)
//     dlclose N         N executions, nrt_close, dlclose, 200 ms without the library, then it
//                       all again
//     fork_exec N       N executions, fork, the child execs `echo child`, N more in the parent
//     load T,R,S        T threads, each with its own tensors, executing R times a second for S
//                       seconds (as fast as it can when it falls behind), every result
//                       checked; prints the libnrt calls it made, all threads together
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nrt/nrt.h"

namespace {

struct Api {
  void* lib = nullptr;
  decltype(&nrt_init) init;
  decltype(&nrt_close) close;
  decltype(&nrt_load) load;
  decltype(&nrt_execute) execute;
  decltype(&nrt_tensor_allocate) allocate;
  decltype(&nrt_tensor_free) free_tensor;
  decltype(&nrt_tensor_write) write;
  decltype(&nrt_tensor_read) read;
  decltype(&nrt_allocate_tensor_set) allocate_set;
  decltype(&nrt_add_tensor_to_tensor_set) add_to_set;
};

template <typename T>
bool Resolve(void* lib, const char* name, T* fn) {
  *fn = reinterpret_cast<T>(dlsym(lib, name));
  if (*fn == nullptr) fprintf(stderr, "fault_client: %s missing\n", name);
  return *fn != nullptr;
}

bool Open(const char* path, Api* api) {
  api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (api->lib == nullptr) {
    fprintf(stderr, "fault_client: %s\n", dlerror());
    return false;
  }
  return Resolve(api->lib, "nrt_init", &api->init) && Resolve(api->lib, "nrt_close", &api->close) &&
         Resolve(api->lib, "nrt_load", &api->load) &&
         Resolve(api->lib, "nrt_execute", &api->execute) &&
         Resolve(api->lib, "nrt_tensor_allocate", &api->allocate) &&
         Resolve(api->lib, "nrt_tensor_free", &api->free_tensor) &&
         Resolve(api->lib, "nrt_tensor_write", &api->write) &&
         Resolve(api->lib, "nrt_tensor_read", &api->read) &&
         Resolve(api->lib, "nrt_allocate_tensor_set", &api->allocate_set) &&
         Resolve(api->lib, "nrt_add_tensor_to_tensor_set", &api->add_to_set);
}

// One loaded model with its tensors: out = a + b over 4 floats.
struct Session {
  nrt_model_t* model = nullptr;
  nrt_tensor_t *a = nullptr, *b = nullptr, *out = nullptr;
  nrt_tensor_set_t *in = nullptr, *outs = nullptr;
};

bool Start(const Api& api, const std::string& model_bytes, Session* s) {
  return api.init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") == NRT_SUCCESS &&
         api.load(model_bytes.data(), model_bytes.size(), 0, -1, &s->model) == NRT_SUCCESS &&
         api.allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "a", &s->a) == NRT_SUCCESS &&
         api.allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "b", &s->b) == NRT_SUCCESS &&
         api.allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "out", &s->out) == NRT_SUCCESS &&
         api.allocate_set(&s->in) == NRT_SUCCESS && api.allocate_set(&s->outs) == NRT_SUCCESS &&
         api.add_to_set(s->in, "a", s->a) == NRT_SUCCESS &&
         api.add_to_set(s->in, "b", s->b) == NRT_SUCCESS &&
         api.add_to_set(s->outs, "out", s->out) == NRT_SUCCESS;
}

// Execution i computes (i, 2i, 3i, 4i) + (1, 1, 1, 1); the checksum adds up every result.
bool Execute(const Api& api, const Session& s, int i, double* checksum) {
  const float a[4] = {1.0f * i, 2.0f * i, 3.0f * i, 4.0f * i};
  const float b[4] = {1, 1, 1, 1};
  float out[4] = {};
  if (api.write(s.a, a, 0, sizeof(a)) != NRT_SUCCESS ||
      api.write(s.b, b, 0, sizeof(b)) != NRT_SUCCESS ||
      api.execute(s.model, s.in, s.outs) != NRT_SUCCESS ||
      api.read(s.out, out, 0, sizeof(out)) != NRT_SUCCESS) {
    return false;
  }
  for (float v : out) *checksum += v;
  return true;
}

bool Run(const Api& api, const Session& s, int n, double* checksum) {
  for (int i = 0; i < n; ++i) {
    if (!Execute(api, s, i, checksum)) return false;
  }
  return true;
}

std::string ReadAll(const char* path) {
  std::string bytes;
  FILE* f = fopen(path, "rb");
  if (f == nullptr) return bytes;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
  fclose(f);
  return bytes;
}

int Fail(const char* what) {
  fprintf(stderr, "fault_client: %s failed\n", what);
  return 1;
}

// Wraps an Api so that every call made through it is counted: each is one runtime-lane event
// the profiler should record (or count as dropped).
std::atomic<uint64_t> g_calls{0};

bool Counted(bool ok, int calls) {
  g_calls.fetch_add(static_cast<uint64_t>(calls));
  return ok;
}

// One thread of the load mode: its own tensors on the core (thread % 2), paced executions.
bool LoadThread(const Api& api, nrt_model_t* model, int thread, int rate, int seconds,
                uint64_t* executions) {
  nrt_tensor_t *a = nullptr, *b = nullptr, *out = nullptr;
  nrt_tensor_set_t *in = nullptr, *outs = nullptr;
  const int core = 0;
  if (!Counted(api.allocate(NRT_TENSOR_PLACEMENT_DEVICE, core, 16, "a", &a) == NRT_SUCCESS &&
                   api.allocate(NRT_TENSOR_PLACEMENT_DEVICE, core, 16, "b", &b) == NRT_SUCCESS &&
                   api.allocate(NRT_TENSOR_PLACEMENT_DEVICE, core, 16, "out", &out) == NRT_SUCCESS &&
                   api.allocate_set(&in) == NRT_SUCCESS && api.allocate_set(&outs) == NRT_SUCCESS &&
                   api.add_to_set(in, "a", a) == NRT_SUCCESS &&
                   api.add_to_set(in, "b", b) == NRT_SUCCESS &&
                   api.add_to_set(outs, "out", out) == NRT_SUCCESS,
               8)) {
    return false;
  }
  const uint64_t period_ns = 1000000000ull / static_cast<uint64_t>(rate);
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  uint64_t next = static_cast<uint64_t>(now.tv_sec) * 1000000000ull + now.tv_nsec;
  const uint64_t end = next + static_cast<uint64_t>(seconds) * 1000000000ull;
  for (uint64_t i = 0;; ++i) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    const uint64_t t = static_cast<uint64_t>(now.tv_sec) * 1000000000ull + now.tv_nsec;
    if (t >= end) break;
    if (t < next) {
      const timespec at{static_cast<time_t>(next / 1000000000ull),
                        static_cast<long>(next % 1000000000ull)};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr);
    } else if (t > next + 100000000ull) {
      next = t;  // over 100 ms behind: run on from now, no burst to catch up
    }
    next += period_ns;
    const float va = static_cast<float>(thread), vb = static_cast<float>(i % 1000);
    const float ain[4] = {va, va, va, va}, bin[4] = {vb, vb, vb, vb};
    float result[4] = {};
    const bool ok = api.write(a, ain, 0, sizeof(ain)) == NRT_SUCCESS &&
                    api.write(b, bin, 0, sizeof(bin)) == NRT_SUCCESS &&
                    api.execute(model, in, outs) == NRT_SUCCESS &&
                    api.read(out, result, 0, sizeof(result)) == NRT_SUCCESS;
    if (!Counted(ok, 4)) return false;
    for (float v : result) {
      if (v != va + vb) {
        fprintf(stderr, "fault_client: thread %d got %f, not %f\n", thread, v, va + vb);
        return false;
      }
    }
    ++*executions;
  }
  api.free_tensor(&a);
  api.free_tensor(&b);
  api.free_tensor(&out);
  g_calls.fetch_add(3);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    fprintf(stderr, "usage: fault_client LIBNRT MODEL MODE [N]\n");
    return 2;
  }
  const char* lib_path = argv[1];
  const std::string model = ReadAll(argv[2]);
  const std::string mode = argv[3];
  const int n = argc > 4 ? atoi(argv[4]) : 0;
  if (model.empty()) return Fail("reading the model");

  Api api;
  Session s;
  if (!Open(lib_path, &api) || !Start(api, model, &s)) return Fail("starting the runtime");
  double checksum = 0;

  if (mode == "steady") {
    if (!Run(api, s, n, &checksum)) return Fail("executing");
  } else if (mode == "threads") {
    std::atomic<int> ok{0};
    for (int started = 0; started < n;) {
      std::vector<std::thread> batch;
      for (int k = 0; k < 32 && started < n; ++k, ++started) {
        batch.emplace_back([&api, &ok, started] {
          nrt_tensor_t* t = nullptr;
          if (api.allocate(NRT_TENSOR_PLACEMENT_HOST, -1, sizeof(int), "t", &t) != NRT_SUCCESS) return;
          int v = started, back = -1;
          if (api.write(t, &v, 0, sizeof(v)) == NRT_SUCCESS &&
              api.read(t, &back, 0, sizeof(back)) == NRT_SUCCESS && back == started) {
            ok.fetch_add(1);
          }
          api.free_tensor(&t);
        });
      }
      for (std::thread& t : batch) t.join();
    }
    printf("threads ok: %d of %d\n", ok.load(), n);
    return ok.load() == n ? 0 : 1;
  } else if (mode == "exit_from_thread") {
    fflush(stdout);
    std::thread quitter([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      exit(3);
    });
    quitter.detach();
    for (int i = 0;; ++i) {
      if (!Execute(api, s, i % 1000, &checksum)) return Fail("executing");
    }
  } else if (mode == "sigterm") {
    if (!Run(api, s, n, &checksum)) return Fail("executing");
    printf("checksum %.1f\n", checksum);
    fflush(stdout);
    raise(SIGTERM);
    return 0;  // not reached: SIGTERM's default action ends the process
  } else if (mode == "dlclose") {
    if (!Run(api, s, n, &checksum)) return Fail("executing");
    api.close();
    if (dlclose(api.lib) != 0) return Fail("dlclose");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Api again;
    Session s2;
    if (!Open(lib_path, &again) || !Start(again, model, &s2)) return Fail("reopening the runtime");
    if (!Run(again, s2, n, &checksum)) return Fail("executing after dlclose");
    printf("checksum %.1f\n", checksum);
    again.close();
    return 0;
  } else if (mode == "load") {
    int threads = 0, rate = 0, seconds = 0;
    if (argc < 5 || sscanf(argv[4], "%d,%d,%d", &threads, &rate, &seconds) != 3 || threads < 1 ||
        rate < 1 || seconds < 1) {
      fprintf(stderr, "fault_client: load wants THREADS,RATE,SECONDS\n");
      return 2;
    }
    // The session's own calls: init, load, three allocations, two sets, three adds.
    g_calls.store(10);
    std::vector<std::thread> pool;
    std::vector<uint64_t> executions(threads, 0);
    std::atomic<int> failed{0};
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        if (!LoadThread(api, s.model, t, rate, seconds, &executions[t])) failed.fetch_add(1);
      });
    }
    uint64_t total = 0;
    for (int t = 0; t < threads; ++t) {
      pool[t].join();
      total += executions[t];
    }
    api.close();
    g_calls.fetch_add(1);
    printf("executions %llu calls %llu failed_threads %d\n", static_cast<unsigned long long>(total),
           static_cast<unsigned long long>(g_calls.load()), failed.load());
    return failed.load() == 0 ? 0 : 1;
  } else if (mode == "fork_exec") {
    if (!Run(api, s, n, &checksum)) return Fail("executing");
    fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      execlp("echo", "echo", "child", static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!Run(api, s, n, &checksum)) return Fail("executing after fork");
    printf("child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  } else {
    fprintf(stderr, "fault_client: unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  printf("checksum %.1f\n", checksum);
  api.close();
  return 0;
}
