// nrtprof_export_phases: where `nrtprof export` of a capture spends its time, phase by phase,
// on one thread: reading trace.pftrace, parsing it (ReadPerfettoTrace), rebuilding the Trace
// (TraceFromPerfetto), the stacks (StackProfile::Add, which runs the summary's attribution),
// the Profile and its bytes, gzip, and the folded stacks. A benchmark: prints figures, asserts
// nothing (bench/export/run_export.sh runs it).
//
//   nrtprof_export_phases CAPTURE_DIR
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "trace/perfetto_trace_reader.h"
#include "trace/pprof_export.h"
#include "trace/trace_from_pftrace.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: nrtprof_export_phases CAPTURE_DIR\n");
    return 2;
  }
  using nrtprof::daemon::StackProfile;
  auto t = std::chrono::steady_clock::now();
  const auto start = t;
  std::ifstream in(std::string(argv[1]) + "/trace.pftrace", std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  const std::string file = bytes.str();
  printf("  %-34s %7.3f s (%zu bytes)\n", "read trace.pftrace", Seconds(t), file.size());
  t = std::chrono::steady_clock::now();
  absl::StatusOr<nrtprof::daemon::ReadTrace> read = nrtprof::daemon::ReadPerfettoTrace(file);
  if (!read.ok()) {
    fprintf(stderr, "nrtprof_export_phases: %s\n", std::string(read.status().message()).c_str());
    return 1;
  }
  printf("  %-34s %7.3f s\n", "ReadPerfettoTrace", Seconds(t));
  t = std::chrono::steady_clock::now();
  absl::StatusOr<nrtprof::daemon::Trace> trace = nrtprof::daemon::TraceFromPerfetto(*read);
  if (!trace.ok()) {
    fprintf(stderr, "nrtprof_export_phases: %s\n", std::string(trace.status().message()).c_str());
    return 1;
  }
  size_t events = 0;
  for (const auto& p : trace->processes) events += p.ranges.size() + p.calls.size() + p.device.size();
  printf("  %-34s %7.3f s (%zu events)\n", "TraceFromPerfetto", Seconds(t), events);
  t = std::chrono::steady_clock::now();
  StackProfile profile;
  profile.Add(*trace);
  printf("  %-34s %7.3f s (%zu stacks)\n", "StackProfile::Add (summary's charge)", Seconds(t),
         profile.samples());
  t = std::chrono::steady_clock::now();
  const std::string pb = profile.ToPprof().SerializeAsString();
  printf("  %-34s %7.3f s (%zu bytes)\n", "ToPprof + serialize", Seconds(t), pb.size());
  t = std::chrono::steady_clock::now();
  const std::string gz = nrtprof::daemon::Gzip(pb);
  printf("  %-34s %7.3f s (%zu bytes)\n", "Gzip", Seconds(t), gz.size());
  t = std::chrono::steady_clock::now();
  const std::string folded = profile.ToCollapsed();
  printf("  %-34s %7.3f s (%zu bytes)\n", "ToCollapsed", Seconds(t), folded.size());
  printf("  %-34s %7.3f s\n", "all", Seconds(start));
  return 0;
}
