// What libnrtprof_shim.so offers a program that links libnrt: every libnrt function the shim
// interposes (common/api_functions.h) must be in its dynamic symbol table, or the program's
// calls go straight to libnrt unseen. The version script (libnrtprof_shim.lds) lists them by
// hand, so a function added to the one list but not to the script is caught here.
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include "common/testing/spawn.h"
#include "gtest/gtest.h"
#include "shim/preload/record.h"

namespace nrtprof::shim {
namespace {

TEST(ShimExports, EveryInterposedFunctionIsExported) {
  testing::SpawnOptions options;
  const char* tmp = getenv("TEST_TMPDIR");
  const testing::ProcessResult nm = testing::RunToExit(
      {"/usr/bin/nm", "-D", "--defined-only", "shim/libnrtprof_shim.so"}, options,
      tmp != nullptr ? tmp : "/tmp");
  ASSERT_EQ(nm.exit_code, 0) << nm.err;
  std::set<std::string> exported;
  std::istringstream lines(nm.out);
  for (std::string address, type, name; lines >> address >> type >> name;) {
    if (type == "T") exported.insert(name.substr(0, name.find('@')));
  }
  for (unsigned f = 0; f < kNumApiFunctions; ++f) {
    EXPECT_EQ(exported.count(ApiFunctionName(f)), 1u) << ApiFunctionName(f) << " is not exported";
  }
}

}  // namespace
}  // namespace nrtprof::shim
