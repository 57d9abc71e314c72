// Writes the per-model artifacts of a capture, paired as the Neuron profiler pairs a .neff with
// its .ntff:
//   model_<hash>.neff             the model file as the program loaded it;
//   model_<hash>_nc<N>.ntff.json  that model's device events on NeuronCore N (each execution
//                                 with its engine ops and DMA), from every process of the capture.
// <hash> is ModelHash() (trace_name.h) of the model file's bytes, so the same model loaded by two processes
// gets one name and one pair. A model whose bytes did not reach the daemon has no .neff, and its
// device traces are named by ModelHash() of its name. File names never contain client text:
// only the hex hash and the core number. docs/trace_format.md ("Artifacts") has the JSON.
//
// Thread-safe: keeps no state between calls; Write() may run for several captures at once.
#ifndef NRTPROF_TRACE_ARTIFACT_WRITER_H_
#define NRTPROF_TRACE_ARTIFACT_WRITER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trace/trace_sink.h"

namespace nrtprof::daemon {

class ArtifactWriter : public TraceSink {
 public:
  // Writes every artifact it can; returns the first error after trying them all.
  absl::Status Write(const Trace& trace, const Summary& summary, const std::string& output_dir,
                     std::vector<std::string>* files) override;
  // The same files from one process at a time: a model file is written when first seen, and
  // each device trace grows by each process's executions (processes come in pid order).
  std::unique_ptr<TraceStream> OpenStream(const std::string& output_dir) override;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_ARTIFACT_WRITER_H_
