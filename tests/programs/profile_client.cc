// A program that profiles its own model with the runtime's device profile (nrt/nrt_profile.h),
// as a user of the Neuron tools would: BEFORE executions, then PROFILED ones between its
// nrt_profile_start and nrt_profile_stop into FILE, then AFTER ones. It also makes the calls
// the runtime refuses (a second start of the same model, a stop of a file never started, a
// second stop) and prints each status, so that a run under the profiler can be compared with
// one without it, line for line.
//   usage: profile_client FILE BEFORE PROFILED AFTER
#include <cstdio>
#include <cstdlib>
#include <string>

#include "examples/example_util.h"
#include "nrt/nrt.h"
#include "nrt/nrt_profile.h"

namespace {

constexpr char kModel[] =
    "model scale_add\n"
    "input a fp32 [4,64]\n"
    "input b fp32 [4,64]\n"
    "output out fp32 [4,64]\n"
    "s = mul_scalar(a, 2)\n"
    "out = add(s, b)\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: profile_client FILE BEFORE PROFILED AFTER\n");
    return 2;
  }
  const std::string file = argv[1];
  const int before = atoi(argv[2]), profiled = atoi(argv[3]), after = atoi(argv[4]);
  using examples::Check;
  Check(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), "nrt_init");
  nrt_model_t* model = examples::LoadModelText(kModel, 0);
  nrt_tensor_t* a = examples::DeviceTensor(0, 4 * 64 * 4, "a");
  nrt_tensor_t* b = examples::DeviceTensor(0, 4 * 64 * 4, "b");
  nrt_tensor_t* out = examples::DeviceTensor(0, 4 * 64 * 4, "out");
  nrt_tensor_set_t *inputs = nullptr, *outputs = nullptr;
  Check(nrt_allocate_tensor_set(&inputs), "nrt_allocate_tensor_set");
  Check(nrt_allocate_tensor_set(&outputs), "nrt_allocate_tensor_set");
  Check(nrt_add_tensor_to_tensor_set(inputs, "a", a), "nrt_add_tensor_to_tensor_set");
  Check(nrt_add_tensor_to_tensor_set(inputs, "b", b), "nrt_add_tensor_to_tensor_set");
  Check(nrt_add_tensor_to_tensor_set(outputs, "out", out), "nrt_add_tensor_to_tensor_set");
  auto run = [&](int n) {
    for (int i = 0; i < n; ++i) Check(nrt_execute(model, inputs, outputs), "nrt_execute");
  };
  run(before);
  printf("start: %d\n", nrt_profile_start(model, file.c_str()));
  printf("start again: %d\n", nrt_profile_start(model, (file + ".again").c_str()));
  printf("stop unknown: %d\n", nrt_profile_stop((file + ".unknown").c_str()));
  run(profiled);
  printf("stop: %d\n", nrt_profile_stop(file.c_str()));
  printf("stop again: %d\n", nrt_profile_stop(file.c_str()));
  run(after);
  Check(nrt_unload(model), "nrt_unload");
  nrt_close();
  printf("executions: %d\n", before + profiled + after);
  return 0;
}
