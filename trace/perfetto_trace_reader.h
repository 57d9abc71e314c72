// Reads a trace.pftrace back the way Perfetto's trace processor does, for tests: expands the
// compressed_packets bundles into the flat list of packets they stand for, and resolves each
// packet's timestamp through the sequence's clocks (TracePacketDefaults, incremental clocks
// declared by a ClockSnapshot) to nanoseconds on the file's primary clock, MONOTONIC.
//
// For tests, and for `nrtprof summary`, which refuses a capture whose trace does not read back.
// Pure functions: thread-safe.
#ifndef NRTPROF_TRACE_PERFETTO_TRACE_READER_H_
#define NRTPROF_TRACE_PERFETTO_TRACE_READER_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/perfetto_trace.pb.h"

namespace nrtprof::daemon {

struct ReadTrace {
  perfetto::protos::Trace trace;  // every packet, bundles expanded in place
  // Per packet: its time in MONOTONIC nanoseconds, or 0 for a packet without a timestamp.
  std::vector<uint64_t> times;
  size_t bundles = 0;  // compressed_packets bundles expanded
  // The values of each counter track (TYPE_COUNTER events), by the track's uuid: (time as in
  // `times`, value), in the file's order.
  std::map<uint64_t, std::vector<std::pair<uint64_t, int64_t>>> counters;
};

// An error when the bytes, or a bundle's inflated bytes, are not a Trace, or a timestamp is on
// a clock the file never declared.
absl::StatusOr<ReadTrace> ReadPerfettoTrace(const std::string& bytes);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_PERFETTO_TRACE_READER_H_
