// A simulated NeuronCore's timelines and the device clock.
//
// A core has one timeline per execution-unit queue (its lanes, as nrt/nrt_async.h numbers the
// queues: tensor op 0 and 1, compute, collectives 0 to 2). Jobs on one lane run one at a time
// in the order they took their tickets; different lanes, and different cores, run side by side.
// A job is timed on the device clock: it starts when its lane is free, never before it was
// submitted (a synchronous call: now) and never before what had completed on the core when it
// was submitted; the thread running it then waits on the host for the modelled time (what is
// left of it) times the time scale before handing the lane to the next ticket.
//
// Synchronous calls (Run) also keep one order among themselves per core, as the runtime's
// synchronous API has always had: one synchronous job at a time per core, in submission order,
// each on its own lane after the asynchronous requests queued there before it. Thread-safe.
#ifndef NRTPROF_SIM_NEURON_CORE_H_
#define NRTPROF_SIM_NEURON_CORE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "absl/base/thread_annotations.h"

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

// A core's lanes: one per execution-unit queue (nrt/nrt_async.h's nrta_xu_t and queue number).
enum class Xu : uint8_t { kTensorOp = 0, kCompute = 1, kCollectives = 2 };
inline constexpr int kNumXus = 3;
inline constexpr int kNumLanes = 6;
// Queues of each execution unit: tensor op 2, compute 1, collectives 3.
inline int QueuesOf(Xu xu) { return xu == Xu::kTensorOp ? 2 : xu == Xu::kCompute ? 1 : 3; }
inline int LaneOf(Xu xu, int queue) {
  return xu == Xu::kTensorOp ? queue : xu == Xu::kCompute ? 2 : 3 + queue;
}
// Where the synchronous API's work goes: nrt_execute on the compute queue, transfers, copies
// and memsets on tensor-op queue 0.
inline constexpr int kComputeLane = 2;
inline constexpr int kTransferLane = 0;

class NeuronCore {
 public:
  NeuronCore(uint32_t index, const DeviceClock* clock, double time_scale);
  NeuronCore(const NeuronCore&) = delete;
  NeuronCore& operator=(const NeuronCore&) = delete;

  uint32_t index() const { return index_; }

  // A synchronous call's job: runs `work(device_start_ns)` on `lane` for `duration_ns` of
  // device time, after the core's earlier synchronous jobs and the lane's earlier tickets, then
  // waits out the modelled time on the host. Returns the device start time. `work` runs while
  // this caller owns the lane and must not submit to the core.
  uint64_t Run(int lane, uint64_t duration_ns,
               const std::function<void(uint64_t device_start_ns)>& work);

  // An asynchronous request's place on `lane`, taken when it is scheduled.
  uint64_t TakeTicket(int lane);
  // Runs `ticket`'s job when its turn on `lane` comes: on the device it starts at
  // `earliest_ns` (when it was scheduled, or later) or when the lane is free, whichever is
  // later, however late this thread gets there; the host then waits out what remains of it
  // (unless Hurry() was called), and `done` runs before the lane goes to the next ticket.
  // Returns the device start time.
  uint64_t RunTicket(int lane, uint64_t ticket, uint64_t earliest_ns, uint64_t duration_ns,
                     const std::function<void(uint64_t device_start_ns)>& work,
                     const std::function<void()>& done);

  // A request whose length is known only once it has run (a collective, which waits for its
  // group): on `lane` it is ready at `earliest_ns` or when the lane is free, whichever is
  // later; `work(ready_ns, &end_ns)` runs then, sets the request's device end (at least
  // ready_ns) and returns how long (device ns) the host should wait after it, times the scale,
  // unless Hurry() was called. `done` runs before the lane goes to the next ticket. Returns
  // the ready time.
  uint64_t RunTicketOpen(int lane, uint64_t ticket, uint64_t earliest_ns,
                         const std::function<uint64_t(uint64_t ready_ns, uint64_t* end_ns)>& work,
                         const std::function<void()>& done);

  // A synchronous call's job whose length is known only once it has run (an execution with a
  // collective): after the core's earlier synchronous jobs, as Run; `work` as RunTicketOpen's.
  // Returns the ready (start) time.
  uint64_t RunOpen(int lane,
                   const std::function<uint64_t(uint64_t ready_ns, uint64_t* end_ns)>& work);

  // The device end of the latest job to complete on this core, any lane (0: none yet).
  uint64_t done_until() const { return done_until_.load(std::memory_order_acquire); }

  // From now on RunTicket's host waits end at once (nrt_close completing what is queued).
  void Hurry();

 private:
  struct Lane {
    // std::mutex, not absl::Mutex: see the note in runtime.h about ThreadSanitizer.
    std::mutex mu;
    std::condition_variable turn;
    uint64_t next_ticket ABSL_GUARDED_BY(mu) = 0;
    uint64_t now_serving ABSL_GUARDED_BY(mu) = 0;
    uint64_t busy_until_ns ABSL_GUARDED_BY(mu) = 0;  // device clock
  };

  // `earliest_ns`: for a synchronous job, a start no earlier than this or now; for a request,
  // its start unless the lane is busy then.
  uint64_t RunOnLane(int lane, uint64_t ticket, uint64_t earliest_ns, uint64_t duration_ns,
                     bool is_async, const std::function<void(uint64_t)>& work,
                     const std::function<void()>* done);
  // The host's wait for an asynchronous job, cut short by Hurry().
  void HostWait(uint64_t deadline_monotonic_ns);
  void Finish(Lane& lane, uint64_t end, const std::function<void()>* done);

  const uint32_t index_;
  const DeviceClock* const clock_;
  const double time_scale_;
  Lane lanes_[kNumLanes];
  // The order of synchronous jobs on this core.
  std::mutex sync_mu_;
  std::condition_variable sync_turn_;
  uint64_t sync_next_ticket_ ABSL_GUARDED_BY(sync_mu_) = 0;
  uint64_t sync_now_serving_ ABSL_GUARDED_BY(sync_mu_) = 0;
  std::atomic<uint64_t> done_until_{0};
  std::mutex hurry_mu_;
  std::condition_variable hurry_cv_;
  bool hurry_ ABSL_GUARDED_BY(hurry_mu_) = false;
};

}  // namespace nrtsim

#endif  // NRTPROF_SIM_NEURON_CORE_H_
