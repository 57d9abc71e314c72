// The Control gRPC service of the `nrtprof` CLI: StartCapture, StopCapture, Status, Top, Clock, each
// forwarded to CollectorCore, its absl::Status turned into the grpc::Status of the same code and
// message. Synchronous API: StopCapture blocks its server thread while the capture is written.
// Each call acts for its caller (peer.h): a user of a shared service sees and controls only
// its own captures and processes (collector_core.h).
//
// A capture a peer daemon's trigger rule asked for (a StartCapture over TCP with a trigger,
// --trigger_peers) is handed, once written, to set_peer_triggered's function: the daemon keeps
// it as one of its own triggered captures (trigger_captures.h).
//
// Thread-safe. `core` must outlive the service and the server it is registered with.
#ifndef NRTPROF_DAEMON_CONTROL_SERVICE_H_
#define NRTPROF_DAEMON_CONTROL_SERVICE_H_

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "daemon/collector_core.h"
#include "grpcpp/grpcpp.h"
#include "proto/nrtprof.grpc.pb.h"

namespace nrtprof::daemon {

// Same code (absl's and gRPC's codes share their numbers), same message.
grpc::Status ToGrpcStatus(const absl::Status& status);

class ControlService final : public nrtprof::Control::Service {
 public:
  explicit ControlService(CollectorCore* core) : core_(core) {}
  ControlService(const ControlService&) = delete;
  ControlService& operator=(const ControlService&) = delete;

  grpc::Status StartCapture(grpc::ServerContext* context,
                            const nrtprof::StartCaptureRequest* request,
                            nrtprof::StartCaptureReply* reply) override;
  grpc::Status StopCapture(grpc::ServerContext* context, const nrtprof::StopCaptureRequest* request,
                           nrtprof::CaptureFiles* reply) override;
  grpc::Status Status(grpc::ServerContext* context, const nrtprof::StatusRequest* request,
                      nrtprof::StatusReply* reply) override;
  grpc::Status Top(grpc::ServerContext* context, const nrtprof::TopRequest* request,
                   nrtprof::TopReply* reply) override;
  // Sends a written capture's files in order, in chunks of kFetchChunkBytes.
  grpc::Status FetchCapture(grpc::ServerContext* context,
                            const nrtprof::FetchCaptureRequest* request,
                            grpc::ServerWriter<nrtprof::CaptureFileChunk>* writer) override;
  grpc::Status Clock(grpc::ServerContext* context, const nrtprof::ClockRequest* request,
                     nrtprof::ClockReply* reply) override;
  static constexpr size_t kFetchChunkBytes = 1 << 20;

  // Called (on the StopCapture's thread) with the request and files of each capture a peer's
  // rule asked for, once written. Set before the service serves.
  using PeerTriggered = std::function<void(const nrtprof::StartCaptureRequest& asked,
                                           const nrtprof::CaptureFiles& files)>;
  void set_peer_triggered(PeerTriggered f) { peer_triggered_ = std::move(f); }

 private:
  CollectorCore* const core_;
  PeerTriggered peer_triggered_;
  std::mutex mu_;
  // The captures a peer's rule started and has not stopped yet, by id (a few at a time: a
  // peer asker stops each at once; bounded all the same).
  std::map<std::string, nrtprof::StartCaptureRequest> peer_triggered_captures_
      ABSL_GUARDED_BY(mu_);
  static constexpr size_t kMaxPeerTriggered = 256;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_CONTROL_SERVICE_H_
