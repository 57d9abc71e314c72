// Who this process is, for the Hello that opens each stream: host, boot id, pid, parent,
// start time, executable, command line, shim version, a clock sample, capture, mode and job.
// Read fresh at each call (a forked child is another process). Allocates and reads /proc:
// the flusher thread only.
#ifndef NRTPROF_SHIM_BACKEND_PROCESS_INFO_H_
#define NRTPROF_SHIM_BACKEND_PROCESS_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "shim/preload/config.h"
#include "shim/backend/proto_lite/nrtprof.pb.h"

namespace nrtprof::shim {

nrtprof::Hello BuildHello(const Config& config);

// The daemon's limits on a Hello (daemon/ingest.cc refuses a larger one, and the process's
// whole capture with it): each string field at most kMaxHelloStringBytes, the command line
// (each argument plus one) at most kMaxCommandLineBytes. BuildHello cuts what is longer, at a
// UTF-8 boundary, and ends what it cut with kTruncatedMarker.
inline constexpr size_t kMaxHelloStringBytes = 4096;
inline constexpr size_t kMaxCommandLineBytes = 1 << 20;
inline constexpr char kTruncatedMarker[] = "...[truncated by nrtprof]";

// Parts of BuildHello, for tests.
std::vector<std::string> SplitCommandLine(const std::string& cmdline);  // NUL-separated
// `s` if it has at most `max_bytes`, else its start, cut at a UTF-8 boundary, and the marker,
// `max_bytes` in all.
std::string TruncateForHello(std::string s, size_t max_bytes);
// The arguments, kept whole while they fit in kMaxCommandLineBytes (as the daemon counts
// them); the first that does not is truncated (TruncateForHello) and the rest left out.
std::vector<std::string> FitCommandLine(std::vector<std::string> args);
// CLOCK_REALTIME ns at which the process started, from /proc/self/stat's starttime (clock
// ticks after boot) and the current offset between the realtime and boot-time clocks.
uint64_t ProcessStartRealtimeNs(const std::string& proc_stat, long clock_ticks_per_second,
                                uint64_t realtime_now_ns, uint64_t boottime_now_ns);

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_PROCESS_INFO_H_
