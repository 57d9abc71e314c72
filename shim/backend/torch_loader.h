// The PyTorch lane's loader: where the process has libtorch mapped, libnrtprof_torch.so
// (shim/torch/) is dlopen()ed from the core's folder and started, so that PyTorch's own
// RecordFunction callbacks record every op, record_function() scope and ProfilerStep#N as
// framework ranges, in an unchanged program. Where libtorch is absent nothing is loaded.
//
// When: at the backend's start (the process's first libnrt call) and at every flusher tick
// until libtorch shows up (a look at glibc's count of loaded objects, dl_iterate_phdr's
// dlpi_adds: a scan only when it changed). Once loaded, each tick disables the callback while
// the process does not record, and enables it again when it does.
//
// Never breaks the program: the lane is loaded only if every libtorch and libc10 it links
// against (its DT_NEEDED) is loaded already under that name (dlopen RTLD_NOLOAD); else, or if
// dlopen or the lane's start fails, one "nrtprof:" notice line and PyTorch runs unobserved.
//
// Thread-safety: any thread; concurrent calls skip (try_lock).
#ifndef NRTPROF_SHIM_BACKEND_TORCH_LOADER_H_
#define NRTPROF_SHIM_BACKEND_TORCH_LOADER_H_

#include <string>
#include <vector>

#include "shim/preload/core_state.h"

namespace nrtprof::shim {

void PollTorchLane(CoreState* core);

// The DT_NEEDED entries of the ELF shared object at `path` (read from its section headers);
// false if it is not one this can read.
bool ReadNeededLibraries(const std::string& path, std::vector<std::string>* needed);

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_TORCH_LOADER_H_
