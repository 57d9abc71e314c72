// Bounds how many lines of one kind the daemon writes to its log, so that a client that
// provokes one line per call (the TCP gate's refusals, tcp_gate.h) cannot flood it. A token
// bucket: it holds `burst` lines and gains one every `refill_ns`, up to `burst` again (20 and
// one a second for refusals). The lines it leaves out are counted, never dropped silently: the
// next line it lets through comes after one that says how many were left out and over how long
// ("nrtprofd: 1234 more refusals not logged in the last 5 s"), and TakeUnlogged() says so at
// shutdown.
//
// Thread-safe: gRPC threads admit lines concurrently. `monotonic_ns` must be safe to call from
// any thread and outlive the limiter.
#ifndef NRTPROF_DAEMON_LOG_RATE_LIMITER_H_
#define NRTPROF_DAEMON_LOG_RATE_LIMITER_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"

namespace nrtprof::daemon {

class LogRateLimiter {
 public:
  struct Limits {
    uint32_t burst = 20;                 // lines written at once after a quiet spell
    uint64_t refill_ns = 1'000'000'000;  // then one line per this long (> 0)
  };

  // `what`: one event in the singular ("refusal"), for the line that counts those left out.
  // `monotonic_ns`: CLOCK_MONOTONIC in ns (common/clock.h), or a test's clock.
  LogRateLimiter(std::string what, Limits limits, std::function<uint64_t()> monotonic_ns);
  LogRateLimiter(const LogRateLimiter&) = delete;
  LogRateLimiter& operator=(const LogRateLimiter&) = delete;

  // What to write for one event whose line is `line` (ending in '\n'): the line, after the line
  // that counts the events left out since the last one written, if any; empty if this event is
  // left out too. One string, for one write(), so concurrent lines never interleave.
  std::string Admit(absl::string_view line);

  // The line that counts the events left out since the last one written, or empty if none
  // were; the count starts again. For the daemon's last words at shutdown.
  std::string TakeUnlogged();

 private:
  void RefillLocked(uint64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string UnloggedLineLocked(uint64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string what_;
  const Limits limits_;
  const std::function<uint64_t()> monotonic_ns_;

  std::mutex mu_;
  uint32_t tokens_ ABSL_GUARDED_BY(mu_);
  uint64_t refilled_ns_ ABSL_GUARDED_BY(mu_);   // when the bucket last gained a line (or was full)
  uint64_t unlogged_ ABSL_GUARDED_BY(mu_) = 0;  // events left out since the last line written
  uint64_t first_unlogged_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_LOG_RATE_LIMITER_H_
