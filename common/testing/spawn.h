// Starting a program as a child, for the tests' process helpers (shim/testing/subprocess.h,
// tests/testing/subprocess.h and processes.h, daemon/testing/nrtprofd_harness.h): the one place
// that forks and execs for a test, whatever the child's output goes to and however long it
// lives.
//
// Test-only. Spawn() may be called from any thread: everything the child needs (its
// environment, arguments, paths) is made before the fork, so the child makes system calls only.
#ifndef NRTPROF_COMMON_TESTING_SPAWN_H_
#define NRTPROF_COMMON_TESTING_SPAWN_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nrtprof::testing {

// Changes to this process's environment for a child: a variable mapped to nullopt is removed.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

// `env` with each empty value meaning "remove the variable", as the end-to-end tests write it.
EnvChanges EmptyUnsets(const std::map<std::string, std::string>& env);

struct SpawnOptions {
  EnvChanges env;
  // stdin from /dev/null instead of ours.
  bool stdin_null = false;
  // The child's stdout and stderr: to a file (created, or truncated), else, for stderr, to
  // a descriptor of ours (stderr_fd >= 0), else ours.
  std::string stdout_path;
  std::string stderr_path;
  int stderr_fd = -1;
  // A descriptor of ours that the child keeps, at the same number, across exec.
  int inherit_fd = -1;
  // The child leads a process group of its own (so a signal can reach all it starts).
  bool own_group = false;
  // RLIMIT_FSIZE for the child, in bytes; 0 leaves it as ours.
  uint64_t fsize_limit = 0;
};

// Starts argv[0] (a path) with `argv` and this process's environment changed by options.env.
// A child that cannot be exec'd exits with 127. Returns its pid, or -1 if fork failed.
pid_t Spawn(const std::vector<std::string>& argv, const SpawnOptions& options);

// waitpid()'s status as a shell says it: the exit code, or 128 + the signal that ended it.
int ExitCode(int status);

// A program run to its end.
struct ProcessResult {
  pid_t pid = -1;       // -1: it could not be started (err says why)
  int exit_code = -1;   // as ExitCode() says it: 128 + the signal if one ended it
  int term_signal = 0;  // the signal that ended it, if one did
  bool timed_out = false;  // killed (SIGKILL) for outliving the timeout
  std::string out, err;
  double seconds = 0;   // from start to exit
};

// Runs argv to its exit with `options` (its stdout and stderr go to files in `scratch_dir`,
// which exists, so a chatty child never blocks on a pipe; their paths in options are
// overridden). A timeout above zero kills the child once it has run that long.
ProcessResult RunToExit(const std::vector<std::string>& argv, SpawnOptions options,
                        const std::string& scratch_dir,
                        std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

// A whole file, or "" if it cannot be read.
std::string ReadFile(const std::string& path);

// Where a test keeps its files: TEST_TMPDIR, which Bazel makes for the test and empties. Run
// outside Bazel, a folder made once under TMPDIR (else /tmp) and removed with everything in it
// when this process exits, so that a test leaves nothing in the system's temporary folder.
std::string ScratchRoot();

// `path` and everything under it, as rm -r does (a symbolic link is removed, not followed).
void RemoveTree(const std::string& path);

// A fresh folder for unix sockets, whose paths have at most 107 bytes: under ScratchRoot() when
// its path leaves room, else /tmp/PREFIX-XXXXXX (TEST_TMPDIR under Bazel's output base is often
// too deep). Removed with everything in it when the object goes; path() is empty if it could
// not be made.
class SocketFolder {
 public:
  explicit SocketFolder(const std::string& prefix);
  ~SocketFolder();
  SocketFolder(const SocketFolder&) = delete;
  SocketFolder& operator=(const SocketFolder&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace nrtprof::testing

#endif  // NRTPROF_COMMON_TESTING_SPAWN_H_
