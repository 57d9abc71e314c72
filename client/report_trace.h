// A capture's trace.pftrace as `nrtprof report` draws it: per process its lanes (framework and
// runtime per host thread, executions and DMA per NeuronCore) with their slices, nesting depth,
// arguments and flow ids; each process's `nrtprof capture` metadata (host, drops, cut off,
// notices); the window and its wall-clock start.
//
// Pure functions over a read trace: thread-safe.
#ifndef NRTPROF_CLIENT_REPORT_TRACE_H_
#define NRTPROF_CLIENT_REPORT_TRACE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "trace/perfetto_trace_reader.h"

namespace nrtprof::cli {

struct ReportSlice {
  uint64_t start_ns = 0;  // CLOCK_MONOTONIC
  uint64_t dur_ns = 0;
  uint32_t name = 0;            // index into ReportTrace::names
  uint32_t depth = 0;           // 0: outermost on its lane
  std::string args;             // "key=value, ..." as the trace's annotations say
  std::vector<uint64_t> flows;  // the flows that start, pass or end here
};

struct ReportLane {
  size_t process = 0;               // index into ReportTrace::processes
  std::string kind;                 // framework, runtime, executions, DMA
  std::string owner;                // "tid 4242" (with its name when known) or "NeuronCore 0"
  std::vector<ReportSlice> slices;  // in start order
};

struct ReportProcess {
  int32_t pid = 0;
  std::string name;     // the executable's base name
  std::string cmdline;  // its arguments joined by spaces
  // The `nrtprof capture` instant's arguments in their order (capture_id, host, drops.*, ...).
  std::vector<std::pair<std::string, std::string>> metadata;
  std::string Metadata(const std::string& key) const;
};

struct ReportTrace {
  std::vector<std::string> names;
  std::vector<ReportProcess> processes;
  std::vector<ReportLane> lanes;       // by process, then thread lanes, then NeuronCore lanes
  uint64_t first_ns = 0, last_ns = 0;  // the window: the first slice's start, the last one's end
  std::optional<int64_t> realtime_offset_ns;  // CLOCK_REALTIME - CLOCK_MONOTONIC, when known
  size_t slices = 0;
};

// An error for a trace whose slices do not pair up (an end without a begin on its track).
absl::StatusOr<ReportTrace> ReadReportTrace(const daemon::ReadTrace& read);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_REPORT_TRACE_H_
