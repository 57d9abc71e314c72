// The daemon's own accepting of its unix socket: who may connect, and what a peer sees when it
// is let in (gRPC's HTTP/2 greeting) or refused (the connection closed, the refusal counted).
#include "daemon/unix_acceptor.h"

#include <poll.h>
#include <grp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "grpcpp/generic/async_generic_service.h"
#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

TEST(PeerAllowedTest, TheDaemonsUserAndRootAlways) {
  std::string why;
  EXPECT_TRUE(PeerAllowed(PeerRule{1000, std::nullopt}, 1000, 1000, nullptr, 0, &why));
  EXPECT_TRUE(PeerAllowed(PeerRule{1000, std::nullopt}, 0, 0, nullptr, 0, &why));
}

TEST(PeerAllowedTest, AnotherUserOnlyThroughTheGroup) {
  std::string why;
  EXPECT_FALSE(PeerAllowed(PeerRule{1000, std::nullopt}, 1001, 1001, nullptr, 0, &why));
  EXPECT_EQ(why, "uid 1001 is not this daemon's user (uid 1000) and no --socket_group is given");
  const gid_t groups[] = {20, 4242};
  EXPECT_TRUE(PeerAllowed(PeerRule{1000, 4242}, 1001, 1001, groups, 2, &why));  // supplementary
  EXPECT_TRUE(PeerAllowed(PeerRule{1000, 4242}, 1001, 4242, nullptr, 0, &why));  // primary
  EXPECT_FALSE(PeerAllowed(PeerRule{1000, 4242}, 1001, 1001, groups, 1, &why));
  EXPECT_EQ(why, "uid 1001 is not in group 4242");
}

class UnixAcceptorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/nrtprof-acceptor-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/d.sock";
    grpc::ServerBuilder builder;
    builder.RegisterCallbackGenericService(&generic_);  // a server must serve something
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (acceptor_) acceptor_->Stop();
    if (server_) server_->Shutdown();
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }

  // Connects as `uid` (in a child, when not ourselves) and reads what comes within 5 s: the
  // first bytes, or "" for a closed connection.
  std::string ConnectAndRead(uid_t uid) {
    int pipe_fds[2];
    EXPECT_EQ(pipe(pipe_fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(pipe_fds[0]);
      if (uid != getuid() && (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0)) {
        _exit(3);
      }
      const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(4);
      pollfd p{fd, POLLIN, 0};
      char buf[64];
      ssize_t n = poll(&p, 1, 5000) == 1 ? read(fd, buf, sizeof(buf)) : -1;
      if (n > 0) (void)!write(pipe_fds[1], buf, n);
      _exit(n >= 0 ? 0 : 5);
    }
    close(pipe_fds[1]);
    std::string got;
    char buf[64];
    for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof(buf))) > 0;) got.append(buf, n);
    close(pipe_fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    return got;
  }

  std::string dir_, path_;
  grpc::CallbackGenericService generic_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<UnixAcceptor> acceptor_;
};

TEST_F(UnixAcceptorTest, ItsOwnUserGetsGrpc) {
  absl::StatusOr<std::unique_ptr<UnixAcceptor>> a =
      UnixAcceptor::Listen(path_, 0600, PeerRule{getuid(), std::nullopt});
  ASSERT_TRUE(a.ok()) << a.status();
  acceptor_ = *std::move(a);
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  acceptor_->Start(server_.get());
  // An HTTP/2 server speaks first: its SETTINGS frame (9-byte header, type 4 at byte 3).
  const std::string greeting = ConnectAndRead(getuid());
  ASSERT_GE(greeting.size(), 9u);
  EXPECT_EQ(greeting[3], 4);
  EXPECT_EQ(acceptor_->refused(), 0u);
}

TEST_F(UnixAcceptorTest, AnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: it connects as another user";
  absl::StatusOr<std::unique_ptr<UnixAcceptor>> a =
      UnixAcceptor::Listen(path_, 0666, PeerRule{getuid(), std::nullopt});
  ASSERT_TRUE(a.ok()) << a.status();
  acceptor_ = *std::move(a);
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  acceptor_->Start(server_.get());
  // Its calls are answered by the refusing server (trust_test reads the reason through the
  // CLI); counted and logged.
  EXPECT_GE(ConnectAndRead(65534).size(), 9u);
  EXPECT_EQ(acceptor_->refused(), 1u);
  EXPECT_GE(ConnectAndRead(0).size(), 9u);  // root still is let in
}

TEST_F(UnixAcceptorTest, APathInUseIsOneLine) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  absl::StatusOr<std::unique_ptr<UnixAcceptor>> a =
      UnixAcceptor::Listen(path_, 0600, PeerRule{getuid(), std::nullopt});
  close(fd);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(), "cannot listen on " + path_ + ": Address already in use");
}

}  // namespace
}  // namespace nrtprof::daemon
