#include "shim/preload/tick_clock.h"

#include <time.h>

#include "gtest/gtest.h"

namespace nrtprof::shim {
namespace {

void SleepNs(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  nanosleep(&ts, nullptr);
}

TEST(TickClockTest, MonotonicTicksAreNanosecondsUnchanged) {
  TickConverter clock(TickSource::kMonotonic);
  EXPECT_EQ(clock.ToNs(123456789), 123456789u);
  EXPECT_EQ(clock.DurationNs(100, 350), 250u);
  EXPECT_EQ(clock.DurationNs(350, 100), 0u) << "never a negative duration";
}

// What a user sees: an event stamped with the TSC lands where CLOCK_MONOTONIC says it
// happened, and its duration is the monotonic clock's. The bounds are loose (a busy machine
// may deschedule this thread between two reads); an unconverted or wrongly scaled tick count is
// off by seconds.
TEST(TickClockTest, TscTicksConvertToMonotonicTime) {
  if (!HasInvariantTsc()) GTEST_SKIP() << "no invariant TSC on this CPU";
  TickConverter clock(TickSource::kTsc);
  const uint64_t mono_start = MonotonicNs();
  const uint64_t t0 = ReadTicks(TickSource::kTsc);
  SleepNs(30'000'000);
  const uint64_t t1 = ReadTicks(TickSource::kTsc);
  const uint64_t mono_end = MonotonicNs();
  clock.Anchor();  // as the flusher does before converting a drain
  const uint64_t ns0 = clock.ToNs(t0), ns1 = clock.ToNs(t1);
  EXPECT_GE(ns0 + 1'000'000, mono_start);
  EXPECT_LE(ns1, mono_end + 1'000'000);
  const uint64_t duration = clock.DurationNs(t0, t1);
  EXPECT_GE(duration, 29'000'000u);
  EXPECT_LE(duration, mono_end - mono_start + 1'000'000);
  EXPECT_GT(clock.ns_per_tick(), 0.01);
  EXPECT_LT(clock.ns_per_tick(), 100.0);
}

TEST(TickClockTest, ARateFromALongerSpanReplacesTheFirstGuess) {
  if (!HasInvariantTsc()) GTEST_SKIP() << "no invariant TSC on this CPU";
  TickConverter clock(TickSource::kTsc);
  SleepNs(25'000'000);
  clock.Anchor();
  // A 100 ms interval measured with ticks after the re-anchor agrees with CLOCK_MONOTONIC to
  // within 1%.
  const uint64_t m0 = MonotonicNs(), t0 = ReadTicks(TickSource::kTsc);
  SleepNs(100'000'000);
  const uint64_t m1 = MonotonicNs(), t1 = ReadTicks(TickSource::kTsc);
  const double measured = static_cast<double>(clock.DurationNs(t0, t1));
  const double truth = static_cast<double>(m1 - m0);
  EXPECT_NEAR(measured / truth, 1.0, 0.01);
}

// A call recorded inside a range must stay inside it, however the flusher's re-anchoring falls
// between converting the call and converting the range.
TEST(TickClockTest, ATickConvertsTheSameBeforeAndAfterLaterAnchors) {
  if (!HasInvariantTsc()) GTEST_SKIP() << "no invariant TSC on this CPU";
  TickConverter clock(TickSource::kTsc);
  const uint64_t range_start = ReadTicks(TickSource::kTsc);
  const uint64_t call_start = ReadTicks(TickSource::kTsc);
  const uint64_t call_end = ReadTicks(TickSource::kTsc);
  SleepNs(5'000'000);
  clock.Anchor();
  const uint64_t call_start_ns = clock.ToNs(call_start), call_end_ns = clock.ToNs(call_end);
  for (int i = 0; i < 5; ++i) {
    SleepNs(5'000'000);
    clock.Anchor();
    EXPECT_EQ(clock.ToNs(call_start), call_start_ns);
    EXPECT_EQ(clock.ToNs(call_end), call_end_ns);
  }
  const uint64_t range_end = ReadTicks(TickSource::kTsc);
  clock.Anchor();
  EXPECT_LE(clock.ToNs(range_start), call_start_ns);
  EXPECT_GE(clock.ToNs(range_end), call_end_ns);
  // Increasing across segment boundaries.
  uint64_t previous = 0;
  for (uint64_t t = range_start; t < range_end; t += (range_end - range_start) / 1000 + 1) {
    EXPECT_GE(clock.ToNs(t), previous);
    previous = clock.ToNs(t);
  }
}

}  // namespace
}  // namespace nrtprof::shim
