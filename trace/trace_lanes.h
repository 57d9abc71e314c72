// The timeline of a capture as the trace writers draw it: per process, each host thread's
// framework and runtime lanes and each NeuronCore's executions and DMA lanes (and, for the
// async API's work, a lane per execution unit's queue with its requests-in-flight counter),
// holding slices that nest properly, plus the flow arrows that follow each correlation id from
// framework to runtime to hardware. The Perfetto and Chrome JSON writers both render this one
// layout, so the two files always show the same slices, clamping and flows.
//
// BuildLanes() is a pure function of the Trace; the result points into the Trace (names,
// ProcessTrace), which must outlive it. Not shared between threads while being built.
#ifndef NRTPROF_TRACE_TRACE_LANES_H_
#define NRTPROF_TRACE_TRACE_LANES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "trace/async_requests.h"
#include "trace/trace_model.h"
#include "trace/trace_sink.h"

namespace nrtprof::daemon {

enum class LaneKind {
  kFramework, kRuntime, kExecutions, kDma, kComputeQueue, kTensorOpQueue, kCollectivesQueue
};

// "framework", "runtime", "executions", "DMA", "compute queue", "tensor-op queue",
// "collectives queue": the lane's track name (a queue's with its XU id: LaneName).
const char* LaneKindName(LaneKind kind);

// One argument of a slice (a debug annotation in Perfetto, an "args" entry in JSON). A string
// value is a view: of the Trace, or of the text buffer SliceArgs() was given.
struct SliceArg {
  enum class Type { kString, kUint, kInt };
  const char* name = "";  // static text
  Type type = Type::kString;
  std::string_view string_value;
  uint64_t uint_value = 0;
  int64_t int_value = 0;
};

struct LaneSlice {
  Name name;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;  // >= start_ns
  // What the slice draws, for its arguments (SliceArgs): a runtime call, a device event, or
  // neither (a framework range, which has none). A device event of an async request also
  // points at the call that scheduled it, when known (its queue wait is an argument).
  const ApiCall* call = nullptr;
  const DeviceEvent* device = nullptr;
  // Flow arrows: ids that start or pass through this slice, and ids that end at it. A flow id
  // is unique in the trace (assigned here, one per correlation id that has two or more slices).
  // Almost every slice has at most one of each: kept inline, so a slice costs no allocation.
  absl::InlinedVector<uint64_t, 1> flow_ids;
  absl::InlinedVector<uint64_t, 1> terminating_flow_ids;
};

// The arguments of a slice, replacing *args: for a runtime call its status, correlation id,
// bytes, model, tensor, NeuronCore, repeat, call stack, and for the async API its request
// (nrta_seq, queue, seq) or unrecorded polls; for device work what it shares not with its
// execution (see trace_lanes.cc), and for an async request's work its nrta_seq and queue wait.
// Computed when a writer needs them, so that the lanes hold no copy. String values view the
// Trace, or *text (the joined call stack), which the caller keeps until it is done with *args.
void SliceArgs(const LaneSlice& slice, std::vector<SliceArg>* args, std::string* text);

struct Lane {
  LaneKind kind = LaneKind::kRuntime;
  uint32_t xu = 0;  // a queue's lane (k*Queue): its XU id, nrta_seq >> 48
  // In begin order: start times never decrease, and a slice that begins inside another (see
  // NestIntervals) ends inside it too, so the slices form a proper tree.
  CaptureVector<LaneSlice> slices;
};

struct ThreadLanes {
  uint32_t tid = 0;
  const std::string* name = nullptr;  // the thread's name, or null if unknown
  Lane framework;                     // RangeEvents
  Lane runtime;                       // ApiCalls
};

// The track name of a lane: LaneKindName, and a queue's XU id, "compute queue (XU 1)".
std::string LaneName(const Lane& lane);

// A counter's value from `ts` on.
struct CounterPoint {
  uint64_t ts = 0;
  int64_t value = 0;
};

// The async requests in flight on one execution unit's queue of a NeuronCore (InFlightPoints).
struct QueueCounter {
  uint32_t xu = 0;
  std::vector<CounterPoint> points;  // in time order, one per time the value changes
};

// "requests in flight (XU 1)": the counter's track name.
std::string QueueCounterName(const QueueCounter& counter);

struct CoreLanes {
  int32_t nc_idx = 0;
  Lane executions;  // nc_exec_running with its engine ops nested inside
  Lane dma;         // DMA transfers
  // Async work (DeviceEvent::nrta_seq != 0), a lane per execution unit's queue: executions
  // and their ops on a compute queue's lane, transfers on a tensor-op queue's, a collective's
  // barrier and running (one after the other) on a collectives queue's; by (XU id, kind).
  // Synchronous work stays on `executions` and `dma`.
  std::vector<Lane> queues;
  std::vector<QueueCounter> in_flight;  // by XU id: each queue's requests in flight
};

struct ProcessLanes {
  const ProcessTrace* process = nullptr;
  std::vector<ThreadLanes> threads;  // by tid; only threads with events
  std::vector<CoreLanes> cores;      // by nc_idx; only cores with events
  bool has_events = false;
  uint64_t first_ns = 0;  // earliest slice start, if has_events
};

struct TraceLanes {
  std::vector<ProcessLanes> processes;  // in the Trace's order
  // Where the timeline starts: the earliest slice, else Trace::start_ns.
  uint64_t first_ns = 0;
  // Flow ids run from BuildLanes' first_flow_id (1 for a whole Trace) to `flows`.
  uint64_t flows = 0;
};


// Flow ids start at `first_flow_id`: a capture written a process at a time (TraceStream)
// numbers the flows of each process after those of the processes before.
TraceLanes BuildLanes(const Trace& trace, uint64_t first_flow_id = 1);

// A lane writer's stream (TraceStream): the lanes of one process at a time.
class LaneStream {
 public:
  virtual ~LaneStream() = default;
  // As TraceStream::Add; `lanes` are BuildLanes(trace), their flows numbered on from the
  // processes before. Neither is kept.
  virtual absl::Status Add(const Trace& trace, const TraceLanes& lanes) = 0;
  // As TraceStream::Finish; `first_ns` is where the whole capture's timeline starts
  // (TraceLanes::first_ns of all its processes).
  virtual absl::Status Finish(const Trace& trace, uint64_t first_ns,
                              std::vector<std::string>* files) = 0;
};

// A TraceStream that lays out each process's lanes once for every LaneStream it feeds.
std::unique_ptr<TraceStream> LaneStreams(std::vector<std::unique_ptr<LaneStream>> streams);

// A writer that draws the lanes (the Perfetto and Chrome JSON traces). Alone, it lays them out
// for itself; in a LaneSinkGroup, the lanes are laid out once for all the group's writers.
class LaneSink : public TraceSink {
 public:
  // As TraceSink::Write; `lanes` are BuildLanes(trace).
  virtual absl::Status WriteLanes(const Trace& trace, const TraceLanes& lanes,
                                  const std::string& output_dir,
                                  std::vector<std::string>* files) = 0;
  absl::Status Write(const Trace& trace, const Summary& summary, const std::string& output_dir,
                     std::vector<std::string>* files) override {
    return WriteLanes(trace, BuildLanes(trace), output_dir, files);
  }
  // The writer's stream into `output_dir`, or null if it needs all the lanes at once.
  virtual std::unique_ptr<LaneStream> OpenLaneStream(const std::string& output_dir) {
    return nullptr;
  }
  std::unique_ptr<TraceStream> OpenStream(const std::string& output_dir) override {
    std::vector<std::unique_ptr<LaneStream>> streams;
    streams.push_back(OpenLaneStream(output_dir));
    if (streams.back() == nullptr) return nullptr;
    return LaneStreams(std::move(streams));
  }
};

// Runs every writer on one layout of the lanes (freed when the last is done); the first error
// is returned after all have run.
class LaneSinkGroup : public TraceSink {
 public:
  explicit LaneSinkGroup(std::vector<std::unique_ptr<LaneSink>> sinks) : sinks_(std::move(sinks)) {}
  absl::Status Write(const Trace& trace, const Summary& summary, const std::string& output_dir,
                     std::vector<std::string>* files) override {
    const TraceLanes lanes = BuildLanes(trace);
    absl::Status first;
    for (auto& sink : sinks_) {
      absl::Status s = sink->WriteLanes(trace, lanes, output_dir, files);
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }
  // A stream only if every writer has one.
  std::unique_ptr<TraceStream> OpenStream(const std::string& output_dir) override {
    std::vector<std::unique_ptr<LaneStream>> streams;
    for (auto& sink : sinks_) {
      streams.push_back(sink->OpenLaneStream(output_dir));
      if (streams.back() == nullptr) return nullptr;
    }
    return LaneStreams(std::move(streams));
  }

 private:
  std::vector<std::unique_ptr<LaneSink>> sinks_;
};

// Every drop counter of a process, "total" first: the one list both trace files show.
struct DropCounter {
  const char* name;      // "ring_full"
  const char* arg_name;  // "drops.ring_full"
  uint64_t value;
};
std::vector<DropCounter> DropCounters(const DropCounts& drops);

// The same counters, but "total" (which is computed), as fields of *drops: for a reader of the
// trace files to set them back by their arg_name. `value` is unused (0).
struct DropCounterField {
  DropCounter counter;
  uint64_t* field;
};
std::vector<DropCounterField> DropCounterFields(DropCounts* drops);

// The arguments that describe a process's part of the capture: capture_id, host, pid,
// executable, events_received, every drop counter as "drops.<name>", device_uncorrelated,
// batches_missing and, when not 0, the polls of each completion query counted after their
// threads' last recorded ones (kTalliedPollsArgs: ProcessTrace::poll_tallies added up).
std::vector<SliceArg> CaptureArgs(const Trace& trace, const ProcessTrace& process);
inline constexpr const char* kTalliedPollsArgs[2] = {
    "polls_after_last_recorded.nrta_is_completed", "polls_after_last_recorded.nrta_get_sequence"};
// What CaptureArgs reads of a process, without its events: for a writer that describes the
// process after its events are gone (TraceStream).
ProcessTrace CaptureHeader(const ProcessTrace& process);
// Adds what a later part of the process (ProcessTrace::continues) counts to *header, its
// CaptureHeader: the counts add up, the notices join, cut off if any part is.
void AddToCaptureHeader(const ProcessTrace& part, ProcessTrace* header);

// The begin/end sequence of a lane, in time order, with every end matching the innermost open
// begin. For each slice index there is exactly one begin and, later, one end.
struct SliceEdge {
  uint64_t ts = 0;
  bool begin = false;
  size_t slice = 0;
};
std::vector<SliceEdge> LaneEdges(const Lane& lane);

// The same sequence one edge at a time, holding only the open slices (a writer of a big trace
// would otherwise hold every lane's edges at once). `lane` must outlive the cursor.
class LaneEdgeCursor {
 public:
  explicit LaneEdgeCursor(const Lane* lane) : lane_(lane) { Advance(); }
  bool done() const { return done_; }
  const SliceEdge& edge() const { return edge_; }  // if !done()
  void Advance();

 private:
  const Lane* lane_;
  size_t next_slice_ = 0;
  std::vector<size_t> open_;  // begun, not ended; innermost last
  SliceEdge edge_;
  bool done_ = false;
};

// The nesting rule shared by every lane, exposed for its tests. An interval may name a
// declared parent (parent_id == another interval's id). On return *intervals are adjusted and
// the result lists them in begin order, forming a proper tree:
//  - a child that starts before or ends after its declared parent is clamped into it;
//  - a slice that begins inside another without being its declared descendant and ends after
//    it (two host calls overlapping by clock noise) has its start moved to the other's end;
//  - a slice wholly inside another nests in it;
//  - at equal start times the longer (enclosing) slice begins first.
// A declared child that does not overlap its parent at all keeps its own times.
struct NestInterval {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t id = 0;         // 0: none
  uint64_t parent_id = 0;  // 0: none
};
std::vector<size_t> NestIntervals(std::vector<NestInterval>* intervals);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_TRACE_LANES_H_
