// Which framework range each runtime call ran in: the innermost range on the call's thread
// whose span contains the call's. The correlator sets it when it builds a Trace; the trace
// reader (trace_from_pftrace.h) sets it again from the file's slices, the same way, so that a
// summary recomputed from the trace charges every call to the same row.
//
// A pure function: thread-safe.
#ifndef NRTPROF_TRACE_CALL_RANGES_H_
#define NRTPROF_TRACE_CALL_RANGES_H_

#include <vector>

#include "trace/trace_model.h"

namespace nrtprof::daemon {

// Sets `range` of every call in *calls (0 where no range contains it). `ranges` must be, per
// thread, in (start, outer first) order, and *calls in start order, as a ProcessTrace keeps them.
void AssignCallRanges(const CaptureVector<RangeEvent>& ranges, CaptureVector<ApiCall>* calls);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_CALL_RANGES_H_
