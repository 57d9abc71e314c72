// The simulated runtime's in-memory model: what a model file (docs/model_format.md) decodes to.
//
// A Model is a list of tensors (inputs, outputs, intermediates, constants) and a graph of ops
// in execution order, each reading tensors by index and writing exactly one. It is built by
// DecodeModel() (model_format.h) or ParseModelText() (model_text.h), checked by ValidateModel(),
// and afterwards only read, so a loaded Model may be shared by any number of threads.
#ifndef NRTPROF_SIM_MODEL_H_
#define NRTPROF_SIM_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nrt/nrt.h"

namespace nrtsim {

// Element types the simulator computes in. Values are nrt_dtype_t's.
enum class DType : uint8_t {
  kFloat32 = NRT_DTYPE_FLOAT32,
  kBFloat16 = NRT_DTYPE_BFLOAT16,
};

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);  // "fp32", "bf16"

enum class TensorKind : uint8_t {
  kInput = 0,
  kOutput = 1,
  kIntermediate = 2,
  kConstant = 3,
};

struct TensorDef {
  std::string name;
  TensorKind kind = TensorKind::kIntermediate;
  DType dtype = DType::kFloat32;
  std::vector<uint32_t> shape;  // empty: a scalar
  std::vector<uint8_t> data;    // constants only: the bytes, little-endian, in dtype

  size_t NumElements() const;
  size_t SizeBytes() const { return NumElements() * DTypeSize(dtype); }
};

// The op library. Numbers are part of the file format: append only.
enum class OpKind : uint8_t {
  kMul = 1,        // out = a * b, numpy broadcasting
  kAdd = 2,        // out = a + b
  kSub = 3,        // out = a - b
  kDiv = 4,        // out = a / b
  kMulScalar = 5,  // out = a * scalar
  kAddScalar = 6,  // out = a + scalar
  kMean = 7,       // out = mean of a over axis, keeping the axis with size 1
  kRsqrt = 8,      // out = 1 / sqrt(a)
  kRmsNorm = 9,    // out = a / sqrt(mean(a*a, last axis) + scalar) * b  (b: weight, last axis)
  kMatmul = 10,    // out[M,N] = a[M,K] @ b[K,N]
  kSoftmax = 11,   // over the last axis
  kGelu = 12,      // exact (erf) GELU
  kCopy = 13,      // out = a
  kRelu = 14,      // out = max(a, 0)
  kThresholdBackward = 15,  // out = b > scalar ? a : 0 (a: the gradient, b: the input), broadcasting
  kAbs = 16,       // out = |a|
  kTranspose = 17,  // out[N,M] = a[M,N]ᵀ
  kAllReduce = 18,  // out = the reduction (OpDef::axis) of a over the ranks of the process's
                    // collectives group (nrt_load_collectives, nrt_cc_global_comm_init)
};

// The NeuronCore engine an op runs on.
enum class Engine : uint8_t { kTensor = 0, kVector = 1, kScalar = 2, kGpSimd = 3 };
const char* EngineName(Engine engine);  // "tensor", "vector", "scalar", "gpsimd"

const char* OpKindName(OpKind kind);  // "mul", "add_scalar", "rms_norm", ...
bool OpKindFromName(const std::string& name, OpKind* kind);
int OpArity(OpKind kind);    // number of tensor inputs
Engine OpEngine(OpKind kind);

struct OpDef {
  OpKind kind = OpKind::kCopy;
  std::vector<uint32_t> inputs;  // tensor indices
  uint32_t output = 0;           // tensor index
  float scalar = 0.0f;           // kMulScalar, kAddScalar, kRmsNorm (epsilon), kThresholdBackward
  int32_t axis = -1;             // kMean; negative counts from the end. kAllReduce: the
                                 // reduction, an nrt_op_type_t (NRT_OP_ADD 0, MAX 2, MIN 3)
};

// The reductions kAllReduce takes, by name ("add", "max", "min") and back.
const char* ReduceName(int32_t reduce);  // nullptr for anything else
bool ReduceFromName(const std::string& name, int32_t* reduce);

struct Model {
  std::string name;
  std::vector<TensorDef> tensors;
  std::vector<OpDef> ops;

  // Indices into `tensors`, in file order.
  std::vector<uint32_t> InputIndices() const;
  std::vector<uint32_t> OutputIndices() const;
};

// The index of the model's first collective op (kAllReduce), or -1 when it has none.
int FirstCollectiveOp(const Model& model);

// numpy broadcasting of two shapes: they align at the last axis, and each pair of dims is equal
// or one of them is 1. Sets *out to the broadcast shape; false (and *out unspecified) when the
// shapes do not broadcast. Shared by ValidateModel() and the text form's shape inference.
bool BroadcastShapes(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                     std::vector<uint32_t>* out);

// Checks everything execution relies on: indices in range, arities, shapes that agree
// (broadcasting, matmul dimensions, axes), each output written by some op, no op reading a
// tensor that nothing has written yet, sizes that fit in memory limits. Returns
// InvalidArgument with a one-line reason otherwise.
absl::Status ValidateModel(const Model& model);

}  // namespace nrtsim

#endif  // NRTPROF_SIM_MODEL_H_
