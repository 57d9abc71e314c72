// One Collector.Stream to the daemon, on gRPC's callback API so that the flusher never blocks
// on the network: Send() queues, and gRPC's threads write one message at a time, read acks
// and capture control, and report the end of the stream.
//
// Lifecycle: the constructor starts the call and queues the Hello; the owner Send()s, watches
// acked() and broken(), and ends with Close() (graceful: half-close and let the daemon finish;
// otherwise cancel), which returns within its deadline. After Close() the object may be
// destroyed; the reactor deletes itself when gRPC is done with it.
//
// Thread-safety: Send/Close/queued from one owner thread; acked/broken/WaitUntil from any.
// The channel must outlive the stream.
#ifndef NRTPROF_SHIM_COLLECTOR_STREAM_H_
#define NRTPROF_SHIM_COLLECTOR_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "shim/proto_lite/nrtprof.grpc.pb.h"
#include "shim/proto_lite/nrtprof.pb.h"

namespace nrtprof::shim {

class CollectorStream {
 public:
  using Clock = std::chrono::steady_clock;
  // Called on a gRPC thread for each CaptureControl the daemon sends.
  using ControlFn = std::function<void(const nrtprof::CaptureControl&)>;

  // `wait_for_ready`: the stream waits for the daemon to be reachable (gRPC reconnects, at
  // most a second apart) instead of failing at once when it is not.
  CollectorStream(nrtprof::Collector::Stub* stub, nrtprof::ShimMessage hello,
                  ControlFn on_control, bool wait_for_ready = false);
  ~CollectorStream();
  CollectorStream(const CollectorStream&) = delete;
  CollectorStream& operator=(const CollectorStream&) = delete;

  void Send(nrtprof::ShimMessage message);
  // Messages queued or being written.
  size_t queued();
  // The highest Ack.sequence received.
  uint64_t acked();
  // True once an Ack arrived: the daemon's first, right after the Hello, says how far it has
  // this process (0: not at all).
  bool ack_seen();
  // The stream failed or the daemon ended it: nothing more will be sent or acked.
  bool broken();
  // True once the daemon answered anything (the stream reached it).
  bool heard_from_daemon();
  // True once the stream has ended with UNAUTHENTICATED: the daemon refused this process's
  // token (or its TCP listener wants one it was not given).
  bool refused_by_daemon();
  // How the stream ended (gRPC's status message), once broken; empty before.
  std::string failure();
  // Waits until the daemon acknowledged `sequence`, the stream broke or the deadline passed;
  // true if acknowledged.
  bool WaitForAck(uint64_t sequence, Clock::time_point deadline);
  // Ends the stream within `deadline`: graceful waits for queued writes, half-closes and lets
  // the daemon finish; then, or otherwise, cancels.
  void Close(Clock::time_point deadline, bool graceful);

 private:
  struct Shared;
  class Reactor;

  std::shared_ptr<Shared> shared_;
  Reactor* reactor_;  // valid until Close() lets go of it
  bool closed_ = false;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_COLLECTOR_STREAM_H_
