// A writer of one capture's files: the Perfetto trace, the Chrome JSON trace, the summary
// tables, the model/device-trace artifacts. The daemon hands each finished capture to every
// sink (a CompositeSink in the manner of Dynolog's loggers). Sinks never see gRPC.
//
// The capture's summary (summary.h) is worked out once, by the caller, and handed to
// every sink with the Trace: the summary files and the table the capture's reply carries
// (CollectorCore::WriteCapture) are then one table.
//
// Thread-safety: Write() may be called concurrently for different captures; a sink keeps no
// per-capture state between calls.
#ifndef NRTPROF_TRACE_TRACE_SINK_H_
#define NRTPROF_TRACE_TRACE_SINK_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "trace/trace_model.h"

namespace nrtprof::daemon {

struct Summary;  // summary.h

// The same files written a process at a time, so that only one process's part of the capture
// need exist at once: CollectorCore writes a capture so when every sink of the daemon can.
class TraceStream {
 public:
  virtual ~TraceStream() = default;
  // `trace` holds one process of the capture, with the capture's id. Processes come in the
  // order of the Trace the correlator would have made of them all, and their ids (of events,
  // of correlations) continue those of the processes before. Nothing of `trace` is kept.
  virtual absl::Status Add(const Trace& trace) = 0;
  // Writes the files, as TraceSink::Write. `trace` is the capture's Trace without its
  // processes (its id, wall clock, start and end); `summary` is the whole capture's.
  virtual absl::Status Finish(const Trace& trace, const Summary& summary,
                              std::vector<std::string>* files) = 0;
};

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // A stream that writes into `output_dir` the files Write would, or null if this sink needs
  // the whole Trace at once.
  virtual std::unique_ptr<TraceStream> OpenStream(const std::string& output_dir) {
    return nullptr;
  }
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
  // A stream only if every sink has one.
  std::unique_ptr<TraceStream> OpenStream(const std::string& output_dir) override;

 private:
  std::vector<std::unique_ptr<TraceSink>> sinks_;
};

// Runs every stream; the first error is returned after all have run (a stream that failed to
// take a process is not given the next).
class CompositeStream : public TraceStream {
 public:
  explicit CompositeStream(std::vector<std::unique_ptr<TraceStream>> streams)
      : streams_(std::move(streams)), status_(streams_.size()) {}
  absl::Status Add(const Trace& trace) override {
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (status_[i].ok()) status_[i] = streams_[i]->Add(trace);
    }
    return absl::OkStatus();
  }
  absl::Status Finish(const Trace& trace, const Summary& summary,
                      std::vector<std::string>* files) override {
    absl::Status first;
    for (size_t i = 0; i < streams_.size(); ++i) {
      absl::Status s = status_[i].ok() ? streams_[i]->Finish(trace, summary, files) : status_[i];
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }

 private:
  std::vector<std::unique_ptr<TraceStream>> streams_;
  std::vector<absl::Status> status_;  // by stream: its first error
};

inline std::unique_ptr<TraceStream> CompositeSink::OpenStream(const std::string& output_dir) {
  std::vector<std::unique_ptr<TraceStream>> streams;
  for (auto& sink : sinks_) {
    streams.push_back(sink->OpenStream(output_dir));
    if (streams.back() == nullptr) return nullptr;
  }
  return std::make_unique<CompositeStream>(std::move(streams));
}

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_TRACE_SINK_H_
