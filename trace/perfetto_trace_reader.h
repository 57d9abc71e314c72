// Reads a trace.pftrace back the way Perfetto's trace processor does: expands the
// compressed_packets bundles into the flat list of packets they stand for, and resolves each
// packet's timestamp through the sequence's clocks (TracePacketDefaults, incremental clocks
// declared by a ClockSnapshot) to nanoseconds on the file's primary clock, MONOTONIC.
//
// Two forms. ReadPerfettoTrace parses every packet into a protobuf message, for the tests and
// the tools that look at packets (trace merging, reports). ReadPerfettoPackets keeps each
// packet as its bytes, read only for its time, sequence and counter value, for the readers
// that rebuild the Trace from them (trace_from_pftrace.h: `nrtprof export`, `summary
// --from-trace`): a capture of millions of events is millions of packets, and making a message
// of each was most of their time (BENCHMARKS.md, "Session 27").
//
// Pure functions: thread-safe.
#ifndef NRTPROF_TRACE_PERFETTO_TRACE_READER_H_
#define NRTPROF_TRACE_PERFETTO_TRACE_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include <string_view>
#include "proto/perfetto_trace.pb.h"
#include "trace/huge_page_allocator.h"

namespace nrtprof::daemon {

struct ReadTrace {
  // ReadPerfettoTrace: every packet, bundles expanded in place. Empty from ReadPerfettoPackets.
  perfetto::protos::Trace trace;
  // ReadPerfettoPackets: every packet's encoded bytes instead, bundles expanded in place, in
  // the file's order: views into `buffers` (the inflated bundles; copies of a ReadTrace share
  // them). Empty from ReadPerfettoTrace.
  CaptureVector<std::string_view> packet_bytes;
  std::vector<std::shared_ptr<const char[]>> buffers;
  // ReadPerfettoPackets: the indices in packet_bytes of the packets with a track descriptor,
  // which a reader of the events takes first (a file holds a few hundred among millions).
  std::vector<size_t> track_descriptor_packets;
  // Per packet: its time in MONOTONIC nanoseconds, or 0 for a packet without a timestamp.
  std::vector<uint64_t> times;
  // Each packet's trusted_packet_sequence_id (0: none), as runs: (the index of a run's first
  // packet, its sequence), the run lasting until the next one's first packet. A sequence's
  // packets come in long runs (nrtprof writes each lane's in bundles of their own).
  std::vector<std::pair<size_t, uint32_t>> sequence_runs;
  size_t bundles = 0;  // compressed_packets bundles expanded
  // The slices begun (TYPE_SLICE_BEGIN events) on each track, by the track's uuid: room a
  // reader of the events can make for them at once.
  std::map<uint64_t, size_t> slices_begun;
  // The values of each counter track (TYPE_COUNTER events), by the track's uuid: (time as in
  // `times`, value), in the file's order.
  std::map<uint64_t, std::vector<std::pair<uint64_t, int64_t>>> counters;

  // Packets read, in either form.
  size_t packet_count() const { return times.size(); }
};

// An error when the bytes, or a bundle's inflated bytes, are not a Trace, or a timestamp is on
// a clock the file never declared.
absl::StatusOr<ReadTrace> ReadPerfettoTrace(std::string_view bytes);

// The same, every packet kept as its bytes (`trace` left empty). What the packets' times,
// sequences and counters come from is checked as ReadPerfettoTrace checks it, and every
// packet's framing (its fields' tags and lengths); the rest of a packet is checked by whoever
// reads it (TraceFromPerfetto reads and checks all that nrtprof writes).
absl::StatusOr<ReadTrace> ReadPerfettoPackets(std::string_view bytes);

// `read` (from ReadPerfettoPackets) as ReadPerfettoTrace reads it: its packets parsed into
// `trace`, with their times, sequences and counters; only the packets of sequence `only`, if
// given (their times alone). An error, naming the packet, for one that is not a TracePacket. A
// ReadTrace that has its messages already is returned as it is (the packets of `only` alone).
absl::StatusOr<ReadTrace> WithMessages(const ReadTrace& read,
                                       std::optional<uint32_t> only = std::nullopt);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_PERFETTO_TRACE_READER_H_
