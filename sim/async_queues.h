// The request queues of the explicit asynchronous API (nrt/nrt_async.h): per logical
// NeuronCore, execution unit and queue, the requests scheduled and not yet completed, their
// sequence ids, completion (an atomic per queue, so polling takes no lock), eventfd
// notifications, and the worker thread that runs the queue's requests in order. What a request
// does on the device is the runtime's business (a Job); this file only orders, counts and
// completes them. Internal to libnrt.
//
// Sequence ids: the queue's XU id in the top 16 bits, (lnc << 8) | (xu << 4) | queue, and the
// queue's request number below, from 1 after each Start(). "Nothing completed yet" is the XU id
// with number 0, below every id the queue hands out.
//
// Thread-safe. Lock order: a queue's lock, then anything a scheduling callback takes (a lane's
// lock, a trace ring's lock); the worker runs jobs holding no lock of this class.
#ifndef NRTPROF_SIM_ASYNC_QUEUES_H_
#define NRTPROF_SIM_ASYNC_QUEUES_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "neuron_core.h"
#include "nrt/nrt_status.h"

namespace nrtsim {

inline constexpr uint32_t kMaxCores = 64;
inline constexpr uint32_t kDefaultAsyncQueueDepth = 64;
inline constexpr uint32_t kMaxAsyncQueueDepth = 4096;

// NRT_SIM_ASYNC_QUEUE_DEPTH (1..4096, default 64): requests in flight per queue. A malformed
// value is an InvalidArgument naming the variable.
absl::StatusOr<uint32_t> AsyncQueueDepthFromEnvironment();

inline constexpr int kSeqNumBits = 48;
inline constexpr uint64_t kSeqNumMask = (1ull << kSeqNumBits) - 1;
inline uint16_t XuIdOf(uint32_t lnc, Xu xu, int queue) {
  return static_cast<uint16_t>((lnc << 8) | (static_cast<uint32_t>(xu) << 4) |
                               static_cast<uint32_t>(queue));
}

class AsyncQueues {
 public:
  // Completes a request: its `ret` receives the status, pollers and eventfds see it done.
  using Complete = std::function<void(NRT_STATUS)>;
  // A request's work, run by the queue's worker. It calls `complete` once, at the moment the
  // request completes (before what follows it on the device may start).
  using Job = std::function<void(const Complete& complete)>;

  AsyncQueues();
  AsyncQueues(const AsyncQueues&) = delete;
  AsyncQueues& operator=(const AsyncQueues&) = delete;

  // Opens the queues of `num_cores` cores, each holding up to `depth` requests in flight, with
  // sequence numbers from 1. Called by nrt_init.
  void Start(uint32_t num_cores, uint32_t depth);
  // Waits for every queued request to complete (in order, per queue), joins the workers and
  // answers NRT_CLOSED from then on. Called by nrt_close, which first makes the cores hurry.
  void Stop();

  // NRT_SUCCESS while open; NRT_UNINITIALIZED before the first Start, NRT_CLOSED after Stop.
  NRT_STATUS Ready() const;

  // Checks `xu`, `queue` (and the core) and puts a request on that queue. `make_job(seq)` is
  // called under the queue's lock with the request's sequence id, before any other request can
  // be scheduled on the queue, and returns the request's work. NRT_QUEUE_FULL when the queue
  // holds `depth` requests: nothing is scheduled and `make_job` is not called. `fn` names the
  // public function in error lines.
  NRT_STATUS Schedule(const char* fn, uint32_t lnc, Xu xu, int queue, NRT_STATUS* ret,
                      const std::function<Job(uint64_t seq)>& make_job, uint64_t* seq);

  // Lock-free: two atomic loads.
  NRT_STATUS IsCompleted(uint64_t seq, bool* completed) const;
  NRT_STATUS LastCompleted(uint32_t lnc, int xu, int queue, uint64_t* seq) const;

  NRT_STATUS NotifySeq(uint64_t seq, int efd);
  NRT_STATUS NotifyXu(uint32_t lnc, int xu, int queue, int efd);

 private:
  struct Request {
    uint64_t number = 0;
    Job job;
    NRT_STATUS* ret = nullptr;
  };
  struct Queue {
    std::atomic<uint64_t> issued{0};     // the last number handed out
    std::atomic<uint64_t> completed{0};  // the last number completed
    uint64_t xu_id = 0;
    std::mutex mu;
    std::condition_variable wake;
    std::deque<Request> pending ABSL_GUARDED_BY(mu);
    bool stopping ABSL_GUARDED_BY(mu) = false;
    std::thread worker ABSL_GUARDED_BY(mu);  // started by the queue's first request
    std::unordered_map<uint64_t, int> seq_efds ABSL_GUARDED_BY(mu);  // by number
    int xu_efd ABSL_GUARDED_BY(mu) = -1;
  };
  enum State : int { kUninitialized = 0, kOpen = 1, kClosed = 2 };

  // The queue of (lnc, xu, queue), or null (after an error line naming `fn`) if there is none.
  Queue* Find(const char* fn, uint32_t lnc, int xu, int queue) const;
  // The queue a sequence id names and its number, or null if no such queue or number was
  // ever handed out; quiet (callers say what failed).
  Queue* FindIssued(uint64_t seq, uint64_t* number) const;
  static void Work(Queue* q);
  static void Finish(Queue* q, const Request& request, NRT_STATUS status);

  std::unique_ptr<Queue[]> queues_;  // kMaxCores * kNumLanes, index lnc * kNumLanes + lane
  std::atomic<int> state_{kUninitialized};
  std::atomic<uint32_t> num_cores_{0};
  std::atomic<uint32_t> depth_{kDefaultAsyncQueueDepth};
};

}  // namespace nrtsim

#endif  // NRTPROF_SIM_ASYNC_QUEUES_H_
