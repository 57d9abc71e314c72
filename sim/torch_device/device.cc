// The simulated Neuron device behind nrtsim_torch: runtime lifetime, caching allocator, model
// cache, executions and transfers (device.h).
#include "sim/torch_device/device.h"

#include <time.h>

#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "examples/example_util.h"
#include "nrt/nrt_async.h"
#include "nrt/nrt_sys_trace.h"

namespace nrtsim_torch {
namespace {

// An asynchronous execution in flight: what it needs kept until it completes.
struct Pending {
  nrta_seq_t seq = 0;
  nrt_tensor_set_t* sets[2] = {nullptr, nullptr};
  std::vector<nrt_tensor_t*> slices;
  std::vector<nrt_tensor_t*> tensors;  // the device tensors it reads or writes
  std::unique_ptr<NRT_STATUS> ret;     // written by the runtime at completion
  std::string what;
};

struct State {
  std::mutex mu;
  int async_depth = 0;  // 0: synchronous calls
  // The executions in flight, in schedule order (the compute queue runs them in that order),
  // and the first failure seen at completion, raised at the next wait. Guarded by exec_mu.
  std::mutex exec_mu;
  std::deque<Pending> pending;
  std::string failure;
  bool open = false;
  bool closed = false;  // once closed, stays closed: tensors freed late are let go
  std::map<size_t, std::vector<nrt_tensor_t*>> free_lists;
  std::unordered_map<std::string, nrt_model_t*> models;
  Stats stats;
  std::unique_ptr<examples::SystemTraceSum> timer;
};

State& S() {
  static State* state = new State;  // never destroyed: tensors may die at interpreter exit
  return *state;
}

void Check(NRT_STATUS status, const std::string& what) {
  if (status != NRT_SUCCESS) {
    throw DeviceError(absl::StrCat("nrtsim_torch: ", what, " failed with status ",
                                   static_cast<int>(status), " (", nrt_get_status_as_str(status),
                                   ")"));
  }
}

// The tensor to bind for `r`: the device tensor itself when the region is all of it, else a
// slice of it (freed by the caller through `owned`).
nrt_tensor_t* Bindable(const Region& r, std::vector<nrt_tensor_t*>* owned) {
  if (r.offset == 0 && r.bytes == r.tensor_bytes) return r.tensor;
  nrt_tensor_t* slice = nullptr;
  Check(nrt_tensor_allocate_slice(r.tensor, r.offset, r.bytes, "nrtsim_torch.view", &slice),
        "nrt_tensor_allocate_slice");
  owned->push_back(slice);
  return slice;
}

void FreePending(Pending* p) {
  for (nrt_tensor_set_t*& set : p->sets) {
    if (set != nullptr) nrt_destroy_tensor_set(&set);
  }
  for (nrt_tensor_t*& t : p->slices) nrt_tensor_free(&t);
}

// With exec_mu held: retires the oldest execution in flight once it has completed (waiting for
// it when `wait`); false when it has not and `wait` is false.
bool RetireOldest(State& s, bool wait) {
  Pending& p = s.pending.front();
  for (;;) {
    bool done = false;
    Check(nrta_is_completed(p.seq, &done), "nrta_is_completed");
    if (done) break;
    if (!wait) return false;
    const struct timespec pause = {0, 20000};  // 20 us: an execution takes hundreds
    nanosleep(&pause, nullptr);
  }
  if (*p.ret != NRT_SUCCESS && s.failure.empty()) {
    s.failure =
        absl::StrCat("nrtsim_torch: nrta_execute_schedule (", p.what, ") completed with status ",
                     static_cast<int>(*p.ret), " (", nrt_get_status_as_str(*p.ret), ")");
  }
  FreePending(&p);
  s.pending.pop_front();
  return true;
}

// With exec_mu held: raises the failure an execution completed with, once.
void RaiseFailure(State& s) {
  if (s.failure.empty()) return;
  const std::string failure = std::move(s.failure);
  s.failure.clear();
  throw DeviceError(failure);
}

// Waits until every execution in flight has completed.
void Drain() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.exec_mu);
  while (!s.pending.empty()) RetireOldest(s, true);
  RaiseFailure(s);
}

// Waits until the executions in flight that read or write `a` or `b` have completed (and those
// before them: the queue completes in order): before a transfer or a synchronous copy of them,
// which the runtime does not order against the asynchronous compute queue. A transfer to a
// tensor no queued execution uses (a fresh one, as eager PyTorch's scalar operands) goes ahead
// beside them.
void WaitFor(const nrt_tensor_t* a, const nrt_tensor_t* b = nullptr) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.exec_mu);
  size_t last = 0;  // how many of the oldest executions to wait for
  for (size_t i = 0; i < s.pending.size(); ++i) {
    for (const nrt_tensor_t* t : s.pending[i].tensors) {
      if (t == a || (b != nullptr && t == b)) last = i + 1;
    }
  }
  for (size_t i = 0; i < last; ++i) RetireOldest(s, true);
  RaiseFailure(s);
}

int AsyncDepthFromEnvironment() {
  const char* text = getenv("NRTSIM_TORCH_ASYNC_DEPTH");
  int depth = 0;
  if (text == nullptr || *text == '\0') return 0;
  if (!absl::SimpleAtoi(text, &depth) || depth < 0 || depth > examples::kMaxAsyncDepth) {
    throw DeviceError(
        absl::StrCat("nrtsim_torch: NRTSIM_TORCH_ASYNC_DEPTH must be a whole "
                     "number from 0 (synchronous) to ",
                     examples::kMaxAsyncDepth, ", not '", text, "'"));
  }
  return depth;
}

}  // namespace

void EnsureOpen() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.open) return;
  if (s.closed) throw DeviceError("nrtsim_torch: the device was closed (nrtsim_torch.close())");
  s.async_depth = AsyncDepthFromEnvironment();
  Check(nrt_init(NRT_FRAMEWORK_TYPE_PYTORCH, "", ""), "nrt_init");
  s.open = true;
}

int AsyncDepth() {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().async_depth;
}

void Synchronize() { Drain(); }

bool IsOpen() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.open;
}

void Close() {
  State& s = S();
  {
    // What is in flight completes first: its tensor sets must outlive it.
    std::lock_guard<std::mutex> lock(s.exec_mu);
    try {
      while (!s.pending.empty()) RetireOldest(s, true);
    } catch (const DeviceError&) {
      for (Pending& p : s.pending) FreePending(&p);
      s.pending.clear();
    }
    s.failure.clear();
  }
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.open) return;
  if (s.timer != nullptr) {
    nrt_sys_trace_stop();
    s.timer.reset();
  }
  s.free_lists.clear();
  s.models.clear();
  s.open = false;
  s.closed = true;
  nrt_close();  // frees every tensor and model
}

nrt_tensor_t* Allocate(size_t bytes) {
  EnsureOpen();
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.free_lists.find(bytes);
    if (it != s.free_lists.end() && !it->second.empty()) {
      nrt_tensor_t* t = it->second.back();
      it->second.pop_back();
      s.stats.cached_bytes -= bytes;
      return t;
    }
    ++s.stats.allocations;
  }
  nrt_tensor_t* t = nullptr;
  Check(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, kCore, bytes, "nrtsim_torch", &t),
        absl::StrCat("nrt_tensor_allocate of ", bytes, " bytes"));
  return t;
}

void Release(nrt_tensor_t* tensor, size_t bytes) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.open) return;  // nrt_close freed it
  s.free_lists[bytes].push_back(tensor);
  s.stats.cached_bytes += bytes;
}

void Write(const Region& dst, const void* src) {
  if (dst.bytes == 0) return;
  WaitFor(dst.tensor);
  Check(nrt_tensor_write(dst.tensor, src, dst.offset, dst.bytes), "nrt_tensor_write");
  std::lock_guard<std::mutex> lock(S().mu);
  ++S().stats.writes;
}

void Read(const Region& src, void* dst) {
  if (src.bytes == 0) return;
  WaitFor(src.tensor);
  Check(nrt_tensor_read(src.tensor, dst, src.offset, src.bytes), "nrt_tensor_read");
  std::lock_guard<std::mutex> lock(S().mu);
  ++S().stats.reads;
}

void CopyOnDevice(const Region& src, const Region& dst) {
  if (src.bytes != dst.bytes) throw DeviceError("nrtsim_torch: device copy of unequal sizes");
  if (src.bytes == 0) return;
  WaitFor(src.tensor, dst.tensor);
  Check(nrt_tensor_copy(src.tensor, src.offset, dst.tensor, dst.offset, src.bytes),
        "nrt_tensor_copy");
}

nrt_model_t* Model(const std::string& text) {
  EnsureOpen();
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.models.find(text);
    if (it != s.models.end()) return it->second;
  }
  absl::StatusOr<std::string> bytes = examples::CompileModelText(text);
  if (!bytes.ok()) {
    throw DeviceError(absl::StrCat("nrtsim_torch: cannot compile a model (",
                                   bytes.status().message(), "):\n", text));
  }
  nrt_model_t* model = nullptr;
  Check(nrt_load(bytes->data(), bytes->size(), kCore, 1, &model), "nrt_load");
  std::lock_guard<std::mutex> lock(s.mu);
  auto [it, added] = s.models.emplace(text, model);
  if (added) {
    ++s.stats.models;
  } else {
    nrt_unload(model);  // another thread loaded it meanwhile
  }
  return it->second;
}

void Execute(nrt_model_t* model, const std::vector<Binding>& inputs,
             const std::vector<Binding>& outputs, const std::string& what) {
  Pending p;
  p.what = what;
  try {
    const std::vector<Binding>* lists[2] = {&inputs, &outputs};
    for (int k = 0; k < 2; ++k) {
      Check(nrt_allocate_tensor_set(&p.sets[k]), "nrt_allocate_tensor_set");
      for (const Binding& b : *lists[k]) {
        Check(
            nrt_add_tensor_to_tensor_set(p.sets[k], b.first.c_str(), Bindable(b.second, &p.slices)),
            "nrt_add_tensor_to_tensor_set");
        p.tensors.push_back(b.second.tensor);
      }
    }
    const int depth = AsyncDepth();
    if (depth == 0) {
      Check(nrt_execute(model, p.sets[0], p.sets[1]), absl::StrCat("nrt_execute (", what, ")"));
      FreePending(&p);
    } else {
      // Scheduled on the compute queue, which runs executions in order: each sees the outputs
      // of those before it. At most `depth` in flight; the oldest retired as they complete.
      State& s = S();
      std::lock_guard<std::mutex> lock(s.exec_mu);
      while (!s.pending.empty() && RetireOldest(s, false)) {
      }
      RaiseFailure(s);
      p.ret = std::make_unique<NRT_STATUS>(NRT_SUCCESS);
      for (;;) {
        while (static_cast<int>(s.pending.size()) >= depth) RetireOldest(s, true);
        const NRT_STATUS scheduled =
            nrta_execute_schedule(model, p.sets[0], p.sets[1], 0, p.ret.get(), &p.seq);
        if (scheduled == NRT_QUEUE_FULL && !s.pending.empty()) {
          RetireOldest(s, true);  // the runtime's queue is shallower than `depth`
          continue;
        }
        Check(scheduled, absl::StrCat("nrta_execute_schedule (", what, ")"));
        break;
      }
      s.pending.push_back(std::move(p));
    }
  } catch (...) {
    FreePending(&p);
    throw;
  }
  std::lock_guard<std::mutex> lock(S().mu);
  ++S().stats.executions;
}

Stats GetStats() {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().stats;
}

namespace {

// With the lock held.
void FetchLocked(State& s) {
  char* buffer = nullptr;
  size_t size = 0;
  Check(nrt_sys_trace_fetch_events(&buffer, &size, nullptr), "nrt_sys_trace_fetch_events");
  const absl::Status added = s.timer->Add(absl::string_view(buffer, size));
  nrt_sys_trace_buffer_free(buffer);
  if (!added.ok()) {
    throw DeviceError(absl::StrCat("nrtsim_torch: the system trace: ", added.message()));
  }
}

}  // namespace

void StartDeviceTimer() {
  EnsureOpen();
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.timer != nullptr) throw DeviceError("nrtsim_torch: the device timer is running already");
  nrt_sys_trace_config_t* config = nullptr;
  Check(nrt_sys_trace_config_allocate(&config), "nrt_sys_trace_config_allocate");
  nrt_sys_trace_config_set_max_events_per_nc(config, 16384);
  const NRT_STATUS started = nrt_sys_trace_start(config);
  nrt_sys_trace_config_free(config);
  Check(started, "nrt_sys_trace_start");
  s.timer = std::make_unique<examples::SystemTraceSum>();
  FetchLocked(s);  // the first fetch's one-time costs, outside what is timed
  s.timer = std::make_unique<examples::SystemTraceSum>();
}

void PollDeviceTimer() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.timer == nullptr) throw DeviceError("nrtsim_torch: the device timer is not running");
  FetchLocked(s);
}

DeviceTime StopDeviceTimer() {
  Drain();  // the executions in flight are part of what was timed
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.timer == nullptr) throw DeviceError("nrtsim_torch: the device timer is not running");
  FetchLocked(s);
  const examples::DeviceTime& t = s.timer->total();
  DeviceTime out{t.execution_ns, t.executions, t.transfer_ns, t.transfers, t.overwritten};
  s.timer.reset();
  Check(nrt_sys_trace_stop(), "nrt_sys_trace_stop");
  return out;
}

}  // namespace nrtsim_torch
