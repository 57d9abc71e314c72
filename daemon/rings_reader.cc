#include "daemon/rings_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/rings_file.h"
#include "daemon/ingest.h"

namespace nrtprof::daemon {
namespace {

// A process with more recording threads than this is not believed.
constexpr uint32_t kMaxRings = 1u << 20;

bool ReadAt(int fd, void* out, size_t bytes, off_t at) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = pread(fd, static_cast<char*>(out) + done, bytes - done, at + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Plain copies of the header's fields (the file is read, not mapped).
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t ring_stride;
  uint32_t rings_made;
  uint32_t reserved;
  uint64_t retired_committed[kRingsKinds];
  uint64_t retired_dropped[kRingsKinds];
  uint64_t lost[kRingsKinds];
};
static_assert(sizeof(Header) == sizeof(RingsFileHeader), "rings file header");

}  // namespace

int OpenRingsFile(uint32_t pid, int32_t fd) {
  if (pid == 0 || fd <= 0) return -1;
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd);
  char target[256];
  const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
  if (n <= 0) return -1;
  target[n] = '\0';
  // What /proc says of a memory file: "/memfd:NAME (deleted)".
  if (std::string(target) != absl::StrCat("/memfd:", kRingsFileName, " (deleted)")) return -1;
  const int own = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (own < 0) return -1;
  struct stat st;
  if (fstat(own, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(own);
    return -1;
  }
  return own;
}

absl::StatusOr<LaneDropCounts> ReadRecordsMade(int rings_fd) {
  struct stat st;
  if (fstat(rings_fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rings file: ", strerror(errno)));
  }
  Header h;
  if (!ReadAt(rings_fd, &h, sizeof(h), 0)) {
    return absl::InvalidArgumentError("rings file: shorter than its header");
  }
  if (memcmp(h.magic, kRingsFileMagic, sizeof(h.magic)) != 0 || h.version != kRingsFileVersion) {
    return absl::InvalidArgumentError("rings file: not a rings file of this version");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (h.header_bytes < sizeof(Header) || h.header_bytes > size || h.rings_made > kMaxRings ||
      (h.rings_made != 0 && (h.ring_stride < kRingCountersOffset + sizeof(RingCounters) ||
                             h.ring_stride > (size - h.header_bytes) / h.rings_made))) {
    return absl::InvalidArgumentError("rings file: its header does not fit the file");
  }
  uint64_t made[kRingsKinds] = {};
  auto add = [](uint64_t* to, uint64_t v) { *to = v > UINT64_MAX - *to ? UINT64_MAX : *to + v; };
  for (int k = 0; k < kRingsKinds; ++k) {
    add(&made[k], h.retired_committed[k]);
    add(&made[k], h.retired_dropped[k]);
    add(&made[k], h.lost[k]);
  }
  for (uint32_t i = 0; i < h.rings_made; ++i) {
    RingCounters c;
    const off_t at = h.header_bytes + i * h.ring_stride + kRingCountersOffset;
    if (!ReadAt(rings_fd, &c, sizeof(c), at)) {
      return absl::InvalidArgumentError(absl::StrCat("rings file: ring ", i, " unreadable"));
    }
    for (int k = 0; k < kRingsKinds; ++k) {
      add(&made[k], c.committed[k]);
      add(&made[k], c.dropped[k]);
    }
  }
  LaneDropCounts lanes;
  lanes.runtime = made[kRingsKindCall];
  lanes.framework = made[kRingsKindRange];
  return lanes;
}

RingsFile::~RingsFile() { close(fd_); }

bool ProcessEnded(uint32_t pid) {
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  // A zombie has ended; only its parent has not looked yet.
  char stat[512];
  const int fd = open(absl::StrCat("/proc/", pid, "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  const ssize_t n = read(fd, stat, sizeof(stat) - 1);
  close(fd);
  if (n <= 0) return false;
  stat[n] = '\0';
  const char* paren = strrchr(stat, ')');  // the name may hold anything; the state follows it
  return paren != nullptr && (paren[1] == ' ') && (paren[2] == 'Z' || paren[2] == 'X');
}

void CountRecordsOfAnEndedProcess(ProcessCapture* capture) {
  if (capture->final || capture->rings == nullptr || capture->records_made_known) return;
  if (!ProcessEnded(capture->hello.pid())) return;
  absl::StatusOr<LaneDropCounts> made = ReadRecordsMade(capture->rings->fd());
  if (!made.ok()) return;
  capture->records_made = *made;
  capture->records_made_known = true;
}

}  // namespace nrtprof::daemon
