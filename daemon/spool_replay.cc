#include "daemon/spool_replay.h"

#include <dirent.h>
#include <sys/stat.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/spool_file.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {
namespace {

constexpr char kManifestSuffix[] = ".capture";

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool SameProcess(const nrtprof::Hello& a, const nrtprof::Hello& b) {
  return a.pid() == b.pid() && a.process_start_ns() == b.process_start_ns() &&
         a.boot_id() == b.boot_id();
}

}  // namespace

absl::Status WriteCaptureManifest(const std::string& spool_dir, const CaptureManifest& m) {
  if (spool_dir.empty()) return absl::OkStatus();
  const std::string path = absl::StrCat(spool_dir, "/", m.capture_id, kManifestSuffix);
  const std::string tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  // One field a line; the output folder cannot hold a newline (StartCapture refuses control
  // bytes).
  // A fourth line, the owner's uid, for a user's capture.
  const bool ok = fprintf(f, "%s\n%s\n%u\n%s", m.capture_id.c_str(), m.output_dir.c_str(),
                          m.stack_depth,
                          m.owner ? absl::StrCat(*m.owner, "\n").c_str() : "") > 0;
  if (fclose(f) != 0 || !ok || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

std::vector<CaptureManifest> ReadCaptureManifests(const std::string& spool_dir,
                                                  std::vector<std::string>* skipped) {
  std::vector<CaptureManifest> manifests;
  if (spool_dir.empty()) return manifests;
  for (const std::string& name : FilesIn(spool_dir)) {
    if (!EndsWith(name, kManifestSuffix)) continue;
    const std::string path = spool_dir + "/" + name;
    std::string text;
    if (FILE* f = fopen(path.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof(buf), f)) > 0 && text.size() < 65536) text.append(buf, n);
      fclose(f);
    }
    const std::vector<std::string> lines = absl::StrSplit(text, '\n');
    CaptureManifest m;
    if (lines.size() < 3 || !absl::SimpleAtoi(lines[2], &m.stack_depth) ||
        absl::StrCat(lines[0], kManifestSuffix) != name || lines[1].empty() || lines[1][0] != '/') {
      skipped->push_back(absl::StrCat("capture manifest ", path, " is not one; ignored"));
      continue;
    }
    m.capture_id = lines[0];
    m.output_dir = lines[1];
    if (uint32_t owner; lines.size() > 3 && absl::SimpleAtoi(lines[3], &owner)) m.owner = owner;
    manifests.push_back(std::move(m));
  }
  return manifests;
}

bool HasSpoolFiles(const std::string& spool_dir, const std::string& capture_id) {
  if (spool_dir.empty()) return false;
  for (const std::string& name : FilesIn(spool_dir)) {
    if (CaptureOfSpoolFile(name) == capture_id) return true;
  }
  return false;
}

void ApplySpools(const std::string& spool_dir, const std::string& capture_id,
                 const IngestLimits& limits, std::vector<ProcessCapture>* processes,
                 std::vector<std::string>* problems, std::optional<uint32_t> owner) {
  if (spool_dir.empty()) return;
  for (const std::string& name : FilesIn(spool_dir)) {
    if (CaptureOfSpoolFile(name) != capture_id) continue;
    const std::string path = spool_dir + "/" + name;
    // A user's capture takes only that user's spool files: another member of a shared service's
    // group could otherwise stand a file of its own in for one of the user's processes.
    struct stat st;
    if (owner && (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != *owner)) {
      problems->push_back(
          absl::StrCat("spool ", path, " is not the capture's user's (uid ", *owner, "); ignored"));
      continue;
    }
    SpoolContents contents;
    std::string error;
    if (!ReadSpool(path, &contents, &error)) {
      problems->push_back(absl::StrCat("spool ", error));
      continue;
    }
    nrtprof::ShimMessage first;
    if (contents.records.empty() || !first.ParseFromString(contents.records[0]) ||
        !first.has_hello() || !ProcessIngest::ValidateHello(first.hello()).ok()) {
      problems->push_back(absl::StrCat("spool ", path, " does not start with a valid Hello"));
      continue;
    }
    ProcessIngest ingest(first.hello(), limits);
    ingest.BeginCapture();
    uint64_t sequence = 0;
    for (size_t i = 1; i < contents.records.size(); ++i) {
      nrtprof::ShimMessage message;
      if (!message.ParseFromString(contents.records[i]) || !message.has_batch()) {
        problems->push_back(absl::StrCat("spool ", path, ": record ", i, " is not a batch; the rest is ignored"));
        break;
      }
      // Sequences are per stream on the wire; the spool's order is the process's.
      message.mutable_batch()->set_sequence(++sequence);
      absl::StatusOr<uint64_t> ack = ingest.OnBatch(message.batch());
      if (!ack.ok()) {
        problems->push_back(absl::StrCat("spool ", path, ": ", ack.status().message(),
                                         "; the rest is ignored"));
        break;
      }
    }
    if (contents.torn_tail) {
      problems->push_back(absl::StrCat("spool ", path, " ends in a cut record (its writer died writing it)"));
    }
    // The process's rings file comes along: if it died, what it made and never spooled is
    // counted from it (process_died).
    for (const ProcessCapture& p : *processes) {
      if (p.rings != nullptr && SameProcess(p.hello, first.hello())) ingest.SetRingsFile(p.rings);
    }
    processes->erase(std::remove_if(processes->begin(), processes->end(),
                                    [&](const ProcessCapture& p) {
                                      return SameProcess(p.hello, first.hello());
                                    }),
                     processes->end());
    processes->push_back(ingest.TakeCapture());
  }
}

std::vector<std::string> RemoveOrphanSpools(const std::string& spool_dir) {
  std::vector<std::string> lines;
  if (spool_dir.empty()) return lines;
  const std::vector<std::string> names = FilesIn(spool_dir);
  for (const std::string& name : names) {
    const std::string capture = CaptureOfSpoolFile(name);
    if (capture.empty()) continue;
    if (std::find(names.begin(), names.end(), capture + kManifestSuffix) != names.end()) continue;
    // <capture>.<pid>.<start>.spool: a process still alive may still be writing it.
    const std::vector<std::string> parts = absl::StrSplit(name, '.');
    int pid = 0;
    if (parts.size() < 4 || !absl::SimpleAtoi(parts[parts.size() - 3], &pid) || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    if (unlink((spool_dir + "/" + name).c_str()) == 0) {
      lines.push_back(absl::StrCat("removed spool ", name, ": its capture is not in progress and its process is gone"));
    }
  }
  return lines;
}

void RemoveCaptureSpool(const std::string& spool_dir, const std::string& capture_id) {
  if (spool_dir.empty()) return;
  for (const std::string& name : FilesIn(spool_dir)) {
    if (CaptureOfSpoolFile(name) == capture_id || name == capture_id + kManifestSuffix) {
      unlink((spool_dir + "/" + name).c_str());
    }
  }
}

}  // namespace nrtprof::daemon
