#include "client/hosts_summary.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace nrtprof::cli {
namespace {

daemon::SummaryRow Row(const std::string& name, uint64_t device_ns, uint64_t calls) {
  daemon::SummaryRow r;
  r.name = name;
  r.self_device_ns = device_ns;
  r.device_total_ns = device_ns;
  r.self_cpu_ns = 2 * device_ns;
  r.cpu_total_ns = 2 * device_ns;
  r.calls = calls;
  return r;
}

// The overall table is the hosts' rows added up by name; each host keeps its own table.
TEST(HostsSummaryTest, RowsAddUpByNameAndEachHostKeepsItsTable) {
  HostSummary a{"a:1", {}}, b{"b:2", {}};
  a.summary.rows = {Row("rmsnorm", 3'000, 3), Row("aten::mul", 1'000, 1)};
  a.summary.self_device_total_ns = 4'000;
  a.summary.drops.ring_full = 2;
  b.summary.rows = {Row("rmsnorm", 5'000, 5)};
  b.summary.self_device_total_ns = 5'000;
  b.summary.notices = {"pid 7 (app): no device trace"};
  const daemon::Summary all = MergeSummaries("cap", {a, b});
  ASSERT_EQ(all.rows.size(), 2u);
  for (const daemon::SummaryRow& r : all.rows) {
    if (r.name == "rmsnorm") {
      EXPECT_EQ(r.self_device_ns, 8'000u);
      EXPECT_EQ(r.calls, 8u);
      EXPECT_EQ(r.cpu_total_ns, 16'000u);
    }
  }
  EXPECT_EQ(all.self_device_total_ns, 9'000u);
  EXPECT_EQ(all.drops.total(), 2u);
  EXPECT_EQ(all.notices, std::vector<std::string>{"b:2: pid 7 (app): no device trace"});

  const std::string text = FormatHostsSummary(all, {a, b});
  EXPECT_TRUE(absl::StartsWith(text, "Overall (2 hosts)\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "\nHost a:1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "\nHost b:2\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "Self NEURON time total: 9.000us")) << text;
  EXPECT_TRUE(absl::StrContains(text, "Self NEURON time total: 5.000us")) << text;
}

}  // namespace
}  // namespace nrtprof::cli
