#include "common/address.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace nrtprof {
namespace {

TEST(Address, DefaultIsAPerUserSocket) {
  unsetenv("NRTPROF_ADDR");
  const std::string path = DefaultSocketPath();
  EXPECT_EQ(path, "/tmp/nrtprof-" + std::to_string(getuid()) + "/nrtprofd.sock");
  EXPECT_EQ(DaemonAddress(), "unix:" + path);
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
