#include "trace/chrome_json_writer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_text.h"
#include "trace/atomic_file.h"
#include "trace/trace_lanes.h"

namespace nrtprof::daemon {
namespace {

constexpr uint64_t kMaxExactJsonInteger = uint64_t{1} << 53;
constexpr size_t kFlushBytes = 256 << 10;
constexpr char kCaptureEventName[] = "nrtprof capture";
constexpr char kFlowCategory[] = "flow";
constexpr char kFlowName[] = "correlation";

// The fixed-format pieces of an entry are put together in a buffer on the stack and appended
// at once: appending them piece by piece was most of the writer's time.

// v in decimal, as absl::StrAppend writes it (at most 20 bytes).
char* PutDecimal(uint64_t v, char* p) {
  char buf[20];
  char* end = buf + sizeof(buf);
  char* q = end;
  do {
    *--q = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  const size_t n = static_cast<size_t>(end - q);
  memcpy(p, q, n);
  return p + n;
}

// ns as microseconds with three decimals: exact, whatever the magnitude (at most 24 bytes).
char* PutMicros(uint64_t ns, char* p) {
  p = PutDecimal(ns / 1000, p);
  const uint64_t frac = ns % 1000;
  *p++ = '.';
  *p++ = static_cast<char>('0' + frac / 100);
  *p++ = static_cast<char>('0' + frac / 10 % 10);
  *p++ = static_cast<char>('0' + frac % 10);
  return p;
}

// A string literal, without its terminating NUL.
template <size_t N>
char* PutLiteral(const char (&text)[N], char* p) {
  memcpy(p, text, N - 1);
  return p + N - 1;
}

// An unsigned integer as a JSON number, or as a decimal string beyond 2^53 (at most 22 bytes).
char* PutJsonUint(uint64_t v, char* p) {
  if (v <= kMaxExactJsonInteger) return PutDecimal(v, p);
  *p++ = '"';
  p = PutDecimal(v, p);
  *p++ = '"';
  return p;
}

// A signed integer likewise (at most 23 bytes).
char* PutJsonInt(int64_t v, char* p) {
  if (v >= 0) return PutJsonUint(static_cast<uint64_t>(v), p);
  const uint64_t magnitude = 0 - static_cast<uint64_t>(v);
  const bool quoted = magnitude > kMaxExactJsonInteger;
  if (quoted) *p++ = '"';
  *p++ = '-';
  p = PutDecimal(magnitude, p);
  if (quoted) *p++ = '"';
  return p;
}

void AppendArgs(const std::vector<SliceArg>& args, std::string* out) {
  out->append(",\"args\":{");
  bool first = true;
  for (const SliceArg& a : args) {
    if (!first) out->push_back(',');
    first = false;
    AppendJsonString(a.name, out);
    char buf[32];
    char* p = buf;
    *p++ = ':';
    switch (a.type) {
      case SliceArg::Type::kString:
        out->push_back(':');
        AppendJsonString(a.string_value, out);
        continue;
      case SliceArg::Type::kUint:
        p = PutJsonUint(a.uint_value, p);
        break;
      case SliceArg::Type::kInt:
        p = PutJsonInt(a.int_value, p);
        break;
    }
    out->append(buf, static_cast<size_t>(p - buf));
  }
  out->push_back('}');
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

// Writes the file a process at a time, whether the capture's processes are given all at once
// or a few at a time (a TraceStream): each process's metadata, then its events merged into one
// time order. Finish writes what had to wait: the processes' capture instants (whose counts a
// process's later parts add to; one without events is at the timeline's start, known only
// then) and otherData.
class JsonEncoder {
 public:
  explicit JsonEncoder(AtomicFile* file) : file_(file) {
    out_.reserve(kFlushBytes + (64 << 10));
    out_.append("{\"traceEvents\":[\n");
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
    out_.append("\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":");
    AppendOtherData(trace);
    out_.append("}\n");
    return file_->Append(out_);
  }

 private:
  // Merges sources_ into one time order.
  absl::Status WriteSources(const Trace& trace) {
    using Head = std::pair<uint64_t, size_t>;  // (ts, source)
    std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
    for (size_t i = 0; i < sources_.size(); ++i) {
      if (!sources_[i].done()) heads.push({sources_[i].ts(), i});
    }
    absl::Status s;
    while (s.ok() && !heads.empty()) {
      const size_t i = heads.top().second;
      heads.pop();
      Source& source = sources_[i];
      // A source stays in front while its next entry still sorts before every other head.
      do {
        AppendEntries(trace, source);
        ++source.next;
        s = MaybeFlush();
      } while (s.ok() && !source.done() && (heads.empty() || Head{source.ts(), i} < heads.top()));
      if (!source.done()) heads.push({source.ts(), i});
    }
    return s;
  }

  void Separator() {
    if (!first_event_) out_.append(",\n");
    first_event_ = false;
  }

  // {"ph":"M",...,"name":NAME,"args":{"name":"..."}} names a process (tid 0) or a lane, and
  // {"name":"thread_sort_index","args":{"sort_index":N}} orders the lanes.
  void AppendName(uint32_t pid, uint32_t tid, const char* what, const std::string& name) {
    Separator();
    absl::StrAppend(&out_, "{\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid, ",\"name\":\"", what,
                    "\",\"args\":{\"name\":");
    AppendJsonString(name, &out_);
    out_.append("}}");
  }

  void AppendSortIndex(uint32_t pid, uint32_t tid) {
    Separator();
    absl::StrAppend(&out_, "{\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
                    ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":", tid, "}}");
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

  // ,"pid":P,"tid":T,"ts":TS (at most 70 bytes).
  static char* PutWhere(const Source& source, uint64_t ts, char* p) {
    p = PutLiteral(",\"pid\":", p);
    p = PutDecimal(source.pid, p);
    p = PutLiteral(",\"tid\":", p);
    p = PutDecimal(source.tid, p);
    p = PutLiteral(",\"ts\":", p);
    return PutMicros(ts, p);
  }

  // The source's next entry: a capture instant, or a slice and its flow events. A flow begins
  // at its earliest slice ("s"), passes through the middle ones ("t") and ends at the slice
  // that lists it as terminating ("f", bound to that enclosing slice).
  void AppendEntries(const Trace& trace, const Source& source) {
    char buf[160];
    if (source.counter != nullptr) {
      // {"ph":"C","cat":"nrtprof","name":NAME,"pid":P,"tid":0,"ts":TS,"args":{"requests":N}}
      Separator();
      out_.append("{\"ph\":\"C\",\"cat\":\"nrtprof\",\"name\":");
      AppendJsonString(source.counter_name, &out_);
      char* p = PutWhere(source, source.counter->points[source.next].ts, buf);
      p = PutLiteral(",\"args\":{\"requests\":", p);
      p = PutJsonInt(source.counter->points[source.next].value, p);
      p = PutLiteral("}}", p);
      out_.append(buf, static_cast<size_t>(p - buf));
      return;
    }
    if (source.lane == nullptr) {
      Separator();
      char* p = PutLiteral("{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"nrtprof\",\"name\":\"", buf);
      p = PutLiteral(kCaptureEventName, p);
      *p++ = '"';
      p = PutWhere(source, source.instant_ns, p);
      out_.append(buf, static_cast<size_t>(p - buf));
      AppendArgs(CaptureArgs(trace, *source.process), &out_);
      out_.push_back('}');
      return;
    }
    const LaneSlice& slice = source.lane->slices[source.next];
    Separator();
    out_.append("{\"ph\":\"X\",\"cat\":\"");
    out_.append(LaneKindName(source.lane->kind));
    out_.append("\",\"name\":");
    AppendJsonString(slice.name, &out_);
    char* p = PutWhere(source, slice.start_ns, buf);
    p = PutLiteral(",\"dur\":", p);
    p = PutMicros(slice.end_ns - slice.start_ns, p);
    out_.append(buf, static_cast<size_t>(p - buf));
    SliceArgs(slice, &args_, &arg_text_);
    if (!args_.empty()) AppendArgs(args_, &out_);
    out_.push_back('}');
    for (uint64_t id : slice.flow_ids) AppendFlow(source, slice.start_ns, id, false);
    for (uint64_t id : slice.terminating_flow_ids) AppendFlow(source, slice.start_ns, id, true);
  }

  void AppendFlow(const Source& source, uint64_t ts, uint64_t id, bool terminates) {
    char phase = 'f';
    if (!terminates) phase = id < flow_started_.size() && flow_started_[id] ? 't' : 's';
    if (id < flow_started_.size()) flow_started_[id] = true;
    Separator();
    char buf[192];
    char* p = PutLiteral("{\"ph\":\"", buf);
    *p++ = phase;
    p = PutLiteral("\",\"cat\":\"", p);
    p = PutLiteral(kFlowCategory, p);
    p = PutLiteral("\",\"name\":\"", p);
    p = PutLiteral(kFlowName, p);
    p = PutLiteral("\",\"id\":", p);
    p = PutDecimal(id, p);
    p = PutWhere(source, ts, p);
    if (phase == 'f') p = PutLiteral(",\"bp\":\"e\"", p);
    *p++ = '}';
    out_.append(buf, static_cast<size_t>(p - buf));
  }

  void AppendOtherData(const Trace& trace) {
    out_.append("{\"capture_id\":");
    AppendJsonString(trace.capture_id, &out_);
    if (!trace.trigger.rule.empty()) {  // a rule of the daemon's took it (nrtprofd --trigger)
      out_.append(",\"trigger\":{\"rule\":");
      AppendJsonString(trace.trigger.rule, &out_);
      out_.append(",\"condition\":");
      AppendJsonString(trace.trigger.condition, &out_);
      out_.append(",\"reason\":");
      AppendJsonString(trace.trigger.reason, &out_);
      absl::StrAppend(&out_, ",\"value_ns\":", trace.trigger.value_ns, ",\"threshold_ns\":",
                      trace.trigger.threshold_ns, "}");
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

  absl::Status MaybeFlush() {
    if (out_.size() < kFlushBytes) return absl::OkStatus();
    absl::Status s = file_->Append(out_);
    out_.clear();
    return s;
  }

  AtomicFile* file_;
  std::string out_;
  bool first_event_ = true;
  std::vector<Source> sources_;
  std::deque<ProcessTrace> headers_;  // CaptureHeader of each process given, in order
  // Each process's capture instant: its header and time (0: the timeline's start).
  std::vector<std::pair<const ProcessTrace*, uint64_t>> instants_;
  // The synthetic tids of the lanes of the process given last, and its next one.
  std::map<LaneKey, uint32_t> lane_tids_;
  uint32_t next_tid_ = 1;
  std::vector<bool> flow_started_;  // by flow id: an entry of the flow is written
  // Scratch, reused from slice to slice.
  std::vector<SliceArg> args_;
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
