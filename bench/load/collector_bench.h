// What the benches that drive CollectorCore by hand with a synthetic stream share
// (fold_bench.cc, triggers_bench.cc): the stream's clock, a sink that writes nothing, and the
// calling thread's CPU time to charge each phase with. Header-only; not thread-safe (a bench
// runs the core on one thread).
#ifndef NRTPROF_BENCH_LOAD_COLLECTOR_BENCH_H_
#define NRTPROF_BENCH_LOAD_COLLECTOR_BENCH_H_

#include <time.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/collector_core.h"
#include "trace/trace_sink.h"

namespace nrtprof::bench {

// The calling thread's CPU time: what a phase costs, whatever else the machine runs.
inline uint64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

// The stream's time: set by the bench, never waited on (no capture runs).
class StreamClock : public daemon::CollectorClock {
 public:
  uint64_t MonotonicNs() override { return now_; }
  int64_t RealtimeNs() override {
    return 1'700'000'000'000'000'000 + static_cast<int64_t>(now_);  // as the synthetic shim's
  }
  void WaitUntil(std::condition_variable*, std::unique_lock<std::mutex>*, uint64_t) override {}
  // Never goes back: a batch that arrives late leaves the clock where it is.
  void Set(uint64_t ns) { now_ = std::max(now_, ns); }

 private:
  uint64_t now_ = 0;
};

// No capture is written: the benches measure the ingest and the fold.
class NoSink : public daemon::TraceSink {
 public:
  absl::Status Write(const daemon::Trace&, const daemon::Summary&, const std::string&,
                     std::vector<std::string>*) override {
    return absl::OkStatus();
  }
};

}  // namespace nrtprof::bench

#endif  // NRTPROF_BENCH_LOAD_COLLECTOR_BENCH_H_
