#include "client/report_trace.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nrtprof::cli {
namespace {

using perfetto::protos::DebugAnnotation;
using perfetto::protos::TrackDescriptor;
using perfetto::protos::TrackEvent;

std::string AnnotationValue(const DebugAnnotation& a) {
  switch (a.value_case()) {
    case DebugAnnotation::kBoolValue:
      return a.bool_value() ? "true" : "false";
    case DebugAnnotation::kUintValue:
      return absl::StrCat(a.uint_value());
    case DebugAnnotation::kIntValue:
      return absl::StrCat(a.int_value());
    case DebugAnnotation::kDoubleValue:
      return absl::StrCat(a.double_value());
    case DebugAnnotation::kStringValue:
      return a.string_value();
    default:
      return "";
  }
}

// The trace's tracks and interning tables as the packets declare them, and its slices as their
// begin and end events pair up.
class Builder {
 public:
  absl::Status Add(const perfetto::protos::TracePacket& p, uint64_t time_ns) {
    if (p.has_interned_data()) {
      for (const auto& n : p.interned_data().event_names()) event_names_[n.iid()] = n.name();
      for (const auto& n : p.interned_data().debug_annotation_names()) {
        annotation_names_[n.iid()] = n.name();
      }
    }
    if (p.has_clock_snapshot()) {
      for (const auto& c : p.clock_snapshot().clocks()) {
        if (c.clock_id() == perfetto::protos::BUILTIN_CLOCK_REALTIME) {
          out_.realtime_offset_ns =
              static_cast<int64_t>(c.timestamp()) - static_cast<int64_t>(time_ns);
        }
      }
    }
    if (p.has_track_descriptor()) AddTrack(p.track_descriptor());
    if (p.has_track_event()) return AddEvent(p.track_event(), time_ns);
    return absl::OkStatus();
  }

  absl::StatusOr<ReportTrace> Finish() && {
    for (const auto& [uuid, open] : open_) {
      if (!open.empty()) {
        return absl::DataLossError(absl::StrCat("a slice on track ", uuid, " never ends"));
      }
    }
    bool any = false;
    for (ReportLane& lane : out_.lanes) {
      std::stable_sort(
          lane.slices.begin(), lane.slices.end(),
          [](const ReportSlice& a, const ReportSlice& b) { return a.start_ns < b.start_ns; });
      for (const ReportSlice& s : lane.slices) {
        out_.first_ns = any ? std::min(out_.first_ns, s.start_ns) : s.start_ns;
        out_.last_ns = std::max(out_.last_ns, s.start_ns + s.dur_ns);
        any = true;
      }
      out_.slices += lane.slices.size();
    }
    // Lanes in the order a reader looks for them: by process, threads before NeuronCores.
    std::stable_sort(
        out_.lanes.begin(), out_.lanes.end(), [](const ReportLane& a, const ReportLane& b) {
          auto device = [](const ReportLane& l) {
            return l.kind == "executions" || l.kind == "DMA";
          };
          return std::make_pair(a.process, device(a)) < std::make_pair(b.process, device(b));
        });
    return std::move(out_);
  }

 private:
  void AddTrack(const TrackDescriptor& t) {
    tracks_[t.uuid()] = t;
    if (t.has_process()) {
      ReportProcess process;
      process.pid = t.process().pid();
      process.name = t.process().process_name();
      process.cmdline = absl::StrJoin(t.process().cmdline(), " ");
      process_of_track_[t.uuid()] = out_.processes.size();
      out_.processes.push_back(std::move(process));
      return;
    }
    if (!t.has_name() || t.name().rfind("NeuronCore ", 0) == 0) return;  // a core: its lanes follow
    // A counter (an async queue's requests in flight) is no lane of slices: the page has no
    // counters yet, and its values are not slice begins.
    if (t.has_counter()) return;
    // A lane: framework or runtime under a thread, executions or DMA under a NeuronCore.
    auto parent = tracks_.find(t.parent_uuid());
    if (parent == tracks_.end()) return;
    const TrackDescriptor& owner = parent->second;
    std::string owner_label;
    if (owner.has_thread()) {
      owner_label = absl::StrCat("tid ", owner.thread().tid());
      if (!owner.thread().thread_name().empty()) {
        absl::StrAppend(&owner_label, " ", owner.thread().thread_name());
      }
    } else {
      owner_label = owner.name();
    }
    auto process = process_of_track_.find(owner.parent_uuid());
    if (process == process_of_track_.end()) return;
    lane_of_track_[t.uuid()] = out_.lanes.size();
    out_.lanes.push_back({process->second, t.name(), owner_label, {}});
  }

  uint32_t NameIndex(const std::string& name) {
    auto [it, added] = name_index_.try_emplace(name, static_cast<uint32_t>(out_.names.size()));
    if (added) out_.names.push_back(name);
    return it->second;
  }

  std::string Name(const TrackEvent& e) const {
    if (e.has_name()) return e.name();
    auto it = event_names_.find(e.name_iid());
    return it == event_names_.end() ? std::string("?") : it->second;
  }

  std::vector<std::pair<std::string, std::string>> Annotations(const TrackEvent& e) const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const DebugAnnotation& a : e.debug_annotations()) {
      std::string name = a.name();
      if (a.has_name_iid()) {
        auto it = annotation_names_.find(a.name_iid());
        name = it == annotation_names_.end() ? "?" : it->second;
      }
      out.emplace_back(std::move(name), AnnotationValue(a));
    }
    return out;
  }

  absl::Status AddEvent(const TrackEvent& e, uint64_t time_ns) {
    if (e.type() == TrackEvent::TYPE_INSTANT) {
      auto process = process_of_track_.find(e.track_uuid());
      if (process != process_of_track_.end() && Name(e) == "nrtprof capture") {
        out_.processes[process->second].metadata = Annotations(e);
      }
      return absl::OkStatus();
    }
    auto lane = lane_of_track_.find(e.track_uuid());
    if (lane == lane_of_track_.end()) return absl::OkStatus();  // not a lane we draw
    std::vector<size_t>& open = open_[e.track_uuid()];
    std::vector<ReportSlice>& slices = out_.lanes[lane->second].slices;
    if (e.type() == TrackEvent::TYPE_SLICE_END) {
      if (open.empty()) {
        return absl::DataLossError(
            absl::StrCat("a slice ends on track ", e.track_uuid(), " where none began"));
      }
      ReportSlice& s = slices[open.back()];
      s.dur_ns = time_ns >= s.start_ns ? time_ns - s.start_ns : 0;
      open.pop_back();
      return absl::OkStatus();
    }
    ReportSlice s;
    s.start_ns = time_ns;
    s.name = NameIndex(Name(e));
    s.depth = static_cast<uint32_t>(open.size());
    std::vector<std::string> args;
    for (const auto& [k, v] : Annotations(e)) args.push_back(absl::StrCat(k, "=", v));
    s.args = absl::StrJoin(args, ", ");
    s.flows.assign(e.flow_ids().begin(), e.flow_ids().end());
    s.flows.insert(s.flows.end(), e.terminating_flow_ids().begin(), e.terminating_flow_ids().end());
    open.push_back(slices.size());
    slices.push_back(std::move(s));
    return absl::OkStatus();
  }

  ReportTrace out_;
  std::map<uint64_t, TrackDescriptor> tracks_;
  std::map<uint64_t, size_t> process_of_track_;
  std::map<uint64_t, size_t> lane_of_track_;
  std::map<uint64_t, std::vector<size_t>> open_;  // per track, the slices begun and not ended
  std::unordered_map<uint64_t, std::string> event_names_, annotation_names_;
  std::unordered_map<std::string, uint32_t> name_index_;
};

}  // namespace

std::string ReportProcess::Metadata(const std::string& key) const {
  for (const auto& [k, v] : metadata) {
    if (k == key) return v;
  }
  return "";
}

absl::StatusOr<ReportTrace> ReadReportTrace(const daemon::ReadTrace& read) {
  Builder builder;
  for (int i = 0; i < read.trace.packet_size(); ++i) {
    if (absl::Status st = builder.Add(read.trace.packet(i), read.times[i]); !st.ok()) return st;
  }
  return std::move(builder).Finish();
}

}  // namespace nrtprof::cli
