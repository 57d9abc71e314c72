// A file that appears whole or not at all: written under a temporary name in the same folder
// (NAME.tmp.PID.N), flushed, then renamed over NAME on Commit(). A writer destroyed before
// Commit() removes its temporary file, so readers only ever see the old complete file or the
// new complete one. Writes are buffered in large blocks, and their writeback to the disk is
// started as they go, so that the fsync of Commit() waits for little.
//
// Not thread-safe: one writer per file.
#ifndef NRTPROF_TRACE_ATOMIC_FILE_H_
#define NRTPROF_TRACE_ATOMIC_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace nrtprof::daemon {

// Why a file cannot be made at `path`, in the system's words ("No such file or directory",
// "Is a directory", "Permission denied"), known before anything is written; empty if its
// folder looks ready to take it. For commands that check their output before the work.
std::string CannotWrite(const std::string& path);

class AtomicFile {
 public:
  // Creates the temporary file; errors name the path and the system's reason.
  absl::Status Open(const std::string& path);
  absl::Status Append(absl::string_view bytes);
  // fsync, close and rename over the final path.
  absl::Status Commit();
  ~AtomicFile();  // without Commit(): the temporary file is removed

  AtomicFile() = default;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

 private:
  absl::Status Flush();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  std::string buffer_;
  uint64_t written_ = 0;            // bytes written to fd_
  uint64_t writeback_started_ = 0;  // bytes whose writeback was asked for
  absl::Status error_;              // the first write error, reported by Commit()
};

// Open, Append(contents), Commit.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_ATOMIC_FILE_H_
