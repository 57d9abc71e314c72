#include "daemon/perfetto_writer.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/atomic_file.h"
#include "daemon/trace_lanes.h"
#include "proto/perfetto_trace.pb.h"

namespace nrtprof::daemon {
namespace {

using perfetto::protos::DebugAnnotation;
using perfetto::protos::TracePacket;
using perfetto::protos::TrackDescriptor;
using perfetto::protos::TrackEvent;

constexpr uint32_t kMonotonic = perfetto::protos::BUILTIN_CLOCK_MONOTONIC;
constexpr uint32_t kRealtime = perfetto::protos::BUILTIN_CLOCK_REALTIME;
constexpr char kCaptureEventName[] = "nrtprof capture";

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Appends packets to the file as `Trace.packet` records, all on one sequence, and keeps that
// sequence's interning tables (event names, annotation names).
class PacketStream {
 public:
  explicit PacketStream(AtomicFile* file) : file_(file) {}

  absl::Status Write(TracePacket* packet) {
    packet->set_trusted_packet_sequence_id(PerfettoWriter::kSequenceId);
    if (first_) {
      packet->set_sequence_flags(TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
      packet->set_first_packet_on_sequence(true);
      first_ = false;
    } else {
      packet->set_sequence_flags(TracePacket::SEQ_NEEDS_INCREMENTAL_STATE);
    }
    record_.clear();
    record_.push_back(0x0a);  // Trace field 1 (packet), length-delimited
    AppendVarint(packet->ByteSizeLong(), &record_);
    packet->AppendToString(&record_);
    return file_->Append(record_);
  }

  // The iid of an event name; a name seen for the first time is added to `packet`'s
  // interned data, so its definition travels in the first packet that uses it.
  uint64_t EventNameIid(const std::string& name, TracePacket* packet) {
    auto [it, added] = event_names_.emplace(name, event_names_.size() + 1);
    if (added) {
      auto* entry = packet->mutable_interned_data()->add_event_names();
      entry->set_iid(it->second);
      entry->set_name(name);
    }
    return it->second;
  }

  uint64_t AnnotationNameIid(const char* name, TracePacket* packet) {
    auto [it, added] = annotation_names_.emplace(name, annotation_names_.size() + 1);
    if (added) {
      auto* entry = packet->mutable_interned_data()->add_debug_annotation_names();
      entry->set_iid(it->second);
      entry->set_name(name);
    }
    return it->second;
  }

 private:
  AtomicFile* file_;
  bool first_ = true;
  std::unordered_map<std::string, uint64_t> event_names_;
  std::unordered_map<std::string, uint64_t> annotation_names_;
  std::string record_;
};

void AddAnnotations(const std::vector<SliceArg>& args, PacketStream* stream, TracePacket* packet,
                    TrackEvent* event) {
  for (const SliceArg& arg : args) {
    DebugAnnotation* a = event->add_debug_annotations();
    a->set_name_iid(stream->AnnotationNameIid(arg.name, packet));
    switch (arg.type) {
      case SliceArg::Type::kString:
        a->set_string_value(arg.string_value);
        break;
      case SliceArg::Type::kUint:
        a->set_uint_value(arg.uint_value);
        break;
      case SliceArg::Type::kInt:
        a->set_int_value(arg.int_value);
        break;
    }
  }
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string ProcessName(const ProcessTrace& p) {
  if (!p.executable.empty()) return Basename(p.executable);
  if (!p.command_line.empty()) return Basename(p.command_line[0]);
  return "";
}

// One timestamped packet to write: a slice's begin or end on a track, or a process's
// capture instant.
struct Edge {
  enum Kind : uint8_t { kBegin, kEnd, kCaptureInstant };
  uint64_t ts = 0;
  uint64_t track_uuid = 0;
  Kind kind = kBegin;
  const LaneSlice* slice = nullptr;       // kBegin, kEnd
  const ProcessTrace* process = nullptr;  // kCaptureInstant
};

class TraceEncoder {
 public:
  TraceEncoder(const Trace& trace, AtomicFile* file) : trace_(trace), stream_(file) {}

  absl::Status Encode() {
    TraceLanes lanes = BuildLanes(trace_);
    absl::Status s = WriteClockSnapshot(lanes.first_ns);
    for (const ProcessLanes& p : lanes.processes) {
      if (s.ok()) s = WriteTracks(p, lanes.first_ns);
    }
    // Time order across the whole file; the stable sort keeps each track's begin/end order
    // (LaneEdges) for equal timestamps.
    std::stable_sort(edges_.begin(), edges_.end(),
                     [](const Edge& a, const Edge& b) { return a.ts < b.ts; });
    for (const Edge& e : edges_) {
      if (!s.ok()) break;
      s = WriteEdge(e);
    }
    return s;
  }

 private:
  // The first packet: puts the file's timestamps on CLOCK_MONOTONIC (see docs/trace_format.md)
  // and, when known, ties them to wall-clock time.
  absl::Status WriteClockSnapshot(uint64_t first_ns) {
    TracePacket packet;
    packet.set_timestamp(first_ns);
    packet.set_timestamp_clock_id(kMonotonic);
    auto* snapshot = packet.mutable_clock_snapshot();
    auto* monotonic = snapshot->add_clocks();
    monotonic->set_clock_id(kMonotonic);
    monotonic->set_timestamp(first_ns);
    int64_t offset = trace_.realtime_offset_ns;
    // Skip an offset that would put the REALTIME reading before the epoch (garbage input).
    if (offset > 0 || (offset < 0 && 0 - static_cast<uint64_t>(offset) < first_ns)) {
      auto* realtime = snapshot->add_clocks();
      realtime->set_clock_id(kRealtime);
      realtime->set_timestamp(first_ns + static_cast<uint64_t>(offset));
    }
    snapshot->set_primary_trace_clock(perfetto::protos::BUILTIN_CLOCK_MONOTONIC);
    return stream_.Write(&packet);
  }

  absl::Status WriteTrack(uint64_t uuid, uint64_t parent_uuid, const std::string& name) {
    TracePacket packet;
    TrackDescriptor* track = packet.mutable_track_descriptor();
    track->set_uuid(uuid);
    if (parent_uuid != 0) track->set_parent_uuid(parent_uuid);
    track->set_name(name);
    return stream_.Write(&packet);
  }

  // A child track of `parent_uuid` holding `lane`'s slices; skipped when the lane is empty.
  absl::Status WriteLane(const Lane& lane, uint64_t parent_uuid) {
    if (lane.slices.empty()) return absl::OkStatus();
    uint64_t uuid = next_uuid_++;
    absl::Status s = WriteTrack(uuid, parent_uuid, LaneKindName(lane.kind));
    for (const SliceEdge& e : LaneEdges(lane)) {
      edges_.push_back(
          {e.ts, uuid, e.begin ? Edge::kBegin : Edge::kEnd, &lane.slices[e.slice], nullptr});
    }
    return s;
  }

  absl::Status WriteTracks(const ProcessLanes& lanes, uint64_t trace_first_ns) {
    const ProcessTrace& p = *lanes.process;
    const int32_t pid = static_cast<int32_t>(p.pid);
    uint64_t process_uuid = next_uuid_++;
    TracePacket packet;
    TrackDescriptor* track = packet.mutable_track_descriptor();
    track->set_uuid(process_uuid);
    auto* process = track->mutable_process();
    process->set_pid(pid);
    std::string name = ProcessName(p);
    if (!name.empty()) process->set_process_name(name);
    for (const std::string& arg : p.command_line) process->add_cmdline(arg);
    absl::Status s = stream_.Write(&packet);
    edges_.push_back({lanes.has_events ? lanes.first_ns : trace_first_ns, process_uuid,
                      Edge::kCaptureInstant, nullptr, &p});

    for (const ThreadLanes& t : lanes.threads) {
      uint64_t thread_uuid = next_uuid_++;
      packet.Clear();
      track = packet.mutable_track_descriptor();
      track->set_uuid(thread_uuid);
      track->set_parent_uuid(process_uuid);
      auto* thread = track->mutable_thread();
      thread->set_pid(pid);
      thread->set_tid(static_cast<int32_t>(t.tid));
      if (t.name != nullptr) thread->set_thread_name(*t.name);
      if (s.ok()) s = stream_.Write(&packet);
      if (s.ok()) s = WriteLane(t.framework, thread_uuid);
      if (s.ok()) s = WriteLane(t.runtime, thread_uuid);
    }
    for (const CoreLanes& c : lanes.cores) {
      uint64_t core_uuid = next_uuid_++;
      if (s.ok()) s = WriteTrack(core_uuid, process_uuid, absl::StrCat("NeuronCore ", c.nc_idx));
      if (s.ok()) s = WriteLane(c.executions, core_uuid);
      if (s.ok()) s = WriteLane(c.dma, core_uuid);
    }
    return s;
  }

  absl::Status WriteEdge(const Edge& e) {
    packet_.Clear();
    packet_.set_timestamp(e.ts);
    packet_.set_timestamp_clock_id(kMonotonic);
    TrackEvent* event = packet_.mutable_track_event();
    event->set_track_uuid(e.track_uuid);
    switch (e.kind) {
      case Edge::kBegin:
        event->set_type(TrackEvent::TYPE_SLICE_BEGIN);
        event->set_name_iid(stream_.EventNameIid(*e.slice->name, &packet_));
        AddAnnotations(e.slice->args, &stream_, &packet_, event);
        for (uint64_t id : e.slice->flow_ids) event->add_flow_ids(id);
        for (uint64_t id : e.slice->terminating_flow_ids) event->add_terminating_flow_ids(id);
        break;
      case Edge::kEnd:
        event->set_type(TrackEvent::TYPE_SLICE_END);
        break;
      case Edge::kCaptureInstant:
        event->set_type(TrackEvent::TYPE_INSTANT);
        event->set_name_iid(stream_.EventNameIid(kCaptureEventName, &packet_));
        AddAnnotations(CaptureArgs(trace_, *e.process), &stream_, &packet_, event);
        break;
    }
    return stream_.Write(&packet_);
  }

  const Trace& trace_;
  PacketStream stream_;
  uint64_t next_uuid_ = 1;  // track uuids: unique within the file, small so they encode short
  std::vector<Edge> edges_;
  TracePacket packet_;  // reused: its buffers outlive each Clear()
};

}  // namespace

absl::Status PerfettoWriter::Write(const Trace& trace, const std::string& output_dir,
                                   std::vector<std::string>* files) {
  AtomicFile file;
  absl::Status s = file.Open(absl::StrCat(output_dir, "/", kFileName));
  if (!s.ok()) return s;
  s = TraceEncoder(trace, &file).Encode();
  if (!s.ok()) return s;  // the temporary file goes with `file`
  s = file.Commit();
  if (!s.ok()) return s;
  files->push_back(kFileName);
  return absl::OkStatus();
}

}  // namespace nrtprof::daemon
