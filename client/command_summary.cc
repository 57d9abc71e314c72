// `nrtprof summary CAPTURE_DIR_OR_FILE [--sort KEY] [--format text|csv|json] [--limit N]`:
// prints a capture's key_averages table again, from its summary.json, sorted and formatted as
// asked. Accepts the capture folder, its summary.json, or one of its trace files.
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "daemon/summary.h"

ABSL_FLAG(std::string, sort, "self_device",
          "self_device, device_total, self_cpu, cpu_total, calls or name");
ABSL_FLAG(std::string, format, "text", "text, csv or json");
ABSL_FLAG(int, limit, 0, "print only the first N rows (0: all)");

namespace nrtprof::cli {
namespace {

int Fail(const std::string& line, int code = 1) {
  fprintf(stderr, "nrtprof summary: %s\n", line.c_str());
  return code;
}

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

int SummaryCommand(int argc, char** argv) {
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    return Fail("usage: nrtprof summary CAPTURE_DIR_OR_FILE [--sort KEY] [--format text|csv|json]"
                " [--limit N]", 2);
  }
  absl::StatusOr<daemon::SummarySortKey> sort =
      daemon::ParseSummarySortKey(absl::GetFlag(FLAGS_sort));
  if (!sort.ok()) return Fail(std::string(sort.status().message()), 2);
  absl::StatusOr<daemon::SummaryFormat> format =
      daemon::ParseSummaryFormat(absl::GetFlag(FLAGS_format));
  if (!format.ok()) return Fail(std::string(format.status().message()), 2);
  const int limit = absl::GetFlag(FLAGS_limit);
  if (limit < 0) return Fail("--limit must not be negative", 2);

  const std::string given = args[1];
  struct stat st;
  if (stat(given.c_str(), &st) != 0) return Fail(absl::StrCat(given, ": no such file or folder"));
  const std::string path = SummaryPathFor(given);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Fail(absl::StrCat(given, " is not an nrtprof capture (no readable ", path, ")"));
  }
  std::stringstream contents;
  contents << in.rdbuf();
  absl::StatusOr<daemon::Summary> summary = daemon::ParseSummaryJson(contents.str());
  if (!summary.ok()) {
    return Fail(absl::StrCat(path, " is not an nrtprof summary: ", summary.status().message()));
  }
  fputs(daemon::FormatSummary(*summary, *sort, *format, limit).c_str(), stdout);
  return 0;
}

}  // namespace nrtprof::cli
