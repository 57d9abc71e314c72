// The simulated device's rates and fixed costs: the one place the cost model's numbers live.
//
// Every figure is a term a hardware engineer would recognise (launch overhead, DMA set-up,
// bytes over bandwidth, FLOPs over engine rate); sim/README.md explains each, and how the
// defaults were calibrated against the public RMSNorm reference (naive 2.355 ms, fused
// 403.3 us, compiled 375.5 us on 4x512 bf16). A DeviceConfig is a plain value: copy it freely.
#ifndef NRTPROF_SIM_DEVICE_CONFIG_H_
#define NRTPROF_SIM_DEVICE_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace nrtsim {

struct DeviceConfig {
  // --- Topology and pacing (from the environment, see FromEnvironment) ---
  // The process's NeuronCores: NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES out of the
  // machine's NRT_SIM_NUM_CORES. Core i of the process (its logical index, what the API's
  // `vnc` names) is the machine's core visible_cores[i].
  uint32_t num_cores = 2;      // visible_cores.size()
  uint32_t machine_cores = 2;  // NRT_SIM_NUM_CORES
  std::vector<uint32_t> visible_cores = {0, 1};
  double time_scale = 1.0;   // NRT_SIM_TIME_SCALE: host wait = modelled time x this
  uint64_t hbm_bytes_per_core = 16ull << 30;

  // --- Per execution ---
  // Launching a model on a NeuronCore: instruction streams fetched, semaphores and DMA rings
  // reset, completion notified back to the host. Paid once per nrt_execute.
  double exec_launch_us = 360.0;
  // Each model input/output tensor moves between device memory (HBM) and on-chip SBUF through
  // its own DMA descriptor chain; intermediates of a multi-op model stay on chip.
  double io_dma_setup_us = 2.0;
  double hbm_bytes_per_ns = 410.0;  // ~410 GB/s per core

  // --- Per op ---
  // Issuing one op's instructions and the semaphore hand-off between engines.
  double op_issue_us = 1.5;
  // A generic library kernel (the fused rms_norm) loads its own instruction stream and runs a
  // general schedule rather than the compiler's one for these shapes.
  double library_kernel_us = 36.0;
  double sbuf_bytes_per_ns = 1400.0;      // on-chip SBUF bandwidth, bytes/ns
  double tensor_bf16_flops_per_ns = 95000.0;  // systolic array, ~95 TFLOP/s bf16
  double tensor_fp32_flops_per_ns = 23750.0;  // a quarter of the bf16 rate
  double vector_elems_per_ns = 179.0;     // 128 lanes at 1.4 GHz
  double scalar_elems_per_ns = 179.0;
  double gpsimd_elems_per_ns = 45.0;      // 8 general-purpose cores

  // --- Host <-> device transfers (nrt_tensor_read/write/copy/memset on device tensors) ---
  // A host-initiated DMA job: descriptors built and written over PCIe, doorbell, completion
  // interrupt and wake-up. Dominates small transfers such as a scalar's.
  double host_dma_setup_us = 154.0;
  double pcie_bytes_per_ns = 25.0;        // ~25 GB/s
  double device_copy_setup_us = 4.0;      // device-to-device on one core

  // --- Collectives (nrta_cc_*), ring algorithm; see sim/README.md, "Collectives" ---
  // Within a host: NeuronLink-v3, 1.28 TB/s per Trainium2 device shared by its 8 cores.
  double neuronlink_bytes_per_ns = 160.0;
  double neuronlink_step_us = 2.0;        // per ring step within a host (assumed)
  // Across hosts: EFA, 50 Gbps per rank, ~15 us for a minimal message between servers.
  double efa_bytes_per_ns = 6.25;
  double efa_step_us = 15.0;
  double cc_setup_us = 10.0;              // per collective: the CC cores' program (assumed)

  // Reads NRT_SIM_NUM_CORES (1..128), NEURON_RT_VISIBLE_CORES ("0-3", "5", "4,6"),
  // NEURON_RT_NUM_CORES (the first n visible) and NRT_SIM_TIME_SCALE (a number >= 0, at most
  // 1000) over the defaults. A process drives at most 64 cores. A malformed value is an
  // InvalidArgument naming the variable.
  static absl::StatusOr<DeviceConfig> FromEnvironment();
};

}  // namespace nrtsim

#endif  // NRTPROF_SIM_DEVICE_CONFIG_H_
