// `nrtprof export CAPTURE_DIR [--format pprof|collapsed] [-o FILE]`: a capture's device time,
// host time and executions by stack (trace/pprof_export.h) for the tools profiles already go
// to: a pprof Profile (gzipped when FILE ends in .gz, as `go tool pprof`, Pyroscope and Parca
// take it) or folded stacks for flamegraph tools. The capture is read as `nrtprof summary
// --from-trace` reads it (its trace.pftrace rebuilt into a Trace, each host's part of a merged
// capture alone), and each stack's device time is what the summary charges; the profile's time
// and duration are the capture's window. The stacks are the ones `nrtprof report`'s flame graph
// draws (capture_stacks.h). The file is written atomically, and only once the whole export is
// made: bad input writes nothing.
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/capture_stacks.h"
#include "client/commands.h"
#include "client/flags.h"
#include "trace/atomic_file.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/pprof_export.h"
#include "trace/summary.h"

ABSL_DECLARE_FLAG(std::string, format);  // command_summary.cc
ABSL_DECLARE_FLAG(std::string, o);       // command_report.cc

namespace nrtprof::cli {
namespace {

int Fail(const std::string& line, int code = 1) {
  fprintf(stderr, "nrtprof export: %s\n", line.c_str());
  return code;
}

// The capture's trace.pftrace: the folder's, or the path itself if it is the trace.
absl::StatusOr<std::string> TracePath(const std::string& given) {
  struct stat st;
  if (stat(given.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(given, ": no such file or folder"));
  }
  if (S_ISDIR(st.st_mode)) return given + "/trace.pftrace";
  if (absl::EndsWith(given, ".pftrace")) return given;
  const size_t slash = given.rfind('/');
  return (slash == std::string::npos ? std::string(".") : given.substr(0, slash)) +
         "/trace.pftrace";
}

// The capture's stacks (capture_stacks.h).
absl::Status AddCapture(const std::string& given, daemon::StackProfile* profile) {
  absl::StatusOr<std::string> path = TracePath(given);
  if (!path.ok()) return path.status();
  std::ifstream in(*path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(given, " is not an nrtprof capture (no readable ", *path, ")"));
  }
  absl::StatusOr<daemon::ReadTrace> read;
  {
    std::stringstream bytes;
    bytes << in.rdbuf();
    read = daemon::ReadPerfettoPackets(bytes.str());
  }  // the file's bytes go: the packets are copied into the reader's blocks
  if (!read.ok() || read->packet_count() == 0) {
    return absl::DataLossError(absl::StrCat(
        *path, " does not read back as a Perfetto trace (",
        read.ok() ? std::string("no packets") : std::string(read.status().message()),
        "): the capture is damaged"));
  }
  // The packets given back once the Trace is rebuilt: the export's memory is then mostly the
  // Trace's.
  return AddCaptureStacks(std::move(*read), *path, profile);
}

}  // namespace

int ExportCommand(int argc, char** argv) {
  // `-o -` (stdout) as `-o=-`: abseil takes a separate "-" but asks if it was meant.
  std::string stdout_flag = "-o=-";
  std::vector<char*> given_args;
  for (int i = 0; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if ((a == "-o" || a == "--o") && i + 1 < argc && absl::string_view(argv[i + 1]) == "-") {
      given_args.push_back(stdout_flag.data());
      ++i;
    } else {
      given_args.push_back(argv[i]);
    }
  }
  const std::vector<char*> args =
      absl::ParseCommandLine(static_cast<int>(given_args.size()), given_args.data());
  if (args.size() != 2) {
    return Fail("usage: nrtprof export CAPTURE_DIR [--format pprof|collapsed] [-o FILE]", 2);
  }
  // --format is shared with summary, whose default ("text") is no export format.
  const std::string format = FlagGiven("format") ? absl::GetFlag(FLAGS_format) : "pprof";
  if (format != "pprof" && format != "collapsed") {
    return Fail(absl::StrCat("--format '", format, "' is not pprof or collapsed"), 2);
  }
  const std::string given = args[1];
  std::string out = absl::GetFlag(FLAGS_o);
  if (out.empty()) {
    absl::StatusOr<std::string> trace = TracePath(given);
    const std::string folder = trace.ok() ? trace->substr(0, trace->rfind('/')) : given;
    out = folder + (format == "pprof" ? "/profile.pb.gz" : "/profile.folded");
  }
  const bool to_stdout = out == "-";
  if (!to_stdout) {
    if (const std::string why = daemon::CannotWrite(out); !why.empty()) {
      return Fail(absl::StrCat("cannot write ", out, ": ", why));
    }
  }

  daemon::StackProfile profile;
  if (absl::Status added = AddCapture(given, &profile); !added.ok()) {
    return Fail(std::string(added.message()));
  }
  std::string bytes = format == "pprof" ? profile.ToPprof().SerializeAsString()
                                        : profile.ToCollapsed();
  if (!to_stdout && absl::EndsWith(out, ".gz")) bytes = daemon::Gzip(bytes);
  if (to_stdout) {
    fwrite(bytes.data(), 1, bytes.size(), stdout);
    return fflush(stdout) == 0 ? 0 : Fail(absl::StrCat("cannot write to stdout: ", strerror(errno)));
  }
  daemon::AtomicFile file;
  absl::Status written = file.Open(out);
  if (written.ok()) written = file.Append(bytes);
  if (written.ok()) written = file.Commit();
  if (!written.ok()) return Fail(absl::StrCat("cannot write ", out, ": ", written.message()));
  fprintf(stderr,
          "nrtprof export: %s (%s, %zu stacks: device time %s, host time %s in runtime calls, %llu "
          "executions)\n",
          out.c_str(), format.c_str(), profile.samples(),
          daemon::FormatDuration(profile.Total(daemon::StackProfile::kDeviceNs)).c_str(),
          daemon::FormatDuration(profile.Total(daemon::StackProfile::kHostNs)).c_str(),
          static_cast<unsigned long long>(profile.Total(daemon::StackProfile::kExecutions)));
  return 0;
}

}  // namespace nrtprof::cli
