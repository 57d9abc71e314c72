#include "trace/artifact_writer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_text.h"
#include "trace/atomic_file.h"
#include "trace/chrome_json_writer.h"
#include "trace/id_index.h"
#include "trace/json_out.h"

namespace nrtprof::daemon {
namespace {

// A model file counts as shipped only when whole: a truncated copy would be a broken .neff.
bool HasWholeBytes(const LoadedModelFile& m) {
  return !m.bytes.empty() && (m.size == 0 || m.size == m.bytes.size());
}

struct Execution {
  const ProcessTrace* process;
  const DeviceEvent* event;
};

using json_out::CopySmall;
using json_out::PutLiteral;

// Decimals as json_out::PutJsonUint writes them, in 32-bit pieces: a time in ns (13 to 16
// digits) is two halves of at most 8 digits, each written without counting its digits by
// division. The device traces are mostly times.
constexpr char kDigitPairs[] =
    "000102030405060708091011121314151617181920212223242526272829"
    "303132333435363738394041424344454647484950515253545556575859"
    "606162636465666768697071727374757677787980818283848586878889"
    "90919293949596979899";

inline void Put2(uint32_t x, char* p) { memcpy(p, kDigitPairs + 2 * x, 2); }

// x < 10^4, as exactly 4 digits.
inline void Put4(uint32_t x, char* p) {
  const uint32_t hi = x / 100;
  Put2(hi, p);
  Put2(x - hi * 100, p + 2);
}

// x < 10^4, its digits.
inline char* PutUpTo4(uint32_t x, char* p) {
  if (x < 100) {
    if (x < 10) {
      *p = static_cast<char>('0' + x);
      return p + 1;
    }
    Put2(x, p);
    return p + 2;
  }
  if (x < 1000) {
    const uint32_t hi = x / 100;
    *p = static_cast<char>('0' + hi);
    Put2(x - hi * 100, p + 1);
    return p + 3;
  }
  Put4(x, p);
  return p + 4;
}

// x < 10^8, its digits.
inline char* PutUpTo8(uint32_t x, char* p) {
  if (x < 10000) return PutUpTo4(x, p);
  const uint32_t hi = x / 10000;
  p = PutUpTo4(hi, p);
  Put4(x - hi * 10000, p);
  return p + 4;
}

// As json_out::PutJsonUint (at most 22 bytes).
inline char* PutUint(uint64_t v, char* p) {
  constexpr uint64_t kE8 = 100'000'000;
  if (v < kE8) return PutUpTo8(static_cast<uint32_t>(v), p);
  if (v > json_out::kMaxExactJsonInteger) return json_out::PutJsonUint(v, p);
  static_assert(json_out::kMaxExactJsonInteger < kE8 * kE8);
  const uint64_t hi = v / kE8;
  const uint32_t lo = static_cast<uint32_t>(v - hi * kE8);
  p = PutUpTo8(static_cast<uint32_t>(hi), p);
  const uint32_t lo_hi = lo / 10000;
  Put4(lo_hi, p);
  Put4(lo - lo_hi * 10000, p + 4);
  return p + 8;
}

// The JSON string of each Name (quoted, escaped as json_out::PutJsonString), made once per
// name, found by the address of its text: a capture's device work has a few dozen names, each
// written millions of times. Behind the table, a direct-mapped cache: nearly every look-up is
// one compare. Valid for one Trace (the addresses are its names'): Reset before each.
class NameJson {
 public:
  NameJson() { Reset(); }
  void Reset() {
    texts_.clear();
    for (Slot& s : slots_) s = Slot();
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE std::string_view Of(const Name& name) {
    const uint64_t h = (reinterpret_cast<uintptr_t>(name.id()) >> 3) * 0x9e3779b97f4a7c15ULL;
    Slot& s = slots_[h >> (64 - kSlotBits)];
    if (ABSL_PREDICT_FALSE(s.id != name.id())) Fill(name, &s);
    return s.text;
  }

 private:
  static constexpr int kSlotBits = 10;
  struct Slot {
    const void* id = nullptr;  // the empty Name's
    std::string_view text = "\"\"";
  };
  ABSL_ATTRIBUTE_NOINLINE void Fill(const Name& name, Slot* s) {
    auto [it, added] = texts_.try_emplace(name.id());
    if (added) {
      std::string& text = it->second;
      text.resize(json_out::JsonStringRoom(name.view()));
      text.resize(static_cast<size_t>(json_out::PutJsonString(name.view(), text.data()) -
                                      text.data()));
    }
    s->id = name.id();
    s->text = it->second;
  }
  std::unordered_map<const void*, std::string> texts_;  // its strings stay where they are
  std::array<Slot, size_t{1} << kSlotBits> slots_;
};

inline char* PutText(std::string_view text, char* p) {
  CopySmall(p, text.data(), text.size());
  return p + text.size();
}

// ,"start_ns":S,"duration_ns":D (at most 60 bytes).
inline char* PutTimes(const DeviceEvent& e, char* p) {
  p = PutLiteral(",\"start_ns\":", p);
  p = PutUint(e.start_ns, p);
  p = PutLiteral(",\"duration_ns\":", p);
  return PutUint(e.duration_ns, p);
}

// An op's or a transfer's entry in its execution's "ops" or "dma", after a comma unless it is
// the list's first.
inline void AppendChild(const DeviceEvent& e, bool first, NameJson* names, JsonOut* out) {
  const bool op = e.kind == DeviceEventKind::kEngineOp;
  const std::string_view name = names->Of(e.name);
  const std::string_view second = names->Of(op ? e.engine : e.tensor_name);
  char* p = out->Room(128 + name.size() + second.size());
  if (!first) *p++ = ',';
  p = PutLiteral("{\"name\":", p);
  p = PutText(name, p);
  if (op) {
    p = PutLiteral(",\"engine\":", p);
    p = PutText(second, p);
  } else {
    p = PutLiteral(",\"bytes\":", p);
    p = PutUint(e.bytes, p);
    p = PutLiteral(",\"tensor\":", p);
    p = PutText(second, p);
  }
  p = PutTimes(e, p);
  *p++ = '}';
  out->Done(p);
}

// The .ntff.json document: a JSON array of executions by process (the Trace's order: pid, then
// host) and start.
// (execution, work inside it), by execution then by start (ties in trace order).
using Child = std::pair<const DeviceEvent*, const DeviceEvent*>;
using ChildList = std::vector<Child>;

struct ChildOrder {
  bool operator()(const Child& a, const Child& b) const {
    if (a.first != b.first) return std::less<const DeviceEvent*>()(a.first, b.first);
    return a.second->start_ns < b.second->start_ns;
  }
};

// Appends the executions' entries to a .ntff.json document begun with "[" (`first`: none
// appended yet); the closing "\n]\n" is the caller's. The text goes to the file as it grows
// (one process's device trace can be hundreds of MiB).
void AppendExecutions(std::vector<Execution> executions, const ChildList& children, bool* first,
                      NameJson* names, JsonOut* out) {
  std::stable_sort(executions.begin(), executions.end(),
                   [](const Execution& a, const Execution& b) {
                     // By process in the Trace's order (pid, then host), then start.
                     if (a.process != b.process) {
                       return std::less<const ProcessTrace*>()(a.process, b.process);
                     }
                     return a.event->start_ns < b.event->start_ns;
                   });
  // {"pid":P,"model":M,"nc_idx":N,"exec_id": of the executions before, made again only when
  // their process, model or core changes (in a device trace, hardly ever).
  std::string head;
  const ProcessTrace* head_process = nullptr;
  const void* head_model = nullptr;
  int32_t head_nc = 0;
  // Where the children of the execution after the one before begin: a process's executions
  // and their work are mostly in the same order, so each run is found a little after where
  // the last one ended (other device traces' executions between them).
  ChildList::const_iterator next_run = children.begin();
  auto before = [](const Child& c, const DeviceEvent* x) {
    return std::less<const DeviceEvent*>()(c.first, x);
  };
  for (size_t i = 0; i < executions.size(); ++i) {
    const DeviceEvent& e = *executions[i].event;
    if (head.empty() || executions[i].process != head_process || e.model_name.id() != head_model ||
        e.nc_idx != head_nc) {
      head_process = executions[i].process;
      head_model = e.model_name.id();
      head_nc = e.nc_idx;
      const std::string_view model = names->Of(e.model_name);
      head.resize(128 + model.size());
      char* p = head.data();
      p = PutLiteral("{\"pid\":", p);
      p = PutUint(head_process->pid, p);
      p = PutLiteral(",\"model\":", p);
      p = PutText(model, p);
      p = PutLiteral(",\"nc_idx\":", p);
      p = json_out::PutJsonInt(e.nc_idx, p);
      p = PutLiteral(",\"exec_id\":", p);
      head.resize(static_cast<size_t>(p - head.data()));
    }
    char* p = out->Room(256 + head.size());
    if (!*first) *p++ = ',';
    *p++ = '\n';
    *first = false;
    memcpy(p, head.data(), head.size());
    p += head.size();
    p = PutUint(e.exec_id, p);
    p = PutLiteral(",\"correlation_id\":", p);
    p = PutUint(e.correlation_id, p);
    p = PutLiteral(",\"submitting_tid\":", p);
    p = PutUint(e.submitting_tid, p);
    p = PutTimes(e, p);
    p = PutLiteral(",\"ops\":[", p);
    out->Done(p);
    ChildList::const_iterator run = next_run;
    if (run == children.end() || run->first != &e) {
      if (run != children.end() && before(*run, &e)) {
        // Ahead: strides that double, then a binary search within the last.
        ChildList::const_iterator low = run;
        size_t stride = 1;
        while (static_cast<size_t>(children.end() - run) > stride && before(run[stride], &e)) {
          low = run + stride;
          stride *= 2;
        }
        const ChildList::const_iterator high =
            static_cast<size_t>(children.end() - run) > stride ? run + stride : children.end();
        run = std::lower_bound(low, high, &e, before);
      } else {
        run = std::lower_bound(children.begin(), children.end(), &e, before);
      }
    }
    ChildList::const_iterator end = run;
    while (end != children.end() && end->first == &e) ++end;
    next_run = end;
    // The next few children's events, which are likely the next execution's, on their way to
    // the cache while this one's are written.
    // (An event is two cache lines: kind and name in the first, engine and tensor the second.)
    const size_t ahead = std::min<size_t>(8, static_cast<size_t>(children.end() - end));
    for (size_t k = 0; k < ahead; ++k) {
      const char* next = reinterpret_cast<const char*>(end[k].second);
      __builtin_prefetch(next);
      __builtin_prefetch(next + sizeof(DeviceEvent) - 1);
    }
    if (i + 1 < executions.size()) __builtin_prefetch(executions[i + 1].event);
    bool none = true;
    for (auto c = run; c != end; ++c) {
      if (c->second->kind == DeviceEventKind::kDma) continue;
      AppendChild(*c->second, none, names, out);
      none = false;
    }
    out->Append("],\"dma\":[");
    none = true;
    for (auto c = run; c != end; ++c) {
      if (c->second->kind != DeviceEventKind::kDma) continue;
      AppendChild(*c->second, none, names, out);
      none = false;
    }
    out->Append("]}");
    out->MaybeFlush().IgnoreError();  // kept, and returned by the caller's Flush
  }
}


// The artifacts of the processes given so far: each model file written when first seen, each
// device trace open (a temporary file) with the executions so far, closed by Finish.
class ArtifactStream : public TraceStream {
 public:
  explicit ArtifactStream(std::string output_dir) : output_dir_(std::move(output_dir)) {}

  absl::Status Add(const Trace& trace) override {
    names_.Reset();  // the names of the Trace before may be gone
    std::map<std::pair<std::string, int32_t>, std::vector<Execution>> ntff;  // (hash, nc)
    ChildList children;
    for (const ProcessTrace& p : trace.processes) {
      // A model's executions name it; the first whole copy loaded under that name gives its
      // hash. A later part of the process (ProcessTrace::continues) adds the names it learnt.
      if (!p.continues) hash_of_name_.clear();
      std::unordered_map<std::string, std::string>& hash_of_name = hash_of_name_;
      for (const LoadedModelFile& m : p.models) {
        if (!HasWholeBytes(m)) continue;
        std::string hash = ModelHash(m.bytes);
        if (neff_.insert(hash).second) {
          absl::Status s =
              WriteFileAtomically(absl::StrCat(output_dir_, "/", NeffName(hash)), m.bytes);
          if (s.ok()) {
            written_.insert(hash);
          } else if (first_error_.ok()) {
            first_error_ = s;
          }
        }
        hash_of_name.emplace(m.name, hash);
      }
      // A parent is found by its id (in a table: the correlator numbers a process's device
      // events one after another), and a model's device trace once per name and core: by the
      // Name's id, one text one id (trace_name.h), with no text hashed per execution.
      const IdIndex<DeviceEvent, &DeviceEvent::id, CaptureVector<DeviceEvent>> by_id(p.device);
      absl::flat_hash_map<std::pair<const void*, int32_t>, std::vector<Execution>*> trace_of;
      for (const DeviceEvent& e : p.device) {
        if (e.kind == DeviceEventKind::kExecution) {
          if (e.model_name.empty()) continue;  // nothing to pair it with; it is in the traces
          std::vector<Execution>*& executions = trace_of[{e.model_name.id(), e.nc_idx}];
          if (executions == nullptr) {
            auto h = hash_of_name.find(e.model_name);
            std::string hash = h != hash_of_name.end() ? h->second : ModelHash(e.model_name);
            executions = &ntff[{std::move(hash), e.nc_idx}];
          }
          executions->push_back({&p, &e});
        } else if (e.parent != 0) {
          const DeviceEvent* parent = by_id.Find(e.parent);
          if (parent != nullptr && parent->kind == DeviceEventKind::kExecution) {
            children.emplace_back(parent, &e);
          }
        }
      }
    }
    // Usually in order already: each execution's work follows it in the trace, by start.
    if (!std::is_sorted(children.begin(), children.end(), ChildOrder())) {
      std::stable_sort(children.begin(), children.end(), ChildOrder());
    }
    for (auto& [key, executions] : ntff) {
      DeviceTrace& out = ntff_[key];
      // Each device trace's text from this part of the capture, through the one buffer.
      JsonOut& text = text_;
      text.set_file(&out.file);
      if (!out.opened) {
        out.opened = true;
        out.status = out.file.Open(absl::StrCat(output_dir_, "/", NtffName(key)));
        text.Append("[");
      }
      AppendExecutions(std::move(executions), children, &out.empty, &names_, &text);
      if (absl::Status s = text.FlushAndReset(); out.status.ok()) out.status = s;
    }
    return absl::OkStatus();
  }

  // Every artifact it can; the first error after trying them all.
  absl::Status Finish(const Trace&, const Summary&, std::vector<std::string>* files) override {
    for (const std::string& hash : written_) files->push_back(NeffName(hash));
    for (auto& [key, out] : ntff_) {
      if (out.status.ok()) out.status = out.file.Append("\n]\n");
      if (out.status.ok()) out.status = out.file.Commit();
      if (out.status.ok()) {
        files->push_back(NtffName(key));
      } else if (first_error_.ok()) {
        first_error_ = out.status;
      }
    }
    return first_error_;
  }

 private:
  struct DeviceTrace {
    AtomicFile file;
    absl::Status status;
    bool opened = false;
    bool empty = true;  // no execution appended yet
  };
  static std::string NeffName(const std::string& hash) {
    return absl::StrCat("model_", hash, ".neff");
  }
  static std::string NtffName(const std::pair<std::string, int32_t>& key) {
    return absl::StrCat("model_", key.first, "_nc", key.second, ".ntff.json");
  }
  const std::string output_dir_;
  std::set<std::string> neff_;     // model hashes seen
  std::set<std::string> written_;  // and their .neff written
  std::map<std::pair<std::string, int32_t>, DeviceTrace> ntff_;
  JsonOut text_;  // the device traces' text on its way to their files, one at a time
  NameJson names_;
  // Of the process given last: its models' hashes by name.
  std::unordered_map<std::string, std::string> hash_of_name_;
  absl::Status first_error_;
};

}  // namespace

absl::Status ArtifactWriter::Write(const Trace& trace, const Summary& summary,
                                   const std::string& output_dir, std::vector<std::string>* files) {
  ArtifactStream stream(output_dir);
  absl::Status s = stream.Add(trace);
  return s.ok() ? stream.Finish(trace, summary, files) : s;
}

std::unique_ptr<TraceStream> ArtifactWriter::OpenStream(const std::string& output_dir) {
  return std::make_unique<ArtifactStream>(output_dir);
}

}  // namespace nrtprof::daemon
