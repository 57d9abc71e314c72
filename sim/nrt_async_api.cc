// The explicit asynchronous API (nrt/nrt_async.h): argument plumbing onto nrtsim::Runtime.
// Collectives: nrta_cc_prepare / nrta_cc_schedule on the communicator of
// nrt_cc_global_comm_init (runtime_cc.cc).
#include "nrt/nrt_async.h"

#include "runtime.h"

using nrtsim::Runtime;

extern "C" {

NRT_STATUS nrta_tensor_write(nrt_tensor_t* tensor, const void* buf, uint64_t offset,
                             uint64_t size, int queue, NRT_STATUS* ret,
                             nrta_seq_t* req_sequence) {
  return Runtime::Get().ScheduleWrite(tensor, buf, offset, size, queue, ret, req_sequence);
}

NRT_STATUS nrta_tensor_read(void* buf, nrt_tensor_t* tensor, uint64_t offset, uint64_t size,
                            int queue, NRT_STATUS* ret, nrta_seq_t* req_sequence) {
  return Runtime::Get().ScheduleRead(buf, tensor, offset, size, queue, ret, req_sequence);
}

NRT_STATUS nrta_tensor_copy(nrt_tensor_t* src, uint64_t src_offset, nrt_tensor_t* dst,
                            uint64_t dst_offset, uint64_t size, int queue, NRT_STATUS* ret,
                            nrta_seq_t* req_sequence) {
  return Runtime::Get().ScheduleCopy(src, src_offset, dst, dst_offset, size, queue, ret,
                                     req_sequence);
}

NRT_STATUS nrta_execute_schedule(nrt_model_t* model, const nrt_tensor_set_t* input,
                                 nrt_tensor_set_t* output, int queue, NRT_STATUS* ret,
                                 nrta_seq_t* req_sequence) {
  return Runtime::Get().ScheduleExecute(model, input, output, queue, ret, req_sequence);
}

NRT_STATUS nrta_cc_prepare(nrt_cc_comm_t* comm, nrt_tensor_list_t* input,
                           nrt_tensor_list_t* output, nrt_dtype_t dtype, nrt_op_type_t op,
                           nrt_cc_op_type_t cc_op, nrt_cc_context_t** cc_ctx) {
  return Runtime::Get().CcPrepare(comm, input, output, dtype, op, cc_op, cc_ctx);
}

NRT_STATUS nrta_cc_schedule(nrt_cc_context_t** cc_ctx, int queue, NRT_STATUS* ret,
                            nrta_seq_t* req_sequence) {
  return Runtime::Get().CcSchedule(cc_ctx, queue, ret, req_sequence);
}

NRT_STATUS nrta_is_completed(nrta_seq_t seq, bool* is_completed) {
  return Runtime::Get().IsCompleted(seq, is_completed);
}

NRT_STATUS nrta_get_sequence(uint32_t lnc, nrta_xu_t xu, int queue, nrta_seq_t* seq) {
  return Runtime::Get().LastCompleted(lnc, static_cast<int>(xu), queue, seq);
}

NRT_STATUS nrta_event_register_seq_id_completion(nrta_seq_t seq, int efd) {
  return Runtime::Get().NotifySeq(seq, efd);
}

NRT_STATUS nrta_event_register_xu_completion(uint32_t lnc, nrta_xu_t xu, int queue, int efd) {
  return Runtime::Get().NotifyXu(lnc, static_cast<int>(xu), queue, efd);
}

}  // extern "C"
