#include "shim/sys_trace_reader.h"

#include <cstring>

#include "shim/json_scanner.h"

namespace nrtprof::shim {
namespace {

// The fields of the event object and of `data` the reader knows, by name.
enum class Member : uint8_t {
  kUnknown,
  kEventType, kPhase, kId, kNcIdx, kNcLocalId, kTrackingId, kThreadId, kWorkerGid, kData,
  kTimestampNs, kNrtaSeqId,
};
enum class DataKey : uint8_t {
  kUnknown,
  kDeviceCoreIdx, kExecId, kNcTimestampNs, kModelId, kCpuTimestampNs, kTensorId, kSize,
  kModelName,
  kKnownIgnored,  // known keys of the types read whose values the profiler does not use
};

Member MemberOf(std::string_view key) {
  switch (key.size()) {
    case 2: if (key == "id") return Member::kId; break;
    case 4: if (key == "data") return Member::kData; break;
    case 5: if (key == "phase") return Member::kPhase; break;
    case 6: if (key == "nc_idx") return Member::kNcIdx; break;
    case 9: if (key == "thread_id") return Member::kThreadId; break;
    case 10:
      if (key == "event_type") return Member::kEventType;
      if (key == "worker_gid") return Member::kWorkerGid;
      break;
    case 11:
      if (key == "nc_local_id") return Member::kNcLocalId;
      if (key == "tracking_id") return Member::kTrackingId;
      if (key == "nrta_seq_id") return Member::kNrtaSeqId;
      break;
    case 12: if (key == "timestamp_ns") return Member::kTimestampNs; break;
  }
  return Member::kUnknown;
}

DataKey DataKeyOf(std::string_view key) {
  if (key == "exec_id") return DataKey::kExecId;
  if (key == "model_id") return DataKey::kModelId;
  if (key == "nc_timestamp_ns") return DataKey::kNcTimestampNs;
  if (key == "device_core_idx") return DataKey::kDeviceCoreIdx;
  if (key == "cpu_timestamp_ns") return DataKey::kCpuTimestampNs;
  if (key == "tensor_id") return DataKey::kTensorId;
  if (key == "size") return DataKey::kSize;
  if (key == "model_name") return DataKey::kModelName;
  if (key == "mem_type" || key == "mem_handle" || key == "offset" ||
      key == "is_neuron_core_work") {
    return DataKey::kKnownIgnored;
  }
  return DataKey::kUnknown;
}

SysTraceType TypeOf(std::string_view name) {
  switch (name.size()) {
    case 8: if (name == "nrt_load") return SysTraceType::kNrtLoad; break;
    case 11:
      if (name == "nrt_execute") return SysTraceType::kNrtExecute;
      if (name == "device_exec") return SysTraceType::kDeviceExec;
      if (name == "tensor_read") return SysTraceType::kTensorRead;
      break;
    case 12:
      if (name == "tensor_write") return SysTraceType::kTensorWrite;
      if (name == "model_switch") return SysTraceType::kModelSwitch;
      break;
    case 14: if (name == "timestamp_sync") return SysTraceType::kTimestampSync; break;
    case 15: if (name == "dmem_buf_copyin") return SysTraceType::kDmemBufCopyin; break;
    case 16: if (name == "dmem_buf_copyout") return SysTraceType::kDmemBufCopyout; break;
  }
  return SysTraceType::kUnknown;
}

SysTracePhase PhaseOf(std::string_view name) {
  if (name == "start") return SysTracePhase::kStart;
  if (name == "stop") return SysTracePhase::kStop;
  if (name == "instant") return SysTracePhase::kInstant;
  return SysTracePhase::kUnknown;
}

// Bits of the members every event must have (the real serializer writes all ten).
constexpr uint32_t Bit(Member m) { return 1u << static_cast<int>(m); }
constexpr uint32_t kRequired =
    Bit(Member::kEventType) | Bit(Member::kPhase) | Bit(Member::kId) | Bit(Member::kNcIdx) |
    Bit(Member::kNcLocalId) | Bit(Member::kTrackingId) | Bit(Member::kThreadId) |
    Bit(Member::kWorkerGid) | Bit(Member::kData) | Bit(Member::kTimestampNs);

class Reader : public JsonScanner {
 public:
  Reader(std::string_view text, SysTraceReadStats* stats) : JsonScanner(text), stats_(stats) {}

  bool Document(absl::FunctionRef<void(const SysTraceEvent&)> on_event) {
    SkipSpace();
    if (!Consume('{')) return Fail("the document is not a JSON object");
    bool events = false, version = false;
    if (!Members([&](std::string_view key) {
          if (key == "events") {
            events = true;
            return Events(on_event);
          }
          if (key == "data_version") {
            version = true;
            uint64_t v = 0;
            if (!Unsigned(&v, "data_version")) return false;
            if (v != 2) return Fail("data_version " + std::to_string(v) + " is not 2");
            return true;
          }
          ++stats_->unknown_members;
          return SkipValue(1);
        })) {
      return false;
    }
    if (!End()) return false;
    if (!events) return Fail("no events array");
    if (!version) return Fail("no data_version");
    return true;
  }

 private:
  bool Events(absl::FunctionRef<void(const SysTraceEvent&)> on_event) {
    if (!Consume('[')) return Fail("events is not an array");
    SkipSpace();
    if (Consume(']')) return true;
    while (true) {
      SkipSpace();
      SysTraceEvent event;
      if (!Event(&event)) return false;
      ++stats_->events;
      if (event.type == SysTraceType::kUnknown || event.phase == SysTracePhase::kUnknown) {
        ++stats_->unknown_types;
      } else {
        stats_->unknown_members += pending_unknown_;
      }
      on_event(event);
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume(']')) return true;
      return Fail("expected ',' or ']' in events");
    }
  }

  bool Event(SysTraceEvent* e) {
    if (!Consume('{')) return Fail("an event is not an object");
    uint32_t seen = 0;
    pending_unknown_ = 0;
    const bool ok = Members([&](std::string_view key) {
      const Member m = MemberOf(key);
      seen |= Bit(m);
      uint64_t v = 0;
      std::string_view s;
      switch (m) {
        case Member::kEventType:
          if (!String(&s)) return Fail("event_type is not a string");
          e->type = TypeOf(s);
          return true;
        case Member::kPhase:
          if (!String(&s)) return Fail("phase is not a string");
          e->phase = PhaseOf(s);
          return true;
        case Member::kId: return Unsigned(&e->id, "id");
        case Member::kNcIdx:
          if (!Unsigned(&v, "nc_idx")) return false;
          if (v > UINT32_MAX) return Fail("nc_idx out of range");
          e->nc_idx = static_cast<uint32_t>(v);
          return true;
        case Member::kNcLocalId: return Unsigned(&e->nc_local_id, "nc_local_id");
        case Member::kTrackingId: return Unsigned(&e->tracking_id, "tracking_id");
        case Member::kThreadId: return Unsigned(&e->thread_id, "thread_id");
        case Member::kWorkerGid: return Signed(&e->worker_gid, "worker_gid");
        case Member::kTimestampNs: return Unsigned(&e->timestamp_ns, "timestamp_ns");
        case Member::kNrtaSeqId:
          e->has_nrta_seq_id = true;
          return Unsigned(&e->nrta_seq_id, "nrta_seq_id");
        case Member::kData: return Data(e);
        case Member::kUnknown:
          ++pending_unknown_;
          return SkipValue(3);
      }
      return false;
    });
    if (!ok) return false;
    if ((seen & kRequired) != kRequired) {
      for (Member m : {Member::kEventType, Member::kPhase, Member::kId, Member::kNcIdx,
                       Member::kNcLocalId, Member::kTrackingId, Member::kThreadId,
                       Member::kWorkerGid, Member::kData, Member::kTimestampNs}) {
        if ((seen & Bit(m)) == 0) return Fail(std::string("an event lacks ") + MemberName(m));
      }
    }
    return true;
  }

  static const char* MemberName(Member m) {
    switch (m) {
      case Member::kEventType: return "event_type";
      case Member::kPhase: return "phase";
      case Member::kId: return "id";
      case Member::kNcIdx: return "nc_idx";
      case Member::kNcLocalId: return "nc_local_id";
      case Member::kTrackingId: return "tracking_id";
      case Member::kThreadId: return "thread_id";
      case Member::kWorkerGid: return "worker_gid";
      case Member::kData: return "data";
      case Member::kTimestampNs: return "timestamp_ns";
      default: return "?";
    }
  }

  bool Data(SysTraceEvent* e) {
    if (!Consume('{')) return Fail("data is not an object");
    return Members([&](std::string_view key) {
      switch (DataKeyOf(key)) {
        case DataKey::kExecId:
          e->has_exec_id = true;
          return Unsigned(&e->exec_id, "data.exec_id");
        case DataKey::kModelId:
          e->has_model_id = true;
          return Unsigned(&e->model_id, "data.model_id");
        case DataKey::kNcTimestampNs:
          e->has_nc_timestamp_ns = true;
          return Unsigned(&e->nc_timestamp_ns, "data.nc_timestamp_ns");
        case DataKey::kCpuTimestampNs:
          e->has_cpu_timestamp_ns = true;
          return Unsigned(&e->cpu_timestamp_ns, "data.cpu_timestamp_ns");
        case DataKey::kDeviceCoreIdx:
          return Unsigned(&e->device_core_idx, "data.device_core_idx");
        case DataKey::kTensorId: return Unsigned(&e->tensor_id, "data.tensor_id");
        case DataKey::kSize:
          e->has_size = true;
          return Unsigned(&e->size, "data.size");
        case DataKey::kModelName:
          if (Peek() != '"' || !String(&e->model_name)) {
            return Fail("data.model_name is not a string");
          }
          // A later string would reuse the scratch buffer: keep this one apart.
          if (InScratch(e->model_name)) {
            model_name_.assign(e->model_name);
            e->model_name = model_name_;
          }
          return true;
        case DataKey::kKnownIgnored:
          return SkipValue(4);
        case DataKey::kUnknown:
          ++pending_unknown_;
          return SkipValue(4);
      }
      return false;
    });
  }

  SysTraceReadStats* const stats_;
  std::string model_name_;
  uint64_t pending_unknown_ = 0;
};

}  // namespace

bool ReadSysTrace(std::string_view json, absl::FunctionRef<void(const SysTraceEvent&)> on_event,
                  SysTraceReadStats* stats, std::string* error) {
  Reader reader(json, stats);
  if (reader.Document(on_event)) return true;
  *error = reader.error();
  return false;
}

const char* SysTraceTypeName(SysTraceType type) {
  switch (type) {
    case SysTraceType::kNrtLoad: return "nrt_load";
    case SysTraceType::kNrtExecute: return "nrt_execute";
    case SysTraceType::kDeviceExec: return "device_exec";
    case SysTraceType::kTensorRead: return "tensor_read";
    case SysTraceType::kTensorWrite: return "tensor_write";
    case SysTraceType::kDmemBufCopyin: return "dmem_buf_copyin";
    case SysTraceType::kDmemBufCopyout: return "dmem_buf_copyout";
    case SysTraceType::kTimestampSync: return "timestamp_sync";
    case SysTraceType::kModelSwitch: return "model_switch";
    case SysTraceType::kUnknown: break;
  }
  return "unknown";
}

}  // namespace nrtprof::shim
