#include "shim/batcher.h"

#include <utility>

#include "common/clock.h"

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

}  // namespace

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
  for (const nrtprof::Event& e : batch.events()) counts.Add(e.kind());
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

nrtprof::Event* Batcher::AddEvent(uint64_t now_ns) {
  if (open_.events_size() == 0 && open_.clock_syncs_size() == 0) open_since_ns_ = now_ns;
  nrtprof::Event* event = open_.add_events();
  if (static_cast<size_t>(open_.events_size()) >= batch_events_) {
    // The caller fills the event after this returns; sealing moves the batch, whose repeated
    // field keeps the element's address.
    Seal();
    return ready_.back().mutable_events(ready_.back().events_size() - 1);
  }
  return event;
}

void Batcher::AddClockSync(const nrtprof::DeviceClockSync& sync, uint64_t now_ns) {
  if (open_.events_size() == 0 && open_.clock_syncs_size() == 0) open_since_ns_ = now_ns;
  *open_.add_clock_syncs() = sync;
}

void Batcher::AddModel(nrtprof::LoadedModel model) {
  nrtprof::EventBatch batch;
  pending_model_bytes_ += model.model_file().size();
  *batch.add_models() = std::move(model);
  ready_.push_back(std::move(batch));
}

void Batcher::Seal() {
  pending_events_ += open_.events_size();
  ready_.push_back(std::move(open_));
  open_ = nrtprof::EventBatch();
}

void Batcher::SealIfDue(uint64_t now_ns) {
  if (open_.events_size() == 0 && open_.clock_syncs_size() == 0) return;
  if (static_cast<size_t>(open_.events_size()) >= batch_events_ ||
      now_ns - open_since_ns_ >= batch_age_ns_) {
    Seal();
  }
}

void Batcher::SealAll() {
  if (open_.events_size() != 0 || open_.clock_syncs_size() != 0) Seal();
}

void Batcher::AddNeededStrings(const nrtprof::EventBatch& in, StreamInterning* stream,
                               nrtprof::EventBatch* out) {
  auto need_string = [&](uint32_t iid) {
    if (iid == 0 || Sent(stream->strings_sent, iid)) return;
    Mark(&stream->strings_sent, iid);
    nrtprof::InternedString* s = out->add_strings();
    s->set_iid(iid);
    s->set_value(strings_->Get(iid));
  };
  for (const nrtprof::Event& e : in.events()) {
    need_string(e.name_iid());
    need_string(e.model_name_iid());
    need_string(e.engine_iid());
    need_string(e.tensor_name_iid());
    const uint32_t stack = e.stack_iid();
    if (stack == 0 || stacks_ == nullptr || Sent(stream->stacks_sent, stack)) continue;
    Mark(&stream->stacks_sent, stack);
    nrtprof::InternedStack* s = out->add_stacks();
    s->set_iid(stack);
    for (uint32_t frame : stacks_->FrameIids(stack)) {
      need_string(frame);
      s->add_frame_iids(frame);
    }
  }
}

nrtprof::EventBatch Batcher::TakeNext(StreamInterning* stream,
                                      const nrtprof::DropCounters& drops, bool final,
                                      LaneCounts* events) {
  nrtprof::EventBatch batch;
  if (!ready_.empty()) {
    nrtprof::EventBatch& in = ready_.front();
    pending_events_ -= in.events_size();
    pending_model_bytes_ -= ModelBytes(in);
    AddNeededStrings(in, stream, &batch);
    batch.mutable_events()->Swap(in.mutable_events());
    batch.mutable_clock_syncs()->Swap(in.mutable_clock_syncs());
    batch.mutable_models()->Swap(in.mutable_models());
    ready_.pop_front();
  }
  *events = LaneCounts::Of(batch);
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
  AddNeededStrings(*batch, stream, &needed);
  batch->mutable_strings()->Swap(needed.mutable_strings());
  batch->mutable_stacks()->Swap(needed.mutable_stacks());
}

LaneCounts Batcher::EnforceBounds() {
  LaneCounts discarded;
  // Oldest first; the model batches and the event batches have separate bounds.
  for (auto it = ready_.begin(); it != ready_.end() && pending_events() > options_.max_pending_events;) {
    if (it->events_size() == 0) {
      ++it;
      continue;
    }
    discarded += LaneCounts::Of(*it);
    pending_events_ -= it->events_size();
    pending_model_bytes_ -= ModelBytes(*it);
    it = ready_.erase(it);
  }
  for (auto it = ready_.begin();
       it != ready_.end() && pending_model_bytes_ > options_.max_pending_model_bytes; ++it) {
    for (nrtprof::LoadedModel& m : *it->mutable_models()) {
      pending_model_bytes_ -= m.model_file().size();
      m.clear_model_file();
    }
  }
  return discarded;
}

LaneCounts Batcher::DiscardAll() {
  SealAll();
  LaneCounts discarded;
  for (const nrtprof::EventBatch& batch : ready_) discarded += LaneCounts::Of(batch);
  ready_.clear();
  pending_events_ = 0;
  pending_model_bytes_ = 0;
  return discarded;
}

}  // namespace nrtprof::shim
