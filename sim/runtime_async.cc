// The simulated runtime's explicit asynchronous API (nrt/nrt_async.h): schedule calls check
// their arguments as the synchronous calls do, then put a request on an execution-unit queue
// (async_queues.h) whose worker runs it with the synchronous path's own code (RunOnce,
// DeviceTransfer) on the queue's lane of the core (neuron_core.h).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime.h"
#include "runtime_internal.h"

namespace nrtsim {

using internal::Fail;
using internal::ThreadId;

NRT_STATUS Runtime::ScheduleExecute(nrt_model_t* model, const void* input_set, void* output_set,
                                    int queue, NRT_STATUS* ret, uint64_t* seq) {
  constexpr const char* kFn = "nrta_execute_schedule";
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (seq == nullptr) return Fail(NRT_INVALID, absl::StrCat(kFn, ": null req_sequence"));
  std::shared_ptr<nrt_model> m;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(model);
    if (it == models_.end()) return Fail(NRT_INVALID_HANDLE, absl::StrCat(kFn, ": not a loaded model"));
    m = it->second;
  }
  std::vector<Region> inputs, outputs;
  if (NRT_STATUS s = BindTensors(kFn, *m, input_set, true, &inputs); s != NRT_SUCCESS) return s;
  if (NRT_STATUS s = BindTensors(kFn, *m, output_set, false, &outputs); s != NRT_SUCCESS) {
    return s;
  }
  if (NRT_STATUS s = CheckModelGroup(kFn, *m); s != NRT_SUCCESS) return s;
  const ExecutionCost cost = CostOfExecution(m->model, config_);
  NeuronCore* core = cores_[m->vnc].get();
  const int64_t tid = ThreadId();
  return async_.Schedule(
      kFn, m->vnc, Xu::kCompute, queue, ret,
      [&](uint64_t id) -> AsyncQueues::Job {
        // The schedule itself, on the host's clock: a reader sees when the request was made
        // beside when it ran (device_exec, same nrta_seq_id). Recorded before the worker can
        // record the execution. Built only when a capture asks for the type (a profiler that
        // does not would pay for it on every schedule).
        if (trace_->Wants(static_cast<uint32_t>(m->vnc), TraceEventType::kNrtaExecuteSchedule)) {
          TraceEvent e;
          e.type = TraceEventType::kNrtaExecuteSchedule;
          e.phase = TracePhase::kInstant;
          e.nc_idx = m->vnc;
          e.thread_id = tid;
          e.model_id = m->id;
          e.model_name = m->trace_name;
          e.has_nrta_seq_id = true;
          e.nrta_seq_id = id;
          e.host_timestamp_ns = trace_->HostNow();
          trace_->Record(std::move(e));
        }
        const Slot slot = RequestSlot(core, kComputeLane, id, tid);
        return [this, m, cost, inputs, outputs, slot](const AsyncQueues::Complete& complete) {
          Slot s = slot;
          s.complete = &complete;
          RunOnce(m, cost, inputs, outputs, s, nullptr);
        };
      },
      seq);
}

NRT_STATUS Runtime::ScheduleTransfer(const char* fn, int vnc, int queue, uint64_t duration_ns,
                                     uint64_t bytes, const TransferTrace* trace,
                                     std::function<void()> move, NRT_STATUS* ret,
                                     uint64_t* seq) {
  NeuronCore* core = cores_[vnc].get();
  const bool traced = trace != nullptr;
  const TransferTrace how = traced ? *trace : TransferTrace{};
  const int64_t tid = ThreadId();
  return async_.Schedule(
      fn, static_cast<uint32_t>(vnc), Xu::kTensorOp, queue, ret,
      [&](uint64_t id) -> AsyncQueues::Job {
        const Slot slot = RequestSlot(core, LaneOf(Xu::kTensorOp, queue), id, tid);
        return [this, vnc, slot, duration_ns, bytes, how, traced,
                move = std::move(move)](const AsyncQueues::Complete& complete) {
          Slot s = slot;
          s.complete = &complete;
          if (traced) {
            DeviceTransfer(vnc, s, duration_ns, bytes, how, move);
          } else {
            OnCore(static_cast<uint32_t>(vnc), s, duration_ns, [&](uint64_t) { move(); },
                   [&] { complete(NRT_SUCCESS); });
          }
        };
      },
      seq);
}

NRT_STATUS Runtime::ScheduleWrite(nrt_tensor_t* tensor, const void* buf, uint64_t offset,
                                  uint64_t size, int queue, NRT_STATUS* ret, uint64_t* seq) {
  constexpr const char* kFn = "nrta_tensor_write";
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (seq == nullptr) return Fail(NRT_INVALID, absl::StrCat(kFn, ": null req_sequence"));
  if (buf == nullptr && size != 0) return Fail(NRT_INVALID, absl::StrCat(kFn, ": null buffer"));
  Region r;
  if (NRT_STATUS s = ResolveTensor(tensor, offset, size, kFn, &r); s != NRT_SUCCESS) return s;
  if (r.vnc() < 0) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": tensor '", r.name,
                                          "' is in host memory, not on a NeuronCore"));
  }
  // The device reads `buf` when the transfer runs: it must stay as it is until completion.
  const TransferTrace trace = WriteTrace(r);
  return ScheduleTransfer(kFn, r.vnc(), queue, size == 0 ? 0 : HostDmaNs(size, config_), size,
                          size == 0 ? nullptr : &trace,
                          [r, buf, size] { memcpy(r.data(), buf, size); }, ret, seq);
}

NRT_STATUS Runtime::ScheduleRead(void* buf, nrt_tensor_t* tensor, uint64_t offset,
                                 uint64_t size, int queue, NRT_STATUS* ret, uint64_t* seq) {
  constexpr const char* kFn = "nrta_tensor_read";
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (seq == nullptr) return Fail(NRT_INVALID, absl::StrCat(kFn, ": null req_sequence"));
  if (buf == nullptr && size != 0) return Fail(NRT_INVALID, absl::StrCat(kFn, ": null buffer"));
  Region r;
  if (NRT_STATUS s = ResolveTensor(tensor, offset, size, kFn, &r); s != NRT_SUCCESS) return s;
  if (r.vnc() < 0) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": tensor '", r.name,
                                          "' is in host memory, not on a NeuronCore"));
  }
  const TransferTrace trace = ReadTrace(r);
  return ScheduleTransfer(kFn, r.vnc(), queue, size == 0 ? 0 : HostDmaNs(size, config_), size,
                          size == 0 ? nullptr : &trace,
                          [r, buf, size] { memcpy(buf, r.data(), size); }, ret, seq);
}

NRT_STATUS Runtime::ScheduleCopy(nrt_tensor_t* src, uint64_t src_offset, nrt_tensor_t* dst,
                                 uint64_t dst_offset, uint64_t size, int queue, NRT_STATUS* ret,
                                 uint64_t* seq) {
  constexpr const char* kFn = "nrta_tensor_copy";
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (seq == nullptr) return Fail(NRT_INVALID, absl::StrCat(kFn, ": null req_sequence"));
  Region from, to;
  if (NRT_STATUS s = ResolveTensor(src, src_offset, size, kFn, &from); s != NRT_SUCCESS) return s;
  if (NRT_STATUS s = ResolveTensor(dst, dst_offset, size, kFn, &to); s != NRT_SUCCESS) return s;
  if (from.vnc() < 0 && to.vnc() < 0) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": neither tensor is on a NeuronCore"));
  }
  if (from.vnc() >= 0 && to.vnc() >= 0 && from.vnc() != to.vnc()) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": tensors on NeuronCores ", from.vnc(), " and ",
                                          to.vnc(), " (a copy must stay on one core)"));
  }
  auto move = [from, to, size] { memmove(to.data(), from.data(), size); };
  const int vnc = std::max(from.vnc(), to.vnc());
  if (size == 0) return ScheduleTransfer(kFn, vnc, queue, 0, 0, nullptr, move, ret, seq);
  if (from.vnc() >= 0 && to.vnc() >= 0) {
    // Within device memory: timed, not recorded (the real runtime has no event for it).
    return ScheduleTransfer(kFn, vnc, queue, DeviceCopyNs(size, config_), size, nullptr, move,
                            ret, seq);
  }
  const TransferTrace trace = to.vnc() >= 0 ? WriteTrace(to) : ReadTrace(from);
  return ScheduleTransfer(kFn, vnc, queue, HostDmaNs(size, config_), size, &trace, move, ret,
                          seq);
}

}  // namespace nrtsim
