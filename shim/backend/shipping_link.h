// What the shim's shipping core (shipping_core.h) sees of the transport and of time, so that
// its decisions are tested without a socket or a real clock: a stream to the daemon
// (ShipStream), the way to open one (ShipLink) and a clock (ShipClock). The gRPC adapter
// implements the first two (collector_stream.h, grpc_link.h); SystemShipClock() the third.
//
// Thread-safety: each interface says its own.
#ifndef NRTPROF_SHIM_BACKEND_SHIPPING_LINK_H_
#define NRTPROF_SHIM_BACKEND_SHIPPING_LINK_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "shim/backend/proto_lite/nrtprof.pb.h"

namespace nrtprof::shim {

// Time as the shipping core sees it. Now() and MonotonicNs() read the same clock
// (CLOCK_MONOTONIC, which steady_clock is on Linux). Called from the flusher's thread only.
class ShipClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~ShipClock() = default;
  virtual uint64_t MonotonicNs() = 0;
  virtual TimePoint Now() = 0;
};

// The system's clock; never destroyed.
ShipClock* SystemShipClock();

// One stream to the daemon: the Hello went first; then batches, each answered by an Ack
// carrying the highest sequence the daemon has. Send/Close come from the owner's thread;
// the queries from any thread. Close() is the last call before destruction.
class ShipStream {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~ShipStream() = default;

  // Queued; never blocks. Ignored once the stream is broken. The message is shared, not
  // copied: the sender keeps it for a resend until acknowledged, and changes it no more.
  virtual void Send(std::shared_ptr<const nrtprof::ShimMessage> message) = 0;
  // The highest Ack.sequence received.
  virtual uint64_t acked() = 0;
  // True once an Ack arrived: the daemon's first, right after the Hello, says how far it has
  // this process (0: not at all).
  virtual bool ack_seen() = 0;
  // The stream failed or the daemon ended it: nothing more will be sent or acked.
  virtual bool broken() = 0;
  // True once the daemon answered anything (the stream reached it).
  virtual bool heard_from_daemon() = 0;
  // True once the stream ended because the daemon refused this process's credentials.
  virtual bool refused_by_daemon() = 0;
  // How the stream ended (the transport's message), once broken; empty before.
  virtual std::string failure() = 0;
  // Waits until the daemon acknowledged `sequence`, the stream broke or the deadline passed;
  // true if acknowledged.
  virtual bool WaitForAck(uint64_t sequence, Clock::time_point deadline) = 0;
  // Ends the stream within `deadline`: graceful lets queued messages go and the daemon finish;
  // otherwise the stream is cut at once.
  virtual void Close(Clock::time_point deadline, bool graceful) = 0;
};

// Opens streams to one daemon. Called from the flusher's thread only (started() from any).
class ShipLink {
 public:
  // Called on a transport thread for each CaptureControl the daemon sends.
  using ControlFn = std::function<void(const nrtprof::CaptureControl&)>;
  virtual ~ShipLink() = default;

  // A new stream whose first message is `hello`. `wait_for_ready`: it waits for an absent
  // daemon to come back instead of failing at once.
  virtual std::unique_ptr<ShipStream> Open(nrtprof::ShimMessage hello, ControlFn on_control,
                                           bool wait_for_ready) = 0;
  // A stream on a connection of its own, which no other stream's queue can hold up: for an
  // event-less final batch at exit (its `hello` is marked final_only).
  virtual std::unique_ptr<ShipStream> OpenAlone(nrtprof::ShimMessage hello) = 0;
  // The next Open() connects at once, not at the transport's next reconnection attempt.
  virtual void ResetBackoff() = 0;
  // Run before each new connection: OK to open one; NotFound: no daemon yet (wait quietly);
  // ResourceExhausted: this process lacks descriptors or memory to check with; anything
  // else: the daemon is not to be trusted (wait, say why).
  virtual absl::Status CheckTrust() = 0;
  // True once the transport has started in this process (after fork, a child then cannot use
  // it: backend.cc).
  virtual bool started() const = 0;
  // The daemon's address, for messages.
  virtual const std::string& target() const = 0;
  // True if the daemon is on another machine (TCP): it cannot read this machine's spool files.
  virtual bool remote() const = 0;
  // True once the transport itself has told the user why it cannot reach the daemon (a TLS
  // handshake that failed, an error of gRPC's): the core then says no more of it.
  virtual bool trouble_said() const = 0;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_SHIPPING_LINK_H_
