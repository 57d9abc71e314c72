// nrtprofd's TCP listener (--listen HOST:PORT), for shims and CLIs on other machines. It exists
// only secured: TLS with the daemon's certificate (--tls_cert, --tls_key) and, for every call,
// a bearer token (--token_file) or a client certificate signed by --tls_client_ca (mutual TLS),
// or both. Its calls go through a TcpGate (tcp_gate.h) to the services the unix socket serves.
// It has a gRPC server of its own, bound before the daemon drops root, and opened to the
// services only once the daemon runs as its user and has made its socket, folders and core.
//
// Not thread-safe (the daemon's main thread drives it). The services given to Open() must
// outlive it, or its Shutdown().
#ifndef NRTPROF_DAEMON_TCP_LISTENER_H_
#define NRTPROF_DAEMON_TCP_LISTENER_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/collector_service.h"
#include "daemon/control_service.h"
#include "daemon/tcp_gate.h"
#include "grpcpp/grpcpp.h"

namespace nrtprof::daemon {

struct TcpListenerFlags {
  std::string listen;          // HOST:PORT; port 0 picks a free one
  std::string cert_file;       // PEM: the daemon's certificate chain
  std::string key_file;        // PEM: its private key
  std::string token_file;      // one line: the bearer token (credential_files.h)
  std::string client_ca_file;  // PEM: the CA that signs client certificates (mutual TLS)
};

// InvalidArgument with one line if the flags do not make a secured listener (or a TLS flag is
// given without --listen); OK without --listen and TLS flags.
absl::Status CheckTcpListenerFlags(const TcpListenerFlags& flags);

class TcpListener {
 public:
  // Reads the files, binds and starts serving behind a closed gate (calls get UNAVAILABLE until
  // Open()). Errors are one line.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Start(const TcpListenerFlags& flags);
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;
  ~TcpListener();

  // HOST:PORT with the port bound (the one picked for port 0).
  const std::string& address() const { return address_; }
  // How callers are checked: "TLS, bearer token", "TLS, client certificate" or both.
  const std::string& security() const { return security_; }

  // From now on, calls that pass the gate go to these services.
  void Open(CollectorService* collector, ControlService* control);
  // Ends the calls in progress at `deadline` and stops listening; then says how many refusals
  // the gate's rate limit left out of the log, if any.
  void Shutdown(std::chrono::system_clock::time_point deadline);

 private:
  explicit TcpListener(std::string token)
      : gate_(std::move(token)), collector_(&gate_), control_(&gate_) {}

  TcpGate gate_;
  GatedCollectorService collector_;
  GatedControlService control_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::string security_;
  bool shut_down_ = false;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_TCP_LISTENER_H_
