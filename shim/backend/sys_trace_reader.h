// A streaming reader of the Neuron runtime's system-trace document, the JSON that
// nrt_sys_trace_fetch_events() returns, in the real runtime's shape and only that:
//
//   {"events":[{"event_type":"device_exec","phase":"start","id":7,"nc_idx":0,
//               "nc_local_id":3,"tracking_id":12,"thread_id":4242,"worker_gid":0,
//               "data":{"device_core_idx":0,"exec_id":5,"nc_timestamp_ns":1000,"model_id":2},
//               "timestamp_ns":1000}, ...],
//    "data_version":2}
//
// (docs/trace_format.md, "The runtime's system trace", gives each fact's public source.)
//
// One pass over the text, no tree: each event is handed to the caller as a flat record as
// soon as its closing brace is read. The reader is tolerant of what a newer runtime may add —
// event types it does not know, members it does not know at any level, other `data` keys —
// which it counts and skips; and strict about the document itself: anything that is not JSON,
// a missing or mistyped member the shape requires, or a data_version other than 2 fails the
// whole document with a one-line reason (the caller then keeps none of its events).
//
// Thread-compatible: a reader holds no state between documents.
#ifndef NRTPROF_SHIM_BACKEND_SYS_TRACE_READER_H_
#define NRTPROF_SHIM_BACKEND_SYS_TRACE_READER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"

namespace nrtprof::shim {

// The event types the profiler reads; every other name is kUnknown (counted, skipped).
enum class SysTraceType : uint8_t {
  kUnknown = 0,
  kNrtLoad,         // "nrt_load"
  kNrtExecute,      // "nrt_execute"
  kDeviceExec,      // "device_exec"
  kTensorRead,      // "tensor_read"
  kTensorWrite,     // "tensor_write"
  kDmemBufCopyin,   // "dmem_buf_copyin"
  kDmemBufCopyout,  // "dmem_buf_copyout"
  kTimestampSync,   // "timestamp_sync"
  kModelSwitch,     // "model_switch" (known, not drawn)
  kCcExecBarrier,   // "cc_exec_barrier": a collective waiting for the other ranks
  kCcRunning,       // "cc_running": a collective's data movement and reduction
};

enum class SysTracePhase : uint8_t { kUnknown = 0, kStart, kStop, kInstant };

// One event. `data` members the reader knows are copied out (has_* says which were present);
// the rest are counted in the statistics.
struct SysTraceEvent {
  // The flags first, together: a record the reader zeroes and the caller copies for every
  // event is 160 bytes this way, 208 with each flag beside its value.
  SysTraceType type = SysTraceType::kUnknown;
  SysTracePhase phase = SysTracePhase::kUnknown;
  bool has_nrta_seq_id = false;
  bool has_exec_id = false;
  bool has_model_id = false;
  bool has_nc_timestamp_ns = false;
  bool has_cpu_timestamp_ns = false;
  bool has_size = false;
  uint32_t nc_idx = 0;
  uint64_t id = 0;
  uint64_t nc_local_id = 0;
  uint64_t tracking_id = 0;
  uint64_t thread_id = 0;
  int64_t worker_gid = -1;
  uint64_t timestamp_ns = 0;
  uint64_t nrta_seq_id = 0;
  // data
  uint64_t exec_id = 0;
  uint64_t model_id = 0;
  uint64_t nc_timestamp_ns = 0;
  uint64_t cpu_timestamp_ns = 0;
  uint64_t size = 0;
  uint64_t tensor_id = 0;
  uint64_t device_core_idx = 0;
  std::string_view model_name;  // a model_name data member, if the runtime sent one
  std::string_view cc_op;       // collectives: the cc_op data member ("all_reduce"), if sent
};

struct SysTraceReadStats {
  uint64_t events = 0;              // event objects read (every type)
  uint64_t unknown_types = 0;       // events of a type or phase the reader does not know
  uint64_t unknown_members = 0;     // members it does not know, at any level, data keys included
};

// Reads `json` and calls `on_event` for each event, in document order (events of an unknown
// type or phase too, with kUnknown: they still take their place in the core's nc_local_id). The event (and the
// string_views in it) is valid during the call only. Returns false with a one-line *error if
// the document is not a system trace in the real shape; events already handed out then belong
// to a document the caller should discard.
bool ReadSysTrace(std::string_view json, absl::FunctionRef<void(const SysTraceEvent&)> on_event,
                  SysTraceReadStats* stats, std::string* error);

// ReadSysTrace without its fast path for events in the runtime's own compact form, for tests
// that check the two read every document alike.
bool ReadSysTraceGeneralOnlyForTesting(std::string_view json,
                                       absl::FunctionRef<void(const SysTraceEvent&)> on_event,
                                       SysTraceReadStats* stats, std::string* error);

const char* SysTraceTypeName(SysTraceType type);

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_SYS_TRACE_READER_H_
