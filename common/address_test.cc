#include "common/address.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace nrtprof {
namespace {

TEST(Address, DefaultIsAPerUserSocket) {
  unsetenv("NRTPROF_ADDR");
  unsetenv("XDG_RUNTIME_DIR");
  const std::string path = DefaultSocketPath();
  EXPECT_EQ(path, "/tmp/nrtprof-" + std::to_string(getuid()) + "/nrtprofd.sock");
  EXPECT_EQ(DaemonAddress(), "unix:" + path);
}

// A fresh folder of the test's with `mode`.
std::string Folder(const std::string& name, mode_t mode) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  mkdir(dir.c_str(), 0700);
  chmod(dir.c_str(), mode);
  return dir;
}

TEST(Address, DefaultIsInAPrivateRuntimeFolder) {
  const std::string runtime = Folder("xdg-private", 0700);
  setenv("XDG_RUNTIME_DIR", (runtime + "/").c_str(), 1);
  EXPECT_EQ(DefaultRuntimeDir(), runtime + "/nrtprof");
  EXPECT_EQ(DefaultSocketPath(), runtime + "/nrtprof/nrtprofd.sock");
  // Another user's socket is never in this user's runtime folder.
  EXPECT_EQ(DefaultSocketPath(getuid() + 1),
            "/tmp/nrtprof-" + std::to_string(getuid() + 1) + "/nrtprofd.sock");
  unsetenv("XDG_RUNTIME_DIR");
}

TEST(Address, RuntimeFolderNotPrivateIsIgnored) {
  const std::string fallback = "/tmp/nrtprof-" + std::to_string(getuid());
  for (const std::string& xdg :
       {Folder("xdg-shared", 0770), Folder("xdg-open", 0777), std::string("relative/run"),
        std::string("/no/such/runtime/folder")}) {
    setenv("XDG_RUNTIME_DIR", xdg.c_str(), 1);
    EXPECT_EQ(DefaultRuntimeDir(), fallback) << xdg;
  }
  const std::string link = Folder("xdg-link-target", 0700) + "-link";
  ASSERT_EQ(symlink((link.substr(0, link.size() - 5)).c_str(), link.c_str()), 0) << link;
  setenv("XDG_RUNTIME_DIR", link.c_str(), 1);
  EXPECT_EQ(DefaultRuntimeDir(), fallback);
  unsetenv("XDG_RUNTIME_DIR");
}

TEST(Address, EnvironmentOverrides) {
  setenv("NRTPROF_ADDR", "/run/x.sock", 1);
  EXPECT_EQ(DaemonAddress(), "unix:/run/x.sock");
  setenv("NRTPROF_ADDR", "unix:/run/y.sock", 1);
  EXPECT_EQ(DaemonAddress(), "unix:/run/y.sock");
  setenv("NRTPROF_ADDR", "", 1);
  EXPECT_EQ(DaemonAddress(), "unix:" + DefaultSocketPath());
  unsetenv("NRTPROF_ADDR");
}

TEST(Address, SocketPaths) {
  EXPECT_EQ(SocketPathOf("unix:/a/b"), "/a/b");
  EXPECT_EQ(SocketPathOf("unix:///a/b"), "/a/b");
  EXPECT_EQ(SocketPathOf("/a/b"), "/a/b");
  EXPECT_EQ(SocketPathOf("localhost:7000"), "");
  EXPECT_EQ(ToGrpcTarget("localhost:7000"), "localhost:7000");
}

TEST(Address, Kinds) {
  EXPECT_EQ(KindOf("unix:/a/b"), AddressKind::kUnix);
  EXPECT_EQ(KindOf("/a/b"), AddressKind::kUnix);
  EXPECT_EQ(KindOf("127.0.0.1:7000"), AddressKind::kTcp);
  EXPECT_EQ(KindOf("localhost:7000"), AddressKind::kTcp);
  EXPECT_EQ(KindOf("dns:///collector.example:443"), AddressKind::kTcp);
  EXPECT_EQ(KindOf("ipv6:[::1]:7000"), AddressKind::kTcp);
  EXPECT_EQ(KindOf("[::1]:7000"), AddressKind::kTcp);
  EXPECT_EQ(KindOf("localhost"), AddressKind::kInvalid);
  EXPECT_EQ(KindOf("localhost:0"), AddressKind::kInvalid);  // nothing to dial
  EXPECT_EQ(KindOf("localhost:70000"), AddressKind::kInvalid);
  EXPECT_EQ(KindOf("::1:7000"), AddressKind::kInvalid);
  EXPECT_EQ(KindOf("nrtprofd.sock"), AddressKind::kInvalid);
  EXPECT_EQ(KindOf(""), AddressKind::kInvalid);
}

TEST(Address, HostAndPort) {
  std::string host;
  int port = -1;
  ASSERT_TRUE(SplitHostPort("127.0.0.1:0", &host, &port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 0);
  ASSERT_TRUE(SplitHostPort("[::1]:9", &host, &port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 9);
  EXPECT_FALSE(SplitHostPort(":80", &host, &port));
  EXPECT_FALSE(SplitHostPort("host:", &host, &port));
  EXPECT_FALSE(SplitHostPort("host:-1", &host, &port));
  EXPECT_FALSE(SplitHostPort("host:x1", &host, &port));
}

}  // namespace
}  // namespace nrtprof
