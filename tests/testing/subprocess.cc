#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>

namespace nrtprof::testing {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

const std::map<std::string, std::string> kIsolatedEnv = {
    {"NRT_SIM_TIME_SCALE", "0"}, {"NRTPROF_ADDR", ""}, {"LD_PRELOAD", ""}};

Result RunProfiled(const std::string& out, const std::vector<std::string>& command,
                   const std::vector<std::string>& flags,
                   const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {Runfile("client/nrtprof"), "run"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"--out", out, "--"});
  argv.insert(argv.end(), command.begin(), command.end());
  return RunProcess(argv, env);
}

std::string Runfile(const std::string& workspace_path) {
  const char* root = getenv("TEST_SRCDIR");
  return std::string(root != nullptr ? root : ".") + "/nrtprof/" + workspace_path;
}

std::string TempDir(const std::string& name) {
  static std::atomic<int> counter{0};
  const char* root = getenv("TEST_TMPDIR");
  const std::string dir = std::string(root != nullptr ? root : "/tmp") + "/" + name + "." +
                          std::to_string(counter++);
  mkdir(dir.c_str(), 0755);
  return dir;
}

Result RunProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  const std::string dir = TempDir("run");
  const std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  Result result;
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [key, value] : env) {
      if (value.empty()) {
        unsetenv(key.c_str());
      } else {
        setenv(key.c_str(), value.c_str(), 1);
      }
    }
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

}  // namespace nrtprof::testing
