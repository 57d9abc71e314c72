// Runs a program the way a user would, for the shim's integration tests: a changed
// environment, stdout and stderr captured, a time bound (the process is killed past it).
// Test-only.
#ifndef NRTPROF_SHIM_TESTING_SUBPROCESS_H_
#define NRTPROF_SHIM_TESTING_SUBPROCESS_H_

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/testing/spawn.h"

namespace nrtprof::shim::testing {

using ProcessResult = ::nrtprof::testing::ProcessResult;

// Variables mapped to nullopt are removed from the environment.
using EnvChanges = ::nrtprof::testing::EnvChanges;

ProcessResult RunProcess(const std::vector<std::string>& argv, const EnvChanges& env,
                         std::chrono::milliseconds timeout);

// An absolute path for a runfile given relative to the workspace (e.g. "shim/x").
std::string Runfile(const std::string& path);
// A folder under TEST_TMPDIR (ScratchRoot(), common/testing/spawn.h), made if it is not there.
std::string TempDir(const std::string& name);

}  // namespace nrtprof::shim::testing

#endif  // NRTPROF_SHIM_TESTING_SUBPROCESS_H_
