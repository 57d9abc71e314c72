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
#include "absl/base/attributes.h"
#include "common/wire_reader.h"
#include "proto/perfetto_trace.pb.h"

namespace nrtprof::daemon::pftrace {

namespace pb = perfetto::protos;

// protobuf's own limit on nesting (messages and groups).
inline constexpr int kMaxDepth = 100;

// Skips the group whose start tag was just read, with all it holds (groups within it to
// kMaxDepth). Out of line: groups are rare, and the readers' loops below, which call it, keep
// their registers for the common fields.
ABSL_ATTRIBUTE_NOINLINE inline bool SkipGroup(WireReader* r, uint32_t field, int depth) {
  if (depth >= kMaxDepth) return false;
  for (;;) {
    uint32_t f = 0, t = 0;
    if (!r->RawTag(&f, &t)) return false;
    if (t == kEndGroup) return f == field;
    if (t == kStartGroup ? !SkipGroup(r, f, depth + 1) : !r->Skip(t)) return false;
  }
}

// Skips the field whose tag was just read, a group with all it holds. False for what protobuf
// would refuse.
inline bool SkipField(WireReader* r, uint32_t field, uint32_t type) {
  return type == kStartGroup ? SkipGroup(r, field, 0) : r->Skip(type);
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

// Walks the fields of one message's bytes, calling on_varint(field, value) for each varint,
// on_bytes(field, std::string_view) for each length-delimited field (false from it: the
// message is refused) and on_fixed64(field, const char* its 8 bytes) for each fixed64;
// fixed32 fields and groups are skipped. False for bytes protobuf refuses. Always inlined, so
// that each reader below is one loop of its own, as when each was written out by hand: the
// export reads millions of packets, and out of line (GCC's choice at -O2) the export ran ~5%
// more instructions.
template <typename OnVarint, typename OnBytes, typename OnFixed64>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool ForEachField(std::string_view bytes, OnVarint&& on_varint,
                                                      OnBytes&& on_bytes, OnFixed64&& on_fixed64) {
  WireReader r(bytes.data(), bytes.data() + bytes.size());
  uint32_t field = 0, type = 0;
  bool ok = true;
  while (NextField(&r, &field, &type, &ok)) {
    if (type == kVarint) {
      uint64_t v = 0;
      if (!r.Varint(&v)) return false;
      on_varint(field, v);
    } else if (type == kLengthDelimited) {
      const char* b = nullptr;
      const char* e = nullptr;
      if (!r.Bytes(&b, &e)) return false;
      if (!on_bytes(field, std::string_view(b, static_cast<size_t>(e - b)))) return false;
    } else if (type == kFixed64) {
      const char* at = r.at();
      if (!r.Skip(kFixed64)) return false;
      on_fixed64(field, at);
    } else if (!SkipField(&r, field, type)) {
      return false;
    }
  }
  return ok;
}

// The same, fixed64 fields skipped.
template <typename OnVarint, typename OnBytes>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool ForEachField(std::string_view bytes, OnVarint&& on_varint,
                                                      OnBytes&& on_bytes) {
  return ForEachField(bytes, on_varint, on_bytes, [](uint32_t, const char*) {});
}

// A sub-message field seen `count` times in its message, the first at `first`: once is the
// rule, and for more the message is walked again for them all (ForEachOccurrence).
struct Occurrences {
  std::string_view first;
  uint32_t count = 0;
  void Add(std::string_view bytes) {
    if (count++ == 0) first = bytes;
  }
  bool present() const { return count != 0; }
};

// Calls fn(bytes) for each length-delimited `field` of `message`, in order. The message's
// framing must already be known good.
template <typename Fn>
void ForEachOccurrence(std::string_view message, uint32_t field, Fn fn) {
  ForEachField(
      message, [](uint32_t, uint64_t) {},
      [&](uint32_t f, std::string_view bytes) {
        if (f == field) fn(bytes);
        return true;
      });
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
  using P = pb::TracePacket;
  return ForEachField(
      bytes,
      [out](uint32_t field, uint64_t v) {
        switch (field) {
          case P::kTimestampFieldNumber:
            out->has_timestamp = true;
            out->timestamp = v;
            break;
          case P::kTimestampClockIdFieldNumber:
            out->has_timestamp_clock_id = true;
            out->timestamp_clock_id = static_cast<uint32_t>(v);
            break;
          case P::kTrustedPacketSequenceIdFieldNumber:
            out->sequence_id = static_cast<uint32_t>(v);
            break;
          case P::kSequenceFlagsFieldNumber:
            out->sequence_flags = static_cast<uint32_t>(v);
            break;
          default:
            break;
        }
      },
      [out](uint32_t field, std::string_view s) {
        switch (field) {
          case P::kTrackEventFieldNumber:
            out->track_event.Add(s);
            break;
          case P::kInternedDataFieldNumber:
            out->interned_data.Add(s);
            break;
          case P::kTrackDescriptorFieldNumber:
            out->track_descriptor.Add(s);
            break;
          case P::kClockSnapshotFieldNumber:
            out->clock_snapshot.Add(s);
            break;
          case P::kTracePacketDefaultsFieldNumber:
            out->trace_packet_defaults.Add(s);
            break;
          case P::kCompressedPacketsFieldNumber:
            out->has_compressed_packets = true;
            out->compressed_packets = s;
            break;
          default:
            break;
        }
        return true;
      });
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
  using D = pb::DebugAnnotation;
  return ForEachField(
      bytes,
      [a](uint32_t field, uint64_t v) {
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
      },
      [a](uint32_t field, std::string_view s) {
        if (field == D::kNameFieldNumber) {
          a->name_case = Annotation::kName;
          a->name = s;
        } else if (field == D::kStringValueFieldNumber) {
          a->value_case = Annotation::kString;
          a->string_value = s;
        }
        return true;
      },
      [a](uint32_t field, const char* at) {
        if (field != D::kDoubleValueFieldNumber) return;
        a->value_case = Annotation::kDouble;
        memcpy(&a->value, at, 8);
      });
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
  using T = pb::TrackEvent;
  return ForEachField(
      bytes,
      [e](uint32_t field, uint64_t v) {
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
      },
      [e, annotations](uint32_t field, std::string_view s) {
        switch (field) {
          case T::kNameFieldNumber:
            e->name_case = EventFields::kName;
            e->name = s;
            return true;
          case T::kDebugAnnotationsFieldNumber:
            if (annotations == nullptr) return true;
            annotations->emplace_back();
            return ReadAnnotation(s, &annotations->back());
          case T::kFlowIdsFieldNumber:
          case T::kTerminatingFlowIdsFieldNumber:
            return s.size() % 8 == 0;  // packed fixed64
          default:
            return true;
        }
      });
}

}  // namespace nrtprof::daemon::pftrace

#endif  // NRTPROF_TRACE_PFTRACE_WIRE_H_
