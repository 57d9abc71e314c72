// Rebuilds, from a trace.pftrace, the correlated Trace it was written from — as much of it as
// the file keeps (docs/trace_format.md, "trace.pftrace"): each process with its command line,
// thread names, framework ranges (nesting from the slices), runtime calls with their arguments
// and the range each ran in, device work on each NeuronCore with the call that caused it, and
// the process's drop counters, notices and cut-off flag from its "nrtprof capture" instant,
// and, of a capture a trigger rule took, the rule and its reason from the "nrtprof triggers"
// track's instant.
//
// What the file does not keep is left empty: model files, the host (unless the instant names
// it), a thread's events before its track was written. Slice times are what the lanes drew:
// where slices had to be clamped to nest (trace_lanes.h), a recomputed summary can differ from
// the one the capture wrote.
//
// `nrtprof summary --from-trace` recomputes the table from it. A pure function: thread-safe.
#ifndef NRTPROF_TRACE_TRACE_FROM_PFTRACE_H_
#define NRTPROF_TRACE_TRACE_FROM_PFTRACE_H_

#include "absl/status/statusor.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/trace_model.h"

namespace nrtprof::daemon {

// DATA_LOSS, saying what, for a file that is not laid out as nrtprof writes it (an event on an
// unknown track, a parent track the file never describes, a slice end with no slice open, a
// name id never defined). As in Perfetto, a parent may be described after its children, and a
// track without a parent that is no process or thread (the host tracks of a merged trace,
// trace_merge.h) is a global track: what is on it is not the processes' and is skipped.
absl::StatusOr<Trace> TraceFromPerfetto(const ReadTrace& read);
// The same, `read`'s packets (their bytes, the inflated bundles, their times) given back once
// every event is read, before the events are sorted, so that the sorts reuse their memory: for
// a caller done with them (`nrtprof export`'s peak memory). `read` is left without packets.
absl::StatusOr<Trace> TraceFromPerfetto(ReadTrace&& read);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_TRACE_FROM_PFTRACE_H_
