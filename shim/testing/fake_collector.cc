#include "shim/testing/fake_collector.h"

#include <deque>
#include <utility>

namespace nrtprof::shim::testing {

const nrtprof::Hello* RecordedStream::hello() const {
  if (messages.empty() || !messages.front().has_hello()) return nullptr;
  return &messages.front().hello();
}

std::vector<const nrtprof::EventBatch*> RecordedStream::batches() const {
  std::vector<const nrtprof::EventBatch*> out;
  for (const auto& m : messages) {
    if (m.has_batch()) out.push_back(&m.batch());
  }
  return out;
}

const nrtprof::EventBatch* RecordedStream::last_batch() const {
  auto all = batches();
  return all.empty() ? nullptr : all.back();
}

std::map<uint32_t, std::string> RecordedStream::strings() const {
  std::map<uint32_t, std::string> out;
  for (const auto* b : batches()) {
    for (const auto& s : b->strings()) out[s.iid()] = s.value();
  }
  return out;
}

std::map<uint32_t, std::vector<uint32_t>> RecordedStream::stacks() const {
  std::map<uint32_t, std::vector<uint32_t>> out;
  for (const auto* b : batches()) {
    for (const auto& s : b->stacks()) out[s.iid()].assign(s.frame_iids().begin(), s.frame_iids().end());
  }
  return out;
}

std::vector<nrtprof::Event> RecordedStream::events() const {
  std::vector<nrtprof::Event> out;
  for (const auto* b : batches()) out.insert(out.end(), b->events().begin(), b->events().end());
  return out;
}

std::vector<std::pair<std::string, nrtprof::Event>> RecordedStream::Named(
    nrtprof::EventKind kind) const {
  const auto names = strings();
  std::vector<std::pair<std::string, nrtprof::Event>> out;
  for (const auto& e : events()) {
    if (e.kind() != kind) continue;
    auto it = names.find(e.name_iid());
    out.emplace_back(it != names.end() ? it->second : "<missing string>", e);
  }
  return out;
}

class FakeCollector::Reactor
    : public grpc::ServerBidiReactor<nrtprof::ShimMessage, nrtprof::DaemonMessage> {
 public:
  Reactor(FakeCollector* owner, size_t stream) : owner_(owner), stream_(stream) {
    if (owner_->options_.control.has_value()) {
      nrtprof::DaemonMessage m;
      *m.mutable_control() = *owner_->options_.control;
      Write(std::move(m));
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      std::lock_guard<std::mutex> lock(mu_);
      finishing_ = true;
      if (!writing_) FinishOnceLocked();
      return;
    }
    owner_->OnMessage(stream_, in_);
    // As nrtprofd: the Hello gets an Ack of how far this daemon has the process (this one
    // remembers nothing across streams: 0), each batch its own.
    if (owner_->options_.ack &&
        ((in_.has_batch() && owner_->options_.ack_batches) || in_.has_hello())) {
      nrtprof::DaemonMessage ack;
      ack.mutable_ack()->set_sequence(in_.has_batch() ? in_.batch().sequence() : 0);
      Write(std::move(ack));
    }
    in_.Clear();
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    outbox_.pop_front();
    if (ok && !outbox_.empty()) {
      StartWrite(&outbox_.front());
      return;
    }
    writing_ = false;
    if (finishing_ || !ok) FinishOnceLocked();
  }

  void OnDone() override {
    owner_->OnDone(stream_);
    delete this;
  }

 private:
  void Write(nrtprof::DaemonMessage m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finishing_) return;
    outbox_.push_back(std::move(m));
    if (!writing_) {
      writing_ = true;
      StartWrite(&outbox_.front());
    }
  }

  void FinishOnceLocked() {
    if (finished_) return;
    finished_ = true;
    Finish(grpc::Status::OK);
  }

  FakeCollector* const owner_;
  const size_t stream_;
  nrtprof::ShimMessage in_;
  std::mutex mu_;
  std::deque<nrtprof::DaemonMessage> outbox_;
  bool writing_ = false;
  bool finishing_ = false;
  bool finished_ = false;
};

class FakeCollector::Service : public nrtprof::Collector::CallbackService {
 public:
  explicit Service(FakeCollector* owner) : owner_(owner) {}
  grpc::ServerBidiReactor<nrtprof::ShimMessage, nrtprof::DaemonMessage>* Stream(
      grpc::CallbackServerContext*) override {
    return new Reactor(owner_, owner_->NewStream());
  }

 private:
  FakeCollector* const owner_;
};

FakeCollector::FakeCollector(const std::string& socket_path, Options options)
    : options_(std::move(options)), service_(std::make_unique<Service>(this)) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
}

FakeCollector::~FakeCollector() { Stop(); }

void FakeCollector::Stop() {
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
}

size_t FakeCollector::NewStream() {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.emplace_back();
  cv_.notify_all();
  return streams_.size() - 1;
}

void FakeCollector::OnMessage(size_t stream, const nrtprof::ShimMessage& message) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_[stream].messages.push_back(message);
  cv_.notify_all();
}

void FakeCollector::OnDone(size_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_[stream].done = true;
  cv_.notify_all();
}

bool FakeCollector::WaitForBatches(size_t n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] {
    for (const auto& s : streams_) {
      if (s.batches().size() >= n) return true;
    }
    return false;
  });
}

bool FakeCollector::WaitForFinishedStreams(size_t n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] {
    size_t done = 0;
    for (const auto& s : streams_) done += s.done ? 1 : 0;
    return done >= n;
  });
}

std::vector<RecordedStream> FakeCollector::ProcessStreams(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] {
    for (const auto& s : streams_) {
      if (!s.done) return false;
    }
    return true;
  });
  std::vector<RecordedStream> out;
  for (const RecordedStream& s : streams_) {
    if (s.hello() == nullptr || !s.hello()->final_only()) out.push_back(s);
  }
  return out;
}

std::vector<RecordedStream> FakeCollector::streams() {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_;
}

size_t FakeCollector::streams_opened() {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.size();
}

}  // namespace nrtprof::shim::testing
