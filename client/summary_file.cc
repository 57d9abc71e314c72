#include "client/summary_file.h"

#include <string.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/hosts_summary.h"
#include "client/trace_merge.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/trace_from_pftrace.h"

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

// The capture's trace.pftrace, read back. DataLoss, naming it, if it does not read back.
absl::StatusOr<daemon::ReadTrace> ReadCaptureTrace(const std::string& trace) {
  std::ifstream t(trace, std::ios::binary);
  if (!t) return absl::NotFoundError(absl::StrCat(trace, ": cannot be read"));
  std::stringstream bytes;
  bytes << t.rdbuf();
  absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoPackets(bytes.str());
  if (!read.ok() || read->packet_count() == 0) {
    return absl::DataLossError(absl::StrCat(
        trace, " does not read back as a Perfetto trace (",
        read.ok() ? std::string("no packets") : std::string(read.status().message()),
        "): the capture is damaged"));
  }
  return read;
}

// The trace.pftrace beside `summary_json`.
std::string TracePathFor(const std::string& summary_json) {
  return summary_json.substr(0, summary_json.size() - strlen("summary.json")) + "trace.pftrace";
}

}  // namespace

absl::StatusOr<daemon::Summary> RecomputeCaptureSummary(const std::string& given) {
  struct stat st;
  if (stat(given.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(given, ": no such file or folder"));
  }
  const std::string trace =
      absl::EndsWith(given, ".pftrace") ? given : TracePathFor(SummaryPathFor(given));
  absl::StatusOr<daemon::ReadTrace> read = ReadCaptureTrace(trace);
  if (absl::IsNotFound(read.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat(given, " is not an nrtprof capture (no readable ", trace, ")"));
  }
  if (!read.ok()) return read.status();
  auto rebuild = [&trace](const daemon::ReadTrace& part,
                          const std::string& whose) -> absl::StatusOr<daemon::Summary> {
    absl::StatusOr<daemon::Trace> rebuilt = daemon::TraceFromPerfetto(part);
    if (!rebuilt.ok()) {
      return absl::DataLossError(absl::StrCat(trace, " is not laid out as nrtprof writes it (",
                                              whose, rebuilt.status().message(), ")"));
    }
    return daemon::ComputeSummary(*rebuilt);
  };
  // A merged trace of `capture --hosts`: each host's part summarized as its own file would be,
  // then added up as the capture added up the hosts' summaries, so that the table is the one
  // its summary.json holds.
  const std::vector<MergedHost> parts = SplitMergedTrace(*read);
  if (parts.empty()) return rebuild(*read, "");
  std::vector<HostSummary> hosts;
  std::string capture_id;
  for (const MergedHost& part : parts) {
    absl::StatusOr<daemon::Summary> s = rebuild(part.read, absl::StrCat("host ", part.host, ": "));
    if (!s.ok()) return s.status();
    if (capture_id.empty()) capture_id = s->capture_id;
    hosts.push_back({part.host, *std::move(s)});
  }
  return MergeSummaries(capture_id, hosts);
}

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
  if (absl::StatusOr<daemon::ReadTrace> read = ReadCaptureTrace(TracePathFor(path));
      !read.ok() && !absl::IsNotFound(read.status())) {
    return read.status();
  }
  return summary;
}

}  // namespace nrtprof::cli
