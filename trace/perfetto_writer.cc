#include "trace/perfetto_writer.h"

#include <libdeflate.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "trace/api_function.h"
#include "trace/async_requests.h"
#include "trace/atomic_file.h"
#include "trace/huge_page_allocator.h"
#include "trace/trace_lanes.h"
#include "google/protobuf/wire_format_lite.h"
#include "proto/perfetto_trace.pb.h"

namespace nrtprof::daemon {
namespace {

using perfetto::protos::TracePacket;
using perfetto::protos::TrackDescriptor;

constexpr uint32_t kMonotonic = perfetto::protos::BUILTIN_CLOCK_MONOTONIC;
constexpr uint32_t kRealtime = perfetto::protos::BUILTIN_CLOCK_REALTIME;
constexpr char kCaptureEventName[] = "nrtprof capture";

// Uncompressed records gathered into one compressed_packets bundle. Perfetto wants each bundle
// packet under 512 KiB; deflate never grows data by more than a few bytes per 16 KiB, so a
// bundle of this much input always fits.
constexpr size_t kBundleBytes = 256 << 10;

// Field numbers, as proto/perfetto_trace.proto declares them (each checked against Perfetto's
// protos); the static_asserts below tie each to the generated code.
constexpr uint32_t kTracePacketField = 1;  // Trace.packet
namespace packet {
constexpr uint32_t kTimestamp = 8;
constexpr uint32_t kTimestampClockId = 58;
constexpr uint32_t kTrackEvent = 11;
constexpr uint32_t kSequenceId = 10;
constexpr uint32_t kInternedData = 12;
constexpr uint32_t kSequenceFlags = 13;
constexpr uint32_t kCompressedPackets = 50;
}  // namespace packet
namespace track_event {
constexpr uint32_t kDebugAnnotations = 4;
constexpr uint32_t kType = 9;
constexpr uint32_t kNameIid = 10;
constexpr uint32_t kTrackUuid = 11;
constexpr uint32_t kCounterValue = 30;
constexpr uint32_t kFlowIds = 47;
constexpr uint32_t kTerminatingFlowIds = 48;
}  // namespace track_event
namespace annotation {  // all under 16: their tags are one byte (AddAnnotations counts on it)
constexpr uint32_t kNameIid = 1;
constexpr uint32_t kUintValue = 3;
constexpr uint32_t kIntValue = 4;
constexpr uint32_t kStringValue = 6;
}  // namespace annotation
namespace interned {
constexpr uint32_t kEventNames = 2;
constexpr uint32_t kAnnotationNames = 3;
constexpr uint32_t kIid = 1;   // EventName.iid, DebugAnnotationName.iid
constexpr uint32_t kName = 2;  // EventName.name, DebugAnnotationName.name
}  // namespace interned

constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;

// Every number above is the one protoc generated from proto/perfetto_trace.proto (and
// protobuf's wire types): a field renumbered there stops the build here rather than writing a
// trace that Perfetto misreads. The hand-written encoder below stays (it is the writer's
// speed); only its numbers are checked.
constexpr bool Same(uint32_t ours, int generated) {
  return generated >= 0 && ours == static_cast<uint32_t>(generated);
}
namespace pb = perfetto::protos;
using google::protobuf::internal::WireFormatLite;
static_assert(Same(kTracePacketField, pb::Trace::kPacketFieldNumber));
static_assert(Same(packet::kTimestamp, TracePacket::kTimestampFieldNumber));
static_assert(Same(packet::kTimestampClockId, TracePacket::kTimestampClockIdFieldNumber));
static_assert(Same(packet::kTrackEvent, TracePacket::kTrackEventFieldNumber));
static_assert(Same(packet::kSequenceId, TracePacket::kTrustedPacketSequenceIdFieldNumber));
static_assert(Same(packet::kInternedData, TracePacket::kInternedDataFieldNumber));
static_assert(Same(packet::kSequenceFlags, TracePacket::kSequenceFlagsFieldNumber));
static_assert(Same(packet::kCompressedPackets, TracePacket::kCompressedPacketsFieldNumber));
static_assert(Same(track_event::kDebugAnnotations, pb::TrackEvent::kDebugAnnotationsFieldNumber));
static_assert(Same(track_event::kType, pb::TrackEvent::kTypeFieldNumber));
static_assert(Same(track_event::kNameIid, pb::TrackEvent::kNameIidFieldNumber));
static_assert(Same(track_event::kTrackUuid, pb::TrackEvent::kTrackUuidFieldNumber));
static_assert(Same(track_event::kCounterValue, pb::TrackEvent::kCounterValueFieldNumber));
static_assert(Same(track_event::kFlowIds, pb::TrackEvent::kFlowIdsFieldNumber));
static_assert(Same(track_event::kTerminatingFlowIds,
                   pb::TrackEvent::kTerminatingFlowIdsFieldNumber));
static_assert(Same(annotation::kNameIid, pb::DebugAnnotation::kNameIidFieldNumber));
static_assert(Same(annotation::kUintValue, pb::DebugAnnotation::kUintValueFieldNumber));
static_assert(Same(annotation::kIntValue, pb::DebugAnnotation::kIntValueFieldNumber));
static_assert(Same(annotation::kStringValue, pb::DebugAnnotation::kStringValueFieldNumber));
static_assert(Same(interned::kEventNames, pb::InternedData::kEventNamesFieldNumber));
static_assert(Same(interned::kAnnotationNames,
                   pb::InternedData::kDebugAnnotationNamesFieldNumber));
static_assert(Same(interned::kIid, pb::EventName::kIidFieldNumber));
static_assert(Same(interned::kIid, pb::DebugAnnotationName::kIidFieldNumber));
static_assert(Same(interned::kName, pb::EventName::kNameFieldNumber));
static_assert(Same(interned::kName, pb::DebugAnnotationName::kNameFieldNumber));
static_assert(Same(kVarint, WireFormatLite::WIRETYPE_VARINT));
static_assert(Same(kFixed64, WireFormatLite::WIRETYPE_FIXED64));
static_assert(Same(kLengthDelimited, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));

// A byte buffer written through a raw pointer: room for a whole field is made once, then its
// bytes are stored without a check each, as protobuf's own encoders do (appending to a
// std::string byte by byte, or field by field, was a good part of the writer's time).
class Bytes {
 public:
  void clear() { size_ = 0; }
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  char* data() { return buf_.data(); }
  absl::string_view view() const { return absl::string_view(buf_.data(), size_); }
  std::string_view std_view() const { return std::string_view(buf_.data(), size_); }
  // At least n bytes writable from the returned pointer, until Commit.
  char* Room(size_t n) {
    if (ABSL_PREDICT_FALSE(size_ + n > buf_.size())) Grow(n);
    return buf_.data() + size_;
  }
  void Commit(const char* end) { size_ = static_cast<size_t>(end - buf_.data()); }

 private:
  // Kept out of line, so that Room's check inlines into every field written.
  ABSL_ATTRIBUTE_NOINLINE void Grow(size_t n) {
    buf_.resize(std::max(buf_.size() * 2, size_ + n));
  }

  std::string buf_;  // its size is the capacity; size_ bytes are in use
  size_t size_ = 0;
};

// The protobuf wire encoding of the fields we write, appended to a Bytes.
constexpr size_t kMaxVarint = 10;

// How many bytes PutVarint writes for v.
constexpr size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}
static_assert(VarintSize(0) == 1 && VarintSize(127) == 1 && VarintSize(128) == 2);
static_assert(VarintSize(~uint64_t{0}) == kMaxVarint);
static_assert(annotation::kNameIid < 16 && annotation::kUintValue < 16 &&
                  annotation::kIntValue < 16 && annotation::kStringValue < 16,
              "AddAnnotations counts one byte for each of their tags");

ABSL_ATTRIBUTE_ALWAYS_INLINE inline char* PutVarint(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline char* PutTag(uint32_t field, uint32_t wire_type, char* p) {
  return PutVarint((uint64_t{field} << 3) | wire_type, p);
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void AppendVarint(uint64_t v, Bytes* out) { out->Commit(PutVarint(v, out->Room(kMaxVarint))); }

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void AppendTag(uint32_t field, uint32_t wire_type, Bytes* out) {
  out->Commit(PutTag(field, wire_type, out->Room(kMaxVarint)));
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void AppendVarintField(uint32_t field, uint64_t v, Bytes* out) {
  char* p = PutTag(field, kVarint, out->Room(2 * kMaxVarint));
  out->Commit(PutVarint(v, p));
}

// `bytes` must not be in *out.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void AppendBytesField(uint32_t field, std::string_view bytes, Bytes* out) {
  char* p = PutTag(field, kLengthDelimited, out->Room(2 * kMaxVarint + bytes.size()));
  p = PutVarint(bytes.size(), p);
  if (!bytes.empty()) memcpy(p, bytes.data(), bytes.size());
  out->Commit(p + bytes.size());
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void AppendFixed64Field(uint32_t field, uint64_t v, Bytes* out) {
  char* p = PutTag(field, kFixed64, out->Room(kMaxVarint + 8));
  for (int i = 0; i < 8; ++i) *p++ = static_cast<char>(v >> (8 * i));
  out->Commit(p);
}

// Copies the bytes of an event or an annotation, nearly always a few dozen: fixed-size moves
// rather than a call of memcpy.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline char* PutShort(std::string_view bytes, char* p) {
  const char* src = bytes.data();
  const size_t n = bytes.size();
  if (n >= 16) {
    if (n > 64) {
      memcpy(p, src, n);
      return p + n;
    }
    for (size_t i = 0; i + 16 < n; i += 16) memcpy(p + i, src + i, 16);
    memcpy(p + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    memcpy(p, src, 8);
    memcpy(p + n - 8, src + n - 8, 8);
  } else if (n >= 4) {
    memcpy(p, src, 4);
    memcpy(p + n - 4, src + n - 4, 4);
  } else {
    for (size_t i = 0; i < n; ++i) p[i] = src[i];
  }
  return p + n;
}

// Bytes kept in memory until their file can take them, in pieces that stay where they are: a
// std::string grown with a capture's lane sequences copied them all again at each doubling.
class HeldBytes {
 public:
  // At least n bytes to write at, after those held; Commit(end) keeps them up to `end`.
  char* Room(size_t n) {
    if (pieces_.empty() || pieces_.back().capacity - pieces_.back().size < n) {
      // Each piece twice the one before, up to kMaxPieceBytes: a small capture's few.
      const size_t size =
          pieces_.empty() ? kFirstPieceBytes
                          : std::min(2 * pieces_.back().capacity, kMaxPieceBytes);
      Piece& piece = pieces_.emplace_back();
      piece.capacity = std::max(size, n);
      piece.data = std::unique_ptr<char, FreePiece>(
          HugePageAllocator<char>().allocate(piece.capacity), FreePiece{piece.capacity});
    }
    Piece& piece = pieces_.back();
    return piece.data.get() + piece.size;
  }
  void Commit(const char* end) {
    Piece& piece = pieces_.back();
    piece.size = static_cast<size_t>(end - piece.data.get());
  }
  void Append(std::string_view bytes) {
    char* p = Room(bytes.size());
    memcpy(p, bytes.data(), bytes.size());
    Commit(p + bytes.size());
  }

  absl::Status WriteTo(AtomicFile* file) const {
    for (const Piece& piece : pieces_) {
      absl::Status s = file->Append(absl::string_view(piece.data.get(), piece.size));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kFirstPieceBytes = 64 << 10;
  static constexpr size_t kMaxPieceBytes = 4 << 20;
  // Pieces of 2 MiB and more are the capture's huge pages (huge_page_allocator.h): those an
  // earlier capture, or an earlier phase of this one, freed, not fresh ones of the heap.
  struct FreePiece {
    size_t capacity;
    void operator()(char* p) const { HugePageAllocator<char>().deallocate(p, capacity); }
  };
  struct Piece {
    std::unique_ptr<char, FreePiece> data;
    size_t size = 0;
    size_t capacity = 0;
  };
  std::vector<Piece> pieces_;
};

// Takes the encoded TracePackets in file order and writes them as `Trace.packet` records,
// deflated in bundles (compressed_packets) unless the level is 0: into the file, or into
// memory (a capture's lane sequences, which are made before the file's first sequence is).
class PacketSink {
 public:
  PacketSink(AtomicFile* file, int deflate_level) : file_(file), level_(deflate_level) {}
  PacketSink(HeldBytes* memory, int deflate_level) : memory_(memory), level_(deflate_level) {}
  ~PacketSink() {
    if (compressor_ != nullptr) libdeflate_free_compressor(compressor_);
  }
  PacketSink(const PacketSink&) = delete;
  PacketSink& operator=(const PacketSink&) = delete;

  absl::Status Add(std::string_view packet_bytes) {
    if (level_ > 0 && packet_bytes.size() > kBundleBytes) {
      // Too big for a bundle (a huge command line): flush what is pending, then write this
      // one as it is, so the order of packets stays the order of the file.
      absl::Status s = Flush();
      record_.clear();
      AppendBytesField(kTracePacketField, packet_bytes, &record_);
      return s.ok() ? Out(record_.std_view()) : s;
    }
    AppendBytesField(kTracePacketField, packet_bytes, &pending_);
    if (pending_.size() >= kBundleBytes) return Flush();
    return absl::OkStatus();
  }

  // Whether a packet of `size` bytes can be placed straight among the pending records (Place,
  // Placed) rather than given whole to Add: all but one too big for a bundle.
  bool CanPlace(size_t size) const { return level_ == 0 || size <= kBundleBytes; }
  // Where the `size` bytes of the next packet go, its record's header written; Placed(end)
  // after them. Add's record, without the packet made elsewhere first and copied. kPlaceSlack
  // bytes more are writable after the packet (for fixed-size moves of its last few bytes).
  static constexpr size_t kPlaceSlack = 32;
  char* Place(size_t size) {
    char* p = pending_.Room(2 * kMaxVarint + size + kPlaceSlack);
    return PutVarint(size, PutTag(kTracePacketField, kLengthDelimited, p));
  }
  absl::Status Placed(const char* end) {
    pending_.Commit(end);
    if (pending_.size() >= kBundleBytes) return Flush();
    return absl::OkStatus();
  }

  // Writes what is pending; after it, the file ends at a record boundary.
  absl::Status Flush() {
    if (pending_.empty()) return absl::OkStatus();
    absl::Status s = level_ > 0 ? WriteBundle() : Out(pending_.std_view());
    pending_.clear();
    return s;
  }

 private:
  // A bundle is one zlib stream (what Perfetto inflates), made in one call by libdeflate: a
  // bundle is whole in memory anyway, and libdeflate's one-shot compressor takes about half
  // zlib's time for the same level and size.
  absl::Status WriteBundle() {
    if (compressor_ == nullptr) {
      compressor_ = libdeflate_alloc_compressor(std::clamp(level_, 1, 12));
      if (compressor_ == nullptr) return absl::ResourceExhaustedError("no memory to deflate");
    }
    const size_t bound = libdeflate_zlib_compress_bound(compressor_, pending_.size());
    if (memory_ != nullptr) {
      // Deflated straight into the held bytes, after room for its record's header as long as
      // the bound's; the bundle moves back (a few bytes) only if its own header is shorter.
      const size_t room = BundleHeader(bound).size();
      char* const p = memory_->Room(room + bound);
      const size_t n =
          libdeflate_zlib_compress(compressor_, pending_.data(), pending_.size(), p + room, bound);
      if (n == 0) return absl::InternalError("deflate failed");
      const std::string_view header = BundleHeader(n);
      if (header.size() != room) memmove(p + header.size(), p + room, n);
      memcpy(p, header.data(), header.size());
      memory_->Commit(p + header.size() + n);
      return absl::OkStatus();
    }
    // Room for the worst case, its bytes not cleared first (never shrunk: resizing a string up
    // again would clear all but the bundle's deflated bytes, most of the room, every time).
    if (deflated_.size() < bound) deflated_.resize(bound);
    const size_t n = libdeflate_zlib_compress(compressor_, pending_.data(), pending_.size(),
                                              deflated_.data(), deflated_.size());
    if (n == 0) return absl::InternalError("deflate failed");
    absl::Status s = Out(BundleHeader(n));
    return s.ok() ? Out(std::string_view(deflated_.data(), n)) : s;
  }

  // Trace.packet { compressed_packets: <n deflated bytes> } up to those bytes (in record_).
  std::string_view BundleHeader(size_t n) {
    Bytes packet_header;
    AppendTag(packet::kCompressedPackets, kLengthDelimited, &packet_header);
    AppendVarint(n, &packet_header);
    record_.clear();
    AppendTag(kTracePacketField, kLengthDelimited, &record_);
    AppendVarint(packet_header.size() + n, &record_);
    char* p = record_.Room(packet_header.size());
    memcpy(p, packet_header.data(), packet_header.size());
    record_.Commit(p + packet_header.size());
    return record_.std_view();
  }

  absl::Status Out(std::string_view bytes) {
    if (file_ != nullptr) return file_->Append(absl::string_view(bytes.data(), bytes.size()));
    memory_->Append(bytes);
    return absl::OkStatus();
  }

  AtomicFile* const file_ = nullptr;
  HeldBytes* const memory_ = nullptr;
  const int level_;
  Bytes pending_;  // records not yet written
  std::string deflated_;
  Bytes record_;
  libdeflate_compressor* compressor_ = nullptr;
};

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string ProcessName(const ProcessTrace& p) {
  if (!p.executable.empty()) return Basename(p.executable);
  if (!p.command_line.empty()) return Basename(p.command_line[0]);
  return "";
}

// A lane's track, in the order the tracks were written.
struct LaneTrack {
  uint64_t uuid = 0;
  const Lane* lane = nullptr;
};

// A counter's track (a queue's requests in flight), in the order the tracks were written.
struct CounterTrack {
  uint64_t uuid = 0;
  const QueueCounter* counter = nullptr;
};

// A process's "nrtprof capture" instant.
struct CaptureInstant {
  uint64_t uuid = 0;  // the process's track
  const ProcessTrace* process = nullptr;
  uint64_t ts = 0;
};

// Writes the file: first one sequence with the clocks, every track and the processes' capture
// instants; then each lane on a sequence of its own, its slices' edges in the lane's order.
// A lane's own order is all that a sequence's delta clock needs, so nothing merges the lanes
// into one time order: each lane and its events are read once, front to back (a merge of all
// of them, as one sequence would need, cost a heap operation and cache misses per edge).
// Perfetto puts the sequences' events in time order when it loads the file.
//
// The capture comes a process at a time (AddProcess), so that a writer needs only one
// process's lanes at once: the process's lane sequences are encoded there and then, into
// memory (deflated), and its tracks are kept as packets of the first sequence. Finish writes
// the first sequence (clocks, tracks, instants) and then the lane sequences after it.
class TraceEncoder {
 public:
  explicit TraceEncoder(int deflate_level)
      : level_(deflate_level), lanes_out_(&lane_bytes_, deflate_level) {}

  // Tracks and lane sequences of one process; `lanes` (and what they point into) need not
  // outlive the call.
  absl::Status AddProcess(const ProcessLanes& lanes) {
    const ProcessTrace& p = *lanes.process;
    // The names' text must stay: the iid tables view it.
    if (name_tables_.empty() || name_tables_.back() != p.names) name_tables_.push_back(p.names);
    lane_tracks_.clear();
    counter_tracks_.clear();
    if (p.continues) {
      // Its counts join the first part's, for the process's instant (written at Finish).
      if (!headers_.empty()) AddToCaptureHeader(p, &headers_.back());
      WritePartTracks(lanes);
    } else {
      headers_.push_back(CaptureHeader(p));
      WriteTracks(lanes, &headers_.back());
    }
    out_ = &lanes_out_;
    absl::Status s;
    for (const LaneTrack& track : lane_tracks_) {
      LaneEdgeCursor edges(track.lane);
      if (s.ok() && !edges.done()) {
        s = BeginSequence(next_lane_sequence_++, edges.edge().ts, /*realtime_offset_ns=*/0);
      }
      SetTrack(track.uuid);
      for (; s.ok() && !edges.done(); edges.Advance()) {
        s = WriteEdge(*track.lane, edges.edge());
      }
    }
    // Each counter on a sequence of its own too, its values in time order.
    for (const CounterTrack& track : counter_tracks_) {
      const std::vector<CounterPoint>& points = track.counter->points;
      if (s.ok()) {
        s = BeginSequence(next_lane_sequence_++, points.front().ts, /*realtime_offset_ns=*/0);
      }
      for (size_t i = 0; s.ok() && i < points.size(); ++i) {
        s = WriteCounterValue(track.uuid, points[i]);
      }
    }
    lane_tracks_.clear();
    counter_tracks_.clear();
    return s;
  }

  // Writes the file: `trace` gives the capture's id and wall clock; `first_ns` is where its
  // timeline starts (TraceLanes::first_ns of the whole capture).
  absl::Status Finish(const Trace& trace, uint64_t first_ns, AtomicFile* file) {
    // A capture a trigger rule took: a global track of its own for the anomaly's instant.
    uint64_t trigger_uuid = 0;
    if (!trace.trigger.rule.empty()) {
      trigger_uuid = next_uuid_++;
      KeepTrack(trigger_uuid, /*parent_uuid=*/0, kTriggerTrackName);
    }
    PacketSink head(file, level_);
    out_ = &head;
    absl::Status s = BeginSequence(PerfettoWriter::kSequenceId, first_ns,
                                   trace.realtime_offset_ns);
    for (const std::string& packet : tracks_) {
      if (s.ok()) s = head.Add(packet);
    }
    for (CaptureInstant& instant : instants_) {
      if (instant.ts == 0) instant.ts = first_ns;
    }
    std::stable_sort(instants_.begin(), instants_.end(),
                     [](const CaptureInstant& a, const CaptureInstant& b) { return a.ts < b.ts; });
    for (const CaptureInstant& instant : instants_) {
      if (s.ok()) s = WriteInstant(trace, instant);
    }
    if (s.ok() && trigger_uuid != 0) s = WriteTriggerInstant(trace, trigger_uuid, first_ns);
    if (s.ok()) s = head.Flush();
    if (s.ok()) s = lanes_out_.Flush();
    if (s.ok()) s = lane_bytes_.WriteTo(file);
    return s;
  }

 private:
  // Sequence id and flags of every packet: the first of a sequence clears its incremental
  // state (interning tables, defaults), every later one depends on it.
  void AddSequenceFields(TracePacket* packet) {
    packet->set_trusted_packet_sequence_id(sequence_);
    if (first_packet_) {
      packet->set_sequence_flags(TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
      packet->set_first_packet_on_sequence(true);
      first_packet_ = false;
    } else {
      packet->set_sequence_flags(TracePacket::SEQ_NEEDS_INCREMENTAL_STATE);
    }
  }

  absl::Status WriteMessage(TracePacket* packet) {
    AddSequenceFields(packet);
    message_.clear();
    packet->AppendToString(&message_);
    return out_->Add(message_);
  }

  // A track of the first sequence, kept for Finish (never its first packet: the clocks are).
  void KeepTrack(TracePacket* packet) {
    packet->set_trusted_packet_sequence_id(PerfettoWriter::kSequenceId);
    packet->set_sequence_flags(TracePacket::SEQ_NEEDS_INCREMENTAL_STATE);
    tracks_.push_back(packet->SerializeAsString());
  }

  // Starts sequence `id` with its first packet: it puts the sequence's timestamps on
  // CLOCK_MONOTONIC (see docs/trace_format.md), ties them to wall-clock time when the offset
  // is known, and declares the sequence's incremental clock, which every later timestamp of
  // the sequence uses. The sequence defines its interned names again as it uses them.
  absl::Status BeginSequence(uint32_t id, uint64_t first_ns, int64_t realtime_offset_ns) {
    sequence_ = id;
    // Every later packet of the sequence ends with its id and flags.
    char* end = PutVarint(id, PutTag(packet::kSequenceId, kVarint, sequence_tail_));
    end = PutVarint(TracePacket::SEQ_NEEDS_INCREMENTAL_STATE,
                    PutTag(packet::kSequenceFlags, kVarint, end));
    sequence_tail_size_ = static_cast<size_t>(end - sequence_tail_);
    first_packet_ = true;
    last_ts_ = first_ns;
    TracePacket packet;
    packet.set_timestamp(first_ns);
    packet.set_timestamp_clock_id(kMonotonic);
    auto* snapshot = packet.mutable_clock_snapshot();
    auto* monotonic = snapshot->add_clocks();
    monotonic->set_clock_id(kMonotonic);
    monotonic->set_timestamp(first_ns);
    const int64_t offset = realtime_offset_ns;
    // Skip an offset that would put the REALTIME reading before the epoch (garbage input).
    if (offset > 0 || (offset < 0 && 0 - static_cast<uint64_t>(offset) < first_ns)) {
      auto* realtime = snapshot->add_clocks();
      realtime->set_clock_id(kRealtime);
      realtime->set_timestamp(first_ns + static_cast<uint64_t>(offset));
    }
    auto* delta = snapshot->add_clocks();
    delta->set_clock_id(PerfettoWriter::kDeltaClockId);
    delta->set_timestamp(first_ns);
    delta->set_is_incremental(true);
    snapshot->set_primary_trace_clock(perfetto::protos::BUILTIN_CLOCK_MONOTONIC);
    packet.mutable_trace_packet_defaults()->set_timestamp_clock_id(PerfettoWriter::kDeltaClockId);
    return WriteMessage(&packet);
  }

  void KeepTrack(uint64_t uuid, uint64_t parent_uuid, const std::string& name,
                 bool counter = false) {
    TracePacket packet;
    TrackDescriptor* track = packet.mutable_track_descriptor();
    track->set_uuid(uuid);
    if (parent_uuid != 0) track->set_parent_uuid(parent_uuid);
    track->set_name(name);
    if (counter) track->mutable_counter();
    KeepTrack(&packet);
  }

  // A host thread's track (by tid) or a NeuronCore's (by nc_idx), of the process given last.
  using ParentKey = std::pair<bool, int64_t>;  // (a core, its id)
  // A lane of the process given last: a thread's (kind, tid) or a core's (kind, nc_idx), a
  // queue's (kind, QueueKey), or a counter's (kInFlightKind, QueueKey).
  using LaneKey = std::pair<LaneKind, int64_t>;
  static int64_t QueueKey(int32_t nc_idx, uint32_t xu) {
    return int64_t{nc_idx} * (int64_t{1} << 32) + xu;
  }
  // Counters are no lane: a kind of their own in the keys, beyond LaneKind's.
  static constexpr LaneKind kInFlightKind = static_cast<LaneKind>(-1);

  // A child track of `parent_uuid` holding `lane`'s slices; skipped when the lane is empty. A
  // lane that a part of its process before had a track for goes on on that track.
  void KeepLane(const Lane& lane, LaneKey key, uint64_t parent_uuid) {
    if (lane.slices.empty()) return;
    auto [it, added] = lane_uuids_.try_emplace(key, next_uuid_);
    if (added) {
      ++next_uuid_;
      KeepTrack(it->second, parent_uuid, LaneName(lane));
    }
    lane_tracks_.push_back({it->second, &lane});
  }

  // A counter track of `parent_uuid` (its core) for `counter`; skipped when it has no value.
  void KeepCounter(const QueueCounter& counter, int32_t nc_idx, uint64_t parent_uuid) {
    if (counter.points.empty()) return;
    auto [it, added] =
        lane_uuids_.try_emplace({kInFlightKind, QueueKey(nc_idx, counter.xu)}, next_uuid_);
    if (added) {
      ++next_uuid_;
      KeepTrack(it->second, parent_uuid, QueueCounterName(counter), /*counter=*/true);
    }
    counter_tracks_.push_back({it->second, &counter});
  }

  // The track of a thread, written the first time the process has it.
  uint64_t ThreadTrack(const ThreadLanes& t, int32_t pid) {
    auto [it, added] = parent_uuids_.try_emplace(ParentKey{false, t.tid}, next_uuid_);
    if (!added) return it->second;
    ++next_uuid_;
    TracePacket packet;
    TrackDescriptor* track = packet.mutable_track_descriptor();
    track->set_uuid(it->second);
    track->set_parent_uuid(process_uuid_);
    auto* thread = track->mutable_thread();
    thread->set_pid(pid);
    thread->set_tid(static_cast<int32_t>(t.tid));
    if (t.name != nullptr) thread->set_thread_name(*t.name);
    KeepTrack(&packet);
    return it->second;
  }

  // The track of a NeuronCore, written the first time the process has it.
  uint64_t CoreTrack(const CoreLanes& c) {
    auto [it, added] = parent_uuids_.try_emplace(ParentKey{true, c.nc_idx}, next_uuid_);
    if (!added) return it->second;
    ++next_uuid_;
    KeepTrack(it->second, process_uuid_, absl::StrCat("NeuronCore ", c.nc_idx));
    return it->second;
  }

  // The threads' and cores' tracks and their lanes'.
  void WriteLaneTracks(const ProcessLanes& lanes) {
    const int32_t pid = static_cast<int32_t>(lanes.process->pid);
    for (const ThreadLanes& t : lanes.threads) {
      const uint64_t thread_uuid = ThreadTrack(t, pid);
      KeepLane(t.framework, {LaneKind::kFramework, t.tid}, thread_uuid);
      KeepLane(t.runtime, {LaneKind::kRuntime, t.tid}, thread_uuid);
    }
    for (const CoreLanes& c : lanes.cores) {
      const uint64_t core_uuid = CoreTrack(c);
      KeepLane(c.executions, {LaneKind::kExecutions, c.nc_idx}, core_uuid);
      KeepLane(c.dma, {LaneKind::kDma, c.nc_idx}, core_uuid);
      for (const Lane& queue : c.queues) {
        KeepLane(queue, {queue.kind, QueueKey(c.nc_idx, queue.xu)}, core_uuid);
      }
      for (const QueueCounter& counter : c.in_flight) KeepCounter(counter, c.nc_idx, core_uuid);
    }
  }

  // A later part of the process given last (ProcessTrace::continues): its lanes go on on the
  // tracks they had; threads, cores and lanes new in it get theirs.
  void WritePartTracks(const ProcessLanes& lanes) { WriteLaneTracks(lanes); }

  void WriteTracks(const ProcessLanes& lanes, const ProcessTrace* header) {
    const ProcessTrace& p = *lanes.process;
    const int32_t pid = static_cast<int32_t>(p.pid);
    parent_uuids_.clear();
    lane_uuids_.clear();
    const uint64_t process_uuid = process_uuid_ = next_uuid_++;
    TracePacket packet;
    TrackDescriptor* track = packet.mutable_track_descriptor();
    track->set_uuid(process_uuid);
    auto* process = track->mutable_process();
    process->set_pid(pid);
    std::string name = ProcessName(p);
    if (!name.empty()) process->set_process_name(name);
    for (const std::string& arg : p.command_line) process->add_cmdline(arg);
    KeepTrack(&packet);
    // 0: the timeline's start, known at Finish.
    instants_.push_back({process_uuid, header, lanes.has_events ? lanes.first_ns : 0});
    WriteLaneTracks(lanes);
  }
  // Whether the current sequence has defined `iid` yet; marks it defined.
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool DefineOnce(uint64_t iid, std::vector<uint32_t>* defined_in) {
    if (ABSL_PREDICT_FALSE(iid >= defined_in->size())) defined_in->resize(iid + 1, 0);
    if ((*defined_in)[iid] == sequence_) return false;
    (*defined_in)[iid] = sequence_;
    return true;
  }

  // A cache in front of a name's iid, by the address of its text: a trace uses a few dozen
  // names, so nearly every lookup is one compare. Two places a key may be (two names that
  // share one place, both used at every slice, would miss at every slice).
  struct IidSlot {
    const void* key = nullptr;
    uint64_t iid = 0;
  };
  static constexpr int kIidSlotBits = 10;
  using IidSlots = std::array<IidSlot, size_t{1} << kIidSlotBits>;
  // Its slot, or else the slot to fill.
  ABSL_ATTRIBUTE_ALWAYS_INLINE static IidSlot& SlotFor(const void* key, IidSlots* slots,
                                                       bool* hit) {
    const uint64_t h = (reinterpret_cast<uintptr_t>(key) >> 3) * 0x9e3779b97f4a7c15ULL;
    IidSlot& first = (*slots)[h >> (64 - kIidSlotBits)];
    *hit = first.key == key;
    if (ABSL_PREDICT_TRUE(*hit)) return first;
    IidSlot& second = (*slots)[(h >> (64 - 2 * kIidSlotBits)) & (slots->size() - 1)];
    *hit = second.key == key;
    if (*hit) return second;
    return first.key == nullptr ? first : second;
  }

  // The iid of an event name, the same in every sequence: looked up by the name's id first (no
  // hashing of text), then by text, so that one text has one iid even from two NameTables (a
  // merged trace's processes). A sequence defines a name in its interned data the first time
  // one of its packets uses it.
  ABSL_ATTRIBUTE_ALWAYS_INLINE uint64_t EventNameIid(Name name) {
    bool hit = false;
    IidSlot& slot = SlotFor(name.id(), &event_name_slots_, &hit);
    if (ABSL_PREDICT_FALSE(!hit)) {
      slot.key = name.id();
      slot.iid = EventNameIidByText(name.view());
    }
    const uint64_t iid = slot.iid;
    if (ABSL_PREDICT_FALSE(DefineOnce(iid, &event_name_defined_))) {
      AddInternedEntry(interned::kEventNames, iid, name.view());
    }
    return iid;
  }
  ABSL_ATTRIBUTE_NOINLINE uint64_t EventNameIidByText(std::string_view text) {
    return event_names_.try_emplace(text, event_names_.size() + 1).first->second;
  }

  ABSL_ATTRIBUTE_ALWAYS_INLINE uint64_t AnnotationNameIid(const char* name) {
    bool hit = false;
    IidSlot& slot = SlotFor(name, &annotation_name_slots_, &hit);
    if (ABSL_PREDICT_FALSE(!hit)) {
      slot.key = name;
      slot.iid = AnnotationNameIidByText(name);
    }
    const uint64_t iid = slot.iid;
    if (ABSL_PREDICT_FALSE(DefineOnce(iid, &annotation_name_defined_))) {
      AddInternedEntry(interned::kAnnotationNames, iid, name);
    }
    return iid;
  }
  ABSL_ATTRIBUTE_NOINLINE uint64_t AnnotationNameIidByText(std::string_view text) {
    return annotation_names_.try_emplace(text, annotation_names_.size() + 1).first->second;
  }

  ABSL_ATTRIBUTE_NOINLINE void AddInternedEntry(uint32_t table, uint64_t iid, std::string_view name) {
    entry_.clear();
    AppendVarintField(interned::kIid, iid, &entry_);
    AppendBytesField(interned::kName, name, &entry_);
    AppendBytesField(table, entry_.std_view(), &interned_);
  }

  // A DebugAnnotation written straight into event_ (its length is known before its bytes, so
  // no scratch message and no copy of it), up to its value: for a number the value, for a text
  // its length; `room` bytes more are writable after it (the text's), until event_.Commit.
  ABSL_ATTRIBUTE_ALWAYS_INLINE char* PutAnnotationHead(const char* name, uint32_t field,
                                                       bool text, uint64_t value, size_t room) {
    const uint64_t iid = AnnotationNameIid(name);
    // Tags of fields 1 to 15 are one byte.
    const size_t length = 1 + VarintSize(iid) + 1 + VarintSize(value) + (text ? value : 0);
    char* p = PutTag(track_event::kDebugAnnotations, kLengthDelimited,
                     event_.Room(4 * kMaxVarint + room));
    p = PutVarint(length, p);
    p = PutVarint(iid, PutTag(annotation::kNameIid, kVarint, p));
    return PutVarint(value, PutTag(field, text ? kLengthDelimited : kVarint, p));
  }
  void UintArg(const char* name, uint64_t value) {
    event_.Commit(PutAnnotationHead(name, annotation::kUintValue, false, value, 0));
  }
  void IntArg(const char* name, int64_t value) {
    event_.Commit(
        PutAnnotationHead(name, annotation::kIntValue, false, static_cast<uint64_t>(value), 0));
  }
  void StringArg(const char* name, std::string_view value) {
    char* p = PutAnnotationHead(name, annotation::kStringValue, true, value.size(), value.size());
    event_.Commit(PutShort(value, p));
  }

  // Each argument of `args`, in order.
  void AddAnnotations(const std::vector<SliceArg>& args) {
    for (const SliceArg& arg : args) {
      switch (arg.type) {
        case SliceArg::Type::kString:
          StringArg(arg.name, arg.string_value);
          break;
        case SliceArg::Type::kUint:
          UintArg(arg.name, arg.uint_value);
          break;
        case SliceArg::Type::kInt:
          IntArg(arg.name, arg.int_value);
          break;
      }
    }
  }

  // The arguments SliceArgs (trace_lanes.cc) gives `slice`, the same in the same order, each
  // written as it is found: no vector of them made, no call stack joined into a string first
  // (a good part of the writer's time per slice). PerfettoWriterTest's
  // EverySlicesArgumentsAreSliceArgs holds the two to one list.
  void AddSliceArgs(const LaneSlice& slice) {
    if (slice.device != nullptr) {
      const DeviceEvent& e = *slice.device;
      AddDeviceArgs(e, slice.call);
      if (slice.end_ns - slice.start_ns != e.duration_ns) {
        UintArg("duration_ns", e.duration_ns);
        if (slice.start_ns > e.start_ns) UintArg("start_moved_ns", slice.start_ns - e.start_ns);
      }
    } else if (slice.call != nullptr) {
      AddCallArgs(*slice.call);
    }
  }

  // SliceArgs' CallArgs.
  void AddCallArgs(const ApiCall& c) {
    IntArg("status", c.status);
    UintArg("correlation_id", c.correlation_id);
    if (c.bytes != 0) UintArg("bytes", c.bytes);
    if (!c.model_name.empty()) StringArg("model", c.model_name);
    if (!c.tensor_name.empty()) StringArg("tensor", c.tensor_name);
    if (c.nc_idx >= 0) IntArg("nc", c.nc_idx);
    if (c.repeat != 0) UintArg("repeat", c.repeat);
    if (c.nrta_seq != 0) {
      UintArg("nrta_seq", c.nrta_seq);
      UintArg("queue", c.nrta_seq >> kNrtaQueueShift);
      UintArg("seq", c.nrta_seq & kNrtaSeqMask);
    }
    if (IsCompletionPoll(c.function)) UintArg("polls", c.polls);
    if (!c.stack.empty()) {  // "f <- caller <- caller's caller"
      constexpr std::string_view kJoin = " <- ";
      size_t n = kJoin.size() * (c.stack.size() - 1);
      for (const std::string& frame : c.stack) n += frame.size();
      char* p = PutAnnotationHead("stack", annotation::kStringValue, true, n, n);
      for (size_t i = 0; i < c.stack.size(); ++i) {
        if (i > 0) p = PutShort(kJoin, p);
        p = PutShort(c.stack[i], p);
      }
      event_.Commit(p);
    }
  }

  // SliceArgs' DeviceArgs.
  void AddDeviceArgs(const DeviceEvent& e, const ApiCall* scheduled_by) {
    const bool child = e.parent != 0;
    const bool dma = e.kind == DeviceEventKind::kDma;
    if (e.kind == DeviceEventKind::kCollective) {
      if (!e.model_name.empty()) StringArg("collective", e.model_name);
      UintArg("bytes", e.bytes);
      IntArg("worker_gid", e.worker_gid);
    } else {
      if (!child && !e.model_name.empty()) StringArg("model", e.model_name);
      if (dma ? e.exec_id != 0 : !child) UintArg("exec_id", e.exec_id);
    }
    if (!e.engine.empty()) StringArg("engine", e.engine);
    if (dma) UintArg("bytes", e.bytes);
    if (!e.tensor_name.empty()) StringArg("tensor", e.tensor_name);
    if (!child && e.correlation_id != 0) UintArg("correlation_id", e.correlation_id);
    if (!child && e.submitting_tid != 0) UintArg("submitting_tid", e.submitting_tid);
    if (!child && e.nrta_seq != 0) {
      UintArg("nrta_seq", e.nrta_seq);
      if (scheduled_by != nullptr &&
          !(e.kind == DeviceEventKind::kCollective && e.name == kCcRunning)) {
        const uint64_t start = scheduled_by->start_ns;
        const uint64_t duration = scheduled_by->duration_ns;
        const uint64_t returned = duration > ~uint64_t{0} - start ? ~uint64_t{0} : start + duration;
        UintArg("queue_wait_ns", e.start_ns > returned ? e.start_ns - returned : 0);
      }
    }
  }

  // The track the lane edges after it are on: the begin of a slice on it, the end of one.
  void SetTrack(uint64_t uuid) {
    track_uuid_ = uuid;
    char* p = PutVarint(perfetto::protos::TrackEvent::TYPE_SLICE_END,
                        PutTag(track_event::kType, kVarint, slice_end_));
    p = PutVarint(uuid, PutTag(track_event::kTrackUuid, kVarint, p));
    slice_end_size_ = static_cast<size_t>(p - slice_end_);
  }

  // One track_event packet: a slice's begin or end on `lane`'s track (SetTrack).
  absl::Status WriteEdge(const Lane& lane, const SliceEdge& e) {
    interned_.clear();
    if (!e.begin) {
      // The innermost open slice of the track ends: nothing else to say.
      return WriteEventPacket(e.ts, std::string_view(slice_end_, slice_end_size_));
    }
    event_.clear();
    const LaneSlice& slice = lane.slices[e.slice];
    AppendVarintField(track_event::kType, perfetto::protos::TrackEvent::TYPE_SLICE_BEGIN,
                      &event_);
    AppendVarintField(track_event::kTrackUuid, track_uuid_, &event_);
    AppendVarintField(track_event::kNameIid, EventNameIid(slice.name), &event_);
    AddSliceArgs(slice);
    for (uint64_t id : slice.flow_ids) AppendFixed64Field(track_event::kFlowIds, id, &event_);
    for (uint64_t id : slice.terminating_flow_ids) {
      AppendFixed64Field(track_event::kTerminatingFlowIds, id, &event_);
    }
    return WriteEventPacket(e.ts);
  }

  // One track_event packet: a counter's value from `point.ts` on.
  absl::Status WriteCounterValue(uint64_t track_uuid, const CounterPoint& point) {
    event_.clear();
    interned_.clear();
    AppendVarintField(track_event::kType, perfetto::protos::TrackEvent::TYPE_COUNTER, &event_);
    AppendVarintField(track_event::kTrackUuid, track_uuid, &event_);
    AppendVarintField(track_event::kCounterValue, static_cast<uint64_t>(point.value), &event_);
    return WriteEventPacket(point.ts);
  }

  // A process's "nrtprof capture" instant, on the file's first sequence.
  absl::Status WriteInstant(const Trace& trace, const CaptureInstant& instant) {
    event_.clear();
    interned_.clear();
    AppendVarintField(track_event::kType, perfetto::protos::TrackEvent::TYPE_INSTANT, &event_);
    AppendVarintField(track_event::kTrackUuid, instant.uuid, &event_);
    AppendVarintField(track_event::kNameIid, EventNameIid(kCaptureEventName), &event_);
    std::vector<SliceArg> args = CaptureArgs(trace, *instant.process);
    if (!trace.trigger.rule.empty()) {  // which rule took it: its instant is on its own track
      SliceArg rule;
      rule.name = "trigger";
      rule.string_value = trace.trigger.rule;
      args.push_back(rule);
    }
    AddAnnotations(args);
    return WriteEventPacket(instant.ts);
  }

  // The instant of the anomaly a trigger rule saw, on the "nrtprof triggers" track: named for
  // the rule, when the anomaly began (the timeline's start if the trace does not say), its
  // arguments why. What a Perfetto user finds beside the slow step or the failed call.
  absl::Status WriteTriggerInstant(const Trace& trace, uint64_t track_uuid, uint64_t first_ns) {
    const TriggerReason& why = trace.trigger;
    event_.clear();
    interned_.clear();
    AppendVarintField(track_event::kType, perfetto::protos::TrackEvent::TYPE_INSTANT, &event_);
    AppendVarintField(track_event::kTrackUuid, track_uuid, &event_);
    // Interned as every other name; its text kept with the encoder, as the iids view it.
    name_tables_.push_back(std::make_shared<NameTable>());
    AppendVarintField(track_event::kNameIid, EventNameIid(name_tables_.back()->Intern(why.rule)),
                      &event_);
    std::vector<SliceArg> args(5);
    args[0].name = "reason";
    args[0].string_value = why.reason;
    args[1].name = "condition";
    args[1].string_value = why.condition;
    args[2].name = "value_ns";
    args[2].type = SliceArg::Type::kUint;
    args[2].uint_value = why.value_ns;
    args[3].name = "threshold_ns";
    args[3].type = SliceArg::Type::kUint;
    args[3].uint_value = why.threshold_ns;
    args[4].name = "capture_id";
    args[4].string_value = trace.capture_id;
    AddAnnotations(args);
    return WriteEventPacket(why.at_ns != 0 ? why.at_ns : first_ns);
  }

  // The packet around event_ (and interned_, if not empty), at `ts`.
  absl::Status WriteEventPacket(uint64_t ts) { return WriteEventPacket(ts, event_.std_view()); }

  // The packet around `event`, put straight among the sink's records.
  absl::Status WriteEventPacket(uint64_t ts, std::string_view event) {
    // Never off the delta clock for a lane, whose edges are in time order; kept exact anyway.
    const bool delta = ts >= last_ts_;
    const uint64_t time = delta ? ts - last_ts_ : ts;
    if (delta) last_ts_ = ts;
    // Tags of the fields below 16 are one byte; timestamp_clock_id's (58) two.
    size_t size = 1 + VarintSize(time) + (delta ? 0 : 2 + VarintSize(kMonotonic)) + 1 +
                  VarintSize(event.size()) + event.size() + sequence_tail_size_;
    if (!interned_.empty()) size += 1 + VarintSize(interned_.size()) + interned_.size();
    if (ABSL_PREDICT_FALSE(!out_->CanPlace(size))) {
      return out_->Add(EventPacket(time, delta, event));
    }
    char* p = PutVarint(time, PutTag(packet::kTimestamp, kVarint, out_->Place(size)));
    if (!delta) p = PutVarint(kMonotonic, PutTag(packet::kTimestampClockId, kVarint, p));
    p = PutVarint(event.size(), PutTag(packet::kTrackEvent, kLengthDelimited, p));
    p = PutShort(event, p);
    if (!interned_.empty()) {
      p = PutVarint(interned_.size(), PutTag(packet::kInternedData, kLengthDelimited, p));
      p = PutShort(interned_.std_view(), p);
    }
    static_assert(sizeof(sequence_tail_) <= PacketSink::kPlaceSlack);
    memcpy(p, sequence_tail_, sizeof(sequence_tail_));  // its bytes, then what the slack takes
    return out_->Placed(p + sequence_tail_size_);
  }

  // The same packet, made whole in packet_ (for one too big to place).
  std::string_view EventPacket(uint64_t time, bool delta, std::string_view event) {
    packet_.clear();
    AppendVarintField(packet::kTimestamp, time, &packet_);
    if (!delta) AppendVarintField(packet::kTimestampClockId, kMonotonic, &packet_);
    AppendBytesField(packet::kTrackEvent, event, &packet_);
    if (!interned_.empty()) {
      AppendBytesField(packet::kInternedData, interned_.std_view(), &packet_);
    }
    char* p = packet_.Room(sizeof(sequence_tail_));
    memcpy(p, sequence_tail_, sequence_tail_size_);
    packet_.Commit(p + sequence_tail_size_);
    return packet_.std_view();
  }

  const int level_;
  // The lane sequences, deflated as they are made; Finish writes them after the first sequence.
  HeldBytes lane_bytes_;
  PacketSink lanes_out_;
  PacketSink* out_ = nullptr;  // where the current sequence's packets go
  uint32_t sequence_ = 0;      // the current sequence's id
  // Its packets' last fields after the first: trusted_packet_sequence_id and sequence_flags.
  char sequence_tail_[2 * (1 + kMaxVarint)] = {};
  size_t sequence_tail_size_ = 0;
  // The lane track being written (SetTrack), and its slice end's TrackEvent.
  uint64_t track_uuid_ = 0;
  char slice_end_[2 * (1 + kMaxVarint)] = {};
  size_t slice_end_size_ = 0;
  uint32_t next_lane_sequence_ = PerfettoWriter::kSequenceId + 1;
  bool first_packet_ = true;  // of the current sequence
  uint64_t next_uuid_ = 1;  // track uuids: unique within the file, small so they encode short
  uint64_t last_ts_ = 0;    // the current sequence's delta clock reading
  std::vector<std::string> tracks_;  // the first sequence's track packets, encoded
  std::deque<ProcessTrace> headers_;  // CaptureHeader of each process, for its instant
  std::vector<std::shared_ptr<NameTable>> name_tables_;
  std::vector<LaneTrack> lane_tracks_;
  std::vector<CounterTrack> counter_tracks_;
  std::vector<CaptureInstant> instants_;
  // The tracks of the process given last, for its later parts: its own, its threads' and
  // cores', its lanes'.
  uint64_t process_uuid_ = 0;
  std::map<ParentKey, uint64_t> parent_uuids_;
  std::map<LaneKey, uint64_t> lane_uuids_;
  // Interned names, one iid per text for the whole file; each sequence defines those it uses.
  // The iids by text (one text has one iid even from two NameTables: a merged trace's
  // processes), each behind its cache by address (Name::id(), a static name's pointer).
  absl::flat_hash_map<std::string_view, uint64_t> event_names_;  // views of the Trace's names
  absl::flat_hash_map<std::string_view, uint64_t> annotation_names_;
  IidSlots event_name_slots_, annotation_name_slots_;
  // By iid, the sequence that last defined it (0: none).
  std::vector<uint32_t> event_name_defined_, annotation_name_defined_;
  // Scratch buffers, reused from packet to packet.
  Bytes event_, interned_, entry_, packet_;
  std::string message_;
};

}  // namespace

namespace {

class PerfettoStream : public LaneStream {
 public:
  PerfettoStream(std::string output_dir, int deflate_level)
      : output_dir_(std::move(output_dir)), encoder_(deflate_level) {}

  absl::Status Add(const Trace&, const TraceLanes& lanes) override {
    for (const ProcessLanes& p : lanes.processes) {
      if (absl::Status s = encoder_.AddProcess(p); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status Finish(const Trace& trace, uint64_t first_ns,
                      std::vector<std::string>* files) override {
    AtomicFile file;
    absl::Status s = file.Open(absl::StrCat(output_dir_, "/", PerfettoWriter::kFileName));
    if (s.ok()) s = encoder_.Finish(trace, first_ns, &file);
    if (s.ok()) s = file.Commit();  // else the temporary file goes with `file`
    if (s.ok()) files->push_back(PerfettoWriter::kFileName);
    return s;
  }

 private:
  const std::string output_dir_;
  TraceEncoder encoder_;
};

}  // namespace

absl::Status PerfettoWriter::WriteLanes(const Trace& trace, const TraceLanes& lanes,
                                        const std::string& output_dir,
                                        std::vector<std::string>* files) {
  PerfettoStream stream(output_dir, options_.deflate_level);
  absl::Status s = stream.Add(trace, lanes);
  return s.ok() ? stream.Finish(trace, lanes.first_ns, files) : s;
}

std::unique_ptr<LaneStream> PerfettoWriter::OpenLaneStream(const std::string& output_dir) {
  return std::make_unique<PerfettoStream>(output_dir, options_.deflate_level);
}

}  // namespace nrtprof::daemon
