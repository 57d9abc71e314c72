// The correlator: turns what the processes of one capture sent (ProcessCapture, from ingest)
// into the capture's Trace, joining the three lanes:
//
//  - device events move from each NeuronCore's clock to the host's CLOCK_MONOTONIC through the
//    process's clock sync point nearest in device time (on real hardware the clocks drift);
//  - executions: per submitting thread, the nrt_execute / nrt_execute_repeat calls in start
//    order each take `repeat` nc_exec_running events of that thread in start order; the
//    engine ops and DMA inside an execution take its correlation id;
//  - host-initiated transfers (dma_h2d, dma_d2h, dma_d2d, dma_memset, dma_model_load with no
//    enclosing execution) match, per thread and in order, the tensor reads, writes, copies and
//    memsets on device tensors (placement from the nrt_tensor_allocate / nrt_tensor_free
//    history; handles are reused after a free) and the nrt_load calls;
//  - each runtime call's range is the innermost framework range containing it on its thread.
//
// When the counts on a thread disagree (device events lost to ring overwrite, calls whose
// outcome is uncertain, placements unknown) the match falls back to containment in time: a
// device event goes to the one call whose span (widened by 1 ms) contains it, and stays
// uncorrelated when there is no such call or more than one. It never guesses; uncorrelated
// device events stay in the trace and are counted in ProcessTrace::device_uncorrelated.
//
// A pure function of its input: thread-safe.
#ifndef NRTPROF_TRACE_CORRELATOR_H_
#define NRTPROF_TRACE_CORRELATOR_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "trace/process_capture.h"
#include "trace/trace_model.h"

namespace nrtprof::daemon {

// Device clock -> host clock for one process, from its sync points.
class ClockMap {
 public:
  explicit ClockMap(const std::vector<ClockSyncPoint>& syncs) {
    for (const ClockSyncPoint& s : syncs) {
      per_core_[s.nc_idx].push_back(s);
      all_.push_back(s);
    }
    auto by_device = [](const ClockSyncPoint& a, const ClockSyncPoint& b) {
      return a.device_ns < b.device_ns;
    };
    for (auto& [nc, points] : per_core_) std::sort(points.begin(), points.end(), by_device);
    std::sort(all_.begin(), all_.end(), by_device);
  }

  // False when the process sent no sync point at all. A core without its own uses the
  // process's other cores' (the simulator's cores share one clock; real ones nearly do).
  bool ToHost(int32_t nc_idx, uint64_t device_ns, uint64_t* host_ns) const {
    return ToHost(Points(nc_idx), device_ns, host_ns, nullptr);
  }

  // Where a core's last lookup ended, for a caller that converts many events of few cores,
  // each core's in time order: the next one's nearest point is then at or next to it, found
  // with no hash lookup or binary search. Held by the caller, so that the map stays read-only.
  class Cursor {
   private:
    friend class ClockMap;
    struct Core {
      int32_t nc_idx;
      const std::vector<ClockSyncPoint>* points;
      size_t next;  // the lower bound of the last lookup
    };
    absl::InlinedVector<Core, 8> cores_;
  };
  // The same as ToHost above.
  bool ToHost(int32_t nc_idx, uint64_t device_ns, uint64_t* host_ns, Cursor* cursor) const {
    Cursor::Core* core = nullptr;
    for (Cursor::Core& c : cursor->cores_) {
      if (c.nc_idx == nc_idx) {
        core = &c;
        break;
      }
    }
    if (core == nullptr)
      core = &cursor->cores_.emplace_back(Cursor::Core{nc_idx, &Points(nc_idx), 0});
    return ToHost(*core->points, device_ns, host_ns, &core->next);
  }

 private:
  const std::vector<ClockSyncPoint>& Points(int32_t nc_idx) const {
    auto it = per_core_.find(nc_idx);
    return it != per_core_.end() ? it->second : all_;
  }

  // `*hint`, if not null: a guess at the lower bound of device_ns in `points`, replaced by it.
  static bool ToHost(const std::vector<ClockSyncPoint>& points, uint64_t device_ns,
                     uint64_t* host_ns, size_t* hint) {
    if (points.empty()) return false;
    auto is_bound = [&](size_t k) {  // the first point at or after device_ns
      return (k == points.size() || points[k].device_ns >= device_ns) &&
             (k == 0 || points[k - 1].device_ns < device_ns);
    };
    std::vector<ClockSyncPoint>::const_iterator next;
    if (hint != nullptr && *hint <= points.size() && is_bound(*hint)) {
      next = points.begin() + static_cast<ptrdiff_t>(*hint);
    } else if (hint != nullptr && *hint < points.size() && is_bound(*hint + 1)) {
      next = points.begin() + static_cast<ptrdiff_t>(*hint + 1);
    } else {
      next = std::lower_bound(points.begin(), points.end(), device_ns,
                              [](const ClockSyncPoint& p, uint64_t d) { return p.device_ns < d; });
    }
    if (hint != nullptr) *hint = static_cast<size_t>(next - points.begin());
    const ClockSyncPoint* nearest;
    if (next == points.end()) {
      nearest = &points.back();
    } else if (next == points.begin()) {
      nearest = &*next;
    } else {
      const ClockSyncPoint& before = *(next - 1);
      nearest = device_ns - before.device_ns <= next->device_ns - device_ns ? &before : &*next;
    }
    // host = device - (sync.device - sync.host), in signed arithmetic, clamped at 0.
    const int64_t offset =
        static_cast<int64_t>(nearest->device_ns) - static_cast<int64_t>(nearest->host_ns);
    const int64_t host = static_cast<int64_t>(device_ns) - offset;
    *host_ns = host < 0 ? 0 : static_cast<uint64_t>(host);
    return true;
  }

 private:
  std::unordered_map<int32_t, std::vector<ClockSyncPoint>> per_core_;
  std::vector<ClockSyncPoint> all_;
};

// `realtime_offset_ns` is used for Trace::realtime_offset_ns when no process sent a clock
// sample.
Trace Correlate(const std::string& capture_id, const std::vector<ProcessCapture>& processes,
                int64_t realtime_offset_ns);
// The same Trace, from captures the correlator may consume: each process's events are freed as
// soon as its part of the Trace is built, so a capture's raw events and its Trace are never all
// held at once. `processes` keep their Hello and counters, not their events.
Trace Correlate(const std::string& capture_id, std::vector<ProcessCapture>&& processes,
                int64_t realtime_offset_ns);

// Correlate, a process at a time, for a writer that holds one process's part of the Trace at
// once (TraceStream). ProcessOrder gives the processes' streams in the Trace's order, grouped
// by process; Next correlates one group and returns its ProcessTrace, with ids that continue
// those of the processes before. The Trace made of every Next's process, with header()'s
// fields, is Correlate's.
class CaptureCorrelator {
 public:
  CaptureCorrelator(const std::string& capture_id, int64_t realtime_offset_ns);
  // The streams of one process, in the order they came; their events are freed.
  ProcessTrace Next(const std::vector<ProcessCapture*>& streams);
  // The same, leaving the streams as they are.
  ProcessTrace NextKeeping(const std::vector<const ProcessCapture*>& streams);
  // One part of a process of one stream (ProcessIngest::TakePart; the last part is its
  // TakeCapture), for a writer that takes a process in parts (ProcessTrace::continues): its
  // events are freed. Each part is matched alone, so its device events must be those of its
  // calls. The first part lists the models; the last has the process's drops and notices.
  ProcessTrace NextPart(ProcessCapture* part, bool first, bool last);
  // The Trace without processes: id, wall clock (from the first process that knew it) and the
  // span of every event returned so far.
  const Trace& header() const { return header_; }

 private:
  ProcessTrace Build(const std::vector<const ProcessCapture*>& streams,
                     const std::vector<ProcessCapture*>* consume);

  Trace header_;
  bool have_offset_ = false;
  uint64_t next_id_ = 1;
  std::shared_ptr<NameTable> names_ = std::make_shared<NameTable>();
};

// `processes`' indexes by process, in the Trace's order: by pid, then host and boot; a process's
// streams in the order they came.
std::vector<std::vector<size_t>> ProcessOrder(const std::vector<ProcessCapture>& processes);
// The same for streams known by their Hellos.
std::vector<std::vector<size_t>> ProcessOrder(const std::vector<const nrtprof::Hello*>& hellos);

// How far outside a call's span a device event may lie and still be matched by containment.
inline constexpr uint64_t kContainmentSlackNs = 1'000'000;
// How much earlier than its call a device event may start, mapped to the host's clock, and
// still be the call's: the error of the device clock's mapping (its sync points are read
// microseconds apart), well under the gap between two calls of a busy thread.
inline constexpr uint64_t kCauseSlackNs = 100'000;

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_CORRELATOR_H_
