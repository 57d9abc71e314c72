// RenderTriggerMetrics: the trigger rules' lines of /metrics, as Prometheus scrapes them.
#include "daemon/trigger_captures.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {
namespace {

TEST(RenderTriggerMetricsTest, PerRuleCountsAndTheBytesKept) {
  nrtprof::StatusReply status;
  EXPECT_EQ(RenderTriggerMetrics(status), "") << "no rules, no triggered captures: nothing";
  nrtprof::TriggerRuleStatus* rule = status.add_triggers();
  rule->set_name("slow-step");
  rule->set_triggers(4);
  rule->set_suppressed(3);
  rule->set_peer_failed(2);
  status.set_triggered_bytes(1234);
  status.set_triggered_bytes_limit(1 << 20);
  const std::string text = RenderTriggerMetrics(status);
  EXPECT_TRUE(absl::StrContains(text, "\nnrtprof_triggers_total{rule=\"slow-step\"} 4\n")) << text;
  EXPECT_TRUE(
      absl::StrContains(text, "\nnrtprof_triggers_suppressed_total{rule=\"slow-step\"} 3\n"));
  EXPECT_TRUE(
      absl::StrContains(text, "\nnrtprof_triggered_peer_failed_total{rule=\"slow-step\"} 2\n"));
  EXPECT_TRUE(absl::StrContains(text, "\nnrtprof_triggered_captures_bytes 1234\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "\nnrtprof_triggered_captures_bytes_limit 1048576\n"));
}

// A daemon without rules that keeps the captures its peers' rules asked for: their bytes and
// its budget, and no rule's counter (not even an empty family).
TEST(RenderTriggerMetricsTest, APeerWithoutRulesHasItsBytesOnly) {
  nrtprof::StatusReply status;
  nrtprof::TriggeredCapture* kept = status.add_triggered_captures();
  kept->set_rule("slow-step");
  kept->set_reason("asked by trn1-01: pid 4242 (train): step 300 took 4.0x the median");
  kept->set_bytes(5000);
  status.set_triggered_bytes(5000);
  status.set_triggered_bytes_limit(1 << 30);
  const std::string text = RenderTriggerMetrics(status);
  EXPECT_TRUE(absl::StrContains(text, "\nnrtprof_triggered_captures_bytes 5000\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "\nnrtprof_triggered_captures_bytes_limit 1073741824\n"));
  EXPECT_FALSE(absl::StrContains(text, "nrtprof_triggers_total")) << text;
  EXPECT_FALSE(absl::StrContains(text, "rule=")) << text;
}

}  // namespace
}  // namespace nrtprof::daemon
