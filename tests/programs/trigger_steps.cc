// A training loop for the trigger tests (issue 41): STEPS steps (nrtprof_step() at the top of
// each, so each is a "ProfilerStep#N" range), each a "forward" range holding one execution of a
// small model and a host wait of STEP_MS; the steps named by --slow are FACTOR times as long
// (their wait is), and the execution of step --fail is given a tensor set without its inputs,
// which the runtime refuses (NRT_INVALID; the program prints it and goes on).
//   usage: trigger_steps STEPS STEP_MS [--slow K[,K2...]] [--slow_every N] [--factor F]
//                        [--fail K] [--rank R]
// --slow_every N: every Nth step (from step N on) is slow. Prints the steps made, the slow
// ones, the failed call's status, and the longest of the other steps as the program timed them
// ("longest other step: X ms (step N)"), so that a test can tell a loaded machine's stall from a
// wrong capture. It asks for SCHED_FIFO (as root; else it runs as it is), so that a machine
// busy with other work stalls its wake-ups less.
#include <sched.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "examples/example_util.h"
#include "nrt/nrt.h"
#include "nrtprof/annotate.h"

namespace {

constexpr char kModel[] =
    "model step_add\n"
    "input a fp32 [4,64]\n"
    "input b fp32 [4,64]\n"
    "output out fp32 [4,64]\n"
    "out = add(a, b)\n";

void SleepNs(uint64_t ns) {
  timespec t{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (nanosleep(&t, &t) != 0) {
  }
}

int Usage() {
  fprintf(stderr,
          "usage: trigger_steps STEPS STEP_MS [--slow K[,K2...]] [--slow_every N] [--factor F] "
          "[--fail K] [--rank R]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  const int steps = atoi(argv[1]);
  const double step_ms = atof(argv[2]);
  std::set<int> slow;
  int slow_every = 0, fail = -1;
  double factor = 4;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--slow") {
      for (char* s = strtok(argv[i + 1], ","); s != nullptr; s = strtok(nullptr, ",")) {
        slow.insert(atoi(s));
      }
    } else if (flag == "--slow_every") {
      slow_every = atoi(argv[i + 1]);
    } else if (flag == "--factor") {
      factor = atof(argv[i + 1]);
    } else if (flag == "--fail") {
      fail = atoi(argv[i + 1]);
    } else if (flag == "--rank") {
      // A rank of a job (the daemon's job is the command line without it): nothing else.
    } else {
      return Usage();
    }
  }
  if (steps < 1 || step_ms <= 0 || (argc - 3) % 2 != 0) return Usage();
  sched_param fifo{};
  fifo.sched_priority = 1;
  const bool realtime = sched_setscheduler(0, SCHED_FIFO, &fifo) == 0;
  using examples::Check;
  Check(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), "nrt_init");
  nrt_model_t* model = examples::LoadModelText(kModel, 0);
  nrt_tensor_t* a = examples::DeviceTensor(0, 4 * 64 * 4, "a");
  nrt_tensor_t* b = examples::DeviceTensor(0, 4 * 64 * 4, "b");
  nrt_tensor_t* out = examples::DeviceTensor(0, 4 * 64 * 4, "out");
  nrt_tensor_set_t *inputs = nullptr, *outputs = nullptr, *none = nullptr;
  Check(nrt_allocate_tensor_set(&inputs), "nrt_allocate_tensor_set");
  Check(nrt_allocate_tensor_set(&outputs), "nrt_allocate_tensor_set");
  Check(nrt_allocate_tensor_set(&none), "nrt_allocate_tensor_set");
  Check(nrt_add_tensor_to_tensor_set(inputs, "a", a), "nrt_add_tensor_to_tensor_set");
  Check(nrt_add_tensor_to_tensor_set(inputs, "b", b), "nrt_add_tensor_to_tensor_set");
  Check(nrt_add_tensor_to_tensor_set(outputs, "out", out), "nrt_add_tensor_to_tensor_set");
  std::string slow_steps;
  double longest_other_ms = 0;
  int longest_other = -1;
  timespec begun{};
  for (int step = 0; step < steps; ++step) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (step > 0 && slow.count(step - 1) == 0 && step - 1 != fail &&
        !(slow_every > 0 && step - 1 >= slow_every && (step - 1) % slow_every == 0)) {
      const double ms = (now.tv_sec - begun.tv_sec) * 1e3 + (now.tv_nsec - begun.tv_nsec) / 1e6;
      if (ms > longest_other_ms) {
        longest_other_ms = ms;
        longest_other = step - 1;
      }
    }
    begun = now;
    nrtprof_step();
    const bool is_slow =
        slow.count(step) != 0 || (slow_every > 0 && step >= slow_every && step % slow_every == 0);
    if (is_slow) slow_steps += " " + std::to_string(step);
    {
      nrtprof::ScopedRange forward("forward");
      if (step == fail) {
        printf("step %d: nrt_execute returned %d\n", step, nrt_execute(model, none, outputs));
      } else {
        Check(nrt_execute(model, inputs, outputs), "nrt_execute");
      }
    }
    SleepNs(static_cast<uint64_t>(step_ms * (is_slow ? factor : 1) * 1e6));
  }
  nrtprof_step();  // the last step ends (its range is drawn)
  Check(nrt_unload(model), "nrt_unload");
  nrt_close();
  printf("steps %d\nslow:%s\nlongest other step: %.1f ms (step %d)\nrealtime: %s\n", steps,
         slow_steps.c_str(), longest_other_ms, longest_other, realtime ? "yes" : "no");
  return 0;
}
