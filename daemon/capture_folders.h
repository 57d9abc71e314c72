// A capture's folder: the checks of what a client names (its id, its output folder), making
// it, and claiming it while the capture is in progress, so that two captures -- of one nrtprofd
// or of two -- never write one folder. Used by the collector core (collector_core.h) only.
//
// Thread-safe: no state but the files on disk.
#ifndef NRTPROF_DAEMON_CAPTURE_FOLDERS_H_
#define NRTPROF_DAEMON_CAPTURE_FOLDERS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace nrtprof::daemon {

inline constexpr size_t kMaxCaptureIdLength = 128;
inline constexpr size_t kMaxOutputDirLength = 4095;  // PATH_MAX less its NUL

// Text from a client in an error message: quoted, on one line (bytes as C escapes), and not
// all of it if it is long.
std::string Quoted(const std::string& s);

// A capture id becomes a folder name: 1 to kMaxCaptureIdLength bytes of a safe alphabet.
absl::Status CheckCaptureId(const std::string& id);

// An output folder is the one folder it names: absolute, no NUL or other control byte, no '.'
// or '..' component, at most kMaxOutputDirLength bytes.
absl::Status CheckOutputDir(const std::string& dir);

bool Exists(const std::string& path);

// mkdir -p, each new folder 0750 (owner and group: captures hold program details).
absl::Status MakeFolders(const std::string& path);

// Claims `dir` for capture `id` while it is in progress: a file in it, made exclusively, names
// the daemon's pid and the capture. Another capture is refused the folder, unless the daemon
// named is gone (it died): then the folder is taken over. ReleaseFolder gives it back.
absl::Status ClaimFolder(const std::string& dir, const std::string& id);
void ReleaseFolder(const std::string& dir);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_CAPTURE_FOLDERS_H_
