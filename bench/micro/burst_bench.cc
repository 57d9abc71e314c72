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
// --call chooses what a burst calls (the explicit async API, nrt/nrt_async.h, issue 38):
//   tensor_write      (the default) nrt_tensor_write of 4 bytes to a HOST tensor, as above
//   execute_schedule  nrta_execute_schedule of a tiny model (out = a + b, 16 floats) on compute
//                     queue 0, each with its own `ret`. Run at NRT_SIM_TIME_SCALE=0 with
//                     NRT_SIM_ASYNC_QUEUE_DEPTH >= 2 x --calls: the queue's worker runs the
//                     requests beside the burst, and what is still queued is drained, untimed
//                     (waiting on the last request's `ret`, no libnrt call), before each pause;
//                     the continuous burst follows the short-pause burst with nothing drained.
//   is_completed      nrta_is_completed polls of one request that stays in flight through the
//                     round's bursts (a polling loop: no poll sees anything new). The request is
//                     one execution of the tiny model scheduled, untimed, before the pause; its
//                     device time x NRT_SIM_TIME_SCALE must outlast the long and short pauses
//                     (the JSON's "hold_ms" is how long it took; "polls_saw_completed" must be
//                     0). After the bursts the program waits for it (on its `ret`) and makes one
//                     more poll, which sees it complete: the poll a tracer records.
//
// --paired=1 runs each round twice, in turn first: once calling the functions as the program
// links them (the tracer's wrappers, when one is preloaded) and once calling libnrt's own
// definitions, read from its dynamic symbol table (nothing a tracer wraps); the
// second set's patterns are named with "_direct". Their difference is what the wrapper adds on
// the calling thread, in one process, paired round by round: the machine's slow seconds and
// what the tracer makes the runtime itself do (its system trace, on under nrtprof) cancel out.
// Plain, both are the same function (the harness's own noise). Bursts call through a function
// pointer in every mode. --paired=2 interleaves instead: within each burst the calls alternate
// between the two, each timed alone with the TSC, and a burst's samples ("X" and "X_direct")
// are the two halves' interdecile means of per-call times: for calls whose own cost varies from burst
// to burst far more than a wrapper's (nrta_execute_schedule: 0.5 to 1.5 us here).
//
// --live_thread=1 keeps a second thread alive, blocked, for the process's life, as a framework
// process has (the other configurations' tracers have theirs too).
//
// Before the rounds, --warm_bursts bursts (each after a long pause) pass the tracer's buffers
// through once, untimed, as bench/micro/micro_bench.cc does: the first touch of fresh memory
// is the new-thread figure's business, not the steady state's.
//
//   bazel build --config=opt //bench:burst_bench
//   NRT_SIM_TIME_SCALE=0 bazel-out/k8-opt/bin/bench/burst_bench [--calls=10000] [--rounds=30]
//       [--long_pause_ms=150] [--short_pause_ms=20] [--new_thread_every=5] [--warm_bursts=6]
//       [--evict_mib=0] [--drop_ring_mappings=0] [--live_thread=0]
//       [--call=tensor_write|execute_schedule|is_completed] [--paired=0]
//
// Prints one JSON document on stdout: the settings, and per pattern the ns/call of each burst
// (wall and thread CPU). At exit it prints on stderr how many traced calls it made, in the line
// micro_bench prints ("micro_bench: traced calls: ..."), and the async calls it made in a line
// of its own ("burst_bench: async calls: ..."), for the drivers' loss check. Prints
// figures; asserts nothing about time (a benchmark, not a test).
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "sim/model_format.h"
#include "sim/model_text.h"

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
  long live_thread = 0;
  long paired = 0;
};

enum class Call { kTensorWrite, kExecuteSchedule, kIsCompleted };
const char* const kCallNames[] = {"tensor_write", "execute_schedule", "is_completed"};
Call g_call = Call::kTensorWrite;

Settings g_settings;
nrt_tensor_t* g_tensor = nullptr;  // a HOST tensor: a write is a memcpy, no device time
int64_t g_writes = 0;              // what this process asked the tracers to record

// The functions bursts call: as linked (a preloaded tracer's wrappers), or libnrt's own.
struct Functions {
  decltype(&nrt_tensor_write) write;
  decltype(&nrta_execute_schedule) schedule;
  decltype(&nrta_is_completed) is_completed;
};
const Functions kLinked = {&nrt_tensor_write, &nrta_execute_schedule, &nrta_is_completed};
Functions g_direct = {};
Functions g_fns = kLinked;
bool g_linked = true;  // g_fns is kLinked: the calls count as traced

// libnrt's own definition of `name`, read from its dynamic symbol table (GNU hash), because
// the shim answers dlsym look-ups through libnrt's handle with its wrappers.
void* Direct(const char* name) {
  void* handle = dlopen("libnrt.so.1", RTLD_LAZY | RTLD_NOLOAD);
  link_map* map = nullptr;
  if (handle == nullptr || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) {
    fprintf(stderr, "burst_bench: libnrt.so.1 not loaded\n");
    exit(1);
  }
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* gnu_hash = nullptr;
  // glibc has relocated these entries in place on x86-64; an unrelocated one is an offset.
  const auto at = [map](ElfW(Addr) a) { return a < map->l_addr ? a + map->l_addr : a; };
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_SYMTAB) symtab = reinterpret_cast<const ElfW(Sym)*>(at(d->d_un.d_ptr));
    if (d->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(at(d->d_un.d_ptr));
    if (d->d_tag == DT_GNU_HASH) gnu_hash = reinterpret_cast<const uint32_t*>(at(d->d_un.d_ptr));
  }
  if (symtab != nullptr && strtab != nullptr && gnu_hash != nullptr) {
    uint32_t h = 5381;
    for (const char* c = name; *c != '\0'; ++c) h = h * 33 + static_cast<uint8_t>(*c);
    const uint32_t nbuckets = gnu_hash[0], symoffset = gnu_hash[1], bloom_size = gnu_hash[2];
    const uint32_t* buckets =
        gnu_hash + 4 + bloom_size * (sizeof(ElfW(Addr)) / sizeof(uint32_t));
    const uint32_t* chain = buckets + nbuckets;
    for (uint32_t i = buckets[h % nbuckets]; i >= symoffset && i != 0; ++i) {
      const uint32_t h2 = chain[i - symoffset];
      if ((h | 1) == (h2 | 1) && strcmp(name, strtab + symtab[i].st_name) == 0 &&
          symtab[i].st_shndx != SHN_UNDEF) {
        return reinterpret_cast<void*>(map->l_addr + symtab[i].st_value);
      }
      if ((h2 & 1) != 0) break;
    }
  }
  fprintf(stderr, "burst_bench: libnrt's own %s not found\n", name);
  exit(1);
}

// The async calls' state. A request's `ret` is written by the runtime when it completes, so a
// wait for a request reads it (no libnrt call, nothing for a tracer to see).
constexpr NRT_STATUS kNotYet = static_cast<NRT_STATUS>(0x7fff);
nrt_model_t* g_model = nullptr;
nrt_tensor_set_t* g_inputs = nullptr;
nrt_tensor_set_t* g_outputs = nullptr;
std::vector<NRT_STATUS> g_rets;  // the `ret` of each request scheduled since the last drain
size_t g_rets_used = 0;
nrta_seq_t g_held = 0;           // is_completed: the request the polls look at
size_t g_held_ret = 0;           // its `ret`, in g_rets
uint64_t g_held_since_ns = 0;
std::vector<double> g_hold_ms;   // how long each held request took to complete
int64_t g_schedules = 0;         // nrta_execute_schedule calls made
int64_t g_schedule_failures = 0;  // ... that did not return NRT_SUCCESS (NRT_QUEUE_FULL: raise
                                  // NRT_SIM_ASYNC_QUEUE_DEPTH)
int64_t g_polls = 0;              // nrta_is_completed calls made
int64_t g_polls_completed = 0;    // ... that saw their request complete
int64_t g_polls_saw_completed_in_bursts = 0;  // timed polls that did: the pattern was not held

struct Sample {
  double wall_ns_per_call;
  double cpu_ns_per_call;
  long minor_faults = 0;  // the thread's, during the burst
  int cpu = -1;           // where the burst started
};
std::map<std::string, std::vector<Sample>> g_samples;

uint64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t NowNs() { return ClockNs(CLOCK_MONOTONIC); }

void SleepMs(long ms) {
  if (ms > 0) usleep(static_cast<useconds_t>(ms) * 1000);
}


// Waits, untimed, until the request whose `ret` is g_rets[i] has completed.
void WaitForRet(size_t i) {
  while (__atomic_load_n(&g_rets[i], __ATOMIC_ACQUIRE) == kNotYet) usleep(100);
}

// execute_schedule: waits for every request scheduled so far (they complete in order).
void Drain() {
  if (g_rets_used > 0) WaitForRet(g_rets_used - 1);
  for (size_t i = 0; i < g_rets_used; ++i) g_rets[i] = kNotYet;
  g_rets_used = 0;
}

// The timed loops, one per --call.
void WriteCalls(long n) {
  const uint32_t value = 0x3f800000;  // 1.0f
  for (long i = 0; i < n; ++i) {
    g_fns.write(g_tensor, &value, 0, sizeof(value));
    asm volatile("" ::: "memory");
  }
}

void ScheduleCalls(long n) {
  NRT_STATUS* rets = g_rets.data() + g_rets_used;
  long failed = 0;
  nrta_seq_t seq = 0;
  for (long i = 0; i < n; ++i) {
    if (g_fns.schedule(g_model, g_inputs, g_outputs, 0, &rets[i], &seq) != NRT_SUCCESS) {
      rets[i] = NRT_SUCCESS;  // not scheduled: no `ret` to wait for
      ++failed;
    }
    asm volatile("" ::: "memory");
  }
  g_rets_used += static_cast<size_t>(n);
  if (g_linked) g_schedules += n;
  g_schedule_failures += failed;
}

void PollCalls(long n) {
  long completed = 0;
  for (long i = 0; i < n; ++i) {
    bool done = false;
    g_fns.is_completed(g_held, &done);
    completed += done;
    asm volatile("" ::: "memory");
  }
  if (g_linked) {
    g_polls += n;
    g_polls_completed += completed;
  }
  g_polls_saw_completed_in_bursts += completed;
}

// --paired=2: the calls of a burst alternate between the linked function and libnrt's own,
// each timed alone with the TSC (lfence; rdtsc on both sides: the same ~20 ns of its own in
// both). The burst's two samples are each set's per-call times, in ns (MedianNs).
double g_ns_per_tick = 0;
std::vector<uint32_t> g_ticks[2];
Sample g_last_direct{};  // the direct half of the last interleaved burst

inline uint64_t Tsc() {
  uint32_t lo, hi;
  asm volatile("lfence\n\trdtsc\n\tlfence" : "=a"(lo), "=d"(hi)::"memory");
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

void CalibrateTsc() {
  const uint64_t ns0 = NowNs(), t0 = Tsc();
  usleep(50000);
  const uint64_t ns1 = NowNs(), t1 = Tsc();
  g_ns_per_tick = static_cast<double>(ns1 - ns0) / static_cast<double>(t1 - t0);
}

// The mean of the per-call times between their 10th and 90th percentiles, in ns. Not the
// median: this guest's TSC advances in steps of ~10 ns (21 ticks at 2.1 GHz), and a mean of
// many quantized readings is not quantized; the trimming keeps interrupts out.
double MedianNs(std::vector<uint32_t>* ticks) {
  if (ticks->empty()) return 0;
  std::sort(ticks->begin(), ticks->end());
  const size_t lo = ticks->size() / 10, hi = ticks->size() - ticks->size() / 10;
  double sum = 0;
  for (size_t i = lo; i < hi; ++i) sum += (*ticks)[i];
  return sum / static_cast<double>(hi - lo) * g_ns_per_tick;
}

long g_interleaved_bursts = 0;  // which half goes first alternates from burst to burst

template <typename Call1>
void Interleaved(long n, const Call1& call) {
  for (auto& t : g_ticks) t.clear();
  const long first = g_interleaved_bursts++ & 1;
  for (long i = 0; i < n; ++i) {
    const int direct = static_cast<int>((i + first) & 1);
    const uint64_t t0 = Tsc();
    call(direct != 0 ? g_direct : kLinked, i);
    const uint64_t t1 = Tsc();
    g_ticks[direct].push_back(static_cast<uint32_t>(std::min<uint64_t>(t1 - t0, UINT32_MAX)));
  }
}

void InterleavedCalls(long n) {
  const long linked = (g_interleaved_bursts & 1) == 0 ? (n + 1) / 2 : n / 2;
  switch (g_call) {
    case Call::kTensorWrite: {
      const uint32_t value = 0x3f800000;
      Interleaved(n, [&value](const Functions& f, long) {
        f.write(g_tensor, &value, 0, sizeof(value));
      });
      g_writes += linked;
      break;
    }
    case Call::kExecuteSchedule: {
      NRT_STATUS* rets = g_rets.data() + g_rets_used;
      long failed = 0;
      nrta_seq_t seq = 0;
      Interleaved(n, [rets, &failed, &seq](const Functions& f, long i) {
        if (f.schedule(g_model, g_inputs, g_outputs, 0, &rets[i], &seq) != NRT_SUCCESS) {
          rets[i] = NRT_SUCCESS;
          ++failed;
        }
      });
      g_rets_used += static_cast<size_t>(n);
      g_schedules += linked;
      g_schedule_failures += failed;
      break;
    }
    case Call::kIsCompleted: {
      long completed[2] = {0, 0};
      Interleaved(n, [&completed](const Functions& f, long) {
        bool done = false;
        f.is_completed(g_held, &done);
        completed[f.is_completed != kLinked.is_completed] += done;
      });
      g_polls += linked;
      g_polls_completed += completed[0];
      g_polls_saw_completed_in_bursts += completed[0] + completed[1];
      break;
    }
  }
}

Sample TimedBurst();

// One burst of --calls calls on the calling thread; its cost per call, the thread's minor page
// faults during it and the CPU it started on (read outside the timed window).
Sample Burst() {
  rusage before, after;
  getrusage(RUSAGE_THREAD, &before);
  const int cpu = sched_getcpu();
  Sample sample = TimedBurst();
  getrusage(RUSAGE_THREAD, &after);
  sample.minor_faults = after.ru_minflt - before.ru_minflt;
  sample.cpu = cpu;
  return sample;
}

Sample TimedBurst() {
  const long n = g_settings.calls;
  if (g_settings.paired == 2) {
    const uint64_t cpu0 = ClockNs(CLOCK_THREAD_CPUTIME_ID);
    InterleavedCalls(n);
    const double cpu = static_cast<double>(ClockNs(CLOCK_THREAD_CPUTIME_ID) - cpu0) / n;
    g_last_direct = {MedianNs(&g_ticks[1]), cpu};
    return {MedianNs(&g_ticks[0]), cpu};
  }
  const uint64_t wall0 = ClockNs(CLOCK_MONOTONIC);
  const uint64_t cpu0 = ClockNs(CLOCK_THREAD_CPUTIME_ID);
  switch (g_call) {
    case Call::kTensorWrite:
      WriteCalls(n);
      break;
    case Call::kExecuteSchedule:
      ScheduleCalls(n);
      break;
    case Call::kIsCompleted:
      PollCalls(n);
      break;
  }
  const uint64_t cpu1 = ClockNs(CLOCK_THREAD_CPUTIME_ID);
  const uint64_t wall1 = ClockNs(CLOCK_MONOTONIC);
  if (g_call == Call::kTensorWrite && g_linked) g_writes += n;
  const double d = static_cast<double>(n);
  return {static_cast<double>(wall1 - wall0) / d, static_cast<double>(cpu1 - cpu0) / d};
}

// Before a pause that bursts follow: is_completed schedules the request its polls will look at.
void Prepare() {
  if (g_call != Call::kIsCompleted) return;
  g_held_ret = g_rets_used++;
  g_rets[g_held_ret] = kNotYet;
  g_held_since_ns = NowNs();
  ++g_schedules;
  if (nrta_execute_schedule(g_model, g_inputs, g_outputs, 0, &g_rets[g_held_ret], &g_held) !=
      NRT_SUCCESS) {
    fprintf(stderr, "burst_bench: nrta_execute_schedule failed\n");
    exit(1);
  }
}

// After the bursts: what was scheduled completes, untimed; is_completed's last poll sees it.
void Finish() {
  if (g_call == Call::kIsCompleted) {
    WaitForRet(g_held_ret);
    g_hold_ms.push_back(static_cast<double>(NowNs() - g_held_since_ns) / 1e6);
    bool done = false;
    nrta_is_completed(g_held, &done);
    ++g_polls;
    g_polls_completed += done;
    g_rets_used = 0;
  } else if (g_call == Call::kExecuteSchedule) {
    Drain();
  }
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
  static_cast<Sample*>(out)[0] = Burst();
  static_cast<Sample*>(out)[1] = g_last_direct;
  return nullptr;
}

// Keeps a burst's sample under `name` (and, interleaved, its direct half under name_direct).
void Keep(const std::string& name, const Sample& sample) {
  g_samples[name].push_back(sample);
  if (g_settings.paired == 2) g_samples[name + "_direct"].push_back(g_last_direct);
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

// Takes --call=NAME out of argv.
void TakeCallFlag(int* argc, char** argv) {
  const char* name = "--call=";
  for (int i = 1; i < *argc; ++i) {
    if (strncmp(argv[i], name, strlen(name)) != 0) continue;
    const char* value = argv[i] + strlen(name);
    bool known = false;
    for (int c = 0; c < 3; ++c) {
      if (strcmp(value, kCallNames[c]) == 0) {
        g_call = static_cast<Call>(c);
        known = true;
      }
    }
    if (!known) {
      fprintf(stderr, "burst_bench: --call is tensor_write, execute_schedule or is_completed, "
              "not '%s'\n", value);
      exit(2);
    }
    for (int j = i; j + 1 < *argc; ++j) argv[j] = argv[j + 1];
    --*argc;
    return;
  }
}

// The tiny model of bench/apps/exec_rate.cc, loaded, with its DEVICE tensors bound.
void LoadModel() {
  auto model = nrtsim::ParseModelText(
      "model tiny\ninput a fp32 [16]\ninput b fp32 [16]\noutput out fp32 [16]\n"
      "out = add(a, b)\n");
  if (!model.ok()) exit(1);
  const std::string bytes = nrtsim::EncodeModel(*model);
  nrt_tensor_t *a = nullptr, *b = nullptr, *out = nullptr;
  if (nrt_load(bytes.data(), bytes.size(), 0, -1, &g_model) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "a", &a) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "b", &b) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "out", &out) != NRT_SUCCESS ||
      nrt_allocate_tensor_set(&g_inputs) != NRT_SUCCESS ||
      nrt_allocate_tensor_set(&g_outputs) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(g_inputs, "a", a) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(g_inputs, "b", b) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(g_outputs, "out", out) != NRT_SUCCESS) {
    fprintf(stderr, "burst_bench: the model or its tensors failed to load\n");
    exit(1);
  }
}

// --live_thread: blocked on a pipe until the end.
int g_live_pipe[2] = {-1, -1};
void* LiveThread(void*) {
  char c;
  while (read(g_live_pipe[0], &c, 1) < 0) {
  }
  return nullptr;
}

const char* EnvOr(const char* name) {
  const char* v = getenv(name);
  return v != nullptr ? v : "";
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
  printf("], \"minor_faults\": [");
  for (size_t i = 0; i < samples.size(); ++i) {
    printf("%s%ld", i == 0 ? "" : ", ", samples[i].minor_faults);
  }
  printf("], \"cpu\": [");
  for (size_t i = 0; i < samples.size(); ++i) printf("%s%d", i == 0 ? "" : ", ", samples[i].cpu);
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
  TakeFlag(&argc, argv, "--live_thread", &s.live_thread);
  TakeFlag(&argc, argv, "--paired", &s.paired);
  TakeCallFlag(&argc, argv);
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
  if (g_call != Call::kTensorWrite) {
    LoadModel();
    // Two bursts between drains (execute_schedule); one held request (is_completed).
    g_rets.assign(static_cast<size_t>(2 * s.calls + 1), kNotYet);
    // The held request's wait is clock_nanosleep: end it when asked, not up to 50 us late.
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  }
  pthread_t live_thread;
  const bool live = s.live_thread != 0 && pipe(g_live_pipe) == 0 &&
                    pthread_create(&live_thread, nullptr, &LiveThread, nullptr) == 0;
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
  if (s.paired > 2) {
    fprintf(stderr, "burst_bench: --paired is 0, 1 or 2\n");
    return 2;
  }
  if (s.paired != 0) {
    g_direct.write = reinterpret_cast<decltype(g_direct.write)>(Direct("nrt_tensor_write"));
    g_direct.schedule =
        reinterpret_cast<decltype(g_direct.schedule)>(Direct("nrta_execute_schedule"));
    g_direct.is_completed =
        reinterpret_cast<decltype(g_direct.is_completed)>(Direct("nrta_is_completed"));
  }
  if (s.paired == 2) CalibrateTsc();
  for (long i = 0; i < s.warm_bursts; ++i) {
    Prepare();
    Burst();
    Finish();
    SleepMs(s.long_pause_ms);
  }
  g_polls_saw_completed_in_bursts = 0;
  g_hold_ms.clear();  // the warm-up's were not held through a pause

  for (long round = 0; round < s.rounds; ++round) {
    for (int pass = 0; pass < (s.paired == 1 ? 2 : 1); ++pass) {
      // Paired: linked first in even rounds, libnrt's own first in odd ones.
      const bool direct = s.paired == 1 && (pass ^ static_cast<int>(round % 2)) != 0;
      g_fns = direct ? g_direct : kLinked;
      g_linked = !direct;
      const std::string suffix = direct ? "_direct" : "";
      if (s.new_thread_every > 0 && round % s.new_thread_every == 0) {
        Prepare();
        SleepMs(s.long_pause_ms);
        Sample sample[2] = {};
        pthread_t thread;
        if (pthread_create(&thread, nullptr, &NewThreadBurst, sample) == 0) {
          pthread_join(thread, nullptr);
          g_last_direct = sample[1];
          Keep("new_thread" + suffix, sample[0]);
        }
        Finish();
      }
      Prepare();
      if (s.drop_ring_mappings != 0) DropRingMappings();
      SleepMs(s.long_pause_ms);
      EvictCaches();
      Keep("after_long_pause" + suffix, Burst());
      if (g_call == Call::kExecuteSchedule) Drain();
      SleepMs(s.short_pause_ms);
      Keep("after_short_pause" + suffix, Burst());
      Keep("continuous" + suffix, Burst());
      Finish();
    }
  }
  g_fns = kLinked;
  g_linked = true;
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
         "\"evict_mib\": %ld, \"drop_ring_mappings\": %ld, \"live_thread\": %d, "
         "\"paired\": %ld, "
         "\"call\": \"%s\", \"time_scale\": \"%s\", \"queue_depth\": \"%s\", "
         "\"schedule_failures\": %lld, \"polls_saw_completed\": %lld, \"hold_ms_min\": %.1f, "
         "\"cpu\": \"%s\", \"ld_preload\": \"%s\"},\n  \"patterns\": {\n",
         s.calls, s.rounds, s.long_pause_ms, s.short_pause_ms, s.new_thread_every,
         s.warm_bursts, s.evict_mib, s.drop_ring_mappings, live ? 1 : 0, s.paired,
         kCallNames[static_cast<int>(g_call)], EnvOr("NRT_SIM_TIME_SCALE"),
         EnvOr("NRT_SIM_ASYNC_QUEUE_DEPTH"), static_cast<long long>(g_schedule_failures),
         static_cast<long long>(g_polls_saw_completed_in_bursts),
         g_hold_ms.empty() ? 0.0 : *std::min_element(g_hold_ms.begin(), g_hold_ms.end()), cpu,
         preload != nullptr ? preload : "");
  size_t i = 0;
  for (const auto& [name, samples] : g_samples) {
    PrintSamples(name.c_str(), samples, ++i == g_samples.size());
  }
  printf("  }\n}\n");
  fflush(stdout);

  nrt_tensor_free(&g_tensor);
  nrt_close();
  if (live) {
    close(g_live_pipe[1]);
    pthread_join(live_thread, nullptr);
  }
  fprintf(stderr,
          "micro_bench: traced calls: nrt_tensor_write=%lld nrt_tensor_read=0 range_pairs=0\n",
          static_cast<long long>(g_writes));
  // Polls a tracer that records every poll sees (nrta_is_completed), and those that saw their
  // request complete (what nrtprof records).
  fprintf(stderr,
          "burst_bench: async calls: nrta_execute_schedule=%lld nrta_is_completed=%lld "
          "nrta_is_completed_saw_completion=%lld\n",
          static_cast<long long>(g_schedules), static_cast<long long>(g_polls),
          static_cast<long long>(g_polls_completed));
  return 0;
}
