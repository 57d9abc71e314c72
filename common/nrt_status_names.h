// The Neuron runtime's names of its status codes (NRT_STATUS in nrt/nrt_status.h, and the codes
// the real runtime returns that the public header does not list), by value. The simulated
// libnrt's nrt_get_status_as_str answers them and the daemon's trigger reasons quote them, so
// a status reads the same in a program's output and in the reason a capture was taken.
//
// A pure function of plain ints, thread-safe, with no dependency beyond the C++ library: the
// simulated libnrt, a shared library that stays lean and otherwise links nothing of nrtprof,
// links it.
#ifndef NRTPROF_COMMON_NRT_STATUS_NAMES_H_
#define NRTPROF_COMMON_NRT_STATUS_NAMES_H_

namespace nrtprof {

// "NRT_INVALID" for 2; null for a value the runtime gives no name.
const char* NrtStatusName(int status);

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_NRT_STATUS_NAMES_H_
