// One Collector.Stream to the daemon: the gRPC adapter's ShipStream (shipping_link.h), on
// gRPC's callback API so that the flusher never blocks on the network: Send() queues, and
// gRPC's threads write one message at a time, read acks and capture control, and report the
// end of the stream.
//
// Lifecycle: the constructor starts the call and queues the Hello; the owner Send()s, watches
// acked() and broken(), and ends with Close() (graceful: half-close and let the daemon finish;
// otherwise cancel), which returns within its deadline. After Close() the object may be
// destroyed; the reactor deletes itself when gRPC is done with it.
//
// Thread-safety: Send/Close from one owner thread; the queries and WaitForAck from any.
// The channel must outlive the stream.
#ifndef NRTPROF_SHIM_BACKEND_COLLECTOR_STREAM_H_
#define NRTPROF_SHIM_BACKEND_COLLECTOR_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "shim/backend/proto_lite/nrtprof.grpc.pb.h"
#include "shim/backend/proto_lite/nrtprof.pb.h"
#include "shim/backend/shipping_link.h"

namespace nrtprof::shim {

class CollectorStream final : public ShipStream {
 public:
  // Called on a gRPC thread for each CaptureControl the daemon sends.
  using ControlFn = ShipLink::ControlFn;

  // `wait_for_ready`: the stream waits for the daemon to be reachable (gRPC reconnects, at
  // most a second apart) instead of failing at once when it is not.
  CollectorStream(nrtprof::Collector::Stub* stub, nrtprof::ShimMessage hello, ControlFn on_control,
                  bool wait_for_ready = false);
  ~CollectorStream() override;
  CollectorStream(const CollectorStream&) = delete;
  CollectorStream& operator=(const CollectorStream&) = delete;

  void Send(std::shared_ptr<const nrtprof::ShimMessage> message) override;
  uint64_t acked() override;
  bool ack_seen() override;
  bool broken() override;
  bool heard_from_daemon() override;
  // UNAUTHENTICATED: the daemon refused this process's token (or its TCP listener wants one it
  // was not given).
  bool refused_by_daemon() override;
  // gRPC's status message.
  std::string failure() override;
  bool WaitForAck(uint64_t sequence, Clock::time_point deadline) override;
  // Graceful waits for queued writes, half-closes and lets the daemon finish; then, or
  // otherwise, cancels.
  void Close(Clock::time_point deadline, bool graceful) override;

 private:
  struct Shared;
  class Reactor;

  std::shared_ptr<Shared> shared_;
  Reactor* reactor_;  // valid until Close() lets go of it
  bool closed_ = false;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_COLLECTOR_STREAM_H_
