#include "daemon/peer.h"

#include <sys/socket.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"

namespace nrtprof::daemon {

Peer PeerOf(const std::string& grpc_peer) {
  Peer peer;
  if (absl::StartsWith(grpc_peer, "unix:")) {
    peer.local = true;
    return peer;
  }
  if (!absl::StartsWith(grpc_peer, "fd:")) return peer;  // TCP: the gate admitted it
  int fd = -1;
  peer.local = true;
  peer.caller.uid = static_cast<uint32_t>(static_cast<uid_t>(-1));
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (absl::SimpleAtoi(absl::string_view(grpc_peer).substr(3), &fd) && fd >= 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof(cred)) {
    peer.caller.uid = cred.uid;
    peer.pid = cred.pid;
  }
  return peer;
}

}  // namespace nrtprof::daemon
