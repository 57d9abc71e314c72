#include "common/address.h"

#include <unistd.h>

#include <cstdlib>

namespace nrtprof {

std::string DefaultSocketPath() {
  return "/tmp/nrtprof-" + std::to_string(getuid()) + "/nrtprofd.sock";
}

std::string DaemonAddress() {
  const char* env = std::getenv("NRTPROF_ADDR");
  return ToGrpcTarget(env != nullptr && env[0] != '\0' ? env : DefaultSocketPath());
}

std::string ToGrpcTarget(const std::string& address) {
  if (!address.empty() && address[0] == '/') return "unix:" + address;
  return address;
}

std::string SocketPathOf(const std::string& address) {
  if (!address.empty() && address[0] == '/') return address;
  if (address.rfind("unix://", 0) == 0) return address.substr(7);
  if (address.rfind("unix:", 0) == 0) return address.substr(5);
  return "";
}

}  // namespace nrtprof
