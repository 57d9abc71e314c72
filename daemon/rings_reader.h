// Reads a profiled process's rings file (common/rings_file.h) from the daemon: how many records
// the process had made, by lane, so that when it dies without its final batch (SIGKILL, _exit,
// a crash) what it never sent is counted (DropCounts::process_died) instead of missing.
//
// The file is opened while the process lives (at its Hello, through /proc/PID/fd, which needs
// the same user or root and a stream on this machine) and read after it died. Its contents are
// the process's to write: every value read is bounded, and a file that does not look like a
// rings file is refused. Thread-compatible; functions only.
#ifndef NRTPROF_DAEMON_RINGS_READER_H_
#define NRTPROF_DAEMON_RINGS_READER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "trace/trace_model.h"

namespace nrtprof::daemon {

struct ProcessCapture;

// An open rings file of this daemon's, closed with the last reference.
class RingsFile {
 public:
  explicit RingsFile(int fd) : fd_(fd) {}
  ~RingsFile();
  RingsFile(const RingsFile&) = delete;
  RingsFile& operator=(const RingsFile&) = delete;
  int fd() const { return fd_; }

 private:
  const int fd_;
};

// A descriptor of this daemon's for descriptor `fd` of process `pid`, if that is a rings file;
// -1 otherwise (the process gone, another user's, not a rings file).
int OpenRingsFile(uint32_t pid, int32_t fd);

// Records the process made, by lane (framework: ranges, runtime: libnrt calls): written to its
// rings or refused by a full one, or lost outside any ring. INVALID_ARGUMENT for a file that is
// not a well-formed rings file.
absl::StatusOr<LaneDropCounts> ReadRecordsMade(int rings_fd);

// True if process `pid` has ended (gone, or a zombie not yet reaped).
bool ProcessEnded(uint32_t pid);

// For a process that ended without its final batch and whose rings file the daemon holds:
// sets capture->records_made from it (records_made_known). Otherwise changes nothing.
void CountRecordsOfAnEndedProcess(ProcessCapture* capture);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_RINGS_READER_H_
