#include "trace/step_window.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
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

// The ids of the events kept so far, of one list: a flag per id where the list's ids are few
// and near each other, as the correlator numbers them (a process's ranges, then its calls, then
// its device events, one after another), else a hash set. (A node-based set took an allocation
// for every event of a fold.)
class KeptIds {
 public:
  template <typename List, typename Id>
  KeptIds(const List& list, Id id_of) {
    if (list.empty()) return;
    uint64_t low = UINT64_MAX, high = 0;
    for (const auto& e : list) {
      low = std::min(low, id_of(e));
      high = std::max(high, id_of(e));
    }
    if (high - low < 4 * uint64_t{list.size()} + 1024) {
      low_ = low;
      flags_.assign(high - low + 1, 0);
    } else {
      sparse_ = true;
      set_.reserve(list.size());
    }
  }
  void Insert(uint64_t id) {
    if (sparse_) {
      set_.insert(id);
    } else if (id >= low_ && id - low_ < flags_.size()) {
      flags_[id - low_] = 1;
    }
  }
  bool Contains(uint64_t id) const {
    if (sparse_) return set_.contains(id);
    return id >= low_ && id - low_ < flags_.size() && flags_[id - low_] != 0;
  }

 private:
  bool sparse_ = false;
  uint64_t low_ = 0;
  std::vector<uint8_t> flags_;
  absl::flat_hash_set<uint64_t> set_;
};

// Moves the elements `kept` takes to the front, in order, and drops the rest.
template <typename List, typename Kept>
void KeepIf(List& list, Kept kept) {
  size_t n = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!kept(list[i])) continue;
    if (n != i) list[n] = std::move(list[i]);
    ++n;
  }
  list.erase(list.begin() + static_cast<std::ptrdiff_t>(n), list.end());
}

// Cuts `p` to the ranges and calls `keep` takes (by start and end), the device events of the
// calls kept (work inside an execution goes with it), and the uncorrelated device events `keep`
// takes; fixes the links that pointed at what went, and the counts of what is left.
template <typename Keep>
void Cut(ProcessTrace& p, Keep keep) {
  KeptIds range_ids(p.ranges, [](const RangeEvent& r) { return r.id; });
  KeepIf(p.ranges, [&](const RangeEvent& r) {
    if (!keep(r.start_ns, r.start_ns + r.duration_ns, true)) return false;
    range_ids.Insert(r.id);
    return true;
  });
  // A range whose parent went keeps no dangling link.
  for (RangeEvent& r : p.ranges) {
    if (r.parent_range != 0 && !range_ids.Contains(r.parent_range)) r.parent_range = 0;
  }
  KeptIds call_ids(p.calls, [](const ApiCall& c) { return c.correlation_id; });
  KeepIf(p.calls, [&](ApiCall& c) {
    if (!keep(c.start_ns, c.start_ns + c.duration_ns, false)) return false;
    if (c.range != 0 && !range_ids.Contains(c.range)) c.range = 0;
    call_ids.Insert(c.correlation_id);
    return true;
  });
  KeptIds device_ids(p.device, [](const DeviceEvent& d) { return d.id; });
  uint64_t uncorrelated = 0;
  KeepIf(p.device, [&](const DeviceEvent& d) {
    // Children follow their parents (trace_model.h): an op goes with its execution.
    const bool kept = d.parent != 0 ? device_ids.Contains(d.parent)
                      : d.correlation_id != 0
                          ? call_ids.Contains(d.correlation_id)
                          : keep(d.start_ns, d.start_ns + d.duration_ns, false);
    if (!kept) return false;
    if (d.parent == 0 && d.correlation_id == 0) ++uncorrelated;
    device_ids.Insert(d.id);
    return true;
  });
  p.device_uncorrelated = uncorrelated;
  KeepIf(p.poll_tallies, [&](const PollTally& t) { return keep(t.time_ns, t.time_ns, false); });
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
