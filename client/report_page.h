// The page `nrtprof report` writes: one self-contained HTML file (its data, script and style
// inline; a Content-Security-Policy that forbids every fetch) with the capture's key_averages
// table, a chart of the top ops by self device time, the timeline of every lane (opening on
// the busiest step: ChooseInitialView) with the dependency chain of a selected framework op,
// per-core utilization, drops and cut-off
// processes, and the capture's command, host, date and window. Under the table, a flame graph
// (an icicle: the root on top) of device time by stack, from the stacks `nrtprof export` writes
// (trace/pprof_export.h): framework ranges, runtime call, model, engine op. A capture of a
// distributed job has a Collectives section: the collectives with the most arrival skew and their
// last rank, and the straggler table with the late rank's cause, as `nrtprof collectives` prints
// them.
//
// Large captures: past `max_slices` slices the timeline draws the first ones one by one and the
// rest as each lane's busy time per bin; the page says so. The table, the chart and the
// utilization always count every event.
//
// Pure function: thread-safe.
#ifndef NRTPROF_CLIENT_REPORT_PAGE_H_
#define NRTPROF_CLIENT_REPORT_PAGE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "client/report_trace.h"
#include "trace/summary.h"

namespace nrtprof::daemon {
class StackProfile;  // trace/pprof_export.h
}  // namespace nrtprof::daemon

namespace nrtprof::cli {

struct CollectivesTable;  // collectives_table.h

struct ReportOptions {
  std::string capture_dir;      // as the user named it, shown in the page
  size_t max_slices = 200'000;  // drawn one by one
  size_t density_bins = 1000;   // per lane, for what is not drawn one by one
  // The capture's collectives (`nrtprof collectives`' cells), null when it has none: the
  // Collectives section, with the `worst_collectives` of most skew.
  const CollectivesTable* collectives = nullptr;
  size_t worst_collectives = 10;
  // The capture's stacks (capture_stacks.h): the flame graph's frames. Null: no flame graph,
  // and the page says `stacks_error` (why they could not be made) instead.
  const daemon::StackProfile* stacks = nullptr;
  std::string stacks_error;
};

std::string RenderReportPage(const ReportTrace& trace, const daemon::Summary& summary,
                             const ReportOptions& options);

// The part of the window the timeline opens on, in ns from the window's start, and why: the
// busiest step drawn one by one (the most device time its runtime calls caused, then the most
// ops and calls, then the shortest); without steps, the
// whole window if its typical slice is wide enough to see, else the stretch of 25 typical slices
// with the most device time (or slices). The page says which, and zooms out to all of it.
struct InitialView {
  uint64_t start_ns = 0, end_ns = 0;
  int64_t step = -1;             // N of the busiest step "ProfilerStep#N"; -1 if not a step
  uint64_t step_ns = 0;          // that step's length
  uint64_t device_ns = 0;        // and the device time its calls caused
  bool busiest_stretch = false;  // no step: the stretch with the most device time (or slices)
};
InitialView ChooseInitialView(const ReportTrace& trace, size_t max_slices);

// How many slices the page draws one by one: all of them, or (past max_slices) those that
// start before the first one left out, at most max_slices.
size_t DrawnSlices(const ReportTrace& trace, size_t max_slices);

// The page's data alone (the JSON the script reads), for tests of what is in it.
std::string ReportPageData(const ReportTrace& trace, const daemon::Summary& summary,
                           const ReportOptions& options);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_REPORT_PAGE_H_
