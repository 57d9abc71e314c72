#include "shim/backend/collector_stream.h"

#include <algorithm>
#include <utility>

namespace nrtprof::shim {

struct CollectorStream::Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<const nrtprof::ShimMessage>> outbox;  // guarded by mu
  bool writing = false;                     // a write is outstanding; guarded by mu
  bool broken = false;                      // guarded by mu
  bool read_ended = false;                  // guarded by mu
  bool done = false;                        // OnDone ran; guarded by mu
  bool heard = false;                       // guarded by mu
  bool unauthenticated = false;             // ended with UNAUTHENTICATED; guarded by mu
  std::string failure;                      // OnDone's status message; guarded by mu
  uint64_t acked = 0;                       // guarded by mu
  bool ack_seen = false;                    // guarded by mu
  ControlFn on_control;
};

class CollectorStream::Reactor
    : public grpc::ClientBidiReactor<nrtprof::ShimMessage, nrtprof::DaemonMessage> {
 public:
  Reactor(nrtprof::Collector::Stub* stub, std::shared_ptr<Shared> shared, bool wait_for_ready)
      : shared_(std::move(shared)) {
    context_.set_wait_for_ready(wait_for_ready);
    stub->async()->Stream(&context_, this);
    StartRead(&incoming_);
    // The owner writes from outside reactions: OnDone must wait until it lets go.
    AddHold();
    StartCall();
  }

  // Queues `message`, starting a write if none is outstanding.
  void Write(std::shared_ptr<const nrtprof::ShimMessage> message) {
    std::unique_lock<std::mutex> lock(shared_->mu);
    if (shared_->broken) return;
    shared_->outbox.push_back(std::move(message));
    if (shared_->writing) return;
    StartNextWriteLocked(&lock);
  }

  void Cancel() { context_.TryCancel(); }
  void HalfClose() { StartWritesDone(); }
  void LetGo() { RemoveHold(); }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(shared_->mu);
    if (!ok) {
      shared_->writing = false;
      shared_->broken = true;
      shared_->cv.notify_all();
      return;
    }
    shared_->outbox.pop_front();
    if (shared_->outbox.empty()) {
      shared_->writing = false;
      shared_->cv.notify_all();
      return;
    }
    StartNextWriteLocked(&lock);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->read_ended = true;
      shared_->broken = true;
      shared_->cv.notify_all();
      return;
    }
    if (incoming_.has_control() && shared_->on_control) shared_->on_control(incoming_.control());
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->heard = true;
      if (incoming_.has_ack()) shared_->ack_seen = true;
      if (incoming_.has_ack() && incoming_.ack().sequence() > shared_->acked) {
        shared_->acked = incoming_.ack().sequence();
      }
      shared_->cv.notify_all();
    }
    incoming_.Clear();
    StartRead(&incoming_);
  }

  void OnDone(const grpc::Status& status) override {
    std::shared_ptr<Shared> shared = shared_;
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->done = true;
      shared->unauthenticated = status.error_code() == grpc::StatusCode::UNAUTHENTICATED;
      shared->failure = status.error_message();
      shared->broken = true;
      shared->cv.notify_all();
    }
    delete this;
  }

 private:
  // The message being written stays at the front of the outbox until its write completes.
  void StartNextWriteLocked(std::unique_lock<std::mutex>* lock) {
    shared_->writing = true;
    const nrtprof::ShimMessage* next = shared_->outbox.front().get();
    lock->unlock();
    StartWrite(next);
  }

  std::shared_ptr<Shared> shared_;
  grpc::ClientContext context_;
  nrtprof::DaemonMessage incoming_;
};

CollectorStream::CollectorStream(nrtprof::Collector::Stub* stub, nrtprof::ShimMessage hello,
                                 ControlFn on_control, bool wait_for_ready)
    : shared_(std::make_shared<Shared>()) {
  shared_->on_control = std::move(on_control);
  reactor_ = new Reactor(stub, shared_, wait_for_ready);
  reactor_->Write(std::make_shared<const nrtprof::ShimMessage>(std::move(hello)));
}

CollectorStream::~CollectorStream() {
  if (!closed_) Close(Clock::now(), /*graceful=*/false);
}

void CollectorStream::Send(std::shared_ptr<const nrtprof::ShimMessage> message) {
  if (!closed_) reactor_->Write(std::move(message));
}

uint64_t CollectorStream::acked() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->acked;
}

bool CollectorStream::broken() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->broken;
}

bool CollectorStream::ack_seen() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->ack_seen;
}

bool CollectorStream::heard_from_daemon() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->heard;
}

bool CollectorStream::refused_by_daemon() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->unauthenticated;
}

std::string CollectorStream::failure() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->failure;
}

bool CollectorStream::WaitForAck(uint64_t sequence, Clock::time_point deadline) {
  Shared* s = shared_.get();
  std::unique_lock<std::mutex> lock(s->mu);
  s->cv.wait_until(lock, deadline, [s, sequence] { return s->acked >= sequence || s->broken; });
  return s->acked >= sequence;
}

void CollectorStream::Close(Clock::time_point deadline, bool graceful) {
  if (closed_) return;
  closed_ = true;
  Shared* s = shared_.get();
  bool finished = false;
  if (graceful) {
    std::unique_lock<std::mutex> lock(s->mu);
    const bool drained =
        s->cv.wait_until(lock, deadline, [s] { return s->broken || !s->writing; });
    if (drained && !s->broken) {
      lock.unlock();
      reactor_->HalfClose();
      lock.lock();
    }
    // The daemon finishes the call once it has read the half-close.
    finished = s->cv.wait_until(lock, deadline, [s] { return s->read_ended || s->done; });
  }
  if (!finished) reactor_->Cancel();
  reactor_->LetGo();
  reactor_ = nullptr;
  // OnDone follows promptly once cancelled; wait a little so gRPC lets go of the call before
  // the owner (at exit) moves on, but never past the deadline by more than a moment.
  std::unique_lock<std::mutex> lock(s->mu);
  const auto grace = std::max(deadline, Clock::now() + std::chrono::milliseconds(50));
  s->cv.wait_until(lock, grace, [s] { return s->done; });
}

}  // namespace nrtprof::shim
