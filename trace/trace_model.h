// The correlated trace of one capture: what the daemon's correlator builds from the shims'
// event batches and what every writer (Perfetto, Chrome JSON, summary, artifacts) reads.
//
// All times are host CLOCK_MONOTONIC nanoseconds: device events are already mapped from the
// device clock through the runtime's clock sync points. A Trace is a plain value, built once
// and then only read; writers may read one Trace from several threads.
#ifndef NRTPROF_TRACE_TRACE_MODEL_H_
#define NRTPROF_TRACE_TRACE_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trace/huge_page_allocator.h"
#include "trace/trace_name.h"

namespace nrtprof::daemon {

// Framework lane: an annotated range (aten::mul, rmsnorm) on a host thread.
struct RangeEvent {
  uint64_t id = 0;  // unique within the Trace, never 0
  Name name;
  uint32_t tid = 0;
  uint64_t start_ns = 0;
  uint64_t duration_ns = 0;
  uint32_t depth = 0;          // 0: outermost on its thread
  uint64_t parent_range = 0;   // enclosing range's id, 0 if outermost
};

// Runtime lane: one intercepted libnrt call.
struct ApiCall {
  uint64_t correlation_id = 0;  // unique within the Trace (the shim's id, made unique per process)
  Name name;                    // "nrt_execute", "nrt_tensor_write", ...
  int32_t function = 0;         // its nrtprof.ApiFunction number (common/api_functions.h); 0
                                // for a name on no list
  uint32_t tid = 0;
  uint64_t start_ns = 0;
  uint64_t duration_ns = 0;
  int32_t status = 0;           // NRT_STATUS
  uint64_t bytes = 0;
  Name model_name;              // executions and loads, when known
  Name tensor_name;             // tensor calls, when known
  int32_t nc_idx = -1;
  uint32_t repeat = 0;          // executions
  // nrta_* calls: the request's nrta_seq_t (scheduled, polled or registered), else 0.
  uint64_t nrta_seq = 0;
  // nrta_is_completed / nrta_get_sequence: this thread's polls of the function before this one
  // that were not recorded (they saw nothing new); the call itself is the poll that did. Those
  // after a thread's last recorded poll are in ProcessTrace::poll_tallies.
  uint64_t polls = 0;
  uint64_t range = 0;           // innermost enclosing RangeEvent id on the same thread, or 0
  std::vector<std::string> stack;  // call site, innermost first (NRTPROF_STACKS), symbolized
};

// Completion polls no call carries: a thread's nrta_is_completed / nrta_get_sequence polls
// after its last recorded one (which saw nothing new), counted by the shim when the thread
// ended or the process exited (Event.polls_only). No call: no slice is drawn for it; the
// summary adds the polls to the function's calls.
struct PollTally {
  Name name;             // "nrta_is_completed" or "nrta_get_sequence"
  int32_t function = 0;  // its nrtprof.ApiFunction number
  uint32_t tid = 0;      // 0 when read back from a trace file (only the sums are kept there)
  uint64_t time_ns = 0;  // when the shim counted them
  uint64_t polls = 0;
};

// kCollective: a collective's work on its NeuronCore's collectives XU, as the runtime's system
// trace has it, two events per collective and rank: "cc_exec_barrier" (the rank waiting for the
// others) and then "cc_running" (the data movement and reduction).
enum class DeviceEventKind { kExecution, kEngineOp, kDma, kCollective };
inline constexpr char kCcExecBarrier[] = "cc_exec_barrier";
inline constexpr char kCcRunning[] = "cc_running";

// Hardware lane: work on a NeuronCore.
struct DeviceEvent {
  uint64_t id = 0;              // unique within the Trace
  DeviceEventKind kind = DeviceEventKind::kExecution;
  int32_t nc_idx = 0;           // (beside `kind`: a capture holds millions of these)
  Name name;                    // "nc_exec_running", "mul", "dma_h2d", ...
  uint64_t start_ns = 0;        // host monotonic, mapped from the device clock
  uint64_t duration_ns = 0;
  uint64_t parent = 0;          // enclosing execution's DeviceEvent id, or 0
  uint64_t correlation_id = 0;  // the ApiCall that caused it, or 0 if uncorrelated
  Name model_name;              // executions and ops; collectives: the collective, "all_reduce"
  Name engine;                  // ops: "tensor", "vector", "scalar", "gpsimd"
  uint64_t exec_id = 0;
  uint64_t bytes = 0;           // DMA; collectives: the size
  Name tensor_name;             // DMA
  uint32_t submitting_tid = 0;
  // Collectives: the rank's global NeuronCore id (the runtime's worker_gid); -1 for other work.
  // (model_name holds the collective, "all_reduce", when the runtime says; bytes its size.)
  int32_t worker_gid = -1;
  // Work of an async request: its nrta_seq_t (the high 16 bits name the execution unit's
  // queue), by which it is matched to its schedule call; 0 for synchronous work.
  uint64_t nrta_seq = 0;
};
static_assert(sizeof(DeviceEvent) <= 112, "a capture holds millions: mind what a field costs");

struct LoadedModelFile {
  std::string name;             // the model's name if known
  std::string bytes;            // the model file as loaded (may be empty if not shipped)
  uint64_t size = 0;
};

// Events lost, by lane (the lanes of the trace: ranges, runtime calls, device events).
struct LaneDropCounts {
  uint64_t framework = 0;
  uint64_t runtime = 0;
  uint64_t hardware = 0;
  uint64_t total() const { return framework + runtime + hardware; }
  LaneDropCounts& operator+=(const LaneDropCounts& o) {
    framework += o.framework;
    runtime += o.runtime;
    hardware += o.hardware;
    return *this;
  }
};

struct DropCounts {
  uint64_t ring_full = 0;
  uint64_t daemon_away = 0;  // also: sent, and never received (counted by the daemon)
  uint64_t spool_full = 0;
  uint64_t device_overwritten = 0;
  uint64_t oversized = 0;
  uint64_t no_memory = 0;  // the shim could not allocate for them (ulimit -v)
  // Device events in system-trace documents the shim refused whole (not JSON, or not in the
  // runtime's shape).
  uint64_t device_malformed = 0;
  // Lost in the daemon, not on the wire: over the daemon's per-process event bound
  // (nrtprofd --max_events_per_process).
  uint64_t daemon_overflow = 0;
  // Device events of a process that sent no clock sync point: they cannot be placed in time.
  uint64_t no_clock_sync = 0;
  // Made by a process that ended without its final batch (killed, _exit, a crash) and never
  // sent: counted from its rings file (rings_reader.h).
  uint64_t process_died = 0;
  // The same events by lane: by_lane.total() == total() when every shim reports its lanes
  // (a shim older than the field reports none).
  LaneDropCounts by_lane;
  uint64_t total() const {
    return ring_full + daemon_away + spool_full + device_overwritten + oversized + no_memory +
           device_malformed + daemon_overflow + no_clock_sync + process_died;
  }
  DropCounts& operator+=(const DropCounts& o) {
    ring_full += o.ring_full;
    daemon_away += o.daemon_away;
    spool_full += o.spool_full;
    device_overwritten += o.device_overwritten;
    oversized += o.oversized;
    no_memory += o.no_memory;
    device_malformed += o.device_malformed;
    process_died += o.process_died;
    daemon_overflow += o.daemon_overflow;
    no_clock_sync += o.no_clock_sync;
    by_lane += o.by_lane;
    return *this;
  }
};

struct ProcessTrace {
  // This is a later part of the process of the Trace before it in a TraceStream (the same pid,
  // host and process): a big process may be written in parts, so that only one part's events
  // are held at once. Each thread's events of a part come after those of its earlier parts; the
  // ranges that hold a part's calls, and the executions that hold its device work, are in the
  // part too. The command line and thread names come with the first part; the models with
  // every part, each named by that part's calls (a writer takes each file once). The counts
  // (drops, events_received, batches_missing, device_uncorrelated, executions_held_by_program)
  // add up over the parts, the notices join, and the process is cut off if a part says so: a
  // count known only once all of the process was read may come with the last part. The writers
  // lay out and clamp each part's lanes alone: slices of two parts on one lane (a NeuronCore
  // two threads use) must not overlap.
  bool continues = false;
  // The text of the Names of its events, other than string literals' (trace_name.h): shared
  // by copies of the ProcessTrace, and by the others of a Trace the correlator made.
  std::shared_ptr<NameTable> names = std::make_shared<NameTable>();
  uint32_t pid = 0;
  std::string host;
  std::string executable;
  std::vector<std::string> command_line;
  // Its job (Hello.job: NRTPROF_JOB, else NEURON_RT_ROOT_COMM_ID); empty if it named none.
  std::string job;
  // Its rank in the job, as its environment said (Hello.rank: RANK); -1 if it did not (RankOf
  // then reads its command line).
  int32_t rank = -1;
  std::map<uint32_t, std::string> thread_names;  // tid -> name, where known
  CaptureVector<RangeEvent> ranges;   // sorted by (tid, start)
  CaptureVector<ApiCall> calls;       // sorted by start
  CaptureVector<DeviceEvent> device;  // sorted by (nc_idx, start); parents before children
  std::vector<LoadedModelFile> models;
  // What the shim could not do in the process (EventBatch.notices), one line each.
  std::vector<std::string> notices;
  // Polls counted after their threads' last recorded ones, by time: in no call's `polls`.
  std::vector<PollTally> poll_tallies;
  DropCounts drops;
  uint64_t events_received = 0;
  // Device events in `device` with correlation_id 0: no runtime call could be matched to them
  // without guessing (device events lost to ring overwrite, calls before the capture).
  uint64_t device_uncorrelated = 0;
  // Executions without device events in a process whose program runs the runtime's system
  // trace itself (EventBatch.device_events_wait_for_program): it has not fetched them yet.
  uint64_t executions_held_by_program = 0;
  // ... and the process ended without its final batch (killed, crashed): it never fetched them.
  bool executions_held_lost = false;
  // A stream of the process said the program holds the runtime's system trace itself
  // (EventBatch.device_events_wait_for_program): executions_held_by_program is counted, and
  // counted again when the process is cut to a window (NoteExecutionsHeldByProgram).
  bool device_events_with_program = false;
  // Batches the shim numbered but the daemon never received (sequence gaps). Their events are
  // in drops.daemon_away when a later batch said how many had been sent (EventBatch.events_sent);
  // from a shim older than that field they are missing and uncounted.
  uint64_t batches_missing = 0;
  // The process's streams ended without its final batch (it died, or its exit flush ran out of
  // time, even for the final batch on a connection of its own): what it sent after its last
  // batch received is missing and not in `drops`, since its count is unknown.
  bool cut_off = false;
};

// Why a rule of the daemon's took the capture (nrtprofd --trigger, daemon/triggers.h); `rule`
// empty for a capture someone asked for.
struct TriggerReason {
  std::string rule;       // the rule's name
  std::string condition;  // the rule as written
  std::string reason;     // "pid 12 (train): step 4711 took 3.9x the median of the last 100 ..."
  uint64_t value_ns = 0;
  uint64_t threshold_ns = 0;
  // When the anomaly began, host monotonic as the events (a slow step's start, the failed
  // call's); 0 if the daemon that asked did not say (one older than the field).
  uint64_t at_ns = 0;
};

// The Perfetto trace's global track of the trigger's instant (perfetto_writer.h), by which the
// reader (trace_from_pftrace.h) knows it again.
inline constexpr char kTriggerTrackName[] = "nrtprof triggers";

struct Trace {
  std::string capture_id;
  TriggerReason trigger;
  std::vector<ProcessTrace> processes;  // by pid
  uint64_t start_ns = 0;                // earliest event, host monotonic
  uint64_t end_ns = 0;
  // CLOCK_REALTIME - CLOCK_MONOTONIC when the capture was written, for wall-clock labels.
  int64_t realtime_offset_ns = 0;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_TRACE_MODEL_H_
