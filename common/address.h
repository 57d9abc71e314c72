// Where the shim, the CLI and the daemon find each other: the daemon's gRPC address.
//
// The default is a unix socket in a per-user folder, DefaultRuntimeDir()/nrtprofd.sock, which
// the daemon creates 0700 with the socket 0600; NRTPROF_ADDR overrides it ("unix:/path", a bare
// "/path", or a TCP address "HOST:PORT" / "dns:///HOST:PORT", which needs TLS). The daemon, the
// CLI and the shim all take the default from here, so they agree. Thread-safe (reads the
// environment), allocation only in the return values.
#ifndef NRTPROF_COMMON_ADDRESS_H_
#define NRTPROF_COMMON_ADDRESS_H_

#include <sys/types.h>

#include <string>

namespace nrtprof {

// The per-user folder of the default socket and spool: $XDG_RUNTIME_DIR/nrtprof when
// XDG_RUNTIME_DIR is an absolute path to a real folder (not a symlink) that `uid` owns with mode
// 0700, as systemd makes /run/user/UID; otherwise /tmp/nrtprof-UID. A runtime folder that is
// not private to its user is ignored: it could be anyone's.
std::string DefaultRuntimeDir();
std::string DefaultRuntimeDir(uid_t uid);

// DefaultRuntimeDir()/nrtprofd.sock for the calling user, or for `uid`.
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
