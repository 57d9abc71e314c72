// capture --iterations's wait (StepWatch, client/capture_hosts.h): when every process that marks
// steps has made the last one or gone, and which went before it.
#include <string>
#include <utility>
#include <vector>

#include "client/capture_hosts.h"
#include "gtest/gtest.h"

namespace nrtprof::cli {
namespace {

// A daemon's status listing (pid, last step) pairs; -1: a process that marks no steps.
StatusReply Status(const std::vector<std::pair<uint32_t, int64_t>>& processes) {
  StatusReply status;
  for (const auto& [pid, step] : processes) {
    ConnectedProcess* p = status.add_processes();
    p->set_pid(pid);
    p->set_last_step(step);
  }
  return status;
}

TEST(StepWatchTest, DoneWhenEveryProcessMadeTheLastStep) {
  StepWatch watch({}, 14);
  EXPECT_FALSE(watch.Done(Status({})));           // nobody marks steps yet: wait
  EXPECT_FALSE(watch.Done(Status({{7, -1}})));    // one that never marks steps does not count
  EXPECT_FALSE(watch.Done(Status({{7, -1}, {8, 12}, {9, 14}})));
  EXPECT_TRUE(watch.Done(Status({{7, -1}, {8, 14}, {9, 15}})));
  EXPECT_TRUE(watch.EndedEarly().empty());
}

TEST(StepWatchTest, AProcessThatEndsFirstEndsTheWaitAndIsNamed) {
  StepWatch watch({}, 14);
  EXPECT_FALSE(watch.Done(Status({{8, 3}, {9, 4}})));
  EXPECT_FALSE(watch.Done(Status({{8, 9}})));  // 9 left the daemon's list: it ended
  EXPECT_TRUE(watch.Done(Status({{8, 14}})));
  EXPECT_EQ(watch.EndedEarly(), std::vector<std::string>{"pid 9 ended before step 14"});
  // Every process gone: the wait is over too, with what they made.
  StepWatch alone({}, 100);
  EXPECT_FALSE(alone.Done(Status({{5, 1}})));
  EXPECT_TRUE(alone.Done(Status({})));
  EXPECT_EQ(alone.EndedEarly(), std::vector<std::string>{"pid 5 ended before step 100"});
}

TEST(StepWatchTest, AStreamThatComesBackIsNotGone) {
  StepWatch watch({}, 10);
  EXPECT_FALSE(watch.Done(Status({{8, 3}})));
  EXPECT_TRUE(watch.Done(Status({})));  // gone, as far as the daemon says
  EXPECT_FALSE(watch.Done(Status({{8, 5}})));  // back: waited for again
  EXPECT_TRUE(watch.EndedEarly().empty());
}

TEST(StepWatchTest, OnlyTheNamedPids) {
  StepWatch watch({9}, 14);
  EXPECT_FALSE(watch.Done(Status({{8, 14}, {9, 13}})));
  EXPECT_TRUE(watch.Done(Status({{8, 2}, {9, 14}})));  // 8 is not asked for
}

}  // namespace
}  // namespace nrtprof::cli
