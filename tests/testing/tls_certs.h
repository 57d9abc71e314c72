// Certificates and tokens for tests of TCP collection, made at test time with /usr/bin/openssl
// (no key is ever committed): a CA, a server certificate for 127.0.0.1 and localhost (in
// subjectAltName) that it signed, a client certificate it signed (mutual TLS), a second CA
// that signed nothing here, and two random bearer tokens in files of mode 0600.
#ifndef NRTPROF_TESTS_TESTING_TLS_CERTS_H_
#define NRTPROF_TESTS_TESTING_TLS_CERTS_H_

#include <string>

namespace nrtprof::testing {

struct TlsFiles {
  std::string ca;  // PEM
  std::string server_cert, server_key;
  std::string client_cert, client_key;
  std::string other_ca;                       // trusts nothing the daemon presents
  std::string token_file, token;              // the daemon's
  std::string wrong_token_file, wrong_token;  // a well-formed token that is not it
};

// Makes the files in `dir` (which must exist). False, with the reason in *error, if openssl
// failed.
bool MakeTlsFiles(const std::string& dir, TlsFiles* files, std::string* error);

// The contents of a PEM file, for clients built in the test.
std::string ReadPem(const std::string& path);

}  // namespace nrtprof::testing

#endif  // NRTPROF_TESTS_TESTING_TLS_CERTS_H_
