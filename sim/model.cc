#include "model.h"

#include <cstring>

namespace nrtsim {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kBFloat16:
      return 2;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "fp32";
    case DType::kBFloat16:
      return "bf16";
  }
  return "?";
}

size_t TensorDef::NumElements() const {
  size_t n = 1;
  for (uint32_t d : shape) n *= d;
  return n;
}

const char* EngineName(Engine engine) {
  switch (engine) {
    case Engine::kTensor:
      return "tensor";
    case Engine::kVector:
      return "vector";
    case Engine::kScalar:
      return "scalar";
    case Engine::kGpSimd:
      return "gpsimd";
  }
  return "?";
}

namespace {

struct OpInfo {
  OpKind kind;
  const char* name;
  int arity;
  Engine engine;
};

// Matmul runs on the systolic array (Tensor engine); elementwise and reductions on the
// Vector engine, with threshold_backward (a compare and a select) and transpose (the Vector
// engine's 32x32 block transpose); activations — transcendental, and relu and abs, the
// activation engine's piecewise-linear functions — on the Scalar engine; the generic library
// kernels (rms_norm) and plain copies on the GpSimd engine.
constexpr OpInfo kOps[] = {
    {OpKind::kMul, "mul", 2, Engine::kVector},
    {OpKind::kAdd, "add", 2, Engine::kVector},
    {OpKind::kSub, "sub", 2, Engine::kVector},
    {OpKind::kDiv, "div", 2, Engine::kVector},
    {OpKind::kMulScalar, "mul_scalar", 1, Engine::kScalar},
    {OpKind::kAddScalar, "add_scalar", 1, Engine::kScalar},
    {OpKind::kMean, "mean", 1, Engine::kVector},
    {OpKind::kRsqrt, "rsqrt", 1, Engine::kScalar},
    {OpKind::kRmsNorm, "rms_norm", 2, Engine::kGpSimd},
    {OpKind::kMatmul, "matmul", 2, Engine::kTensor},
    {OpKind::kSoftmax, "softmax", 1, Engine::kScalar},
    {OpKind::kGelu, "gelu", 1, Engine::kScalar},
    {OpKind::kCopy, "copy", 1, Engine::kGpSimd},
    {OpKind::kRelu, "relu", 1, Engine::kScalar},
    {OpKind::kThresholdBackward, "threshold_backward", 2, Engine::kVector},
    {OpKind::kAbs, "abs", 1, Engine::kScalar},
    {OpKind::kTranspose, "transpose", 1, Engine::kVector},
    // Its transfers and reduction run on the collectives cores, timed when the group meets
    // (CollectiveNs); the engine named here only issues it.
    {OpKind::kAllReduce, "all_reduce", 1, Engine::kGpSimd},
};

const OpInfo* FindOp(OpKind kind) {
  for (const OpInfo& info : kOps) {
    if (info.kind == kind) return &info;
  }
  return nullptr;
}

}  // namespace

const char* OpKindName(OpKind kind) {
  const OpInfo* info = FindOp(kind);
  return info ? info->name : "?";
}

bool OpKindFromName(const std::string& name, OpKind* kind) {
  for (const OpInfo& info : kOps) {
    if (name == info.name) {
      *kind = info.kind;
      return true;
    }
  }
  return false;
}

int OpArity(OpKind kind) {
  const OpInfo* info = FindOp(kind);
  return info ? info->arity : -1;
}

Engine OpEngine(OpKind kind) {
  const OpInfo* info = FindOp(kind);
  return info ? info->engine : Engine::kGpSimd;
}

const char* ReduceName(int32_t reduce) {
  switch (reduce) {
    case NRT_OP_ADD:
      return "add";
    case NRT_OP_MAX:
      return "max";
    case NRT_OP_MIN:
      return "min";
    default:
      return nullptr;
  }
}

bool ReduceFromName(const std::string& name, int32_t* reduce) {
  for (int32_t r : {NRT_OP_ADD, NRT_OP_MAX, NRT_OP_MIN}) {
    if (name == ReduceName(r)) {
      *reduce = r;
      return true;
    }
  }
  return false;
}

int FirstCollectiveOp(const Model& model) {
  for (size_t i = 0; i < model.ops.size(); ++i) {
    if (model.ops[i].kind == OpKind::kAllReduce) return static_cast<int>(i);
  }
  return -1;
}

std::vector<uint32_t> Model::InputIndices() const {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].kind == TensorKind::kInput) out.push_back(i);
  }
  return out;
}

std::vector<uint32_t> Model::OutputIndices() const {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].kind == TensorKind::kOutput) out.push_back(i);
  }
  return out;
}

// ValidateModel: see model_validate.cc.

}  // namespace nrtsim
