// The shipping core's transport over gRPC (shipping_link.h): one channel to the daemon, whose
// streams are CollectorStreams, plus, at exit, a second channel of its own for a final batch
// that must overtake a clogged stream. Plaintext on a unix socket; TLS on TCP, with a bearer
// token and/or a client certificate.
//
// Thread-safety: Start() once, before the flusher's thread runs; then the flusher's thread
// only (started() from any thread). Never destroyed while a stream it opened lives (the
// backend never destroys it: backend.cc).
#ifndef NRTPROF_SHIM_BACKEND_GRPC_LINK_H_
#define NRTPROF_SHIM_BACKEND_GRPC_LINK_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/socket_trust.h"
#include "shim/backend/proto_lite/nrtprof.grpc.pb.h"
#include "shim/backend/shipping_link.h"

namespace nrtprof::shim {

// How the shim reaches the daemon: plaintext on a unix socket, or TLS on TCP, verifying the
// daemon with `ca_pem` and sending `token` as "authorization: Bearer TOKEN" and/or presenting
// a client certificate.
struct DaemonTransport {
  std::string target;  // a gRPC target: unix:/path, HOST:PORT, dns:///HOST:PORT
  bool tls = false;
  std::string ca_pem;
  std::string token;              // empty: none
  std::string cert_pem, key_pem;  // empty: no client certificate
  // A unix socket: run before each new stream; OK to open it, NotFound to wait quietly (no
  // daemon yet), anything else to wait and say why once (common/socket_trust.h).
  std::function<absl::Status()> trust_check;
  // Whom this process trusts on this machine: also the owner of its spool folder.
  TrustPolicy trust;
};

// gRPC's errors reach the user through the backend's log function (backend.cc), one line
// each: it calls this when it says one, and every GrpcLink's trouble_said() is then true.
void NoteTransportTroubleSaid();

class GrpcLink final : public ShipLink {
 public:
  explicit GrpcLink(DaemonTransport transport);
  GrpcLink(const GrpcLink&) = delete;
  GrpcLink& operator=(const GrpcLink&) = delete;

  // Creates the channel (and with it gRPC's threads, which inherit the caller's signal mask).
  // The transport's secrets are dropped once the channel has them.
  void Start();
  const TrustPolicy& trust() const { return transport_.trust; }

  std::unique_ptr<ShipStream> Open(nrtprof::ShimMessage hello, ControlFn on_control,
                                   bool wait_for_ready) override;
  std::unique_ptr<ShipStream> OpenAlone(nrtprof::ShimMessage hello) override;
  void ResetBackoff() override;
  absl::Status CheckTrust() override;
  bool started() const override { return started_.load(std::memory_order_acquire); }
  const std::string& target() const override { return transport_.target; }
  bool remote() const override { return transport_.tls; }
  bool trouble_said() const override;

 private:
  DaemonTransport transport_;
  std::atomic<bool> started_{false};
  std::shared_ptr<grpc::ChannelCredentials> credentials_;  // OpenAlone's channel uses them
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<nrtprof::Collector::Stub> stub_;
  std::shared_ptr<grpc::Channel> alone_channel_;
  std::unique_ptr<nrtprof::Collector::Stub> alone_stub_;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_GRPC_LINK_H_
