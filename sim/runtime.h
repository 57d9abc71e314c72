// The simulated runtime's state behind the C API (nrt_api.cc): lifecycle, handle registries,
// NeuronCores, device memory accounting and the system trace. Internal to libnrt.
//
// Thread-safety: every public method may be called from any thread. `life_mu_` is held shared
// for the length of each API call and exclusively by Init/Close, so nrt_close() waits for calls
// in flight; `mu_` guards the registries for short sections only, never across device work.
// Asynchronous requests (nrt/nrt_async.h) run on their queues' worker threads, which hold no
// lock of the runtime's: Close() completes and joins them before it frees anything.
#ifndef NRTPROF_SIM_RUNTIME_H_
#define NRTPROF_SIM_RUNTIME_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include <mutex>
#include <shared_mutex>
#include "async_queues.h"
#include "cc_comm.h"
#include "cost_model.h"
#include "device_config.h"
#include "neuron_core.h"
#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"
#include "runtime_objects.h"
#include "sys_trace.h"

namespace nrtsim {

class Runtime {
 public:
  static Runtime& Get();

  NRT_STATUS Init(nrt_framework_type_t framework);
  void Close();
  // The process's visible cores, or (`total`) the machine's.
  NRT_STATUS CoreCount(uint32_t* count, bool total = false);

  // `ctx_device_count` 0: nrt_load; otherwise nrt_load_collectives, for rank `ctx_device_id`.
  NRT_STATUS Load(const void* bytes, size_t size, int32_t vnc, nrt_model_t** model,
                  uint32_t ctx_device_id = 0, uint32_t ctx_device_count = 0);
  NRT_STATUS Unload(nrt_model_t* model);
  NRT_STATUS ModelVnc(const nrt_model_t* model, uint32_t* vnc);
  NRT_STATUS TensorInfo(nrt_model_t* model, nrt_tensor_info_array_t** info);
  NRT_STATUS Execute(nrt_model_t* model, const void* inputs, void* outputs, int repeat);

  NRT_STATUS AllocateTensor(nrt_tensor_placement_t placement, int vnc, size_t size,
                            const char* name, nrt_tensor_t** tensor);
  NRT_STATUS AllocateEmpty(const char* name, nrt_tensor_t** tensor);
  NRT_STATUS AllocateSlice(const nrt_tensor_t* source, size_t offset, size_t size,
                           const char* name, nrt_tensor_t** slice);
  NRT_STATUS AttachBuffer(nrt_tensor_t* tensor, void* buffer, size_t size);
  void FreeTensor(nrt_tensor_t** tensor);
  NRT_STATUS ReadTensor(const nrt_tensor_t* tensor, void* buf, size_t offset, size_t size);
  NRT_STATUS WriteTensor(nrt_tensor_t* tensor, const void* buf, size_t offset, size_t size);
  NRT_STATUS CopyTensor(const nrt_tensor_t* src, size_t src_offset, nrt_tensor_t* dst,
                        size_t dst_offset, size_t size);
  NRT_STATUS MemsetTensor(nrt_tensor_t* tensor, uint64_t offset, int value, size_t size);
  size_t TensorSize(const nrt_tensor_t* tensor);
  void* TensorVa(const nrt_tensor_t* tensor);
  NRT_STATUS MemoryStats(uint32_t vnc, nrt_vnc_memory_stats_t* stats, size_t size_in,
                         size_t* size_out);

  NRT_STATUS AllocateSet(void** set);
  void DestroySet(void** set);
  NRT_STATUS AddToSet(void* set, const char* name, nrt_tensor_t* tensor);
  NRT_STATUS GetFromSet(void* set, const char* name, nrt_tensor_t** tensor);

  // Device profiles (nrt/nrt_profile.h): what happens inside a model's executions.
  NRT_STATUS ProfileStart(nrt_model_t* model, const char* filename);
  NRT_STATUS ProfileStop(const char* filename);

  // The explicit asynchronous API (nrt/nrt_async.h), runtime_async.cc.
  NRT_STATUS ScheduleExecute(nrt_model_t* model, const void* inputs, void* outputs, int queue,
                             NRT_STATUS* ret, uint64_t* seq);
  NRT_STATUS ScheduleWrite(nrt_tensor_t* tensor, const void* buf, uint64_t offset,
                           uint64_t size, int queue, NRT_STATUS* ret, uint64_t* seq);
  NRT_STATUS ScheduleRead(void* buf, nrt_tensor_t* tensor, uint64_t offset, uint64_t size,
                          int queue, NRT_STATUS* ret, uint64_t* seq);
  NRT_STATUS ScheduleCopy(nrt_tensor_t* src, uint64_t src_offset, nrt_tensor_t* dst,
                          uint64_t dst_offset, uint64_t size, int queue, NRT_STATUS* ret,
                          uint64_t* seq);
  // Lock-free (nrta_is_completed, nrta_get_sequence are polled).
  NRT_STATUS IsCompleted(uint64_t seq, bool* completed) const {
    return async_.IsCompleted(seq, completed);
  }
  NRT_STATUS LastCompleted(uint32_t lnc, int xu, int queue, uint64_t* seq) const {
    return async_.LastCompleted(lnc, xu, queue, seq);
  }
  NRT_STATUS NotifySeq(uint64_t seq, int efd) { return async_.NotifySeq(seq, efd); }
  NRT_STATUS NotifyXu(uint32_t lnc, int xu, int queue, int efd) {
    return async_.NotifyXu(lnc, xu, queue, efd);
  }

  // Collectives (nrt_cc_global_comm_init, nrta_cc_prepare, nrta_cc_schedule), runtime_cc.cc.
  NRT_STATUS CommInit(uint32_t vnc, uint32_t g_device_id, uint32_t g_device_count);
  NRT_STATUS CcPrepare(nrt_cc_comm_t* comm, nrt_tensor_list_t* input, nrt_tensor_list_t* output,
                       nrt_dtype_t dtype, nrt_op_type_t op, nrt_cc_op_type_t cc_op,
                       nrt_cc_context_t** ctx);
  NRT_STATUS CcSchedule(nrt_cc_context_t** ctx, int queue, NRT_STATUS* ret, uint64_t* seq);

  NRT_STATUS TraceStart(const TraceCaptureConfig& config);
  NRT_STATUS TraceStop();
  NRT_STATUS TraceFetch(const TraceFetchOptions& options, std::string* json);
  NRT_STATUS TraceFetch(const TraceFetchOptions& options, TraceDocument* json);

 private:
  enum class State { kUninitialized, kInitialized, kClosed };
  // A byte range of a tensor, resolved under mu_ so device work can use it unlocked.
  struct Region {
    std::shared_ptr<Storage> storage;
    size_t offset = 0;
    size_t size = 0;
    std::string name;
    uint8_t* data() const { return storage->data + offset; }
    int vnc() const { return storage->vnc; }
  };

  Runtime() = default;
  NRT_STATUS Ready() const ABSL_SHARED_LOCKS_REQUIRED(life_mu_);
  NRT_STATUS ResolveTensor(const nrt_tensor_t* tensor, size_t offset, size_t size,
                           const char* fn, Region* region) ABSL_LOCKS_EXCLUDED(mu_);
  NRT_STATUS BindTensors(const char* fn, const nrt_model& model, const void* set, bool inputs,
                         std::vector<Region>* regions) ABSL_LOCKS_EXCLUDED(mu_);
  NRT_STATUS ChargeDeviceMemory(int vnc, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How a host-initiated transfer shows in the system trace: the device-memory copy
  // (dmem_buf_copyin/copyout), inside a tensor_write/tensor_read span when `tensor_call`.
  struct TransferTrace {
    bool to_device = true;
    bool tensor_call = true;
    uint64_t tensor_id = 0;
    uint64_t offset = 0;
  };
  static TransferTrace WriteTrace(const Region& r) { return TraceOf(r, true); }
  static TransferTrace ReadTrace(const Region& r) { return TraceOf(r, false); }
  static TransferTrace TraceOf(const Region& r, bool to_device) {
    TransferTrace t;
    t.to_device = to_device;
    // The tensor's memory stands for its id: the same for every tensor (or slice) on it.
    t.tensor_id = reinterpret_cast<uintptr_t>(r.storage.get());
    t.offset = r.offset;
    return t;
  }
  // Where a job runs: a synchronous call's turn on its lane (the caller's thread), or an
  // asynchronous request's ticket (its queue's worker thread, which holds no lock: Close()
  // joins the workers before it changes what they use).
  struct Slot {
    int lane = kComputeLane;
    bool async = false;
    uint64_t ticket = 0;    // async: the lane's ticket, taken when scheduled
    uint64_t earliest = 0;  // async: when scheduled, or the core's done_until() if later
    uint64_t seq = 0;       // async: the request's nrta_seq_id, written on its events
    int64_t tid = 0;        // the calling (for a request, the scheduling) thread
    // async: completes the request, called before the lane moves on (AsyncQueues::Job).
    const AsyncQueues::Complete* complete = nullptr;
  };
  // A synchronous call's slot on `lane`, for the calling thread.
  static Slot SyncSlot(int lane);
  // Runs `work` for `duration_ns` on core `vnc` where `slot` says, then `done` (for a request,
  // before its lane moves on); returns the device start.
  uint64_t OnCore(uint32_t vnc, const Slot& slot, uint64_t duration_ns,
                  const std::function<void(uint64_t device_start_ns)>& work,
                  const std::function<void()>& done);
  // The slot of a request scheduled now on `lane` of `core`: its ticket and earliest start.
  // Called under the request's queue lock, so tickets follow sequence ids.
  Slot RequestSlot(NeuronCore* core, int lane, uint64_t seq, int64_t tid);
  // Times a host-initiated transfer on `vnc`, runs `move` in its slot and records it (a
  // request completes with NRT_SUCCESS). Returns the transfer's end on the device clock.
  uint64_t DeviceTransfer(int vnc, const Slot& slot, uint64_t duration_ns, uint64_t bytes,
                          const TransferTrace& trace, const std::function<void()>& move);
  // *device_end: the execution's end on the device clock. The inputs are read when the
  // execution starts on its core. A request completes with the returned status.
  NRT_STATUS RunOnce(const std::shared_ptr<nrt_model>& model, const ExecutionCost& cost,
                     const std::vector<Region>& inputs, const std::vector<Region>& outputs,
                     const Slot& slot, uint64_t* device_end);
  // RunOnce for a model with collective ops (runtime_cc.cc): each waits for the group on the
  // communicator's model channel (cc_exec_barrier, cc_running inside the execution), which
  // lengthens the execution by the wait and the transfers.
  NRT_STATUS RunOnceCc(const std::shared_ptr<nrt_model>& model, const ExecutionCost& cost,
                       const std::vector<Region>& inputs, const std::vector<Region>& outputs,
                       const Slot& slot, uint64_t* device_end);
  // Before a model with collective ops runs: the process has joined a group, the one the
  // model was loaded for, on the model's core. Fails (one line) otherwise.
  NRT_STATUS CheckModelGroup(const char* fn, const nrt_model& model);
  // Records device_exec start/stop (and a model_switch when the core ran another model last).
  void RecordExecution(const nrt_model& model, const ExecutionCost& cost, uint64_t start,
                       uint64_t exec_id, const Slot& slot);
  // Schedules an asynchronous tensor request on tensor-op queue `queue` of core `vnc`: `move`
  // in a slot of `duration_ns`, recorded as `trace` says (null: not recorded, as a copy within
  // device memory). runtime_async.cc.
  NRT_STATUS ScheduleTransfer(const char* fn, int vnc, int queue, uint64_t duration_ns,
                              uint64_t bytes, const TransferTrace* trace,
                              std::function<void()> move, NRT_STATUS* ret, uint64_t* seq)
      ABSL_SHARED_LOCKS_REQUIRED(life_mu_);
  // A host span of an API call (nrt_load, nrt_execute) on `vnc`'s ring.
  // `model`: the call's model, or null (its id and name are written where the phase has them).
  void RecordCall(TraceEventType type, TracePhase phase, uint32_t vnc, const nrt_model* model,
                  uint64_t host_ns, int64_t tid) ABSL_SHARED_LOCKS_REQUIRED(life_mu_);
  void FreeAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a scheduled collective on its lane (the queue's worker): the group's barrier, the
  // transfers, their trace events; completes the request.
  void RunCollective(const std::shared_ptr<nrt_cc_context>& ctx,
                     const std::shared_ptr<CcComm>& comm, int queue, const Slot& slot);
  void RecordCc(TraceEventType type, uint32_t vnc, const CcOp& op, const CcComm& comm,
                uint64_t op_id, const Slot& slot, uint64_t start, uint64_t end, uint64_t bytes);

  // Standard mutexes rather than absl::Mutex: Debian's abseil is not built with ThreadSanitizer,
  // which then cannot see its locking, and the runtime's tests run under --config=tsan.
  mutable std::shared_mutex life_mu_;
  State state_ ABSL_GUARDED_BY(life_mu_) = State::kUninitialized;
  DeviceConfig config_ ABSL_GUARDED_BY(life_mu_);
  std::vector<std::unique_ptr<NeuronCore>> cores_ ABSL_GUARDED_BY(life_mu_);
  std::unique_ptr<SysTrace> trace_ ABSL_GUARDED_BY(life_mu_);
  // Per core, the model it executed last (for model_switch events); 0: none yet.
  std::unique_ptr<std::atomic<uint64_t>[]> last_model_ ABSL_GUARDED_BY(life_mu_);
  DeviceClock clock_;

  std::mutex mu_;  // acquired after life_mu_
  std::unordered_map<const nrt_model*, std::shared_ptr<nrt_model>> models_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<const nrt_tensor*, std::unique_ptr<nrt_tensor>> tensors_
      ABSL_GUARDED_BY(mu_);
  std::unordered_map<const void*, std::unique_ptr<TensorSet>> sets_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> device_bytes_used_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> models_per_core_ ABSL_GUARDED_BY(mu_);
  // The global communicator (nrt_cc_global_comm_init), its core, and the collectives prepared
  // and not yet scheduled.
  std::shared_ptr<CcComm> comm_ ABSL_GUARDED_BY(mu_);
  uint32_t comm_vnc_ ABSL_GUARDED_BY(mu_) = 0;
  std::unordered_map<const nrt_cc_context*, std::shared_ptr<nrt_cc_context>> cc_contexts_
      ABSL_GUARDED_BY(mu_);
  // CLOCK_REALTIME - CLOCK_MONOTONIC when the communicator formed: ranks compare device times
  // as wall-clock times.
  std::atomic<int64_t> cc_realtime_offset_ns_{0};
  std::atomic<uint64_t> cc_op_ids_[kCcChannels] = {};

  // Device profiles in progress, by model id: the file named at the start and each execution
  // of the model since, with its costs (ops and I/O DMA inside it, device clock).
  struct ProfiledExecution {
    uint64_t exec_id = 0;
    uint64_t start_ns = 0;
    ExecutionCost cost;
  };
  struct DeviceProfile {
    std::string filename;
    std::shared_ptr<nrt_model> model;
    std::vector<ProfiledExecution> executions;
  };
  std::mutex profile_mu_;  // acquired after mu_, or alone
  std::unordered_map<uint64_t, DeviceProfile> profiles_ ABSL_GUARDED_BY(profile_mu_);
  std::atomic<int> profiling_{0};  // profiles_.size(): executions skip the lock when 0

  std::atomic<uint64_t> next_model_id_{1};
  std::atomic<uint64_t> next_exec_id_{1};

  // The asynchronous API's queues: opened by Init, completed and closed by Close; their
  // completion state is read without any lock.
  AsyncQueues async_;
};

// One line on stderr, prefixed "nrt: ", for errors a caller should see.
void ReportError(const std::string& line);

// What the simulator does not model says so once per function (one line on stderr), then
// fails cleanly: returns NRT_FAILURE.
NRT_STATUS Unsupported(const char* fn);

}  // namespace nrtsim

#endif  // NRTPROF_SIM_RUNTIME_H_
