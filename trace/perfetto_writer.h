// Writes a capture as `trace.pftrace`, a Perfetto trace that opens in the Perfetto UI with the
// Neuron profiler's three lanes: per process, each host thread with its "framework" and
// "runtime" tracks, and each NeuronCore with its "executions" and "DMA" tracks (and for the
// async API's work a track per execution unit's queue, "compute queue (XU 1)", with a counter
// track of its requests in flight, "requests in flight (XU 1)"), flow arrows
// from each framework range through the runtime call to the device work it caused, and an
// "nrtprof capture" instant on the process track that carries the capture id and the
// process's drop counters; of a capture a trigger rule took (nrtprofd --trigger), a global
// "nrtprof triggers" track with an instant at the anomaly's start, named for the rule, its
// arguments the reason, the value and the threshold. docs/trace_format.md ("trace.pftrace") is
// the full layout and the encoding: a packet sequence for the tracks and one for each lane,
// with interned names, timestamps as deltas on each sequence's incremental clock, and the
// packets deflated in bundles (`compressed_packets`), as Perfetto's own tracing service writes
// them with compression on.
//
// Thread-safe: keeps no state between calls; Write() may run for several captures at once.
#ifndef NRTPROF_TRACE_PERFETTO_WRITER_H_
#define NRTPROF_TRACE_PERFETTO_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trace/trace_lanes.h"
#include "trace/trace_sink.h"

namespace nrtprof::daemon {

class PerfettoWriter : public LaneSink {
 public:
  static constexpr const char* kFileName = "trace.pftrace";

  // The trusted_packet_sequence_id of the file's first sequence (clocks, tracks, capture
  // instants); the lanes' sequences follow it, kSequenceId + 1 onward, in the tracks' order.
  static constexpr uint32_t kSequenceId = 1;
  // Each sequence's clock: incremental, in nanoseconds, MONOTONIC at its clock snapshot.
  static constexpr uint32_t kDeltaClockId = 64;

  struct Options {
    // Deflate level of the compressed_packets bundles (zlib streams, made by libdeflate), 1
    // (fastest) to 12; 0 writes the packets as they are, uncompressed.
    int deflate_level = 1;
  };

  PerfettoWriter() = default;
  explicit PerfettoWriter(Options options) : options_(options) {}

  absl::Status WriteLanes(const Trace& trace, const TraceLanes& lanes,
                          const std::string& output_dir, std::vector<std::string>* files) override;
  // The same file from one process's lanes at a time: it holds the lane sequences made so far,
  // deflated (a few bytes an event), until Finish writes the file.
  std::unique_ptr<LaneStream> OpenLaneStream(const std::string& output_dir) override;

 private:
  Options options_;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_PERFETTO_WRITER_H_
