// A simulated NeuronCore's work queue and the device clock.
//
// Work on one core (executions and host-initiated DMA) runs one job at a time in submission
// order: Submit() takes a ticket and waits for its turn; the job is timed on the device clock
// (it starts when the core is free, never before "now"), and the caller then waits on the host
// for the modelled duration times the time scale before handing the core to the next ticket.
// Different cores are independent. Thread-safe.
#ifndef NRTPROF_SIM_NEURON_CORE_H_
#define NRTPROF_SIM_NEURON_CORE_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include <condition_variable>
#include <mutex>

namespace nrtsim {

// The device clock: CLOCK_MONOTONIC shifted by a fixed per-process offset, so a device
// timestamp is never mistaken for a host one but converts exactly (sync points carry both).
class DeviceClock {
 public:
  DeviceClock();
  uint64_t Now() const;
  int64_t offset_ns() const { return offset_ns_; }
  uint64_t ToHost(uint64_t device_ns) const {
    return static_cast<uint64_t>(static_cast<int64_t>(device_ns) - offset_ns_);
  }

 private:
  int64_t offset_ns_;
};

class NeuronCore {
 public:
  NeuronCore(uint32_t index, const DeviceClock* clock, double time_scale);
  NeuronCore(const NeuronCore&) = delete;
  NeuronCore& operator=(const NeuronCore&) = delete;

  uint32_t index() const { return index_; }

  // Runs `work(device_start_ns)` on this core for `duration_ns` of device time, in submission
  // order, then waits out the modelled time on the host. Returns the device start time.
  // `work` runs while this caller owns the core and must not submit to it.
  uint64_t Run(uint64_t duration_ns, const std::function<void(uint64_t device_start_ns)>& work);

 private:
  const uint32_t index_;
  const DeviceClock* const clock_;
  const double time_scale_;
  // std::mutex, not absl::Mutex: see the note in runtime.h about ThreadSanitizer.
  std::mutex mu_;
  std::condition_variable turn_;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t now_serving_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t busy_until_ns_ ABSL_GUARDED_BY(mu_) = 0;  // device clock
};

}  // namespace nrtsim

#endif  // NRTPROF_SIM_NEURON_CORE_H_
