#include "shim/testing/subprocess.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace nrtprof::shim::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

std::string TempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
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
  static int counter = 0;
  const std::string dir = TempDir("processes");
  const std::string out_path = dir + "/" + std::to_string(getpid()) + "." +
                               std::to_string(++counter) + ".out";
  const std::string err_path = out_path + ".err";

  nrtprof::testing::SpawnOptions options;
  options.env = env;
  options.stdin_null = true;
  options.stdout_path = out_path;
  options.stderr_path = err_path;
  ProcessResult result;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = nrtprof::testing::Spawn(argv, options);
  if (pid < 0) {
    result.err = std::string("fork: ") + strerror(errno);
    return result;
  }
  result.pid = pid;
  // glibc 2.36 declares pidfd_open without C linkage for C++: the system call itself.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  struct pollfd p = {pidfd, POLLIN, 0};
  if (pidfd < 0 || poll(&p, 1, static_cast<int>(timeout.count())) != 1) {
    result.timed_out = true;
    kill(pid, SIGKILL);
  }
  if (pidfd >= 0) close(pidfd);
  int status = 0;
  waitpid(pid, &status, 0);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  result.out = ReadAll(out_path);
  result.err = ReadAll(err_path);
  return result;
}

}  // namespace nrtprof::shim::testing
