// How far a daemon's clocks are from this machine's, as NTP estimates a server's: a few dozen
// Control.Clock round trips, each bracketed by two readings of our own monotonic clock; the
// daemon read its clock somewhere inside the bracket, so the sample with the shortest round
// trip bounds the offset best, to within half of that round trip. `nrtprof capture --hosts`
// uses the monotonic offset to name one start instant in every host's own clock and to put
// every host's trace on this machine's timeline, and states the realtime offset (how far the
// host's wall clock is off ours) with the bound.
//
// EstimateClock is pure; MeasureClock makes blocking calls on `stub` (one caller at a time).
#ifndef NRTPROF_CLIENT_CLOCK_OFFSET_H_
#define NRTPROF_CLIENT_CLOCK_OFFSET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/nrtprof.grpc.pb.h"

namespace nrtprof::cli {

// One round trip: our CLOCK_MONOTONIC before and after, what the daemon read in between, and
// our CLOCK_REALTIME - CLOCK_MONOTONIC at the time.
struct ClockSample {
  uint64_t sent_ns = 0;
  uint64_t received_ns = 0;  // >= sent_ns
  uint64_t remote_monotonic_ns = 0;
  int64_t remote_realtime_ns = 0;
  int64_t local_realtime_minus_monotonic_ns = 0;
};

struct ClockEstimate {
  // The host's clock minus ours at the same instant.
  int64_t monotonic_offset_ns = 0;
  int64_t realtime_offset_ns = 0;
  // Both offsets are within this of the truth: half the shortest round trip.
  uint64_t error_bound_ns = 0;
  uint64_t max_round_trip_ns = 0;  // the slowest answer, for how far ahead to start
  size_t samples = 0;
};

// From the sample of the shortest round trip. InvalidArgument without samples.
absl::StatusOr<ClockEstimate> EstimateClock(const std::vector<ClockSample>& samples);

// Up to `rounds` calls of Control.Clock one after the other, each with a 2 s deadline, ending
// early once `budget` has passed and at least kMinClockRounds were made (a far host costs no
// more than that); the first error ends it (one line, as FromGrpc says it). The daemon's host
// name in *hostname, if not null.
absl::StatusOr<ClockEstimate> MeasureClock(Control::StubInterface* stub,
                                           const std::string& address, int rounds,
                                           uint64_t budget_ns, std::string* hostname);
constexpr int kMinClockRounds = 16;

// "+250.012ms ± 0.021ms": an offset and its bound as the CLI and the merged trace state them.
std::string FormatOffset(int64_t offset_ns, uint64_t error_bound_ns);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_CLOCK_OFFSET_H_
