// The per-call cost of an intercepted libnrt call in the pattern training programs have: a
// burst of runtime calls, then the thread waits (for the device, the data loader, the next
// step), then another burst. The same binary runs plain, under the nrtprof shim and under the
// LTTng-UST peer (bench/micro/run_micro.sh --pattern bursty drives the configurations).
//
// Patterns, interleaved within the process so that a slow second of this shared VM hits them
// all alike. Each round: a burst after a --long_pause_ms pause (150 ms: a training step), a
// burst after a --short_pause_ms pause (20 ms), and a burst right after it with no pause at
// all (the continuous pattern: calls in one long run). Every --new_thread_every rounds, a new
// thread is started after a long pause and its first --calls calls are timed (its tracer
// buffers never touched before). A burst is --calls nrt_tensor_write calls of 4 bytes to a
// HOST tensor (a memcpy in the simulated runtime); its wall time (and the thread's CPU time)
// over --calls is one sample.
//
// Before the rounds, --warm_bursts bursts (each after a long pause) pass the tracer's buffers
// through once, untimed, as bench/micro/micro_bench.cc does: the first touch of fresh memory
// is the new-thread figure's business, not the steady state's.
//
//   bazel build --config=opt //bench:burst_bench
//   NRT_SIM_TIME_SCALE=0 bazel-out/k8-opt/bin/bench/burst_bench [--calls=10000] [--rounds=30]
//       [--long_pause_ms=150] [--short_pause_ms=20] [--new_thread_every=5] [--warm_bursts=6]
//       [--evict_mib=0] [--drop_ring_mappings=0]
//
// Prints one JSON document on stdout: the settings, and per pattern the ns/call of each burst
// (wall and thread CPU). At exit it prints on stderr how many traced calls it made, in the line
// micro_bench prints ("micro_bench: traced calls: ..."), for the drivers' loss check. Prints
// figures; asserts nothing about time (a benchmark, not a test).
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "nrt/nrt.h"

namespace {

struct Settings {
  long calls = 10000;
  long rounds = 30;
  long long_pause_ms = 150;
  long short_pause_ms = 20;
  long new_thread_every = 5;
  long warm_bursts = 6;
  long evict_mib = 0;
  long drop_ring_mappings = 0;
};

Settings g_settings;
nrt_tensor_t* g_tensor = nullptr;  // a HOST tensor: a write is a memcpy, no device time
int64_t g_writes = 0;              // what this process asked the tracers to record

struct Sample {
  double wall_ns_per_call;
  double cpu_ns_per_call;
};
std::map<std::string, std::vector<Sample>> g_samples;

uint64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepMs(long ms) {
  if (ms > 0) usleep(static_cast<useconds_t>(ms) * 1000);
}

// One burst of --calls writes on the calling thread; its cost per call.
Sample Burst() {
  const uint32_t value = 0x3f800000;  // 1.0f
  const uint64_t wall0 = ClockNs(CLOCK_MONOTONIC);
  const uint64_t cpu0 = ClockNs(CLOCK_THREAD_CPUTIME_ID);
  for (long i = 0; i < g_settings.calls; ++i) {
    nrt_tensor_write(g_tensor, &value, 0, sizeof(value));
    asm volatile("" ::: "memory");
  }
  const uint64_t cpu1 = ClockNs(CLOCK_THREAD_CPUTIME_ID);
  const uint64_t wall1 = ClockNs(CLOCK_MONOTONIC);
  const double n = static_cast<double>(g_settings.calls);
  return {static_cast<double>(wall1 - wall0) / n, static_cast<double>(cpu1 - cpu0) / n};
}

// What a program's other work does to the caches while this thread waits: --evict_mib MiB
// written and read again, untimed, at the end of each long pause (0: nothing).
std::vector<char> g_evict;
void EvictCaches() {
  if (g_evict.empty()) return;
  for (size_t i = 0; i < g_evict.size(); i += 64) g_evict[i] = static_cast<char>(g_evict[i] + 1);
  asm volatile("" : : "r"(g_evict.data()) : "memory");
}

// What a host that reclaims a sleeping guest's mappings would do to the shim's rings:
// --drop_ring_mappings=1 drops this process's mappings of the nrtprof rings file
// (MADV_DONTNEED: the file keeps its data, the page table entries go) at the start of each
// long pause. Nothing else is touched; plain and LTTng runs have no such file.
void DropRingMappings() {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == nullptr) return;
  char line[512];
  while (fgets(line, sizeof(line), maps) != nullptr) {
    if (strstr(line, "/memfd:nrtprof-rings") == nullptr) continue;
    unsigned long begin = 0, end = 0;
    if (sscanf(line, "%lx-%lx", &begin, &end) == 2 && end > begin) {
      madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    }
  }
  fclose(maps);
}

void* NewThreadBurst(void* out) {
  *static_cast<Sample*>(out) = Burst();
  return nullptr;
}

// Takes --name=VALUE out of argv; false if absent.
bool TakeFlag(int* argc, char** argv, const char* name, long* value) {
  const size_t len = strlen(name);
  for (int i = 1; i < *argc; ++i) {
    if (strncmp(argv[i], name, len) != 0 || argv[i][len] != '=') continue;
    char* end = nullptr;
    *value = strtol(argv[i] + len + 1, &end, 10);
    if (end == argv[i] + len + 1 || *end != '\0' || *value < 0 || *value > 100000000) {
      fprintf(stderr, "burst_bench: %s needs an integer from 0 to 100000000, got '%s'\n", name,
              argv[i]);
      exit(2);
    }
    for (int j = i; j + 1 < *argc; ++j) argv[j] = argv[j + 1];
    --*argc;
    return true;
  }
  return false;
}

void PrintSamples(const char* name, const std::vector<Sample>& samples, bool last) {
  printf("    \"%s\": {\"wall_ns_per_call\": [", name);
  for (size_t i = 0; i < samples.size(); ++i) {
    printf("%s%.2f", i == 0 ? "" : ", ", samples[i].wall_ns_per_call);
  }
  printf("], \"cpu_ns_per_call\": [");
  for (size_t i = 0; i < samples.size(); ++i) {
    printf("%s%.2f", i == 0 ? "" : ", ", samples[i].cpu_ns_per_call);
  }
  printf("]}%s\n", last ? "" : ",");
}

}  // namespace

int main(int argc, char** argv) {
  Settings& s = g_settings;
  TakeFlag(&argc, argv, "--calls", &s.calls);
  TakeFlag(&argc, argv, "--rounds", &s.rounds);
  TakeFlag(&argc, argv, "--long_pause_ms", &s.long_pause_ms);
  TakeFlag(&argc, argv, "--short_pause_ms", &s.short_pause_ms);
  TakeFlag(&argc, argv, "--new_thread_every", &s.new_thread_every);
  TakeFlag(&argc, argv, "--warm_bursts", &s.warm_bursts);
  TakeFlag(&argc, argv, "--evict_mib", &s.evict_mib);
  TakeFlag(&argc, argv, "--drop_ring_mappings", &s.drop_ring_mappings);
  if (argc > 1) {
    fprintf(stderr, "burst_bench: unknown argument '%s'\n", argv[1]);
    return 2;
  }
  if (s.calls == 0) s.calls = 1;
  g_evict.assign(static_cast<size_t>(s.evict_mib) << 20, 0);

  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) {
    fprintf(stderr, "burst_bench: nrt_init failed\n");
    return 1;
  }
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, 0, 64, "bench", &g_tensor) != NRT_SUCCESS) {
    fprintf(stderr, "burst_bench: nrt_tensor_allocate failed\n");
    return 1;
  }
  // The process is multi-threaded in every configuration, as under a tracer (the shim's
  // flusher, LTTng's listener threads) and with the real runtime: for glibc a process that has
  // had a second thread stays multi-threaded, and its locks (the simulated runtime's
  // reader-writer lock) cost ~20 ns more a call from then on (micro_bench --start_thread).
  pthread_t thread;
  if (pthread_create(&thread, nullptr, [](void*) -> void* { return nullptr; }, nullptr) == 0) {
    pthread_join(thread, nullptr);
  }
  // One-time costs stay out: the shim starts its backend at the first libnrt call.
  SleepMs(200);
  for (long i = 0; i < s.warm_bursts; ++i) {
    Burst();
    g_writes += s.calls;
    SleepMs(s.long_pause_ms);
  }

  for (long round = 0; round < s.rounds; ++round) {
    if (s.new_thread_every > 0 && round % s.new_thread_every == 0) {
      SleepMs(s.long_pause_ms);
      Sample sample{};
      pthread_t thread;
      if (pthread_create(&thread, nullptr, &NewThreadBurst, &sample) == 0) {
        pthread_join(thread, nullptr);
        g_samples["new_thread"].push_back(sample);
        g_writes += s.calls;
      }
    }
    if (s.drop_ring_mappings != 0) DropRingMappings();
    SleepMs(s.long_pause_ms);
    EvictCaches();
    g_samples["after_long_pause"].push_back(Burst());
    SleepMs(s.short_pause_ms);
    g_samples["after_short_pause"].push_back(Burst());
    g_samples["continuous"].push_back(Burst());
    g_writes += 3 * s.calls;
  }
  // The tracer's consumer drains the last bursts before the process ends.
  SleepMs(s.long_pause_ms);

  char cpu[256] = "?";
  if (FILE* f = fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (fgets(line, sizeof(line), f) != nullptr) {
      if (strncmp(line, "model name", 10) != 0) continue;
      const char* colon = strchr(line, ':');
      if (colon != nullptr) snprintf(cpu, sizeof(cpu), "%s", colon + 2);
      cpu[strcspn(cpu, "\n\"\\")] = '\0';
      break;
    }
    fclose(f);
  }
  const char* preload = getenv("LD_PRELOAD");
  printf("{\n  \"context\": {\"calls_per_burst\": %ld, \"rounds\": %ld, \"long_pause_ms\": %ld, "
         "\"short_pause_ms\": %ld, \"new_thread_every\": %ld, \"warm_bursts\": %ld, "
         "\"evict_mib\": %ld, \"drop_ring_mappings\": %ld, \"cpu\": \"%s\", \"ld_preload\": \"%s\"},\n  \"patterns\": {\n",
         s.calls, s.rounds, s.long_pause_ms, s.short_pause_ms, s.new_thread_every,
         s.warm_bursts, s.evict_mib, s.drop_ring_mappings, cpu, preload != nullptr ? preload : "");
  size_t i = 0;
  for (const auto& [name, samples] : g_samples) {
    PrintSamples(name.c_str(), samples, ++i == g_samples.size());
  }
  printf("  }\n}\n");
  fflush(stdout);

  nrt_tensor_free(&g_tensor);
  nrt_close();
  fprintf(stderr,
          "micro_bench: traced calls: nrt_tensor_write=%lld nrt_tensor_read=0 range_pairs=0\n",
          static_cast<long long>(g_writes));
  return 0;
}
