#include "daemon/wire_events.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "common/wire_reader.h"

namespace nrtprof::daemon {
namespace {

// How deep protobuf parses nested groups (its default recursion limit).
constexpr int kMaxGroupDepth = 100;

// Field numbers of the messages read here (proto/nrtprof.proto).
constexpr uint32_t kShimMessageHello = 1;
constexpr uint32_t kShimMessageBatch = 2;
constexpr uint32_t kBatchEvents = 4;
constexpr uint32_t kBatchEventsEncoded = 14;

// A varint at *p of at most `max_bytes` bytes, all before `end`, as WireReader::Varint reads
// it: with `limit` (the end of the whole buffer, at or past `end`) 10 bytes or more away, its
// bytes are read without a check each, and only its end is held to `end` (a varint that runs
// past `end` is refused either way). An event's fields are a few varints of up to 8 bytes:
// the checked loop was most of reading them.
inline bool Varint(const char** p, const char* end, const char* limit, uint64_t* v,
                   int max_bytes = 10) {
  const auto* q = reinterpret_cast<const uint8_t*>(*p);
  if (*p != end && q[0] < 0x80) {  // most fields are one byte
    *v = q[0];
    ++*p;
    return true;
  }
  if (end - *p >= 2 && q[1] < 0x80) {  // the tags of fields 16 and up, and small values
    *v = (q[0] & 0x7fu) | uint64_t{q[1]} << 7;
    *p += 2;
    return true;
  }
  if (limit - *p < 10) {
    WireReader in(*p, end);
    if (!in.Varint(v, max_bytes)) return false;
    *p = in.at();
    return true;
  }
  uint64_t result = 0;
  for (int i = 0; i < max_bytes; ++i) {
    const uint8_t b = q[i];
    result |= uint64_t{b & 0x7fu} << (7 * i);
    if (b < 0x80) {
      if (i + 1 > end - *p) return false;  // ran past the event
      *v = result;
      *p += i + 1;
      return true;
    }
  }
  return false;
}

// One Event message into *r, a record as IngestedEvent() makes it, as ToRecord(parsed message)
// would make it. Fields with a wire type other than their own are unknown fields to protobuf:
// skipped here too. `limit`: the end of the buffer the event is in (see Varint).
bool ReadEvent(const char* begin, const char* end, const char* limit, IngestedEvent* r) {
  r->nc_idx = 0;  // the message's default, not the record's
  uint64_t model = 0, tensor = 0, tensor2 = 0, device_id = 0, parent = 0, exec = 0, polls = 0;
  int32_t worker_gid = 0;
  const char* p = begin;
  while (p != end) {
    uint64_t tag = 0;
    if (!Varint(&p, end, limit, &tag, 5)) return false;
    // As WireReader::Tag: the bits past 32 dropped; number 0, groups and ends of groups
    // declined.
    const uint32_t field = static_cast<uint32_t>(tag) >> 3;
    const uint32_t type = static_cast<uint32_t>(tag & 7);
    if (field == 0 || type == kStartGroup || type == kEndGroup || type > kFixed32) return false;
    if (type != kVarint || field > 28) {
      WireReader in(p, end);
      if (!in.Skip(type)) return false;
      p = in.at();
      continue;
    }
    uint64_t v = 0;
    if (!Varint(&p, end, limit, &v)) return false;
    // As protobuf stores them: 32-bit fields truncated, enums as int32, bool as nonzero.
    const auto u32 = static_cast<uint32_t>(v);
    const auto i32 = static_cast<int32_t>(u32);
    switch (field) {
      case 1: r->kind = static_cast<nrtprof::EventKind>(i32); break;
      case 2: r->start_ns = v; break;
      case 3: r->duration_ns = v; break;
      case 4: r->tid = u32; break;
      case 5: r->name_iid = u32; break;
      case 6: r->correlation_id = v; break;
      case 7: r->status = i32; break;
      case 8: r->bytes = v; break;
      case 9: model = v; break;
      case 10: tensor = v; break;
      case 11: tensor2 = v; break;
      case 12: r->stack_iid = u32; break;
      case 13: r->depth = u32; break;
      case 14: r->nc_idx = i32; break;
      case 15: device_id = v; break;
      case 16: parent = v; break;
      case 17: exec = v; break;
      case 18: r->model_name_iid = u32; break;
      case 19: r->engine_iid = u32; break;
      case 20: r->repeat = u32; break;
      case 21: r->placement = i32; break;
      case 22: r->tensor_name_iid = u32; break;
      case 23: r->host_clock = v != 0; break;
      case 24: r->function = static_cast<nrtprof::ApiFunction>(i32); break;
      case 25: r->nrta_seq = v; break;
      case 26: polls = v; break;
      case 27: worker_gid = i32; break;
      case 28: r->polls_only = v != 0; break;
      default: break;  // field numbers of no Event field: unknown, dropped
    }
  }
  // Protobuf keeps the last of a field given twice; repeat then polls, or polls then repeat,
  // leave the record as ToRecord would: polls, when not 0, win.
  if (polls != 0) r->repeat = SaturatedPolls(polls);
  // As ToRecord: a collective's worker_gid where an API call's placement is.
  if (r->kind == nrtprof::EVENT_DEVICE_EXEC && worker_gid != 0) r->worker_gid = worker_gid;
  switch (r->kind) {
    case nrtprof::EVENT_API_CALL:
      r->call = {model, tensor, tensor2};
      break;
    case nrtprof::EVENT_DEVICE_EXEC:
    case nrtprof::EVENT_DEVICE_OP:
    case nrtprof::EVENT_DEVICE_DMA:
      r->device = {device_id, parent, exec};
      break;
    default:
      break;
  }
  return true;
}

// Counts the fields in `in` up to its end, or, if `group` is not 0, up to the end of that group
// (its start read already), with the fields of groups inside them; false if protobuf could not
// parse them either.
bool CountFields(WireReader* in, uint32_t group, int depth, uint64_t* fields) {
  if (depth > kMaxGroupDepth) return false;
  while (!in->done()) {
    uint32_t field = 0, type = 0;
    if (!in->RawTag(&field, &type)) return false;
    if (type == kEndGroup) return group == field;
    ++*fields;
    if (type == kStartGroup) {
      if (!CountFields(in, field, depth + 1, fields)) return false;
    } else if (!in->Skip(type)) {
      return false;
    }
  }
  return group == 0;
}

// The fields in a batch's events_encoded (the batch's bytes from `begin` to `end`, which
// CountFields took), added to *fields: each event in it is one more message for protobuf to
// make. Where its bytes are not fields, counting stops: the ingest refuses such a batch
// (RecordsOf), having made no more messages than the bytes up to there hold.
void CountEncodedEvents(const char* begin, const char* end, uint64_t* fields) {
  WireReader batch(begin, end);
  while (!batch.done()) {
    uint32_t field = 0, type = 0;
    if (!batch.RawTag(&field, &type)) return;
    if (type == kStartGroup) {
      uint64_t ignored = 0;
      if (!CountFields(&batch, field, 1, &ignored)) return;
      continue;
    }
    if (field == kBatchEventsEncoded && type == kLengthDelimited) {
      const char* b = nullptr;
      const char* e = nullptr;
      if (!batch.Bytes(&b, &e)) return;
      WireReader encoded(b, e);
      CountFields(&encoded, 0, 0, fields);
      continue;
    }
    if (!batch.Skip(type)) return;
  }
}

// The events of an events_encoded field, appended to *events; false at anything but events.
bool ReadEncodedEvents(const char* begin, const char* end, const char* limit,
                       std::vector<IngestedEvent>* events) {
  WireReader in(begin, end);
  while (!in.done()) {
    uint32_t field = 0, type = 0;
    if (!in.Tag(&field, &type) || field != kBatchEvents || type != kLengthDelimited) return false;
    const char* b = nullptr;
    const char* e = nullptr;
    if (!in.Bytes(&b, &e)) return false;
    events->emplace_back();
    if (!ReadEvent(b, e, limit, &events->back())) return false;
  }
  return true;
}

}  // namespace

bool CountWireElements(std::string_view wire, uint64_t* elements) {
  *elements = 0;
  WireReader message(wire.data(), wire.data() + wire.size());
  while (!message.done()) {
    uint32_t field = 0, type = 0;
    if (!message.RawTag(&field, &type)) return false;
    if ((field == kShimMessageHello || field == kShimMessageBatch) && type == kLengthDelimited) {
      const char* b = nullptr;
      const char* e = nullptr;
      if (!message.Bytes(&b, &e)) return false;
      WireReader inner(b, e);
      if (!CountFields(&inner, 0, 0, elements)) return false;
      if (field == kShimMessageBatch) CountEncodedEvents(b, e, elements);
      continue;
    }
    if (type == kEndGroup) return false;
    if (type == kStartGroup) {
      if (!CountFields(&message, field, 1, elements)) return false;
      continue;
    }
    if (!message.Skip(type)) return false;
  }
  return true;
}

bool ReadWireBatch(std::string_view wire, nrtprof::EventBatch* rest,
                   std::vector<IngestedEvent>* events, std::string* scratch) {
  // The ShimMessage: exactly one batch and no Hello (a member of the oneof given twice is
  // protobuf's business).
  const char* const wire_end = wire.data() + wire.size();
  WireReader message(wire.data(), wire_end);
  const char* batch_begin = nullptr;
  const char* batch_end = nullptr;
  while (!message.done()) {
    uint32_t field = 0, type = 0;
    if (!message.Tag(&field, &type)) return false;
    if (field == kShimMessageHello) return false;
    if (field == kShimMessageBatch) {
      if (type != kLengthDelimited || batch_begin != nullptr) return false;
      if (!message.Bytes(&batch_begin, &batch_end)) return false;
      continue;
    }
    if (!message.Skip(type)) return false;
  }
  if (batch_begin == nullptr) return false;

  // The batch: its events read here, every other field copied as it is for protobuf. Those of
  // events_encoded follow those of `events` (as ProcessIngest::OnBatch takes them), in order.
  events->clear();
  scratch->clear();
  // A bytes field given twice is the last one to protobuf.
  std::pair<const char*, const char*> encoded(nullptr, nullptr);
  WireReader batch(batch_begin, batch_end);
  while (!batch.done()) {
    const char* field_begin = batch.at();
    uint32_t field = 0, type = 0;
    if (!batch.Tag(&field, &type)) return false;
    if ((field == kBatchEvents || field == kBatchEventsEncoded) && type == kLengthDelimited) {
      const char* b = nullptr;
      const char* e = nullptr;
      if (!batch.Bytes(&b, &e)) return false;
      if (field == kBatchEventsEncoded) {
        encoded = {b, e};
        continue;
      }
      events->emplace_back();
      if (!ReadEvent(b, e, wire_end, &events->back())) return false;
      continue;
    }
    if (!batch.Skip(type)) return false;
    scratch->append(field_begin, static_cast<size_t>(batch.at() - field_begin));
  }
  if (encoded.first != nullptr &&
      !ReadEncodedEvents(encoded.first, encoded.second, wire_end, events)) {
    return false;
  }
  return rest->ParseFromString(*scratch);
}

}  // namespace nrtprof::daemon
