// What stands between the TCP listener and the daemon's services. TLS (tcp_listener.h) has
// already encrypted the connection and, with --tls_client_ca, checked the client's certificate;
// the gate then checks every call's "authorization: Bearer TOKEN" metadata, compared in
// constant time, before the service's own handler runs. A call without it, or with another
// token, ends with UNAUTHENTICATED and one line on the daemon's stderr that names the peer's
// address and the method (never the token). Those lines are rate-limited (log_rate_limiter.h:
// 20 at once, then one a second), and the ones left out are counted in the next line written or
// by LogUnloggedRefusals() at shutdown. The unix socket does not go through the gate: its file
// permissions guard it.
//
// The gated services forward to the ones the unix socket serves (a gRPC service object can
// belong to one server only). An RPC the gate does not forward does not exist on TCP
// (UNIMPLEMENTED): a new Control RPC is closed on TCP until it is added here.
//
// Why not a grpc::AuthMetadataProcessor on the TLS credentials: gRPC calls it with the
// metadata and the connection's TLS properties only, without the peer's address (tried), so
// its refusals could not say who was refused. The gate runs where ServerContext::peer() is
// known, before the service's handler and, for Collector.Stream, before any message is read.
//
// Thread-safe. The gate must outlive the gated services, and they the server; the services
// they forward to are attached before the gate opens and must outlive the server.
#ifndef NRTPROF_DAEMON_TCP_GATE_H_
#define NRTPROF_DAEMON_TCP_GATE_H_

#include <atomic>
#include <string>

#include "daemon/collector_service.h"
#include "daemon/control_service.h"
#include "daemon/log_rate_limiter.h"
#include "grpcpp/grpcpp.h"
#include "proto/nrtprof.grpc.pb.h"

namespace nrtprof::daemon {

class TcpGate {
 public:
  // `token` empty: no token asked for (mutual TLS guards the listener alone).
  explicit TcpGate(std::string token);
  TcpGate(const TcpGate&) = delete;
  TcpGate& operator=(const TcpGate&) = delete;

  // Until Open(), every call gets UNAVAILABLE: the daemon is still starting (dropping root).
  // What is written before Open() is seen by every call Check() lets through.
  void Open() { open_.store(true, std::memory_order_release); }

  // OK, or the status to end the call with (UNAUTHENTICATED after one line on stderr, unless
  // the rate limit leaves it out).
  grpc::Status Check(const grpc::ServerContextBase& context, const char* method) const;

  // Says on stderr how many refusals the rate limit left out since its last line, if any. Once
  // no call can reach the gate any more (the server has shut down).
  void LogUnloggedRefusals();

 private:
  const std::string expected_;  // "Bearer TOKEN", or empty
  std::atomic<bool> open_{false};
  mutable LogRateLimiter refusal_log_;
};

// The Collector service is generic (collector_service.h parses the messages itself), and so is
// its gate: every call the TCP server's typed services do not take comes here.
class GatedCollectorService final : public grpc::CallbackGenericService {
 public:
  explicit GatedCollectorService(const TcpGate* gate) : gate_(gate) {}
  // Before the gate opens.
  void Attach(CollectorService* inner) { inner_ = inner; }

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override;

 private:
  const TcpGate* const gate_;
  CollectorService* inner_ = nullptr;
};

class GatedControlService final : public nrtprof::Control::Service {
 public:
  explicit GatedControlService(const TcpGate* gate) : gate_(gate) {}
  // Before the gate opens.
  void Attach(ControlService* inner) { inner_ = inner; }

  grpc::Status StartCapture(grpc::ServerContext* context,
                            const nrtprof::StartCaptureRequest* request,
                            nrtprof::StartCaptureReply* reply) override;
  grpc::Status StopCapture(grpc::ServerContext* context, const nrtprof::StopCaptureRequest* request,
                           nrtprof::CaptureFiles* reply) override;
  grpc::Status Status(grpc::ServerContext* context, const nrtprof::StatusRequest* request,
                      nrtprof::StatusReply* reply) override;
  grpc::Status Top(grpc::ServerContext* context, const nrtprof::TopRequest* request,
                   nrtprof::TopReply* reply) override;
  grpc::Status FetchCapture(grpc::ServerContext* context,
                            const nrtprof::FetchCaptureRequest* request,
                            grpc::ServerWriter<nrtprof::CaptureFileChunk>* writer) override;
  grpc::Status Clock(grpc::ServerContext* context, const nrtprof::ClockRequest* request,
                     nrtprof::ClockReply* reply) override;

 private:
  const TcpGate* const gate_;
  ControlService* inner_ = nullptr;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_TCP_GATE_H_
