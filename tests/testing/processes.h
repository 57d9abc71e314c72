// Processes the fault and load tests run beside the one under test: a program in the
// background (its output in files) and a standing nrtprofd on a socket of the test's own, which
// the test may kill, stop, restart or limit.
//
// Not thread-safe; each object belongs to the test that made it. Destructors kill what is
// still running.
#ifndef NRTPROF_TESTS_TESTING_PROCESSES_H_
#define NRTPROF_TESTS_TESTING_PROCESSES_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nrtprof::testing {

// argv[0] (a path) started now with the current environment plus `env` (an empty value
// unsets), stdout and stderr in files under `dir`.
class Background {
 public:
  // `own_group`: the child leads a process group of its own, as a shell's foreground job does
  // (SignalGroup then signals it and all it started, as the terminal's Ctrl-C would).
  Background(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             const std::string& dir, bool own_group = false);
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  pid_t pid() const { return pid_; }
  // kill(-pid, sig): the whole process group (own_group only).
  void SignalGroup(int sig);
  // Waits for the exit; the exit code (128 + signal if a signal ended it).
  int Wait();
  bool Running();
  std::string out() const;
  std::string err() const;

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
};

// nrtprofd with --socket in a fresh /tmp folder (socket paths are limited to 107 bytes) and
// --output_root under the test's own folder.
class Daemon {
 public:
  explicit Daemon(const std::string& name);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Starts nrtprofd with `flags` besides the socket, root and readiness ones (a flag given
  // again here wins), under a file size limit if `fsize_limit` > 0, with the environment
  // changed by `env` (an empty value unsets), and waits until it listens; false if it did not.
  bool Start(const std::vector<std::string>& flags = {}, uint64_t fsize_limit = 0,
             const std::map<std::string, std::string>& env = {});
  // Sends `sig` and waits for the exit: the exit code (128 + signal if one ended it).
  int Stop(int sig);
  void Signal(int sig);

  pid_t pid() const { return pid_; }
  std::string addr() const { return "unix:" + socket_; }
  // Where it listens on TCP (--listen), as its ready line said: "127.0.0.1:PORT"; else empty.
  std::string tcp_addr() const { return tcp_addr_; }
  std::string dir() const { return dir_; }
  // Its spool folder: spool/ beside the socket (the daemon's default).
  std::string spool_dir() const { return socket_dir_ + "/spool"; }
  // What it wrote on stderr, all its starts together.
  std::string log() const;
  // `nrtprof status`'s figure on the line that starts with `label`, or -1 (a test failure).
  // `cli_flags`: how the CLI reaches the daemon; none: --addr addr().
  int64_t StatusFigure(const std::string& label, const std::vector<std::string>& cli_flags = {});

 private:
  std::string dir_, socket_dir_, socket_, tcp_addr_;
  pid_t pid_ = -1;
  int starts_ = 0;
};

// The calls of each row of a capture's summary.csv (its last column), by the row's name.
std::map<std::string, int64_t> CallsByName(const std::string& capture_dir);

// VmRSS or VmHWM (`field`, with its colon) of a process, in KiB; -1 if unreadable.
int64_t ProcessMemoryKib(pid_t pid, const std::string& field);

}  // namespace nrtprof::testing

#endif  // NRTPROF_TESTS_TESTING_PROCESSES_H_
