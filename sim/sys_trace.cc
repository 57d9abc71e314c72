#include "sys_trace.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace nrtsim {
namespace {

// The real runtime's snake_case names for these types (public notes on its JSON serializer).
constexpr const char* kTypeNames[kNumTraceEventTypes] = {
    "nrt_load",        "nrt_execute",      "device_exec",  "tensor_read",   "tensor_write",
    "dmem_buf_copyin", "dmem_buf_copyout", "model_switch", "timestamp_sync",
    "nrta_execute_schedule", "cc_exec_barrier", "cc_running"};
constexpr const char* kPhaseNames[] = {"start", "stop", "instant"};

// The document's tracking_id when the caller has none: a sequence with the core in bit 50 up.
constexpr int kTrackingCoreShift = 50;

uint64_t ReadClock(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void AppendModelName(const TraceEvent& e, std::string* out) {
  if (e.model_name == nullptr) return;
  out->append(",\"model_name\":");
  AppendJsonString(*e.model_name, out);
}

// The variant's fields, only on the phase that carries them; "{}" otherwise. Sets *device_ts
// when the variant has nc_timestamp_ns (the event's timestamp_ns is then that).
void AppendData(const TraceEvent& e, std::string* out, bool* device_ts) {
  *device_ts = false;
  out->push_back('{');
  const bool start = e.phase == TracePhase::kStart;
  const bool stop = e.phase == TracePhase::kStop;
  const bool instant = e.phase == TracePhase::kInstant;
  switch (e.type) {
    case TraceEventType::kNrtLoad:
      if (stop) {
        absl::StrAppend(out, "\"model_id\":", e.model_id);
        AppendModelName(e, out);
      }
      break;
    case TraceEventType::kNrtExecute:
      if (start) {
        absl::StrAppend(out, "\"model_id\":", e.model_id);
        AppendModelName(e, out);
      }
      break;
    case TraceEventType::kDeviceExec:
      if (start) {
        absl::StrAppend(out, "\"device_core_idx\":", e.device_core_idx,
                        ",\"exec_id\":", e.exec_id, ",\"nc_timestamp_ns\":", e.nc_timestamp_ns,
                        ",\"model_id\":", e.model_id);
        AppendModelName(e, out);
        *device_ts = true;
      } else if (stop) {
        absl::StrAppend(out, "\"nc_timestamp_ns\":", e.nc_timestamp_ns);
        *device_ts = true;
      }
      break;
    case TraceEventType::kTensorRead:
    case TraceEventType::kTensorWrite:
      if (start) absl::StrAppend(out, "\"tensor_id\":", e.tensor_id, ",\"size\":", e.size);
      break;
    case TraceEventType::kDmemBufCopyin:
    case TraceEventType::kDmemBufCopyout:
      if (start) {
        // mem_type 1: device memory (HBM), the only kind the simulator copies to or from.
        absl::StrAppend(out, "\"mem_type\":1,\"mem_handle\":", e.mem_handle,
                        ",\"offset\":", e.offset, ",\"size\":", e.size);
      }
      break;
    case TraceEventType::kModelSwitch:
      if (instant) {
        absl::StrAppend(out, "\"device_core_idx\":", e.device_core_idx,
                        ",\"is_neuron_core_work\":", e.is_neuron_core_work ? "true" : "false",
                        ",\"model_id\":", e.model_id);
        AppendModelName(e, out);
      }
      break;
    case TraceEventType::kNrtaExecuteSchedule:
      if (instant) {
        absl::StrAppend(out, "\"model_id\":", e.model_id);
        AppendModelName(e, out);
      }
      break;
    case TraceEventType::kCcExecBarrier:
    case TraceEventType::kCcRunning:
      if (start) {
        absl::StrAppend(out, "\"nc_timestamp_ns\":", e.nc_timestamp_ns, ",\"op_id\":", e.op_id,
                        ",\"rank\":", e.rank, ",\"rank_n\":", e.rank_n);
        if (e.type == TraceEventType::kCcRunning) {
          absl::StrAppend(out, ",\"cc_op\":\"", e.cc_op, "\",\"op\":\"", e.cc_reduce,
                          "\",\"dtype\":\"", e.cc_dtype, "\",\"size\":", e.size,
                          ",\"algo\":\"ring\"");
        }
      } else if (stop) {
        absl::StrAppend(out, "\"nc_timestamp_ns\":", e.nc_timestamp_ns);
      }
      *device_ts = true;
      break;
    case TraceEventType::kTimestampSync:
      if (instant) {
        absl::StrAppend(out, "\"exec_id\":", e.exec_id,
                        ",\"nc_timestamp_ns\":", e.nc_timestamp_ns,
                        ",\"cpu_timestamp_ns\":", e.cpu_timestamp_ns);
        *device_ts = true;
      }
      break;
  }
  out->push_back('}');
}

void AppendEventJson(const TraceEvent& e, int64_t worker_gid, std::string* out) {
  absl::StrAppend(out, "{\"event_type\":\"", kTypeNames[static_cast<int>(e.type)],
                  "\",\"phase\":\"", kPhaseNames[static_cast<int>(e.phase)], "\",\"id\":", e.id,
                  ",\"nc_idx\":", e.nc_idx, ",\"nc_local_id\":", e.nc_local_id,
                  ",\"tracking_id\":", e.tracking_id, ",\"thread_id\":", e.thread_id,
                  ",\"worker_gid\":", worker_gid, ",\"data\":");
  bool device_ts = false;
  AppendData(e, out, &device_ts);
  absl::StrAppend(out, ",\"timestamp_ns\":", device_ts ? e.nc_timestamp_ns : e.host_timestamp_ns);
  // The real runtime's eleventh key, only on events of asynchronous requests.
  if (e.has_nrta_seq_id) absl::StrAppend(out, ",\"nrta_seq_id\":", e.nrta_seq_id);
  out->push_back('}');
}

}  // namespace

const char* TraceEventTypeName(TraceEventType type) { return kTypeNames[static_cast<int>(type)]; }

bool TraceEventTypeFromName(const std::string& name, TraceEventType* type) {
  for (int i = 0; i < kNumTraceEventTypes; ++i) {
    if (name == kTypeNames[i]) {
      *type = static_cast<TraceEventType>(i);
      return true;
    }
  }
  return false;
}

void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20 || c >= 0x7f) {
      absl::StrAppendFormat(out, "\\u%04x", c);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

SysTrace::SysTrace(uint32_t num_cores, int64_t device_clock_offset_ns)
    : num_cores_(num_cores),
      device_clock_offset_ns_(device_clock_offset_ns),
      worker_gids_(new std::atomic<int64_t>[num_cores]) {
  for (uint32_t i = 0; i < num_cores; ++i) worker_gids_[i].store(i);
  for (Capture& c : captures_) {
    for (uint32_t i = 0; i < num_cores; ++i) c.rings.push_back(std::make_unique<Ring>());
  }
  realtime_minus_monotonic_ns_.store(static_cast<int64_t>(ReadClock(CLOCK_REALTIME)) -
                                     static_cast<int64_t>(ReadClock(CLOCK_MONOTONIC)));
}

absl::Status SysTrace::Start(const TraceCaptureConfig& config) {
  if (config.max_events_per_nc == 0 || config.max_events_per_nc > (1u << 24)) {
    return absl::InvalidArgumentError("max_events_per_nc must be from 1 to 16777216");
  }
  Capture& c = captures_[static_cast<int>(config.reader)];
  {
    std::lock_guard<std::mutex> lock(config_mu_);
    if (c.recording.load()) return absl::FailedPreconditionError("system trace already started");
    uint32_t types = 0;
    for (int t = 0; t < kNumTraceEventTypes; ++t) {
      if (config.enabled_types[t]) types |= 1u << t;
    }
    c.wanted_cores.store(config.enabled_cores, std::memory_order_relaxed);
    c.wanted_types.store(types, std::memory_order_relaxed);
    // One clock reading while any capture is on: another reader's events recorded from now on
    // keep the host times its capture started with.
    if (!Recording()) {
      realtime_minus_monotonic_ns_.store(static_cast<int64_t>(ReadClock(CLOCK_REALTIME)) -
                                         static_cast<int64_t>(ReadClock(CLOCK_MONOTONIC)));
    }
  }
  for (uint32_t nc = 0; nc < num_cores_; ++nc) {
    Ring& ring = *c.rings[nc];
    std::lock_guard<std::mutex> lock(ring.mu);
    const bool enabled = nc < 64 && ((config.enabled_cores >> nc) & 1);
    ring.slots.assign(enabled ? config.max_events_per_nc : 0, TraceEvent{});
    ring.head = ring.size = 0;
    ring.overwritten = 0;
    ring.next_local_id = 1;  // each capture numbers a core's events from 1
  }
  c.ever_started.store(true);
  c.recording.store(true);
  RecordSyncPoints(c);
  return absl::OkStatus();
}

absl::Status SysTrace::Stop(TraceReader reader) {
  Capture& c = captures_[static_cast<int>(reader)];
  std::lock_guard<std::mutex> lock(config_mu_);
  if (!c.recording.load()) return absl::FailedPreconditionError("system trace not started");
  // Events already captured stay fetchable until the next Start().
  c.recording.store(false);
  return absl::OkStatus();
}

bool SysTrace::CaptureWants(const Capture& c, uint32_t nc_idx, TraceEventType type) const {
  if (!c.recording.load(std::memory_order_relaxed) || nc_idx >= num_cores_ || nc_idx >= 64) {
    return false;
  }
  return ((c.wanted_cores.load(std::memory_order_relaxed) >> nc_idx) & 1) != 0 &&
         ((c.wanted_types.load(std::memory_order_relaxed) >> static_cast<int>(type)) & 1) != 0;
}

bool SysTrace::Wants(uint32_t nc_idx, TraceEventType type) const {
  return CaptureWants(captures_[0], nc_idx, type) || CaptureWants(captures_[1], nc_idx, type);
}

const std::string* SysTrace::InternName(const std::string& name) {
  std::lock_guard<std::mutex> lock(names_mu_);
  return &*names_.insert(name).first;
}

uint64_t SysTrace::HostNow() const { return ReadClock(CLOCK_REALTIME); }

uint64_t SysTrace::HostTimeOfDevice(uint64_t device_ns) const {
  return static_cast<uint64_t>(static_cast<int64_t>(device_ns) - device_clock_offset_ns_ +
                               realtime_minus_monotonic_ns_.load(std::memory_order_relaxed));
}

void SysTrace::Stamp(TraceEvent* event) {
  event->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  if (event->tracking_id == 0) {
    event->tracking_id = next_tracking_.fetch_add(1, std::memory_order_relaxed) |
                         (static_cast<uint64_t>(event->nc_idx) << kTrackingCoreShift);
  }
}

void SysTrace::Record(TraceEvent event) {
  const bool api = CaptureWants(captures_[0], event.nc_idx, event.type);
  const bool inspect = CaptureWants(captures_[1], event.nc_idx, event.type);
  if (!api && !inspect) return;
  Stamp(&event);
  // A copy only when both readers want the event.
  if (api && inspect) Append(captures_[1], event);
  Append(captures_[api ? 0 : 1], std::move(event));
}

void SysTrace::Append(Capture& c, TraceEvent event) {
  Ring& ring = *c.rings[event.nc_idx];
  std::lock_guard<std::mutex> lock(ring.mu);
  const size_t cap = ring.slots.size();
  if (cap == 0) return;
  event.nc_local_id = ring.next_local_id++;
  if (ring.size == cap) {
    ring.slots[ring.head] = std::move(event);
    ring.head = (ring.head + 1) % cap;
    ++ring.overwritten;
  } else {
    ring.slots[(ring.head + ring.size) % cap] = std::move(event);
    ++ring.size;
  }
}

// Into `c` alone: another reader's capture has sync points of its own.
void SysTrace::RecordSyncPoints(Capture& c) {
  const uint64_t mono = ReadClock(CLOCK_MONOTONIC);
  const int64_t tid = gettid();
  for (uint32_t nc = 0; nc < num_cores_; ++nc) {
    TraceEvent e;
    e.type = TraceEventType::kTimestampSync;
    e.phase = TracePhase::kInstant;
    e.nc_idx = nc;
    e.thread_id = tid;
    e.nc_timestamp_ns = static_cast<uint64_t>(static_cast<int64_t>(mono) + device_clock_offset_ns_);
    e.cpu_timestamp_ns = HostTimeOfDevice(e.nc_timestamp_ns);
    e.host_timestamp_ns = e.cpu_timestamp_ns;
    if (!CaptureWants(c, nc, e.type)) continue;
    Stamp(&e);
    Append(c, std::move(e));
  }
}

void SysTrace::SetWorkerGid(uint32_t nc, int64_t gid) {
  if (nc < num_cores_) worker_gids_[nc].store(gid, std::memory_order_relaxed);
}

uint64_t SysTrace::overwritten(uint32_t nc, TraceReader reader) {
  if (nc >= num_cores_) return 0;
  Ring& ring = *captures_[static_cast<int>(reader)].rings[nc];
  std::lock_guard<std::mutex> lock(ring.mu);
  return ring.overwritten;
}

void SysTrace::AppendCore(Capture& c, uint32_t nc, uint64_t max_events, std::string* json,
                          bool* first) {
  Ring& ring = *c.rings[nc];
  std::lock_guard<std::mutex> fetching(ring.fetch_mu);
  size_t capacity = 0;
  {
    std::lock_guard<std::mutex> lock(ring.mu);
    capacity = ring.slots.size();
  }
  // Made (once per capacity) outside the ring's lock.
  if (ring.spare.size() != capacity) ring.spare.assign(capacity, TraceEvent{});
  // Under the ring's lock, either the whole ring is swapped for the empty spare, or (a fetch of
  // fewer events than the ring holds) those events are moved out.
  size_t head = 0, n = 0;
  bool swapped = false;
  std::vector<TraceEvent> taken;
  {
    std::lock_guard<std::mutex> lock(ring.mu);
    const size_t cap = ring.slots.size();
    n = ring.size;
    if (cap == ring.spare.size() && (max_events == 0 || max_events >= n)) {
      ring.slots.swap(ring.spare);
      head = ring.head;
      ring.head = 0;
      ring.size = 0;
      swapped = true;
    } else {
      n = std::min<size_t>(n, max_events);
      taken.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        TraceEvent& e = ring.slots[(ring.head + i) % cap];
        taken.push_back(std::move(e));
        e = TraceEvent{};
      }
      if (cap != 0) ring.head = (ring.head + n) % cap;
      ring.size -= n;
    }
  }
  // One worker per NeuronCore in the simulator: its global id (SetWorkerGid).
  const int64_t worker_gid =
      nc < num_cores_ ? worker_gids_[nc].load(std::memory_order_relaxed) : -1;
  // An event takes 250-330 bytes: room made once, not by doubling as the document grows.
  json->reserve(json->size() + n * 320);
  for (size_t i = 0; i < n; ++i) {
    TraceEvent& e = swapped ? ring.spare[(head + i) % ring.spare.size()] : taken[i];
    if (!*first) json->push_back(',');
    *first = false;
    AppendEventJson(e, worker_gid, json);
    if (swapped) e = TraceEvent{};  // the spare is empty again for the next fetch
  }
}

absl::Status SysTrace::Fetch(const TraceFetchOptions& options, std::string* json) {
  Capture& c = captures_[static_cast<int>(options.reader)];
  if (!c.ever_started.load()) {
    return absl::FailedPreconditionError(options.reader == TraceReader::kApi
                                             ? "no system trace was started"
                                             : "no inspect session was started in this runtime");
  }
  if (options.nc_idx >= static_cast<int64_t>(num_cores_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("nc_idx ", options.nc_idx, " is not below the core count ", num_cores_));
  }
  if (c.recording.load()) RecordSyncPoints(c);
  if (options.stop) {
    std::lock_guard<std::mutex> lock(config_mu_);
    c.recording.store(false);
  }
  json->clear();
  absl::StrAppend(json, "{\"events\":[");
  bool first = true;
  for (uint32_t nc = 0; nc < num_cores_; ++nc) {
    if (options.nc_idx >= 0 && static_cast<uint32_t>(options.nc_idx) != nc) continue;
    AppendCore(c, nc, options.max_events_per_nc, json, &first);
  }
  absl::StrAppend(json, "],\"data_version\":2}");
  return absl::OkStatus();
}

}  // namespace nrtsim
