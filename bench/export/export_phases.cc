// nrtprof_export_phases: where `nrtprof export` of a capture spends its time, phase by phase,
// on one thread: reading trace.pftrace, reading its packets (ReadPerfettoPackets: bundles
// inflated, times resolved), rebuilding the Trace from them (TraceFromPerfetto), the stacks
// (StackProfile::Add, which runs the summary's attribution), the Profile and its bytes, gzip,
// and the folded stacks. Each phase's wall time and the process's CPU time in it: on a busy
// machine the CPU time is the phase's own. A benchmark: prints figures, asserts nothing
// (bench/export/run_export.sh runs it).
//
//   nrtprof_export_phases CAPTURE_DIR [--messages]
//
// --messages: the trace read as messages too (ReadPerfettoTrace, what the export read before
// it read packets), for the comparison.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "trace/perfetto_trace_reader.h"
#include "trace/pprof_export.h"
#include "trace/trace_from_pftrace.h"

namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// One phase's times, printed when it ends.
class Phase {
 public:
  Phase() : wall_(std::chrono::steady_clock::now()), cpu_(CpuSeconds()) {}
  void End(const char* name, const std::string& what = "") const {
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_).count();
    printf("  %-36s %7.3f s wall %7.3f s CPU%s%s\n", name, wall, CpuSeconds() - cpu_,
           what.empty() ? "" : "  ", what.c_str());
  }

 private:
  std::chrono::steady_clock::time_point wall_;
  double cpu_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "--messages") != 0)) {
    fprintf(stderr, "usage: nrtprof_export_phases CAPTURE_DIR [--messages]\n");
    return 2;
  }
  using nrtprof::daemon::StackProfile;
  const Phase all;
  Phase phase;
  std::ifstream in(std::string(argv[1]) + "/trace.pftrace", std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  const std::string file = bytes.str();
  phase.End("read trace.pftrace", std::to_string(file.size()) + " bytes");
  phase = Phase();
  absl::StatusOr<nrtprof::daemon::ReadTrace> read = nrtprof::daemon::ReadPerfettoPackets(file);
  if (!read.ok()) {
    fprintf(stderr, "nrtprof_export_phases: %s\n", std::string(read.status().message()).c_str());
    return 1;
  }
  size_t inflated = 0;
  for (std::string_view packet : read->packet_bytes) inflated += packet.size();
  phase.End("ReadPerfettoPackets", std::to_string(read->packet_count()) + " packets, " +
                                       std::to_string(inflated) + " bytes");
  phase = Phase();
  absl::StatusOr<nrtprof::daemon::Trace> trace = nrtprof::daemon::TraceFromPerfetto(*read);
  if (!trace.ok()) {
    fprintf(stderr, "nrtprof_export_phases: %s\n", std::string(trace.status().message()).c_str());
    return 1;
  }
  size_t events = 0;
  for (const auto& p : trace->processes) events += p.ranges.size() + p.calls.size() + p.device.size();
  phase.End("TraceFromPerfetto", std::to_string(events) + " events");
  phase = Phase();
  StackProfile profile;
  profile.Add(*trace);
  phase.End("StackProfile::Add (summary's charge)", std::to_string(profile.samples()) + " stacks");
  phase = Phase();
  const std::string pb = profile.ToPprof().SerializeAsString();
  phase.End("ToPprof + serialize", std::to_string(pb.size()) + " bytes");
  phase = Phase();
  const std::string gz = nrtprof::daemon::Gzip(pb);
  phase.End("Gzip", std::to_string(gz.size()) + " bytes");
  phase = Phase();
  const std::string folded = profile.ToCollapsed();
  phase.End("ToCollapsed", std::to_string(folded.size()) + " bytes");
  all.End("all");
  if (argc == 3) {
    read = absl::StatusOr<nrtprof::daemon::ReadTrace>();
    trace = absl::StatusOr<nrtprof::daemon::Trace>();
    phase = Phase();
    absl::StatusOr<nrtprof::daemon::ReadTrace> messages = nrtprof::daemon::ReadPerfettoTrace(file);
    phase.End("(ReadPerfettoTrace, as messages)",
              messages.ok() ? std::to_string(messages->trace.packet_size()) + " packets"
                            : std::string(messages.status().message()));
  }
  return 0;
}
