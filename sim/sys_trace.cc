#include "sys_trace.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace nrtsim {
namespace {

constexpr const char* kTypeNames[kNumTraceEventTypes] = {
    "nc_exec_running", "nc_engine_op", "dma_transfer", "timestamp_sync_point"};

uint64_t ReadClock(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void AppendEventJson(const TraceEvent& e, const std::string& pid, std::string* out) {
  absl::StrAppend(out, "{\"name\":");
  AppendJsonString(e.name, out);
  absl::StrAppend(out, ",\"type\":\"", kTypeNames[static_cast<int>(e.type)], "\"");
  absl::StrAppendFormat(out, ",\"group\":\"nrt-nc-%03u\"", e.nc_idx);
  absl::StrAppend(out, ",\"id\":", e.id, ",\"parent_id\":", e.parent_id,
                  ",\"timestamp\":", e.timestamp_ns, ",\"duration\":", e.duration_ns,
                  ",\"process_id\":\"", pid, "\",\"thread_id\":", e.thread_id,
                  ",\"lnc_idx\":\"", e.nc_idx, "\",\"nc_idx\":", e.nc_idx);
  switch (e.type) {
    case TraceEventType::kExecution:
    case TraceEventType::kEngineOp:
      absl::StrAppend(out, ",\"model_name\":");
      AppendJsonString(e.model_name, out);
      absl::StrAppend(out, ",\"model_id\":", e.model_id, ",\"exec_id\":", e.exec_id);
      if (e.engine != nullptr) absl::StrAppend(out, ",\"engine\":\"", e.engine, "\"");
      break;
    case TraceEventType::kDma:
      absl::StrAppend(out, ",\"size\":", e.size, ",\"tensor_name\":");
      AppendJsonString(e.tensor_name, out);
      if (e.exec_id != 0) absl::StrAppend(out, ",\"exec_id\":", e.exec_id);
      break;
    case TraceEventType::kSyncPoint:
      absl::StrAppend(out, ",\"host_monotonic_ns\":", e.host_monotonic_ns,
                      ",\"host_realtime_ns\":", e.host_realtime_ns);
      break;
  }
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
    : num_cores_(num_cores), device_clock_offset_ns_(device_clock_offset_ns) {
  for (uint32_t i = 0; i < num_cores; ++i) rings_.push_back(std::make_unique<Ring>());
}

absl::Status SysTrace::Start(const TraceCaptureConfig& config) {
  if (config.max_events_per_nc == 0 || config.max_events_per_nc > (1u << 24)) {
    return absl::InvalidArgumentError("max_events_per_nc must be from 1 to 16777216");
  }
  {
    std::lock_guard<std::mutex> lock(config_mu_);
    if (recording_.load()) return absl::FailedPreconditionError("system trace already started");
    config_ = config;
  }
  for (uint32_t nc = 0; nc < num_cores_; ++nc) {
    Ring& ring = *rings_[nc];
    std::lock_guard<std::mutex> lock(ring.mu);
    const bool enabled = nc < 64 && ((config.enabled_cores >> nc) & 1);
    ring.slots.assign(enabled ? config.max_events_per_nc : 0, TraceEvent{});
    ring.head = ring.size = 0;
    ring.overwritten = 0;
  }
  ever_started_.store(true);
  recording_.store(true);
  RecordSyncPoints();
  return absl::OkStatus();
}

absl::Status SysTrace::Stop() {
  std::lock_guard<std::mutex> lock(config_mu_);
  if (!recording_.load()) return absl::FailedPreconditionError("system trace not started");
  // Events already captured stay fetchable until the next Start().
  recording_.store(false);
  return absl::OkStatus();
}

bool SysTrace::Wants(uint32_t nc_idx, TraceEventType type) const {
  if (!Recording() || nc_idx >= num_cores_) return false;
  std::lock_guard<std::mutex> lock(config_mu_);
  return nc_idx < 64 && ((config_.enabled_cores >> nc_idx) & 1) &&
         config_.enabled_types[static_cast<int>(type)];
}

void SysTrace::Record(TraceEvent event) {
  if (!Wants(event.nc_idx, event.type)) return;
  Ring& ring = *rings_[event.nc_idx];
  std::lock_guard<std::mutex> lock(ring.mu);
  const size_t cap = ring.slots.size();
  if (cap == 0) return;
  if (ring.size == cap) {
    ring.slots[ring.head] = std::move(event);
    ring.head = (ring.head + 1) % cap;
    ++ring.overwritten;
  } else {
    ring.slots[(ring.head + ring.size) % cap] = std::move(event);
    ++ring.size;
  }
}

void SysTrace::RecordSyncPoints() {
  const uint64_t mono = ReadClock(CLOCK_MONOTONIC);
  const uint64_t real = ReadClock(CLOCK_REALTIME);
  for (uint32_t nc = 0; nc < num_cores_; ++nc) {
    TraceEvent e;
    e.type = TraceEventType::kSyncPoint;
    e.name = "timestamp_sync_point";
    e.id = NextEventId();
    e.timestamp_ns = static_cast<uint64_t>(static_cast<int64_t>(mono) + device_clock_offset_ns_);
    e.nc_idx = nc;
    e.thread_id = gettid();
    e.host_monotonic_ns = mono;
    e.host_realtime_ns = real;
    Record(std::move(e));
  }
}

void SysTrace::AppendCore(uint32_t nc, uint64_t max_events, std::string* json, bool* first) {
  static const std::string pid = std::to_string(getpid());
  Ring& ring = *rings_[nc];
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
        e = TraceEvent{};  // release strings now, not at the next overwrite
      }
      if (cap != 0) ring.head = (ring.head + n) % cap;
      ring.size -= n;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    TraceEvent& e = swapped ? ring.spare[(head + i) % ring.spare.size()] : taken[i];
    if (!*first) json->push_back(',');
    *first = false;
    AppendEventJson(e, pid, json);
    if (swapped) e = TraceEvent{};  // the spare is empty again for the next fetch
  }
}

absl::Status SysTrace::Fetch(const TraceFetchOptions& options, std::string* json) {
  if (!ever_started_.load()) {
    return absl::FailedPreconditionError("no system trace was started");
  }
  if (options.nc_idx >= static_cast<int64_t>(num_cores_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("nc_idx ", options.nc_idx, " is not below the core count ", num_cores_));
  }
  if (Recording()) RecordSyncPoints();
  json->clear();
  absl::StrAppend(json, "{\"trace_events\":[");
  bool first = true;
  for (uint32_t nc = 0; nc < num_cores_; ++nc) {
    if (options.nc_idx >= 0 && static_cast<uint32_t>(options.nc_idx) != nc) continue;
    AppendCore(nc, options.max_events_per_nc, json, &first);
  }
  absl::StrAppend(json, "],\"cores\":[");
  first = true;
  for (uint32_t nc = 0; nc < num_cores_; ++nc) {
    if (options.nc_idx >= 0 && static_cast<uint32_t>(options.nc_idx) != nc) continue;
    Ring& ring = *rings_[nc];
    std::lock_guard<std::mutex> lock(ring.mu);
    absl::StrAppendFormat(json,
                          "%s{\"nc_idx\":%u,\"group\":\"nrt-nc-%03u\",\"capacity\":%u,"
                          "\"events_pending\":%u,\"events_overwritten\":%u}",
                          first ? "" : ",", nc, nc, ring.slots.size(), ring.size,
                          ring.overwritten);
    first = false;
  }
  absl::StrAppend(json, "],\"clock\":{\"device_minus_host_monotonic_ns\":",
                  device_clock_offset_ns_, "}}");
  return absl::OkStatus();
}

}  // namespace nrtsim
