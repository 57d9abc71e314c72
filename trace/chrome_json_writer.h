// Writes a capture as `trace.json` in Chrome's Trace Event Format, for chrome://tracing,
// Perfetto's legacy importer and the many tools that read it. It shows the same lanes, slices
// and flow arrows as trace.pftrace (both draw trace_lanes.h), each lane as a thread of
// its own with a synthetic tid, and each async queue's requests in flight as counter events
// ("ph":"C"); docs/trace_format.md ("trace.json") is the full mapping.
//
// Thread-safe: keeps no state between calls; Write() and WriteLanes() may run for several captures
// at once.
#ifndef NRTPROF_TRACE_CHROME_JSON_WRITER_H_
#define NRTPROF_TRACE_CHROME_JSON_WRITER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trace/trace_lanes.h"
#include "trace/trace_sink.h"

namespace nrtprof::daemon {

class ChromeJsonWriter : public LaneSink {
 public:
  static constexpr const char* kFileName = "trace.json";

  absl::Status WriteLanes(const Trace& trace, const TraceLanes& lanes,
                          const std::string& output_dir, std::vector<std::string>* files) override;
  // The same file from one process's lanes at a time: each process's events are in time order,
  // and the processes follow one another (docs/trace_format.md, "trace.json").
  std::unique_ptr<LaneStream> OpenLaneStream(const std::string& output_dir) override;
};

// Appends an unsigned integer as a JSON number, or as a decimal string when it is beyond 2^53
// (where JavaScript readers would silently round it).
void AppendJsonUint(uint64_t v, std::string* out);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_CHROME_JSON_WRITER_H_
