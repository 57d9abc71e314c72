// Ingest: the daemon's state for one shim stream (one profiled process). It checks each
// EventBatch, resolves nothing yet but keeps the stream's interning tables, turns wire events
// into compact records, and keeps what the correlator needs for the capture the process is in:
// clock sync points, loaded models, the tensor and model handles it allocated, drop counters.
//
// Used by CollectorCore, which feeds it the messages of one stream and decides when a capture
// begins and ends for the process (BeginCapture / TakeCapture). A malformed batch is refused
// whole with INVALID_ARGUMENT (or RESOURCE_EXHAUSTED over a bound) and changes nothing.
//
// Not thread-safe: the caller serializes calls for one stream.
#ifndef NRTPROF_DAEMON_INGEST_H_
#define NRTPROF_DAEMON_INGEST_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trace/huge_page_allocator.h"
#include "daemon/rings_reader.h"
#include "trace/api_function.h"
#include "trace/trace_model.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {

// The most address space a capture reserves up front for one process's events (pages come
// only as they fill); past it the events' vector grows by doubling.
inline constexpr uint64_t kReservedCaptureBytes = uint64_t{1} << 30;

// Bounds on what one process may make the daemon keep. Beyond max_events_per_process, events
// are counted as dropped (DropCounts::daemon_overflow): a live capture keeps the first half of
// the bound and the newest events in the other half (what a user wants after Ctrl-C is the
// end; a capture of steps, its start), a replay the newest (DropOldest). Beyond the other
// bounds a batch is refused (RESOURCE_EXHAUSTED), except model files, whose bytes are then
// not kept.
struct IngestLimits {
  uint64_t max_events_per_process = 2'000'000;
  uint64_t max_strings_per_process = 1'000'000;
  uint64_t max_string_bytes = 64 * 1024;                   // one interned string
  uint64_t max_interned_bytes_per_process = 256ull << 20;  // all of them
  uint32_t max_stack_frames = 1024;
  uint64_t max_model_bytes_per_process = 1ull << 30;
  uint64_t max_clock_syncs_per_process = 1 << 16;
  uint64_t max_handle_events_per_process = 1 << 20;
};

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
  uint32_t repeat = 0;
  int32_t status = 0;
  int32_t nc_idx = -1;
  int32_t placement = 0;
  // Device events stamped on the host (start_ns already CLOCK_MONOTONIC, not device clock).
  bool host_clock = false;
  uint64_t start_ns = 0;
  uint64_t duration_ns = 0;
  uint64_t correlation_id = 0;
  uint64_t bytes = 0;
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
static_assert(sizeof(IngestedEvent) == 112, "a capture holds millions: mind what a field costs");

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

// Field by field: fn(a.x, b.x).
DropCounts CombineDropCounts(const DropCounts& a, const DropCounts& b,
                             uint64_t (*fn)(uint64_t, uint64_t));

class ProcessIngest {
 public:
  // A Hello the daemon can accept: a pid, strings of sane length.
  static absl::Status ValidateHello(const nrtprof::Hello& hello);

  // `hello` must have passed ValidateHello.
  ProcessIngest(const nrtprof::Hello& hello, const IngestLimits& limits);
  ProcessIngest(const ProcessIngest&) = delete;
  ProcessIngest& operator=(const ProcessIngest&) = delete;

  // Takes one batch. Returns the sequence to acknowledge: every batch up to it is stored.
  // A batch numbered at or below the last accepted one is a duplicate (a replay): only its
  // interned strings and stacks are kept, and it is acknowledged again. A batch numbered past the next one is accepted; the
  // numbers skipped are counted in batches_missing (their events are lost, how many is
  // unknown). A malformed batch returns an error and changes nothing.
  absl::StatusOr<uint64_t> OnBatch(const nrtprof::EventBatch& batch);
  // The same, for a batch whose events were read as records (wire_events.h): `rest` is the
  // batch without them (its own events, if any, are not looked at).
  absl::StatusOr<uint64_t> OnBatch(const nrtprof::EventBatch& rest,
                                   const std::vector<IngestedEvent>& events);

  // OnBatch for a ForReplay copy, of a batch the flight recorder kept: `rest` is the batch
  // without its events, `events` its events as records (wire_events.h reads both from the kept
  // bytes). Not checked again: the stream's ingest accepted the batch before it was kept.
  absl::StatusOr<uint64_t> OnRecordedBatch(const nrtprof::EventBatch& rest,
                                           const std::vector<IngestedEvent>& events);

  // A copy of this stream's lasting state (interned strings and stacks, clock points, handle
  // events, models, notices, rings file), to decode batches the flight recorder kept: the
  // copy takes their events only (what else they carried is in the state already), numbered
  // after `sequence`. Without `models`, the copy lists the models without their files (what
  // the metrics need: a fold every few seconds must not copy model files each time).
  std::unique_ptr<ProcessIngest> ForReplay(uint64_t sequence, bool models = true) const;
  // For a ForReplay copy given more recorded events than the per-process bound: the first
  // `events` it is given are counted as dropped (daemon_overflow, by lane) instead of kept, so
  // that the capture holds the newest events within the bound, as the flight recorder keeps
  // the newest batches. (A live capture cannot know what is still to come: it keeps its
  // first half-bound and its newest, IngestLimits.)
  void DropOldest(uint64_t events) { drop_oldest_ = events; }

  // A new stream of a process whose earlier streams the daemon stored up to `sequence`
  // (sequences are the process's, across its streams): batches up to it are duplicates the
  // shim resends because their ack never reached it. Call before the first batch.
  void ResumeAfter(uint64_t sequence) { last_sequence_ = sequence; }

  // From now on the process's events are kept for a capture (until TakeCapture). Events that
  // arrive while no capture is in progress are counted (events_outside_capture) and dropped:
  // no capture wanted them.
  //
  // A capture's events take one reservation of address space, of the per-process bound, whose
  // pages come as they fill -- or, when the caller knows how many come (a replay of recorded
  // batches), of `expected_events`: memory a capture freed is reused only for blocks it fits
  // (huge_page_allocator.h), and a vector grown by doubling would fault in twice its memory.
  void BeginCapture(std::optional<uint64_t> expected_events = std::nullopt);
  bool capturing() const { return capturing_; }
  // Ends the capture for this process and hands over what it collected.
  ProcessCapture TakeCapture();
  // The capture goes on; hands over, as a part of it, the events collected so far that
  // `settled` marks (by index in capture_events()), with what decoding them needs (strings,
  // stacks, handle events, clock points, models). The counts (drops, events received, ...)
  // stay for TakeCapture: the last part has them, for the whole capture. The events kept stay
  // in their order.
  ProcessCapture TakePart(const std::vector<uint8_t>& settled);
  // The events collected for the capture so far, in arrival order, and the clock points.
  const IngestedEvents& capture_events() const { return events_; }
  const std::vector<ClockSyncPoint>& clock_syncs() const { return clock_syncs_; }
  // The bytes of the model files kept (IngestedModel), which every part of a capture copies.
  uint64_t model_bytes() const { return model_bytes_; }

  const nrtprof::Hello& hello() const { return hello_; }
  // The process's rings file (rings_reader.h), handed to every capture taken from now on.
  void SetRingsFile(std::shared_ptr<const RingsFile> rings) { rings_ = std::move(rings); }
  bool final() const { return final_; }
  uint64_t last_sequence() const { return last_sequence_; }
  uint64_t events_received() const { return events_received_; }  // since the stream began
  // The latest step the process marked (nrtprof_step: a range "ProfilerStep#N"), -1 if none.
  int64_t last_step() const { return last_step_; }
  uint64_t events_outside_capture() const { return events_outside_capture_; }
  uint64_t batches_missing() const { return batches_missing_; }
  // Cumulative since the stream began: the shim's counters plus the daemon's own.
  DropCounts drops() const;
  DropCounts shim_drops() const;    // the shim's, cumulative for the process
  DropCounts daemon_drops() const;  // the daemon's own

 private:
  absl::Status Validate(const nrtprof::EventBatch& rest,
                        const std::vector<IngestedEvent>& events) const;
  // Stores a checked batch (`rest` without its events, `events` them): a batch stored already
  // only for its interning. Returns the sequence to acknowledge.
  uint64_t Store(const nrtprof::EventBatch& rest, const std::vector<IngestedEvent>& events);
  void ApplyEvent(const IngestedEvent& record, LaneDropCounts* lanes_of_batch);
  void ApplyBatch(const nrtprof::EventBatch& batch, const LaneDropCounts& lanes_of_batch);
  void ApplyInterning(const nrtprof::EventBatch& batch);
  void KeepHandleEvent(const IngestedEvent& e);
  void KeepClockSync(const ClockSyncPoint& sync);

  const nrtprof::Hello hello_;
  const IngestLimits limits_;
  bool replay_ = false;  // ForReplay's copy: events only
  int64_t last_step_ = -1;
  std::unordered_map<uint32_t, int64_t> step_of_name_;  // range name iid -> step, -1: not one
  std::unordered_map<uint32_t, std::string> strings_;
  uint64_t interned_bytes_ = 0;
  std::unordered_map<uint32_t, std::vector<uint32_t>> stacks_;
  uint64_t last_sequence_ = 0;
  uint64_t events_received_ = 0;
  uint64_t events_outside_capture_ = 0;
  uint64_t batches_missing_ = 0;
  nrtprof::DropCounters shim_drops_;  // latest cumulative counters, field by field the largest
  uint64_t daemon_overflow_ = 0;
  uint64_t drop_oldest_ = 0;  // DropOldest: still to drop
  bool model_bytes_left_out_ = false;  // ForReplay without models
  // A live capture over its bound: events_[ring_begin_...] is a ring of its newest events, and
  // ring_next_ its oldest slot (overwritten next). TakeCapture puts them back in arrival order.
  size_t ring_begin_ = 0;
  size_t ring_next_ = 0;
  uint64_t ring_overwritten_ = 0;  // in this capture
  bool device_wait_in_capture_ = false;  // ProcessCapture::device_events_wait_for_program
  LaneDropCounts daemon_overflow_by_lane_;
  std::vector<ClockSyncPoint> clock_syncs_;
  std::vector<IngestedEvent> handle_events_;
  std::vector<IngestedModel> models_;
  std::vector<std::string> notices_;  // distinct, in the order first seen
  std::shared_ptr<const RingsFile> rings_;
  uint64_t model_bytes_ = 0;
  int64_t realtime_offset_ns_ = 0;
  bool final_ = false;
  uint64_t batches_applied_ = 0;     // batches stored
  LaneDropCounts received_by_lane_;   // events of the batches stored
  LaneDropCounts sent_;               // the largest EventBatch.events_sent, lane by lane
  bool sent_seen_ = false;

  // The capture in progress, if capturing_.
  bool capturing_ = false;
  IngestedEvents events_;
  DropCounts shim_at_begin_;
  bool shim_at_begin_known_ = false;
  DropCounts daemon_at_begin_;
  LaneDropCounts received_at_begin_by_lane_;
  LaneDropCounts sent_at_begin_;
  bool sent_at_begin_set_ = false;
  bool sent_missing_ = false;  // a batch of the capture had no events_sent
  uint64_t batches_at_begin_ = 0;
  uint64_t received_at_begin_ = 0;
  uint64_t missing_at_begin_ = 0;
};

// A wire Event as a record.
IngestedEvent ToRecord(const nrtprof::Event& e);

// The batch's events as records, in order: those of `events`, then those of events_encoded
// (proto/nrtprof.proto). False if events_encoded is not an EventBatch's bytes.
bool RecordsOf(const nrtprof::EventBatch& batch, std::vector<IngestedEvent>* records);

// How many events the batch carries (`events` and events_encoded); those of an events_encoded
// that is not an EventBatch's bytes are not counted.
size_t CountEvents(const nrtprof::EventBatch& batch);
// Field by field (records have padding), the union's bytes whichever member the kind says.
bool SameRecord(const IngestedEvent& a, const IngestedEvent& b);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_INGEST_H_
