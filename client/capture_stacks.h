// A capture's device time by stack (trace/pprof_export.h) from its trace.pftrace, read: what
// `nrtprof export` writes and the flame graph of `nrtprof report` draws, made the one way for
// both. The trace is rebuilt as `nrtprof summary --from-trace` rebuilds it, each host's part of a
// merged capture (capture --hosts) alone, with its host.
//
// Pure function: thread-safe.
#ifndef NRTPROF_CLIENT_CAPTURE_STACKS_H_
#define NRTPROF_CLIENT_CAPTURE_STACKS_H_

#include <string>

#include "absl/status/status.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/pprof_export.h"

namespace nrtprof::cli {

// Adds the stacks of `read` (the file at `path`, named in errors) to `profile`. A trace not laid
// out as nrtprof writes it: DataLoss, its message the one line to print.
absl::Status AddCaptureStacks(const daemon::ReadTrace& read, const std::string& path,
                              daemon::StackProfile* profile);
// The same, `read`'s packets given back as soon as the Trace is rebuilt from them, before the
// stacks are made (`nrtprof export`: its peak memory). `read` is left empty.
absl::Status AddCaptureStacks(daemon::ReadTrace&& read, const std::string& path,
                              daemon::StackProfile* profile);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_CAPTURE_STACKS_H_
