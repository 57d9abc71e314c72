#include "shim/backend/grpc_link.h"

#include <utility>

#include "shim/backend/collector_stream.h"

namespace nrtprof::shim {
namespace {

std::atomic<bool> g_trouble_said{false};  // gRPC has one log per process

}  // namespace

void NoteTransportTroubleSaid() { g_trouble_said.store(true, std::memory_order_relaxed); }

bool GrpcLink::trouble_said() const { return g_trouble_said.load(std::memory_order_relaxed); }

GrpcLink::GrpcLink(DaemonTransport transport) : transport_(std::move(transport)) {}

void GrpcLink::Start() {
  // Set first: whether a forked child may use gRPC never depends on how far this got.
  started_.store(true, std::memory_order_release);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (transport_.tls) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = std::move(transport_.ca_pem);
    tls.pem_cert_chain = std::move(transport_.cert_pem);
    tls.pem_private_key = std::move(transport_.key_pem);
    credentials = grpc::SslCredentials(tls);
    if (!transport_.token.empty()) {
      // Sent as "authorization: Bearer TOKEN" on every call, only over TLS.
      credentials = grpc::CompositeChannelCredentials(
          credentials, grpc::AccessTokenCredentials(transport_.token));
    }
    transport_.token.clear();
  }
  credentials_ = credentials;
  channel_ = grpc::CreateCustomChannel(transport_.target, credentials, args);
  stub_ = nrtprof::Collector::NewStub(channel_);
}

std::unique_ptr<ShipStream> GrpcLink::Open(nrtprof::ShimMessage hello, ControlFn on_control,
                                           bool wait_for_ready) {
  return std::make_unique<CollectorStream>(stub_.get(), std::move(hello), std::move(on_control),
                                           wait_for_ready);
}

std::unique_ptr<ShipStream> GrpcLink::OpenAlone(nrtprof::ShimMessage hello) {
  // A channel with arguments of its own and a local subchannel pool never shares the clogged
  // stream's connection.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetString("nrtprof.final_only", "1");
  alone_channel_ = grpc::CreateCustomChannel(transport_.target, credentials_, args);
  alone_stub_ = nrtprof::Collector::NewStub(alone_channel_);
  return std::make_unique<CollectorStream>(alone_stub_.get(), std::move(hello),
                                           [](const nrtprof::CaptureControl&) {});
}

void GrpcLink::ResetBackoff() { grpc::experimental::ChannelResetConnectionBackoff(channel_.get()); }

absl::Status GrpcLink::CheckTrust() {
  return transport_.trust_check ? transport_.trust_check() : absl::OkStatus();
}

}  // namespace nrtprof::shim
