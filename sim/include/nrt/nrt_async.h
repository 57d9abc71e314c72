/*
 * nrtprof's simulated Neuron runtime: the explicit asynchronous API, with the names and
 * signatures of the public header of the same name (Neuron SDK 2.29 and later, with the eventfd
 * notifications of 2.30).
 *
 * The device is a set of execution units (XUs) per logical NeuronCore, each with its own
 * queues: the compute XU runs models (one queue), the tensor-op XU moves data between the host
 * and the device and copies tensors (two queues), the collectives XU runs standalone
 * collectives (three queues). A schedule call puts one request on one queue and returns at
 * once; the requests of one queue run in order, one at a time, while different queues (the
 * compute XU and the tensor-op XU of one core, for instance) run side by side. Each request is
 * named by a sequence id; its status is written to `*ret`, when `ret` is not NULL, only once
 * the request has completed. A queue holding as many requests as it has room for refuses more
 * with NRT_QUEUE_FULL and schedules nothing. See sim/README.md, "Asynchronous execution".
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kinds of execution unit. Enum values must never change. */
typedef enum {
  NRTA_XU_TENSOR_OP = 0, /* host <-> device transfers and tensor copies: 2 queues */
  NRTA_XU_COMPUTE,       /* model (kernel) executions: 1 queue */
  NRTA_XU_COLLECTIVES,   /* standalone collective operations: 3 queues */
  NRTA_XU_TYPE_NUM
} nrta_xu_t;

/* A request's sequence id: the id of the execution-unit queue it went to in the top 16 bits,
 * and below them a 48-bit number counting that queue's requests in order. Two ids of one queue
 * compare as their requests were scheduled. */
typedef uint64_t nrta_seq_t;
typedef uint16_t nrta_xu_id_t;

#define NRTA_SEQ_NUM_MAX ((1ull << 48) - 1)
#define NRTA_SEQ_NUM_MASK NRTA_SEQ_NUM_MAX
#define NRTA_SEQ_GET_SEQ_NUM(seq_id) ((seq_id) & NRTA_SEQ_NUM_MASK)
#define NRTA_SEQ_GET_XU_ID(seq_id) ((seq_id) >> 48)

/* --- Scheduling: each returns at once; `*req_sequence` names the request. -------------------
 * `queue` picks one of the execution unit's queues (from 0). `ret`, when not NULL, receives the
 * request's own status when it completes. NRT_QUEUE_FULL: the queue has no room; nothing was
 * scheduled. The buffers and tensors named must stay valid until the request completes. */

/* Copies `size` bytes from `buf` into `tensor` at `offset` (tensor-op XU). */
NRT_STATUS nrta_tensor_write(nrt_tensor_t *tensor, const void *buf, uint64_t offset,
                             uint64_t size, int queue, NRT_STATUS *ret,
                             nrta_seq_t *req_sequence);

/* Copies `size` bytes of `tensor` from `offset` into `buf` (tensor-op XU). */
NRT_STATUS nrta_tensor_read(void *buf, nrt_tensor_t *tensor, uint64_t offset, uint64_t size,
                            int queue, NRT_STATUS *ret, nrta_seq_t *req_sequence);

/* Copies `size` bytes between two tensors of one logical NeuronCore (tensor-op XU). */
NRT_STATUS nrta_tensor_copy(nrt_tensor_t *src, uint64_t src_offset, nrt_tensor_t *dst,
                            uint64_t dst_offset, uint64_t size, int queue, NRT_STATUS *ret,
                            nrta_seq_t *req_sequence);

/* Executes `model` on the tensors of `input` and `output` (compute XU; `queue` must be 0). */
NRT_STATUS nrta_execute_schedule(nrt_model_t *model, const nrt_tensor_set_t *input,
                                 nrt_tensor_set_t *output, int queue, NRT_STATUS *ret,
                                 nrta_seq_t *req_sequence);

/* Prepares a collective operation for nrta_cc_schedule (collectives XU). The simulated runtime
 * does not model collectives: both return NRT_FAILURE. */
NRT_STATUS nrta_cc_prepare(nrt_cc_comm_t *comm, nrt_tensor_list_t *input,
                           nrt_tensor_list_t *output, nrt_dtype_t dtype, nrt_op_type_t op,
                           nrt_cc_op_type_t cc_op, nrt_cc_context_t **cc_ctx);
NRT_STATUS nrta_cc_schedule(nrt_cc_context_t **cc_ctx, int queue, NRT_STATUS *ret,
                            nrta_seq_t *req_sequence);

/* --- Completion ------------------------------------------------------------------------------ */

/* Whether request `seq` has completed. NRT_INVALID for an id no schedule call returned. Cheap
 * enough to poll in a loop. */
NRT_STATUS nrta_is_completed(nrta_seq_t seq, bool *is_completed);

/* The id of the last request completed on one queue of one logical NeuronCore. Requests of a
 * queue complete in order, so `*seq >= s` means request `s` of that queue and all before it are
 * done; before any completes, `*seq` is below every id the queue hands out. */
NRT_STATUS nrta_get_sequence(uint32_t lnc, nrta_xu_t xu, int queue, nrta_seq_t *seq);

/* Has the runtime write 1 (an 8-byte counter increment) to the eventfd `efd` when request `seq`
 * completes; at once when it has completed already. `efd` -1 cancels. */
NRT_STATUS nrta_event_register_seq_id_completion(nrta_seq_t seq, int efd);

/* Has the runtime write 1 to `efd` each time a request of that queue completes. `efd` -1
 * cancels. */
NRT_STATUS nrta_event_register_xu_completion(uint32_t lnc, nrta_xu_t xu, int queue, int efd);

#ifdef __cplusplus
}
#endif
