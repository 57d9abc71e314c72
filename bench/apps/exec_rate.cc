// A program that calls nrt_execute as fast as the (simulated) device lets it, for a fixed
// time, and prints how many calls per second it completed. bench/run runs it with and without
// the shim to measure the throughput a busy program loses to the profiler. With
// NRT_SIM_TIME_SCALE=0.25 each execution of this model takes ~91 us on the host: about 10,000
// calls per second, the reference rate.
//
// With --sys_trace the program runs the runtime's system trace itself, as a profiler would
// (started after nrt_init with every event type, fetched every 100 ms from a second thread,
// JSON freed unread): what the runtime's own device tracing costs, without nrtprof (which asks
// for fewer types: shim/README.md). EXEC_RATE_FETCH_MS sets that period
// (25: as often as nrtprof's flusher fetches). --sys_trace_types A,B,... captures only the
// named types (nrtprof's own choice: nrt_load,device_exec,tensor_read,tensor_write,
// dmem_buf_copyin,dmem_buf_copyout,timestamp_sync), so that what the runtime's trace costs and
// what nrtprof adds to it can be told apart.
//
// With --paced RATE the program calls at RATE per second, spinning (not sleeping) between calls,
// and times each call alone; run at NRT_SIM_TIME_SCALE=0 the runtime does not sleep either, so
// a call during which the thread switched away voluntarily is a call that waited (for a lock,
// on I/O): bench/lossless/run_kill.sh counts them with and without the profiler.
//
// With --gap US the program sleeps US microseconds (clock_nanosleep) before each call and times
// each call alone: the shape of a training step's calls, each after a wait for the device. Run
// at NRT_SIM_TIME_SCALE=0 with EXEC_RATE_TIMER_SLACK_NS=1, a call's time is then the host's
// work in it after a sleep (the runtime's, the shim's, the tracing's), measured call by call
// instead of through a rate: bench/always_on/run_paired.sh --gap. It also prints how late the
// sleeps ended (wake_late_ns_*, past the gap): the wake-up's own latency, which threads running
// beside the program could lengthen.
//
// EXEC_RATE_TIMER_SLACK_NS sets the calling thread's timer slack first (prctl): the simulator
// waits for its device with clock_nanosleep, which the kernel may end up to the thread's slack
// (50 us by default) late, and when within that span it ends depends on the machine's other
// interrupts. At NRT_SIM_TIME_SCALE=0.01 that slack is most of each call (~75 us). With 1 ns a
// call lasts its modelled device time: NRT_SIM_TIME_SCALE=0.2 gives about 10,000 calls per
// second here (bench/always_on/run_paired.sh).
// EXEC_RATE_CALLS_FILE=PATH writes each call's time (ns), one per line in call order, for a
// look at when the slow calls come (in clusters, or one every flusher tick). The second line
// counts the thread's moves between CPUs ("migrations", from /proc/thread-self/sched).
//
// With --async RATE (issue 38) the program uses the explicit async API instead (nrt/nrt_async.h):
// RATE times a second (paced by clock_nanosleep to absolute deadlines) it schedules one
// execution with nrta_execute_schedule and polls the one before it with nrta_is_completed (at
// NRT_SIM_TIME_SCALE <= 0.2 it has completed: the poll that sees it is the one nrtprof
// records). Run at NRT_SIM_TIME_SCALE=0.1: each execution of the tiny model (~370 us of device
// time) then holds its queue ~37 us of the host's, and the queue keeps up with 10,000 a second.
//
// At the end it prints every thread of the process with its own CPU time (on-CPU ns from
// /proc/self/task/TID/schedstat) from EXEC_RATE_CPU_FROM seconds into the run (default 1: the
// shim's rings and the runtime's trace buffers filled once) to the end, and in percent of one
// core: "thread NAME TID CPU_MS PERCENT", then the sum over the threads that are not the
// program's nor the runtime's ("nrtprof_threads_cpu_percent": the shim's threads, named
// nrtprof-*, and gRPC's, which the shim starts; without the shim, 0).
//   usage: exec_rate SECONDS [--sys_trace [--sys_trace_types A,B,...]]
//                    [--paced RATE | --gap US | --async RATE]
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <map>

#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "nrt/nrt_sys_trace.h"
#include "sim/model_format.h"
#include "sim/model_text.h"

namespace {

// The calling thread's count of moves between CPUs so far (the scheduler's debug file), or -1
// where the kernel does not show it.
long Migrations() {
  FILE* f = fopen("/proc/thread-self/sched", "r");
  if (f == nullptr) return -1;
  char line[256];
  long n = -1;
  while (fgets(line, sizeof line, f) != nullptr) {
    if (strncmp(line, "se.nr_migrations", 16) == 0) {
      const char* colon = strchr(line, ':');
      if (colon != nullptr) n = atol(colon + 1);
      break;
    }
  }
  fclose(f);
  return n;
}

// The calling thread's time spent runnable but waiting for a CPU so far, ns (the second field
// of /proc/thread-self/schedstat), or -1 where the kernel does not keep it.
long long RunQueueWaitNs() {
  FILE* f = fopen("/proc/thread-self/schedstat", "r");
  if (f == nullptr) return -1;
  unsigned long long on_cpu = 0, waiting = 0;
  const bool ok = fscanf(f, "%llu %llu", &on_cpu, &waiting) == 2;
  fclose(f);
  return ok ? static_cast<long long>(waiting) : -1;
}

// Every thread of this process: tid -> (name, on-CPU ns so far).
std::map<int, std::pair<std::string, uint64_t>> ThreadsCpu() {
  std::map<int, std::pair<std::string, uint64_t>> threads;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return threads;
  while (dirent* e = readdir(dir)) {
    const int tid = atoi(e->d_name);
    if (tid <= 0) continue;
    char path[96], name[64] = "?";
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
    if (FILE* f = fopen(path, "r")) {
      if (fgets(name, sizeof name, f) != nullptr) name[strcspn(name, "\n")] = '\0';
      fclose(f);
    }
    unsigned long long ns = 0;
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", tid);
    if (FILE* f = fopen(path, "r")) {
      if (fscanf(f, "%llu", &ns) != 1) ns = 0;
      fclose(f);
    }
    threads[tid] = {name, ns};
  }
  closedir(dir);
  return threads;
}

// Threads the shim brings: its own (nrtprof-*) and gRPC's, which name themselves or bear their
// maker's name (nrtprof-start).
bool ProfilerThread(const std::string& name) {
  static const char* const kPrefixes[] = {"nrtprof", "grpc", "default-execut", "resolver-exec",
                                          "timer_manager", "global-executo", "event_engine", "nexting_thread"};
  for (const char* p : kPrefixes) {
    if (name.compare(0, strlen(p), p) == 0) return true;
  }
  return false;
}

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
  bool sys_trace = false, paced = false, async = false, bad = !(seconds > 0);
  double rate = 0;    // --paced
  double gap_us = 0;  // --gap
  const char* types = nullptr;  // --sys_trace_types: null, every type
  for (int i = 2; i < argc && !bad; ++i) {
    if (strcmp(argv[i], "--sys_trace") == 0) {
      sys_trace = true;
    } else if (strcmp(argv[i], "--sys_trace_types") == 0 && i + 1 < argc && types == nullptr) {
      types = argv[++i];
    } else if (strcmp(argv[i], "--paced") == 0 && i + 1 < argc && rate == 0 && gap_us == 0) {
      rate = atof(argv[++i]);
      paced = true;
      bad = !(rate > 0);
    } else if (strcmp(argv[i], "--async") == 0 && i + 1 < argc && rate == 0 && gap_us == 0) {
      rate = atof(argv[++i]);
      async = true;
      bad = !(rate > 0);
    } else if (strcmp(argv[i], "--gap") == 0 && i + 1 < argc && rate == 0 && gap_us == 0) {
      gap_us = atof(argv[++i]);
      bad = !(gap_us > 0);
    } else {
      bad = true;
    }
  }
  bad = bad || (types != nullptr && !sys_trace);
  if (bad) {
    fprintf(stderr,
            "usage: exec_rate SECONDS [--sys_trace [--sys_trace_types A,B,...]]"
            " [--paced RATE | --gap US | --async RATE]\n");
    return 2;
  }
  if (const char* slack = getenv("EXEC_RATE_TIMER_SLACK_NS"); slack != nullptr) {
    const long ns = atol(slack);
    if (ns < 1 || prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(ns), 0, 0, 0) != 0) {
      fprintf(stderr,
              "exec_rate: EXEC_RATE_TIMER_SLACK_NS must be a count of ns from 1, not '%s'\n",
              slack);
      return 2;
    }
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
    // The capacity nrtprof asks for (shim/backend/flusher.h: a quarter of the runtime's default).
    nrt_sys_trace_config_set_max_events_per_nc(config, 8192);
    if (types != nullptr) {
      const char** all = nullptr;
      size_t count = 0;
      Check(nrt_sys_trace_get_event_types(&all, &count), "nrt_sys_trace_get_event_types");
      for (size_t i = 0; i < count; ++i) {
        Check(nrt_sys_trace_config_set_capture_enabled_for_event_type(config, all[i], false),
              "nrt_sys_trace_config_set_capture_enabled_for_event_type");
      }
      nrt_sys_trace_free_event_types(all, count);
      const std::string list = types;
      for (size_t at = 0; at <= list.size();) {
        size_t comma = list.find(',', at);
        if (comma == std::string::npos) comma = list.size();
        const std::string type = list.substr(at, comma - at);
        if (nrt_sys_trace_config_set_capture_enabled_for_event_type(config, type.c_str(), true) !=
            NRT_SUCCESS) {
          fprintf(stderr, "exec_rate: the runtime has no event type '%s'\n", type.c_str());
          nrt_sys_trace_config_free(config);
          return 2;
        }
        at = comma + 1;
      }
    }
    Check(nrt_sys_trace_start(config), "nrt_sys_trace_start");
    nrt_sys_trace_config_free(config);
    const char* period = getenv("EXEC_RATE_FETCH_MS");
    const int fetch_ms = period != nullptr ? atoi(period) : 100;
    fetcher = std::thread([&done, fetch_ms] {
      while (!done.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(fetch_ms));
        char* buffer = nullptr;
        size_t size = 0;
        if (nrt_sys_trace_fetch_events(&buffer, &size, nullptr) == NRT_SUCCESS) {
          nrt_sys_trace_buffer_free(buffer);
        }
      }
    });
  }
  Check(nrt_execute(m, in, outs), "warm-up nrt_execute");
  // Every thread's CPU time from EXEC_RATE_CPU_FROM seconds into the run (Snap) to its end.
  const char* cpu_from_env = getenv("EXEC_RATE_CPU_FROM");
  const double cpu_from = cpu_from_env != nullptr ? atof(cpu_from_env) : 1.0;
  std::map<int, std::pair<std::string, uint64_t>> cpu_at_from;
  double from_time = 0;
  bool have_from = false;
  auto report_threads = [&](double end_time) {
    if (!have_from) return;
    const auto cpu_at_end = ThreadsCpu();
    const double window_ns = (end_time - from_time) * 1e9;
    double profiler_ns = 0;
    for (const auto& [tid, thread] : cpu_at_end) {
      const auto was = cpu_at_from.find(tid);
      const uint64_t before = was != cpu_at_from.end() ? was->second.second : 0;
      const double ns = static_cast<double>(thread.second - before);
      printf("thread %s %d %.2f %.3f%%\n", thread.first.c_str(), tid, ns / 1e6,
             100.0 * ns / window_ns);
      if (ProfilerThread(thread.first)) profiler_ns += ns;
    }
    printf("threads_cpu_window_s %.3f nrtprof_threads_cpu_ms %.2f nrtprof_threads_cpu_percent %.3f\n",
           window_ns / 1e9, profiler_ns / 1e6, 100.0 * profiler_ns / window_ns);
  };
  if (async) {
    const double start = Now();
    constexpr NRT_STATUS kNotYet = static_cast<NRT_STATUS>(0x7fff);
    std::vector<NRT_STATUS> rets(64, kNotYet);  // ring of the requests' `ret`s
    nrta_seq_t previous = 0, seq = 0;
    uint64_t scheduled = 0, polls = 0, polls_completed = 0, queue_full = 0, late = 0;
    const long period_ns = static_cast<long>(1e9 / rate);
    timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (double now = Now(); now - start < seconds; now = Now()) {
      if (!have_from && now - start >= cpu_from) {
        cpu_at_from = ThreadsCpu();
        from_time = Now();
        have_from = true;
      }
      next.tv_nsec += period_ns;
      if (next.tv_nsec >= 1000000000) {
        next.tv_nsec -= 1000000000;
        ++next.tv_sec;
      }
      timespec mono;
      clock_gettime(CLOCK_MONOTONIC, &mono);
      if (mono.tv_sec > next.tv_sec + 1) {
        next = mono;  // far behind (the machine paused the program): no burst to catch up
        ++late;
      }
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr);
      if (previous != 0) {
        bool done = false;
        Check(nrta_is_completed(previous, &done), "nrta_is_completed");
        ++polls;
        polls_completed += done;
      }
      NRT_STATUS* ret = &rets[scheduled % rets.size()];
      *ret = kNotYet;
      const NRT_STATUS status = nrta_execute_schedule(m, in, outs, 0, ret, &seq);
      if (status == NRT_QUEUE_FULL) {
        ++queue_full;
        continue;
      }
      Check(status, "nrta_execute_schedule");
      ++scheduled;
      previous = seq;
    }
    const double end = Now();
    report_threads(end);
    // The last request completes before the runtime closes.
    for (bool done = false; previous != 0 && !done;) {
      Check(nrta_is_completed(previous, &done), "nrta_is_completed");
      if (!done) usleep(100);
    }
    printf("async scheduled %llu seconds %.3f rate %.1f polls %llu polls_completed %llu "
           "queue_full %llu far_behind %llu\n",
           static_cast<unsigned long long>(scheduled), end - start, scheduled / (end - start),
           static_cast<unsigned long long>(polls), static_cast<unsigned long long>(polls_completed),
           static_cast<unsigned long long>(queue_full), static_cast<unsigned long long>(late));
    if (sys_trace) {
      done.store(true);
      fetcher.join();
      nrt_sys_trace_stop();
    }
    nrt_close();
    return 0;
  }
  const double start = Now();
  timespec cpu0;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
  const double start_cpu = static_cast<double>(cpu0.tv_sec) + cpu0.tv_nsec * 1e-9;
  uint64_t calls = 0;
  double longest = 0;  // the longest single call, seconds
  // How long calls took, in 50 us buckets up to 10 ms (the last one: longer): a profiler that
  // made calls wait would show in the tail, beside the machine's own preemptions.
  std::vector<uint64_t> buckets(201);
  uint64_t calls_that_waited = 0;  // --paced: the thread switched away voluntarily in them
  double longest_wait = 0;         // the longest of those calls, seconds
  rusage usage0;
  getrusage(RUSAGE_THREAD, &usage0);
  const long migrations0 = Migrations();
  const long long waited0 = RunQueueWaitNs();
  // Each call's time, for its median: steadier than the rate, which moves with the host.
  std::vector<uint32_t> call_ns;
  call_ns.reserve(static_cast<size_t>(std::min(seconds, 60.0) * 500'000));
  // --gap: how late each sleep ended (ns past the gap): the wake-up's latency, which what runs
  // beside the program (on its CPU when it wakes) lengthens.
  std::vector<uint32_t> late_ns;
  if (gap_us > 0) late_ns.reserve(call_ns.capacity());
  const timespec gap = {0, static_cast<long>(gap_us * 1000)};
  for (double before = Now(); before - start < seconds;) {
    if (!have_from && before - start >= cpu_from) {
      cpu_at_from = ThreadsCpu();
      from_time = Now();
      have_from = true;
      before = from_time;
    }
    rusage in_call0;
    if (gap_us > 0) {
      const double asleep = Now();
      clock_nanosleep(CLOCK_MONOTONIC, 0, &gap, nullptr);
      before = Now();
      late_ns.push_back(
          static_cast<uint32_t>(std::clamp((before - asleep) * 1e9 - gap_us * 1e3, 0.0, 4e9)));
    }
    if (paced) {
      while (Now() < start + static_cast<double>(calls) / rate) {
      }
      getrusage(RUSAGE_THREAD, &in_call0);
      before = Now();
    }
    Check(nrt_execute(m, in, outs), "nrt_execute");
    ++calls;
    const double after = Now();
    const double took = after - before;
    call_ns.push_back(static_cast<uint32_t>(std::min(took * 1e9, 4e9)));
    if (paced) {
      rusage in_call;
      getrusage(RUSAGE_THREAD, &in_call);
      if (in_call.ru_nvcsw != in_call0.ru_nvcsw) {
        ++calls_that_waited;
        longest_wait = std::max(longest_wait, took);
      }
    }
    if (took > longest) longest = took;
    ++buckets[std::min<size_t>(static_cast<size_t>(took * 20000), buckets.size() - 1)];
    before = after;
  }
  rusage usage;
  getrusage(RUSAGE_THREAD, &usage);
  const long migrations1 = Migrations();
  const long long waited1 = RunQueueWaitNs();
  const double elapsed = Now() - start;
  report_threads(start + elapsed);
  timespec cpu;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  const double cpu_s = static_cast<double>(cpu.tv_sec) + cpu.tv_nsec * 1e-9 - start_cpu;
  // The calling thread's CPU time per call: the runtime's own work, plus the shim's and the
  // runtime's tracing when they are on. Steadier than the rate on a busy machine.
  // runq_wait_us_per_call: how long, per call, the thread was ready to run but waited for a
  // CPU (other threads on it when it woke); -1 where the kernel does not say.
  printf(
      "calls %llu seconds %.3f rate %.1f cpu_us_per_call %.2f longest_call_us %.0f"
      " runq_wait_us_per_call %.3f\n",
      static_cast<unsigned long long>(calls), elapsed, calls / elapsed,
      calls > 0 ? cpu_s * 1e6 / static_cast<double>(calls) : 0.0, longest * 1e6,
      waited0 < 0 || waited1 < 0 || calls == 0
          ? -1.0
          : static_cast<double>(waited1 - waited0) / 1e3 / static_cast<double>(calls));
  // The tail: the call time below which 99.9% of calls finished (to 50 us), the calls over
  // 1 ms, and the calling thread's context switches: voluntary ones (it blocked: a lock, a
  // syscall) and involuntary ones (the machine preempted it).
  uint64_t seen = 0;
  size_t p999 = 0;
  while (p999 < buckets.size() && (seen += buckets[p999]) * 1000 < calls * 999) ++p999;
  uint64_t over_1ms = 0;
  for (size_t i = 20; i < buckets.size(); ++i) over_1ms += buckets[i];
  // migrations: how often the scheduler moved the thread to another CPU (-1: not shown).
  printf(
      "p999_us %zu calls_over_1ms %llu voluntary_switches %ld involuntary_switches %ld"
      " migrations %ld",
      (p999 + 1) * 50, static_cast<unsigned long long>(over_1ms), usage.ru_nvcsw - usage0.ru_nvcsw,
      usage.ru_nivcsw - usage0.ru_nivcsw,
      migrations0 < 0 || migrations1 < 0 ? -1 : migrations1 - migrations0);
  if (paced) {
    printf(" calls_that_waited %llu longest_wait_us %.0f",
           static_cast<unsigned long long>(calls_that_waited), longest_wait * 1e6);
  }
  printf("\n");
  if (!call_ns.empty()) {
    // A call's median, mean and 90th percentile, in ns (with --gap: a call after a sleep).
    double sum = 0;
    for (uint32_t ns : call_ns) sum += ns;
    const double mean = sum / static_cast<double>(call_ns.size());
    if (const char* dump = getenv("EXEC_RATE_CALLS_FILE"); dump != nullptr) {
      if (FILE* f = fopen(dump, "w"); f != nullptr) {
        for (uint32_t ns : call_ns) fprintf(f, "%u\n", ns);
        fclose(f);
      }
    }
    std::sort(call_ns.begin(), call_ns.end());
    printf("call_ns_median %u call_ns_mean %.0f call_ns_p90 %u gap_us %.0f",
           call_ns[call_ns.size() / 2], mean, call_ns[call_ns.size() * 9 / 10], gap_us);
    if (!late_ns.empty()) {
      double late_sum = 0;
      for (uint32_t ns : late_ns) late_sum += ns;
      std::sort(late_ns.begin(), late_ns.end());
      printf(" wake_late_ns_median %u wake_late_ns_mean %.0f wake_late_ns_p90 %u",
             late_ns[late_ns.size() / 2], late_sum / static_cast<double>(late_ns.size()),
             late_ns[late_ns.size() * 9 / 10]);
    }
    printf("\n");
  }
  if (sys_trace) {
    done.store(true);
    fetcher.join();
    nrt_sys_trace_stop();
  }
  nrt_close();
  return 0;
}
