#include "client/locate.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nrtprof::cli {
namespace {

std::string SelfExe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

std::string Dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string Base(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

absl::StatusOr<std::string> Locate(const std::string& workspace_path, const char* env_override) {
  std::vector<std::string> candidates;
  if (const char* env = getenv(env_override); env != nullptr && env[0] != '\0') {
    candidates.push_back(env);
  } else {
    const std::string exe = SelfExe();
    const std::string dir = Dir(exe);
    candidates = {
        absl::StrCat(exe, ".runfiles/nrtprof/", workspace_path),  // bazel run / runfiles
        absl::StrCat(dir, "/../", workspace_path),                // bazel-bin/client/nrtprof
        absl::StrCat(dir, "/", Base(workspace_path)),             // installed side by side
    };
  }
  for (const std::string& candidate : candidates) {
    char resolved[PATH_MAX];
    if (access(candidate.c_str(), R_OK) == 0 && realpath(candidate.c_str(), resolved) != nullptr) {
      return std::string(resolved);
    }
  }
  return absl::NotFoundError(absl::StrCat("cannot find ", Base(workspace_path), " (looked at ",
                                          absl::StrJoin(candidates, ", "), "; set ",
                                          env_override, ")"));
}

std::string Absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[PATH_MAX];
  return getcwd(cwd, sizeof(cwd)) != nullptr ? absl::StrCat(cwd, "/", path) : path;
}

}  // namespace nrtprof::cli
