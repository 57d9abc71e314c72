#include "common/address.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace nrtprof {

std::string DefaultRuntimeDir() { return DefaultRuntimeDir(getuid()); }

std::string DefaultRuntimeDir(uid_t uid) {
  // XDG_RUNTIME_DIR is inherited: under su or sudo it may still name the first user's folder,
  // whose owner or mode then tells it apart.
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  struct stat st;
  if (xdg != nullptr && xdg[0] == '/' && lstat(xdg, &st) == 0 && S_ISDIR(st.st_mode) &&
      st.st_uid == uid && (st.st_mode & 07777) == 0700) {
    std::string dir = xdg;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir + "/nrtprof";
  }
  return "/tmp/nrtprof-" + std::to_string(uid);
}

std::string DefaultSocketPath() { return DefaultSocketPath(getuid()); }

std::string DefaultSocketPath(uid_t uid) { return DefaultRuntimeDir(uid) + "/nrtprofd.sock"; }

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

bool SplitHostPort(const std::string& host_port, std::string* host, int* port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string h = host_port.substr(0, colon);
  const std::string p = host_port.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const int value = std::stoi(p);
  if (value > 65535) return false;
  if (h.front() == '[') {
    if (h.size() < 3 || h.back() != ']') return false;
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    return false;  // an IPv6 host needs its brackets
  }
  if (h.find_first_of(" /[]") != std::string::npos) return false;
  *host = h;
  *port = value;
  return true;
}

AddressKind KindOf(const std::string& address) {
  if (!SocketPathOf(address).empty()) return AddressKind::kUnix;
  std::string rest = address;
  for (const char* scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (rest.rfind(scheme, 0) == 0) {
      rest = rest.substr(strlen(scheme));
      break;
    }
  }
  std::string host;
  int port = 0;
  return SplitHostPort(rest, &host, &port) && port > 0 ? AddressKind::kTcp
                                                        : AddressKind::kInvalid;
}

}  // namespace nrtprof
