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

// The core's thread-locals are read with the initial-exec model: each through a GOT entry that
// the loader fills with the variable's offset (R_X86_64_TPOFF64, symbol value + addend). Two
// entries with one offset are two variables at one address: seen with a thread-local of an
// anonymous namespace, whose relocation named a null symbol, offset 0, t_state's, so that the
// thread-exit destructor's flag overwrote the thread's state.
TEST(ShimExports, EachThreadLocalHasAnOffsetOfItsOwn) {
  testing::SpawnOptions options;
  const char* tmp = getenv("TEST_TMPDIR");
  const testing::ProcessResult readelf = testing::RunToExit(
      {"/usr/bin/readelf", "-rW", "shim/libnrtprof_shim.so"}, options,
      tmp != nullptr ? tmp : "/tmp");
  ASSERT_EQ(readelf.exit_code, 0) << readelf.err;
  std::set<unsigned long long> offsets;
  size_t entries = 0;
  std::istringstream lines(readelf.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string where, info, type, value, name, plus, addend;
    if (!(fields >> where >> info >> type) || type != "R_X86_64_TPOFF64") continue;
    fields >> value >> name >> plus >> addend;
    ++entries;
    const unsigned long long offset =
        std::strtoull(value.c_str(), nullptr, 16) + std::strtoull(addend.c_str(), nullptr, 16);
    EXPECT_TRUE(offsets.insert(offset).second) << "a second variable at offset " << offset << ": "
                                               << line;
  }
  EXPECT_GE(entries, 4u) << "t_state, t_hot, t_in_call, t_polls at least\n" << readelf.out;
}

}  // namespace
}  // namespace nrtprof::shim
