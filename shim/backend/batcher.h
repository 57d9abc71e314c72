// Groups the flusher's events into EventBatches and readies them for one stream.
//
// Collecting: events and clock syncs go into the open batch (each event encoded at once into
// EventBatch.events_encoded: its bytes are all the batch keeps of it), which is sealed when it
// holds `batch_events` events or `batch_bytes` bytes of them, or is `batch_age_ns` old; while only a standing daemon's flight
// recorder records (SetRecorderOnly), `recorder_batch_events` or `recorder_batch_age_ns`
// instead: fewer, larger batches, so the stream and the daemon wake less often. Each loaded
// model gets a batch of its own (it may be large). Sealed batches wait, bounded: past
// `max_pending_events` the oldest event batches are discarded and counted (the caller adds
// them to DropCounters.daemon_away); past `max_pending_model_bytes` the oldest model files are
// discarded.
//
// Sending: TakeNext() stamps the oldest sealed batch for a stream: its sequence number (the
// process's, from 1, across streams, so that the daemon can tell a resent batch from a new
// one), the interned strings and stacks that stream has not been sent yet, the drop counters
// and a clock sample. Ids are the process's (StringTable, StackTable); what a stream has seen is
// in its StreamInterning, which a new stream starts empty. Restamp() readies a batch stamped
// for an earlier stream to be resent on a new one.
//
// Not thread-safe: the flusher thread owns it.
#ifndef NRTPROF_SHIM_BACKEND_BATCHER_H_
#define NRTPROF_SHIM_BACKEND_BATCHER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "shim/backend/proto_lite/nrtprof.pb.h"
#include "shim/backend/stack_table.h"
#include "shim/backend/string_table.h"

namespace nrtprof::shim {

// Events by lane (EventKind), for the drop counters' by_lane.
struct LaneCounts {
  uint64_t framework = 0;  // EVENT_RANGE
  uint64_t runtime = 0;    // EVENT_API_CALL
  uint64_t hardware = 0;   // EVENT_DEVICE_*

  uint64_t total() const { return framework + runtime + hardware; }
  void Add(nrtprof::EventKind kind, uint64_t n = 1);
  LaneCounts& operator+=(const LaneCounts& o) {
    framework += o.framework;
    runtime += o.runtime;
    hardware += o.hardware;
    return *this;
  }
  friend LaneCounts operator+(LaneCounts a, const LaneCounts& b) { return a += b; }
  // The batch's events, by lane (`events` and events_encoded).
  static LaneCounts Of(const nrtprof::EventBatch& batch);
};

// For a daemon that does not read events_encoded: its events moved into `events`, after those
// there. False if events_encoded did not hold events (it is then cleared).
bool DecodeEncodedEvents(nrtprof::EventBatch* batch);

struct StreamInterning {
  std::vector<bool> strings_sent;  // by string iid
  std::vector<bool> stacks_sent;   // by stack iid
};

class Batcher {
 public:
  struct Options {
    // A capture's batches. Each message costs the process ~0.1-0.3 ms of CPU whatever its size
    // (gRPC's write and its completion, the daemon's ack read on gRPC's threads, the socket's
    // wakes across vCPUs): batches of up to 100 ms and 4,096 events made a process doing
    // 10,000 async executions a second send 10 a second, and its nrtprof threads took
    // 0.85-1.03% of a core; at 500 ms and these bounds, 0.69-0.88% (issue 38, BENCHMARKS.md).
    // A capture's stop still sends everything at once (CaptureControl.flush).
    size_t batch_events = 32768;
    uint64_t batch_age_ns = 500'000'000;
    // Whatever the count, a batch is sealed once its encoded events take this many bytes (the
    // flusher makes it a quarter of a lossless spool, so that a small spool still holds some).
    size_t batch_bytes = 2u << 20;
    size_t recorder_batch_events = 32768;
    uint64_t recorder_batch_age_ns = 500'000'000;  // NRTPROF_RECORDER_BATCH_MS
    size_t max_pending_events = 1 << 18;
    uint64_t max_pending_model_bytes = 256ull << 20;
  };

  Batcher(const Options& options, const StringTable* strings, const StackTable* stacks);
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // `event`, encoded, in the open batch; `now_ns` starts the batch's age if it is the first.
  void AddEvent(const nrtprof::Event& event, uint64_t now_ns);
  // The same for an event already encoded as wire::AppendEvent (event_wire.h) writes it
  // (`bytes`), which names `name_iid` and `model_name_iid` and no other string or stack.
  void AddEncodedEvent(std::string_view bytes, nrtprof::EventKind kind, uint32_t name_iid,
                       uint32_t model_name_iid, uint64_t now_ns);
  void AddClockSync(const nrtprof::DeviceClockSync& sync, uint64_t now_ns);
  void AddModel(nrtprof::LoadedModel model);

  // Which bounds seal the open batch from now on: the recorder's (true) or a capture's.
  void SetRecorderOnly(bool recorder_only);
  // Seals the open batch if it is full or old enough (or, for SealAll, if it holds anything).
  void SealIfDue(uint64_t now_ns);
  void SealAll();

  bool has_ready() const { return !ready_.empty(); }
  size_t ready_batches() const { return ready_.size(); }
  // Events in sealed batches and in the open one.
  size_t pending_events() const { return pending_events_ + open_lanes_.total(); }

  // The oldest sealed batch, stamped for `stream`, or, if none is sealed and `final` is set,
  // an empty one. `final` marks the batch as the last one when no other is sealed.
  // `events` receives how many events it carries, by lane.
  nrtprof::EventBatch TakeNext(StreamInterning* stream, const nrtprof::DropCounters& drops,
                               bool final, LaneCounts* events);

  // `batch`, stamped for an earlier stream, with the strings and stacks `stream` needs instead.
  void Restamp(nrtprof::EventBatch* batch, StreamInterning* stream);

  // Enforces the bounds; returns the events discarded.
  LaneCounts EnforceBounds();
  // Discards everything pending (the process is leaving with no daemon); returns the events.
  LaneCounts DiscardAll();

 private:
  // What a batch's events name, in the order they first name it: string iids, and stack iids
  // with kStackRef set. Gathered as events are added, so that stamping a batch for a stream
  // looks at each string and stack once instead of reading every event back from its bytes
  // (issue 38: that was 6% of the flusher's time at 10,000 async executions a second).
  static constexpr uint32_t kStackRef = 1u << 31;
  void NoteRefs(const nrtprof::Event& event);
  void NoteRef(uint32_t ref);
  void Seal();
  void SealIfFull();
  // The strings and stacks `stream` lacks, of the events `refs` lists (as NoteRefs made it) or,
  // with `refs` null, of `in`'s events read back.
  void AddNeededStrings(const nrtprof::EventBatch& in, const std::vector<uint32_t>* refs,
                        StreamInterning* stream, nrtprof::EventBatch* out);

  const Options options_;
  const StringTable* const strings_;
  const StackTable* const stacks_;
  size_t batch_events_;    // options_.batch_events or .recorder_batch_events
  uint64_t batch_age_ns_;  // likewise
  // A batch and its events by lane, counted as they were added.
  struct Sealed {
    nrtprof::EventBatch batch;
    LaneCounts lanes;
    std::vector<uint32_t> refs;  // NoteRefs'
  };
  nrtprof::EventBatch open_;
  LaneCounts open_lanes_;
  std::vector<uint32_t> open_refs_;
  // Per string iid and per stack iid, the number of the open batch that last noted it.
  std::vector<uint32_t> string_noted_, stack_noted_;
  uint32_t open_number_ = 1;
  uint64_t open_since_ns_ = 0;
  std::deque<Sealed> ready_;
  size_t pending_events_ = 0;  // in ready_
  uint64_t next_sequence_ = 1;
  uint64_t pending_model_bytes_ = 0;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_BATCHER_H_
