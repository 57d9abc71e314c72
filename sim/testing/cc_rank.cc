// One rank of a collectives job, for sim/cc_test.cc: joins the group (nrt_cc_global_comm_init
// on its core 0, NEURON_RT_ROOT_COMM_ID from the environment), runs collectives through
// nrta_cc_prepare / nrta_cc_schedule on known inputs, checks every output against its own
// computation, and prints what the test needs on stdout:
//   status <op> <NRT status name> ok|wrong      one per collective
//   event <type> <phase> <timestamp_ns> <nc_idx> <worker_gid> <nrta_seq_id> <op_id>
//   sync <nc_timestamp_ns> <cpu_timestamp_ns>   (to put device times on the wall clock)
//   close_ms <ms>
// With --ops=model the rank runs a model holding two all_reduce ops instead (ADD on float32
// between ops, MAX on bfloat16), loaded with nrt_load_collectives and executed once with
// nrt_execute and once with nrta_execute_schedule; before joining it prints
//   check <what> <NRT status name>   (plain nrt_load of it; an execution before the join)
// and device_exec events are printed too.
// Flags (--name=value): rank, size, ops (all | allreduce | allgather | reducescatter | model),
// elems (per rank, default 1024), delay_ms (before scheduling), die (exit by SIGKILL after
// joining), no_schedule_ms (join, wait that long, close without any collective), close_after_ms
// (schedule, then nrt_close after that long without waiting).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "nrt/nrt_sys_trace.h"
#include "sim/bf16.h"
#include "sim/testing/runtime_testing.h"

namespace {

using nrtsim::testing::Num;
using nrtsim::testing::Str;

struct Spec {
  nrt_cc_op_type_t cc_op;
  nrt_op_type_t reduce;
  nrt_dtype_t dtype;
  const char* name;
};

float Input(uint32_t rank, uint64_t i) {
  // Small integers and halves, different per rank: sums stay exact in float32; bf16 rounds.
  return static_cast<float>(static_cast<int>((rank * 37 + i * 11) % 29) - 14) * 0.5f +
         (rank == 1 ? 0.0078125f * (i % 5) : 0.0f);
}

float Stored(nrt_dtype_t dtype, float f) {
  return dtype == NRT_DTYPE_BFLOAT16 ? nrtsim::RoundToBf16(f) : f;
}

std::vector<uint8_t> Encode(nrt_dtype_t dtype, const std::vector<float>& v) {
  const size_t elem = dtype == NRT_DTYPE_BFLOAT16 ? 2 : 4;
  std::vector<uint8_t> out(v.size() * elem);
  for (size_t i = 0; i < v.size(); ++i) {
    if (elem == 2) {
      const uint16_t b = nrtsim::FloatToBf16(v[i]);
      memcpy(&out[i * 2], &b, 2);
    } else {
      memcpy(&out[i * 4], &v[i], 4);
    }
  }
  return out;
}

std::vector<float> Decode(nrt_dtype_t dtype, const std::vector<uint8_t>& bytes) {
  const size_t elem = dtype == NRT_DTYPE_BFLOAT16 ? 2 : 4;
  std::vector<float> v(bytes.size() / elem);
  for (size_t i = 0; i < v.size(); ++i) {
    if (elem == 2) {
      uint16_t b;
      memcpy(&b, &bytes[i * 2], 2);
      v[i] = nrtsim::Bf16ToFloat(b);
    } else {
      memcpy(&v[i], &bytes[i * 4], 4);
    }
  }
  return v;
}

// What rank `rank` of `n` should hold after the collective.
std::vector<float> Expected(const Spec& s, uint32_t n, uint32_t rank, uint64_t elems) {
  std::vector<std::vector<float>> in(n);
  for (uint32_t r = 0; r < n; ++r) {
    for (uint64_t i = 0; i < elems; ++i) in[r].push_back(Stored(s.dtype, Input(r, i)));
  }
  const auto reduce = [&](uint64_t i) {
    float acc = in[0][i];
    for (uint32_t r = 1; r < n; ++r) {
      acc = s.reduce == NRT_OP_MAX   ? std::max(acc, in[r][i])
            : s.reduce == NRT_OP_MIN ? std::min(acc, in[r][i])
                                     : acc + in[r][i];
    }
    return Stored(s.dtype, acc);
  };
  std::vector<float> out;
  if (s.cc_op == NRT_CC_ALLGATHER) {
    for (uint32_t r = 0; r < n; ++r) out.insert(out.end(), in[r].begin(), in[r].end());
  } else if (s.cc_op == NRT_CC_ALLREDUCE) {
    for (uint64_t i = 0; i < elems; ++i) out.push_back(reduce(i));
  } else {
    const uint64_t share = elems / n;
    for (uint64_t i = rank * share; i < (rank + 1) * share; ++i) out.push_back(reduce(i));
  }
  return out;
}

nrt_tensor_t* DeviceTensor(nrt_dtype_t dtype, uint32_t rank, uint64_t elems, const char* name) {
  std::vector<float> values;
  for (uint64_t i = 0; i < elems; ++i) values.push_back(Input(rank, i));
  const std::vector<uint8_t> bytes = Encode(dtype, values);
  nrt_tensor_t* t = nullptr;
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, bytes.size(), name, &t) != NRT_SUCCESS ||
      nrt_tensor_write(t, bytes.data(), 0, bytes.size()) != NRT_SUCCESS) {
    return nullptr;
  }
  return t;
}

// Compares an output tensor with the expected values; prints the first difference.
bool Matches(const char* what, nrt_dtype_t dtype, nrt_tensor_t* t, const std::vector<float>& want) {
  std::vector<uint8_t> bytes(nrt_tensor_get_size(t));
  nrt_tensor_read(t, bytes.data(), 0, bytes.size());
  const std::vector<float> got = Decode(dtype, bytes);
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (got[i] != want[i]) {
      fprintf(stderr, "%s[%zu]: got %g, want %g\n", what, i, got[i], want[i]);
      return false;
    }
  }
  return got.size() == want.size();
}

std::string CcModelText(uint64_t elems) {
  const std::string dims = "[" + std::to_string(elems) + "]";
  return "model cc_step\n"
         "input x fp32 " + dims + "\n"
         "input xb bf16 " + dims + "\n"
         "output s fp32 " + dims + "\n"
         "output mx bf16 " + dims + "\n"
         "h = mul_scalar(x, 1)\n"
         "r = all_reduce(h)\n"
         "s = mul_scalar(r, 1)\n"
         "mx = all_reduce(xb, op=max)\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      flags[a.substr(2, eq - 2)] = a.substr(eq + 1);
    }
  }
  const auto flag = [&](const char* name, long def) {
    auto it = flags.find(name);
    return it == flags.end() ? def : std::atol(it->second.c_str());
  };
  const uint32_t rank = static_cast<uint32_t>(flag("rank", 0));
  const uint32_t size = static_cast<uint32_t>(flag("size", 1));
  const uint64_t elems = static_cast<uint64_t>(flag("elems", 1024));
  const std::string ops = flags.count("ops") ? flags["ops"] : "all";
  setvbuf(stdout, nullptr, _IOLBF, 0);

  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 10;
  nrt_sys_trace_config_t* config = nullptr;
  nrt_sys_trace_config_allocate(&config);
  nrt_sys_trace_config_set_defaults(config);
  if (nrt_sys_trace_start(config) != NRT_SUCCESS) return 11;
  nrt_sys_trace_config_free(config);

  const bool model_mode = ops == "model";
  nrt_model_t* cc_model = nullptr;
  nrt_tensor_set_t* model_in = nullptr;
  nrt_tensor_set_t* model_out = nullptr;
  nrt_tensor_t* out_s = nullptr;
  nrt_tensor_t* out_mx = nullptr;
  if (model_mode) {
    const std::string bytes = nrtsim::testing::ModelBytes(CcModelText(elems));
    nrt_model_t* plain = nullptr;
    printf("check plain_load %s\n",
           nrt_get_status_as_str(nrt_load(bytes.data(), bytes.size(), 0, 1, &plain)));
    if (nrt_load_collectives(bytes.data(), bytes.size(), 0, 1, rank, size, &cc_model) !=
        NRT_SUCCESS) {
      return 18;
    }
    nrt_tensor_t* x = DeviceTensor(NRT_DTYPE_FLOAT32, rank, elems, "x");
    nrt_tensor_t* xb = DeviceTensor(NRT_DTYPE_BFLOAT16, rank, elems, "xb");
    if (x == nullptr || xb == nullptr ||
        nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, elems * 4, "s", &out_s) != NRT_SUCCESS ||
        nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, elems * 2, "mx", &out_mx) != NRT_SUCCESS) {
      return 19;
    }
    model_in = nrtsim::testing::Set({{"x", x}, {"xb", xb}});
    model_out = nrtsim::testing::Set({{"s", out_s}, {"mx", out_mx}});
    printf("check execute_before_join %s\n",
           nrt_get_status_as_str(nrt_execute(cc_model, model_in, model_out)));
  }

  NRT_STATUS s = nrt_cc_global_comm_init(0, rank, size);
  printf("join %s\n", nrt_get_status_as_str(s));
  if (s != NRT_SUCCESS) return 12;
  if (flag("die", 0) != 0) raise(SIGKILL);
  if (const long ms = flag("no_schedule_ms", 0); ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    nrt_close();
    return 0;
  }

  bool all_ok = true;
  if (model_mode) {
    if (const long ms = flag("delay_ms", 0); ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
    const std::vector<float> want_s =
        Expected({NRT_CC_ALLREDUCE, NRT_OP_ADD, NRT_DTYPE_FLOAT32, "s"}, size, rank, elems);
    const std::vector<float> want_mx =
        Expected({NRT_CC_ALLREDUCE, NRT_OP_MAX, NRT_DTYPE_BFLOAT16, "mx"}, size, rank, elems);
    for (int k = 0; k < 2; ++k) {
      nrt_tensor_memset(out_s, 0, 0, elems * 4);
      nrt_tensor_memset(out_mx, 0, 0, elems * 2);
      NRT_STATUS ret = NRT_SUCCESS;
      if (k == 0) {
        ret = nrt_execute(cc_model, model_in, model_out);
      } else {
        nrta_seq_t seq = 0;
        NRT_STATUS request = static_cast<NRT_STATUS>(-1);
        if (nrta_execute_schedule(cc_model, model_in, model_out, 0, &request, &seq) !=
            NRT_SUCCESS) {
          return 20;
        }
        for (bool done = false; !done;) {
          if (nrta_is_completed(seq, &done) != NRT_SUCCESS) return 21;
          if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        ret = __atomic_load_n(&request, __ATOMIC_RELAXED);
      }
      const bool ok = ret == NRT_SUCCESS && Matches("s", NRT_DTYPE_FLOAT32, out_s, want_s) &&
                      Matches("mx", NRT_DTYPE_BFLOAT16, out_mx, want_mx);
      all_ok = all_ok && ok;
      printf("status %s %s %s\n", k == 0 ? "model_execute" : "model_schedule",
             nrt_get_status_as_str(ret), ok ? "ok" : "wrong");
    }
  }

  std::vector<Spec> specs;
  const auto want = [&](const char* name) { return ops == "all" || ops == name; };
  for (nrt_dtype_t dtype : {NRT_DTYPE_FLOAT32, NRT_DTYPE_BFLOAT16}) {
    const bool bf16 = dtype == NRT_DTYPE_BFLOAT16;
    if (model_mode) break;
    if (want("allreduce")) {
      specs.push_back({NRT_CC_ALLREDUCE, NRT_OP_ADD, dtype, bf16 ? "allreduce_add_bf16" : "allreduce_add_fp32"});
      if (ops == "all") {
        specs.push_back({NRT_CC_ALLREDUCE, NRT_OP_MAX, dtype, bf16 ? "allreduce_max_bf16" : "allreduce_max_fp32"});
        specs.push_back({NRT_CC_ALLREDUCE, NRT_OP_MIN, dtype, bf16 ? "allreduce_min_bf16" : "allreduce_min_fp32"});
      }
    }
    if (want("allgather")) {
      specs.push_back({NRT_CC_ALLGATHER, NRT_OP_ADD, dtype, bf16 ? "allgather_bf16" : "allgather_fp32"});
    }
    if (want("reducescatter")) {
      specs.push_back({NRT_CC_REDUCESCATTER, NRT_OP_ADD, dtype, bf16 ? "reducescatter_add_bf16" : "reducescatter_add_fp32"});
      if (ops == "all") {
        specs.push_back({NRT_CC_REDUCESCATTER, NRT_OP_MAX, dtype, bf16 ? "reducescatter_max_bf16" : "reducescatter_max_fp32"});
        specs.push_back({NRT_CC_REDUCESCATTER, NRT_OP_MIN, dtype, bf16 ? "reducescatter_min_bf16" : "reducescatter_min_fp32"});
      }
    }
    if (ops != "all") break;  // one dtype is enough for a single op
  }

  if (const long ms = flag("delay_ms", 0); ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  struct Pending {
    Spec spec;
    nrt_tensor_t* in;
    nrt_tensor_t* out;
    NRT_STATUS ret;
    nrta_seq_t seq;
  };
  std::vector<Pending> pending(specs.size());
  nrt_cc_comm_t comm{};
  std::vector<uint32_t> group(size);
  for (uint32_t r = 0; r < size; ++r) group[r] = r;
  comm.replica_group = group.data();
  comm.rank = rank;
  comm.rank_n = size;
  comm.ctx_device_id = rank;
  comm.ctx_device_count = size;
  comm.vnc = 0;
  for (size_t k = 0; k < specs.size(); ++k) {
    Pending& p = pending[k];
    p.spec = specs[k];
    p.ret = static_cast<NRT_STATUS>(-1);
    const size_t elem = p.spec.dtype == NRT_DTYPE_BFLOAT16 ? 2 : 4;
    const size_t out_elems = p.spec.cc_op == NRT_CC_ALLGATHER        ? elems * size
                             : p.spec.cc_op == NRT_CC_REDUCESCATTER ? elems / size
                                                                    : elems;
    if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, elems * elem, "in", &p.in) != NRT_SUCCESS ||
        nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, out_elems * elem, "out", &p.out) != NRT_SUCCESS) {
      return 13;
    }
    std::vector<float> values;
    for (uint64_t i = 0; i < elems; ++i) values.push_back(Input(rank, i));
    const std::vector<uint8_t> bytes = Encode(p.spec.dtype, values);
    if (nrt_tensor_write(p.in, bytes.data(), 0, bytes.size()) != NRT_SUCCESS) return 14;
    nrt_tensor_list_t in{&p.in, 1}, out{&p.out, 1};
    nrt_cc_context_t* ctx = nullptr;
    s = nrta_cc_prepare(&comm, &in, &out, p.spec.dtype, p.spec.reduce, p.spec.cc_op, &ctx);
    if (s != NRT_SUCCESS) {
      printf("prepare %s %s\n", p.spec.name, nrt_get_status_as_str(s));
      return 15;
    }
    s = nrta_cc_schedule(&ctx, static_cast<int>(k % 3), &p.ret, &p.seq);
    if (s != NRT_SUCCESS) {
      printf("schedule %s %s\n", p.spec.name, nrt_get_status_as_str(s));
      return 16;
    }
  }
  if (const long ms = flag("close_after_ms", 0); ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    const auto t0 = std::chrono::steady_clock::now();
    nrt_close();
    const auto t1 = std::chrono::steady_clock::now();
    printf("close_ms %ld\n", static_cast<long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count()));
    for (const Pending& p : pending) {
      printf("status %s %s -\n", p.spec.name,
             nrt_get_status_as_str(__atomic_load_n(&p.ret, __ATOMIC_RELAXED)));
    }
    return 0;
  }
  for (Pending& p : pending) {
    for (;;) {
      bool done = false;
      if (nrta_is_completed(p.seq, &done) != NRT_SUCCESS) return 17;
      if (done) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const NRT_STATUS ret = __atomic_load_n(&p.ret, __ATOMIC_RELAXED);
    bool ok = false;
    if (ret == NRT_SUCCESS) {
      std::vector<uint8_t> bytes(nrt_tensor_get_size(p.out));
      nrt_tensor_read(p.out, bytes.data(), 0, bytes.size());
      const std::vector<float> got = Decode(p.spec.dtype, bytes);
      const std::vector<float> want_values = Expected(p.spec, size, rank, elems);
      ok = got.size() == want_values.size() &&
           memcmp(got.data(), want_values.data(), got.size() * sizeof(float)) == 0;
      for (size_t i = 0; !ok && i < std::min<size_t>(got.size(), want_values.size()); ++i) {
        if (got[i] != want_values[i]) {
          fprintf(stderr, "%s[%zu]: got %g, want %g\n", p.spec.name, i, got[i], want_values[i]);
          break;
        }
      }
    }
    all_ok = all_ok && ok;
    printf("status %s %s %s\n", p.spec.name, nrt_get_status_as_str(ret), ok ? "ok" : "wrong");
  }
  const nrtsim::testing::FetchedTrace trace = nrtsim::testing::Fetch();
  const std::string shape = nrtsim::testing::RealShapeError(trace.json);
  if (!shape.empty()) printf("shape_error %s\n", shape.c_str());
  for (const auto& e : trace.events) {
    const std::string type = Str(e, "event_type");
    if (type == "timestamp_sync") {
      const auto& data = e.fields().at("data").struct_value();
      printf("sync %.0f %.0f\n", Num(data, "nc_timestamp_ns"), Num(data, "cpu_timestamp_ns"));
    } else if (type == "cc_exec_barrier" || type == "cc_running" || type == "device_exec") {
      const auto& data = e.fields().at("data").struct_value();
      printf("event %s %s %.0f %.0f %.0f %.0f %.0f\n", type.c_str(), Str(e, "phase").c_str(),
             Num(e, "timestamp_ns"), Num(e, "nc_idx"), Num(e, "worker_gid"),
             Num(e, "nrta_seq_id"), Num(data, "op_id"));
    }
  }
  nrt_close();
  return all_ok ? 0 : 3;
}
