// Cutting a correlated Trace to a window.
//
// A capture of whole training steps (nrtprof capture --iterations): each process's part of a
// correlated Trace cut to the span of its steps first..last (its ranges "ProfilerStep#N",
// nrtprof_step). Kept: the ranges and runtime calls that start within the span (and ranges that
// also end within it), the device events of those calls, and uncorrelated device events that
// start within it. A process with none of the steps is left out, with a line in *notes; one
// with only some of them keeps those (a capture ended early).
//
// Pure; thread-compatible.
#ifndef NRTPROF_TRACE_STEP_WINDOW_H_
#define NRTPROF_TRACE_STEP_WINDOW_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trace/trace_model.h"

namespace nrtprof::daemon {

// For a process whose program holds the runtime's system trace itself
// (ProcessTrace::device_events_with_program): counts its successful executions without device
// events into executions_held_by_program, and says so in its one notice of that kind, replacing
// an earlier one. Called by the correlator, and again by whatever cuts the process to a window (below), so that
// the count is the window's, not the process's.
void NoteExecutionsHeldByProgram(ProcessTrace* trace);

void ClipToSteps(uint64_t first, uint64_t last, Trace* trace, std::vector<std::string>* notes);

// The always-on fold's window (CollectorCore::FoldMetrics): each process's ranges, calls and
// uncorrelated device events that end in [begin, end), and the device events of the calls kept.
// By the end, since an event is sent once it ends: folds of back-to-back windows count each
// event once, a long step included, as long as it arrived by the time its window was read.
// `shift`, if given, is what to add to a process's times to put them on the window's clock
// (a process on another machine has a monotonic clock of its own).
void ClipToEnds(uint64_t begin, uint64_t end, Trace* trace,
                const std::function<int64_t(const ProcessTrace&)>& shift = nullptr);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_STEP_WINDOW_H_
