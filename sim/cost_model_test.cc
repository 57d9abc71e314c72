// The device cost model: the three public RMSNorm reference figures within 5%, and costs that
// grow with bytes and FLOPs the way the rates say.
#include "cost_model.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "model_text.h"

namespace nrtsim {
namespace {

Model Parse(const std::string& text) {
  absl::StatusOr<Model> model = ParseModelText(text);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : Model{};
}

double Us(uint64_t ns) { return ns / 1000.0; }

double ExecUs(const std::string& text, const DeviceConfig& config = DeviceConfig{}) {
  return Us(CostOfExecution(Parse(text), config).total_ns);
}

std::string Unary(const std::string& op, const std::string& in, const std::string& out) {
  return absl::StrFormat("model m\ninput a %s\noutput out %s\nout = %s\n", in, out, op);
}

std::string Binary(const std::string& a, const std::string& b, const std::string& out) {
  return absl::StrFormat("model m\ninput a %s\ninput b %s\noutput out %s\nout = mul(a, b)\n", a,
                         b, out);
}

// RMSNorm on 4x512 bf16, as the reference measured it (device time per forward pass).
TEST(CostModel, MatchesTheRmsNormReferenceWithinFivePercent) {
  const DeviceConfig config;
  const std::string x = "bf16 [4,512]", col = "bf16 [4,1]";
  const double naive =
      ExecUs(Binary(x, x, x)) +                                                // x*x
      ExecUs(Unary("mean(a, axis=-1)", x, col)) +                              // mean
      Us(HostDmaNs(2, config)) +                                               // eps to device
      ExecUs("model m\ninput a bf16 [4,1]\ninput b bf16 [1]\noutput out bf16 [4,1]\n"
             "out = add(a, b)\n") +                                            // + eps
      ExecUs(Unary("rsqrt(a)", col, col)) +                                    // rsqrt
      ExecUs(Binary(x, col, x)) +                                              // x * rms
      ExecUs(Binary(x, "bf16 [512]", x));                                      // * weight
  const double fused = ExecUs(
      "model m\ninput x bf16 [4,512]\ninput w bf16 [512]\noutput y bf16 [4,512]\n"
      "y = rms_norm(x, w, 1e-6)\n");
  const double compiled = ExecUs(
      "model m\ninput x bf16 [4,512]\ninput w bf16 [512]\noutput y bf16 [4,512]\n"
      "sq = mul(x, x)\nms = mean(sq, axis=-1)\nme = add_scalar(ms, 1e-6)\nr = rsqrt(me)\n"
      "xn = mul(x, r)\ny = mul(xn, w)\n");
  EXPECT_NEAR(naive, 2355.0, 0.05 * 2355.0);
  EXPECT_NEAR(fused, 403.3, 0.05 * 403.3);
  EXPECT_NEAR(compiled, 375.5, 0.05 * 375.5);
  EXPECT_LT(compiled, fused);
  EXPECT_GT(naive / compiled, 6.0);
}

TEST(CostModel, ExecutionIsLaunchThenInputsThenOpsThenOutputs) {
  const Model model = Parse(
      "model m\ninput a fp32 [8]\ninput b fp32 [8]\noutput out fp32 [8]\n"
      "t = add(a, b)\nout = gelu(t)\n");
  const ExecutionCost cost = CostOfExecution(model, DeviceConfig{});
  EXPECT_EQ(cost.launch_ns, 360000u);
  ASSERT_EQ(cost.io_dmas.size(), 3u);
  ASSERT_EQ(cost.ops.size(), 2u);
  EXPECT_EQ(cost.io_dmas[0].span.start_ns, cost.launch_ns);
  EXPECT_TRUE(cost.io_dmas[1].to_device);
  EXPECT_EQ(cost.ops[0].span.start_ns,
            cost.io_dmas[1].span.start_ns + cost.io_dmas[1].span.duration_ns);
  EXPECT_EQ(cost.ops[0].engine, Engine::kVector);
  EXPECT_EQ(cost.ops[1].engine, Engine::kScalar);
  EXPECT_FALSE(cost.io_dmas[2].to_device);
  EXPECT_EQ(cost.total_ns, cost.io_dmas[2].span.start_ns + cost.io_dmas[2].span.duration_ns);
}

TEST(CostModel, LargeInputsGrowWithBandwidthAndFlops) {
  DeviceConfig config;
  // Elementwise on 64 MiB of fp32 per operand: the op is bound by SBUF bandwidth (3 tensors of
  // 64 MiB at 1.4 TB/s beat 16.8 M elements at 179 per ns), and each tensor crosses HBM once.
  const double small = ExecUs(Binary("fp32 [4,512]", "fp32 [4,512]", "fp32 [4,512]"));
  const double big = ExecUs(Binary("fp32 [4096,4096]", "fp32 [4096,4096]", "fp32 [4096,4096]"));
  const double elems = 4096.0 * 4096.0;
  const double engine_us = elems / config.vector_elems_per_ns / 1000;
  const double sbuf_us = 3 * elems * 4 / config.sbuf_bytes_per_ns / 1000;
  ASSERT_GT(sbuf_us, engine_us);
  const double expected_extra = sbuf_us + 3 * elems * 4 / config.hbm_bytes_per_ns / 1000;
  EXPECT_NEAR(big - small, expected_extra, 0.02 * expected_extra);

  // A 2048^3 matmul is 17.2 GFLOP: ~181 us on the bf16 systolic array, 4x that in fp32.
  auto matmul = [](const char* dtype) {
    return absl::StrFormat(
        "model m\ninput a %s [2048,2048]\ninput b %s [2048,2048]\noutput c %s [2048,2048]\n"
        "c = matmul(a, b)\n", dtype, dtype, dtype);
  };
  const Model bf16 = Parse(matmul("bf16"));
  const Model fp32 = Parse(matmul("fp32"));
  const double flops = 2.0 * 2048 * 2048 * 2048;
  const double bf16_op = Us(CostOfExecution(bf16, config).ops[0].span.duration_ns);
  const double fp32_op = Us(CostOfExecution(fp32, config).ops[0].span.duration_ns);
  EXPECT_NEAR(bf16_op, config.op_issue_us + flops / config.tensor_bf16_flops_per_ns / 1000, 1.0);
  EXPECT_NEAR(fp32_op, config.op_issue_us + flops / config.tensor_fp32_flops_per_ns / 1000, 1.0);
}

// relu, abs and threshold_backward cost what the other elementwise ops cost: issue, then the
// larger of the engine's pass over the elements and the SBUF traffic. transpose reads and
// writes each element once, as copy, on the Vector engine.
TEST(CostModel, ReluThresholdBackwardAbsAndTransposeAreElementwise) {
  const DeviceConfig config;
  const std::string x = "bf16 [1024,1024]";
  const double gelu = ExecUs(Unary("gelu(a)", x, x));
  EXPECT_EQ(ExecUs(Unary("relu(a)", x, x)), gelu);
  EXPECT_EQ(ExecUs(Unary("abs(a)", x, x)), gelu);
  EXPECT_EQ(ExecUs("model m\ninput a bf16 [1024,1024]\ninput b bf16 [1024,1024]\n"
                   "output out bf16 [1024,1024]\nout = threshold_backward(a, b, 0)\n"),
            ExecUs(Binary(x, x, x)));
  // One op alone, large enough that its engine and SBUF terms show: issue + max(both).
  auto op_us = [&](const std::string& op, const char* out_shape) {
    const Model m = Parse(absl::StrFormat(
        "model m\ninput a fp32 [4096,2048]\noutput out fp32 %s\nout = %s\n", out_shape, op));
    return CostOfExecution(m, config).ops[0];
  };
  const double elems = 4096.0 * 2048.0, sbuf_ns = 2 * elems * 4 / config.sbuf_bytes_per_ns;
  const OpCost relu = op_us("relu(a)", "[4096,2048]");
  EXPECT_EQ(relu.engine, Engine::kScalar);
  EXPECT_NEAR(Us(relu.span.duration_ns),
              config.op_issue_us + std::max(elems / config.scalar_elems_per_ns, sbuf_ns) / 1000,
              0.01);
  const OpCost transpose = op_us("transpose(a)", "[2048,4096]");
  EXPECT_EQ(transpose.engine, Engine::kVector);
  EXPECT_NEAR(Us(transpose.span.duration_ns),
              config.op_issue_us + std::max(elems / config.vector_elems_per_ns, sbuf_ns) / 1000,
              0.01);
}

// An all_reduce costs its issue in the execution's static cost: its transfers and the wait for
// the group are added when it runs (CollectiveNs, the runtime), whatever its size.
TEST(CostModel, AllReduceCostsItsIssueAlone) {
  const DeviceConfig config;
  for (const char* shape : {"[4]", "[4096,2048]"}) {
    const Model m = Parse(absl::StrFormat(
        "model m\ninput a fp32 %s\noutput out fp32 %s\nout = all_reduce(a)\n", shape, shape));
    const OpCost op = CostOfExecution(m, config).ops[0];
    EXPECT_NEAR(Us(op.span.duration_ns), config.op_issue_us, 0.001) << shape;
  }
}

TEST(CostModel, HostTransfersPaySetupPlusPcie) {
  DeviceConfig config;
  EXPECT_EQ(HostDmaNs(0, config), 154000u);
  EXPECT_NEAR(Us(HostDmaNs(256 << 20, config)), 154 + (256 << 20) / 25.0 / 1000, 1.0);
  EXPECT_LT(DeviceCopyNs(4096, config), HostDmaNs(4096, config));
  config.host_dma_setup_us = 10;
  EXPECT_EQ(HostDmaNs(0, config), 10000u);
}

}  // namespace
}  // namespace nrtsim
