#include "shim/sys_trace_reader.h"

#include <cstring>

#include "shim/utf8.h"

namespace nrtprof::shim {
namespace {

constexpr int kMaxDepth = 64;

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

class Reader {
 public:
  Reader(std::string_view text, SysTraceReadStats* stats) : text_(text), stats_(stats) {}

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
    SkipSpace();
    if (pos_ != text_.size()) return Fail("characters after the document");
    if (!events) return Fail("no events array");
    if (!version) return Fail("no data_version");
    return true;
  }

  std::string error() const { return error_ + " (at byte " + std::to_string(pos_) + ")"; }

 private:
  bool Fail(std::string what) {
    if (error_.empty()) error_ = std::move(what);
    return false;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
      ++pos_;
    }
  }
  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  // An object's members after its '{': `member(key)` reads each value.
  template <typename Fn>
  bool Members(Fn&& member) {
    SkipSpace();
    if (Consume('}')) return true;
    while (true) {
      SkipSpace();
      std::string_view key;
      if (Peek() != '"' || !String(&key)) return Fail("expected a member name");
      SkipSpace();
      if (!Consume(':')) return Fail("expected ':'");
      SkipSpace();
      if (!member(key)) return false;
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) return true;
      return Fail("expected ',' or '}'");
    }
  }

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
          if (e->model_name.data() == scratch_.data()) {
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

  // A JSON string at pos_ (which is '"'). Without escapes, a view of the text; with, of a
  // decoded copy that the next String() call replaces.
  bool String(std::string_view* out) {
    if (!Consume('"')) return false;
    const size_t start = pos_;
    while (pos_ < text_.size()) {
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        *out = text_.substr(start, pos_ - start);
        ++pos_;
        return true;
      }
      if (c == '\\') break;
      if (c < 0x20) return Fail("control character in a string");
      ++pos_;
    }
    if (AtEnd()) return Fail("unterminated string");
    scratch_.assign(text_.substr(start, pos_ - start));
    while (true) {
      if (AtEnd()) return Fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(text_[pos_++]);
      if (c == '"') break;
      if (c < 0x20) return Fail("control character in a string");
      if (c != '\\') {
        scratch_.push_back(static_cast<char>(c));
        continue;
      }
      if (AtEnd()) return Fail("unterminated escape");
      const char esc = text_[pos_++];
      switch (esc) {
        case '"': scratch_.push_back('"'); break;
        case '\\': scratch_.push_back('\\'); break;
        case '/': scratch_.push_back('/'); break;
        case 'b': scratch_.push_back('\b'); break;
        case 'f': scratch_.push_back('\f'); break;
        case 'n': scratch_.push_back('\n'); break;
        case 'r': scratch_.push_back('\r'); break;
        case 't': scratch_.push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (text_.substr(pos_, 2) == "\\u") {
              pos_ += 2;
              if (!Hex4(&low)) return false;
            }
            cp = (low >= 0xDC00 && low <= 0xDFFF)
                     ? 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                     : 0xFFFD;
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            cp = 0xFFFD;
          }
          AppendUtf8(cp, &scratch_);
          break;
        }
        default:
          return Fail("bad escape in a string");
      }
    }
    *out = scratch_;
    return true;
  }

  bool Hex4(uint32_t* out) {
    if (text_.size() - pos_ < 4) return Fail("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return Fail("bad \\u escape");
      }
    }
    *out = v;
    return true;
  }

  // The members the shape has as integers: digits only, within 64 bits.
  bool Unsigned(uint64_t* out, const char* what) {
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const uint64_t digit = static_cast<uint64_t>(text_[pos_] - '0');
      if (v > (UINT64_MAX - digit) / 10) return Fail(std::string(what) + " out of range");
      v = v * 10 + digit;
      ++pos_;
    }
    const char next = Peek();
    if (pos_ == start || next == '.' || next == 'e' || next == 'E' ||
        (pos_ - start > 1 && text_[start] == '0')) {
      return Fail(std::string(what) + " is not an unsigned integer");
    }
    *out = v;
    return true;
  }

  bool Signed(int64_t* out, const char* what) {
    const bool negative = Consume('-');
    uint64_t magnitude = 0;
    if (!Unsigned(&magnitude, what)) return false;
    if (magnitude > (negative ? (1ull << 63) : static_cast<uint64_t>(INT64_MAX))) {
      return Fail(std::string(what) + " out of range");
    }
    *out = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    return true;
  }

  // Any JSON value, checked and skipped.
  bool SkipValue(int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    std::string_view s;
    switch (Peek()) {
      case '{':
        ++pos_;
        return Members([&](std::string_view) { return SkipValue(depth + 1); });
      case '[':
        ++pos_;
        SkipSpace();
        if (Consume(']')) return true;
        while (true) {
          SkipSpace();
          if (!SkipValue(depth + 1)) return false;
          SkipSpace();
          if (Consume(',')) continue;
          if (Consume(']')) return true;
          return Fail("expected ',' or ']'");
        }
      case '"':
        return String(&s) || Fail("bad string");
      case 't': return Literal("true");
      case 'f': return Literal("false");
      case 'n': return Literal("null");
      default: return Number();
    }
  }

  bool Literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return Fail("invalid literal");
    pos_ += word.size();
    return true;
  }

  bool Number() {
    Consume('-');
    auto digits = [&] {
      const size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - start;
    };
    const size_t start = pos_;
    const size_t n = digits();
    if (n == 0) return Fail("expected a value");
    if (n > 1 && text_[start] == '0') return Fail("bad number");
    if (Consume('.') && digits() == 0) return Fail("bad number");
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (digits() == 0) return Fail("bad number");
    }
    return true;
  }

  const std::string_view text_;
  SysTraceReadStats* const stats_;
  size_t pos_ = 0;
  std::string error_;
  std::string scratch_;
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
