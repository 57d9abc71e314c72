#include "client/daemon_credentials.h"

#include <grpc/support/log.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/address.h"
#include "common/credential_files.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM file: the CA that signed a TCP daemon's certificate (default $NRTPROF_TLS_CA)");
ABSL_FLAG(std::string, token_file, "",
          "file of one line, mode 0600: the bearer token of a TCP daemon (default "
          "$NRTPROF_TOKEN_FILE)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM file: a client certificate for a daemon that asks for one (default "
          "$NRTPROF_TLS_CERT)");
ABSL_FLAG(std::string, tls_key, "", "PEM file: the key of --tls_cert (default $NRTPROF_TLS_KEY)");

namespace nrtprof::cli {
namespace {

std::string FlagOrEnv(const absl::Flag<std::string>& flag, const char* variable) {
  std::string value = absl::GetFlag(flag);
  if (value.empty()) {
    const char* env = getenv(variable);
    if (env != nullptr) value = env;
  }
  if (value.empty() || value[0] == '/') return value;
  char cwd[PATH_MAX];
  return getcwd(cwd, sizeof(cwd)) != nullptr ? absl::StrCat(cwd, "/", value) : value;
}

// gRPC logs each failed TLS handshake on stderr; the call's status says the same in the one
// line the CLI prints.
void Quiet(gpr_log_func_args*) {}

}  // namespace

TlsPaths TlsPathsFromFlags() {
  TlsPaths paths;
  paths.ca = FlagOrEnv(FLAGS_tls_ca, "NRTPROF_TLS_CA");
  paths.token_file = FlagOrEnv(FLAGS_token_file, "NRTPROF_TOKEN_FILE");
  paths.cert = FlagOrEnv(FLAGS_tls_cert, "NRTPROF_TLS_CERT");
  paths.key = FlagOrEnv(FLAGS_tls_key, "NRTPROF_TLS_KEY");
  return paths;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> CredentialsFor(const std::string& address,
                                                                         const TlsPaths& paths) {
  switch (KindOf(address)) {
    case AddressKind::kUnix:
      return grpc::InsecureChannelCredentials();
    case AddressKind::kInvalid:
      return absl::InvalidArgumentError(absl::StrCat(
          "'", address, "' is not an address (unix:/path, /path, HOST:PORT or dns:///HOST:PORT)"));
    case AddressKind::kTcp:
      break;
  }
  const bool has_client_cert = !paths.cert.empty() && !paths.key.empty();
  if (paths.ca.empty() || (paths.token_file.empty() && !has_client_cert)) {
    return absl::InvalidArgumentError(absl::StrCat(
        address,
        " is a TCP address, which needs TLS: give --tls_ca=PEM (the CA that signed the "
        "daemon's certificate) and --token_file=PATH (or --tls_cert and --tls_key), or set "
        "NRTPROF_TLS_CA and NRTPROF_TOKEN_FILE"));
  }
  if (paths.cert.empty() != paths.key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  grpc::SslCredentialsOptions tls;
  absl::StatusOr<std::string> ca = ReadPemFile(paths.ca, "--tls_ca");
  if (!ca.ok()) return ca.status();
  tls.pem_root_certs = *std::move(ca);
  if (has_client_cert) {
    absl::StatusOr<std::string> cert = ReadPemFile(paths.cert, "--tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile(paths.key, "--tls_key");
    if (!key.ok()) return key.status();
    tls.pem_cert_chain = *std::move(cert);
    tls.pem_private_key = *std::move(key);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(tls);
  if (!paths.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(paths.token_file, "--token_file");
    if (!token.ok()) return token.status();
    credentials =
        grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(*token));
  }
  if (getenv("GRPC_VERBOSITY") == nullptr) gpr_set_log_function(&Quiet);
  return credentials;
}

}  // namespace nrtprof::cli
