// Who this process is, for the Hello that opens each stream: host, boot id, pid, parent,
// start time, executable, command line, shim version, a clock sample, capture and mode.
// Read fresh at each call (a forked child is another process). Allocates and reads /proc:
// the flusher thread only.
#ifndef NRTPROF_SHIM_PROCESS_INFO_H_
#define NRTPROF_SHIM_PROCESS_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "shim/config.h"
#include "shim/proto_lite/nrtprof.pb.h"

namespace nrtprof::shim {

nrtprof::Hello BuildHello(const Config& config);

// Parts of BuildHello, for tests.
std::vector<std::string> SplitCommandLine(const std::string& cmdline);  // NUL-separated
// CLOCK_REALTIME ns at which the process started, from /proc/self/stat's starttime (clock
// ticks after boot) and the current offset between the realtime and boot-time clocks.
uint64_t ProcessStartRealtimeNs(const std::string& proc_stat, long clock_ticks_per_second,
                                uint64_t realtime_now_ns, uint64_t boottime_now_ns);

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_PROCESS_INFO_H_
