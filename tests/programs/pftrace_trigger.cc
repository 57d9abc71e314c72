// What a trace.pftrace says of a trigger rule's anomaly, read by nrtprof's own reader
// (trace_from_pftrace.h), for the tests' scripts: the instant on its "nrtprof triggers" track
// and, beside it, the framework range the anomaly was.
//   usage: pftrace_trigger FILE [RANGE]
// Prints "trigger RULE at NS" (NS: host monotonic; 0 if the trace has no trigger), then for
// each range named RANGE "range RANGE at START_NS for DURATION_NS". Exit 1, with one line, if
// the file does not read back.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "trace/perfetto_trace_reader.h"
#include "trace/trace_from_pftrace.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: pftrace_trigger FILE [RANGE]\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  absl::StatusOr<nrtprof::daemon::ReadTrace> read =
      nrtprof::daemon::ReadPerfettoPackets(bytes.str());
  if (!in || !read.ok()) {
    fprintf(stderr, "pftrace_trigger: %s does not read back\n", argv[1]);
    return 1;
  }
  absl::StatusOr<nrtprof::daemon::Trace> trace = nrtprof::daemon::TraceFromPerfetto(*read);
  if (!trace.ok()) {
    fprintf(stderr, "pftrace_trigger: %s: %s\n", argv[1],
            std::string(trace.status().message()).c_str());
    return 1;
  }
  printf("trigger %s at %llu\n", trace->trigger.rule.c_str(),
         static_cast<unsigned long long>(trace->trigger.at_ns));
  if (argc == 3) {
    for (const nrtprof::daemon::ProcessTrace& p : trace->processes) {
      for (const nrtprof::daemon::RangeEvent& r : p.ranges) {
        if (r.name.view() != argv[2]) continue;
        printf("range %s at %llu for %llu\n", argv[2],
               static_cast<unsigned long long>(r.start_ns),
               static_cast<unsigned long long>(r.duration_ns));
      }
    }
  }
  return 0;
}
