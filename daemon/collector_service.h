// The Collector gRPC service: one bidirectional stream per profiled process. It only adapts
// the stream to CollectorCore: the first message must be a Hello (otherwise the stream fails
// with INVALID_ARGUMENT), then event batches, each answered by an Ack; a message that does not
// parse as a ShimMessage (garbage, or a string field that is not UTF-8) ends the stream with
// INVALID_ARGUMENT saying which message it was. CaptureControl messages
// from the core go down the same stream. A message the core refuses ends that stream with the
// core's status; other streams go on. A stream that has not sent its Hello within
// hello_timeout_ms ends with DEADLINE_EXCEEDED, so connections that never say who they are
// do not pile up. Uses gRPC's callback API; a reactor never blocks on disk (the core does no
// I/O on these calls).
//
// Thread-safe. `core` must outlive the service and the server it is registered with.
#ifndef NRTPROF_DAEMON_COLLECTOR_SERVICE_H_
#define NRTPROF_DAEMON_COLLECTOR_SERVICE_H_

#include <atomic>
#include <cstdint>

#include "daemon/collector_core.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "proto/nrtprof.grpc.pb.h"

namespace nrtprof::daemon {

// The largest ShimMessage the daemon takes (ServerBuilder::SetMaxReceiveMessageSize): gRPC
// refuses a larger one with RESOURCE_EXHAUSTED before it reaches the service.
inline constexpr int kMaxShimMessageBytes = 64 << 20;
// The most fields (events, strings, stacks...) of its Hello or batch a ShimMessage may hold: a
// shim's largest batch has 8,192 events, and with 64-frame stacks at most some 540,000 fields
// in all. More is refused with RESOURCE_EXHAUSTED before it is read.
inline constexpr uint64_t kMaxShimMessageElements = 1 << 20;

struct CollectorServiceOptions {
  // How long a new stream may go without its Hello; 0: forever.
  uint32_t hello_timeout_ms = 10'000;
  // The most fields a message's Hello or batch may hold (tests set fewer).
  uint64_t max_message_elements = kMaxShimMessageElements;
};

class CollectorService final : public grpc::CallbackGenericService {
 public:
  explicit CollectorService(CollectorCore* core, CollectorServiceOptions options = {})
      : core_(core), options_(options) {}
  CollectorService(const CollectorService&) = delete;
  CollectorService& operator=(const CollectorService&) = delete;

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override;

 private:
  CollectorCore* const core_;
  const CollectorServiceOptions options_;
  std::atomic<uint64_t> next_stream_{1};
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_COLLECTOR_SERVICE_H_
