// The flight recorder's bounds: the oldest batch goes first, by age or by bytes, and what goes
// is counted; a stream is said to be emptied when its last batch goes.
#include "daemon/flight_recorder.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

FlightRecorder::Chunk Chunk(uint64_t stream, uint64_t at_ms, uint64_t sequence, size_t bytes) {
  FlightRecorder::Chunk c;
  c.stream = stream;
  c.arrival_ns = at_ms * 1'000'000;
  c.sequence = sequence;
  c.events = 10;
  c.bytes.assign(bytes, 'x');
  return c;
}

TEST(FlightRecorderTest, SinceGivesEachStreamsBatchesInOrder) {
  FlightRecorder r({/*max_age_ns=*/10'000'000'000, /*max_bytes=*/1 << 20});
  std::vector<uint64_t> emptied;
  r.Add(Chunk(1, 100, 1, 10), &emptied);
  r.Add(Chunk(2, 200, 1, 10), &emptied);
  r.Add(Chunk(1, 300, 2, 10), &emptied);
  r.Add(Chunk(1, 400, 3, 10), &emptied);
  auto since = r.Since(250'000'000);
  ASSERT_EQ(since.size(), 1u);
  ASSERT_EQ(since[1].size(), 2u);
  EXPECT_EQ(since[1][0]->sequence, 2u);
  EXPECT_EQ(since[1][1]->sequence, 3u);
  EXPECT_EQ(r.Since(0).size(), 2u);
  EXPECT_EQ(r.stats().events, 40u);
  EXPECT_EQ(r.stats().oldest_ns, 100'000'000u);
  EXPECT_TRUE(emptied.empty());
}

TEST(FlightRecorderTest, TheOldestGoesOverTheAgeBound) {
  FlightRecorder r({/*max_age_ns=*/1'000'000'000, /*max_bytes=*/1 << 20});
  std::vector<uint64_t> emptied;
  r.Add(Chunk(1, 0, 1, 10), &emptied);
  r.Add(Chunk(2, 500, 1, 10), &emptied);
  r.Add(Chunk(2, 1200, 2, 10), &emptied);  // stream 1's only batch is now 1.2 s old
  EXPECT_EQ(emptied, std::vector<uint64_t>{1});
  EXPECT_FALSE(r.Holds(1));
  EXPECT_TRUE(r.Holds(2));
  EXPECT_EQ(r.stats().evicted_events, 10u);
  emptied.clear();
  r.Expire(3000'000'000, &emptied);  // nothing came for a while
  EXPECT_EQ(r.stats().newest_evicted_ns, 1200'000'000u);
  EXPECT_EQ(emptied, std::vector<uint64_t>{2});
  EXPECT_EQ(r.stats().chunks, 0u);
  EXPECT_EQ(r.stats().bytes, 0u);
  EXPECT_EQ(r.stats().oldest_ns, 0u);
  EXPECT_EQ(r.stats().evicted_events, 30u);
}

TEST(FlightRecorderTest, TheOldestGoesOverTheByteBound) {
  FlightRecorder r({/*max_age_ns=*/3600'000'000'000, /*max_bytes=*/10'000});
  std::vector<uint64_t> emptied;
  for (uint64_t i = 1; i <= 100; ++i) r.Add(Chunk(1, i, i, 1000), &emptied);
  const FlightRecorder::Stats stats = r.stats();
  EXPECT_LE(stats.bytes, 10'000u);
  EXPECT_GE(stats.chunks, 8u);  // 1000 bytes each and a little for the bookkeeping
  EXPECT_EQ(stats.chunks + stats.evicted_chunks, 100u);
  auto held = r.Since(0);
  EXPECT_EQ(held[1].back()->sequence, 100u);  // the newest stay
  EXPECT_TRUE(emptied.empty());
}

// Each way of keeping the bytes gives them back as they came.
TEST(FlightRecorderTest, BatchesComeBackAsTheyCame) {
  for (FlightRecorder::Codec codec :
       {FlightRecorder::Codec::kNone, FlightRecorder::Codec::kLz4, FlightRecorder::Codec::kZstd}) {
    FlightRecorder r({/*max_age_ns=*/10'000'000'000, /*max_bytes=*/1 << 20}, codec);
    std::vector<uint64_t> emptied;
    FlightRecorder::Chunk c = Chunk(1, 1, 1, 0);
    for (int i = 0; i < 5000; ++i) c.bytes += static_cast<char>(i % 7 == 0 ? i : 'a');
    const std::string sent = c.bytes;
    r.Add(std::move(c), &emptied);
    auto held = r.Since(0);
    std::string back;
    ASSERT_TRUE(FlightRecorder::Bytes(*held[1][0], &back)) << static_cast<int>(codec);
    EXPECT_EQ(back, sent);
    if (codec != FlightRecorder::Codec::kNone) {
      EXPECT_LT(held[1][0]->bytes.size(), sent.size() / 2) << static_cast<int>(codec);
    }

    // A smaller batch after it (the compression buffer is reused), then one that does not
    // compress: kept as it came, one byte more.
    FlightRecorder::Chunk small = Chunk(1, 2, 2, 0);
    small.bytes.assign(300, 'b');
    const std::string small_sent = small.bytes;
    r.Add(std::move(small), &emptied);
    FlightRecorder::Chunk noise = Chunk(1, 3, 3, 0);
    uint32_t x = 12345;
    for (int i = 0; i < 3000; ++i) {
      x = x * 1103515245u + 12345u;
      noise.bytes += static_cast<char>(x >> 24);
    }
    const std::string noise_sent = noise.bytes;
    r.Add(std::move(noise), &emptied);
    held = r.Since(0);
    ASSERT_EQ(held[1].size(), 3u);
    ASSERT_TRUE(FlightRecorder::Bytes(*held[1][1], &back));
    EXPECT_EQ(back, small_sent) << static_cast<int>(codec);
    ASSERT_TRUE(FlightRecorder::Bytes(*held[1][2], &back));
    EXPECT_EQ(back, noise_sent) << static_cast<int>(codec);
    EXPECT_EQ(held[1][2]->bytes.size(), noise_sent.size() + 1) << static_cast<int>(codec);
  }
}

}  // namespace
}  // namespace nrtprof::daemon
