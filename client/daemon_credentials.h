// How the CLI secures its connection to a daemon on TCP, and what it hands the shim for the
// same: the flags --tls_ca, --token_file, --tls_cert and --tls_key, each falling back to its
// environment variable (NRTPROF_TLS_CA, NRTPROF_TOKEN_FILE, NRTPROF_TLS_CERT, NRTPROF_TLS_KEY).
// A unix socket needs none of them.
//
// Not thread-safe (reads flags); one per command.
#ifndef NRTPROF_CLIENT_DAEMON_CREDENTIALS_H_
#define NRTPROF_CLIENT_DAEMON_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace nrtprof::cli {

// Absolute paths, empty where neither the flag nor the variable is set.
struct TlsPaths {
  std::string ca;          // the CA that signed the daemon's certificate
  std::string token_file;  // the bearer token
  std::string cert, key;   // a client certificate and its key (mutual TLS)
};

TlsPaths TlsPathsFromFlags();

// Plaintext for a unix socket; for a TCP address, TLS that verifies the daemon with paths.ca
// and sends the token (and the client certificate, if any). InvalidArgument when a TCP address
// lacks them or the address is not one; the files' own errors otherwise. One line each.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> CredentialsFor(const std::string& address,
                                                                         const TlsPaths& paths);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_DAEMON_CREDENTIALS_H_
