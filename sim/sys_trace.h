// The runtime's system trace: per-NeuronCore ring buffers of events, handed out once each as
// JSON through nrt_sys_trace_fetch_events(), in the real runtime's document shape:
//   {"events":[{event}, ...],"data_version":2}
// (sim/README.md, "System trace", lists the fields and where each fact comes from).
//
// Who uses it: the runtime records the spans of its API calls (nrt_load, nrt_execute), each
// execution on a NeuronCore (device_exec start/stop, device clock), host-initiated transfers
// (tensor_read/tensor_write with the device-memory copy inside, dmem_buf_copyin/copyout),
// model switches on a core, clock sync points (timestamp_sync), and each schedule of an
// asynchronous execution (nrta_execute_schedule). Events of asynchronous requests carry the
// request's nrta_seq_id. What happens inside an
// execution (engine ops, I/O DMA) is not here: like the real runtime, it goes to the device
// profile, not the system trace. Anyone may fetch.
//
// Two readers capture independently (TraceReader): the public nrt_sys_trace_* API and the
// runtime's inspect session. Each has its own rings and filters and gets every event it wants;
// neither's fetch removes the other's events.
//
// Thread-safe: each core's ring has its own lock; Recording() is two relaxed atomic loads so
// the runtime can skip building events when no capture is in force.
#ifndef NRTPROF_SIM_SYS_TRACE_H_
#define NRTPROF_SIM_SYS_TRACE_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"

namespace nrtsim {

// The event types this runtime records, by their names in the document (the real runtime's
// snake_case names; it has more, which the simulator never records).
enum class TraceEventType : uint8_t {
  kNrtLoad = 0,         // "nrt_load": the nrt_load call (host clock)
  kNrtExecute = 1,      // "nrt_execute": the nrt_execute call (host clock)
  kDeviceExec = 2,      // "device_exec": the execution on its NeuronCore (device clock)
  kTensorRead = 3,      // "tensor_read": a host-initiated read of a device tensor (host clock)
  kTensorWrite = 4,     // "tensor_write": a host-initiated write of a device tensor
  kDmemBufCopyin = 5,   // "dmem_buf_copyin": host -> device memory copy (host clock)
  kDmemBufCopyout = 6,  // "dmem_buf_copyout": device -> host memory copy
  kModelSwitch = 7,     // "model_switch": a core starts running another model than before
  kTimestampSync = 8,   // "timestamp_sync": one instant on the device's and the host's clocks
  kNrtaExecuteSchedule = 9,  // "nrta_execute_schedule": an asynchronous execution scheduled
  kCcExecBarrier = 10,  // "cc_exec_barrier": a collective waiting for its group (device clock)
  kCcRunning = 11,      // "cc_running": a collective's transfers and reduction (device clock)
};
inline constexpr int kNumTraceEventTypes = 12;
const char* TraceEventTypeName(TraceEventType type);
bool TraceEventTypeFromName(const std::string& name, TraceEventType* type);

enum class TracePhase : uint8_t { kStart = 0, kStop = 1, kInstant = 2 };

struct TraceEvent {
  TraceEventType type = TraceEventType::kDeviceExec;
  TracePhase phase = TracePhase::kInstant;
  uint64_t id = 0;          // unique within the process (assigned by Record)
  uint32_t nc_idx = 0;
  uint64_t nc_local_id = 0;  // per core, from 1 (assigned by Record)
  uint64_t tracking_id = 0;  // 0: Record makes one, sequence | nc_idx << 50
  int64_t thread_id = 0;     // the calling thread's tid
  // Host events: CLOCK_REALTIME ns. Events with nc_timestamp_ns: ignored, the document's
  // timestamp_ns is the device timestamp.
  uint64_t host_timestamp_ns = 0;
  // The variant's fields, written only on its own phase (see AppendData in sys_trace.cc).
  uint64_t nc_timestamp_ns = 0;
  uint64_t cpu_timestamp_ns = 0;
  uint64_t model_id = 0;
  // Written as model_name after model_id where the type has a model_id (the real runtime
  // does so when it knows the name); null: left out. From SysTrace::InternName, so that
  // recording an event copies no string (an allocation on the calling thread per event).
  const std::string* model_name = nullptr;
  uint64_t exec_id = 0;
  uint32_t device_core_idx = 0;
  uint64_t tensor_id = 0;
  uint64_t size = 0;
  uint64_t mem_handle = 0;
  uint64_t offset = 0;
  bool is_neuron_core_work = true;
  // Collectives (cc_exec_barrier, cc_running): static names, the rank in its group, the
  // collective's number on its communicator; `size` is its bytes.
  const char* cc_op = nullptr;
  const char* cc_reduce = nullptr;
  const char* cc_dtype = nullptr;
  uint32_t rank = 0;
  uint32_t rank_n = 0;
  uint64_t op_id = 0;
  // An asynchronous request's sequence id (nrt/nrt_async.h), written after timestamp_ns as the
  // event's nrta_seq_id when has_nrta_seq_id.
  bool has_nrta_seq_id = false;
  uint64_t nrta_seq_id = 0;
};

// A fetched document's text in memory from malloc() (NUL-terminated once Release()d), written in
// place: nrt_sys_trace_fetch_events hands it out as it is (the program frees it with free()),
// with no copy of the text from a std::string, and each event is written where it goes, with no
// copy from a scratch buffer (issue 38: those copies were ~5% of nrtprof's flusher, on whose
// thread the runtime writes the document).
class TraceDocument {
 public:
  TraceDocument() = default;
  ~TraceDocument() { free(data_); }
  TraceDocument(const TraceDocument&) = delete;
  TraceDocument& operator=(const TraceDocument&) = delete;

  const char* data() const { return data_ != nullptr ? data_ : ""; }
  size_t size() const { return size_; }
  // Room for `n` more bytes (and the NUL) at the end: where to write them (Commit says how
  // far). Throws std::bad_alloc if there is no memory, as a std::string would.
  char* Reserve(size_t n);
  void Commit(const char* end) { size_ = static_cast<size_t>(end - data_); }
  void Append(const char* text, size_t n);
  // The text, NUL-terminated, the caller's to free(); the document is empty again.
  char* Release();

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;  // bytes at data_
};

// Who a capture is for. Each reader has a capture of its own (ring buffers, filters, the
// cores' event numbering, start and stop); an event goes to every capture that wants it, so
// one reader's fetch never takes another's events.
enum class TraceReader : uint8_t {
  kApi = 0,      // nrt_sys_trace_start / _stop / _fetch_events
  kInspect = 1,  // the runtime's inspect session (nrt_inspect_begin* ... nrt_inspect_stop)
};
inline constexpr int kNumTraceReaders = 2;

struct TraceCaptureConfig {
  uint64_t max_events_per_nc = 1 << 15;
  uint64_t enabled_cores = ~0ull;  // bit i: NeuronCore i
  bool enabled_types[kNumTraceEventTypes] = {true, true, true, true, true, true,
                                             true, true, true, true, true, true};
  TraceReader reader = TraceReader::kApi;
};

struct TraceFetchOptions {
  uint64_t max_events_per_nc = 0;  // 0: all
  int64_t nc_idx = -1;             // -1: every core
  TraceReader reader = TraceReader::kApi;
  // Stop the reader's capture after its last sync points and before taking its events, in
  // one call (how an inspect session ends: nothing recorded before the stop is left behind).
  bool stop = false;
};

class SysTrace {
 public:
  // The device clock reads CLOCK_MONOTONIC + device_clock_offset_ns (see device.h).
  SysTrace(uint32_t num_cores, int64_t device_clock_offset_ns);
  SysTrace(const SysTrace&) = delete;
  SysTrace& operator=(const SysTrace&) = delete;

  // Starts config.reader's capture. Starting while started is FailedPrecondition; so is
  // stopping while stopped.
  absl::Status Start(const TraceCaptureConfig& config);
  absl::Status Stop(TraceReader reader = TraceReader::kApi);
  // Whether any reader's capture is on.
  bool Recording() const {
    return captures_[0].recording.load(std::memory_order_relaxed) ||
           captures_[1].recording.load(std::memory_order_relaxed);
  }

  // One relaxed load each of a capture's cores and types: the calling thread (nrt_execute's)
  // takes no lock to learn an event is not wanted.
  bool Wants(uint32_t nc_idx, TraceEventType type) const;

  // `name`, kept for the process's life (one copy per distinct name): what TraceEvent's
  // model_name points at.
  const std::string* InternName(const std::string& name);

  // Host CLOCK_REALTIME ns now, and the host time of a device timestamp (both on the capture's
  // one reading of CLOCK_REALTIME - CLOCK_MONOTONIC, so host spans and device spans line up).
  uint64_t HostNow() const;
  uint64_t HostTimeOfDevice(uint64_t device_ns) const;

  // Appends to the core's ring of each capture that is on for that core and type (one id and
  // tracking_id for all its copies); a full ring overwrites its oldest event and counts it.
  void Record(TraceEvent event);

  // Records a sync point on every enabled core of options.reader's capture, then removes and
  // returns as JSON the oldest events of each selected core. Fails if that capture was never
  // started.
  absl::Status Fetch(const TraceFetchOptions& options, TraceDocument* json);
  absl::Status Fetch(const TraceFetchOptions& options, std::string* json);

  // The worker_gid written on core `nc`'s events: the core's global id (the machine's core
  // number, or the rank's global device id once a communicator names it). Default: `nc`.
  void SetWorkerGid(uint32_t nc, int64_t gid);

  // Events overwritten on `nc` since the capture started (the document does not say).
  uint64_t overwritten(uint32_t nc, TraceReader reader = TraceReader::kApi);

 private:
  struct Ring {
    std::mutex mu;
    std::vector<TraceEvent> slots ABSL_GUARDED_BY(mu);
    // A fetch swaps `slots` for these, as many and empty, so that an execution recording on
    // this core never waits for more than the swap (seen: an execution held up to 11 ms
    // behind a fetch that moved its events out under `mu`, on a busy 2-core machine).
    std::mutex fetch_mu;  // before mu
    std::vector<TraceEvent> spare ABSL_GUARDED_BY(fetch_mu);
    size_t head ABSL_GUARDED_BY(mu) = 0;  // index of the oldest event
    size_t size ABSL_GUARDED_BY(mu) = 0;
    uint64_t overwritten ABSL_GUARDED_BY(mu) = 0;
    uint64_t next_local_id ABSL_GUARDED_BY(mu) = 1;
  };

  // One reader's capture.
  struct Capture {
    std::vector<std::unique_ptr<Ring>> rings;  // one per core
    std::atomic<bool> recording{false};
    std::atomic<bool> ever_started{false};
    // The capture's cores and types as bits (bit i: core i; bit t: type t), set by Start().
    std::atomic<uint64_t> wanted_cores{0};
    std::atomic<uint32_t> wanted_types{0};
  };

  bool CaptureWants(const Capture& c, uint32_t nc_idx, TraceEventType type) const;
  // Gives `event` its process-wide id (and a tracking_id if it has none).
  void Stamp(TraceEvent* event);
  static void Append(Capture& c, TraceEvent event);
  void RecordSyncPoints(Capture& c);
  void AppendCore(Capture& c, uint32_t nc, uint64_t max_events, TraceDocument* json,
                  bool* first);

  const uint32_t num_cores_;
  const int64_t device_clock_offset_ns_;
  std::unique_ptr<std::atomic<int64_t>[]> worker_gids_;  // by core
  Capture captures_[kNumTraceReaders];  // by TraceReader
  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> next_tracking_{1};
  std::atomic<int64_t> realtime_minus_monotonic_ns_{0};
  // std::mutex, not absl::Mutex: see the note in runtime.h about ThreadSanitizer.
  // Held by Start() and Stop(), so that one of them at a time changes a capture.
  mutable std::mutex config_mu_;
  std::mutex names_mu_;
  std::unordered_set<std::string> names_ ABSL_GUARDED_BY(names_mu_);
};

// JSON string escaping (quotes, backslashes, control and non-ASCII bytes as \u00XX, so any
// input yields valid JSON).
void AppendJsonString(const std::string& s, std::string* out);

// One event's text in the document, as the real runtime's serializer writes it (its member
// order, no white space; the variant's data members on their phase only): what Fetch writes
// for each event, core `nc_idx`'s worker_gid given.
void AppendTraceEventJson(const TraceEvent& e, int64_t worker_gid, std::string* out);

}  // namespace nrtsim

#endif  // NRTPROF_SIM_SYS_TRACE_H_
