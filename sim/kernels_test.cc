#include "sim/kernels.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/bf16.h"
#include "sim/model.h"

namespace nrtsim {
namespace {

using Shape = std::vector<uint32_t>;
using ::testing::HasSubstr;

// Tolerances are derived, not tuned; each test says which bound it uses.
//
// float32 unit roundoff: one correctly rounded float32 operation has relative error <= 2^-24.
constexpr double kU32 = 0x1p-24;
// bf16 unit roundoff: bf16 has 8 significant bits, so one rounding has relative error <= 2^-8.
constexpr double kU16 = 0x1p-8;

// Higham's gamma_n = n*u / (1 - n*u): summing n float32 terms in order is within
// gamma_(n-1) * sum|x_i| of the exact sum, whatever the order of magnitudes.
double Gamma(size_t n) { return n * kU32 / (1.0 - n * kU32); }

// Units in the last place between two finite floats of the same type; +0 and -0 are 0 apart.
int64_t UlpDistance(float a, float b) {
  auto ordered = [](float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    const int64_t magnitude = bits & 0x7fffffffu;
    return (bits & 0x80000000u) ? -magnitude : magnitude;
  };
  return std::llabs(ordered(a) - ordered(b));
}

// bf16 values are floats whose low 16 bits are zero, so a bf16 ulp is 2^16 float ulps.
int64_t Bf16UlpDistance(float a, float b) { return UlpDistance(a, b) >> 16; }

// The reference "stored in a bf16 tensor". Via float, as the kernels round: double -> float ->
// bf16 can differ from double -> bf16 only at an exact bf16 tie, within the 1-ulp allowance.
double RefBf16(double x) { return RoundToBf16(static_cast<float>(x)); }

// One tensor's dtype, shape and values; the values are exactly representable in the dtype.
struct Operand {
  DType dtype;
  Shape shape;
  std::vector<float> values;
};

size_t NumElements(const Shape& shape) {
  size_t n = 1;
  for (uint32_t d : shape) n *= d;
  return n;
}

// Deterministic values uniform in [lo, hi), rounded to the dtype so the reference sees exactly
// what the kernels read.
Operand RandomOperand(DType dtype, const Shape& shape, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Operand operand{dtype, shape, std::vector<float>(NumElements(shape))};
  for (float& v : operand.values) {
    v = dist(rng);
    if (dtype == DType::kBFloat16) v = RoundToBf16(v);
  }
  return operand;
}

// Test hosts are little-endian, so memcpy gives the model buffers' byte order.
std::vector<uint8_t> Pack(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kBFloat16) {
      const uint16_t b = FloatToBf16(values[i]);
      std::memcpy(&bytes[2 * i], &b, 2);
    } else {
      std::memcpy(&bytes[4 * i], &values[i], 4);
    }
  }
  return bytes;
}

std::vector<float> Unpack(const std::vector<uint8_t>& bytes, DType dtype) {
  std::vector<float> values(bytes.size() / DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kBFloat16) {
      uint16_t b;
      std::memcpy(&b, &bytes[2 * i], 2);
      values[i] = Bf16ToFloat(b);
    } else {
      std::memcpy(&values[i], &bytes[4 * i], 4);
    }
  }
  return values;
}

// Builds a Model op by op, the way a compiler would, and runs it on float values: the tests
// exercise arithmetic, not the model file or text formats.
class ModelBuilder {
 public:
  uint32_t AddInput(const Operand& operand) {
    input_bytes_.push_back(Pack(operand.values, operand.dtype));
    return AddTensor(TensorKind::kInput, operand.dtype, operand.shape);
  }

  uint32_t AddConstant(const Operand& operand) {
    const uint32_t t = AddTensor(TensorKind::kConstant, operand.dtype, operand.shape);
    model_.tensors[t].data = Pack(operand.values, operand.dtype);
    return t;
  }

  // Adds an op writing a new intermediate tensor; returns that tensor.
  uint32_t AddOp(OpKind kind, std::vector<uint32_t> inputs, DType dtype, const Shape& shape,
                 float scalar = 0.0f, int32_t axis = -1) {
    OpDef op;
    op.kind = kind;
    op.inputs = std::move(inputs);
    op.output = AddTensor(TensorKind::kIntermediate, dtype, shape);
    op.scalar = scalar;
    op.axis = axis;
    model_.ops.push_back(op);
    return op.output;
  }

  void MarkOutput(uint32_t t) { model_.tensors[t].kind = TensorKind::kOutput; }

  const Model& model() const { return model_; }

  // Runs the model (which must be valid) and returns each output's values, in
  // OutputIndices() order; empty with a test failure if RunModel fails.
  std::vector<std::vector<float>> Run() const {
    EXPECT_TRUE(ValidateModel(model_).ok()) << ValidateModel(model_);
    std::vector<const void*> inputs;
    for (const std::vector<uint8_t>& bytes : input_bytes_) inputs.push_back(bytes.data());
    std::vector<std::vector<uint8_t>> output_bytes;
    std::vector<void*> outputs;
    for (uint32_t t : model_.OutputIndices()) {
      output_bytes.emplace_back(model_.tensors[t].SizeBytes(), 0xAB);
    }
    for (std::vector<uint8_t>& bytes : output_bytes) outputs.push_back(bytes.data());
    const absl::Status status = RunModel(model_, inputs, outputs);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return {};
    std::vector<std::vector<float>> results;
    for (size_t i = 0; i < outputs.size(); ++i) {
      results.push_back(Unpack(output_bytes[i], model_.tensors[model_.OutputIndices()[i]].dtype));
    }
    return results;
  }

 private:
  uint32_t AddTensor(TensorKind kind, DType dtype, const Shape& shape) {
    TensorDef t;
    t.name = "t" + std::to_string(model_.tensors.size());
    t.kind = kind;
    t.dtype = dtype;
    t.shape = shape;
    model_.tensors.push_back(t);
    return static_cast<uint32_t>(model_.tensors.size() - 1);
  }

  Model model_{"kernels_test", {}, {}};
  std::vector<std::vector<uint8_t>> input_bytes_;
};

// A model of one op reading `operands` as inputs and writing one output.
std::vector<float> RunOneOp(OpKind kind, const std::vector<Operand>& operands, DType out_dtype,
                            const Shape& out_shape, float scalar = 0.0f, int32_t axis = -1) {
  ModelBuilder builder;
  std::vector<uint32_t> inputs;
  for (const Operand& operand : operands) inputs.push_back(builder.AddInput(operand));
  builder.MarkOutput(builder.AddOp(kind, inputs, out_dtype, out_shape, scalar, axis));
  std::vector<std::vector<float>> results = builder.Run();
  return results.empty() ? std::vector<float>() : results[0];
}

// Expects |got[i] - ref[i]| <= tolerance(i); reports the first few mismatches.
void ExpectWithin(const std::vector<float>& got, const std::vector<double>& ref,
                  const std::function<double(size_t)>& tolerance) {
  ASSERT_EQ(got.size(), ref.size());
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    if (std::fabs(got[i] - ref[i]) <= tolerance(i)) continue;
    ++failures;
    ADD_FAILURE() << std::setprecision(10) << "element " << i << ": got " << got[i] << ", want "
                  << ref[i] << " +- " << tolerance(i);
  }
}

// Expects each result within `ulps` float32 ulps of the float32 nearest the reference.
void ExpectFp32Ulps(const std::vector<float>& got, const std::vector<double>& ref, int64_t ulps) {
  ASSERT_EQ(got.size(), ref.size());
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const float want = static_cast<float>(ref[i]);
    if (UlpDistance(got[i], want) <= ulps) continue;
    ++failures;
    ADD_FAILURE() << std::setprecision(10) << "element " << i << ": got " << got[i] << ", want "
                  << want << " within " << ulps << " fp32 ulps";
  }
}

// Expects each result within `ulps` bf16 ulps of the reference rounded to bf16.
void ExpectBf16Ulps(const std::vector<float>& got, const std::vector<double>& ref, int64_t ulps) {
  ASSERT_EQ(got.size(), ref.size());
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const float want = static_cast<float>(RefBf16(ref[i]));
    if (got[i] == RoundToBf16(got[i]) && Bf16UlpDistance(got[i], want) <= ulps) continue;
    ++failures;
    ADD_FAILURE() << std::setprecision(10) << "element " << i << ": got " << got[i] << ", want "
                  << want << " within " << ulps << " bf16 ulps";
  }
}

// --- float64 references, written independently of the kernels ---

std::vector<size_t> Unravel(size_t flat, const Shape& shape) {
  std::vector<size_t> coord(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    coord[d] = flat % shape[d];
    flat /= shape[d];
  }
  return coord;
}

// The element of an operand of shape `in` that numpy pairs with output coordinate `coord`.
size_t BroadcastSource(const std::vector<size_t>& coord, const Shape& in) {
  const size_t lead = coord.size() - in.size();
  size_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d) flat = flat * in[d] + (in[d] == 1 ? 0 : coord[lead + d]);
  return flat;
}

std::vector<double> RefBinary(const Operand& a, const Operand& b, const Shape& out_shape,
                              const std::function<double(double, double)>& f) {
  std::vector<double> out(NumElements(out_shape));
  for (size_t i = 0; i < out.size(); ++i) {
    const std::vector<size_t> coord = Unravel(i, out_shape);
    out[i] =
        f(a.values[BroadcastSource(coord, a.shape)], b.values[BroadcastSource(coord, b.shape)]);
  }
  return out;
}

std::vector<double> RefUnary(const std::vector<float>& x, const std::function<double(double)>& f) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = f(x[i]);
  return out;
}

std::vector<double> RefMean(const std::vector<double>& x, const Shape& shape, size_t axis) {
  Shape out_shape = shape;
  out_shape[axis] = 1;
  std::vector<double> out(NumElements(out_shape));
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<size_t> coord = Unravel(i, out_shape);
    double sum = 0.0;
    for (coord[axis] = 0; coord[axis] < shape[axis]; ++coord[axis]) {
      size_t flat = 0;
      for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + coord[d];
      sum += x[flat];
    }
    out[i] = sum / shape[axis];
  }
  return out;
}

// RMSNorm of each row of x[rows, n]. With `like_chain`, every value the six-op chain stores in
// a bf16 intermediate is rounded through bf16 at the same point.
std::vector<double> RefRmsNorm(const std::vector<float>& x, const std::vector<float>& w,
                               float epsilon, bool like_chain) {
  auto r = [like_chain](double v) { return like_chain ? RefBf16(v) : v; };
  const size_t n = w.size();
  std::vector<double> out(x.size());
  for (size_t row = 0; row < x.size(); row += n) {
    double sum_sq = 0.0;
    for (size_t k = 0; k < n; ++k) sum_sq += r(double{x[row + k]} * x[row + k]);
    const double inv_rms = r(1.0 / std::sqrt(r(r(sum_sq / n) + epsilon)));
    for (size_t k = 0; k < n; ++k) out[row + k] = r(r(x[row + k] * inv_rms) * w[k]);
  }
  return out;
}

double RefGelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// ============================== elementwise ==============================

struct BinaryOp {
  OpKind kind;
  std::function<double(double, double)> f;
};

std::vector<BinaryOp> BinaryOps() {
  return {{OpKind::kMul, [](double a, double b) { return a * b; }},
          {OpKind::kAdd, [](double a, double b) { return a + b; }},
          {OpKind::kSub, [](double a, double b) { return a - b; }},
          {OpKind::kDiv, [](double a, double b) { return a / b; }}};
}

// For +, -, *, / of float32 operands, the float64 result rounded to float32 is the correctly
// rounded float32 result (double rounding is innocuous when 53 >= 2*24 + 2), and the kernels
// store that result rounded once more to bf16, as RefBf16 does: so both dtypes match exactly.
void CheckBinary(DType dtype, const Shape& a_shape, const Shape& b_shape, const Shape& out_shape) {
  const Operand a = RandomOperand(dtype, a_shape, -2.0f, 2.0f, 1);
  const Operand b = RandomOperand(dtype, b_shape, -2.0f, 2.0f, 2);
  for (const BinaryOp& op : BinaryOps()) {
    SCOPED_TRACE(std::string(OpKindName(op.kind)) + " " + DTypeName(dtype));
    const std::vector<float> got = RunOneOp(op.kind, {a, b}, dtype, out_shape);
    const std::vector<double> ref = RefBinary(a, b, out_shape, op.f);
    if (dtype == DType::kFloat32) {
      ExpectFp32Ulps(got, ref, 0);
    } else {
      ExpectBf16Ulps(got, ref, 0);
    }
  }
}

TEST(KernelsTest, BinaryOpsSameShape) {
  CheckBinary(DType::kFloat32, {4, 512}, {4, 512}, {4, 512});
  CheckBinary(DType::kBFloat16, {4, 512}, {4, 512}, {4, 512});
}

TEST(KernelsTest, BinaryOpsBroadcastColumn) {
  CheckBinary(DType::kFloat32, {4, 512}, {4, 1}, {4, 512});
  CheckBinary(DType::kBFloat16, {4, 512}, {4, 1}, {4, 512});
}

TEST(KernelsTest, BinaryOpsBroadcastRow) {
  CheckBinary(DType::kFloat32, {4, 512}, {512}, {4, 512});
  CheckBinary(DType::kBFloat16, {4, 512}, {512}, {4, 512});
}

TEST(KernelsTest, BinaryOpsBroadcastScalarShaped) {
  CheckBinary(DType::kFloat32, {4, 512}, {1}, {4, 512});
  CheckBinary(DType::kBFloat16, {1}, {4, 512}, {4, 512});
  CheckBinary(DType::kFloat32, {4, 512}, {}, {4, 512});
}

TEST(KernelsTest, BinaryOpsBroadcastBothOperands) {
  CheckBinary(DType::kFloat32, {2, 1, 3}, {4, 1}, {2, 4, 3});
  CheckBinary(DType::kBFloat16, {5, 1, 2, 1}, {3, 1, 7}, {5, 3, 2, 7});
}

TEST(KernelsTest, DivisionByZeroFollowsIeee) {
  const Operand a{DType::kFloat32, {4}, {1.0f, -1.0f, 0.0f, 2.0f}};
  const Operand b{DType::kFloat32, {4}, {0.0f, 0.0f, 0.0f, -0.0f}};
  const std::vector<float> got = RunOneOp(OpKind::kDiv, {a, b}, DType::kFloat32, {4});
  ASSERT_EQ(got.size(), 4u);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(got[0], inf);
  EXPECT_EQ(got[1], -inf);
  EXPECT_TRUE(std::isnan(got[2]));
  EXPECT_EQ(got[3], -inf);
}

TEST(KernelsTest, MixedDtypesReadEachInputInItsOwnDtype) {
  const Operand a = RandomOperand(DType::kBFloat16, {4, 512}, -2.0f, 2.0f, 3);
  const Operand b = RandomOperand(DType::kFloat32, {512}, -2.0f, 2.0f, 4);
  const std::vector<float> got = RunOneOp(OpKind::kMul, {a, b}, DType::kFloat32, {4, 512});
  ExpectFp32Ulps(got, RefBinary(a, b, {4, 512}, BinaryOps()[0].f), 0);
}

// One float32 operation on float32 operands: exact, for the same reason as CheckBinary.
TEST(KernelsTest, ScalarOps) {
  const float scalar = -1.3f;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Operand a = RandomOperand(dtype, {4, 512}, -2.0f, 2.0f, 5);
    const std::vector<float> mul = RunOneOp(OpKind::kMulScalar, {a}, dtype, {4, 512}, scalar);
    const std::vector<float> add = RunOneOp(OpKind::kAddScalar, {a}, dtype, {4, 512}, scalar);
    const std::vector<double> mul_ref = RefUnary(a.values, [&](double x) { return x * scalar; });
    const std::vector<double> add_ref = RefUnary(a.values, [&](double x) { return x + scalar; });
    if (dtype == DType::kFloat32) {
      ExpectFp32Ulps(mul, mul_ref, 0);
      ExpectFp32Ulps(add, add_ref, 0);
    } else {
      ExpectBf16Ulps(mul, mul_ref, 0);
      ExpectBf16Ulps(add, add_ref, 0);
    }
  }
}

// 1/sqrtf(x) is two correctly rounded operations: within 1.5 fp32 ulps of the true value, so
// within 2 of its nearest float; in bf16 that error can only flip a rounding: 1 bf16 ulp.
TEST(KernelsTest, Rsqrt) {
  const auto ref_fn = [](double x) { return 1.0 / std::sqrt(x); };
  const Operand f32 = RandomOperand(DType::kFloat32, {4, 512}, 0.01f, 100.0f, 6);
  ExpectFp32Ulps(RunOneOp(OpKind::kRsqrt, {f32}, DType::kFloat32, {4, 512}),
                 RefUnary(f32.values, ref_fn), 2);
  const Operand b16 = RandomOperand(DType::kBFloat16, {4, 512}, 0.01f, 100.0f, 7);
  ExpectBf16Ulps(RunOneOp(OpKind::kRsqrt, {b16}, DType::kBFloat16, {4, 512}),
                 RefUnary(b16.values, ref_fn), 1);
}

TEST(KernelsTest, RsqrtEdgeCasesFollowIeee) {
  const Operand a{
      DType::kFloat32, {4}, {0.0f, -0.0f, -1.0f, std::numeric_limits<float>::infinity()}};
  const std::vector<float> got = RunOneOp(OpKind::kRsqrt, {a}, DType::kFloat32, {4});
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(got[1], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(got[2]));
  EXPECT_EQ(got[3], 0.0f);
}

TEST(KernelsTest, CopyStoresInTheOutputDtype) {
  const Operand f32{DType::kFloat32, {3}, {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -7.0f}};
  EXPECT_EQ(RunOneOp(OpKind::kCopy, {f32}, DType::kBFloat16, {3}),
            (std::vector<float>{1.0f, 1.0f + 0x1p-6f, -7.0f}));
  EXPECT_EQ(RunOneOp(OpKind::kCopy, {f32}, DType::kFloat32, {3}), f32.values);
  const Operand b16 = RandomOperand(DType::kBFloat16, {64}, -10.0f, 10.0f, 8);
  EXPECT_EQ(RunOneOp(OpKind::kCopy, {b16}, DType::kFloat32, {64}), b16.values);
}

// relu, threshold_backward and abs select or negate values: exact in either dtype, with
// PyTorch's choices at the edges (relu and abs keep NaN, relu keeps -0; threshold_backward
// zeroes the gradient where the input is at or below the threshold, and passes it for NaN).
TEST(KernelsTest, ReluIsMaxWithZero) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Operand a = RandomOperand(dtype, {4, 512}, -10.0f, 10.0f, 21);
    const std::vector<float> got = RunOneOp(OpKind::kRelu, {a}, dtype, {4, 512});
    ASSERT_EQ(got.size(), a.values.size());
    int zeros = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], a.values[i] > 0 ? a.values[i] : 0.0f) << "element " << i;
      zeros += got[i] == 0.0f;
    }
    EXPECT_GT(zeros, 0);
    EXPECT_LT(zeros, static_cast<int>(got.size()));
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Operand edges{DType::kFloat32, {4}, {nan, -0.0f, -std::numeric_limits<float>::infinity(),
                                             std::numeric_limits<float>::infinity()}};
  const std::vector<float> got = RunOneOp(OpKind::kRelu, {edges}, DType::kFloat32, {4});
  ASSERT_EQ(got.size(), 4u);
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_TRUE(got[1] == 0.0f && std::signbit(got[1]));
  EXPECT_EQ(got[2], 0.0f);
  EXPECT_EQ(got[3], std::numeric_limits<float>::infinity());
}

TEST(KernelsTest, ThresholdBackwardPassesTheGradientAboveTheThreshold) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Operand grad = RandomOperand(dtype, {4, 512}, -1.0f, 1.0f, 22);
    const Operand x = RandomOperand(dtype, {4, 512}, -3.0f, 3.0f, 23);
    for (float threshold : {0.0f, 0.5f}) {
      const std::vector<float> got =
          RunOneOp(OpKind::kThresholdBackward, {grad, x}, dtype, {4, 512}, threshold);
      ASSERT_EQ(got.size(), grad.values.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], x.values[i] > threshold ? grad.values[i] : 0.0f) << "element " << i;
      }
    }
  }
  // The input at the threshold gets none; NaN passes the gradient; the gradient broadcasts.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Operand grad{DType::kFloat32, {1}, {3.0f}};
  const Operand x{DType::kBFloat16, {2, 2}, {0.0f, 1.0f, nan, -1.0f}};
  EXPECT_EQ(RunOneOp(OpKind::kThresholdBackward, {grad, x}, DType::kFloat32, {2, 2}),
            (std::vector<float>{0.0f, 3.0f, 3.0f, 0.0f}));
}

TEST(KernelsTest, AbsAndItsEdges) {
  const Operand b16 = RandomOperand(DType::kBFloat16, {64}, -10.0f, 10.0f, 24);
  const std::vector<float> got = RunOneOp(OpKind::kAbs, {b16}, DType::kBFloat16, {64});
  ASSERT_EQ(got.size(), b16.values.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], std::fabs(b16.values[i]));
  const float inf = std::numeric_limits<float>::infinity();
  const Operand edges{DType::kFloat32, {3}, {-0.0f, -inf, std::numeric_limits<float>::quiet_NaN()}};
  const std::vector<float> e = RunOneOp(OpKind::kAbs, {edges}, DType::kFloat32, {3});
  ASSERT_EQ(e.size(), 3u);
  EXPECT_TRUE(e[0] == 0.0f && !std::signbit(e[0]));
  EXPECT_EQ(e[1], inf);
  EXPECT_TRUE(std::isnan(e[2]));
}

TEST(KernelsTest, TransposeSwapsRowsAndColumns) {
  const Operand a = RandomOperand(DType::kFloat32, {3, 5}, -10.0f, 10.0f, 25);
  const std::vector<float> got = RunOneOp(OpKind::kTranspose, {a}, DType::kFloat32, {5, 3});
  ASSERT_EQ(got.size(), 15u);
  for (size_t r = 0; r < 3; ++r) {
    for (size_t c = 0; c < 5; ++c) EXPECT_EQ(got[c * 3 + r], a.values[r * 5 + c]);
  }
  // Into a bf16 output it rounds as copy does.
  const std::vector<float> b = RunOneOp(OpKind::kTranspose, {a}, DType::kBFloat16, {5, 3});
  ASSERT_EQ(b.size(), 15u);
  for (size_t r = 0; r < 3; ++r) {
    for (size_t c = 0; c < 5; ++c) EXPECT_EQ(b[c * 3 + r], RoundToBf16(a.values[r * 5 + c]));
  }
}

// A bf16 intermediate loses the low bits even when the model's input and output are fp32.
TEST(KernelsTest, IntermediatesAreRoundedToTheirDtype) {
  ModelBuilder builder;
  const uint32_t x = builder.AddInput({DType::kFloat32, {1}, {1.0f + 0x1p-8f}});
  const uint32_t t = builder.AddOp(OpKind::kCopy, {x}, DType::kBFloat16, {1});
  builder.MarkOutput(builder.AddOp(OpKind::kMulScalar, {t}, DType::kFloat32, {1}, 1.0f));
  const std::vector<std::vector<float>> out = builder.Run();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], std::vector<float>{1.0f});
}

// ============================== reductions ==============================

// fp32: within gamma_(n-1) * mean|x| (in-order float32 summation) plus the division's rounding.
// bf16: that error is far below half a bf16 ulp, so it can at most flip the rounding: 1 ulp.
void CheckMean(DType dtype, const Shape& shape, int32_t axis) {
  SCOPED_TRACE(std::string(DTypeName(dtype)) + " axis " + std::to_string(axis));
  const size_t ax =
      static_cast<size_t>(axis < 0 ? axis + static_cast<int32_t>(shape.size()) : axis);
  Shape out_shape = shape;
  out_shape[ax] = 1;
  const Operand a = RandomOperand(dtype, shape, -2.0f, 2.0f, 9);
  const std::vector<float> got = RunOneOp(OpKind::kMean, {a}, dtype, out_shape, 0.0f, axis);
  const std::vector<double> x(a.values.begin(), a.values.end());
  const std::vector<double> ref = RefMean(x, shape, ax);
  if (dtype == DType::kBFloat16) {
    ExpectBf16Ulps(got, ref, 1);
    return;
  }
  const std::vector<double> abs_mean =
      RefMean(RefUnary(a.values, [](double v) { return std::fabs(v); }), shape, ax);
  ExpectWithin(got, ref,
               [&](size_t i) { return Gamma(shape[ax]) * abs_mean[i] + kU32 * std::fabs(ref[i]); });
}

TEST(KernelsTest, MeanOverEachAxis) {
  for (int32_t axis : {0, 1, 2, -1, -2, -3}) CheckMean(DType::kFloat32, {3, 4, 5}, axis);
  CheckMean(DType::kFloat32, {4, 512}, -1);
  CheckMean(DType::kBFloat16, {4, 512}, -1);
  CheckMean(DType::kBFloat16, {4, 512}, 0);
  CheckMean(DType::kBFloat16, {2, 3, 128}, 1);
}

// Reductions reproduce the device's float32 in-order accumulation, rounding error included:
// 1 + 2^-24 is a tie that rounds back to 1, so adding 2^-24 three times after 1 is lost, while
// 3 * 2^-24 summed first survives (1 + 1.5 ulp, a tie, rounds to even: 1 + 2^-22).
TEST(KernelsTest, ReductionsAccumulateInFloat32InIndexOrder) {
  const float e = 0x1p-24f;
  const Operand small_last{DType::kFloat32, {2, 4}, {1, e, e, e, e, e, e, 1}};
  EXPECT_EQ(RunOneOp(OpKind::kMean, {small_last}, DType::kFloat32, {2, 1}, 0.0f, -1),
            (std::vector<float>{0.25f, 0.25f + 0x1p-24f}));
  const Operand ones{DType::kFloat32, {4, 1}, {1, 1, 1, 1}};
  EXPECT_EQ(RunOneOp(OpKind::kMatmul, {small_last, ones}, DType::kFloat32, {2, 1}),
            (std::vector<float>{1.0f, 1.0f + 0x1p-22f}));
}

// Reduces dot products of K terms: fp32 within gamma_K * sum|a*b| of the exact value.
TEST(KernelsTest, MatmulFp32) {
  const Operand a = RandomOperand(DType::kFloat32, {7, 33}, -1.0f, 1.0f, 10);
  const Operand b = RandomOperand(DType::kFloat32, {33, 5}, -1.0f, 1.0f, 11);
  const std::vector<float> got = RunOneOp(OpKind::kMatmul, {a, b}, DType::kFloat32, {7, 5});
  std::vector<double> ref(7 * 5);
  std::vector<double> abs_sum(7 * 5);
  for (size_t m = 0; m < 7; ++m) {
    for (size_t n = 0; n < 5; ++n) {
      for (size_t k = 0; k < 33; ++k) {
        const double term = double{a.values[m * 33 + k]} * b.values[k * 5 + n];
        ref[m * 5 + n] += term;
        abs_sum[m * 5 + n] += std::fabs(term);
      }
    }
  }
  ExpectWithin(got, ref, [&](size_t i) { return Gamma(33) * abs_sum[i]; });
}

// Non-negative operands, so the float32 error is relative (gamma_K ~ 2^-18) and far below half
// a bf16 ulp: at most a flipped rounding.
TEST(KernelsTest, MatmulBf16) {
  const Operand a = RandomOperand(DType::kBFloat16, {16, 64}, 0.0f, 1.0f, 12);
  const Operand b = RandomOperand(DType::kBFloat16, {64, 8}, 0.0f, 1.0f, 13);
  const std::vector<float> got = RunOneOp(OpKind::kMatmul, {a, b}, DType::kBFloat16, {16, 8});
  std::vector<double> ref(16 * 8);
  for (size_t m = 0; m < 16; ++m) {
    for (size_t n = 0; n < 8; ++n) {
      for (size_t k = 0; k < 64; ++k) {
        ref[m * 8 + n] += double{a.values[m * 64 + k]} * b.values[k * 8 + n];
      }
    }
  }
  ExpectBf16Ulps(got, ref, 1);
}

TEST(KernelsTest, MatmulSmallExact) {
  const Operand a{DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}};
  const Operand b{DType::kFloat32, {3, 2}, {7, 8, 9, 10, 11, 12}};
  EXPECT_EQ(RunOneOp(OpKind::kMatmul, {a, b}, DType::kFloat32, {2, 2}),
            (std::vector<float>{58, 64, 139, 154}));
}

std::vector<double> RefSoftmax(const std::vector<float>& x, size_t n) {
  std::vector<double> out(x.size());
  for (size_t row = 0; row < x.size(); row += n) {
    double sum = 0.0;
    for (size_t k = 0; k < n; ++k) sum += std::exp(double{x[row + k]});
    for (size_t k = 0; k < n; ++k) out[row + k] = std::exp(double{x[row + k]}) / sum;
  }
  return out;
}

void ExpectRowsSumToOne(const std::vector<float>& got, size_t n, double tolerance) {
  for (size_t row = 0; row < got.size(); row += n) {
    double sum = 0.0;
    for (size_t k = 0; k < n; ++k) sum += got[row + k];
    EXPECT_NEAR(sum, 1.0, tolerance) << "row " << row / n;
  }
}

// fp32 relative bound, per element: x - max carries 2^-24 relative error into exp's argument
// (at most |x - max| <= 8 here, so 8u after exp), twice (the element and the sum's terms);
// expf adds ~1 ulp; the in-order sum of n positive terms gamma_(n-1); the division u.
// Hence gamma_(n + 32). A row sums to 1 within the same bound.
TEST(KernelsTest, SoftmaxFp32) {
  const size_t n = 512;
  const Operand a = RandomOperand(DType::kFloat32, {4, 512}, -4.0f, 4.0f, 14);
  const std::vector<float> got = RunOneOp(OpKind::kSoftmax, {a}, DType::kFloat32, {4, 512});
  const std::vector<double> ref = RefSoftmax(a.values, n);
  ExpectWithin(got, ref, [&](size_t i) { return Gamma(n + 32) * ref[i]; });
  ExpectRowsSumToOne(got, n, Gamma(n + 32));
}

// Each element is rounded to bf16 (relative error <= 2^-8), so a row sums to 1 within 2^-8
// plus the fp32 bound; elements are within 1 bf16 ulp (the fp32 error may flip a rounding).
TEST(KernelsTest, SoftmaxBf16) {
  const size_t n = 512;
  const Operand a = RandomOperand(DType::kBFloat16, {4, 512}, -4.0f, 4.0f, 15);
  const std::vector<float> got = RunOneOp(OpKind::kSoftmax, {a}, DType::kBFloat16, {4, 512});
  ExpectBf16Ulps(got, RefSoftmax(a.values, n), 1);
  ExpectRowsSumToOne(got, n, kU16 + Gamma(n + 32));
}

// exp(1000) overflows float32; subtracting the row max must keep the result finite.
TEST(KernelsTest, SoftmaxLargeInputsDoNotOverflow) {
  const Operand a{DType::kFloat32, {2, 2}, {1000.0f, 1001.0f, -1000.0f, -1000.0f}};
  const std::vector<float> got = RunOneOp(OpKind::kSoftmax, {a}, DType::kFloat32, {2, 2});
  const std::vector<double> ref = {1.0 / (1.0 + std::exp(1.0)), 1.0 / (1.0 + std::exp(-1.0)), 0.5,
                                   0.5};
  ExpectWithin(got, ref, [&](size_t i) { return 8 * kU32 * ref[i]; });
}

// ============================== RMSNorm ==============================

struct RmsNormCase {
  Operand x = RandomOperand(DType::kBFloat16, {4, 512}, -2.0f, 2.0f, 16);
  Operand weight = RandomOperand(DType::kBFloat16, {512}, 0.5f, 1.5f, 17);
  float epsilon = 1e-5f;
};

// The six-op chain a framework emits for RMSNorm: every intermediate is stored in bf16.
ModelBuilder RmsNormChainModel(const RmsNormCase& c) {
  ModelBuilder builder;
  const DType bf16 = DType::kBFloat16;
  const uint32_t x = builder.AddInput(c.x);
  const uint32_t w = builder.AddConstant(c.weight);
  const uint32_t sq = builder.AddOp(OpKind::kMul, {x, x}, bf16, {4, 512});
  const uint32_t ms = builder.AddOp(OpKind::kMean, {sq}, bf16, {4, 1}, 0.0f, -1);
  const uint32_t var = builder.AddOp(OpKind::kAddScalar, {ms}, bf16, {4, 1}, c.epsilon);
  const uint32_t inv = builder.AddOp(OpKind::kRsqrt, {var}, bf16, {4, 1});
  const uint32_t normed = builder.AddOp(OpKind::kMul, {x, inv}, bf16, {4, 512});
  builder.MarkOutput(builder.AddOp(OpKind::kMul, {normed, w}, bf16, {4, 512}));
  return builder;
}

std::vector<float> FirstOutput(const ModelBuilder& builder) {
  std::vector<std::vector<float>> out = builder.Run();
  return out.empty() ? std::vector<float>() : out[0];
}

// Against the float64 reference rounded at the chain's six points: equal, or one bf16 ulp
// where the float32 mean or rsqrt lands on the other side of a rounding boundary.
// Against exact RMSNorm: each bf16 rounding adds <= 2^-8 relative; to first order they
// accumulate as x*x 1, mean 2, +eps 3, rsqrt 1.5+1, *x 3.5, *w 4.5 units: allow 5 * 2^-8.
TEST(KernelsTest, RmsNormChainBf16) {
  const RmsNormCase c;
  const std::vector<float> got = FirstOutput(RmsNormChainModel(c));
  ExpectBf16Ulps(got, RefRmsNorm(c.x.values, c.weight.values, c.epsilon, true), 1);
  const std::vector<double> exact = RefRmsNorm(c.x.values, c.weight.values, c.epsilon, false);
  ExpectWithin(got, exact, [&](size_t i) { return 5 * kU16 * std::fabs(exact[i]); });
}

// The fused kernel rounds once: within one bf16 rounding (2^-8 relative) of exact RMSNorm,
// plus the fp32 computation's error (gamma_(n+8): the sum of squares and six more roundings).
TEST(KernelsTest, FusedRmsNormBf16) {
  const RmsNormCase c;
  const std::vector<float> got =
      RunOneOp(OpKind::kRmsNorm, {c.x, c.weight}, DType::kBFloat16, {4, 512}, c.epsilon);
  const std::vector<double> exact = RefRmsNorm(c.x.values, c.weight.values, c.epsilon, false);
  ExpectBf16Ulps(got, exact, 1);
  const double g = Gamma(512 + 8);
  ExpectWithin(got, exact, [&](size_t i) { return (kU16 * (1 + g) + g) * std::fabs(exact[i]); });
}

TEST(KernelsTest, FusedRmsNormFp32) {
  const Operand x = RandomOperand(DType::kFloat32, {4, 512}, -2.0f, 2.0f, 18);
  const Operand w = RandomOperand(DType::kFloat32, {512}, 0.5f, 1.5f, 19);
  const std::vector<float> got =
      RunOneOp(OpKind::kRmsNorm, {x, w}, DType::kFloat32, {4, 512}, 1e-5f);
  const std::vector<double> exact = RefRmsNorm(x.values, w.values, 1e-5f, false);
  ExpectWithin(got, exact, [&](size_t i) { return Gamma(512 + 8) * std::fabs(exact[i]); });
}

// ============================== GELU ==============================

// 1 + erff(x/sqrt2) has an absolute error of a few 2^-24 (erff ~1 ulp, the argument's and the
// sum's roundings); multiplied by x/2 that is absolute, not relative, where the result is tiny
// (x << 0). Hence |error| <= 4 * 2^-24 * (|x| + |gelu(x)|).
double GeluTolerance(double x, double ref) { return 4 * kU32 * (std::fabs(x) + std::fabs(ref)); }

TEST(KernelsTest, GeluAtKnownPoints) {
  // 0.5 * x * (1 + erf(x / sqrt(2))), from an independent float64 evaluation.
  const std::vector<float> x = {-3.0f, -2.0f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 2.0f, 3.0f};
  const std::vector<double> want = {
      -0.00404969409489031, -0.04550026389635842, -0.15865525393145707, -0.15426876936299344, 0.0,
      0.34573123063700656,  0.8413447460685429,   1.9544997361036416,   2.99595030590511};
  const Operand a{DType::kFloat32, {9}, x};
  const std::vector<float> got = RunOneOp(OpKind::kGelu, {a}, DType::kFloat32, {9});
  ExpectWithin(got, want, [&](size_t i) { return GeluTolerance(x[i], want[i]); });
}

TEST(KernelsTest, GeluFp32) {
  const Operand a = RandomOperand(DType::kFloat32, {4, 512}, -6.0f, 6.0f, 20);
  const std::vector<float> got = RunOneOp(OpKind::kGelu, {a}, DType::kFloat32, {4, 512});
  const std::vector<double> ref = RefUnary(a.values, RefGelu);
  ExpectWithin(got, ref, [&](size_t i) { return GeluTolerance(a.values[i], ref[i]); });
}

// On [-3, 3] the fp32 error is below 2^-12 relative (worst at x = -3), far below half a bf16
// ulp: at most a flipped rounding. (Further left, the result is tiny and the absolute fp32
// error dominates: a bf16 model there is as inexact as the device's.)
TEST(KernelsTest, GeluBf16) {
  const Operand a = RandomOperand(DType::kBFloat16, {4, 512}, -3.0f, 3.0f, 21);
  const std::vector<float> got = RunOneOp(OpKind::kGelu, {a}, DType::kBFloat16, {4, 512});
  ExpectBf16Ulps(got, RefUnary(a.values, RefGelu), 1);
}

// ============================== RunModel's contract ==============================

ModelBuilder OneMulModel() {
  ModelBuilder builder;
  const uint32_t a = builder.AddInput({DType::kFloat32, {2}, {1.0f, 2.0f}});
  const uint32_t b = builder.AddInput({DType::kFloat32, {2}, {3.0f, 4.0f}});
  builder.MarkOutput(builder.AddOp(OpKind::kMul, {a, b}, DType::kFloat32, {2}));
  return builder;
}

TEST(KernelsTest, WrongNumberOfBuffersIsInvalidArgument) {
  const ModelBuilder builder = OneMulModel();
  float in[2] = {0, 0};
  float out[2];
  absl::Status status = RunModel(builder.model(), {in}, {out});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("2 inputs, got 1"));
  status = RunModel(builder.model(), {in, in}, {out, out});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("1 outputs, got 2"));
}

TEST(KernelsTest, NullBufferIsInvalidArgument) {
  const ModelBuilder builder = OneMulModel();
  float in[2] = {0, 0};
  float out[2];
  absl::Status status = RunModel(builder.model(), {in, nullptr}, {out});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("input buffer 1 is null"));
  status = RunModel(builder.model(), {in, in}, {nullptr});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("output buffer 0 is null"));
}

// all_reduce hands the collective its input's bytes and stores what comes back, between the
// ops around it; without a collective (no group) the run fails.
TEST(KernelsTest, AllReduceRunsThroughTheCollective) {
  ModelBuilder builder;
  const uint32_t x = builder.AddInput({DType::kBFloat16, {3}, {1.0f, -2.0f, 3.5f}});
  const uint32_t h = builder.AddOp(OpKind::kMulScalar, {x}, DType::kBFloat16, {3}, 2.0f);
  const uint32_t r = builder.AddOp(OpKind::kAllReduce, {h}, DType::kBFloat16, {3}, 0.0f,
                                   NRT_OP_ADD);
  const uint32_t y = builder.AddOp(OpKind::kAddScalar, {r}, DType::kBFloat16, {3}, 1.0f);
  builder.MarkOutput(y);
  ASSERT_TRUE(ValidateModel(builder.model()).ok()) << ValidateModel(builder.model());
  const std::vector<uint8_t> in = Pack({1.0f, -2.0f, 3.5f}, DType::kBFloat16);
  std::vector<uint8_t> out(6);
  // A group of 4 ranks holding the same values: the sum is 4 times this rank's.
  std::vector<float> seen;
  const CollectiveFn times4 = [&](uint32_t op_index, const OpDef& op,
                                  std::vector<uint8_t>* data) {
    EXPECT_EQ(op_index, 1u);
    EXPECT_EQ(op.axis, NRT_OP_ADD);
    seen = Unpack(*data, DType::kBFloat16);
    std::vector<float> v = seen;
    for (float& f : v) f *= 4;
    *data = Pack(v, DType::kBFloat16);
    return absl::OkStatus();
  };
  ASSERT_TRUE(RunModel(builder.model(), {in.data()}, {out.data()}, times4).ok());
  EXPECT_THAT(seen, ::testing::ElementsAre(2.0f, -4.0f, 7.0f));
  EXPECT_THAT(Unpack(out, DType::kBFloat16), ::testing::ElementsAre(9.0f, -15.0f, 29.0f));
  // The collective's error is the run's.
  const CollectiveFn broken = [](uint32_t, const OpDef&, std::vector<uint8_t>*) {
    return absl::DeadlineExceededError("rank(s) 2 did not reach the collective");
  };
  EXPECT_EQ(RunModel(builder.model(), {in.data()}, {out.data()}, broken).code(),
            absl::StatusCode::kDeadlineExceeded);
  const absl::Status alone = RunModel(builder.model(), {in.data()}, {out.data()});
  EXPECT_EQ(alone.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(alone.message(), "op 1 (all_reduce) is a collective and this run has no group");
}

// RunModel keeps no state between calls: concurrent runs of one Model give the serial result.
TEST(KernelsTest, ConcurrentRunsOfOneModelAgree) {
  const ModelBuilder builder = RmsNormChainModel(RmsNormCase());
  const std::vector<float> serial = FirstOutput(builder);
  std::vector<std::vector<float>> results(4);
  std::vector<std::thread> threads;
  for (std::vector<float>& result : results) {
    threads.emplace_back([&builder, &result] { result = FirstOutput(builder); });
  }
  for (std::thread& t : threads) t.join();
  for (const std::vector<float>& result : results) EXPECT_EQ(result, serial);
}

}  // namespace
}  // namespace nrtsim
