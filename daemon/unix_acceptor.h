// nrtprofd's unix socket, accepted by the daemon itself rather than by gRPC, so that the daemon
// knows who is at the other end of every connection: the kernel's credentials of the process
// that connected (SO_PEERCRED), which no client can forge. Each accepted connection is first
// checked (the daemon's own user, root, or a member of --socket_group: the same people the
// socket's mode admits, checked again in case the mode was loosened), then handed to the gRPC
// server as a channel of its own (grpc::AddInsecureChannelFromFd). A refused peer's connection
// goes to a server of the acceptor's that answers every call with PERMISSION_DENIED and the
// reason, so the user reads why instead of "no daemon answers". gRPC names such a peer
// "fd:N"; PeerOf() (caller.h) reads its credentials back from N while a call is in progress.
//
// Thread-safe: Start() once, then Stop() from any thread (the destructor stops too). Accepting
// runs on a thread of its own; a refused peer costs one line in the log (rate-limited).
#ifndef NRTPROF_DAEMON_UNIX_ACCEPTOR_H_
#define NRTPROF_DAEMON_UNIX_ACCEPTOR_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "daemon/log_rate_limiter.h"
#include "grpcpp/grpcpp.h"

namespace nrtprof::daemon {

// Who may connect, by credentials.
struct PeerRule {
  uid_t daemon_uid = 0;          // the daemon's own user
  std::optional<gid_t> group;    // --socket_group: its members too
};

// Whether a peer with these credentials may connect; on no, why (for the log).
bool PeerAllowed(const PeerRule& rule, uid_t uid, gid_t gid, const gid_t* groups, int n_groups,
                 std::string* why);

class UnixAcceptor {
 public:
  // Binds `path` (which must not exist: the caller claims it first) with mode `mode` from the
  // moment it exists, and listens. One-line errors.
  static absl::StatusOr<std::unique_ptr<UnixAcceptor>> Listen(const std::string& path, mode_t mode,
                                                              PeerRule rule);
  ~UnixAcceptor();
  // The reason a peer with these credentials is refused (PeerAllowed's), for its calls.
  static std::string RefusalOf(const PeerRule& rule, int fd);
  UnixAcceptor(const UnixAcceptor&) = delete;
  UnixAcceptor& operator=(const UnixAcceptor&) = delete;

  // Hands each allowed connection to `server` from now on. `server` must outlive Stop().
  void Start(grpc::Server* server);
  // Stops accepting and closes the listening socket; connections already handed over stay
  // with gRPC. Says how many refusals were left out of the log, if any.
  void Stop();

  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  UnixAcceptor(int listen_fd, int wake_fd, PeerRule rule);
  void Loop(grpc::Server* server);
  // True if the connection may be handed over; else logs why.
  bool Check(int fd);

  class RefusingService;
  std::unique_ptr<RefusingService> refusing_service_;
  std::unique_ptr<grpc::Server> refusing_server_;
  const int listen_fd_;
  const int wake_fd_;  // an eventfd that ends Loop()
  const PeerRule rule_;
  LogRateLimiter refusals_;
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
  std::atomic<bool> stopped_{false};
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_UNIX_ACCEPTOR_H_
