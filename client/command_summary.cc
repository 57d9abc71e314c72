// `nrtprof summary CAPTURE_DIR_OR_FILE [--sort KEY] [--format text|csv|json] [--limit N]
// [--from-trace]`: prints a capture's key_averages table again, from its summary.json (or,
// with --from-trace, recomputed from its trace.pftrace), sorted and formatted as asked. Accepts
// the capture folder, its summary.json, or one of its trace files.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/summary_file.h"
#include "trace/summary.h"

ABSL_FLAG(std::string, sort, "self_device",
          "the rows' order: self_device, device_total, self_cpu, cpu_total, calls or name");
ABSL_FLAG(std::string, format, "text", "what to print: text, csv or json");
// Shared with diff, collectives and fleet, whose --help each say their own meaning (cli_main.cc).
ABSL_FLAG(int, limit, 0, "print only the first N rows (0: all)");
ABSL_FLAG(bool, from_trace, false,
          "recompute the table from the capture's trace.pftrace instead of reading summary.json");

namespace nrtprof::cli {
namespace {

int Fail(const std::string& line, int code = 1) {
  fprintf(stderr, "nrtprof summary: %s\n", line.c_str());
  return code;
}

}  // namespace

int SummaryCommand(int argc, char** argv) {
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    return Fail("usage: nrtprof summary CAPTURE_DIR_OR_FILE [--sort KEY] [--format text|csv|json]"
                " [--limit N] [--from-trace]", 2);
  }
  absl::StatusOr<daemon::SummarySortKey> sort =
      daemon::ParseSummarySortKey(absl::GetFlag(FLAGS_sort));
  if (!sort.ok()) return Fail(std::string(sort.status().message()), 2);
  absl::StatusOr<daemon::SummaryFormat> format =
      daemon::ParseSummaryFormat(absl::GetFlag(FLAGS_format));
  if (!format.ok()) return Fail(std::string(format.status().message()), 2);
  const int limit = absl::GetFlag(FLAGS_limit);
  if (limit < 0) return Fail("--limit must not be negative", 2);

  absl::StatusOr<daemon::Summary> summary = absl::GetFlag(FLAGS_from_trace)
                                                ? RecomputeCaptureSummary(args[1])
                                                : ReadCaptureSummary(args[1]);
  if (!summary.ok()) return Fail(std::string(summary.status().message()));
  fputs(daemon::FormatSummary(*summary, *sort, *format, limit).c_str(), stdout);
  return 0;
}

}  // namespace nrtprof::cli
