#include "common/testing/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace nrtprof::testing {
namespace {

// In the child: `fd` as `target` (the two equal: only FD_CLOEXEC cleared).
void Redirect(int fd, int target) {
  if (fd < 0) return;
  if (fd == target) {
    fcntl(fd, F_SETFD, 0);
  } else {
    dup2(fd, target);
  }
}

}  // namespace

EnvChanges EmptyUnsets(const std::map<std::string, std::string>& env) {
  EnvChanges changes;
  for (const auto& [name, value] : env) {
    changes[name] = value.empty() ? std::nullopt : std::optional<std::string>(value);
  }
  return changes;
}

pid_t Spawn(const std::vector<std::string>& argv, const SpawnOptions& options) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = strchr(*e, '=');
    if (eq != nullptr) vars[std::string(*e, eq - *e)] = eq + 1;
  }
  for (const auto& [name, value] : options.env) {
    if (value.has_value()) {
      vars[name] = *value;
    } else {
      vars.erase(name);
    }
  }
  std::vector<std::string> env_strings;
  for (const auto& [name, value] : vars) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp, args;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  const rlimit fsize{static_cast<rlim_t>(options.fsize_limit),
                     static_cast<rlim_t>(options.fsize_limit)};
  constexpr int kFileFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;

  const pid_t pid = fork();
  if (pid != 0) {
    // Also here, whichever of the two runs first: the group exists once Spawn returns.
    if (pid > 0 && options.own_group) setpgid(pid, pid);
    return pid;
  }
  if (options.own_group) setpgid(0, 0);
  if (options.stdin_null) Redirect(open("/dev/null", O_RDONLY | O_CLOEXEC), STDIN_FILENO);
  if (!options.stdout_path.empty()) {
    Redirect(open(options.stdout_path.c_str(), kFileFlags, 0644), STDOUT_FILENO);
  }
  if (!options.stderr_path.empty()) {
    Redirect(open(options.stderr_path.c_str(), kFileFlags, 0644), STDERR_FILENO);
  } else {
    Redirect(options.stderr_fd, STDERR_FILENO);
  }
  Redirect(options.inherit_fd, options.inherit_fd);
  if (options.fsize_limit > 0) setrlimit(RLIMIT_FSIZE, &fsize);
  execve(args[0], args.data(), envp.data());
  _exit(127);
}

int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

ProcessResult RunToExit(const std::vector<std::string>& argv, SpawnOptions options,
                        const std::string& scratch_dir, std::chrono::milliseconds timeout) {
  static std::atomic<int> counter{0};
  const std::string base = scratch_dir + "/" + std::to_string(getpid()) + "." +
                           std::to_string(counter++);
  options.stdout_path = base + ".out";
  options.stderr_path = base + ".err";
  ProcessResult result;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = Spawn(argv, options);
  if (pid < 0) {
    result.err = std::string("fork: ") + strerror(errno);
    return result;
  }
  result.pid = pid;
  if (timeout.count() > 0) {
    // glibc 2.36 declares pidfd_open without C linkage for C++: the system call itself.
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    struct pollfd p = {pidfd, POLLIN, 0};
    if (pidfd < 0 || poll(&p, 1, static_cast<int>(timeout.count())) != 1) {
      result.timed_out = true;
      kill(pid, SIGKILL);
    }
    if (pidfd >= 0) close(pidfd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exit_code = ExitCode(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  result.out = ReadFile(options.stdout_path);
  result.err = ReadFile(options.stderr_path);
  return result;
}

std::string ScratchRoot() {
  const char* bazel = getenv("TEST_TMPDIR");
  if (bazel != nullptr && bazel[0] != '\0') return bazel;
  static const std::string* const root = [] {
    const char* tmp = getenv("TMPDIR");
    std::string templ =
        std::string(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp") + "/nrtprof-test-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      fprintf(stderr, "cannot make %s: %s\n", templ.c_str(), strerror(errno));
      abort();
    }
    static const pid_t maker = getpid();
    static const std::string* const made = new std::string(templ);
    // Only the process that made it removes it: a forked child's exit() must not.
    atexit([] {
      if (getpid() == maker) RemoveTree(*made);
    });
    return made;
  }();
  return *root;
}

void RemoveTree(const std::string& path) {
  nftw(
      path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return remove(p); },
      16, FTW_DEPTH | FTW_PHYS);
}

SocketFolder::SocketFolder(const std::string& prefix) {
  // "/PREFIX-XXXXXX/" and a socket's name (up to 24 bytes, "sock/nrtprofd.sock" and the like)
  // must fit in the 107 bytes of a unix socket path.
  std::string root = ScratchRoot();
  if (root.size() + prefix.size() + 9 + 24 > 107) root = "/tmp";
  std::string templ = root + "/" + prefix + "-XXXXXX";
  if (mkdtemp(templ.data()) != nullptr) path_ = templ;
}

SocketFolder::~SocketFolder() {
  if (!path_.empty()) RemoveTree(path_);
}

}  // namespace nrtprof::testing
