// A stand-in for nrtprofd's Collector service in the shim's tests: a gRPC server (callback
// API) on a unix socket that records every ShimMessage per stream and acknowledges each batch.
// Test-only. Thread-safe.
#ifndef NRTPROF_SHIM_TESTING_FAKE_COLLECTOR_H_
#define NRTPROF_SHIM_TESTING_FAKE_COLLECTOR_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "proto/nrtprof.grpc.pb.h"

namespace nrtprof::shim::testing {

// Everything one shim stream sent.
struct RecordedStream {
  std::vector<nrtprof::ShimMessage> messages;
  bool done = false;

  const nrtprof::Hello* hello() const;
  std::vector<const nrtprof::EventBatch*> batches() const;
  // The stream's interned strings, from every batch.
  std::map<uint32_t, std::string> strings() const;
  std::map<uint32_t, std::vector<uint32_t>> stacks() const;
  std::vector<nrtprof::Event> events() const;
  // The events of `kind`, with name_iid resolved through the stream's strings.
  std::vector<std::pair<std::string, nrtprof::Event>> Named(nrtprof::EventKind kind) const;
  const nrtprof::EventBatch* last_batch() const;
};

class FakeCollector {
 public:
  struct Options {
    bool ack = true;  // false: a daemon that reads but never acknowledges
    // false (with `ack`): the Hello is answered, no batch is: a daemon that stopped keeping up.
    bool ack_batches = true;
    std::optional<nrtprof::CaptureControl> control;  // sent when a stream opens
  };

  FakeCollector(const std::string& socket_path, Options options);
  ~FakeCollector();
  FakeCollector(const FakeCollector&) = delete;
  FakeCollector& operator=(const FakeCollector&) = delete;

  // Shuts the server down (streams end, the socket closes); what was recorded stays.
  void Stop();
  // Waits until some stream has received `n` batches; false on timeout.
  bool WaitForBatches(size_t n, std::chrono::milliseconds timeout);
  // Waits until `n` streams have ended; false on timeout.
  bool WaitForFinishedStreams(size_t n, std::chrono::milliseconds timeout);
  std::vector<RecordedStream> streams();
  // Once every stream opened so far has ended (or the timeout passed): those that carried a
  // process's batches, leaving out the ones a best-effort shim opens at exit for its final
  // batch alone (Hello.final_only), which it may do whenever acks are slow.
  std::vector<RecordedStream> ProcessStreams(std::chrono::milliseconds timeout);
  size_t streams_opened();

 private:
  class Service;
  class Reactor;

  void OnMessage(size_t stream, const nrtprof::ShimMessage& message);
  void OnDone(size_t stream);
  size_t NewStream();

  const Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RecordedStream> streams_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace nrtprof::shim::testing

#endif  // NRTPROF_SHIM_TESTING_FAKE_COLLECTOR_H_
