// A capture of whole training steps (nrtprof capture --iterations): each process's part of a
// correlated Trace cut to the span of its steps first..last (its ranges "ProfilerStep#N",
// nrtprof_step). Kept: the ranges and runtime calls that start within the span (and ranges that
// also end within it), the device events of those calls, and uncorrelated device events that
// start within it. A process with none of the steps is left out, with a line in *notes; one
// with only some of them keeps those (a capture ended early).
//
// Pure; thread-compatible.
#ifndef NRTPROF_DAEMON_STEP_WINDOW_H_
#define NRTPROF_DAEMON_STEP_WINDOW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/trace_model.h"

namespace nrtprof::daemon {

void ClipToSteps(uint64_t first, uint64_t last, Trace* trace, std::vector<std::string>* notes);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_STEP_WINDOW_H_
