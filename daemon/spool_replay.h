// The daemon's side of lossless mode: a capture's spool files (common/spool_file.h), written
// by the shims of its processes, turned back into ProcessCaptures, and the capture manifests
// that let a restarted daemon carry on with the captures its predecessor had in progress.
//
// A process's spool holds every batch it produced, once, in order, whether or not a daemon
// received it live; so for a process with a spool file the file is what goes into the trace,
// and what its streams delivered is set aside. Files are found by name in the daemon's own
// spool folder; nothing a client sends becomes a path.
//
// Thread-safe (no shared state); the functions touch only the spool folder.
#ifndef NRTPROF_DAEMON_SPOOL_REPLAY_H_
#define NRTPROF_DAEMON_SPOOL_REPLAY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/ingest.h"

namespace nrtprof::daemon {

struct CaptureManifest {
  std::string capture_id;
  std::string output_dir;
  uint32_t stack_depth = 0;
  std::optional<uint32_t> owner;  // the user's capture (collector_core.h's Caller); none: the operator's
};

// Writes <spool_dir>/<id>.capture (atomically: temporary name, then rename).
absl::Status WriteCaptureManifest(const std::string& spool_dir, const CaptureManifest& manifest);
// The manifests in `spool_dir`; unreadable ones are skipped, each with one line in *skipped.
std::vector<CaptureManifest> ReadCaptureManifests(const std::string& spool_dir,
                                                  std::vector<std::string>* skipped);

// Replaces, in *processes, every process that has a spool file for `capture_id` by what the
// file holds, and adds the processes that have one but never reached this daemon. Problems
// (an unreadable file, a batch the ingest refuses, a torn tail) are one line each in
// *problems; the batches before them are kept.
// Whether `spool_dir` holds a spool file of `capture_id` (ApplySpools would read it).
bool HasSpoolFiles(const std::string& spool_dir, const std::string& capture_id);

void ApplySpools(const std::string& spool_dir, const std::string& capture_id,
                 const IngestLimits& limits, std::vector<ProcessCapture>* processes,
                 std::vector<std::string>* problems,
                 std::optional<uint32_t> owner = std::nullopt);

// Removes the spool files of captures that have no manifest (no daemon will read them) whose
// process is gone; returns a line for each, for the log.
std::vector<std::string> RemoveOrphanSpools(const std::string& spool_dir);

// Removes the capture's manifest and spool files once its trace is written.
void RemoveCaptureSpool(const std::string& spool_dir, const std::string& capture_id);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_SPOOL_REPLAY_H_
