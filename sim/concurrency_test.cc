// Many threads on several NeuronCores at once (NRT_SIM_NUM_CORES=4): every result right, each
// core running one execution at a time, each thread's work in the order it submitted it, and
// handles created and freed concurrently. Also run under --config=tsan.
#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nrt/nrt.h"
#include "nrt/nrt_sys_trace.h"
#include "sim/testing/runtime_testing.h"

namespace {

using nrtsim::testing::FetchedTrace;
using nrtsim::testing::Fetch;
using nrtsim::testing::Num;
using nrtsim::testing::Str;

constexpr int kThreads = 16;
constexpr int kIters = 40;
constexpr int kCores = 4;
constexpr int kN = 32;

const char kModel[] =
    "model axpy\ninput a fp32 [32]\ninput b fp32 [32]\noutput out fp32 [32]\n"
    "t = mul_scalar(a, 3)\nout = add(t, b)\n";

std::string Bytes() { return nrtsim::testing::ModelBytes(kModel); }

// Runs kIters executions of `model` on its own tensors; returns the number of wrong results.
int Worker(int thread, nrt_model_t* model, int core) {
  int wrong = 0;
  nrt_tensor_t *a = nullptr, *b = nullptr, *out = nullptr;
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, core, kN * 4, "a", &a) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, core, kN * 4, "b", &b) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, core, kN * 4, "out", &out) != NRT_SUCCESS) {
    return kIters;
  }
  nrt_tensor_set_t *in = nullptr, *outs = nullptr;
  nrt_allocate_tensor_set(&in);
  nrt_allocate_tensor_set(&outs);
  nrt_add_tensor_to_tensor_set(in, "a", a);
  nrt_add_tensor_to_tensor_set(in, "b", b);
  nrt_add_tensor_to_tensor_set(outs, "out", out);
  std::vector<float> av(kN), bv(kN), result(kN);
  for (int it = 0; it < kIters; ++it) {
    for (int i = 0; i < kN; ++i) {
      av[i] = static_cast<float>(thread * 1000 + it);
      bv[i] = static_cast<float>(i);
    }
    if (nrt_tensor_write(a, av.data(), 0, kN * 4) != NRT_SUCCESS ||
        nrt_tensor_write(b, bv.data(), 0, kN * 4) != NRT_SUCCESS ||
        nrt_execute(model, in, outs) != NRT_SUCCESS ||
        nrt_tensor_read(out, result.data(), 0, kN * 4) != NRT_SUCCESS) {
      ++wrong;
      continue;
    }
    for (int i = 0; i < kN; ++i) {
      if (result[i] != 3 * av[i] + bv[i]) {
        ++wrong;
        break;
      }
    }
  }
  nrt_destroy_tensor_set(&in);
  nrt_destroy_tensor_set(&outs);
  nrt_tensor_free(&a);
  nrt_tensor_free(&b);
  nrt_tensor_free(&out);
  return wrong;
}

TEST(Concurrency, ManyThreadsOnSeveralCores) {
  ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
  nrt_sys_trace_config_t* config = nullptr;
  ASSERT_EQ(nrt_sys_trace_config_allocate(&config), NRT_SUCCESS);
  nrt_sys_trace_config_set_max_events_per_nc(config, 1 << 16);
  ASSERT_EQ(nrt_sys_trace_start(config), NRT_SUCCESS);
  nrt_sys_trace_config_free(config);

  // One model per core shared by its threads, plus threads that load their own.
  const std::string bytes = Bytes();
  std::vector<nrt_model_t*> shared(kCores);
  for (int c = 0; c < kCores; ++c) {
    ASSERT_EQ(nrt_load(bytes.data(), bytes.size(), c, -1, &shared[c]), NRT_SUCCESS);
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int core = t % kCores;
      nrt_model_t* model = shared[core];
      const bool own = t >= kThreads / 2;
      if (own && nrt_load(bytes.data(), bytes.size(), core, -1, &model) != NRT_SUCCESS) {
        wrong += kIters;
        return;
      }
      wrong += Worker(t, model, core);
      if (own) nrt_unload(model);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);

  const FetchedTrace trace = Fetch();
  const auto execs = trace.OfType("device_exec", "start");
  ASSERT_EQ(execs.size(), static_cast<size_t>(kThreads * kIters));
  // Per core, executions start and stop one at a time: stops pair with starts in order.
  std::map<double, std::vector<double>> stops;
  for (const auto& e : trace.OfType("device_exec", "stop")) {
    stops[Num(e, "nc_idx")].push_back(Num(e, "timestamp_ns"));
  }
  std::map<double, size_t> next_stop;
  std::map<std::string, std::vector<std::pair<double, double>>> per_core;
  std::map<double, std::vector<std::pair<double, double>>> per_thread;  // tid -> (exec_id, start)
  for (const auto& e : execs) {
    const double core = Num(e, "nc_idx");
    const double start = Num(e, "timestamp_ns");
    const double stop = stops[core].at(next_stop[core]++);
    per_core[std::to_string(static_cast<int>(core))].push_back({start, stop - start});
    per_thread[Num(e, "thread_id")].push_back(
        {Num(e.fields().at("data").struct_value(), "exec_id"), start});
  }
  EXPECT_EQ(per_core.size(), static_cast<size_t>(kCores));
  for (auto& [core, spans] : per_core) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      EXPECT_LE(spans[i - 1].first + spans[i - 1].second, spans[i].first)
          << core << " ran two executions at once";
    }
  }
  EXPECT_EQ(per_thread.size(), static_cast<size_t>(kThreads));
  for (auto& [tid, list] : per_thread) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) {
      EXPECT_LT(list[i - 1].second, list[i].second) << "thread " << tid << " out of order";
    }
  }
  nrt_close();
}

TEST(Concurrency, CloseWaitsForCallsInFlight) {
  ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
  const std::string bytes = Bytes();
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 50; ++i) {
        nrt_model_t* model = nullptr;
        const NRT_STATUS s = nrt_load(bytes.data(), bytes.size(), -1, -1, &model);
        // Either the runtime is still up, or it has closed: never anything else.
        EXPECT_TRUE(s == NRT_SUCCESS || s == NRT_CLOSED) << s;
        if (s == NRT_SUCCESS) {
          const NRT_STATUS u = nrt_unload(model);
          EXPECT_TRUE(u == NRT_SUCCESS || u == NRT_CLOSED) << u;
        }
      }
    });
  }
  go = true;
  nrt_close();
  for (std::thread& t : threads) t.join();
}

}  // namespace
