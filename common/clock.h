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

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_CLOCK_H_
