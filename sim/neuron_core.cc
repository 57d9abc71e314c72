#include "neuron_core.h"

#include <errno.h>
#include <time.h>

#include <algorithm>
#include <cmath>

namespace nrtsim {
namespace {

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepUntilMonotonic(uint64_t deadline_ns) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(deadline_ns / 1000000000ull);
  ts.tv_nsec = static_cast<long>(deadline_ns % 1000000000ull);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// The device clock reads 1000 s when the process first touches the device.
constexpr int64_t kDeviceEpochNs = 1000ll * 1000000000ll;

}  // namespace

DeviceClock::DeviceClock() : offset_ns_(kDeviceEpochNs - static_cast<int64_t>(MonotonicNs())) {}

uint64_t DeviceClock::Now() const {
  return static_cast<uint64_t>(static_cast<int64_t>(MonotonicNs()) + offset_ns_);
}

NeuronCore::NeuronCore(uint32_t index, const DeviceClock* clock, double time_scale)
    : index_(index), clock_(clock), time_scale_(time_scale) {}

uint64_t NeuronCore::Run(uint64_t duration_ns,
                         const std::function<void(uint64_t device_start_ns)>& work) {
  uint64_t start = 0;
  uint64_t ticket = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    ticket = next_ticket_++;
    turn_.wait(lock, [this, ticket] { return now_serving_ == ticket; });
    start = std::max(clock_->Now(), busy_until_ns_);
    busy_until_ns_ = start + duration_ns;
  }
  // The host waits the modelled time times the scale from when this job got the core. (Not
  // from its device start: at a scale below 1 the device clock runs ahead of the host's, and
  // waiting for it would undo the scaling.)
  const uint64_t acquired = MonotonicNs();
  work(start);
  if (time_scale_ > 0) {
    const double wait = static_cast<double>(duration_ns) * time_scale_;
    SleepUntilMonotonic(acquired + static_cast<uint64_t>(std::llround(wait)));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++now_serving_;
  }
  turn_.notify_all();
  return start;
}

}  // namespace nrtsim
