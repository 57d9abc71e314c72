#include "tests/testing/tls_certs.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace nrtprof::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::string ReadPem(const std::string& path) { return Slurp(path); }

bool MakeTlsFiles(const std::string& dir, TlsFiles* files, std::string* error) {
  // EC keys: quick to make. Each certificate valid for two days.
  const std::string script = "set -e; cd '" + dir + "'\n" + R"(
o=/usr/bin/openssl
key() { $o genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
key ca.key
$o req -x509 -new -key ca.key -out ca.pem -days 2 -subj "/CN=nrtprof test CA"
key other_ca.key
$o req -x509 -new -key other_ca.key -out other_ca.pem -days 2 -subj "/CN=nrtprof other CA"
key server.key
$o req -new -key server.key -out server.csr -subj "/CN=localhost"
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
$o x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 \
  -extfile server.ext
key client.key
$o req -new -key client.key -out client.csr -subj "/CN=nrtprof test client"
printf 'extendedKeyUsage=clientAuth\n' > client.ext
$o x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2 \
  -extfile client.ext
umask 077
rm -f token wrong_token
$o rand -hex 32 > token
$o rand -hex 32 > wrong_token
)";
  const std::string log = dir + "/openssl.log";
  const std::string command = "/bin/sh -c \"$NRTPROF_TLS_SCRIPT\" > '" + log + "' 2>&1";
  setenv("NRTPROF_TLS_SCRIPT", script.c_str(), 1);
  const int status = system(command.c_str());
  unsetenv("NRTPROF_TLS_SCRIPT");
  if (status != 0) {
    *error = "openssl failed: " + Slurp(log);
    return false;
  }
  files->ca = dir + "/ca.pem";
  files->other_ca = dir + "/other_ca.pem";
  files->server_cert = dir + "/server.pem";
  files->server_key = dir + "/server.key";
  files->client_cert = dir + "/client.pem";
  files->client_key = dir + "/client.key";
  files->token_file = dir + "/token";
  files->wrong_token_file = dir + "/wrong_token";
  files->token = Slurp(files->token_file);
  files->wrong_token = Slurp(files->wrong_token_file);
  for (std::string* t : {&files->token, &files->wrong_token}) {
    if (!t->empty() && t->back() == '\n') t->pop_back();
  }
  if (files->token.size() != 64 || files->wrong_token.size() != 64) {
    *error = "openssl rand made no token";
    return false;
  }
  return true;
}

}  // namespace nrtprof::testing
