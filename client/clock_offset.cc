#include "client/clock_offset.h"

#include <chrono>
#include <cstdlib>

#include "absl/strings/str_format.h"
#include "client/daemon_connection.h"
#include "common/clock.h"

namespace nrtprof::cli {

absl::StatusOr<ClockEstimate> EstimateClock(const std::vector<ClockSample>& samples) {
  if (samples.empty()) return absl::InvalidArgumentError("no clock samples");
  const ClockSample* best = &samples[0];
  ClockEstimate e;
  for (const ClockSample& s : samples) {
    const uint64_t trip = s.received_ns - s.sent_ns;
    if (trip < best->received_ns - best->sent_ns) best = &s;
    if (trip > e.max_round_trip_ns) e.max_round_trip_ns = trip;
  }
  const uint64_t trip = best->received_ns - best->sent_ns;
  // Our monotonic time at the middle of the round trip: where the daemon's reading belongs.
  const uint64_t middle = best->sent_ns + trip / 2;
  e.monotonic_offset_ns = static_cast<int64_t>(best->remote_monotonic_ns - middle);
  e.realtime_offset_ns = best->remote_realtime_ns - (static_cast<int64_t>(middle) +
                                                     best->local_realtime_minus_monotonic_ns);
  e.error_bound_ns = (trip + 1) / 2;
  e.samples = samples.size();
  return e;
}

absl::StatusOr<ClockEstimate> MeasureClock(Control::StubInterface* stub,
                                           const std::string& address, int rounds,
                                           uint64_t budget_ns, std::string* hostname) {
  std::vector<ClockSample> samples;
  const uint64_t began = MonotonicNs();
  for (int i = 0; i < rounds; ++i) {
    if (i >= kMinClockRounds && MonotonicNs() - began > budget_ns) break;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    ClockReply reply;
    ClockSample s;
    s.local_realtime_minus_monotonic_ns =
        static_cast<int64_t>(RealtimeNs()) - static_cast<int64_t>(MonotonicNs());
    s.sent_ns = MonotonicNs();
    const grpc::Status status = stub->Clock(&context, ClockRequest(), &reply);
    s.received_ns = MonotonicNs();
    if (!status.ok()) return FromGrpc(status, address);
    s.remote_monotonic_ns = reply.monotonic_ns();
    s.remote_realtime_ns = reply.realtime_ns();
    samples.push_back(s);
    if (hostname != nullptr) *hostname = reply.hostname();
  }
  return EstimateClock(samples);
}

std::string FormatOffset(int64_t offset_ns, uint64_t error_bound_ns) {
  return absl::StrFormat("%s%.3fms ± %.3fms", offset_ns < 0 ? "-" : "+",
                         static_cast<double>(std::llabs(offset_ns)) / 1e6,
                         static_cast<double>(error_bound_ns) / 1e6);
}

}  // namespace nrtprof::cli
