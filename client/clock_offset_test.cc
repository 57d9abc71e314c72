#include "client/clock_offset.h"

#include "gtest/gtest.h"

namespace nrtprof::cli {
namespace {

// A host whose clocks are 250 ms ahead of ours (monotonic: 7 s), answering at once but seen
// through round trips of varied length: the shortest one decides, and its half is the bound.
TEST(ClockOffsetTest, TheShortestRoundTripDecides) {
  const int64_t realtime_minus_monotonic = 1'000'000'000'000;
  auto sample = [&](uint64_t sent, uint64_t there_after, uint64_t back_after) {
    ClockSample s;
    s.sent_ns = sent;
    s.received_ns = sent + there_after + back_after;
    s.remote_monotonic_ns = sent + there_after + 7'000'000'000;
    s.remote_realtime_ns =
        static_cast<int64_t>(sent + there_after) + realtime_minus_monotonic + 250'000'000;
    s.local_realtime_minus_monotonic_ns = realtime_minus_monotonic;
    return s;
  };
  // Lopsided slow trips would bias the estimate by milliseconds; the short one by 10 us.
  const std::vector<ClockSample> samples = {sample(1'000'000, 9'000'000, 1'000'000),
                                            sample(50'000'000, 30'000, 10'000),
                                            sample(90'000'000, 1'000'000, 6'000'000)};
  absl::StatusOr<ClockEstimate> e = EstimateClock(samples);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->error_bound_ns, 20'000u);
  EXPECT_EQ(e->monotonic_offset_ns, 7'000'000'000 + 10'000);
  EXPECT_EQ(e->realtime_offset_ns, 250'000'000 + 10'000);
  // The truth is within the bound, as it must be whatever the trip's asymmetry.
  EXPECT_LE(std::llabs(e->realtime_offset_ns - 250'000'000), 20'000);
  EXPECT_EQ(e->max_round_trip_ns, 10'000'000u);
  EXPECT_EQ(e->samples, 3u);
  EXPECT_EQ(FormatOffset(e->realtime_offset_ns, e->error_bound_ns), "+250.010ms ± 0.020ms");
  EXPECT_EQ(FormatOffset(-1'500'000, 20'000), "-1.500ms ± 0.020ms");
}

TEST(ClockOffsetTest, NoSamplesIsAnError) {
  EXPECT_FALSE(EstimateClock({}).ok());
}

}  // namespace
}  // namespace nrtprof::cli
