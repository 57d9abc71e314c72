#include "shim/backend/tick_wait.h"

#include "gtest/gtest.h"

namespace nrtprof::shim {
namespace {

constexpr uint64_t kOwnRing = 8192;
constexpr uint64_t kMs = 1'000'000;

TEST(TickWaitTest, TheFirstTickWaitsTheShortWayAndAnIdleOneTheLong) {
  TickWait wait(kOwnRing);
  EXPECT_EQ(wait.Next(1000 * kMs), TickWait::kTickNs);
  EXPECT_EQ(wait.Next(1100 * kMs), TickWait::kLongTickNs);
}

TEST(TickWaitTest, AFullerRingWaitsLessWithinTheBounds) {
  TickWait wait(kOwnRing);
  wait.Next(1000 * kMs);
  // A sixteenth of a ring in 100 ms: a quarter of it in 400 ms, past the long wait.
  wait.NoteRingFill(1.0 / 16);
  EXPECT_EQ(wait.Next(1100 * kMs), TickWait::kLongTickNs);
  // An eighth: a quarter in 200 ms; a half: a quarter in 50 ms.
  wait.NoteRingFill(1.0 / 8);
  wait.NoteRingFill(1.0 / 2);
  EXPECT_EQ(wait.Next(1200 * kMs), 50 * kMs);
  // The whole ring: never shorter than the short tick.
  wait.NoteRingFill(1.0);
  EXPECT_EQ(wait.Next(1300 * kMs), TickWait::kTickNs);
  // What was noted is forgotten at each tick.
  EXPECT_EQ(wait.Next(1400 * kMs), TickWait::kLongTickNs);
}

TEST(TickWaitTest, TheProfilersOwnSystemTraceFetchesPaceTheWait) {
  TickWait wait(kOwnRing);
  wait.Next(1000 * kMs);
  // Half of its ring in 100 ms: a quarter in 50.
  wait.NoteSystemTraceDocument(kOwnRing / 2, /*own_capture=*/true);
  EXPECT_EQ(wait.Next(1100 * kMs), 50 * kMs);
}

// A program running its own system trace (the device timer of examples/) sets its own ring and
// fetches it when it likes: how many events a core numbered in what it fetched says nothing of
// the profiler's ring, and must not wake the flusher 40 times a second.
TEST(TickWaitTest, DocumentsAProgramFetchedFromItsOwnCaptureDoNotShortenTheWait) {
  TickWait wait(kOwnRing);
  wait.Next(1000 * kMs);
  wait.NoteSystemTraceDocument(4 * kOwnRing, /*own_capture=*/false);
  EXPECT_EQ(wait.Next(1100 * kMs), TickWait::kLongTickNs);
}

}  // namespace
}  // namespace nrtprof::shim
