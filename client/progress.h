// What long work is doing while it does it, on a terminal:
//
//   nrtprof: writing the capture... 3 s
//   nrtprof: fetching the capture... 12.0 MiB, 2 s
//
// one line on stderr, redrawn in place every 250 ms by a thread of its own and erased when the
// work is done, so that what follows starts on a clean line. Only when stderr is a terminal
// (not "dumb") and --quiet is not given: a pipe or a file never gets a carriage return or an
// escape code. nrtprof writes no colours.
//
// Thread-safe: Set() from any thread while the line is shown.
#ifndef NRTPROF_CLIENT_PROGRESS_H_
#define NRTPROF_CLIENT_PROGRESS_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace nrtprof::cli {

// --quiet: run and capture print only errors and warnings (no table, no file list, no progress).
bool Quiet();

// True if progress lines may be drawn: stderr is a terminal other than "dumb", and not --quiet.
bool ProgressWanted();

class Progress {
 public:
  // Starts showing "nrtprof: WHAT... ELAPSED" at once, if ProgressWanted().
  explicit Progress(std::string what);
  ~Progress() { Done(); }
  // Stops and erases the line (once; the destructor does it otherwise).
  void Done();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // A detail shown before the time ("12.0 MiB").
  void Set(std::string detail);
  // The bytes so far, as the detail.
  void SetBytes(uint64_t bytes);

 private:
  void Draw();  // with mu_ held
  void Loop();

  const std::string what_;
  const bool shown_;
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string detail_;
  int64_t start_ns_ = 0;
  size_t drawn_ = 0;  // columns of the line last drawn
  std::thread thread_;
};

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_PROGRESS_H_
