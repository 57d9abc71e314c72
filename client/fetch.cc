#include "client/fetch.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "client/daemon_connection.h"
#include "client/progress.h"
#include "grpcpp/grpcpp.h"

namespace nrtprof::cli {
namespace {

absl::Status MakeFolders(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string prefix = dir.substr(0, slash);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0750) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create folder ", prefix, ": ", strerror(errno)));
    }
    if (slash == std::string::npos) break;
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a folder"));
  }
  return absl::OkStatus();
}

// A name the daemon may give a file: one plain component.
bool PlainName(const std::string& name) {
  return !name.empty() && name[0] != '.' && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// The file being received.
struct Incoming {
  std::string name;
  std::string partial;  // its temporary path
  uint64_t size = 0;
  uint64_t received = 0;
  int fd = -1;
};

}  // namespace

absl::Status CheckCaptureFolderFree(const std::string& dir) {
  struct stat st;
  if (stat((dir + "/trace.pftrace").c_str(), &st) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " already holds a capture (trace.pftrace); choose another folder or remove it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FetchCaptureFiles(Control::StubInterface* stub,
                                                           const std::string& address,
                                                           const std::string& capture_id,
                                                           const std::string& dir, bool remove) {
  if (absl::Status s = MakeFolders(dir); !s.ok()) return s;
  if (absl::Status s = CheckCaptureFolderFree(dir); !s.ok()) return s;
  FetchCaptureRequest request;
  request.set_capture_id(capture_id);
  request.set_remove(remove);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  std::unique_ptr<grpc::ClientReaderInterface<CaptureFileChunk>> reader =
      stub->FetchCapture(&context, request);
  std::vector<std::string> written;
  Incoming file;
  absl::Status failed;
  auto finish = [&]() -> absl::Status {
    if (file.fd < 0) return absl::OkStatus();
    const bool closed = close(file.fd) == 0;
    file.fd = -1;
    if (!closed || file.received != file.size) {
      unlink(file.partial.c_str());
      return absl::DataLossError(absl::StrCat("the daemon sent ", file.received, " of ",
                                              file.size, " bytes of ", file.name));
    }
    if (rename(file.partial.c_str(), absl::StrCat(dir, "/", file.name).c_str()) != 0) {
      const int e = errno;
      unlink(file.partial.c_str());
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write ", dir, "/", file.name, ": ", strerror(e)));
    }
    written.push_back(file.name);
    return absl::OkStatus();
  };
  Progress progress("fetching the capture from " + address);
  uint64_t fetched_bytes = 0;
  CaptureFileChunk chunk;
  while (failed.ok() && reader->Read(&chunk)) {
    fetched_bytes += chunk.data().size();
    progress.SetBytes(fetched_bytes);
    if (!chunk.name().empty()) {
      failed = finish();
      if (!failed.ok()) break;
      if (!PlainName(chunk.name())) {
        failed = absl::DataLossError(absl::StrCat("the daemon sent a file named '", chunk.name(),
                                                  "', which is not a plain name"));
        break;
      }
      file = Incoming{chunk.name(), absl::StrCat(dir, "/.", chunk.name(), ".partial"),
                      chunk.size(), 0, -1};
      file.fd = open(file.partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                     0640);
      if (file.fd < 0) {
        failed = absl::PermissionDeniedError(
            absl::StrCat("cannot write ", file.partial, ": ", strerror(errno)));
        break;
      }
    } else if (file.fd < 0) {
      failed = absl::DataLossError("the daemon sent data before naming its file");
      break;
    }
    const std::string& data = chunk.data();
    if (file.received + data.size() > file.size) {
      failed = absl::DataLossError(
          absl::StrCat("the daemon sent more of ", file.name, " than its size"));
      break;
    }
    for (size_t done = 0; done < data.size();) {
      const ssize_t n = write(file.fd, data.data() + done, data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        failed = absl::ResourceExhaustedError(
            absl::StrCat("cannot write ", file.partial, ": ", strerror(errno)));
        break;
      }
      done += static_cast<size_t>(n);
    }
    file.received += data.size();
  }
  if (!failed.ok()) {
    context.TryCancel();
    if (file.fd >= 0) {
      close(file.fd);
      unlink(file.partial.c_str());
    }
    reader->Finish();
    return failed;
  }
  const absl::Status finished = FromGrpc(reader->Finish(), address);
  if (!finished.ok()) {
    if (file.fd >= 0) {
      close(file.fd);
      unlink(file.partial.c_str());
    }
    return finished;
  }
  if (absl::Status s = finish(); !s.ok()) return s;
  return written;
}

}  // namespace nrtprof::cli
