#include "tests/testing/processes.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/testing/spawn.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace nrtprof::testing {

Background::Background(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env, const std::string& dir,
                       bool own_group)
    : out_path_(dir + "/out"), err_path_(dir + "/err") {
  SpawnOptions options;
  options.env = EmptyUnsets(env);
  options.stdout_path = out_path_;
  options.stderr_path = err_path_;
  options.own_group = own_group;
  pid_ = Spawn(argv, options);
}

Background::~Background() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    Wait();
  }
}

void Background::SignalGroup(int sig) {
  if (pid_ > 0) kill(-pid_, sig);
}

int Background::Wait() {
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return ExitCode(status);
}

bool Background::Running() {
  int status = 0;
  return pid_ > 0 && waitpid(pid_, &status, WNOHANG) == 0;
}

std::string Background::out() const { return ReadFile(out_path_); }
std::string Background::err() const { return ReadFile(err_path_); }

Daemon::Daemon(const std::string& name) : dir_(TempDir(name)) {
  char socket_dir[] = "/tmp/nrtprof-test-XXXXXX";
  EXPECT_NE(mkdtemp(socket_dir), nullptr);
  socket_dir_ = socket_dir;
  socket_ = socket_dir_ + "/nrtprofd.sock";
}

Daemon::~Daemon() {
  Stop(SIGKILL);
  unlink(socket_.c_str());
  RunProcess({"/bin/rm", "-rf", socket_dir_});
}

bool Daemon::Start(const std::vector<std::string>& flags, uint64_t fsize_limit,
                   const std::map<std::string, std::string>& env) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return false;
  const std::string log = dir_ + "/nrtprofd." + std::to_string(++starts_) + ".log";
  std::vector<std::string> argv = {Runfile("daemon/nrtprofd"), "--socket=" + socket_,
                                   "--ready_fd=" + std::to_string(ready[1]),
                                   "--output_root=" + dir_ + "/captures"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  SpawnOptions options;
  options.stderr_path = log;
  options.inherit_fd = ready[1];
  options.fsize_limit = fsize_limit;
  options.env = EmptyUnsets(env);
  pid_ = Spawn(argv, options);
  close(ready[1]);
  pollfd pfd{ready[0], POLLIN, 0};
  char buf[128] = {};
  const bool ok =
      pid_ > 0 && poll(&pfd, 1, 20000) == 1 && read(ready[0], buf, sizeof(buf) - 1) > 0;
  close(ready[0]);
  // "ready\n", or "ready HOST:PORT\n" with --listen.
  absl::string_view line = absl::StripTrailingAsciiWhitespace(buf);
  tcp_addr_ = absl::ConsumePrefix(&line, "ready ") ? std::string(line) : "";
  return ok;
}

int Daemon::Stop(int sig) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return ExitCode(status);
}

void Daemon::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

std::string Daemon::log() const {
  std::string all;
  for (int i = 1; i <= starts_; ++i) all += ReadFile(dir_ + "/nrtprofd." + std::to_string(i) + ".log");
  return all;
}

int64_t Daemon::StatusFigure(const std::string& label, const std::vector<std::string>& cli_flags) {
  std::vector<std::string> argv = {Runfile("client/nrtprof"), "status"};
  if (cli_flags.empty()) {
    argv.insert(argv.end(), {"--addr", addr()});
  } else {
    argv.insert(argv.end(), cli_flags.begin(), cli_flags.end());
  }
  const Result r = RunProcess(argv, {{"NRTPROF_ADDR", ""}, {"LD_PRELOAD", ""}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, label)) continue;
    line = absl::StripLeadingAsciiWhitespace(line);
    const std::vector<std::string> words = absl::StrSplit(line, ' ');
    int64_t n = -1;
    if (!words.empty() && absl::SimpleAtoi(words[0], &n)) return n;
  }
  ADD_FAILURE() << "no '" << label << "' in:\n" << r.out;
  return -1;
}

std::map<std::string, int64_t> CallsByName(const std::string& capture_dir) {
  std::map<std::string, int64_t> calls;
  for (absl::string_view line : absl::StrSplit(ReadFile(capture_dir + "/summary.csv"), '\n')) {
    std::vector<std::string> cells = absl::StrSplit(line, ',');
    int64_t n = 0;
    if (cells.size() > 2 && absl::SimpleAtoi(cells.back(), &n)) calls[cells[0]] = n;
  }
  return calls;
}

int64_t ProcessMemoryKib(pid_t pid, const std::string& field) {
  const std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, field)) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    int64_t kib = -1;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) return kib;
  }
  return -1;
}

}  // namespace nrtprof::testing
