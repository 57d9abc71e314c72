#include "shim/backend/sys_trace_reader.h"

#include <cstdint>
#include <cstring>

#include "shim/backend/json_scanner.h"

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
  kModelName, kCcOp,
  kKnownIgnored,  // known keys of the types read whose values the profiler does not use
};

Member MemberOf(std::string_view key) {
  switch (key.size()) {
    case 2: if (EqualsLiteral(key, "id")) return Member::kId; break;
    case 4: if (EqualsLiteral(key, "data")) return Member::kData; break;
    case 5: if (EqualsLiteral(key, "phase")) return Member::kPhase; break;
    case 6: if (EqualsLiteral(key, "nc_idx")) return Member::kNcIdx; break;
    case 9: if (EqualsLiteral(key, "thread_id")) return Member::kThreadId; break;
    case 10:
      if (EqualsLiteral(key, "event_type")) return Member::kEventType;
      if (EqualsLiteral(key, "worker_gid")) return Member::kWorkerGid;
      break;
    case 11:
      if (EqualsLiteral(key, "nc_local_id")) return Member::kNcLocalId;
      if (EqualsLiteral(key, "tracking_id")) return Member::kTrackingId;
      if (EqualsLiteral(key, "nrta_seq_id")) return Member::kNrtaSeqId;
      break;
    case 12: if (EqualsLiteral(key, "timestamp_ns")) return Member::kTimestampNs; break;
  }
  return Member::kUnknown;
}

DataKey DataKeyOf(std::string_view key) {
  if (EqualsLiteral(key, "exec_id")) return DataKey::kExecId;
  if (EqualsLiteral(key, "model_id")) return DataKey::kModelId;
  if (EqualsLiteral(key, "nc_timestamp_ns")) return DataKey::kNcTimestampNs;
  if (EqualsLiteral(key, "device_core_idx")) return DataKey::kDeviceCoreIdx;
  if (EqualsLiteral(key, "cpu_timestamp_ns")) return DataKey::kCpuTimestampNs;
  if (EqualsLiteral(key, "tensor_id")) return DataKey::kTensorId;
  if (EqualsLiteral(key, "size")) return DataKey::kSize;
  if (EqualsLiteral(key, "model_name")) return DataKey::kModelName;
  if (EqualsLiteral(key, "cc_op")) return DataKey::kCcOp;
  // The collectives' other members: the collective's number on its queue, the rank and the
  // group's size (the event's worker_gid says the rank's core), the reduction, the type and
  // the algorithm.
  if (EqualsLiteral(key, "mem_type") || EqualsLiteral(key, "mem_handle") || EqualsLiteral(key, "offset") ||
      EqualsLiteral(key, "is_neuron_core_work") || EqualsLiteral(key, "op_id") ||
      EqualsLiteral(key, "rank") || EqualsLiteral(key, "rank_n") || EqualsLiteral(key, "op") ||
      EqualsLiteral(key, "dtype") || EqualsLiteral(key, "algo")) {
    return DataKey::kKnownIgnored;
  }
  return DataKey::kUnknown;
}

SysTraceType TypeOf(std::string_view name) {
  switch (name.size()) {
    case 8: if (EqualsLiteral(name, "nrt_load")) return SysTraceType::kNrtLoad; break;
    case 11:
      if (EqualsLiteral(name, "nrt_execute")) return SysTraceType::kNrtExecute;
      if (EqualsLiteral(name, "device_exec")) return SysTraceType::kDeviceExec;
      if (EqualsLiteral(name, "tensor_read")) return SysTraceType::kTensorRead;
      break;
    case 12:
      if (EqualsLiteral(name, "tensor_write")) return SysTraceType::kTensorWrite;
      if (EqualsLiteral(name, "model_switch")) return SysTraceType::kModelSwitch;
      break;
    case 10: if (EqualsLiteral(name, "cc_running")) return SysTraceType::kCcRunning; break;
    case 14: if (EqualsLiteral(name, "timestamp_sync")) return SysTraceType::kTimestampSync; break;
    case 15:
      if (EqualsLiteral(name, "dmem_buf_copyin")) return SysTraceType::kDmemBufCopyin;
      if (EqualsLiteral(name, "cc_exec_barrier")) return SysTraceType::kCcExecBarrier;
      break;
    case 16: if (EqualsLiteral(name, "dmem_buf_copyout")) return SysTraceType::kDmemBufCopyout; break;
  }
  return SysTraceType::kUnknown;
}

SysTracePhase PhaseOf(std::string_view name) {
  if (EqualsLiteral(name, "start")) return SysTracePhase::kStart;
  if (EqualsLiteral(name, "stop")) return SysTracePhase::kStop;
  if (EqualsLiteral(name, "instant")) return SysTracePhase::kInstant;
  return SysTracePhase::kUnknown;
}

// Bits of the members every event must have (the real serializer writes all ten).
constexpr uint32_t Bit(Member m) { return 1u << static_cast<int>(m); }
constexpr uint32_t kRequired =
    Bit(Member::kEventType) | Bit(Member::kPhase) | Bit(Member::kId) | Bit(Member::kNcIdx) |
    Bit(Member::kNcLocalId) | Bit(Member::kTrackingId) | Bit(Member::kThreadId) |
    Bit(Member::kWorkerGid) | Bit(Member::kData) | Bit(Member::kTimestampNs);

// The runtime writes every event the same way: its members in one order, no white space,
// integers, names without escapes. TemplateCursor reads an event written exactly so, with a
// local cursor and none of the general path's per-member dispatch (measured with
// //shim/backend:device_trace_benchmark: about a quarter of its time). It only accepts what the
// general path would read the same way; at anything else (white space, another order, an
// unknown member or data key, an escape, a value that is not a plain integer or a boolean
// where the runtime writes those) it gives up,
// and the general path reads the event from its start, with the same result or failure.
class TemplateCursor {
 public:
  explicit TemplateCursor(std::string_view text)
      : p_(text.data()), end_(text.data() + text.size()) {}

  const char* at() const { return p_; }

  bool Event(SysTraceEvent* e) {
    uint64_t nc_idx = 0;
    if (!Literal("{\"event_type\":\"") || !Type(e) || !Literal(",\"phase\":\"") || !Phase(e)) {
      return false;
    }
    if (!Literal(",\"id\":") || !Unsigned(&e->id) || !Literal(",\"nc_idx\":") ||
        !Unsigned(&nc_idx) || nc_idx > UINT32_MAX || !Literal(",\"nc_local_id\":") ||
        !Unsigned(&e->nc_local_id) || !Literal(",\"tracking_id\":") ||
        !Unsigned(&e->tracking_id) || !Literal(",\"thread_id\":") ||
        !Unsigned(&e->thread_id) || !Literal(",\"worker_gid\":") || !Signed(&e->worker_gid) ||
        !Literal(",\"data\":{") || !Data(e) || !Literal(",\"timestamp_ns\":") ||
        !Unsigned(&e->timestamp_ns)) {
      return false;
    }
    // The eleventh member, on the events of asynchronous requests only (issue 38: without it
    // here every such event was read twice, by this path and then the general one).
    if (Literal(",\"nrta_seq_id\":")) {
      e->has_nrta_seq_id = true;
      if (!Unsigned(&e->nrta_seq_id)) return false;
    }
    if (!Literal("}")) return false;
    e->nc_idx = static_cast<uint32_t>(nc_idx);
    return true;
  }

 private:
  // The event type's name and its closing quote: the names an execution's and a transfer's
  // events have, matched whole; any other read as a plain string (issue 38: the name, the
  // phase and the data keys scanned a byte at a time were a third of the reader's time).
  bool Type(SysTraceEvent* e) {
    if (Literal("device_exec\"")) {
      e->type = SysTraceType::kDeviceExec;
      return true;
    }
    std::string_view s;
    if (!PlainString(&s)) return false;
    e->type = TypeOf(s);
    return true;
  }

  bool Phase(SysTraceEvent* e) {
    if (Literal("start\"")) {
      e->phase = SysTracePhase::kStart;
      return true;
    }
    if (Literal("stop\"")) {
      e->phase = SysTracePhase::kStop;
      return true;
    }
    std::string_view s;
    if (!PlainString(&s)) return false;
    e->phase = PhaseOf(s);
    return true;
  }

  // A data key after its opening quote, through the colon after its closing one: the keys of
  // executions and sync points matched whole, any other read as a plain string.
  bool Key(DataKey* key) {
    switch (p_ < end_ ? *p_ : '\0') {
      case 'n':
        if (Literal("nc_timestamp_ns\":")) {
          *key = DataKey::kNcTimestampNs;
          return true;
        }
        break;
      case 'e':
        if (Literal("exec_id\":")) {
          *key = DataKey::kExecId;
          return true;
        }
        break;
      case 'd':
        if (Literal("device_core_idx\":")) {
          *key = DataKey::kDeviceCoreIdx;
          return true;
        }
        break;
      case 'm':
        if (Literal("model_id\":")) {
          *key = DataKey::kModelId;
          return true;
        }
        if (Literal("model_name\":")) {
          *key = DataKey::kModelName;
          return true;
        }
        break;
      case 'c':
        if (Literal("cpu_timestamp_ns\":")) {
          *key = DataKey::kCpuTimestampNs;
          return true;
        }
        break;
    }
    std::string_view s;
    if (!PlainString(&s) || !Literal(":")) return false;
    *key = DataKeyOf(s);
    return true;
  }

  // After `data`'s '{', through its '}'.
  bool Data(SysTraceEvent* e) {
    if (Literal("}")) return true;
    while (true) {
      std::string_view ignored_text;
      uint64_t ignored = 0;
      DataKey key = DataKey::kUnknown;
      if (!Literal("\"") || !Key(&key)) return false;
      bool ok = false;
      switch (key) {
        case DataKey::kExecId: ok = e->has_exec_id = Unsigned(&e->exec_id); break;
        case DataKey::kModelId: ok = e->has_model_id = Unsigned(&e->model_id); break;
        case DataKey::kNcTimestampNs:
          ok = e->has_nc_timestamp_ns = Unsigned(&e->nc_timestamp_ns);
          break;
        case DataKey::kCpuTimestampNs:
          ok = e->has_cpu_timestamp_ns = Unsigned(&e->cpu_timestamp_ns);
          break;
        case DataKey::kDeviceCoreIdx: ok = Unsigned(&e->device_core_idx); break;
        case DataKey::kTensorId: ok = Unsigned(&e->tensor_id); break;
        case DataKey::kSize: ok = e->has_size = Unsigned(&e->size); break;
        case DataKey::kModelName: ok = Literal("\"") && PlainString(&e->model_name); break;
        case DataKey::kCcOp: ok = Literal("\"") && PlainString(&e->cc_op); break;
        case DataKey::kKnownIgnored:
          ok = Literal("true") || Literal("false") || Unsigned(&ignored) ||
               (Literal("\"") && PlainString(&ignored_text));
          break;
        case DataKey::kUnknown: return false;  // counted by the general path
      }
      if (!ok) return false;
      if (Literal("}")) return true;
      if (!Literal(",")) return false;
    }
  }

  template <size_t N>
  bool Literal(const char (&literal)[N]) {
    if (static_cast<size_t>(end_ - p_) < N - 1 || !BytesAre(p_, literal)) return false;
    p_ += N - 1;
    return true;
  }

  // After a string's opening quote, through its closing one; none with an escape.
  bool PlainString(std::string_view* out) {
    for (const char* start = p_; p_ < end_; ++p_) {
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        *out = std::string_view(start, static_cast<size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c == '\\' || c < 0x20) return false;
    }
    return false;
  }

  static bool IsDigit(char c) { return static_cast<unsigned char>(c - '0') <= 9; }

  // Whether the eight bytes at `p` are all digits, and if so their value (eight at once:
  // timestamps and ids of 10 to 19 digits are most of a document's bytes).
  static bool EightDigits(const char* p, uint64_t* value) {
    uint64_t chunk;
    memcpy(&chunk, p, 8);
    // A digit byte is 0x30 to 0x39: its high nibble is 3, and still 3 once 6 is added. (A carry
    // into a byte comes only from a lower byte that is no digit, which fails by itself.)
    constexpr uint64_t kHigh = 0xF0F0F0F0F0F0F0F0ull;
    if (((chunk & kHigh) | (((chunk + 0x0606060606060606ull) & kHigh) >> 4)) !=
        0x3333333333333333ull) {
      return false;
    }
    chunk -= 0x3030303030303030ull;  // the first digit in the lowest byte
    chunk = (chunk * 10 + (chunk >> 8)) & 0x00FF00FF00FF00FFull;        // pairs
    chunk = (chunk * 100 + (chunk >> 16)) & 0x0000FFFF0000FFFFull;      // fours
    *value = (chunk * 10000 + (chunk >> 32)) & 0xFFFFFFFFull;             // eight
    return true;
  }

  // 1 to 19 digits (no overflow is possible), no leading zero, not followed by a fraction or
  // an exponent. Inlined: a dozen numbers an event, each a call otherwise (~12% of the reader's
  // time on the async documents).
  __attribute__((always_inline)) bool Unsigned(uint64_t* out) {
    const char* start = p_;
    uint64_t v = 0, eight = 0;
    if (end_ - p_ >= 8 && EightDigits(p_, &eight)) {
      v = eight;
      p_ += 8;
      if (end_ - p_ >= 8 && EightDigits(p_, &eight)) {
        v = v * 100000000 + eight;
        p_ += 8;
      }
    }
    const char* stop = end_ - start > 19 ? start + 19 : end_;
    while (p_ < stop && IsDigit(*p_)) v = v * 10 + static_cast<uint64_t>(*p_++ - '0');
    if (p_ == start || (p_ - start > 1 && *start == '0')) return false;
    if (p_ < end_ && (IsDigit(*p_) || *p_ == '.' || *p_ == 'e' || *p_ == 'E')) return false;
    *out = v;
    return true;
  }

  bool Signed(int64_t* out) {
    const bool negative = p_ < end_ && *p_ == '-';
    if (negative) ++p_;
    uint64_t magnitude = 0;
    if (!Unsigned(&magnitude) || magnitude > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
    return true;
  }

  const char* p_;
  const char* const end_;
};

class Reader : public JsonScanner {
 public:
  Reader(std::string_view text, SysTraceReadStats* stats, bool fast_path)
      : JsonScanner(text), stats_(stats), fast_path_(fast_path) {}

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
    // One record for every event: the fast path sets each member every event has, and only
    // those an event may lack are reset for it (issue 38: zeroing the whole record for each
    // event, a `rep stos`, was most of this loop's own time).
    SysTraceEvent event;
    while (true) {
      SkipSpace();
      ResetOptional(&event);
      TemplateCursor fast(Rest());
      if (fast_path_ && fast.Event(&event)) {
        SkipTo(fast.at());
        pending_unknown_ = 0;
      } else {
        event = SysTraceEvent();
        if (!Event(&event)) return false;
      }
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

  // What TemplateCursor::Event leaves as it was when an event lacks it.
  static void ResetOptional(SysTraceEvent* e) {
    e->has_nrta_seq_id = e->has_exec_id = e->has_model_id = e->has_nc_timestamp_ns =
        e->has_cpu_timestamp_ns = e->has_size = false;
    e->nrta_seq_id = e->exec_id = e->model_id = e->nc_timestamp_ns = e->cpu_timestamp_ns =
        e->size = e->tensor_id = e->device_core_idx = 0;
    e->model_name = {};
    e->cc_op = {};
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
        case DataKey::kCcOp:
          if (Peek() != '"' || !String(&e->cc_op)) return Fail("data.cc_op is not a string");
          if (InScratch(e->cc_op)) {
            cc_op_.assign(e->cc_op);
            e->cc_op = cc_op_;
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
  const bool fast_path_;
  std::string model_name_, cc_op_;
  uint64_t pending_unknown_ = 0;
};

}  // namespace

namespace {

bool Read(std::string_view json, bool fast_path,
          absl::FunctionRef<void(const SysTraceEvent&)> on_event, SysTraceReadStats* stats,
          std::string* error) {
  Reader reader(json, stats, fast_path);
  if (reader.Document(on_event)) return true;
  *error = reader.error();
  return false;
}

}  // namespace

bool ReadSysTrace(std::string_view json, absl::FunctionRef<void(const SysTraceEvent&)> on_event,
                  SysTraceReadStats* stats, std::string* error) {
  return Read(json, /*fast_path=*/true, on_event, stats, error);
}

bool ReadSysTraceGeneralOnlyForTesting(std::string_view json,
                                       absl::FunctionRef<void(const SysTraceEvent&)> on_event,
                                       SysTraceReadStats* stats, std::string* error) {
  return Read(json, /*fast_path=*/false, on_event, stats, error);
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
    case SysTraceType::kCcExecBarrier: return "cc_exec_barrier";
    case SysTraceType::kCcRunning: return "cc_running";
    case SysTraceType::kUnknown: break;
  }
  return "unknown";
}

}  // namespace nrtprof::shim
