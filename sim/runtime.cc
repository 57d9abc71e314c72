// The simulated runtime's state and its public calls: initialization, models (load, execute,
// profile) and the system trace. Tensors and tensor sets are runtime_tensors.cc's.
#include "runtime.h"

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "kernels.h"
#include "runtime_internal.h"
#include "model_format.h"

namespace nrtsim {

using internal::Fail;
using internal::RangeOk;
using internal::ThreadId;

void ReportError(const std::string& line) {
  std::string out = absl::StrCat("nrt: ", line, "\n");
  // One write, so lines from concurrent threads do not interleave.
  ssize_t ignored = write(STDERR_FILENO, out.data(), out.size());
  (void)ignored;
}

NRT_STATUS Unsupported(const char* fn) {
  static std::mutex mu;
  static std::set<std::string>* reported = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (reported->insert(fn).second) {
    ReportError(absl::StrCat(fn, " is not supported by the simulated runtime"));
  }
  return NRT_FAILURE;
}

namespace internal {

NRT_STATUS Fail(NRT_STATUS status, const std::string& line) {
  ReportError(line);
  return status;
}

namespace {

// Bumped in a forked child, whose one thread has a new id but the parent's thread-local copy.
std::atomic<uint32_t> g_fork_generation{0};

void OnForkChild() { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

// The calling thread's id, asked of the kernel once per thread (and again after a fork):
// glibc's gettid() is a system call each time, and nrt_execute needs the id twice. A real
// runtime keeps it; two system calls per execution would make the simulator's calls a
// measure of the machine's syscall entry (a VM with page-table isolation flushes the TLB on
// each), not of the runtime.
int64_t ThreadId() {
  static const int registered = pthread_atfork(nullptr, nullptr, &OnForkChild);
  (void)registered;
  thread_local int64_t tid = 0;
  thread_local uint32_t generation = 0;
  const uint32_t now = g_fork_generation.load(std::memory_order_relaxed);
  if (tid == 0 || generation != now) {
    tid = static_cast<int64_t>(gettid());
    generation = now;
  }
  return tid;
}

bool RangeOk(size_t offset, size_t size, size_t limit) {
  return offset <= limit && size <= limit - offset;
}

}  // namespace internal

Runtime& Runtime::Get() {
  // Never destroyed: programs may call into the runtime from atexit handlers and detached
  // threads after static destructors have run.
  static Runtime* runtime = new Runtime();
  return *runtime;
}

NRT_STATUS Runtime::Ready() const {
  switch (state_) {
    case State::kUninitialized:
      return NRT_UNINITIALIZED;
    case State::kClosed:
      return NRT_CLOSED;
    case State::kInitialized:
      return NRT_SUCCESS;
  }
  return NRT_FAILURE;
}

NRT_STATUS Runtime::Init(nrt_framework_type_t framework) {
  if (framework < NRT_FRAMEWORK_TYPE_NO_FW || framework > NRT_FRAMEWORK_TYPE_PRECHECK) {
    return Fail(NRT_INVALID, absl::StrCat("nrt_init: unknown framework type ",
                                          static_cast<int>(framework)));
  }
  absl::StatusOr<DeviceConfig> config = DeviceConfig::FromEnvironment();
  if (!config.ok()) return Fail(NRT_INVALID, absl::StrCat("nrt_init: ", config.status().message()));
  absl::StatusOr<uint32_t> depth = AsyncQueueDepthFromEnvironment();
  if (!depth.ok()) return Fail(NRT_INVALID, absl::StrCat("nrt_init: ", depth.status().message()));
  std::unique_lock<std::shared_mutex> life(life_mu_);
  if (state_ == State::kInitialized) {
    return Fail(NRT_FAILURE, "nrt_init: the runtime is already initialized");
  }
  config_ = *config;
  cores_.clear();
  for (uint32_t i = 0; i < config_.num_cores; ++i) {
    cores_.push_back(std::make_unique<NeuronCore>(i, &clock_, config_.time_scale));
  }
  trace_ = std::make_unique<SysTrace>(config_.num_cores, clock_.offset_ns());
  // A core's global id is its number on the machine (NEURON_RT_VISIBLE_CORES).
  for (uint32_t i = 0; i < config_.num_cores; ++i) {
    trace_->SetWorkerGid(i, config_.visible_cores[i]);
  }
  last_model_.reset(new std::atomic<uint64_t>[config_.num_cores]);
  for (uint32_t i = 0; i < config_.num_cores; ++i) last_model_[i].store(0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    device_bytes_used_.assign(config_.num_cores, 0);
    models_per_core_.assign(config_.num_cores, 0);
  }
  async_.Start(config_.num_cores, *depth);
  state_ = State::kInitialized;
  return NRT_SUCCESS;
}

void Runtime::FreeAllLocked() {
  models_.clear();
  tensors_.clear();
  sets_.clear();
  std::fill(device_bytes_used_.begin(), device_bytes_used_.end(), 0);
  std::fill(models_per_core_.begin(), models_per_core_.end(), 0);
}

void Runtime::Close() {
  std::unique_lock<std::shared_mutex> life(life_mu_);
  if (state_ != State::kInitialized) return;
  // Asynchronous requests still queued complete now, in order, without the host waiting out
  // their device time; their workers end. No call is in flight (life_mu_ is held), and the
  // workers take no lock of the runtime's, so this cannot wait on anything but them.
  // A collective waiting for its group fails at once (the other ranks see this one leave).
  std::shared_ptr<CcComm> comm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    comm = comm_;
  }
  if (comm != nullptr) comm->Abort();
  for (const auto& core : cores_) core->Hurry();
  async_.Stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    FreeAllLocked();
    comm_.reset();
    cc_contexts_.clear();
  }
  comm.reset();
  {
    std::lock_guard<std::mutex> lock(profile_mu_);
    profiles_.clear();  // profiles not stopped are not written
    profiling_.store(0);
  }
  trace_.reset();
  cores_.clear();
  state_ = State::kClosed;
}

NRT_STATUS Runtime::CoreCount(uint32_t* count, bool total) {
  if (count == nullptr) return Fail(NRT_INVALID, "core count: null output pointer");
  {
    std::shared_lock<std::shared_mutex> life(life_mu_);
    if (state_ == State::kInitialized) {
      *count = total ? config_.machine_cores : config_.num_cores;
      return NRT_SUCCESS;
    }
  }
  absl::StatusOr<DeviceConfig> config = DeviceConfig::FromEnvironment();
  if (!config.ok()) return Fail(NRT_INVALID, std::string(config.status().message()));
  *count = total ? config->machine_cores : config->num_cores;
  return NRT_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Models

NRT_STATUS Runtime::Load(const void* bytes, size_t size, int32_t vnc, nrt_model_t** model,
                         uint32_t ctx_device_id, uint32_t ctx_device_count) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (bytes == nullptr || model == nullptr) {
    return Fail(NRT_INVALID, "nrt_load: null model bytes or output pointer");
  }
  if (vnc < -1 || vnc >= static_cast<int32_t>(config_.num_cores)) {
    return Fail(NRT_INVALID, absl::StrCat("nrt_load: NeuronCore ", vnc, " does not exist (",
                                          config_.num_cores, " visible)"));
  }
  absl::StatusOr<Model> decoded = DecodeModel(bytes, size);
  if (!decoded.ok()) {
    const NRT_STATUS status = decoded.status().code() == absl::StatusCode::kFailedPrecondition
                                  ? NRT_UNSUPPORTED_NEFF_VERSION
                                  : NRT_INVALID;
    return Fail(status, absl::StrCat("nrt_load: ", decoded.status().message()));
  }
  const int cc_op = FirstCollectiveOp(*decoded);
  if (cc_op >= 0 && ctx_device_count == 0) {
    return Fail(NRT_INVALID, absl::StrCat("nrt_load: model ", decoded->name,
                                          " has a collective (op ", cc_op, ", ",
                                          OpKindName(decoded->ops[cc_op].kind),
                                          "): load it with nrt_load_collectives"));
  }
  const uint64_t call_start = trace_->HostNow();
  const int64_t tid = ThreadId();
  auto loaded = std::make_shared<nrt_model>();
  loaded->id = next_model_id_.fetch_add(1);
  loaded->file_size = size;
  loaded->model = *std::move(decoded);
  loaded->cc_op = cc_op;
  loaded->cc_rank = ctx_device_id;
  loaded->cc_ranks = ctx_device_count;
  loaded->trace_name = trace_->InternName(loaded->model.name);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (vnc < 0) {
      vnc = static_cast<int32_t>(std::min_element(models_per_core_.begin(),
                                                  models_per_core_.end()) -
                                 models_per_core_.begin());
    }
    loaded->vnc = static_cast<uint32_t>(vnc);
    ++models_per_core_[loaded->vnc];
    models_[loaded.get()] = loaded;
  }
  // The model's instructions and constants travel to device memory once, at load: a
  // device-memory copy inside the nrt_load span.
  const bool tracing = trace_->Recording();
  if (tracing) {
    RecordCall(TraceEventType::kNrtLoad, TracePhase::kStart, loaded->vnc, nullptr, call_start,
               tid);
  }
  TransferTrace load_copy;
  load_copy.tensor_call = false;
  load_copy.tensor_id = loaded->id;
  const uint64_t copy_end = DeviceTransfer(loaded->vnc, SyncSlot(kTransferLane),
                                           HostDmaNs(size, config_), size, load_copy, [] {});
  if (tracing) {
    RecordCall(TraceEventType::kNrtLoad, TracePhase::kStop, loaded->vnc, loaded.get(),
               std::max(trace_->HostNow(), trace_->HostTimeOfDevice(copy_end)), tid);
  }
  *model = loaded.get();
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::ProfileStart(nrt_model_t* model, const char* filename) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (filename == nullptr || filename[0] == '\0') {
    return Fail(NRT_INVALID, "nrt_profile_start: no filename");
  }
  std::shared_ptr<nrt_model> m;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(model);
    if (it == models_.end()) return Fail(NRT_INVALID_HANDLE, "nrt_profile_start: not a loaded model");
    m = it->second;
  }
  std::lock_guard<std::mutex> lock(profile_mu_);
  for (const auto& [id, p] : profiles_) {
    if (id == m->id || p.filename == filename) {
      return Fail(NRT_INVALID, absl::StrCat("nrt_profile_start: model ", m->model.name,
                                            " or file ", filename, " is being profiled"));
    }
  }
  profiles_[m->id] = DeviceProfile{filename, m, {}};
  profiling_.store(static_cast<int>(profiles_.size()));
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::ProfileStop(const char* filename) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (filename == nullptr) return Fail(NRT_INVALID, "nrt_profile_stop: no filename");
  DeviceProfile profile;
  {
    std::lock_guard<std::mutex> lock(profile_mu_);
    auto it = std::find_if(profiles_.begin(), profiles_.end(),
                           [&](const auto& p) { return p.second.filename == filename; });
    if (it == profiles_.end()) {
      return Fail(NRT_INVALID, absl::StrCat("nrt_profile_stop: no profile started for ", filename));
    }
    profile = std::move(it->second);
    profiles_.erase(it);
    profiling_.store(static_cast<int>(profiles_.size()));
  }
  // The simulator's device profile: JSON where the real runtime writes NTFF. Times are the
  // device clock, as the system trace's device_exec; exec_id is the same as there.
  const Model& model = profile.model->model;
  std::string json = "{\"model\":";
  AppendJsonString(model.name, &json);
  absl::StrAppend(&json, ",\"model_id\":", profile.model->id, ",\"nc_idx\":",
                  profile.model->vnc, ",\"executions\":[");
  for (size_t i = 0; i < profile.executions.size(); ++i) {
    const ProfiledExecution& x = profile.executions[i];
    absl::StrAppend(&json, i == 0 ? "" : ",", "{\"exec_id\":", x.exec_id,
                    ",\"start_ns\":", x.start_ns, ",\"duration_ns\":", x.cost.total_ns,
                    ",\"ops\":[");
    for (size_t k = 0; k < x.cost.ops.size(); ++k) {
      const OpCost& op = x.cost.ops[k];
      absl::StrAppend(&json, k == 0 ? "" : ",", "{\"name\":\"",
                      OpKindName(model.ops[op.op_index].kind), "\",\"engine\":\"",
                      EngineName(op.engine), "\",\"start_ns\":", x.start_ns + op.span.start_ns,
                      ",\"duration_ns\":", op.span.duration_ns, "}");
    }
    json += "],\"dma\":[";
    for (size_t k = 0; k < x.cost.io_dmas.size(); ++k) {
      const IoDmaCost& dma = x.cost.io_dmas[k];
      const TensorDef& t = model.tensors[dma.tensor_index];
      absl::StrAppend(&json, k == 0 ? "" : ",", "{\"name\":\"",
                      dma.to_device ? "dma_hbm_to_sbuf" : "dma_sbuf_to_hbm", "\",\"tensor\":");
      AppendJsonString(t.name, &json);
      absl::StrAppend(&json, ",\"bytes\":", t.SizeBytes(), ",\"start_ns\":",
                      x.start_ns + dma.span.start_ns, ",\"duration_ns\":", dma.span.duration_ns,
                      "}");
    }
    json += "]}";
  }
  json += "]}\n";
  FILE* f = fopen(filename, "w");
  if (f == nullptr) {
    return Fail(NRT_FAILURE, absl::StrCat("nrt_profile_stop: cannot write ", filename, ": ",
                                          strerror(errno)));
  }
  const bool written = fwrite(json.data(), 1, json.size(), f) == json.size();
  if (fclose(f) != 0 || !written) {
    return Fail(NRT_FAILURE, absl::StrCat("nrt_profile_stop: cannot write ", filename));
  }
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::Unload(nrt_model_t* model) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  if (it == models_.end()) return Fail(NRT_INVALID_HANDLE, "nrt_unload: not a loaded model");
  --models_per_core_[it->second->vnc];
  models_.erase(it);  // executions in flight hold their own reference
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::ModelVnc(const nrt_model_t* model, uint32_t* vnc) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (vnc == nullptr) return Fail(NRT_INVALID, "model info: null output pointer");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  if (it == models_.end()) return Fail(NRT_INVALID_HANDLE, "model info: not a loaded model");
  *vnc = it->second->vnc;
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::TensorInfo(nrt_model_t* model, nrt_tensor_info_array_t** info) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (info == nullptr) return Fail(NRT_INVALID, "nrt_get_model_tensor_info: null output");
  std::shared_ptr<nrt_model> m;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(model);
    if (it == models_.end()) {
      return Fail(NRT_INVALID_HANDLE, "nrt_get_model_tensor_info: not a loaded model");
    }
    m = it->second;
  }
  std::vector<uint32_t> order = m->model.InputIndices();
  for (uint32_t i : m->model.OutputIndices()) order.push_back(i);
  const size_t bytes = sizeof(nrt_tensor_info_array_t) + order.size() * sizeof(nrt_tensor_info_t);
  auto* array = static_cast<nrt_tensor_info_array_t*>(calloc(1, bytes));
  if (array == nullptr) return NRT_RESOURCE;
  array->tensor_count = order.size();
  for (size_t k = 0; k < order.size(); ++k) {
    const TensorDef& t = m->model.tensors[order[k]];
    nrt_tensor_info_t& out = array->tensor_array[k];
    snprintf(out.name, sizeof(out.name), "%s", t.name.c_str());
    out.usage = t.kind == TensorKind::kInput ? NRT_TENSOR_USAGE_INPUT : NRT_TENSOR_USAGE_OUTPUT;
    out.size = t.SizeBytes();
    out.dtype = static_cast<nrt_dtype_t>(t.dtype);
    out.ndim = static_cast<uint32_t>(t.shape.size());
    out.shape = static_cast<uint32_t*>(calloc(std::max<size_t>(1, t.shape.size()),
                                              sizeof(uint32_t)));
    if (out.shape != nullptr && !t.shape.empty()) {
      memcpy(out.shape, t.shape.data(), t.shape.size() * sizeof(uint32_t));
    }
  }
  *info = array;
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::BindTensors(const char* fn, const nrt_model& model, const void* set,
                                bool inputs, std::vector<Region>* regions) {
  const char* what = inputs ? "input" : "output";
  std::lock_guard<std::mutex> lock(mu_);
  auto set_it = sets_.find(set);
  if (set_it == sets_.end()) {
    return Fail(NRT_INVALID_HANDLE, absl::StrCat(fn, ": the ", what,
                                                 " set is not an allocated tensor set"));
  }
  const std::vector<uint32_t> indices =
      inputs ? model.model.InputIndices() : model.model.OutputIndices();
  for (uint32_t index : indices) {
    const TensorDef& def = model.model.tensors[index];
    auto named = set_it->second->tensors.find(def.name);
    if (named == set_it->second->tensors.end()) {
      return Fail(NRT_INVALID, absl::StrCat(fn, ": model ", model.model.name, " needs ",
                                            what, " '", def.name, "', absent from the set"));
    }
    auto tensor_it = tensors_.find(named->second);
    if (tensor_it == tensors_.end() || tensor_it->second->storage == nullptr) {
      return Fail(NRT_INVALID_HANDLE, absl::StrCat(fn, ": ", what, " '", def.name,
                                                   "' is freed or has no storage"));
    }
    const nrt_tensor& t = *tensor_it->second;
    if (t.on_device() && t.vnc() != static_cast<int>(model.vnc)) {
      return Fail(NRT_INVALID, absl::StrCat(fn, ": ", what, " '", def.name,
                                            "' is on NeuronCore ", t.vnc(), ", model ",
                                            model.model.name, " on NeuronCore ", model.vnc));
    }
    if (t.size != def.SizeBytes()) {
      return Fail(NRT_INVALID, absl::StrCat(fn, ": ", what, " '", def.name, "' has ",
                                            t.size, " bytes, model ", model.model.name,
                                            " expects ", def.SizeBytes()));
    }
    regions->push_back({t.storage, t.offset, t.size, t.name});
  }
  return NRT_SUCCESS;
}

void Runtime::RecordCall(TraceEventType type, TracePhase phase, uint32_t vnc,
                         const nrt_model* model, uint64_t host_ns, int64_t tid) {
  TraceEvent e;
  e.type = type;
  e.phase = phase;
  e.nc_idx = vnc;
  e.thread_id = tid;
  if (model != nullptr) {
    e.model_id = model->id;
    e.model_name = model->trace_name;
  }
  e.host_timestamp_ns = host_ns;
  trace_->Record(std::move(e));
}

void Runtime::RecordExecution(const nrt_model& model, const ExecutionCost& cost, uint64_t start,
                              uint64_t exec_id, const Slot& slot) {
  if (last_model_[model.vnc].exchange(model.id) != model.id) {
    TraceEvent e;
    e.type = TraceEventType::kModelSwitch;
    e.phase = TracePhase::kInstant;
    e.nc_idx = model.vnc;
    e.thread_id = slot.tid;
    e.device_core_idx = model.vnc;
    e.model_id = model.id;
    e.model_name = model.trace_name;
    e.host_timestamp_ns = trace_->HostTimeOfDevice(start);
    trace_->Record(std::move(e));
  }
  // The engines' ops and the I/O DMA inside the execution (cost.ops, cost.io_dmas) are not
  // system-trace events: the real runtime puts them in the device profile.
  TraceEvent e;
  e.type = TraceEventType::kDeviceExec;
  e.phase = TracePhase::kStart;
  e.nc_idx = model.vnc;
  e.thread_id = slot.tid;
  e.has_nrta_seq_id = slot.async;
  e.nrta_seq_id = slot.seq;
  e.device_core_idx = model.vnc;
  e.exec_id = exec_id;
  e.model_id = model.id;
  e.model_name = model.trace_name;
  e.nc_timestamp_ns = start;
  trace_->Record(e);
  e.phase = TracePhase::kStop;
  e.model_name = nullptr;
  e.nc_timestamp_ns = start + cost.total_ns;
  trace_->Record(std::move(e));
}

Runtime::Slot Runtime::SyncSlot(int lane) {
  Slot slot;
  slot.lane = lane;
  slot.tid = ThreadId();
  return slot;
}

uint64_t Runtime::OnCore(uint32_t vnc, const Slot& slot, uint64_t duration_ns,
                         const std::function<void(uint64_t device_start_ns)>& work,
                         const std::function<void()>& done) {
  NeuronCore& core = *cores_[vnc];
  if (slot.async) return core.RunTicket(slot.lane, slot.ticket, slot.earliest, duration_ns, work, done);
  const uint64_t start = core.Run(slot.lane, duration_ns, work);
  done();
  return start;
}

Runtime::Slot Runtime::RequestSlot(NeuronCore* core, int lane, uint64_t seq, int64_t tid) {
  Slot slot;
  slot.lane = lane;
  slot.async = true;
  slot.seq = seq;
  slot.tid = tid;
  slot.ticket = core->TakeTicket(lane);
  // On the device from now, but after whatever the program may have seen complete.
  slot.earliest = std::max(clock_.Now(), core->done_until());
  return slot;
}

NRT_STATUS Runtime::RunOnce(const std::shared_ptr<nrt_model>& model, const ExecutionCost& cost,
                            const std::vector<Region>& inputs,
                            const std::vector<Region>& outputs, const Slot& slot,
                            uint64_t* device_end) {
  if (model->cc_op >= 0) return RunOnceCc(model, cost, inputs, outputs, slot, device_end);
  const uint64_t exec_id = next_exec_id_.fetch_add(1);
  absl::Status status;
  NRT_STATUS result = NRT_SUCCESS;
  uint64_t device_start = 0;
  // When the execution is over, before anything after it on its lane starts: its profile
  // entry and error line, then (a request) its completion, so that a program that sees it
  // complete finds everything about it in place.
  auto done = [&] {
    if (profiling_.load(std::memory_order_relaxed) != 0) {
      std::lock_guard<std::mutex> lock(profile_mu_);
      auto it = profiles_.find(model->id);
      if (it != profiles_.end()) it->second.executions.push_back({exec_id, device_start, cost});
    }
    if (!status.ok()) {
      result = Fail(NRT_EXEC_COMPLETED_WITH_ERR,
                    absl::StrCat(slot.async ? "nrta_execute_schedule: " : "nrt_execute: ",
                                 status.message()));
    }
    if (slot.complete != nullptr) (*slot.complete)(result);
  };
  const uint64_t start = OnCore(model->vnc, slot, cost.total_ns, [&](uint64_t start) {
    device_start = start;
    // The inputs are read when the execution starts, and copied first, so an output bound to
    // the same memory as an input (in-place use) reads the values the execution started with.
    std::vector<std::vector<uint8_t>> in_copies(inputs.size());
    std::vector<const void*> in_ptrs;
    std::vector<void*> out_ptrs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      in_copies[i].assign(inputs[i].data(), inputs[i].data() + inputs[i].size);
      in_ptrs.push_back(in_copies[i].data());
    }
    for (const Region& r : outputs) out_ptrs.push_back(r.data());
    status = RunModel(model->model, in_ptrs, out_ptrs);
    if (trace_->Recording()) RecordExecution(*model, cost, start, exec_id, slot);
  }, done);
  if (device_end != nullptr) *device_end = start + cost.total_ns;
  return result;
}

NRT_STATUS Runtime::Execute(nrt_model_t* model, const void* input_set, void* output_set,
                            int repeat) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (repeat < 1) {
    return Fail(NRT_INVALID, absl::StrCat("nrt_execute_repeat: repeat_count ", repeat,
                                          " is not positive"));
  }
  std::shared_ptr<nrt_model> m;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(model);
    if (it == models_.end()) return Fail(NRT_INVALID_HANDLE, "nrt_execute: not a loaded model");
    m = it->second;
  }
  std::vector<Region> inputs, outputs;
  if (NRT_STATUS s = BindTensors("nrt_execute", *m, input_set, true, &inputs); s != NRT_SUCCESS) return s;
  if (NRT_STATUS s = BindTensors("nrt_execute", *m, output_set, false, &outputs); s != NRT_SUCCESS) return s;
  if (NRT_STATUS s = CheckModelGroup("nrt_execute", *m); s != NRT_SUCCESS) return s;
  const ExecutionCost cost = CostOfExecution(m->model, config_);
  const Slot slot = SyncSlot(kComputeLane);
  const int64_t tid = slot.tid;
  const bool tracing = trace_->Recording();
  if (tracing) {
    RecordCall(TraceEventType::kNrtExecute, TracePhase::kStart, m->vnc, m.get(),
               trace_->HostNow(), tid);
  }
  uint64_t device_end = 0;
  NRT_STATUS status = NRT_SUCCESS;
  for (int i = 0; i < repeat && status == NRT_SUCCESS; ++i) {
    status = RunOnce(m, cost, inputs, outputs, slot, &device_end);
  }
  if (tracing) {
    RecordCall(TraceEventType::kNrtExecute, TracePhase::kStop, m->vnc, nullptr,
               std::max(trace_->HostNow(), trace_->HostTimeOfDevice(device_end)), tid);
  }
  return status;
}

// ---------------------------------------------------------------------------------------------
// System trace

NRT_STATUS Runtime::TraceStart(const TraceCaptureConfig& config) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  absl::Status status = trace_->Start(config);
  if (!status.ok()) return Fail(NRT_INVALID, absl::StrCat("nrt_sys_trace_start: ", status.message()));
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::TraceStop() {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  absl::Status status = trace_->Stop();
  if (!status.ok()) return Fail(NRT_INVALID, absl::StrCat("nrt_sys_trace_stop: ", status.message()));
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::TraceFetch(const TraceFetchOptions& options, std::string* json) {
  TraceDocument document;
  const NRT_STATUS s = TraceFetch(options, &document);
  if (s == NRT_SUCCESS) json->assign(document.data(), document.size());
  return s;
}

NRT_STATUS Runtime::TraceFetch(const TraceFetchOptions& options, TraceDocument* json) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  absl::Status status = trace_->Fetch(options, json);
  if (!status.ok()) {
    return Fail(NRT_INVALID, absl::StrCat("nrt_sys_trace_fetch_events: ", status.message()));
  }
  return NRT_SUCCESS;
}

}  // namespace nrtsim
