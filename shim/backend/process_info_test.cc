#include "shim/backend/process_info.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nrtprof::shim {
namespace {

TEST(ProcessInfoTest, CommandLineSplitsOnNulAndIsUtf8) {
  EXPECT_THAT(SplitCommandLine(std::string("python3\0-c\0print(1)\0", 20)),
              ::testing::ElementsAre("python3", "-c", "print(1)"));
  EXPECT_THAT(SplitCommandLine(std::string("a\xff\0", 3)),
              ::testing::ElementsAre("a\xEF\xBF\xBD"));
  EXPECT_TRUE(SplitCommandLine("").empty());
}

TEST(ProcessInfoTest, LongStringsAreCutAtACharacterWithAMarker) {
  EXPECT_EQ(TruncateForHello("short", 4096), "short");
  // "é" is two bytes: a cut through it drops it whole.
  const std::string cut = TruncateForHello(std::string(4090, 'a') + "\xC3\xA9" + "zzzz" +
                                               std::string(100, 'b'), 4096 + 25);
  EXPECT_EQ(cut.size(), 4096u + 25);
  EXPECT_THAT(cut, ::testing::EndsWith(kTruncatedMarker));
  const std::string mid = TruncateForHello(std::string(10, 'a') + "\xC3\xA9" + std::string(40, 't'),
                                           11 + sizeof(kTruncatedMarker) - 1);
  EXPECT_EQ(mid, std::string(10, 'a') + kTruncatedMarker);
}

TEST(ProcessInfoTest, CommandLineFitsTheDaemonsLimit) {
  std::vector<std::string> args = {"prog"};
  for (int i = 0; i < 30; ++i) args.push_back(std::string(100'000, 'x'));
  const std::vector<std::string> fitted = FitCommandLine(args);
  size_t bytes = 0;
  for (const std::string& a : fitted) bytes += a.size() + 1;
  EXPECT_EQ(bytes, kMaxCommandLineBytes);
  EXPECT_EQ(fitted[0], "prog");
  EXPECT_EQ(fitted.size(), 12u);  // prog, 10 whole, one cut
  EXPECT_THAT(fitted.back(), ::testing::EndsWith(kTruncatedMarker));
  EXPECT_EQ(FitCommandLine({"a", "b"}), (std::vector<std::string>{"a", "b"}));
}

TEST(ProcessInfoTest, StartTimeComesFromTicksSinceBoot) {
  // comm with spaces and parentheses; starttime (field 22) = 250 ticks at 100 Hz = 2.5 s.
  const std::string stat =
      "123 (my (odd) prog) S 1 123 123 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 250 1000 10";
  EXPECT_EQ(ProcessStartRealtimeNs(stat, 100, /*realtime_now=*/1'000'000'000'000,
                                   /*boottime_now=*/10'000'000'000),
            1'000'000'000'000 - 10'000'000'000 + 2'500'000'000);
  EXPECT_EQ(ProcessStartRealtimeNs("garbage", 100, 1, 0), 0u);
}

TEST(ProcessInfoTest, HelloDescribesThisProcess) {
  Config config;
  snprintf(config.capture_id, sizeof(config.capture_id), "cap");
  snprintf(config.job, sizeof(config.job), "10.0.0.7:62182");
  config.requested_mode = ShimMode::kLossless;
  const nrtprof::Hello hello = BuildHello(config);
  EXPECT_EQ(hello.pid(), static_cast<uint32_t>(getpid()));
  EXPECT_EQ(hello.ppid(), static_cast<uint32_t>(getppid()));
  EXPECT_THAT(hello.executable(), ::testing::EndsWith("/process_info_test"));
  ASSERT_GE(hello.command_line_size(), 1);
  EXPECT_THAT(hello.command_line(0), ::testing::EndsWith("process_info_test"));
  EXPECT_EQ(hello.boot_id().size(), 36u);
  EXPECT_EQ(hello.shim_version(), "0.1.0");
  EXPECT_EQ(hello.capture_id(), "cap");
  EXPECT_EQ(hello.job(), "10.0.0.7:62182");
  EXPECT_EQ(hello.mode(), nrtprof::MODE_LOSSLESS);
  EXPECT_GT(hello.process_start_ns(), 0u);
  EXPECT_LE(hello.process_start_ns(), hello.clock().realtime_ns());
  EXPECT_FALSE(hello.host().empty());
  EXPECT_FALSE(hello.has_rank()) << "no RANK: no rank sent (0 is a rank)";
  config.rank = 0;
  EXPECT_TRUE(BuildHello(config).has_rank());
  EXPECT_EQ(BuildHello(config).rank(), 0);
}

}  // namespace
}  // namespace nrtprof::shim
