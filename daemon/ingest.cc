#include "daemon/ingest.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "common/api_functions.h"

namespace nrtprof::daemon {
namespace {

// Bounds beyond which a field can only be garbage, whatever the hardware.
constexpr int32_t kMaxNeuronCores = 4096;
constexpr uint64_t kMaxDurationNs = 7ull * 24 * 3600 * 1'000'000'000;  // a week
constexpr uint32_t kMaxRangeDepth = 1 << 16;
constexpr size_t kMaxHelloString = 4096;
constexpr size_t kMaxCommandLineBytes = 1 << 20;
constexpr size_t kMaxModelName = 4096;
// EventBatch.notices: what the shim could not do, a few lines per process.
constexpr int kMaxNotices = 16;
constexpr size_t kMaxNoticeBytes = 1024;

absl::Status Malformed(uint64_t sequence, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("batch ", sequence, ": ", what));
}

}  // namespace

IngestedEvent ToRecord(const nrtprof::Event& e) {
  IngestedEvent r;
  r.kind = e.kind();
  r.tid = e.tid();
  r.name_iid = e.name_iid();
  r.function = e.function();
  r.stack_iid = e.stack_iid();
  r.depth = e.depth();
  r.model_name_iid = e.model_name_iid();
  r.engine_iid = e.engine_iid();
  r.tensor_name_iid = e.tensor_name_iid();
  r.repeat = e.repeat();
  r.status = e.status();
  r.nc_idx = e.nc_idx();
  r.placement = e.placement();
  // A collective's device events: the rank's core where an API call's placement is.
  if (e.kind() == nrtprof::EVENT_DEVICE_EXEC && e.worker_gid() != 0) {
    r.worker_gid = e.worker_gid();
  }
  r.host_clock = e.host_clock();
  r.polls_only = e.polls_only();
  r.start_ns = e.start_ns();
  r.duration_ns = e.duration_ns();
  r.correlation_id = e.correlation_id();
  r.bytes = e.bytes();
  r.nrta_seq = e.nrta_seq();
  if (e.polls() != 0) r.repeat = SaturatedPolls(e.polls());
  switch (e.kind()) {
    case nrtprof::EVENT_API_CALL:
      r.call = {e.model_handle(), e.tensor_handle(), e.tensor_handle2()};
      break;
    case nrtprof::EVENT_DEVICE_EXEC:
    case nrtprof::EVENT_DEVICE_OP:
    case nrtprof::EVENT_DEVICE_DMA:
      r.device = {e.device_id(), e.device_parent_id(), e.exec_id()};
      break;
    default:
      break;  // ranges name neither
  }
  return r;
}

bool SameRecord(const IngestedEvent& a, const IngestedEvent& b) {
  return a.kind == b.kind && a.tid == b.tid && a.function == b.function &&
         a.name_iid == b.name_iid && a.stack_iid == b.stack_iid && a.depth == b.depth &&
         a.model_name_iid == b.model_name_iid && a.engine_iid == b.engine_iid &&
         a.tensor_name_iid == b.tensor_name_iid && a.repeat == b.repeat && a.status == b.status &&
         a.nc_idx == b.nc_idx && a.placement == b.placement && a.host_clock == b.host_clock &&
         a.polls_only == b.polls_only &&
         a.start_ns == b.start_ns && a.duration_ns == b.duration_ns &&
         a.correlation_id == b.correlation_id && a.bytes == b.bytes && a.nrta_seq == b.nrta_seq &&
         std::memcmp(&a.call, &b.call, sizeof(a.call)) == 0;
}

namespace {

bool IsHandleFunction(nrtprof::ApiFunction f) {
  return IsModelLoad(f) || f == nrtprof::API_NRT_TENSOR_ALLOCATE ||
         f == nrtprof::API_NRT_TENSOR_FREE;
}

// The lane an event of `kind` is drawn in.
uint64_t& LaneOf(nrtprof::EventKind kind, LaneDropCounts* lanes) {
  switch (kind) {
    case nrtprof::EVENT_RANGE:
      return lanes->framework;
    case nrtprof::EVENT_API_CALL:
      return lanes->runtime;
    default:
      return lanes->hardware;
  }
}

DropCounts Subtract(const DropCounts& a, const DropCounts& b) {
  return CombineDropCounts(a, b, [](uint64_t x, uint64_t y) { return x > y ? x - y : 0; });
}

LaneDropCounts SubtractLanes(const LaneDropCounts& a, const LaneDropCounts& b) {
  auto sub = [](uint64_t x, uint64_t y) { return x > y ? x - y : 0; };
  LaneDropCounts l;
  l.framework = sub(a.framework, b.framework);
  l.runtime = sub(a.runtime, b.runtime);
  l.hardware = sub(a.hardware, b.hardware);
  return l;
}

LaneDropCounts LanesOf(const nrtprof::EventsByLane& lanes) {
  LaneDropCounts l;
  l.framework = lanes.framework();
  l.runtime = lanes.runtime();
  l.hardware = lanes.hardware();
  return l;
}

}  // namespace


absl::Status ProcessIngest::ValidateHello(const nrtprof::Hello& hello) {
  if (hello.pid() == 0) return absl::InvalidArgumentError("Hello without a pid");
  for (const std::string* s : {&hello.host(), &hello.boot_id(), &hello.executable(),
                               &hello.shim_version(), &hello.capture_id(), &hello.job()}) {
    if (s->size() > kMaxHelloString) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Hello has a ", s->size(), "-byte string field (at most ", kMaxHelloString, ")"));
    }
  }
  size_t command_line_bytes = 0;
  for (const std::string& arg : hello.command_line()) command_line_bytes += arg.size() + 1;
  if (command_line_bytes > kMaxCommandLineBytes) {
    return absl::InvalidArgumentError(absl::StrCat("Hello has a ", command_line_bytes,
                                                   "-byte command line (at most ",
                                                   kMaxCommandLineBytes, ")"));
  }
  return absl::OkStatus();
}

ProcessIngest::ProcessIngest(const nrtprof::Hello& hello, const IngestLimits& limits)
    : hello_(hello), limits_(limits) {
  if (hello.clock().monotonic_ns() != 0 && hello.clock().realtime_ns() != 0) {
    realtime_offset_ns_ =
        static_cast<int64_t>(hello.clock().realtime_ns() - hello.clock().monotonic_ns());
  }
}

std::unique_ptr<ProcessIngest> ProcessIngest::ForReplay(uint64_t sequence, bool models,
                                                        std::optional<uint64_t> drops_after) const {
  auto copy = std::make_unique<ProcessIngest>(hello_, limits_);
  copy->replay_ = true;
  copy->strings_ = strings_;
  copy->interned_bytes_ = interned_bytes_;
  copy->stacks_ = stacks_;
  copy->clock_syncs_ = clock_syncs_;
  copy->handle_events_ = handle_events_;
  copy->models_.reserve(models_.size());
  for (const IngestedModel& m : models_) {
    copy->models_.push_back(models ? m : IngestedModel{m.model_handle, {m.file.name, "", m.file.size}});
  }
  copy->model_bytes_left_out_ = !models;
  copy->notices_ = notices_;
  copy->rings_ = rings_;
  copy->realtime_offset_ns_ = realtime_offset_ns_;
  copy->last_sequence_ = sequence;
  // The counters before the window: what the capture's batches add to them is its own.
  copy->drops_at_begin_known_ = ShimDropsAfter(drops_after.value_or(sequence), &copy->shim_drops_);
  return copy;
}

bool ProcessIngest::ShimDropsAfter(uint64_t sequence, nrtprof::DropCounters* drops) const {
  for (auto it = drops_history_.rbegin(); it != drops_history_.rend(); ++it) {
    if (it->sequence <= sequence) {
      *drops = it->drops;
      return true;
    }
  }
  if (drops_forgotten_.has_value()) {
    if (drops_forgotten_->sequence > sequence) return false;
    *drops = drops_forgotten_->drops;
    return true;
  }
  // Before this stream's first batch: known only at the process's start (nothing dropped
  // before its first batch was counted); a resumed stream's earlier batches were another's.
  if (sequence != 0) return false;
  drops->Clear();
  return true;
}

bool RecordsOf(const nrtprof::EventBatch& batch, std::vector<IngestedEvent>* records) {
  records->clear();
  records->reserve(static_cast<size_t>(batch.events_size()));
  for (const nrtprof::Event& e : batch.events()) records->push_back(ToRecord(e));
  if (batch.events_encoded().empty()) return true;
  nrtprof::EventBatch encoded;
  if (!encoded.ParseFromString(batch.events_encoded())) return false;
  for (const nrtprof::Event& e : encoded.events()) records->push_back(ToRecord(e));
  return true;
}

size_t CountEvents(const nrtprof::EventBatch& batch) {
  size_t n = static_cast<size_t>(batch.events_size());
  nrtprof::EventBatch encoded;
  if (!batch.events_encoded().empty() && encoded.ParseFromString(batch.events_encoded())) {
    n += static_cast<size_t>(encoded.events_size());
  }
  return n;
}

absl::StatusOr<uint64_t> ProcessIngest::OnBatch(const nrtprof::EventBatch& batch) {
  std::vector<IngestedEvent> records;
  if (!RecordsOf(batch, &records)) {
    return Malformed(batch.sequence(), "events_encoded does not hold events");
  }
  return OnBatch(batch, records);
}

absl::StatusOr<uint64_t> ProcessIngest::OnBatch(const nrtprof::EventBatch& rest,
                                                const std::vector<IngestedEvent>& events) {
  if (rest.sequence() == 0) {
    return absl::InvalidArgumentError("batch with sequence 0 (sequences start at 1)");
  }
  if (absl::Status s = Validate(rest, events); !s.ok()) return s;
  return Store(rest, events);
}

absl::StatusOr<uint64_t> ProcessIngest::OnRecordedBatch(const nrtprof::EventBatch& rest,
                                                        const std::vector<IngestedEvent>& events) {
  if (!replay_) {
    return absl::FailedPreconditionError("a recorded batch given to a live stream's ingest");
  }
  return Store(rest, events);
}

uint64_t ProcessIngest::Store(const nrtprof::EventBatch& rest,
                              const std::vector<IngestedEvent>& events) {
  // A replay of something already stored: storing it again would double its events. Its
  // strings and stacks are kept all the same: resent on a new stream, it carries the ones that
  // stream's later batches use.
  if (rest.sequence() <= last_sequence_) {
    ApplyInterning(rest);
    return last_sequence_;
  }
  // A gap: batches lost between the shim and here (a shim bug, or spool files lost). The
  // batch is still good, so it is kept; the gap is counted in batches_missing because the
  // events of the missing batches cannot be counted.
  // A final batch that came alone (Hello.final_only) follows batches of another stream.
  if (hello_.final_only()) last_sequence_ = rest.sequence() - 1;
  batches_missing_ += rest.sequence() - last_sequence_ - 1;
  last_sequence_ = rest.sequence();
  ApplyInterning(rest);
  LaneDropCounts lanes_of_batch;
  for (const IngestedEvent& e : events) ApplyEvent(e, &lanes_of_batch);
  ApplyBatch(rest, lanes_of_batch);
  return last_sequence_;
}

absl::Status ProcessIngest::Validate(const nrtprof::EventBatch& batch,
                                     const std::vector<IngestedEvent>& events) const {
  const uint64_t seq = batch.sequence();
  // The strings this batch defines, checked against the table and each other.
  std::unordered_map<uint32_t, const std::string*> defined;
  uint64_t new_bytes = 0;
  for (const nrtprof::InternedString& s : batch.strings()) {
    if (s.iid() == 0) return Malformed(seq, "interned string with id 0 (ids start at 1)");
    if (s.value().size() > limits_.max_string_bytes) {
      return Malformed(seq, absl::StrCat("interned string ", s.iid(), " is ", s.value().size(),
                                         " bytes (at most ", limits_.max_string_bytes, ")"));
    }
    auto known = strings_.find(s.iid());
    if (known != strings_.end()) {
      if (known->second != s.value()) {
        return Malformed(
            seq, absl::StrCat("interned string ", s.iid(), " redefined with another value"));
      }
      continue;
    }
    auto [it, inserted] = defined.emplace(s.iid(), &s.value());
    if (!inserted && *it->second != s.value()) {
      return Malformed(
          seq, absl::StrCat("interned string ", s.iid(), " defined twice with different values"));
    }
    if (inserted) new_bytes += s.value().size();
  }
  if (strings_.size() + defined.size() > limits_.max_strings_per_process ||
      interned_bytes_ + new_bytes > limits_.max_interned_bytes_per_process) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "batch ", seq, ": the process interned more than ", limits_.max_strings_per_process,
        " strings or ", limits_.max_interned_bytes_per_process, " bytes of them"));
  }
  // Events of a batch name the same few strings over and over: those found already are
  // remembered (direct-mapped by their low bits), which spares most of the hash look-ups.
  uint32_t found[8] = {};
  auto known_string = [&](uint32_t iid) {
    uint32_t& slot = found[iid & 7];
    if (slot == iid && iid != 0) return true;
    if (strings_.count(iid) == 0 && defined.count(iid) == 0) return false;
    slot = iid;
    return true;
  };

  std::unordered_set<uint32_t> batch_stacks;
  for (const nrtprof::InternedStack& stack : batch.stacks()) {
    if (stack.iid() == 0) return Malformed(seq, "interned stack with id 0 (ids start at 1)");
    if (static_cast<uint32_t>(stack.frame_iids_size()) > limits_.max_stack_frames) {
      return Malformed(seq, absl::StrCat("stack ", stack.iid(), " has ", stack.frame_iids_size(),
                                         " frames (at most ", limits_.max_stack_frames, ")"));
    }
    for (uint32_t frame : stack.frame_iids()) {
      if (!known_string(frame)) {
        return Malformed(seq, absl::StrCat("stack ", stack.iid(), " names unknown string ", frame));
      }
    }
    auto known = stacks_.find(stack.iid());
    if (known != stacks_.end() &&
        !std::equal(known->second.begin(), known->second.end(), stack.frame_iids().begin(),
                    stack.frame_iids().end())) {
      return Malformed(seq, absl::StrCat("stack ", stack.iid(), " redefined"));
    }
    batch_stacks.insert(stack.iid());
  }
  if (stacks_.size() + batch_stacks.size() > limits_.max_strings_per_process) {
    return absl::ResourceExhaustedError(absl::StrCat("batch ", seq,
                                                     ": the process interned more than ",
                                                     limits_.max_strings_per_process, " stacks"));
  }

  for (size_t i = 0; i < events.size(); ++i) {
    const IngestedEvent& e = events[i];
    auto bad = [&](const std::string& what) {
      return Malformed(seq, absl::StrCat("event ", i, ": ", what));
    };
    if (e.kind < nrtprof::EVENT_RANGE || e.kind > nrtprof::EVENT_DEVICE_DMA) {
      return bad(absl::StrCat("unknown kind ", static_cast<int>(e.kind)));
    }
    if (e.name_iid == 0) return bad("no name");
    for (auto [iid, field] : {std::pair<uint32_t, const char*>{e.name_iid, "name_iid"},
                              {e.model_name_iid, "model_name_iid"},
                              {e.engine_iid, "engine_iid"},
                              {e.tensor_name_iid, "tensor_name_iid"}}) {
      if (iid != 0 && !known_string(iid)) {
        return bad(absl::StrCat("unknown string id ", iid, " (", field,
                                "); a string must come with or before the first batch that "
                                "uses it"));
      }
    }
    if (e.stack_iid != 0 && stacks_.count(e.stack_iid) == 0 &&
        batch_stacks.count(e.stack_iid) == 0) {
      return bad(absl::StrCat("unknown stack id ", e.stack_iid));
    }
    if (e.duration_ns > kMaxDurationNs ||
        e.start_ns > std::numeric_limits<uint64_t>::max() - e.duration_ns) {
      return bad(absl::StrCat("duration ", e.duration_ns, " ns at ", e.start_ns,
                              " is not a plausible time span"));
    }
    if (e.nc_idx < -1 || e.nc_idx >= kMaxNeuronCores) {
      return bad(absl::StrCat("NeuronCore ", e.nc_idx, " out of range"));
    }
    if (e.depth > kMaxRangeDepth) {
      return bad(absl::StrCat("range depth ", e.depth, " (at most ", kMaxRangeDepth, ")"));
    }
  }

  for (const nrtprof::DeviceClockSync& sync : batch.clock_syncs()) {
    if (sync.nc_idx() < 0 || sync.nc_idx() >= kMaxNeuronCores) {
      return Malformed(seq,
                       absl::StrCat("clock sync for NeuronCore ", sync.nc_idx(), " out of range"));
    }
  }
  for (const nrtprof::LoadedModel& model : batch.models()) {
    if (model.name().size() > kMaxModelName) {
      return Malformed(seq, absl::StrCat("model name of ", model.name().size(), " bytes"));
    }
  }
  if (batch.notices_size() > kMaxNotices) {
    return Malformed(seq, absl::StrCat(batch.notices_size(), " notices (at most ", kMaxNotices,
                                       ")"));
  }
  for (const std::string& notice : batch.notices()) {
    if (notice.size() > kMaxNoticeBytes) {
      return Malformed(seq, absl::StrCat("notice of ", notice.size(), " bytes (at most ",
                                         kMaxNoticeBytes, ")"));
    }
  }
  return absl::OkStatus();
}

void ProcessIngest::ApplyInterning(const nrtprof::EventBatch& batch) {
  for (const nrtprof::InternedString& s : batch.strings()) {
    if (strings_.emplace(s.iid(), s.value()).second) interned_bytes_ += s.value().size();
  }
  for (const nrtprof::InternedStack& stack : batch.stacks()) {
    stacks_.emplace(stack.iid(),
                    std::vector<uint32_t>(stack.frame_iids().begin(), stack.frame_iids().end()));
  }
}

void ProcessIngest::ApplyEvent(const IngestedEvent& record, LaneDropCounts* lanes_of_batch) {
  ++events_received_;
  LaneOf(record.kind, lanes_of_batch) += 1;
  if (record.kind == nrtprof::EVENT_RANGE) {
    // Steps: each range name looked at once.
    auto [step, fresh] = step_of_name_.try_emplace(record.name_iid, -1);  // no node made if known
    if (fresh) {
      auto name = strings_.find(record.name_iid);
      absl::string_view n = name != strings_.end() ? absl::string_view(name->second) : "";
      if (int64_t k = 0; absl::ConsumePrefix(&n, "ProfilerStep#") && absl::SimpleAtoi(n, &k)) {
        step->second = k;
      }
    }
    last_step_ = std::max(last_step_, step->second);
  }
  if (record.kind == nrtprof::EVENT_API_CALL && !replay_) {
    nrtprof::ApiFunction function = record.function;
    if (function == nrtprof::API_FUNCTION_UNSPECIFIED) {
      // A shim that did not say: the function by its name (Validate() made sure it is there).
      auto name = strings_.find(record.name_iid);
      if (name != strings_.end()) function = CallFunction(function, name->second);
    }
    if (IsHandleFunction(function)) KeepHandleEvent(record);
  }
  if (!capturing_) {
    ++events_outside_capture_;
  } else if (drop_oldest_ == 0 && events_.size() < limits_.max_events_per_process) {
    events_.push_back(record);
  } else if (!replay_ && events_.size() >= 2) {
    // Live and full: the newest take the place of the oldest past the first half.
    if (ring_overwritten_ == 0) {
      ring_begin_ = events_.size() / 2;
      ring_next_ = 0;
    }
    IngestedEvent& oldest = events_[ring_begin_ + ring_next_];
    ++daemon_overflow_;
    LaneOf(oldest.kind, &daemon_overflow_by_lane_) += 1;
    oldest = record;
    ++ring_overwritten_;
    if (++ring_next_ == events_.size() - ring_begin_) ring_next_ = 0;
  } else {
    if (drop_oldest_ != 0) --drop_oldest_;
    ++daemon_overflow_;
    LaneOf(record.kind, &daemon_overflow_by_lane_) += 1;
  }
}

// What a batch says beyond its events, once they are applied.
void ProcessIngest::ApplyBatch(const nrtprof::EventBatch& batch,
                               const LaneDropCounts& lanes_of_batch) {
  ++batches_applied_;
  received_by_lane_ += lanes_of_batch;
  if (batch.has_events_sent()) {
    const LaneDropCounts sent = LanesOf(batch.events_sent());
    if (capturing_ && !sent_at_begin_set_) {
      // The capture's first batch: what was sent before it.
      sent_at_begin_ = SubtractLanes(sent, lanes_of_batch);
      sent_at_begin_set_ = true;
    }
    sent_.framework = std::max(sent_.framework, sent.framework);
    sent_.runtime = std::max(sent_.runtime, sent.runtime);
    sent_.hardware = std::max(sent_.hardware, sent.hardware);
    sent_seen_ = true;
  } else if (capturing_) {
    sent_missing_ = true;  // a shim older than the field
  }
  if (capturing_ && batch.device_events_wait_for_program()) device_wait_in_capture_ = true;
  // Each batch carries all of the process's notices so far; a resent older batch fewer.
  for (const std::string& notice : batch.notices()) {
    if (notices_.size() < kMaxNotices &&
        std::find(notices_.begin(), notices_.end(), notice) == notices_.end()) {
      notices_.push_back(notice);
    }
  }
  for (const nrtprof::DeviceClockSync& sync : batch.clock_syncs()) {
    if (!replay_) KeepClockSync({sync.nc_idx(), sync.device_ns(), sync.host_monotonic_ns()});
  }
  for (const nrtprof::LoadedModel& model : batch.models()) {
    if (replay_) break;
    IngestedModel kept;
    kept.model_handle = model.model_handle();
    kept.file.name = model.name();
    kept.file.size = model.size() != 0 ? model.size() : model.model_file().size();
    // Over the bound the model is still listed, only without its bytes (as when the shim
    // does not ship a large file).
    if (model_bytes_ + model.model_file().size() <= limits_.max_model_bytes_per_process) {
      kept.file.bytes = model.model_file();
      model_bytes_ += model.model_file().size();
    }
    models_.push_back(std::move(kept));
  }
  // Counters are cumulative for the process: the largest value seen is the latest, whatever
  // the order in which batches were numbered.
  const nrtprof::DropCounters& d = batch.drops();
  shim_drops_.set_ring_full(std::max(shim_drops_.ring_full(), d.ring_full()));
  shim_drops_.set_daemon_away(std::max(shim_drops_.daemon_away(), d.daemon_away()));
  shim_drops_.set_spool_full(std::max(shim_drops_.spool_full(), d.spool_full()));
  shim_drops_.set_device_overwritten(
      std::max(shim_drops_.device_overwritten(), d.device_overwritten()));
  shim_drops_.set_oversized(std::max(shim_drops_.oversized(), d.oversized()));
  shim_drops_.set_no_memory(std::max(shim_drops_.no_memory(), d.no_memory()));
  shim_drops_.set_device_malformed(
      std::max(shim_drops_.device_malformed(), d.device_malformed()));
  nrtprof::EventsByLane* lanes = shim_drops_.mutable_by_lane();
  lanes->set_framework(std::max(lanes->framework(), d.by_lane().framework()));
  lanes->set_runtime(std::max(lanes->runtime(), d.by_lane().runtime()));
  lanes->set_hardware(std::max(lanes->hardware(), d.by_lane().hardware()));
  // The stream's first counters, and every raise since (each counter only grows: a larger sum
  // is a raise), kept for a later capture of the past (ForReplay).
  auto sum = [](const nrtprof::DropCounters& c) {
    return c.ring_full() + c.daemon_away() + c.spool_full() + c.device_overwritten() +
           c.oversized() + c.no_memory() + c.device_malformed() + c.by_lane().framework() +
           c.by_lane().runtime() + c.by_lane().hardware();
  };
  if (!replay_ &&
      (drops_history_.empty() || sum(shim_drops_) != sum(drops_history_.back().drops))) {
    if (drops_history_.size() == kMaxDropSteps) {
      drops_forgotten_ = std::move(drops_history_.front());
      drops_history_.pop_front();
    }
    drops_history_.push_back({last_sequence_, shim_drops_});
  }
  if (batch.clock().monotonic_ns() != 0 && batch.clock().realtime_ns() != 0) {
    realtime_offset_ns_ =
        static_cast<int64_t>(batch.clock().realtime_ns() - batch.clock().monotonic_ns());
  }
  if (batch.final()) final_ = true;
}

void ProcessIngest::KeepHandleEvent(const IngestedEvent& e) {
  // Over the bound, the oldest half goes: recent allocations are the ones still likely live.
  // A call on a handle whose allocation was forgotten is matched as of unknown placement.
  if (handle_events_.size() >= limits_.max_handle_events_per_process) {
    handle_events_.erase(handle_events_.begin(),
                         handle_events_.begin() + handle_events_.size() / 2);
  }
  handle_events_.push_back(e);
}

void ProcessIngest::KeepClockSync(const ClockSyncPoint& sync) {
  // Over the bound, every other point goes: the points still span the whole stream, which is
  // what nearest-point mapping needs, only less densely.
  if (clock_syncs_.size() >= limits_.max_clock_syncs_per_process) {
    size_t kept = 0;
    for (size_t i = 0; i < clock_syncs_.size(); i += 2) clock_syncs_[kept++] = clock_syncs_[i];
    clock_syncs_.resize(kept);
  }
  clock_syncs_.push_back(sync);
}

DropCounts ProcessIngest::drops() const {
  DropCounts d = shim_drops();
  d.daemon_overflow = daemon_overflow_;
  d.by_lane += daemon_overflow_by_lane_;
  return d;
}

DropCounts ProcessIngest::daemon_drops() const {
  DropCounts d;
  d.daemon_overflow = daemon_overflow_;
  d.by_lane = daemon_overflow_by_lane_;
  return d;
}

DropCounts ProcessIngest::shim_drops() const {
  DropCounts d;
  d.ring_full = shim_drops_.ring_full();
  d.daemon_away = shim_drops_.daemon_away();
  d.spool_full = shim_drops_.spool_full();
  d.device_overwritten = shim_drops_.device_overwritten();
  d.oversized = shim_drops_.oversized();
  d.no_memory = shim_drops_.no_memory();
  d.device_malformed = shim_drops_.device_malformed();
  d.by_lane.framework = shim_drops_.by_lane().framework();
  d.by_lane.runtime = shim_drops_.by_lane().runtime();
  d.by_lane.hardware = shim_drops_.by_lane().hardware();
  return d;
}

void ProcessIngest::BeginCapture(std::optional<uint64_t> expected_events) {
  if (capturing_) return;
  capturing_ = true;
  events_.clear();
  ring_overwritten_ = 0;
  // One reservation (ingest.h). Grown by doubling instead, each growth was fresh memory and a
  // copy: most of ingest's time where fresh pages are dear (BENCHMARKS.md, "capture --last").
  // Where the system refuses the address space (strict overcommit), the vector grows as before.
  try {
    events_.reserve(std::min<uint64_t>(
        limits_.max_events_per_process,
        expected_events ? *expected_events : kReservedCaptureBytes / sizeof(IngestedEvent)));
  } catch (const std::bad_alloc&) {
  }
  // A stream that has had batches knows the shim's counters at this point, and so does a
  // replay of recorded batches (ForReplay); one that has not knows the events sent only from
  // its first batch (Apply).
  shim_at_begin_known_ = batches_applied_ != 0 || drops_at_begin_known_;
  shim_at_begin_ = shim_drops();
  daemon_at_begin_ = daemon_drops();
  received_at_begin_by_lane_ = received_by_lane_;
  sent_at_begin_ = sent_;
  sent_at_begin_set_ = sent_seen_;
  sent_missing_ = false;
  batches_at_begin_ = batches_applied_;
  received_at_begin_ = events_received_;
  missing_at_begin_ = batches_missing_;
  device_wait_in_capture_ = false;
}

ProcessCapture ProcessIngest::TakeCapture() {
  ProcessCapture c;
  c.hello = hello_;
  c.strings = strings_;
  c.stacks = stacks_;
  if (ring_overwritten_ != 0) {
    std::rotate(events_.begin() + ring_begin_, events_.begin() + ring_begin_ + ring_next_,
                events_.end());
  }
  c.events = std::move(events_);
  events_.clear();
  c.handle_events = handle_events_;
  c.clock_syncs = clock_syncs_;
  c.models = models_;
  c.model_bytes_left_out = model_bytes_left_out_;
  c.notices = notices_;
  if (ring_overwritten_ != 0) {
    c.notices.push_back(absl::StrCat(
        "the capture kept its first ", ring_begin_, " and its last ", c.events.size() - ring_begin_,
        " events; the ", ring_overwritten_,
        " between them were left out (counted as daemon_overflow): the daemon keeps at most ",
        limits_.max_events_per_process,
        " events of a process in a capture (nrtprofd --max_events_per_process)"));
    ring_overwritten_ = 0;
  }
  c.rings = rings_;
  if (capturing_) {
    c.shim_at_begin = shim_at_begin_;
    c.shim_at_begin_known = shim_at_begin_known_;
    c.shim_at_end = shim_drops();
    c.daemon_drops = Subtract(daemon_drops(), daemon_at_begin_);
    c.drops = Subtract(c.shim_at_end, c.shim_at_begin);
    c.drops += c.daemon_drops;
    c.sent_known = sent_at_begin_set_ && !sent_missing_;
    c.batches_received = batches_applied_ - batches_at_begin_;
    c.sent_at_begin = sent_at_begin_;
    c.sent_at_end = sent_;
    c.received_by_lane = SubtractLanes(received_by_lane_, received_at_begin_by_lane_);
    c.events_received = events_received_ - received_at_begin_;
    c.batches_missing = batches_missing_ - missing_at_begin_;
    c.device_events_wait_for_program = device_wait_in_capture_;
  }
  c.realtime_offset_ns = realtime_offset_ns_;
  c.final = final_;
  capturing_ = false;
  return c;
}

ProcessCapture ProcessIngest::TakePart(const std::vector<uint8_t>& settled, size_t count) {
  ProcessCapture c;
  c.hello = hello_;
  c.strings = strings_;
  c.stacks = stacks_;
  c.handle_events = handle_events_;
  c.clock_syncs = clock_syncs_;
  c.models = models_;
  c.model_bytes_left_out = model_bytes_left_out_;
  c.rings = rings_;
  c.realtime_offset_ns = realtime_offset_ns_;
  c.events.reserve(count);
  // The events kept move to the front: the pages they leave are the next ones filled.
  size_t kept = 0;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (settled[i] != 0) {
      c.events.push_back(events_[i]);
    } else {
      if (kept != i) events_[kept] = events_[i];
      ++kept;
    }
  }
  events_.resize(kept);
  return c;
}

}  // namespace nrtprof::daemon
