// Running the project's binaries from end-to-end tests: a command with extra environment,
// its stdout, stderr and exit code. Output goes through files in TEST_TMPDIR, so a chatty
// program can never block on a full pipe.
#ifndef NRTPROF_TESTS_TESTING_SUBPROCESS_H_
#define NRTPROF_TESTS_TESTING_SUBPROCESS_H_

#include <map>
#include <string>
#include <vector>

#include "common/testing/spawn.h"  // ReadFile

namespace nrtprof::testing {

struct Result {
  int exit_code = -1;  // 128 + signal if killed by one
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with the current environment plus `env` (an empty value unsets).
Result RunProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});

// The environment for a program under test: the simulated device answers at once, and no
// daemon of the machine's nor an outer shim can interfere.
extern const std::map<std::string, std::string> kIsolatedEnv;

// `nrtprof run FLAGS --out OUT -- COMMAND` with the current environment plus `env`.
Result RunProfiled(const std::string& out, const std::vector<std::string>& command,
                   const std::vector<std::string>& flags = {},
                   const std::map<std::string, std::string>& env = kIsolatedEnv);

// `nrtprof ARGS...` with the current environment plus `env`.
Result RunNrtprof(const std::vector<std::string>& args,
                  const std::map<std::string, std::string>& env = kIsolatedEnv);

// A file of the test's runfiles: "client/nrtprof" -> $TEST_SRCDIR/nrtprof/client/nrtprof.
std::string Runfile(const std::string& workspace_path);

// A fresh folder under TEST_TMPDIR (ScratchRoot(), common/testing/spawn.h).
std::string TempDir(const std::string& name);

bool Exists(const std::string& path);

// The simulator's model "add4" (out = a + b, each fp32[4]) as a model file, compiled once per
// test process by sim/nrt_model_compile, which the test must have among its data; its path.
std::string AddModel();

}  // namespace nrtprof::testing

#endif  // NRTPROF_TESTS_TESTING_SUBPROCESS_H_
