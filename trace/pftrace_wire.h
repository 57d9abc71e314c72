// The fields of a trace.pftrace's TracePackets and TrackEvents read straight from their bytes,
// with no message made, as protobuf's parser would take them (proto/perfetto_trace.proto):
// for perfetto_trace_reader.h and trace_from_pftrace.h, which read millions of packets.
//
// What protobuf does is done: a field on a wire type other than its own is an unknown field,
// skipped (groups too); the last value of a scalar field wins; a message field given twice is
// the two merged; a closed enum's unknown value is skipped. What protobuf refuses is refused:
// a varint or tag too long, a length past the end, field number 0, an unmatched end of group.
// Sub-messages that are rare (clock snapshots, track descriptors, interned names) are left as
// bytes for protobuf's own parser. Header only; nothing allocated but by that parser.
#ifndef NRTPROF_TRACE_PFTRACE_WIRE_H_
#define NRTPROF_TRACE_PFTRACE_WIRE_H_

#include <cstdint>
#include <cstring>

#include <string_view>
#include "common/wire_reader.h"
#include "proto/perfetto_trace.pb.h"

namespace nrtprof::daemon::pftrace {

namespace pb = perfetto::protos;

// protobuf's own limit on nesting (messages and groups).
inline constexpr int kMaxDepth = 100;

// Skips the field whose tag was just read, a group with all it holds. False for what protobuf
// would refuse.
inline bool SkipField(WireReader* r, uint32_t field, uint32_t type, int depth = 0) {
  if (type != kStartGroup) return r->Skip(type);
  if (depth >= kMaxDepth) return false;
  for (;;) {
    uint32_t f = 0, t = 0;
    if (!r->RawTag(&f, &t)) return false;
    if (t == kEndGroup) return f == field;
    if (!SkipField(r, f, t, depth + 1)) return false;
  }
}

// The next field of a message: false at its end (`*ok` true) or on bytes protobuf refuses
// (`*ok` false). Wire types 6 and 7 and an end of group no group opened are refused.
inline bool NextField(WireReader* r, uint32_t* field, uint32_t* type, bool* ok) {
  if (r->done()) {
    *ok = true;
    return false;
  }
  if (!r->RawTag(field, type) || *type == kEndGroup || *type > kFixed32) {
    *ok = false;
    return false;
  }
  return true;
}

// A sub-message field seen `count` times in its message, the first at `first`: once is the
// rule, and for more the message is walked again for them all (ForEachOccurrence).
struct Occurrences {
  std::string_view first;
  uint32_t count = 0;
  void Add(const char* b, const char* e) {
    if (count++ == 0) first = std::string_view(b, static_cast<size_t>(e - b));
  }
  bool present() const { return count != 0; }
};

// Calls fn(bytes) for each length-delimited `field` of `message`, in order. The message's
// framing must already be known good.
template <typename Fn>
void ForEachOccurrence(std::string_view message, uint32_t field, Fn fn) {
  WireReader r(message.data(), message.data() + message.size());
  uint32_t f = 0, t = 0;
  bool ok = true;
  while (NextField(&r, &f, &t, &ok)) {
    if (f == field && t == kLengthDelimited) {
      const char* b = nullptr;
      const char* e = nullptr;
      r.Bytes(&b, &e);
      fn(std::string_view(b, static_cast<size_t>(e - b)));
    } else {
      SkipField(&r, f, t);
    }
  }
}

// Parses every occurrence of a sub-message field into `message`, merged as protobuf merges
// them. False if one is not such a message.
template <typename Message>
bool ParseOccurrences(std::string_view whole, uint32_t field, const Occurrences& o,
                      Message* message) {
  if (o.count == 1) {
    return message->ParseFromArray(o.first.data(), static_cast<int>(o.first.size()));
  }
  message->Clear();
  bool ok = true;
  ForEachOccurrence(whole, field, [&](std::string_view bytes) {
    ok = ok && message->MergeFromString(std::string(bytes));
  });
  return ok;
}

// The fields of a TracePacket that the readers use.
struct PacketFields {
  bool has_timestamp = false;
  uint64_t timestamp = 0;
  bool has_timestamp_clock_id = false;
  uint32_t timestamp_clock_id = 0;
  uint32_t sequence_id = 0;  // trusted_packet_sequence_id
  uint32_t sequence_flags = 0;
  bool has_compressed_packets = false;
  std::string_view compressed_packets;  // the last given, as for any bytes field
  Occurrences clock_snapshot;
  Occurrences trace_packet_defaults;
  Occurrences track_event;
  Occurrences track_descriptor;
  Occurrences interned_data;
};

// False for bytes that are no TracePacket's framing.
inline bool ReadPacketFields(std::string_view bytes, PacketFields* out) {
  *out = PacketFields();
  WireReader r(bytes.data(), bytes.data() + bytes.size());
  uint32_t field = 0, type = 0;
  bool ok = true;
  while (NextField(&r, &field, &type, &ok)) {
    uint64_t v = 0;
    const char* b = nullptr;
    const char* e = nullptr;
    if (type == kVarint) {
      if (!r.Varint(&v)) return false;
      switch (field) {
        case pb::TracePacket::kTimestampFieldNumber:
          out->has_timestamp = true;
          out->timestamp = v;
          break;
        case pb::TracePacket::kTimestampClockIdFieldNumber:
          out->has_timestamp_clock_id = true;
          out->timestamp_clock_id = static_cast<uint32_t>(v);
          break;
        case pb::TracePacket::kTrustedPacketSequenceIdFieldNumber:
          out->sequence_id = static_cast<uint32_t>(v);
          break;
        case pb::TracePacket::kSequenceFlagsFieldNumber:
          out->sequence_flags = static_cast<uint32_t>(v);
          break;
        default:
          break;
      }
      continue;
    }
    if (type != kLengthDelimited) {
      if (!SkipField(&r, field, type)) return false;
      continue;
    }
    if (!r.Bytes(&b, &e)) return false;
    switch (field) {
      case pb::TracePacket::kTrackEventFieldNumber:
        out->track_event.Add(b, e);
        break;
      case pb::TracePacket::kInternedDataFieldNumber:
        out->interned_data.Add(b, e);
        break;
      case pb::TracePacket::kTrackDescriptorFieldNumber:
        out->track_descriptor.Add(b, e);
        break;
      case pb::TracePacket::kClockSnapshotFieldNumber:
        out->clock_snapshot.Add(b, e);
        break;
      case pb::TracePacket::kTracePacketDefaultsFieldNumber:
        out->trace_packet_defaults.Add(b, e);
        break;
      case pb::TracePacket::kCompressedPacketsFieldNumber:
        out->has_compressed_packets = true;
        out->compressed_packets = std::string_view(b, static_cast<size_t>(e - b));
        break;
      default:
        break;
    }
  }
  return ok;
}

// One DebugAnnotation, its name and value as their oneofs last set them.
struct Annotation {
  enum NameCase : uint8_t { kNoName, kNameIid, kName };
  enum ValueCase : uint8_t { kNoValue, kBool, kUint, kInt, kDouble, kString };
  NameCase name_case = kNoName;
  ValueCase value_case = kNoValue;
  uint64_t name_iid = 0;
  std::string_view name;
  uint64_t value = 0;  // kBool, kUint, kInt (two's complement), kDouble (its bits)
  std::string_view string_value;

  uint64_t uint_value() const { return value_case == kUint ? value : 0; }
  int64_t int_value() const { return value_case == kInt ? static_cast<int64_t>(value) : 0; }
  std::string_view str() const {
    return value_case == kString ? string_value : std::string_view();
  }
};

inline bool ReadAnnotation(std::string_view bytes, Annotation* a) {
  WireReader r(bytes.data(), bytes.data() + bytes.size());
  uint32_t field = 0, type = 0;
  bool ok = true;
  while (NextField(&r, &field, &type, &ok)) {
    uint64_t v = 0;
    const char* b = nullptr;
    const char* e = nullptr;
    using D = pb::DebugAnnotation;
    if (type == kVarint) {
      if (!r.Varint(&v)) return false;
      switch (field) {
        case D::kNameIidFieldNumber:
          a->name_case = Annotation::kNameIid;
          a->name_iid = v;
          break;
        case D::kBoolValueFieldNumber:
          a->value_case = Annotation::kBool;
          a->value = v != 0;
          break;
        case D::kUintValueFieldNumber:
          a->value_case = Annotation::kUint;
          a->value = v;
          break;
        case D::kIntValueFieldNumber:
          a->value_case = Annotation::kInt;
          a->value = v;
          break;
        default:
          break;
      }
    } else if (type == kLengthDelimited) {
      if (!r.Bytes(&b, &e)) return false;
      const std::string_view s(b, static_cast<size_t>(e - b));
      if (field == D::kNameFieldNumber) {
        a->name_case = Annotation::kName;
        a->name = s;
      } else if (field == D::kStringValueFieldNumber) {
        a->value_case = Annotation::kString;
        a->string_value = s;
      }
    } else if (type == kFixed64 && field == D::kDoubleValueFieldNumber) {
      const char* at = r.at();
      if (!r.Skip(kFixed64)) return false;
      a->value_case = Annotation::kDouble;
      memcpy(&a->value, at, 8);
    } else if (!SkipField(&r, field, type)) {
      return false;
    }
  }
  return ok;
}

// A TrackEvent's fields, as merged from each occurrence read into it. `Annotations`: a vector
// of Annotation (cleared by the caller, reused).
struct EventFields {
  enum NameCase : uint8_t { kNoName, kNameIid, kName };
  uint32_t type = 0;  // TrackEvent.Type; 0 unspecified
  uint64_t track_uuid = 0;
  NameCase name_case = kNoName;
  uint64_t name_iid = 0;
  std::string_view name;
  int64_t counter_value = 0;
};

// Reads one TrackEvent occurrence into `e`, its annotations appended to `annotations` (null:
// only framed, not read).
template <typename Annotations>
bool ReadEventFields(std::string_view bytes, EventFields* e, Annotations* annotations) {
  WireReader r(bytes.data(), bytes.data() + bytes.size());
  uint32_t field = 0, type = 0;
  bool ok = true;
  using T = pb::TrackEvent;
  while (NextField(&r, &field, &type, &ok)) {
    uint64_t v = 0;
    const char* b = nullptr;
    const char* end = nullptr;
    if (type == kVarint) {
      if (!r.Varint(&v)) return false;
      switch (field) {
        case T::kTypeFieldNumber:
          if (T::Type_IsValid(static_cast<int>(v))) e->type = static_cast<uint32_t>(v);
          break;
        case T::kTrackUuidFieldNumber:
          e->track_uuid = v;
          break;
        case T::kNameIidFieldNumber:
          e->name_case = EventFields::kNameIid;
          e->name_iid = v;
          break;
        case T::kCounterValueFieldNumber:
          e->counter_value = static_cast<int64_t>(v);
          break;
        default:
          break;
      }
    } else if (type == kLengthDelimited) {
      if (!r.Bytes(&b, &end)) return false;
      const std::string_view s(b, static_cast<size_t>(end - b));
      switch (field) {
        case T::kNameFieldNumber:
          e->name_case = EventFields::kName;
          e->name = s;
          break;
        case T::kDebugAnnotationsFieldNumber:
          if (annotations != nullptr) {
            annotations->emplace_back();
            if (!ReadAnnotation(s, &annotations->back())) return false;
          }
          break;
        case T::kFlowIdsFieldNumber:
        case T::kTerminatingFlowIdsFieldNumber:
          if (s.size() % 8 != 0) return false;  // packed fixed64
          break;
        default:
          break;
      }
    } else if (!SkipField(&r, field, type)) {
      return false;
    }
  }
  return ok;
}

}  // namespace nrtprof::daemon::pftrace

#endif  // NRTPROF_TRACE_PFTRACE_WIRE_H_
