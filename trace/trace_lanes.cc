#include "trace/trace_lanes.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trace/api_function.h"
#include "trace/id_index.h"

namespace nrtprof::daemon {
namespace {

// Declared parent chains longer than this are treated as broken (a cycle in bad input).
constexpr int kMaxDeclaredDepth = 1024;

uint64_t EndOf(uint64_t start, uint64_t duration) {
  return duration > std::numeric_limits<uint64_t>::max() - start
             ? std::numeric_limits<uint64_t>::max()
             : start + duration;
}

SliceArg StringArg(const char* name, std::string_view value) {
  SliceArg a;
  a.name = name;
  a.type = SliceArg::Type::kString;
  a.string_value = value;
  return a;
}

SliceArg UintArg(const char* name, uint64_t value) {
  SliceArg a;
  a.name = name;
  a.type = SliceArg::Type::kUint;
  a.uint_value = value;
  return a;
}

// Appends arguments to a slice's list, each written in place in the vector (built apart and
// copied in, an argument's 48 bytes were read back before their stores had landed: a stall
// for each, a third of SliceArgs' time).
class ArgList {
 public:
  explicit ArgList(std::vector<SliceArg>* args) : args_(args) {}
  void String(const char* name, std::string_view value) {
    SliceArg& a = args_->emplace_back();
    a.name = name;
    a.string_value = value;
  }
  void Uint(const char* name, uint64_t value) {
    SliceArg& a = args_->emplace_back();
    a.name = name;
    a.type = SliceArg::Type::kUint;
    a.uint_value = value;
  }
  void Int(const char* name, int64_t value) {
    SliceArg& a = args_->emplace_back();
    a.name = name;
    a.type = SliceArg::Type::kInt;
    a.int_value = value;
  }

 private:
  std::vector<SliceArg>* args_;
};

void CallArgs(const ApiCall& c, ArgList args, std::string* text) {
  args.Int("status", c.status);
  args.Uint("correlation_id", c.correlation_id);
  if (c.bytes != 0) args.Uint("bytes", c.bytes);
  if (!c.model_name.empty()) args.String("model", c.model_name);
  if (!c.tensor_name.empty()) args.String("tensor", c.tensor_name);
  if (c.nc_idx >= 0) args.Int("nc", c.nc_idx);
  if (c.repeat != 0) args.Uint("repeat", c.repeat);
  // The async API: the request the call scheduled, polled or registered, whole and split as
  // the runtime packs it (the XU queue's id above, the request's number in the queue below).
  if (c.nrta_seq != 0) {
    args.Uint("nrta_seq", c.nrta_seq);
    args.Uint("queue", c.nrta_seq >> kNrtaQueueShift);
    args.Uint("seq", c.nrta_seq & kNrtaSeqMask);
  }
  if (IsCompletionPoll(c.function)) args.Uint("polls", c.polls);
  // Innermost frame first, as a call site reads: "f <- caller <- caller's caller".
  if (!c.stack.empty()) {
    *text = absl::StrJoin(c.stack, " <- ");
    args.String("stack", *text);
  }
}

// A collective's events (barrier, running) say the collective, its bytes and worker_gid instead
// of a model and exec_id. Work inside an execution (parent != 0) shares the execution's model, correlation id and
// submitting thread: those are on the execution's slice only. An engine op is drawn inside its
// execution, so its exec_id is left out too; a DMA sits on another track and keeps its exec_id
// to say which execution it served. An async request's work says its nrta_seq and, when its
// schedule call `scheduled_by` is known, its queue wait: from the call's return to the start
// on the device (0 if the clocks put the start first).
void DeviceArgs(const DeviceEvent& e, const ApiCall* scheduled_by, ArgList args) {
  const bool child = e.parent != 0;
  const bool dma = e.kind == DeviceEventKind::kDma;
  if (e.kind == DeviceEventKind::kCollective) {
    // A collective's barrier or running: which collective, its size, the rank's core.
    if (!e.model_name.empty()) args.String("collective", e.model_name);
    args.Uint("bytes", e.bytes);
    args.Int("worker_gid", e.worker_gid);
  } else {
    if (!child && !e.model_name.empty()) args.String("model", e.model_name);
    if (dma ? e.exec_id != 0 : !child) args.Uint("exec_id", e.exec_id);
  }
  if (!e.engine.empty()) args.String("engine", e.engine);
  if (dma) args.Uint("bytes", e.bytes);
  if (!e.tensor_name.empty()) args.String("tensor", e.tensor_name);
  if (!child && e.correlation_id != 0) args.Uint("correlation_id", e.correlation_id);
  if (!child && e.submitting_tid != 0) args.Uint("submitting_tid", e.submitting_tid);
  if (!child && e.nrta_seq != 0) {
    args.Uint("nrta_seq", e.nrta_seq);
    // A collective's running waited in its barrier, the slice before it: no queue wait.
    if (scheduled_by != nullptr &&
        !(e.kind == DeviceEventKind::kCollective && e.name == kCcRunning)) {
      const uint64_t returned = EndOf(scheduled_by->start_ns, scheduled_by->duration_ns);
      args.Uint("queue_wait_ns", e.start_ns > returned ? e.start_ns - returned : 0);
    }
  }
}

// One lane as it is filled: its slices in the order their events come (name and source set,
// times not yet), each one's raw interval, and where to record each one's final address.
struct LaneFill {
  Lane* lane = nullptr;
  std::vector<NestInterval> intervals;
  CaptureVector<LaneSlice**> back_pointers;

  void Reserve(size_t n) {
    lane->slices.reserve(n);
    intervals.reserve(n);
    back_pointers.reserve(n);
  }
  void Add(const NestInterval& interval, Name name, const ApiCall* call, const DeviceEvent* device,
           LaneSlice** back_pointer) {
    LaneSlice& s = lane->slices.emplace_back();
    s.name = name;
    s.call = call;
    s.device = device;
    intervals.push_back(interval);
    back_pointers.push_back(back_pointer);
  }
  // Nests the slices (NestIntervals), puts them in begin order and records their addresses.
  // The lane's slices vector must not grow afterwards.
  void Nest() {
    const std::vector<size_t> order = NestIntervals(&intervals);
    CaptureVector<LaneSlice>& slices = lane->slices;
    size_t k = 0;
    while (k < order.size() && order[k] == k) ++k;
    if (k < order.size()) {  // out of begin order as they came (rare): move them
      CaptureVector<LaneSlice> sorted;
      sorted.reserve(slices.size());
      for (size_t i : order) sorted.push_back(std::move(slices[i]));
      slices.swap(sorted);
    }
    for (k = 0; k < order.size(); ++k) {
      LaneSlice& s = slices[k];
      s.start_ns = intervals[order[k]].start_ns;
      s.end_ns = intervals[order[k]].end_ns;
      *back_pointers[order[k]] = &s;
    }
    std::vector<NestInterval>().swap(intervals);
    CaptureVector<LaneSlice**>().swap(back_pointers);
  }
};

// The first of `v` (sorted) whose id (first) is `key` or more, searched for outward from
// `from`, where it is expected to be: steps that double, then a binary search between.
size_t LowerBoundNear(const std::vector<std::pair<uint64_t, size_t>>& v, uint64_t key,
                      size_t from) {
  const size_t n = v.size();
  from = std::min(from, n);
  size_t lo, hi;  // it is in [lo, hi]; v[hi] is at or above key if hi < n
  if (from == 0 || v[from - 1].first < key) {
    lo = hi = from;
    for (size_t step = 1; hi < n && v[hi].first < key; step *= 2) {
      lo = hi + 1;
      hi = std::min(n, hi + step);
    }
  } else {
    lo = hi = from - 1;
    for (size_t step = 1; lo > 0 && v[lo - 1].first >= key; step *= 2) {
      hi = lo - 1;
      lo = hi >= step ? hi - step : 0;
    }
  }
  return static_cast<size_t>(
      std::lower_bound(
          v.begin() + static_cast<ptrdiff_t>(lo), v.begin() + static_cast<ptrdiff_t>(hi), key,
          [](const std::pair<uint64_t, size_t>& e, uint64_t k) { return e.first < k; }) -
      v.begin());
}

// A lane's slices are in begin order: its first starts first.
void NoteStart(const Lane& lane, ProcessLanes* process) {
  if (lane.slices.empty()) return;
  const uint64_t start = lane.slices.front().start_ns;
  if (!process->has_events || start < process->first_ns) process->first_ns = start;
  process->has_events = true;
}

// The hardware end of a correlation: its executions and the transfers it started. A DMA inside
// an execution (moving the model's inputs and outputs) belongs to the execution, not the call.
bool IsDeviceFlowStep(const DeviceEvent& e) {
  return e.kind == DeviceEventKind::kExecution || e.kind == DeviceEventKind::kCollective ||
         (e.kind == DeviceEventKind::kDma && e.parent == 0);
}

// Flows: one per correlation id, range -> call -> executions/transfers/a collective's barrier
// and running, in time order.
void AddFlows(const ProcessTrace& p, const CaptureVector<LaneSlice*>& range_slice,
              const CaptureVector<LaneSlice*>& call_slice,
              const CaptureVector<LaneSlice*>& device_slice, uint64_t* next_flow_id) {
  const IdIndex<RangeEvent, &RangeEvent::id, CaptureVector<RangeEvent>> ranges(p.ranges);
  const IdIndex<ApiCall, &ApiCall::correlation_id, CaptureVector<ApiCall>> calls(p.calls);
  // Each correlation id's device steps, as a list through `next_step` in trace order, headed
  // by the (first) call with that id.
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> first_step(p.calls.size(), kNone);
  std::vector<uint32_t> next_step(p.device.size(), kNone);
  for (size_t i = p.device.size(); i-- > 0;) {  // backwards, so that each list is in trace order
    const DeviceEvent& e = p.device[i];
    if (e.correlation_id == 0 || !IsDeviceFlowStep(e)) continue;
    const ApiCall* call = calls.Find(e.correlation_id);
    if (call == nullptr) continue;  // no call has the id: no flow goes there
    uint32_t& head = first_step[static_cast<size_t>(call - p.calls.data())];
    next_step[i] = head;
    head = static_cast<uint32_t>(i);
  }
  std::vector<LaneSlice*> chain;
  for (size_t i = 0; i < p.calls.size(); ++i) {
    const ApiCall& call = p.calls[i];
    if (call.correlation_id == 0) continue;
    chain.clear();
    if (const RangeEvent* r = call.range != 0 ? ranges.Find(call.range) : nullptr;
        r != nullptr && r->tid == call.tid) {
      chain.push_back(range_slice[static_cast<size_t>(r - p.ranges.data())]);
    }
    chain.push_back(call_slice[i]);
    const size_t steps_from = chain.size();
    const size_t head = static_cast<size_t>(calls.Find(call.correlation_id) - p.calls.data());
    for (uint32_t d = first_step[head]; d != kNone; d = next_step[d]) {
      chain.push_back(device_slice[d]);
    }
    // By start time as drawn, then trace order (the list's order).
    auto by_start = [](const LaneSlice* a, const LaneSlice* b) {
      return a->start_ns < b->start_ns;
    };
    if (!std::is_sorted(chain.begin() + steps_from, chain.end(), by_start)) {
      std::stable_sort(chain.begin() + steps_from, chain.end(), by_start);
    }
    if (chain.size() < 2) continue;
    uint64_t flow = (*next_flow_id)++;
    for (size_t k = 0; k + 1 < chain.size(); ++k) chain[k]->flow_ids.push_back(flow);
    chain.back()->terminating_flow_ids.push_back(flow);
  }
}

// Each device event's queue lane, for async work: an index into `keys`, or -1 (synchronous
// work, on its core's executions or DMA lane). An execution or transfer of a request is on its
// queue's lane (nrta_seq >> 48) of its core: compute for executions, tensor-op for transfers,
// collectives for a collective's barrier and running; the ops inside an async execution go
// with it.
struct QueueLaneKey {
  int32_t nc_idx;
  uint32_t xu;
  LaneKind kind;
  bool operator<(const QueueLaneKey& o) const {
    return std::tie(nc_idx, xu, kind) < std::tie(o.nc_idx, o.xu, o.kind);
  }
};

std::vector<int32_t> QueueLanesOf(const ProcessTrace& p, std::map<QueueLaneKey, size_t>* keys) {
  std::vector<int32_t> lane_of;
  if (std::none_of(p.device.begin(), p.device.end(),
                   [](const DeviceEvent& e) { return e.nrta_seq != 0; })) {
    return lane_of;
  }
  absl::flat_hash_map<uint64_t, uint64_t> async_execution;  // an execution's id -> its nrta_seq
  for (const DeviceEvent& e : p.device) {
    if (e.kind == DeviceEventKind::kExecution && e.nrta_seq != 0) {
      async_execution[e.id] = e.nrta_seq;
    }
  }
  lane_of.assign(p.device.size(), -1);
  std::vector<QueueLaneKey> found(p.device.size());
  for (size_t i = 0; i < p.device.size(); ++i) {
    const DeviceEvent& e = p.device[i];
    uint64_t seq = e.nrta_seq;
    if (seq == 0 && e.kind == DeviceEventKind::kEngineOp && e.parent != 0) {
      auto it = async_execution.find(e.parent);
      if (it != async_execution.end()) seq = it->second;
    }
    if (seq == 0) continue;
    const QueueLaneKey key{e.nc_idx, static_cast<uint32_t>(seq >> kNrtaQueueShift),
                           e.kind == DeviceEventKind::kDma          ? LaneKind::kTensorOpQueue
                           : e.kind == DeviceEventKind::kCollective ? LaneKind::kCollectivesQueue
                                                                    : LaneKind::kComputeQueue};
    lane_of[i] = static_cast<int32_t>(keys->try_emplace(key, keys->size()).first->second);
  }
  return lane_of;
}

// The requests in flight on each queue (AsyncRequests): +1 when a schedule call returns, -1
// when its request retires; the points where the count changes, by (core, XU id).
std::map<std::pair<int32_t, uint32_t>, std::vector<CounterPoint>> InFlightPoints(
    const ProcessTrace& p) {
  std::map<std::pair<int32_t, uint32_t>, std::vector<std::pair<uint64_t, int>>> steps;
  for (const AsyncRequest& r : AsyncRequests(p)) {
    auto& queue = steps[{r.nc_idx, r.xu}];
    queue.emplace_back(r.scheduled_ns, +1);
    queue.emplace_back(r.retired_ns, -1);
  }
  std::map<std::pair<int32_t, uint32_t>, std::vector<CounterPoint>> out;
  for (auto& [queue, list] : steps) {
    std::sort(list.begin(), list.end());
    std::vector<CounterPoint>& points = out[queue];
    int64_t value = 0;
    for (size_t i = 0; i < list.size();) {
      const uint64_t ts = list[i].first;
      for (; i < list.size() && list[i].first == ts; ++i) value += list[i].second;
      if (points.empty() ? value != 0 : points.back().value != value) points.push_back({ts, value});
    }
  }
  return out;
}

ProcessLanes BuildProcessLanes(const ProcessTrace& p, uint64_t* next_flow_id) {
  ProcessLanes out;
  out.process = &p;
  // Where each event's slice ends up, for the flows.
  CaptureVector<LaneSlice*> range_slice(p.ranges.size(), nullptr);
  CaptureVector<LaneSlice*> call_slice(p.calls.size(), nullptr);
  CaptureVector<LaneSlice*> device_slice(p.device.size(), nullptr);

  std::map<QueueLaneKey, size_t> queue_keys;
  const std::vector<int32_t> queue_lane_of = QueueLanesOf(p, &queue_keys);
  auto in_flight = InFlightPoints(p);

  // The lanes, each reserved from a first count (moving millions of slices while a vector
  // grows was a good part of the time): threads by tid, cores by nc_idx.
  std::map<uint32_t, std::pair<size_t, size_t>> per_thread;  // framework, runtime
  std::map<int32_t, std::pair<size_t, size_t>> per_core;     // executions, DMA
  std::vector<size_t> per_queue(queue_keys.size(), 0);
  // Events of one thread or core mostly come in runs: a run's count is looked up once.
  auto count_of = [](auto* counts, auto key, auto* last_key, std::pair<size_t, size_t>** last) {
    if (*last == nullptr || *last_key != key) {
      *last = &(*counts)[key];
      *last_key = key;
    }
    return *last;
  };
  uint32_t count_tid = 0;
  std::pair<size_t, size_t>* thread_count = nullptr;
  for (const RangeEvent& r : p.ranges) {
    ++count_of(&per_thread, r.tid, &count_tid, &thread_count)->first;
  }
  thread_count = nullptr;
  for (const ApiCall& c : p.calls) {
    ++count_of(&per_thread, c.tid, &count_tid, &thread_count)->second;
  }
  int32_t count_nc = 0;
  std::pair<size_t, size_t>* core_count = nullptr;
  for (size_t i = 0; i < p.device.size(); ++i) {
    const DeviceEvent& e = p.device[i];
    auto& n = *count_of(&per_core, e.nc_idx, &count_nc, &core_count);
    if (!queue_lane_of.empty() && queue_lane_of[i] >= 0) {
      ++per_queue[static_cast<size_t>(queue_lane_of[i])];
    } else {
      ++(e.kind == DeviceEventKind::kDma ? n.second : n.first);
    }
  }
  for (const auto& [queue, points] : in_flight) per_core[queue.first];  // a counter's core
  out.threads.resize(per_thread.size());
  out.cores.resize(per_core.size());
  std::vector<LaneFill> fills(2 * (per_thread.size() + per_core.size()) + queue_keys.size());
  std::map<uint32_t, LaneFill*> thread_fills;  // the thread's framework lane; runtime is next
  std::map<int32_t, LaneFill*> core_fills;     // the core's executions lane; DMA is next
  std::vector<LaneFill*> queue_fills(queue_keys.size(), nullptr);
  size_t f = 0, t = 0, c = 0;
  // A thread's or a core's two lanes, next to each other in `fills`.
  auto two_lanes = [&](Lane* first, LaneKind first_kind, Lane* second, LaneKind second_kind,
                       const std::pair<size_t, size_t>& n) {
    LaneFill* pair = &fills[f];
    for (auto [lane, kind, count] : {std::tuple(first, first_kind, n.first),
                                     std::tuple(second, second_kind, n.second)}) {
      lane->kind = kind;
      fills[f].lane = lane;
      fills[f++].Reserve(count);
    }
    return pair;
  };
  for (const auto& [tid, n] : per_thread) {
    ThreadLanes& lanes = out.threads[t++];
    lanes.tid = tid;
    auto name = p.thread_names.find(tid);
    if (name != p.thread_names.end() && !name->second.empty()) lanes.name = &name->second;
    thread_fills[tid] = two_lanes(&lanes.framework, LaneKind::kFramework, &lanes.runtime,
                                  LaneKind::kRuntime, n);
  }
  auto next_queue = queue_keys.begin();
  for (const auto& [nc, n] : per_core) {
    CoreLanes& lanes = out.cores[c++];
    lanes.nc_idx = nc;
    core_fills[nc] = two_lanes(&lanes.executions, LaneKind::kExecutions, &lanes.dma,
                               LaneKind::kDma, n);
    // Its queues' lanes (the keys are in core order), sized before any is filled.
    auto end = next_queue;
    while (end != queue_keys.end() && end->first.nc_idx == nc) ++end;
    lanes.queues.resize(static_cast<size_t>(std::distance(next_queue, end)));
    for (size_t q = 0; next_queue != end; ++next_queue, ++q) {
      Lane& lane = lanes.queues[q];
      lane.kind = next_queue->first.kind;
      lane.xu = next_queue->first.xu;
      fills[f].lane = &lane;
      fills[f].Reserve(per_queue[next_queue->second]);
      queue_fills[next_queue->second] = &fills[f++];
    }
    for (auto it = in_flight.lower_bound({nc, 0}); it != in_flight.end() && it->first.first == nc;
         ++it) {
      lanes.in_flight.push_back({it->first.second, std::move(it->second)});
    }
  }
  // The lane of the last event looked up, for runs of events of one thread or core.
  auto lane_of = [](auto* fills_by_key, auto key, auto* last_key, LaneFill** last) {
    if (*last == nullptr || *last_key != key) {
      *last = fills_by_key->at(key);
      *last_key = key;
    }
    return *last;
  };
  uint32_t last_tid = 0;
  LaneFill* last_thread = nullptr;
  for (size_t i = 0; i < p.ranges.size(); ++i) {
    const RangeEvent& r = p.ranges[i];
    lane_of(&thread_fills, r.tid, &last_tid, &last_thread)
        ->Add({r.start_ns, EndOf(r.start_ns, r.duration_ns), r.id, r.parent_range}, r.name,
              nullptr, nullptr, &range_slice[i]);
  }
  last_thread = nullptr;
  for (size_t i = 0; i < p.calls.size(); ++i) {
    const ApiCall& call = p.calls[i];
    // Runtime calls never nest (the shim does not record calls made inside a call), so no ids.
    lane_of(&thread_fills, call.tid, &last_tid, &last_thread)[1].Add(
        {call.start_ns, EndOf(call.start_ns, call.duration_ns), 0, 0}, call.name, &call, nullptr,
        &call_slice[i]);
  }
  std::unique_ptr<IdIndex<ApiCall, &ApiCall::correlation_id, CaptureVector<ApiCall>>> calls;
  if (!queue_keys.empty()) calls = std::make_unique<decltype(calls)::element_type>(p.calls);
  int32_t last_nc = 0;
  LaneFill* last_core = nullptr;
  for (size_t i = 0; i < p.device.size(); ++i) {
    const DeviceEvent& e = p.device[i];
    const bool is_dma = e.kind == DeviceEventKind::kDma;
    const NestInterval interval{e.start_ns, EndOf(e.start_ns, e.duration_ns), e.id,
                                is_dma ? 0 : e.parent};
    if (!queue_lane_of.empty() && queue_lane_of[i] >= 0) {
      // An async request's work, with the call that scheduled it (for its queue wait).
      const ApiCall* call = e.nrta_seq != 0 && e.parent == 0 && e.correlation_id != 0
                                ? calls->Find(e.correlation_id)
                                : nullptr;
      queue_fills[static_cast<size_t>(queue_lane_of[i])]->Add(interval, e.name, call, &e,
                                                              &device_slice[i]);
      continue;
    }
    // Ops name their execution as parent; DMA sits on its own lane, where its parent is absent.
    lane_of(&core_fills, e.nc_idx, &last_nc, &last_core)[is_dma ? 1 : 0].Add(
        interval, e.name, nullptr, &e, &device_slice[i]);
  }
  for (LaneFill& fill : fills) {
    fill.Nest();
    NoteStart(*fill.lane, &out);
  }
  // (A counter's points are at or after its calls' ends: they never start the timeline.)
  AddFlows(p, range_slice, call_slice, device_slice, next_flow_id);
  return out;
}

}  // namespace

const char* LaneKindName(LaneKind kind) {
  switch (kind) {
    case LaneKind::kFramework:
      return "framework";
    case LaneKind::kRuntime:
      return "runtime";
    case LaneKind::kExecutions:
      return "executions";
    case LaneKind::kDma:
      return "DMA";
    case LaneKind::kComputeQueue:
      return "compute queue";
    case LaneKind::kTensorOpQueue:
      return "tensor-op queue";
    case LaneKind::kCollectivesQueue:
      return "collectives queue";
  }
  return "?";
}

std::string LaneName(const Lane& lane) {
  if (lane.kind != LaneKind::kComputeQueue && lane.kind != LaneKind::kTensorOpQueue &&
      lane.kind != LaneKind::kCollectivesQueue) {
    return LaneKindName(lane.kind);
  }
  return absl::StrCat(LaneKindName(lane.kind), " (XU ", lane.xu, ")");
}

std::string QueueCounterName(const QueueCounter& counter) {
  return absl::StrCat("requests in flight (XU ", counter.xu, ")");
}

std::vector<size_t> NestIntervals(std::vector<NestInterval>* intervals) {
  std::vector<NestInterval>& iv = *intervals;
  const size_t n = iv.size();
  for (NestInterval& v : iv) v.end_ns = std::max(v.end_ns, v.start_ns);

  // Declared parents within this set of intervals, and each interval's declared depth. Lanes
  // without any (runtime calls, DMA) skip all of it: every depth is 0, and both lists stay
  // empty.
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  std::vector<size_t> parent;
  std::vector<int> depth;
  const bool any_parent =
      std::any_of(iv.begin(), iv.end(), [](const NestInterval& v) { return v.parent_id != 0; });
  if (any_parent) {
    parent.assign(n, kNone);
    // Ids to indices, sorted (for an id given twice, the first interval is the one named).
    std::vector<std::pair<uint64_t, size_t>> by_id;
    by_id.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (iv[i].id != 0) by_id.emplace_back(iv[i].id, i);
    }
    if (!std::is_sorted(by_id.begin(), by_id.end())) std::sort(by_id.begin(), by_id.end());
    // Children of one parent mostly come together: the one found before is asked for next.
    // The next parent is then a little further on: searched for from there.
    size_t at = 0;
    auto found = by_id.end();
    for (size_t i = 0; i < n; ++i) {
      if (iv[i].parent_id == 0) continue;
      if (found == by_id.end() || found->first != iv[i].parent_id) {
        at = LowerBoundNear(by_id, iv[i].parent_id, at);
        found = by_id.begin() + static_cast<ptrdiff_t>(at);
      }
      if (found != by_id.end() && found->first == iv[i].parent_id && found->second != i) {
        parent[i] = found->second;
      }
    }
    depth.assign(n, -1);
    std::vector<size_t> path;
    int max_depth = 0;
    for (size_t i = 0; i < n; ++i) {
      // Walk up to the first interval of known depth (or the root), then fill in on the way
      // back.
      path.clear();
      size_t j = i;
      while (j != kNone && depth[j] == -1 && static_cast<int>(path.size()) <= kMaxDeclaredDepth) {
        depth[j] = -2;  // on the current path: meeting it again means a cycle
        path.push_back(j);
        j = parent[j];
      }
      int base = (j == kNone || depth[j] < 0) ? -1 : depth[j];
      if (j != kNone && depth[j] < 0) parent[path.back()] = kNone;  // cut a cycle or overlong chain
      for (size_t k = path.size(); k-- > 0;) depth[path[k]] = ++base;
      max_depth = std::max(max_depth, base);
    }

    // Children into their declared parents, parents first so a chain clamps all the way down
    // (in depth order, by a counting sort: depths are small).
    std::vector<size_t> first_of_depth(static_cast<size_t>(max_depth) + 2, 0);
    for (size_t i = 0; i < n; ++i) ++first_of_depth[static_cast<size_t>(depth[i]) + 1];
    for (size_t d = 1; d < first_of_depth.size(); ++d) first_of_depth[d] += first_of_depth[d - 1];
    std::vector<size_t> by_depth(n);
    for (size_t i = 0; i < n; ++i) by_depth[first_of_depth[static_cast<size_t>(depth[i])]++] = i;
    for (size_t i : by_depth) {
      if (parent[i] == kNone) continue;
      const NestInterval& p = iv[parent[i]];
      NestInterval& v = iv[i];
      if (v.start_ns > p.end_ns || v.end_ns < p.start_ns) {
        parent[i] = kNone;  // nowhere near its parent: keep its own times, nest by time only
        continue;
      }
      v.start_ns = std::clamp(v.start_ns, p.start_ns, p.end_ns);
      v.end_ns = std::clamp(v.end_ns, v.start_ns, p.end_ns);
    }
  }
  auto is_declared_descendant = [&](size_t child, size_t ancestor) {
    if (parent.empty()) return false;
    for (size_t j = parent[child]; j != kNone; j = parent[j]) {
      if (j == ancestor) return true;
    }
    return false;
  };

  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  auto begins_before = [&](size_t a, size_t b) {
    if (iv[a].start_ns != iv[b].start_ns) return iv[a].start_ns < iv[b].start_ns;
    if (iv[a].end_ns != iv[b].end_ns) return iv[a].end_ns > iv[b].end_ns;
    return !depth.empty() && depth[a] < depth[b];
  };
  // Lanes mostly come in begin order already; sorting them again would change nothing.
  if (!std::is_sorted(order.begin(), order.end(), begins_before)) {
    std::stable_sort(order.begin(), order.end(), begins_before);
  }

  // One pass with the stack of open slices; LaneEdges() replays the same rule.
  std::vector<size_t> open;
  for (size_t i : order) {
    NestInterval& v = iv[i];
    for (;;) {
      while (!open.empty() && iv[open.back()].end_ns <= v.start_ns) open.pop_back();
      if (open.empty()) break;
      const NestInterval& top = iv[open.back()];
      if (v.start_ns < top.start_ns) {
        // The enclosing slice was moved later (the sibling rule below): begin with it.
        v.start_ns = top.start_ns;
        v.end_ns = std::max(v.end_ns, v.start_ns);
        continue;
      }
      if (v.end_ns > top.end_ns) {
        if (is_declared_descendant(i, open.back())) {
          v.end_ns = top.end_ns;  // a child slightly outlasting its parent
        } else {
          // Two siblings overlapping (clock noise): the later one starts when the other ends.
          v.start_ns = top.end_ns;
          v.end_ns = std::max(v.end_ns, v.start_ns);
          open.pop_back();
          continue;
        }
      }
      break;
    }
    open.push_back(i);
  }
  // Starts only ever move forward to a time the pass has reached, so `order` is still in
  // begin order: each start is at or after the previous one's.
  return order;
}

void LaneEdgeCursor::Advance() {
  const CaptureVector<LaneSlice>& slices = lane_->slices;
  // The innermost open slice ends before the next one begins if it ends by then (or nothing
  // is left to begin); otherwise the next one begins inside it.
  if (!open_.empty() && (next_slice_ >= slices.size() ||
                         slices[open_.back()].end_ns <= slices[next_slice_].start_ns)) {
    edge_ = {slices[open_.back()].end_ns, false, open_.back()};
    open_.pop_back();
  } else if (next_slice_ < slices.size()) {
    edge_ = {slices[next_slice_].start_ns, true, next_slice_};
    open_.push_back(next_slice_++);
  } else {
    done_ = true;
  }
}

std::vector<SliceEdge> LaneEdges(const Lane& lane) {
  std::vector<SliceEdge> edges;
  edges.reserve(lane.slices.size() * 2);
  for (LaneEdgeCursor cursor(&lane); !cursor.done(); cursor.Advance()) {
    edges.push_back(cursor.edge());
  }
  return edges;
}

TraceLanes BuildLanes(const Trace& trace, uint64_t first_flow_id) {
  TraceLanes out;
  uint64_t next_flow_id = first_flow_id;
  bool any = false;
  out.processes.reserve(trace.processes.size());
  for (const ProcessTrace& p : trace.processes) {
    out.processes.push_back(BuildProcessLanes(p, &next_flow_id));
    const ProcessLanes& lanes = out.processes.back();
    if (lanes.has_events && (!any || lanes.first_ns < out.first_ns)) {
      out.first_ns = lanes.first_ns;
      any = true;
    }
  }
  if (!any) out.first_ns = trace.start_ns;
  out.flows = next_flow_id - 1;
  return out;
}

namespace {

class LaneBuildingStream : public TraceStream {
 public:
  explicit LaneBuildingStream(std::vector<std::unique_ptr<LaneStream>> streams)
      : streams_(std::move(streams)), status_(streams_.size()) {}

  absl::Status Add(const Trace& trace) override {
    const TraceLanes lanes = BuildLanes(trace, next_flow_id_);
    if (lanes.flows >= next_flow_id_) next_flow_id_ = lanes.flows + 1;
    for (const ProcessLanes& p : lanes.processes) {
      if (p.has_events && (!any_ || p.first_ns < first_ns_)) {
        first_ns_ = p.first_ns;
        any_ = true;
      }
    }
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (status_[i].ok()) status_[i] = streams_[i]->Add(trace, lanes);
    }
    return absl::OkStatus();
  }

  absl::Status Finish(const Trace& trace, const Summary&,
                      std::vector<std::string>* files) override {
    // As BuildLanes: the earliest slice, else the Trace's start.
    const uint64_t first_ns = any_ ? first_ns_ : trace.start_ns;
    absl::Status first;
    for (size_t i = 0; i < streams_.size(); ++i) {
      absl::Status s = status_[i].ok() ? streams_[i]->Finish(trace, first_ns, files) : status_[i];
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }

 private:
  std::vector<std::unique_ptr<LaneStream>> streams_;
  std::vector<absl::Status> status_;  // by stream: its first error
  uint64_t next_flow_id_ = 1;
  uint64_t first_ns_ = 0;
  bool any_ = false;
};

}  // namespace

std::unique_ptr<TraceStream> LaneStreams(std::vector<std::unique_ptr<LaneStream>> streams) {
  return std::make_unique<LaneBuildingStream>(std::move(streams));
}

void SliceArgs(const LaneSlice& slice, std::vector<SliceArg>* args, std::string* text) {
  args->clear();
  if (slice.device != nullptr) {
    const DeviceEvent& e = *slice.device;
    DeviceArgs(e, slice.call, ArgList(args));
    // A slice cut to nest in its lane (device clocks mapped through two sync points a few ns
    // apart can make neighbours overlap) keeps the work's own duration, so that a summary
    // rebuilt from the trace charges what the capture's own did.
    // (and how far its start was moved, if it was).
    if (slice.end_ns - slice.start_ns != e.duration_ns) {
      ArgList(args).Uint("duration_ns", e.duration_ns);
      if (slice.start_ns > e.start_ns) {
        ArgList(args).Uint("start_moved_ns", slice.start_ns - e.start_ns);
      }
    }
  } else if (slice.call != nullptr) {
    CallArgs(*slice.call, ArgList(args), text);
  }
}

std::vector<DropCounterField> DropCounterFields(DropCounts* d) {
  return {
      {{"ring_full", "drops.ring_full", 0}, &d->ring_full},
      {{"daemon_away", "drops.daemon_away", 0}, &d->daemon_away},
      {{"spool_full", "drops.spool_full", 0}, &d->spool_full},
      {{"device_overwritten", "drops.device_overwritten", 0}, &d->device_overwritten},
      {{"oversized", "drops.oversized", 0}, &d->oversized},
      {{"no_memory", "drops.no_memory", 0}, &d->no_memory},
      {{"device_malformed", "drops.device_malformed", 0}, &d->device_malformed},
      {{"process_died", "drops.process_died", 0}, &d->process_died},
      {{"daemon_overflow", "drops.daemon_overflow", 0}, &d->daemon_overflow},
      {{"no_clock_sync", "drops.no_clock_sync", 0}, &d->no_clock_sync},
      {{"by_lane.framework", "drops.by_lane.framework", 0}, &d->by_lane.framework},
      {{"by_lane.runtime", "drops.by_lane.runtime", 0}, &d->by_lane.runtime},
      {{"by_lane.hardware", "drops.by_lane.hardware", 0}, &d->by_lane.hardware},
  };
}

std::vector<DropCounter> DropCounters(const DropCounts& d) {
  DropCounts copy = d;
  std::vector<DropCounter> out = {{"total", "drops.total", d.total()}};
  for (const DropCounterField& f : DropCounterFields(&copy)) {
    out.push_back({f.counter.name, f.counter.arg_name, *f.field});
  }
  return out;
}

ProcessTrace CaptureHeader(const ProcessTrace& p) {
  ProcessTrace h;
  h.names = nullptr;
  h.pid = p.pid;
  h.host = p.host;
  h.executable = p.executable;
  h.job = p.job;
  h.rank = p.rank;
  h.notices = p.notices;
  h.drops = p.drops;
  h.events_received = p.events_received;
  h.device_uncorrelated = p.device_uncorrelated;
  h.batches_missing = p.batches_missing;
  h.cut_off = p.cut_off;
  h.poll_tallies = p.poll_tallies;
  return h;
}

void AddToCaptureHeader(const ProcessTrace& part, ProcessTrace* header) {
  header->notices.insert(header->notices.end(), part.notices.begin(), part.notices.end());
  header->drops += part.drops;
  header->events_received += part.events_received;
  header->device_uncorrelated += part.device_uncorrelated;
  header->batches_missing += part.batches_missing;
  header->cut_off = header->cut_off || part.cut_off;
  header->poll_tallies.insert(header->poll_tallies.end(), part.poll_tallies.begin(),
                              part.poll_tallies.end());
}

std::vector<SliceArg> CaptureArgs(const Trace& trace, const ProcessTrace& p) {
  std::vector<SliceArg> args;
  args.push_back(StringArg("capture_id", trace.capture_id));
  if (!p.host.empty()) args.push_back(StringArg("host", p.host));
  args.push_back(UintArg("pid", p.pid));
  if (!p.executable.empty()) args.push_back(StringArg("executable", p.executable));
  // Its job and rank, when it said (Hello.job, Hello.rank): `nrtprof collectives` and a summary
  // read back from the file know them so.
  if (!p.job.empty()) args.push_back(StringArg("job", p.job));
  if (p.rank >= 0) args.push_back(UintArg("rank", static_cast<uint64_t>(p.rank)));
  args.push_back(UintArg("events_received", p.events_received));
  for (const DropCounter& c : DropCounters(p.drops)) args.push_back(UintArg(c.arg_name, c.value));
  args.push_back(UintArg("device_uncorrelated", p.device_uncorrelated));
  args.push_back(UintArg("batches_missing", p.batches_missing));
  args.push_back(UintArg("cut_off", p.cut_off ? 1 : 0));
  // Polls counted after their threads' last recorded ones (ProcessTrace::poll_tallies): no
  // slice, only these sums, when there are any.
  uint64_t tallied[2] = {0, 0};  // nrta_is_completed, nrta_get_sequence
  for (const PollTally& t : p.poll_tallies) {
    tallied[t.function == nrtprof::API_NRTA_GET_SEQUENCE ? 1 : 0] += t.polls;
  }
  if (tallied[0] != 0) args.push_back(UintArg(kTalliedPollsArgs[0], tallied[0]));
  if (tallied[1] != 0) args.push_back(UintArg(kTalliedPollsArgs[1], tallied[1]));
  // What the shim could not record in the process (the daemon keeps at most 16).
  static constexpr const char* kNoticeArgs[] = {
      "not_recorded.0",  "not_recorded.1",  "not_recorded.2",  "not_recorded.3",
      "not_recorded.4",  "not_recorded.5",  "not_recorded.6",  "not_recorded.7",
      "not_recorded.8",  "not_recorded.9",  "not_recorded.10", "not_recorded.11",
      "not_recorded.12", "not_recorded.13", "not_recorded.14", "not_recorded.15"};
  for (size_t i = 0; i < p.notices.size() && i < std::size(kNoticeArgs); ++i) {
    args.push_back(StringArg(kNoticeArgs[i], p.notices[i]));
  }
  return args;
}

}  // namespace nrtprof::daemon
