// The end of a capture as `nrtprof run` and `nrtprof capture` show it: the files brought home
// when the daemon wrote them for fetching (a shared service's user), then the key_averages
// table, the totals and where the files are, on stderr.
//
// Not thread-safe; one call per capture.
#ifndef NRTPROF_CLIENT_CAPTURE_REPORT_H_
#define NRTPROF_CLIENT_CAPTURE_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/daemon_connection.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::cli {

// The exit code of a capture written but empty (no event in its window): run (when CMD itself
// exited 0) and capture, one host or --hosts. Neither success (0) nor an error (1) nor a usage
// error (2), so that a script can tell it.
constexpr int kEmptyCaptureExit = 3;

// Why a capture holds no event, for "the capture is empty: WHY": no process connected, none of
// `pids`, none that called libnrt, or (iterations != 0) none that marked the capture's steps.
std::string EmptyCaptureWhy(const CaptureFiles& files, const std::vector<uint32_t>& pids,
                            const StartCaptureReply& started, uint32_t iterations);

// Where the capture's files end up, as the user sees them: `out` (absolute, or empty for the
// default), or ./nrtprof-captures/ID when the CLI fetches them; the daemon's folder otherwise.
std::string CaptureDestination(const StartCaptureReply& started, const std::string& out);

// The kinds of file --files names (run, capture), in its order, once each; empty for every
// kind. An unknown name: InvalidArgument, its message the one line to print.
absl::StatusOr<std::vector<CaptureFileKind>> FileKindsFromFlag();

// The line that says how to open a capture's traces in `dir`, given which it has, with its
// newline; empty if it has neither. A trace.json longer than chrome://tracing can read (it
// reads a file into one JavaScript string: V8 holds at most 2^29 - 24 characters) is named as
// such, with its size, instead of offered.
std::string OpenTracesLine(const std::string& dir, bool pftrace, bool json);

// Fetches the files if `started.fetch()`, into CaptureDestination(started, out), and prints the
// report. `command` prefixes its own lines ("nrtprof run"). Returns false if the fetch failed
// (said in one line).
bool ReportCapture(DaemonConnection& connection, const StartCaptureReply& started,
                   const std::string& out, CaptureFiles files, const std::string& command);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_CAPTURE_REPORT_H_
