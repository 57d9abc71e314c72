#include "model_text.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nrtsim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kRmsNorm[] = R"(# RMSNorm as docs/model_format.md spells it.
model rmsnorm_compiled
input x bf16 [4,512]
input weight bf16 [512]
const two fp32 [1] = 2.0          # unused, but constants may be
output y bf16 [4,512]

sq = mul(x, x)
ms = mean(sq, axis=-1)
ms_eps = add_scalar(ms, 1e-6)
r = rsqrt(ms_eps)
xn = mul(x, r)
y = mul(xn, weight)
)";

Model Parse(const std::string& text) {
  absl::StatusOr<Model> model = ParseModelText(text);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : Model();
}

std::string Error(const std::string& text) {
  absl::StatusOr<Model> model = ParseModelText(text);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
  return std::string(model.status().message());
}

// A model with the given statements between one input and one output.
std::string WithHeader(const std::string& body) {
  return "model m\ninput x fp32 [4,8]\noutput y fp32 [4,8]\n" + body;
}

const TensorDef& Tensor(const Model& model, const std::string& name) {
  for (const TensorDef& t : model.tensors) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  static const TensorDef kNone;
  return kNone;
}

TEST(ParseModelTextTest, ParsesTheRmsNormExample) {
  const Model m = Parse(kRmsNorm);
  EXPECT_EQ(m.name, "rmsnorm_compiled");
  std::vector<std::string> names;
  for (const TensorDef& t : m.tensors) names.push_back(t.name);
  EXPECT_THAT(names, ElementsAre("x", "weight", "two", "y", "sq", "ms", "ms_eps", "r", "xn"));
  EXPECT_THAT(m.InputIndices(), ElementsAre(0, 1));
  EXPECT_THAT(m.OutputIndices(), ElementsAre(3));
  EXPECT_EQ(Tensor(m, "two").kind, TensorKind::kConstant);
  EXPECT_EQ(Tensor(m, "sq").kind, TensorKind::kIntermediate);
  ASSERT_EQ(m.ops.size(), 6u);
  EXPECT_EQ(m.ops[0].kind, OpKind::kMul);
  EXPECT_THAT(m.ops[0].inputs, ElementsAre(0, 0));
  EXPECT_EQ(m.ops[0].output, 4u);
  EXPECT_EQ(m.ops[1].kind, OpKind::kMean);
  EXPECT_EQ(m.ops[1].axis, -1);
  EXPECT_EQ(m.ops[2].kind, OpKind::kAddScalar);
  EXPECT_FLOAT_EQ(m.ops[2].scalar, 1e-6f);
  EXPECT_EQ(m.ops[5].kind, OpKind::kMul);
  EXPECT_THAT(m.ops[5].inputs, ElementsAre(8, 1));
  EXPECT_EQ(m.ops[5].output, 3u);
}

TEST(ParseModelTextTest, IntermediatesTakeTheFirstInputsDtypeAndTheInferredShape) {
  const Model m = Parse(kRmsNorm);
  EXPECT_EQ(Tensor(m, "sq").dtype, DType::kBFloat16);
  EXPECT_THAT(Tensor(m, "sq").shape, ElementsAre(4, 512));
  EXPECT_THAT(Tensor(m, "ms").shape, ElementsAre(4, 1));
  EXPECT_THAT(Tensor(m, "xn").shape, ElementsAre(4, 512));
}

TEST(ParseModelTextTest, InfersShapesForEachRule) {
  const Model m = Parse(R"(model shapes
input a fp32 [4,8]
input b bf16 [8,16]
input row fp32 [3,1,8]
input w fp32 [8]
output out fp32 [4,16]
bc = add(row, a)        # [3,1,8] + [4,8] -> [3,4,8]
m0 = mean(a, axis=0)
m1 = mean(bc, axis=1)
mm = matmul(a, b)
sm = softmax(bc)
g = gelu(bc)
n = rms_norm(a, w, 1e-5)
r = relu(bc)
tb = threshold_backward(w, bc, 0)   # [8] against [3,4,8] -> [3,4,8]
ab = abs(mm)
tr = transpose(mm)
out = copy(mm)
)");
  EXPECT_THAT(Tensor(m, "r").shape, ElementsAre(3, 4, 8));
  EXPECT_THAT(Tensor(m, "tb").shape, ElementsAre(3, 4, 8));
  EXPECT_THAT(Tensor(m, "ab").shape, ElementsAre(4, 16));
  EXPECT_THAT(Tensor(m, "tr").shape, ElementsAre(16, 4));
  EXPECT_THAT(Tensor(m, "bc").shape, ElementsAre(3, 4, 8));
  EXPECT_THAT(Tensor(m, "m0").shape, ElementsAre(1, 8));
  EXPECT_THAT(Tensor(m, "m1").shape, ElementsAre(3, 1, 8));
  EXPECT_THAT(Tensor(m, "mm").shape, ElementsAre(4, 16));
  EXPECT_EQ(Tensor(m, "mm").dtype, DType::kFloat32);
  EXPECT_THAT(Tensor(m, "sm").shape, ElementsAre(3, 4, 8));
  EXPECT_THAT(Tensor(m, "g").shape, ElementsAre(3, 4, 8));
  EXPECT_THAT(Tensor(m, "n").shape, ElementsAre(4, 8));
}

TEST(ParseModelTextTest, AcceptsScalarsPositionallyOrByKeyword) {
  const Model m = Parse(R"(model scalars
input x fp32 [4,8]
input w fp32 [8]
output y fp32 [4,1]
a = mul_scalar(x, -2.5)
b = mul_scalar(a, scalar=3)
c = add_scalar(b, eps=0.5)
d = rms_norm(c, w, eps=1e-6)
e = rms_norm(d, w, 1e-5)
f = threshold_backward(e, x, threshold=0.25)
y = mean(f, axis=1)
)");
  ASSERT_EQ(m.ops.size(), 7u);
  EXPECT_FLOAT_EQ(m.ops[0].scalar, -2.5f);
  EXPECT_FLOAT_EQ(m.ops[1].scalar, 3.0f);
  EXPECT_FLOAT_EQ(m.ops[2].scalar, 0.5f);
  EXPECT_FLOAT_EQ(m.ops[3].scalar, 1e-6f);
  EXPECT_FLOAT_EQ(m.ops[4].scalar, 1e-5f);
  EXPECT_FLOAT_EQ(m.ops[5].scalar, 0.25f);
  EXPECT_EQ(m.ops[6].axis, 1);
}

TEST(ParseModelTextTest, MeanAxisDefaultsToTheLastAxis) {
  const Model m = Parse("model m\ninput x fp32 [4,8]\noutput y fp32 [4,1]\ny = mean(x)\n");
  ASSERT_EQ(m.ops.size(), 1u);
  EXPECT_EQ(m.ops[0].axis, -1);
}

TEST(ParseModelTextTest, AllReduceTakesItsReduction) {
  const Model m = Parse(R"(model m
input x fp32 [4,8]
output y fp32 [4,8]
a = all_reduce(x)
b = all_reduce(a, op=max)
y = all_reduce(b, op=min)
)");
  ASSERT_EQ(m.ops.size(), 3u);
  EXPECT_EQ(m.ops[0].axis, NRT_OP_ADD);  // the default, as torch.distributed's SUM
  EXPECT_EQ(m.ops[1].axis, NRT_OP_MAX);
  EXPECT_EQ(m.ops[2].axis, NRT_OP_MIN);
  EXPECT_THAT(Tensor(m, "a").shape, ElementsAre(4, 8));
  const std::string header = "model m\ninput x fp32 [4]\noutput y fp32 [4]\n";
  EXPECT_EQ(Error(header + "y = all_reduce(x, op=fma)\n"),
            "line 4: bad reduction 'fma' (add, max or min)");
  EXPECT_EQ(Error(header + "y = all_reduce(x, op=max, op=min)\n"), "line 4: op given twice");
  EXPECT_EQ(Error(header + "y = relu(x, op=max)\n"), "line 4: relu has no argument 'op'");
}

TEST(ParseModelTextTest, StoresConstantsInTheirDtype) {
  const Model m = Parse(R"(model consts
input x fp32 [2]
const f fp32 [2] = 1.0, -2
const h bf16 [3] = 1.0, 1.00390625, 1.01171875   # ties round to even
const z bf16 [2,2] = fill 0.5
const s fp32 [] = 3
output y fp32 [2]
y = mul(x, f)
)");
  EXPECT_THAT(Tensor(m, "f").data, ElementsAre(0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0));
  // 1.0 = 0x3f80; 1.00390625 = 0x3f808000 ties down to 0x3f80; 1.01171875 = 0x3f818000 ties
  // up to the even 0x3f82.
  EXPECT_THAT(Tensor(m, "h").data, ElementsAre(0x80, 0x3f, 0x80, 0x3f, 0x82, 0x3f));
  EXPECT_THAT(Tensor(m, "z").data, ElementsAre(0x00, 0x3f, 0x00, 0x3f, 0x00, 0x3f, 0x00, 0x3f));
  EXPECT_TRUE(Tensor(m, "s").shape.empty());
  EXPECT_THAT(Tensor(m, "s").data, ElementsAre(0x00, 0x00, 0x40, 0x40));
}

TEST(ParseModelTextTest, IgnoresCommentsBlankLinesAndSpacing) {
  const Model m = Parse(
      "# header\r\n\r\n  model   spaced  \r\n\tinput x fp32 [ 4 , 8 ]  # trailing\r\n"
      "output y fp32 [4,8]\r\ny=gelu( x )\r\n# end");
  EXPECT_EQ(m.name, "spaced");
  EXPECT_THAT(Tensor(m, "x").shape, ElementsAre(4, 8));
  EXPECT_EQ(m.ops.size(), 1u);
}

TEST(ParseModelTextTest, AllowsATensorNamedLikeAKeyword) {
  const Model m = Parse(WithHeader("model = copy(x)\ny = gelu(model)\n"));
  EXPECT_EQ(m.ops.size(), 2u);
}

TEST(ParseModelTextTest, RequiresTheModelStatementFirst) {
  EXPECT_EQ(Error(""), "line 1: missing 'model NAME' statement");
  EXPECT_EQ(Error("# nothing\n\n"), "line 1: missing 'model NAME' statement");
  EXPECT_EQ(Error("\ninput x fp32 [1]\nmodel m\n"),
            "line 2: expected 'model NAME' before anything else");
  EXPECT_EQ(Error("y = copy(x)\n"), "line 1: expected 'model NAME' before anything else");
  EXPECT_EQ(Error("model a\nmodel b\n"), "line 2: the model is already named on line 1");
  EXPECT_EQ(Error("model two words\n"), "line 1: bad model name 'two words'");
}

TEST(ParseModelTextTest, RejectsBadDeclarations) {
  EXPECT_EQ(Error("model m\ninput x fp16 [4]\n"),
            "line 2: unknown dtype 'fp16' (expected fp32 or bf16)");
  EXPECT_EQ(Error("model m\ninput x fp32 4,8\n"),
            "line 2: expected a shape like [4,512], got '4,8'");
  EXPECT_EQ(Error("model m\ninput x fp32 [4,0]\n"),
            "line 2: bad dimension '0' (expected a positive integer)");
  EXPECT_EQ(Error("model m\ninput x fp32 [4,-1]\n"),
            "line 2: bad dimension '-1' (expected a positive integer)");
  EXPECT_EQ(Error("model m\ninput x fp32 [4] junk\n"), "line 2: unexpected 'junk' after the shape");
  EXPECT_EQ(Error("model m\ninput 9x fp32 [4]\n"), "line 2: bad tensor name '9x'");
  EXPECT_EQ(Error("model m\ninput Inf fp32 [4]\n"), "line 2: bad tensor name 'Inf'");
  EXPECT_EQ(Error("model m\ninputs x fp32 [4]\n"),
            "line 2: unknown statement 'inputs' (expected model, input, output, const or NAME "
            "= op(...))");
  EXPECT_EQ(Error("model m\ninput x fp32 [4]\noutput x fp32 [4]\n"),
            "line 3: redefinition of 'x' (first defined on line 2)");
}

TEST(ParseModelTextTest, RejectsBadConstants) {
  EXPECT_EQ(Error("model m\nconst c fp32 [2] = 1\n"), "line 2: constant c needs 2 values, got 1");
  EXPECT_EQ(Error("model m\nconst c fp32 [2] = 1, two\n"), "line 2: bad number 'two'");
  EXPECT_EQ(Error("model m\nconst c fp32 [2] = fill\n"), "line 2: bad number ''");
  EXPECT_EQ(Error("model m\nconst c fp32 [1] = 1e40\n"), "line 2: bad number '1e40'");
  EXPECT_EQ(Error("model m\nconst c fp32 [1] = inf\n"), "line 2: bad number 'inf'");
  EXPECT_EQ(Error("model m\nconst c fp32 [1]\n"), "line 2: expected '= values' after the shape");
  // Refused before anything is allocated for it.
  EXPECT_EQ(Error("model m\nconst c fp32 [65536,65536] = fill 0\n"),
            "line 2: constant c has more than 2^28 elements");
}

// Found by the model text fuzzer: a few lines of `fill` could ask for any amount of memory
// before ValidateModel() added up the tensors, and filled byte by byte (a 2^28-element
// constant took seconds). Now the constant that takes the model past the device's 2 GiB is
// refused before its bytes exist, and a fill is a few large copies.
TEST(ParseModelTextTest, RefusesConstantsPastTwoGibBeforeMakingThem) {
  EXPECT_EQ(Error("model m\ninput a fp32 [268435456]\ninput b fp32 [16384,16384]\n"
                  "const c fp32 [2] = fill 1\n"),
            "line 4: constant c: tensors up to here need 2147483656 bytes (at most 2 GiB)");
  // A tensor over 2^28 elements is not counted: ValidateModel() names it, as before.
  EXPECT_EQ(Error("model m\ninput a bf16 [2,268435456]\nconst c bf16 [3] = 1, 2, 3\n"),
            "line 2: tensor 0 (a): shape [2,268435456] has more than 2^28 elements");
}

TEST(ParseModelTextTest, FillsEveryElement) {
  const Model m = Parse(R"(model fill
input x fp32 [3,1000,7]
const w fp32 [3,1000,7] = fill 1.5
const v bf16 [5] = fill -2
output y fp32 [3,1000,7]
y = mul(x, w)
)");
  const std::vector<uint8_t>& w = Tensor(m, "w").data;
  ASSERT_EQ(w.size(), 3u * 1000 * 7 * 4);
  for (size_t i = 0; i < w.size(); i += 4) {
    ASSERT_THAT(std::vector<uint8_t>(w.begin() + i, w.begin() + i + 4),
                ElementsAre(0x00, 0x00, 0xc0, 0x3f))
        << "element " << i / 4;
  }
  EXPECT_THAT(Tensor(m, "v").data,
              ElementsAre(0x00, 0xc0, 0x00, 0xc0, 0x00, 0xc0, 0x00, 0xc0, 0x00, 0xc0));
}

TEST(ParseModelTextTest, RejectsBadOpStatements) {
  EXPECT_EQ(Error(WithHeader("y = frob(x)\n")), "line 4: unknown op 'frob'");
  EXPECT_EQ(Error(WithHeader("y = gelu(z)\n")), "line 4: unknown tensor 'z'");
  EXPECT_EQ(Error(WithHeader("y = gelu x\n")), "line 4: expected op(args) after '=', got 'gelu x'");
  EXPECT_EQ(Error(WithHeader("y = mul(x)\n")), "line 4: mul takes 2 tensor arguments, got 1");
  EXPECT_EQ(Error(WithHeader("y = gelu(x, x)\n")), "line 4: gelu takes 1 tensor argument, got 2");
  EXPECT_EQ(Error(WithHeader("y = gelu(x,)\n")), "line 4: empty argument");
  EXPECT_EQ(Error(WithHeader("y = add_scalar(x)\n")),
            "line 4: add_scalar needs a scalar, e.g. add_scalar(x, 2.0)");
  EXPECT_EQ(Error(WithHeader("y = threshold_backward(x, x)\n")),
            "line 4: threshold_backward needs a scalar, e.g. threshold_backward(grad, x, 0)");
  EXPECT_EQ(Error(WithHeader("y = relu(x, 0)\n")), "line 4: relu takes no scalar, got '0'");
  EXPECT_EQ(Error(WithHeader("y = mul(x, 2)\n")), "line 4: mul takes no scalar, got '2'");
  EXPECT_EQ(Error(WithHeader("y = add_scalar(x, 1, 2)\n")), "line 4: add_scalar takes one scalar");
  EXPECT_EQ(Error(WithHeader("y = add_scalar(1, x)\n")), "line 4: tensor 'x' after the scalar");
  EXPECT_EQ(Error(WithHeader("y = add_scalar(x, 1e)\n")), "line 4: bad number '1e'");
  EXPECT_EQ(Error(WithHeader("y = mul_scalar(x, nan)\n")), "line 4: bad number 'nan'");
  EXPECT_EQ(Error(WithHeader("y = mul_scalar(x, -inf)\n")), "line 4: bad number '-inf'");
  EXPECT_EQ(Error(WithHeader("y = gelu(x, axis=0)\n")), "line 4: gelu has no argument 'axis'");
  EXPECT_EQ(Error(WithHeader("y = mean(x, axis=one)\n")), "line 4: bad axis 'one'");
  EXPECT_EQ(Error(WithHeader("y = mean(x, axis=0, axis=1)\n")), "line 4: axis given twice");
}

TEST(ParseModelTextTest, RejectsBadAssignments) {
  EXPECT_EQ(Error(WithHeader("x = gelu(x)\n")),
            "line 4: cannot assign to 'x', defined on line 2 (only outputs are declared before "
            "they are assigned)");
  EXPECT_EQ(Error(WithHeader("t = gelu(x)\nt = gelu(x)\n")),
            "line 5: cannot assign to 't', defined on line 4 (only outputs are declared before "
            "they are assigned)");
  EXPECT_EQ(Error(WithHeader("y = gelu(x)\ny = copy(x)\n")),
            "line 5: output 'y' is already assigned on line 4");
}

TEST(ParseModelTextTest, ReportsValidationErrorsAtTheirLine) {
  EXPECT_EQ(Error("model m\ninput x fp32 [4,512]\ninput w fp32 [3]\noutput y fp32 [4,512]\n"
                  "y = mul(x, w)\n"),
            "line 5: op 0 (mul): shapes [4,512] and [3] do not broadcast");
  EXPECT_EQ(Error(WithHeader("y = mean(x)\n")),
            "line 4: op 0 (mean): output tensor 1 (y) has shape [4,8], expected [4,1]");
  EXPECT_EQ(Error(WithHeader("t = gelu(x)\n")),
            "line 3: tensor 1 (y): output is never written by an op");
  EXPECT_EQ(Error(WithHeader("t = mean(x, axis=2)\ny = copy(x)\n")),
            "line 4: op 0 (mean): axis 2 is out of range for shape [4,8]");
  EXPECT_EQ(Error("model m\ninput x fp32 [1,1,1,1,1,1,1,1,1]\n"),
            "line 2: tensor 0 (x): rank 9 (at most 8)");
  EXPECT_EQ(Error("model m\ninput x fp32 [4]\n"), "model has no outputs");
  EXPECT_THAT(Error("model " + std::string(300, 'm') + "\ninput x fp32 [4]\n"),
              HasSubstr("line 1: model: name is 300 bytes"));
}

TEST(ParseModelTextTest, OutputsMayBeReadAfterTheyAreWritten) {
  const Model m = Parse(R"(model two_outputs
input x fp32 [4,8]
output a fp32 [4,8]
output b fp32 [4,8]
a = gelu(x)
b = mul(a, a)
)");
  EXPECT_THAT(m.OutputIndices(), ElementsAre(1, 2));
  EXPECT_EQ(Error(R"(model early_read
input x fp32 [4,8]
output a fp32 [4,8]
output b fp32 [4,8]
b = mul(a, a)
a = gelu(x)
)"),
            "line 5: op 0 (mul): reads tensor 1 (a), which no earlier op writes");
}

}  // namespace
}  // namespace nrtsim
