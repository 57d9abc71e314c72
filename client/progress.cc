#include "client/progress.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"

ABSL_FLAG(bool, quiet, false,
          "print only errors and warnings: no table, no list of files, no progress");

namespace nrtprof::cli {
namespace {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

bool Quiet() { return absl::GetFlag(FLAGS_quiet); }

bool ProgressWanted() {
  if (Quiet() || isatty(STDERR_FILENO) != 1) return false;
  const char* term = getenv("TERM");
  return term == nullptr || strcmp(term, "dumb") != 0;
}

Progress::Progress(std::string what) : what_(std::move(what)), shown_(ProgressWanted()) {
  if (!shown_) return;
  start_ns_ = NowNs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    Draw();
  }
  thread_ = std::thread([this] { Loop(); });
}

void Progress::Done() {
  if (!shown_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
  }
  done_cv_.notify_all();
  thread_.join();
  // Erase: back to the start of the line, blanks over what was drawn, back again.
  fprintf(stderr, "\r%*s\r", static_cast<int>(drawn_), "");
  fflush(stderr);
}

void Progress::Set(std::string detail) {
  std::lock_guard<std::mutex> lock(mu_);
  detail_ = std::move(detail);
}

void Progress::SetBytes(uint64_t bytes) {
  Set(absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20)));
}

void Progress::Draw() {
  const int64_t seconds = (NowNs() - start_ns_) / 1000000000;
  std::string line = absl::StrFormat("nrtprof: %s... %s%s%d s", what_, detail_,
                                     detail_.empty() ? "" : ", ", seconds);
  const size_t width = line.size();
  if (width < drawn_) line.append(drawn_ - width, ' ');  // over a longer line drawn before
  fprintf(stderr, "\r%s", line.c_str());
  fflush(stderr);
  drawn_ = std::max(drawn_, width);
}

void Progress::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!done_cv_.wait_for(lock, std::chrono::milliseconds(250), [this] { return done_; })) {
    Draw();
  }
}

}  // namespace nrtprof::cli
