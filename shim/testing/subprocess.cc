#include "shim/testing/subprocess.h"

#include <sys/stat.h>
#include <unistd.h>

namespace nrtprof::shim::testing {

std::string TempDir(const std::string& name) {
  std::string dir = nrtprof::testing::ScratchRoot() + "/" + name;
  mkdir(dir.c_str(), 0700);
  return dir;
}

std::string Runfile(const std::string& path) {
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  return std::string(cwd) + "/" + path;
}

ProcessResult RunProcess(const std::vector<std::string>& argv, const EnvChanges& env,
                         std::chrono::milliseconds timeout) {
  nrtprof::testing::SpawnOptions options;
  options.env = env;
  options.stdin_null = true;
  return nrtprof::testing::RunToExit(argv, options, TempDir("processes"), timeout);
}

}  // namespace nrtprof::shim::testing
