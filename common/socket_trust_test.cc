#include "common/socket_trust.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace nrtprof {
namespace {

constexpr uid_t kNobody = 65534;

class SocketTrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Socket paths are limited to 107 bytes: a short folder of /tmp, which is root's and sticky.
    char dir[] = "/tmp/nrtprof-trust-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);  // other users' listeners reach their folders
    policy_.self = getuid();
  }
  void TearDown() override {
    if (listener_ > 0) {
      kill(listener_, SIGKILL);
      waitpid(listener_, nullptr, 0);
    }
    const std::string rm = "rm -rf " + dir_;
    ASSERT_EQ(system(rm.c_str()), 0);
  }

  std::string Folder(const std::string& name, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    EXPECT_EQ(mkdir(path.c_str(), 0700), 0);
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }

  // A process of `uid` listening on `socket` (bound, not listening, if `listen` is false).
  void Listen(const std::string& socket, uid_t uid, bool listen = true) {
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    listener_ = fork();
    ASSERT_GE(listener_, 0);
    if (listener_ == 0) {
      if (uid != getuid() && (setgid(uid) != 0 || setuid(uid) != 0)) _exit(1);
      const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
      if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(2);
      if (listen && ::listen(fd, 16) != 0) _exit(3);
      if (write(ready[1], "r", 1) != 1) _exit(4);
      pause();
      _exit(0);
    }
    close(ready[1]);
    char c = 0;
    ASSERT_EQ(read(ready[0], &c, 1), 1) << "the listener did not start";
    close(ready[0]);
  }

  std::string dir_;
  TrustPolicy policy_;
  pid_t listener_ = -1;
};

TEST_F(SocketTrustTest, OwnPrivateFolderIsTrusted) {
  EXPECT_TRUE(CheckFolder(Folder("own", 0700), "socket folder", policy_).ok());
  EXPECT_TRUE(CheckFolder(Folder("own-readable", 0755), "socket folder", policy_).ok());
}

TEST_F(SocketTrustTest, MissingFolderIsNotFound) {
  EXPECT_EQ(CheckFolder(dir_ + "/none", "socket folder", policy_).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(CheckDaemonSocket(dir_ + "/none/nrtprofd.sock", policy_).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SocketTrustTest, WritableByOthersIsRefused) {
  for (mode_t mode : {0770, 0777, 0720}) {
    const std::string folder = Folder(absl::StrCat("mode", mode), mode);
    const absl::Status s = CheckFolder(folder, "socket folder", policy_);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << mode;
    EXPECT_TRUE(absl::StrContains(s.message(), "socket folder " + folder)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "is writable by")) << s;
  }
}

TEST_F(SocketTrustTest, SymlinkIsRefused) {
  const std::string target = Folder("target", 0700);
  const std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  const absl::Status s = CheckFolder(link, "socket folder", policy_);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(s.message(), "socket folder " + link + " is a symlink (to " +
                                                 target))
      << s;
}

TEST_F(SocketTrustTest, FolderAboveWritableByOthersIsRefused) {
  const std::string above = Folder("above", 0777);
  const std::string folder = above + "/nrtprof";
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  const absl::Status s = CheckFolder(folder, "socket folder", policy_);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(s.message(), "folder " + above + " above socket folder " + folder))
      << s;
}

TEST_F(SocketTrustTest, OwnDaemonIsTrusted) {
  const std::string socket = Folder("sock", 0700) + "/nrtprofd.sock";
  Listen(socket, getuid());
  EXPECT_TRUE(CheckDaemonSocket(socket, policy_).ok()) << CheckDaemonSocket(socket, policy_);
}

TEST_F(SocketTrustTest, NoDescriptorToCheckWithIsNoVerdict) {
  const std::string socket = Folder("sock", 0700) + "/nrtprofd.sock";
  Listen(socket, getuid());
  // Every free descriptor taken: the check cannot even open its socket. That says nothing of
  // the daemon (the shim retries, as for a failed connection), so it is not a refusal.
  // (Under a soft limit of 256 for the while, so that taking them all is quick.)
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 256);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> taken;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) taken.push_back(fd);
  const absl::Status status = CheckDaemonSocket(socket, policy_);
  for (int fd : taken) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "Too many open files")) << status;
}

TEST_F(SocketTrustTest, NobodyListeningIsNotFound) {
  const std::string socket = Folder("stale", 0700) + "/nrtprofd.sock";
  Listen(socket, getuid(), /*listen=*/false);
  const absl::Status s = CheckDaemonSocket(socket, policy_);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

TEST_F(SocketTrustTest, NotASocketIsRefused) {
  const std::string folder = Folder("file", 0700);
  ASSERT_EQ(system(("touch " + folder + "/nrtprofd.sock").c_str()), 0);
  EXPECT_EQ(CheckDaemonSocket(folder + "/nrtprofd.sock", policy_).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(SocketTrust, ServiceUserFromEnvironment) {
  setenv("NRTPROF_SERVICE_USER", "4321", 1);
  absl::StatusOr<TrustPolicy> policy = TrustPolicyFromEnv();
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->self, getuid());
  EXPECT_EQ(policy->service, 4321u);
  setenv("NRTPROF_SERVICE_USER", "root", 1);
  ASSERT_TRUE(TrustPolicyFromEnv().ok());
  EXPECT_EQ(TrustPolicyFromEnv()->service, 0u);
  setenv("NRTPROF_SERVICE_USER", "no-such-user-here", 1);
  EXPECT_EQ(TrustPolicyFromEnv().status().message(),
            "NRTPROF_SERVICE_USER='no-such-user-here': no such user 'no-such-user-here'");
  setenv("NRTPROF_SERVICE_USER", "", 1);
  EXPECT_FALSE(TrustPolicyFromEnv()->service.has_value());
  unsetenv("NRTPROF_SERVICE_USER");
}

// The rest makes folders and listeners of other users: root only.
class SocketTrustAsRootTest : public SocketTrustTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root, to act as other users";
    SocketTrustTest::SetUp();
    // As a user who is neither root nor nobody: root is always trusted.
    policy_.self = 4242;
  }
};

TEST_F(SocketTrustAsRootTest, FolderOfAnotherUserIsRefusedUnlessTheService) {
  const std::string folder = Folder("squatted", 0700);
  ASSERT_EQ(chown(folder.c_str(), kNobody, kNobody), 0);
  const absl::Status s = CheckFolder(folder, "socket folder", policy_);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(s.message(), "socket folder " + folder + " belongs to uid 65534"))
      << s;
  policy_.service = kNobody;
  EXPECT_TRUE(CheckFolder(folder, "socket folder", policy_).ok());
}

TEST_F(SocketTrustAsRootTest, StickyFolderOfRootOrTheServiceIsShared) {
  const std::string folder = Folder("shared", 01777);  // root's, like /tmp
  EXPECT_TRUE(CheckFolder(folder, "spool folder", policy_).ok());
  ASSERT_EQ(chown(folder.c_str(), kNobody, kNobody), 0);
  EXPECT_EQ(CheckFolder(folder, "spool folder", policy_).code(),
            absl::StatusCode::kPermissionDenied);
  policy_.service = kNobody;
  EXPECT_TRUE(CheckFolder(folder, "spool folder", policy_).ok());
}

TEST_F(SocketTrustAsRootTest, DaemonOfAnotherUserIsRefusedUnlessTheService) {
  // root's sticky folder, where nobody can make a socket and alice could not replace it.
  const std::string socket = Folder("shared", 01777) + "/nrtprofd.sock";
  Listen(socket, kNobody);
  const absl::Status s = CheckDaemonSocket(socket, policy_);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "the daemon on " + socket + " runs as uid 65534"))
      << s;
  policy_.service = kNobody;
  EXPECT_TRUE(CheckDaemonSocket(socket, policy_).ok()) << CheckDaemonSocket(socket, policy_);
}

}  // namespace
}  // namespace nrtprof
