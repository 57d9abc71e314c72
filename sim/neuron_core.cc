#include "neuron_core.h"

#include <errno.h>
#include <time.h>

#include <algorithm>
#include <chrono>
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

uint64_t NeuronCore::TakeTicket(int lane) {
  std::lock_guard<std::mutex> lock(lanes_[lane].mu);
  return lanes_[lane].next_ticket++;
}

uint64_t NeuronCore::Run(int lane, uint64_t duration_ns,
                         const std::function<void(uint64_t device_start_ns)>& work) {
  uint64_t ticket = 0;
  {
    std::unique_lock<std::mutex> lock(sync_mu_);
    ticket = sync_next_ticket_++;
    sync_turn_.wait(lock, [this, ticket] { return sync_now_serving_ == ticket; });
  }
  // The previous synchronous job has completed: this one starts after it on the device, on
  // whichever lane it ran, and after whatever else completed on the core meanwhile.
  const uint64_t start = RunOnLane(lane, TakeTicket(lane), done_until(), duration_ns,
                                   /*is_async=*/false, work, nullptr);
  {
    std::lock_guard<std::mutex> lock(sync_mu_);
    ++sync_now_serving_;
  }
  sync_turn_.notify_all();
  return start;
}

uint64_t NeuronCore::RunOpen(
    int lane, const std::function<uint64_t(uint64_t ready_ns, uint64_t* end_ns)>& work) {
  uint64_t ticket = 0;
  {
    std::unique_lock<std::mutex> lock(sync_mu_);
    ticket = sync_next_ticket_++;
    sync_turn_.wait(lock, [this, ticket] { return sync_now_serving_ == ticket; });
  }
  // As Run: after the previous synchronous job and what completed on the core, and not before
  // now (a synchronous job reaches the device when it is called).
  const std::function<void()> nothing = [] {};
  const uint64_t start = RunTicketOpen(lane, TakeTicket(lane),
                                       std::max(done_until(), clock_->Now()), work, nothing);
  {
    std::lock_guard<std::mutex> lock(sync_mu_);
    ++sync_now_serving_;
  }
  sync_turn_.notify_all();
  return start;
}

uint64_t NeuronCore::RunTicket(int lane, uint64_t ticket, uint64_t earliest_ns,
                               uint64_t duration_ns,
                               const std::function<void(uint64_t device_start_ns)>& work,
                               const std::function<void()>& done) {
  return RunOnLane(lane, ticket, earliest_ns, duration_ns, /*is_async=*/true, work, &done);
}

void NeuronCore::Hurry() {
  {
    std::lock_guard<std::mutex> lock(hurry_mu_);
    hurry_ = true;
  }
  hurry_cv_.notify_all();
}

uint64_t NeuronCore::RunOnLane(int lane_index, uint64_t ticket, uint64_t earliest_ns,
                               uint64_t duration_ns, bool is_async,
                               const std::function<void(uint64_t)>& work,
                               const std::function<void()>* done) {
  Lane& lane = lanes_[lane_index];
  uint64_t start = 0;
  uint64_t now = 0;
  {
    std::unique_lock<std::mutex> lock(lane.mu);
    lane.turn.wait(lock, [&lane, ticket] { return lane.now_serving == ticket; });
    now = clock_->Now();
    // A synchronous job reaches the device now; a request reached it when it was scheduled
    // (`earliest_ns` says when), however late its worker thread gets here.
    start = std::max({is_async ? earliest_ns : std::max(earliest_ns, now), lane.busy_until_ns});
    lane.busy_until_ns = start + duration_ns;
  }
  const uint64_t acquired = MonotonicNs();
  const uint64_t end = start + duration_ns;
  work(start);
  // The host waits the modelled time times the scale, less however late this thread got to a
  // job that had started already (a request whose worker came late: at scale 1 it completes
  // when the device clock reaches its end). Measured from when this thread got the lane, not
  // converted from device timestamps: at a scale below 1 the device clock runs ahead of the
  // host's, and waiting for it would undo the scaling.
  const double late = now > start ? static_cast<double>(now - start) : 0.0;
  const double wait = static_cast<double>(duration_ns) * time_scale_ - late;
  if (time_scale_ > 0 && wait > 0) {
    const uint64_t deadline = acquired + static_cast<uint64_t>(std::llround(wait));
    if (!is_async) {
      SleepUntilMonotonic(deadline);
    } else {
      HostWait(deadline);
    }
  }
  Finish(lane, end, done);
  return start;
}

void NeuronCore::HostWait(uint64_t deadline) {
  // std::chrono::steady_clock is CLOCK_MONOTONIC.
  const auto until = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline));
  std::unique_lock<std::mutex> lock(hurry_mu_);
  hurry_cv_.wait_until(lock, until, [this] { return hurry_; });
}

uint64_t NeuronCore::RunTicketOpen(
    int lane_index, uint64_t ticket, uint64_t earliest_ns,
    const std::function<uint64_t(uint64_t ready_ns, uint64_t* end_ns)>& work,
    const std::function<void()>& done) {
  Lane& lane = lanes_[lane_index];
  uint64_t ready = 0;
  {
    std::unique_lock<std::mutex> lock(lane.mu);
    lane.turn.wait(lock, [&lane, ticket] { return lane.now_serving == ticket; });
    ready = std::max(earliest_ns, lane.busy_until_ns);
  }
  uint64_t end = ready;
  const uint64_t wait_ns = work(ready, &end);
  end = std::max(end, ready);
  {
    // Nobody else runs on the lane before this ticket is finished: its end is set now.
    std::lock_guard<std::mutex> lock(lane.mu);
    lane.busy_until_ns = end;
  }
  if (time_scale_ > 0 && wait_ns > 0) {
    HostWait(MonotonicNs() +
             static_cast<uint64_t>(std::llround(static_cast<double>(wait_ns) * time_scale_)));
  }
  Finish(lane, end, &done);
  return ready;
}

void NeuronCore::Finish(Lane& lane, uint64_t end, const std::function<void()>* done) {
  uint64_t last = done_until_.load(std::memory_order_relaxed);
  while (last < end &&
         !done_until_.compare_exchange_weak(last, end, std::memory_order_acq_rel)) {
  }
  // Completed before the lane moves on: whoever runs next on it sees this job done.
  if (done != nullptr) (*done)();
  {
    std::lock_guard<std::mutex> lock(lane.mu);
    ++lane.now_serving;
  }
  lane.turn.notify_all();
}

}  // namespace nrtsim
