// A file that appears whole or not at all: written under a temporary name in the same folder
// (NAME.tmp.PID.N), flushed, then renamed over NAME on Commit(). A writer destroyed before
// Commit() removes its temporary file, so readers only ever see the old complete file or the
// new complete one. Writes are buffered in large blocks, and their writeback to the disk is
// started as they go, so that the fsync of Commit() waits for little. A file that outgrows one
// block (a trace, a device trace) is written from then on straight to the disk (O_DIRECT)
// where the filesystem allows it: copying it into the page cache cost the daemon more than
// formatting it did (a fresh page of the cache is a fault in the host of a virtual machine),
// and a capture of a gigabyte that nobody reads yet would push a training program's own files
// out of the cache. Those writes wait for the disk, so they are made by a thread of the file's
// own: the caller fills the next block meanwhile, at most two full blocks wait for the disk
// (bounded memory), and Commit() waits for them and reports the first error of any write. A
// writer that puts its text together piece by piece can do so straight in those blocks
// (BeginWrite), saving Append's copy.
//
// Not thread-safe: one writer per file.
#ifndef NRTPROF_TRACE_ATOMIC_FILE_H_
#define NRTPROF_TRACE_ATOMIC_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
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

  // Writing in place, for a caller that puts its text together piece by piece (json_out.h):
  // the pieces land where they go to the disk from, with no copy as Append's. BeginWrite(n)
  // lends the free space at the file's end, at least n bytes from `begin` to `end`; the caller
  // writes the file's next bytes there and hands them over with EndWrite(the end of what it
  // wrote), before anything else is done with the file. At `full` the file's current block is
  // full: what is written beyond it moves to the next block at EndWrite, so a caller ends its
  // write at the next piece's end once past it. A piece larger than the room kept past a block
  // (64 KiB) is written apart and copied, as Append would. Errors as Append's: EndWrite returns
  // the first one, and the bytes of a failed file go nowhere.
  struct Space {
    char* begin;
    char* full;
    char* end;
  };
  Space BeginWrite(size_t n);
  absl::Status EndWrite(const char* end);

  // Whether a file that outgrows one block may be written with O_DIRECT (by default, where the
  // filesystem allows it); false writes it all through the page cache, as a filesystem that
  // refuses O_DIRECT has it. Before the first Append.
  void set_direct(bool allowed) { direct_allowed_ = allowed; }
  // fsync, close and rename over the final path.
  absl::Status Commit();
  ~AtomicFile();  // without Commit(): the temporary file is removed

  AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

 private:
  // The thread and the blocks of the O_DIRECT writes (atomic_file.cc).
  struct Writer;

  absl::Status Flush();
  // Hands the full aligned block to the writer thread (or writes it, if there is none) and
  // takes an empty one, waiting for one if kDirectBlocks are in use.
  absl::Status Submit();
  // Waits for the writer thread to write every block handed to it (none if `abandon`), ends
  // it, and keeps its first error in error_.
  void StopWriter(bool abandon);
  void WriterLoop();
  // Keeps a failed status in error_ (the first one), and returns it.
  absl::Status Keep(absl::Status s);
  // Switches to O_DIRECT writes from an aligned block, moving buffer_ into it; false (and
  // nothing changed) where the filesystem does not take them.
  bool StartDirect();
  // Room in buffer_ for n more bytes.
  void GrowBuffer(size_t n);
  // Writes the whole blocks of the aligned block (all of it when `all` and the rest is a
  // whole block); the rest stays at its start.
  absl::Status WriteDirect(bool all);
  // write(2) of [p, p + n) with O_DIRECT (p aligned, n whole blocks), or through the page cache
  // if the device refuses it. On the writer thread while there is one (which then alone
  // writes to fd_ and counts written_); neither one sets error_.
  absl::Status WriteBlocks(const char* p, size_t n);
  // write(2) of all of [p, p + n), counting it in written_.
  absl::Status WriteAll(const char* p, size_t n);

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  struct FreeAligned {
    void operator()(char* p) const;
  };
  // The file's bytes not yet written, while it goes through the page cache (malloc'd).
  std::unique_ptr<char, FreeAligned> buffer_;
  size_t buffer_used_ = 0;
  size_t buffer_capacity_ = 0;
  // Once the file writes straight to the disk: an aligned block (kDirectBytes, and room for a
  // piece written in place across its end) and how much of it is filled (buffer_ is then
  // unused).
  std::unique_ptr<char, FreeAligned> direct_;
  size_t direct_used_ = 0;
  bool direct_tried_ = false;
  bool direct_allowed_ = true;
  // What BeginWrite lent, until EndWrite: the end of buffer_ or of direct_, or apart_ (a piece
  // too large for them, or the bytes of a file that cannot take them).
  enum class Lent { kNone, kBuffer, kDirect, kApart };
  Lent lent_ = Lent::kNone;
  std::unique_ptr<char[]> apart_;
  size_t apart_size_ = 0;
  uint64_t written_ = 0;            // bytes written to fd_
  uint64_t writeback_started_ = 0;  // bytes whose writeback was asked for
  absl::Status error_;              // the first write error, reported by Commit()
  std::unique_ptr<Writer> writer_;  // while the file is written with O_DIRECT
};

// Open, Append(contents), Commit.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_ATOMIC_FILE_H_
