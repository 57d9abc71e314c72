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

// The header is the hosts' together (before: "window 0.000us", "Totals: 0 events", no
// process): every process, with its host as the user named it, the events added up, and the
// window from the first host's first event to the last one's last, on the hosts' wall clocks.
TEST(HostsSummaryTest, TheHeaderIsTheHostsTogether) {
  HostSummary a{"a:1", {}}, b{"b:2", {}};
  a.summary.capture_id = b.summary.capture_id = "cap";
  a.summary.processes = {{7, "trn1", "python3 a.py", ""}};
  a.summary.events = 100;
  a.summary.window_start_unix_ns = 1'764'000'000'000'000'000;  // 2025-11-24 16:00:00 UTC
  a.summary.window_ns = 2'000'000'000;
  b.summary.processes = {{7, "trn1", "python3 b.py", ""}, {9, "trn1", "python3 c.py", ""}};
  b.summary.events = 50;
  b.summary.window_start_unix_ns = a.summary.window_start_unix_ns + 500'000'000;
  b.summary.window_ns = 2'000'000'000;
  b.summary.drops.no_memory = 3;
  b.summary.drops.by_lane.runtime = 3;
  const daemon::Summary all = MergeSummaries("cap", {a, b});
  EXPECT_EQ(all.events, 150u);
  EXPECT_EQ(all.window_start_unix_ns, a.summary.window_start_unix_ns);
  EXPECT_EQ(all.window_ns, 2'500'000'000u);
  ASSERT_EQ(all.processes.size(), 3u);
  EXPECT_EQ(all.processes[0].host, "a:1");
  EXPECT_EQ(all.processes[2].host, "b:2");

  const std::string text = daemon::FormatSummary(all);
  EXPECT_TRUE(
      absl::StartsWith(text,
                       "Capture cap on a:1, b:2: 2025-11-24 16:00:00.000 UTC, window 2.500s\n"
                       "pid 7 on a:1: python3 a.py\n"
                       "pid 7 on b:2: python3 b.py\n"
                       "pid 9 on b:2: python3 c.py\n"
                       "Totals: 150 events, "))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "\nEvents dropped: 3 (no_memory 3)\n")) << text;
  EXPECT_TRUE(
      absl::StrContains(text, "\nEvents dropped by lane: framework 0, runtime 3, hardware 0\n"))
      << text;
  // summary.json says the same, and reads back as written.
  absl::StatusOr<daemon::Summary> json = daemon::ParseSummaryJson(daemon::FormatSummary(
      all, daemon::SummarySortKey::kSelfDevice, daemon::SummaryFormat::kJson));
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(daemon::FormatSummary(*json), text);

  // A host that knows no wall clock for its events: no start, and the longest window.
  b.summary.window_start_unix_ns = 0;
  b.summary.window_ns = 3'000'000'000;
  const daemon::Summary unknown = MergeSummaries("cap", {a, b});
  EXPECT_EQ(unknown.window_start_unix_ns, 0u);
  EXPECT_EQ(unknown.window_ns, 3'000'000'000u);
}

}  // namespace
}  // namespace nrtprof::cli
