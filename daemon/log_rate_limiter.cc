#include "daemon/log_rate_limiter.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace nrtprof::daemon {

LogRateLimiter::LogRateLimiter(std::string what, Limits limits,
                               std::function<uint64_t()> monotonic_ns)
    : what_(std::move(what)),
      limits_(limits),
      monotonic_ns_(std::move(monotonic_ns)),
      tokens_(limits.burst),
      refilled_ns_(monotonic_ns_()) {}

std::string LogRateLimiter::Admit(absl::string_view line) {
  std::lock_guard<std::mutex> lock(mu_);
  // Read under the lock: callers then see the clock in the order they hold the lock.
  const uint64_t now_ns = monotonic_ns_();
  RefillLocked(now_ns);
  if (tokens_ == 0) {
    if (unlogged_ == 0) first_unlogged_ns_ = now_ns;
    ++unlogged_;
    return "";
  }
  --tokens_;
  return absl::StrCat(UnloggedLineLocked(now_ns), line);
}

std::string LogRateLimiter::TakeUnlogged() {
  std::lock_guard<std::mutex> lock(mu_);
  return UnloggedLineLocked(monotonic_ns_());
}

void LogRateLimiter::RefillLocked(uint64_t now_ns) {
  if (now_ns <= refilled_ns_) return;
  if (tokens_ >= limits_.burst) {
    refilled_ns_ = now_ns;  // a full bucket banks no time
    return;
  }
  const uint64_t gained = (now_ns - refilled_ns_) / limits_.refill_ns;
  if (gained >= limits_.burst - tokens_) {
    tokens_ = limits_.burst;
    refilled_ns_ = now_ns;
  } else {
    tokens_ += static_cast<uint32_t>(gained);
    refilled_ns_ += gained * limits_.refill_ns;  // the part of an interval already run is kept
  }
}

std::string LogRateLimiter::UnloggedLineLocked(uint64_t now_ns) {
  if (unlogged_ == 0) return "";
  // Whole seconds, rounded up so that "in the last S s" holds; at least 1.
  const uint64_t span_ns = now_ns > first_unlogged_ns_ ? now_ns - first_unlogged_ns_ : 0;
  const uint64_t seconds = span_ns == 0 ? 1 : (span_ns + 999'999'999) / 1'000'000'000;
  std::string text =
      absl::StrCat("nrtprofd: ", unlogged_, " more ", what_, unlogged_ == 1 ? "" : "s",
                   " not logged in the last ", seconds, " s\n");
  unlogged_ = 0;
  return text;
}

}  // namespace nrtprof::daemon
