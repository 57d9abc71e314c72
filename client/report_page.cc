#include "client/report_page.h"

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/collectives_table.h"
#include "client/report_assets.h"
#include "common/json_text.h"
#include "trace/pprof_export.h"

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

// What a process's threads did from one instant to another: the framework ops and runtime
// calls that start then, and the device time their calls caused (the executions their flows
// reach). By cause, not by when the executions ran: those of one step may run (or be aligned
// onto the host's clock) in the next.
class HostActivity {
 public:
  HostActivity(const ReportTrace& trace, size_t process) {
    std::unordered_map<uint64_t, uint64_t> execution_ns;  // by flow id
    for (const ReportLane& lane : trace.lanes) {
      if (lane.process != process || lane.kind != "executions") continue;
      for (const ReportSlice& s : lane.slices) {
        if (s.depth == 0) {
          for (uint64_t flow : s.flows) execution_ns[flow] += s.dur_ns;
        }
      }
    }
    std::vector<std::pair<uint64_t, uint64_t>> calls;  // start, device time caused
    for (const ReportLane& lane : trace.lanes) {
      if (lane.process != process || (lane.kind != "framework" && lane.kind != "runtime")) continue;
      for (const ReportSlice& s : lane.slices) {
        starts_.push_back(s.start_ns);
        if (lane.kind != "runtime") continue;
        uint64_t device = 0;
        for (uint64_t flow : s.flows) {
          if (auto it = execution_ns.find(flow); it != execution_ns.end()) device += it->second;
        }
        if (device > 0) calls.push_back({s.start_ns, device});
      }
    }
    std::sort(starts_.begin(), starts_.end());
    std::sort(calls.begin(), calls.end());
    device_sums_.push_back(0);
    for (const auto& [start, device] : calls) {
      call_starts_.push_back(start);
      device_sums_.push_back(device_sums_.back() + device);
    }
  }
  // The ops and calls that start in [from, to).
  size_t Slices(uint64_t from, uint64_t to) const { return Within(starts_, from, to).second; }
  // The device time the calls that start in [from, to) caused.
  uint64_t DeviceNs(uint64_t from, uint64_t to) const {
    const auto [first, count] = Within(call_starts_, from, to);
    return device_sums_[first + count] - device_sums_[first];
  }

 private:
  static std::pair<size_t, size_t> Within(const std::vector<uint64_t>& sorted, uint64_t from,
                                          uint64_t to) {
    const auto first = std::lower_bound(sorted.begin(), sorted.end(), from);
    return {first - sorted.begin(), std::lower_bound(first, sorted.end(), to) - first};
  }
  std::vector<uint64_t> starts_, call_starts_, device_sums_;
};

// The busiest step drawn one by one: the most device time its calls caused, then the most ops
// and calls, then the shortest (the densest where steps repeat the same work, not a first step
// slowed by warm-up), the first of equals. Steps are a framework lane's outermost ranges
// "ProfilerStep#N" (nrtprof_step, PyTorch's profiler).
bool BusiestStep(const ReportTrace& trace, uint64_t drawn_until, InitialView* view) {
  std::vector<std::optional<HostActivity>> activity(trace.processes.size());
  const ReportSlice* busiest = nullptr;
  std::tuple<uint64_t, size_t, uint64_t> busiest_rank;  // device time, slices, -length
  for (const ReportLane& lane : trace.lanes) {
    if (lane.kind != "framework") continue;
    for (const ReportSlice& s : lane.slices) {
      absl::string_view name = trace.names[s.name];
      int64_t step = 0;
      const uint64_t end = s.start_ns + s.dur_ns;
      if (s.depth != 0 || end > drawn_until || !absl::ConsumePrefix(&name, "ProfilerStep#") ||
          !absl::SimpleAtoi(name, &step)) {
        continue;
      }
      if (!activity[lane.process]) activity[lane.process].emplace(trace, lane.process);
      const HostActivity& host = *activity[lane.process];
      const auto rank = std::make_tuple(host.DeviceNs(s.start_ns, end),
                                        host.Slices(s.start_ns, end), UINT64_MAX - s.dur_ns);
      if (busiest == nullptr || rank > busiest_rank) {
        busiest = &s;
        busiest_rank = rank;
        view->step = step;
        view->device_ns = std::get<0>(rank);
      }
    }
  }
  if (busiest == nullptr) return false;
  const uint64_t margin = busiest->dur_ns / 50, start = busiest->start_ns - trace.first_ns;
  view->start_ns = start > margin ? start - margin : 0;
  view->end_ns = std::min(start + busiest->dur_ns + margin, trace.last_ns - trace.first_ns);
  view->step_ns = busiest->dur_ns;
  return true;
}

// Without steps: the whole window if its typical (median) slice drawn one by one is wide enough
// to see (100 of them would fill it: each some 10 pixels wide), else a stretch as long as 25
// typical slices (each some 40 pixels: room for its name) where the most executions' time
// starts (or, without executions, the most slices).
void BusiestStretch(const ReportTrace& trace, uint64_t drawn_until, InitialView* view) {
  std::vector<const ReportSlice*> drawn, executions;
  for (const ReportLane& lane : trace.lanes) {
    for (const ReportSlice& s : lane.slices) {
      if (s.start_ns >= drawn_until) continue;
      drawn.push_back(&s);
      if (lane.kind == "executions" && s.depth == 0) executions.push_back(&s);
    }
  }
  if (drawn.empty()) return;
  std::nth_element(
      drawn.begin(), drawn.begin() + drawn.size() / 2, drawn.end(),
      [](const ReportSlice* a, const ReportSlice* b) { return a->dur_ns < b->dur_ns; });
  const uint64_t span = 25 * std::max<uint64_t>(drawn[drawn.size() / 2]->dur_ns, 1);
  if (view->end_ns <= 4 * span) return;
  std::vector<const ReportSlice*>& weighed = executions.empty() ? drawn : executions;
  std::sort(weighed.begin(), weighed.end(),
            [](const ReportSlice* a, const ReportSlice* b) { return a->start_ns < b->start_ns; });
  const auto weight = [&](const ReportSlice* s) -> uint64_t {
    return executions.empty() ? 1 : s->dur_ns;
  };
  // Each stretch starts at a slice's start.
  uint64_t best = 0, sum = 0;
  size_t best_first = 0;
  for (size_t first = 0, next = 0; first < weighed.size(); ++first) {
    for (; next < weighed.size() && weighed[next]->start_ns < weighed[first]->start_ns + span;
         ++next) {
      sum += weight(weighed[next]);
    }
    if (sum > best) {
      best = sum;
      best_first = first;
    }
    sum -= weight(weighed[first]);
  }
  const uint64_t margin = span / 20, window = view->end_ns;
  const uint64_t start = weighed[best_first]->start_ns - trace.first_ns;
  view->start_ns = std::min(start > margin ? start - margin : 0, window - span);
  view->end_ns = view->start_ns + span;
  view->busiest_stretch = true;
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
                      ",\"commands\":", JsonStrings(commands),
                      // Why a trigger rule of the daemon's took it (docs/triggers.md); "" if none.
                      ",\"trigger\":",
                      JsonString(summary.trigger.rule.empty()
                                     ? ""
                                     : absl::StrCat("rule ", summary.trigger.rule, " (",
                                                    summary.trigger.condition, "): ",
                                                    summary.trigger.reason)),
                      "}");
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
  const bool async = summary.async_device_events != 0;
  for (const daemon::SummaryRow& r : rows) {
    const double percent = summary.self_device_total_ns == 0
                               ? 0
                               : 100.0 * r.self_device_ns / summary.self_device_total_ns;
    // With async work, the queue wait before the calls, as in the text table's cells.
    const std::string queue_wait =
        async ? absl::StrCat(r.queue_waits == 0 ? 0 : r.queue_wait_ns / r.queue_waits, ",") : "";
    out.push_back(absl::StrCat("{\"cells\":", JsonStrings(daemon::SummaryCells(summary, r)),
                               ",\"values\":[", JsonString(r.name), ",", r.self_cpu_ns, ",",
                               r.cpu_total_ns, ",", r.self_device_ns, ",",
                               absl::StrFormat("%.6f", percent), ",", r.device_total_ns, ",",
                               r.calls == 0 ? 0 : r.device_total_ns / r.calls, ",", queue_wait,
                               r.calls, "]}"));
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
                      ",\"async\":", async ? "true" : "false",
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

// The Collectives section: the `worst_collectives` rows of most skew (the most first), the
// straggler table, the slowest rank's line and the notes, the cells `nrtprof collectives`
// prints; null without collectives.
std::string CollectivesJson(const ReportOptions& options) {
  const CollectivesTable* t = options.collectives;
  if (t == nullptr) return "null";
  std::vector<size_t> order(t->instances.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [t](size_t a, size_t b) { return t->skew_ns[a] > t->skew_ns[b]; });
  order.resize(std::min(order.size(), options.worst_collectives));
  std::vector<std::string> worst, stragglers;
  for (size_t i : order) worst.push_back(JsonStrings(t->instances[i]));
  for (const std::vector<std::string>& row : t->stragglers) stragglers.push_back(JsonStrings(row));
  const std::vector<std::string> instance_columns(std::begin(CollectivesTable::kInstanceColumns),
                                                  std::end(CollectivesTable::kInstanceColumns));
  const std::vector<std::string> straggler_columns(std::begin(CollectivesTable::kStragglerColumns),
                                                   std::end(CollectivesTable::kStragglerColumns));
  return absl::StrCat(
      "{\"heading\":", JsonString(t->heading), ",\"total\":", t->instances.size(),
      ",\"columns\":", JsonStrings(instance_columns), ",\"worst\":[", absl::StrJoin(worst, ","),
      "],\"stragglers_heading\":", JsonString(t->stragglers_heading),
      ",\"straggler_columns\":", JsonStrings(straggler_columns), ",\"stragglers\":[",
      absl::StrJoin(stragglers, ","), "],\"slowest\":", JsonString(t->slowest),
      ",\"notes\":", JsonStrings(t->notes), "}");
}

// The flame graph's frames: every stack (StackProfile::ForEachStack) root first, one frame per
// name along a path, with the device time of the stacks through it, its share of all of it, and
// those stacks' runtime calls' host time and executions. Flat, each frame after its parent and
// before its later siblings, siblings the most device time first (then by name):
// [name, parent, device ns, device time as the table writes it, share, host ns, executions].
// Frame 0 is the root, all device time. Frames without device time are left out (their host time
// and executions are in their parents'). And per name, what all its frames hold (those inside
// another of the name once): [device ns, time, share, frames], a framework op's the table's
// NEURON total for it, as pprof's cumulative figure is. Without stacks, why not.
std::string FlameJson(const ReportOptions& options) {
  if (options.stacks == nullptr) {
    return absl::StrCat("{\"error\":", JsonString(options.stacks_error), "}");
  }
  struct Frame {
    uint32_t name = 0, parent = 0;
    int64_t device_ns = 0, host_ns = 0, executions = 0;
    std::vector<uint32_t> children;
  };
  std::vector<Frame> frames(1);
  std::vector<std::string> names = {"all"};
  absl::flat_hash_map<std::string, uint32_t> name_ids = {{"all", 0}};
  absl::flat_hash_map<std::pair<uint32_t, uint32_t>, uint32_t> child_of;  // (parent, name)
  options.stacks->ForEachStack([&](const std::vector<std::string_view>& stack, int64_t device_ns,
                                   int64_t host_ns, int64_t executions) {
    uint32_t at = 0;
    for (auto frame = stack.rbegin();; ++frame) {
      frames[at].device_ns += device_ns;
      frames[at].host_ns += host_ns;
      frames[at].executions += executions;
      if (frame == stack.rend()) break;
      auto [name, new_name] =
          name_ids.try_emplace(std::string(*frame), static_cast<uint32_t>(names.size()));
      if (new_name) names.emplace_back(*frame);
      auto [child, added] =
          child_of.try_emplace({at, name->second}, static_cast<uint32_t>(frames.size()));
      if (added) {
        frames[at].children.push_back(child->second);
        Frame f;
        f.name = name->second;
        f.parent = at;
        frames.push_back(std::move(f));
      }
      at = child->second;
    }
  });
  const int64_t total = frames[0].device_ns;
  auto time_and_share = [total](int64_t ns) {
    return absl::StrCat(
        JsonString(FormatDuration(static_cast<uint64_t>(ns))), ",",
        JsonString(absl::StrFormat("%.2f%%", total == 0 ? 0.0 : 100.0 * ns / total)));
  };
  std::vector<int64_t> name_ns(names.size(), 0), name_frames(names.size(), 0);
  for (size_t i = 1; i < frames.size(); ++i) {
    if (frames[i].device_ns == 0) continue;
    bool nested = false;  // in a frame of its name: counted there
    for (uint32_t a = frames[i].parent; a != 0 && !nested; a = frames[a].parent) {
      nested = frames[a].name == frames[i].name;
    }
    if (nested) continue;
    name_ns[frames[i].name] += frames[i].device_ns;
    ++name_frames[frames[i].name];
  }
  std::vector<std::string> totals;
  for (size_t n = 0; n < names.size(); ++n) {
    totals.push_back(
        absl::StrCat("[", name_ns[n], ",", time_and_share(name_ns[n]), ",", name_frames[n], "]"));
  }
  std::vector<std::string> out;
  std::vector<uint32_t> index_of(frames.size());  // in `out`
  std::vector<uint32_t> pending = {0};
  while (!pending.empty()) {
    const uint32_t i = pending.back();
    pending.pop_back();
    const Frame& f = frames[i];
    index_of[i] = static_cast<uint32_t>(out.size());
    out.push_back(absl::StrCat("[", f.name, ",", i == 0 ? 0 : index_of[f.parent], ",", f.device_ns,
                               ",", time_and_share(f.device_ns), ",", f.host_ns, ",", f.executions,
                               "]"));
    std::vector<uint32_t> children;
    for (uint32_t c : f.children) {
      if (frames[c].device_ns > 0) children.push_back(c);
    }
    // Pushed the least first: the most device time comes out next.
    std::sort(children.begin(), children.end(), [&](uint32_t a, uint32_t b) {
      const Frame &x = frames[a], &y = frames[b];
      return x.device_ns != y.device_ns ? x.device_ns < y.device_ns : names[x.name] > names[y.name];
    });
    pending.insert(pending.end(), children.begin(), children.end());
  }
  return absl::StrCat("{\"names\":", JsonStrings(names), ",\"frames\":[", absl::StrJoin(out, ","),
                      "],\"totals\":[", absl::StrJoin(totals, ","), "]}");
}

}  // namespace

InitialView ChooseInitialView(const ReportTrace& trace, size_t max_slices) {
  const uint64_t drawn_until = DrawnUntil(trace, max_slices);
  InitialView view;
  view.end_ns = trace.last_ns - trace.first_ns;
  if (!BusiestStep(trace, drawn_until, &view)) BusiestStretch(trace, drawn_until, &view);
  return view;
}

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
  const InitialView initial = ChooseInitialView(trace, options.max_slices);
  return absl::StrCat(
      "{\"capture\":", CaptureJson(trace, summary, options),
      ",\"initial\":{\"start_ns\":", initial.start_ns, ",\"end_ns\":", initial.end_ns,
      ",\"step\":", initial.step, ",\"step_length\":", JsonString(FormatDuration(initial.step_ns)),
      ",\"device\":", JsonString(FormatDuration(initial.device_ns)),
      ",\"stretch\":", initial.busiest_stretch ? "true" : "false", "}",
      ",\"processes\":", ProcessesJson(trace), ",\"summary\":", SummaryJson(summary),
      ",\"names\":", JsonStrings(trace.names), ",\"lanes\":[", absl::StrJoin(lanes, ","),
      "],\"cores\":", CoresJson(trace), ",\"collectives\":", CollectivesJson(options),
      ",\"flame\":", FlameJson(options), ",\"drawn\":{\"slices\":", drawn,
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
