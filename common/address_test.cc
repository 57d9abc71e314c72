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

}  // namespace
}  // namespace nrtprof
