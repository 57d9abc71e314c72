// The tables `nrtprof collectives` prints, as cells: per collective the arrival skew and the
// last rank, the straggler table with the late rank's cause, the slowest rank's line and the
// notes, made once from trace/collectives.h's analysis so that the command and the HTML
// report's Collectives section (report_page.h) show the same figures. Also the capture's Trace
// as both read it: its trace.pftrace rebuilt, each host's part of a merged capture on the
// merged clock with the host --hosts named.
//
// Pure functions but ReadCollectivesTrace (reads a file): thread-safe.
#ifndef NRTPROF_CLIENT_COLLECTIVES_TABLE_H_
#define NRTPROF_CLIENT_COLLECTIVES_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trace/collectives.h"
#include "trace/trace_model.h"

namespace nrtprof::cli {

struct CollectivesTable {
  // "4 ranks on vm, 5 collectives; ranks as each process said (RANK or another launcher's rank
  // variable, --rank N). Times from the first arrival."
  std::string heading;
  // step, collective, ranks, skew, last rank, could start, ended, the last rank before it
  // arrived: one row per collective, in the order they could start.
  static constexpr const char* kInstanceColumns[] = {
      "step",      "collective",  "ranks", "skew",
      "last rank", "could start", "ended", "the last rank before it arrived"};
  std::vector<std::vector<std::string>> instances;
  std::vector<uint64_t> skew_ns;  // each row's skew, to pick the worst
  // "Stragglers (last to arrive, of N collectives every rank reached; ...):"
  std::string stragglers_heading;
  static constexpr const char* kStragglerColumns[] = {
      "rank", "host", "pid", "times last", "wait cost", "waited", "before it arrived"};
  std::vector<std::vector<std::string>> stragglers;  // most often last first
  std::string slowest;  // "Slowest rank: 2 (vm pid 9511), ...", empty when no rank was last
  std::vector<std::string> notes;
};

CollectivesTable MakeCollectivesTable(const daemon::CollectivesAnalysis& analysis);

// The Trace of a capture folder (its trace.pftrace) or of a trace.pftrace, every host's part of
// a merged one. NOT_FOUND for a missing file or a folder that is no capture, DATA_LOSS for a
// file that does not read back; the message is one line naming the path. `clock_error_ns`, if
// given: how far apart two hosts' clocks may be after the merge aligned them (the two widest
// bounds the merge measured, added; 0 for one host's capture), for the noise floor.
absl::StatusOr<daemon::Trace> ReadCollectivesTrace(const std::string& capture_or_file,
                                                   uint64_t* clock_error_ns = nullptr);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_COLLECTIVES_TABLE_H_
