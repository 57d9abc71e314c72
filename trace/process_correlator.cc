// One process's events correlated into its ProcessTrace: the matching correlator.h describes
// (device clocks to host time, executions and transfers to the calls that caused them, calls
// into their framework ranges, model files named). Over 800 lines because it is one class, the
// matching's state for one process, and its helpers: cut in two, its state would have to live
// in a header both halves share, for no reader's gain.
#include "trace/process_correlator.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trace/correlator.h"
#include "trace/api_function.h"
#include "trace/call_ranges.h"
#include "trace/trace_name.h"

namespace nrtprof::daemon {
namespace {

constexpr int32_t kPlacementDevice = 0;  // NRT_TENSOR_PLACEMENT_DEVICE
constexpr int32_t kStatusSuccess = 0;
// The execution ran but reported errors: it produced device events, maybe fewer than asked.
constexpr int32_t kStatusCompletedWithNumErr = 1003;
constexpr int32_t kStatusCompletedWithErr = 1004;

// What a device event is matched on: one bit per kind of work a runtime call causes.
enum Channel : uint32_t {
  kNone = 0,
  kExec = 1 << 0,
  kH2d = 1 << 1,
  kD2h = 1 << 2,
  kD2d = 1 << 3,
  kMemset = 1 << 4,
  kModelLoad = 1 << 5,
};
constexpr uint32_t kAllChannels[] = {kExec, kH2d, kD2h, kD2d, kMemset, kModelLoad};

// A channel's position in kAllChannels.
size_t ChannelIndex(uint32_t channel) {
  size_t k = 0;
  while (k + 1 < std::size(kAllChannels) && kAllChannels[k] != channel) ++k;
  return k;
}

uint32_t DmaChannel(std::string_view name) {
  if (name == "dma_h2d") return kH2d;
  if (name == "dma_d2h") return kD2h;
  if (name == "dma_d2d") return kD2d;
  if (name == "dma_memset") return kMemset;
  if (name == "dma_model_load") return kModelLoad;
  return kNone;
}

// What the correlator asks of a device event's name: its DMA channel (DmaChannel), and whether
// it is a collective's (an execution so named is a collective's barrier or running).
constexpr uint32_t kChannelsOfName = kH2d | kD2h | kD2d | kMemset | kModelLoad;
constexpr uint32_t kCollectiveName = 1 << 6;
static_assert((kChannelsOfName & kCollectiveName) == 0);

uint8_t NameTraits(std::string_view name) {
  return static_cast<uint8_t>(DmaChannel(name) |
                              (name == kCcExecBarrier || name == kCcRunning ? kCollectiveName : 0));
}

uint64_t End(uint64_t start, uint64_t duration) { return start + duration; }

// The first of `v` (sorted by first) whose first is above `key`, searched for outward from
// `from`, where it is expected to be: steps that double, then a binary search between.
size_t UpperBoundNear(const std::vector<std::pair<uint64_t, uint64_t>>& v, uint64_t key,
                      size_t from) {
  const size_t n = v.size();
  from = std::min(from, n);
  size_t lo, hi;  // it is in [lo, hi]; v[hi] is above key if hi < n
  if (from == 0 || v[from - 1].first <= key) {
    lo = hi = from;
    for (size_t step = 1; hi < n && v[hi].first <= key; step *= 2) {
      lo = hi + 1;
      hi = std::min(n, hi + step);
    }
  } else {
    lo = hi = from - 1;
    for (size_t step = 1; lo > 0 && v[lo - 1].first > key; step *= 2) {
      hi = lo - 1;
      lo = hi >= step ? hi - step : 0;
    }
  }
  return static_cast<size_t>(
      std::upper_bound(
          v.begin() + static_cast<ptrdiff_t>(lo), v.begin() + static_cast<ptrdiff_t>(hi), key,
          [](uint64_t k, const std::pair<uint64_t, uint64_t>& e) { return k < e.first; }) -
      v.begin());
}

// The process's string table as Names of the trace's NameTable, with "" for 0 and unknown ids.
// Each text is interned once, here; an event's names are then pointer copies. The shim numbers
// its strings from 1 up, so the ids are looked up in a vector indexed by id (a few lookups per
// event); a table with ids far beyond its size stays a hash lookup. Each text's NameTraits are
// worked out here too, once, for the device events that carry it.
class Strings {
 public:
  Strings(const std::unordered_map<uint32_t, std::string>& table, NameTable* names) {
    uint32_t max_iid = 0;
    for (const auto& [iid, value] : table) max_iid = std::max(max_iid, iid);
    const bool dense = max_iid <= 2 * table.size() + 1024;
    if (dense) {
      dense_.resize(size_t{max_iid} + 1);
      dense_traits_.resize(size_t{max_iid} + 1, 0);
    }
    for (const auto& [iid, value] : table) {
      const Name name = names->Intern(value);
      if (dense) {
        dense_[iid] = name;
        dense_traits_[iid] = NameTraits(value);
      } else {
        sparse_.emplace(iid, std::make_pair(name, NameTraits(value)));
      }
    }
  }
  Name operator()(uint32_t iid) const {
    if (iid < dense_.size()) return dense_[iid];
    auto it = sparse_.find(iid);
    return it == sparse_.end() ? Name() : it->second.first;
  }
  // NameTraits of the text (none for an unknown id: its name is "").
  uint32_t Traits(uint32_t iid) const {
    if (iid < dense_traits_.size()) return dense_traits_[iid];
    auto it = sparse_.find(iid);
    return it == sparse_.end() ? 0 : it->second.second;
  }

 private:
  std::vector<Name> dense_;            // by iid, when the ids are dense
  std::vector<uint8_t> dense_traits_;  // the same
  std::unordered_map<uint32_t, std::pair<Name, uint8_t>> sparse_;
};

struct TensorState {
  bool known = false;  // an allocation of this handle was seen before the call
  bool device = false;
  int32_t nc_idx = -1;
  uint32_t name_iid = 0;
};

// Tensor and model handles over time: which allocation a handle named at a given instant.
class HandleHistory {
 public:
  HandleHistory(const ProcessCapture& in, const Strings& str, NameTable* names) {
    for (const IngestedEvent& e : in.handle_events) {
      const nrtprof::ApiFunction f = CallFunction(e.function, str(e.name_iid));
      if (f == nrtprof::API_NRT_TENSOR_ALLOCATE || f == nrtprof::API_NRT_TENSOR_FREE) {
        if (e.call.tensor != 0) tensors_[e.call.tensor].push_back(&e);
      } else if (IsModelLoad(f)) {
        if (e.call.model != 0 && e.status == kStatusSuccess)
          models_[e.call.model].push_back(&e);
      }
    }
    auto by_start = [](const IngestedEvent* a, const IngestedEvent* b) {
      return a->start_ns < b->start_ns;
    };
    for (auto& [h, v] : tensors_) std::stable_sort(v.begin(), v.end(), by_start);
    for (auto& [h, v] : models_) std::stable_sort(v.begin(), v.end(), by_start);
    for (const IngestedModel& m : in.models) {
      if (!m.file.name.empty()) model_files_[m.model_handle] = names->Intern(m.file.name);
    }
  }

  TensorState Tensor(uint64_t handle, uint64_t at_ns, const Strings& str) const {
    TensorState state;
    const IngestedEvent* e = Latest(tensors_, handle, at_ns);
    if (e == nullptr || CallFunction(e->function, str(e->name_iid)) != nrtprof::API_NRT_TENSOR_ALLOCATE ||
        e->status != kStatusSuccess) {
      return state;  // never seen, or freed: a call on it fails anyway
    }
    state.known = true;
    state.device = e->placement == kPlacementDevice;
    state.nc_idx = e->nc_idx;
    state.name_iid = e->tensor_name_iid;
    return state;
  }

  // The model's name and NeuronCore as of its latest load before `at_ns`.
  void Model(uint64_t handle, uint64_t at_ns, const Strings& str, Name* name,
             int32_t* nc_idx) const {
    if (const IngestedEvent* e = Latest(models_, handle, at_ns); e != nullptr) {
      if (e->model_name_iid != 0) *name = str(e->model_name_iid);
      *nc_idx = e->nc_idx;
    }
    if (name->empty()) {
      auto it = model_files_.find(handle);
      if (it != model_files_.end()) *name = it->second;
    }
  }

 private:
  using History = std::unordered_map<uint64_t, std::vector<const IngestedEvent*>>;
  static const IngestedEvent* Latest(const History& history, uint64_t handle, uint64_t at_ns) {
    auto it = history.find(handle);
    if (handle == 0 || it == history.end()) return nullptr;
    auto after =
        std::upper_bound(it->second.begin(), it->second.end(), at_ns,
                         [](uint64_t t, const IngestedEvent* e) { return t < e->start_ns; });
    return after == it->second.begin() ? nullptr : *(after - 1);
  }

  History tensors_;
  History models_;
  std::unordered_map<uint64_t, Name> model_files_;
};

// What a runtime call can have caused on the device, for matching.
struct Expectation {
  size_t call = 0;        // index in ProcessTrace::calls
  uint32_t channels = 0;  // which kinds of device event it may have caused
  // Exactly `capacity` events of its one channel; otherwise up to `capacity`, or none.
  bool exact = false;
  uint64_t capacity = 0;
  // Model or tensor names its events may carry: a few at most (a copy names two tensors), so
  // kept inline, with no allocation for each call.
  absl::InlinedVector<Name, 3> names;
  int32_t nc_idx = -1;  // where its events must be, if known
};

// A device event to be matched, by index in the process's (not yet sorted) device events.
struct DeviceRef {
  size_t index = 0;
  uint32_t channel = 0;
};

class ProcessCorrelator {
 public:
  // `drops`: what the process lost during the capture (ProcessDrops), given to the first of its
  // streams (the others' add nothing but the daemon's correlation's own).
  // `names` holds the text of the ProcessTrace's names (shared by the Trace's processes).
  // `consume`, if not null, is `in`'s events, which Build frees as soon as it is done reading
  // them, so that its last step reuses their pages (huge_page_allocator.h).
  ProcessCorrelator(const ProcessCapture& in, uint64_t* next_id, const DropCounts& drops,
                    std::shared_ptr<NameTable> names, IngestedEvents* consume)
      : in_(in),
        consume_(consume),
        str_(in.strings, names.get()),
        clock_(in.clock_syncs),
        handles_(in, str_, names.get()),
        next_id_(next_id),
        drops_(drops) {
    out_.names = std::move(names);
  }

  ProcessTrace Build() {
    out_.pid = in_.hello.pid();
    out_.host = in_.hello.host();
    out_.executable = in_.hello.executable();
    out_.command_line.assign(in_.hello.command_line().begin(), in_.hello.command_line().end());
    out_.job = in_.hello.job();
    out_.rank = in_.hello.has_rank() ? in_.hello.rank() : -1;
    out_.drops = drops_;
    out_.events_received = in_.events_received;
    out_.batches_missing = in_.batches_missing;
    // What a process that died made and never sent is counted (process_died) when its rings
    // file could be read: then it is not missing.
    out_.cut_off = in_.stream_closed && !in_.final && !in_.records_made_known;
    for (const IngestedModel& m : in_.models) out_.models.push_back(m.file);
    out_.notices = in_.notices;

    std::vector<const IngestedEvent*> ranges, calls, device;
    device.reserve(in_.events.size());
    for (const IngestedEvent& e : in_.events) {
      switch (e.kind) {
        case nrtprof::EVENT_RANGE:
          ranges.push_back(&e);
          break;
        case nrtprof::EVENT_API_CALL:
          if (e.polls_only && IsCompletionPoll(CallFunction(e.function, str_(e.name_iid).str()))) {
            AddPollTally(e);
          } else {
            calls.push_back(&e);
          }
          break;
        case nrtprof::EVENT_DEVICE_EXEC:
        case nrtprof::EVENT_DEVICE_OP:
        case nrtprof::EVENT_DEVICE_DMA:
          device.push_back(&e);
          break;
        default:
          break;  // ingest refuses other kinds
      }
    }
    BuildRanges(ranges);
    BuildCalls(calls);
    BuildDevice(device);
    ranges = calls = device = {};
    MatchDevice();
    NameModelFiles();
    NameUnnamedModels();
    NoteModelsWithoutFiles();
    AssignRanges();
    call_handles_ = {};
    name_channel_ = {};
    if (consume_ != nullptr) IngestedEvents().swap(*consume_);
    SortDevice();
    return std::move(out_);
  }

 private:
  uint64_t NextId() { return (*next_id_)++; }

  // A loaded model file takes the name its device events use (learnt by matching the load and
  // the executions of its handle), so its .neff and its device traces pair up by that name.
  void NameModelFiles() {
    std::unordered_map<uint64_t, Name> names;
    for (size_t i = 0; i < out_.calls.size(); ++i) {
      const uint64_t handle = call_handles_[i].model;
      if (handle != 0 && !out_.calls[i].model_name.empty()) {
        names.try_emplace(handle, out_.calls[i].model_name);
      }
    }
    for (size_t i = 0; i < out_.models.size(); ++i) {
      if (!out_.models[i].name.empty()) continue;
      auto it = names.find(in_.models[i].model_handle);
      if (it != names.end()) out_.models[i].name = std::string(it->second.view());
    }
  }

  // A runtime that names no model (its system trace has model ids, and a name only when it
  // knows one) leaves model files, their calls and executions unnamed after matching: each is
  // named by its file, as its .neff is ("model_<hash>"), so that device traces still pair up.
  void NameUnnamedModels() {
    std::unordered_map<uint64_t, Name> names;  // handle -> name
    for (size_t i = 0; i < out_.models.size(); ++i) {
      LoadedModelFile& m = out_.models[i];
      if (!m.name.empty() || m.bytes.empty() || (m.size != 0 && m.size != m.bytes.size())) {
        continue;
      }
      m.name = absl::StrCat("model_", ModelHash(m.bytes));
      names[in_.models[i].model_handle] = out_.names->Intern(m.name);
    }
    if (names.empty()) return;
    std::unordered_map<uint64_t, const ApiCall*> by_correlation;
    for (size_t i = 0; i < out_.calls.size(); ++i) {
      ApiCall& c = out_.calls[i];
      const uint64_t handle = call_handles_[i].model;
      if (c.model_name.empty() && handle != 0) {
        if (auto it = names.find(handle); it != names.end()) c.model_name = it->second;
      }
      by_correlation.emplace(c.correlation_id, &c);
    }
    for (DeviceEvent& d : out_.device) {
      if (d.kind != DeviceEventKind::kExecution || !d.model_name.empty()) continue;
      auto it = by_correlation.find(d.correlation_id);
      if (d.correlation_id != 0 && it != by_correlation.end()) d.model_name = it->second->model_name;
    }
  }

  // A device trace pairs with its model's .neff by the model's name (artifact_writer.h):
  // executions of a model that has no whole file here get a device trace of their own, and the
  // capture says why it has no .neff.
  void NoteModelsWithoutFiles() {
    // The metrics' and top's copies leave the files out on purpose, and write no artifacts.
    if (in_.model_bytes_left_out) return;
    std::set<absl::string_view> whole, too_big;
    for (const LoadedModelFile& m : out_.models) {
      if (m.name.empty()) continue;
      const bool is_whole = !m.bytes.empty() && (m.size == 0 || m.size == m.bytes.size());
      (is_whole ? whole : too_big).insert(m.name);
    }
    std::set<absl::string_view> unsent, unseen;
    for (const DeviceEvent& d : out_.device) {
      if (d.kind != DeviceEventKind::kExecution || d.model_name.empty()) continue;
      const absl::string_view name = d.model_name;
      if (whole.count(name) != 0) continue;
      (too_big.count(name) != 0 ? unsent : unseen).insert(name);
    }
    auto list = [](const std::set<absl::string_view>& names) {
      return absl::StrCat(names.size(), names.size() == 1 ? " model (" : " models (",
                          absl::StrJoin(names, ", "), ")");
    };
    if (!unsent.empty()) {
      out_.notices.push_back(absl::StrCat(
          "model files of ", list(unsent),
          ": over the shim's size limit (NRTPROF_MAX_MODEL_BYTES), so their device traces "
          "have no .neff beside them"));
    }
    if (!unseen.empty()) {
      out_.notices.push_back(absl::StrCat(
          "model files of ", list(unseen),
          ": not received, or no call in the window tied them to a loaded file (their "
          "executions here were called before it), so their device traces have no .neff beside "
          "them"));
    }
  }

  // Ranges nest per thread; parent and depth come from containment, not from the wire (a
  // range whose parent was dropped still nests under the one that is there).
  void BuildRanges(std::vector<const IngestedEvent*>& ranges) {
    // Sorted by their keys, copied beside them: a comparison through the pointers read two
    // events far apart. (The comparisons, and so the order, are the same.)
    struct Key {
      uint32_t tid;
      uint32_t depth;
      uint64_t start_ns;
      uint64_t duration_ns;
      const IngestedEvent* e;
    };
    std::vector<Key> keys;
    keys.reserve(ranges.size());
    for (const IngestedEvent* e : ranges) {
      keys.push_back({e->tid, e->depth, e->start_ns, e->duration_ns, e});
    }
    std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
      if (a.tid != b.tid) return a.tid < b.tid;
      if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
      if (a.duration_ns != b.duration_ns) return a.duration_ns > b.duration_ns;
      return a.depth < b.depth;
    });
    for (size_t k = 0; k < keys.size(); ++k) ranges[k] = keys[k].e;
    keys = {};
    std::vector<size_t> open;  // indices in out_.ranges, outermost first
    out_.ranges.reserve(ranges.size());
    for (const IngestedEvent* e : ranges) {
      if (!out_.ranges.empty() && out_.ranges.back().tid != e->tid) open.clear();
      const uint64_t end = End(e->start_ns, e->duration_ns);
      while (!open.empty() &&
             End(out_.ranges[open.back()].start_ns, out_.ranges[open.back()].duration_ns) < end) {
        open.pop_back();
      }
      RangeEvent r;
      r.id = NextId();
      r.name = str_(e->name_iid);
      r.tid = e->tid;
      r.start_ns = e->start_ns;
      r.duration_ns = e->duration_ns;
      r.depth = static_cast<uint32_t>(open.size());
      r.parent_range = open.empty() ? 0 : out_.ranges[open.back()].id;
      open.push_back(out_.ranges.size());
      out_.ranges.push_back(std::move(r));
    }
  }

  // A thread's polls after its last recorded one (Event.polls_only): counted, not a call.
  void AddPollTally(const IngestedEvent& e) {
    PollTally& t = out_.poll_tallies.emplace_back();
    t.name = str_(e.name_iid);
    t.function = CallFunction(e.function, t.name.str());
    t.tid = e.tid;
    t.time_ns = e.start_ns;
    t.polls = e.repeat;  // IngestedEvent keeps Event.polls there
  }

  void BuildCalls(std::vector<const IngestedEvent*>& calls) {
    // Sorted by their keys, copied beside them, as ranges are.
    struct Key {
      uint64_t start_ns;
      uint64_t correlation_id;
      const IngestedEvent* e;
    };
    std::vector<Key> keys;
    keys.reserve(calls.size());
    for (const IngestedEvent* e : calls) keys.push_back({e->start_ns, e->correlation_id, e});
    std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
      if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
      return a.correlation_id < b.correlation_id;
    });
    for (size_t k = 0; k < keys.size(); ++k) calls[k] = keys[k].e;
    keys = {};
    out_.calls.reserve(calls.size());
    call_handles_.reserve(calls.size());
    for (const IngestedEvent* e : calls) {
      ApiCall& c = out_.calls.emplace_back();  // filled in place, as device events are
      c.correlation_id = NextId();
      c.name = str_(e->name_iid);
      c.tid = e->tid;
      c.start_ns = e->start_ns;
      c.duration_ns = e->duration_ns;
      c.status = e->status;
      c.bytes = e->bytes;
      c.nc_idx = e->nc_idx;
      c.repeat = e->repeat;
      c.nrta_seq = e->nrta_seq;
      if (e->model_name_iid != 0) c.model_name = str_(e->model_name_iid);
      const nrtprof::ApiFunction f = CallFunction(e->function, c.name);
      c.function = f;
      if (IsCompletionPoll(f)) {
        c.polls = e->repeat;  // IngestedEvent keeps Event.polls there
        c.repeat = 0;
      }
      if (e->call.model != 0 && !IsModelLoad(f)) {
        int32_t nc = -1;
        handles_.Model(e->call.model, e->start_ns, str_, &c.model_name, &nc);
        if (c.nc_idx < 0) c.nc_idx = nc;
      } else if (c.model_name.empty() && e->call.model != 0 && e->status == kStatusSuccess) {
        int32_t nc = -1;
        handles_.Model(e->call.model, End(e->start_ns, e->duration_ns), str_, &c.model_name, &nc);
      }
      if (e->tensor_name_iid != 0) c.tensor_name = str_(e->tensor_name_iid);
      if (e->call.tensor != 0 && f != nrtprof::API_NRT_TENSOR_ALLOCATE) {
        const TensorState t = handles_.Tensor(e->call.tensor, e->start_ns, str_);
        if (c.tensor_name.empty() && t.name_iid != 0) c.tensor_name = str_(t.name_iid);
        if (c.nc_idx < 0 && t.device) c.nc_idx = t.nc_idx;
      }
      if (e->stack_iid != 0) {
        auto stack = in_.stacks.find(e->stack_iid);
        if (stack != in_.stacks.end()) {
          for (uint32_t frame : stack->second) c.stack.push_back(str_(frame));
        }
      }
      call_handles_.push_back(e->call);
    }
  }

  void BuildDevice(const std::vector<const IngestedEvent*>& device) {
    // Wire device_id -> DeviceEvent id, sorted by wire id (for an id sent twice, the later
    // event is the one named, as a map overwritten in order would say).
    std::vector<std::pair<uint64_t, uint64_t>> trace_id;
    std::vector<uint64_t> wire_parent;
    out_.device.reserve(device.size());
    name_channel_.reserve(device.size());
    wire_parent.reserve(device.size());
    trace_id.reserve(device.size());
    first_device_id_ = *next_id_;
    ClockMap::Cursor clock_cursor;
    std::vector<size_t> by_exec_id;  // work that names its execution by exec_id only
    for (const IngestedEvent* e : device) {
      uint64_t start = e->start_ns;
      if (!e->host_clock && !clock_.ToHost(e->nc_idx, e->start_ns, &start, &clock_cursor)) {
        ++out_.drops.no_clock_sync;
        ++out_.drops.by_lane.hardware;
        continue;
      }
      // Filled in place: moving a 200-byte event with four strings into the vector was a good
      // part of this loop.
      DeviceEvent& d = out_.device.emplace_back();
      d.id = NextId();
      d.kind = e->kind == nrtprof::EVENT_DEVICE_EXEC ? DeviceEventKind::kExecution
               : e->kind == nrtprof::EVENT_DEVICE_OP ? DeviceEventKind::kEngineOp
                                                     : DeviceEventKind::kDma;
      d.name = str_(e->name_iid);
      const uint32_t traits = str_.Traits(e->name_iid);
      name_channel_.push_back(static_cast<uint8_t>(traits & kChannelsOfName));
      // A collective's events come as executions named as the runtime names them (so that a
      // daemon older than them draws them, and refuses no batch).
      if (d.kind == DeviceEventKind::kExecution && (traits & kCollectiveName) != 0) {
        d.kind = DeviceEventKind::kCollective;
        d.worker_gid = e->worker_gid;
      }
      d.nc_idx = e->nc_idx < 0 ? 0 : e->nc_idx;
      d.start_ns = start;
      d.duration_ns = e->duration_ns;
      d.model_name = str_(e->model_name_iid);
      d.engine = str_(e->engine_iid);
      d.exec_id = e->device.exec;
      d.bytes = e->bytes;
      d.tensor_name = str_(e->tensor_name_iid);
      d.submitting_tid = e->tid;
      d.nrta_seq = e->nrta_seq;
      if (e->device.id != 0) trace_id.emplace_back(e->device.id, d.id);
      wire_parent.push_back(e->device.parent);
      if (d.kind != DeviceEventKind::kExecution && e->device.parent == 0 && d.exec_id != 0) {
        by_exec_id.push_back(out_.device.size() - 1);
      }
      any_sequence_ = any_sequence_ || d.nrta_seq != 0;
    }
    // Trace ids grow with the index, so a stable sort by wire id keeps the later of equal ids
    // last; the lookup takes the last of a run.
    auto by_wire_id = [](const std::pair<uint64_t, uint64_t>& a,
                         const std::pair<uint64_t, uint64_t>& b) { return a.first < b.first; };
    if (!std::is_sorted(trace_id.begin(), trace_id.end(), by_wire_id)) {
      std::stable_sort(trace_id.begin(), trace_id.end(), by_wire_id);
    }
    // Children whose execution was lost keep parent 0 and stay uncorrelated: they are not
    // host-initiated, whatever their name says. An execution's work comes together: the parent
    // found for one child is looked up once for the children after it.
    // The next execution's is then a little further on: searched for from the last one found.
    uint64_t last_wire_parent = 0, last_parent = 0;
    size_t after = 0;
    for (size_t i = 0; i < out_.device.size(); ++i) {
      if (wire_parent[i] == 0) continue;
      orphan_or_child_.push_back(i);
      if (wire_parent[i] != last_wire_parent) {
        after = UpperBoundNear(trace_id, wire_parent[i], after);
        last_wire_parent = wire_parent[i];
        last_parent = after != 0 && trace_id[after - 1].first == wire_parent[i]
                          ? trace_id[after - 1].second
                          : 0;
      }
      out_.device[i].parent = last_parent;
    }
    LinkByExecId(by_exec_id);
  }

  // Work from the runtime's device profile (engine ops, an execution's I/O DMA) names its
  // execution by core and exec_id, not by device_id: the shim reads the profile apart from the
  // system trace, often before the execution's device_exec reaches it, so only here are both
  // at hand. Each goes into the execution of its core with its exec_id whose span is nearest
  // its start (an exec_id may come again after nrt_close and nrt_init); without one it stays
  // an orphan, as a child whose execution was lost.
  // `children`: the indices of the work with an exec_id and no wire parent, in order.
  void LinkByExecId(const std::vector<size_t>& children) {
    if (children.empty()) return;
    std::map<std::pair<int32_t, uint64_t>, std::vector<size_t>> executions;
    for (size_t i = 0; i < out_.device.size(); ++i) {
      const DeviceEvent& d = out_.device[i];
      if (d.kind == DeviceEventKind::kExecution) executions[{d.nc_idx, d.exec_id}].push_back(i);
    }
    auto distance = [](const DeviceEvent& x, uint64_t t) -> uint64_t {
      if (t < x.start_ns) return x.start_ns - t;
      const uint64_t end = x.start_ns + x.duration_ns;
      return t > end ? t - end : 0;
    };
    for (size_t i : children) {
      DeviceEvent& child = out_.device[i];
      orphan_or_child_.push_back(i);
      auto candidates = executions.find({child.nc_idx, child.exec_id});
      if (candidates == executions.end()) continue;
      const size_t best = *std::min_element(
          candidates->second.begin(), candidates->second.end(), [&](size_t a, size_t b) {
            return distance(out_.device[a], child.start_ns) <
                   distance(out_.device[b], child.start_ns);
          });
      child.parent = out_.device[best].id;
    }
  }

  Expectation Expect(size_t call_index) const {
    const ApiCall& c = out_.calls[call_index];
    const IngestedEvent::CallHandles& handles = call_handles_[call_index];
    Expectation x;
    x.call = call_index;
    x.nc_idx = c.nc_idx;
    const bool ok = c.status == kStatusSuccess;
    auto tensor = [&](uint64_t handle) { return handles_.Tensor(handle, c.start_ns, str_); };
    auto add_name = [&](Name name) {
      if (!name.empty()) x.names.push_back(name);
    };
    // A transfer on a device tensor: exactly one DMA when the placement and size are known.
    auto transfer = [&](uint32_t channel) {
      if (!ok) return;
      const TensorState t = tensor(handles.tensor);
      if (t.known && !t.device) return;
      x.channels = channel;
      x.capacity = 1;
      x.exact = t.known && c.bytes != 0;
      add_name(c.tensor_name);
    };
    const auto function = static_cast<nrtprof::ApiFunction>(c.function);
    switch (function) {
      case nrtprof::API_NRT_EXECUTE:
      case nrtprof::API_NRT_EXECUTE_REPEAT: {
        const uint64_t repeat = std::max<uint32_t>(c.repeat, 1);
        if (ok) {
          x.channels = kExec;
          x.exact = true;
          x.capacity = repeat;
        } else if (c.status == kStatusCompletedWithNumErr || c.status == kStatusCompletedWithErr) {
          x.channels = kExec;  // ran, but maybe stopped before `repeat` runs
          x.capacity = repeat;
        }
        add_name(c.model_name);
        break;
      }
      case nrtprof::API_NRT_TENSOR_WRITE:
        transfer(kH2d);
        break;
      case nrtprof::API_NRT_TENSOR_READ:
        transfer(kD2h);
        break;
      case nrtprof::API_NRT_TENSOR_MEMSET:
        transfer(kMemset);
        break;
      case nrtprof::API_NRT_TENSOR_WRITE_BATCH:
      case nrtprof::API_NRT_TENSOR_READ_BATCH:
        if (ok) {
          x.channels = function == nrtprof::API_NRT_TENSOR_WRITE_BATCH ? kH2d : kD2h;
          x.capacity = std::numeric_limits<uint64_t>::max();  // one DMA per batch entry
        }
        break;
      case nrtprof::API_NRT_TENSOR_COPY: {
        if (!ok) return x;
        const TensorState from = tensor(handles.tensor), to = tensor(handles.tensor2);
        if (from.known && to.known) {
          x.exact = c.bytes != 0;
          x.channels = from.device && to.device ? kD2d
                       : to.device              ? kH2d
                       : from.device            ? kD2h
                                                : kNone;
        } else {
          x.channels = (!from.known || from.device ? (kD2d | kD2h) : 0) |
                       (!to.known || to.device ? (kD2d | kH2d) : 0);
        }
        x.capacity = x.channels == kNone ? 0 : 1;
        add_name(c.tensor_name);
        if (from.name_iid != 0) add_name(str_(from.name_iid));
        if (to.name_iid != 0) add_name(str_(to.name_iid));
        break;
      }
      case nrtprof::API_NRT_LOAD:
      case nrtprof::API_NRT_LOAD_COLLECTIVES:
        if (ok) {
          x.channels = kModelLoad;
          x.capacity = 1;
          x.exact = true;
          add_name(c.model_name);
        }
        break;
      default:
        break;
    }
    if (x.capacity == 0) x.channels = kNone;
    return x;
  }

  // The device event's names that must agree with the call's, when both are known.
  bool Compatible(const Expectation& x, const DeviceEvent& d) const {
    if (x.nc_idx >= 0 && d.nc_idx != x.nc_idx) return false;
    const Name name = d.kind == DeviceEventKind::kExecution ? d.model_name : d.tensor_name;
    if (name.empty() || x.names.empty()) return true;
    return std::find(x.names.begin(), x.names.end(), name) != x.names.end();
  }

  // An async request's work carries its nrta_seq_t, and so does the call that scheduled it:
  // the pair is certain, whatever thread, order or time says (many requests are in flight at
  // once, and the runtime's threads run them). Work whose schedule call is not in the capture
  // stays uncorrelated. Marks the events it matched.
  //
  // A number is unique only while the runtime is up: the queues count from 1 again after
  // nrt_close and nrt_init. Of the calls with the event's number, the event takes the latest
  // that began before it (within the clocks' error).
  void MatchBySequence(std::vector<bool>* matched) {
    if (!any_sequence_) return;  // no device event has one
    // nrta_seq -> the calls that scheduled it, in start order (calls are sorted by start).
    std::unordered_map<uint64_t, absl::InlinedVector<size_t, 1>> scheduled;
    for (size_t i = 0; i < out_.calls.size(); ++i) {
      const ApiCall& c = out_.calls[i];
      if (c.nrta_seq != 0 && c.status == kStatusSuccess && IsAsyncSchedule(c.function)) {
        scheduled[c.nrta_seq].push_back(i);
      }
    }
    for (size_t i = 0; i < out_.device.size(); ++i) {
      DeviceEvent& d = out_.device[i];
      if (d.nrta_seq == 0 || d.parent != 0) continue;
      (*matched)[i] = true;  // never paired by thread and time, found or not
      auto calls = scheduled.find(d.nrta_seq);
      if (calls == scheduled.end()) continue;
      const auto& in_order = calls->second;
      auto after = std::find_if(in_order.begin(), in_order.end(), [&](size_t c) {
        return out_.calls[c].start_ns > d.start_ns + kCauseSlackNs;
      });
      if (after == in_order.begin()) continue;  // every such call came after it
      Expectation x;
      x.call = *(after - 1);
      Assign(x, i);
    }
  }

  void MatchDevice() {
    std::vector<bool> by_sequence(out_.device.size(), false);
    MatchBySequence(&by_sequence);
    // Per submitting thread: the expectations of its calls and its top-level device events.
    // Threads are few, and their events come in runs: each has a slot, found by a short scan
    // when the thread changes. Each thread is matched apart (its calls and events are no
    // other's), in any order.
    struct Thread {
      uint32_t tid;
      std::vector<Expectation> calls;
      std::vector<DeviceRef> refs;
    };
    std::vector<Thread> threads;
    size_t last = 0;
    auto thread = [&](uint32_t tid) -> Thread& {
      if (last < threads.size() && threads[last].tid == tid) return threads[last];
      for (last = 0; last < threads.size() && threads[last].tid != tid; ++last) {
      }
      if (last == threads.size()) threads.push_back({tid, {}, {}});
      return threads[last];
    };
    for (size_t i = 0; i < out_.calls.size(); ++i) {
      Expectation x = Expect(i);
      if (x.channels != kNone) thread(out_.calls[i].tid).calls.push_back(std::move(x));
    }
    std::vector<bool> is_child(out_.device.size(), false);
    for (size_t i : orphan_or_child_) is_child[i] = true;
    for (size_t i = 0; i < out_.device.size(); ++i) {
      const DeviceEvent& d = out_.device[i];
      if (is_child[i] || by_sequence[i]) continue;
      const uint32_t channel = d.kind == DeviceEventKind::kExecution ? uint32_t{kExec}
                               : d.kind == DeviceEventKind::kDma     ? uint32_t{name_channel_[i]}
                                                                     : uint32_t{kNone};
      if (channel != kNone) thread(d.submitting_tid).refs.push_back({i, channel});
    }
    constexpr size_t kChannels = std::size(kAllChannels);
    std::vector<size_t> events[kChannels];      // indices in out_.device
    std::vector<size_t> candidates[kChannels];  // indices in the thread's calls
    for (Thread& t : threads) {
      std::vector<DeviceRef>& refs = t.refs;
      if (refs.empty()) continue;
      auto by_start = [&](const DeviceRef& a, const DeviceRef& b) {
        const DeviceEvent& x = out_.device[a.index];
        const DeviceEvent& y = out_.device[b.index];
        return x.start_ns != y.start_ns ? x.start_ns < y.start_ns : x.id < y.id;
      };
      // A thread that used one core has them in order already.
      if (!std::is_sorted(refs.begin(), refs.end(), by_start)) {
        std::sort(refs.begin(), refs.end(), by_start);
      }
      const std::vector<Expectation>& calls = t.calls;
      std::vector<uint64_t> remaining(calls.size());
      for (size_t i = 0; i < calls.size(); ++i) remaining[i] = calls[i].capacity;
      // Each channel's events and the calls that may have caused them, in one pass each.
      for (size_t k = 0; k < kChannels; ++k) {
        events[k].clear();
        candidates[k].clear();
      }
      for (const DeviceRef& r : refs) events[ChannelIndex(r.channel)].push_back(r.index);
      for (size_t i = 0; i < calls.size(); ++i) {
        for (size_t k = 0; k < kChannels; ++k) {
          if (calls[i].channels & kAllChannels[k]) candidates[k].push_back(i);
        }
      }
      for (size_t k = 0; k < kChannels; ++k) {
        if (events[k].empty() || candidates[k].empty()) continue;
        if (!MatchInOrder(calls, candidates[k], events[k], &remaining)) {
          MatchByContainment(calls, candidates[k], events[k], &remaining);
        }
      }
    }
    // Work inside an execution belongs to the execution's call: the one it was matched to
    // above. Device events are still in the order BuildDevice numbered them, so the event with
    // id `first_device_id_ + k` is at k. Only events without a parent were matched, and this
    // pass changes only events with one: work inside work takes nothing, whatever the order.
    // Every correlation id is final once it is past: the uncorrelated are counted on the way.
    for (DeviceEvent& d : out_.device) {
      if (d.parent >= first_device_id_ && d.parent - first_device_id_ < out_.device.size()) {
        const DeviceEvent& parent = out_.device[d.parent - first_device_id_];
        if (parent.id == d.parent && parent.parent == 0 && parent.correlation_id != 0) {
          d.correlation_id = parent.correlation_id;
        }
      }
      if (d.correlation_id == 0) ++out_.device_uncorrelated;
    }
  }

  void Assign(const Expectation& x, size_t event) {
    DeviceEvent& d = out_.device[event];
    ApiCall& c = out_.calls[x.call];
    d.correlation_id = c.correlation_id;
    if (c.nc_idx < 0) c.nc_idx = d.nc_idx;
    if (d.kind == DeviceEventKind::kExecution && c.model_name.empty()) c.model_name = d.model_name;
    const bool model_load = name_channel_[event] == kModelLoad;  // named "dma_model_load"
    if (model_load && c.model_name.empty()) c.model_name = d.tensor_name;
    // The runtime's system trace names neither an execution's model nor a load's (it has
    // model ids only): the call they belong to does.
    if (d.kind == DeviceEventKind::kExecution && d.model_name.empty()) d.model_name = c.model_name;
    if (model_load && d.tensor_name.empty()) d.tensor_name = c.model_name;
  }

  // The common case: every call's outcome is certain and the counts agree, so the k-th device
  // event of the thread is the k-th one its calls caused -- unless time says otherwise. Counts
  // can agree by chance when a window cuts both ends: its first events were caused by calls
  // before it, and the device events of its last calls have not come yet. Pairing in order
  // then gives every call the event of the call before it (each execution named by the
  // model before it: issue 36). An effect never starts before its cause: a pairing in which an
  // event starts earlier than its call, by more than the clocks' error, is refused, and
  // containment decides. (Only the start: where the device runs ahead of the host, as the
  // simulator without time scale does, an execution may well outlast its call.)
  bool MatchInOrder(const std::vector<Expectation>& calls, const std::vector<size_t>& candidates,
                    const std::vector<size_t>& events, std::vector<uint64_t>* remaining) {
    uint64_t expected = 0;
    for (size_t i : candidates) {
      const Expectation& x = calls[i];
      if (!x.exact || (*remaining)[i] != x.capacity) return false;
      expected += x.capacity;
    }
    if (expected != events.size()) return false;
    std::vector<std::pair<size_t, size_t>> pairs;  // (call, event)
    pairs.reserve(events.size());
    size_t next = 0;
    for (size_t i : candidates) {
      const uint64_t call_start = out_.calls[calls[i].call].start_ns;
      for (uint64_t k = 0; k < calls[i].capacity; ++k, ++next) {
        const DeviceEvent& d = out_.device[events[next]];
        if (!Compatible(calls[i], d)) return false;
        if (d.start_ns + kCauseSlackNs < call_start) return false;
        pairs.push_back({i, events[next]});
      }
    }
    for (auto [i, event] : pairs) {
      Assign(calls[i], event);
      (*remaining)[i] = 0;
    }
    return true;
  }

  // Events were lost or outcomes are uncertain: an event goes to the one call whose span
  // holds it (exactly, or else within the slack); none or several such calls: uncorrelated.
  // Exact holds are settled first, for every event, and only then the slack: taken in event
  // order, an event outside every call (its call was before the window) took the window's first
  // call within the slack, and each event after it then took the call after its own, to the
  // end of the window (issue 36). `candidates` are in call start order; only calls starting
  // before the event's start plus the slack and ending after its end minus the slack can hold
  // it, found by binary search and a backward scan bounded by the running maximum of the
  // calls' ends.
  void MatchByContainment(const std::vector<Expectation>& calls,
                          const std::vector<size_t>& candidates, const std::vector<size_t>& events,
                          std::vector<uint64_t>* remaining) {
    std::vector<uint64_t> starts, max_end;  // per candidate
    for (size_t i : candidates) {
      const ApiCall& c = out_.calls[calls[i].call];
      starts.push_back(c.start_ns);
      const uint64_t end = End(c.start_ns, c.duration_ns);
      max_end.push_back(max_end.empty() ? end : std::max(max_end.back(), end));
    }
    std::vector<size_t> unheld;  // events no call holds exactly
    std::vector<size_t> chosen;
    for (bool exact : {true, false}) {
      for (size_t event : exact ? events : unheld) {
        const DeviceEvent& d = out_.device[event];
        const uint64_t d_end = End(d.start_ns, d.duration_ns);
        chosen.clear();
        bool held = false;
        size_t k = std::upper_bound(starts.begin(), starts.end(),
                                    d.start_ns + kContainmentSlackNs) -
                   starts.begin();
        while (k-- > 0 && max_end[k] + kContainmentSlackNs >= d_end) {
          const size_t i = candidates[k];
          const ApiCall& c = out_.calls[calls[i].call];
          const uint64_t c_end = End(c.start_ns, c.duration_ns);
          const bool holds = d.start_ns >= c.start_ns && d_end <= c_end;
          held = held || holds;
          if ((*remaining)[i] == 0 || !Compatible(calls[i], d)) continue;
          if (exact ? holds : d_end <= c_end + kContainmentSlackNs) chosen.push_back(i);
        }
        if (exact && !held) unheld.push_back(event);
        if (chosen.size() != 1) continue;
        Assign(calls[chosen[0]], event);
        --(*remaining)[chosen[0]];
      }
    }
  }

  // Each call's range: the innermost range on its thread that contains it.
  void AssignRanges() { AssignCallRanges(out_.ranges, &out_.calls); }

  // The Trace's order of device events: by core, then start, executions before their work,
  // longer first, then id (unique, so the order is total). The order is found first, then the
  // events are moved once each into place (sorting the 200-byte events themselves was a third
  // of the correlator's time).
  static bool DeviceBefore(const DeviceEvent& a, const DeviceEvent& b) {
    if (a.nc_idx != b.nc_idx) return a.nc_idx < b.nc_idx;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    const bool a_child = a.parent != 0, b_child = b.parent != 0;
    if (a_child != b_child) return !a_child;
    if (a.duration_ns != b.duration_ns) return a.duration_ns > b.duration_ns;
    return a.id < b.id;
  }

  void SortDevice() {
    CaptureVector<DeviceEvent>& device = out_.device;
    const size_t n = device.size();
    // Position k takes the event at order[k]. The events come per core in time order, tick
    // after tick: then each core's events are in order already, and a stable pass by core
    // (counting, cores are few) is the whole sort. Otherwise, a sort.
    std::vector<size_t> order;
    if (!OrderByCore(&order)) {
      order.resize(n);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return DeviceBefore(device[a], device[b]); });
    }
    bool in_order = true;
    for (size_t k = 0; k < n && in_order; ++k) in_order = order[k] == k;
    if (in_order) return;
    // Gathered in order, the events are read in long runs and written in order (following the
    // permutation's cycles in place read one at random for each, a third slower). The copy
    // takes the pages of the raw events, freed by now when they may be (Build).
    CaptureVector<DeviceEvent> sorted;
    sorted.reserve(n);
    for (size_t i : order) sorted.push_back(std::move(device[i]));
    device.swap(sorted);
  }

  // When every core's events are in order as they are, fills *order with the sorted order
  // (stable by core) and returns true.
  bool OrderByCore(std::vector<size_t>* order) const {
    const CaptureVector<DeviceEvent>& device = out_.device;
    struct Core {
      int32_t nc_idx;
      size_t last;   // its latest event so far
      size_t count;  // then: where its events begin in the order
    };
    std::vector<Core> cores;  // in order of first appearance
    size_t at = 0;            // the core of the event before
    for (size_t i = 0; i < device.size(); ++i) {
      const int32_t nc = device[i].nc_idx;
      if (cores.empty() || cores[at].nc_idx != nc) {
        at = 0;
        while (at < cores.size() && cores[at].nc_idx != nc) ++at;
        if (at == cores.size()) {
          if (cores.size() == 64) return false;  // not few
          cores.push_back({nc, i, 0});
        }
      }
      Core& core = cores[at];
      if (core.count != 0 && DeviceBefore(device[i], device[core.last])) return false;
      core.last = i;
      ++core.count;
    }
    std::sort(cores.begin(), cores.end(),
              [](const Core& a, const Core& b) { return a.nc_idx < b.nc_idx; });
    size_t begin = 0;
    for (Core& core : cores) {
      const size_t count = core.count;
      core.count = begin;  // from here on: the next position for its events
      begin += count;
    }
    order->resize(device.size());
    for (size_t i = 0; i < device.size(); ++i) {
      const int32_t nc = device[i].nc_idx;
      if (cores[at].nc_idx != nc) {
        at = static_cast<size_t>(
            std::lower_bound(cores.begin(), cores.end(), nc,
                             [](const Core& c, int32_t key) { return c.nc_idx < key; }) -
            cores.begin());
      }
      (*order)[cores[at].count++] = i;
    }
    return true;
  }

  const ProcessCapture& in_;
  IngestedEvents* const consume_;
  const Strings str_;
  const ClockMap clock_;
  const HandleHistory handles_;
  uint64_t* const next_id_;
  const DropCounts drops_;
  ProcessTrace out_;
  // Parallel to out_.calls: each one's handles (copied: its event is far, and soon freed).
  std::vector<IngestedEvent::CallHandles> call_handles_;
  std::vector<size_t> orphan_or_child_;             // device events with a wire parent
  uint64_t first_device_id_ = 0;                    // the id of out_.device[0] (BuildDevice)
  // Parallel to out_.device until SortDevice: DmaChannel of each event's name.
  std::vector<uint8_t> name_channel_;
  bool any_sequence_ = false;  // a device event has an nrta_seq
};

}  // namespace

ProcessTrace CorrelateProcess(const ProcessCapture& in, uint64_t* next_id,
                              const DropCounts& drops, std::shared_ptr<NameTable> names,
                              IngestedEvents* consume) {
  return ProcessCorrelator(in, next_id, drops, std::move(names), consume).Build();
}

}  // namespace nrtprof::daemon
