// The device cost model: how long the simulated NeuronCore takes for an execution or a
// transfer. Pure functions of a Model and a DeviceConfig; thread-safe.
//
// An execution is laid out as: launch overhead, then the DMA of each model input from HBM,
// then each op in order, then the DMA of each output back to HBM. An op costs its issue
// overhead (plus a library kernel's fixed cost) and the larger of its engine time (FLOPs or
// elements over the engine's rate) and its bytes over SBUF bandwidth.
#ifndef NRTPROF_SIM_COST_MODEL_H_
#define NRTPROF_SIM_COST_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device_config.h"
#include "model.h"

namespace nrtsim {

struct Span {
  uint64_t start_ns = 0;  // offset from the execution's start
  uint64_t duration_ns = 0;
};

struct OpCost {
  uint32_t op_index = 0;
  Engine engine = Engine::kVector;
  Span span;
};

struct IoDmaCost {
  uint32_t tensor_index = 0;
  bool to_device = true;  // input: HBM -> SBUF; output: SBUF -> HBM
  Span span;
};

struct ExecutionCost {
  uint64_t total_ns = 0;
  uint64_t launch_ns = 0;
  std::vector<IoDmaCost> io_dmas;
  std::vector<OpCost> ops;
};

ExecutionCost CostOfExecution(const Model& model, const DeviceConfig& config);

// Host <-> device transfer of `bytes` (nrt_tensor_read/write/memset on a device tensor).
uint64_t HostDmaNs(size_t bytes, const DeviceConfig& config);

// Device-to-device copy on one core (nrt_tensor_copy between device tensors).
uint64_t DeviceCopyNs(size_t bytes, const DeviceConfig& config);

// A collective on `n` ranks (ring algorithm), nrt_cc_op_type_t `cc_op` (0 all-gather,
// 1 all-reduce, 2 reduce-scatter) on a rank's `in_bytes` / `out_bytes` of `elem_bytes`-byte
// elements: set-up, each ring step's latency, the bytes each rank sends over the link's rate
// (NeuronLink within a host, EFA when the group spans hosts), and the reduction's adds.
uint64_t CollectiveNs(uint32_t cc_op, uint64_t in_bytes, uint64_t out_bytes, uint32_t elem_bytes,
                      uint32_t n, bool cross_host, const DeviceConfig& config);

}  // namespace nrtsim

#endif  // NRTPROF_SIM_COST_MODEL_H_
