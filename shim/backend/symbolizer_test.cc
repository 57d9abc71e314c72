#include "shim/backend/symbolizer.h"

#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nrtprof::shim {

// Not exported (the test binary has no dynamic symbol for it): found through the ELF
// symbol table.
__attribute__((noinline)) std::vector<uintptr_t> CaptureHere(int depth) {
  std::vector<void*> frames(static_cast<size_t>(depth));
  const int n = unw_backtrace(frames.data(), depth);
  std::vector<uintptr_t> out;
  for (int i = 0; i < n; ++i) out.push_back(reinterpret_cast<uintptr_t>(frames[i]));
  asm volatile("" ::: "memory");  // keep the call a call
  return out;
}

namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

TEST(SymbolizerTest, DemanglesCxxNamesAndLeavesOthers) {
  EXPECT_EQ(Demangle("_ZN7nrtprof4shim8DemangleEPKc"), "nrtprof::shim::Demangle(char const*)");
  EXPECT_EQ(Demangle("getpid"), "getpid");
  EXPECT_EQ(Demangle("_Znot_valid"), "_Znot_valid");
  EXPECT_EQ(Demangle(nullptr), "");
}

TEST(SymbolizerTest, AnExportedFunctionIsNamedWithItsModuleAndOffset) {
  // An address inside libc's getpid, as a return address into it would be.
  const uintptr_t in_getpid = reinterpret_cast<uintptr_t>(&getpid) + 2;
  EXPECT_THAT(SymbolizeReturnAddress(in_getpid),
              MatchesRegex("(__)?getpid \\(libc\\.so\\.6\\+0x[0-9a-f]+\\)"));
}

TEST(SymbolizerTest, AStackOfTheTestItselfNamesItsFunctions) {
  const std::vector<uintptr_t> frames = CaptureHere(4);
  ASSERT_GE(frames.size(), 2u);
  // frames[0] is inside CaptureHere (the unwinder starts at its caller), frames[1] in this test.
  EXPECT_THAT(SymbolizeReturnAddress(frames[0]),
              StartsWith("nrtprof::shim::CaptureHere(int) (symbolizer_test+0x"));
  EXPECT_THAT(SymbolizeReturnAddress(frames[1]),
              AllOf(HasSubstr("SymbolizerTest_AStackOfTheTestItselfNamesItsFunctions_Test"),
                    HasSubstr("(symbolizer_test+0x")));
}

TEST(SymbolizerTest, AnAddressOutsideAnyModuleStillSaysSomething) {
  EXPECT_EQ(SymbolizeReturnAddress(0x11), "?? (?+0x10)");
}

}  // namespace
}  // namespace nrtprof::shim
