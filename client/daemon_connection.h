// The CLI's side of the Control service: connecting to a running daemon, or starting a private
// one for a single `nrtprof run`.
//
// Not thread-safe; one per command.
#ifndef NRTPROF_CLIENT_DAEMON_CONNECTION_H_
#define NRTPROF_CLIENT_DAEMON_CONNECTION_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "proto/nrtprof.grpc.pb.h"

namespace nrtprof::cli {

class DaemonConnection {
 public:
  // Connects to `address` with `credentials` (null: plaintext, for a unix socket) and checks
  // that a daemon answers Status within `timeout_ms`. A unix socket is first checked with
  // common/socket_trust.h (NRTPROF_SERVICE_USER from the environment): one that is not to be
  // trusted is PermissionDenied ("not trusting the daemon at ADDRESS: why"), and nothing is
  // sent to it; a bad NRTPROF_SERVICE_USER is InvalidArgument.
  static absl::StatusOr<std::unique_ptr<DaemonConnection>> Connect(
      const std::string& address, int timeout_ms,
      std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
  // Starts `daemon_path` on a socket in a fresh private folder, waits for its readiness line,
  // and connects. The daemon is stopped (SIGTERM, then waited for) when this object goes.
  static absl::StatusOr<std::unique_ptr<DaemonConnection>> StartPrivate(
      const std::string& daemon_path, const std::string& output_root);
  ~DaemonConnection();

  const std::string& address() const { return address_; }
  bool private_daemon() const { return daemon_pid_ > 0; }
  Control::StubInterface* stub() { return stub_.get(); }

  absl::StatusOr<StatusReply> Status(int timeout_ms);

 private:
  DaemonConnection(std::string address, std::unique_ptr<Control::StubInterface> stub)
      : address_(std::move(address)), stub_(std::move(stub)) {}

  std::string address_;
  std::unique_ptr<Control::StubInterface> stub_;
  pid_t daemon_pid_ = -1;
  std::string private_dir_;
};

// grpc::Status to absl::Status, keeping the message (and "no daemon answers at ADDRESS" for
// UNAVAILABLE, with gRPC's reason for a TCP address: a TLS failure says so).
absl::Status FromGrpc(const grpc::Status& status, const std::string& address);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_DAEMON_CONNECTION_H_
