#include "daemon/control_service.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/peer.h"

namespace nrtprof::daemon {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::Status ControlService::StartCapture(grpc::ServerContext* context,
                                          const nrtprof::StartCaptureRequest* request,
                                          nrtprof::StartCaptureReply* reply) {
  // Only a daemon's rules say why they took a capture (trigger_captures.h): this daemon's, or
  // a peer's over TCP (which passed the gate with the operator's token), not a local user.
  const Peer peer = PeerOf(context->peer());
  nrtprof::StartCaptureRequest asked = *request;
  if (peer.local) asked.clear_trigger();
  absl::StatusOr<nrtprof::StartCaptureReply> started = core_->StartCapture(asked, peer.caller);
  if (!started.ok()) return ToGrpcStatus(started.status());
  if (asked.has_trigger() && peer_triggered_) {
    std::lock_guard<std::mutex> lock(mu_);
    if (peer_triggered_captures_.size() >= kMaxPeerTriggered) {
      peer_triggered_captures_.erase(peer_triggered_captures_.begin());  // never stopped
    }
    peer_triggered_captures_[started->capture_id()] = std::move(asked);
  }
  *reply = *std::move(started);
  return grpc::Status::OK;
}

grpc::Status ControlService::StopCapture(grpc::ServerContext* context,
                                         const nrtprof::StopCaptureRequest* request,
                                         nrtprof::CaptureFiles* reply) {
  absl::StatusOr<nrtprof::CaptureFiles> files = core_->StopCapture(*request, PeerOf(context->peer()).caller);
  std::optional<nrtprof::StartCaptureRequest> asked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = peer_triggered_captures_.find(request->capture_id());
        it != peer_triggered_captures_.end()) {
      asked = std::move(it->second);
      peer_triggered_captures_.erase(it);
    }
  }
  if (!files.ok()) return ToGrpcStatus(files.status());
  if (asked) peer_triggered_(*asked, *files);
  *reply = *std::move(files);
  return grpc::Status::OK;
}

grpc::Status ControlService::Status(grpc::ServerContext* context,
                                    const nrtprof::StatusRequest* request,
                                    nrtprof::StatusReply* reply) {
  *reply = core_->Status(PeerOf(context->peer()).caller);
  return grpc::Status::OK;
}

grpc::Status ControlService::Top(grpc::ServerContext* context, const nrtprof::TopRequest* request,
                                 nrtprof::TopReply* reply) {
  absl::StatusOr<nrtprof::TopReply> top = core_->Top(*request, PeerOf(context->peer()).caller);
  if (!top.ok()) return ToGrpcStatus(top.status());
  *reply = std::move(*top);
  return grpc::Status::OK;
}

grpc::Status ControlService::Clock(grpc::ServerContext* context,
                                   const nrtprof::ClockRequest* request,
                                   nrtprof::ClockReply* reply) {
  *reply = core_->ReadClock();
  return grpc::Status::OK;
}

grpc::Status ControlService::FetchCapture(grpc::ServerContext* context,
                                          const nrtprof::FetchCaptureRequest* request,
                                          grpc::ServerWriter<nrtprof::CaptureFileChunk>* writer) {
  absl::StatusOr<CollectorCore::Fetchable> capture =
      core_->FetchableCapture(request->capture_id(), PeerOf(context->peer()).caller);
  if (!capture.ok()) return ToGrpcStatus(capture.status());
  std::string buffer(kFetchChunkBytes, '\0');
  for (const std::string& name : capture->names) {
    const std::string path = absl::StrCat(capture->dir, "/", name);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      const int e = errno;
      if (fd >= 0) close(fd);
      return grpc::Status(grpc::StatusCode::DATA_LOSS,
                          absl::StrCat("cannot read ", path, ": ", strerror(e)));
    }
    nrtprof::CaptureFileChunk chunk;
    chunk.set_name(name);
    chunk.set_size(static_cast<uint64_t>(st.st_size));
    uint64_t sent = 0;
    do {
      const uint64_t left = static_cast<uint64_t>(st.st_size) - sent;
      const ssize_t n = read(fd, buffer.data(), std::min<uint64_t>(left, buffer.size()));
      if (n < 0 || (n == 0 && sent < static_cast<uint64_t>(st.st_size))) {
        close(fd);
        return grpc::Status(grpc::StatusCode::DATA_LOSS,
                            absl::StrCat("cannot read ", path, ": ",
                                         n < 0 ? strerror(errno) : "it became shorter"));
      }
      chunk.set_data(buffer.data(), static_cast<size_t>(n));
      sent += static_cast<uint64_t>(n);
      if (!writer->Write(chunk)) {
        close(fd);
        return grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away");
      }
      chunk.Clear();
    } while (sent < static_cast<uint64_t>(st.st_size));
    close(fd);
  }
  if (request->remove()) core_->FetchedCapture(request->capture_id());
  return grpc::Status::OK;
}

}  // namespace nrtprof::daemon
