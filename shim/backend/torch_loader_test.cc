// ReadNeededLibraries on the backend's own library (its DT_NEEDED, as readelf shows them) and
// on files that are not shared objects.
#include "shim/backend/torch_loader.h"

#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace nrtprof::shim {
namespace {

std::string Runfile(const std::string& path) {
  return std::string(getenv("TEST_SRCDIR")) + "/nrtprof/" + path;
}

TEST(ReadNeededLibraries, ListsTheDependenciesOfASharedObject) {
  std::vector<std::string> needed;
  ASSERT_TRUE(ReadNeededLibraries(Runfile("shim/libnrtprof_shim_backend.so"), &needed));
  EXPECT_NE(std::find(needed.begin(), needed.end(), "libc.so.6"), needed.end());
  EXPECT_NE(std::find_if(needed.begin(), needed.end(),
                         [](const std::string& n) { return n.rfind("libgrpc++.so", 0) == 0; }),
            needed.end());
}

TEST(ReadNeededLibraries, RefusesWhatIsNotAnElfSharedObject) {
  std::vector<std::string> needed;
  EXPECT_FALSE(ReadNeededLibraries("/nonexistent/libnrtprof_torch.so", &needed));
  const std::string text = std::string(getenv("TEST_TMPDIR")) + "/not_elf.so";
  std::ofstream(text) << "#!/bin/sh\n";
  EXPECT_FALSE(ReadNeededLibraries(text, &needed));
  // An ELF header whose section table lies past the end of the file.
  std::string elf(64, '\0');
  elf.replace(0, 5, "\x7f" "ELF\x02");
  elf[58] = 64;     // e_shentsize
  elf[40] = 0x7f;   // e_shoff, far away
  elf[60] = 3;      // e_shnum
  const std::string truncated = std::string(getenv("TEST_TMPDIR")) + "/truncated.so";
  std::ofstream(truncated, std::ios::binary) << elf;
  EXPECT_FALSE(ReadNeededLibraries(truncated, &needed));
}

}  // namespace
}  // namespace nrtprof::shim
