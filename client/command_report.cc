// `nrtprof report CAPTURE [-o FILE] [--max_slices N]`: one self-contained HTML file of a
// capture (report_page.h), written atomically, by default as CAPTURE/report.html. It reads the
// capture's summary.json (the table, as `nrtprof summary` prints it) and trace.pftrace (the
// timeline, the chain, the per-core utilization, each process's drops, and the stacks of the
// flame graph, made as `nrtprof export` makes them: capture_stacks.h) and, for a distributed
// job's, the collectives `nrtprof collectives` prints (collectives_table.h).
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/capture_stacks.h"
#include "client/collectives_table.h"
#include "client/commands.h"
#include "client/report_page.h"
#include "client/report_trace.h"
#include "client/summary_file.h"
#include "trace/atomic_file.h"
#include "trace/collectives.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/pprof_export.h"

// Shared with export and fleet export, whose --help each say their own -o (cli_main.cc).
ABSL_FLAG(std::string, o, "", "the HTML page to write (default: CAPTURE_DIR/report.html)");
ABSL_FLAG(int64_t, max_slices, 200'000,
          "slices the timeline draws one by one; past them it draws each lane's busy time, and "
          "the page says so");

ABSL_DECLARE_FLAG(absl::Duration, noise_floor);  // command_collectives.cc

namespace nrtprof::cli {
namespace {

int Fail(const std::string& line, int code = 1) {
  fprintf(stderr, "nrtprof report: %s\n", line.c_str());
  return code;
}

// The capture's folder: the path itself, or the folder of one of its files.
std::string CaptureFolder(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return path;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The trace's lanes for the timeline, and its stacks for the flame graph (when the trace
// cannot be rebuilt into them, `stacks_error` says why: the rest of the page stands without).
absl::StatusOr<ReportTrace> ReadTraceFile(const std::string& path, daemon::StackProfile* stacks,
                                          std::string* stacks_error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream bytes;
  bytes << in.rdbuf();
  absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoTrace(bytes.str());
  if (!read.ok()) {
    return absl::DataLossError(absl::StrCat(path, " does not read back as a Perfetto trace (",
                                            read.status().message(), ")"));
  }
  absl::StatusOr<ReportTrace> trace = ReadReportTrace(*read);
  if (!trace.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", trace.status().message()));
  }
  if (absl::Status added = AddCaptureStacks(*read, path, stacks); !added.ok()) {
    *stacks_error = std::string(added.message());
  }
  return trace;
}

// The system's reason alone: a file error's message ends with it, and absl::ErrnoToStatus says
// it a second time ("cannot create T: No such file or directory: No such file or directory").
std::string Reason(const absl::Status& status) {
  const absl::string_view message = status.message();
  const size_t colon = message.rfind(": ");
  return std::string(colon == absl::string_view::npos ? message : message.substr(colon + 2));
}

}  // namespace

int ReportCommand(int argc, char** argv) {
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    return Fail("usage: nrtprof report CAPTURE_DIR [-o report.html] [--max_slices N]", 2);
  }
  const int64_t max_slices = absl::GetFlag(FLAGS_max_slices);
  if (max_slices < 1) return Fail("--max_slices must be at least 1", 2);
  absl::StatusOr<daemon::Summary> summary = ReadCaptureSummary(args[1]);
  if (!summary.ok()) return Fail(std::string(summary.status().message()));
  const std::string folder = CaptureFolder(args[1]);
  std::string out = absl::GetFlag(FLAGS_o);
  if (out.empty()) out = folder + "/report.html";
  // Before the trace is read and the page made: a path that cannot be written is one line.
  if (const std::string why = daemon::CannotWrite(out); !why.empty()) {
    return Fail(absl::StrCat("cannot write ", out, ": ", why));
  }
  daemon::StackProfile stacks;
  std::string stacks_error;
  absl::StatusOr<ReportTrace> trace =
      ReadTraceFile(folder + "/trace.pftrace", &stacks, &stacks_error);
  if (!trace.ok()) return Fail(std::string(trace.status().message()));

  ReportOptions options;
  options.capture_dir = folder;
  if (stacks_error.empty()) {
    options.stacks = &stacks;
  } else {
    options.stacks_error = stacks_error;
    fprintf(stderr, "nrtprof report: no flame graph: %s\n", stacks_error.c_str());
  }
  options.max_slices = static_cast<size_t>(max_slices);
  // A distributed job's collectives, as `nrtprof collectives` reads them: the section's cells.
  std::optional<CollectivesTable> collectives;
  if (std::find(trace->names.begin(), trace->names.end(), "nrta_cc_schedule") !=
      trace->names.end()) {
    uint64_t clock_error_ns = 0;
    absl::StatusOr<daemon::Trace> full =
        ReadCollectivesTrace(folder + "/trace.pftrace", &clock_error_ns);
    if (!full.ok()) return Fail(std::string(full.status().message()));
    daemon::CollectivesOptions collectives_options;
    collectives_options.noise_floor_ns =
        static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::GetFlag(FLAGS_noise_floor))) +
        clock_error_ns;
    absl::StatusOr<daemon::CollectivesAnalysis> analysis =
        daemon::AnalyzeCollectives(*full, collectives_options);
    if (analysis.ok()) collectives = MakeCollectivesTable(*analysis);
  }
  if (collectives.has_value()) options.collectives = &*collectives;
  const std::string page = RenderReportPage(*trace, *summary, options);
  daemon::AtomicFile file;
  absl::Status written = file.Open(out);
  if (written.ok()) written = file.Append(page);
  if (written.ok()) written = file.Commit();
  if (!written.ok()) return Fail(absl::StrCat("cannot write ", out, ": ", Reason(written)));
  fprintf(stderr, "nrtprof report: %s (%zu of %zu slices drawn one by one; open it in a browser)\n",
          out.c_str(), DrawnSlices(*trace, options.max_slices), trace->slices);
  return 0;
}

}  // namespace nrtprof::cli
