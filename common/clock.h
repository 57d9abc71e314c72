// Host clocks as nrtprof timestamps them: CLOCK_MONOTONIC for every host event, CLOCK_REALTIME
// only to place a capture in wall time (ClockSample in proto/nrtprof.proto).
//
// Header only, no allocation, async-signal-safe: the shim's hot path reads the clock through
// MonotonicNs() and nothing else.
#ifndef NRTPROF_COMMON_CLOCK_H_
#define NRTPROF_COMMON_CLOCK_H_

#include <stdint.h>
#include <time.h>

namespace nrtprof {

inline uint64_t ClockNs(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t MonotonicNs() { return ClockNs(CLOCK_MONOTONIC); }
inline uint64_t RealtimeNs() { return ClockNs(CLOCK_REALTIME); }

// CLOCK_REALTIME - CLOCK_MONOTONIC now, from the readings of `read_clock` (clock_gettime's, or a
// test's) with the least time between them: the runtime stamps device events on the first (and
// the simulated one maps its device clock through it), the shim its records on the second.
// Two readings of CLOCK_MONOTONIC around one of CLOCK_REALTIME bound the pair's error; a thread
// preempted between two readings (a busy host) has a gap of milliseconds, and every event mapped
// with the pair would move by half of it: of a few tries, the pair of the smallest gap.
inline int64_t RealtimeOffsetNs(int64_t (*read_clock)(clockid_t)) {
  constexpr int kTries = 3;
  int64_t best_gap = INT64_MAX;
  int64_t offset = 0;
  for (int i = 0; i < kTries; ++i) {
    const int64_t a = read_clock(CLOCK_MONOTONIC);
    const int64_t real = read_clock(CLOCK_REALTIME);
    const int64_t b = read_clock(CLOCK_MONOTONIC);
    if (b - a < best_gap) {
      best_gap = b - a;
      offset = real - (a + (b - a) / 2);
    }
  }
  return offset;
}

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_CLOCK_H_
