// What `nrtprof top` shows of a recent window: device time by process, by model and by op
// (the key_averages rows), each most first. Processes' device time counts their executions
// and host-initiated transfers; models', their executions.
//
// Pure function: thread-safe.
#ifndef NRTPROF_DAEMON_TOP_H_
#define NRTPROF_DAEMON_TOP_H_

#include <cstdint>

#include "trace/trace_model.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {

nrtprof::TopReply ComputeTop(const Trace& trace, uint64_t window_ns);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_TOP_H_
