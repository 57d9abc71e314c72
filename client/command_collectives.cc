// `nrtprof collectives CAPTURE_DIR_OR_TRACE`: which rank of a distributed job is slow, and why
// (issue 40). Reads the capture's trace.pftrace (each host's part of a merged one), matches
// each collective across the ranks (trace/collectives.h), and prints per step and collective
// the arrival skew and the last rank, then the straggler table — rank, host, pid, how often
// last, the wait it cost the others — and what the late rank was doing before it arrived. The
// cells are collectives_table.h's, which the HTML report's Collectives section shows too.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/collectives_table.h"
#include "client/commands.h"
#include "common/terminal_text.h"
#include "trace/collectives.h"

ABSL_DECLARE_FLAG(int, limit);  // command_summary.cc
ABSL_FLAG(absl::Duration, noise_floor, absl::Microseconds(50),
          "a collective's ranks arriving this close count as simultaneous (a skew within it has "
          "no late rank); a merged capture adds its hosts' clock error");

namespace nrtprof::cli {
namespace {

int Fail(const std::string& line, int code = 1) {
  fprintf(stderr, "nrtprof collectives: %s\n", line.c_str());
  return code;
}

std::vector<std::string> Shown(const std::vector<std::string>& cells) {
  std::vector<std::string> shown;
  for (const std::string& cell : cells) shown.push_back(TerminalText(cell));
  return shown;
}

}  // namespace

int CollectivesCommand(int argc, char** argv) {
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) return Fail("usage: nrtprof collectives CAPTURE_DIR [--limit N] [--noise_floor DURATION]", 2);
  const int limit = absl::GetFlag(FLAGS_limit);
  if (limit < 0) return Fail("--limit must not be negative", 2);
  const absl::Duration floor = absl::GetFlag(FLAGS_noise_floor);
  if (floor < absl::ZeroDuration()) return Fail("--noise_floor must not be negative", 2);
  uint64_t clock_error_ns = 0;
  absl::StatusOr<daemon::Trace> trace = ReadCollectivesTrace(args[1], &clock_error_ns);
  if (!trace.ok()) return Fail(std::string(trace.status().message()));
  daemon::CollectivesOptions options;
  options.noise_floor_ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(floor)) + clock_error_ns;
  absl::StatusOr<daemon::CollectivesAnalysis> a = daemon::AnalyzeCollectives(*trace, options);
  if (!a.ok()) return Fail(absl::StrCat(args[1], ": ", a.status().message()));
  const CollectivesTable t = MakeCollectivesTable(*a);

  // The hosts, the causes (op and model names) and the notes come from the capture file, which
  // holds what the processes sent: every cell is shown as visible text (terminal_text.h).
  std::vector<std::vector<std::string>> instances, stragglers;
  for (const std::vector<std::string>& r : t.instances) instances.push_back(Shown(r));
  for (const std::vector<std::string>& r : t.stragglers) stragglers.push_back(Shown(r));
  printf("%s\n\n", TerminalText(t.heading).c_str());
  const char* const* h = CollectivesTable::kInstanceColumns;
  printf("%6s  %-18s  %7s  %12s  %9s  %12s  %12s  %s\n", h[0], h[1], h[2], h[3], h[4], h[5], h[6],
         h[7]);
  for (size_t i = 0; i < instances.size(); ++i) {
    if (limit > 0 && i == static_cast<size_t>(limit)) {
      printf("%6s  ... %zu more\n", "", instances.size() - limit);
      break;
    }
    const std::vector<std::string>& r = instances[i];
    printf("%6s  %-18s  %7s  %12s  %9s  %12s  %12s  %s\n", r[0].c_str(), r[1].c_str(), r[2].c_str(),
           r[3].c_str(), r[4].c_str(), r[5].c_str(), r[6].c_str(), r[7].c_str());
  }

  printf("\n%s\n", TerminalText(t.stragglers_heading).c_str());
  const char* const* s = CollectivesTable::kStragglerColumns;
  printf("%6s  %-16s  %8s  %10s  %12s  %12s  %s\n", s[0], s[1], s[2], s[3], s[4], s[5], s[6]);
  for (const std::vector<std::string>& r : stragglers) {
    printf("%6s  %-16s  %8s  %10s  %12s  %12s  %s\n", r[0].c_str(), r[1].c_str(), r[2].c_str(),
           r[3].c_str(), r[4].c_str(), r[5].c_str(), r[6].c_str());
  }
  if (!t.slowest.empty()) printf("\n%s\n", TerminalText(t.slowest).c_str());
  for (const std::string& note : t.notes) printf("note: %s\n", TerminalText(note).c_str());
  return 0;
}

}  // namespace nrtprof::cli
