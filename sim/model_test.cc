#include "model.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nrtsim {
namespace {

using ::testing::HasSubstr;

uint32_t AddTensor(Model* model, const std::string& name, TensorKind kind,
                   std::vector<uint32_t> shape, DType dtype = DType::kFloat32) {
  TensorDef t;
  t.name = name;
  t.kind = kind;
  t.dtype = dtype;
  t.shape = std::move(shape);
  if (kind == TensorKind::kConstant) t.data.assign(t.SizeBytes(), 0);
  model->tensors.push_back(std::move(t));
  return static_cast<uint32_t>(model->tensors.size() - 1);
}

OpDef& AddOp(Model* model, OpKind kind, std::vector<uint32_t> inputs, uint32_t output) {
  OpDef op;
  op.kind = kind;
  op.inputs = std::move(inputs);
  op.output = output;
  model->ops.push_back(std::move(op));
  return model->ops.back();
}

// The RMSNorm of docs/model_format.md, spelled out op by op.
Model RmsNormModel() {
  Model m;
  m.name = "rmsnorm_compiled";
  const uint32_t x = AddTensor(&m, "x", TensorKind::kInput, {4, 512}, DType::kBFloat16);
  const uint32_t w = AddTensor(&m, "weight", TensorKind::kInput, {512}, DType::kBFloat16);
  const uint32_t y = AddTensor(&m, "y", TensorKind::kOutput, {4, 512}, DType::kBFloat16);
  const uint32_t sq = AddTensor(&m, "sq", TensorKind::kIntermediate, {4, 512});
  const uint32_t ms = AddTensor(&m, "ms", TensorKind::kIntermediate, {4, 1});
  const uint32_t eps = AddTensor(&m, "ms_eps", TensorKind::kIntermediate, {4, 1});
  const uint32_t r = AddTensor(&m, "r", TensorKind::kIntermediate, {4, 1});
  const uint32_t xn = AddTensor(&m, "xn", TensorKind::kIntermediate, {4, 512});
  AddOp(&m, OpKind::kMul, {x, x}, sq);
  AddOp(&m, OpKind::kMean, {sq}, ms).axis = -1;
  AddOp(&m, OpKind::kAddScalar, {ms}, eps).scalar = 1e-6f;
  AddOp(&m, OpKind::kRsqrt, {eps}, r);
  AddOp(&m, OpKind::kMul, {x, r}, xn);
  AddOp(&m, OpKind::kMul, {xn, w}, y);
  return m;
}

// A one-op model: in (shape_a) [, second input (shape_b)] -> out (shape_out).
Model OneOp(OpKind kind, std::vector<uint32_t> shape_a, std::vector<uint32_t> shape_b,
            std::vector<uint32_t> shape_out) {
  Model m;
  m.name = "one_op";
  std::vector<uint32_t> inputs = {AddTensor(&m, "a", TensorKind::kInput, shape_a)};
  if (OpArity(kind) == 2) inputs.push_back(AddTensor(&m, "b", TensorKind::kInput, shape_b));
  const uint32_t out = AddTensor(&m, "out", TensorKind::kOutput, shape_out);
  AddOp(&m, kind, inputs, out);
  return m;
}

// The validation error for `model`, checked to be a one-line InvalidArgument.
std::string Error(const Model& model) {
  absl::Status status = ValidateModel(model);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(std::string(status.message()).find('\n'), std::string::npos) << status;
  return std::string(status.message());
}

TEST(ValidateModelTest, AcceptsRmsNormModel) {
  EXPECT_TRUE(ValidateModel(RmsNormModel()).ok()) << ValidateModel(RmsNormModel());
}

TEST(ValidateModelTest, AcceptsEachOpWithItsShapeRule) {
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kAdd, {4, 1, 3}, {5, 1}, {4, 5, 3})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kSub, {}, {2, 3}, {2, 3})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kDiv, {2, 3}, {2, 3}, {2, 3})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kMulScalar, {7}, {}, {7})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kGelu, {2, 8}, {}, {2, 8})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kCopy, {}, {}, {})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kSoftmax, {3, 5}, {}, {3, 5})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kMatmul, {4, 8}, {8, 16}, {4, 16})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kRmsNorm, {4, 8}, {8}, {4, 8})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kRelu, {2, 8}, {}, {2, 8})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kAbs, {}, {}, {})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kThresholdBackward, {1, 8}, {4, 8}, {4, 8})).ok());
  EXPECT_TRUE(ValidateModel(OneOp(OpKind::kTranspose, {3, 5}, {}, {5, 3})).ok());
  Model mean = OneOp(OpKind::kMean, {2, 3, 4}, {}, {2, 1, 4});
  mean.ops[0].axis = 1;
  EXPECT_TRUE(ValidateModel(mean).ok());
  mean.ops[0].axis = -2;
  EXPECT_TRUE(ValidateModel(mean).ok());
}

// a [4,512] * two (constant [1]) -> t (intermediate); out = gelu(t).
Model ConstantModel() {
  Model m;
  m.name = "scaled_gelu";
  const uint32_t a = AddTensor(&m, "a", TensorKind::kInput, {4, 512});
  const uint32_t two = AddTensor(&m, "two", TensorKind::kConstant, {1}, DType::kBFloat16);
  const uint32_t t = AddTensor(&m, "t", TensorKind::kIntermediate, {4, 512});
  const uint32_t out = AddTensor(&m, "out", TensorKind::kOutput, {4, 512});
  AddOp(&m, OpKind::kMul, {a, two}, t);
  AddOp(&m, OpKind::kGelu, {t}, out);
  return m;
}

TEST(ValidateModelTest, AcceptsConstantsAndIntermediates) {
  EXPECT_TRUE(ValidateModel(ConstantModel()).ok()) << ValidateModel(ConstantModel());
}

TEST(ValidateModelTest, RejectsBadModelNames) {
  Model m = RmsNormModel();
  m.name = "";
  EXPECT_THAT(Error(m), HasSubstr("model: name is empty"));
  m.name = std::string(256, 'a');
  EXPECT_THAT(Error(m), HasSubstr("model: name is 256 bytes (at most 255)"));
  m.name = std::string(255, 'a');
  EXPECT_TRUE(ValidateModel(m).ok());
  m.name = "two words";
  EXPECT_THAT(Error(m), HasSubstr("model: name has a space or non-printable byte at offset 3"));
  m.name = "line\nbreak";
  EXPECT_THAT(Error(m), HasSubstr("non-printable byte at offset 4"));
  m.name = "caf\xc3\xa9";
  EXPECT_THAT(Error(m), HasSubstr("non-printable byte at offset 3"));
}

TEST(ValidateModelTest, RejectsBadAndDuplicateTensorNames) {
  Model m = RmsNormModel();
  m.tensors[1].name = "";
  EXPECT_THAT(Error(m), HasSubstr("tensor 1: name is empty"));
  m.tensors[1].name = "x\t";
  EXPECT_THAT(Error(m), HasSubstr("tensor 1: name has a space or non-printable byte"));
  m.tensors[1].name = "x";
  EXPECT_THAT(Error(m), HasSubstr("tensor 1 (x): name is used by an earlier tensor"));
}

TEST(ValidateModelTest, RequiresAnInputAndAnOutput) {
  Model m = OneOp(OpKind::kCopy, {2}, {}, {2});
  m.tensors[0].kind = TensorKind::kConstant;
  m.tensors[0].data.assign(8, 0);
  EXPECT_THAT(Error(m), HasSubstr("model has no inputs"));
  m = OneOp(OpKind::kCopy, {2}, {}, {2});
  m.tensors[1].kind = TensorKind::kIntermediate;
  EXPECT_THAT(Error(m), HasSubstr("model has no outputs"));
}

TEST(ValidateModelTest, RejectsUnknownEnums) {
  Model m = RmsNormModel();
  m.tensors[0].dtype = static_cast<DType>(NRT_DTYPE_FLOAT16);
  EXPECT_THAT(Error(m), HasSubstr("tensor 0 (x): unknown dtype 7"));
  m = RmsNormModel();
  m.tensors[0].kind = static_cast<TensorKind>(9);
  EXPECT_THAT(Error(m), HasSubstr("tensor 0 (x): unknown kind 9"));
  m = RmsNormModel();
  m.ops[2].kind = static_cast<OpKind>(99);
  EXPECT_THAT(Error(m), HasSubstr("op 2: unknown kind 99"));
}

TEST(ValidateModelTest, RejectsBadShapes) {
  Model m = OneOp(OpKind::kCopy, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {}, {1});
  EXPECT_THAT(Error(m), HasSubstr("tensor 0 (a): rank 9 (at most 8)"));
  m = OneOp(OpKind::kCopy, {4, 0}, {}, {4, 0});
  EXPECT_THAT(Error(m), HasSubstr("tensor 0 (a): dimension 1 is 0"));
  m = OneOp(OpKind::kCopy, {1u << 14, (1u << 14) + 1}, {}, {1});
  EXPECT_THAT(Error(m), HasSubstr("tensor 0 (a): shape [16384,16385] has more than 2^28 elements"));
  m = OneOp(OpKind::kCopy, {1u << 14, 1u << 14}, {}, {1u << 14, 1u << 14});
  EXPECT_TRUE(ValidateModel(m).ok()) << ValidateModel(m);  // exactly 2^28 is allowed
}

TEST(ValidateModelTest, ElementCountCannotOverflow) {
  // 0xFFFFFFFF^8 wraps a 64-bit product many times over; the check must stop early.
  std::vector<uint32_t> huge(8, 0xFFFFFFFFu);
  Model m = OneOp(OpKind::kCopy, huge, {}, huge);
  EXPECT_THAT(Error(m), HasSubstr("tensor 0 (a): shape"));
  EXPECT_THAT(Error(m), HasSubstr("has more than 2^28 elements"));
  // 2^16 * 2^16 * 2^32 wraps to exactly 0 in 64 bits.
  m = OneOp(OpKind::kCopy, {1u << 16, 1u << 16, 0xFFFFFFFFu}, {}, {1});
  EXPECT_THAT(Error(m), HasSubstr("has more than 2^28 elements"));
}

TEST(ValidateModelTest, RejectsModelsOverTwoGibibytes) {
  // Each tensor is 2^28 fp32 elements = 1 GiB; two fit, three do not.
  const std::vector<uint32_t> gib = {1u << 14, 1u << 14};
  Model m = OneOp(OpKind::kCopy, gib, {}, gib);
  EXPECT_TRUE(ValidateModel(m).ok());
  AddTensor(&m, "extra", TensorKind::kIntermediate, gib);
  EXPECT_THAT(Error(m), HasSubstr("tensor 2 (extra): tensors up to here need 3221225472 bytes "
                                  "(at most 2 GiB)"));
}

TEST(ValidateModelTest, ChecksConstantData) {
  Model m = ConstantModel();
  m.tensors[1].data.resize(1);
  EXPECT_THAT(Error(m), HasSubstr("tensor 1 (two): constant has 1 data bytes, its shape needs 2"));
  m.tensors[1].data.resize(4);
  EXPECT_THAT(Error(m), HasSubstr("constant has 4 data bytes, its shape needs 2"));
  m.tensors[1].data.resize(2);
  EXPECT_TRUE(ValidateModel(m).ok());
  m.tensors[2].data.resize(16);
  EXPECT_THAT(Error(m), HasSubstr("tensor 2 (t): only constants carry data"));
}

TEST(ValidateModelTest, RejectsIndicesOutOfRangeAndWrongArity) {
  Model m = RmsNormModel();
  m.ops[1].inputs[0] = 8;
  EXPECT_THAT(Error(m), HasSubstr("op 1 (mean): input 0 is tensor 8, model has 8"));
  m = RmsNormModel();
  m.ops[1].output = 100;
  EXPECT_THAT(Error(m), HasSubstr("op 1 (mean): output is tensor 100, model has 8"));
  m = RmsNormModel();
  m.ops[0].inputs.push_back(0);
  EXPECT_THAT(Error(m), HasSubstr("op 0 (mul): has 3 inputs, expected 2"));
  m = RmsNormModel();
  m.ops[3].inputs.clear();
  EXPECT_THAT(Error(m), HasSubstr("op 3 (rsqrt): has 0 inputs, expected 1"));
}

TEST(ValidateModelTest, RejectsWritesToInputsAndConstants) {
  Model m = RmsNormModel();
  m.ops[0].output = 1;
  EXPECT_THAT(Error(m), HasSubstr("op 0 (mul): writes tensor 1 (weight), which is an input"));
  m = OneOp(OpKind::kCopy, {2}, {}, {2});
  const uint32_t c = AddTensor(&m, "c", TensorKind::kConstant, {2});
  AddOp(&m, OpKind::kCopy, {0}, c);
  EXPECT_THAT(Error(m), HasSubstr("op 1 (copy): writes tensor 2 (c), which is an input or "
                                  "constant"));
}

TEST(ValidateModelTest, RejectsTensorsWrittenTwice) {
  Model m = RmsNormModel();
  AddOp(&m, OpKind::kCopy, {0}, 2);
  EXPECT_THAT(Error(m), HasSubstr("op 6 (copy): writes tensor 2 (y), already written by op 5"));
}

TEST(ValidateModelTest, RejectsReadsBeforeWrites) {
  Model m = RmsNormModel();
  std::swap(m.ops[0], m.ops[1]);  // mean now reads sq before the mul that writes it
  EXPECT_THAT(Error(m), HasSubstr("op 0 (mean): reads tensor 3 (sq), which no earlier op writes"));
  m = OneOp(OpKind::kCopy, {2}, {}, {2});
  m.ops[0].inputs[0] = 1;  // reads its own output
  EXPECT_THAT(Error(m), HasSubstr("op 0 (copy): reads tensor 1 (out), which no earlier op"));
  m = OneOp(OpKind::kCopy, {2}, {}, {2});
  AddTensor(&m, "never", TensorKind::kIntermediate, {2});
  m.ops[0].inputs[0] = 2;
  EXPECT_THAT(Error(m), HasSubstr("reads tensor 2 (never), which no earlier op writes"));
}

TEST(ValidateModelTest, RequiresEveryOutputWritten) {
  Model m = RmsNormModel();
  AddTensor(&m, "y2", TensorKind::kOutput, {4, 512});
  EXPECT_THAT(Error(m), HasSubstr("tensor 8 (y2): output is never written by an op"));
}

TEST(ValidateModelTest, ChecksBroadcasting) {
  EXPECT_EQ(Error(OneOp(OpKind::kMul, {4, 512}, {3}, {4, 512})),
            "op 0 (mul): shapes [4,512] and [3] do not broadcast");
  EXPECT_THAT(Error(OneOp(OpKind::kAdd, {4, 1}, {1, 5}, {4, 1})),
              HasSubstr("op 0 (add): output tensor 2 (out) has shape [4,1], expected [4,5]"));
  EXPECT_THAT(Error(OneOp(OpKind::kSub, {3}, {2, 3}, {3})), HasSubstr("expected [2,3]"));
  EXPECT_EQ(Error(OneOp(OpKind::kThresholdBackward, {4, 8}, {3}, {4, 8})),
            "op 0 (threshold_backward): shapes [4,8] and [3] do not broadcast");
}

TEST(ValidateModelTest, ChecksSameShapeOps) {
  for (OpKind kind : {OpKind::kMulScalar, OpKind::kAddScalar, OpKind::kRsqrt, OpKind::kGelu,
                      OpKind::kCopy, OpKind::kSoftmax, OpKind::kRelu, OpKind::kAbs}) {
    EXPECT_THAT(Error(OneOp(kind, {4, 8}, {}, {8, 4})),
                HasSubstr("has shape [8,4], expected [4,8]"))
        << OpKindName(kind);
  }
  EXPECT_THAT(Error(OneOp(OpKind::kSoftmax, {}, {}, {})),
              HasSubstr("op 0 (softmax): input is a scalar"));
}

TEST(ValidateModelTest, ChecksMeanAxis) {
  Model m = OneOp(OpKind::kMean, {2, 3}, {}, {2, 1});
  m.ops[0].axis = 2;
  EXPECT_THAT(Error(m), HasSubstr("op 0 (mean): axis 2 is out of range for shape [2,3]"));
  m.ops[0].axis = -3;
  EXPECT_THAT(Error(m), HasSubstr("axis -3 is out of range"));
  m.ops[0].axis = 0;
  EXPECT_THAT(Error(m), HasSubstr("has shape [2,1], expected [1,3]"));
  Model scalar = OneOp(OpKind::kMean, {}, {}, {});
  EXPECT_THAT(Error(scalar), HasSubstr("axis -1 is out of range for shape []"));
}

TEST(ValidateModelTest, ChecksRmsNormWeight) {
  EXPECT_THAT(Error(OneOp(OpKind::kRmsNorm, {4, 8}, {4}, {4, 8})),
              HasSubstr("op 0 (rms_norm): weight shape [4] does not match the last axis of "
                        "[4,8]"));
  EXPECT_THAT(Error(OneOp(OpKind::kRmsNorm, {4, 8}, {1, 8}, {4, 8})),
              HasSubstr("weight shape [1,8]"));
  EXPECT_THAT(Error(OneOp(OpKind::kRmsNorm, {}, {1}, {})), HasSubstr("weight shape [1]"));
  EXPECT_THAT(Error(OneOp(OpKind::kRmsNorm, {4, 8}, {8}, {4, 1})), HasSubstr("expected [4,8]"));
}

TEST(ValidateModelTest, ChecksMatmulShapes) {
  EXPECT_THAT(Error(OneOp(OpKind::kMatmul, {4, 8}, {7, 16}, {4, 16})),
              HasSubstr("op 0 (matmul): cannot multiply [4,8] by [7,16]"));
  EXPECT_THAT(Error(OneOp(OpKind::kMatmul, {2, 4, 8}, {8, 16}, {4, 16})),
              HasSubstr("cannot multiply [2,4,8] by [8,16]"));
  EXPECT_THAT(Error(OneOp(OpKind::kMatmul, {8}, {8, 16}, {16})), HasSubstr("cannot multiply"));
  EXPECT_THAT(Error(OneOp(OpKind::kMatmul, {4, 8}, {8, 16}, {16, 4})),
              HasSubstr("expected [4,16]"));
}

TEST(ValidateModelTest, ChecksTransposeShapes) {
  EXPECT_EQ(Error(OneOp(OpKind::kTranspose, {2, 3, 4}, {}, {4, 3, 2})),
            "op 0 (transpose): transposes 2-D tensors, got [2,3,4]");
  EXPECT_THAT(Error(OneOp(OpKind::kTranspose, {8}, {}, {8})), HasSubstr("got [8]"));
  EXPECT_THAT(Error(OneOp(OpKind::kTranspose, {3, 5}, {}, {3, 5})),
              HasSubstr("has shape [3,5], expected [5,3]"));
}

TEST(ValidateModelTest, ChecksAllReduce) {
  Model m = OneOp(OpKind::kAllReduce, {4, 8}, {}, {4, 8});
  m.ops[0].axis = NRT_OP_ADD;
  EXPECT_TRUE(ValidateModel(m).ok()) << ValidateModel(m);
  m.ops[0].axis = NRT_OP_MIN;
  EXPECT_TRUE(ValidateModel(m).ok());
  EXPECT_EQ(FirstCollectiveOp(m), 0);
  EXPECT_EQ(FirstCollectiveOp(RmsNormModel()), -1);
  m.ops[0].axis = NRT_OP_FMA;
  EXPECT_EQ(Error(m), "op 0 (all_reduce): reduction 1 (add 0, max 2 or min 3, as nrt_op_type_t)");
  m.ops[0].axis = NRT_OP_ADD;
  m.tensors[1].dtype = DType::kBFloat16;
  EXPECT_EQ(Error(m), "op 0 (all_reduce): output tensor 1 (out) is bf16, its input fp32 (a "
                      "collective keeps the dtype)");
  EXPECT_THAT(Error(OneOp(OpKind::kAllReduce, {4, 8}, {}, {8})),
              HasSubstr("has shape [8], expected [4,8]"));
}

TEST(ValidateModelTest, RequiresFiniteScalars) {
  Model m = RmsNormModel();
  m.ops[2].scalar = std::numeric_limits<float>::infinity();
  EXPECT_THAT(Error(m), HasSubstr("op 2 (add_scalar): scalar is not finite"));
  m.ops[2].scalar = std::nanf("");
  EXPECT_THAT(Error(m), HasSubstr("op 2 (add_scalar): scalar is not finite"));
}

}  // namespace
}  // namespace nrtsim
