#include "trace/artifact_writer.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

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

using json_out::JsonStringRoom;
using json_out::PutJsonString;
using json_out::PutJsonUint;
using json_out::PutLiteral;

// ,"start_ns":S,"duration_ns":D (at most 60 bytes).
char* PutTimes(const DeviceEvent& e, char* p) {
  p = PutLiteral(",\"start_ns\":", p);
  p = PutJsonUint(e.start_ns, p);
  p = PutLiteral(",\"duration_ns\":", p);
  return PutJsonUint(e.duration_ns, p);
}

// An op's or a transfer's entry in its execution's "ops" or "dma".
void AppendChild(const DeviceEvent& e, JsonOut* out) {
  const bool op = e.kind == DeviceEventKind::kEngineOp;
  char* p = out->Room(128 + JsonStringRoom(e.name) +
                      JsonStringRoom(op ? e.engine.view() : e.tensor_name.view()));
  p = PutLiteral("{\"name\":", p);
  p = PutJsonString(e.name, p);
  if (op) {
    p = PutLiteral(",\"engine\":", p);
    p = PutJsonString(e.engine, p);
  } else {
    p = PutLiteral(",\"bytes\":", p);
    p = PutJsonUint(e.bytes, p);
    p = PutLiteral(",\"tensor\":", p);
    p = PutJsonString(e.tensor_name, p);
  }
  p = PutTimes(e, p);
  *p++ = '}';
  out->Done(p);
}

// The .ntff.json document: a JSON array of executions by process (the Trace's order: pid, then
// host) and start.
// (execution, work inside it), by execution then by start (ties in trace order).
using ChildList = std::vector<std::pair<const DeviceEvent*, const DeviceEvent*>>;

bool ChildOrder(const std::pair<const DeviceEvent*, const DeviceEvent*>& a,
                const std::pair<const DeviceEvent*, const DeviceEvent*>& b) {
  if (a.first != b.first) return std::less<const DeviceEvent*>()(a.first, b.first);
  return a.second->start_ns < b.second->start_ns;
}

// Appends the executions' entries to a .ntff.json document begun with "[" (`first`: none
// appended yet); the closing "\n]\n" is the caller's. The text goes to the file as it grows
// (one process's device trace can be hundreds of MiB).
void AppendExecutions(std::vector<Execution> executions, const ChildList& children, bool* first,
                      JsonOut* out) {
  std::stable_sort(executions.begin(), executions.end(),
                   [](const Execution& a, const Execution& b) {
                     // By process in the Trace's order (pid, then host), then start.
                     if (a.process != b.process) {
                       return std::less<const ProcessTrace*>()(a.process, b.process);
                     }
                     return a.event->start_ns < b.event->start_ns;
                   });
  std::vector<const DeviceEvent*> ops, dma;
  for (size_t i = 0; i < executions.size(); ++i) {
    const DeviceEvent& e = *executions[i].event;
    char* p = out->Room(256 + JsonStringRoom(e.model_name));
    if (!*first) *p++ = ',';
    *p++ = '\n';
    *first = false;
    p = PutLiteral("{\"pid\":", p);
    p = PutJsonUint(executions[i].process->pid, p);
    p = PutLiteral(",\"model\":", p);
    p = PutJsonString(e.model_name, p);
    p = PutLiteral(",\"nc_idx\":", p);
    p = json_out::PutJsonInt(e.nc_idx, p);
    p = PutLiteral(",\"exec_id\":", p);
    p = PutJsonUint(e.exec_id, p);
    p = PutLiteral(",\"correlation_id\":", p);
    p = PutJsonUint(e.correlation_id, p);
    p = PutLiteral(",\"submitting_tid\":", p);
    p = PutJsonUint(e.submitting_tid, p);
    p = PutTimes(e, p);
    out->Done(p);
    ops.clear();
    dma.clear();
    auto run = std::lower_bound(
        children.begin(), children.end(), &e,
        [](const std::pair<const DeviceEvent*, const DeviceEvent*>& c, const DeviceEvent* x) {
          return std::less<const DeviceEvent*>()(c.first, x);
        });
    for (; run != children.end() && run->first == &e; ++run) {
      (run->second->kind == DeviceEventKind::kDma ? dma : ops).push_back(run->second);
    }
    out->Append(",\"ops\":[");
    for (size_t k = 0; k < ops.size(); ++k) {
      if (k > 0) out->Append(",");
      AppendChild(*ops[k], out);
    }
    out->Append("],\"dma\":[");
    for (size_t k = 0; k < dma.size(); ++k) {
      if (k > 0) out->Append(",");
      AppendChild(*dma[k], out);
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
    if (!std::is_sorted(children.begin(), children.end(), ChildOrder)) {
      std::stable_sort(children.begin(), children.end(), ChildOrder);
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
      AppendExecutions(std::move(executions), children, &out.empty, &text);
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
