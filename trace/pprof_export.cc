// StackProfile: a capture's device and host time by stack, written as a pprof Profile or as
// folded stacks (pprof_export.h says what each stack and value is).
#include "trace/pprof_export.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trace/id_index.h"
#include "trace/summary.h"

namespace nrtprof::daemon {
namespace {

constexpr char kStepRangePrefix[] = "ProfilerStep#";  // as the summary's rows (summary.cc)
constexpr char kStepFrame[] = "ProfilerStep*";
constexpr char kNoCall[] = "(no runtime call)";
constexpr char kUnnamedModel[] = "(unnamed model)";

// Label keys and the profile's fixed strings, interned first (ids 1...).
constexpr const char* kFixedStrings[] = {"host",        "pid",         "tid",        "thread",
                                         "neuron_core", "device_time", "host_time",  "executions",
                                         "nanoseconds", "count",       "nrtprof"};
enum FixedString : uint32_t {
  kHostKey = 1,
  kPidKey,
  kTidKey,
  kThreadKey,
  kCoreKey,
  kDeviceTime,
  kHostTime,
  kExecutionsType,
  kNanoseconds,
  kCount,
  kNrtprof,
};

// `duration` split among `ops` in proportion to theirs, the shares adding up to it exactly
// (the largest remainders get the nanoseconds left over); the ops' durations as they are when
// they fit in it. Returns what no op covers.
uint64_t SplitAmongOps(uint64_t duration, const std::vector<const DeviceEvent*>& ops,
                       std::vector<uint64_t>* shares) {
  shares->clear();
  unsigned __int128 sum = 0;
  for (const DeviceEvent* op : ops) sum += op->duration_ns;
  if (sum <= duration) {
    for (const DeviceEvent* op : ops) shares->push_back(op->duration_ns);
    return duration - static_cast<uint64_t>(sum);
  }
  std::vector<std::pair<uint64_t, size_t>> remainders;  // (remainder, op)
  uint64_t given = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const unsigned __int128 scaled = static_cast<unsigned __int128>(duration) * ops[i]->duration_ns;
    shares->push_back(static_cast<uint64_t>(scaled / sum));
    remainders.emplace_back(static_cast<uint64_t>(scaled % sum), i);
    given += shares->back();
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < duration; ++i, ++given) ++(*shares)[remainders[i].second];
  return 0;
}

// A host frame as the shim's symbolizer names it, "function (module+0xoffset)", split; false
// for any other frame (a range, a call, a model, an op), which is its name alone.
bool SplitHostFrame(const std::string& frame, std::string_view* function, std::string_view* module,
                    uint64_t* offset) {
  if (frame.empty() || frame.back() != ')') return false;
  const size_t open = frame.rfind(" (");
  const size_t plus = frame.rfind("+0x");
  if (open == std::string::npos || plus == std::string::npos || plus < open) return false;
  uint64_t value = 0;
  for (size_t i = plus + 3; i + 1 < frame.size(); ++i) {
    const char c = frame[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    value = value * 16 + static_cast<uint64_t>(digit);
  }
  *function = std::string_view(frame).substr(0, open);
  *module = std::string_view(frame).substr(open + 2, plus - open - 2);
  *offset = value;
  return true;
}

// A frame as a stack of functions shows it: a host frame's function (the call sites in one
// function are one frame, as in pprof), any other frame its name.
std::string_view FrameFunction(const std::string& name) {
  std::string_view function, module;
  uint64_t offset;
  return SplitHostFrame(name, &function, &module, &offset) ? function : std::string_view(name);
}

}  // namespace

size_t StackProfile::KeyHash::operator()(uint32_t i) const {
  const Sample& s = (*samples)[i];
  return (*this)(SampleKey{&s.stack, s.host, s.thread, s.pid, s.tid, s.nc_idx});
}

size_t StackProfile::KeyHash::operator()(const SampleKey& k) const {
  return absl::HashOf(*k.stack, k.host, k.thread, k.pid, k.tid, k.nc_idx);
}

bool StackProfile::KeyEq::operator()(uint32_t a, uint32_t b) const { return a == b; }

bool StackProfile::KeyEq::operator()(const SampleKey& k, uint32_t i) const {
  const Sample& s = (*samples)[i];
  return k.host == s.host && k.thread == s.thread && k.pid == s.pid && k.tid == s.tid &&
         k.nc_idx == s.nc_idx && *k.stack == s.stack;
}

StackProfile::StackProfile()
    : sample_index_(0, KeyHash{&samples_}, KeyEq{&samples_}) {
  strings_.emplace_back();
  string_ids_.emplace("", 0);
  for (const char* s : kFixedStrings) Intern(s);
}

uint32_t StackProfile::Intern(std::string_view text) {
  auto [it, added] = string_ids_.try_emplace(absl::string_view(text.data(), text.size()),
                                             static_cast<uint32_t>(strings_.size()));
  if (added) strings_.emplace_back(text);
  return it->second;
}

void StackProfile::AddValues(const SampleKey& key, int64_t device_ns, int64_t host_ns,
                             int64_t executions) {
  auto it = sample_index_.find(key);
  uint32_t i;
  if (it != sample_index_.end()) {
    i = *it;
  } else {
    i = static_cast<uint32_t>(samples_.size());
    Sample s;
    s.stack = *key.stack;
    s.host = key.host;
    s.thread = key.thread;
    s.pid = key.pid;
    s.tid = key.tid;
    s.nc_idx = key.nc_idx;
    samples_.push_back(std::move(s));
    sample_index_.insert(i);
  }
  Sample& s = samples_[i];
  s.values[kDeviceNs] += device_ns;
  s.values[kHostNs] += host_ns;
  s.values[kExecutions] += executions;
  totals_[kDeviceNs] += device_ns;
  totals_[kHostNs] += host_ns;
  totals_[kExecutions] += executions;
}

void StackProfile::AddStack(const std::vector<std::string>& stack, const std::string& host,
                            uint32_t pid, uint32_t tid, const std::string& thread, int32_t nc_idx,
                            int64_t device_ns, int64_t host_ns, int64_t executions) {
  std::vector<uint32_t> frames;
  frames.reserve(stack.size());
  for (const std::string& frame : stack) frames.push_back(Intern(frame));
  AddValues({&frames, Intern(host), Intern(thread), pid, tid, nc_idx}, device_ns, host_ns,
            executions);
}

void StackProfile::Add(const Trace& trace, const std::string& host) {
  if (realtime_offset_ns_ == 0) realtime_offset_ns_ = trace.realtime_offset_ns;
  for (const ProcessTrace& p : trace.processes) AddProcess(p, host);
}

void StackProfile::SetWindow(int64_t start_unix_ns, int64_t duration_ns) {
  window_set_ = true;
  window_start_unix_ns_ = start_unix_ns;
  window_ns_ = duration_ns;
}

void StackProfile::AddProcess(const ProcessTrace& p, const std::string& given_host) {
  const IdIndex<RangeEvent, &RangeEvent::id, CaptureVector<RangeEvent>> ranges(p.ranges);
  const IdIndex<ApiCall, &ApiCall::correlation_id, CaptureVector<ApiCall>> calls(p.calls);
  const uint32_t host = Intern(p.host.empty() ? given_host : p.host);
  // The window, as the summary has it (summary.cc, DescribeWindow): every event's span.
  auto span = [this](uint64_t start, uint64_t duration) {
    first_ns_ = std::min(first_ns_, start);
    last_ns_ = std::max(last_ns_, start + duration);
  };
  for (const RangeEvent& r : p.ranges) span(r.start_ns, r.duration_ns);
  for (const ApiCall& c : p.calls) span(c.start_ns, c.duration_ns);
  for (const DeviceEvent& d : p.device) span(d.start_ns, d.duration_ns);

  // A Name's string id, found by the Name's id after its first time.
  absl::flat_hash_map<const void*, uint32_t> name_ids;
  auto name_id = [&](const Name& name) {
    auto [it, added] = name_ids.try_emplace(name.id(), 0);
    if (added) it->second = Intern(name.view());
    return it->second;
  };
  // A range's frame: its name, and every step as the summary's one row of steps.
  absl::flat_hash_map<const void*, uint32_t> range_ids;
  auto range_frame = [&](const Name& name) {
    auto [it, added] = range_ids.try_emplace(name.id(), 0);
    if (added) {
      it->second = Intern(absl::StartsWith(name.str(), kStepRangePrefix) ? kStepFrame
                                                                         : name.view());
    }
    return it->second;
  };
  absl::flat_hash_map<uint32_t, uint32_t> thread_ids;  // tid -> its name's string id
  auto thread = [&](uint32_t tid) -> uint32_t {
    auto [it, added] = thread_ids.try_emplace(tid, 0);
    if (added) {
      auto name = p.thread_names.find(tid);
      if (name != p.thread_names.end()) it->second = Intern(name->second);
    }
    return it->second;
  };

  // The process's steps, as the summary reads them (summary.cc, StepSpans): a step is the
  // whole process's, so a call any thread makes while one runs is under the steps' frame, as
  // its device time is in the steps' row, even when no step range encloses it on its thread.
  std::vector<std::pair<uint64_t, uint64_t>> steps;  // start, the latest end of those so far
  for (const RangeEvent& r : p.ranges) {
    if (absl::StartsWith(r.name.str(), kStepRangePrefix)) {
      steps.emplace_back(r.start_ns, r.start_ns + r.duration_ns);
    }
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 1; i < steps.size(); ++i) {
    steps[i].second = std::max(steps[i].second, steps[i - 1].second);
  }
  auto in_step = [&steps](uint64_t t) {
    auto after = std::upper_bound(steps.begin(), steps.end(), std::make_pair(t, UINT64_MAX));
    return after != steps.begin() && std::prev(after)->second > t;
  };
  const uint32_t step_frame = Intern(kStepFrame);

  // A call's frames, leaf first: the call, its ranges innermost first (the steps' frame last,
  // when a step ran during the call but encloses it on no range), its host stack.
  auto append_call = [&](const ApiCall& c, std::vector<uint32_t>* stack) {
    stack->push_back(name_id(c.name));
    bool under_step = false;
    for (const RangeEvent* r = ranges.Find(c.range); r != nullptr; r = ranges.Find(r->parent_range)) {
      stack->push_back(range_frame(r->name));
      under_step = under_step || stack->back() == step_frame;
    }
    if (!under_step && !steps.empty() && in_step(c.start_ns)) stack->push_back(step_frame);
    for (const std::string& frame : c.stack) stack->push_back(Intern(frame));
  };

  // Runtime calls: their host time, on the stack ending at the call.
  std::vector<uint32_t> stack;
  for (const ApiCall& c : p.calls) {
    stack.clear();
    append_call(c, &stack);
    AddValues({&stack, host, thread(c.tid), p.pid, c.tid, c.nc_idx}, 0,
              static_cast<int64_t>(c.duration_ns), 0);
  }

  // The device time the summary charges, event by event, as the summary finds it.
  // A collective's wait for the other ranks (its barrier) is a row of its own, never the time
  // of the op or ranges that scheduled it: its stack is that row alone.
  std::vector<std::pair<const DeviceEvent*, uint32_t>> charged;  // and the row of a wait
  ComputeProcessSummary(p, [&](const DeviceEvent& d, const std::string& row) {
    const bool wait = d.kind == DeviceEventKind::kCollective && d.name.view() != kCcRunning;
    charged.emplace_back(&d, wait ? Intern(row) : 0);
  });

  // The engine ops of each execution (the device profile's), when there are any.
  absl::flat_hash_map<uint64_t, std::vector<const DeviceEvent*>> ops_of;
  for (const DeviceEvent& d : p.device) {
    if (d.kind == DeviceEventKind::kEngineOp && d.parent != 0) ops_of[d.parent].push_back(&d);
  }
  absl::flat_hash_map<std::pair<const void*, const void*>, uint32_t> op_ids;
  auto op_frame = [&](const DeviceEvent& op) {
    auto [it, added] = op_ids.try_emplace(std::make_pair(op.name.id(), op.engine.id()), 0);
    if (added) {
      it->second = Intern(op.engine.empty() ? op.name.str()
                                            : absl::StrCat(op.name.str(), " [",
                                                           op.engine.str(), "]"));
    }
    return it->second;
  };

  std::vector<uint32_t> suffix;  // model (or transfer) and what called it
  std::vector<uint64_t> shares;
  for (const auto& [d, wait_row] : charged) {
    const ApiCall* call = d->correlation_id != 0 ? calls.Find(d->correlation_id) : nullptr;
    const bool execution = d->kind == DeviceEventKind::kExecution;
    const bool collective = d->kind == DeviceEventKind::kCollective;
    suffix.clear();
    suffix.push_back(wait_row != 0                            ? wait_row
                     : collective && !d->model_name.empty()  ? name_id(d->model_name)
                     : !execution                             ? name_id(d->name)
                     : d->model_name.empty()                  ? Intern(kUnnamedModel)
                                                              : name_id(d->model_name));
    if (wait_row != 0) {
      // the row alone
    } else if (call != nullptr) {
      append_call(*call, &suffix);
    } else {
      suffix.push_back(Intern(kNoCall));
    }
    const uint32_t tid = call != nullptr ? call->tid : d->submitting_tid;
    const SampleKey key{&suffix, host, thread(tid), p.pid, tid, d->nc_idx};
    uint64_t uncovered = d->duration_ns;
    if (auto ops = execution ? ops_of.find(d->id) : ops_of.end(); ops != ops_of.end()) {
      uncovered = SplitAmongOps(d->duration_ns, ops->second, &shares);
      for (size_t i = 0; i < ops->second.size(); ++i) {
        stack.clear();
        stack.push_back(op_frame(*ops->second[i]));
        stack.insert(stack.end(), suffix.begin(), suffix.end());
        AddValues({&stack, host, key.thread, p.pid, tid, d->nc_idx},
                  static_cast<int64_t>(shares[i]), 0, 0);
      }
    }
    AddValues(key, static_cast<int64_t>(uncovered), 0, execution ? 1 : 0);
  }
}

}  // namespace nrtprof::daemon

namespace nrtprof::daemon {

perftools::profiles::Profile StackProfile::ToPprof() const {
  perftools::profiles::Profile out;
  for (const std::string& s : strings_) out.add_string_table(s);
  for (auto [type, unit] : {std::pair{kDeviceTime, kNanoseconds}, std::pair{kHostTime, kNanoseconds},
                            std::pair{kExecutionsType, kCount}}) {
    perftools::profiles::ValueType* t = out.add_sample_type();
    t->set_type(type);
    t->set_unit(unit);
  }
  out.set_default_sample_type(kDeviceTime);
  out.mutable_period_type()->set_type(kDeviceTime);
  out.mutable_period_type()->set_unit(kNanoseconds);
  out.set_period(1);  // every nanosecond measured, none sampled
  if (window_set_) {
    out.set_time_nanos(window_start_unix_ns_);
    out.set_duration_nanos(window_ns_);
  } else if (first_ns_ <= last_ns_) {
    // On the wall clock only when the capture knows it (as summary.json's window start).
    if (realtime_offset_ns_ != 0) {
      out.set_time_nanos(static_cast<int64_t>(first_ns_) + realtime_offset_ns_);
    }
    out.set_duration_nanos(static_cast<int64_t>(last_ns_ - first_ns_));
  }
  // One mapping for every frame: its functions are named already, nothing to symbolize.
  perftools::profiles::Mapping* mapping = out.add_mapping();
  mapping->set_id(1);
  mapping->set_filename(kNrtprof);
  mapping->set_has_functions(true);

  // A location per frame, numbered as first used; a function per name (a host frame's
  // function and module: the call sites in one function are one function with several
  // locations, at their offsets).
  absl::flat_hash_map<std::string, int64_t> extra_strings;  // beyond strings_
  auto string_id = [&](std::string_view text) -> int64_t {
    auto known = string_ids_.find(absl::string_view(text.data(), text.size()));
    if (known != string_ids_.end()) return known->second;
    auto [it, added] = extra_strings.try_emplace(std::string(text), out.string_table_size());
    if (added) out.add_string_table(std::string(text));
    return it->second;
  };
  absl::flat_hash_map<std::pair<int64_t, int64_t>, uint64_t> function_of;  // (name, file)
  std::vector<uint64_t> location_of(strings_.size(), 0);
  auto location = [&](uint32_t frame) {
    uint64_t& id = location_of[frame];
    if (id != 0) return id;
    std::string_view function_name = strings_[frame], module;
    uint64_t offset = 0;
    SplitHostFrame(strings_[frame], &function_name, &module, &offset);
    const int64_t name = string_id(function_name);
    const int64_t file = module.empty() ? 0 : string_id(module);
    uint64_t& function = function_of[{name, file}];
    if (function == 0) {
      function = static_cast<uint64_t>(out.function_size()) + 1;
      perftools::profiles::Function* f = out.add_function();
      f->set_id(function);
      f->set_name(name);
      f->set_system_name(name);
      f->set_filename(file);
    }
    id = static_cast<uint64_t>(out.location_size()) + 1;
    perftools::profiles::Location* l = out.add_location();
    l->set_id(id);
    l->set_mapping_id(1);
    l->set_address(offset);
    l->add_line()->set_function_id(function);
    return id;
  };
  out.mutable_sample()->Reserve(static_cast<int>(samples_.size()));
  for (const Sample& s : samples_) {
    perftools::profiles::Sample* o = out.add_sample();
    for (uint32_t frame : s.stack) o->add_location_id(location(frame));
    for (int64_t v : s.values) o->add_value(v);
    auto label = [o](uint32_t key) {
      perftools::profiles::Label* l = o->add_label();
      l->set_key(key);
      return l;
    };
    if (s.host != 0) label(kHostKey)->set_str(s.host);
    label(kPidKey)->set_num(s.pid);
    label(kTidKey)->set_num(s.tid);
    if (s.thread != 0) label(kThreadKey)->set_str(s.thread);
    // A string: pprof readers drop a number label of 0 that has no unit (NeuronCore 0).
    if (s.nc_idx >= 0) label(kCoreKey)->set_str(string_id(absl::StrCat(s.nc_idx)));
  }
  return out;
}

void StackProfile::ForEachStack(
    absl::FunctionRef<void(const std::vector<std::string_view>& frames, int64_t device_ns,
                           int64_t host_ns, int64_t executions)>
        fn) const {
  // Each frame id's function, as one id per function name (two call sites of a function are
  // two frames of the profile, one here).
  std::vector<uint32_t> function_of(strings_.size(), UINT32_MAX);
  std::vector<std::string_view> functions;
  absl::flat_hash_map<std::string_view, uint32_t> function_ids;
  auto function = [&](uint32_t frame) {
    uint32_t& id = function_of[frame];
    if (id == UINT32_MAX) {
      const std::string_view name = FrameFunction(strings_[frame]);
      auto [it, added] = function_ids.try_emplace(name, static_cast<uint32_t>(functions.size()));
      if (added) functions.push_back(name);
      id = it->second;
    }
    return id;
  };
  absl::flat_hash_map<std::vector<uint32_t>, std::array<int64_t, kValues>> by_stack;
  std::vector<uint32_t> stack;
  for (const Sample& s : samples_) {
    stack.clear();
    for (uint32_t frame : s.stack) stack.push_back(function(frame));
    auto [it, added] = by_stack.try_emplace(stack, std::array<int64_t, kValues>{0, 0, 0});
    for (int v = 0; v < kValues; ++v) it->second[v] += s.values[v];
  }
  std::vector<std::string_view> frames;
  for (const auto& [ids, values] : by_stack) {
    frames.clear();
    for (uint32_t id : ids) frames.push_back(functions[id]);
    fn(frames, values[kDeviceNs], values[kHostNs], values[kExecutions]);
  }
}

std::string StackProfile::ToCollapsed() const {
  std::vector<std::string> lines;
  ForEachStack(
      [&lines](const std::vector<std::string_view>& frames, int64_t device_ns, int64_t, int64_t) {
        if (device_ns == 0) return;
        std::string line;
        for (auto frame = frames.rbegin(); frame != frames.rend(); ++frame) {
          if (!line.empty()) line += ';';
          // ';' separates frames, a line break ends the line.
          const size_t from = line.size();
          line.append(frame->data(), frame->size());
          for (size_t i = from; i < line.size(); ++i) {
            if (line[i] == ';' || line[i] == '\n' || line[i] == '\r') line[i] = ' ';
          }
        }
        absl::StrAppend(&line, " ", device_ns, "\n");
        lines.push_back(std::move(line));
      });
  std::sort(lines.begin(), lines.end());
  return absl::StrJoin(lines, "");
}

std::string Gzip(const std::string& bytes) {
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer around the deflate stream.
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return "";
  }
  std::string out(deflateBound(&z, bytes.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int done = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return done == Z_STREAM_END ? out : "";
}

}  // namespace nrtprof::daemon
