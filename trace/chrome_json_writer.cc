#include "trace/chrome_json_writer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_text.h"
#include "trace/atomic_file.h"
#include "trace/json_out.h"
#include "trace/json_slice_args.h"
#include "trace/trace_lanes.h"

namespace nrtprof::daemon {
namespace {

constexpr char kCaptureEventName[] = "nrtprof capture";
constexpr char kFlowCategory[] = "flow";
constexpr char kFlowName[] = "correlation";

// Each entry is put together by pointer where it goes to the disk from (json_out.h): Room() for
// its fixed-format pieces plus its strings, then each piece in place.
using json_out::ArgsRoom;
using json_out::JsonStringRoom;
using json_out::PutArgs;
using json_out::PutDecimal;
using json_out::PutJsonInt;
using json_out::PutJsonString;
using json_out::PutJsonUint;
using json_out::PutLiteral;

// ".000" to ".999": a microsecond's three decimals, by its nanoseconds.
constexpr std::array<char, 4000> MakeDecimals() {
  std::array<char, 4000> t{};
  for (int i = 0; i < 1000; ++i) {
    t[4 * i] = '.';
    t[4 * i + 1] = static_cast<char>('0' + i / 100);
    t[4 * i + 2] = static_cast<char>('0' + i / 10 % 10);
    t[4 * i + 3] = static_cast<char>('0' + i % 10);
  }
  return t;
}
constexpr std::array<char, 4000> kDecimals = MakeDecimals();

// ns as microseconds with three decimals: exact, whatever the magnitude (at most 24 bytes).
char* PutMicros(uint64_t ns, char* p) {
  p = PutDecimal(ns / 1000, p);
  memcpy(p, &kDecimals[4 * (ns % 1000)], 4);
  return p + 4;
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Where timestamped entries of traceEvents come from, in the order the lanes were named: a
// process's capture instant, a lane's slices (each followed by its flow events), or a
// counter's values (a queue's requests in flight, "ph":"C"). Each source
// is in time order; merging them with ties to the source named first gives the file's time
// order, in which an enclosing slice comes before the slices and flow events that begin with
// it, so each flow binds to the right slice.
struct Source {
  uint32_t pid = 0;
  uint32_t tid = 0;
  const Lane* lane = nullptr;             // a lane's slices ...
  const QueueCounter* counter = nullptr;  // ... or a counter's values (named counter_name) ...
  std::string counter_name;
  const ProcessTrace* process = nullptr;  // ... or a process's capture instant
  uint64_t instant_ns = 0;
  size_t next = 0;
  // ,"pid":P,"tid":T,"ts": -- the same in each of the source's entries: made at its first.
  mutable char where[48];
  mutable size_t where_size = 0;
  // The digits of the last start's microseconds but their last four (which in a lane's next
  // slice nearly always alone change), and what they say: PutStart.
  mutable uint64_t start_high = 0;  // 0: none kept
  mutable char start_digits[24];
  mutable size_t start_digits_size = 0;

  bool done() const {
    return lane != nullptr      ? next >= lane->slices.size()
           : counter != nullptr ? next >= counter->points.size()
                                : next > 0;
  }
  uint64_t ts() const {
    return lane != nullptr      ? lane->slices[next].start_ns
           : counter != nullptr ? counter->points[next].ts
                                : instant_ns;
  }
};

// PutMicros of a slice's start: the source's starts grow slowly, so the digits above the last
// four are those of the slice before, kept (the same text: `high` > 0 has no leading zeros,
// and the last four are then written with theirs).
char* PutStart(uint64_t ns, const Source& source, char* p) {
  const uint64_t micros = ns / 1000;
  const uint64_t high = micros / 10000;
  if (high == 0) return PutMicros(ns, p);
  if (high != source.start_high) {
    source.start_high = high;
    source.start_digits_size =
        static_cast<size_t>(PutDecimal(high, source.start_digits) - source.start_digits);
  }
  memcpy(p, source.start_digits, sizeof(source.start_digits));
  p += source.start_digits_size;
  const uint64_t low = micros % 10000;
  memcpy(p, &json_out::kDigitPairs[2 * (low / 100)], 2);
  memcpy(p + 2, &json_out::kDigitPairs[2 * (low % 100)], 2);
  memcpy(p + 4, &kDecimals[4 * (ns % 1000)], 4);
  return p + 8;
}

// Writes the file a process at a time, whether the capture's processes are given all at once
// or a few at a time (a TraceStream): each process's metadata, then its events merged into one
// time order. Finish writes what had to wait: the processes' capture instants (whose counts a
// process's later parts add to; one without events is at the timeline's start, known only
// then) and otherData.
class JsonEncoder {
 public:
  explicit JsonEncoder(AtomicFile* file) {
    out_.set_file(file);
    out_.Append("{\"traceEvents\":[\n");
  }

  absl::Status AddProcesses(const Trace& trace, const TraceLanes& lanes) {
    if (flow_started_.size() < lanes.flows + 1) flow_started_.resize(lanes.flows + 1, false);
    absl::Status s;
    for (const ProcessLanes& p : lanes.processes) {
      sources_.clear();
      if (p.process->continues) {
        // Its counts join the first part's, for the process's instant and otherData (both
        // written at Finish).
        if (!headers_.empty()) AddToCaptureHeader(*p.process, &headers_.back());
        AddPart(p);
      } else {
        headers_.push_back(CaptureHeader(*p.process));
        AddProcess(p, &headers_.back());
      }
      if (s.ok()) s = WriteSources(trace);
    }
    return s;
  }

  absl::Status Finish(const Trace& trace, uint64_t first_ns) {
    sources_.clear();
    for (const auto& [p, ts] : instants_) {
      Source& capture = sources_.emplace_back();
      capture.pid = p->pid;
      capture.process = p;
      capture.instant_ns = ts != 0 ? ts : first_ns;
    }
    absl::Status s = WriteSources(trace);
    if (!s.ok()) return s;
    std::string tail = "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":";
    AppendOtherData(trace, &tail);
    tail.append("}\n");
    out_.Append(tail);
    return out_.Flush();
  }

 private:
  using Head = std::pair<uint64_t, size_t>;  // (ts, source)
  static constexpr Head kNoHead = {UINT64_MAX, SIZE_MAX};

  // A slice's entry up to its time, {"ph":"X","cat":"KIND","name":NAME,"pid":P,"tid":T,"ts":,
  // is the same in each slice of one name on a lane: made at the first and kept, for a few
  // names a source, by the Name's id (its text's address, which holds while the Trace is
  // given), and copied whole (kPrefixBytes; what follows overwrites the rest).
  static constexpr size_t kPrefixBytes = 128;
  struct Prefix {
    const void* name = nullptr;
    uint8_t size = 0;   // 0: none kept
    uint8_t where = 0;  // where ,"pid": begins
    char text[kPrefixBytes] = {};
  };
  using PrefixCache = std::array<Prefix, 16>;
  static Prefix& PrefixOf(const Name& name, PrefixCache* prefixes) {
    // A table's texts lie 32 bytes apart (std::string in a deque): consecutive ones, each
    // its own slot.
    return (*prefixes)[(reinterpret_cast<uintptr_t>(name.id()) >> 5) % prefixes->size()];
  }

  // Merges sources_ into one time order: a min-heap of the sources' next entries, (ts,
  // source) (unique: no two sources tie). The source on top writes while its next entry sorts
  // before both of the top's children (then it still would be on top), and only then sinks
  // to its place: one sift a run of entries, not a pop and a push an entry.
  absl::Status WriteSources(const Trace& trace) {
    heads_.clear();
    for (size_t i = 0; i < sources_.size(); ++i) {
      if (!sources_[i].done()) heads_.push_back({sources_[i].ts(), i});
    }
    std::make_heap(heads_.begin(), heads_.end(), std::greater<Head>());
    prefixes_.assign(sources_.size(), PrefixCache());
    absl::Status s;
    while (s.ok() && !heads_.empty()) {
      const size_t i = heads_[0].second;
      Source& source = sources_[i];
      Head next = kNoHead;  // the smaller of the top's children
      if (heads_.size() > 1) next = heads_[1];
      if (heads_.size() > 2 && heads_[2] < next) next = heads_[2];
      do {
        AppendEntries(trace, source, &prefixes_[i]);
        ++source.next;
        s = MaybeFlush();
      } while (s.ok() && !source.done() && Head{source.ts(), i} < next);
      if (source.done()) {
        heads_[0] = heads_.back();
        heads_.pop_back();
      } else {
        heads_[0] = {source.ts(), i};
      }
      SiftDown();
    }
    return s;
  }

  // Moves heads_[0] down to its place in the heap.
  void SiftDown() {
    const size_t n = heads_.size();
    if (n < 2) return;
    const Head moving = heads_[0];
    size_t at = 0;
    for (;;) {
      size_t child = 2 * at + 1;
      if (child >= n) break;
      if (child + 1 < n && heads_[child + 1] < heads_[child]) ++child;
      if (!(heads_[child] < moving)) break;
      heads_[at] = heads_[child];
      at = child;
    }
    heads_[at] = moving;
  }

  // ",\n" between entries, at p.
  char* PutSeparator(char* p) {
    if (!first_event_) p = PutLiteral(",\n", p);
    first_event_ = false;
    return p;
  }

  // {"ph":"M",...,"name":NAME,"args":{"name":"..."}} names a process (tid 0) or a lane, and
  // {"name":"thread_sort_index","args":{"sort_index":N}} orders the lanes.
  void AppendName(uint32_t pid, uint32_t tid, const char* what, const std::string& name) {
    std::string entry = first_event_ ? "" : ",\n";
    first_event_ = false;
    absl::StrAppend(&entry, "{\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid, ",\"name\":\"", what,
                    "\",\"args\":{\"name\":");
    AppendJsonString(name, &entry);
    entry.append("}}");
    out_.Append(entry);
  }

  void AppendSortIndex(uint32_t pid, uint32_t tid) {
    std::string entry = first_event_ ? "" : ",\n";
    first_event_ = false;
    absl::StrAppend(&entry, "{\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
                    ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":", tid, "}}");
    out_.Append(entry);
  }

  // A lane of the process: a host thread's (kind, tid) or a NeuronCore's (kind, nc_idx), or a
  // queue's (kind, QueueKey).
  using LaneKey = std::pair<LaneKind, int64_t>;
  static int64_t QueueKey(int32_t nc_idx, uint32_t xu) {
    return int64_t{nc_idx} * (int64_t{1} << 32) + xu;
  }

  // Makes the lane a source, on the synthetic tid its process gave it; the first time, gives
  // it the process's next one and names it.
  void AddLane(const Lane& lane, uint32_t pid, LaneKey key,
               const std::function<std::string()>& label) {
    if (lane.slices.empty()) return;
    auto [it, added] = lane_tids_.try_emplace(key, next_tid_);
    if (added) {
      ++next_tid_;
      AppendName(pid, it->second, "thread_name", label());
      AppendSortIndex(pid, it->second);
    }
    Source& source = sources_.emplace_back();
    source.pid = pid;
    source.tid = it->second;
    source.lane = &lane;
  }

  // The lanes of a process's threads and cores, in that order.
  void AddLanes(const ProcessLanes& lanes) {
    const uint32_t pid = lanes.process->pid;
    for (const ThreadLanes& t : lanes.threads) {
      auto thread = [&t]() {
        return t.name != nullptr ? absl::StrCat(t.tid, " ", *t.name) : absl::StrCat(t.tid);
      };
      AddLane(t.framework, pid, {LaneKind::kFramework, t.tid},
              [&]() { return absl::StrCat(thread(), " framework"); });
      AddLane(t.runtime, pid, {LaneKind::kRuntime, t.tid},
              [&]() { return absl::StrCat(thread(), " runtime"); });
    }
    for (const CoreLanes& c : lanes.cores) {
      AddLane(c.executions, pid, {LaneKind::kExecutions, c.nc_idx},
              [&]() { return absl::StrCat("NeuronCore ", c.nc_idx); });
      AddLane(c.dma, pid, {LaneKind::kDma, c.nc_idx},
              [&]() { return absl::StrCat("NeuronCore ", c.nc_idx, " DMA"); });
      for (const Lane& queue : c.queues) {
        AddLane(queue, pid, {queue.kind, QueueKey(c.nc_idx, queue.xu)},
                [&]() { return absl::StrCat("NeuronCore ", c.nc_idx, " ", LaneName(queue)); });
      }
      // A counter is the process's ("ph":"C" has no thread), named for its core and queue.
      for (const QueueCounter& counter : c.in_flight) {
        if (counter.points.empty()) continue;
        Source& source = sources_.emplace_back();
        source.pid = pid;
        source.counter = &counter;
        source.counter_name = absl::StrCat("NeuronCore ", c.nc_idx, " ", QueueCounterName(counter));
      }
    }
  }

  // A later part of the process given last (ProcessTrace::continues): its lanes go on, on the
  // synthetic tids they had; lanes new in it get the next ones.
  void AddPart(const ProcessLanes& lanes) { AddLanes(lanes); }

  void AddProcess(const ProcessLanes& lanes, const ProcessTrace* header) {
    const ProcessTrace& p = *lanes.process;
    std::string name = !p.executable.empty()     ? Basename(p.executable)
                       : !p.command_line.empty() ? Basename(p.command_line[0])
                                                 : "";
    if (name.empty()) name = absl::StrCat("pid ", p.pid);
    AppendName(p.pid, 0, "process_name", name);
    // Written at Finish, when the process's later parts have added their counts; at its
    // first event, or without one at the timeline's start (Finish knows it).
    instants_.push_back({header, lanes.has_events ? lanes.first_ns : 0});
    lane_tids_.clear();
    next_tid_ = 1;  // 0 is the process itself
    AddLanes(lanes);
  }

  // ,"pid":P,"tid":T,"ts": (at most 46 bytes).
  static char* PutPlace(const Source& source, char* p) {
    if (source.where_size == 0) {
      char* w = PutLiteral(",\"pid\":", source.where);
      w = PutDecimal(source.pid, w);
      w = PutLiteral(",\"tid\":", w);
      w = PutDecimal(source.tid, w);
      w = PutLiteral(",\"ts\":", w);
      source.where_size = static_cast<size_t>(w - source.where);
    }
    json_out::CopySmall(p, source.where, source.where_size);
    return p + source.where_size;
  }

  // ,"pid":P,"tid":T,"ts":TS (at most 70 bytes).
  static char* PutWhere(const Source& source, uint64_t ts, char* p) {
    return PutMicros(ts, PutPlace(source, p));
  }

  // The source's next entry: a capture instant, or a slice and its flow events. A flow begins
  // at its earliest slice ("s"), passes through the middle ones ("t") and ends at the slice
  // that lists it as terminating ("f", bound to that enclosing slice).
  void AppendEntries(const Trace& trace, const Source& source, PrefixCache* prefixes) {
    if (source.counter != nullptr) {
      // {"ph":"C","cat":"nrtprof","name":NAME,"pid":P,"tid":0,"ts":TS,"args":{"requests":N}}
      char* p = out_.Room(160 + JsonStringRoom(source.counter_name));
      p = PutSeparator(p);
      p = PutLiteral("{\"ph\":\"C\",\"cat\":\"nrtprof\",\"name\":", p);
      p = PutJsonString(source.counter_name, p);
      p = PutWhere(source, source.counter->points[source.next].ts, p);
      p = PutLiteral(",\"args\":{\"requests\":", p);
      p = PutJsonInt(source.counter->points[source.next].value, p);
      p = PutLiteral("}}", p);
      out_.Done(p);
      return;
    }
    if (source.lane == nullptr) {
      const std::vector<SliceArg> args = CaptureArgs(trace, *source.process);
      char* p = out_.Room(160 + ArgsRoom(args));
      p = PutSeparator(p);
      p = PutLiteral("{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"nrtprof\",\"name\":\"", p);
      p = PutLiteral(kCaptureEventName, p);
      *p++ = '"';
      p = PutWhere(source, source.instant_ns, p);
      p = PutArgs(args, p);
      *p++ = '}';
      out_.Done(p);
      return;
    }
    AppendSlice(source, prefixes);
  }

  void AppendSlice(const Source& source, PrefixCache* prefixes) {
    const LaneSlice* const slices = source.lane->slices.data();
    const size_t left = source.lane->slices.size() - source.next;
    // A capture's slices and the events they draw are far more than the caches hold, and the
    // merge reads a dozen lanes at once: each is asked for ahead (the slice kAheadSlices on,
    // the event of the one kAheadEvents on, whose slice was asked for before), both of the
    // cache lines it may span.
    if (left > kAheadSlices) Prefetch(&slices[source.next + kAheadSlices]);
    if (left > kAheadEvents) {
      const LaneSlice& ahead = slices[source.next + kAheadEvents];
      if (ahead.device != nullptr) {
        Prefetch(ahead.device);
      } else if (ahead.call != nullptr) {
        Prefetch(ahead.call);
      }
    }
    const LaneSlice& slice = slices[source.next];
    const std::string& name = slice.name.str();
    const size_t flows = slice.flow_ids.size() + slice.terminating_flow_ids.size();
    char* p = out_.Room(kPrefixBytes + 192 + JsonStringRoom(name) +
                        json_out::SliceArgsRoom(slice) + flows * kFlowRoom);
    p = PutSeparator(p);
    Prefix& prefix = PrefixOf(slice.name, prefixes);
    char* where;  // ,"pid":P,"tid":T,"ts":TS, which the slice's flow events repeat
    if (prefix.size != 0 && prefix.name == slice.name.id()) {
      memcpy(p, prefix.text, kPrefixBytes);
      where = p + prefix.where;
      p += prefix.size;
    } else {
      char* const start = p;
      p = PutLiteral("{\"ph\":\"X\",\"cat\":\"", p);
      const std::string_view kind = CategoryName(source.lane->kind);
      json_out::CopySmall(p, kind.data(), kind.size());
      p += kind.size();
      p = PutLiteral("\",\"name\":", p);
      p = PutJsonString(name, p);
      where = p;
      p = PutPlace(source, p);
      if (static_cast<size_t>(p - start) <= kPrefixBytes) {
        prefix.name = slice.name.id();
        prefix.size = static_cast<uint8_t>(p - start);
        prefix.where = static_cast<uint8_t>(where - start);
        memcpy(prefix.text, start, prefix.size);
      }
    }
    p = PutStart(slice.start_ns, source, p);
    const std::string_view place(where, static_cast<size_t>(p - where));
    p = PutLiteral(",\"dur\":", p);
    p = PutMicros(slice.end_ns - slice.start_ns, p);
    p = json_out::PutSliceArgs(slice, &arg_text_, p);
    *p++ = '}';
    for (uint64_t id : slice.flow_ids) p = PutFlow(place, id, false, p);
    for (uint64_t id : slice.terminating_flow_ids) p = PutFlow(place, id, true, p);
    out_.Done(p);
  }

  static constexpr size_t kAheadSlices = 16;
  static constexpr size_t kAheadEvents = 8;
  template <typename T>
  static void Prefetch(const T* p) {
    static_assert(sizeof(T) <= 128, "two cache lines");
    __builtin_prefetch(p);
    __builtin_prefetch(reinterpret_cast<const char*>(p) + sizeof(T) - 1);
  }

  // The most bytes PutFlow writes.
  static constexpr size_t kFlowRoom = 192;

  // ,\n{"ph":"s","cat":"flow","name":"correlation","id":ID,"pid":P,"tid":T,"ts":TS}: a flow
  // event of the slice just written (never the file's first entry), `place` its ,"pid":...,
  // "ts":TS.
  char* PutFlow(std::string_view place, uint64_t id, bool terminates, char* p) {
    char phase = 'f';
    if (!terminates) phase = id < flow_started_.size() && flow_started_[id] ? 't' : 's';
    if (id < flow_started_.size()) flow_started_[id] = true;
    p = PutLiteral(",\n{\"ph\":\"", p);
    *p++ = phase;
    p = PutLiteral("\",\"cat\":\"", p);
    p = PutLiteral(kFlowCategory, p);
    p = PutLiteral("\",\"name\":\"", p);
    p = PutLiteral(kFlowName, p);
    p = PutLiteral("\",\"id\":", p);
    p = PutDecimal(id, p);
    json_out::CopySmall(p, place.data(), place.size());
    p += place.size();
    if (phase == 'f') p = PutLiteral(",\"bp\":\"e\"", p);
    *p++ = '}';
    return p;
  }

  // LaneKindName, as a view (its length known once).
  static std::string_view CategoryName(LaneKind kind) {
    constexpr size_t kKinds = static_cast<size_t>(LaneKind::kCollectivesQueue) + 1;
    static const auto* names = [] {
      auto* n = new std::array<std::string_view, kKinds>;
      for (size_t i = 0; i < kKinds; ++i) (*n)[i] = LaneKindName(static_cast<LaneKind>(i));
      return n;
    }();
    const size_t i = static_cast<size_t>(kind);
    return i < kKinds ? (*names)[i] : std::string_view(LaneKindName(kind));
  }

  void AppendOtherData(const Trace& trace, std::string* out) {
    std::string& out_ = *out;
    out_.append("{\"capture_id\":");
    AppendJsonString(trace.capture_id, &out_);
    if (!trace.trigger.rule.empty()) {  // a rule of the daemon's took it (nrtprofd --trigger)
      out_.append(",\"trigger\":{\"rule\":");
      AppendJsonString(trace.trigger.rule, &out_);
      out_.append(",\"condition\":");
      AppendJsonString(trace.trigger.condition, &out_);
      out_.append(",\"reason\":");
      AppendJsonString(trace.trigger.reason, &out_);
      // A rule's threshold may be up to 10^18 ns: past 2^53 it is a string, as every integer.
      out_.append(",\"value_ns\":");
      AppendJsonUint(trace.trigger.value_ns, &out_);
      out_.append(",\"threshold_ns\":");
      AppendJsonUint(trace.trigger.threshold_ns, &out_);
      out_.push_back('}');
    }
    out_.append(",\"drops\":{");
    bool first = true;
    std::set<std::string> keys;
    for (const ProcessTrace& p : headers_) {
      if (!first) out_.push_back(',');
      first = false;
      // Keyed by pid; the same pid from two hosts must not make a duplicate key.
      std::string key = absl::StrCat(p.pid);
      if (!keys.insert(key).second) {
        key = absl::StrCat(p.pid, "@", p.host);
        for (int n = 2; !keys.insert(key).second; ++n) {
          key = absl::StrCat(p.pid, "@", p.host, "#", n);
        }
      }
      AppendJsonString(key, &out_);
      out_.append(":{");
      bool first_counter = true;
      for (const DropCounter& c : DropCounters(p.drops)) {
        if (!first_counter) out_.push_back(',');
        first_counter = false;
        absl::StrAppend(&out_, "\"", c.name, "\":");
        AppendJsonUint(c.value, &out_);
      }
      out_.push_back('}');
    }
    out_.append("}}");
  }

  absl::Status MaybeFlush() { return out_.MaybeFlush(); }

  JsonOut out_;
  bool first_event_ = true;
  std::vector<Source> sources_;
  std::deque<ProcessTrace> headers_;  // CaptureHeader of each process given, in order
  // Each process's capture instant: its header and time (0: the timeline's start).
  std::vector<std::pair<const ProcessTrace*, uint64_t>> instants_;
  // The synthetic tids of the lanes of the process given last, and its next one.
  std::map<LaneKey, uint32_t> lane_tids_;
  uint32_t next_tid_ = 1;
  std::vector<bool> flow_started_;  // by flow id: an entry of the flow is written
  // Scratch, reused from slice to slice and process to process.
  std::vector<Head> heads_;
  std::vector<PrefixCache> prefixes_;  // by source
  std::string arg_text_;
};

}  // namespace

void AppendJsonUint(uint64_t v, std::string* out) {
  char buf[24];
  out->append(buf, static_cast<size_t>(PutJsonUint(v, buf) - buf));
}

namespace {

class JsonStream : public LaneStream {
 public:
  explicit JsonStream(const std::string& output_dir)
      : opened_(file_.Open(absl::StrCat(output_dir, "/", ChromeJsonWriter::kFileName))),
        encoder_(&file_) {}

  absl::Status Add(const Trace& trace, const TraceLanes& lanes) override {
    if (!opened_.ok()) return opened_;
    return encoder_.AddProcesses(trace, lanes);
  }

  absl::Status Finish(const Trace& trace, uint64_t first_ns,
                      std::vector<std::string>* files) override {
    absl::Status s = opened_;
    if (s.ok()) s = encoder_.Finish(trace, first_ns);
    if (s.ok()) s = file_.Commit();  // else the temporary file goes with `file_`
    if (s.ok()) files->push_back(ChromeJsonWriter::kFileName);
    return s;
  }

 private:
  AtomicFile file_;
  const absl::Status opened_;
  JsonEncoder encoder_;
};

}  // namespace

absl::Status ChromeJsonWriter::WriteLanes(const Trace& trace, const TraceLanes& lanes,
                                          const std::string& output_dir,
                                          std::vector<std::string>* files) {
  JsonStream stream(output_dir);
  absl::Status s = stream.Add(trace, lanes);
  return s.ok() ? stream.Finish(trace, lanes.first_ns, files) : s;
}

std::unique_ptr<LaneStream> ChromeJsonWriter::OpenLaneStream(const std::string& output_dir) {
  return std::make_unique<JsonStream>(output_dir);
}

}  // namespace nrtprof::daemon
