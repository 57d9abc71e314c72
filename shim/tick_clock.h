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
#ifndef NRTPROF_SHIM_TICK_CLOCK_H_
#define NRTPROF_SHIM_TICK_CLOCK_H_

#include <stdint.h>

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

// Ticks to CLOCK_MONOTONIC nanoseconds: ns = anchor_ns + (ticks - anchor_ticks) * rate, the
// anchor taken at the latest Anchor() and the rate measured from the first anchor to the
// latest (so it grows more exact as the process runs).
class TickConverter {
 public:
  explicit TickConverter(TickSource source) : source_(source) { Anchor(); }

  // Pairs the tick clock with CLOCK_MONOTONIC now. Call before converting a drain's records.
  void Anchor() {
    if (source_ == TickSource::kMonotonic) return;
    uint64_t ticks = 0, ns = 0;
    ReadPair(&ticks, &ns);
    if (first_ticks_ == 0) {
      first_ticks_ = ticks;
      first_ns_ = ns;
    }
    // Until the first and latest anchors are far enough apart to measure the rate, keep the
    // last good rate (or a nominal one: a first drain soon after the start).
    if (ticks > first_ticks_ && ns - first_ns_ >= kMinRateSpanNs) {
      ns_per_tick_ = static_cast<double>(ns - first_ns_) / static_cast<double>(ticks - first_ticks_);
    } else if (ns_per_tick_ == 0) {
      ns_per_tick_ = MeasureRate();
    }
    anchor_ticks_ = ticks;
    anchor_ns_ = ns;
  }

  uint64_t ToNs(uint64_t ticks) const {
    if (source_ == TickSource::kMonotonic) return ticks;
    const double delta = static_cast<double>(static_cast<int64_t>(ticks - anchor_ticks_)) *
                         ns_per_tick_;
    const int64_t ns = static_cast<int64_t>(anchor_ns_) + static_cast<int64_t>(delta);
    return ns > 0 ? static_cast<uint64_t>(ns) : 0;
  }
  // A duration in ticks, in nanoseconds.
  uint64_t DurationNs(uint64_t start_ticks, uint64_t end_ticks) const {
    if (end_ticks <= start_ticks) return 0;
    if (source_ == TickSource::kMonotonic) return end_ticks - start_ticks;
    return static_cast<uint64_t>(static_cast<double>(end_ticks - start_ticks) * ns_per_tick_);
  }

  TickSource source() const { return source_; }
  double ns_per_tick() const { return source_ == TickSource::kMonotonic ? 1.0 : ns_per_tick_; }

 private:
  static constexpr uint64_t kMinRateSpanNs = 20'000'000;  // 20 ms

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
  uint64_t anchor_ticks_ = 0, anchor_ns_ = 0;
  double ns_per_tick_ = 0;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_TICK_CLOCK_H_
