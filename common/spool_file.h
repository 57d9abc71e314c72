// Spool files: what a shim in lossless mode (NRTPROF_MODE=lossless) keeps on disk of a
// capture, so that the daemon can build the process's part of the trace even if the daemon was
// away or restarted meanwhile. docs/trace_format.md has the layout:
//
//   "NRTSPOOL" (8 bytes), then records: a 4-byte little-endian length, that many bytes of a
//   serialized nrtprof.ShimMessage. The first record is the process's Hello; every batch the
//   process produced follows, once, in order. A record cut short by a crash ends the file.
//
// The file is <spool dir>/<capture id>.<pid>.<process start ns>.spool; the daemon finds a
// capture's files by their names in its own spool folder, never by a path a client sent.
//
// SpoolWriter is not thread-safe (the shim's flusher owns it). ReadSpool may be called from
// any thread.
#ifndef NRTPROF_COMMON_SPOOL_FILE_H_
#define NRTPROF_COMMON_SPOOL_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/socket_trust.h"

namespace nrtprof {

inline constexpr char kSpoolMagic[] = "NRTSPOOL";  // 8 bytes on disk, no NUL
inline constexpr size_t kSpoolMagicBytes = 8;
inline constexpr uint32_t kMaxSpoolRecordBytes = 64u << 20;

// DefaultRuntimeDir()/spool (common/address.h): beside the default socket.
std::string DefaultSpoolDir();

std::string SpoolFileName(std::string_view capture_id, uint32_t pid, uint64_t process_start_ns);
// The capture id of a spool file's name, or empty if `name` is not one.
std::string CaptureOfSpoolFile(std::string_view name);

// Appends records to a new spool file, up to a bound on its size.
class SpoolWriter {
 public:
  SpoolWriter() = default;
  ~SpoolWriter();
  SpoolWriter(const SpoolWriter&) = delete;
  SpoolWriter& operator=(const SpoolWriter&) = delete;

  // Creates `dir` (0700) if needed, checks that `trust` may trust it (common/socket_trust.h:
  // not a symlink, of the user, root or the service user, writable by no one else), and makes
  // the file, 0600, replacing none (an existing file or a symlink there is an error). False with
  // *error (one line naming the folder and its owner) on failure. Without `trust`: the calling
  // user, no service user.
  bool Open(const std::string& dir, const std::string& name, uint64_t max_bytes,
            const TrustPolicy& trust, std::string* error);
  bool Open(const std::string& dir, const std::string& name, uint64_t max_bytes,
            std::string* error);
  // False if the record would take the file past its bound or the write failed; the file then
  // stays as it was (a failed write is cut back off). The last kReserveBytes of the bound are
  // only for records appended with `reserve` true: small ones that say what could not be
  // kept.
  bool Append(std::string_view record, bool reserve = false);
  static constexpr uint64_t kReserveBytes = 1 << 16;
  uint64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint64_t max_bytes_ = 0;
  std::string path_;
};

// Reads a spool file's records one at a time from a given offset, while its writer may still
// append (the shim replays its own spool to a daemon that was away). Not thread-safe.
class SpoolCursor {
 public:
  SpoolCursor() = default;
  ~SpoolCursor();
  SpoolCursor(const SpoolCursor&) = delete;
  SpoolCursor& operator=(const SpoolCursor&) = delete;

  // Opens `path` to read from `offset`, the start of a record (or of the file: the magic is
  // then checked and skipped). False with *error set on failure.
  bool Open(const std::string& path, uint64_t offset, std::string* error);
  enum class Next { kRecord, kEnd, kError };
  // The next record, if the file holds all of it yet; kEnd at the end (or before a record not
  // yet complete); kError (with *error) if the file cannot be read or a record is oversized.
  Next Read(std::string* record, std::string* error);
  uint64_t offset() const { return offset_; }  // where the next record starts

 private:
  int fd_ = -1;
  uint64_t offset_ = 0;
};

struct SpoolContents {
  std::vector<std::string> records;
  bool torn_tail = false;  // the last record was cut short (the writer died while writing)
};

// Reads a spool file's records. An error if the file cannot be read, does not start with the
// magic, or names a record over kMaxSpoolRecordBytes.
bool ReadSpool(const std::string& path, SpoolContents* contents, std::string* error);

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_SPOOL_FILE_H_
