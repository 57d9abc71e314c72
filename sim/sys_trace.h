// The runtime's system trace: per-NeuronCore ring buffers of device events, handed out once
// each as JSON through nrt_sys_trace_fetch_events().
//
// Who uses it: the runtime records an event for every execution (nc_exec_running), the engine
// work and I/O DMA inside it, host-initiated DMA transfers, and clock sync points. Anyone may
// fetch. Thread-safe: each core's ring has its own lock; Recording() is a relaxed atomic load
// so the runtime can skip building events when no capture is in force.
#ifndef NRTPROF_SIM_SYS_TRACE_H_
#define NRTPROF_SIM_SYS_TRACE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include <mutex>

namespace nrtsim {

enum class TraceEventType : uint8_t {
  kExecution = 0,  // "nc_exec_running"
  kEngineOp = 1,   // "nc_engine_op"
  kDma = 2,        // "dma_transfer"
  kSyncPoint = 3,  // "timestamp_sync_point"
};
inline constexpr int kNumTraceEventTypes = 4;
const char* TraceEventTypeName(TraceEventType type);
bool TraceEventTypeFromName(const std::string& name, TraceEventType* type);

struct TraceEvent {
  TraceEventType type = TraceEventType::kExecution;
  const char* name = "";      // static string: "nc_exec_running", an op name, "dma_h2d", ...
  uint64_t id = 0;            // unique within the process
  uint64_t parent_id = 0;     // the enclosing execution's id, or 0
  uint64_t timestamp_ns = 0;  // device clock
  uint64_t duration_ns = 0;
  uint32_t nc_idx = 0;
  int64_t thread_id = 0;      // the host thread that submitted the work
  // Executions and their ops.
  std::string model_name;
  uint64_t model_id = 0;
  uint64_t exec_id = 0;
  const char* engine = nullptr;  // engine ops
  // DMA.
  uint64_t size = 0;
  std::string tensor_name;
  // Sync points: the same instant on the host's clocks.
  uint64_t host_monotonic_ns = 0;
  uint64_t host_realtime_ns = 0;
};

struct TraceCaptureConfig {
  uint64_t max_events_per_nc = 1 << 15;
  uint64_t enabled_cores = ~0ull;  // bit i: NeuronCore i
  bool enabled_types[kNumTraceEventTypes] = {true, true, true, true};
};

struct TraceFetchOptions {
  uint64_t max_events_per_nc = 0;  // 0: all
  int64_t nc_idx = -1;             // -1: every core
};

class SysTrace {
 public:
  // The device clock reads CLOCK_MONOTONIC + device_clock_offset_ns (see device.h).
  SysTrace(uint32_t num_cores, int64_t device_clock_offset_ns);
  SysTrace(const SysTrace&) = delete;
  SysTrace& operator=(const SysTrace&) = delete;

  // Starting while started is FailedPrecondition; so is stopping while stopped.
  absl::Status Start(const TraceCaptureConfig& config);
  absl::Status Stop();
  bool Recording() const { return recording_.load(std::memory_order_relaxed); }

  bool Wants(uint32_t nc_idx, TraceEventType type) const;
  uint64_t NextEventId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  // Appends to the core's ring if capture is on for that core and type; a full ring
  // overwrites its oldest event and counts it.
  void Record(TraceEvent event);

  // Records a sync point on every enabled core, then removes and returns as JSON the oldest
  // events of each selected core. Fails if no capture was ever started.
  absl::Status Fetch(const TraceFetchOptions& options, std::string* json);

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
  };

  void RecordSyncPoints();
  void AppendCore(uint32_t nc, uint64_t max_events, std::string* json, bool* first);

  const uint32_t num_cores_;
  const int64_t device_clock_offset_ns_;
  std::vector<std::unique_ptr<Ring>> rings_;
  std::atomic<bool> recording_{false};
  std::atomic<bool> ever_started_{false};
  std::atomic<uint64_t> next_id_{1};
  // std::mutex, not absl::Mutex: see the note in runtime.h about ThreadSanitizer.
  mutable std::mutex config_mu_;
  TraceCaptureConfig config_ ABSL_GUARDED_BY(config_mu_);
};

// JSON string escaping for the trace documents (quotes, backslashes, control and non-ASCII
// bytes as \u00XX, so any input yields valid JSON).
void AppendJsonString(const std::string& s, std::string* out);

}  // namespace nrtsim

#endif  // NRTPROF_SIM_SYS_TRACE_H_
