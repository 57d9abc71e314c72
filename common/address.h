// Where the shim, the CLI and the daemon find each other: the daemon's gRPC address.
//
// The default is a unix socket in a per-user folder, /tmp/nrtprof-UID/nrtprofd.sock, which the
// daemon creates 0770 with the socket 0660; NRTPROF_ADDR overrides it ("unix:/path", a bare
// "/path", or later "host:port" with TLS). Thread-safe, allocation only in the return values.
#ifndef NRTPROF_COMMON_ADDRESS_H_
#define NRTPROF_COMMON_ADDRESS_H_

#include <string>

namespace nrtprof {

// /tmp/nrtprof-UID/nrtprofd.sock for the calling user.
std::string DefaultSocketPath();

// The address to dial: NRTPROF_ADDR if set and non-empty, else the default socket, as a gRPC
// target ("unix:/path").
std::string DaemonAddress();

// "unix:/p" for "/p" or "unix:/p"; anything else unchanged.
std::string ToGrpcTarget(const std::string& address);

// The socket path of a unix address ("unix:/p", "unix:///p" or "/p"); empty if not a unix one.
std::string SocketPathOf(const std::string& address);

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_ADDRESS_H_
