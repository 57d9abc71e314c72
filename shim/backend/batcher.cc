#include "shim/backend/batcher.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/clock.h"
#include "common/wire_reader.h"
#include "shim/backend/event_wire.h"

namespace nrtprof::shim {
namespace {

uint64_t ModelBytes(const nrtprof::EventBatch& batch) {
  uint64_t bytes = 0;
  for (const nrtprof::LoadedModel& m : batch.models()) bytes += m.model_file().size();
  return bytes;
}

void Mark(std::vector<bool>* sent, uint32_t iid) {
  if (sent->size() <= iid) sent->resize(iid + 1, false);
  (*sent)[iid] = true;
}

bool Sent(const std::vector<bool>& sent, uint32_t iid) {
  return iid < sent.size() && sent[iid];
}

// What the batcher needs of an event: its lane and the strings and stack it names.
struct EventRefs {
  nrtprof::EventKind kind = nrtprof::EVENT_KIND_UNSPECIFIED;
  uint32_t name_iid = 0, model_name_iid = 0, engine_iid = 0, tensor_name_iid = 0, stack_iid = 0;
};

EventRefs RefsOf(const nrtprof::Event& e) {
  EventRefs r;
  r.kind = e.kind();
  r.name_iid = e.name_iid();
  r.model_name_iid = e.model_name_iid();
  r.engine_iid = e.engine_iid();
  r.tensor_name_iid = e.tensor_name_iid();
  r.stack_iid = e.stack_iid();
  return r;
}

// Calls f(EventRefs) for each event of an events_encoded (fields 4 of an EventBatch); stops at
// the first field it cannot read (the batcher wrote them all: none).
template <typename F>
void ForEachEncodedEvent(const std::string& bytes, F f) {
  WireReader in(bytes.data(), bytes.data() + bytes.size());
  while (!in.done()) {
    uint32_t field = 0, type = 0;
    if (!in.Tag(&field, &type)) return;
    if (field != 4 || type != kLengthDelimited) {
      if (!in.Skip(type)) return;
      continue;
    }
    const char* begin = nullptr;
    const char* end = nullptr;
    if (!in.Bytes(&begin, &end)) return;
    WireReader event(begin, end);
    EventRefs r;
    while (!event.done()) {
      uint64_t v = 0;
      if (!event.Tag(&field, &type)) return;
      if (type != kVarint) {
        if (!event.Skip(type)) return;
        continue;
      }
      if (!event.Varint(&v)) return;
      switch (field) {  // Event's field numbers (proto/nrtprof.proto)
        case 1:
          r.kind = static_cast<nrtprof::EventKind>(static_cast<int32_t>(v));
          break;
        case 5:
          r.name_iid = static_cast<uint32_t>(v);
          break;
        case 12:
          r.stack_iid = static_cast<uint32_t>(v);
          break;
        case 18:
          r.model_name_iid = static_cast<uint32_t>(v);
          break;
        case 19:
          r.engine_iid = static_cast<uint32_t>(v);
          break;
        case 22:
          r.tensor_name_iid = static_cast<uint32_t>(v);
          break;
        default:
          break;
      }
    }
    f(r);
  }
}

// Each event of the batch, `events` first.
template <typename F>
void ForEachEvent(const nrtprof::EventBatch& batch, F f) {
  for (const nrtprof::Event& e : batch.events()) f(RefsOf(e));
  ForEachEncodedEvent(batch.events_encoded(), f);
}

}  // namespace

bool DecodeEncodedEvents(nrtprof::EventBatch* batch) {
  if (batch->events_encoded().empty()) return true;
  std::string encoded;
  encoded.swap(*batch->mutable_events_encoded());
  // Its bytes are those of an EventBatch holding only events: merged, they append to `events`.
  return batch->MergeFromString(encoded);
}

void LaneCounts::Add(nrtprof::EventKind kind, uint64_t n) {
  switch (kind) {
    case nrtprof::EVENT_RANGE:
      framework += n;
      break;
    case nrtprof::EVENT_API_CALL:
      runtime += n;
      break;
    default:
      hardware += n;
      break;
  }
}

LaneCounts LaneCounts::Of(const nrtprof::EventBatch& batch) {
  LaneCounts counts;
  ForEachEvent(batch, [&](const EventRefs& e) { counts.Add(e.kind); });
  return counts;
}

Batcher::Batcher(const Options& options, const StringTable* strings, const StackTable* stacks)
    : options_(options),
      strings_(strings),
      stacks_(stacks),
      batch_events_(options.batch_events),
      batch_age_ns_(options.batch_age_ns) {}

void Batcher::SetRecorderOnly(bool recorder_only) {
  batch_events_ = recorder_only ? options_.recorder_batch_events : options_.batch_events;
  batch_age_ns_ = recorder_only ? options_.recorder_batch_age_ns : options_.batch_age_ns;
}

void Batcher::NoteRef(uint32_t ref) {
  const bool stack = (ref & kStackRef) != 0;
  const uint32_t iid = ref & ~kStackRef;
  std::vector<uint32_t>& noted = stack ? stack_noted_ : string_noted_;
  if (noted.size() <= iid) noted.resize(iid + 1, 0);
  if (noted[iid] == open_number_) return;
  noted[iid] = open_number_;
  open_refs_.push_back(ref);
}

void Batcher::NoteRefs(const nrtprof::Event& event) {
  // In the order AddNeededStrings reads an event's: the strings, then the stack.
  for (uint32_t iid : {event.name_iid(), event.model_name_iid(), event.engine_iid(),
                       event.tensor_name_iid()}) {
    if (iid != 0 && iid < kStackRef) NoteRef(iid);
  }
  const uint32_t stack = event.stack_iid();
  if (stack != 0 && stack < kStackRef) NoteRef(stack | kStackRef);
}

void Batcher::AddEvent(const nrtprof::Event& event, uint64_t now_ns) {
  if (open_lanes_.total() == 0 && open_.clock_syncs_size() == 0) open_since_ns_ = now_ns;
  wire::AppendEvent(event, open_.mutable_events_encoded());
  NoteRefs(event);
  open_lanes_.Add(event.kind());
  SealIfFull();
}

void Batcher::AddEncodedEvent(std::string_view bytes, nrtprof::EventKind kind, uint32_t name_iid,
                              uint32_t model_name_iid, uint64_t now_ns) {
  if (open_lanes_.total() == 0 && open_.clock_syncs_size() == 0) open_since_ns_ = now_ns;
  open_.mutable_events_encoded()->append(bytes.data(), bytes.size());
  for (uint32_t iid : {name_iid, model_name_iid}) {
    if (iid != 0 && iid < kStackRef) NoteRef(iid);
  }
  open_lanes_.Add(kind);
  SealIfFull();
}

void Batcher::SealIfFull() {
  if (open_lanes_.total() >= batch_events_ ||
      open_.events_encoded().size() >= options_.batch_bytes) {
    Seal();
  }
}

void Batcher::AddClockSync(const nrtprof::DeviceClockSync& sync, uint64_t now_ns) {
  if (open_lanes_.total() == 0 && open_.clock_syncs_size() == 0) open_since_ns_ = now_ns;
  *open_.add_clock_syncs() = sync;
}

void Batcher::AddModel(nrtprof::LoadedModel model) {
  Sealed sealed;
  pending_model_bytes_ += model.model_file().size();
  *sealed.batch.add_models() = std::move(model);
  ready_.push_back(std::move(sealed));
}

void Batcher::Seal() {
  pending_events_ += open_lanes_.total();
  ready_.push_back({std::move(open_), open_lanes_, std::move(open_refs_)});
  open_ = nrtprof::EventBatch();
  open_lanes_ = LaneCounts();
  open_refs_ = std::vector<uint32_t>();
  if (++open_number_ == 0) {  // after 2^32 batches: no iid may look noted by this one
    std::fill(string_noted_.begin(), string_noted_.end(), 0);
    std::fill(stack_noted_.begin(), stack_noted_.end(), 0);
    open_number_ = 1;
  }
}

void Batcher::SealIfDue(uint64_t now_ns) {
  if (open_lanes_.total() == 0 && open_.clock_syncs_size() == 0) return;
  // Clock syncs alone (the runtime writes one a core at every fetch) wait as long as the
  // recorder's batches: they only map device events, and none came with them. Sealed at the
  // capture's age, they made a process with little to record send a batch at every tick, and
  // gRPC's threads wake ~80 times a second for it (issue 38). An event that joins them is
  // sealed with them at once: the batch is already older than its age.
  const uint64_t age = open_lanes_.total() != 0
                           ? batch_age_ns_
                           : std::max(batch_age_ns_, options_.recorder_batch_age_ns);
  if (open_lanes_.total() >= batch_events_ || now_ns - open_since_ns_ >= age) Seal();
}

void Batcher::SealAll() {
  if (open_lanes_.total() != 0 || open_.clock_syncs_size() != 0) Seal();
}

void Batcher::AddNeededStrings(const nrtprof::EventBatch& in, const std::vector<uint32_t>* refs,
                               StreamInterning* stream, nrtprof::EventBatch* out) {
  auto need_string = [&](uint32_t iid) {
    if (iid == 0 || Sent(stream->strings_sent, iid)) return;
    Mark(&stream->strings_sent, iid);
    nrtprof::InternedString* s = out->add_strings();
    s->set_iid(iid);
    s->set_value(strings_->Get(iid));
  };
  auto need_stack = [&](uint32_t stack) {
    if (stack == 0 || stacks_ == nullptr || Sent(stream->stacks_sent, stack)) return;
    Mark(&stream->stacks_sent, stack);
    nrtprof::InternedStack* s = out->add_stacks();
    s->set_iid(stack);
    for (uint32_t frame : stacks_->FrameIids(stack)) {
      need_string(frame);
      s->add_frame_iids(frame);
    }
  };
  if (refs != nullptr) {
    for (uint32_t ref : *refs) {
      if (ref & kStackRef) {
        need_stack(ref & ~kStackRef);
      } else {
        need_string(ref);
      }
    }
    return;
  }
  ForEachEvent(in, [&](const EventRefs& e) {
    need_string(e.name_iid);
    need_string(e.model_name_iid);
    need_string(e.engine_iid);
    need_string(e.tensor_name_iid);
    need_stack(e.stack_iid);
  });
}

nrtprof::EventBatch Batcher::TakeNext(StreamInterning* stream,
                                      const nrtprof::DropCounters& drops, bool final,
                                      LaneCounts* events) {
  nrtprof::EventBatch batch;
  *events = LaneCounts();
  if (!ready_.empty()) {
    Sealed& in = ready_.front();
    pending_events_ -= in.lanes.total();
    pending_model_bytes_ -= ModelBytes(in.batch);
    // Its own events only: a batch of the batcher's has none in `events`.
    AddNeededStrings(in.batch, in.batch.events().empty() ? &in.refs : nullptr, stream, &batch);
    batch.mutable_events_encoded()->swap(*in.batch.mutable_events_encoded());
    batch.mutable_clock_syncs()->Swap(in.batch.mutable_clock_syncs());
    batch.mutable_models()->Swap(in.batch.mutable_models());
    *events = in.lanes;
    ready_.pop_front();
  }
  batch.set_sequence(next_sequence_++);
  *batch.mutable_drops() = drops;
  batch.mutable_clock()->set_monotonic_ns(MonotonicNs());
  batch.mutable_clock()->set_realtime_ns(RealtimeNs());
  batch.set_final(final && ready_.empty());
  return batch;
}

void Batcher::Restamp(nrtprof::EventBatch* batch, StreamInterning* stream) {
  batch->clear_strings();
  batch->clear_stacks();
  nrtprof::EventBatch needed;
  AddNeededStrings(*batch, nullptr, stream, &needed);
  batch->mutable_strings()->Swap(needed.mutable_strings());
  batch->mutable_stacks()->Swap(needed.mutable_stacks());
}

LaneCounts Batcher::EnforceBounds() {
  LaneCounts discarded;
  // Oldest first; the model batches and the event batches have separate bounds.
  for (auto it = ready_.begin(); it != ready_.end() && pending_events() > options_.max_pending_events;) {
    if (it->lanes.total() == 0) {
      ++it;
      continue;
    }
    discarded += it->lanes;
    pending_events_ -= it->lanes.total();
    pending_model_bytes_ -= ModelBytes(it->batch);
    it = ready_.erase(it);
  }
  for (auto it = ready_.begin();
       it != ready_.end() && pending_model_bytes_ > options_.max_pending_model_bytes; ++it) {
    for (nrtprof::LoadedModel& m : *it->batch.mutable_models()) {
      pending_model_bytes_ -= m.model_file().size();
      m.clear_model_file();
    }
  }
  return discarded;
}

LaneCounts Batcher::DiscardAll() {
  SealAll();
  LaneCounts discarded;
  for (const Sealed& sealed : ready_) discarded += sealed.lanes;
  ready_.clear();
  pending_events_ = 0;
  pending_model_bytes_ = 0;
  return discarded;
}

}  // namespace nrtprof::shim
