// The interposed libnrt functions and the annotation entry points.
//
// Every wrapper has one shape: resolve the real function (once) → ApiCall (reentrancy guard,
// record reserved and stamped) → the real call → End() (exit stamp) → the call's fields →
// Commit(). The real result is returned untouched. What is not on the hot path (starting the
// device trace at nrt_init, copying a model at nrt_load, fetching device events before
// nrt_close, the device profiles around nrt_load and nrt_unload) happens outside the timed
// window.
#include "shim/preload/interpose.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "nrt/nrt_profile.h"
#include "nrt/nrt_sys_trace.h"
#include "shim/preload/core.h"

using nrtprof::shim::ApiFunction;
using nrtprof::shim::Record;
using nrtprof::shim::core::ApiCall;
using nrtprof::shim::core::Handle;

namespace sc = nrtprof::shim::core;
namespace ns = nrtprof::shim;

#define NRTPROF_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

inline int32_t Status(NRT_STATUS s) { return static_cast<int32_t>(s); }

// The backend when it runs device profiles (NRTPROF_DEVICE_PROFILE=1) and this is the
// program's own call, else null. Off, it costs one relaxed load.
const ns::BackendApi* DeviceProfiling() {
  if (sc::g_core.device_profile.load(std::memory_order_relaxed) == 0) return nullptr;
  return sc::t_in_call == 0 ? sc::RunningBackend() : nullptr;
}

// Bytes named by a batch of tensor reads or writes.
uint64_t BatchBytes(const nrt_tensor_batch_t* batches, uint64_t num_batches) {
  uint64_t bytes = 0;
  if (batches == nullptr) return 0;
  for (uint64_t b = 0; b < num_batches; ++b) {
    if (batches[b].ops == nullptr) continue;
    for (uint32_t i = 0; i < batches[b].num_ops; ++i) bytes += batches[b].ops[i].size;
  }
  return bytes;
}

}  // namespace

// ---- Lifecycle ----

NRTPROF_EXPORT NRT_STATUS nrt_init(nrt_framework_type_t framework, const char* fw_version,
                                   const char* fal_version) {
  auto real = NRTPROF_REAL(ns::kNrtInit, nrt_init);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtInit);
  const NRT_STATUS status = real(framework, fw_version, fal_version);
  if (call.End() != nullptr) call.Commit(Status(status));
  if (status == NRT_SUCCESS && call.outermost()) {
    if (const ns::BackendApi* backend = sc::RunningBackend()) backend->on_runtime_init();
  }
  return status;
}

NRTPROF_EXPORT void nrt_close() {
  auto real = NRTPROF_REAL(ns::kNrtClose, nrt_close);
  if (real == nullptr) return;
  if (sc::t_in_call != 0) {
    real();
    return;
  }
  // The runtime discards its system trace at close: fetch what is left first.
  const ns::BackendApi* backend = sc::EnsureStarted() ? sc::RunningBackend() : nullptr;
  if (backend != nullptr) backend->before_runtime_close();
  {
    ApiCall call(ns::kNrtClose);
    real();
    if (call.End() != nullptr) call.Commit(Status(NRT_SUCCESS));
  }
  if (backend != nullptr) backend->after_runtime_close();
}

// ---- Models ----

namespace {

// A model's load, by nrt_load or nrt_load_collectives: `load` calls the runtime. The model file
// goes to the backend (the capture's copy of it), and its device profile is started if asked.
template <typename Load>
NRT_STATUS RecordLoad(ApiFunction f, const Load& load, const void* neff_bytes, size_t size,
                      int32_t vnc, nrt_model_t** model) {
  ApiCall call(f);
  const NRT_STATUS status = load();
  const uint64_t handle = status == NRT_SUCCESS && model != nullptr ? Handle(*model) : 0;
  if (Record* r = call.End()) {
    r->bytes = size;
    r->nc_idx = vnc;
    r->handle = handle;
    call.Commit(Status(status));
    if (handle != 0 && neff_bytes != nullptr) {
      if (const ns::BackendApi* backend = sc::RunningBackend()) {
        backend->on_model_loaded(handle, neff_bytes, size);
      }
    }
  }
  if (handle != 0 && call.outermost() &&
      sc::g_core.device_profile.load(std::memory_order_relaxed) != 0) {
    if (const ns::BackendApi* backend = sc::RunningBackend()) backend->on_model_profiled(*model);
  }
  return status;
}

}  // namespace

NRTPROF_EXPORT NRT_STATUS nrt_load(const void* neff_bytes, size_t size, int32_t vnc,
                                   int32_t vnc_count, nrt_model_t** model) {
  auto real = NRTPROF_REAL(ns::kNrtLoad, nrt_load);
  if (real == nullptr) return NRT_FAILURE;
  return RecordLoad(
      ns::kNrtLoad, [&] { return real(neff_bytes, size, vnc, vnc_count, model); }, neff_bytes,
      size, vnc, model);
}

// A model of a collectives group (a rank of a distributed job, as torch-neuronx loads it).
NRTPROF_EXPORT NRT_STATUS nrt_load_collectives(const void* neff_bytes, size_t size, int32_t vnc,
                                               int32_t vnc_count, uint32_t ctx_device_id,
                                               uint32_t ctx_device_count, nrt_model_t** model) {
  auto real = NRTPROF_REAL(ns::kNrtLoadCollectives, nrt_load_collectives);
  if (real == nullptr) return NRT_FAILURE;
  return RecordLoad(
      ns::kNrtLoadCollectives,
      [&] {
        return real(neff_bytes, size, vnc, vnc_count, ctx_device_id, ctx_device_count, model);
      },
      neff_bytes, size, vnc, model);
}

NRTPROF_EXPORT NRT_STATUS nrt_unload(nrt_model_t* model) {
  auto real = NRTPROF_REAL(ns::kNrtUnload, nrt_unload);
  if (real == nullptr) return NRT_FAILURE;
  // The profiler's device profile of the model is collected while the model is there.
  if (const ns::BackendApi* backend = DeviceProfiling()) backend->before_model_unload(model);
  ApiCall call(ns::kNrtUnload);
  const NRT_STATUS status = real(model);
  if (Record* r = call.End()) {
    r->handle = Handle(model);
    call.Commit(Status(status));
  }
  return status;
}

// ---- Execution ----

NRTPROF_EXPORT NRT_STATUS nrt_execute(nrt_model_t* model, const nrt_tensor_set_t* input_set,
                                      nrt_tensor_set_t* output_set) {
  auto real = NRTPROF_REAL(ns::kNrtExecute, nrt_execute);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtExecute);
  const NRT_STATUS status = real(model, input_set, output_set);
  if (Record* r = call.End()) {
    r->handle = Handle(model);
    r->aux = 1;
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrt_execute_repeat(nrt_model_t* model,
                                             const nrt_tensor_set_t* input_set,
                                             nrt_tensor_set_t* output_set, int repeat_count) {
  auto real = NRTPROF_REAL(ns::kNrtExecuteRepeat, nrt_execute_repeat);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtExecuteRepeat);
  const NRT_STATUS status = real(model, input_set, output_set, repeat_count);
  if (Record* r = call.End()) {
    r->handle = Handle(model);
    r->aux = repeat_count > 0 ? static_cast<uint64_t>(repeat_count) : 0;
    call.Commit(Status(status));
  }
  return status;
}

// ---- Explicit async execution (nrt/nrt_async.h) ----
//
// A schedule call returns at once with its request's sequence number, which the runtime's
// device events carry too (nrta_seq_id): the daemon pairs each device execution and transfer
// with its schedule call by that number. The number goes in `aux`.

namespace {

inline uint64_t SeqOrZero(NRT_STATUS status, const nrta_seq_t* seq) {
  return status == NRT_SUCCESS && seq != nullptr ? *seq : 0;
}

}  // namespace

NRTPROF_EXPORT NRT_STATUS nrta_execute_schedule(nrt_model_t* model, const nrt_tensor_set_t* input,
                                                nrt_tensor_set_t* output, int queue,
                                                NRT_STATUS* ret, nrta_seq_t* req_sequence) {
  auto real = NRTPROF_REAL(ns::kNrtaExecuteSchedule, nrta_execute_schedule);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtaExecuteSchedule);
  const NRT_STATUS status = real(model, input, output, queue, ret, req_sequence);
  if (Record* r = call.End()) {
    r->handle = Handle(model);
    r->aux = SeqOrZero(status, req_sequence);
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrta_tensor_write(nrt_tensor_t* tensor, const void* buf,
                                            uint64_t offset, uint64_t size, int queue,
                                            NRT_STATUS* ret, nrta_seq_t* req_sequence) {
  auto real = NRTPROF_REAL(ns::kNrtaTensorWrite, nrta_tensor_write);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtaTensorWrite);
  const NRT_STATUS status = real(tensor, buf, offset, size, queue, ret, req_sequence);
  if (Record* r = call.End()) {
    r->handle = Handle(tensor);
    r->bytes = size;
    r->aux = SeqOrZero(status, req_sequence);
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrta_tensor_read(void* buf, nrt_tensor_t* tensor, uint64_t offset,
                                           uint64_t size, int queue, NRT_STATUS* ret,
                                           nrta_seq_t* req_sequence) {
  auto real = NRTPROF_REAL(ns::kNrtaTensorRead, nrta_tensor_read);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtaTensorRead);
  const NRT_STATUS status = real(buf, tensor, offset, size, queue, ret, req_sequence);
  if (Record* r = call.End()) {
    r->handle = Handle(tensor);
    r->bytes = size;
    r->aux = SeqOrZero(status, req_sequence);
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrta_tensor_copy(nrt_tensor_t* src, uint64_t src_offset,
                                           nrt_tensor_t* dst, uint64_t dst_offset, uint64_t size,
                                           int queue, NRT_STATUS* ret,
                                           nrta_seq_t* req_sequence) {
  auto real = NRTPROF_REAL(ns::kNrtaTensorCopy, nrta_tensor_copy);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtaTensorCopy);
  const NRT_STATUS status =
      real(src, src_offset, dst, dst_offset, size, queue, ret, req_sequence);
  if (Record* r = call.End()) {
    r->handle = Handle(src);
    r->bytes = size;
    r->aux = SeqOrZero(status, req_sequence);
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrta_cc_prepare(nrt_cc_comm_t* comm, nrt_tensor_list_t* input,
                                          nrt_tensor_list_t* output, nrt_dtype_t dtype,
                                          nrt_op_type_t op, nrt_cc_op_type_t cc_op,
                                          nrt_cc_context_t** cc_ctx) {
  auto real = NRTPROF_REAL(ns::kNrtaCcPrepare, nrta_cc_prepare);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtaCcPrepare);
  const NRT_STATUS status = real(comm, input, output, dtype, op, cc_op, cc_ctx);
  if (call.End() != nullptr) call.Commit(Status(status));
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrta_cc_schedule(nrt_cc_context_t** cc_ctx, int queue, NRT_STATUS* ret,
                                           nrta_seq_t* req_sequence) {
  auto real = NRTPROF_REAL(ns::kNrtaCcSchedule, nrta_cc_schedule);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtaCcSchedule);
  const NRT_STATUS status = real(cc_ctx, queue, ret, req_sequence);
  if (Record* r = call.End()) {
    r->aux = SeqOrZero(status, req_sequence);
    call.Commit(Status(status));
  }
  return status;
}

// Polled: the real answer first, and a record only for a poll that saw its request complete
// (or failed) — an instant, carrying this thread's nrta_is_completed polls since the last
// recorded one. A poll that saw nothing new costs one thread-local increment (and, the first
// after a recorded one, a call that gives a thread that only polls its ring: NotePolling);
// those after the thread's last recorded poll are written when it ends (RecordPollTally), or
// counted by the exit's final drain if it is still running then.
NRTPROF_EXPORT NRT_STATUS nrta_is_completed(nrta_seq_t seq, bool* is_completed) {
  auto real = NRTPROF_REAL(ns::kNrtaIsCompleted, nrta_is_completed);
  if (real == nullptr) return NRT_FAILURE;
  const NRT_STATUS status = real(seq, is_completed);
  if (status == NRT_SUCCESS && (is_completed == nullptr || !*is_completed)) {
    if (sc::CountPoll(&sc::t_polls.is_completed) == 1) sc::NotePolling();
    return status;
  }
  ApiCall call(ns::kNrtaIsCompleted);
  if (Record* r = call.End()) {
    r->start_ticks = r->end_ticks;
    r->aux = seq;
    r->bytes = sc::TakePolls(&sc::t_polls.is_completed);
    call.Commit(Status(status));
  }
  return status;
}

// Polled the same way: recorded when the sequence it returns has moved since this thread's
// last recorded answer (or on failure), carrying its nrta_get_sequence polls since then.
NRTPROF_EXPORT NRT_STATUS nrta_get_sequence(uint32_t lnc, nrta_xu_t xu, int queue,
                                            nrta_seq_t* seq) {
  auto real = NRTPROF_REAL(ns::kNrtaGetSequence, nrta_get_sequence);
  if (real == nullptr) return NRT_FAILURE;
  const NRT_STATUS status = real(lnc, xu, queue, seq);
  if (status == NRT_SUCCESS && (seq == nullptr || *seq == sc::t_polls.last_sequence)) {
    if (sc::CountPoll(&sc::t_polls.get_sequence) == 1) sc::NotePolling();
    return status;
  }
  ApiCall call(ns::kNrtaGetSequence);
  if (Record* r = call.End()) {
    r->start_ticks = r->end_ticks;
    r->nc_idx = static_cast<int32_t>(lnc);
    r->aux = status == NRT_SUCCESS ? *seq : 0;
    r->bytes = sc::TakePolls(&sc::t_polls.get_sequence);
    if (status == NRT_SUCCESS) sc::t_polls.last_sequence = *seq;
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrta_event_register_seq_id_completion(nrta_seq_t seq, int efd) {
  auto real =
      NRTPROF_REAL(ns::kNrtaEventRegisterSeqIdCompletion, nrta_event_register_seq_id_completion);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtaEventRegisterSeqIdCompletion);
  const NRT_STATUS status = real(seq, efd);
  if (Record* r = call.End()) {
    r->aux = seq;
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrta_event_register_xu_completion(uint32_t lnc, nrta_xu_t xu, int queue,
                                                            int efd) {
  auto real =
      NRTPROF_REAL(ns::kNrtaEventRegisterXuCompletion, nrta_event_register_xu_completion);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtaEventRegisterXuCompletion);
  const NRT_STATUS status = real(lnc, xu, queue, efd);
  if (Record* r = call.End()) {
    r->nc_idx = static_cast<int32_t>(lnc);
    call.Commit(Status(status));
  }
  return status;
}

// ---- Tensors ----

NRTPROF_EXPORT NRT_STATUS nrt_tensor_allocate(nrt_tensor_placement_t tensor_placement, int vnc,
                                              size_t size, const char* name,
                                              nrt_tensor_t** tensor) {
  auto real = NRTPROF_REAL(ns::kNrtTensorAllocate, nrt_tensor_allocate);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtTensorAllocate, ns::NameRoom(name));
  const NRT_STATUS status = real(tensor_placement, vnc, size, name, tensor);
  if (Record* r = call.End()) {
    r->aux = static_cast<uint64_t>(static_cast<int64_t>(tensor_placement));
    r->nc_idx = vnc;
    r->bytes = size;
    call.SetName(name);
    r->handle = status == NRT_SUCCESS && tensor != nullptr ? Handle(*tensor) : 0;
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrt_tensor_allocate_empty(const char* name, nrt_tensor_t** tensor) {
  auto real = NRTPROF_REAL(ns::kNrtTensorAllocateEmpty, nrt_tensor_allocate_empty);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtTensorAllocateEmpty, ns::NameRoom(name));
  const NRT_STATUS status = real(name, tensor);
  if (Record* r = call.End()) {
    call.SetName(name);
    r->handle = status == NRT_SUCCESS && tensor != nullptr ? Handle(*tensor) : 0;
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrt_tensor_attach_buffer(nrt_tensor_t* tensor, void* buffer,
                                                   size_t size) {
  auto real = NRTPROF_REAL(ns::kNrtTensorAttachBuffer, nrt_tensor_attach_buffer);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtTensorAttachBuffer);
  const NRT_STATUS status = real(tensor, buffer, size);
  if (Record* r = call.End()) {
    r->handle = Handle(tensor);
    r->bytes = size;
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrt_tensor_allocate_slice(const nrt_tensor_t* tensor_source,
                                                    size_t offset, size_t size, const char* name,
                                                    nrt_tensor_t** tensor_slice) {
  auto real = NRTPROF_REAL(ns::kNrtTensorAllocateSlice, nrt_tensor_allocate_slice);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtTensorAllocateSlice, ns::NameRoom(name));
  const NRT_STATUS status = real(tensor_source, offset, size, name, tensor_slice);
  if (Record* r = call.End()) {
    call.SetName(name);
    r->bytes = size;
    r->handle =
        status == NRT_SUCCESS && tensor_slice != nullptr ? Handle(*tensor_slice) : 0;
    r->aux = Handle(tensor_source);
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT void nrt_tensor_free(nrt_tensor_t** tensor) {
  auto real = NRTPROF_REAL(ns::kNrtTensorFree, nrt_tensor_free);
  if (real == nullptr) return;
  const uint64_t handle = tensor != nullptr ? Handle(*tensor) : 0;
  ApiCall call(ns::kNrtTensorFree);
  real(tensor);
  if (Record* r = call.End()) {
    r->handle = handle;
    call.Commit(Status(NRT_SUCCESS));
  }
}

NRTPROF_EXPORT NRT_STATUS nrt_tensor_read(const nrt_tensor_t* tensor, void* buf, size_t offset,
                                          size_t size) {
  auto real = NRTPROF_REAL(ns::kNrtTensorRead, nrt_tensor_read);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtTensorRead);
  const NRT_STATUS status = real(tensor, buf, offset, size);
  if (Record* r = call.End()) {
    r->handle = Handle(tensor);
    r->bytes = size;
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrt_tensor_write(nrt_tensor_t* tensor, const void* buf, size_t offset,
                                           size_t size) {
  auto real = NRTPROF_REAL(ns::kNrtTensorWrite, nrt_tensor_write);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtTensorWrite);
  const NRT_STATUS status = real(tensor, buf, offset, size);
  if (Record* r = call.End()) {
    r->handle = Handle(tensor);
    r->bytes = size;
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrt_tensor_read_batch(const nrt_tensor_batch_t* batches,
                                                uint64_t num_batches, bool unsafe) {
  auto real = NRTPROF_REAL(ns::kNrtTensorReadBatch, nrt_tensor_read_batch);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtTensorReadBatch);
  const NRT_STATUS status = real(batches, num_batches, unsafe);
  if (Record* r = call.End()) {
    r->handle = batches != nullptr && num_batches > 0 ? Handle(batches[0].tensor) : 0;
    r->bytes = BatchBytes(batches, num_batches);
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrt_tensor_write_batch(const nrt_tensor_batch_t* batches,
                                                 uint64_t num_batches, bool unsafe) {
  auto real = NRTPROF_REAL(ns::kNrtTensorWriteBatch, nrt_tensor_write_batch);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtTensorWriteBatch);
  const NRT_STATUS status = real(batches, num_batches, unsafe);
  if (Record* r = call.End()) {
    r->handle = batches != nullptr && num_batches > 0 ? Handle(batches[0].tensor) : 0;
    r->bytes = BatchBytes(batches, num_batches);
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrt_tensor_copy(const nrt_tensor_t* src, size_t src_offset,
                                          nrt_tensor_t* dst, size_t dst_offset, size_t size) {
  auto real = NRTPROF_REAL(ns::kNrtTensorCopy, nrt_tensor_copy);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtTensorCopy);
  const NRT_STATUS status = real(src, src_offset, dst, dst_offset, size);
  if (Record* r = call.End()) {
    r->handle = Handle(src);
    r->aux = Handle(dst);
    r->bytes = size;
    call.Commit(Status(status));
  }
  return status;
}

NRTPROF_EXPORT NRT_STATUS nrt_tensor_memset(nrt_tensor_t* tensor, uint64_t offset, int value,
                                            size_t size) {
  auto real = NRTPROF_REAL(ns::kNrtTensorMemset, nrt_tensor_memset);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtTensorMemset);
  const NRT_STATUS status = real(tensor, offset, value, size);
  if (Record* r = call.End()) {
    r->handle = Handle(tensor);
    r->bytes = size;
    call.Commit(Status(status));
  }
  return status;
}

// ---- Tensor sets ----

NRTPROF_EXPORT NRT_STATUS nrt_allocate_tensor_set(nrt_tensor_set_t** result) {
  auto real = NRTPROF_REAL(ns::kNrtAllocateTensorSet, nrt_allocate_tensor_set);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtAllocateTensorSet);
  const NRT_STATUS status = real(result);
  if (call.End() != nullptr) call.Commit(Status(status));
  return status;
}

NRTPROF_EXPORT void nrt_destroy_tensor_set(nrt_tensor_set_t** tensor_set) {
  auto real = NRTPROF_REAL(ns::kNrtDestroyTensorSet, nrt_destroy_tensor_set);
  if (real == nullptr) return;
  ApiCall call(ns::kNrtDestroyTensorSet);
  real(tensor_set);
  if (call.End() != nullptr) call.Commit(Status(NRT_SUCCESS));
}

NRTPROF_EXPORT NRT_STATUS nrt_add_tensor_to_tensor_set(nrt_tensor_set_t* tensor_set,
                                                       const char* tensor_name,
                                                       nrt_tensor_t* tensor) {
  auto real = NRTPROF_REAL(ns::kNrtAddTensorToTensorSet, nrt_add_tensor_to_tensor_set);
  if (real == nullptr) return NRT_FAILURE;
  ApiCall call(ns::kNrtAddTensorToTensorSet, ns::NameRoom(tensor_name));
  const NRT_STATUS status = real(tensor_set, tensor_name, tensor);
  if (Record* r = call.End()) {
    r->handle = Handle(tensor);
    call.SetName(tensor_name);
    call.Commit(Status(status));
  }
  return status;
}

// ---- The program's own system trace: arbitrated with the profiler's, not recorded ----

NRTPROF_EXPORT NRT_STATUS nrt_sys_trace_start(nrt_sys_trace_config_t* options) {
  auto real = NRTPROF_REAL(ns::kNrtSysTraceStart, nrt_sys_trace_start);
  if (real == nullptr) return NRT_FAILURE;
  const ns::BackendApi* backend = sc::t_in_call == 0 ? sc::RunningBackend() : nullptr;
  return backend != nullptr ? backend->sys_trace_start(options) : real(options);
}

NRTPROF_EXPORT NRT_STATUS nrt_sys_trace_stop() {
  auto real = NRTPROF_REAL(ns::kNrtSysTraceStop, nrt_sys_trace_stop);
  if (real == nullptr) return NRT_FAILURE;
  const ns::BackendApi* backend = sc::t_in_call == 0 ? sc::RunningBackend() : nullptr;
  return backend != nullptr ? backend->sys_trace_stop() : real();
}

NRTPROF_EXPORT NRT_STATUS nrt_sys_trace_fetch_events(
    char** buffer, size_t* written_size, const nrt_sys_trace_fetch_options_t* options) {
  auto real = NRTPROF_REAL(ns::kNrtSysTraceFetchEvents, nrt_sys_trace_fetch_events);
  if (real == nullptr) return NRT_FAILURE;
  const ns::BackendApi* backend = sc::t_in_call == 0 ? sc::RunningBackend() : nullptr;
  return backend != nullptr ? backend->sys_trace_fetch_events(buffer, written_size, options)
                            : real(buffer, written_size, options);
}

NRTPROF_EXPORT void nrt_sys_trace_buffer_free(char* buffer) {
  auto real = NRTPROF_REAL(ns::kNrtSysTraceBufferFree, nrt_sys_trace_buffer_free);
  const ns::BackendApi* backend = sc::RunningBackend();
  if (backend != nullptr && backend->sys_trace_buffer_free(buffer)) return;
  if (real != nullptr) real(buffer);
}

// ---- The program's own device profiles: arbitrated with the profiler's, not recorded ----

NRTPROF_EXPORT NRT_STATUS nrt_profile_start(nrt_model_t* model, const char* filename) {
  auto real = NRTPROF_REAL(ns::kNrtProfileStart, nrt_profile_start);
  if (real == nullptr) return NRT_FAILURE;
  const ns::BackendApi* backend = DeviceProfiling();
  return backend != nullptr ? backend->profile_start(model, filename) : real(model, filename);
}

NRTPROF_EXPORT NRT_STATUS nrt_profile_stop(const char* filename) {
  auto real = NRTPROF_REAL(ns::kNrtProfileStop, nrt_profile_stop);
  if (real == nullptr) return NRT_FAILURE;
  const ns::BackendApi* backend = DeviceProfiling();
  return backend != nullptr ? backend->profile_stop(filename) : real(filename);
}

// ---- nrtprof run's mark ----

// `nrtprof run` learns which processes the profiler reached: it names a file of its own in
// NRTPROF_RUN_MARK, and each process that loads the shim appends "PID EXECUTABLE" to it. A
// program the shim never reached (a setuid program, one started with its environment cleared)
// leaves no line, and nrtprof run says so instead of "no process called libnrt". The file must
// exist (nrtprof run made it): the shim creates nothing.
namespace {
__attribute__((constructor)) void MarkLoaded() {
  const char* path = getenv("NRTPROF_RUN_MARK");
  if (path == nullptr || path[0] != '/') return;
  const int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  char exe[256];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  exe[n > 0 ? n : 0] = '\0';
  char line[300];
  const int len = snprintf(line, sizeof(line), "%d %s\n", static_cast<int>(getpid()), exe);
  if (len > 0) (void)!write(fd, line, static_cast<size_t>(std::min(len, 299)));
  close(fd);
}
}  // namespace

// ---- Annotations (client/include/nrtprof/annotate.h) ----

NRTPROF_EXPORT void nrtprof_range_push(const char* name) {
  if (sc::t_in_call != 0) return;
  ns::ThreadState* ts = sc::GetThreadState(ns::RecordKind::kRange);
  if (ts == nullptr) return;
  const uint32_t depth = ts->range_depth++;
  if (depth >= ns::kMaxRangeDepth) return;
  ns::RangeFrame& frame = ts->ranges[depth];
  // Copied now: the caller may free the name before the pop.
  frame.flags = 0;
  Record::CopyName(name, ns::kRecordNameBytes, frame.name, &frame.name_len, &frame.flags);
  frame.start_ticks = sc::Ticks();
}

NRTPROF_EXPORT void nrtprof_range_pop(void) {
  if (sc::t_in_call != 0) return;
  ns::ThreadState* ts = sc::t_state;
  if (!sc::HasRing(ts) || ts->range_depth == 0) return;  // unmatched
  const uint32_t depth = --ts->range_depth;
  const uint64_t end_ticks = sc::Ticks();
  if (depth >= ns::kMaxRangeDepth) {
    sc::CountLostRecord(ns::RecordKind::kRange);
    return;
  }
  if (sc::g_core.recording.load(std::memory_order_relaxed) == 0) return;
  const ns::RangeFrame& frame = ts->ranges[depth];
  const uint32_t slots = ns::RecordSlots(0, frame.name_len);
  ns::RingProducer* producer = &sc::t_hot.producer;
  Record* r = producer->TryReserve(slots);
  if (r == nullptr) {
    producer->CountDrop(ns::RecordKind::kRange);
    return;
  }
  r->Clear(ns::RecordKind::kRange, slots);
  r->depth = static_cast<uint16_t>(depth);
  r->start_ticks = frame.start_ticks;
  r->end_ticks = end_ticks;
  r->flags = frame.flags;
  r->name_len = frame.name_len;
  memcpy(r->name(), frame.name, frame.name_len);
  if (producer->Commit(r)) sc::WakeFlusher();
}

// Steps, as PyTorch's prof.step(): each call ends the calling thread's step range, when it is
// the one range open, and begins the next, "ProfilerStep#N", N counting the process's calls
// from 0. Meant for the top of a training loop: with other ranges open, no step range is
// begun (the number is still taken). The daemon captures whole steps by these names
// (nrtprof capture --iterations).
namespace {
std::atomic<uint64_t> g_next_step{0};
thread_local bool t_step_open = false;
}  // namespace

NRTPROF_EXPORT void nrtprof_step_mark(void) {
  if (sc::t_in_call != 0) return;
  ns::ThreadState* ts = sc::t_state;
  if (t_step_open && sc::HasRing(ts) && ts->range_depth == 1) {
    nrtprof_range_pop();
  }
  t_step_open = false;
  char name[32];
  snprintf(name, sizeof(name), "ProfilerStep#%llu",
           static_cast<unsigned long long>(g_next_step.fetch_add(1, std::memory_order_relaxed)));
  ts = sc::GetThreadState(ns::RecordKind::kRange);
  if (ts == nullptr || ts->range_depth != 0) return;
  nrtprof_range_push(name);
  t_step_open = true;
}

namespace nrtprof::shim::core {

void* WrapperAddress(ApiFunction f) {
#define NRTPROF_WRAPPER(enumerator, function, wire, number) reinterpret_cast<void*>(&function),
  static void* const kWrappers[kNumApiFunctions] = {
      NRTPROF_RECORDED_API_FUNCTIONS(NRTPROF_WRAPPER)
          NRTPROF_ARBITRATED_API_FUNCTIONS(NRTPROF_WRAPPER)};
#undef NRTPROF_WRAPPER

  return f < kNumApiFunctions ? kWrappers[f] : nullptr;
}

}  // namespace nrtprof::shim::core
