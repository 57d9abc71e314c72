// Whom a process may trust with its events, command line and model files on this machine: the
// checks the shim's backend and the CLI make before they send anything to a daemon's unix
// socket, and the shim before it writes a spool file.
//
// A unix socket is only as private as its folder: whoever can write the folder (or any folder
// above it) can put their own socket in its place, and whoever made the folder first decides
// who can. So a folder is trusted only if it is a real folder (not a symlink), belongs to the
// user, root or the configured service user, and no one else can write it -- except a sticky
// folder of root's or the service user's (as /tmp), where no one can rename or remove what is
// not theirs. Every folder above it must be the same. The process listening is then checked by
// its credentials (SO_PEERCRED): the same uid, root, or the service user.
//
// The service user is the daemon's user of a shared service, named by NRTPROF_SERVICE_USER
// (a user name or a uid); there is no other trusted user.
//
// Thread-safe; allocation only in the return values (and in getpwnam_r/getpwuid_r).
#ifndef NRTPROF_COMMON_SOCKET_TRUST_H_
#define NRTPROF_COMMON_SOCKET_TRUST_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nrtprof {

// Who may own a trusted folder or listen on a trusted socket: `self`, root, and `service`.
struct TrustPolicy {
  uid_t self = 0;
  std::optional<uid_t> service;  // NRTPROF_SERVICE_USER
};

// The calling user and NRTPROF_SERVICE_USER. InvalidArgument (one line) if the variable names
// no user.
absl::StatusOr<TrustPolicy> TrustPolicyFromEnv();
// "name or uid" to a uid: a user name, or a decimal uid (which needs no entry in passwd).
absl::StatusOr<uid_t> ParseUser(const std::string& name_or_uid);

// "uid 65534 (nobody)", or "uid 1234" for a uid without a name.
std::string DescribeUid(uid_t uid);

// Checks `folder` and every folder above it. `what` names it in the message ("socket folder",
// "spool folder"). PermissionDenied with a line naming the folder and its owner if it is not
// to be trusted; NotFound if it does not exist (nothing to trust yet, and nothing to send to).
absl::Status CheckFolder(const std::string& folder, const std::string& what,
                         const TrustPolicy& policy);

// Checks the process that listens on the connected unix socket `fd` (bound at `socket`, for
// the message). PermissionDenied naming its uid if it is not to be trusted.
absl::Status CheckPeer(int fd, const std::string& socket, const TrustPolicy& policy);

// The whole check before talking to the daemon at unix socket `socket`: its folder, then who
// listens, on a connection of its own that it closes. NotFound if the folder or the socket does
// not exist or nobody listens (no daemon to trust, none to talk to); PermissionDenied if what is
// there is not to be trusted. Never blocks: a listener whose backlog is full is Unavailable.
absl::Status CheckDaemonSocket(const std::string& socket, const TrustPolicy& policy);

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_SOCKET_TRUST_H_
