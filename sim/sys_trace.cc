#include "sys_trace.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"

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

// The host's wall clock less its monotonic one, which maps the device clock's times to the wall
// clock's in every document: of three pairs of readings, the one read closest together, as the
// shim reads its own (a pair read across a preemption moved every event by half the gap, and
// device work to the wrong side of the host range it ran in: capture_test's look back in parts).
int64_t RealtimeMinusMonotonicNs() {
  return nrtprof::RealtimeOffsetNs(
      [](clockid_t id) { return static_cast<int64_t>(ReadClock(id)); });
}

// Writes an event's text into room its caller made (EventJsonBound): literals, plain strings and
// integers copied straight in, two digits at a time. A fetch writes every event it hands out, on
// the fetching thread (a profiler's, every few ms); absl::StrAppend of ~25 pieces per event took
// about 0.2 us an event there (its pieces, its per-piece copies), most of what a fetch cost
// (perf of bench/apps/exec_rate --async under nrtprof, BENCHMARKS.md "Session 28"). The text is
// the same, byte for byte (sys_trace_test: DocumentTextIsTheRuntimesCompactForm).
class JsonWriter {
 public:
  explicit JsonWriter(char* p) : p_(p) {}
  char* end() const { return p_; }

  template <size_t N>
  void Literal(const char (&text)[N]) {
    memcpy(p_, text, N - 1);
    p_ += N - 1;
  }
  void Char(char c) { *p_++ = c; }
  void Text(const char* s) { Text(s, strlen(s)); }
  void Text(const char* s, size_t n) {
    memcpy(p_, s, n);
    p_ += n;
  }
  // In chunks of eight digits, each written as four independent pairs: the one long chain of
  // divisions by 100 that a 19-digit timestamp would otherwise take is most of a number's time.
  void Unsigned(uint64_t v) {
    if (v < 100000000) {
      Small(static_cast<uint32_t>(v));
    } else if (v < 10000000000000000ull) {
      Small(static_cast<uint32_t>(v / 100000000));
      Eight(static_cast<uint32_t>(v % 100000000));
    } else {
      Small(static_cast<uint32_t>(v / 10000000000000000ull));
      Eight(static_cast<uint32_t>(v / 100000000 % 100000000));
      Eight(static_cast<uint32_t>(v % 100000000));
    }
  }
  void Signed(int64_t v) {
    if (v < 0) {
      Char('-');
      Unsigned(0 - static_cast<uint64_t>(v));
    } else {
      Unsigned(static_cast<uint64_t>(v));
    }
  }
  // AppendJsonString's escaping, in place.
  void String(const std::string& s) {
    static constexpr char kHex[] = "0123456789abcdef";
    Char('"');
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        Char('\\');
        Char(static_cast<char>(c));
      } else if (c < 0x20 || c >= 0x7f) {
        Literal("\\u00");
        Char(kHex[c >> 4]);
        Char(kHex[c & 15]);
      } else {
        Char(static_cast<char>(c));
      }
    }
    Char('"');
  }

 private:
  // Below 10^8, without leading zeros.
  void Small(uint32_t v) {
    if (v < 10) {  // core numbers, model ids, most of an event's small members
      *p_++ = static_cast<char>('0' + v);
      return;
    }
    int n = 1;
    for (uint32_t limit = 10; n < 8 && v >= limit; limit *= 10) ++n;
    char* d = p_ + n;
    p_ = d;
    while (v >= 100) {
      d -= 2;
      memcpy(d, kDigitPairs + 2 * (v % 100), 2);
      v /= 100;
    }
    if (v >= 10) {
      memcpy(d - 2, kDigitPairs + 2 * v, 2);
    } else {
      d[-1] = static_cast<char>('0' + v);
    }
  }
  // Below 10^8, as exactly eight digits.
  void Eight(uint32_t v) {
    const uint32_t high = v / 10000, low = v % 10000;
    memcpy(p_, kDigitPairs + 2 * (high / 100), 2);
    memcpy(p_ + 2, kDigitPairs + 2 * (high % 100), 2);
    memcpy(p_ + 4, kDigitPairs + 2 * (low / 100), 2);
    memcpy(p_ + 6, kDigitPairs + 2 * (low % 100), 2);
    p_ += 8;
  }
  static constexpr char kDigitPairs[] =
      "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
      "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  char* p_;
};

// The most bytes an event's text can take: the fixed text and 20 digits for each number (at
// most ~900), plus its strings escaped (6 bytes a byte at worst).
size_t EventJsonBound(const TraceEvent& e) {
  size_t n = 1024;
  if (e.model_name != nullptr) n += 6 * e.model_name->size();
  for (const char* s : {e.cc_op, e.cc_reduce, e.cc_dtype}) {
    if (s != nullptr) n += strlen(s);
  }
  return n;
}

// `{"event_type":"TYPE","phase":"PHASE","id":`, made once for each type and phase.
const std::string& EventHead(TraceEventType type, TracePhase phase) {
  static const std::vector<std::string>* const heads = [] {
    auto* v = new std::vector<std::string>();
    for (int t = 0; t < kNumTraceEventTypes; ++t) {
      for (const char* p : kPhaseNames) {
        v->push_back(absl::StrCat("{\"event_type\":\"", kTypeNames[t], "\",\"phase\":\"", p,
                                  "\",\"id\":"));
      }
    }
    return v;
  }();
  return (*heads)[static_cast<size_t>(type) * 3 + static_cast<size_t>(phase)];
}

void AppendModelName(const TraceEvent& e, JsonWriter* out) {
  if (e.model_name == nullptr) return;
  out->Literal(",\"model_name\":");
  out->String(*e.model_name);
}

// The variant's fields, only on the phase that carries them; "{}" otherwise. Sets *device_ts
// when the variant has nc_timestamp_ns (the event's timestamp_ns is then that).
void AppendData(const TraceEvent& e, JsonWriter* out, bool* device_ts) {
  *device_ts = false;
  out->Char('{');
  const bool start = e.phase == TracePhase::kStart;
  const bool stop = e.phase == TracePhase::kStop;
  const bool instant = e.phase == TracePhase::kInstant;
  switch (e.type) {
    case TraceEventType::kNrtLoad:
      if (stop) {
        out->Literal("\"model_id\":");
        out->Unsigned(e.model_id);
        AppendModelName(e, out);
      }
      break;
    case TraceEventType::kNrtExecute:
      if (start) {
        out->Literal("\"model_id\":");
        out->Unsigned(e.model_id);
        AppendModelName(e, out);
      }
      break;
    case TraceEventType::kDeviceExec:
      if (start) {
        out->Literal("\"device_core_idx\":");
        out->Unsigned(e.device_core_idx);
        out->Literal(",\"exec_id\":");
        out->Unsigned(e.exec_id);
        out->Literal(",\"nc_timestamp_ns\":");
        out->Unsigned(e.nc_timestamp_ns);
        out->Literal(",\"model_id\":");
        out->Unsigned(e.model_id);
        AppendModelName(e, out);
        *device_ts = true;
      } else if (stop) {
        out->Literal("\"nc_timestamp_ns\":");
        out->Unsigned(e.nc_timestamp_ns);
        *device_ts = true;
      }
      break;
    case TraceEventType::kTensorRead:
    case TraceEventType::kTensorWrite:
      if (start) {
        out->Literal("\"tensor_id\":");
        out->Unsigned(e.tensor_id);
        out->Literal(",\"size\":");
        out->Unsigned(e.size);
      }
      break;
    case TraceEventType::kDmemBufCopyin:
    case TraceEventType::kDmemBufCopyout:
      if (start) {
        // mem_type 1: device memory (HBM), the only kind the simulator copies to or from.
        out->Literal("\"mem_type\":1,\"mem_handle\":");
        out->Unsigned(e.mem_handle);
        out->Literal(",\"offset\":");
        out->Unsigned(e.offset);
        out->Literal(",\"size\":");
        out->Unsigned(e.size);
      }
      break;
    case TraceEventType::kModelSwitch:
      if (instant) {
        out->Literal("\"device_core_idx\":");
        out->Unsigned(e.device_core_idx);
        if (e.is_neuron_core_work) {
          out->Literal(",\"is_neuron_core_work\":true,\"model_id\":");
        } else {
          out->Literal(",\"is_neuron_core_work\":false,\"model_id\":");
        }
        out->Unsigned(e.model_id);
        AppendModelName(e, out);
      }
      break;
    case TraceEventType::kNrtaExecuteSchedule:
      if (instant) {
        out->Literal("\"model_id\":");
        out->Unsigned(e.model_id);
        AppendModelName(e, out);
      }
      break;
    case TraceEventType::kCcExecBarrier:
    case TraceEventType::kCcRunning:
      if (start) {
        out->Literal("\"nc_timestamp_ns\":");
        out->Unsigned(e.nc_timestamp_ns);
        out->Literal(",\"op_id\":");
        out->Unsigned(e.op_id);
        out->Literal(",\"rank\":");
        out->Unsigned(e.rank);
        out->Literal(",\"rank_n\":");
        out->Unsigned(e.rank_n);
        if (e.type == TraceEventType::kCcRunning) {
          out->Literal(",\"cc_op\":\"");
          if (e.cc_op != nullptr) out->Text(e.cc_op);
          out->Literal("\",\"op\":\"");
          if (e.cc_reduce != nullptr) out->Text(e.cc_reduce);
          out->Literal("\",\"dtype\":\"");
          if (e.cc_dtype != nullptr) out->Text(e.cc_dtype);
          out->Literal("\",\"size\":");
          out->Unsigned(e.size);
          out->Literal(",\"algo\":\"ring\"");
        }
      } else if (stop) {
        out->Literal("\"nc_timestamp_ns\":");
        out->Unsigned(e.nc_timestamp_ns);
      }
      *device_ts = true;
      break;
    case TraceEventType::kTimestampSync:
      if (instant) {
        out->Literal("\"exec_id\":");
        out->Unsigned(e.exec_id);
        out->Literal(",\"nc_timestamp_ns\":");
        out->Unsigned(e.nc_timestamp_ns);
        out->Literal(",\"cpu_timestamp_ns\":");
        out->Unsigned(e.cpu_timestamp_ns);
        *device_ts = true;
      }
      break;
  }
  out->Char('}');
}

}  // namespace

namespace {

// Writes the event's text at `p`, which has EventJsonBound(e) bytes of room; returns its end.
char* WriteEventJson(const TraceEvent& e, int64_t worker_gid, char* begin) {
  JsonWriter w(begin);
  const std::string& head = EventHead(e.type, e.phase);
  w.Text(head.data(), head.size());
  w.Unsigned(e.id);
  w.Literal(",\"nc_idx\":");
  w.Unsigned(e.nc_idx);
  w.Literal(",\"nc_local_id\":");
  w.Unsigned(e.nc_local_id);
  w.Literal(",\"tracking_id\":");
  w.Unsigned(e.tracking_id);
  w.Literal(",\"thread_id\":");
  w.Signed(e.thread_id);
  w.Literal(",\"worker_gid\":");
  w.Signed(worker_gid);
  w.Literal(",\"data\":");
  bool device_ts = false;
  AppendData(e, &w, &device_ts);
  w.Literal(",\"timestamp_ns\":");
  w.Unsigned(device_ts ? e.nc_timestamp_ns : e.host_timestamp_ns);
  // The real runtime's eleventh key, only on events of asynchronous requests.
  if (e.has_nrta_seq_id) {
    w.Literal(",\"nrta_seq_id\":");
    w.Unsigned(e.nrta_seq_id);
  }
  w.Char('}');
  return w.end();
}

}  // namespace

void AppendTraceEventJson(const TraceEvent& e, int64_t worker_gid, std::string* out) {
  char stack[2048];
  std::unique_ptr<char[]> heap;
  const size_t bound = EventJsonBound(e);
  char* const begin = bound <= sizeof(stack) ? stack : (heap.reset(new char[bound]), heap.get());
  out->append(begin, static_cast<size_t>(WriteEventJson(e, worker_gid, begin) - begin));
}

char* TraceDocument::Reserve(size_t n) {
  if (capacity_ - size_ < n + 1) {
    const size_t want = std::max({capacity_ * 2, size_ + n + 1, size_t{4096}});
    char* grown = static_cast<char*>(realloc(data_, want));
    if (grown == nullptr) throw std::bad_alloc();
    data_ = grown;
    capacity_ = want;
  }
  return data_ + size_;
}

void TraceDocument::Append(const char* text, size_t n) {
  memcpy(Reserve(n), text, n);
  size_ += n;
}

char* TraceDocument::Release() {
  Reserve(0);
  data_[size_] = '\0';
  char* text = data_;
  data_ = nullptr;
  size_ = capacity_ = 0;
  return text;
}

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
  realtime_minus_monotonic_ns_.store(RealtimeMinusMonotonicNs());
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
      realtime_minus_monotonic_ns_.store(RealtimeMinusMonotonicNs());
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

void SysTrace::AppendCore(Capture& c, uint32_t nc, uint64_t max_events, TraceDocument* json,
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
  json->Reserve(n * 320);
  for (size_t i = 0; i < n; ++i) {
    TraceEvent& e = swapped ? ring.spare[(head + i) % ring.spare.size()] : taken[i];
    char* p = json->Reserve(1 + EventJsonBound(e));
    if (!*first) *p++ = ',';
    *first = false;
    json->Commit(WriteEventJson(e, worker_gid, p));
    if (swapped) e = TraceEvent{};  // the spare is empty again for the next fetch
  }
}

absl::Status SysTrace::Fetch(const TraceFetchOptions& options, std::string* json) {
  TraceDocument document;
  absl::Status status = Fetch(options, &document);
  if (status.ok()) json->assign(document.data(), document.size());
  return status;
}

absl::Status SysTrace::Fetch(const TraceFetchOptions& options, TraceDocument* json) {
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
  static constexpr char kHead[] = "{\"events\":[";
  json->Append(kHead, sizeof(kHead) - 1);
  bool first = true;
  for (uint32_t nc = 0; nc < num_cores_; ++nc) {
    if (options.nc_idx >= 0 && static_cast<uint32_t>(options.nc_idx) != nc) continue;
    AppendCore(c, nc, options.max_events_per_nc, json, &first);
  }
  static constexpr char kTail[] = "],\"data_version\":2}";
  json->Append(kTail, sizeof(kTail) - 1);
  return absl::OkStatus();
}

}  // namespace nrtsim
