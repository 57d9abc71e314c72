#include "client/hosts_summary.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace nrtprof::cli {

daemon::Summary MergeSummaries(const std::string& capture_id,
                               const std::vector<HostSummary>& hosts) {
  daemon::Summary all;
  all.capture_id = capture_id;
  std::map<std::string, daemon::SummaryRow> rows;
  // The hosts' windows on their wall clocks.
  uint64_t first_ns = UINT64_MAX, last_ns = 0, longest_ns = 0;
  bool wall_clock_known = true;
  for (const HostSummary& h : hosts) {
    const daemon::Summary& s = h.summary;
    for (const daemon::SummaryRow& r : s.rows) {
      daemon::SummaryRow& sum = rows[r.name];
      sum.name = r.name;
      sum.self_cpu_ns += r.self_cpu_ns;
      sum.cpu_total_ns += r.cpu_total_ns;
      sum.self_device_ns += r.self_device_ns;
      sum.device_total_ns += r.device_total_ns;
      sum.calls += r.calls;
      sum.queue_wait_ns += r.queue_wait_ns;
      sum.queue_waits += r.queue_waits;
    }
    // The async API's counts add up; the NeuronCores' busy times do not (each host's core 0 is
    // a core of its own): each host's summary below says its cores' idle share.
    all.async_device_events += s.async_device_events;
    all.async_executions += s.async_executions;
    all.async_executions_queue_empty += s.async_executions_queue_empty;
    all.completion_polls += s.completion_polls;
    all.completion_polls_recorded += s.completion_polls_recorded;
    all.self_cpu_total_ns += s.self_cpu_total_ns;
    all.self_device_total_ns += s.self_device_total_ns;
    all.uncorrelated_device_events += s.uncorrelated_device_events;
    all.uncorrelated_device_ns += s.uncorrelated_device_ns;
    all.drops += s.drops;
    all.cut_off_processes += s.cut_off_processes;
    for (const std::string& n : s.notices) all.notices.push_back(absl::StrCat(h.host, ": ", n));
    for (daemon::SummaryProcess p : s.processes) {
      // The shims of two hosts may say the same name (or none): the one the user gave stays
      // apart, as in the merged trace's process names ("EXECUTABLE @ HOST").
      p.host = h.host;
      all.processes.push_back(std::move(p));
    }
    all.events += s.events;
    if (s.events == 0) continue;  // no event: no window to add
    longest_ns = std::max(longest_ns, s.window_ns);
    if (s.window_start_unix_ns == 0) {
      wall_clock_known = false;
      continue;
    }
    first_ns = std::min(first_ns, s.window_start_unix_ns);
    last_ns = std::max(last_ns, s.window_start_unix_ns + s.window_ns);
  }
  for (auto& [name, row] : rows) all.rows.push_back(std::move(row));
  if (wall_clock_known && first_ns <= last_ns) {
    all.window_start_unix_ns = first_ns;
    all.window_ns = last_ns - first_ns;
  } else {
    // The hosts' windows cannot be put on one clock: the longest of them, the least the whole
    // capture spans.
    all.window_ns = longest_ns;
  }
  return all;
}

std::string FormatHostsSummary(const daemon::Summary& overall,
                               const std::vector<HostSummary>& hosts) {
  std::string out = absl::StrCat("Overall (", hosts.size(), " host", hosts.size() == 1 ? "" : "s",
                                 ")\n", daemon::FormatSummary(overall));
  for (const HostSummary& h : hosts) {
    absl::StrAppend(&out, "\nHost ", h.host, "\n", daemon::FormatSummary(h.summary));
  }
  return out;
}

}  // namespace nrtprof::cli
