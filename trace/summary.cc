#include "trace/summary.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/terminal_text.h"
#include "trace/api_function.h"
#include "trace/atomic_file.h"
#include "trace/id_index.h"
#include "trace/summary_json.h"
#include "trace/trace_lanes.h"

namespace nrtprof::daemon {
namespace {

// ---- Computing -------------------------------------------------------------------------

constexpr char kStepRangePrefix[] = "ProfilerStep#";
constexpr char kStepRow[] = "ProfilerStep*";

bool CountsAsDeviceTime(const DeviceEvent& d) {
  // Executions, host-initiated transfers and collectives running; the ops and DMA inside an
  // execution are already in its time, also the device profile's I/O DMA (named by exec_id)
  // whose execution is not in the capture. A collective's barrier is not: it is the rank
  // waiting for the others (IsCollectiveWait).
  return d.parent == 0 && (d.kind == DeviceEventKind::kExecution ||
                           (d.kind == DeviceEventKind::kDma && d.exec_id == 0) ||
                           (d.kind == DeviceEventKind::kCollective && d.name == kCcRunning));
}

bool IsCollectiveWait(const DeviceEvent& d) {
  return d.parent == 0 && d.kind == DeviceEventKind::kCollective && d.name == kCcExecBarrier;
}

// "collective wait (AllReduce)" for the runtime's "all_reduce"; "collective wait" when the
// capture does not say which collective.
constexpr char kCollectiveWaitRow[] = "collective wait";
std::string CollectiveWaitRow(absl::string_view cc_op) {
  if (cc_op.empty()) return kCollectiveWaitRow;
  std::string camel;
  bool upper = true;
  for (char c : cc_op) {
    if (c == '_' || c == ' ' || c == '-') {
      upper = true;
      continue;
    }
    camel.push_back(upper && c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c);
    upper = false;
  }
  return absl::StrCat(kCollectiveWaitRow, " (", camel, ")");
}

// The async API's executions of the process scheduled onto an empty queue: no earlier request
// of the queue (AsyncRequests: in flight from its schedule call's return until its work ends)
// still in flight when the execution's schedule call returned.
void CountAsyncExecutions(const ProcessTrace& p, Summary* summary) {
  const std::vector<AsyncRequest> requests = AsyncRequests(p);  // by (core, queue, seq)
  uint64_t busy_until = 0;  // the latest retirement of the queue's requests so far
  for (size_t i = 0; i < requests.size(); ++i) {
    const AsyncRequest& r = requests[i];
    if (i == 0 || r.nc_idx != requests[i - 1].nc_idx || r.xu != requests[i - 1].xu) busy_until = 0;
    if (r.device != nullptr && r.device->kind == DeviceEventKind::kExecution) {
      ++summary->async_executions;
      if (busy_until <= r.scheduled_ns) ++summary->async_executions_queue_empty;
    }
    busy_until = std::max(busy_until, r.retired_ns);
  }
}

// Adds each NeuronCore's busy time in the process to summary->device_busy_ns: the union of its
// top-level device work (executions and transfers; what runs inside them is in their time).
void AddDeviceBusy(const ProcessTrace& p, Summary* summary) {
  std::vector<std::tuple<int32_t, uint64_t, uint64_t>> work;  // core, start, end
  work.reserve(p.device.size());
  for (const DeviceEvent& d : p.device) {
    // A collective's barrier is the core's collectives engine waiting for the other ranks.
    if (d.parent == 0 && !IsCollectiveWait(d)) {
      work.emplace_back(d.nc_idx, d.start_ns, d.start_ns + d.duration_ns);
    }
  }
  if (!std::is_sorted(work.begin(), work.end())) std::sort(work.begin(), work.end());
  for (size_t i = 0; i < work.size();) {
    auto [nc, start, end] = work[i];
    uint64_t busy = 0;
    for (; i < work.size() && std::get<0>(work[i]) == nc; ++i) {
      if (std::get<1>(work[i]) > end) {  // a gap: the run so far is done
        busy += end - start;
        start = std::get<1>(work[i]);
      }
      end = std::max(end, std::get<2>(work[i]));
    }
    summary->device_busy_ns[nc] += busy + (end - start);
  }
}

// The spans of the process's steps ("ProfilerStep#N"), by start. A step is the whole process's:
// work another thread does during it is the step's too (PyTorch's autograd engine runs a
// device's backward on a thread of its own, outside the step's range, which nests on the thread
// that called backward()), while every other range holds only its own thread's work.
class StepSpans {
 public:
  explicit StepSpans(const ProcessTrace& p) {
    std::vector<std::pair<uint64_t, uint64_t>> spans;  // start, end
    for (const RangeEvent& r : p.ranges) {
      if (absl::StartsWith(r.name.str(), kStepRangePrefix)) {
        spans.emplace_back(r.start_ns, r.start_ns + r.duration_ns);
      }
    }
    std::sort(spans.begin(), spans.end());
    uint64_t latest_end = 0;
    for (const auto& [start, end] : spans) {
      latest_end = std::max(latest_end, end);
      starts_.push_back(start);
      latest_end_.push_back(latest_end);
    }
  }
  bool empty() const { return starts_.empty(); }
  // Whether a step of the process runs at `t` (host clock): of the steps that start by `t`,
  // one ends after it.
  bool Contains(uint64_t t) const {
    const size_t n = std::upper_bound(starts_.begin(), starts_.end(), t) - starts_.begin();
    return n > 0 && latest_end_[n - 1] > t;
  }

 private:
  std::vector<uint64_t> starts_;      // sorted
  std::vector<uint64_t> latest_end_;  // the latest end of the steps up to each
};

void SummarizeProcess(const ProcessTrace& p, std::map<std::string, SummaryRow>* rows,
                      Summary* summary, const DeviceTimeCharged& charged_to = nullptr) {
  const IdIndex<RangeEvent, &RangeEvent::id, CaptureVector<RangeEvent>> ranges(p.ranges);
  const IdIndex<ApiCall, &ApiCall::correlation_id, CaptureVector<ApiCall>> calls(p.calls);
  // A name's row, found by the name's id after its first time (no copy or compare of text
  // per event); `rows` is a std::map, whose elements never move.
  absl::flat_hash_map<const void*, SummaryRow*> row_of_name;
  auto row = [&](const Name& name) -> SummaryRow& {
    SummaryRow*& cached = row_of_name[name.id()];
    if (cached != nullptr) return *cached;
    // Steps (nrtprof_step: "ProfilerStep#N") are one row, "ProfilerStep*", as in PyTorch's
    // key_averages: a row per step number would bury the ops.
    const std::string key =
        absl::StartsWith(name.str(), kStepRangePrefix) ? std::string(kStepRow) : name.str();
    SummaryRow& r = (*rows)[key];
    r.name = key;
    cached = &r;
    return r;
  };

  std::vector<uint64_t> children_ns(p.ranges.size(), 0);  // by range: its direct children's time
  for (const RangeEvent& r : p.ranges) {
    if (const RangeEvent* parent = ranges.Find(r.parent_range); parent != nullptr) {
      children_ns[static_cast<size_t>(parent - p.ranges.data())] += r.duration_ns;
    }
  }
  for (size_t i = 0; i < p.ranges.size(); ++i) {
    const RangeEvent& r = p.ranges[i];
    SummaryRow& out = row(r.name);
    ++out.calls;
    out.self_cpu_ns += r.duration_ns > children_ns[i] ? r.duration_ns - children_ns[i] : 0;
    bool inside_same_name = false;
    for (const RangeEvent* up = ranges.Find(r.parent_range); up != nullptr;
         up = ranges.Find(up->parent_range)) {
      if (up->name == r.name) {
        inside_same_name = true;
        break;
      }
    }
    if (!inside_same_name) out.cpu_total_ns += r.duration_ns;
  }

  for (const ApiCall& c : p.calls) {
    if (IsCompletionPoll(c.function)) {
      ++summary->completion_polls_recorded;
      summary->completion_polls += 1 + c.polls;
    }
    if (c.range != 0 && ranges.Find(c.range) != nullptr) continue;
    SummaryRow& out = row(c.name);
    out.calls += 1 + c.polls;  // a recorded poll stands for the polls before it too
    out.self_cpu_ns += c.duration_ns;
    out.cpu_total_ns += c.duration_ns;
  }
  // A thread's polls after its last recorded one: calls of their function, none recorded.
  for (const PollTally& t : p.poll_tallies) {
    summary->completion_polls += t.polls;
    row(t.name).calls += t.polls;
  }

  // An async request's wait in its queue, charged to the row its device time is.
  auto queue_wait = [](const DeviceEvent& d, const ApiCall& call, SummaryRow* row) {
    if (d.nrta_seq == 0 || d.kind == DeviceEventKind::kCollective) return;
    const uint64_t returned = call.start_ns + call.duration_ns;
    row->queue_wait_ns += d.start_ns > returned ? d.start_ns - returned : 0;
    ++row->queue_waits;
  };
  // A collective's wait for the other ranks (its barrier) is a row of its own, by collective,
  // never device time of the op that scheduled it nor of the ranges around it. The runtime
  // names the collective on its running event; the barrier of the same request has it too.
  // A step's device time is the process's during it: work of a call on another thread (or
  // outside every range) made while a step ran is charged to the steps' row too (StepSpans).
  const StepSpans steps(p);
  SummaryRow* step_row = nullptr;
  if (!steps.empty()) {
    step_row = &(*rows)[kStepRow];
    step_row->name = kStepRow;
  }
  auto charge_step = [&](const ApiCall& call, const DeviceEvent& d) {
    if (steps.Contains(call.start_ns)) step_row->device_total_ns += d.duration_ns;
  };
  absl::flat_hash_map<uint64_t, Name> cc_op_of_request;  // by nrta_seq
  for (const DeviceEvent& d : p.device) {
    if (d.kind == DeviceEventKind::kCollective && d.nrta_seq != 0 && !d.model_name.empty()) {
      cc_op_of_request.emplace(d.nrta_seq, d.model_name);
    }
  }
  for (const DeviceEvent& d : p.device) {
    if (IsCollectiveWait(d)) {
      Name op = d.model_name;
      if (auto it = cc_op_of_request.find(d.nrta_seq); op.empty() && it != cc_op_of_request.end()) {
        op = it->second;
      }
      const std::string key = CollectiveWaitRow(op.empty() ? "" : op.str());
      SummaryRow& wait = (*rows)[key];
      wait.name = key;
      ++wait.calls;
      wait.self_device_ns += d.duration_ns;
      wait.device_total_ns += d.duration_ns;
      if (charged_to) charged_to(d, wait.name);
      continue;
    }
    if (!CountsAsDeviceTime(d)) continue;
    // A collective's running is device time of the op that scheduled it; its time before is
    // the barrier's (no queue wait of its own), and it is not in the async executions' lines.
    const bool collective = d.kind == DeviceEventKind::kCollective;
    if (d.nrta_seq != 0 && !collective) ++summary->async_device_events;
    const ApiCall* call = d.correlation_id != 0 ? calls.Find(d.correlation_id) : nullptr;
    if (call == nullptr) {
      ++summary->uncorrelated_device_events;
      summary->uncorrelated_device_ns += d.duration_ns;
      if (charged_to) charged_to(d, "");
      continue;
    }
    const RangeEvent* range = ranges.Find(call->range);
    if (range == nullptr) {
      SummaryRow& out = row(call->name);
      out.self_device_ns += d.duration_ns;
      out.device_total_ns += d.duration_ns;
      queue_wait(d, *call, &out);
      if (charged_to) charged_to(d, out.name);
      if (step_row != nullptr) charge_step(*call, d);
      continue;
    }
    SummaryRow& self = row(range->name);
    self.self_device_ns += d.duration_ns;
    queue_wait(d, *call, &self);
    if (charged_to) charged_to(d, self.name);
    // Once per row, however many ranges of a name (or steps) enclose it.
    absl::InlinedVector<const SummaryRow*, 8> charged;
    for (; range != nullptr; range = ranges.Find(range->parent_range)) {
      SummaryRow& enclosing = row(range->name);
      if (std::find(charged.begin(), charged.end(), &enclosing) == charged.end()) {
        charged.push_back(&enclosing);
        enclosing.device_total_ns += d.duration_ns;
      }
    }
    if (step_row != nullptr && std::find(charged.begin(), charged.end(), step_row) == charged.end()) {
      charge_step(*call, d);
    }
  }
  CountAsyncExecutions(p, summary);
  AddDeviceBusy(p, summary);
  summary->drops += p.drops;
  if (p.cut_off) ++summary->cut_off_processes;
  for (const std::string& notice : p.notices) {
    // The parts of a process read in parts may each say the same: once is enough.
    std::string line = absl::StrCat("pid ", p.pid, " (", p.executable, "): ", notice);
    if (std::find(summary->notices.begin(), summary->notices.end(), line) ==
        summary->notices.end()) {
      summary->notices.push_back(std::move(line));
    }
  }
}

// ---- Formatting ------------------------------------------------------------------------

std::vector<SummaryRow> Sorted(const Summary& s, SummarySortKey key, int limit) {
  std::vector<SummaryRow> rows = s.rows;
  auto value = [key](const SummaryRow& r) -> uint64_t {
    switch (key) {
      case SummarySortKey::kSelfDevice:
        return r.self_device_ns;
      case SummarySortKey::kDeviceTotal:
        return r.device_total_ns;
      case SummarySortKey::kSelfCpu:
        return r.self_cpu_ns;
      case SummarySortKey::kCpuTotal:
        return r.cpu_total_ns;
      case SummarySortKey::kCalls:
        return r.calls;
      case SummarySortKey::kName:
        return 0;
    }
    return 0;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const SummaryRow& a, const SummaryRow& b) {
    if (value(a) != value(b)) return value(a) > value(b);
    return a.name < b.name;
  });
  if (limit > 0 && rows.size() > static_cast<size_t>(limit)) rows.resize(limit);
  return rows;
}

uint64_t Average(uint64_t total, uint64_t count) { return count == 0 ? 0 : total / count; }

std::string Percent(uint64_t part, uint64_t whole) {
  return absl::StrFormat("%.2f%%", whole == 0 ? 0.0 : 100.0 * part / whole);
}

std::string DropsDetail(const DropCounts& d) {
  std::vector<std::string> parts;
  for (auto [name, n] : std::initializer_list<std::pair<const char*, uint64_t>>{
           {"ring_full", d.ring_full},
           {"daemon_away", d.daemon_away},
           {"spool_full", d.spool_full},
           {"device_overwritten", d.device_overwritten},
           {"oversized", d.oversized},
           {"no_memory", d.no_memory},
           {"device_malformed", d.device_malformed},
           {"daemon_overflow", d.daemon_overflow},
           {"no_clock_sync", d.no_clock_sync},
           {"process_died", d.process_died}}) {
    if (n != 0) parts.push_back(absl::StrCat(name, " ", n));
  }
  return parts.empty() ? "" : absl::StrCat(" (", absl::StrJoin(parts, ", "), ")");
}

// A name as the text table shows it: on one line whatever it holds (control characters as
// \n, \t, \0, \x1b, \x7f..., terminal_text.h), bytes that are not UTF-8 as U+FFFD, and cut to
// `width` bytes ending in "..." at a character boundary if longer.
std::string TableName(const std::string& name, size_t width) {
  return TerminalTextClipped(name, width);
}

// What was captured, where and when, above the table:
//   Capture 20261203-101500 on trn1: 2026-12-03 10:15:00.125 UTC, window 1.234s
//   pid 4242: python3 train.py --steps 10     ("pid 4242 on HOST: ..." when there are several)
//   Totals: 120345 events, Self CPU 1.100s, Self NEURON 0.900s
std::string Header(const Summary& s) {
  if (s.capture_id.empty() && s.processes.empty()) return "";  // an older summary.json
  constexpr size_t kShownProcesses = 8;
  constexpr size_t kCommandWidth = 160;
  std::vector<std::string> hosts;
  for (const SummaryProcess& p : s.processes) {
    if (!p.host.empty() && std::find(hosts.begin(), hosts.end(), p.host) == hosts.end()) {
      hosts.push_back(p.host);
    }
  }
  std::string out = "Capture";
  if (!s.capture_id.empty()) absl::StrAppend(&out, " ", TableName(s.capture_id, 64));
  if (!hosts.empty()) {
    absl::StrAppend(&out, " on ", TableName(absl::StrJoin(hosts, ", "), kCommandWidth));
  }
  out += ":";
  if (s.window_start_unix_ns != 0) {
    absl::StrAppend(&out, " ",
                    absl::FormatTime("%Y-%m-%d %H:%M:%E3S UTC",
                                     absl::FromUnixNanos(static_cast<int64_t>(s.window_start_unix_ns)),
                                     absl::UTCTimeZone()),
                    ",");
  }
  absl::StrAppend(&out, " window ", FormatDuration(s.window_ns), "\n");
  if (!s.trigger.rule.empty()) {
    absl::StrAppend(&out, "Triggered by rule ", TableName(s.trigger.rule, 64), " (",
                    TableName(s.trigger.condition, kCommandWidth), "): ",
                    TableName(s.trigger.reason, 2 * kCommandWidth), "\n");
  }
  for (size_t i = 0; i < s.processes.size() && i < kShownProcesses; ++i) {
    // Processes of several hosts (capture --hosts) may share a pid: each says its host.
    const std::string where =
        hosts.size() > 1 && !s.processes[i].host.empty()
            ? absl::StrCat(" on ", TableName(s.processes[i].host, 64))
            : "";
    absl::StrAppend(&out, "pid ", s.processes[i].pid, where, ": ",
                    TableName(s.processes[i].command, kCommandWidth),
                    s.processes[i].job.empty()
                        ? ""
                        : absl::StrCat(" (job ", TableName(s.processes[i].job, 64), ")"),
                    "\n");
  }
  if (s.processes.size() > kShownProcesses) {
    absl::StrAppend(&out, "... and ", s.processes.size() - kShownProcesses, " more processes\n");
  }
  absl::StrAppend(&out, "Totals: ", s.events, " events, Self CPU ",
                  FormatDuration(s.self_cpu_total_ns), ", Self NEURON ",
                  FormatDuration(s.self_device_total_ns), "\n");
  return out;
}

// The queue wait column's cell: the row's average, or "-" without async work.
std::string QueueWaitCell(const SummaryRow& r) {
  return r.queue_waits == 0 ? "-" : FormatDuration(Average(r.queue_wait_ns, r.queue_waits));
}

// Under the table, for a capture with async work: how much of the window each NeuronCore was
// idle, and how often an execution found its queue empty (the device waiting for the host).
//   NEURON idle of the 2.000ms window: NeuronCore 0 45.00% (1 - busy/window; overlaps once)
//   Async executions scheduled onto an empty queue: 1 of 3 (the device waited for the host)
std::string AsyncLines(const Summary& s) {
  std::string out;
  if (!s.device_busy_ns.empty()) {
    std::vector<std::string> cores;
    for (const auto& [nc, busy] : s.device_busy_ns) {
      const uint64_t idle = s.window_ns - std::min(busy, s.window_ns);
      cores.push_back(absl::StrCat("NeuronCore ", nc, " ", Percent(idle, s.window_ns)));
    }
    absl::StrAppend(&out, "NEURON idle of the ", FormatDuration(s.window_ns), " window: ",
                    absl::StrJoin(cores, ", "), " (1 - busy/window; overlapping work once)\n");
  }
  absl::StrAppend(&out, "Async executions scheduled onto an empty queue: ",
                  s.async_executions_queue_empty, " of ", s.async_executions,
                  " (no earlier request of the queue in flight: the device waited for the host)\n");
  if (s.completion_polls != 0) {
    absl::StrAppend(&out, "Completion polls: ", s.completion_polls, ", of which ",
                    s.completion_polls_recorded,
                    " recorded (those that saw their request done; the rest are counted in their "
                    "rows' calls, not timed)\n");
  }
  return out;
}

std::string FormatText(const Summary& s, const std::vector<SummaryRow>& rows) {
  // PyTorch's layout: right-aligned columns two spaces apart, dashed rules, the name column as
  // wide as the longest name plus 4, at most 55 (longer names end in "...").
  constexpr size_t kMaxNameWidth = 55;
  size_t name_width = 4;
  for (const SummaryRow& r : rows) {
    name_width = std::max(name_width, TableName(r.name, kMaxNameWidth).size());
  }
  name_width = std::min(name_width + 4, kMaxNameWidth);
  std::vector<std::string> headers = {
      "Name",          "Self CPU",     "CPU total",       "Self NEURON",
      "Self NEURON %", "NEURON total", "NEURON time avg", "# of Calls"};
  // With async work, its queue wait before the count (the last column, as in the CSV).
  const bool async = s.async_device_events != 0;
  if (async) headers.insert(headers.end() - 1, "Queue wait avg");
  std::vector<size_t> widths = {name_width};
  for (size_t i = 1; i < headers.size(); ++i)
    widths.push_back(std::max<size_t>(12, headers[i].size()));
  auto line = [&](const std::vector<std::string>& cells) {
    std::vector<std::string> padded;
    for (size_t i = 0; i < cells.size(); ++i) {
      padded.push_back(
          std::string(widths[i] > cells[i].size() ? widths[i] - cells[i].size() : 0, ' ') +
          cells[i]);
    }
    return absl::StrCat(absl::StrJoin(padded, "  "), "\n");
  };
  std::vector<std::string> dashes;
  for (size_t w : widths) dashes.push_back(std::string(w, '-'));
  const std::string rule = line(dashes);

  std::string out = Header(s) + rule + line(headers) + rule;
  for (const SummaryRow& r : rows) {
    std::vector<std::string> cells = SummaryCells(s, r);
    cells[0] = TableName(r.name, name_width);
    out += line(cells);
  }
  out += rule;
  absl::StrAppend(&out, "Self CPU time total: ", FormatDuration(s.self_cpu_total_ns), "\n");
  absl::StrAppend(&out, "Self NEURON time total: ", FormatDuration(s.self_device_total_ns), "\n");
  // Of which the ranks' waiting for each other (every row, whatever --limit shows).
  uint64_t wait_ns = 0, waits = 0;
  for (const SummaryRow& r : s.rows) {
    if (!absl::StartsWith(r.name, kCollectiveWaitRow)) continue;
    wait_ns += r.self_device_ns;
    waits += r.calls;
  }
  if (waits != 0) {
    absl::StrAppend(&out, "Collective wait: ", FormatDuration(wait_ns), " of it (",
                    Percent(wait_ns, s.self_device_total_ns), ") in ", waits,
                    " collectives, the ranks waiting for each other: not compute\n");
  }
  if (s.uncorrelated_device_events != 0) {
    absl::StrAppend(&out, "Uncorrelated NEURON time: ", FormatDuration(s.uncorrelated_device_ns),
                    " in ", s.uncorrelated_device_events, " device events (in no row)\n");
  }
  if (async) out += AsyncLines(s);
  absl::StrAppend(&out, "Events dropped: ", s.drops.total(), DropsDetail(s.drops), "\n");
  if (s.drops.total() != 0) {
    // Host and device events are lost for the same reasons: the lanes say which were lost,
    // so a reader can check the runtime calls against what the program made.
    const LaneDropCounts& l = s.drops.by_lane;
    absl::StrAppend(&out, "Events dropped by lane: framework ", l.framework, ", runtime ",
                    l.runtime, ", hardware ", l.hardware, "\n");
  }
  if (s.cut_off_processes != 0) {
    absl::StrAppend(&out, "Processes cut off: ", s.cut_off_processes,
                    " ended before their last events arrived (killed, or the exit flush ran out "
                    "of time); what they had not sent is missing and not counted above\n");
  }
  // What the profiler could not record is part of the answer, not a footnote on stderr.
  for (const std::string& notice : s.notices) {
    absl::StrAppend(&out, "Not recorded: ", TerminalText(notice), "\n");
  }
  return out;
}

// With async work, queue_wait_avg_ns before calls (empty for a row without async work); a
// capture without keeps the 7 columns it always had.
std::string FormatCsv(const Summary& s, const std::vector<SummaryRow>& rows) {
  const bool async = s.async_device_events != 0;
  std::string out = absl::StrCat("name,self_cpu_ns,cpu_total_ns,self_device_ns,device_total_ns,",
                                 "device_avg_ns,", async ? "queue_wait_avg_ns," : "", "calls\n");
  for (const SummaryRow& r : rows) {
    std::string wait;
    if (async) {
      if (r.queue_waits != 0) wait = absl::StrCat(Average(r.queue_wait_ns, r.queue_waits));
      wait += ",";
    }
    absl::StrAppend(&out, CsvField(r.name), ",", r.self_cpu_ns, ",", r.cpu_total_ns, ",",
                    r.self_device_ns, ",", r.device_total_ns, ",",
                    Average(r.device_total_ns, r.calls), ",", wait, r.calls, "\n");
  }
  return out;
}


}  // namespace

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

absl::StatusOr<SummarySortKey> ParseSummarySortKey(absl::string_view key) {
  if (key == "self_device") return SummarySortKey::kSelfDevice;
  if (key == "device_total") return SummarySortKey::kDeviceTotal;
  if (key == "self_cpu") return SummarySortKey::kSelfCpu;
  if (key == "cpu_total") return SummarySortKey::kCpuTotal;
  if (key == "calls") return SummarySortKey::kCalls;
  if (key == "name") return SummarySortKey::kName;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown sort key '", key,
                   "' (one of self_device, device_total, self_cpu, cpu_total, calls, name)"));
}

absl::StatusOr<SummaryFormat> ParseSummaryFormat(absl::string_view format) {
  if (format == "text") return SummaryFormat::kText;
  if (format == "csv") return SummaryFormat::kCsv;
  if (format == "json") return SummaryFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown summary format '", format, "' (one of text, csv, json)"));
}

std::string FormatDuration(uint64_t ns) {
  const double us = ns / 1e3;
  if (us >= 1e6) return absl::StrFormat("%.3fs", us / 1e6);
  if (us >= 1e3) return absl::StrFormat("%.3fms", us / 1e3);
  return absl::StrFormat("%.3fus", us);
}

namespace {

// The header's facts of one process: its command line and host, its events, and their span
// (from the events themselves, so that a summary recomputed from the trace file has the same
// window), widening [*first, *last].
void DescribeProcess(const ProcessTrace& p, Summary* summary, uint64_t* first, uint64_t* last) {
  auto span = [&](uint64_t start, uint64_t duration) {
    *first = std::min(*first, start);
    *last = std::max(*last, start + duration);
  };
  if (!p.continues) {  // a later part of the process described last (ProcessTrace::continues)
    summary->processes.push_back({p.pid, p.host, absl::StrJoin(p.command_line, " "), p.job});
    std::string& command = summary->processes.back().command;
    if (command.empty()) command = p.executable.empty() ? "(command unknown)" : p.executable;
  }
  summary->events += p.ranges.size() + p.calls.size() + p.device.size();
  for (const RangeEvent& r : p.ranges) span(r.start_ns, r.duration_ns);
  for (const ApiCall& c : p.calls) span(c.start_ns, c.duration_ns);
  for (const DeviceEvent& d : p.device) span(d.start_ns, d.duration_ns);
}

// The window from the first event to the last, on the wall clock if the trace knows it.
void DescribeWindow(const Trace& trace, uint64_t first, uint64_t last, Summary* summary) {
  if (first > last) return;
  summary->window_ns = last - first;
  if (trace.realtime_offset_ns != 0) {
    summary->window_start_unix_ns = static_cast<uint64_t>(static_cast<int64_t>(first) +
                                                          trace.realtime_offset_ns);
  }
}

void CloseSummary(std::map<std::string, SummaryRow>& rows, Summary& summary) {
  for (auto& [name, row] : rows) {
    summary.self_cpu_total_ns += row.self_cpu_ns;
    summary.self_device_total_ns += row.self_device_ns;
    summary.rows.push_back(std::move(row));
  }
}

}  // namespace

Summary ComputeSummary(const Trace& trace) {
  SummaryBuilder builder;
  builder.Add(trace);
  return builder.Finish(trace);
}

void SummaryBuilder::Add(const Trace& trace) {
  for (const ProcessTrace& p : trace.processes) {
    DescribeProcess(p, &summary_, &first_ns_, &last_ns_);
    SummarizeProcess(p, &rows_, &summary_);
  }
}

Summary SummaryBuilder::Finish(const Trace& trace) {
  Summary summary = std::move(summary_);
  summary.capture_id = trace.capture_id;
  summary.trigger = trace.trigger;
  DescribeWindow(trace, first_ns_, last_ns_, &summary);
  CloseSummary(rows_, summary);
  return summary;
}

Summary ComputeProcessSummary(const ProcessTrace& process, const DeviceTimeCharged& charged_to) {
  Summary summary;
  std::map<std::string, SummaryRow> rows;
  SummarizeProcess(process, &rows, &summary, charged_to);
  CloseSummary(rows, summary);
  return summary;
}

std::vector<std::string> SummaryCells(const Summary& s, const SummaryRow& r) {
  std::vector<std::string> cells = {r.name,
                                    FormatDuration(r.self_cpu_ns),
                                    FormatDuration(r.cpu_total_ns),
                                    FormatDuration(r.self_device_ns),
                                    Percent(r.self_device_ns, s.self_device_total_ns),
                                    FormatDuration(r.device_total_ns),
                                    FormatDuration(Average(r.device_total_ns, r.calls))};
  if (s.async_device_events != 0) cells.push_back(QueueWaitCell(r));
  cells.push_back(absl::StrCat(r.calls));
  return cells;
}

std::string FormatSummary(const Summary& summary, SummarySortKey sort, SummaryFormat format,
                          int limit) {
  const std::vector<SummaryRow> rows = Sorted(summary, sort, limit);
  switch (format) {
    case SummaryFormat::kText:
      return FormatText(summary, rows);
    case SummaryFormat::kCsv:
      return FormatCsv(summary, rows);
    case SummaryFormat::kJson:
      return FormatJson(summary, rows);
  }
  return "";
}


namespace {

class SummaryStream : public TraceStream {
 public:
  SummaryStream(SummarySink* sink, std::string output_dir)
      : sink_(sink), output_dir_(std::move(output_dir)) {}
  absl::Status Add(const Trace&) override { return absl::OkStatus(); }
  absl::Status Finish(const Trace& trace, const Summary& summary,
                      std::vector<std::string>* files) override {
    return sink_->Write(trace, summary, output_dir_, files);
  }

 private:
  SummarySink* const sink_;
  const std::string output_dir_;
};

}  // namespace

std::unique_ptr<TraceStream> SummarySink::OpenStream(const std::string& output_dir) {
  return std::make_unique<SummaryStream>(this, output_dir);
}

absl::Status SummarySink::Write(const Trace& trace, const Summary& summary,
                                const std::string& output_dir, std::vector<std::string>* files) {
  absl::Status first;
  for (auto [name, format] : std::initializer_list<std::pair<const char*, SummaryFormat>>{
           {"summary.txt", SummaryFormat::kText},
           {"summary.csv", SummaryFormat::kCsv},
           {"summary.json", SummaryFormat::kJson}}) {
    absl::Status s =
        WriteFileAtomically(absl::StrCat(output_dir, "/", name),
                            FormatSummary(summary, SummarySortKey::kSelfDevice, format));
    if (s.ok()) {
      files->push_back(name);
    } else if (first.ok()) {
      first = s;
    }
  }
  return first;
}

}  // namespace nrtprof::daemon
