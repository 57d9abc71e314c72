// A capture's summary, read back: from the capture folder, its summary.json, or one of its
// files (nrtprof summary, nrtprof diff). One-line errors name the path.
#ifndef NRTPROF_CLIENT_SUMMARY_FILE_H_
#define NRTPROF_CLIENT_SUMMARY_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "trace/summary.h"

namespace nrtprof::cli {

// NotFound for a path that is not there; InvalidArgument for one that is no capture.
absl::StatusOr<daemon::Summary> ReadCaptureSummary(const std::string& path);

// The summary recomputed from the capture's trace.pftrace (`path`: the folder, the trace, or
// another of its files) instead of read from its summary.json: for a capture whose summary
// files are missing, or to check them. The merged trace of `capture --hosts` gives the merged
// summary (hosts_summary.h) of its hosts' parts (trace_merge.h). DataLoss for a trace that does
// not read back.
absl::StatusOr<daemon::Summary> RecomputeCaptureSummary(const std::string& path);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_SUMMARY_FILE_H_
