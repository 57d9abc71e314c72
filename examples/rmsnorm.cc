// RMSNorm three ways on the Neuron runtime, the case that started nrtprof:
//   naive     each op (x*x, mean, +eps, rsqrt, x*rms, *weight) dispatched as its own model, the
//             epsilon scalar copied host-to-device on every call, as eager PyTorch does;
//   fused     one rms_norm library kernel;
//   compiled  the naive ops compiled into one model, intermediates kept on chip.
// Checks the output against a float64 reference and prints the device time per iteration,
// measured with the runtime's system trace (and with --wall_time or --async, the wall time per
// iteration). Ops are annotated with their framework names.
//
// --async DEPTH drives the runtime as PyTorch-native Neuron does, through the explicit
// asynchronous API (nrt/nrt_async.h): each execution scheduled on the compute queue
// (nrta_execute_schedule) and each transfer on the tensor-op queue (nrta_tensor_write/read),
// up to DEPTH requests in flight, the host going on while the device works. The same requests
// as the synchronous calls, in the same order, with the same results: only the waiting moves.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
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
ABSL_FLAG(std::string, async, "0",
          "requests in flight through the asynchronous API (nrt/nrt_async.h); 0: synchronous "
          "calls (nrt_execute, nrt_tensor_write/read)");
ABSL_FLAG(bool, wall_time, false,
          "also prints the wall time per iteration (always with --async; off by default so that "
          "the output of two runs is the same)");
ABSL_FLAG(std::string, dump_output, "",
          "also writes the output tensor's bytes to this file (to compare two runs)");

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

// How the program reaches the device: synchronous calls, each returning when its work is done,
// or (with an AsyncRuntime) requests on the asynchronous API's queues, each returning at once
// with a sequence id to wait for (0 for a synchronous call: nothing to wait for).
class Device {
 public:
  explicit Device(examples::AsyncRuntime* async) : async_(async) {}

  // One execution, inside the caller's op range.
  nrta_seq_t Run(const char* op, nrt_model_t* model, nrt_tensor_set_t* in,
                 nrt_tensor_set_t* out) {
    if (async_ == nullptr) {
      examples::Check(nrt_execute(model, in, out), absl::StrCat("nrt_execute (", op, ")"));
      return 0;
    }
    nrta_seq_t seq = 0;
    examples::Check(async_->Execute(model, in, out, absl::StrCat("the execution of ", op), &seq),
                    absl::StrCat("nrta_execute_schedule (", op, ")"));
    return seq;
  }

  // One execution in a range of its own, named as the framework names the op.
  nrta_seq_t Execute(const char* op, nrt_model_t* model, nrt_tensor_set_t* in,
                     nrt_tensor_set_t* out) {
    nrtprof::ScopedRange range(op);
    return Run(op, model, in, out);
  }

  // Copies `bytes` (which must stay as they are until the write completes) into `tensor`.
  nrta_seq_t Write(nrt_tensor_t* tensor, const std::vector<uint8_t>& bytes, const char* what) {
    if (async_ == nullptr) {
      examples::Check(nrt_tensor_write(tensor, bytes.data(), 0, bytes.size()),
                      absl::StrCat("nrt_tensor_write (", what, ")"));
      return 0;
    }
    nrta_seq_t seq = 0;
    examples::Check(async_->Write(tensor, bytes.data(), bytes.size(),
                                  absl::StrCat("the write of ", what), &seq),
                    absl::StrCat("nrta_tensor_write (", what, ")"));
    return seq;
  }

  // Reads `tensor` into `bytes` once every execution scheduled so far has completed (the
  // tensor-op queue is not ordered against the compute queue).
  void Read(nrt_tensor_t* tensor, std::vector<uint8_t>* bytes, const char* what) {
    if (async_ == nullptr) {
      examples::Check(nrt_tensor_read(tensor, bytes->data(), 0, bytes->size()),
                      absl::StrCat("nrt_tensor_read (", what, ")"));
      return;
    }
    WaitAll();
    nrta_seq_t seq = 0;
    examples::Check(async_->Read(bytes->data(), tensor, bytes->size(),
                                 absl::StrCat("the read of ", what), &seq),
                    absl::StrCat("nrta_tensor_read (", what, ")"));
    Wait(seq);
  }

  // Waits until request `seq` has completed (0, or synchronous: at once).
  void Wait(nrta_seq_t seq) {
    if (async_ != nullptr) examples::Check(async_->Wait(seq), async_->failed_what());
  }
  void WaitAll() {
    if (async_ != nullptr) examples::Check(async_->WaitAll(), async_->failed_what());
  }
  bool async() const { return async_ != nullptr; }

 private:
  examples::AsyncRuntime* async_;
};

// One forward pass: the framework's ops and the runtime calls they make.
class Variant {
 public:
  virtual ~Variant() = default;
  virtual void Forward() = 0;
  virtual const char* what() const = 0;
};

// The ops' intermediates stay on the device from one op to the next, as in eager PyTorch; only
// epsilon crosses from the host, in every iteration. Asynchronously, epsilon is double buffered:
// its write for one iteration never lands in the tensor a queued aten::add of the previous one
// still reads, and aten::add is scheduled only once its write has completed.
class Naive : public Variant {
 public:
  Naive(const Shape& s, int core, nrt_tensor_t* x, nrt_tensor_t* w, nrt_tensor_t* y, Device* d)
      : device_(d), y_(y) {
    const std::vector<std::string> texts = NaiveModels(s);
    for (const std::string& text : texts) models_.push_back(examples::LoadModelText(text, core));
    const size_t e = examples::ElementSize(s.dtype);
    sq_ = examples::DeviceTensor(core, s.rows * s.cols * e, "sq");
    ms_ = examples::DeviceTensor(core, s.rows * e, "ms");
    eps_[0] = examples::DeviceTensor(core, e, "eps");
    if (d->async()) eps_[1] = examples::DeviceTensor(core, e, "eps_1");
    ms_eps_ = examples::DeviceTensor(core, s.rows * e, "ms_eps");
    r_ = examples::DeviceTensor(core, s.rows * e, "rms");
    xn_ = examples::DeviceTensor(core, s.rows * s.cols * e, "xn");
    sets_ = {
        {Set({{"a", x}, {"b", x}}), Set({{"out", sq_}})},
        {Set({{"a", sq_}}), Set({{"out", ms_}})},
        {Set({{"a", ms_}, {"b", eps_[0]}}), Set({{"out", ms_eps_}})},
        {Set({{"a", ms_eps_}}), Set({{"out", r_}})},
        {Set({{"a", x}, {"b", r_}}), Set({{"out", xn_}})},
        {Set({{"a", xn_}, {"b", w}}), Set({{"out", y_}})},
    };
    if (d->async()) add_sets_[1] = {Set({{"a", ms_}, {"b", eps_[1]}}), Set({{"out", ms_eps_}})};
    add_sets_[0] = sets_[2];
    eps_bytes_ = examples::Encode({kEpsilon}, s.dtype);
  }
  const char* what() const override {
    return "6 executions and 1 host-to-device copy per iteration";
  }
  void Forward() override {
    Device& d = *device_;
    d.Execute("aten::mul", models_[0], sets_[0].first, sets_[0].second);
    d.Execute("aten::mean", models_[1], sets_[1].first, sets_[1].second);
    {
      // x + eps with a Python float: the scalar becomes a device tensor first.
      nrtprof::ScopedRange range("aten::add");
      const int k = d.async() ? buffer_ : 0;
      buffer_ ^= 1;
      d.Wait(add_seq_[k]);  // the aten::add that read this buffer last
      const nrta_seq_t written = d.Write(eps_[k], eps_bytes_, "epsilon");
      d.Wait(written);  // the tensor-op queue is not ordered against the compute queue
      add_seq_[k] = d.Run("aten::add", models_[2], add_sets_[k].first, add_sets_[k].second);
    }
    d.Execute("aten::rsqrt", models_[3], sets_[3].first, sets_[3].second);
    d.Execute("aten::mul", models_[4], sets_[4].first, sets_[4].second);
    d.Execute("aten::mul", models_[5], sets_[5].first, sets_[5].second);
  }

 private:
  Device* device_;
  nrt_tensor_t* y_;
  std::vector<nrt_model_t*> models_;
  nrt_tensor_t *sq_, *ms_, *eps_[2] = {nullptr, nullptr}, *ms_eps_, *r_, *xn_;
  std::vector<std::pair<nrt_tensor_set_t*, nrt_tensor_set_t*>> sets_;
  std::pair<nrt_tensor_set_t*, nrt_tensor_set_t*> add_sets_[2];  // aten::add on eps_[0], [1]
  nrta_seq_t add_seq_[2] = {0, 0};  // the aten::add that last read eps_[0], [1]
  int buffer_ = 0;
  std::vector<uint8_t> eps_bytes_;
};

class OneModel : public Variant {
 public:
  OneModel(const std::string& text, const char* op, int core, nrt_tensor_t* x, nrt_tensor_t* w,
           nrt_tensor_t* y, Device* d)
      : device_(d),
        op_(op),
        model_(examples::LoadModelText(text, core)),
        in_(Set({{"x", x}, {"weight", w}})),
        out_(Set({{"y", y}})) {}
  const char* what() const override { return "1 execution per iteration"; }
  void Forward() override { device_->Execute(op_, model_, in_, out_); }

 private:
  Device* device_;
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

int Run(const std::string& variant, const Shape& s, int iters, int core, int async_depth,
        bool wall_time, const std::string& dump_output) {
  examples::Check(nrt_init(NRT_FRAMEWORK_TYPE_PYTORCH, "", ""), "nrt_init");
  std::unique_ptr<examples::AsyncRuntime> async;
  if (async_depth > 0) async = std::make_unique<examples::AsyncRuntime>(core, async_depth);
  Device device(async.get());
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
    device.Write(xt, xb, "x");
    device.Write(wt, wb, "weight");
    device.WaitAll();  // the executions read them
  }
  std::unique_ptr<Variant> v;
  if (variant == "naive") {
    v = std::make_unique<Naive>(s, core, xt, wt, yt, &device);
  } else if (variant == "fused") {
    v = std::make_unique<OneModel>(FusedModel(s), "aten::rms_norm", core, xt, wt, yt, &device);
  } else {
    v = std::make_unique<OneModel>(CompiledModel(s), "CompiledFunction", core, xt, wt, yt,
                                   &device);
  }
  v->Forward();  // warm-up, outside the measurement
  device.WaitAll();
  // A small ring, fetched as it goes: the program's memory stays the same whatever --iters.
  examples::DeviceTimer timer;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    nrtprof_step();  // one training step each: whole steps can be captured (--iterations)
    {
      nrtprof::ScopedRange range("rmsnorm");
      v->Forward();
    }
    if ((i + 1) % examples::DeviceTimer::kPollEvery == 0) timer.Poll();
  }
  device.WaitAll();  // wall time runs to the last iteration's completion
  const std::chrono::duration<double, std::milli> wall = std::chrono::steady_clock::now() - start;
  const examples::DeviceTime time = timer.Stop();

  std::vector<uint8_t> yb(xb.size());
  {
    nrtprof::ScopedRange range("aten::copy_");
    device.Read(yt, &yb, "y");
  }
  if (!dump_output.empty()) {
    FILE* f = fopen(dump_output.c_str(), "wb");
    if (f == nullptr || fwrite(yb.data(), 1, yb.size(), f) != yb.size() || fclose(f) != 0) {
      fprintf(stderr, "rmsnorm: cannot write the output to %s\n", dump_output.c_str());
      exit(1);
    }
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
  printf("rmsnorm %s: %dx%d %s, %d iterations on NeuronCore %d (%s)%s\n", variant.c_str(),
         s.rows, s.cols, s.dtype.c_str(), iters, core, v->what(),
         async_depth == 0 ? ""
                          : absl::StrCat(", asynchronous: up to ", async_depth,
                                         " requests in flight").c_str());
  printf("  output vs float64 reference: max |error| %.3g, %zu of %zu elements out of tolerance"
         " -> %s\n", worst, bad, y.size(), bad == 0 ? "OK" : "WRONG");
  printf("  device time per iteration: %.3f ms (executions %.3f ms in %llu, transfers %.3f ms in"
         " %llu)\n", time.total_ns() / 1e6 / iters, time.execution_ns / 1e6 / iters,
         static_cast<unsigned long long>(time.executions),
         time.transfer_ns / 1e6 / iters, static_cast<unsigned long long>(time.transfers));
  if (wall_time || async_depth > 0) {
    printf("  wall time per iteration: %.3f ms\n", wall.count() / iters);
  }
  if (time.overwritten != 0) {
    printf("  warning: the system trace lost %llu events; device time is understated\n",
           static_cast<unsigned long long>(time.overwritten));
  }
  async.reset();
  nrt_close();
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "rmsnorm --variant naive|fused|compiled [--rows 4] [--cols 512] [--dtype bf16|fp32] "
      "[--iters N] [--async DEPTH] [--wall_time]");
  absl::ParseCommandLine(argc, argv);
  const std::string variant = absl::GetFlag(FLAGS_variant);
  const Shape s{absl::GetFlag(FLAGS_rows), absl::GetFlag(FLAGS_cols), absl::GetFlag(FLAGS_dtype)};
  const int iters = absl::GetFlag(FLAGS_iters), core = absl::GetFlag(FLAGS_core);
  int async_depth = 0;
  if (!examples::ParseAsyncDepth(absl::GetFlag(FLAGS_async), &async_depth)) {
    fprintf(stderr,
            "rmsnorm: --async must be a whole number from 0 (synchronous) to %d, not '%s'\n",
            examples::kMaxAsyncDepth, absl::GetFlag(FLAGS_async).c_str());
    return 2;
  }
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
  return Run(variant, s, iters, core, async_depth, absl::GetFlag(FLAGS_wall_time),
             absl::GetFlag(FLAGS_dump_output));
}
