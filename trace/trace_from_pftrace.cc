#include "trace/trace_from_pftrace.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "trace/api_function.h"
#include "trace/call_ranges.h"
#include "trace/pftrace_wire.h"
#include "trace/trace_lanes.h"

namespace nrtprof::daemon {
namespace {

namespace pb = perfetto::protos;
using pftrace::Annotation;

enum class TrackKind {
  kProcess, kThread, kFramework, kRuntime, kCore, kExecutions, kDma, kCollectives,
  kTriggers,  // the global "nrtprof triggers" track: the trigger rule's instant
  kOther
};

struct Track {
  TrackKind kind = TrackKind::kOther;
  size_t process = 0;  // index into Trace::processes (all but kOther)
  uint32_t tid = 0;    // threads and their lanes
  int32_t nc_idx = 0;  // cores and their lanes
  std::vector<size_t> open;  // slices begun and not ended: indices into the lane's vector
};

// The arguments a slice's event is read for, by the name the file gives them: known by an
// index once, when the name is interned, rather than compared as text for every event.
enum ArgKey : uint8_t {
  kStatus, kCorrelationId, kBytes, kModel, kTensor, kNc, kRepeat, kNrtaSeq, kPolls, kStack,
  kEngine, kExecId, kSubmittingTid, kDurationNs, kStartMovedNs, kCollective, kWorkerGid,
  kArgKeys  // any other name
};

ArgKey KeyOf(std::string_view name) {
  static const auto* const kKeys = new absl::flat_hash_map<std::string_view, ArgKey>{
      {"status", kStatus},           {"correlation_id", kCorrelationId},
      {"bytes", kBytes},             {"model", kModel},
      {"tensor", kTensor},           {"nc", kNc},
      {"repeat", kRepeat},           {"nrta_seq", kNrtaSeq},
      {"polls", kPolls},             {"stack", kStack},
      {"engine", kEngine},           {"exec_id", kExecId},
      {"submitting_tid", kSubmittingTid}, {"duration_ns", kDurationNs},
      {"start_moved_ns", kStartMovedNs},  {"collective", kCollective},
      {"worker_gid", kWorkerGid}};
  auto it = kKeys->find(name);
  return it == kKeys->end() ? kArgKeys : it->second;
}

// An argument's value as the slices' readers take it: a number given as the other signedness
// is read as that, a string only as a string.
uint64_t UintOf(const Annotation* a) {
  if (a == nullptr) return 0;
  return a->value_case == Annotation::kUint ? a->value : static_cast<uint64_t>(a->int_value());
}
int64_t IntOf(const Annotation* a, int64_t absent) {
  if (a == nullptr) return absent;
  return a->value_case == Annotation::kInt ? static_cast<int64_t>(a->value)
                                           : static_cast<int64_t>(a->uint_value());
}
std::string_view StrOf(const Annotation* a) { return a == nullptr ? "" : a->str(); }

// A slice's arguments, by key; the last of a name given twice.
struct SliceArgs {
  std::array<const Annotation*, kArgKeys> by_key;
  uint64_t Uint(ArgKey k) const { return UintOf(by_key[k]); }
  int64_t Int(ArgKey k, int64_t absent) const { return IntOf(by_key[k], absent); }
  std::string_view Str(ArgKey k) const { return StrOf(by_key[k]); }
  bool Has(ArgKey k) const { return by_key[k] != nullptr; }
};

// An instant's arguments, by name (a capture instant has names made up as it goes:
// not_recorded.0, not_recorded.1...).
struct NamedArgs {
  std::map<std::string, const Annotation*, std::less<>> by_name;
  const Annotation* Find(std::string_view name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  }
  uint64_t Uint(std::string_view name) const { return UintOf(Find(name)); }
  std::string Str(std::string_view name) const { return std::string(StrOf(Find(name))); }
  bool Has(std::string_view name) const { return Find(name) != nullptr; }
};

// An interning table of the file (event names, annotation names): iid -> text. One table for
// the whole file, as the writer gives a text the same iid in every sequence.
class IidTable {
 public:
  struct Entry {
    bool defined = false;
    // Changes whenever the iid is given a new text: what was made of the old one is stale.
    uint32_t version = 0;
    ArgKey key = kArgKeys;
    std::string text;
  };

  void Define(uint64_t iid, std::string_view text, uint32_t* versions) {
    Entry& e = iid < kSmall ? Small(iid) : large_[iid];
    if (e.defined && e.text == text) return;
    e.defined = true;
    e.version = ++*versions;
    e.text.assign(text.data(), text.size());
    e.key = KeyOf(text);
  }

  const Entry* Find(uint64_t iid) const {
    if (iid < kSmall) return iid < small_.size() && small_[iid].defined ? &small_[iid] : nullptr;
    auto it = large_.find(iid);
    return it == large_.end() ? nullptr : &it->second;
  }

  static constexpr uint64_t kSmall = 1 << 16;

 private:
  Entry& Small(uint64_t iid) {
    if (iid >= small_.size()) small_.resize(iid + 1);
    return small_[iid];
  }

  std::vector<Entry> small_;
  absl::flat_hash_map<uint64_t, Entry> large_;
};

// What was made of a process's names, so that an event's name costs a look in a vector: its
// Name for each event-name iid, and for the last texts its string arguments had.
struct ProcessNames {
  struct ByIid {
    uint32_t version = 0;  // the IidTable entry's, 0 for none yet
    Name name;
    int32_t function = -1;  // CallFunction of the name, -1 until asked
  };
  std::vector<ByIid> by_iid;
  static constexpr size_t kTextSlots = 256;
  std::array<Name, kTextSlots> by_text;
};

// Sorts `v` by `less` as std::stable_sort would, where `v` is a few runs already in order: a
// process's events come lane by lane, each lane's in its order, so the runs are merged at once
// and each event moved once (a stable sort of millions of device events moved each a dozen
// times). Any other order (many runs) is sorted as it is.
template <typename T, typename Less>
void SortRuns(CaptureVector<T>* v, Less less) {
  constexpr size_t kMaxRuns = 256;
  std::vector<size_t> starts;  // each run's first, then the end
  for (size_t i = 0; i < v->size(); ++i) {
    if (i == 0 || less((*v)[i], (*v)[i - 1])) starts.push_back(i);
    if (starts.size() > kMaxRuns) {
      std::stable_sort(v->begin(), v->end(), less);
      return;
    }
  }
  if (starts.size() <= 1) return;
  starts.push_back(v->size());
  const size_t runs = starts.size() - 1;
  std::vector<size_t> at(starts.begin(), starts.end() - 1);  // each run's next
  // A heap of the runs by their next element; a tie goes to the earlier run, as it came first.
  auto later = [&](size_t a, size_t b) {
    const T& x = (*v)[at[a]];
    const T& y = (*v)[at[b]];
    if (less(y, x)) return true;
    if (less(x, y)) return false;
    return a > b;
  };
  std::vector<size_t> heap;
  for (size_t r = 0; r < runs; ++r) heap.push_back(r);
  std::make_heap(heap.begin(), heap.end(), later);
  CaptureVector<T> sorted;
  sorted.reserve(v->size());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const size_t r = heap.back();
    sorted.push_back(std::move((*v)[at[r]]));
    if (++at[r] < starts[r + 1]) {
      std::push_heap(heap.begin(), heap.end(), later);
    } else {
      heap.pop_back();
    }
  }
  v->swap(sorted);
}

class Rebuilder {
 public:
  explicit Rebuilder(const ReadTrace& read) : read_(read) {}
  // `read`'s packets are given back once every event is read.
  explicit Rebuilder(ReadTrace* read) : read_(*read), given_back_(read) {}

  absl::StatusOr<Trace> Run() {
    // The packets as bytes: those of a ReadTrace of messages (ReadPerfettoTrace, or one made
    // in a test) are encoded again.
    std::string encoded;
    CaptureVector<std::string_view> encoded_views;
    std::vector<size_t> descriptor_packets;
    const CaptureVector<std::string_view>* packets = &read_.packet_bytes;
    const std::vector<size_t>* with_descriptors = &read_.track_descriptor_packets;
    if (read_.trace.packet_size() > 0) {
      std::vector<size_t> ends;
      for (const pb::TracePacket& p : read_.trace.packet()) {
        if (p.has_track_descriptor()) descriptor_packets.push_back(ends.size());
        p.AppendToString(&encoded);
        ends.push_back(encoded.size());
      }
      size_t begin = 0;
      for (size_t end : ends) {
        encoded_views.emplace_back(encoded.data() + begin, end - begin);
        begin = end;
      }
      packets = &encoded_views;
      with_descriptors = &descriptor_packets;
    }
    // The tracks first, as Perfetto's trace processor takes them: a descriptor may name a
    // parent that the file describes after it (nrtprof's own writer puts parents first, but
    // the rule is only that the parent is in the file).
    std::vector<uint64_t> order;  // uuids, as first described
    pftrace::PacketFields p;
    for (size_t i : *with_descriptors) {
      if (i >= packets->size()) return NotAPacket(i);
      const std::string_view bytes = (*packets)[i];
      if (!pftrace::ReadPacketFields(bytes, &p)) return NotAPacket(i);
      if (!p.track_descriptor.present()) continue;
      pb::TrackDescriptor& d = described_.emplace_back();
      if (!pftrace::ParseOccurrences(bytes, pb::TracePacket::kTrackDescriptorFieldNumber,
                                     p.track_descriptor, &d)) {
        return NotAPacket(i);
      }
      // A track described again (Perfetto's producers repeat their descriptors) is the same.
      if (descriptors_.emplace(d.uuid(), &d).second) order.push_back(d.uuid());
    }
    // Processes in the file's order, so that a thread without a parent finds its own by pid.
    for (uint64_t uuid : order) {
      if (descriptors_.at(uuid)->has_process()) AddProcess(*descriptors_.at(uuid));
    }
    for (uint64_t uuid : order) {
      if (absl::Status s = AddTrack(uuid); !s.ok()) return s;
    }
    names_by_process_.resize(trace_.processes.size());
    Reserve();
    pftrace::EventFields e;
    for (size_t i = 0; i < packets->size(); ++i) {
      const std::string_view bytes = (*packets)[i];
      if (!pftrace::ReadPacketFields(bytes, &p)) return NotAPacket(i);
      if (p.interned_data.present()) {
        pb::InternedData interned;
        if (!pftrace::ParseOccurrences(bytes, pb::TracePacket::kInternedDataFieldNumber,
                                       p.interned_data, &interned)) {
          return NotAPacket(i);
        }
        for (const pb::EventName& n : interned.event_names()) {
          names_.Define(n.iid(), n.name(), &versions_);
        }
        for (const pb::DebugAnnotationName& n : interned.debug_annotation_names()) {
          arg_names_.Define(n.iid(), n.name(), &versions_);
        }
      }
      if (p.clock_snapshot.present()) {
        pb::ClockSnapshot snapshot;
        if (!pftrace::ParseOccurrences(bytes, pb::TracePacket::kClockSnapshotFieldNumber,
                                       p.clock_snapshot, &snapshot)) {
          return NotAPacket(i);
        }
        ReadClocks(snapshot);
      }
      if (p.track_event.present()) {
        e = pftrace::EventFields();
        annotations_.clear();
        bool ok = true;
        if (p.track_event.count == 1) {
          ok = pftrace::ReadEventFields(p.track_event.first, &e, &annotations_);
        } else {
          pftrace::ForEachOccurrence(bytes, pb::TracePacket::kTrackEventFieldNumber,
                                     [&](std::string_view b) {
                                       ok = ok && pftrace::ReadEventFields(b, &e, &annotations_);
                                     });
        }
        if (!ok) return NotAPacket(i);
        const uint64_t ts = i < read_.times.size() ? read_.times[i] : 0;
        if (absl::Status s = AddEvent(e, ts); !s.ok()) return s;
      }
    }
    for (const auto& [uuid, track] : tracks_) {
      if (!track.open.empty()) {
        return absl::DataLossError(absl::StrCat("track ", uuid, " ends with ", track.open.size(),
                                                " slice(s) never closed"));
      }
    }
    if (given_back_ != nullptr) {
      // Every event read: the packets' pages (in the HugePageReuse scope) serve the sorts'
      // vectors below instead of new ones the kernel would zero.
      CaptureVector<std::string_view>().swap(given_back_->packet_bytes);
      std::vector<std::shared_ptr<const char[]>>().swap(given_back_->buffers);
      std::vector<uint64_t>().swap(given_back_->times);
      std::vector<size_t>().swap(given_back_->track_descriptor_packets);
    }
    for (size_t i = 0; i < trace_.processes.size(); ++i) Finish(i);
    return std::move(trace_);
  }

 private:
  // Room in each process's vectors for the slices its tracks begin, as the reader counted
  // them: each vector made once (growing them was a tenth of the rebuild, its copies and the
  // zeroing of their new pages).
  void Reserve() {
    std::vector<std::array<size_t, 3>> slices(trace_.processes.size(), {0, 0, 0});
    for (const auto& [uuid, count] : read_.slices_begun) {
      auto it = tracks_.find(uuid);
      if (it == tracks_.end()) continue;
      const Track& t = it->second;
      switch (t.kind) {
        case TrackKind::kFramework:
          slices[t.process][0] += count;
          break;
        case TrackKind::kRuntime:
          slices[t.process][1] += count;
          break;
        case TrackKind::kExecutions:
        case TrackKind::kDma:
        case TrackKind::kCollectives:
          slices[t.process][2] += count;
          break;
        default:
          break;
      }
    }
    for (size_t i = 0; i < trace_.processes.size(); ++i) {
      trace_.processes[i].ranges.reserve(slices[i][0]);
      trace_.processes[i].calls.reserve(slices[i][1]);
      trace_.processes[i].device.reserve(slices[i][2]);
    }
  }

  static absl::Status NotAPacket(size_t i) {
    return absl::DataLossError(absl::StrCat("packet ", i, " is not a TracePacket"));
  }

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
      } else if (d.name() == kTriggerTrackName) {
        t.kind = TrackKind::kTriggers;
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

  // The event's name: its own, or its interned one.
  absl::StatusOr<std::string_view> EventName(const pftrace::EventFields& e) const {
    if (e.name_case == pftrace::EventFields::kName) return e.name;
    const IidTable::Entry* entry = names_.Find(e.name_iid);
    if (entry == nullptr) {
      return absl::DataLossError(
          absl::StrCat("an event names interned id ", e.name_iid, ", never defined"));
    }
    return std::string_view(entry->text);
  }

  // The event's name in the process's table, and (for a call) its function.
  Name EventNameIn(const pftrace::EventFields& e, std::string_view text, size_t process,
                   int32_t* function) {
    ProcessNames& cache = names_by_process_[process];
    NameTable& table = *trace_.processes[process].names;
    if (e.name_case == pftrace::EventFields::kName || e.name_iid >= IidTable::kSmall) {
      const Name name = TextName(process, text);
      if (function != nullptr) *function = CallFunction(nrtprof::API_FUNCTION_UNSPECIFIED, name);
      return name;
    }
    if (e.name_iid >= cache.by_iid.size()) cache.by_iid.resize(e.name_iid + 1);
    ProcessNames::ByIid& slot = cache.by_iid[e.name_iid];
    const uint32_t version = names_.Find(e.name_iid)->version;
    if (slot.version != version) {
      slot.version = version;
      slot.name = table.Intern(text);
      slot.function = -1;
    }
    if (function != nullptr) {
      if (slot.function < 0) {
        slot.function = CallFunction(nrtprof::API_FUNCTION_UNSPECIFIED, slot.name);
      }
      *function = slot.function;
    }
    return slot.name;
  }

  // `text` in the process's table: through a direct-mapped cache of the texts met last, since
  // an argument's few values (models, tensors, engines) repeat in every event.
  Name TextName(size_t process, std::string_view text) {
    if (text.empty()) return Name();
    Name& slot = names_by_process_[process]
                     .by_text[absl::Hash<std::string_view>()(text) % ProcessNames::kTextSlots];
    if (slot.empty() || slot.view() != text) slot = trace_.processes[process].names->Intern(text);
    return slot;
  }

  // The event's arguments by key: an error for one named by an iid never defined.
  absl::Status ReadArgs(SliceArgs* args, NamedArgs* named) {
    args->by_key.fill(nullptr);
    for (const Annotation& a : annotations_) {
      ArgKey key = kArgKeys;
      std::string_view name;
      if (a.name_case == Annotation::kName) {
        name = a.name;
        key = KeyOf(name);
      } else {
        const IidTable::Entry* entry = arg_names_.Find(a.name_iid);
        if (entry == nullptr) {
          return absl::DataLossError(
              absl::StrCat("an argument names interned id ", a.name_iid, ", never defined"));
        }
        name = entry->text;
        key = entry->key;
      }
      if (key != kArgKeys) args->by_key[key] = &a;
      if (named != nullptr) named->by_name[std::string(name)] = &a;
    }
    return absl::OkStatus();
  }

  Track* FindTrack(uint64_t uuid) {
    if (last_track_ != nullptr && uuid == last_track_uuid_) return last_track_;
    auto it = tracks_.find(uuid);
    if (it == tracks_.end()) return nullptr;
    last_track_uuid_ = uuid;
    last_track_ = &it->second;  // an unordered_map's elements stay put
    return last_track_;
  }

  absl::Status AddEvent(const pftrace::EventFields& e, uint64_t ts) {
    Track* found = FindTrack(e.track_uuid);
    if (found == nullptr) {
      return absl::DataLossError(absl::StrCat("an event on track ", e.track_uuid,
                                              ", which no track descriptor defines"));
    }
    Track& t = *found;
    if (t.kind == TrackKind::kOther) return absl::OkStatus();  // not one of ours: skipped
    if (t.kind == TrackKind::kTriggers) return TriggerInstant(e, ts);
    ProcessTrace& p = trace_.processes[t.process];
    if (e.type == pb::TrackEvent::TYPE_SLICE_END) {
      if (t.open.empty()) {
        return absl::DataLossError(
            absl::StrCat("a slice end on track ", e.track_uuid, " with no slice open"));
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
      if (t.kind != TrackKind::kFramework && t.kind != TrackKind::kRuntime &&
          !cut_durations_.empty()) {
        // A device slice cut to nest in its lane says the work's own duration.
        if (auto own = cut_durations_.find(index); own != cut_durations_.end()) {
          *duration = own->second;
          cut_durations_.erase(own);
        }
      }
      Extend(ts);
      return absl::OkStatus();
    }
    absl::StatusOr<std::string_view> name = EventName(e);
    if (!name.ok()) return name.status();
    const bool capture_instant = e.type == pb::TrackEvent::TYPE_INSTANT &&
                                 t.kind == TrackKind::kProcess && *name == "nrtprof capture";
    NamedArgs named;
    SliceArgs args;
    if (absl::Status s = ReadArgs(&args, capture_instant ? &named : nullptr); !s.ok()) return s;
    if (e.type == pb::TrackEvent::TYPE_INSTANT) {
      if (capture_instant) CaptureInstant(named, &p);
      return absl::OkStatus();
    }
    if (e.type != pb::TrackEvent::TYPE_SLICE_BEGIN) return absl::OkStatus();
    Extend(ts);
    switch (t.kind) {
      case TrackKind::kFramework: {
        RangeEvent& r = p.ranges.emplace_back();
        r.id = ++next_id_;
        r.name = EventNameIn(e, *name, t.process, nullptr);
        r.tid = t.tid;
        r.start_ns = ts;
        r.depth = static_cast<uint32_t>(t.open.size());
        r.parent_range = t.open.empty() ? 0 : p.ranges[t.open.back()].id;
        t.open.push_back(p.ranges.size() - 1);
        break;
      }
      case TrackKind::kRuntime: {
        ApiCall& c = p.calls.emplace_back();
        c.name = EventNameIn(e, *name, t.process, &c.function);
        c.tid = t.tid;
        c.start_ns = ts;
        c.status = static_cast<int32_t>(args.Int(kStatus, 0));
        c.correlation_id = args.Uint(kCorrelationId);
        c.bytes = args.Uint(kBytes);
        c.model_name = TextName(t.process, args.Str(kModel));
        c.tensor_name = TextName(t.process, args.Str(kTensor));
        c.nc_idx = static_cast<int32_t>(args.Int(kNc, -1));
        c.repeat = static_cast<uint32_t>(args.Uint(kRepeat));
        c.nrta_seq = args.Uint(kNrtaSeq);
        c.polls = args.Uint(kPolls);
        if (args.Has(kStack)) {
          const std::string_view stack = args.Str(kStack);
          c.stack = absl::StrSplit(absl::string_view(stack.data(), stack.size()), " <- ");
        }
        t.open.push_back(p.calls.size() - 1);
        break;
      }
      case TrackKind::kExecutions:
      case TrackKind::kDma:
      case TrackKind::kCollectives: {
        DeviceEvent& d = p.device.emplace_back();
        d.id = ++next_id_;
        d.name = EventNameIn(e, *name, t.process, nullptr);
        d.nc_idx = t.nc_idx;
        d.start_ns = ts;
        d.engine = TextName(t.process, args.Str(kEngine));
        d.bytes = args.Uint(kBytes);
        d.tensor_name = TextName(t.process, args.Str(kTensor));
        d.exec_id = args.Uint(kExecId);
        d.model_name = TextName(t.process, args.Str(kModel));
        d.correlation_id = args.Uint(kCorrelationId);
        d.submitting_tid = static_cast<uint32_t>(args.Uint(kSubmittingTid));
        d.nrta_seq = args.Uint(kNrtaSeq);
        if (args.Has(kDurationNs)) {
          cut_durations_[p.device.size() - 1] = args.Uint(kDurationNs);
          const uint64_t moved = args.Uint(kStartMovedNs);
          d.start_ns = moved <= ts ? ts - moved : 0;
        }
        if (t.kind == TrackKind::kCollectives) {
          d.kind = DeviceEventKind::kCollective;
          d.model_name = TextName(t.process, args.Str(kCollective));
          d.worker_gid = static_cast<int32_t>(args.Int(kWorkerGid, -1));
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

  // The trigger rule's instant (perfetto_writer.cc): the rule by its name, why by its
  // arguments, the anomaly's start by its time. Anything else on the track is not ours.
  absl::Status TriggerInstant(const pftrace::EventFields& e, uint64_t ts) {
    if (e.type != pb::TrackEvent::TYPE_INSTANT) return absl::OkStatus();
    absl::StatusOr<std::string_view> name = EventName(e);
    if (!name.ok()) return name.status();
    NamedArgs named;
    SliceArgs args;
    if (absl::Status s = ReadArgs(&args, &named); !s.ok()) return s;
    trace_.trigger = {std::string(*name),      named.Str("condition"),
                      named.Str("reason"),     named.Uint("value_ns"),
                      named.Uint("threshold_ns"), ts};
    return absl::OkStatus();
  }

  void CaptureInstant(const NamedArgs& args, ProcessTrace* p) {
    if (trace_.capture_id.empty()) trace_.capture_id = args.Str("capture_id");
    p->host = args.Str("host");
    if (args.Has("executable")) p->executable = args.Str("executable");
    p->job = args.Str("job");
    p->rank = args.Has("rank") && args.Uint("rank") <= 0x7fffffff
                  ? static_cast<int32_t>(args.Uint("rank"))
                  : -1;
    p->events_received = args.Uint("events_received");
    for (const DropCounterField& f : DropCounterFields(&p->drops)) {
      *f.field = args.Uint(f.counter.arg_name);
    }
    p->device_uncorrelated = args.Uint("device_uncorrelated");
    p->batches_missing = args.Uint("batches_missing");
    p->cut_off = args.Uint("cut_off") != 0;
    // The polls counted after their threads' last recorded ones: only their sums are written.
    p->poll_tallies.clear();
    const std::pair<Name, int32_t> tallied[2] = {
        {"nrta_is_completed", nrtprof::API_NRTA_IS_COMPLETED},
        {"nrta_get_sequence", nrtprof::API_NRTA_GET_SEQUENCE}};
    for (int i = 0; i < 2; ++i) {
      const uint64_t polls = args.Uint(kTalliedPollsArgs[i]);
      if (polls == 0) continue;
      PollTally& t = p->poll_tallies.emplace_back();
      t.name = tallied[i].first;
      t.function = tallied[i].second;
      t.polls = polls;
    }
    for (int i = 0;; ++i) {
      const std::string key = absl::StrCat("not_recorded.", i);
      if (!args.Has(key)) break;
      p->notices.push_back(args.Str(key));
    }
  }

  // What the slices alone cannot say: the range of each call, and which execution a DMA on
  // its core's DMA track served (it names the execution's exec_id, and carries no call).
  void Finish(size_t index) {
    ProcessTrace& p = trace_.processes[index];
    // The file holds each lane on a sequence of its own: put the events in a ProcessTrace's
    // orders (trace_model.h) before anything reads them as such.
    SortRuns(&p.ranges, [](const RangeEvent& a, const RangeEvent& b) {
      return a.tid != b.tid ? a.tid < b.tid : a.start_ns < b.start_ns;
    });
    SortRuns(&p.calls,
             [](const ApiCall& a, const ApiCall& b) { return a.start_ns < b.start_ns; });
    SortRuns(&p.device, [](const DeviceEvent& a, const DeviceEvent& b) {
      if (a.nc_idx != b.nc_idx) return a.nc_idx < b.nc_idx;
      if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
      return (a.parent == 0) > (b.parent == 0);
    });
    AssignCallRanges(p.ranges, &p.calls);
    const bool dma_of_executions =
        std::any_of(p.device.begin(), p.device.end(), [](const DeviceEvent& d) {
          return d.kind == DeviceEventKind::kDma && d.exec_id != 0 && d.correlation_id == 0;
        });
    if (!dma_of_executions) return;
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
  ReadTrace* given_back_ = nullptr;  // TraceFromPerfetto(ReadTrace&&)'s
  Trace trace_;
  std::deque<pb::TrackDescriptor> described_;  // every descriptor read; a deque keeps them put
  std::unordered_map<uint64_t, const pb::TrackDescriptor*> descriptors_;  // the first of each
  std::unordered_set<uint64_t> resolving_;  // tracks whose parents AddTrack is adding
  std::unordered_map<uint64_t, Track> tracks_;
  uint64_t last_track_uuid_ = 0;  // the track of the event before, as most are on it
  Track* last_track_ = nullptr;
  IidTable names_;
  IidTable arg_names_;
  uint32_t versions_ = 0;  // the IidTables' entries' versions, given out
  std::vector<ProcessNames> names_by_process_;  // by index in trace_.processes
  std::vector<Annotation> annotations_;  // the current event's, reused
  uint64_t next_id_ = 0;
  // Device slices cut to nest in their lane: their index in ProcessTrace::device -> the work's
  // own duration (the slice's duration_ns argument), until the slice ends.
  std::unordered_map<size_t, uint64_t> cut_durations_;
};

}  // namespace

absl::StatusOr<Trace> TraceFromPerfetto(const ReadTrace& read) {
  // The pages of a vector given up (a process's events before they were sorted) serve the next
  // one, rather than new pages the kernel zeroes first.
  const HugePageReuse reuse;
  return Rebuilder(read).Run();
}

absl::StatusOr<Trace> TraceFromPerfetto(ReadTrace&& read) {
  const HugePageReuse reuse;
  return Rebuilder(&read).Run();
}

}  // namespace nrtprof::daemon
