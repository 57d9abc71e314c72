#include "trace/correlator.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <memory>
#include <numeric>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "trace/process_correlator.h"
#include "trace/step_window.h"
#include "trace/trace_name.h"

namespace nrtprof::daemon {
namespace {

// What one process lost during the capture, from its streams' captures (one per stream, in
// the order they came). The shim's counters are the process's, cumulative across its streams:
// their growth over the capture is the latest value less the earliest known at its start. The
// daemon's own counts add up. Events the shim numbered as sent and the daemon never received
// (a stream cut off at exit, or a gap) are counted in daemon_away, by lane.
DropCounts ProcessDrops(const std::vector<const ProcessCapture*>& streams) {
  DropCounts d;
  if (streams.size() == 1) {
    d = streams[0]->drops;
  } else {
    DropCounts begin, end;
    bool begin_known = false;
    for (const ProcessCapture* c : streams) {
      end = CombineDropCounts(end, c->shim_at_end, [](uint64_t a, uint64_t b) { return std::max(a, b); });
      if (c->shim_at_begin_known) {
        begin = begin_known ? CombineDropCounts(begin, c->shim_at_begin,
                                                [](uint64_t a, uint64_t b) { return std::min(a, b); })
                            : c->shim_at_begin;
        begin_known = true;
      }
      d += c->daemon_drops;
    }
    d += CombineDropCounts(end, begin, [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; });
  }
  // Streams that brought no batch in the capture (one opened for a final batch that was not
  // needed after all) say nothing of what was sent.
  std::vector<const ProcessCapture*> with_batches;
  for (const ProcessCapture* c : streams) {
    if (c->batches_received != 0) with_batches.push_back(c);
  }
  if (!with_batches.empty() &&
      std::all_of(with_batches.begin(), with_batches.end(),
                  [](const ProcessCapture* c) { return c->sent_known; })) {
    LaneDropCounts begin = with_batches[0]->sent_at_begin, end, received;
    for (const ProcessCapture* c : with_batches) {
      begin.framework = std::min(begin.framework, c->sent_at_begin.framework);
      begin.runtime = std::min(begin.runtime, c->sent_at_begin.runtime);
      begin.hardware = std::min(begin.hardware, c->sent_at_begin.hardware);
      end.framework = std::max(end.framework, c->sent_at_end.framework);
      end.runtime = std::max(end.runtime, c->sent_at_end.runtime);
      end.hardware = std::max(end.hardware, c->sent_at_end.hardware);
      received += c->received_by_lane;
    }
    auto unreceived = [](uint64_t b, uint64_t e, uint64_t r) { return e > b + r ? e - b - r : 0; };
    LaneDropCounts lost;
    lost.framework = unreceived(begin.framework, end.framework, received.framework);
    lost.runtime = unreceived(begin.runtime, end.runtime, received.runtime);
    lost.hardware = unreceived(begin.hardware, end.hardware, received.hardware);
    d.daemon_away += lost.total();
    d.by_lane += lost;
  }
  // A process that ended without its final batch, whose rings file says what it made: made,
  // less what its batches said they had sent and counted as dropped, was never sent.
  const bool final = std::any_of(streams.begin(), streams.end(),
                                 [](const ProcessCapture* c) { return c->final; });
  LaneDropCounts made, sent, counted;
  bool made_known = false;
  for (const ProcessCapture* c : streams) {
    if (c->records_made_known) {
      made.framework = std::max(made.framework, c->records_made.framework);
      made.runtime = std::max(made.runtime, c->records_made.runtime);
      made_known = true;
    }
    sent.framework = std::max(sent.framework, c->sent_at_end.framework);
    sent.runtime = std::max(sent.runtime, c->sent_at_end.runtime);
    counted.framework = std::max(counted.framework, c->shim_at_end.by_lane.framework);
    counted.runtime = std::max(counted.runtime, c->shim_at_end.by_lane.runtime);
  }
  if (!final && made_known) {
    auto unsent = [](uint64_t m, uint64_t s, uint64_t c) { return m > s + c ? m - s - c : 0; };
    LaneDropCounts died;
    died.framework = unsent(made.framework, sent.framework, counted.framework);
    died.runtime = unsent(made.runtime, sent.runtime, counted.runtime);
    d.process_died += died.total();
    d.by_lane += died;
  }
  return d;
}

// A process that reconnected during the capture (its stream broke, the shim opened another)
// sent two streams: one ProcessTrace, its events from both. Both name their events in the
// same NameTable (the Trace's).
void Merge(ProcessTrace from, ProcessTrace* into) {
  auto append = [](auto* to, auto* more) {
    to->insert(to->end(), std::make_move_iterator(more->begin()),
               std::make_move_iterator(more->end()));
  };
  append(&into->ranges, &from.ranges);
  append(&into->calls, &from.calls);
  append(&into->device, &from.device);
  append(&into->models, &from.models);
  append(&into->poll_tallies, &from.poll_tallies);
  std::stable_sort(into->poll_tallies.begin(), into->poll_tallies.end(),
                   [](const PollTally& a, const PollTally& b) { return a.time_ns < b.time_ns; });
  for (std::string& notice : from.notices) {
    if (std::find(into->notices.begin(), into->notices.end(), notice) == into->notices.end()) {
      into->notices.push_back(std::move(notice));
    }
  }
  std::stable_sort(into->ranges.begin(), into->ranges.end(),
                   [](const RangeEvent& a, const RangeEvent& b) {
                     return a.tid != b.tid ? a.tid < b.tid : a.start_ns < b.start_ns;
                   });
  std::stable_sort(into->calls.begin(), into->calls.end(),
                   [](const ApiCall& a, const ApiCall& b) { return a.start_ns < b.start_ns; });
  std::stable_sort(into->device.begin(), into->device.end(),
                   [](const DeviceEvent& a, const DeviceEvent& b) {
                     if (a.nc_idx != b.nc_idx) return a.nc_idx < b.nc_idx;
                     if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
                     return (a.parent == 0) > (b.parent == 0);
                   });
  into->drops += from.drops;
  // Cut off only if no stream of it brought the final batch: an earlier stream that broke
  // resent what it had not had acknowledged on the later one.
  into->cut_off = into->cut_off && from.cut_off;
  into->events_received += from.events_received;
  into->device_uncorrelated += from.device_uncorrelated;
  into->batches_missing += from.batches_missing;
}

// Frees a stream's events once its part of the Trace is built.
void Consume(ProcessCapture* done) {
  IngestedEvents().swap(done->events);
  std::vector<IngestedEvent>().swap(done->handle_events);
  std::unordered_map<uint32_t, std::string>().swap(done->strings);
  std::unordered_map<uint32_t, std::vector<uint32_t>>().swap(done->stacks);
  std::vector<IngestedModel>().swap(done->models);
}

// A program that runs the runtime's system trace itself hands its device events to the shim
// only as it fetches them (shim/backend/sys_trace_arbiter.h): executions of such a window without
// device events say why, as what the shim could not record does.
void NoteDeviceEventsWithTheProgram(const std::vector<const ProcessCapture*>& streams,
                                    ProcessTrace* trace) {
  if (std::none_of(streams.begin(), streams.end(),
                   [](const ProcessCapture* s) { return s->device_events_wait_for_program; })) {
    return;
  }
  trace->device_events_with_program = true;
  // A process that ended without its final batch (killed, crashed) never fetched them: the
  // shim fetches the program's capture at exit only when there is an exit to run it. Ended:
  // its stream closed during a capture, or its rings file was read once it was gone.
  trace->executions_held_lost =
      std::all_of(streams.begin(), streams.end(), [](const ProcessCapture* s) {
        return !s->final && (s->stream_closed || s->records_made_known);
      });
  NoteExecutionsHeldByProgram(trace);
}

void Extend(const ProcessTrace& p, Trace* trace) {
  uint64_t start = trace->end_ns != 0 ? trace->start_ns : std::numeric_limits<uint64_t>::max();
  uint64_t end = trace->end_ns;
  auto extend = [&](uint64_t s, uint64_t d) {
    start = std::min(start, s);
    end = std::max(end, s + d);
  };
  for (const RangeEvent& r : p.ranges) extend(r.start_ns, r.duration_ns);
  for (const ApiCall& c : p.calls) extend(c.start_ns, c.duration_ns);
  for (const DeviceEvent& d : p.device) extend(d.start_ns, d.duration_ns);
  if (end != 0) {
    trace->start_ns = start;
    trace->end_ns = end;
  }
}

// `consumed`, if not null, is `processes`, whose events may be freed once used.
Trace CorrelateProcesses(const std::string& capture_id,
                         const std::vector<ProcessCapture>& processes, int64_t realtime_offset_ns,
                         std::vector<ProcessCapture>* consumed) {
  CaptureCorrelator correlator(capture_id, realtime_offset_ns);
  std::vector<ProcessTrace> traces;
  for (const std::vector<size_t>& group : ProcessOrder(processes)) {
    if (consumed != nullptr) {
      std::vector<ProcessCapture*> streams;
      for (size_t i : group) streams.push_back(&(*consumed)[i]);
      traces.push_back(correlator.Next(streams));
    } else {
      std::vector<const ProcessCapture*> streams;
      for (size_t i : group) streams.push_back(&processes[i]);
      traces.push_back(correlator.NextKeeping(streams));
    }
  }
  Trace trace = correlator.header();
  trace.processes = std::move(traces);
  return trace;
}

}  // namespace

Trace Correlate(const std::string& capture_id, const std::vector<ProcessCapture>& processes,
                int64_t realtime_offset_ns) {
  return CorrelateProcesses(capture_id, processes, realtime_offset_ns, nullptr);
}

Trace Correlate(const std::string& capture_id, std::vector<ProcessCapture>&& processes,
                int64_t realtime_offset_ns) {
  return CorrelateProcesses(capture_id, processes, realtime_offset_ns, &processes);
}

std::vector<std::vector<size_t>> ProcessOrder(const std::vector<ProcessCapture>& processes) {
  std::vector<const nrtprof::Hello*> hellos;
  for (const ProcessCapture& p : processes) hellos.push_back(&p.hello);
  return ProcessOrder(hellos);
}

std::vector<std::vector<size_t>> ProcessOrder(const std::vector<const nrtprof::Hello*>& hellos) {
  auto key = [&](size_t i) {
    const nrtprof::Hello& h = *hellos[i];
    return std::make_tuple(h.pid(), h.host(), h.boot_id());
  };
  std::vector<size_t> order(hellos.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  std::vector<std::vector<size_t>> groups;
  for (size_t n = 0; n < order.size(); ++n) {
    if (n == 0 || key(order[n - 1]) != key(order[n])) groups.emplace_back();
    groups.back().push_back(order[n]);
  }
  return groups;
}

CaptureCorrelator::CaptureCorrelator(const std::string& capture_id, int64_t realtime_offset_ns) {
  header_.capture_id = capture_id;
  header_.realtime_offset_ns = realtime_offset_ns;
}

ProcessTrace CaptureCorrelator::Next(const std::vector<ProcessCapture*>& streams) {
  return Build(std::vector<const ProcessCapture*>(streams.begin(), streams.end()), &streams);
}

ProcessTrace CaptureCorrelator::NextKeeping(const std::vector<const ProcessCapture*>& streams) {
  return Build(streams, nullptr);
}

ProcessTrace CaptureCorrelator::NextPart(ProcessCapture* part, bool first, bool last) {
  if (!have_offset_ && part->realtime_offset_ns != 0) {
    header_.realtime_offset_ns = part->realtime_offset_ns;
    have_offset_ = true;
  }
  const std::vector<const ProcessCapture*> streams = {part};
  ProcessTrace p = CorrelateProcess(*part, &next_id_,
                                    last ? ProcessDrops(streams) : DropCounts(), names_,
                                    &part->events);
  Consume(part);
  p.continues = !first;
  // Every part keeps the process's model files (already held: each part's capture copies
  // them), named by that part's calls: a model first run in a later part is named there, and
  // its device trace still finds its .neff.
  if (last) NoteDeviceEventsWithTheProgram(streams, &p);
  Extend(p, &header_);
  return p;
}

ProcessTrace CaptureCorrelator::Build(const std::vector<const ProcessCapture*>& streams,
                                      const std::vector<ProcessCapture*>* consume) {
  ProcessTrace trace;
  for (size_t n = 0; n < streams.size(); ++n) {
    const ProcessCapture& stream = *streams[n];
    if (!have_offset_ && stream.realtime_offset_ns != 0) {
      header_.realtime_offset_ns = stream.realtime_offset_ns;
      have_offset_ = true;
    }
    // The process's drops, reckoned from all its streams, go with its first.
    ProcessTrace p =
        CorrelateProcess(stream, &next_id_, n == 0 ? ProcessDrops(streams) : DropCounts(), names_,
                         consume != nullptr ? &(*consume)[n]->events : nullptr);
    if (consume != nullptr) Consume((*consume)[n]);
    if (n == 0) {
      trace = std::move(p);
    } else {
      Merge(std::move(p), &trace);
    }
  }
  NoteDeviceEventsWithTheProgram(streams, &trace);
  Extend(trace, &header_);
  return trace;
}

}  // namespace nrtprof::daemon
