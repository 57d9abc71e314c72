// The functions libnrtprof_shim.so exports in place of libnrt's (interpose.cc).
#ifndef NRTPROF_SHIM_PRELOAD_INTERPOSE_H_
#define NRTPROF_SHIM_PRELOAD_INTERPOSE_H_

#include "shim/preload/core.h"
#include "shim/preload/record.h"

namespace nrtprof::shim::core {

// The shim's wrapper for `f`.
void* WrapperAddress(ApiFunction f) NRTPROF_HIDDEN;

}  // namespace nrtprof::shim::core

#endif  // NRTPROF_SHIM_PRELOAD_INTERPOSE_H_
