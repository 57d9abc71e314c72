// What one process contributed to one capture, as the daemon's ingest keeps it and the
// correlator reads it: compact event records (IngestedEvent), the stream's strings and stacks,
// clock sync points, loaded models and the drop counters. The capture format's input; ingest
// (daemon/ingest.h) fills it from the wire.
#ifndef NRTPROF_TRACE_PROCESS_CAPTURE_H_
#define NRTPROF_TRACE_PROCESS_CAPTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "proto/nrtprof.pb.h"
#include "trace/huge_page_allocator.h"
#include "trace/trace_model.h"

namespace nrtprof::daemon {

// The process's shared rings file (daemon/rings_reader.h): held, never read, here.
class RingsFile;

// One wire Event, without protobuf's overhead. Strings stay interned ids of the stream.
struct IngestedEvent {
  nrtprof::EventKind kind = nrtprof::EVENT_KIND_UNSPECIFIED;
  uint32_t tid = 0;
  nrtprof::ApiFunction function = nrtprof::API_FUNCTION_UNSPECIFIED;  // API calls
  uint32_t name_iid = 0;
  uint32_t stack_iid = 0;
  uint32_t depth = 0;
  uint32_t model_name_iid = 0;
  uint32_t engine_iid = 0;
  uint32_t tensor_name_iid = 0;
  uint32_t repeat = 0;  // executions; nrta_is_completed/_get_sequence: Event.polls (saturated)
  int32_t status = 0;
  int32_t nc_idx = -1;
  // nrt_tensor_allocate's placement; a collective's device events (named "cc_exec_barrier",
  // "cc_running"): the rank's worker_gid. Never both.
  union {
    int32_t placement = 0;
    int32_t worker_gid;
  };
  // Device events stamped on the host (start_ns already CLOCK_MONOTONIC, not device clock).
  bool host_clock = false;
  // nrta_is_completed / nrta_get_sequence: no call, only the polls in `repeat` (Event.polls_only).
  bool polls_only = false;
  uint64_t start_ns = 0;
  uint64_t duration_ns = 0;
  uint64_t correlation_id = 0;
  uint64_t bytes = 0;
  uint64_t nrta_seq = 0;  // async requests' calls and device events: the request's nrta_seq_t
  // An API call's handles and a device event's ids never come together: they share their 24
  // bytes (a capture holds millions of these records). Read those the kind says. (Trivial
  // members, so that the union is: both start as zeros.)
  struct CallHandles {
    uint64_t model;
    uint64_t tensor;
    uint64_t tensor2;  // nrt_tensor_copy's destination
  };
  struct DeviceIds {
    uint64_t id;      // the runtime's event id
    uint64_t parent;  // the enclosing execution's id, or 0
    uint64_t exec;    // the execution's exec_id (device profile)
  };
  union {
    CallHandles call{};  // EVENT_API_CALL
    DeviceIds device;    // EVENT_DEVICE_EXEC, _OP and _DMA
  };
};
static_assert(sizeof(IngestedEvent) == 120, "a capture holds millions: mind what a field costs");

// A capture's events: millions of records, so in huge pages (huge_page_allocator.h).
using IngestedEvents = CaptureVector<IngestedEvent>;

struct ClockSyncPoint {
  int32_t nc_idx = 0;
  uint64_t device_ns = 0;
  uint64_t host_ns = 0;  // CLOCK_MONOTONIC at the same instant
};

struct IngestedModel {
  uint64_t model_handle = 0;
  LoadedModelFile file;
};

// What one process contributed to one capture: the input of the correlator.
struct ProcessCapture {
  nrtprof::Hello hello;
  std::unordered_map<uint32_t, std::string> strings;           // the stream's, whole
  std::unordered_map<uint32_t, std::vector<uint32_t>> stacks;  // iid -> frame string iids
  IngestedEvents events;  // received during the capture, in arrival order
  // nrt_load / nrt_tensor_allocate / nrt_tensor_free calls since the stream began, also from
  // before the capture: the correlator needs a handle's placement even when it was allocated
  // earlier.
  std::vector<IngestedEvent> handle_events;
  std::vector<ClockSyncPoint> clock_syncs;  // since the stream began
  std::vector<IngestedModel> models;        // since the stream began
  // A copy for the metrics or top (ProcessIngest::ForReplay without models): the files' bytes
  // were left out on purpose, and no capture is written from it.
  bool model_bytes_left_out = false;
  std::vector<std::string> notices;         // EventBatch.notices since the stream began
  // The process's rings file, when the daemon could open it (a stream on this machine), and
  // what it says the process made, read once the process ended without its final batch
  // (CountRecordsOfAnEndedProcess): the correlator counts what was never sent (process_died).
  std::shared_ptr<const RingsFile> rings;
  LaneDropCounts records_made;
  bool records_made_known = false;
  DropCounts drops;  // lost during the capture, as this stream alone tells
  // A process may have several streams in a capture (it reconnected; its final batch came
  // alone), and the shim's counters are the process's, cumulative across them: the correlator
  // reckons such a process's drops from these (ProcessDrops), not by adding up `drops`.
  DropCounts shim_at_begin;           // the shim's counters when the capture began,
  bool shim_at_begin_known = false;   // if the stream had had a batch by then
  DropCounts shim_at_end;             // at its last batch
  DropCounts daemon_drops;            // the daemon's own during the capture (over its bounds)
  // EventBatch.events_sent before the capture's first batch and after its last, and the events
  // received in between: the difference was sent and never arrived.
  LaneDropCounts sent_at_begin, sent_at_end, received_by_lane;
  bool sent_known = false;  // every batch of the capture said how many events were sent
  uint64_t batches_received = 0;  // stored during the capture (duplicates not counted)
  uint64_t events_received = 0;             // during the capture, kept or not
  uint64_t batches_missing = 0;             // sequence gaps during the capture
  // CLOCK_REALTIME - CLOCK_MONOTONIC from the latest clock sample; 0 if none came.
  int64_t realtime_offset_ns = 0;
  bool final = false;  // the process said it was exiting
  bool stream_closed = false;  // the stream ended before the capture was taken
  // A batch of the capture said the program held the runtime's system trace
  // (EventBatch.device_events_wait_for_program): its device events come only as it fetches.
  bool device_events_wait_for_program = false;
};

// Event.polls as IngestedEvent::repeat keeps it.
inline uint32_t SaturatedPolls(uint64_t polls) {
  return polls > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(polls);
}

// Field by field: fn(a.x, b.x).
DropCounts CombineDropCounts(const DropCounts& a, const DropCounts& b,
                             uint64_t (*fn)(uint64_t, uint64_t));

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_PROCESS_CAPTURE_H_
