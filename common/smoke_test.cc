#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include <grpcpp/grpcpp.h>
#include <libunwind.h>
TEST(Smoke, Links) { absl::Mutex mu; mu.Lock(); mu.Unlock(); EXPECT_EQ(absl::StrCat("a", 1), "a1"); auto ch = grpc::CreateChannel("unix:/tmp/none", grpc::InsecureChannelCredentials()); EXPECT_TRUE(ch != nullptr); unw_context_t c; unw_getcontext(&c);}
