// Fetching a written capture's files from a daemon (Control.FetchCapture) into a folder of the
// caller's, written with the caller's own permissions: how a user of a shared service gets a
// capture the daemon could not write where the user asked (StartCaptureReply.fetch), and how
// files come home from another machine.
//
// Not thread-safe; one call at a time per stub.
#ifndef NRTPROF_CLIENT_FETCH_H_
#define NRTPROF_CLIENT_FETCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/nrtprof.grpc.pb.h"

namespace nrtprof::cli {

// A capture folder must not already hold a capture: FailedPrecondition with the line the daemon
// gives for its own folders, if `dir` holds trace.pftrace.
absl::Status CheckCaptureFolderFree(const std::string& dir);

// Fetches capture `capture_id` into `dir` (made, mode 0750, with any missing parents): each file
// under a temporary name, renamed when whole, so that a file of its name is a whole one. With
// `remove`, the daemon drops its copy once all is sent. Returns the names written, in the
// daemon's order. Errors are one line; files already whole stay.
absl::StatusOr<std::vector<std::string>> FetchCaptureFiles(Control::StubInterface* stub,
                                                           const std::string& address,
                                                           const std::string& capture_id,
                                                           const std::string& dir, bool remove);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_FETCH_H_
