// Finding nrtprof's own pieces from the CLI: the daemon binary and the shim library, wherever
// nrtprof runs from — Bazel's runfiles, bazel-bin, or an installed prefix.
#ifndef NRTPROF_CLIENT_LOCATE_H_
#define NRTPROF_CLIENT_LOCATE_H_

#include <string>

#include "absl/status/statusor.h"

namespace nrtprof::cli {

// The absolute path of a file nrtprof ships, given its workspace path ("daemon/nrtprofd",
// "shim/libnrtprof_shim.so"). Looks at $env_override first, then beside this executable in
// its runfiles tree, the bazel-bin layout, and the same folder. NotFound names every place.
absl::StatusOr<std::string> Locate(const std::string& workspace_path, const char* env_override);

// `path` from the current folder when it is relative (empty stays empty): the daemon runs
// elsewhere, so what the CLI hands it is absolute.
std::string Absolute(const std::string& path);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_LOCATE_H_
