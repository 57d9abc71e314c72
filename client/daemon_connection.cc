#include "client/daemon_connection.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/address.h"
#include "common/socket_trust.h"
#include "grpcpp/grpcpp.h"

namespace nrtprof::cli {

absl::Status FromGrpc(const grpc::Status& status, const std::string& address) {
  if (status.ok()) return absl::OkStatus();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    if (KindOf(address) == AddressKind::kTcp) {
      return absl::UnavailableError(
          absl::StrCat("no daemon answers at ", address, ": ", status.error_message()));
    }
    return absl::UnavailableError(absl::StrCat("no daemon answers at ", address));
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::unique_ptr<DaemonConnection>> DaemonConnection::Connect(
    const std::string& address, int timeout_ms,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  if (KindOf(address) == AddressKind::kUnix) {
    // gRPC would only log it, several lines of its own, and say the channel failed.
    const std::string path = SocketPathOf(address);
    if (path.size() >= sizeof(sockaddr_un::sun_path)) {
      return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is longer than ",
                                                     sizeof(sockaddr_un::sun_path) - 1,
                                                     " bytes, the most a unix socket takes"));
    }
    absl::StatusOr<TrustPolicy> policy = TrustPolicyFromEnv();
    if (!policy.ok()) return policy.status();
    // Nobody there (NotFound) is left to the connection below, which says so in its own words.
    // A socket folder nobody else can write cannot change hands between this check and gRPC's
    // connection, so the check holds for it.
    const absl::Status trust = CheckDaemonSocket(SocketPathOf(address), *policy);
    if (trust.code() == absl::StatusCode::kPermissionDenied ||
        trust.code() == absl::StatusCode::kInvalidArgument) {
      return absl::PermissionDeniedError(
          absl::StrCat("not trusting the daemon at ", address, ": ", trust.message()));
    }
  }
  auto channel = grpc::CreateChannel(
      ToGrpcTarget(address),
      credentials != nullptr ? credentials : grpc::InsecureChannelCredentials());
  std::unique_ptr<DaemonConnection> connection(
      new DaemonConnection(address, Control::NewStub(channel)));
  absl::StatusOr<StatusReply> status = connection->Status(timeout_ms);
  if (!status.ok()) return status.status();
  return connection;
}

absl::StatusOr<StatusReply> DaemonConnection::Status(int timeout_ms) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  StatusReply reply;
  const grpc::Status status = stub_->Status(&context, StatusRequest(), &reply);
  if (!status.ok()) return FromGrpc(status, address_);
  return reply;
}

absl::StatusOr<std::unique_ptr<DaemonConnection>> DaemonConnection::StartPrivate(
    const std::string& daemon_path, const std::string& output_root) {
  char dir_template[] = "/tmp/nrtprof-run-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a folder for a private daemon: ",
                                            strerror(errno)));
  }
  const std::string dir = dir_template;
  const std::string socket = dir + "/nrtprofd.sock";
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: ", strerror(errno)));
  if (pid == 0) {
    // The readiness end stays open across exec; everything else closes.
    fcntl(ready[1], F_SETFD, 0);
    // Out of the terminal's foreground group: a Ctrl-C meant for the program must not stop
    // the daemon that records it (nrtprof stops it once the program is done).
    setpgid(0, 0);
    const std::string socket_flag = "--socket=" + socket;
    const std::string ready_flag = absl::StrCat("--ready_fd=", ready[1]);
    const std::string root_flag = "--output_root=" + output_root;
    // One run, one capture from the program's start: no past to keep.
    execl(daemon_path.c_str(), daemon_path.c_str(), socket_flag.c_str(), ready_flag.c_str(),
          root_flag.c_str(), "--flight_recorder_seconds=0", "--quiet=true",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(ready[1]);
  // Wait for "ready\n" (or EOF if the daemon dies), at most 20 s.
  char buf[16] = {};
  pollfd pfd{ready[0], POLLIN, 0};
  const bool readable = poll(&pfd, 1, 20000) == 1;
  const ssize_t n = readable ? read(ready[0], buf, sizeof(buf) - 1) : 0;
  close(ready[0]);
  auto fail = [&](const std::string& why) {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
    unlink(socket.c_str());
    rmdir(dir.c_str());
    return absl::UnavailableError(why);
  };
  if (n <= 0 || std::strncmp(buf, "ready", 5) != 0) {
    return fail(absl::StrCat("the private daemon ", daemon_path, " did not start"));
  }
  absl::StatusOr<std::unique_ptr<DaemonConnection>> connection =
      Connect("unix:" + socket, 5000);
  if (!connection.ok()) return fail(std::string(connection.status().message()));
  (*connection)->daemon_pid_ = pid;
  (*connection)->private_dir_ = dir;
  return connection;
}

DaemonConnection::~DaemonConnection() {
  stub_.reset();
  if (daemon_pid_ > 0) {
    kill(daemon_pid_, SIGTERM);
    int status = 0;
    waitpid(daemon_pid_, &status, 0);
    // Leave nothing behind but the capture: the socket, the (empty) spool folder, the folder.
    unlink((private_dir_ + "/nrtprofd.sock").c_str());
    rmdir((private_dir_ + "/spool").c_str());
    rmdir(private_dir_.c_str());
  }
}

}  // namespace nrtprof::cli
