#include "client/capture_report.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/fetch.h"
#include "client/flags.h"
#include "client/locate.h"
#include "client/progress.h"

namespace nrtprof::cli {

std::string CaptureDestination(const StartCaptureReply& started, const std::string& out) {
  if (!started.fetch()) return started.output_dir();
  if (!out.empty()) return out;
  return Absolute(absl::StrCat("nrtprof-captures/", started.capture_id()));
}

std::string EmptyCaptureWhy(const CaptureFiles& files, const std::vector<uint32_t>& pids,
                            const StartCaptureReply& started, uint32_t iterations) {
  const std::string pid_list = absl::StrCat("(", absl::StrJoin(pids, ", "), ")");
  if (iterations != 0) {
    // The daemon leaves out a process none of whose steps it saw: processes() says nothing here.
    return absl::StrCat(pids.empty() ? "no process" : "none of the pids " + pid_list,
                        " marked any of steps ", started.first_step(), " to ",
                        started.first_step() + iterations - 1, " (nrtprof_step) in the window");
  }
  if (files.processes() > 0) {
    return absl::StrCat(files.processes(), " process",
                        files.processes() == 1 ? " was" : "es were",
                        " connected, but none called libnrt in the window");
  }
  if (!pids.empty()) {
    return absl::StrCat("none of the pids ", pid_list, " was connected to the daemon in the window");
  }
  return "no process was connected to the daemon in the window (a program streams to it when "
         "preloaded with the shim: LD_PRELOAD=.../libnrtprof_shim.so)";
}

absl::StatusOr<std::vector<CaptureFileKind>> FileKindsFromFlag() {
  static const std::pair<const char*, CaptureFileKind> kKinds[] = {
      {"pftrace", CAPTURE_FILE_KIND_PFTRACE},
      {"json", CAPTURE_FILE_KIND_JSON},
      {"summary", CAPTURE_FILE_KIND_SUMMARY},
      {"artifacts", CAPTURE_FILE_KIND_ARTIFACTS}};
  std::vector<CaptureFileKind> kinds;
  const std::string list = absl::GetFlag(FLAGS_files);
  if (list.empty()) return kinds;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    const auto* known = std::find_if(std::begin(kKinds), std::end(kKinds),
                                     [&](const auto& k) { return name == k.first; });
    if (known == std::end(kKinds)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--files: '", name,
                       "' is not a kind of capture file (pftrace, json, summary, artifacts)"));
    }
    if (std::find(kinds.begin(), kinds.end(), known->second) == kinds.end()) {
      kinds.push_back(known->second);
    }
  }
  return kinds;
}

bool ReportCapture(DaemonConnection& connection, const StartCaptureReply& started,
                   const std::string& out, CaptureFiles files, const std::string& command) {
  if (started.fetch()) {
    const std::string to = CaptureDestination(started, out);
    absl::StatusOr<std::vector<std::string>> fetched = FetchCaptureFiles(
        connection.stub(), connection.address(), started.capture_id(), to, true);
    if (!fetched.ok()) {
      fprintf(stderr, "%s: the capture could not be fetched into %s: %s\n", command.c_str(),
              to.c_str(), std::string(fetched.status().message()).c_str());
      return false;
    }
    files.set_output_dir(to);
    files.clear_files();
    for (const std::string& f : *fetched) files.add_files(f);
  }
  if (Quiet()) return true;
  fprintf(stderr, "\n%s\n", files.summary_text().c_str());
  fprintf(stderr, "nrtprof: %llu events from %u process%s, %llu dropped; files in %s:\n",
          static_cast<unsigned long long>(files.events()), files.processes(),
          files.processes() == 1 ? "" : "es",
          static_cast<unsigned long long>(files.events_dropped()), files.output_dir().c_str());
  bool pftrace = false, json = false;
  for (const std::string& f : files.files()) {
    fprintf(stderr, "  %s\n", f.c_str());
    pftrace = pftrace || f == "trace.pftrace";
    json = json || f == "trace.json";
  }
  // How to open the traces the capture has (capture --files may have left either out).
  fputs(OpenTracesLine(files.output_dir(), pftrace, json).c_str(), stderr);
  return true;
}

std::string OpenTracesLine(const std::string& dir, bool pftrace, bool json) {
  constexpr int64_t kChromeTracingMaxBytes = (int64_t{1} << 29) - 24;
  // The folder is ours to read when the files were fetched or the daemon is on this host;
  // otherwise the size is unknown and the file is offered as usual.
  struct stat st;
  const bool json_too_big =
      json && stat((dir + "/trace.json").c_str(), &st) == 0 && st.st_size > kChromeTracingMaxBytes;
  const std::string too_big = json_too_big
                                  ? absl::StrCat("trace.json (", st.st_size >> 20,
                                                 " MiB) is more than chrome://tracing can read")
                                  : "";
  if (pftrace) {
    return absl::StrCat("nrtprof: open ", dir,
                        "/trace.pftrace in the Perfetto UI (https://ui.perfetto.dev, \"Open trace "
                        "file\")",
                        json_too_big ? "; " + too_big
                        : json       ? ", or trace.json in chrome://tracing"
                                     : "",
                        "\n");
  }
  if (json_too_big) {
    return absl::StrCat(
        "nrtprof: ", dir, "/", too_big,
        "; nrtprof capture --files pftrace writes the trace the Perfetto UI opens\n");
  }
  if (json) return absl::StrCat("nrtprof: open ", dir, "/trace.json in chrome://tracing\n");
  return "";
}

}  // namespace nrtprof::cli
