#include "client/report_page.h"

#include <time.h>

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/report_assets.h"
#include "common/json_text.h"

namespace nrtprof::cli {
namespace {

using daemon::FormatDuration;

std::string JsonStrings(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& s : items) quoted.push_back(JsonString(s));
  return absl::StrCat("[", absl::StrJoin(quoted, ","), "]");
}

// The wall-clock time of a CLOCK_MONOTONIC instant, "2026-12-03 17:25:01 UTC".
std::string WallClock(uint64_t monotonic_ns, int64_t realtime_offset_ns) {
  const time_t seconds = static_cast<time_t>(
      (static_cast<int64_t>(monotonic_ns) + realtime_offset_ns) / 1'000'000'000);
  struct tm utc;
  gmtime_r(&seconds, &utc);
  char buf[64];
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &utc);
  return buf;
}

// Time covered by a lane's outermost slices, each instant once.
uint64_t BusyNs(const ReportLane& lane) {
  uint64_t busy = 0, covered_until = 0;
  for (const ReportSlice& s : lane.slices) {
    if (s.depth != 0) continue;
    const uint64_t start = std::max(s.start_ns, covered_until), end = s.start_ns + s.dur_ns;
    if (end > start) busy += end - start;
    covered_until = std::max(covered_until, end);
  }
  return busy;
}

// The share of each of `bins` equal parts of the window that the lane's outermost slices cover.
std::vector<double> BusyBins(const ReportLane& lane, uint64_t first_ns, uint64_t window_ns,
                             size_t bins) {
  std::vector<double> busy(bins, 0);
  if (window_ns == 0) return busy;
  const double bin_ns = static_cast<double>(window_ns) / bins;
  for (const ReportSlice& s : lane.slices) {
    if (s.depth != 0) continue;
    double start = static_cast<double>(s.start_ns - first_ns), end = start + s.dur_ns;
    for (size_t b = static_cast<size_t>(start / bin_ns); b < bins && b * bin_ns < end; ++b) {
      busy[b] += std::min(end, (b + 1) * bin_ns) - std::max(start, b * bin_ns);
    }
  }
  for (double& b : busy) b = std::min(1.0, b / bin_ns);
  return busy;
}

// The start of the first slice not drawn one by one: all slices starting before it are, and
// they are at most max_slices. The window's end when everything is drawn.
uint64_t DrawnUntil(const ReportTrace& trace, size_t max_slices) {
  if (trace.slices <= max_slices) return trace.last_ns + 1;
  std::vector<uint64_t> starts;
  starts.reserve(trace.slices);
  for (const ReportLane& lane : trace.lanes) {
    for (const ReportSlice& s : lane.slices) starts.push_back(s.start_ns);
  }
  std::nth_element(starts.begin(), starts.begin() + max_slices, starts.end());
  return starts[max_slices];
}

std::string CaptureJson(const ReportTrace& trace, const daemon::Summary& summary,
                        const ReportOptions& options) {
  std::vector<std::string> commands, hosts;
  for (const ReportProcess& p : trace.processes) {
    commands.push_back(absl::StrCat("pid ", p.pid, ": ", p.cmdline.empty() ? p.name : p.cmdline));
    if (std::string host = p.Metadata("host");
        !host.empty() && std::find(hosts.begin(), hosts.end(), host) == hosts.end()) {
      hosts.push_back(host);
    }
  }
  const uint64_t window = trace.last_ns - trace.first_ns;
  std::string date;
  if (trace.realtime_offset_ns && trace.slices > 0) {
    date = absl::StrCat(WallClock(trace.first_ns, *trace.realtime_offset_ns), " to ",
                        WallClock(trace.last_ns, *trace.realtime_offset_ns));
  }
  return absl::StrCat("{\"id\":", JsonString(summary.capture_id),
                      ",\"dir\":", JsonString(options.capture_dir),
                      ",\"hosts\":", JsonStrings(hosts), ",\"date\":", JsonString(date),
                      ",\"window_ns\":", window, ",\"window\":", JsonString(FormatDuration(window)),
                      ",\"commands\":", JsonStrings(commands), "}");
}

std::string ProcessesJson(const ReportTrace& trace) {
  std::vector<std::string> out;
  for (const ReportProcess& p : trace.processes) {
    std::vector<std::string> drops, notices;
    for (const auto& [k, v] : p.metadata) {
      if (absl::StartsWith(k, "drops.") && k != "drops.total" && v != "0") {
        drops.push_back(absl::StrCat(k.substr(6), " ", v));
      }
      if (absl::StartsWith(k, "not_recorded.")) notices.push_back(v);
    }
    out.push_back(absl::StrCat(
        "{\"pid\":", p.pid, ",\"name\":", JsonString(p.name),
        ",\"cmdline\":", JsonString(p.cmdline), ",\"host\":", JsonString(p.Metadata("host")),
        ",\"events\":", JsonString(p.Metadata("events_received")),
        ",\"drops_total\":", JsonString(p.Metadata("drops.total")),
        ",\"drops\":", JsonStrings(drops), ",\"cut_off\":", JsonString(p.Metadata("cut_off")),
        ",\"batches_missing\":", JsonString(p.Metadata("batches_missing")), ",\"uncorrelated\":",
        JsonString(p.Metadata("device_uncorrelated")), ",\"notices\":", JsonStrings(notices), "}"));
  }
  return absl::StrCat("[", absl::StrJoin(out, ","), "]");
}

std::string SummaryJson(const daemon::Summary& summary) {
  std::vector<daemon::SummaryRow> rows = summary.rows;
  std::sort(rows.begin(), rows.end(), [](const daemon::SummaryRow& a, const daemon::SummaryRow& b) {
    return a.self_device_ns != b.self_device_ns ? a.self_device_ns > b.self_device_ns
                                                : a.name < b.name;
  });
  std::vector<std::string> out;
  for (const daemon::SummaryRow& r : rows) {
    const double percent = summary.self_device_total_ns == 0
                               ? 0
                               : 100.0 * r.self_device_ns / summary.self_device_total_ns;
    out.push_back(absl::StrCat("{\"cells\":", JsonStrings(daemon::SummaryCells(summary, r)),
                               ",\"values\":[", JsonString(r.name), ",", r.self_cpu_ns, ",",
                               r.cpu_total_ns, ",", r.self_device_ns, ",",
                               absl::StrFormat("%.6f", percent), ",", r.device_total_ns, ",",
                               r.calls == 0 ? 0 : r.device_total_ns / r.calls, ",", r.calls, "]}"));
  }
  // The lines under the text table (totals, drops, cut-off processes, notices), as
  // `nrtprof summary` prints them.
  const std::string text = daemon::FormatSummary(summary);
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  std::vector<std::string> closing;
  for (auto it = lines.rbegin(); it != lines.rend() && !absl::StartsWith(*it, "---"); ++it) {
    closing.insert(closing.begin(), *it);
  }
  return absl::StrCat("{\"rows\":[", absl::StrJoin(out, ","),
                      "],\"closing\":", JsonStrings(closing),
                      ",\"cut_off_processes\":", summary.cut_off_processes,
                      ",\"drops_total\":", summary.drops.total(), "}");
}

std::string LaneJson(const ReportLane& lane, uint64_t first_ns, uint64_t drawn_until,
                     bool truncated, const ReportOptions& options, uint64_t window_ns) {
  std::vector<std::string> starts, durations, names, depths, args, flows;
  uint32_t max_depth = 0;
  for (const ReportSlice& s : lane.slices) {
    max_depth = std::max(max_depth, s.depth);
    if (s.start_ns >= drawn_until) continue;
    if (!s.flows.empty()) {
      flows.push_back(absl::StrCat("[", starts.size(), ",", absl::StrJoin(s.flows, ","), "]"));
    }
    starts.push_back(absl::StrCat(s.start_ns - first_ns));
    durations.push_back(absl::StrCat(s.dur_ns));
    names.push_back(absl::StrCat(s.name));
    depths.push_back(absl::StrCat(s.depth));
    args.push_back(JsonString(s.args));
  }
  std::string density = "[]";
  if (truncated) {
    std::vector<std::string> bins;
    for (double b : BusyBins(lane, first_ns, window_ns, options.density_bins)) {
      bins.push_back(absl::StrFormat("%.3g", b));
    }
    density = absl::StrCat("[", absl::StrJoin(bins, ","), "]");
  }
  return absl::StrCat("{\"p\":", lane.process, ",\"kind\":", JsonString(lane.kind),
                      ",\"owner\":", JsonString(lane.owner), ",\"rows\":", max_depth + 1,
                      ",\"total\":", lane.slices.size(), ",\"s\":[", absl::StrJoin(starts, ","),
                      "],\"d\":[", absl::StrJoin(durations, ","), "],\"n\":[",
                      absl::StrJoin(names, ","), "],\"l\":[", absl::StrJoin(depths, ","),
                      "],\"a\":[", absl::StrJoin(args, ","), "],\"f\":[", absl::StrJoin(flows, ","),
                      "],\"density\":", density, "}");
}

// Per NeuronCore of each process: its executions, their busy time and its share of the window,
// and its DMA's busy time.
std::string CoresJson(const ReportTrace& trace) {
  const uint64_t window = trace.last_ns - trace.first_ns;
  std::vector<std::string> out;
  for (const ReportLane& lane : trace.lanes) {
    if (lane.kind != "executions") continue;
    uint64_t dma_busy = 0;
    for (const ReportLane& other : trace.lanes) {
      if (other.kind == "DMA" && other.process == lane.process && other.owner == lane.owner) {
        dma_busy = BusyNs(other);
      }
    }
    const uint64_t busy = BusyNs(lane);
    size_t executions = 0;
    for (const ReportSlice& s : lane.slices) executions += s.depth == 0;
    const ReportProcess& p = trace.processes[lane.process];
    out.push_back(absl::StrCat(
        "{\"process\":", JsonString(absl::StrCat(p.name, " (pid ", p.pid, ")")),
        ",\"core\":", JsonString(lane.owner), ",\"executions\":", executions,
        ",\"busy\":", JsonString(FormatDuration(busy)), ",\"utilization\":",
        JsonString(absl::StrFormat("%.1f%%", window == 0 ? 0.0 : 100.0 * busy / window)),
        ",\"dma_busy\":", JsonString(FormatDuration(dma_busy)), "}"));
  }
  return absl::StrCat("[", absl::StrJoin(out, ","), "]");
}

}  // namespace

size_t DrawnSlices(const ReportTrace& trace, size_t max_slices) {
  const uint64_t drawn_until = DrawnUntil(trace, max_slices);
  size_t drawn = 0;
  for (const ReportLane& lane : trace.lanes) {
    for (const ReportSlice& s : lane.slices) drawn += s.start_ns < drawn_until;
  }
  return drawn;
}

std::string ReportPageData(const ReportTrace& trace, const daemon::Summary& summary,
                           const ReportOptions& options) {
  const uint64_t drawn_until = DrawnUntil(trace, options.max_slices);
  const bool truncated = trace.slices > options.max_slices;
  const uint64_t window = trace.last_ns - trace.first_ns;
  const size_t drawn = DrawnSlices(trace, options.max_slices);
  std::vector<std::string> lanes;
  for (const ReportLane& lane : trace.lanes) {
    lanes.push_back(LaneJson(lane, trace.first_ns, drawn_until, truncated, options, window));
  }
  return absl::StrCat(
      "{\"capture\":", CaptureJson(trace, summary, options),
      ",\"processes\":", ProcessesJson(trace), ",\"summary\":", SummaryJson(summary),
      ",\"names\":", JsonStrings(trace.names), ",\"lanes\":[", absl::StrJoin(lanes, ","),
      "],\"cores\":", CoresJson(trace), ",\"drawn\":{\"slices\":", drawn,
      ",\"total\":", trace.slices, ",\"truncated\":", truncated ? "true" : "false",
      ",\"until_ns\":", truncated ? drawn_until - trace.first_ns : window,
      ",\"until\":", JsonString(FormatDuration(truncated ? drawn_until - trace.first_ns : window)),
      "}}");
}

std::string RenderReportPage(const ReportTrace& trace, const daemon::Summary& summary,
                             const ReportOptions& options) {
  // '<' only occurs inside the data's strings, where \u003c means the same: nothing in them
  // can close the script element.
  const std::string data =
      absl::StrReplaceAll(ReportPageData(trace, summary, options), {{"<", "\\u003c"}});
  std::string title = absl::StrReplaceAll(summary.capture_id, {{"&", "&amp;"}, {"<", "&lt;"}});
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
      "<title>nrtprof report: ",
      title, "</title>\n<style>\n", kReportCss, "</style></head>\n<body>\n",
      "<noscript>This report draws itself with JavaScript; the same table is in summary.txt "
      "beside the capture.</noscript>\n<div id=\"app\"></div>\n"
      "<script type=\"application/json\" id=\"nrtprof-data\">",
      data, "</script>\n<script>\n", kReportJs, "</script>\n</body></html>\n");
}

}  // namespace nrtprof::cli
