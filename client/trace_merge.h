// One Perfetto trace of several hosts' captures, for `nrtprof capture --hosts`: each host's
// trace.pftrace (as the daemon's writer made it, read back with perfetto_trace_reader.h) put on
// the caller's CLOCK_MONOTONIC timeline by that host's clock offset (clock_offset.h): through
// the wall clocks when the trace states its own (the daemon's REALTIME - MONOTONIC in its clock
// snapshot), less the host's measured realtime offset; else by the monotonic offset. Its
// processes are named "EXECUTABLE @ HOST", and each host has a track "host HOST (HOSTNAME):
// clock OFFSET ± BOUND" whose one instant carries the same figures in ns.
//
// Each host's packets keep a sequence of their own (their interned names stay theirs); track
// uuids and flow ids are moved into a range per host. A host whose pids or tids meet those of
// an earlier host has them moved too (by HOST_INDEX << 22, above any Linux pid), and says the
// real pid in its process name, so that the processes stay apart in the Perfetto UI.
// docs/trace_format.md ("Merged trace of several hosts") is the layout.
//
// Pure function: thread-safe.
#ifndef NRTPROF_CLIENT_TRACE_MERGE_H_
#define NRTPROF_CLIENT_TRACE_MERGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trace/perfetto_trace_reader.h"

namespace nrtprof::cli {

struct HostTrace {
  std::string host;      // as the user named it: "10.0.0.7:50051"
  std::string hostname;  // the daemon's machine's name, if known
  std::string pftrace;   // the bytes of its trace.pftrace
  // The host's clocks minus ours (ClockEstimate).
  int64_t monotonic_offset_ns = 0;
  int64_t realtime_offset_ns = 0;
  uint64_t error_bound_ns = 0;
};

// The merged trace's bytes. `realtime_minus_monotonic_ns`: ours, for wall-clock labels. An
// error, naming the host, when a host's bytes do not read back as a Perfetto trace.
absl::StatusOr<std::string> MergeHostTraces(const std::vector<HostTrace>& hosts,
                                            int64_t realtime_minus_monotonic_ns);

// One host's part of a merged trace, as its own file had it but on the caller's monotonic
// clock: its packets (their times resolved), its real pids and tids, its processes' names
// without " @ HOST", and a first packet whose clock snapshot states the host's own wall clock
// (the caller's REALTIME - MONOTONIC plus the host's measured offset), so that what is computed
// from it (trace/trace_from_pftrace.h, the summary's window) is what the host's files say.
struct MergedHost {
  std::string host;  // as the user named it
  uint64_t error_bound_ns = 0;  // its clock offset is within this of the truth
  daemon::ReadTrace read;
};

// The hosts of a trace MergeHostTraces wrote, in their order; empty for any other trace (one
// host's capture).
std::vector<MergedHost> SplitMergedTrace(const daemon::ReadTrace& merged);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_TRACE_MERGE_H_
