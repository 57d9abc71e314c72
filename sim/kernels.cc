#include "sim/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "sim/bf16.h"

namespace nrtsim {
namespace {

// A tensor's values while the model runs: always float32, whatever the tensor's dtype.
using Values = std::vector<float>;
using Shape = std::vector<uint32_t>;

// Model buffers are little-endian by definition, so bytes are assembled explicitly rather
// than relying on the host's byte order.
float LoadElement(const uint8_t* p, DType dtype) {
  if (dtype == DType::kBFloat16) {
    return Bf16ToFloat(static_cast<uint16_t>(p[0] | (p[1] << 8)));
  }
  const uint32_t bits = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                        (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

void StoreElement(float value, DType dtype, uint8_t* p) {
  uint32_t bits;
  if (dtype == DType::kBFloat16) {
    bits = FloatToBf16(value);
  } else {
    std::memcpy(&bits, &value, sizeof(bits));
  }
  for (size_t i = 0; i < DTypeSize(dtype); ++i) p[i] = static_cast<uint8_t>(bits >> (8 * i));
}

Values Decode(const void* bytes, const TensorDef& def) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  const size_t element_size = DTypeSize(def.dtype);
  Values values(def.NumElements());
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = LoadElement(p + i * element_size, def.dtype);
  }
  return values;
}

void Encode(const Values& values, const TensorDef& def, void* bytes) {
  auto* p = static_cast<uint8_t*>(bytes);
  const size_t element_size = DTypeSize(def.dtype);
  for (size_t i = 0; i < values.size(); ++i) {
    StoreElement(values[i], def.dtype, p + i * element_size);
  }
}

// What storing into a tensor of `dtype` does to the values: a bf16 device keeps only bf16.
void RoundToDType(DType dtype, Values* values) {
  if (dtype != DType::kBFloat16) return;
  for (float& v : *values) v = RoundToBf16(v);
}

size_t NumElements(const Shape& shape) {
  size_t n = 1;
  for (uint32_t d : shape) n *= d;
  return n;
}

// Walks an output of shape `out` in row-major order and keeps the offset of the matching
// element of an operand of shape `in` under numpy broadcasting: shapes align from the right,
// and a dimension the operand lacks or has as 1 gets stride 0, so its element is reused.
class BroadcastCursor {
 public:
  BroadcastCursor(const Shape& in, const Shape& out)
      : out_(out), strides_(out.size(), 0), index_(out.size(), 0) {
    const size_t lead = out.size() - in.size();
    size_t stride = 1;
    for (size_t d = in.size(); d-- > 0;) {
      if (in[d] != 1) strides_[lead + d] = stride;
      stride *= in[d];
    }
  }

  size_t offset() const { return offset_; }

  // Moves to the next output element, like an odometer.
  void Next() {
    for (size_t d = out_.size(); d-- > 0;) {
      offset_ += strides_[d];
      if (++index_[d] < out_[d]) return;
      offset_ -= strides_[d] * out_[d];
      index_[d] = 0;
    }
  }

 private:
  const Shape out_;
  std::vector<size_t> strides_;
  std::vector<uint32_t> index_;
  size_t offset_ = 0;
};

template <typename F>
Values Binary(const Values& a, const Shape& a_shape, const Values& b, const Shape& b_shape,
              const Shape& out_shape, F f) {
  Values out(NumElements(out_shape));
  BroadcastCursor ia(a_shape, out_shape);
  BroadcastCursor ib(b_shape, out_shape);
  for (float& v : out) {
    v = f(a[ia.offset()], b[ib.offset()]);
    ia.Next();
    ib.Next();
  }
  return out;
}

template <typename F>
Values Unary(const Values& a, F f) {
  Values out(a.size());
  std::transform(a.begin(), a.end(), out.begin(), f);
  return out;
}

// The kernels below compute in float32. Every reduction (mean, matmul's dot products, softmax's
// sum, rms_norm's sum of squares) accumulates in a float32 in index order: no pairwise or wider
// accumulation, so a result and its rounding error are the same on every run, thread and host,
// and a test can predict them.

Values Mean(const Values& a, const Shape& shape, int32_t axis) {
  const size_t ax = axis < 0 ? static_cast<size_t>(axis + static_cast<int32_t>(shape.size()))
                             : static_cast<size_t>(axis);
  size_t outer = 1;
  size_t inner = 1;
  for (size_t d = 0; d < ax; ++d) outer *= shape[d];
  for (size_t d = ax + 1; d < shape.size(); ++d) inner *= shape[d];
  const size_t n = shape[ax];
  Values out(outer * inner);
  for (size_t o = 0; o < outer; ++o) {
    for (size_t i = 0; i < inner; ++i) {
      float sum = 0.0f;
      for (size_t k = 0; k < n; ++k) sum += a[(o * n + k) * inner + i];
      out[o * inner + i] = sum / static_cast<float>(n);
    }
  }
  return out;
}

// The length of the last axis; a scalar is one row of one.
size_t RowLength(const Shape& shape) { return shape.empty() ? 1 : shape.back(); }

// Computed entirely in float32 and rounded once on store: the fused kernel's advantage over
// the six-op chain, which rounds every intermediate.
Values RmsNorm(const Values& a, const Shape& shape, const Values& weight, float epsilon) {
  const size_t n = RowLength(shape);
  Values out(a.size());
  for (size_t row = 0; n > 0 && row < a.size(); row += n) {
    float sum_sq = 0.0f;
    for (size_t k = 0; k < n; ++k) sum_sq += a[row + k] * a[row + k];
    const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + epsilon);
    for (size_t k = 0; k < n; ++k) out[row + k] = a[row + k] * inv_rms * weight[k];
  }
  return out;
}

// out[M,N] = a[M,K] @ b[K,N]. The k loop is outside the n loop so b is read row by row; each
// dot product still accumulates in k order.
Values Matmul(const Values& a, const Shape& a_shape, const Values& b, const Shape& b_shape) {
  const size_t m_size = a_shape[0];
  const size_t k_size = a_shape[1];
  const size_t n_size = b_shape[1];
  Values out(m_size * n_size, 0.0f);
  for (size_t m = 0; m < m_size; ++m) {
    float* out_row = &out[m * n_size];
    for (size_t k = 0; k < k_size; ++k) {
      const float a_mk = a[m * k_size + k];
      const float* b_row = &b[k * n_size];
      for (size_t n = 0; n < n_size; ++n) out_row[n] += a_mk * b_row[n];
    }
  }
  return out;
}

// out[N,M] = a[M,N] transposed.
Values Transpose(const Values& a, const Shape& shape) {
  const size_t rows = shape[0], cols = shape[1];
  Values out(a.size());
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) out[c * rows + r] = a[r * cols + c];
  }
  return out;
}

// Subtracting the row max keeps exp() from overflowing for large inputs.
Values Softmax(const Values& a, const Shape& shape) {
  const size_t n = RowLength(shape);
  Values out(a.size());
  for (size_t row = 0; n > 0 && row < a.size(); row += n) {
    float max = -std::numeric_limits<float>::infinity();
    for (size_t k = 0; k < n; ++k) max = std::max(max, a[row + k]);
    float sum = 0.0f;
    for (size_t k = 0; k < n; ++k) {
      out[row + k] = std::exp(a[row + k] - max);
      sum += out[row + k];
    }
    for (size_t k = 0; k < n; ++k) out[row + k] /= sum;
  }
  return out;
}

float Gelu(float x) {
  constexpr float kSqrt2 = 1.41421356237309505f;
  return 0.5f * x * (1.0f + std::erf(x / kSqrt2));
}

// The std:: math functions used here are their float overloads (sqrtf, expf, erff), so an op
// never computes in wider precision than the float32 it models.
absl::StatusOr<Values> RunOp(const Model& model, const OpDef& op,
                             const std::vector<Values>& values) {
  auto operand = [&](int i) -> const Values& { return values[op.inputs[i]]; };
  auto shape = [&](int i) -> const Shape& { return model.tensors[op.inputs[i]].shape; };
  const Shape& out_shape = model.tensors[op.output].shape;
  const float scalar = op.scalar;
  switch (op.kind) {
    case OpKind::kMul:
      return Binary(operand(0), shape(0), operand(1), shape(1), out_shape,
                    std::multiplies<float>());
    case OpKind::kAdd:
      return Binary(operand(0), shape(0), operand(1), shape(1), out_shape, std::plus<float>());
    case OpKind::kSub:
      return Binary(operand(0), shape(0), operand(1), shape(1), out_shape, std::minus<float>());
    case OpKind::kDiv:
      return Binary(operand(0), shape(0), operand(1), shape(1), out_shape, std::divides<float>());
    case OpKind::kMulScalar:
      return Unary(operand(0), [scalar](float x) { return x * scalar; });
    case OpKind::kAddScalar:
      return Unary(operand(0), [scalar](float x) { return x + scalar; });
    case OpKind::kMean:
      return Mean(operand(0), shape(0), op.axis);
    case OpKind::kRsqrt:
      return Unary(operand(0), [](float x) { return 1.0f / std::sqrt(x); });
    case OpKind::kRmsNorm:
      return RmsNorm(operand(0), shape(0), operand(1), scalar);
    case OpKind::kMatmul:
      return Matmul(operand(0), shape(0), operand(1), shape(1));
    case OpKind::kSoftmax:
      return Softmax(operand(0), shape(0));
    case OpKind::kGelu:
      return Unary(operand(0), Gelu);
    case OpKind::kCopy:
      return operand(0);
    case OpKind::kRelu:  // max(x, 0) as PyTorch's: NaN and -0 pass through
      return Unary(operand(0), [](float x) { return x < 0.0f ? 0.0f : x; });
    case OpKind::kThresholdBackward:  // the gradient where the input is above the threshold
      // (a NaN input is not at or below it: its gradient passes, as PyTorch's)
      return Binary(operand(0), shape(0), operand(1), shape(1), out_shape,
                    [scalar](float g, float x) { return x <= scalar ? 0.0f : g; });
    case OpKind::kAbs:
      return Unary(operand(0), [](float x) { return std::fabs(x); });
    case OpKind::kTranspose:
      return Transpose(operand(0), shape(0));
    case OpKind::kAllReduce:  // RunOps hands it to the collective
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown op kind ", static_cast<int>(op.kind)));
}

// Validation guarantees ops only read tensors already written and every output is written;
// checking again is cheap and turns a broken guarantee into an error, not an out-of-bounds read.
absl::Status CheckWritten(const Model& model, uint32_t index, const std::vector<Values>& values) {
  const TensorDef& def = model.tensors[index];
  if (values[index].size() == def.NumElements()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("tensor ", def.name, " is read before anything writes it"));
}

template <typename T>
absl::Status CheckBuffers(const Model& model, const std::vector<T*>& buffers, size_t expected,
                          const char* what) {
  if (buffers.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("model ", model.name, " has ", expected, " ",
                                                   what, "s, got ", buffers.size(), " buffers"));
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(what, " buffer ", i, " is null"));
    }
  }
  return absl::OkStatus();
}

absl::Status LoadConstants(const Model& model, std::vector<Values>* values) {
  for (size_t i = 0; i < model.tensors.size(); ++i) {
    const TensorDef& def = model.tensors[i];
    if (def.kind != TensorKind::kConstant) continue;
    if (def.data.size() != def.SizeBytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "constant ", def.name, " has ", def.data.size(), " bytes, expected ", def.SizeBytes()));
    }
    (*values)[i] = Decode(def.data.data(), def);
  }
  return absl::OkStatus();
}

absl::Status RunOps(const Model& model, const CollectiveFn& collective,
                    std::vector<Values>* values) {
  for (uint32_t k = 0; k < model.ops.size(); ++k) {
    const OpDef& op = model.ops[k];
    for (uint32_t index : op.inputs) {
      absl::Status status = CheckWritten(model, index, *values);
      if (!status.ok()) return status;
    }
    if (op.kind == OpKind::kAllReduce) {
      // The ranks exchange the stored bytes (already in the dtype), and the result is stored
      // as it comes back: no rounding of its own beyond the collective's.
      const TensorDef& def = model.tensors[op.output];
      std::vector<uint8_t> data(def.SizeBytes());
      Encode((*values)[op.inputs[0]], def, data.data());
      absl::Status status = collective(k, op, &data);
      if (!status.ok()) return status;
      (*values)[op.output] = Decode(data.data(), def);
      continue;
    }
    absl::StatusOr<Values> result = RunOp(model, op, *values);
    if (!result.ok()) return result.status();
    RoundToDType(model.tensors[op.output].dtype, &*result);
    (*values)[op.output] = *std::move(result);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunModel(const Model& model, const std::vector<const void*>& inputs,
                      const std::vector<void*>& outputs) {
  return RunModel(model, inputs, outputs,
                  [](uint32_t op_index, const OpDef& op, std::vector<uint8_t>*) {
                    return absl::FailedPreconditionError(
                        absl::StrCat("op ", op_index, " (", OpKindName(op.kind),
                                     ") is a collective and this run has no group"));
                  });
}

absl::Status RunModel(const Model& model, const std::vector<const void*>& inputs,
                      const std::vector<void*>& outputs, const CollectiveFn& collective) {
  const std::vector<uint32_t> input_indices = model.InputIndices();
  const std::vector<uint32_t> output_indices = model.OutputIndices();
  absl::Status status = CheckBuffers(model, inputs, input_indices.size(), "input");
  if (!status.ok()) return status;
  status = CheckBuffers(model, outputs, output_indices.size(), "output");
  if (!status.ok()) return status;

  std::vector<Values> values(model.tensors.size());
  status = LoadConstants(model, &values);
  if (!status.ok()) return status;
  for (size_t i = 0; i < inputs.size(); ++i) {
    values[input_indices[i]] = Decode(inputs[i], model.tensors[input_indices[i]]);
  }
  status = RunOps(model, collective, &values);
  if (!status.ok()) return status;
  for (size_t i = 0; i < outputs.size(); ++i) {
    status = CheckWritten(model, output_indices[i], values);
    if (!status.ok()) return status;
    Encode(values[output_indices[i]], model.tensors[output_indices[i]], outputs[i]);
  }
  return absl::OkStatus();
}

}  // namespace nrtsim
