// What the shim's hot path writes for one event: a fixed-size record in the calling thread's
// ring (event_ring.h), turned into an nrtprof.Event by the flusher thread (event_builder.h).
//
// Plain data, no pointers that must outlive the call: names are copied (bounded) into the
// record, because the caller may free them as soon as the call returns. The call stack's raw
// return addresses, when NRTPROF_STACKS asks for them, follow the record in its ring slot.
#ifndef NRTPROF_SHIM_PRELOAD_RECORD_H_
#define NRTPROF_SHIM_PRELOAD_RECORD_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/api_functions.h"

namespace nrtprof::shim {

// The libnrt functions the shim interposes. The first kNumRecordedApiFunctions are recorded as
// runtime-lane events; the nrt_sys_trace_* and nrt_profile_* ones are only arbitrated
// (sys_trace_arbiter.h, device_profile.h) so that the program's own system trace and device
// profiles and the profiler's do not collide.
#define NRTPROF_SHIM_ENUMERATOR(enumerator, function, wire, number) enumerator,
enum ApiFunction : uint8_t {
  NRTPROF_RECORDED_API_FUNCTIONS(NRTPROF_SHIM_ENUMERATOR)  //
  kNumRecordedApiFunctions,
  kBeforeArbitrated = kNumRecordedApiFunctions - 1,
  NRTPROF_ARBITRATED_API_FUNCTIONS(NRTPROF_SHIM_ENUMERATOR)  //
  kNumApiFunctions,
};
#undef NRTPROF_SHIM_ENUMERATOR

// The exported name of each ApiFunction, in enum order.
inline const char* ApiFunctionName(unsigned f) {
#define NRTPROF_SHIM_NAME(enumerator, function, wire, number) #function,
  static constexpr const char* kNames[kNumApiFunctions] = {
      NRTPROF_RECORDED_API_FUNCTIONS(NRTPROF_SHIM_NAME)
          NRTPROF_ARBITRATED_API_FUNCTIONS(NRTPROF_SHIM_NAME)};
#undef NRTPROF_SHIM_NAME
  return f < kNumApiFunctions ? kNames[f] : "";
}

// The nrtprof.ApiFunction number of each ApiFunction (what the call's event carries).
inline uint32_t ApiFunctionWireNumber(unsigned f) {
#define NRTPROF_SHIM_NUMBER(enumerator, function, wire, number) number,
  static constexpr uint32_t kNumbers[kNumApiFunctions] = {
      NRTPROF_RECORDED_API_FUNCTIONS(NRTPROF_SHIM_NUMBER)
          NRTPROF_ARBITRATED_API_FUNCTIONS(NRTPROF_SHIM_NUMBER)};
#undef NRTPROF_SHIM_NUMBER
  return f < kNumApiFunctions ? kNumbers[f] : 0;
}

// The ApiFunction named `name`, or -1. Allocation-free: the dlsym hook calls it.
inline int ApiFunctionFromName(const char* name) {
  if (name == nullptr || name[0] != 'n' || name[1] != 'r' || name[2] != 't' ||
      (name[3] != '_' && (name[3] != 'a' || name[4] != '_'))) {
    return -1;  // neither nrt_ nor nrta_
  }
  for (unsigned f = 0; f < kNumApiFunctions; ++f) {
    if (strcmp(name, ApiFunctionName(f)) == 0) return static_cast<int>(f);
  }
  return -1;
}

enum class RecordKind : uint8_t {
  kPad = 0,      // unused slots before the ring wraps; skipped by the consumer
  kApiCall = 1,  // EVENT_API_CALL
  kRange = 2,    // EVENT_RANGE
};

// A ring holds 64-byte slots. A record is one slot; its call stack (NRTPROF_STACKS) and its
// name, when it has one, take the slots right after it: frames first, then the name bytes.
inline constexpr size_t kRecordSlotBytes = 64;

// Bytes of a name kept in a record; longer names are cut (kRecordNameTruncated).
inline constexpr size_t kRecordNameBytes = 96;
inline constexpr uint8_t kRecordNameTruncated = 1;
// An nrta_is_completed / nrta_get_sequence record that is no call: only the count, in `bytes`,
// of its thread's polls after its last recorded one, written when the thread ended or the
// process exited (core.h's RecordPollTally; Event.polls_only).
inline constexpr uint8_t kRecordPollsOnly = 2;

// The most frames NRTPROF_STACKS may ask for.
inline constexpr uint32_t kMaxStackDepth = 64;

// Slots a record needs for `frames` return addresses and `name_bytes` of name.
inline constexpr uint32_t RecordSlots(uint32_t frames, uint32_t name_bytes) {
  return 1 + static_cast<uint32_t>((frames * sizeof(uintptr_t) + name_bytes + kRecordSlotBytes - 1) /
                                   kRecordSlotBytes);
}
// The most slots one record may take.
inline constexpr uint32_t kMaxRecordSlots = RecordSlots(kMaxStackDepth, kRecordNameBytes);

// One event as the hot path writes it: 64 bytes, one cache line. Which handle fields mean what
// depends on `api` (event_builder.cc maps them to the wire's fields). Timestamps are in the
// process's tick clock (shim/preload/tick_clock.h), turned into CLOCK_MONOTONIC nanoseconds off the
// program's threads.
struct alignas(8) Record {
  RecordKind kind;
  uint8_t api;          // ApiFunction, for API calls
  uint8_t flags;        // kRecordNameTruncated, kRecordPollsOnly
  uint8_t name_len;     // bytes of name() in use
  uint8_t slots;        // slots this record takes, itself included
  uint8_t stack_depth;  // frames() in use
  uint16_t depth;       // ranges: nesting depth, 0 outermost
  int32_t status;       // NRT_STATUS
  int32_t nc_idx;       // -1 when the call does not name a NeuronCore
  uint64_t start_ticks;
  uint64_t end_ticks;
  uint64_t correlation_id;
  uint64_t bytes;
  // nrt_load/unload/execute(_repeat): the model; tensor calls: the tensor (a slice: the new
  // slice; a copy: the source).
  uint64_t handle;
  // nrt_execute(_repeat): the repeat count; nrt_tensor_allocate: the placement; a slice: its
  // source tensor; a copy: the destination. nrta_* calls: the request's nrta_seq_t (then
  // nrta_tensor_copy's destination is not kept: the device event matched by that number tells
  // what ran); nrta_is_completed and nrta_get_sequence keep the polls of their function before
  // them in `bytes` (a kRecordPollsOnly record: the polls it counts).
  uint64_t aux;

  // Return addresses, innermost first, in the slots after the record.
  uintptr_t* frames() { return reinterpret_cast<uintptr_t*>(this + 1); }
  const uintptr_t* frames() const { return reinterpret_cast<const uintptr_t*>(this + 1); }
  // The name bytes, after the frames; room for them was reserved with the record.
  char* name() { return reinterpret_cast<char*>(frames() + stack_depth); }
  const char* name() const { return reinterpret_cast<const char*>(frames() + stack_depth); }

  // Copies at most `room` (<= kRecordNameBytes) bytes of the NUL-terminated `s` (null: empty).
  void SetName(const char* s, uint32_t room) { CopyName(s, room, name(), &name_len, &flags); }

  // The bounded copy behind SetName, for other holders of a name (range frames).
  static void CopyName(const char* s, uint32_t room, char* dst, uint8_t* len, uint8_t* flags) {
    *flags = static_cast<uint8_t>(*flags & ~kRecordNameTruncated);
    if (s == nullptr) {
      *len = 0;
      return;
    }
    const size_t n = strnlen(s, room + 1);
    const size_t kept = n > room ? room : n;
    if (n > room) *flags = static_cast<uint8_t>(*flags | kRecordNameTruncated);
    memcpy(dst, s, kept);
    *len = static_cast<uint8_t>(kept);
  }

  // Every field, to what an event without that field carries; `slots` as reserved.
  void Clear(RecordKind k, uint32_t reserved_slots) {
    kind = k;
    api = 0;
    flags = 0;
    name_len = 0;
    slots = static_cast<uint8_t>(reserved_slots);
    stack_depth = 0;
    depth = 0;
    status = 0;
    nc_idx = -1;
    start_ticks = end_ticks = correlation_id = bytes = handle = aux = 0;
  }
};

static_assert(sizeof(Record) == kRecordSlotBytes, "a record is one slot");
static_assert(kMaxRecordSlots < 256, "slots fits in a byte");

// How many bytes of a name a record with room for `s` should reserve: its length, at most
// kRecordNameBytes (one more byte tells the copy that the name was cut).
inline uint32_t NameRoom(const char* s) {
  return s == nullptr ? 0 : static_cast<uint32_t>(strnlen(s, kRecordNameBytes));
}

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_PRELOAD_RECORD_H_
