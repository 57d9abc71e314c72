#include "trace/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace nrtprof::daemon {

std::string CannotWrite(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  struct stat st;
  if (stat(folder.c_str(), &st) != 0) return strerror(errno);
  if (!S_ISDIR(st.st_mode)) return strerror(ENOTDIR);
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return strerror(EISDIR);
  if (access(folder.c_str(), W_OK) != 0) return strerror(errno);
  return "";
}
namespace {

// Large enough that a trace is written in a few hundred system calls, small enough that many
// captures written at once stay cheap.
constexpr size_t kBufferBytes = 1 << 20;
// What a file's buffer starts with: most of a capture's files (summaries, model files, small
// device traces) are far smaller than kBufferBytes, and a capture writes a dozen or more. A big
// trace's buffer grows to a block (kBlockBytes) in a few doublings and becomes its first one.
// (Reserving the whole megabyte per file was the largest cost per input of the collector fuzzer
// under ASan.)
constexpr size_t kInitialBufferBytes = 64 << 10;
// Every this many bytes written, the disk is asked to start writing them back
// (sync_file_range), so that Commit's fsync finds little left to wait for: a large trace's
// writeback overlaps with the encoding of the rest instead of following it.
constexpr uint64_t kWritebackBytes = 8 << 20;
// A file that outgrows kBufferBytes is written with O_DIRECT, from a block of this size aligned
// to kDirectAlign (a multiple of every logical block size Linux filesystems use): whole blocks
// go to the disk, and only the last part of the file, less than kDirectAlign, through the page
// cache at Commit.
constexpr size_t kDirectBytes = 1 << 20;
constexpr size_t kDirectAlign = 4096;
// Room past a block's kDirectBytes (and past kBufferBytes) for the piece written in place
// (BeginWrite) that crosses its end, so that the piece need not be made apart and copied:
// room for any entry of a trace, but a very long name's.
constexpr size_t kOverflowBytes = 64 << 10;
constexpr size_t kBlockBytes = kDirectBytes + kOverflowBytes;
static_assert(kBufferBytes <= kDirectBytes, "a full buffer_ fits in the first block");
// The aligned blocks of one such file: one being filled, the others written by its writer
// thread meanwhile. Two in flight keep the disk busy while the caller formats; more would only
// hold memory (the caller outruns the disk or it does not).
constexpr size_t kDirectBlocks = 3;

// Distinguishes the temporary files of several writers of the same name in one process.
std::atomic<uint64_t> temp_counter{0};

absl::Status SystemError(int error_number, absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(error_number,
                             absl::StrCat(what, " ", path, ": ", strerror(error_number)));
}

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

// std::mutex rather than absl::Mutex: ThreadSanitizer sees the former (Debian's abseil is not
// built for it, .bazelrc), and this is the one place the trace library hands work to a thread.
struct AtomicFile::Writer {
  struct Block {
    std::unique_ptr<char, FreeAligned> data;
    size_t size = 0;
  };
  std::mutex mu;
  std::condition_variable full_or_stop;  // the writer thread waits on it
  std::condition_variable emptied;       // the caller waits on it for an empty block
  // Under mu:
  std::deque<Block> full;  // in file order
  std::vector<std::unique_ptr<char, FreeAligned>> empty;
  size_t blocks = 1;  // allocated, the one being filled included
  bool stop = false;
  // The first write that failed; the blocks after it are not written. Cancelled on abandon.
  absl::Status error;
  std::thread thread;
};

AtomicFile::AtomicFile() = default;

absl::Status AtomicFile::Open(const std::string& path) {
  if (fd_ >= 0 || !temp_path_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("AtomicFile for ", path, ": already open for ", path_));
  }
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat("not a file name: '", path, "'"));
  }
  std::string temp_path = absl::StrCat(path, ".tmp.", getpid(), ".", temp_counter.fetch_add(1));
  int fd = open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return SystemError(errno, "cannot create", temp_path);
  path_ = path;
  temp_path_ = std::move(temp_path);
  fd_ = fd;
  written_ = 0;
  writeback_started_ = 0;
  direct_.reset();
  direct_used_ = 0;
  direct_tried_ = false;
  lent_ = Lent::kNone;
  buffer_used_ = 0;
  GrowBuffer(kInitialBufferBytes);
  error_ = absl::OkStatus();
  return absl::OkStatus();
}

void AtomicFile::FreeAligned::operator()(char* p) const { free(p); }

void AtomicFile::GrowBuffer(size_t n) {
  const size_t need = buffer_used_ + n;
  if (need <= buffer_capacity_) return;
  // Doubling, and past half of kBufferBytes the size of an aligned block: the buffer of a file
  // that outgrows it becomes its first block (StartDirect), its bytes where they are.
  size_t capacity = std::max({need, kInitialBufferBytes, 2 * buffer_capacity_});
  if (capacity > kBufferBytes / 2) capacity = std::max(need, kBlockBytes);
  void* p = nullptr;
  if (posix_memalign(&p, kDirectAlign, capacity) != 0) throw std::bad_alloc();
  if (buffer_used_ > 0) memcpy(p, buffer_.get(), buffer_used_);
  buffer_.reset(static_cast<char*>(p));
  buffer_capacity_ = capacity;
}

absl::Status AtomicFile::Keep(absl::Status s) {
  if (!s.ok() && error_.ok()) error_ = s;
  return s;
}

absl::Status AtomicFile::Append(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError("AtomicFile::Append: no file open");
  if (!error_.ok()) return error_;
  if (direct_ == nullptr) {
    if (buffer_used_ + bytes.size() > kBufferBytes) {
      // The file outgrows one buffer: from here on it goes straight to the disk, if it can.
      if (!direct_tried_ && StartDirect()) return Append(bytes);
      absl::Status s = Keep(Flush());
      if (!s.ok()) return s;
      if (bytes.size() >= kBufferBytes) return Keep(WriteAll(bytes.data(), bytes.size()));
    }
    GrowBuffer(bytes.size());
    memcpy(buffer_.get() + buffer_used_, bytes.data(), bytes.size());
    buffer_used_ += bytes.size();
    return absl::OkStatus();
  }
  // Copied, even from an aligned buffer: the caller reuses its buffer at once,
  // and the block is written while the caller fills the next one. (A copy into a block used
  // again and again costs far less than the wait for the disk it takes off the caller.)
  while (!bytes.empty()) {
    const size_t n = std::min(bytes.size(), kDirectBytes - direct_used_);
    memcpy(direct_.get() + direct_used_, bytes.data(), n);
    direct_used_ += n;
    bytes.remove_prefix(n);
    if (direct_used_ == kDirectBytes) {
      absl::Status s = Submit();
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

AtomicFile::Space AtomicFile::BeginWrite(size_t n) {
  if (fd_ >= 0 && error_.ok() && n <= kOverflowBytes) {
    if (direct_ != nullptr) {
      // Less than kDirectBytes are filled: a full block was handed on at once.
      char* const block = direct_.get();
      lent_ = Lent::kDirect;
      return {block + direct_used_, block + kDirectBytes, block + kBlockBytes};
    }
    // At most kBufferBytes are held (EndWrite hands on a full buffer): n more fit.
    GrowBuffer(n);
    char* const buffer = buffer_.get();
    lent_ = Lent::kBuffer;
    return {buffer + buffer_used_, buffer + std::min(buffer_capacity_, kBufferBytes),
            buffer + buffer_capacity_};
  }
  const size_t size = std::max(n, kOverflowBytes);
  if (apart_size_ < size) {
    apart_.reset(new char[size]);
    apart_size_ = size;
  }
  lent_ = Lent::kApart;
  return {apart_.get(), apart_.get() + size, apart_.get() + size};
}

absl::Status AtomicFile::EndWrite(const char* end) {
  const Lent lent = lent_;
  lent_ = Lent::kNone;
  switch (lent) {
    case Lent::kNone:
      break;
    case Lent::kApart: {
      absl::Status s =
          Append(absl::string_view(apart_.get(), static_cast<size_t>(end - apart_.get())));
      if (apart_size_ > kOverflowBytes) {  // a piece of megabytes: not kept for the next one
        apart_.reset();
        apart_size_ = 0;
      }
      return s;
    }
    case Lent::kDirect:
      direct_used_ = static_cast<size_t>(end - direct_.get());
      return direct_used_ >= kDirectBytes ? Submit() : absl::OkStatus();
    case Lent::kBuffer:
      buffer_used_ = static_cast<size_t>(end - buffer_.get());
      if (buffer_used_ < kBufferBytes) return absl::OkStatus();
      // The file outgrows one buffer: from here on it goes straight to the disk, if it can.
      if (!direct_tried_ && StartDirect()) {
        return direct_used_ >= kDirectBytes ? Submit() : absl::OkStatus();
      }
      return Keep(Flush());
  }
  return absl::FailedPreconditionError("AtomicFile::EndWrite without BeginWrite");
}

absl::Status AtomicFile::Submit() {
  if (writer_ == nullptr) return Keep(WriteDirect(/*all=*/true));
  Writer& w = *writer_;
  // The whole 4 KiB blocks go; the rest, the start of a piece written across the block's end,
  // moves to the next block. (The writer thread only reads a block, so the rest can be taken
  // from it after it is handed over, even when it is the block that comes back.)
  const size_t whole = direct_used_ - direct_used_ % kDirectAlign;
  const char* const rest = direct_.get() + whole;
  const size_t rest_size = direct_used_ - whole;
  std::unique_lock<std::mutex> lock(w.mu);
  w.full.push_back(Writer::Block{std::move(direct_), whole});
  direct_used_ = 0;
  w.full_or_stop.notify_one();
  if (w.empty.empty() && w.blocks < kDirectBlocks) {
    void* block = nullptr;
    if (posix_memalign(&block, kDirectAlign, kBlockBytes) == 0) {
      direct_.reset(static_cast<char*>(block));
      ++w.blocks;
    }
  }
  if (direct_ == nullptr) {
    // The block just handed over comes back at the latest.
    w.emptied.wait(lock, [&w] { return !w.empty.empty(); });
    direct_ = std::move(w.empty.back());
    w.empty.pop_back();
  }
  memmove(direct_.get(), rest, rest_size);
  direct_used_ = rest_size;
  return Keep(w.error);
}

void AtomicFile::WriterLoop() {
  Writer& w = *writer_;
  for (;;) {
    Writer::Block block;
    bool failed;
    {
      std::unique_lock<std::mutex> lock(w.mu);
      w.full_or_stop.wait(lock, [&w] { return !w.full.empty() || w.stop; });
      if (w.full.empty()) return;  // stopped, and everything written
      block = std::move(w.full.front());
      w.full.pop_front();
      failed = !w.error.ok();
    }
    absl::Status s = failed ? absl::OkStatus() : WriteBlocks(block.data.get(), block.size);
    std::lock_guard<std::mutex> lock(w.mu);
    if (!s.ok() && w.error.ok()) w.error = s;
    w.empty.push_back(std::move(block.data));
    w.emptied.notify_one();
  }
}

void AtomicFile::StopWriter(bool abandon) {
  if (writer_ == nullptr) return;
  Writer& w = *writer_;
  absl::Status error;
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.stop = true;
    if (abandon && w.error.ok()) w.error = absl::CancelledError("abandoned");
    w.full_or_stop.notify_one();
  }
  w.thread.join();
  error = w.error;  // the thread has ended
  writer_.reset();
  if (!abandon) Keep(error).IgnoreError();  // in error_
}

bool AtomicFile::StartDirect() {
  direct_tried_ = true;
  if (!direct_allowed_) return false;
  // Only from a block boundary of the file (nothing written yet: buffer_ holds it all).
  if (written_ % kDirectAlign != 0 || buffer_used_ > kBlockBytes) return false;
  std::unique_ptr<char, FreeAligned> owned;
  if (buffer_capacity_ != kBlockBytes) {
    void* block = nullptr;
    if (posix_memalign(&block, kDirectAlign, kBlockBytes) != 0) return false;
    owned.reset(static_cast<char*>(block));
  }
  const int flags = fcntl(fd_, F_GETFL);
  // Filesystems without direct I/O (tmpfs before Linux 6.6, some FUSE ones) refuse it here.
  if (flags < 0 || fcntl(fd_, F_SETFL, flags | O_DIRECT) != 0) return false;
  if (owned != nullptr) {
    memcpy(owned.get(), buffer_.get(), buffer_used_);
    direct_ = std::move(owned);
  } else {
    direct_ = std::move(buffer_);  // aligned, and a block's size (GrowBuffer)
  }
  direct_used_ = buffer_used_;
  buffer_.reset();
  buffer_used_ = 0;
  buffer_capacity_ = 0;
  auto writer = std::make_unique<Writer>();
  Writer* w = writer.get();
  writer_ = std::move(writer);
  try {
    w->thread = std::thread([this] { WriterLoop(); });
  } catch (const std::system_error&) {
    writer_.reset();  // no thread to be had: Submit writes each block itself
  }
  return true;
}

absl::Status AtomicFile::WriteDirect(bool all) {
  const size_t whole = all && direct_used_ % kDirectAlign == 0
                           ? direct_used_
                           : direct_used_ - direct_used_ % kDirectAlign;
  absl::Status s = WriteBlocks(direct_.get(), whole);
  if (!s.ok()) return s;
  memmove(direct_.get(), direct_.get() + whole, direct_used_ - whole);
  direct_used_ -= whole;
  return absl::OkStatus();
}

absl::Status AtomicFile::WriteBlocks(const char* p, size_t left) {
  while (left > 0) {
    ssize_t n = write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL) {
      // The device wants a larger alignment after all: the rest through the page cache.
      const int flags = fcntl(fd_, F_GETFL);
      if (flags >= 0 && fcntl(fd_, F_SETFL, flags & ~O_DIRECT) == 0) return WriteAll(p, left);
    }
    if (n < 0) return SystemError(errno, "cannot write", temp_path_);
    p += n;
    left -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::WriteAll(const char* p, size_t left) {
  while (left > 0) {
    ssize_t n = write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError(errno, "cannot write", temp_path_);
    }
    p += n;
    left -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
  if (written_ - writeback_started_ >= kWritebackBytes) {
    // A hint: where it fails or is not supported, fsync still does all the work.
    sync_file_range(fd_, static_cast<off_t>(writeback_started_),
                    static_cast<off_t>(written_ - writeback_started_), SYNC_FILE_RANGE_WRITE);
    writeback_started_ = written_;
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Flush() {
  if (direct_ != nullptr) {
    // The whole blocks straight to the disk; the rest, the file's end, through the page cache.
    absl::Status s = WriteDirect(/*all=*/false);
    if (!s.ok()) return s;
    if (direct_used_ > 0) {
      const int flags = fcntl(fd_, F_GETFL);
      if (flags >= 0) fcntl(fd_, F_SETFL, flags & ~O_DIRECT);
      s = WriteAll(direct_.get(), direct_used_);
      direct_used_ = 0;
      if (!s.ok()) return s;
    }
    direct_.reset();
    return absl::OkStatus();
  }
  absl::Status s = WriteAll(buffer_.get(), buffer_used_);
  buffer_used_ = 0;
  return s;
}

absl::Status AtomicFile::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError("AtomicFile::Commit: no file open");
  StopWriter(/*abandon=*/false);
  absl::Status s = error_;
  if (s.ok()) s = Flush();
  if (s.ok() && fsync(fd_) != 0) s = SystemError(errno, "cannot sync", temp_path_);
  if (close(fd_) != 0 && s.ok()) s = SystemError(errno, "cannot close", temp_path_);
  fd_ = -1;
  if (s.ok() && rename(temp_path_.c_str(), path_.c_str()) != 0) {
    s = SystemError(errno, absl::StrCat("cannot rename ", temp_path_, " to"), path_);
  }
  if (!s.ok()) {
    unlink(temp_path_.c_str());
    temp_path_.clear();
    error_ = s;
    return s;
  }
  temp_path_.clear();
  // The rename is what makes the file visible; syncing the folder makes it survive a crash.
  // The file is already complete either way, so a folder that cannot be synced is not an error.
  int dir = open(DirectoryOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return absl::OkStatus();
}

AtomicFile::~AtomicFile() {
  StopWriter(/*abandon=*/true);
  if (fd_ >= 0) close(fd_);
  if (!temp_path_.empty()) unlink(temp_path_.c_str());
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  AtomicFile file;
  absl::Status s = file.Open(path);
  if (!s.ok()) return s;
  s = file.Append(contents);
  if (!s.ok()) return s;
  return file.Commit();
}

}  // namespace nrtprof::daemon
