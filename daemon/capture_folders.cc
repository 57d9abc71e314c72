#include "daemon/capture_folders.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace nrtprof::daemon {

// Text from a client in an error message: quoted, on one line (bytes as C escapes), and not
// all of it if it is long.
std::string Quoted(const std::string& s) {
  constexpr size_t kShown = 200;
  return absl::StrCat("'", absl::CHexEscape(s.substr(0, kShown)), s.size() > kShown ? "'..." : "'");
}

// A capture id becomes a folder name: keep it to a safe alphabet.
absl::Status CheckCaptureId(const std::string& id) {
  bool ok = !id.empty() && id.size() <= kMaxCaptureIdLength && id[0] != '.' && id[0] != '-';
  for (char c : id) {
    ok = ok && (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("capture id ", Quoted(id), " must be 1 to ", kMaxCaptureIdLength,
                   " letters, digits, '.', '_' or '-', not starting with '.' or '-'"));
}

// An output folder is the one folder it names: absolute, no NUL (which would cut the path the
// system sees short) or other control byte, no '.' or '..' component.
absl::Status CheckOutputDir(const std::string& dir) {
  if (dir[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("output folder ", Quoted(dir),
                     " is relative; the daemon runs elsewhere, so name it from the root"));
  }
  if (dir.size() > kMaxOutputDirLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output folder ", Quoted(dir), " is longer than ", kMaxOutputDirLength, " bytes"));
  }
  for (char c : dir) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("output folder ", Quoted(dir), " holds a NUL or control character"));
    }
  }
  for (absl::string_view part : absl::StrSplit(dir, '/')) {
    if (part == "." || part == "..") {
      return absl::InvalidArgumentError(absl::StrCat("output folder ", Quoted(dir), " has a '",
                                                     part, "' component; name the folder itself"));
    }
  }
  return absl::OkStatus();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// mkdir -p, each new folder 0750 (owner and group: captures hold program details).
absl::Status MakeFolders(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0750) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create folder ", prefix, ": ", strerror(errno)));
    }
    if (slash == std::string::npos) break;
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a folder"));
  }
  if (access(path.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write in folder ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// A capture's folder is claimed while the capture is in progress: this file in it, made
// exclusively, names the daemon's pid and the capture. Another capture -- of this daemon or of
// another nrtprofd -- is refused the folder, unless the daemon named is gone (it died): then the
// folder is taken over.
namespace {
constexpr char kClaimFile[] = ".nrtprof-capture-in-progress";
}  // namespace


absl::Status ClaimFolder(const std::string& dir, const std::string& id) {
  const std::string path = absl::StrCat(dir, "/", kClaimFile);
  const std::string mine = absl::StrCat("nrtprofd ", getpid(), " capture ", id, "\n");
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0640);
    if (fd >= 0) {
      const bool wrote = write(fd, mine.data(), mine.size()) == static_cast<ssize_t>(mine.size());
      close(fd);
      if (wrote) return absl::OkStatus();
      unlink(path.c_str());
      return absl::ResourceExhaustedError(absl::StrCat("cannot write in folder ", dir));
    }
    if (errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write in folder ", dir, ": ", strerror(errno)));
    }
    char buf[256] = {};
    const int in = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    const ssize_t n = in >= 0 ? read(in, buf, sizeof(buf) - 1) : -1;
    if (in >= 0) close(in);
    int pid = 0;
    char other[200] = {};
    if (n > 0 && sscanf(buf, "nrtprofd %d capture %199s", &pid, other) == 2 && pid > 0 &&
        (kill(pid, 0) == 0 || errno == EPERM)) {
      return absl::AlreadyExistsError(
          absl::StrCat(dir, " is in use by capture '", other, "' of nrtprofd (pid ", pid,
                       "); choose another folder, or wait for it"));
    }
    unlink(path.c_str());  // its daemon is gone: take the folder over
  }
  return absl::AlreadyExistsError(absl::StrCat(dir, " is in use by another capture"));
}

void ReleaseFolder(const std::string& dir) {
  unlink(absl::StrCat(dir, "/", kClaimFile).c_str());
}

}  // namespace nrtprof::daemon
