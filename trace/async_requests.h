// The async API's requests of a process as the capture has them: each one's queue and its time
// in flight, from its schedule call's end to its work's end. The timeline's requests-in-flight
// counters (trace_lanes.h) and the summary's queue figures (summary.h) both count from this.
#ifndef NRTPROF_TRACE_ASYNC_REQUESTS_H_
#define NRTPROF_TRACE_ASYNC_REQUESTS_H_

#include <cstdint>
#include <vector>

#include "trace/trace_model.h"

namespace nrtprof::daemon {

// nrta_seq_t: the XU queue's id in the high 16 bits, the request's number in the low 48.
inline constexpr int kNrtaQueueShift = 48;
inline constexpr uint64_t kNrtaSeqMask = (uint64_t{1} << kNrtaQueueShift) - 1;

// An async request of a process (a call that scheduled it, or its work on the device, or both)
// and its time in its execution unit's queue: in flight from the end of its schedule call to
// the end of its work (`retired_ns`). See AsyncRequests for the requests whose work or call is
// not in the capture.
struct AsyncRequest {
  int32_t nc_idx = 0;
  uint32_t xu = 0;          // nrta_seq >> 48
  uint64_t seq = 0;         // nrta_seq's low 48 bits: its order in the queue
  uint64_t scheduled_ns = 0;  // the schedule call's end
  uint64_t retired_ns = 0;    // >= scheduled_ns
  const ApiCall* call = nullptr;
  const DeviceEvent* device = nullptr;  // null: its work is not in the capture
};

// The requests of the process that have a schedule call, by (NeuronCore, XU id, seq). Work
// without its schedule call in the capture (scheduled before it, or the call lost) is left
// out: its start in the queue is unknown, and its end alone would take a count below zero. A
// schedule call whose work is not in the capture (the device had not run it when the capture
// stopped, or its events were lost) would be in flight forever: the queue runs its requests in
// order, so it is retired when the next later request of its queue in the capture starts, else
// at the end of the process's last event; it needs the call's NeuronCore (ApiCall::nc_idx), or
// the one NeuronCore whose work has that XU id, and is left out without either.
std::vector<AsyncRequest> AsyncRequests(const ProcessTrace& process);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_ASYNC_REQUESTS_H_
