// Where the shim, the CLI and the daemon find each other: the daemon's gRPC address.
//
// The default is a unix socket in a per-user folder, /tmp/nrtprof-UID/nrtprofd.sock, which the
// daemon creates 0770 with the socket 0660; NRTPROF_ADDR overrides it ("unix:/path", a bare
// "/path", or a TCP address "HOST:PORT" / "dns:///HOST:PORT", which needs TLS). Thread-safe,
// allocation only in the return values.
#ifndef NRTPROF_COMMON_ADDRESS_H_
#define NRTPROF_COMMON_ADDRESS_H_

#include <sys/types.h>

#include <string>

namespace nrtprof {

// /tmp/nrtprof-UID/nrtprofd.sock for the calling user, or for `uid`.
std::string DefaultSocketPath();
std::string DefaultSocketPath(uid_t uid);

// The address to dial: NRTPROF_ADDR if set and non-empty, else the default socket, as a gRPC
// target ("unix:/path").
std::string DaemonAddress();

// "unix:/p" for "/p" or "unix:/p"; anything else unchanged.
std::string ToGrpcTarget(const std::string& address);

// The socket path of a unix address ("unix:/p", "unix:///p" or "/p"); empty if not a unix one.
std::string SocketPathOf(const std::string& address);

// Whether `address` is a unix socket, a TCP address to dial, or neither. TCP: "HOST:PORT",
// "[IPV6]:PORT", or the same after "dns:///", "dns:", "ipv4:" or "ipv6:", with a port from 1
// to 65535.
enum class AddressKind { kUnix, kTcp, kInvalid };
AddressKind KindOf(const std::string& address);

// Splits "HOST:PORT" or "[IPV6]:PORT" (port 0 to 65535, host not empty); false if it is not
// one.
bool SplitHostPort(const std::string& host_port, std::string* host, int* port);

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_ADDRESS_H_
