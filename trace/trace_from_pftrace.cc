#include "trace/trace_from_pftrace.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "trace/call_ranges.h"
#include "trace/api_function.h"
#include "trace/trace_lanes.h"

namespace nrtprof::daemon {
namespace {

namespace pb = perfetto::protos;

enum class TrackKind {
  kProcess, kThread, kFramework, kRuntime, kCore, kExecutions, kDma, kCollectives, kOther
};

struct Track {
  TrackKind kind = TrackKind::kOther;
  size_t process = 0;  // index into Trace::processes (all but kOther)
  uint32_t tid = 0;    // threads and their lanes
  int32_t nc_idx = 0;  // cores and their lanes
  std::vector<size_t> open;  // slices begun and not ended: indices into the lane's vector
};

// One slice's arguments, by name.
struct Args {
  std::map<std::string, const pb::DebugAnnotation*> by_name;
  uint64_t Uint(const char* name) const {
    auto it = by_name.find(name);
    if (it == by_name.end()) return 0;
    return it->second->has_uint_value() ? it->second->uint_value()
                                        : static_cast<uint64_t>(it->second->int_value());
  }
  int64_t Int(const char* name, int64_t absent) const {
    auto it = by_name.find(name);
    if (it == by_name.end()) return absent;
    return it->second->has_int_value() ? it->second->int_value()
                                       : static_cast<int64_t>(it->second->uint_value());
  }
  std::string Str(const char* name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? std::string() : it->second->string_value();
  }
  bool Has(const char* name) const { return by_name.count(name) != 0; }
};

class Rebuilder {
 public:
  explicit Rebuilder(const ReadTrace& read) : read_(read) {}

  absl::StatusOr<Trace> Run() {
    const auto& packets = read_.trace.packet();
    // The tracks first, as Perfetto's trace processor takes them: a descriptor may name a
    // parent that the file describes after it (nrtprof's own writer puts parents first, but
    // the rule is only that the parent is in the file).
    std::vector<uint64_t> order;  // uuids, as first described
    for (const pb::TracePacket& p : packets) {
      if (!p.has_track_descriptor()) continue;
      // A track described again (Perfetto's producers repeat their descriptors) is the same.
      if (descriptors_.emplace(p.track_descriptor().uuid(), &p.track_descriptor()).second) {
        order.push_back(p.track_descriptor().uuid());
      }
    }
    // Processes in the file's order, so that a thread without a parent finds its own by pid.
    for (uint64_t uuid : order) {
      if (descriptors_.at(uuid)->has_process()) AddProcess(*descriptors_.at(uuid));
    }
    for (uint64_t uuid : order) {
      if (absl::Status s = AddTrack(uuid); !s.ok()) return s;
    }
    for (int i = 0; i < packets.size(); ++i) {
      const pb::TracePacket& p = packets[i];
      for (const pb::EventName& n : p.interned_data().event_names()) names_[n.iid()] = n.name();
      for (const pb::DebugAnnotationName& n : p.interned_data().debug_annotation_names()) {
        arg_names_[n.iid()] = n.name();
      }
      if (p.has_clock_snapshot()) ReadClocks(p.clock_snapshot());
      if (p.has_track_event()) {
        if (absl::Status s = AddEvent(p.track_event(), read_.times[i]); !s.ok()) return s;
      }
    }
    for (const auto& [uuid, track] : tracks_) {
      if (!track.open.empty()) {
        return absl::DataLossError(absl::StrCat("track ", uuid, " ends with ", track.open.size(),
                                                " slice(s) never closed"));
      }
    }
    for (size_t i = 0; i < trace_.processes.size(); ++i) Finish(i);
    return std::move(trace_);
  }

 private:
  // CLOCK_REALTIME - CLOCK_MONOTONIC, when the snapshot has both (the writer's REALTIME
  // reading is there only when the capture knew it).
  void ReadClocks(const pb::ClockSnapshot& snapshot) {
    constexpr uint32_t kRealtime = 1, kMonotonic = 3;
    uint64_t realtime = 0, monotonic = 0;
    for (const pb::ClockSnapshot::Clock& c : snapshot.clocks()) {
      if (c.clock_id() == kRealtime) realtime = c.timestamp();
      if (c.clock_id() == kMonotonic) monotonic = c.timestamp();
    }
    if (realtime != 0 && monotonic != 0) {
      trace_.realtime_offset_ns = static_cast<int64_t>(realtime - monotonic);
    }
  }

  void AddProcess(const pb::TrackDescriptor& d) {
    Track t;
    t.kind = TrackKind::kProcess;
    t.process = trace_.processes.size();
    ProcessTrace& p = trace_.processes.emplace_back();
    p.pid = static_cast<uint32_t>(d.process().pid());
    p.command_line.assign(d.process().cmdline().begin(), d.process().cmdline().end());
    p.executable = d.process().process_name();
    tracks_[d.uuid()] = std::move(t);
  }

  // The track `uuid` (and its ancestors first) as what it holds: a thread of a process, one of
  // its lanes, a NeuronCore... Perfetto's rules: a track without parent_uuid is a root track
  // (a process, a thread known by its pid, or a global track such as the merged trace's host
  // tracks, kOther), and a parent_uuid must name a track that the file describes.
  absl::Status AddTrack(uint64_t uuid) {
    if (tracks_.count(uuid) != 0) return absl::OkStatus();
    const pb::TrackDescriptor& d = *descriptors_.at(uuid);
    Track t;
    if (!d.has_parent_uuid()) {
      if (d.has_thread()) {
        // A thread described on its own belongs to the process of its pid, if the file has it.
        for (size_t i = 0; i < trace_.processes.size(); ++i) {
          if (trace_.processes[i].pid != static_cast<uint32_t>(d.thread().pid())) continue;
          t.kind = TrackKind::kThread;
          t.process = i;
          SetThread(d, &t);
          break;
        }
      }
      tracks_[uuid] = std::move(t);
      return absl::OkStatus();
    }
    auto described = descriptors_.find(d.parent_uuid());
    if (described == descriptors_.end()) {
      return absl::DataLossError(absl::StrCat("track ", uuid, " names parent ", d.parent_uuid(),
                                              ", which no track descriptor defines"));
    }
    if (!resolving_.insert(uuid).second) {
      return absl::DataLossError(absl::StrCat("track ", uuid, " is among its own parents"));
    }
    absl::Status parent_added = AddTrack(d.parent_uuid());
    resolving_.erase(uuid);
    if (!parent_added.ok()) return parent_added;
    const Track& parent = tracks_.at(d.parent_uuid());
    t.process = parent.process;
    t.tid = parent.tid;
    t.nc_idx = parent.nc_idx;
    const TrackKind up = parent.kind;
    int32_t core = 0;
    if (up == TrackKind::kOther) {
      // Under a track that is not one of ours: not ours either.
    } else if (d.has_thread()) {
      t.kind = TrackKind::kThread;
      SetThread(d, &t);
    } else if (up == TrackKind::kProcess &&
               absl::SimpleAtoi(absl::StripPrefix(d.name(), "NeuronCore "), &core) &&
               absl::StartsWith(d.name(), "NeuronCore ")) {
      t.kind = TrackKind::kCore;
      t.nc_idx = core;
    } else if (up == TrackKind::kThread) {
      t.kind = d.name() == LaneKindName(LaneKind::kFramework) ? TrackKind::kFramework
               : d.name() == LaneKindName(LaneKind::kRuntime) ? TrackKind::kRuntime
                                                              : TrackKind::kOther;
    } else if (up == TrackKind::kCore) {
      // An async queue's lane ("compute queue (XU 1)") holds executions or transfers as the
      // core's own lanes do, a collectives queue's a collective's barrier and running slices;
      // a counter ("requests in flight (XU 1)") is not a lane.
      auto is_queue = [&d](LaneKind kind) {
        return absl::StartsWith(d.name(), absl::StrCat(LaneKindName(kind), " (XU "));
      };
      t.kind = d.name() == LaneKindName(LaneKind::kExecutions) ? TrackKind::kExecutions
               : d.name() == LaneKindName(LaneKind::kDma)      ? TrackKind::kDma
               : d.has_counter()                               ? TrackKind::kOther
               : is_queue(LaneKind::kComputeQueue)             ? TrackKind::kExecutions
               : is_queue(LaneKind::kTensorOpQueue)            ? TrackKind::kDma
               : is_queue(LaneKind::kCollectivesQueue)         ? TrackKind::kCollectives
                                                               : TrackKind::kOther;
    }
    tracks_[uuid] = std::move(t);
    return absl::OkStatus();
  }

  void SetThread(const pb::TrackDescriptor& d, Track* t) {
    t->tid = static_cast<uint32_t>(d.thread().tid());
    if (d.thread().has_thread_name()) {
      trace_.processes[t->process].thread_names[t->tid] = d.thread().thread_name();
    }
  }

  absl::StatusOr<Args> ReadArgs(const pb::TrackEvent& e) {
    Args args;
    for (const pb::DebugAnnotation& a : e.debug_annotations()) {
      if (a.has_name()) {
        args.by_name[a.name()] = &a;
        continue;
      }
      auto name = arg_names_.find(a.name_iid());
      if (name == arg_names_.end()) {
        return absl::DataLossError(
            absl::StrCat("an argument names interned id ", a.name_iid(), ", never defined"));
      }
      args.by_name[name->second] = &a;
    }
    return args;
  }

  absl::StatusOr<std::string> EventName(const pb::TrackEvent& e) {
    if (e.has_name()) return e.name();
    auto name = names_.find(e.name_iid());
    if (name == names_.end()) {
      return absl::DataLossError(
          absl::StrCat("an event names interned id ", e.name_iid(), ", never defined"));
    }
    return name->second;
  }

  absl::Status AddEvent(const pb::TrackEvent& e, uint64_t ts) {
    auto it = tracks_.find(e.track_uuid());
    if (it == tracks_.end()) {
      return absl::DataLossError(absl::StrCat("an event on track ", e.track_uuid(),
                                              ", which no track descriptor defines"));
    }
    Track& t = it->second;
    if (t.kind == TrackKind::kOther) return absl::OkStatus();  // not one of ours: skipped
    ProcessTrace& p = trace_.processes[t.process];
    if (e.type() == pb::TrackEvent::TYPE_SLICE_END) {
      if (t.open.empty()) {
        return absl::DataLossError(
            absl::StrCat("a slice end on track ", e.track_uuid(), " with no slice open"));
      }
      const size_t index = t.open.back();
      t.open.pop_back();
      uint64_t* start = nullptr;
      uint64_t* duration = nullptr;
      if (t.kind == TrackKind::kFramework) {
        start = &p.ranges[index].start_ns;
        duration = &p.ranges[index].duration_ns;
      } else if (t.kind == TrackKind::kRuntime) {
        start = &p.calls[index].start_ns;
        duration = &p.calls[index].duration_ns;
      } else {
        start = &p.device[index].start_ns;
        duration = &p.device[index].duration_ns;
      }
      *duration = ts >= *start ? ts - *start : 0;
      if (t.kind != TrackKind::kFramework && t.kind != TrackKind::kRuntime) {
        // A device slice cut to nest in its lane says the work's own duration.
        if (auto own = cut_durations_.find(index); own != cut_durations_.end()) {
          *duration = own->second;
          cut_durations_.erase(own);
        }
      }
      Extend(ts);
      return absl::OkStatus();
    }
    absl::StatusOr<std::string> name = EventName(e);
    if (!name.ok()) return name.status();
    absl::StatusOr<Args> args = ReadArgs(e);
    if (!args.ok()) return args.status();
    if (e.type() == pb::TrackEvent::TYPE_INSTANT) {
      if (t.kind == TrackKind::kProcess && *name == "nrtprof capture") CaptureInstant(*args, &p);
      return absl::OkStatus();
    }
    if (e.type() != pb::TrackEvent::TYPE_SLICE_BEGIN) return absl::OkStatus();
    Extend(ts);
    switch (t.kind) {
      case TrackKind::kFramework: {
        RangeEvent& r = p.ranges.emplace_back();
        r.id = ++next_id_;
        r.name = p.names->Intern(*name);
        r.tid = t.tid;
        r.start_ns = ts;
        r.depth = static_cast<uint32_t>(t.open.size());
        r.parent_range = t.open.empty() ? 0 : p.ranges[t.open.back()].id;
        t.open.push_back(p.ranges.size() - 1);
        break;
      }
      case TrackKind::kRuntime: {
        ApiCall& c = p.calls.emplace_back();
        c.name = p.names->Intern(*name);
        c.function = CallFunction(nrtprof::API_FUNCTION_UNSPECIFIED, c.name);
        c.tid = t.tid;
        c.start_ns = ts;
        c.status = static_cast<int32_t>(args->Int("status", 0));
        c.correlation_id = args->Uint("correlation_id");
        c.bytes = args->Uint("bytes");
        c.model_name = p.names->Intern(args->Str("model"));
        c.tensor_name = p.names->Intern(args->Str("tensor"));
        c.nc_idx = static_cast<int32_t>(args->Int("nc", -1));
        c.repeat = static_cast<uint32_t>(args->Uint("repeat"));
        c.nrta_seq = args->Uint("nrta_seq");
        c.polls = args->Uint("polls");
        if (args->Has("stack")) c.stack = absl::StrSplit(args->Str("stack"), " <- ");
        t.open.push_back(p.calls.size() - 1);
        break;
      }
      case TrackKind::kExecutions:
      case TrackKind::kDma:
      case TrackKind::kCollectives: {
        DeviceEvent& d = p.device.emplace_back();
        d.id = ++next_id_;
        d.name = p.names->Intern(*name);
        d.nc_idx = t.nc_idx;
        d.start_ns = ts;
        d.engine = p.names->Intern(args->Str("engine"));
        d.bytes = args->Uint("bytes");
        d.tensor_name = p.names->Intern(args->Str("tensor"));
        d.exec_id = args->Uint("exec_id");
        d.model_name = p.names->Intern(args->Str("model"));
        d.correlation_id = args->Uint("correlation_id");
        d.submitting_tid = static_cast<uint32_t>(args->Uint("submitting_tid"));
        d.nrta_seq = args->Uint("nrta_seq");
        if (args->Has("duration_ns")) {
          cut_durations_[p.device.size() - 1] = args->Uint("duration_ns");
          const uint64_t moved = args->Uint("start_moved_ns");
          d.start_ns = moved <= ts ? ts - moved : 0;
        }
        if (t.kind == TrackKind::kCollectives) {
          d.kind = DeviceEventKind::kCollective;
          d.model_name = p.names->Intern(args->Str("collective"));
          d.worker_gid = static_cast<int32_t>(args->Int("worker_gid", -1));
        } else if (t.kind == TrackKind::kDma) {
          d.kind = DeviceEventKind::kDma;
        } else if (t.open.empty()) {
          d.kind = DeviceEventKind::kExecution;
        } else {
          // Work inside an execution shares what only the execution's slice carries.
          const DeviceEvent& x = p.device[t.open.front()];
          d.kind = DeviceEventKind::kEngineOp;
          d.parent = x.id;
          d.model_name = x.model_name;
          d.exec_id = x.exec_id;
          d.correlation_id = x.correlation_id;
          d.submitting_tid = x.submitting_tid;
        }
        t.open.push_back(p.device.size() - 1);
        break;
      }
      default:
        break;
    }
    return absl::OkStatus();
  }

  void CaptureInstant(const Args& args, ProcessTrace* p) {
    if (trace_.capture_id.empty()) trace_.capture_id = args.Str("capture_id");
    p->host = args.Str("host");
    if (args.Has("executable")) p->executable = args.Str("executable");
    p->events_received = args.Uint("events_received");
    for (const DropCounterField& f : DropCounterFields(&p->drops)) {
      *f.field = args.Uint(f.counter.arg_name);
    }
    p->device_uncorrelated = args.Uint("device_uncorrelated");
    p->batches_missing = args.Uint("batches_missing");
    p->cut_off = args.Uint("cut_off") != 0;
    for (int i = 0;; ++i) {
      const std::string key = absl::StrCat("not_recorded.", i);
      if (!args.Has(key.c_str())) break;
      p->notices.push_back(args.Str(key.c_str()));
    }
  }

  // What the slices alone cannot say: the range of each call, and which execution a DMA on
  // its core's DMA track served (it names the execution's exec_id, and carries no call).
  void Finish(size_t index) {
    ProcessTrace& p = trace_.processes[index];
    // The file holds each lane on a sequence of its own: put the events in a ProcessTrace's
    // orders (trace_model.h) before anything reads them as such.
    std::stable_sort(p.ranges.begin(), p.ranges.end(),
                     [](const RangeEvent& a, const RangeEvent& b) {
                       return a.tid != b.tid ? a.tid < b.tid : a.start_ns < b.start_ns;
                     });
    std::stable_sort(p.calls.begin(), p.calls.end(),
                     [](const ApiCall& a, const ApiCall& b) { return a.start_ns < b.start_ns; });
    std::stable_sort(p.device.begin(), p.device.end(),
                     [](const DeviceEvent& a, const DeviceEvent& b) {
                       if (a.nc_idx != b.nc_idx) return a.nc_idx < b.nc_idx;
                       if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
                       return (a.parent == 0) > (b.parent == 0);
                     });
    AssignCallRanges(p.ranges, &p.calls);
    std::map<std::pair<int32_t, uint64_t>, std::vector<const DeviceEvent*>> executions;
    for (const DeviceEvent& d : p.device) {
      if (d.kind == DeviceEventKind::kExecution && d.exec_id != 0) {
        executions[{d.nc_idx, d.exec_id}].push_back(&d);
      }
    }
    for (DeviceEvent& d : p.device) {
      if (d.kind != DeviceEventKind::kDma || d.exec_id == 0 || d.correlation_id != 0) continue;
      auto it = executions.find({d.nc_idx, d.exec_id});
      if (it == executions.end()) continue;
      const DeviceEvent* served = it->second.front();
      for (const DeviceEvent* x : it->second) {
        if (x->start_ns <= d.start_ns) served = x;  // the latest to start before it
      }
      d.parent = served->id;
      d.model_name = served->model_name;
      d.correlation_id = served->correlation_id;
      d.submitting_tid = served->submitting_tid;
    }
  }

  void Extend(uint64_t ts) {
    if (trace_.start_ns == 0 || ts < trace_.start_ns) trace_.start_ns = ts;
    if (ts > trace_.end_ns) trace_.end_ns = ts;
  }

  const ReadTrace& read_;
  Trace trace_;
  std::unordered_map<uint64_t, const pb::TrackDescriptor*> descriptors_;  // the first of each
  std::unordered_set<uint64_t> resolving_;  // tracks whose parents AddTrack is adding
  std::unordered_map<uint64_t, Track> tracks_;
  std::unordered_map<uint64_t, std::string> names_;
  std::unordered_map<uint64_t, std::string> arg_names_;
  uint64_t next_id_ = 0;
  // Device slices cut to nest in their lane: their index in ProcessTrace::device -> the work's
  // own duration (the slice's duration_ns argument), until the slice ends.
  std::unordered_map<size_t, uint64_t> cut_durations_;
};

}  // namespace

absl::StatusOr<Trace> TraceFromPerfetto(const ReadTrace& read) { return Rebuilder(read).Run(); }

}  // namespace nrtprof::daemon
