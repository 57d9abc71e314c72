#include "daemon/log_rate_limiter.h"

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

std::string Refused(int i) { return absl::StrCat("nrtprofd: refused call ", i, "\n"); }

// The lines an operator reads, one string each.
std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

class LogRateLimiterTest : public ::testing::Test {
 protected:
  uint64_t now_ = 7 * kSecond;  // not 0: nothing may depend on the clock starting there
  // Burst 20, then one a second, on a clock the test moves (declared after it: it reads it).
  LogRateLimiter limiter_{"refusal", LogRateLimiter::Limits{20, kSecond}, [this] { return now_; }};
};

TEST_F(LogRateLimiterTest, TheBurstIsWrittenThenNothingThenOneLineCountsWhatWasLeftOut) {
  for (int i = 0; i < 20; ++i) EXPECT_EQ(limiter_.Admit(Refused(i)), Refused(i));
  for (int i = 20; i < 1254; ++i) EXPECT_EQ(limiter_.Admit(Refused(i)), "") << i;
  now_ += 5 * kSecond;
  EXPECT_EQ(limiter_.Admit(Refused(1254)),
            "nrtprofd: 1234 more refusals not logged in the last 5 s\n" + Refused(1254));
  // Five seconds gave five lines: one was just written, four more go out as they are.
  for (int i = 1255; i < 1259; ++i) EXPECT_EQ(limiter_.Admit(Refused(i)), Refused(i));
  EXPECT_EQ(limiter_.Admit(Refused(1259)), "");
  EXPECT_EQ(limiter_.TakeUnlogged(), "nrtprofd: 1 more refusal not logged in the last 1 s\n");
}

TEST_F(LogRateLimiterTest, OnceDrainedItWritesOneLineASecond) {
  for (int i = 0; i < 20; ++i) ASSERT_EQ(limiter_.Admit(Refused(i)), Refused(i));
  for (int second = 1; second <= 3; ++second) {
    now_ += kSecond - 1;
    EXPECT_EQ(limiter_.Admit("left out\n"), "") << second;
    EXPECT_EQ(limiter_.Admit("left out\n"), "") << second;
    now_ += 1;
    EXPECT_EQ(limiter_.Admit(Refused(second)),
              "nrtprofd: 2 more refusals not logged in the last 1 s\n" + Refused(second))
        << second;
    EXPECT_EQ(limiter_.Admit("left out\n"), "") << second;
    EXPECT_EQ(limiter_.TakeUnlogged(), "nrtprofd: 1 more refusal not logged in the last 1 s\n");
  }
}

TEST_F(LogRateLimiterTest, TheSpanIsRoundedUpToWholeSeconds) {
  for (int i = 0; i < 20; ++i) ASSERT_EQ(limiter_.Admit(Refused(i)), Refused(i));
  EXPECT_EQ(limiter_.Admit("left out\n"), "");
  now_ += 2 * kSecond + 1;
  EXPECT_EQ(limiter_.Admit(Refused(20)),
            "nrtprofd: 1 more refusal not logged in the last 3 s\n" + Refused(20));
}

TEST_F(LogRateLimiterTest, AQuietSpellRefillsTheBurstAndNoMore) {
  for (int i = 0; i < 20; ++i) ASSERT_EQ(limiter_.Admit(Refused(i)), Refused(i));
  now_ += 3600 * kSecond;
  int written = 0;
  std::string text;
  for (int i = 0; i < 100; ++i) {
    const std::string out = limiter_.Admit(Refused(i));
    written += !out.empty();
    text += out;
  }
  EXPECT_EQ(written, 20);
  EXPECT_EQ(Lines(text).size(), 20u) << text;  // nothing was left out before them
  EXPECT_EQ(limiter_.TakeUnlogged(), "nrtprofd: 80 more refusals not logged in the last 1 s\n");
  EXPECT_EQ(limiter_.TakeUnlogged(), "");
}

TEST_F(LogRateLimiterTest, NothingLeftOutSaysNothing) {
  EXPECT_EQ(limiter_.TakeUnlogged(), "");
  EXPECT_EQ(limiter_.Admit(Refused(1)), Refused(1));
  EXPECT_EQ(limiter_.TakeUnlogged(), "");
}

// Threads admitting at once, on a clock that moves a little at each reading: every event is
// either written or counted in a line, exactly once.
TEST(LogRateLimiterThreadsTest, EveryEventIsWrittenOrCountedOnce) {
  std::atomic<uint64_t> clock{0};
  LogRateLimiter limiter("refusal", LogRateLimiter::Limits{20, kSecond},
                         [&clock] { return clock.fetch_add(kSecond / 1000); });
  constexpr int kThreads = 8;
  constexpr int kEach = 2000;
  std::vector<std::string> logs(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&limiter, &logs, t] {
      for (int i = 0; i < kEach; ++i) logs[t] += limiter.Admit(Refused(i));
    });
  }
  for (std::thread& t : threads) t.join();
  logs.push_back(limiter.TakeUnlogged());
  uint64_t written = 0, counted = 0, count_lines = 0;
  for (const std::string& log : logs) {
    for (const std::string& line : Lines(log)) {
      if (absl::StartsWith(line, "nrtprofd: refused ")) {
        ++written;
        continue;
      }
      const std::vector<std::string> words = absl::StrSplit(line, ' ');
      uint64_t n = 0;
      ASSERT_TRUE(words.size() > 2 && absl::SimpleAtoi(words[1], &n)) << line;
      EXPECT_EQ(line, absl::StrCat("nrtprofd: ", n, " more refusal", n == 1 ? "" : "s",
                                   " not logged in the last ", words[words.size() - 2], " s"));
      counted += n;
      ++count_lines;
    }
  }
  EXPECT_EQ(written + counted, uint64_t{kThreads} * kEach);
  // The clock ran 16 s: the burst and about one line a second.
  EXPECT_GE(written, 20u);
  EXPECT_LE(written, 20u + 17u);
  EXPECT_GT(count_lines, 0u);
}

}  // namespace
}  // namespace nrtprof::daemon
