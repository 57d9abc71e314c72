#include "trace/step_window.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <unordered_set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {

void NoteExecutionsHeldByProgram(ProcessTrace* trace) {
  static constexpr absl::string_view kNotice = "device events of ";
  trace->notices.erase(std::remove_if(trace->notices.begin(), trace->notices.end(),
                                      [](const std::string& n) {
                                        return absl::StartsWith(n, kNotice);
                                      }),
                       trace->notices.end());
  trace->executions_held_by_program = 0;
  if (!trace->device_events_with_program) return;
  std::vector<uint64_t> ran;  // correlation ids of executions with device events
  for (const DeviceEvent& d : trace->device) {
    if (d.kind == DeviceEventKind::kExecution && d.correlation_id != 0) {
      ran.push_back(d.correlation_id);
    }
  }
  std::sort(ran.begin(), ran.end());
  uint64_t executions = 0, without = 0;
  for (const ApiCall& c : trace->calls) {
    if ((c.function != nrtprof::API_NRT_EXECUTE && c.function != nrtprof::API_NRT_EXECUTE_REPEAT) ||
        c.status != 0) {
      continue;
    }
    ++executions;
    if (!std::binary_search(ran.begin(), ran.end(), c.correlation_id)) ++without;
  }
  if (without == 0) return;
  trace->executions_held_by_program = without;
  trace->notices.push_back(absl::StrCat(
      kNotice, without, " of its ", executions,
      trace->executions_held_lost
          ? " executions: the program ran the runtime's system trace itself "
            "(nrt_sys_trace_start) and ended without fetching them: they are lost"
          : " executions: the program runs the runtime's system trace itself "
            "(nrt_sys_trace_start), and nrtprof receives them only as the program fetches "
            "them, at the latest when it ends"));
}

namespace {

// Cuts `p` to the ranges and calls `keep` takes (by start and end), the device events of the
// calls kept (work inside an execution goes with it), and the uncorrelated device events `keep`
// takes; fixes the links that pointed at what went, and the counts of what is left.
template <typename Keep>
void Cut(ProcessTrace& p, Keep keep) {
  CaptureVector<RangeEvent> ranges;
  for (RangeEvent& r : p.ranges) {
    if (keep(r.start_ns, r.start_ns + r.duration_ns, true)) ranges.push_back(std::move(r));
  }
  // A range whose parent went keeps no dangling link.
  std::unordered_set<uint64_t> range_ids;
  for (const RangeEvent& r : ranges) range_ids.insert(r.id);
  for (RangeEvent& r : ranges) {
    if (r.parent_range != 0 && range_ids.count(r.parent_range) == 0) r.parent_range = 0;
  }
  CaptureVector<ApiCall> calls;
  std::unordered_set<uint64_t> call_ids;
  for (ApiCall& c : p.calls) {
    if (!keep(c.start_ns, c.start_ns + c.duration_ns, false)) continue;
    if (c.range != 0 && range_ids.count(c.range) == 0) c.range = 0;
    call_ids.insert(c.correlation_id);
    calls.push_back(std::move(c));
  }
  CaptureVector<DeviceEvent> device;
  std::unordered_set<uint64_t> device_ids;
  uint64_t uncorrelated = 0;
  for (DeviceEvent& d : p.device) {
    // Children follow their parents (trace_model.h): an op goes with its execution.
    const bool kept = d.parent != 0 ? device_ids.count(d.parent) != 0
                      : d.correlation_id != 0
                          ? call_ids.count(d.correlation_id) != 0
                          : keep(d.start_ns, d.start_ns + d.duration_ns, false);
    if (!kept) continue;
    if (d.parent == 0 && d.correlation_id == 0) ++uncorrelated;
    device_ids.insert(d.id);
    device.push_back(std::move(d));
  }
  p.ranges = std::move(ranges);
  p.calls = std::move(calls);
  p.device = std::move(device);
  p.device_uncorrelated = uncorrelated;
  // The process's count of executions waiting for the program was of all it sent: now the
  // window's.
  if (p.device_events_with_program) NoteExecutionsHeldByProgram(&p);
}

}  // namespace

void ClipToSteps(uint64_t first, uint64_t last, Trace* trace, std::vector<std::string>* notes) {
  std::vector<ProcessTrace> kept;
  uint64_t trace_start = std::numeric_limits<uint64_t>::max(), trace_end = 0;
  for (ProcessTrace& p : trace->processes) {
    uint64_t begin = std::numeric_limits<uint64_t>::max(), end = 0, steps = 0;
    for (const RangeEvent& r : p.ranges) {
      absl::string_view name = r.name;
      uint64_t step = 0;
      if (!absl::ConsumePrefix(&name, "ProfilerStep#") || !absl::SimpleAtoi(name, &step) ||
          step < first || step > last) {
        continue;
      }
      ++steps;
      begin = std::min(begin, r.start_ns);
      end = std::max(end, r.start_ns + r.duration_ns);
    }
    if (steps == 0) {
      notes->push_back(absl::StrCat("pid ", p.pid, " (", p.executable, "): none of steps ", first,
                                    " to ", last, " in the window; left out"));
      continue;
    }
    if (steps < last - first + 1) {
      notes->push_back(absl::StrCat("pid ", p.pid, " (", p.executable, "): ", steps, " of the ",
                                    last - first + 1, " steps (the others came after the window ended, or never)"));
    }
    // Ranges that start and end within the steps' span; calls and uncorrelated device events
    // that start within it.
    Cut(p, [&](uint64_t start, uint64_t stop, bool range) {
      return start >= begin && start <= end && (!range || stop <= end);
    });
    trace_start = std::min(trace_start, begin);
    trace_end = std::max(trace_end, end);
    kept.push_back(std::move(p));
  }
  trace->processes = std::move(kept);
  if (trace_end != 0) {
    trace->start_ns = trace_start;
    trace->end_ns = trace_end;
  }
}

void ClipToEnds(uint64_t begin, uint64_t end, Trace* trace,
                const std::function<int64_t(const ProcessTrace&)>& shift) {
  for (ProcessTrace& p : trace->processes) {
    const int64_t by = shift ? shift(p) : 0;
    Cut(p, [&](uint64_t, uint64_t stop, bool) {
      const uint64_t t = stop + static_cast<uint64_t>(by);  // modulo 2^64, as the clocks
      return t >= begin && t < end;
    });
  }
  if (trace->end_ns != 0) {
    trace->start_ns = std::max(trace->start_ns, begin);
    trace->end_ns = std::max(trace->start_ns, std::min(trace->end_ns, end));
  }
}

}  // namespace nrtprof::daemon
