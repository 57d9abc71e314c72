// What runtime.cc and runtime_tensors.cc share of the simulated runtime's implementation: not
// part of its interface (runtime.h).
#ifndef NRTSIM_RUNTIME_INTERNAL_H_
#define NRTSIM_RUNTIME_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "nrt/nrt_status.h"

namespace nrtsim::internal {

// Says `line` on stderr (ReportError) and returns `status`.
NRT_STATUS Fail(NRT_STATUS status, const std::string& line);

// The calling thread's id, asked of the kernel once per thread (and again after a fork).
int64_t ThreadId();

// [offset, offset + size) lies within [0, limit), without overflow.
bool RangeOk(size_t offset, size_t size, size_t limit);

}  // namespace nrtsim::internal

#endif  // NRTSIM_RUNTIME_INTERNAL_H_
