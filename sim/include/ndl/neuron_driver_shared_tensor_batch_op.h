/*
 * nrtprof's simulated Neuron runtime: the batched tensor read/write element, with the layout
 * of the public driver header of the same name.
 */
#ifndef NEURON_DRIVER_SHARED_TENSOR_BATCH_OP_H
#define NEURON_DRIVER_SHARED_TENSOR_BATCH_OP_H

#include <stdint.h>

typedef uint64_t nrt_tensor_batch_offset_t;
typedef uint64_t nrt_tensor_batch_size_t;

typedef struct nrt_tensor_batch_op {
  nrt_tensor_batch_offset_t offset; /* byte offset into the tensor */
  nrt_tensor_batch_size_t size;     /* bytes to move */
  void *buffer;                     /* host buffer */
} nrt_tensor_batch_op_t;

#endif /* NEURON_DRIVER_SHARED_TENSOR_BATCH_OP_H */
