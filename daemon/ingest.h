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
#include <deque>
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
#include "trace/process_capture.h"
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
  // The copy's capture counts the shim's drops since batch `drops_after` (default: `sequence`),
  // as far as this stream still knows its counters then: a capture whose first batches are
  // context from before its start does not count what was dropped in them.
  std::unique_ptr<ProcessIngest> ForReplay(uint64_t sequence, bool models = true,
                                           std::optional<uint64_t> drops_after = {}) const;
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
  // in their order. `count`: how many `settled` marks.
  ProcessCapture TakePart(const std::vector<uint8_t>& settled, size_t count);
  // The events collected for the capture so far, in arrival order, and the clock points.
  const IngestedEvents& capture_events() const { return events_; }
  const std::vector<ClockSyncPoint>& clock_syncs() const { return clock_syncs_; }
  // The text the process interned as `iid`, or null if none came.
  const std::string* interned(uint32_t iid) const {
    auto s = strings_.find(iid);
    return s != strings_.end() ? &s->second : nullptr;
  }
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
  // The shim's counters as they stood once batch `sequence` was stored (drops_history_), into
  // *drops; false if no longer known.
  bool ShimDropsAfter(uint64_t sequence, nrtprof::DropCounters* drops) const;

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
  // A live stream's counters after its first batch and after each batch that raised them, the
  // newest kMaxDropSteps (the last one let go in drops_forgotten_): a ForReplay copy starts
  // from those of the batch before its first, so that a capture of the past counts only what
  // was dropped within its window, not what the process dropped before (a flood of ops at its
  // start, seconds before the steps it captures).
  struct DropStep {
    uint64_t sequence;
    nrtprof::DropCounters drops;
  };
  static constexpr size_t kMaxDropSteps = 1024;
  std::deque<DropStep> drops_history_;
  std::optional<DropStep> drops_forgotten_;
  bool drops_at_begin_known_ = false;  // a ForReplay copy whose counters before it are known
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
