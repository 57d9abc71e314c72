// The clock the shim's hot path stamps records with, and its conversion to CLOCK_MONOTONIC
// nanoseconds, the clock of every host event on the wire.
//
// On x86-64 with an invariant TSC (CPUID says so) the hot path reads the time-stamp counter:
// about a third of a clock_gettime() call on the project's VMs, and no vDSO page to touch. The
// flusher converts ticks to nanoseconds with a TickConverter, re-anchored against
// CLOCK_MONOTONIC at every drain, so that a slewed or stepped monotonic clock is followed
// within one flush interval. Elsewhere (no invariant TSC, another architecture, or
// NRTPROF_CLOCK=monotonic) the ticks are CLOCK_MONOTONIC nanoseconds and the conversion is the
// identity.
//
// ReadTicks is header-only, async-signal-safe and allocation-free. TickConverter is not
// thread-safe: the flusher thread owns it.
#ifndef NRTPROF_SHIM_PRELOAD_TICK_CLOCK_H_
#define NRTPROF_SHIM_PRELOAD_TICK_CLOCK_H_

#include <stdint.h>

#include <algorithm>
#include <deque>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include "common/clock.h"

namespace nrtprof::shim {

enum class TickSource : uint8_t {
  kMonotonic = 0,  // ticks are CLOCK_MONOTONIC nanoseconds
  kTsc = 1,        // ticks are the x86 time-stamp counter
};

// True if this CPU's time-stamp counter runs at a constant rate through frequency and power
// state changes (CPUID 0x80000007, EDX bit 8), so that it can time events.
inline bool HasInvariantTsc() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) == 0 || eax < 0x80000007u) return false;
  if (__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

inline uint64_t ReadTicks(TickSource source) {
#if defined(__x86_64__)
  if (source == TickSource::kTsc) return __rdtsc();
#endif
  (void)source;
  return MonotonicNs();
}

// Ticks to CLOCK_MONOTONIC nanoseconds, as one continuous, increasing, piecewise-linear
// function. Each Anchor() starts a segment where the previous one leaves off, with a rate that
// is the TSC's measured rate (first anchor to latest) plus a slew that closes the gap to
// CLOCK_MONOTONIC over the next kSlewNs. A tick count converts to the same nanoseconds whenever
// it is converted (before or after later anchors), so that events recorded on one thread keep
// their nesting however the flusher's drains fall between them.
class TickConverter {
 public:
  explicit TickConverter(TickSource source) : source_(source) { Anchor(); }

  // Pairs the tick clock with CLOCK_MONOTONIC now. Call before converting a drain's records.
  void Anchor() {
    if (source_ == TickSource::kMonotonic) return;
    uint64_t ticks = 0, ns = 0;
    ReadPair(&ticks, &ns);
    if (segments_.empty()) {
      first_ticks_ = ticks;
      first_ns_ = ns;
      base_rate_ = MeasureRate();
      segments_.push_back({ticks, static_cast<int64_t>(ns), base_rate_});
      KeepRecent(segments_.back());
      return;
    }
    const Segment& last = segments_.back();
    if (ticks <= last.ticks) return;
    if (ns - first_ns_ >= kMinRateSpanNs && ticks > first_ticks_) {
      base_rate_ = static_cast<double>(ns - first_ns_) / static_cast<double>(ticks - first_ticks_);
    }
    const int64_t mapped = Map(last, ticks);
    const double error_ns = static_cast<double>(static_cast<int64_t>(ns) - mapped);
    double rate = base_rate_ + error_ns * base_rate_ / static_cast<double>(kSlewNs);
    if (rate < base_rate_ * 0.5) rate = base_rate_ * 0.5;
    if (rate > base_rate_ * 1.5) rate = base_rate_ * 1.5;
    segments_.push_back({ticks, mapped, rate});
    KeepRecent(segments_.back());
    if (segments_.size() > kMaxSegments) segments_.pop_front();
  }

  uint64_t ToNs(uint64_t ticks) const {
    if (source_ == TickSource::kMonotonic) return ticks;
    // The segment the tick falls in: the last that starts at or before it (the first, for a
    // tick older than every segment kept). The ticks the flusher converts are recent (most in
    // the segment before the drain's anchor): the newest few are looked at first, in a copy
    // of their own (issue 38: indexing the deque was most of the conversion's time).
    const Segment* seg = nullptr;
    const bool all_recent = recent_count_ == segments_.size();
    for (size_t i = recent_count_; i > 0; --i) {
      if (ticks >= recent_[i - 1].ticks || (i == 1 && all_recent)) {
        seg = &recent_[i - 1];
        break;
      }
    }
    if (seg == nullptr) {
      auto it = std::upper_bound(segments_.begin(), segments_.end(), ticks,
                                 [](uint64_t t, const Segment& s) { return t < s.ticks; });
      seg = it == segments_.begin() ? &segments_.front() : &*(it - 1);
    }
    const int64_t ns = Map(*seg, ticks);
    return ns > 0 ? static_cast<uint64_t>(ns) : 0;
  }
  // A duration in ticks, in nanoseconds: the difference of the converted ends, so that what
  // nests in ticks nests in nanoseconds.
  uint64_t DurationNs(uint64_t start_ticks, uint64_t end_ticks) const {
    if (end_ticks <= start_ticks) return 0;
    if (source_ == TickSource::kMonotonic) return end_ticks - start_ticks;
    const uint64_t start = ToNs(start_ticks), end = ToNs(end_ticks);
    return end > start ? end - start : 0;
  }

  TickSource source() const { return source_; }
  double ns_per_tick() const { return source_ == TickSource::kMonotonic ? 1.0 : base_rate_; }

 private:
  struct Segment {
    uint64_t ticks;  // where it starts
    int64_t ns;      // what that tick converts to
    double rate;     // nanoseconds per tick
  };
  static constexpr uint64_t kMinRateSpanNs = 20'000'000;  // 20 ms
  static constexpr uint64_t kSlewNs = 100'000'000;        // about one flush interval
  static constexpr size_t kMaxSegments = 4096;            // minutes of anchors
  static constexpr size_t kRecent = 4;

  static int64_t Map(const Segment& seg, uint64_t ticks) {
    const double delta = static_cast<double>(static_cast<int64_t>(ticks - seg.ticks)) * seg.rate;
    return seg.ns + static_cast<int64_t>(delta);
  }

  // The tick count and CLOCK_MONOTONIC read as close together as this thread can: the tightest
  // of a few tries, the counter taken between two clock reads.
  void ReadPair(uint64_t* ticks, uint64_t* ns) const {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; ++i) {
      const uint64_t before = MonotonicNs();
      const uint64_t t = ReadTicks(source_);
      const uint64_t after = MonotonicNs();
      if (after - before < best) {
        best = after - before;
        *ticks = t;
        *ns = before + (after - before) / 2;
      }
    }
  }
  // The newest segments, newest last, copied from segments_.
  void KeepRecent(const Segment& seg) {
    if (recent_count_ == kRecent) {
      std::copy(recent_ + 1, recent_ + kRecent, recent_);
      --recent_count_;
    }
    recent_[recent_count_++] = seg;
  }

  // A first rate from a 2 ms spin, used until anchors 20 ms apart give a better one.
  double MeasureRate() const {
    uint64_t t0 = 0, n0 = 0, t1 = 0, n1 = 0;
    ReadPair(&t0, &n0);
    do {
      ReadPair(&t1, &n1);
    } while (n1 - n0 < 2'000'000);
    return t1 > t0 ? static_cast<double>(n1 - n0) / static_cast<double>(t1 - t0) : 1.0;
  }

  const TickSource source_;
  uint64_t first_ticks_ = 0, first_ns_ = 0;
  double base_rate_ = 1.0;
  std::deque<Segment> segments_;
  Segment recent_[kRecent] = {};
  size_t recent_count_ = 0;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_PRELOAD_TICK_CLOCK_H_
