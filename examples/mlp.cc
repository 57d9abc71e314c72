// A transformer-style MLP block (linear -> GELU -> linear) served by several host threads on
// several NeuronCores, as a data-parallel inference server drives the runtime:
//   - each NeuronCore loads the three models once (linear1, gelu, linear2) and holds one copy of
//     the weights; every thread on that core executes the same loaded models;
//   - thread t runs on NeuronCore t % cores with its own input, intermediate and output
//     tensors, writes a fresh pseudo-random input each iteration, runs the three models and
//     reads the result back;
//   - every result is checked against a float64 reference computed on the host.
// Ops are annotated with their framework names, and the device time of the whole run is
// measured per NeuronCore with the runtime's system trace.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "examples/example_util.h"
#include "nrt/nrt.h"
#include "nrtprof/annotate.h"

ABSL_FLAG(int, threads, 1, "host threads, each running its own forward passes");
ABSL_FLAG(int, cores, 1, "NeuronCores to spread the threads over (thread t uses t % cores)");
ABSL_FLAG(int, iters, 10, "forward passes per thread");
ABSL_FLAG(int, batch, 8, "rows of the input");
ABSL_FLAG(int, hidden, 128, "model width; the inner layer is 4x wider");
ABSL_FLAG(std::string, dtype, "fp32", "fp32 or bf16");

namespace {

// One thread-iteration records about 23 system-trace events on its core (1 write and 1 read,
// each a call span around a device-memory copy; 3 executions, each a call span, a device span
// and a model switch). The ring is allocated up front, so
// very long runs are capped and report the events they lost instead.
constexpr uint64_t kEventsPerIteration = 24;
constexpr uint64_t kMaxEventsPerCore = uint64_t{1} << 18;

struct Shape {
  int batch, hidden, ffn;
  std::string dtype;
};

// y[batch, out] = x[batch, in] @ w[in, out] + b[out]: torch.nn.Linear, compiled as one model.
std::string LinearModel(const Shape& s, const char* name, int in, int out) {
  const char* t = s.dtype.c_str();
  return absl::StrFormat(
      "model %s\ninput x %s [%d,%d]\ninput w %s [%d,%d]\ninput b %s [%d]\n"
      "output y %s [%d,%d]\nh = matmul(x, w)\ny = add(h, b)\n",
      name, t, s.batch, in, t, in, out, t, out, t, s.batch, out);
}

std::string GeluModel(const Shape& s) {
  const char* t = s.dtype.c_str();
  return absl::StrFormat("model mlp_gelu\ninput x %s [%d,%d]\noutput y %s [%d,%d]\ny = gelu(x)\n",
                         t, s.batch, s.ffn, t, s.batch, s.ffn);
}

// The weights as the device holds them (already rounded to the dtype), for the reference.
struct Weights {
  std::vector<float> w1, b1, w2, b2;
};

std::vector<float> Uniform(size_t n, float limit, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-limit, limit);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

// What the device will hold after writing `values` in `dtype`.
std::vector<float> AsStored(const std::vector<float>& values, const std::string& dtype) {
  return examples::Decode(examples::Encode(values, dtype), dtype);
}

// Unit-variance initialisation (uniform in +-sqrt(3 / fan_in)) keeps activations O(1), so the
// absolute part of the tolerance below is small next to typical outputs.
Weights MakeWeights(const Shape& s) {
  std::mt19937 rng(2024);
  Weights w;
  w.w1 = AsStored(Uniform(size_t(s.hidden) * s.ffn, std::sqrt(3.0f / s.hidden), &rng), s.dtype);
  w.b1 = AsStored(Uniform(s.ffn, 0.1f, &rng), s.dtype);
  w.w2 = AsStored(Uniform(size_t(s.ffn) * s.hidden, std::sqrt(3.0f / s.ffn), &rng), s.dtype);
  w.b2 = AsStored(Uniform(s.hidden, 0.1f, &rng), s.dtype);
  return w;
}

nrt_tensor_t* WeightTensor(int core, const std::vector<float>& values, const std::string& dtype,
                           const char* name) {
  const std::vector<uint8_t> bytes = examples::Encode(values, dtype);
  nrt_tensor_t* tensor = examples::DeviceTensor(core, bytes.size(), name);
  examples::Check(nrt_tensor_write(tensor, bytes.data(), 0, bytes.size()),
                  absl::StrFormat("nrt_tensor_write (%s)", name));
  return tensor;
}

// What one NeuronCore holds for every thread that runs on it. Written by main() before the
// threads start and only read while they run.
struct CoreModels {
  nrt_model_t *linear1, *gelu, *linear2;
  nrt_tensor_t *w1, *b1, *w2, *b2;
};

CoreModels LoadCore(int core, const Shape& s, const Weights& w) {
  CoreModels m;
  m.linear1 = examples::LoadModelText(LinearModel(s, "mlp_linear1", s.hidden, s.ffn), core);
  m.gelu = examples::LoadModelText(GeluModel(s), core);
  m.linear2 = examples::LoadModelText(LinearModel(s, "mlp_linear2", s.ffn, s.hidden), core);
  m.w1 = WeightTensor(core, w.w1, s.dtype, "fc1.weight");
  m.b1 = WeightTensor(core, w.b1, s.dtype, "fc1.bias");
  m.w2 = WeightTensor(core, w.w2, s.dtype, "fc2.weight");
  m.b2 = WeightTensor(core, w.b2, s.dtype, "fc2.bias");
  return m;
}

void UnloadCore(CoreModels* m) {
  for (nrt_model_t* model : {m->linear1, m->gelu, m->linear2}) {
    examples::Check(nrt_unload(model), "nrt_unload");
  }
  for (nrt_tensor_t** t : {&m->w1, &m->b1, &m->w2, &m->b2}) nrt_tensor_free(t);
}

nrt_tensor_set_t* Set(std::initializer_list<std::pair<const char*, nrt_tensor_t*>> tensors) {
  nrt_tensor_set_t* set = nullptr;
  examples::Check(nrt_allocate_tensor_set(&set), "nrt_allocate_tensor_set");
  for (const auto& [name, tensor] : tensors) {
    examples::Check(nrt_add_tensor_to_tensor_set(set, name, tensor),
                    absl::StrFormat("nrt_add_tensor_to_tensor_set %s", name));
  }
  return set;
}

// float64 reference of the block, from the values the device received. GELU is the exact
// (erf) form the gelu op computes.
std::vector<double> Reference(const std::vector<float>& x, const Weights& w, const Shape& s) {
  std::vector<double> g(size_t(s.batch) * s.ffn), y(size_t(s.batch) * s.hidden);
  for (int r = 0; r < s.batch; ++r) {
    for (int j = 0; j < s.ffn; ++j) {
      double h = w.b1[j];
      for (int k = 0; k < s.hidden; ++k) h += double(x[r * s.hidden + k]) * w.w1[k * s.ffn + j];
      g[r * s.ffn + j] = 0.5 * h * (1.0 + std::erf(h / std::sqrt(2.0)));
    }
    for (int j = 0; j < s.hidden; ++j) {
      double acc = w.b2[j];
      for (int k = 0; k < s.ffn; ++k) acc += g[r * s.ffn + k] * w.w2[k * s.hidden + j];
      y[r * s.hidden + j] = acc;
    }
  }
  return y;
}

// Tolerance of a device result against the float64 reference: |y - ref| <= atol + rtol * |ref|.
//   fp32: every op computes in float32 and the dot products (128 and 512 long) accumulate in
//     index order, a few 1e-6 of the terms' size; 1e-4 relative leaves a wide margin, and the
//     absolute term covers outputs that cancel to near zero.
//   bf16: each stored tensor keeps 8 significant bits (relative rounding up to 2^-9 ~ 0.2%),
//     and the block rounds four times (matmul, +bias, gelu, matmul+bias) with errors summed over
//     512 terms; 3e-2 relative plus 2e-2 absolute (outputs are O(1)) bounds that.
struct Tolerance {
  double rtol, atol;
};
Tolerance ToleranceFor(const std::string& dtype) {
  return dtype == "bf16" ? Tolerance{3e-2, 2e-2} : Tolerance{1e-4, 1e-5};
}

// What one thread did; written only by that thread, read by main() after join().
struct ThreadResult {
  uint64_t executions = 0;
  uint64_t elements = 0;
  uint64_t mismatches = 0;
  double worst_error = 0;
  double worst_ratio = 0;  // the largest |error| / tolerance: below 1 when everything matched
};

// One thread's forward passes on its NeuronCore, with tensors of its own.
void RunThread(int thread, int core, int iters, const Shape& s, const CoreModels& m,
               const Weights& w, ThreadResult* result) {
  const size_t e = examples::ElementSize(s.dtype);
  nrt_tensor_t* x = examples::DeviceTensor(core, size_t(s.batch) * s.hidden * e, "x");
  nrt_tensor_t* h = examples::DeviceTensor(core, size_t(s.batch) * s.ffn * e, "fc1.out");
  nrt_tensor_t* g = examples::DeviceTensor(core, size_t(s.batch) * s.ffn * e, "gelu.out");
  nrt_tensor_t* y = examples::DeviceTensor(core, size_t(s.batch) * s.hidden * e, "y");
  // Input and output set of each model in turn: linear1, gelu, linear2.
  // clang-format off
  nrt_tensor_set_t* sets[] = {
      Set({{"x", x}, {"w", m.w1}, {"b", m.b1}}), Set({{"y", h}}),
      Set({{"x", h}}),                           Set({{"y", g}}),
      Set({{"x", g}, {"w", m.w2}, {"b", m.b2}}), Set({{"y", y}}),
  };
  // clang-format on
  const Tolerance tol = ToleranceFor(s.dtype);
  std::vector<uint8_t> yb(size_t(s.batch) * s.hidden * e);
  for (int i = 0; i < iters; ++i) {
    // Thread 0 marks the steps (a step is the process's, as prof.step() in PyTorch).
    if (thread == 0) nrtprof_step();
    std::seed_seq seed{thread, i};
    std::mt19937 rng(seed);
    const std::vector<uint8_t> xb =
        examples::Encode(Uniform(size_t(s.batch) * s.hidden, 2.0f, &rng), s.dtype);
    {
      nrtprof::ScopedRange forward("mlp.forward");
      {
        nrtprof::ScopedRange range("aten::copy_");
        examples::Check(nrt_tensor_write(x, xb.data(), 0, xb.size()), "nrt_tensor_write (x)");
      }
      {
        nrtprof::ScopedRange range("aten::linear");
        examples::Check(nrt_execute(m.linear1, sets[0], sets[1]), "nrt_execute (mlp_linear1)");
      }
      {
        nrtprof::ScopedRange range("aten::gelu");
        examples::Check(nrt_execute(m.gelu, sets[2], sets[3]), "nrt_execute (mlp_gelu)");
      }
      {
        nrtprof::ScopedRange range("aten::linear");
        examples::Check(nrt_execute(m.linear2, sets[4], sets[5]), "nrt_execute (mlp_linear2)");
      }
      {
        nrtprof::ScopedRange range("aten::copy_");
        examples::Check(nrt_tensor_read(y, yb.data(), 0, yb.size()), "nrt_tensor_read (y)");
      }
    }
    result->executions += 3;
    const std::vector<float> out = examples::Decode(yb, s.dtype);
    const std::vector<double> ref = Reference(examples::Decode(xb, s.dtype), w, s);
    for (size_t k = 0; k < out.size(); ++k) {
      const double err = std::fabs(out[k] - ref[k]);
      const double allowed = tol.atol + tol.rtol * std::fabs(ref[k]);
      result->worst_error = std::max(result->worst_error, err);
      result->worst_ratio = std::max(result->worst_ratio, err / allowed);
      if (!(err <= allowed)) ++result->mismatches;
    }
    result->elements += out.size();
  }
  for (nrt_tensor_set_t*& set : sets) nrt_destroy_tensor_set(&set);
  for (nrt_tensor_t** t : {&x, &h, &g, &y}) nrt_tensor_free(t);
}

int Run(int threads, int cores, int iters, const Shape& s) {
  examples::Check(nrt_init(NRT_FRAMEWORK_TYPE_PYTORCH, "", ""), "nrt_init");
  const Weights weights = MakeWeights(s);
  std::vector<CoreModels> models;
  for (int c = 0; c < cores; ++c) models.push_back(LoadCore(c, s, weights));

  const uint64_t threads_per_core = (threads + cores - 1) / cores;
  examples::DeviceTimer timer(
      std::min(kMaxEventsPerCore, threads_per_core * iters * kEventsPerIteration + 1024));
  std::vector<ThreadResult> results(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back(RunThread, t, t % cores, iters, std::cref(s), std::cref(models[t % cores]),
                         std::cref(weights), &results[t]);
  }
  for (std::thread& worker : workers) worker.join();
  std::vector<examples::DeviceTime> per_core;
  const examples::DeviceTime all = timer.Stop(&per_core);
  per_core.resize(cores);

  ThreadResult total;
  for (const ThreadResult& r : results) {
    total.executions += r.executions;
    total.elements += r.elements;
    total.mismatches += r.mismatches;
    total.worst_error = std::max(total.worst_error, r.worst_error);
    total.worst_ratio = std::max(total.worst_ratio, r.worst_ratio);
  }
  printf(
      "mlp: %d threads on %d NeuronCores, %d iterations each, batch %d, hidden %d (inner %d),"
      " %s\n",
      threads, cores, iters, s.batch, s.hidden, s.ffn, s.dtype.c_str());
  printf("  executions done: %llu (3 per iteration)\n",
         static_cast<unsigned long long>(total.executions));
  printf(
      "  output vs float64 reference: max |error| %.3g (worst %.0f%% of tolerance), %llu of %llu"
      " elements out of tolerance -> %s\n",
      total.worst_error, 100 * total.worst_ratio, static_cast<unsigned long long>(total.mismatches),
      static_cast<unsigned long long>(total.elements), total.mismatches == 0 ? "OK" : "WRONG");
  for (int c = 0; c < cores; ++c) {
    const examples::DeviceTime& t = per_core[c];
    printf(
        "  device time on NeuronCore %d: %.3f ms (executions %.3f ms in %llu, transfers %.3f ms"
        " in %llu)\n",
        c, t.total_ns() / 1e6, t.execution_ns / 1e6, static_cast<unsigned long long>(t.executions),
        t.transfer_ns / 1e6, static_cast<unsigned long long>(t.transfers));
  }
  if (all.overwritten != 0) {
    printf("  warning: the system trace lost %llu events; device time is understated\n",
           static_cast<unsigned long long>(all.overwritten));
  }
  for (CoreModels& m : models) UnloadCore(&m);
  nrt_close();
  return total.mismatches == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "mlp --threads T --cores C --iters N [--batch 8] [--hidden 128] [--dtype fp32|bf16]");
  absl::ParseCommandLine(argc, argv);
  const int threads = absl::GetFlag(FLAGS_threads), cores = absl::GetFlag(FLAGS_cores);
  const int iters = absl::GetFlag(FLAGS_iters);
  const int batch = absl::GetFlag(FLAGS_batch), hidden = absl::GetFlag(FLAGS_hidden);
  const Shape s{batch, hidden, 4 * hidden, absl::GetFlag(FLAGS_dtype)};
  uint32_t visible = 0;
  examples::Check(nrt_get_visible_nc_count(&visible), "nrt_get_visible_nc_count");
  if (threads < 1 || threads > 1024) {
    fprintf(stderr, "mlp: --threads must be 1..1024, not %d\n", threads);
    return 2;
  }
  if (cores < 1 || static_cast<uint32_t>(cores) > visible) {
    fprintf(stderr, "mlp: --cores must be 1..%u (the visible NeuronCores), not %d\n", visible,
            cores);
    return 2;
  }
  if (iters < 1 || iters > 1000000) {
    fprintf(stderr, "mlp: --iters must be 1..1000000, not %d\n", iters);
    return 2;
  }
  if (batch < 1 || batch > 4096 || hidden < 1 || hidden > 4096) {
    fprintf(stderr, "mlp: --batch and --hidden must be 1..4096\n");
    return 2;
  }
  if (s.dtype != "bf16" && s.dtype != "fp32") {
    fprintf(stderr, "mlp: --dtype must be fp32 or bf16, not '%s'\n", s.dtype.c_str());
    return 2;
  }
  return Run(threads, cores, iters, s);
}
