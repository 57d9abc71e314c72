// RMSNorm three ways on the Neuron runtime, the case that started nrtprof:
//   naive     each op (x*x, mean, +eps, rsqrt, x*rms, *weight) dispatched as its own model, the
//             epsilon scalar copied host-to-device on every call, as eager PyTorch does;
//   fused     one rms_norm library kernel;
//   compiled  the naive ops compiled into one model, intermediates kept on chip.
// Checks the output against a float64 reference and prints the device time per iteration,
// measured with the runtime's system trace. Ops are annotated with their framework names.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "examples/example_util.h"
#include "nrt/nrt.h"
#include "nrtprof/annotate.h"

ABSL_FLAG(std::string, variant, "naive", "naive, fused or compiled");
ABSL_FLAG(int, rows, 4, "rows of the input");
ABSL_FLAG(int, cols, 512, "columns of the input (the normalized axis)");
ABSL_FLAG(std::string, dtype, "bf16", "bf16 or fp32");
ABSL_FLAG(int, iters, 10, "timed iterations");
ABSL_FLAG(int, core, 0, "NeuronCore to run on");

namespace {

constexpr float kEpsilon = 1e-6f;

struct Shape {
  int rows, cols;
  std::string dtype;
  std::string Dims(int r, int c) const { return absl::StrCat("[", r, ",", c, "]"); }
};

// The six eager ops, each its own model, as a framework without a graph compiler emits them.
std::vector<std::string> NaiveModels(const Shape& s) {
  const std::string x = s.Dims(s.rows, s.cols), col = s.Dims(s.rows, 1);
  const std::string scalar = "[1]", row = absl::StrCat("[", s.cols, "]");
  return {
      examples::EagerOpModelText("aten_mul_square", "mul", s.dtype, {x, x}, x),
      examples::EagerOpModelText("aten_mean", "mean", s.dtype, {x}, col, "axis=-1"),
      examples::EagerOpModelText("aten_add_eps", "add", s.dtype, {col, scalar}, col),
      examples::EagerOpModelText("aten_rsqrt", "rsqrt", s.dtype, {col}, col),
      examples::EagerOpModelText("aten_mul_rms", "mul", s.dtype, {x, col}, x),
      examples::EagerOpModelText("aten_mul_weight", "mul", s.dtype, {x, row}, x),
  };
}

std::string FusedModel(const Shape& s) {
  return absl::StrFormat(
      "model aten_rms_norm\ninput x %s %s\ninput weight %s [%d]\noutput y %s %s\n"
      "y = rms_norm(x, weight, %g)\n",
      s.dtype, s.Dims(s.rows, s.cols), s.dtype, s.cols, s.dtype, s.Dims(s.rows, s.cols),
      kEpsilon);
}

std::string CompiledModel(const Shape& s) {
  return absl::StrFormat(
      "model rmsnorm_compiled\ninput x %s %s\ninput weight %s [%d]\noutput y %s %s\n"
      "sq = mul(x, x)\nms = mean(sq, axis=-1)\nms_eps = add_scalar(ms, %g)\n"
      "r = rsqrt(ms_eps)\nxn = mul(x, r)\ny = mul(xn, weight)\n",
      s.dtype, s.Dims(s.rows, s.cols), s.dtype, s.cols, s.dtype, s.Dims(s.rows, s.cols),
      kEpsilon);
}

nrt_tensor_set_t* Set(std::initializer_list<std::pair<const char*, nrt_tensor_t*>> tensors) {
  nrt_tensor_set_t* set = nullptr;
  examples::Check(nrt_allocate_tensor_set(&set), "nrt_allocate_tensor_set");
  for (const auto& [name, tensor] : tensors) {
    examples::Check(nrt_add_tensor_to_tensor_set(set, name, tensor),
                    absl::StrCat("nrt_add_tensor_to_tensor_set ", name));
  }
  return set;
}

void Execute(const char* op, nrt_model_t* model, nrt_tensor_set_t* in, nrt_tensor_set_t* out) {
  nrtprof::ScopedRange range(op);
  examples::Check(nrt_execute(model, in, out), absl::StrCat("nrt_execute (", op, ")"));
}

// One forward pass: the framework's ops and the runtime calls they make.
class Variant {
 public:
  virtual ~Variant() = default;
  virtual void Forward() = 0;
  virtual const char* what() const = 0;
};

class Naive : public Variant {
 public:
  Naive(const Shape& s, int core, nrt_tensor_t* x, nrt_tensor_t* w, nrt_tensor_t* y)
      : y_(y) {
    const std::vector<std::string> texts = NaiveModels(s);
    for (const std::string& text : texts) models_.push_back(examples::LoadModelText(text, core));
    const size_t e = examples::ElementSize(s.dtype);
    sq_ = examples::DeviceTensor(core, s.rows * s.cols * e, "sq");
    ms_ = examples::DeviceTensor(core, s.rows * e, "ms");
    eps_ = examples::DeviceTensor(core, e, "eps");
    ms_eps_ = examples::DeviceTensor(core, s.rows * e, "ms_eps");
    r_ = examples::DeviceTensor(core, s.rows * e, "rms");
    xn_ = examples::DeviceTensor(core, s.rows * s.cols * e, "xn");
    sets_ = {
        {Set({{"a", x}, {"b", x}}), Set({{"out", sq_}})},
        {Set({{"a", sq_}}), Set({{"out", ms_}})},
        {Set({{"a", ms_}, {"b", eps_}}), Set({{"out", ms_eps_}})},
        {Set({{"a", ms_eps_}}), Set({{"out", r_}})},
        {Set({{"a", x}, {"b", r_}}), Set({{"out", xn_}})},
        {Set({{"a", xn_}, {"b", w}}), Set({{"out", y_}})},
    };
    eps_bytes_ = examples::Encode({kEpsilon}, s.dtype);
  }
  const char* what() const override {
    return "6 executions and 1 host-to-device copy per iteration";
  }
  void Forward() override {
    Execute("aten::mul", models_[0], sets_[0].first, sets_[0].second);
    Execute("aten::mean", models_[1], sets_[1].first, sets_[1].second);
    {
      // x + eps with a Python float: the scalar becomes a device tensor first.
      nrtprof::ScopedRange range("aten::add");
      examples::Check(nrt_tensor_write(eps_, eps_bytes_.data(), 0, eps_bytes_.size()),
                      "nrt_tensor_write (epsilon)");
      examples::Check(nrt_execute(models_[2], sets_[2].first, sets_[2].second),
                      "nrt_execute (aten::add)");
    }
    Execute("aten::rsqrt", models_[3], sets_[3].first, sets_[3].second);
    Execute("aten::mul", models_[4], sets_[4].first, sets_[4].second);
    Execute("aten::mul", models_[5], sets_[5].first, sets_[5].second);
  }

 private:
  nrt_tensor_t* y_;
  std::vector<nrt_model_t*> models_;
  nrt_tensor_t *sq_, *ms_, *eps_, *ms_eps_, *r_, *xn_;
  std::vector<std::pair<nrt_tensor_set_t*, nrt_tensor_set_t*>> sets_;
  std::vector<uint8_t> eps_bytes_;
};

class OneModel : public Variant {
 public:
  OneModel(const std::string& text, const char* op, int core, nrt_tensor_t* x, nrt_tensor_t* w,
           nrt_tensor_t* y)
      : op_(op),
        model_(examples::LoadModelText(text, core)),
        in_(Set({{"x", x}, {"weight", w}})),
        out_(Set({{"y", y}})) {}
  const char* what() const override { return "1 execution per iteration"; }
  void Forward() override { Execute(op_, model_, in_, out_); }

 private:
  const char* op_;
  nrt_model_t* model_;
  nrt_tensor_set_t* in_;
  nrt_tensor_set_t* out_;
};

// float64 reference, from the values the device actually received (bf16-rounded inputs).
std::vector<double> Reference(const std::vector<float>& x, const std::vector<float>& w,
                              const Shape& s) {
  std::vector<double> y(x.size());
  for (int r = 0; r < s.rows; ++r) {
    double sum = 0;
    for (int c = 0; c < s.cols; ++c) sum += double(x[r * s.cols + c]) * x[r * s.cols + c];
    const double inv = 1.0 / std::sqrt(sum / s.cols + double(kEpsilon));
    for (int c = 0; c < s.cols; ++c) y[r * s.cols + c] = x[r * s.cols + c] * inv * w[c];
  }
  return y;
}

int Run(const std::string& variant, const Shape& s, int iters, int core) {
  examples::Check(nrt_init(NRT_FRAMEWORK_TYPE_PYTORCH, "", ""), "nrt_init");
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> xd(-2.0f, 2.0f), wd(0.5f, 1.5f);
  std::vector<float> x(s.rows * s.cols), w(s.cols);
  for (float& v : x) v = xd(rng);
  for (float& v : w) v = wd(rng);
  const std::vector<uint8_t> xb = examples::Encode(x, s.dtype), wb = examples::Encode(w, s.dtype);
  nrt_tensor_t* xt = examples::DeviceTensor(core, xb.size(), "x");
  nrt_tensor_t* wt = examples::DeviceTensor(core, wb.size(), "weight");
  nrt_tensor_t* yt = examples::DeviceTensor(core, xb.size(), "y");
  {
    nrtprof::ScopedRange range("aten::copy_");
    examples::Check(nrt_tensor_write(xt, xb.data(), 0, xb.size()), "nrt_tensor_write (x)");
    examples::Check(nrt_tensor_write(wt, wb.data(), 0, wb.size()), "nrt_tensor_write (weight)");
  }
  std::unique_ptr<Variant> v;
  if (variant == "naive") {
    v = std::make_unique<Naive>(s, core, xt, wt, yt);
  } else if (variant == "fused") {
    v = std::make_unique<OneModel>(FusedModel(s), "aten::rms_norm", core, xt, wt, yt);
  } else {
    v = std::make_unique<OneModel>(CompiledModel(s), "CompiledFunction", core, xt, wt, yt);
  }
  v->Forward();  // warm-up, outside the measurement
  // A small ring, fetched as it goes: the program's memory stays the same whatever --iters.
  examples::DeviceTimer timer;
  for (int i = 0; i < iters; ++i) {
    nrtprof_step();  // one training step each: whole steps can be captured (--iterations)
    {
      nrtprof::ScopedRange range("rmsnorm");
      v->Forward();
    }
    if ((i + 1) % examples::DeviceTimer::kPollEvery == 0) timer.Poll();
  }
  const examples::DeviceTime time = timer.Stop();

  std::vector<uint8_t> yb(xb.size());
  {
    nrtprof::ScopedRange range("aten::copy_");
    examples::Check(nrt_tensor_read(yt, yb.data(), 0, yb.size()), "nrt_tensor_read (y)");
  }
  const std::vector<float> y = examples::Decode(yb, s.dtype);
  const std::vector<double> ref =
      Reference(examples::Decode(xb, s.dtype), examples::Decode(wb, s.dtype), s);
  // bf16 keeps 8 significant bits and each of the six ops rounds once.
  const double rtol = s.dtype == "bf16" ? 3e-2 : 1e-5, atol = s.dtype == "bf16" ? 1e-2 : 1e-6;
  double worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double err = std::fabs(y[i] - ref[i]);
    worst = std::max(worst, err);
    if (!(err <= atol + rtol * std::fabs(ref[i]))) ++bad;
  }
  printf("rmsnorm %s: %dx%d %s, %d iterations on NeuronCore %d (%s)\n", variant.c_str(), s.rows,
         s.cols, s.dtype.c_str(), iters, core, v->what());
  printf("  output vs float64 reference: max |error| %.3g, %zu of %zu elements out of tolerance"
         " -> %s\n", worst, bad, y.size(), bad == 0 ? "OK" : "WRONG");
  printf("  device time per iteration: %.3f ms (executions %.3f ms in %llu, transfers %.3f ms in"
         " %llu)\n", time.total_ns() / 1e6 / iters, time.execution_ns / 1e6 / iters,
         static_cast<unsigned long long>(time.executions),
         time.transfer_ns / 1e6 / iters, static_cast<unsigned long long>(time.transfers));
  if (time.overwritten != 0) {
    printf("  warning: the system trace lost %llu events; device time is understated\n",
           static_cast<unsigned long long>(time.overwritten));
  }
  nrt_close();
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "rmsnorm --variant naive|fused|compiled [--rows 4] [--cols 512] [--dtype bf16|fp32] "
      "[--iters N]");
  absl::ParseCommandLine(argc, argv);
  const std::string variant = absl::GetFlag(FLAGS_variant);
  const Shape s{absl::GetFlag(FLAGS_rows), absl::GetFlag(FLAGS_cols), absl::GetFlag(FLAGS_dtype)};
  const int iters = absl::GetFlag(FLAGS_iters), core = absl::GetFlag(FLAGS_core);
  if (variant != "naive" && variant != "fused" && variant != "compiled") {
    fprintf(stderr, "rmsnorm: --variant must be naive, fused or compiled, not '%s'\n",
            variant.c_str());
    return 2;
  }
  if (s.dtype != "bf16" && s.dtype != "fp32") {
    fprintf(stderr, "rmsnorm: --dtype must be bf16 or fp32, not '%s'\n", s.dtype.c_str());
    return 2;
  }
  if (s.rows < 1 || s.cols < 1 || s.rows > 65536 || s.cols > 65536 || iters < 1 ||
      iters > 1000000 || core < 0) {
    fprintf(stderr, "rmsnorm: --rows and --cols must be 1..65536, --iters 1..1000000, "
            "--core >= 0\n");
    return 2;
  }
  uint32_t visible = 0;
  if (nrt_get_visible_nc_count(&visible) == NRT_SUCCESS && core >= static_cast<int>(visible)) {
    fprintf(stderr, "rmsnorm: --core %d does not exist: %u NeuronCores are visible\n", core,
            visible);
    return 2;
  }
  return Run(variant, s, iters, core);
}
