#include "cost_model.h"

#include <algorithm>
#include <cmath>

namespace nrtsim {
namespace {

uint64_t Ns(double ns) { return static_cast<uint64_t>(std::llround(std::max(0.0, ns))); }

double UsToNs(double us) { return us * 1000.0; }

// Work for the op's engine, in ns, before the memory-bound comparison.
double EngineNs(const Model& model, const OpDef& op, const DeviceConfig& config) {
  const TensorDef& a = model.tensors[op.inputs[0]];
  const TensorDef& out = model.tensors[op.output];
  const double in_elems = static_cast<double>(a.NumElements());
  const double out_elems = static_cast<double>(out.NumElements());
  switch (op.kind) {
    case OpKind::kMatmul: {
      const double m = a.shape[0], k = a.shape[1], n = out.shape[1];
      const double rate = a.dtype == DType::kBFloat16 ? config.tensor_bf16_flops_per_ns
                                                      : config.tensor_fp32_flops_per_ns;
      return 2.0 * m * n * k / rate;
    }
    case OpKind::kMul:
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kDiv:
    case OpKind::kThresholdBackward:  // compare and select in one pass
      return out_elems / config.vector_elems_per_ns;
    case OpKind::kTranspose:
      return in_elems / config.vector_elems_per_ns;
    case OpKind::kMean:
      return in_elems / config.vector_elems_per_ns;
    case OpKind::kMulScalar:
    case OpKind::kAddScalar:
    case OpKind::kRsqrt:
    case OpKind::kGelu:
    case OpKind::kRelu:
    case OpKind::kAbs:
      return out_elems / config.scalar_elems_per_ns;
    case OpKind::kSoftmax:  // max, exp-and-sum, scale: three passes
      return 3.0 * in_elems / config.scalar_elems_per_ns;
    case OpKind::kRmsNorm:  // sum of squares, then normalise and scale: two passes + weight
      return 3.0 * in_elems / config.gpsimd_elems_per_ns;
    case OpKind::kCopy:
      return in_elems / config.gpsimd_elems_per_ns;
    case OpKind::kAllReduce:  // issued here; the collective is timed when it runs
      return 0.0;
  }
  return 0.0;
}

double OpBytes(const Model& model, const OpDef& op) {
  double bytes = static_cast<double>(model.tensors[op.output].SizeBytes());
  for (uint32_t in : op.inputs) bytes += static_cast<double>(model.tensors[in].SizeBytes());
  return bytes;
}

uint64_t OpNs(const Model& model, const OpDef& op, const DeviceConfig& config) {
  double fixed = UsToNs(config.op_issue_us);
  if (op.kind == OpKind::kRmsNorm) fixed += UsToNs(config.library_kernel_us);
  // A collective's transfers and reduction are CollectiveNs, added when its group meets.
  if (op.kind == OpKind::kAllReduce) return Ns(fixed);
  const double memory = OpBytes(model, op) / config.sbuf_bytes_per_ns;
  return Ns(fixed + std::max(EngineNs(model, op, config), memory));
}

uint64_t IoDmaNs(const TensorDef& tensor, const DeviceConfig& config) {
  return Ns(UsToNs(config.io_dma_setup_us) +
            static_cast<double>(tensor.SizeBytes()) / config.hbm_bytes_per_ns);
}

}  // namespace

ExecutionCost CostOfExecution(const Model& model, const DeviceConfig& config) {
  ExecutionCost cost;
  cost.launch_ns = Ns(UsToNs(config.exec_launch_us));
  uint64_t t = cost.launch_ns;
  for (uint32_t index : model.InputIndices()) {
    const uint64_t d = IoDmaNs(model.tensors[index], config);
    cost.io_dmas.push_back({index, true, {t, d}});
    t += d;
  }
  for (uint32_t i = 0; i < model.ops.size(); ++i) {
    const OpDef& op = model.ops[i];
    const uint64_t d = OpNs(model, op, config);
    cost.ops.push_back({i, OpEngine(op.kind), {t, d}});
    t += d;
  }
  for (uint32_t index : model.OutputIndices()) {
    const uint64_t d = IoDmaNs(model.tensors[index], config);
    cost.io_dmas.push_back({index, false, {t, d}});
    t += d;
  }
  cost.total_ns = t;
  return cost;
}

uint64_t HostDmaNs(size_t bytes, const DeviceConfig& config) {
  return Ns(UsToNs(config.host_dma_setup_us) +
            static_cast<double>(bytes) / config.pcie_bytes_per_ns);
}

uint64_t DeviceCopyNs(size_t bytes, const DeviceConfig& config) {
  return Ns(UsToNs(config.device_copy_setup_us) +
            static_cast<double>(bytes) / config.hbm_bytes_per_ns);
}

uint64_t CollectiveNs(uint32_t cc_op, uint64_t in_bytes, uint64_t out_bytes, uint32_t elem_bytes,
                      uint32_t n, bool cross_host, const DeviceConfig& config) {
  double ns = config.cc_setup_us * 1000.0;
  if (n <= 1) return static_cast<uint64_t>(ns);
  const double share = static_cast<double>(n - 1) / n;
  double sent = 0, steps = 0, reduced = 0;
  switch (cc_op) {
    case 0:  // all-gather: each rank forwards n-1 of the n pieces of the output
      sent = share * static_cast<double>(out_bytes);
      steps = n - 1;
      break;
    case 2:  // reduce-scatter: n-1 steps of reduce-and-forward over the input
      sent = share * static_cast<double>(in_bytes);
      steps = n - 1;
      reduced = sent / elem_bytes;
      break;
    default:  // all-reduce: a reduce-scatter, then an all-gather
      sent = 2 * share * static_cast<double>(in_bytes);
      steps = 2.0 * (n - 1);
      reduced = share * static_cast<double>(in_bytes) / elem_bytes;
      break;
  }
  const double rate = cross_host ? config.efa_bytes_per_ns : config.neuronlink_bytes_per_ns;
  const double step_us = cross_host ? config.efa_step_us : config.neuronlink_step_us;
  ns += steps * step_us * 1000.0 + sent / rate + reduced / config.vector_elems_per_ns;
  return static_cast<uint64_t>(ns + 0.5);
}

}  // namespace nrtsim
