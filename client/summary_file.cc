#include "client/summary_file.h"

#include <string.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/perfetto_trace_reader.h"

namespace nrtprof::cli {
namespace {

// The summary.json that belongs to `path`.
std::string SummaryPathFor(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return path + "/summary.json";
  if (absl::EndsWith(path, "summary.json")) return path;
  const size_t slash = path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) +
         "/summary.json";
}

}  // namespace

absl::StatusOr<daemon::Summary> ReadCaptureSummary(const std::string& given) {
  struct stat st;
  if (stat(given.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(given, ": no such file or folder"));
  }
  const std::string path = SummaryPathFor(given);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(given, " is not an nrtprof capture (no readable ", path, ")"));
  }
  std::stringstream contents;
  contents << in.rdbuf();
  absl::StatusOr<daemon::Summary> summary = daemon::ParseSummaryJson(contents.str());
  if (!summary.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not an nrtprof summary: ", summary.status().message()));
  }
  // The table stands for the trace beside it: a trace that does not read back (damaged,
  // replaced) makes the capture one not to trust.
  const std::string trace = path.substr(0, path.size() - strlen("summary.json")) + "trace.pftrace";
  if (std::ifstream t(trace, std::ios::binary); t) {
    std::stringstream bytes;
    bytes << t.rdbuf();
    if (absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoTrace(bytes.str());
        !read.ok() || read->trace.packet_size() == 0) {
      return absl::DataLossError(absl::StrCat(
          trace, " does not read back as a Perfetto trace (",
          read.ok() ? std::string("no packets") : std::string(read.status().message()),
          "): the capture is damaged"));
    }
  }
  return summary;
}

}  // namespace nrtprof::cli
