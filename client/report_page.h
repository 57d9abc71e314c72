// The page `nrtprof report` writes: one self-contained HTML file (its data, script and style
// inline; a Content-Security-Policy that forbids every fetch) with the capture's key_averages
// table, a chart of the top ops by self device time, the timeline of every lane with the
// dependency chain of a selected framework op, per-core utilization, drops and cut-off
// processes, and the capture's command, host, date and window.
//
// Large captures: past `max_slices` slices the timeline draws the first ones one by one and the
// rest as each lane's busy time per bin; the page says so. The table, the chart and the
// utilization always count every event.
//
// Pure function: thread-safe.
#ifndef NRTPROF_CLIENT_REPORT_PAGE_H_
#define NRTPROF_CLIENT_REPORT_PAGE_H_

#include <cstddef>
#include <string>

#include "client/report_trace.h"
#include "daemon/summary.h"

namespace nrtprof::cli {

struct ReportOptions {
  std::string capture_dir;      // as the user named it, shown in the page
  size_t max_slices = 200'000;  // drawn one by one
  size_t density_bins = 1000;   // per lane, for what is not drawn one by one
};

std::string RenderReportPage(const ReportTrace& trace, const daemon::Summary& summary,
                             const ReportOptions& options);

// How many slices the page draws one by one: all of them, or (past max_slices) those that
// start before the first one left out, at most max_slices.
size_t DrawnSlices(const ReportTrace& trace, size_t max_slices);

// The page's data alone (the JSON the script reads), for tests of what is in it.
std::string ReportPageData(const ReportTrace& trace, const daemon::Summary& summary,
                           const ReportOptions& options);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_REPORT_PAGE_H_
