// The simulated runtime's arithmetic: runs a model's ops on host memory and produces the
// numbers a NeuronCore would.
//
// Every tensor's values are held as float32 and every op computes in float32; an op's result
// is rounded to its output tensor's dtype when stored, so a bf16 model loses precision at each
// intermediate exactly as a bf16 device does. Used by the simulated nrt_execute(); the device
// cost model (timing) is separate.
//
// Thread-safe: no shared state; scratch memory is local to each call.
#ifndef NRTPROF_SIM_KERNELS_H_
#define NRTPROF_SIM_KERNELS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "sim/model.h"

namespace nrtsim {

// Runs every op of `model`, which must have passed ValidateModel(), in order.
//
// inputs[i] points at the host bytes of the i-th input tensor (model.InputIndices() order),
// outputs[i] at the i-th output's (model.OutputIndices() order); each holds
// TensorDef::SizeBytes() bytes in the tensor's dtype (little-endian fp32, or bf16 as a
// little-endian uint16). The buffers must stay valid for the call and may not overlap.
//
// Returns InvalidArgument if the pointer counts don't match the model or a pointer is null.
// Arithmetic never fails: division by zero, rsqrt of a negative and the like give IEEE
// infinities and NaNs.
absl::Status RunModel(const Model& model, const std::vector<const void*>& inputs,
                      const std::vector<void*>& outputs);

// Runs a collective op (kAllReduce) `model.ops[op_index]`: `data` holds its input's bytes (in
// the tensor's dtype, as RunModel's buffers) and receives its output's, in place.
using CollectiveFn =
    std::function<absl::Status(uint32_t op_index, const OpDef& op, std::vector<uint8_t>* data)>;

// RunModel for a model that may hold collective ops: each runs through `collective` when its
// turn comes; an error it returns ends the run with that error. The overload above fails a
// collective op with FailedPrecondition.
absl::Status RunModel(const Model& model, const std::vector<const void*>& inputs,
                      const std::vector<void*>& outputs, const CollectiveFn& collective);

}  // namespace nrtsim

#endif  // NRTPROF_SIM_KERNELS_H_
