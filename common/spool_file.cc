#include "common/spool_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/address.h"

namespace nrtprof {

namespace {

// The process's file size limit (ulimit -f) in bytes; UINT64_MAX if none.
uint64_t FileSizeLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return static_cast<uint64_t>(limit.rlim_cur);
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string DefaultSpoolDir() { return DefaultRuntimeDir() + "/spool"; }

std::string SpoolFileName(std::string_view capture_id, uint32_t pid, uint64_t process_start_ns) {
  return std::string(capture_id) + "." + std::to_string(pid) + "." +
         std::to_string(process_start_ns) + ".spool";
}

std::string CaptureOfSpoolFile(std::string_view name) {
  constexpr std::string_view kSuffix = ".spool";
  if (name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix) {
    return "";
  }
  name.remove_suffix(kSuffix.size());
  // <capture>.<pid>.<start>: the last two dot-separated parts are numbers.
  for (int part = 0; part < 2; ++part) {
    const size_t dot = name.rfind('.');
    if (dot == std::string_view::npos || dot + 1 == name.size()) return "";
    for (char c : name.substr(dot + 1)) {
      if (c < '0' || c > '9') return "";
    }
    name = name.substr(0, dot);
  }
  return std::string(name);
}

SpoolWriter::~SpoolWriter() {
  if (fd_ >= 0) close(fd_);
}

bool SpoolWriter::Open(const std::string& dir, const std::string& name, uint64_t max_bytes,
                       std::string* error) {
  TrustPolicy trust;
  trust.self = getuid();
  return Open(dir, name, max_bytes, trust, error);
}

bool SpoolWriter::Open(const std::string& dir, const std::string& name, uint64_t max_bytes,
                       const TrustPolicy& trust, std::string* error) {
  // Past the process's file size limit (ulimit -f) a write gets the process killed (SIGXFSZ):
  // the limit bounds the spool (what does not fit is spool_full), and a limit with no room
  // for one is refused before anything is written.
  if (FileSizeLimit() < 2 * kReserveBytes) {
    *error = "the process's file size limit (ulimit -f) leaves no room for a spool file";
    return false;
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = "cannot create spool folder " + dir + ": " + strerror(errno);
    return false;
  }
  // Checked after mkdir, whoever made it: a folder someone else made first, or can write, would
  // hand them the process's events and model files.
  if (const absl::Status s = CheckFolder(dir, "spool folder", trust); !s.ok()) {
    *error = std::string(s.message());
    return false;
  }
  path_ = dir + "/" + name;
  // Only the process's user reads its spool (the daemon on this machine runs as that user, or
  // gets the batches on its stream); O_EXCL also refuses a symlink planted at the name.
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) {
    *error = "cannot create spool file " + path_ + ": " + strerror(errno);
    return false;
  }
  max_bytes_ = std::min(max_bytes, FileSizeLimit());
  if (!WriteAll(fd_, kSpoolMagic, kSpoolMagicBytes)) {
    *error = "cannot write spool file " + path_ + ": " + strerror(errno);
    close(fd_);
    fd_ = -1;
    unlink(path_.c_str());
    return false;
  }
  bytes_ = kSpoolMagicBytes;
  return true;
}

bool SpoolWriter::Append(std::string_view record, bool reserve) {
  if (fd_ < 0 || record.size() > kMaxSpoolRecordBytes) return false;
  const uint64_t size = 4 + record.size();
  const uint64_t bound = reserve || max_bytes_ < 2 * kReserveBytes ? max_bytes_ : max_bytes_ - kReserveBytes;
  if (bytes_ + size > bound) return false;
  const uint32_t n = static_cast<uint32_t>(record.size());
  const unsigned char header[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                                   static_cast<unsigned char>(n >> 16),
                                   static_cast<unsigned char>(n >> 24)};
  if (!WriteAll(fd_, reinterpret_cast<const char*>(header), 4) ||
      !WriteAll(fd_, record.data(), record.size())) {
    // A full disk: cut the partial record off so the file stays readable to its end.
    if (ftruncate(fd_, static_cast<off_t>(bytes_)) == 0) lseek(fd_, static_cast<off_t>(bytes_), SEEK_SET);
    return false;
  }
  bytes_ += size;
  return true;
}

SpoolCursor::~SpoolCursor() {
  if (fd_ >= 0) close(fd_);
}

namespace {

// Reads exactly `size` bytes at `offset`; false at the end of the file (or a short read there),
// with *failed set if the read itself failed.
bool ReadAt(int fd, uint64_t offset, char* out, size_t size, bool* failed) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) *failed = true;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool SpoolCursor::Open(const std::string& path, uint64_t offset, std::string* error) {
  if (fd_ >= 0) close(fd_);
  fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    *error = "cannot open " + path + ": " + strerror(errno);
    return false;
  }
  offset_ = offset;
  if (offset_ == 0) {
    char magic[kSpoolMagicBytes];
    bool failed = false;
    if (!ReadAt(fd_, 0, magic, sizeof(magic), &failed) ||
        std::string_view(magic, sizeof(magic)) != std::string_view(kSpoolMagic, kSpoolMagicBytes)) {
      *error = path + " is not a spool file";
      return false;
    }
    offset_ = kSpoolMagicBytes;
  }
  return true;
}

SpoolCursor::Next SpoolCursor::Read(std::string* record, std::string* error) {
  if (fd_ < 0) {
    *error = "no spool file open";
    return Next::kError;
  }
  unsigned char header[4];
  bool failed = false;
  if (!ReadAt(fd_, offset_, reinterpret_cast<char*>(header), sizeof(header), &failed)) {
    if (failed) *error = std::string("cannot read the spool file: ") + strerror(errno);
    return failed ? Next::kError : Next::kEnd;
  }
  const uint32_t size = header[0] | (header[1] << 8) | (header[2] << 16) |
                        (static_cast<uint32_t>(header[3]) << 24);
  if (size > kMaxSpoolRecordBytes) {
    *error = "a spool record of " + std::to_string(size) + " bytes, over the limit";
    return Next::kError;
  }
  record->resize(size);
  if (!ReadAt(fd_, offset_ + 4, record->data(), size, &failed)) {
    if (failed) *error = std::string("cannot read the spool file: ") + strerror(errno);
    return failed ? Next::kError : Next::kEnd;
  }
  offset_ += 4 + size;
  return Next::kRecord;
}

bool ReadSpool(const std::string& path, SpoolContents* contents, std::string* error) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = "cannot open " + path + ": " + strerror(errno);
    return false;
  }
  std::string data;
  char buf[1 << 16];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) data.append(buf, static_cast<size_t>(n));
  close(fd);
  if (n < 0) {
    *error = "cannot read " + path + ": " + strerror(errno);
    return false;
  }
  if (data.size() < kSpoolMagicBytes || data.compare(0, kSpoolMagicBytes, kSpoolMagic) != 0) {
    *error = path + " is not a spool file";
    return false;
  }
  contents->records.clear();
  contents->torn_tail = false;
  size_t at = kSpoolMagicBytes;
  while (at < data.size()) {
    if (data.size() - at < 4) {
      contents->torn_tail = true;
      break;
    }
    const auto* p = reinterpret_cast<const unsigned char*>(data.data() + at);
    const uint32_t size = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
    if (size > kMaxSpoolRecordBytes) {
      *error = path + ": a record of " + std::to_string(size) + " bytes, over the limit";
      return false;
    }
    if (data.size() - at - 4 < size) {
      contents->torn_tail = true;
      break;
    }
    contents->records.emplace_back(data, at + 4, size);
    at += 4 + size;
  }
  return true;
}

}  // namespace nrtprof
