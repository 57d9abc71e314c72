// Who is at the other end of a gRPC call, for the daemon's services. The unix socket's
// connections are accepted by the daemon (unix_acceptor.h) and handed to gRPC by descriptor,
// which names such a peer "fd:N"; while a call of it is in progress its connection, and so N,
// stays open, and the kernel's credentials of the process that connected are read from N.
// Peers over TCP ("ipv4:", "ipv6:") passed the TCP gate and act for the operator, as do peers
// of a server listening on a unix path through gRPC itself ("unix:", tests only).
//
// Thread-safe.
#ifndef NRTPROF_DAEMON_PEER_H_
#define NRTPROF_DAEMON_PEER_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "daemon/collector_core.h"

namespace nrtprof::daemon {

struct Peer {
  bool local = false;  // on this machine (the unix socket)
  Caller caller;       // for a local "fd:N" peer, its uid
  int32_t pid = 0;     // for a local "fd:N" peer, the pid that connected; else 0
};

// From gRPC's name for the peer. A local peer whose credentials cannot be read is given a uid
// no process has ((uid_t)-1): it acts for nobody.
Peer PeerOf(const std::string& grpc_peer);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_PEER_H_
