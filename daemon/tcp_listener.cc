#include "daemon/tcp_listener.h"

#include <grpc/support/log.h>

#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/address.h"
#include "common/credential_files.h"

namespace nrtprof::daemon {
namespace {

// gRPC's own log lines while the listener starts: a failure to bind becomes our one line,
// with the reason taken from them, instead of gRPC's multi-line dump.
std::mutex g_start_log_mu;
std::string* g_start_log = nullptr;  // guarded by g_start_log_mu

void CaptureStartLog(gpr_log_func_args* args) {
  std::lock_guard<std::mutex> lock(g_start_log_mu);
  if (g_start_log != nullptr && args->severity == GPR_LOG_SEVERITY_ERROR) {
    absl::StrAppend(g_start_log, args->message, "\n");
  }
}

std::string BindFailureReason(const std::string& log) {
  const std::string os_error = "os_error:\"";
  if (const size_t at = log.find(os_error); at != std::string::npos) {
    const size_t begin = at + os_error.size();
    return log.substr(begin, log.find('"', begin) - begin);
  }
  if (absl::StrContains(log, "Invalid private key") ||
      absl::StrContains(log, "Invalid cert chain") ||
      absl::StrContains(log, "Handshaker factory creation failed")) {
    return "--tls_cert and --tls_key are not a certificate and its private key";
  }
  return "gRPC could not bind it";
}

}  // namespace

absl::Status CheckTcpListenerFlags(const TcpListenerFlags& flags) {
  if (flags.listen.empty()) {
    if (!flags.cert_file.empty() || !flags.key_file.empty() || !flags.token_file.empty() ||
        !flags.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_cert, --tls_key, --token_file and --tls_client_ca are for --listen; the unix "
          "socket needs none");
    }
    return absl::OkStatus();
  }
  std::string host;
  int port = 0;
  if (!SplitHostPort(flags.listen, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen '", flags.listen,
                     "' is not HOST:PORT (e.g. 0.0.0.0:7878, [::]:7878, 127.0.0.1:0)"));
  }
  if (flags.cert_file.empty() || flags.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--listen needs TLS: give --tls_cert=PEM and --tls_key=PEM, and --token_file=PATH or "
        "--tls_client_ca=PEM; nrtprofd never listens on TCP in plaintext");
  }
  if (flags.token_file.empty() && flags.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--listen needs a way to check callers: give --token_file=PATH (a bearer token) or "
        "--tls_client_ca=PEM (client certificates), or both");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Start(const TcpListenerFlags& flags) {
  absl::StatusOr<std::string> cert = ReadPemFile(flags.cert_file, "--tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile(flags.key_file, "--tls_key");
  if (!key.ok()) return key.status();
  std::string token;
  if (!flags.token_file.empty()) {
    absl::StatusOr<std::string> read = ReadTokenFile(flags.token_file, "--token_file");
    if (!read.ok()) return read.status();
    token = *std::move(read);
  }
  grpc::SslServerCredentialsOptions tls;
  tls.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  if (!flags.client_ca_file.empty()) {
    absl::StatusOr<std::string> client_ca = ReadPemFile(flags.client_ca_file, "--tls_client_ca");
    if (!client_ca.ok()) return client_ca.status();
    tls.pem_root_certs = *std::move(client_ca);
    tls.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }

  std::unique_ptr<TcpListener> listener(new TcpListener(token));
  listener->security_ = "TLS";
  if (!token.empty()) listener->security_ += ", bearer token";
  if (!flags.client_ca_file.empty()) listener->security_ += ", client certificate";

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, grpc::SslServerCredentials(tls), &port);
  // Without this, gRPC binds with SO_REUSEPORT, and a second daemon on the same port would
  // quietly take half the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterCallbackGenericService(&listener->collector_);
  builder.RegisterService(&listener->control_);
  builder.SetMaxReceiveMessageSize(kMaxShimMessageBytes);
  std::string start_log;
  {
    std::lock_guard<std::mutex> lock(g_start_log_mu);
    g_start_log = &start_log;
  }
  gpr_set_log_function(&CaptureStartLog);
  listener->server_ = builder.BuildAndStart();
  gpr_set_log_function(nullptr);  // gRPC's default again
  {
    std::lock_guard<std::mutex> lock(g_start_log_mu);
    g_start_log = nullptr;
  }
  if (listener->server_ == nullptr || port == 0) {
    if (listener->server_ != nullptr) listener->server_->Shutdown();
    listener->shut_down_ = true;
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", flags.listen, ": ", BindFailureReason(start_log)));
  }
  std::string host;
  int ignored = 0;
  SplitHostPort(flags.listen, &host, &ignored);
  listener->address_ = host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port)
                                                           : absl::StrCat(host, ":", port);
  return listener;
}

void TcpListener::Open(CollectorService* collector, ControlService* control) {
  collector_.Attach(collector);
  control_.Attach(control);
  gate_.Open();
}

void TcpListener::Shutdown(std::chrono::system_clock::time_point deadline) {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(deadline);
  server_->Wait();
  gate_.LogUnloggedRefusals();
}

TcpListener::~TcpListener() { Shutdown(std::chrono::system_clock::now()); }

}  // namespace nrtprof::daemon
