#include "common/socket_trust.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace nrtprof {
namespace {

bool Trusted(uid_t uid, const TrustPolicy& policy) {
  return uid == policy.self || uid == 0 || (policy.service && uid == *policy.service);
}

// "you (uid 1001 (alice)), root or the service user uid 999 (nrtprof)".
std::string Whom(const TrustPolicy& policy) {
  std::string whom = absl::StrCat("you (", DescribeUid(policy.self), ")");
  if (!policy.service) return absl::StrCat(whom, " or root");
  return absl::StrCat(whom, ", root or the service user (NRTPROF_SERVICE_USER) ",
                      DescribeUid(*policy.service));
}

// One folder's own rules. `name` is how the message names it.
absl::Status CheckOne(const struct stat& st, const std::string& name, const TrustPolicy& policy) {
  if (!S_ISDIR(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(name, " is not a folder"));
  }
  if (!Trusted(st.st_uid, policy)) {
    return absl::PermissionDeniedError(absl::StrCat(name, " belongs to ", DescribeUid(st.st_uid),
                                                    ", not to ", Whom(policy)));
  }
  // In a sticky folder only an entry's owner (or the folder's) can rename or remove it: others
  // may add their own names, never take ours.
  const bool shared_sticky = (st.st_mode & S_ISVTX) != 0 &&
                             (st.st_uid == 0 || (policy.service && st.st_uid == *policy.service));
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !shared_sticky) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s (of %s) is writable by %s (mode %04o): anyone there could replace "
                        "what is in it",
                        name, DescribeUid(st.st_uid),
                        (st.st_mode & S_IWOTH) != 0 ? "everyone" : "its group",
                        st.st_mode & 07777));
  }
  return absl::OkStatus();
}

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

}  // namespace

absl::StatusOr<uid_t> ParseUser(const std::string& name_or_uid) {
  uint32_t uid = 0;
  if (absl::SimpleAtoi(name_or_uid, &uid) && name_or_uid.find_first_not_of("0123456789") ==
                                                 std::string::npos) {
    return static_cast<uid_t>(uid);
  }
  std::vector<char> buffer(16384);
  passwd pw;
  passwd* found = nullptr;
  if (getpwnam_r(name_or_uid.c_str(), &pw, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no such user '", name_or_uid, "'"));
  }
  return found->pw_uid;
}

absl::StatusOr<TrustPolicy> TrustPolicyFromEnv() {
  TrustPolicy policy;
  policy.self = getuid();
  const char* service = getenv("NRTPROF_SERVICE_USER");
  if (service != nullptr && service[0] != '\0') {
    absl::StatusOr<uid_t> uid = ParseUser(service);
    if (!uid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("NRTPROF_SERVICE_USER='", service, "': ", uid.status().message()));
    }
    policy.service = *uid;
  }
  return policy;
}

std::string DescribeUid(uid_t uid) {
  std::vector<char> buffer(16384);
  passwd pw;
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return absl::StrCat("uid ", uid, " (", found->pw_name, ")");
  }
  return absl::StrCat("uid ", uid);
}

absl::Status CheckFolder(const std::string& folder, const std::string& what,
                         const TrustPolicy& policy) {
  struct stat st;
  if (lstat(folder.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no ", what, " ", folder));
    return absl::PermissionDeniedError(
        absl::StrCat("cannot check ", what, " ", folder, ": ", strerror(errno)));
  }
  if (S_ISLNK(st.st_mode)) {
    char target[PATH_MAX] = {};
    const ssize_t n = readlink(folder.c_str(), target, sizeof(target) - 1);
    return absl::PermissionDeniedError(
        absl::StrCat(what, " ", folder, " is a symlink (to ", n > 0 ? target : "?", ", made by ",
                     DescribeUid(st.st_uid), "), not a folder"));
  }
  const std::string name = absl::StrCat(what, " ", folder);
  if (absl::Status s = CheckOne(st, name, policy); !s.ok()) return s;
  // The folders above, as they really are (/var/run is a symlink to /run on many systems).
  char real[PATH_MAX];
  if (realpath(folder.c_str(), real) == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot check ", what, " ", folder, ": ", strerror(errno)));
  }
  for (std::string above = Parent(real);; above = Parent(above)) {
    if (stat(above.c_str(), &st) != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot check folder ", above, " above ", name, ": ", strerror(errno)));
    }
    if (absl::Status s = CheckOne(st, absl::StrCat("folder ", above, " above ", name),
                                  policy);
        !s.ok()) {
      return s;
    }
    if (above == "/") break;
  }
  return absl::OkStatus();
}

absl::Status CheckPeer(int fd, const std::string& socket, const TrustPolicy& policy) {
  ucred cred{};
  socklen_t size = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot tell who listens on ", socket, " (SO_PEERCRED): ", strerror(errno)));
  }
  if (!Trusted(cred.uid, policy)) {
    return absl::PermissionDeniedError(
        absl::StrCat("the daemon on ", socket, " runs as ", DescribeUid(cred.uid), " (pid ",
                     cred.pid, "), not as ", Whom(policy)));
  }
  return absl::OkStatus();
}

absl::Status CheckDaemonSocket(const std::string& socket, const TrustPolicy& policy) {
  if (absl::Status s = CheckFolder(Parent(socket), "socket folder", policy); !s.ok()) return s;
  struct stat st;
  if (lstat(socket.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no socket ", socket));
    return absl::PermissionDeniedError(
        absl::StrCat("cannot check socket ", socket, ": ", strerror(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(socket, " is not a socket"));
  }
  sockaddr_un addr{};
  if (socket.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", socket, " is too long"));
  }
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, socket.c_str(), socket.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    // The process lacks what a check takes (descriptors, memory): not a verdict on the daemon.
    const bool starved = errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS;
    const std::string message = absl::StrCat("socket: ", strerror(errno));
    return starved ? absl::ResourceExhaustedError(message) : absl::InternalError(message);
  }
  int result;
  do {
    result = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } while (result != 0 && errno == EINTR);
  const int connect_errno = errno;
  absl::Status status;
  if (result != 0) {
    if (connect_errno == ECONNREFUSED || connect_errno == ENOENT) {
      status = absl::NotFoundError(absl::StrCat("nobody listens on ", socket));
    } else if (connect_errno == EAGAIN) {
      status = absl::UnavailableError(absl::StrCat("the daemon on ", socket, " is busy"));
    } else {
      status = absl::PermissionDeniedError(
          absl::StrCat("cannot connect to ", socket, ": ", strerror(connect_errno)));
    }
  } else {
    status = CheckPeer(fd, socket, policy);
  }
  close(fd);
  return status;
}

}  // namespace nrtprof
