#include "shim/device_trace.h"

#include "shim/json_reader.h"

namespace nrtprof::shim {
namespace {

uint64_t U64(const JsonValue& object, const char* key) {
  const JsonValue* v = object.Find(key);
  return v != nullptr ? v->AsUint64() : 0;
}

int64_t I64(const JsonValue& object, const char* key) {
  const JsonValue* v = object.Find(key);
  return v != nullptr ? v->AsInt64() : 0;
}

const std::string& Str(const JsonValue& object, const char* key) {
  const JsonValue* v = object.Find(key);
  static const std::string* const kEmpty = new std::string();
  return v != nullptr ? v->AsString() : *kEmpty;
}

}  // namespace

bool DeviceTraceParser::Parse(uint64_t generation, std::string_view json,
                              DeviceTraceOutput* out, std::string* error) {
  JsonValue doc;
  if (!ParseJson(json, &doc, error)) return false;
  const JsonValue* events = doc.is_object() ? doc.Find("trace_events") : nullptr;
  if (events == nullptr || !events->is_array()) {
    *error = "no trace_events array";
    return false;
  }
  for (const JsonValue& e : events->items()) {
    if (!e.is_object()) continue;
    const std::string& type = Str(e, "type");
    const int32_t nc_idx = static_cast<int32_t>(I64(e, "nc_idx"));
    if (type == "timestamp_sync_point") {
      nrtprof::DeviceClockSync& sync = out->clock_syncs.emplace_back();
      sync.set_nc_idx(nc_idx);
      sync.set_device_ns(U64(e, "timestamp"));
      sync.set_host_monotonic_ns(U64(e, "host_monotonic_ns"));
      continue;
    }
    nrtprof::EventKind kind;
    if (type == "nc_exec_running") {
      kind = nrtprof::EVENT_DEVICE_EXEC;
    } else if (type == "nc_engine_op") {
      kind = nrtprof::EVENT_DEVICE_OP;
    } else if (type == "dma_transfer") {
      kind = nrtprof::EVENT_DEVICE_DMA;
    } else {
      ++out->skipped;
      continue;
    }
    nrtprof::Event& event = out->events.emplace_back();
    event.set_kind(kind);
    event.set_start_ns(U64(e, "timestamp"));
    event.set_duration_ns(U64(e, "duration"));
    event.set_tid(static_cast<uint32_t>(U64(e, "thread_id")));
    event.set_name_iid(InternOrZero(Str(e, "name")));
    event.set_nc_idx(nc_idx);
    event.set_device_id(U64(e, "id"));
    event.set_device_parent_id(U64(e, "parent_id"));
    event.set_exec_id(U64(e, "exec_id"));
    event.set_model_name_iid(InternOrZero(Str(e, "model_name")));
    event.set_engine_iid(InternOrZero(Str(e, "engine")));
    event.set_bytes(U64(e, "size"));
    event.set_tensor_name_iid(InternOrZero(Str(e, "tensor_name")));
  }
  if (generation != generation_) {
    generation_ = generation;
    overwritten_seen_.clear();
  }
  if (const JsonValue* cores = doc.Find("cores"); cores != nullptr) {
    for (const JsonValue& core : cores->items()) {
      const int64_t nc = I64(core, "nc_idx");
      const uint64_t overwritten = U64(core, "events_overwritten");
      uint64_t& seen = overwritten_seen_[nc];
      if (overwritten > seen) {
        out->overwritten += overwritten - seen;
        overwritten_total_ += overwritten - seen;
        seen = overwritten;
      }
    }
  }
  return true;
}

}  // namespace nrtprof::shim
