// A writer of one capture's files: the Perfetto trace, the Chrome JSON trace, the summary
// tables, the model/device-trace artifacts. The daemon hands each finished capture to every
// sink (a CompositeSink in the manner of Dynolog's loggers). Sinks never see gRPC.
//
// The capture's summary (daemon/summary.h) is worked out once, by the caller, and handed to
// every sink with the Trace: the summary files and the table the capture's reply carries
// (CollectorCore::WriteCapture) are then one table.
//
// Thread-safety: Write() may be called concurrently for different captures; a sink keeps no
// per-capture state between calls.
#ifndef NRTPROF_DAEMON_TRACE_SINK_H_
#define NRTPROF_DAEMON_TRACE_SINK_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/trace_model.h"

namespace nrtprof::daemon {

struct Summary;  // daemon/summary.h

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // Writes this sink's files into `output_dir` (which exists), each whole or not at all
  // (AtomicFile), appending the names written (relative to output_dir) to `files`. `summary`
  // is ComputeSummary(trace).
  virtual absl::Status Write(const Trace& trace, const Summary& summary,
                             const std::string& output_dir, std::vector<std::string>* files) = 0;
};

// Runs every sink; the first error is returned after all have run.
class CompositeSink : public TraceSink {
 public:
  explicit CompositeSink(std::vector<std::unique_ptr<TraceSink>> sinks)
      : sinks_(std::move(sinks)) {}
  absl::Status Write(const Trace& trace, const Summary& summary, const std::string& output_dir,
                     std::vector<std::string>* files) override {
    absl::Status first;
    for (auto& sink : sinks_) {
      absl::Status s = sink->Write(trace, summary, output_dir, files);
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }

 private:
  std::vector<std::unique_ptr<TraceSink>> sinks_;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_TRACE_SINK_H_
