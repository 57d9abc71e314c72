#include "daemon/tcp_gate.h"

#include <unistd.h>

#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/credential_files.h"

namespace nrtprof::daemon {
namespace {

// A stream the gate refused: ends at once with `status`, having read nothing.
class RefusedStream final : public grpc::ServerGenericBidiReactor {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// One write, so that lines from concurrent refusals never interleave.
void WriteToStderr(const std::string& text) {
  if (text.empty()) return;
  ssize_t ignored = write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

}  // namespace

TcpGate::TcpGate(std::string token)
    : expected_(token.empty() ? "" : absl::StrCat("Bearer ", token)),
      refusal_log_("refusal", LogRateLimiter::Limits{}, [] { return MonotonicNs(); }) {}

grpc::Status TcpGate::Check(const grpc::ServerContextBase& context, const char* method) const {
  if (!open_.load(std::memory_order_acquire)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "nrtprofd is starting");
  }
  if (expected_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const auto range = metadata.equal_range("authorization");
  const char* why = nullptr;
  if (range.first == range.second) {
    why = "no bearer token";
  } else if (std::next(range.first) != range.second) {
    why = "more than one authorization header";
  } else {
    const grpc::string_ref value = range.first->second;
    if (ConstantTimeEquals(absl::string_view(value.data(), value.size()), expected_)) {
      return grpc::Status::OK;
    }
    why = "wrong bearer token";
  }
  WriteToStderr(refusal_log_.Admit(
      absl::StrCat("nrtprofd: refused ", method, " from ", context.peer(), ": ", why, "\n")));
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      absl::StrCat("nrtprofd refused the call: ", why));
}

void TcpGate::LogUnloggedRefusals() { WriteToStderr(refusal_log_.TakeUnlogged()); }

grpc::ServerGenericBidiReactor* GatedCollectorService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  const grpc::Status allowed = gate_->Check(*context, context->method().c_str());
  if (!allowed.ok()) return new RefusedStream(allowed);
  return inner_->CreateReactor(context);
}

grpc::Status GatedControlService::StartCapture(grpc::ServerContext* context,
                                               const nrtprof::StartCaptureRequest* request,
                                               nrtprof::StartCaptureReply* reply) {
  const grpc::Status allowed = gate_->Check(*context, "/nrtprof.Control/StartCapture");
  return allowed.ok() ? inner_->StartCapture(context, request, reply) : allowed;
}

grpc::Status GatedControlService::StopCapture(grpc::ServerContext* context,
                                              const nrtprof::StopCaptureRequest* request,
                                              nrtprof::CaptureFiles* reply) {
  const grpc::Status allowed = gate_->Check(*context, "/nrtprof.Control/StopCapture");
  return allowed.ok() ? inner_->StopCapture(context, request, reply) : allowed;
}

grpc::Status GatedControlService::Status(grpc::ServerContext* context,
                                         const nrtprof::StatusRequest* request,
                                         nrtprof::StatusReply* reply) {
  const grpc::Status allowed = gate_->Check(*context, "/nrtprof.Control/Status");
  return allowed.ok() ? inner_->Status(context, request, reply) : allowed;
}

grpc::Status GatedControlService::Top(grpc::ServerContext* context,
                                      const nrtprof::TopRequest* request,
                                      nrtprof::TopReply* reply) {
  const grpc::Status allowed = gate_->Check(*context, "/nrtprof.Control/Top");
  return allowed.ok() ? inner_->Top(context, request, reply) : allowed;
}

grpc::Status GatedControlService::FetchCapture(
    grpc::ServerContext* context, const nrtprof::FetchCaptureRequest* request,
    grpc::ServerWriter<nrtprof::CaptureFileChunk>* writer) {
  const grpc::Status allowed = gate_->Check(*context, "/nrtprof.Control/FetchCapture");
  return allowed.ok() ? inner_->FetchCapture(context, request, writer) : allowed;
}

grpc::Status GatedControlService::Clock(grpc::ServerContext* context,
                                        const nrtprof::ClockRequest* request,
                                        nrtprof::ClockReply* reply) {
  const grpc::Status allowed = gate_->Check(*context, "/nrtprof.Control/Clock");
  return allowed.ok() ? inner_->Clock(context, request, reply) : allowed;
}

}  // namespace nrtprof::daemon
