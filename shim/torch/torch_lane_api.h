// What the shim's backend and libnrtprof_torch.so (the PyTorch lane, torch_lane.cc) share.
//
// The backend dlopen()s libnrtprof_torch.so (RTLD_LOCAL, from the core's folder) only when it
// finds libtorch already mapped in the process, and only if every libtorch/libc10 the lane
// links against (its DT_NEEDED) is loaded already under that name: the lane never brings a
// libtorch of its own into a process. It then calls nrtprof_torch_start with the core's range
// entry points; the lane registers one global RecordFunction callback, whose start and end push
// and pop framework ranges on the calling thread. This header includes nothing of libtorch.
#ifndef NRTPROF_SHIM_TORCH_TORCH_LANE_API_H_
#define NRTPROF_SHIM_TORCH_TORCH_LANE_API_H_

#include <stdint.h>

namespace nrtprof::shim {

inline constexpr uint32_t kTorchLaneAbiVersion = 1;
inline constexpr const char kTorchLaneLibraryName[] = "libnrtprof_torch.so";
inline constexpr const char kTorchLaneStartSymbol[] = "nrtprof_torch_start";

// The backend's side: the core's exported annotation functions (nrtprof_range_push/pop) and
// its notice function. Any thread.
struct TorchLaneHooks {
  uint32_t abi_version;
  void (*range_push)(const char* name);
  void (*range_pop)();
  void (*say_notice)(const char* line);  // "nrtprof: ...\n"
};

// The lane's side.
struct TorchLaneApi {
  uint32_t abi_version;
  // 0: the callback is disabled (at::disableCallback): PyTorch runs its ops without any
  // RecordFunction work of nrtprof's. 1: enabled again. From the flusher's thread, when the
  // process's recording changes.
  void (*set_enabled)(int enabled);
};

// Null, after one notice line, if the lane cannot observe this libtorch.
using TorchLaneStartFn = const TorchLaneApi* (*)(const TorchLaneHooks* hooks);

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_TORCH_TORCH_LANE_API_H_
