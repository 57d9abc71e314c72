#include "daemon/chrome_json_writer.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/atomic_file.h"
#include "daemon/trace_lanes.h"

namespace nrtprof::daemon {
namespace {

constexpr uint64_t kMaxExactJsonInteger = uint64_t{1} << 53;
constexpr size_t kFlushBytes = 256 << 10;
constexpr char kCaptureEventName[] = "nrtprof capture";
constexpr char kFlowCategory[] = "flow";
constexpr char kFlowName[] = "correlation";

// Length of the well-formed UTF-8 sequence starting at s[i] (a byte >= 0x80), or 0 if there
// is none (stray continuation byte, overlong form, surrogate, beyond U+10FFFF, truncated).
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // no overlong forms
    if (c == 0xed) hi = 0x9f;  // no UTF-16 surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;  // nothing beyond U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  }
  return n;
}

// ns as microseconds with three decimals: exact, whatever the magnitude.
void AppendMicros(uint64_t ns, std::string* out) {
  uint64_t frac = ns % 1000;
  absl::StrAppend(out, ns / 1000, ".");
  out->push_back(static_cast<char>('0' + frac / 100));
  out->push_back(static_cast<char>('0' + frac / 10 % 10));
  out->push_back(static_cast<char>('0' + frac % 10));
}

void AppendJsonInt(int64_t v, std::string* out) {
  if (v >= 0) return AppendJsonUint(static_cast<uint64_t>(v), out);
  uint64_t magnitude = 0 - static_cast<uint64_t>(v);
  if (magnitude <= kMaxExactJsonInteger) {
    absl::StrAppend(out, v);
  } else {
    absl::StrAppend(out, "\"", v, "\"");
  }
}

void AppendArgs(const std::vector<SliceArg>& args, std::string* out) {
  out->append(",\"args\":{");
  bool first = true;
  for (const SliceArg& a : args) {
    if (!first) out->push_back(',');
    first = false;
    AppendJsonString(a.name, out);
    out->push_back(':');
    switch (a.type) {
      case SliceArg::Type::kString:
        AppendJsonString(a.string_value, out);
        break;
      case SliceArg::Type::kUint:
        AppendJsonUint(a.uint_value, out);
        break;
      case SliceArg::Type::kInt:
        AppendJsonInt(a.int_value, out);
        break;
    }
  }
  out->push_back('}');
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// One timestamped entry of traceEvents, kept small until it is written out.
struct Record {
  enum Kind : uint8_t { kSlice, kFlow, kCaptureInstant };
  uint64_t ts = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  Kind kind = kSlice;
  char phase = 'X';  // flows: 's', 't' or 'f'
  LaneKind lane = LaneKind::kRuntime;
  uint64_t flow_id = 0;
  const LaneSlice* slice = nullptr;
  const ProcessTrace* process = nullptr;
};

class JsonEncoder {
 public:
  JsonEncoder(const Trace& trace, AtomicFile* file) : trace_(trace), file_(file) {}

  absl::Status Encode() {
    TraceLanes lanes = BuildLanes(trace_);
    out_.append("{\"traceEvents\":[\n");
    for (const ProcessLanes& p : lanes.processes) AddProcess(p, lanes.first_ns);
    AssignFlowPhases();
    // Time order; the stable sort keeps, at equal times, an enclosing slice before the
    // slices and flow events that begin with it, so each flow binds to the right slice.
    std::stable_sort(records_.begin(), records_.end(),
                     [](const Record& a, const Record& b) { return a.ts < b.ts; });
    absl::Status s;
    for (const Record& r : records_) {
      if (!s.ok()) break;
      AppendRecord(r);
      s = MaybeFlush();
    }
    if (!s.ok()) return s;
    out_.append("\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":");
    AppendOtherData();
    out_.append("}\n");
    return file_->Append(out_);
  }

 private:
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

  // Gives the lane the next synthetic tid of its process, names it, and queues its slices and
  // their flow events (each right after its slice).
  void AddLane(const Lane& lane, uint32_t pid, const std::string& label, uint32_t* next_tid) {
    if (lane.slices.empty()) return;
    uint32_t tid = (*next_tid)++;
    AppendName(pid, tid, "thread_name", label);
    AppendSortIndex(pid, tid);
    for (const LaneSlice& s : lane.slices) {
      Record r;
      r.ts = s.start_ns;
      r.pid = pid;
      r.tid = tid;
      r.lane = lane.kind;
      r.slice = &s;
      records_.push_back(r);
      auto add_flow = [&](uint64_t id) {
        Record f = r;
        f.kind = Record::kFlow;
        f.flow_id = id;
        flows_[id].push_back(records_.size());
        records_.push_back(f);
      };
      for (uint64_t id : s.flow_ids) add_flow(id);
      for (uint64_t id : s.terminating_flow_ids) add_flow(id);
    }
  }

  void AddProcess(const ProcessLanes& lanes, uint64_t trace_first_ns) {
    const ProcessTrace& p = *lanes.process;
    std::string name = !p.executable.empty()     ? Basename(p.executable)
                       : !p.command_line.empty() ? Basename(p.command_line[0])
                                                 : "";
    if (name.empty()) name = absl::StrCat("pid ", p.pid);
    AppendName(p.pid, 0, "process_name", name);
    Record capture;
    capture.kind = Record::kCaptureInstant;
    capture.ts = lanes.has_events ? lanes.first_ns : trace_first_ns;
    capture.pid = p.pid;
    capture.process = &p;
    records_.push_back(capture);
    uint32_t next_tid = 1;  // 0 is the process itself
    for (const ThreadLanes& t : lanes.threads) {
      std::string thread =
          t.name != nullptr ? absl::StrCat(t.tid, " ", *t.name) : absl::StrCat(t.tid);
      AddLane(t.framework, p.pid, absl::StrCat(thread, " framework"), &next_tid);
      AddLane(t.runtime, p.pid, absl::StrCat(thread, " runtime"), &next_tid);
    }
    for (const CoreLanes& c : lanes.cores) {
      AddLane(c.executions, p.pid, absl::StrCat("NeuronCore ", c.nc_idx), &next_tid);
      AddLane(c.dma, p.pid, absl::StrCat("NeuronCore ", c.nc_idx, " DMA"), &next_tid);
    }
  }

  // A flow begins at its earliest slice ("s"), passes through the middle ones ("t") and ends
  // at the slice that lists it as terminating ("f", bound to that enclosing slice).
  void AssignFlowPhases() {
    for (auto& [id, indices] : flows_) {
      std::stable_sort(indices.begin(), indices.end(),
                       [&](size_t a, size_t b) { return records_[a].ts < records_[b].ts; });
      for (size_t k = 0; k < indices.size(); ++k) {
        Record& r = records_[indices[k]];
        const auto& ends = r.slice->terminating_flow_ids;
        bool terminates = std::find(ends.begin(), ends.end(), id) != ends.end();
        r.phase = terminates ? 'f' : (k == 0 ? 's' : 't');
      }
    }
  }

  void AppendRecord(const Record& r) {
    Separator();
    switch (r.kind) {
      case Record::kSlice:
        out_.append("{\"ph\":\"X\",\"cat\":\"");
        out_.append(LaneKindName(r.lane));
        out_.append("\",\"name\":");
        AppendJsonString(*r.slice->name, &out_);
        absl::StrAppend(&out_, ",\"pid\":", r.pid, ",\"tid\":", r.tid, ",\"ts\":");
        AppendMicros(r.ts, &out_);
        out_.append(",\"dur\":");
        AppendMicros(r.slice->end_ns - r.slice->start_ns, &out_);
        if (!r.slice->args.empty()) AppendArgs(r.slice->args, &out_);
        out_.push_back('}');
        break;
      case Record::kFlow:
        absl::StrAppend(&out_, "{\"ph\":\"", std::string(1, r.phase), "\",\"cat\":\"",
                        kFlowCategory, "\",\"name\":\"", kFlowName, "\",\"id\":", r.flow_id,
                        ",\"pid\":", r.pid, ",\"tid\":", r.tid, ",\"ts\":");
        AppendMicros(r.ts, &out_);
        if (r.phase == 'f') out_.append(",\"bp\":\"e\"");
        out_.push_back('}');
        break;
      case Record::kCaptureInstant:
        absl::StrAppend(&out_, "{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"nrtprof\",\"name\":\"",
                        kCaptureEventName, "\",\"pid\":", r.pid, ",\"tid\":0,\"ts\":");
        AppendMicros(r.ts, &out_);
        AppendArgs(CaptureArgs(trace_, *r.process), &out_);
        out_.push_back('}');
        break;
    }
  }

  void AppendOtherData() {
    out_.append("{\"capture_id\":");
    AppendJsonString(trace_.capture_id, &out_);
    out_.append(",\"drops\":{");
    bool first = true;
    std::set<std::string> keys;
    for (const ProcessTrace& p : trace_.processes) {
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

  const Trace& trace_;
  AtomicFile* file_;
  std::string out_;
  bool first_event_ = true;
  std::vector<Record> records_;
  std::map<uint64_t, std::vector<size_t>> flows_;  // flow id -> its records
};

}  // namespace

void AppendJsonString(absl::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      switch (c) {
        case '\b':
          out->append("\\b");
          break;
        case '\f':
          out->append("\\f");
          break;
        case '\n':
          out->append("\\n");
          break;
        case '\r':
          out->append("\\r");
          break;
        case '\t':
          out->append("\\t");
          break;
        default:
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xf]);
      }
      ++i;
    } else if (c < 0x80) {
      out->push_back(static_cast<char>(c));
      ++i;
    } else if (size_t n = Utf8SequenceLength(s, i); n > 0) {
      out->append(s.data() + i, n);
      i += n;
    } else {
      out->append("\\ufffd");
      ++i;
    }
  }
  out->push_back('"');
}

void AppendJsonUint(uint64_t v, std::string* out) {
  if (v <= kMaxExactJsonInteger) {
    absl::StrAppend(out, v);
  } else {
    absl::StrAppend(out, "\"", v, "\"");
  }
}

absl::Status ChromeJsonWriter::Write(const Trace& trace, const std::string& output_dir,
                                     std::vector<std::string>* files) {
  AtomicFile file;
  absl::Status s = file.Open(absl::StrCat(output_dir, "/", kFileName));
  if (!s.ok()) return s;
  s = JsonEncoder(trace, &file).Encode();
  if (!s.ok()) return s;
  s = file.Commit();
  if (!s.ok()) return s;
  files->push_back(kFileName);
  return absl::OkStatus();
}

}  // namespace nrtprof::daemon
