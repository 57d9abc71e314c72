#include "daemon/control_service.h"

#include <string>

namespace nrtprof::daemon {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::Status ControlService::StartCapture(grpc::ServerContext* context,
                                          const nrtprof::StartCaptureRequest* request,
                                          nrtprof::StartCaptureReply* reply) {
  absl::StatusOr<nrtprof::StartCaptureReply> started = core_->StartCapture(*request);
  if (!started.ok()) return ToGrpcStatus(started.status());
  *reply = *std::move(started);
  return grpc::Status::OK;
}

grpc::Status ControlService::StopCapture(grpc::ServerContext* context,
                                         const nrtprof::StopCaptureRequest* request,
                                         nrtprof::CaptureFiles* reply) {
  absl::StatusOr<nrtprof::CaptureFiles> files = core_->StopCapture(*request);
  if (!files.ok()) return ToGrpcStatus(files.status());
  *reply = *std::move(files);
  return grpc::Status::OK;
}

grpc::Status ControlService::Status(grpc::ServerContext* context,
                                    const nrtprof::StatusRequest* request,
                                    nrtprof::StatusReply* reply) {
  *reply = core_->Status();
  return grpc::Status::OK;
}

}  // namespace nrtprof::daemon
