// What the shim's hot path writes for one event: a fixed-size record in the calling thread's
// ring (event_ring.h), turned into an nrtprof.Event by the flusher thread (event_builder.h).
//
// Plain data, no pointers that must outlive the call: names are copied (bounded) into the
// record, because the caller may free them as soon as the call returns. The call stack's raw
// return addresses, when NRTPROF_STACKS asks for them, follow the record in its ring slot.
#ifndef NRTPROF_SHIM_RECORD_H_
#define NRTPROF_SHIM_RECORD_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace nrtprof::shim {

// The libnrt functions the shim interposes. The first kNumRecordedApiFunctions are recorded as
// runtime-lane events; the nrt_sys_trace_* ones are only arbitrated (sys_trace_arbiter.h) so
// that the program's own system trace and the profiler's do not collide.
enum ApiFunction : uint8_t {
  kNrtInit,
  kNrtClose,
  kNrtLoad,
  kNrtUnload,
  kNrtExecute,
  kNrtExecuteRepeat,
  kNrtTensorAllocate,
  kNrtTensorAllocateEmpty,
  kNrtTensorAttachBuffer,
  kNrtTensorAllocateSlice,
  kNrtTensorFree,
  kNrtTensorRead,
  kNrtTensorWrite,
  kNrtTensorReadBatch,
  kNrtTensorWriteBatch,
  kNrtTensorCopy,
  kNrtTensorMemset,
  kNrtAllocateTensorSet,
  kNrtDestroyTensorSet,
  kNrtAddTensorToTensorSet,
  kNumRecordedApiFunctions,
  kNrtSysTraceStart = kNumRecordedApiFunctions,
  kNrtSysTraceStop,
  kNrtSysTraceFetchEvents,
  kNrtSysTraceBufferFree,
  kNumApiFunctions,
};

// The exported name of each ApiFunction, in enum order.
inline const char* ApiFunctionName(unsigned f) {
  static constexpr const char* kNames[kNumApiFunctions] = {
      "nrt_init",
      "nrt_close",
      "nrt_load",
      "nrt_unload",
      "nrt_execute",
      "nrt_execute_repeat",
      "nrt_tensor_allocate",
      "nrt_tensor_allocate_empty",
      "nrt_tensor_attach_buffer",
      "nrt_tensor_allocate_slice",
      "nrt_tensor_free",
      "nrt_tensor_read",
      "nrt_tensor_write",
      "nrt_tensor_read_batch",
      "nrt_tensor_write_batch",
      "nrt_tensor_copy",
      "nrt_tensor_memset",
      "nrt_allocate_tensor_set",
      "nrt_destroy_tensor_set",
      "nrt_add_tensor_to_tensor_set",
      "nrt_sys_trace_start",
      "nrt_sys_trace_stop",
      "nrt_sys_trace_fetch_events",
      "nrt_sys_trace_buffer_free",
  };
  return f < kNumApiFunctions ? kNames[f] : "";
}

// The ApiFunction named `name`, or -1. Allocation-free: the dlsym hook calls it.
inline int ApiFunctionFromName(const char* name) {
  if (name == nullptr || name[0] != 'n' || name[1] != 'r' || name[2] != 't' || name[3] != '_') {
    return -1;
  }
  for (unsigned f = 0; f < kNumApiFunctions; ++f) {
    if (strcmp(name, ApiFunctionName(f)) == 0) return static_cast<int>(f);
  }
  return -1;
}

enum class RecordKind : uint8_t {
  kApiCall = 1,  // EVENT_API_CALL
  kRange = 2,    // EVENT_RANGE
};

// Bytes of a name kept in a record; longer names are cut (kRecordNameTruncated).
inline constexpr size_t kRecordNameBytes = 96;
inline constexpr uint8_t kRecordNameTruncated = 1;

// The most frames NRTPROF_STACKS may ask for.
inline constexpr uint32_t kMaxStackDepth = 64;

struct Record {
  RecordKind kind;
  uint8_t api;          // ApiFunction, for API calls
  uint8_t flags;        // kRecordName*
  uint8_t name_len;     // bytes of `name` in use
  uint32_t stack_depth; // frames following the record in its slot
  uint32_t tid;
  uint32_t depth;       // ranges: nesting depth, 0 outermost
  uint32_t repeat;      // nrt_execute(_repeat)
  int32_t status;       // NRT_STATUS
  int32_t nc_idx;       // -1 when the call does not name a NeuronCore
  int32_t placement;    // nrt_tensor_allocate
  uint64_t start_ns;    // CLOCK_MONOTONIC
  uint64_t end_ns;
  uint64_t correlation_id;
  uint64_t bytes;
  uint64_t model_handle;
  uint64_t tensor_handle;
  uint64_t tensor_handle2;
  // Range name; allocation calls: the tensor's name; nrt_add_tensor_to_tensor_set: the name
  // the tensor takes in the set.
  char name[kRecordNameBytes];

  // The stack_depth return addresses stored right after the record, innermost first.
  uintptr_t* frames() { return reinterpret_cast<uintptr_t*>(this + 1); }
  const uintptr_t* frames() const { return reinterpret_cast<const uintptr_t*>(this + 1); }

  // Copies at most kRecordNameBytes of the NUL-terminated `s` (null: empty).
  void SetName(const char* s) { CopyName(s, name, &name_len, &flags); }

  // The bounded copy behind SetName, for other holders of a name (range frames).
  static void CopyName(const char* s, char* dst, uint8_t* len, uint8_t* flags) {
    *flags = static_cast<uint8_t>(*flags & ~kRecordNameTruncated);
    if (s == nullptr) {
      *len = 0;
      return;
    }
    const size_t n = strnlen(s, kRecordNameBytes + 1);
    const size_t kept = n > kRecordNameBytes ? kRecordNameBytes : n;
    if (n > kRecordNameBytes) *flags = static_cast<uint8_t>(*flags | kRecordNameTruncated);
    memcpy(dst, s, kept);
    *len = static_cast<uint8_t>(kept);
  }

  // Every field but the name bytes, to what an event without that field carries.
  void Clear(RecordKind k) {
    kind = k;
    api = 0;
    flags = 0;
    name_len = 0;
    stack_depth = 0;
    tid = 0;
    depth = 0;
    repeat = 0;
    status = 0;
    nc_idx = -1;
    placement = 0;
    start_ns = end_ns = correlation_id = bytes = 0;
    model_handle = tensor_handle = tensor_handle2 = 0;
  }
};

static_assert(sizeof(Record) % alignof(uintptr_t) == 0, "frames must be aligned");

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_RECORD_H_
