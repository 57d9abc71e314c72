// Protobuf's wire format for the flusher's hot path, written by hand (issue 38): an Event (proto/
// nrtprof.proto) as a field `events` of an EventBatch, byte for byte as protobuf writes it
// (fields in their numbers' order, proto3 zeros left out, an int32 or enum's negative value as
// its 64-bit sign extension). Protobuf's own serializer (ByteSizeLong, then a second pass over
// the fields) was a twelfth of the flusher's CPU at 10,000 async executions a second.
// event_wire_test holds the encoding against protobuf's for every field of Event.
#ifndef NRTPROF_SHIM_BACKEND_EVENT_WIRE_H_
#define NRTPROF_SHIM_BACKEND_EVENT_WIRE_H_

#include <cstdint>
#include <string>

#include "shim/backend/proto_lite/nrtprof.pb.h"

namespace nrtprof::shim::wire {

// Event's highest field number: event_wire_test fails when proto/nrtprof.proto has another,
// until AppendEvent writes the new field too.
inline constexpr int kEventFields = 28;

inline char* PutVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

// A varint field, left out when zero (proto3).
inline char* PutField(char* p, uint32_t field, uint64_t v) {
  if (v == 0) return p;
  return PutVarint(PutVarint(p, uint64_t{field} << 3), v);
}

inline uint64_t Int32Bits(int32_t v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); }

// The most an encoded Event takes: 28 fields of at most 2 tag bytes and 10 value bytes, after
// EventBatch.events' tag and length (2 bytes: the body is under 16384).
inline constexpr size_t kMaxEventBytes = 1 + 2 + kEventFields * 12;

// Appends `body` (an Event's fields, `body_end - body` bytes, with at least 3 bytes free before
// `body`) to *out as EventBatch.events: its tag and length, then the body.
inline void AppendAsBatchEvent(char* body, char* body_end, std::string* out) {
  const size_t length = static_cast<size_t>(body_end - body);
  char* head = body - (length < 0x80 ? 2 : 3);
  head[0] = static_cast<char>((4 << 3) | 2);  // EventBatch.events, length-delimited
  PutVarint(head + 1, length);
  out->append(head, static_cast<size_t>(body_end - head));
}

// `event` as a field `events` of an EventBatch (tag, length, Event), appended to *out.
inline void AppendEvent(const nrtprof::Event& e, std::string* out) {
  char buffer[kMaxEventBytes];
  char* const body = buffer + 3;
  char* p = body;
  p = PutField(p, 1, Int32Bits(e.kind()));
  p = PutField(p, 2, e.start_ns());
  p = PutField(p, 3, e.duration_ns());
  p = PutField(p, 4, e.tid());
  p = PutField(p, 5, e.name_iid());
  p = PutField(p, 6, e.correlation_id());
  p = PutField(p, 7, Int32Bits(e.status()));
  p = PutField(p, 8, e.bytes());
  p = PutField(p, 9, e.model_handle());
  p = PutField(p, 10, e.tensor_handle());
  p = PutField(p, 11, e.tensor_handle2());
  p = PutField(p, 12, e.stack_iid());
  p = PutField(p, 13, e.depth());
  p = PutField(p, 14, Int32Bits(e.nc_idx()));
  p = PutField(p, 15, e.device_id());
  p = PutField(p, 16, e.device_parent_id());
  p = PutField(p, 17, e.exec_id());
  p = PutField(p, 18, e.model_name_iid());
  p = PutField(p, 19, e.engine_iid());
  p = PutField(p, 20, e.repeat());
  p = PutField(p, 21, Int32Bits(e.placement()));
  p = PutField(p, 22, e.tensor_name_iid());
  p = PutField(p, 23, e.host_clock() ? 1 : 0);
  p = PutField(p, 24, Int32Bits(e.function()));
  p = PutField(p, 25, e.nrta_seq());
  p = PutField(p, 26, e.polls());
  p = PutField(p, 27, Int32Bits(e.worker_gid()));
  p = PutField(p, 28, e.polls_only() ? 1 : 0);
  AppendAsBatchEvent(body, p, out);
}

}  // namespace nrtprof::shim::wire

#endif  // NRTPROF_SHIM_BACKEND_EVENT_WIRE_H_
