// The simulated runtime's collectives: nrt_cc_global_comm_init forms the job's communicator
// (cc_comm.h), nrta_cc_prepare checks a collective's tensors, nrta_cc_schedule puts it on a
// queue of the collectives XU, whose worker runs it on that queue's lane of the core: the wait
// for the group (cc_exec_barrier), then the transfers and reduction (cc_running), timed by
// CollectiveNs (cost_model.h). A model's collective ops (all_reduce) run the same way inside
// its execution, on the communicator's fourth channel (RunOnceCc).
#include <time.h>

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels.h"
#include "runtime.h"
#include "runtime_internal.h"

namespace nrtsim {

using internal::Fail;
using internal::ThreadId;

namespace {

int64_t RealtimeMinusMonotonic() {
  timespec rt, mono;
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  return (static_cast<int64_t>(rt.tv_sec) - mono.tv_sec) * 1000000000ll +
         (static_cast<int64_t>(rt.tv_nsec) - mono.tv_nsec);
}

NRT_STATUS StatusOf(const absl::Status& s) {
  if (absl::IsDeadlineExceeded(s)) return NRT_TIMEOUT;
  if (absl::IsInvalidArgument(s)) return NRT_INVALID;
  return NRT_FAILURE;
}

}  // namespace

NRT_STATUS Runtime::CommInit(uint32_t vnc, uint32_t g_device_id, uint32_t g_device_count) {
  constexpr const char* kFn = "nrt_cc_global_comm_init";
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (vnc >= config_.num_cores) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": NeuronCore ", vnc, " does not exist (",
                                          config_.num_cores, " visible)"));
  }
  if (g_device_count == 0 || g_device_count > kMaxCcRanks || g_device_id >= g_device_count) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": g_device_id ", g_device_id,
                                          " of g_device_count ", g_device_count,
                                          " (a group of 1 to ", kMaxCcRanks, " ranks)"));
  }
  CcJoinOptions options;
  options.rank = g_device_id;
  options.size = g_device_count;
  if (absl::Status s = CcOptionsFromEnvironment(&options); !s.ok()) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": ", s.message()));
  }
  if (g_device_count > 1 && options.root_comm_id.empty()) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": NEURON_RT_ROOT_COMM_ID is not set (the root "
                                          "rank's host:port, for a group of ",
                                          g_device_count, ")"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_ != nullptr) {
      return Fail(NRT_FAILURE, absl::StrCat(kFn, ": the global communicator exists already"));
    }
  }
  absl::StatusOr<std::unique_ptr<CcComm>> comm = CcComm::Join(options);
  if (!comm.ok()) {
    return Fail(StatusOf(comm.status()),
                absl::StrCat(kFn, ": rank ", g_device_id, " of ", g_device_count, ": ",
                             comm.status().message()));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_ != nullptr) {
      return Fail(NRT_FAILURE, absl::StrCat(kFn, ": the global communicator exists already"));
    }
    comm_ = std::move(*comm);
    comm_vnc_ = vnc;
  }
  cc_realtime_offset_ns_.store(RealtimeMinusMonotonic());
  for (auto& id : cc_op_ids_) id.store(0);
  // The rank's core works for the job now: its events name the rank's global id.
  trace_->SetWorkerGid(vnc, g_device_id);
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::CcPrepare(nrt_cc_comm_t* comm, nrt_tensor_list_t* input,
                              nrt_tensor_list_t* output, nrt_dtype_t dtype, nrt_op_type_t op,
                              nrt_cc_op_type_t cc_op, nrt_cc_context_t** cc_ctx) {
  constexpr const char* kFn = "nrta_cc_prepare";
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (comm == nullptr || input == nullptr || output == nullptr || cc_ctx == nullptr) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": null comm, tensor list or cc_ctx"));
  }
  std::shared_ptr<CcComm> global;
  uint32_t vnc = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    global = comm_;
    vnc = comm_vnc_;
  }
  if (global == nullptr) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": no communicator: call nrt_cc_global_comm_init "
                                          "first"));
  }
  const uint32_t n = global->size();
  // Only the global group is modelled: every rank, in order.
  if (comm->rank_n != n || comm->rank != global->rank() || comm->vnc != vnc) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": comm names rank ", comm->rank, " of ",
                                          comm->rank_n, " on NeuronCore ", comm->vnc,
                                          "; the global communicator has rank ", global->rank(),
                                          " of ", n, " on NeuronCore ", vnc));
  }
  if (comm->replica_group != nullptr) {
    for (uint32_t i = 0; i < n; ++i) {
      if (comm->replica_group[i] != i) {
        return Fail(NRT_FAILURE, absl::StrCat(kFn, ": replica groups other than every rank in "
                                              "order (0..", n - 1,
                                              ") are not supported by the simulated runtime"));
      }
    }
  }
  if (dtype != NRT_DTYPE_FLOAT32 && dtype != NRT_DTYPE_BFLOAT16) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": dtype ", static_cast<int>(dtype),
                                          " (the simulator reduces float32 and bfloat16)"));
  }
  if (op != NRT_OP_ADD && op != NRT_OP_MAX && op != NRT_OP_MIN) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": reduction op ", static_cast<int>(op),
                                          " (NRT_OP_ADD, NRT_OP_MAX or NRT_OP_MIN)"));
  }
  if (cc_op != NRT_CC_ALLGATHER && cc_op != NRT_CC_ALLREDUCE && cc_op != NRT_CC_REDUCESCATTER) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": collective ", static_cast<int>(cc_op),
                                          " is not an nrt_cc_op_type_t"));
  }
  if (input->num_tensors == 0 || input->num_tensors != output->num_tensors ||
      input->num_tensors > 64 || input->tensors == nullptr || output->tensors == nullptr) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": ", input->num_tensors, " input and ",
                                          output->num_tensors,
                                          " output tensors (1 to 64 pairs, and as many of each)"));
  }
  auto ctx = std::make_shared<nrt_cc_context>();
  ctx->vnc = vnc;
  ctx->op.cc_op = static_cast<uint32_t>(cc_op);
  ctx->op.reduce = static_cast<uint32_t>(op);
  ctx->op.dtype = static_cast<uint32_t>(dtype);
  const uint64_t elem = dtype == NRT_DTYPE_BFLOAT16 ? 2 : 4;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < input->num_tensors; ++i) {
      nrt_cc_context::Buffer buffers[2];
      for (int side = 0; side < 2; ++side) {
        const nrt_tensor_t* t = (side == 0 ? input : output)->tensors[i];
        auto it = tensors_.find(t);
        if (it == tensors_.end() || it->second->storage == nullptr) {
          return Fail(NRT_INVALID_HANDLE, absl::StrCat(kFn, ": ", side == 0 ? "input" : "output",
                                                       " tensor ", i,
                                                       " is not a live tensor with memory"));
        }
        const nrt_tensor& tensor = *it->second;
        if (tensor.vnc() != static_cast<int>(vnc)) {
          return Fail(NRT_INVALID, absl::StrCat(kFn, ": tensor '", tensor.name,
                                                "' is not on the communicator's NeuronCore ",
                                                vnc));
        }
        buffers[side] = {tensor.storage, tensor.offset, tensor.size};
      }
      const uint64_t in = buffers[0].size, out = buffers[1].size;
      const uint64_t want_out = cc_op == NRT_CC_ALLGATHER      ? in * n
                                : cc_op == NRT_CC_REDUCESCATTER ? in / n
                                                                : in;
      if (in % elem != 0 || (cc_op == NRT_CC_REDUCESCATTER && in % (n * elem) != 0) ||
          out != want_out || (i > 0 && (in != ctx->op.in_bytes || out != ctx->op.out_bytes))) {
        return Fail(NRT_INVALID,
                    absl::StrCat(kFn, ": pair ", i, ": ", in, " bytes in, ", out,
                                 " bytes out; ", CcOpName(ctx->op.cc_op), " of ",
                                 CcDtypeName(ctx->op.dtype), " on ", n,
                                 " ranks needs whole elements, an output of ", want_out,
                                 " bytes, and every pair alike"));
      }
      ctx->op.in_bytes = in;
      ctx->op.out_bytes = out;
      ctx->inputs.push_back(buffers[0]);
      ctx->outputs.push_back(buffers[1]);
    }
    cc_contexts_[ctx.get()] = ctx;
  }
  *cc_ctx = ctx.get();
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::CcSchedule(nrt_cc_context_t** cc_ctx, int queue, NRT_STATUS* ret,
                               uint64_t* seq) {
  constexpr const char* kFn = "nrta_cc_schedule";
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (cc_ctx == nullptr || seq == nullptr) {
    return Fail(NRT_INVALID, absl::StrCat(kFn, ": null cc_ctx or req_sequence"));
  }
  std::shared_ptr<nrt_cc_context> ctx;
  std::shared_ptr<CcComm> comm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cc_contexts_.find(*cc_ctx);
    if (it == cc_contexts_.end()) {
      return Fail(NRT_INVALID_HANDLE,
                  absl::StrCat(kFn, ": not a context nrta_cc_prepare returned (each is "
                               "scheduled once)"));
    }
    ctx = it->second;
    comm = comm_;
  }
  NeuronCore* core = cores_[ctx->vnc].get();
  const int64_t tid = ThreadId();
  const NRT_STATUS status = async_.Schedule(
      kFn, ctx->vnc, Xu::kCollectives, queue, ret,
      [&](uint64_t id) -> AsyncQueues::Job {
        const Slot slot = RequestSlot(core, LaneOf(Xu::kCollectives, queue), id, tid);
        return [this, ctx, comm, queue, slot](const AsyncQueues::Complete& complete) {
          Slot s = slot;
          s.complete = &complete;
          RunCollective(ctx, comm, queue, s);
        };
      },
      seq);
  if (status == NRT_SUCCESS) {
    // The request owns the context now; it goes when the request completes.
    std::lock_guard<std::mutex> lock(mu_);
    cc_contexts_.erase(ctx.get());
    *cc_ctx = nullptr;
  }
  return status;
}

void Runtime::RecordCc(TraceEventType type, uint32_t vnc, const CcOp& op, const CcComm& comm,
                       uint64_t op_id, const Slot& slot, uint64_t start, uint64_t end,
                       uint64_t bytes) {
  TraceEvent e;
  e.type = type;
  e.phase = TracePhase::kStart;
  e.nc_idx = vnc;
  e.thread_id = slot.tid;
  // A request's (nrta_cc_schedule, nrta_execute_schedule); none inside an nrt_execute.
  e.has_nrta_seq_id = slot.async;
  e.nrta_seq_id = slot.seq;
  e.nc_timestamp_ns = start;
  e.op_id = op_id;
  e.rank = comm.rank();
  e.rank_n = comm.size();
  e.cc_op = CcOpName(op.cc_op);
  e.cc_reduce = CcReduceName(op.reduce);
  e.cc_dtype = CcDtypeName(op.dtype);
  e.size = bytes;
  trace_->Record(e);
  e.phase = TracePhase::kStop;
  e.nc_timestamp_ns = end;
  trace_->Record(std::move(e));
}

void Runtime::RunCollective(const std::shared_ptr<nrt_cc_context>& ctx,
                            const std::shared_ptr<CcComm>& comm, int queue, const Slot& slot) {
  NRT_STATUS result = NRT_SUCCESS;
  std::string error;
  const int64_t device_to_realtime = cc_realtime_offset_ns_.load() - clock_.offset_ns();
  const uint64_t op_id = cc_op_ids_[queue].fetch_add(1) + 1;
  NeuronCore& core = *cores_[ctx->vnc];
  core.RunTicketOpen(
      slot.lane, slot.ticket, slot.earliest,
      [&](uint64_t ready, uint64_t* end) -> uint64_t {
        uint64_t t = ready;
        uint64_t first_start = ready;
        const uint32_t elem = ctx->op.dtype == NRT_DTYPE_BFLOAT16 ? 2 : 4;
        for (size_t i = 0; i < ctx->inputs.size(); ++i) {
          uint64_t start_rt = 0;
          // The input is copied first: an output sharing its memory (in place) gets the result.
          std::vector<uint8_t> in(ctx->inputs[i].data(),
                                  ctx->inputs[i].data() + ctx->inputs[i].size);
          const absl::Status s =
              comm == nullptr
                  ? absl::FailedPreconditionError("no communicator")
                  : comm->Run(queue, ctx->op, in.data(), ctx->outputs[i].data(),
                              static_cast<uint64_t>(static_cast<int64_t>(t) + device_to_realtime),
                              &start_rt);
          if (!s.ok()) {
            result = StatusOf(s);
            error = absl::StrCat("nrta_cc_schedule: ", CcOpName(ctx->op.cc_op), " number ",
                                 op_id, " on queue ", queue, ", rank ",
                                 comm == nullptr ? 0 : comm->rank(), ": ", s.message());
            // The wait until the failure shows as the barrier.
            *end = std::max(t, clock_.Now());
            if (trace_->Recording() && comm != nullptr) {
              RecordCc(TraceEventType::kCcExecBarrier, ctx->vnc, ctx->op, *comm, op_id, slot, t, *end, 0);
            }
            return 0;
          }
          const uint64_t start = std::max(
              t, static_cast<uint64_t>(static_cast<int64_t>(start_rt) - device_to_realtime));
          if (i == 0) first_start = start;
          t = start + CollectiveNs(ctx->op.cc_op, ctx->op.in_bytes, ctx->op.out_bytes, elem,
                                   comm->size(), comm->cross_host(), config_);
        }
        *end = t;
        if (trace_->Recording()) {
          const uint64_t bytes = ctx->inputs.size() * ctx->op.in_bytes;
          RecordCc(TraceEventType::kCcExecBarrier, ctx->vnc, ctx->op, *comm, op_id, slot, ready, first_start,
                   bytes);
          RecordCc(TraceEventType::kCcRunning, ctx->vnc, ctx->op, *comm, op_id, slot, first_start, t, bytes);
        }
        // The host waits out the transfers; the barrier was waited for already.
        return t - first_start;
      },
      [&] {
        if (result != NRT_SUCCESS) Fail(result, error);
        (*slot.complete)(result);
      });
}

NRT_STATUS Runtime::CheckModelGroup(const char* fn, const nrt_model& m) {
  if (m.cc_op < 0) return NRT_SUCCESS;
  std::shared_ptr<CcComm> comm;
  uint32_t vnc = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    comm = comm_;
    vnc = comm_vnc_;
  }
  const std::string what =
      absl::StrCat(fn, ": model ", m.model.name, " has a collective (op ", m.cc_op, ", ",
                   OpKindName(m.model.ops[m.cc_op].kind), ")");
  if (comm == nullptr) {
    return Fail(NRT_FAILURE, absl::StrCat(what, " and this process has joined no collectives "
                                          "group: call nrt_cc_global_comm_init first"));
  }
  if (comm->rank() != m.cc_rank || comm->size() != m.cc_ranks) {
    return Fail(NRT_INVALID, absl::StrCat(what, ": loaded for rank ", m.cc_rank, " of ",
                                          m.cc_ranks, ", the group has rank ", comm->rank(),
                                          " of ", comm->size()));
  }
  if (m.vnc != vnc) {
    return Fail(NRT_INVALID, absl::StrCat(what, ": the model is on NeuronCore ", m.vnc,
                                          ", the communicator on NeuronCore ", vnc));
  }
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::RunOnceCc(const std::shared_ptr<nrt_model>& model, const ExecutionCost& cost,
                              const std::vector<Region>& inputs,
                              const std::vector<Region>& outputs, const Slot& slot,
                              uint64_t* device_end) {
  const char* fn = slot.async ? "nrta_execute_schedule" : "nrt_execute";
  const uint64_t exec_id = next_exec_id_.fetch_add(1);
  std::shared_ptr<CcComm> comm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    comm = comm_;
  }
  const int64_t device_to_realtime = cc_realtime_offset_ns_.load() - clock_.offset_ns();
  ExecutionCost run = cost;  // its spans after each collective move by the collective's time
  absl::Status status;
  NRT_STATUS result = NRT_SUCCESS;
  std::string cc_error;  // a collective's failure: its own status and line
  uint64_t device_start = 0;
  uint64_t end_ns = 0;
  auto work = [&](uint64_t start, uint64_t* end) -> uint64_t {
    device_start = start;
    uint64_t shift = 0;     // device time the collectives added so far (waits and transfers)
    uint64_t transfer = 0;  // of which transfers, which the host waits out after the run
    uint64_t failed_at = 0;
    const bool recording = trace_->Recording();
    // Inputs copied first, as RunOnce does (an output may share an input's memory).
    std::vector<std::vector<uint8_t>> in_copies(inputs.size());
    std::vector<const void*> in_ptrs;
    std::vector<void*> out_ptrs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      in_copies[i].assign(inputs[i].data(), inputs[i].data() + inputs[i].size);
      in_ptrs.push_back(in_copies[i].data());
    }
    for (const Region& r : outputs) out_ptrs.push_back(r.data());
    const CollectiveFn collective = [&](uint32_t k, const OpDef& op,
                                        std::vector<uint8_t>* data) -> absl::Status {
      const Span& span = cost.ops[k].span;
      // Ready once the op is issued; the device runs nothing else of the model meanwhile.
      const uint64_t ready = start + shift + span.start_ns + span.duration_ns;
      CcOp cc;
      cc.cc_op = NRT_CC_ALLREDUCE;
      cc.reduce = static_cast<uint32_t>(op.axis);
      cc.dtype = static_cast<uint32_t>(model->model.tensors[op.output].dtype);
      cc.in_bytes = cc.out_bytes = data->size();
      const uint64_t op_id = cc_op_ids_[kModelCcChannel].fetch_add(1) + 1;
      std::vector<uint8_t> out(data->size());
      uint64_t start_rt = 0;
      const absl::Status s =
          comm == nullptr
              ? absl::FailedPreconditionError("the communicator is gone (nrt_close)")
              : comm->Run(kModelCcChannel, cc, data->data(), out.data(),
                          static_cast<uint64_t>(static_cast<int64_t>(ready) + device_to_realtime),
                          &start_rt);
      if (!s.ok()) {
        result = StatusOf(s);
        cc_error = absl::StrCat(fn, ": model ", model->model.name, ": ", OpKindName(op.kind),
                                " (op ", k, ") number ", op_id, ", rank ",
                                comm == nullptr ? 0 : comm->rank(), ": ", s.message());
        // The wait until the failure shows as the barrier, and ends the execution.
        failed_at = std::max(ready, clock_.Now());
        if (recording && comm != nullptr) {
          RecordCc(TraceEventType::kCcExecBarrier, model->vnc, cc, *comm, op_id, slot, ready,
                   failed_at, 0);
        }
        return s;
      }
      const uint64_t group = std::max(
          ready, static_cast<uint64_t>(static_cast<int64_t>(start_rt) - device_to_realtime));
      const uint64_t ns = CollectiveNs(cc.cc_op, cc.in_bytes, cc.out_bytes,
                                       static_cast<uint32_t>(DTypeSize(DType(cc.dtype))),
                                       comm->size(), comm->cross_host(), config_);
      if (recording) {
        RecordCc(TraceEventType::kCcExecBarrier, model->vnc, cc, *comm, op_id, slot, ready,
                 group, cc.in_bytes);
        RecordCc(TraceEventType::kCcRunning, model->vnc, cc, *comm, op_id, slot, group,
                 group + ns, cc.in_bytes);
      }
      const uint64_t added = group - ready + ns;
      shift += added;
      transfer += ns;
      for (size_t j = k + 1; j < run.ops.size(); ++j) run.ops[j].span.start_ns += added;
      for (IoDmaCost& dma : run.io_dmas) {
        if (!dma.to_device) dma.span.start_ns += added;
      }
      *data = std::move(out);
      return absl::OkStatus();
    };
    status = RunModel(model->model, in_ptrs, out_ptrs, collective);
    run.total_ns = failed_at != 0 ? failed_at - start : cost.total_ns + shift;
    *end = start + run.total_ns;
    end_ns = *end;
    if (recording) RecordExecution(*model, run, start, exec_id, slot);
    // The host waits out the modelled time but the barriers, which it waited for already.
    return failed_at != 0 ? 0 : cost.total_ns + transfer;
  };
  auto done = [&] {
    if (profiling_.load(std::memory_order_relaxed) != 0) {
      std::lock_guard<std::mutex> lock(profile_mu_);
      auto it = profiles_.find(model->id);
      if (it != profiles_.end()) it->second.executions.push_back({exec_id, device_start, run});
    }
    if (!cc_error.empty()) {
      Fail(result, cc_error);
    } else if (!status.ok()) {
      result = Fail(NRT_EXEC_COMPLETED_WITH_ERR, absl::StrCat(fn, ": ", status.message()));
    }
    if (slot.complete != nullptr) (*slot.complete)(result);
  };
  NeuronCore& core = *cores_[model->vnc];
  if (slot.async) {
    core.RunTicketOpen(slot.lane, slot.ticket, slot.earliest, work, done);
  } else {
    core.RunOpen(slot.lane, work);
    done();
  }
  if (device_end != nullptr) *device_end = end_ns;
  return result;
}

}  // namespace nrtsim
