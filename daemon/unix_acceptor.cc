#include "daemon/unix_acceptor.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server_posix.h"

namespace nrtprof::daemon {
namespace {

void WriteLog(const std::string& text) {
  if (!text.empty()) (void)!write(STDERR_FILENO, text.data(), text.size());
}

// The peer's credentials and groups; false if they cannot be read (*why says so).
bool ReadPeer(int fd, ucred* cred, std::vector<gid_t>* groups, std::string* why) {
  socklen_t len = sizeof(*cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) != 0) {
    *why = absl::StrCat("its credentials cannot be read: ", strerror(errno));
    return false;
  }
  // The peer's supplementary groups, as they were when it connected.
  groups->resize(64);
  socklen_t glen = static_cast<socklen_t>(groups->size() * sizeof(gid_t));
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups->data(), &glen) == 0) {
    groups->resize(glen / sizeof(gid_t));
  } else if (errno == ERANGE) {  // glen now says how much room they need
    groups->resize(glen / sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups->data(), &glen) != 0) glen = 0;
    groups->resize(glen / sizeof(gid_t));
  } else {
    groups->clear();
  }
  return true;
}

class RefusedCall final : public grpc::ServerGenericBidiReactor {
 public:
  explicit RefusedCall(const std::string& why) {
    Finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("nrtprofd refused the connection: ", why)));
  }
  void OnDone() override { delete this; }
};

}  // namespace

class UnixAcceptor::RefusingService final : public grpc::CallbackGenericService {
 public:
  explicit RefusingService(PeerRule rule) : rule_(rule) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    const std::string& peer = context->peer();
    int fd = -1;
    if (peer.rfind("fd:", 0) == 0) fd = atoi(peer.c_str() + 3);
    return new RefusedCall(fd >= 0 ? RefusalOf(rule_, fd) : std::string("not admitted"));
  }

 private:
  const PeerRule rule_;
};

std::string UnixAcceptor::RefusalOf(const PeerRule& rule, int fd) {
  ucred cred{};
  std::vector<gid_t> groups;
  std::string why;
  if (ReadPeer(fd, &cred, &groups, &why) &&
      !PeerAllowed(rule, cred.uid, cred.gid, groups.data(), static_cast<int>(groups.size()),
                   &why)) {
    return why;
  }
  return why.empty() ? "not admitted" : why;
}

bool PeerAllowed(const PeerRule& rule, uid_t uid, gid_t gid, const gid_t* groups, int n_groups,
                 std::string* why) {
  if (uid == rule.daemon_uid || uid == 0) return true;
  if (rule.group) {
    if (gid == *rule.group || std::find(groups, groups + n_groups, *rule.group) != groups + n_groups) {
      return true;
    }
    *why = absl::StrCat("uid ", uid, " is not in group ", *rule.group);
    return false;
  }
  *why = absl::StrCat("uid ", uid, " is not this daemon's user (uid ", rule.daemon_uid,
                      ") and no --socket_group is given");
  return false;
}

absl::StatusOr<std::unique_ptr<UnixAcceptor>> UnixAcceptor::Listen(const std::string& path,
                                                                   mode_t mode, PeerRule rule) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is too long"));
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // Owner only (and --socket_group's members) from the moment the socket exists; the caller's
  // chmod after is for umasks that remove group bits.
  const mode_t old_umask = umask(07777 & ~mode);
  const int bound = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  umask(old_umask);
  if (bound != 0 || listen(fd, SOMAXCONN) != 0) {
    const int e = bound != 0 ? bind_errno : errno;
    close(fd);
    return absl::PermissionDeniedError(absl::StrCat("cannot listen on ", path, ": ", strerror(e)));
  }
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    const int e = errno;
    close(fd);
    unlink(path.c_str());
    return absl::InternalError(absl::StrCat("eventfd: ", strerror(e)));
  }
  return std::unique_ptr<UnixAcceptor>(new UnixAcceptor(fd, wake, rule));
}

UnixAcceptor::UnixAcceptor(int listen_fd, int wake_fd, PeerRule rule)
    : refusing_service_(std::make_unique<RefusingService>(rule)),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      rule_(rule),
      refusals_("refused connection", LogRateLimiter::Limits{}, [] { return MonotonicNs(); }) {}

UnixAcceptor::~UnixAcceptor() {
  Stop();
  close(listen_fd_);
  close(wake_fd_);
}

void UnixAcceptor::Start(grpc::Server* server) {
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(refusing_service_.get());
  refusing_server_ = builder.BuildAndStart();
  thread_ = std::thread([this, server] { Loop(server); });
}

void UnixAcceptor::Stop() {
  if (stopped_.exchange(true)) return;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  if (refusing_server_) refusing_server_->Shutdown(std::chrono::system_clock::now());
  WriteLog(refusals_.TakeUnlogged());
}

bool UnixAcceptor::Check(int fd) {
  ucred cred{};
  std::vector<gid_t> groups;
  std::string why;
  if (ReadPeer(fd, &cred, &groups, &why)) {
    if (PeerAllowed(rule_, cred.uid, cred.gid, groups.data(), static_cast<int>(groups.size()),
                    &why)) {
      return true;
    }
    why = absl::StrCat("pid ", cred.pid, ": ", why);
  }
  refused_.fetch_add(1, std::memory_order_relaxed);
  WriteLog(refusals_.Admit(absl::StrCat("nrtprofd: refused a connection from ", why, "\n")));
  return false;
}

void UnixAcceptor::Loop(grpc::Server* server) {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (!stopped_.load(std::memory_order_acquire)) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      WriteLog(absl::StrCat("nrtprofd: poll on the unix socket: ", strerror(errno), "\n"));
      return;
    }
    if (fds[1].revents != 0) return;
    // Everything waiting, then poll again.
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: the connection waits in the backlog; try again shortly
          // rather than spin.
          WriteLog(refusals_.Admit(absl::StrCat("nrtprofd: cannot accept a connection: ",
                                                strerror(errno), "\n")));
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        break;  // EAGAIN: nothing more now; ECONNABORTED and the like: the next poll
      }
      // gRPC owns fd from here; a refused peer's calls are answered with the reason.
      grpc::Server* to = Check(fd) ? server : refusing_server_.get();
      if (to == nullptr) {
        close(fd);
        continue;
      }
      grpc::AddInsecureChannelFromFd(to, fd);
    }
  }
}

}  // namespace nrtprof::daemon
