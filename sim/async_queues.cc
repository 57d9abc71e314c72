#include "async_queues.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime_internal.h"

namespace nrtsim {
namespace {

using internal::Fail;

constexpr const char* kXuNames[kNumXus] = {"NRTA_XU_TENSOR_OP", "NRTA_XU_COMPUTE",
                                           "NRTA_XU_COLLECTIVES"};

// One increment of the eventfd's counter, as the runtime signals a completion. A closed or
// foreign descriptor is the program's business: the write fails and nothing else happens.
void Signal(int efd) {
  const uint64_t one = 1;
  ssize_t ignored = write(efd, &one, sizeof(one));
  (void)ignored;
}

}  // namespace

absl::StatusOr<uint32_t> AsyncQueueDepthFromEnvironment() {
  const char* value = std::getenv("NRT_SIM_ASYNC_QUEUE_DEPTH");
  if (value == nullptr) return kDefaultAsyncQueueDepth;
  uint32_t depth = 0;
  if (!absl::SimpleAtoi(value, &depth) || depth < 1 || depth > kMaxAsyncQueueDepth) {
    return absl::InvalidArgumentError(absl::StrCat("NRT_SIM_ASYNC_QUEUE_DEPTH='", value,
                                                   "' is not a whole number from 1 to ",
                                                   kMaxAsyncQueueDepth));
  }
  return depth;
}

AsyncQueues::AsyncQueues() : queues_(new Queue[kMaxCores * kNumLanes]) {
  for (uint32_t lnc = 0; lnc < kMaxCores; ++lnc) {
    for (int xu = 0; xu < kNumXus; ++xu) {
      for (int queue = 0; queue < QueuesOf(static_cast<Xu>(xu)); ++queue) {
        queues_[lnc * kNumLanes + LaneOf(static_cast<Xu>(xu), queue)].xu_id =
            XuIdOf(lnc, static_cast<Xu>(xu), queue);
      }
    }
  }
}

void AsyncQueues::Start(uint32_t num_cores, uint32_t depth) {
  for (uint32_t i = 0; i < kMaxCores * kNumLanes; ++i) {
    Queue& q = queues_[i];
    std::lock_guard<std::mutex> lock(q.mu);
    q.issued.store(0, std::memory_order_relaxed);
    q.completed.store(0, std::memory_order_relaxed);
    q.stopping = false;
    q.seq_efds.clear();
    q.xu_efd = -1;
  }
  num_cores_.store(num_cores, std::memory_order_relaxed);
  depth_.store(depth, std::memory_order_relaxed);
  state_.store(kOpen, std::memory_order_release);
}

void AsyncQueues::Stop() {
  const uint32_t n = num_cores_.load(std::memory_order_relaxed) * kNumLanes;
  for (uint32_t i = 0; i < n; ++i) {
    Queue& q = queues_[i];
    std::thread worker;
    {
      std::lock_guard<std::mutex> lock(q.mu);
      q.stopping = true;
      worker = std::move(q.worker);
    }
    q.wake.notify_all();
    // The worker completes what is queued, then returns.
    if (worker.joinable()) worker.join();
  }
  state_.store(kClosed, std::memory_order_release);
}

NRT_STATUS AsyncQueues::Ready() const {
  switch (state_.load(std::memory_order_acquire)) {
    case kOpen:
      return NRT_SUCCESS;
    case kClosed:
      return NRT_CLOSED;
    default:
      return NRT_UNINITIALIZED;
  }
}

AsyncQueues::Queue* AsyncQueues::Find(const char* fn, uint32_t lnc, int xu, int queue) const {
  const uint32_t cores = num_cores_.load(std::memory_order_relaxed);
  if (lnc >= cores) {
    Fail(NRT_INVALID, absl::StrCat(fn, ": NeuronCore ", lnc, " does not exist (", cores,
                                   " visible)"));
    return nullptr;
  }
  if (xu < 0 || xu >= kNumXus) {
    Fail(NRT_INVALID, absl::StrCat(fn, ": execution unit ", xu, " is not an nrta_xu_t"));
    return nullptr;
  }
  const int queues = QueuesOf(static_cast<Xu>(xu));
  if (queue < 0 || queue >= queues) {
    Fail(NRT_INVALID, absl::StrCat(fn, ": queue ", queue, " of ", kXuNames[xu],
                                   " does not exist (it has ", queues, ", from 0)"));
    return nullptr;
  }
  return &queues_[lnc * kNumLanes + LaneOf(static_cast<Xu>(xu), queue)];
}

AsyncQueues::Queue* AsyncQueues::FindIssued(uint64_t seq, uint64_t* number) const {
  const uint32_t xu_id = static_cast<uint32_t>(seq >> kSeqNumBits);
  const uint32_t lnc = xu_id >> 8;
  const int xu = static_cast<int>((xu_id >> 4) & 0xf);
  const int queue = static_cast<int>(xu_id & 0xf);
  if (lnc >= num_cores_.load(std::memory_order_relaxed) || xu >= kNumXus ||
      queue >= QueuesOf(static_cast<Xu>(xu))) {
    return nullptr;
  }
  Queue* q = &queues_[lnc * kNumLanes + LaneOf(static_cast<Xu>(xu), queue)];
  *number = seq & kSeqNumMask;
  if (*number == 0 || *number > q->issued.load(std::memory_order_acquire)) return nullptr;
  return q;
}

NRT_STATUS AsyncQueues::Schedule(const char* fn, uint32_t lnc, Xu xu, int queue,
                                 NRT_STATUS* ret,
                                 const std::function<Job(uint64_t seq)>& make_job,
                                 uint64_t* seq) {
  Queue* q = Find(fn, lnc, static_cast<int>(xu), queue);
  if (q == nullptr) return NRT_INVALID;
  {
    std::lock_guard<std::mutex> lock(q->mu);
    const uint64_t issued = q->issued.load(std::memory_order_relaxed);
    if (issued - q->completed.load(std::memory_order_acquire) >=
        depth_.load(std::memory_order_relaxed)) {
      return NRT_QUEUE_FULL;
    }
    if (issued == kSeqNumMask) {
      return Fail(NRT_FAILURE, absl::StrCat(fn, ": the queue's sequence numbers are used up"));
    }
    const uint64_t number = issued + 1;
    const uint64_t id = (q->xu_id << kSeqNumBits) | number;
    q->pending.push_back(Request{number, make_job(id), ret});
    q->issued.store(number, std::memory_order_release);
    if (!q->worker.joinable()) q->worker = std::thread(&AsyncQueues::Work, q);
    *seq = id;
  }
  q->wake.notify_one();
  return NRT_SUCCESS;
}

void AsyncQueues::Work(Queue* q) {
  for (;;) {
    Request request;
    {
      std::unique_lock<std::mutex> lock(q->mu);
      q->wake.wait(lock, [q] { return !q->pending.empty() || q->stopping; });
      if (q->pending.empty()) return;  // stopping, and nothing left to complete
      request = std::move(q->pending.front());
      q->pending.pop_front();
    }
    bool finished = false;
    request.job([q, &request, &finished](NRT_STATUS status) {
      if (finished) return;
      finished = true;
      Finish(q, request, status);
    });
    if (!finished) Finish(q, request, NRT_FAILURE);  // a job that forgot: never left pending
    request.job = nullptr;  // what the job holds (tensors' memory, the model) goes now
  }
}

void AsyncQueues::Finish(Queue* q, const Request& request, NRT_STATUS status) {
  // Atomic, so a program may look at *ret while polling without a data race.
  if (request.ret != nullptr) __atomic_store_n(request.ret, status, __ATOMIC_RELAXED);
  int fds[2];
  int n = 0;
  {
    // Under the lock, so that a registration sees either the completion or its own entry.
    std::lock_guard<std::mutex> lock(q->mu);
    q->completed.store(request.number, std::memory_order_release);
    auto it = q->seq_efds.find(request.number);
    if (it != q->seq_efds.end()) {
      fds[n++] = it->second;
      q->seq_efds.erase(it);
    }
    if (q->xu_efd >= 0) fds[n++] = q->xu_efd;
  }
  for (int i = 0; i < n; ++i) Signal(fds[i]);
}

NRT_STATUS AsyncQueues::IsCompleted(uint64_t seq, bool* completed) const {
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (completed == nullptr) return Fail(NRT_INVALID, "nrta_is_completed: null output pointer");
  uint64_t number = 0;
  const Queue* q = FindIssued(seq, &number);
  if (q == nullptr) {
    return Fail(NRT_INVALID,
                absl::StrCat("nrta_is_completed: sequence id ", seq, " was never issued"));
  }
  *completed = number <= q->completed.load(std::memory_order_acquire);
  return NRT_SUCCESS;
}

NRT_STATUS AsyncQueues::LastCompleted(uint32_t lnc, int xu, int queue, uint64_t* seq) const {
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (seq == nullptr) return Fail(NRT_INVALID, "nrta_get_sequence: null output pointer");
  const Queue* q = Find("nrta_get_sequence", lnc, xu, queue);
  if (q == nullptr) return NRT_INVALID;
  *seq = (q->xu_id << kSeqNumBits) | q->completed.load(std::memory_order_acquire);
  return NRT_SUCCESS;
}

NRT_STATUS AsyncQueues::NotifySeq(uint64_t seq, int efd) {
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (efd < -1) {
    return Fail(NRT_INVALID, absl::StrCat("nrta_event_register_seq_id_completion: fd ", efd,
                                          " is neither an eventfd nor -1"));
  }
  uint64_t number = 0;
  Queue* q = FindIssued(seq, &number);
  if (q == nullptr) {
    return Fail(NRT_INVALID, absl::StrCat("nrta_event_register_seq_id_completion: sequence id ",
                                          seq, " was never issued"));
  }
  bool signal_now = false;
  {
    std::lock_guard<std::mutex> lock(q->mu);
    if (efd < 0) {
      q->seq_efds.erase(number);
    } else if (number <= q->completed.load(std::memory_order_acquire)) {
      signal_now = true;  // completed already: no wakeup is lost
    } else {
      q->seq_efds[number] = efd;
    }
  }
  if (signal_now) Signal(efd);
  return NRT_SUCCESS;
}

NRT_STATUS AsyncQueues::NotifyXu(uint32_t lnc, int xu, int queue, int efd) {
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (efd < -1) {
    return Fail(NRT_INVALID, absl::StrCat("nrta_event_register_xu_completion: fd ", efd,
                                          " is neither an eventfd nor -1"));
  }
  Queue* q = Find("nrta_event_register_xu_completion", lnc, xu, queue);
  if (q == nullptr) return NRT_INVALID;
  std::lock_guard<std::mutex> lock(q->mu);
  q->xu_efd = efd;
  return NRT_SUCCESS;
}

}  // namespace nrtsim
