#include "daemon/nrtprofd_setup.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/address.h"

namespace nrtprof::daemon {
namespace {

constexpr size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1;

}  // namespace

std::string Absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  return absl::StrCat(cwd, "/", path);
}

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The socket's path from --socket: PATH, unix:PATH or unix://PATH; relative paths from the
// current folder.
bool SocketPath(uid_t uid, const std::string& flag, std::string* path, std::string* error) {
  if (flag.empty()) {
    *path = DefaultSocketPath(uid);
  } else if (flag.rfind("unix:", 0) == 0 || flag[0] == '/') {
    *path = SocketPathOf(flag);
  } else if (flag.find(':') == std::string::npos) {
    *path = flag;
  } else {
    *error = absl::StrCat("--socket '", flag, "' is not a unix socket (PATH or unix:PATH)");
    return false;
  }
  *path = Absolute(*path);
  if (path->empty() || path->back() == '/') {
    *error = absl::StrCat("--socket '", flag, "' names no socket file");
    return false;
  }
  if (path->size() > kMaxSocketPath) {
    *error = absl::StrCat("socket path ", *path, " is longer than ", kMaxSocketPath, " bytes");
    return false;
  }
  return true;
}

// Gives a folder or socket `access`'s group and `mode`, whatever the umask.
absl::Status Restrict(const std::string& path, mode_t mode, const Access& reach) {
  if (reach.group && chown(path.c_str(), static_cast<uid_t>(-1), *reach.group) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot give ", path, " to group ",
                                                    *reach.group, ": ", strerror(errno)));
  }
  if (chmod(path.c_str(), mode) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot set the permissions of ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// The socket's folder: made if missing, private to the daemon's user (or shared with
// --socket_group only to connect: nobody but the daemon's user can write it). The default one
// must be ours: another user could otherwise make it first and receive every process's events;
// an older daemon's 0770 is tightened (the shims and the CLI trust no folder others can write).
absl::Status PrepareSocketFolder(const std::string& socket, bool is_default,
                                 const Access& reach) {
  const std::string folder = Parent(socket);
  struct stat st;
  if (lstat(folder.c_str(), &st) != 0) {
    if (mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create folder ", folder, ": ", strerror(errno)));
    }
    if (lstat(folder.c_str(), &st) != 0) {
      return absl::PermissionDeniedError(absl::StrCat("cannot use folder ", folder));
    }
    if (S_ISDIR(st.st_mode) && st.st_uid == getuid()) {
      if (absl::Status s = Restrict(folder, reach.folder_mode(), reach); !s.ok()) return s;
    }
  } else if (is_default && S_ISDIR(st.st_mode) && st.st_uid == getuid() &&
             (st.st_mode & 07777) != reach.folder_mode()) {
    if (absl::Status s = Restrict(folder, reach.folder_mode(), reach); !s.ok()) return s;
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(folder, " is not a folder"));
  }
  if (is_default && st.st_uid != getuid()) {
    return absl::PermissionDeniedError(
        absl::StrCat(folder, " belongs to another user; remove it or choose --socket"));
  }
  if (access(folder.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write in folder ", folder, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// Refuses a socket another daemon listens on; removes a stale one (nobody listening).
absl::Status ClaimSocket(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket; remove it or choose --socket"));
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int connected = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int connect_errno = errno;
  close(fd);
  if (connected == 0) {
    return absl::AlreadyExistsError(absl::StrCat("another nrtprofd is already listening on ", path,
                                                 "; stop it or choose --socket"));
  }
  if (connect_errno != ECONNREFUSED) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot check socket ", path, ": ", strerror(connect_errno)));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot remove stale socket ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status PrepareOutputRoot(const std::string& root) {
  for (size_t slash = root.find('/', 1);; slash = root.find('/', slash + 1)) {
    const std::string prefix = root.substr(0, slash);
    if (mkdir(prefix.c_str(), 0750) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create output folder ", prefix, ": ", strerror(errno)));
    }
    if (slash == std::string::npos) break;
  }
  struct stat st;
  if (stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("output root ", root, " is not a folder"));
  }
  if (access(root.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write in output folder ", root, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// Checks --user against who started the daemon: root must name one to listen on TCP, and only
// root can become another user. Returns false with a flag error (exit 2).
bool ResolveUser(const std::string& name, bool listens_on_tcp, std::optional<RunAs>* run_as,
                 std::string* error) {
  if (name.empty()) {
    if (listens_on_tcp && geteuid() == 0) {
      *error =
          "refusing to listen on TCP as root: give --user=NAME, the user to run as once the "
          "sockets are bound";
      return false;
    }
    return true;
  }
  const passwd* pw = getpwnam(name.c_str());
  if (pw == nullptr) {
    *error = absl::StrCat("--user '", name, "': no such user");
    return false;
  }
  if (pw->pw_uid == 0) {
    *error = absl::StrCat("--user '", name, "' is root; name an unprivileged user");
    return false;
  }
  if (geteuid() != 0 && pw->pw_uid != geteuid()) {
    *error = absl::StrCat("--user '", name, "': only root can run nrtprofd as another user");
    return false;
  }
  *run_as = RunAs{pw->pw_name, pw->pw_uid, pw->pw_gid};
  return true;
}

// --socket_group: a group name or gid.
bool ResolveGroup(const std::string& name, Access* access, std::string* error) {
  if (name.empty()) return true;
  if (name.find_first_not_of("0123456789") == std::string::npos && name.size() < 10) {
    access->group = static_cast<gid_t>(std::stoul(name));
    return true;
  }
  const group* gr = getgrnam(name.c_str());
  if (gr == nullptr) {
    *error = absl::StrCat("--socket_group '", name, "': no such group");
    return false;
  }
  access->group = gr->gr_gid;
  return true;
}

// Becomes `user` (its groups, its group, then the user), and checks that root cannot be had
// back. glibc applies each change to every thread, gRPC's included.
absl::Status DropPrivileges(const RunAs& user) {
  if (geteuid() != 0) return absl::OkStatus();  // already that user (ResolveUser)
  if (initgroups(user.name.c_str(), user.gid) != 0 || setgid(user.gid) != 0 ||
      setuid(user.uid) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot become user ", user.name, ": ", strerror(errno)));
  }
  if (setuid(0) == 0 || getuid() != user.uid || geteuid() != user.uid || getegid() != user.gid) {
    return absl::InternalError(absl::StrCat("dropping root for user ", user.name, " failed"));
  }
  return absl::OkStatus();
}

}  // namespace nrtprof::daemon
