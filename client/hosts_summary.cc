#include "client/hosts_summary.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace nrtprof::cli {

daemon::Summary MergeSummaries(const std::string& capture_id,
                               const std::vector<HostSummary>& hosts) {
  daemon::Summary all;
  all.capture_id = capture_id;
  std::map<std::string, daemon::SummaryRow> rows;
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
    }
    all.self_cpu_total_ns += s.self_cpu_total_ns;
    all.self_device_total_ns += s.self_device_total_ns;
    all.uncorrelated_device_events += s.uncorrelated_device_events;
    all.uncorrelated_device_ns += s.uncorrelated_device_ns;
    all.drops += s.drops;
    all.cut_off_processes += s.cut_off_processes;
    for (const std::string& n : s.notices) all.notices.push_back(absl::StrCat(h.host, ": ", n));
  }
  for (auto& [name, row] : rows) all.rows.push_back(std::move(row));
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
