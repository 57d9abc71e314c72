// The flusher's wait between two ticks (issue 38): kTickNs, or longer (up to kLongTickNs) while,
// at the rates seen since the tick before, every thread's ring and the profiler's own
// system-trace ring would be at most 1/kHeadroom full by the next tick: the rate may then grow
// that many times within a wait and nothing is lost. Waking less often is most of what the
// flusher saves at a steady rate (run_async_cpu.sh: waking 40 times a second instead of ~10
// was a fifth to a half of its CPU at 10,000 async executions a second).
//
// Only the system-trace documents the flusher fetched from the profiler's own capture (its
// ring of kOwnMaxEventsPerCore per NeuronCore, emptied at each tick) say how full the wait
// lets a ring get. Those a program fetches from its own capture (sys_trace_arbiter.h) come
// from a ring of the program's size, emptied at the program's pace: the flusher's wait
// changes nothing there, and they are not counted.
//
// Not thread-safe: the flusher thread's.
#ifndef NRTPROF_SHIM_BACKEND_TICK_WAIT_H_
#define NRTPROF_SHIM_BACKEND_TICK_WAIT_H_

#include <cstdint>

namespace nrtprof::shim {

class TickWait {
 public:
  static constexpr uint64_t kTickNs = 25'000'000;
  static constexpr uint64_t kLongTickNs = 100'000'000;
  static constexpr uint64_t kHeadroom = 4;

  // `own_events_per_core`: the profiler's own capture's ring, per NeuronCore.
  explicit TickWait(uint64_t own_events_per_core) : own_events_per_core_(own_events_per_core) {}

  // A thread's ring: the share of it written since the last tick.
  void NoteRingFill(double fill);
  // A system-trace document parsed: the most events one NeuronCore numbered in it (overwritten
  // ones included: DeviceTraceParser::TakeMostNumberedOnACore), and whether the flusher fetched
  // it from the profiler's own capture.
  void NoteSystemTraceDocument(uint64_t most_numbered_on_a_core, bool own_capture);
  // The wait after the tick at `now_ns`, from what was noted since the tick before (then
  // forgotten).
  uint64_t Next(uint64_t now_ns);

 private:
  const uint64_t own_events_per_core_;
  double fill_ = 0;  // the fullest ring's share since the last tick
  uint64_t last_tick_ns_ = 0;  // 0: none yet
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_TICK_WAIT_H_
