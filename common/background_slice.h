// Telling the scheduler that a thread does background work: a long time slice.
//
// Measured (BENCHMARKS.md, "Session 20"): a program calling nrt_execute 10,000 times a second
// sleeps in each call and wakes on its CPU, where nrtprof's flusher (a burst of ~0.6 ms every
// 25 ms), gRPC's threads or the daemon's may be running. Linux's EEVDF scheduler lets a running
// thread finish the slice it was given before a waking one of the same weight takes the CPU,
// so the program's thread waited about 1 us a call on the run queue. A thread whose own slice
// is longer than the waking thread's is preempted at once instead (Linux 6.12+: custom slices
// through sched_setattr's sched_runtime, and the PREEMPT_SHORT rule): the program's thread then
// waited about 0.2 us a call more than without nrtprof, as much as with the runtime's own
// trace alone.
//
// The thread keeps its policy, nice value and so its share of a busy machine; only when a waking
// thread may take the CPU from it changes. Threads it creates afterwards inherit the slice (the
// kernel copies it to a new thread). Kernels before 6.12 accept the call and ignore the slice.
// A thread under a real-time or idle policy is left alone, and so is one whose request the
// kernel refuses (a seccomp filter).
#ifndef NRTPROF_COMMON_BACKGROUND_SLICE_H_
#define NRTPROF_COMMON_BACKGROUND_SLICE_H_

#include <stdint.h>

namespace nrtprof {

// The slice asked for: the kernel's largest (it clamps custom slices to 0.1-100 ms).
inline constexpr uint64_t kBackgroundSliceNs = 100'000'000;

// Gives the calling thread kBackgroundSliceNs if its policy is SCHED_OTHER or SCHED_BATCH;
// true if the kernel took the request. Async-signal-safe (two system calls).
bool UseBackgroundSlice();

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_BACKGROUND_SLICE_H_
