// libnrtprof_torch.so: the framework lane from PyTorch itself (torch_lane_api.h, README.md).
//
// One global RecordFunction callback (ATen/record_function.h: the mechanism torch.profiler and
// Kineto observe ops with), for every scope, without inputs, outputs or ids: its start pushes
// a framework range named as RecordFunction names it (`aten::mul`, a record_function() scope,
// `ProfilerStep#N`, `autograd::engine::evaluate_function: MulBackward0`), its end pops it, on
// the thread the callback runs on, through the core's own nrtprof_range_push/pop: the same
// record, ring and nesting as the program's annotations.
//
// Callbacks run on the executing thread (the autograd engine's threads included) and PyTorch
// pairs each end with the start it ran (its callbacks are fixed when a RecordFunction is made).
// Still, the lane never lets an end it cannot place unbalance the thread's ranges: each thread
// keeps the RecordFunctions it pushed, and an end pops only a range of its own:
//  - the top one (the usual case);
//  - one further down (an end came for an outer function first, as an async op's end would):
//    the ranges above it end with it;
//  - none: an end on a thread that never saw the start (an async op's end on another thread,
//    a callback enabled mid-op) is ignored, and never pops a range the program pushed itself.
// No allocation here (the thread's stack is thread_local storage of this library: glibc makes
// it at the thread's first op), no lock, nothing thrown.
#include <ATen/record_function.h>

#include <stdint.h>
#include <stdio.h>

#include <exception>
#include <memory>

#include "shim/torch/torch_lane_api.h"

namespace nrtprof::shim {
namespace {

// RecordFunctions a thread has open, as far as the lane keeps them; deeper ones are popped in
// order (the core keeps 64 ranges per thread and counts deeper ones as lost).
constexpr uint32_t kTrackedDepth = 128;

struct ThreadRanges {
  uint32_t depth;  // ranges this lane pushed and has not popped; may exceed kTrackedDepth
  const void* functions[kTrackedDepth];
};

// Zero-initialized plain data: no thread_local constructor or guard.
thread_local ThreadRanges t_ranges;

TorchLaneHooks g_hooks{};
at::CallbackHandle g_handle = at::INVALID_CALLBACK_HANDLE;

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction& fn) {
  ThreadRanges& r = t_ranges;
  g_hooks.range_push(fn.name());
  if (r.depth < kTrackedDepth) r.functions[r.depth] = &fn;
  ++r.depth;
  return nullptr;
}

void OnEnd(const at::RecordFunction& fn, at::ObserverContext* /*unused*/) {
  ThreadRanges& r = t_ranges;
  uint32_t depth = r.depth;
  if (depth == 0) return;  // nothing of ours open on this thread
  if (depth > kTrackedDepth) {
    g_hooks.range_pop();
    r.depth = depth - 1;
    return;
  }
  for (uint32_t i = depth; i-- > 0;) {
    if (r.functions[i] != &fn) continue;
    for (; depth > i; --depth) g_hooks.range_pop();
    r.depth = i;
    return;
  }
  // Not started on this thread: ignored.
}

void Notice(const char* what, const char* detail) {
  char line[512];
  snprintf(line, sizeof(line), "nrtprof: %s (%s); PyTorch's ops are not recorded\n", what,
           detail);
  g_hooks.say_notice(line);
}

void SetEnabled(int enabled) {
  if (g_handle == at::INVALID_CALLBACK_HANDLE) return;
  try {
    if (enabled != 0) {
      at::reenableCallback(g_handle);
    } else {
      at::disableCallback(g_handle);
    }
  } catch (const std::exception&) {
  }
}

constexpr TorchLaneApi kApi = {kTorchLaneAbiVersion, &SetEnabled};

}  // namespace
}  // namespace nrtprof::shim

extern "C" __attribute__((visibility("default"))) const nrtprof::shim::TorchLaneApi*
nrtprof_torch_start(const nrtprof::shim::TorchLaneHooks* hooks) {
  namespace ns = nrtprof::shim;
  if (hooks == nullptr || hooks->abi_version != ns::kTorchLaneAbiVersion ||
      hooks->range_push == nullptr || hooks->range_pop == nullptr ||
      hooks->say_notice == nullptr) {
    return nullptr;
  }
  if (ns::g_handle != at::INVALID_CALLBACK_HANDLE) return &ns::kApi;
  ns::g_hooks = *hooks;
  try {
    // Every scope, as torch.profiler observes them: ops (FUNCTION), autograd's nodes
    // (BACKWARD_FUNCTION), record_function() and ProfilerStep#N (USER_SCOPE), TorchScript.
    ns::g_handle = at::addGlobalCallback(at::RecordFunctionCallback(&ns::OnStart, &ns::OnEnd)
                                             .needsInputs(false)
                                             .needsOutputs(false)
                                             .needsIds(false));
  } catch (const std::exception& e) {
    ns::Notice("cannot add a RecordFunction callback to this libtorch", e.what());
    return nullptr;
  }
  return &ns::kApi;
}
